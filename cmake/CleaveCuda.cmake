# CUDA part of the build, included by CMakeLists.txt when CLEAVE_WITH_CUDA is on (a CUDA compiler, cuDNN and
# NCCL were found; see CleaveDependencies.cmake). It compiles and links on a machine without a GPU; what
# needs a device is tested under the `gpu` label, which skips without one.
#
# One section per area, each creating its own targets from its own folder. Add a section, do not edit
# another area's.

# ---- Communication: NCCL backend (engine/comm/nccl) -----------------------------------------------------
# cleave_nccl: NcclCommunicator, the deterministic-mode reduction kernel, the device allocator used by the
# comm tests and benchmark. The CPU library cleave_comm excludes engine/comm/nccl by its folder name.
file(GLOB CLEAVE_NCCL_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/engine/comm/nccl/*.cpp
     ${CMAKE_SOURCE_DIR}/engine/comm/nccl/*.cu)
add_library(cleave_nccl STATIC ${CLEAVE_NCCL_SOURCES})
target_include_directories(cleave_nccl PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated
                                              ${CLEAVE_NCCL_INCLUDE})
target_link_libraries(cleave_nccl PUBLIC cleave_comm CUDA::cudart ${CLEAVE_NCCL_LIB})
set_target_properties(cleave_nccl PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                             POSITION_INDEPENDENT_CODE ON)
message(STATUS "  cleave_nccl  : NCCL backend (${CLEAVE_NCCL_LIB})")
