#include "backend/cuda/cuda_kv_reserve.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

// The driver's virtual memory calls, through the runtime's entry points.
struct Vmm {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  bool ok() const { return granularity && reserve && address_free && create && release && map && unmap && set_access; }
};

const Vmm& vmm() {
  static const Vmm v = [] {
    Vmm x;
    auto get = [](const char* name, auto* fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
          q == cudaDriverEntryPointSuccess)
        *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(p);
    };
    get("cuMemGetAllocationGranularity", &x.granularity);
    get("cuMemAddressReserve", &x.reserve);
    get("cuMemAddressFree", &x.address_free);
    get("cuMemCreate", &x.create);
    get("cuMemRelease", &x.release);
    get("cuMemMap", &x.map);
    get("cuMemUnmap", &x.unmap);
    get("cuMemSetAccess", &x.set_access);
    return x;
  }();
  return v;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

size_t granule_round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

StatusOr<std::shared_ptr<KvReservation>> KvReservation::create(size_t block_bytes, int64_t n_layer, int64_t n_blocks) {
  const Vmm& d = vmm();
  if (!d.ok()) return unimplemented("the CUDA driver offers no virtual memory management (cuMemMap): the KV pool cannot grow");
  CHECK(block_bytes > 0 && n_layer > 0 && n_blocks > 0);
  std::shared_ptr<KvReservation> r(new KvReservation());
  SLUICE_CUDA_OK(cudaGetDevice(&r->device_));
  const CUmemAllocationProp prop = device_prop(r->device_);
  size_t g = 0;
  if (d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0)
    return unavailable("cuMemGetAllocationGranularity failed");
  r->block_bytes_ = block_bytes;
  r->granule_ = g;
  r->n_layer_ = n_layer;
  r->n_blocks_ = n_blocks;
  r->stride_ = granule_round_up(block_bytes * static_cast<size_t>(n_blocks), g);
  const size_t side = r->stride_ * static_cast<size_t>(n_layer);
  for (uint8_t** base : {&r->k_, &r->v_}) {
    CUdeviceptr p = 0;
    if (d.reserve(&p, side, g, 0, 0) != CUDA_SUCCESS)
      return resource_exhausted("cannot reserve {:.2f} GiB of device addresses for the KV pool",
                                static_cast<double>(side) / (1 << 30));
    *base = reinterpret_cast<uint8_t*>(p);
  }
  r->mapped_.resize(static_cast<size_t>(2 * n_layer));
  return r;
}

KvReservation::~KvReservation() {
  const Vmm& d = vmm();
  cudaDeviceSynchronize();
  for (size_t s = 0; s < mapped_.size(); ++s) {
    uint8_t* base = (s % 2 == 0 ? k_ : v_) + (s / 2) * stride_;
    for (size_t i = 0; i < mapped_[s].size(); ++i) {
      d.unmap(reinterpret_cast<CUdeviceptr>(base + i * granule_), granule_);
      d.release(static_cast<CUmemGenericAllocationHandle>(mapped_[s][i]));
    }
  }
  const size_t side = stride_ * static_cast<size_t>(n_layer_);
  if (k_) d.address_free(reinterpret_cast<CUdeviceptr>(k_), side);
  if (v_) d.address_free(reinterpret_cast<CUdeviceptr>(v_), side);
}

size_t KvReservation::granules_for(int64_t n_blocks) const {
  return granule_round_up(block_bytes_ * static_cast<size_t>(n_blocks), granule_) / granule_;
}

Status KvReservation::back(int64_t n_blocks) {
  CHECK(n_blocks >= 0 && n_blocks <= n_blocks_);
  const Vmm& d = vmm();
  const size_t want = granules_for(n_blocks);
  const CUmemAllocationProp prop = device_prop(device_);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (want < granules_for(n_backed_)) SLUICE_CUDA_OK(cudaDeviceSynchronize());  // nothing queued reads what goes
  n_backed_ = std::min(n_backed_, n_blocks);
  bool grew = false;
  for (size_t s = 0; s < mapped_.size(); ++s) {
    std::vector<unsigned long long>& m = mapped_[s];
    uint8_t* base = (s % 2 == 0 ? k_ : v_) + (s / 2) * stride_;
    while (m.size() > want) {
      const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(base + (m.size() - 1) * granule_);
      if (d.unmap(at, granule_) != CUDA_SUCCESS) return internal_error("cuMemUnmap of a KV granule failed");
      d.release(static_cast<CUmemGenericAllocationHandle>(m.back()));
      m.pop_back();
    }
    while (m.size() < want) {
      CUmemGenericAllocationHandle h = 0;
      if (d.create(&h, granule_, &prop, 0) != CUDA_SUCCESS)
        return resource_exhausted("the GPU has no {:.1f} MiB left to grow the KV pool",
                                  static_cast<double>(granule_) / (1 << 20));
      const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(base + m.size() * granule_);
      if (d.map(at, granule_, 0, h, 0) != CUDA_SUCCESS || d.set_access(at, granule_, &access, 1) != CUDA_SUCCESS) {
        d.release(h);
        return internal_error("cuMemMap of a KV granule failed");
      }
      SLUICE_CUDA_OK(cudaMemset(reinterpret_cast<void*>(at), 0, granule_));
      m.push_back(static_cast<unsigned long long>(h));
      grew = true;
    }
  }
  if (grew) SLUICE_CUDA_OK(cudaDeviceSynchronize());  // the zeros land before any kernel writes there
  n_backed_ = n_blocks;
  return Status();
}

}  // namespace sluice::cuda
