#!/usr/bin/env bash
# CUDA compiler launcher (cmake/CleaveCuda.cmake, "Kernels checked without a GPU"): runs the compile command it
# is given (the launcher CMake would have used otherwise, e.g. ccache, then nvcc and its arguments), keeps
# ptxas's resource report (the "ptxas info" lines of --resource-usage and the stack / spill line after each
# "Function properties") in <object>.resource-usage beside the object named by -o, and passes every other
# line of the compiler's stderr through, so the build log shows warnings and errors only. Exit status: the
# compiler's. tests/gpu/static/resource_usage_test.cpp (label cuda-static) reads the reports. A ccache hit
# replays the compiler's stderr, so the report is rewritten on every build of the object.
set -u
out=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out="$arg"; fi
  prev="$arg"
done
err="$(mktemp)" || exit 1
"$@" 2>"$err"
status=$?
report='^ptxas info|^[[:space:]]+[0-9]+ bytes stack frame'
if [ -n "$out" ]; then
  grep -E "$report" "$err" >"$out.resource-usage"
fi
grep -vE "$report" "$err" >&2
rm -f "$err"
exit "$status"
