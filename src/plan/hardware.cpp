#include "plan/hardware.h"

#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

namespace sluice::plan {
namespace {

const std::vector<Hardware>& devices() {
  static const std::vector<Hardware> kDevices = {
      {"a100-80gb", 2039, 312, 80, "NVIDIA A100 80GB SXM datasheet (bf16 dense)"},
      {"h100", 3350, 989, 80, "NVIDIA H100 SXM datasheet (bf16 dense)"},
      {"h200", 4800, 989, 141, "NVIDIA H200 SXM datasheet (bf16 dense)"},
      {"rtx4090", 1008, 330, 24, "RTX 4090 (fp16 tensor peak as the QLoRA streaming essay quotes it)"},
  };
  return kDevices;
}

const std::vector<Link>& links() {
  static const std::vector<Link> kLinks = {
      {"pcie3", 11}, {"pcie4", 24}, {"pcie5", 50}, {"nvlink", 450},
  };
  return kLinks;
}

const std::vector<Disk>& disks() {
  static const std::vector<Disk> kDisks = {
      {"nvme-gen3", 3.5}, {"nvme-gen4", 7}, {"nvme-gen5", 14},
  };
  return kDisks;
}

template <typename T>
std::string joined_names(const std::vector<T>& v) {
  std::string out;
  for (const T& x : v) out += (out.empty() ? "" : ", ") + x.name;
  return out;
}

template <typename T>
const T* named(const std::vector<T>& v, const std::string& name) {
  for (const T& x : v)
    if (x.name == name) return &x;
  return nullptr;
}

template <typename T>
std::vector<std::string> names_of(const std::vector<T>& v) {
  std::vector<std::string> out;
  for (const T& x : v) out.push_back(x.name);
  return out;
}

}  // namespace

StatusOr<Hardware> hardware_profile(const std::string& name) {
  if (const Hardware* h = named(devices(), name)) return *h;
  return not_found("unknown hardware '{}' (profiles: {}, or --calibrate for this machine)", name, joined_names(devices()));
}

std::vector<std::string> hardware_names() { return names_of(devices()); }

StatusOr<Link> link_profile(const std::string& name) {
  if (const Link* l = named(links(), name)) return *l;
  return not_found("unknown link '{}' (links: {})", name, joined_names(links()));
}

std::vector<std::string> link_names() { return names_of(links()); }

StatusOr<Disk> disk_profile(const std::string& spec) {
  std::string base = spec;
  int64_t count = 1;
  const size_t x = spec.find('x');
  if (x != std::string::npos && x > 0 && std::isdigit(static_cast<unsigned char>(spec[0]))) {
    char* end = nullptr;
    count = std::strtoll(spec.c_str(), &end, 10);
    if (end != spec.c_str() + x || count <= 0 || count > 64) return invalid_argument("bad disk count in '{}'", spec);
    base = spec.substr(x + 1);
    while (!base.empty() && base.front() == ' ') base.erase(base.begin());
  }
  if (const Disk* d = named(disks(), base)) {
    if (count == 1) return *d;
    return Disk{.name = fmt::format("{}x {}", count, d->name), .gbps = d->gbps * static_cast<double>(count)};
  }
  return not_found("unknown disk '{}' (disks: {}, optionally striped as 2x nvme-gen4)", spec, joined_names(disks()));
}

std::vector<std::string> disk_names() { return names_of(disks()); }

}  // namespace sluice::plan
