#include "backend/cuda/cuda_weight_ring.h"

#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

WeightRing::WeightRing(std::vector<size_t> group_bytes, int n_slots) : bytes_(std::move(group_bytes)) {
  CHECK(n_slots >= 2 && !bytes_.empty());
  offset_.resize(bytes_.size());
  for (size_t g = 0; g < bytes_.size(); ++g) {
    offset_[g] = host_bytes_;
    host_bytes_ += (bytes_[g] + 255) / 256 * 256;  // each group 256-byte aligned, as the resident arena
    slot_bytes_ = std::max(slot_bytes_, (bytes_[g] + 255) / 256 * 256);
  }
  SLUICE_CUDA_OK(cudaMallocHost(&host_, host_bytes_));
  SLUICE_CUDA_OK(cudaMalloc(&dev_, slot_bytes_ * static_cast<size_t>(n_slots)));
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  slot_group_.assign(static_cast<size_t>(n_slots), -1);
  group_slot_.assign(bytes_.size(), -1);
  slot_tick_.assign(static_cast<size_t>(n_slots), 0);
  pins_.assign(static_cast<size_t>(n_slots), 0);
  used_recorded_.assign(static_cast<size_t>(n_slots), 0);
  copied_.resize(static_cast<size_t>(n_slots));
  used_.resize(static_cast<size_t>(n_slots));
  for (int s = 0; s < n_slots; ++s) {
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_[static_cast<size_t>(s)], cudaEventDisableTiming));
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&used_[static_cast<size_t>(s)], cudaEventDisableTiming));
  }
}

WeightRing::~WeightRing() {
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : copied_) cudaEventDestroy(e);
  for (cudaEvent_t e : used_) cudaEventDestroy(e);
  cudaStreamDestroy(copy_);
  cudaFree(dev_);
  cudaFreeHost(host_);
}

bool WeightRing::in_window(int g, int first) const {
  const int m = n_groups();
  const int d = ((g - first) % m + m) % m;  // steps from first to g, cyclic
  return d < n_slots();
}

int WeightRing::ensure(int g, int first, bool must) {
  const int have = group_slot_[static_cast<size_t>(g)];
  if (have >= 0) return have;
  // An empty slot, else the least recently acquired one whose group is outside
  // the window; for the group needed now (must), else one inside it. Never a
  // slot acquired and not yet released.
  int s = -1;
  bool s_in = true;
  for (int i = 0; i < n_slots(); ++i) {
    const auto iu = static_cast<size_t>(i);
    const int held = slot_group_[iu];
    if (held < 0) {
      s = i;
      break;
    }
    if (pins_[iu] > 0) continue;
    const bool in = in_window(held, first);
    if (in && !must) continue;
    if (s < 0 || (s_in && !in) || (s_in == in && slot_tick_[iu] < slot_tick_[static_cast<size_t>(s)])) s = i, s_in = in;
  }
  if (s < 0) {
    CHECK(!must && "WeightRing: more groups acquired at once than it has slots");
    return -1;  // a prefetch with every slot in use: the acquire will copy it
  }
  const auto su = static_cast<size_t>(s);
  if (slot_group_[su] >= 0) group_slot_[static_cast<size_t>(slot_group_[su])] = -1;
  if (used_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(copy_, used_[su], 0));  // its readers first
  const auto gu = static_cast<size_t>(g);
  SLUICE_CUDA_OK(cudaMemcpyAsync(dev_ + su * slot_bytes_, host_ + offset_[gu], bytes_[gu], cudaMemcpyHostToDevice, copy_));
  SLUICE_CUDA_OK(cudaEventRecord(copied_[su], copy_));
  bytes_copied_ += bytes_[gu];
  slot_group_[su] = g;
  group_slot_[gu] = s;
  slot_tick_[su] = tick_;  // not yet used: oldest among equals
  return s;
}

uint8_t* WeightRing::acquire(int g, cudaStream_t compute) {
  CHECK(g >= 0 && g < n_groups());
  const int s = ensure(g, g, true);
  const auto su = static_cast<size_t>(s);
  slot_tick_[su] = ++tick_;
  ++pins_[su];
  SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, copied_[su], 0));
  const int m = n_groups();
  for (int i = 1; i < std::min(n_slots(), m); ++i) ensure((g + i) % m, g, false);  // the next ones, ahead of use
  return dev_ + su * slot_bytes_;
}

void WeightRing::release(int g, cudaStream_t compute) {
  const int s = group_slot_[static_cast<size_t>(g)];
  CHECK(s >= 0 && pins_[static_cast<size_t>(s)] > 0);
  const auto su = static_cast<size_t>(s);
  --pins_[su];
  SLUICE_CUDA_OK(cudaEventRecord(used_[su], compute));
  used_recorded_[su] = 1;
}

}  // namespace sluice::cuda
