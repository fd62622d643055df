// What the emulator's pieces share: the thread's last error, counters, the
// emulated device memory (emu_memory.cpp) and its accounting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"
#include "sluice_emu/halves.h"

namespace sluice_emu {

void set_error(cudaError_t e);
// Device memory charged against the emulated capacity; false (nothing
// charged) past it.
bool charge_device(size_t bytes);
void refund_device(size_t bytes);
size_t device_capacity();

// Device memory (emu_memory.cpp): inaccessible to host code except while a
// DeviceAccess lives on some thread (the emulator's launches, copies, fills).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
void* device_alloc(size_t bytes);           // null: the reserved range is full
bool device_free(void* p);                  // false: not an allocation of device_alloc
size_t device_alloc_size(const void* p);    // the bytes asked; 0: not an allocation
// A driver-API range made accessible (mapped and opened) or not any more.
void device_range_mapped(void* p, size_t bytes, bool accessible);

}  // namespace sluice_emu
