# The op seam's dependency rule (DESIGN.md §2), checked at configure time: no source file under layers/,
# engine/optim/, engine/train/ or pipeline/ includes a backend's kernel header (kernels/cpu/ or kernels/cuda/);
# they reach compute through kernels/ops. The same rule runs as a test (tests/unit/ops/seam_rule_test) so a
# violation added after configuring is caught too.
set(CLEAVE_SEAM_DIRS layers engine/optim engine/train pipeline)
set(CLEAVE_SEAM_VIOLATIONS)
foreach(dir IN LISTS CLEAVE_SEAM_DIRS)
  file(GLOB_RECURSE seam_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.cpp ${CMAKE_SOURCE_DIR}/${dir}/*.hpp)
  foreach(file IN LISTS seam_files)
    file(STRINGS ${file} hits REGEX "#include +\"kernels/(cpu|cuda)/")
    if(hits)
      file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${file})
      list(APPEND CLEAVE_SEAM_VIOLATIONS "${rel}: ${hits}")
    endif()
  endforeach()
endforeach()
if(CLEAVE_SEAM_VIOLATIONS)
  list(JOIN CLEAVE_SEAM_VIOLATIONS "\n  " listing)
  message(FATAL_ERROR "These files include a backend's kernel header instead of kernels/ops (DESIGN.md §2):\n  "
                      "${listing}\nCall the op through kernels/ops/ops.hpp; add the op there if it is missing.")
endif()
