# Helpers that turn a source folder into a library and a test folder into a test binary, so adding a file
# never needs a CMake edit. Files under any `cuda/` folder are left to the CUDA build.
#
# Build speed (docs/building.md). The libraries and the cleave executable compile their .cpp files in unity batches
# (CLEAVE_UNITY_BUILD, default ON); the tests in batches of their own (CLEAVE_TEST_*). The libraries' precompiled
# header (CLEAVE_PRECOMPILE_HEADERS) is opt-in: it measured no gain on an Intel Xeon. Plain CMake switches, so a
# build with either off is the same code.
# A unity batch is one translation unit: two files of one library must not define the same name at file scope
# with internal linkage (anonymous namespace or `static`) with the same signature. Rename one (prefer a name
# that says what it does), or list the file in CLEAVE_UNITY_SKIP, which compiles it alone. Which files share a
# batch moves whenever a file is added, so a new file can break a batch it is not in: the build that adds it (a
# unity build too, since it is the default) shows the break at once, as a redefinition in Unity/unity_N_cxx.cxx.
option(CLEAVE_UNITY_BUILD "Compile each library's .cpp files in unity batches (fewer, larger compiles)" ON)
set(CLEAVE_UNITY_BATCH_SIZE 8 CACHE STRING "Source files per unity translation unit (CLEAVE_UNITY_BUILD)")
option(CLEAVE_PRECOMPILE_HEADERS "Precompile the STL, fmt and nlohmann/json headers once, for every library" OFF)
# Libraries that compile file by file even in a unity build: the CPU kernels and the op seam (with the CUDA backend's
# host files). Their time is code generation at -O3 (per-ISA copies of each kernel), which a batch does not share,
# and a batch would let one file's functions inline into another file's AVX2/AVX-512 code, where GCC may then fuse a
# multiply and an add (C++'s default -ffp-contract=fast): the kernels' bits must not depend on the build's batching.
set(CLEAVE_UNITY_FILE_BY_FILE cleave_kernels cleave_ops)
# Files (relative to the source root) that compile alone even in a unity build, each with the helper it shares
# with another file of its library (name and signature) after a #. Empty: renaming one of the two is the better fix.
set(CLEAVE_UNITY_SKIP)
# Targets compiled with other flags than cleave_core's (-fopenmp), which precompile the headers for themselves.
set(CLEAVE_PCH_OWN cleave_kernels cleave_ops)
# The headers most .cpp files include (measured: fmt and nlohmann/json dominate a file's parse time).
set(CLEAVE_PCH_HEADERS <algorithm> <cstddef> <cstdint> <functional> <map> <memory> <optional> <stdexcept> <string>
                       <string_view> <unordered_map> <utility> <vector> <fmt/format.h> <nlohmann/json.hpp>)

