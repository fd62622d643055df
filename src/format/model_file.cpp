#include "format/model_file.h"

#include <fmt/format.h>

#include "arch/tensor_class.h"


namespace sluice {

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

const TensorInfo* ModelFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo* ModelFile::find(TensorRole role) const {
  const ArchSpec* arch = find_arch(metadata.get_string("general.architecture").value_or(""));
  for (const TensorInfo& t : tensors) {
    const TensorSpec* spec = find_tensor_spec(arch, t.name);
    if (spec != nullptr && !spec->per_layer && spec->role == role) return &t;
  }
  return nullptr;
}

const uint8_t* ModelFile::own(std::vector<uint8_t> bytes) {
  owned_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
  return owned_.back()->data();
}

uint64_t ModelFile::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.n_bytes;
  return n;
}

}  // namespace sluice
