#!/usr/bin/env bash
# No-GPU rehearsal of scripts/gpu-check.sh against a normal CUDA build tree (its real binaries, the system's Open
# MPI): `gpu-check.sh --build-dir BUILD --no-gpu OUT` must exit 0, and summary.txt must hold every stage of the
# plan once, in the plan's order (the short stages first: comm before the kernels), with the status a machine
# without a GPU gives: probe, ldd and the staged communicator's StagedHost tests at 1 and 2 ranks pass; every stage
# that needs a GPU (or a bundle's reference run) reports skipped; nothing is left running, pending or to rerun.
# Usage: gpu_check_selftest.sh REPO_ROOT BUILD_DIR OUT_DIR
set -uo pipefail
root="${1:?usage: gpu_check_selftest.sh REPO_ROOT BUILD_DIR OUT_DIR}" build="${2:?}" out="${3:?}"
rc=0
bash "$root/scripts/gpu-check.sh" --build-dir "$build" --no-gpu "$out" || rc=$?
fails=0
if [[ $rc -ne 0 ]]; then echo "FAIL gpu-check.sh exited $rc (want 0)"; fails=1; fi
want=(probe:pass ldd:pass cpu-reference:skipped gpu-reference:skipped comm:skipped staged-np1:pass staged-np2:pass
      nccl-np2:skipped nccl-watchdog:skipped kernels:skipped ops-parity:skipped train-1rank:skipped train-layouts:skipped
      kernel-timing:skipped profile:skipped bench:skipped)
got="$(awk '/^stage +status +secs/ { table = 1; next } /^total / { table = 0 } table { print $1 ":" $2 }' \
       "$out/summary.txt" 2>/dev/null | tr '\n' ' ')"
if [[ "$got" != "${want[*]} " ]]; then
  echo "FAIL summary.txt rows (stage:status) differ from the plan without a GPU"
  echo "     want: ${want[*]}"
  echo "     got:  $got"
  fails=1
fi
# Every stage ran (a skip for want of a GPU is no budget skip): nothing to rerun, and no rerun line.
if ! grep -q '^not run: none · nothing to rerun$' "$out/summary.txt" 2>/dev/null ||
   grep -q '^rerun: ' "$out/summary.txt" 2>/dev/null; then
  echo "FAIL summary.txt should end with 'not run: none · nothing to rerun' and no rerun line"
  fails=1
fi
if [[ $fails -ne 0 ]]; then sed 's/^/     | /' "$out/summary.txt" 2>/dev/null; exit 1; fi
echo "ok   gpu-check.sh --no-gpu on $build: exit 0, every stage in order with the no-GPU status"
