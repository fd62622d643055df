# The CUDA emulator build (tests/cuda_emu/README.md): with -DSLUICE_CUDA_EMU=ON
# the CUDA backend's sources compile with g++ against the emulator's headers,
# its kernels run on the CPU, and the GPU tests run here instead of skipping.
# Included from the top CMakeLists.txt after sluice_backend exists.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(SLUICE_EMU_DIR ${PROJECT_SOURCE_DIR}/tests/cuda_emu)
set(SLUICE_EMU_SRC ${CMAKE_BINARY_DIR}/cuda_emu_src)

# The runtime (launches, memory, streams, the driver's VMM) every emulated
# build links, and a stand-in libcublasLt loaded as the real one would be.
add_library(sluice_cuda_emu STATIC ${SLUICE_EMU_DIR}/emu_grid.cpp ${SLUICE_EMU_DIR}/emu_memory.cpp
            ${SLUICE_EMU_DIR}/emu_runtime.cpp ${SLUICE_EMU_DIR}/emu_streams.cpp ${SLUICE_EMU_DIR}/emu_vmm.cpp)
target_include_directories(sluice_cuda_emu PUBLIC ${SLUICE_EMU_DIR}/include)
add_library(sluice_emu_cublaslt SHARED ${SLUICE_EMU_DIR}/emu_cublaslt.cpp)
# Executables export their symbols, so the stand-in finds sluice_emu_device_access.
add_link_options(-rdynamic)
target_include_directories(sluice_emu_cublaslt PRIVATE ${SLUICE_EMU_DIR}/include)
set_target_properties(sluice_emu_cublaslt PROPERTIES OUTPUT_NAME cublasLt-emu)

# Each .cu and .cuh with its launches rewritten (rewrite_launches.py); the
# .cuh copies come first on the include path, so every includer sees them.
file(GLOB sluice_emu_inputs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu
     ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cuh)
set(sluice_emu_outputs "")
set(sluice_emu_kernels "")
foreach(in ${sluice_emu_inputs})
  get_filename_component(name ${in} NAME)
  if(name MATCHES "\\.cu$")
    set(out ${SLUICE_EMU_SRC}/backend/cuda/${name}.cpp)
    list(APPEND sluice_emu_kernels ${out})
  else()
    set(out ${SLUICE_EMU_SRC}/backend/cuda/${name})
  endif()
  add_custom_command(OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${SLUICE_EMU_DIR}/rewrite_launches.py ${in} ${out}
    DEPENDS ${in} ${SLUICE_EMU_DIR}/rewrite_launches.py VERBATIM)
  list(APPEND sluice_emu_outputs ${out})
endforeach()
add_custom_target(sluice_cuda_emu_sources DEPENDS ${sluice_emu_outputs})

file(GLOB sluice_emu_cpp CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
list(FILTER sluice_emu_cpp EXCLUDE REGEX "_test\\.cpp$")
target_sources(sluice_backend PRIVATE ${sluice_emu_cpp} ${sluice_emu_kernels})
set_source_files_properties(${sluice_emu_kernels} PROPERTIES COMPILE_OPTIONS
  "-ffp-contract=off;-fno-strict-aliasing;-Wno-unknown-pragmas;-Wno-unused-variable;-Wno-unused-but-set-variable"
  SKIP_UNITY_BUILD_INCLUSION ON)
add_dependencies(sluice_backend sluice_cuda_emu_sources sluice_emu_cublaslt)
target_include_directories(sluice_backend BEFORE PUBLIC ${SLUICE_EMU_SRC} ${SLUICE_EMU_DIR}/include)
target_compile_definitions(sluice_backend PUBLIC SLUICE_HAVE_CUDA=1 SLUICE_CUDA_EMU=1)
target_link_libraries(sluice_backend PUBLIC sluice_cuda_emu ${CMAKE_DL_LIBS})
set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backend/cuda/cublaslt_api.cpp APPEND PROPERTY
  COMPILE_DEFINITIONS SLUICE_CUBLASLT_PATH="$<TARGET_FILE:sluice_emu_cublaslt>")
message(STATUS "sluice: CUDA backend on the CPU emulator (tests/cuda_emu)")
