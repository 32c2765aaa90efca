#!/usr/bin/env bash
# Runs Cleave's kernel benchmarks from a build directory and prints their tables and JSON lines.
#
#   scripts/run-benchmarks.sh BUILD_DIR [extra Google Benchmark flags, e.g. --benchmark_filter=square_1024]
#
# gemm_bench runs twice: with OPENBLAS_CORETYPE unset (OpenBLAS picks the core) and with
# OPENBLAS_CORETYPE=SkylakeX. OpenBLAS reads the variable once, when the library is loaded, so it must be
# exported here (a setenv() inside the program is too late; the probe at the end shows it). On a CPU
# without AVX-512 the SkylakeX kernels die with SIGILL (measured on AMD EPYC Zen 3: exit 132), so that run
# is skipped there and Haswell (the other AVX2 kernel family) is timed instead to show whether the core
# type matters at all. Set CLEAVE_BENCH_FORCE_SKYLAKEX=1 to attempt SkylakeX anyway.
set -uo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [benchmark flags...]" >&2
  exit 2
fi
build=$1
shift
bench=$build/bin/gemm_bench
if [[ ! -x $bench ]]; then
  echo "error: $bench not found. Install Google Benchmark (apt package libbenchmark-dev), reconfigure and" >&2
  echo "       build it: cmake -S . -B $build && cmake --build $build --target gemm_bench" >&2
  exit 1
fi

status=0
one_thread_1024() {  # median / best GFLOP/s and cpu/real of the 1-thread square_1024 row in a saved output
  grep '^{"bench":"gemm","case":"square_1024",' "$1" | grep '"threads":1,' |
    sed 's/.*"gflops":\([0-9.]*\),"best_gflops":\([0-9.]*\),"cpu_over_real":\([0-9.]*\).*/median \1, best \2, cpu\/real \3/'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "=== gemm_bench: OPENBLAS_CORETYPE unset"
env -u OPENBLAS_CORETYPE "$bench" --benchmark_color=false "$@" | tee "$tmp/default.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

echo
if grep -qw avx512f /proc/cpuinfo || [[ ${CLEAVE_BENCH_FORCE_SKYLAKEX:-0} == 1 ]]; then
  echo "=== gemm_bench: OPENBLAS_CORETYPE=SkylakeX"
  OPENBLAS_CORETYPE=SkylakeX "$bench" --benchmark_color=false "$@" | tee "$tmp/skylakex.txt"
  rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "OPENBLAS_CORETYPE=SkylakeX: gemm_bench exited with $rc (132 = SIGILL: this CPU lacks AVX-512)"
    status=1
  fi
  alt=skylakex alt_label=SkylakeX
else
  echo "=== gemm_bench: OPENBLAS_CORETYPE=SkylakeX skipped: this CPU has no avx512f, and OpenBLAS's SkylakeX"
  echo "    kernels die with SIGILL on it (set CLEAVE_BENCH_FORCE_SKYLAKEX=1 to see). Timing Haswell instead."
  OPENBLAS_CORETYPE=Haswell "$bench" --benchmark_color=false --benchmark_filter='square_1024/' | tee "$tmp/haswell.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  alt=haswell alt_label=Haswell
fi

echo
echo "=== 1-thread sgemm 1024^3 (GFLOP/s)"
echo "OPENBLAS_CORETYPE unset : $(one_thread_1024 "$tmp/default.txt")  (core $(sed -n 's/^blas: .*| core \([^ ]*\) .*/\1/p' "$tmp/default.txt"))"
if [[ -s $tmp/$alt.txt ]]; then
  echo "OPENBLAS_CORETYPE=$alt_label : $(one_thread_1024 "$tmp/$alt.txt")"
fi

echo
echo "=== does setenv(OPENBLAS_CORETYPE) inside the program work? (Haswell is safe on any AVX2 CPU)"
env -u OPENBLAS_CORETYPE "$bench" --probe_coretype=Haswell || status=1
exit $status
