// How often the calling thread has waited for the emulated device
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, the
// synchronous cudaMemcpy): what a
// test reads to hold code to waiting a few times a step rather than per
// operator, since on a GPU each such wait drains the queue the host had built
// ahead of the device. Counted per host thread (a copy queue's pump waits on
// its own).
#pragma once

#include <cstdint>

namespace sluice_emu {

int64_t host_waits();

}  // namespace sluice_emu
