# CUDA part of the build, included by CMakeLists.txt when CLEAVE_WITH_CUDA is on (a CUDA compiler, cuDNN and
# NCCL were found; see CleaveDependencies.cmake). It compiles and links on a machine without a GPU; what
# needs a device is tested under the `gpu` label, which skips without one.
#
# One section per area, each creating its own targets from its own folder. Add a section, do not edit
# another area's.

# ---- Communication: NCCL backend (engine/comm/nccl) -----------------------------------------------------
# cleave_nccl: NcclCommunicator and the deterministic-mode reduction kernel; device guard and allocator come from
# cleave_cuda (engine/cuda). The CPU library cleave_comm excludes engine/comm/nccl by its folder name.
file(GLOB CLEAVE_NCCL_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/engine/comm/nccl/*.cpp
     ${CMAKE_SOURCE_DIR}/engine/comm/nccl/*.cu)
add_library(cleave_nccl STATIC ${CLEAVE_NCCL_SOURCES})
target_include_directories(cleave_nccl PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated
                                              ${CLEAVE_NCCL_INCLUDE})
target_link_libraries(cleave_nccl PUBLIC cleave_comm cleave_cuda CUDA::cudart ${CLEAVE_NCCL_LIB})
set_target_properties(cleave_nccl PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                             POSITION_INDEPENDENT_CODE ON)
message(STATUS "  cleave_nccl  : NCCL backend (${CLEAVE_NCCL_LIB})")

# ---- CUDA backend: devices, streams, allocators, copies (engine/cuda) and kernels (kernels/cuda) -------------
# cleave_cuda: host code in .cpp (compiled by the C++ compiler), kernels in .cu (nvcc, for every
# CMAKE_CUDA_ARCHITECTURES entry). The .cu files include only CUDA headers and their own kernels/cuda/*.hpp,
# never fmt (nvcc cannot compile its compile-time format strings) or C++20 engine headers (CMake 3.25 has no
# C++20 dialect flag for nvcc 13), so they build as C++17 and stay cheap to compile.
file(GLOB CLEAVE_CUDA_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/engine/cuda/*.cpp
     ${CMAKE_SOURCE_DIR}/engine/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cpp
     ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
add_library(cleave_cuda STATIC ${CLEAVE_CUDA_SOURCES})
target_include_directories(cleave_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated
                                              ${CLEAVE_CUDNN_INCLUDE})
# cuBLASLt is opened on first use, not linked (engine/cuda/cublaslt_library.hpp: its load costs every process 0.1 s
# of CPU); the folder CMake found it in is the loader's second try.
get_target_property(CLEAVE_CUBLASLT_FILE CUDA::cublasLt IMPORTED_LOCATION)
get_filename_component(CLEAVE_CUBLASLT_DIR "${CLEAVE_CUBLASLT_FILE}" DIRECTORY)
set_source_files_properties(${CMAKE_SOURCE_DIR}/engine/cuda/cublaslt_library.cpp PROPERTIES
                            COMPILE_DEFINITIONS "CLEAVE_CUBLASLT_DIR=\"${CLEAVE_CUBLASLT_DIR}\"")
target_link_libraries(cleave_cuda PUBLIC cleave_core CUDA::cudart ${CLEAVE_CUDNN_LIB} ${CMAKE_DL_LIBS})
set_target_properties(cleave_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                             POSITION_INDEPENDENT_CODE ON)
message(STATUS "  cleave_cuda  : CUDA backend for sm ${CMAKE_CUDA_ARCHITECTURES} (cuBLASLt, ${CLEAVE_CUDNN_LIB})")

# ---- Communication: GPU tensors over the MPI backend, staged through pinned host memory (engine/comm/cuda) ----
# cleave_comm_cuda: StagedCommunicator. Host code only (.cpp, no kernels); the CPU library cleave_comm excludes
# engine/comm/cuda by its folder name, so a CPU-only build stays free of CUDA.
file(GLOB CLEAVE_COMM_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/comm/cuda/*.cpp)
add_library(cleave_comm_cuda STATIC ${CLEAVE_COMM_CUDA_SOURCES})
target_include_directories(cleave_comm_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
target_link_libraries(cleave_comm_cuda PUBLIC cleave_comm cleave_cuda MPI::MPI_CXX)
set_target_properties(cleave_comm_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
message(STATUS "  cleave_comm_cuda: GPU tensors over MPI through pinned host memory (StagedCommunicator)")

# ---- Communication: the world communicator factory's GPU backends (engine/comm/make_communicator.cpp) ---------
# cleave_comm_world calls make_nccl_world / probe_gpu_per_rank (engine/comm/nccl/nccl_world.cpp, in cleave_nccl)
# and make_staged_world (engine/comm/cuda/staged_world.cpp, in cleave_comm_cuda) under #if CLEAVE_WITH_CUDA.
target_link_libraries(cleave_comm_world PUBLIC cleave_nccl cleave_comm_cuda)
message(STATUS "  cleave_comm_world: parallel.comm_backend auto | mpi | nccl (NCCL and staged MPI worlds linked)")

# ---- Kernels checked without a GPU: strict compilation, line info and the resource report of every .cu ----------
# Every .cu of cleave_cuda and cleave_nccl compiles for each CMAKE_CUDA_ARCHITECTURES entry (80 and 90 by default)
# with -lineinfo (compute-sanitizer reports name source lines; no run-time cost) and --resource-usage (ptxas reports
# each kernel's registers, shared memory, stack and spills). With CLEAVE_CUDA_STRICT (ON by default, what CI
# builds) nvcc's and ptxas's warnings are errors, a register spill among them (-warn-spills), and so are the host
# compiler's -Wall -Wextra warnings in the .cu files. The launcher cmake/cuda_resource_log.sh (in front of ccache
# when that is the launcher) keeps ptxas's report beside each object (<object>.resource-usage) and passes the
# rest of the compiler's output through; tests/gpu/static (label cuda-static) checks the reports and the objects'
# machine code: no spill, no local memory, static shared memory within 48 KiB, sm_90 code for every kernel.
option(CLEAVE_CUDA_STRICT "Compile CUDA sources with warnings as errors (nvcc, ptxas spills, host -Wall -Wextra)" ON)
foreach(target cleave_cuda cleave_nccl)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>
                                           $<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
  if(CLEAVE_CUDA_STRICT)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills>
                                             "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>")
  endif()
  set_property(TARGET ${target} PROPERTY CUDA_COMPILER_LAUNCHER
               ${CMAKE_SOURCE_DIR}/cmake/cuda_resource_log.sh ${CMAKE_CUDA_COMPILER_LAUNCHER})
endforeach()
if(CLEAVE_CUDA_STRICT)
  message(STATUS "  CUDA checks  : -lineinfo, ptxas resource reports, warnings as errors (CLEAVE_CUDA_STRICT)")
else()
  message(STATUS "  CUDA checks  : -lineinfo, ptxas resource reports (CLEAVE_CUDA_STRICT off: warnings stay warnings)")
endif()
