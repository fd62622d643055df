// The CUDA driver API's virtual memory management types, for sluice's CUDA
// emulator: cudaGetDriverEntryPointByVersion hands out emulations of these
// calls over mmap (emu_vmm.cpp).
#pragma once

#include <cstddef>

enum CUresult : int { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2 };
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;

enum CUmemAllocationType : int { CU_MEM_ALLOCATION_TYPE_INVALID = 0, CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum CUmemLocationType : int { CU_MEM_LOCATION_TYPE_INVALID = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1 };
enum CUmemAllocationGranularity_flags : int {
  CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
};
enum CUmemAccess_flags : int { CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};
struct CUmemAllocationProp {
  CUmemAllocationType type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  unsigned char reserved[32];
};
struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
