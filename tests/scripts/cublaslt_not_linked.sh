#!/usr/bin/env bash
# The binaries do not link cuBLASLt (engine/cuda/cublaslt_library.hpp opens it on first use): loading it costs every
# process about 0.1 s of CPU (docs/building.md), paid by every CPU run, `cleave` command and test process. Fails
# naming each ELF file whose dynamic section lists libcublasLt as NEEDED.
# Usage: cublaslt_not_linked.sh BINARY...
set -u
[ $# -gt 0 ] || { echo "usage: cublaslt_not_linked.sh BINARY..." >&2; exit 2; }
status=0
for binary in "$@"; do
  needed=$(readelf -d "$binary" 2>&1) || { echo "FAIL cannot read $binary: $needed"; status=1; continue; }
  if grep -q 'NEEDED.*libcublasLt' <<< "$needed"; then
    echo "FAIL $binary links $(grep -o 'libcublasLt[^]]*' <<< "$needed" | head -n 1) (NEEDED); open it through" \
         "cleave::cuda::cublaslt() and drop CUDA::cublasLt from the link"
    status=1
  else
    echo "ok   $binary: no libcublasLt among $(grep -c NEEDED <<< "$needed") NEEDED libraries"
  fi
done
exit "$status"
