// What the emulator's pieces share: the thread's last error, counters, the
// emulated device memory's accounting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"
#include "sluice_emu/halves.h"

namespace sluice_emu {

void set_error(cudaError_t e);
void count_launch();
// Device memory charged against the emulated capacity; false (nothing
// charged) past it.
bool charge_device(size_t bytes);
void refund_device(size_t bytes);
size_t device_capacity();

}  // namespace sluice_emu
