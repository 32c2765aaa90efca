#!/usr/bin/env bash
# The start-up BLAS check end to end (kernels/cpu/blas_coretype.hpp, engine/cli/runtime_env.cpp), on a machine
# made to look like issue 39's by a preloaded openblas_get_corename that answers "Prescott" until
# OPENBLAS_CORETYPE is set: `cleave` sets OPENBLAS_CORETYPE, re-executes once and reports the kernels it got;
# CLEAVE_BLAS_CORETYPE=keep and a user's OPENBLAS_CORETYPE are respected (with a warning); under mpiexec -n 2
# both ranks re-execute before MPI_Init, the job trains, rank 0 says it once and run.json's cpu_kernels names the
# corrected kernels `cleave version` names. A CPU without AVX has nothing
# better than Prescott: then the check must keep it.
# Usage: blas_coretype_reexec.sh CLEAVE FAKE_CORENAME_SO MPIEXEC [FLAGS...]
set -u
cleave=$(realpath "$1"); fake=$(realpath "$2"); shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }

LD_PRELOAD=$fake "$cleave" version > plain.txt 2>&1 || { cat plain.txt; fail "cleave version"; }
cat plain.txt
if ! grep -q '^cpu: .*; [^)]*avx' plain.txt; then
  grep -q 'OpenBLAS kernels: Prescott' plain.txt || fail "a CPU without AVX keeps Prescott"
  echo "no AVX on this CPU: nothing to correct"; exit 0
fi
grep -q 'set by Cleave (OPENBLAS_CORETYPE=' plain.txt || fail "no re-exec with OPENBLAS_CORETYPE"
grep -q 'the library chose Prescott' plain.txt || fail "the library's own choice is not named"
grep -q '^runtime: set by cleave: .*OPENBLAS_CORETYPE=' plain.txt || fail "runtime line does not name OPENBLAS_CORETYPE"

CLEAVE_BLAS_CORETYPE=keep LD_PRELOAD=$fake "$cleave" version > keep.txt 2>&1 || fail "version with keep"
grep -q 'kept because CLEAVE_BLAS_CORETYPE=keep' keep.txt || { cat keep.txt; fail "opt-out not honoured"; }
grep -q 'OPENBLAS_CORETYPE=' keep.txt && { cat keep.txt; fail "opt-out still set OPENBLAS_CORETYPE"; }

OPENBLAS_CORETYPE=Prescott "$cleave" version > user.txt 2>&1 || fail "version with a user's core"
grep -q 'from OPENBLAS_CORETYPE=Prescott in the environment, older than' user.txt \
  || { cat user.txt; fail "a user's OPENBLAS_CORETYPE is not kept with a warning"; }

"${mpiexec[@]}" -n 2 -x LD_PRELOAD="$fake" "$cleave" train --set train.steps=2 --set train.out_dir=run \
  --set train.report=false > mpi.log 2>&1 || { cat mpi.log; fail "mpiexec -n 2 train after the re-exec"; }
[ "$(grep -c 'set by Cleave (OPENBLAS_CORETYPE=' mpi.log)" = 1 ] || { cat mpi.log; fail "not said once by rank 0"; }
# run.json's cpu_kernels is the corrected kernels rank 0 ran with: the BLAS and core `cleave version` names after its
# re-exec (the same preload, the same correction), not the Prescott the library chose alone.
kernels=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["cpu_kernels"])' run/run.json) \
  || fail "run.json has no cpu_kernels"
case "$kernels" in
  *"(core "*")") ;;
  *) fail "run.json's cpu_kernels '$kernels' names no core" ;;
esac
grep -qF "| $kernels: " plain.txt || { cat plain.txt; fail "run.json's cpu_kernels '$kernels' is not what cleave version says"; }
case "$kernels" in *"(core Prescott)") fail "run.json's cpu_kernels '$kernels': the correction did not hold" ;; esac
echo "PASS"
