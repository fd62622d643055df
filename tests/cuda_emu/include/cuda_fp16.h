// sluice CUDA emulator: see sluice_emu/halves.h.
#pragma once
#include "sluice_emu/halves.h"