# cleave_build_faster(<target>): the unity and precompiled-header settings above, for one C++ target.
function(cleave_build_faster target)
  if(CLEAVE_UNITY_BUILD AND NOT target IN_LIST CLEAVE_UNITY_FILE_BY_FILE)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${CLEAVE_UNITY_BATCH_SIZE})
    foreach(file IN LISTS CLEAVE_UNITY_SKIP)
      set_source_files_properties(${CMAKE_SOURCE_DIR}/${file} TARGET_DIRECTORY ${target}
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endforeach()
  endif()
  # One precompiled header, built for cleave_core (the first library, which every other links), reused by every
  # target compiled with the same flags; the OpenMP targets (-fopenmp) build their own, as GCC would refuse it.
  if(CLEAVE_PRECOMPILE_HEADERS)
    if(target STREQUAL "cleave_core" OR target IN_LIST CLEAVE_PCH_OWN OR NOT TARGET cleave_core)
      target_precompile_headers(${target} PRIVATE ${CLEAVE_PCH_HEADERS})
    else()
      target_precompile_headers(${target} REUSE_FROM cleave_core)
    endif()
  endif()
endfunction()

# cleave_test_compile(<target>): how every test target compiles its C++ files.
#  - CLEAVE_TEST_OPTIMIZATION (default -Og) replaces the build type's -O3 for the tests' own files: a test file is
#    mostly gtest assertions and set-up, where -O3 spends most of the file's compile time (docs/building.md has the
#    measured compile and run times); the code under test stays in the libraries, compiled as users get it.
#  - the tests' precompiled header (CLEAVE_TEST_PRECOMPILE_HEADERS): the libraries' list plus gtest, built once for
#    cleave_unit_test_main (tests/CMakeLists.txt) and reused by every test target compiled with its flags (-fopenmp,
#    which every target linking cleave_kernels has, and the optimization above). A target with other flags must not
#    call it: GCC would reject the header (-Winvalid-pch warns) and parse the headers again.
#  - unity batches (CLEAVE_TEST_UNITY_BUILD, default ON): a test binary's files compile CLEAVE_TEST_UNITY_BATCH_SIZE
#    at a time as one translation unit, so gtest's templates and the helpers' instantiations are compiled once per
#    batch (half the CPU time of the test objects, docs/building.md). Two files of one batch must not define one
#    name: every test file keeps its helpers and tests in a namespace named after the file
#    (`namespace cleave::planner::ep_plan_test`), so a file added later, which moves the batches' bounds, never
#    meets another file's helper of the same name. A break shows as a redefinition in Unity/unity_N_cxx.cxx.
set(CLEAVE_TEST_OPTIMIZATION "-Og"
    CACHE STRING "Optimization flag of the test files (the libraries keep the build type's)")
option(CLEAVE_TEST_UNITY_BUILD "Compile each test binary's files in unity batches" ON)
set(CLEAVE_TEST_UNITY_BATCH_SIZE 16 CACHE STRING "Test files per unity translation unit (CLEAVE_TEST_UNITY_BUILD)")
set(CLEAVE_TEST_PCH_HEADERS ${CLEAVE_PCH_HEADERS} <gtest/gtest.h>)
function(cleave_test_compile target)
  if(CLEAVE_TEST_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${CLEAVE_TEST_UNITY_BATCH_SIZE})
  endif()
  if(CLEAVE_TEST_OPTIMIZATION)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CLEAVE_TEST_OPTIMIZATION}>)
  endif()
  if(NOT CLEAVE_TEST_PRECOMPILE_HEADERS)
    return()
  endif()
  if(target STREQUAL "cleave_unit_test_main")
    target_precompile_headers(${target} PRIVATE ${CLEAVE_TEST_PCH_HEADERS})
  else()
    target_precompile_headers(${target} REUSE_FROM cleave_unit_test_main)
  endif()
endfunction()

# cleave_add_library(<target> [DIRS <dir>...] [FILES <file>...] [EXCLUDE <file>...] DEPS <target>...)
# DIRS are globbed recursively for .cpp files; FILES are added as listed; EXCLUDE removes listed files from
# what DIRS found (paths relative to the source root). Use FILES / EXCLUDE only where one folder holds two
# libraries (pipeline/: the non-executing cleave_schedule and the executing cleave_pipeline).
function(cleave_add_library target)
  cmake_parse_arguments(ARG "" "" "DIRS;FILES;EXCLUDE;DEPS" ${ARGN})
  set(sources)
  foreach(dir IN LISTS ARG_DIRS)
    file(GLOB_RECURSE found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.cpp)
    list(FILTER found EXCLUDE REGEX "/cuda/|/nccl/")
    list(APPEND sources ${found})
  endforeach()
  foreach(file IN LISTS ARG_EXCLUDE)
    list(REMOVE_ITEM sources ${CMAKE_SOURCE_DIR}/${file})
  endforeach()
  foreach(file IN LISTS ARG_FILES)
    if(NOT EXISTS ${CMAKE_SOURCE_DIR}/${file})
      message(FATAL_ERROR "cleave_add_library(${target}): FILES entry ${file} does not exist")
    endif()
    list(APPEND sources ${CMAKE_SOURCE_DIR}/${file})
  endforeach()
  if(sources)
    add_library(${target} STATIC ${sources})
    cleave_build_faster(${target})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(${target} ${scope} ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${target} ${scope} ${ARG_DEPS})
endfunction()

# cleave_add_unit_tests(<area> <dir> DEPS <target>...): one gtest binary per folder, label `unit`. Its main is
# cleave_unit_test_main (tests/support/unit_test_main.cpp: the start-up BLAS check) where tests/ defines it.
function(cleave_add_unit_tests area dir)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(NOT sources)
    return()
  endif()
  add_executable(unit_${area} ${sources})
  if(TARGET cleave_unit_test_main)
    target_link_libraries(unit_${area} PRIVATE ${ARG_DEPS} cleave_unit_test_main GTest::gtest)
  else()
    target_link_libraries(unit_${area} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  endif()
  target_include_directories(unit_${area} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  if(TARGET cleave_unit_test_main)
    cleave_test_compile(unit_${area})
  endif()
  gtest_discover_tests(unit_${area} PROPERTIES LABELS unit DISCOVERY_TIMEOUT 60)
endfunction()
