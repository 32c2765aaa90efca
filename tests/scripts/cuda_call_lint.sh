#!/usr/bin/env bash
# Lint for two CUDA runtime calls whose side effects the code cannot see, in the engine's sources (engine/,
# kernels/, layers/, pipeline/; tests and benchmarks may use them):
# - the synchronous memory calls (cudaMemset, cudaMemcpy, their 2D / 3D / symbol / peer forms) run on the legacy
#   default stream, which the run's non-blocking streams neither wait for nor are waited for by: the work they
#   order against (a communicator's all-reduce of the word just zeroed, say) may run first. Use the Async form on
#   the stream that consumes the bytes.
# - cudaEventQuery and cudaStreamQuery leave a not-ready answer as the calling thread's last error, which the next
#   launcher's cudaGetLastError() then reports as its own failure ("device not ready"). The one query is
#   cleave::cuda::query_event (engine/cuda/stream.cpp), which clears it; every other caller goes through it.
# - device and pinned memory is allocated and freed, and the device synchronised, only where it happens once or on a
#   cache miss (no allocation or host-device sync inside a steady-state step): the run's caching allocators
#   (engine/cuda/caching_allocator.cpp), the GEMM workspace of CudaResources (kernels/ops/cuda/cuda_backend.cpp), the
#   device status words (kernels/ops/cuda/cuda_common.cpp), the NCCL barrier word (engine/comm/nccl/
#   nccl_communicator.cpp, freed in nccl_work.cpp) and the NCCL staging scratch that grows only for a larger request
#   (engine/comm/nccl/stream_scratch.hpp). A new site belongs in one of them, or in this list with its reason.
# - cuBLASLt is opened on first use, not linked (engine/cuda/cublaslt_library.hpp): a direct cublasLt*( call would
#   not link, or would bring the library's start-up cost back to every process; call cleave::cuda::cublaslt().
# Comments (from `//`) are not scanned.
# Usage: cuda_call_lint.sh REPO_ROOT  (exit 1 naming each offending line)
set -u
root="${1:?usage: cuda_call_lint.sh REPO_ROOT}"
cd "$root" || exit 2
files=()
while IFS= read -r f; do files+=("$f"); done < <(find engine kernels layers pipeline -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
scan() {  # scan PATTERN FILE...: "FILE:LINE: TEXT" for each code line (comments cut) matching PATTERN
  local pattern="$1"; shift
  awk -v re="$pattern" '{ code = $0; sub(/\/\/.*/, "", code); if (code ~ re) print FILENAME ":" FNR ": " $0 }' "$@"
}
status=0
sync_calls='Memset|Memcpy|Memset2D|Memset3D|Memcpy2D|Memcpy3D|MemcpyToSymbol|MemcpyFromSymbol|MemcpyPeer'
legacy="$(scan "(^|[^A-Za-z0-9_])cuda(${sync_calls})[ ]*[(]" "${files[@]}")"
if [[ -n "$legacy" ]]; then
  echo "$legacy"
  echo "FAIL: a synchronous CUDA memory call runs on the legacy default stream, unordered with the run's" \
       "non-blocking streams; use its Async form on the stream that consumes the bytes" >&2
  status=1
fi
queries="$(scan '(^|[^A-Za-z0-9_])cuda(EventQuery|StreamQuery)[ ]*[(]' "${files[@]}")"
queries="$(printf '%s\n' "$queries" | grep -v '^engine/cuda/stream\.cpp:' || true)"
if [[ -n "$queries" ]]; then
  echo "$queries"
  echo "FAIL: a CUDA query leaves not-ready as the thread's last error, which the next launch check reports as" \
       "its own failure; call cleave::cuda::query_event (engine/cuda/stream.hpp) instead" >&2
  status=1
fi
memory_calls='Malloc|MallocAsync|MallocManaged|MallocHost|MallocPitch|Malloc3D|MallocArray|HostAlloc|Free|FreeAsync'
memory_calls+='|FreeHost|FreeArray|DeviceSynchronize|DeviceReset'
allowed='^(engine/cuda/caching_allocator\.cpp|kernels/ops/cuda/cuda_backend\.cpp|kernels/ops/cuda/cuda_common\.cpp'
allowed+='|engine/comm/nccl/nccl_communicator\.cpp|engine/comm/nccl/nccl_work\.cpp|engine/comm/nccl/stream_scratch\.hpp):'
# The name alone (a function pointer counts as well as a call); text in string literals is left out.
memory="$(scan "(^|[^A-Za-z0-9_\"])cuda(${memory_calls})([^A-Za-z0-9_]|$)" "${files[@]}" \
          | awk '{ code = $0; sub(/^[^:]*:[0-9]*: /, "", code); gsub(/"[^"]*"/, "", code);
                         if (code ~ /cuda(Malloc|Free|HostAlloc|DeviceSynchronize|DeviceReset)/) print }')"
memory="$(printf '%s\n' "$memory" | grep -Ev "$allowed" | grep . || true)"
if [[ -n "$memory" ]]; then
  echo "$memory"
  echo "FAIL: a CUDA allocation, free or device-wide sync outside the places that run once or on a cache miss;" \
       "take memory from the run's allocator (ctx.allocator) or a scratch grown outside the steady state, or add the" \
       "file to this lint's list with the reason" >&2
  status=1
fi
direct_lt="$(scan '(^|[^A-Za-z0-9_.>"])(::)?cublasLt[A-Z][A-Za-z]*[ ]*[(]' "${files[@]}" \
             | grep -v '^engine/cuda/cublaslt_library\.' || true)"
if [[ -n "$direct_lt" ]]; then
  echo "$direct_lt"
  echo "FAIL: a direct cuBLASLt call; the library is opened on first use, call it through" \
       "cleave::cuda::cublaslt() (engine/cuda/cublaslt_library.hpp)" >&2
  status=1
fi
if [[ "$status" -eq 0 ]]; then
  echo "ok   ${#files[@]} engine sources: no legacy-stream memory call, every event query through query_event," \
       "allocations only at their listed sites, cuBLASLt only through cublaslt()"
fi
exit "$status"
