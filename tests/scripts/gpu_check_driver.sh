#!/usr/bin/env bash
# Self-test of scripts/gpu-check.sh's driver without a GPU and without a build: a fake build tree (gtest-like shell
# scripts named gpu_cuda_test / gpu_ops_test, a fake cleave writing metrics.jsonl, a bundled reference run), a fake
# nvidia-smi that lists one GPU and a fake compute-sanitizer. Checks, each in a few seconds:
#   - an unknown stage in --only (or --limit) is exit 2 naming the stages; --only runs just the named stages
#   - a sticky CUDA error (and a crash) in one test: the binary is rerun once without that test, which passes, and
#     that test alone goes under memcheck with CUDA_LAUNCH_BLOCKING=1; a hung test: rerun without it, no memcheck
#   - a stage that would get less than half its first-call share is skipped with the reason, the next one still runs,
#     and the summary ends with what did not run and the --only line that reruns it
#   - a test binary cut at its first-call share is unfinished, not hung: the tests it did not reach run as its second
#     part after the other test stages' first parts; with no time left for it, they are named as not run; after a
#     sticky error in a first part, the tests its rerun did not reach go to the second part
#   - gpu-reference replays the reference with device.type=cuda and comm_backend=mpi and names the first step past
#     1e-4 and the worst difference
#   - kernel-timing runs gpu_ops_test's disabled KernelTiming tests alone, its row is their printed figure, and
#     their measurements land in OUTDIR/kernel_timing.jsonl
#   - summary.txt lists the running stage while it runs, and a SIGTERM mid-stage leaves the summary (stage
#     "stopped") and the hung stage's log in log.txt, kills the stage's processes and exits 143
#   - set-up: a host whose ldconfig lists no libstdc++ still runs its stages; a set-up that fails (a broken
#     bundle) leaves summary.txt naming the failed command
#   - the stages' order (comm, staged-np1, staged-np2, nccl-np2 before the long test binaries); nccl-np2 skipped with
#     the count on one GPU (or CUDA_VISIBLE_DEVICES naming one), and with two: gpu_comm_test, then the NCCL layouts,
#     each under mpirun -np 2
# Usage: gpu_check_driver.sh REPO_ROOT   (exit 0 when every check passes; prints what failed otherwise)
set -uo pipefail
root="$(cd "${1:?usage: gpu_check_driver.sh REPO_ROOT}" && pwd)"
check="$root/scripts/gpu-check.sh"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-driver.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
# expect_grep WHAT PATTERN FILE: FILE has a line matching the extended regex PATTERN
expect_grep() {
  if grep -Eq -- "$2" "$3"; then ok "$1"; else bad "$1: no line matching '$2' in $(basename "$3"):"; sed 's/^/     | /' "$3"; fi
}
expect_no_grep() {
  if grep -Eq -- "$2" "$3"; then bad "$1: a line matches '$2' in $(basename "$3"):"; sed 's/^/     | /' "$3"; else ok "$1"; fi
}

# ---- the fakes ------------------------------------------------------------------------------------------------------
build="$tmp/build" fakes="$tmp/fakebin"
mkdir -p "$build/tests" "$build/bin" "$fakes" "$build/reference/tiny"
cat >"$build/tests/gpu_cuda_test" <<'EOF'
#!/usr/bin/env bash
# A gtest-like binary: Fake.First, Fake.Bad, Fake.Last. FAKE_MODE (or FAKE_HANG_BIN naming this binary) decides what
# Fake.Bad does: pass, sticky (an illegal address, so the later tests fail too), crash (abort), hang (sleep), slow
# (passes after FAKE_SLOW_S seconds). A filter without '*' or '-' is a list of the tests to run.
me="$(basename "$0")" filter="" xml=""
for a in "$@"; do
  case "$a" in
    --gtest_filter=*) filter="${a#*=}" ;; --gtest_output=xml:*) xml="${a#*xml:}" ;;
    --gtest_list_tests) list=1 ;;
  esac
done
if [[ -n "${list:-}" ]]; then
  # gtest lists its disabled tests too (it runs them only when asked to)
  printf 'Fake.\n  First\n'; [[ "$filter" == *-*Fake.Bad* ]] || printf '  Bad\n'; printf '  Last\n  DISABLED_Timing\n'
  exit 0
fi
echo "$me ${filter:-<all>}" >>"$FAKE_CALLS"
mode="${FAKE_MODE:-pass}"
[[ "$me" == "${FAKE_HANG_BIN:-}" ]] && mode=hang
[[ "$filter" == *-*Fake.Bad* ]] && mode=excluded
passed=0 failed=() lost=0
echo "[==========] Running tests from 1 test suite."
for t in Fake.First Fake.Bad Fake.Last; do
  [[ "$t" == Fake.Bad && "$mode" == excluded ]] && continue
  [[ -n "$filter" && "$filter" != *[*-]* && ":$filter:" != *":$t:"* ]] && continue
  echo "[ RUN      ] $t"
  if [[ "$t" == Fake.Bad ]]; then
    case "$mode" in
      sticky) lost=1 ;;
      crash) echo "fake: aborting"; kill -ABRT $$ ;;
      hang) echo $$ >"$FAKE_PIDFILE"; echo "fake: hanging in $t"; exec sleep 30 ;;
      slow) for _ in $(seq 1 "$(( ${FAKE_SLOW_S:-4} * 10 ))"); do sleep 0.1; done ;;  # stoppable at once
    esac
  fi
  if [[ "$t" == Fake.Last && "$mode" == excluded && -n "${FAKE_SLOW_LAST_S:-}" ]]; then
    for _ in $(seq 1 "$(( FAKE_SLOW_LAST_S * 10 ))"); do sleep 0.1; done
  fi
  if [[ $lost -eq 1 ]]; then
    echo "error: CUDA error: an illegal memory access was encountered (cudaStreamSynchronize)"
    echo "[  FAILED  ] $t (1 ms)"; failed+=("$t")
  else
    echo "[       OK ] $t (1 ms)"; passed=$((passed + 1))
  fi
done
# Run with the disabled tests (the kernel-timing stage): a figure line and a measurement, as KernelTiming prints them.
if [[ "${GTEST_ALSO_RUN_DISABLED_TESTS:-0}" == 1 ]]; then
  echo "kernel-timing: fake timing of $me"
  [[ -n "${CLEAVE_KERNEL_TIMING_OUT:-}" ]] && echo '{"measurement":"fake"}' >>"$CLEAVE_KERNEL_TIMING_OUT"
fi
echo "[==========] $((passed + ${#failed[@]})) tests from 1 test suite ran. (3 ms total)"
echo "[  PASSED  ] $passed tests."
[[ -n "$xml" ]] && printf '<?xml version="1.0"?>\n<testsuites>\n<testsuite name="Fake" tests="%s">\n</testsuite>\n</testsuites>\n' \
  "$((passed + ${#failed[@]}))" >"$xml"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "[  FAILED  ] ${#failed[@]} tests, listed below:"
  for t in "${failed[@]}"; do echo "[  FAILED  ] $t"; done
  exit 1
fi
exit 0
EOF
cp "$build/tests/gpu_cuda_test" "$build/tests/gpu_ops_test"
cat >"$build/bin/cleave" <<'EOF'
#!/usr/bin/env bash
# A fake `cleave train CONFIG --set K=V...`: writes 5 steps to OUT_DIR/metrics.jsonl; on cuda (which must come with
# parallel.comm_backend=mpi) steps 2, 3 and 5 drift by 2.5e-5, 2e-4 and 1e-3 relative.
out="" device=cpu backend=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    --set) case "$2" in train.out_dir=*) out="${2#*=}" ;; device.type=*) device="${2#*=}" ;;
                        parallel.comm_backend=*) backend="${2#*=}" ;; esac; shift 2 ;;
    *) shift ;;
  esac
done
[[ "$device" == cpu || "$backend" == mpi ]] || { echo "error: fake cleave: cuda needs comm_backend mpi" >&2; exit 1; }
mkdir -p "$out"
if [[ "$device" == cuda ]]; then losses=(5.0 4.0001 3.0006 2.0 1.001); else losses=(5.0 4.0 3.0 2.0 1.0); fi
for i in 0 1 2 3 4; do printf '{"step":%d,"loss":%s,"lr":0.001}\n' "$((i + 1))" "${losses[$i]}"; done >"$out/metrics.jsonl"
echo "fake cleave: 5 steps on $device"
EOF
printf '{"step":%d,"loss":%s,"lr":0.001}\n' 1 5.0 2 4.0 3 3.0 4 2.0 5 1.0 >"$build/reference/tiny/metrics.jsonl"
echo '{}' >"$build/reference/tiny/config.json"
printf '%s\n' --set train.out_dir=@OUT_DIR@ >"$build/reference/tiny/args.txt"
cat >"$fakes/nvidia-smi" <<'EOF'
#!/bin/sh
# Lists FAKE_GPUS GPUs (default one); any query gets one CSV line.
case "$*" in
  -L) i=0; while [ "$i" -lt "${FAKE_GPUS:-1}" ]; do echo "GPU $i: Fake GPU (UUID: GPU-0000000$i)"; i=$((i + 1)); done ;;
  *) echo "Fake GPU, 0.0, 9.0" ;;
esac
EOF
cat >"$fakes/compute-sanitizer" <<'EOF'
#!/bin/sh
# Records how it was called and reports one error, as memcheck does on a faulting kernel.
echo "CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-unset} $*" >>"$FAKE_SANITIZER_LOG"
echo "========= COMPUTE-SANITIZER"
echo "========= Invalid __global__ write of size 4 bytes"
echo "=========     at fake_kernel(float *)+0x70 in fake.cu:12"
echo "========= ERROR SUMMARY: 1 error"
exit 97
EOF
chmod +x "$build/tests"/gpu_*_test "$build/bin/cleave" "$fakes"/*
export PATH="$fakes:$PATH" FAKE_CALLS="$tmp/calls.txt" FAKE_SANITIZER_LOG="$tmp/sanitizer.txt"
export FAKE_PIDFILE="$tmp/hang.pid"

# run_check OUT ARGS...: the check against the fake build tree; sets rc, output in OUT.stdout
run_check() {
  local out="$1"; shift
  rm -f "$FAKE_CALLS" "$FAKE_SANITIZER_LOG"
  rc=0
  bash "$check" --build-dir "$build" "$@" "$out" >"$out.stdout" 2>&1 || rc=$?
}

# ---- 1. bad stage names: exit 2 with the list ----------------------------------------------------------------------
run_check "$tmp/o1" --only probe,nonsense
if [[ $rc -eq 2 ]] && grep -q "unknown stage 'nonsense' in --only; the stages are: probe ldd" "$tmp/o1.stdout"; then
  ok "--only with an unknown stage: exit 2 naming it and the stages"
else bad "--only nonsense: exit $rc (want 2)"; sed 's/^/     | /' "$tmp/o1.stdout"; fi
expect_grep "the stages' order: the comm stages (one rank, staged, two NCCL ranks) before the long test binaries" \
  'the stages are: probe ldd cpu-reference gpu-reference comm staged-np1 staged-np2 nccl-np2 nccl-watchdog kernels ' \
  "$tmp/o1.stdout"
run_check "$tmp/o1b" --only test:gpu_missing_test
if [[ $rc -eq 2 ]] && grep -q "stage 'test:gpu_missing_test' in --only: no such test binary" "$tmp/o1b.stdout" &&
   grep -q "bad arguments (exit 2): stage 'test:gpu_missing_test' in --only" "$tmp/o1b/summary.txt"; then
  ok "--only with a test binary that is not there: exit 2, the reason in summary.txt"
else bad "--only test:gpu_missing_test: exit $rc (want 2)"; sed 's/^/     | /' "$tmp/o1b.stdout"; fi
run_check "$tmp/o1c" --limit kernels=soon
if [[ $rc -eq 2 ]]; then ok "--limit kernels=soon: exit 2"; else bad "--limit kernels=soon: exit $rc (want 2)"; fi

# ---- 2. sticky error: rerun without the test, memcheck of that test only --------------------------------------------
FAKE_MODE=sticky run_check "$tmp/o2" --only kernels
s="$tmp/o2/summary.txt"
[[ $rc -eq 1 ]] && ok "sticky: exit 1" || bad "sticky: exit $rc (want 1)"
expect_grep "sticky: the culprit, the rerun's result and memcheck's in the row" \
  '^kernels +fail .*sticky CUDA error \(an illegal memory access was encountered\) in Fake\.Bad; rerun without it: pass \(2 passed, 0 skipped of 2\); memcheck: 1 error\(s\): Invalid __global__ write' "$s"
expect_grep "sticky: the binary ran twice, the second time without Fake.Bad" '^gpu_cuda_test -Fake\.Bad$' "$FAKE_CALLS"
expect_grep "sticky: memcheck ran Fake.Bad alone with CUDA_LAUNCH_BLOCKING=1" \
  '^CUDA_LAUNCH_BLOCKING=1 --tool memcheck .*gpu_cuda_test --gtest_filter=Fake\.Bad$' "$FAKE_SANITIZER_LOG"
[[ "$(wc -l <"$FAKE_CALLS")" -eq 2 ]] && ok "sticky: exactly one rerun" || bad "sticky: $(wc -l <"$FAKE_CALLS") runs (want 2)"
expect_no_grep "--only kernels: no other stage in the summary" '^(probe|ldd|ops-parity|cpu-reference) ' "$s"
expect_grep "--only kernels: the summary names the selection and the verdict" '· FAIL ·' "$s"

# ---- 3. a crash: the same recovery --------------------------------------------------------------------------------------
FAKE_MODE=crash run_check "$tmp/o3" --only ops-parity
expect_grep "crash: the last test started is the culprit, the rerun passes" \
  '^ops-parity +fail .*crashed \(exit 134\) in Fake\.Bad; rerun without it: pass .*memcheck: 1 error' "$tmp/o3/summary.txt"

# ---- 4. a hung test: rerun without it, no memcheck ------------------------------------------------------------------
t0=$SECONDS
FAKE_HANG_BIN=gpu_cuda_test run_check "$tmp/o4" --only kernels --limit kernels=12
expect_grep "hang: the first run is cut at its share, the rerun without the test passes" \
  '^kernels +fail .*no result within [78]s \(hung or slow\) in Fake\.Bad; rerun without it: pass \(2 passed' "$tmp/o4/summary.txt"
[[ ! -s "$FAKE_SANITIZER_LOG" ]] && ok "hang: no memcheck of a hung test" || bad "hang: memcheck ran"
(( SECONDS - t0 < 15 )) && ok "hang: done in $((SECONDS - t0))s" || bad "hang: took $((SECONDS - t0))s"

# ---- 5. the budget: a stage is skipped only when less than half its first-call share is left ----------------------
run_check "$tmp/o5" --budget 15 --only kernels,ops-parity --limit ops-parity=20
s="$tmp/o5/summary.txt"
[[ $rc -eq 0 ]] && ok "budget: exit 0 with a skipped stage" || bad "budget: exit $rc (want 0)"
expect_grep "budget: the stage short of half its first share is skipped with the reason" \
  '^kernels +skipped +0 +budget: needs at least 20s \(half its 40s first-call share\), 1[45]s of the 15s left' "$s"
expect_grep "budget: the next stage, within half its share, runs" '^ops-parity +pass .*3 passed' "$s"
expect_grep "budget: it ran with what was left" '^======== stage ops-parity \(limit 1[45]s\)' "$tmp/o5/log.txt"
expect_grep "budget: the summary names what did not run" '^not run: kernels \(skipped for the budget\)$' "$s"
expect_grep "budget: and the line that reruns it" '^rerun: +bash scripts/gpu-check.sh --budget 150 --only kernels "\$OUT"' "$s"

# ---- 5b. a first part cut at its share is unfinished, its other tests run after the other test stages --------------
FAKE_MODE=slow FAKE_SLOW_S=2 run_check "$tmp/o5b" --only kernels,ops-parity --limit kernels=12:2 --limit ops-parity=6:2
s="$tmp/o5b/summary.txt"
expect_grep "split: both parts in the row, the second ran the tests the first did not reach" \
  '^kernels +pass .*part 1 \([0-9]+s\): 1 passed, 0 failed in its [0-9]+s first share; 2 not reached \(from Fake\.Bad\); part 2 \([0-9]+s\): 2 passed' "$s"
expect_grep "split: the second part got the tests not reached as its filter" '^gpu_cuda_test Fake\.Bad:Fake\.Last$' "$FAKE_CALLS"
expect_grep "split: the other stage's first part ran before the second parts" \
  '^gpu_ops_test <all>$' <(sed -n '/^gpu_cuda_test <all>$/,/^gpu_cuda_test Fake/p' "$FAKE_CALLS")
expect_grep "split: nothing left to rerun when the second parts finished" '^not run: none' "$s"
FAKE_MODE=slow FAKE_SLOW_S=2 run_check "$tmp/o5c" --budget 3 --only kernels --limit kernels=12:2
s="$tmp/o5c/summary.txt"
expect_grep "split: no time for the second part: unfinished, not failed" \
  '^kernels +unfinished .*2 not reached .*part 2 not run' "$s"
expect_grep "split: the tests not reached are named" '^not run: kernels \(2 tests not reached: Fake\.Bad Fake\.Last;' "$s"
expect_grep "split: the verdict is incomplete" '· INCOMPLETE ·' "$s"
[[ $rc -eq 0 ]] && ok "split: an unfinished stage is not a failure (exit 0)" || bad "split: exit $rc (want 0)"

FAKE_MODE=sticky FAKE_SLOW_LAST_S=3 run_check "$tmp/o5d" --only kernels --limit kernels=20:4
s="$tmp/o5d/summary.txt"
expect_grep "split: a sticky error in the first part, its rerun cut at the share: the rest runs in the second part" \
  '^kernels +fail .*part 1 \([0-9]+s\): sticky CUDA error .* in Fake\.Bad; rerun without it: unfinished .*1 not reached \(from Fake\.Last\).*; part 2 \([0-9]+s\): 1 passed' "$s"
expect_grep "split: the second part ran only the test the rerun did not reach" '^gpu_cuda_test Fake\.Last$' "$FAKE_CALLS"

# ---- 6. gpu-reference: losses against the CPU reference ------------------------------------------------------------------
run_check "$tmp/o6" --only cpu-reference,gpu-reference
s="$tmp/o6/summary.txt"
expect_grep "cpu-reference: the CPU replay matches" '^cpu-reference +pass .*tiny: OK|^cpu-reference +pass .*tiny: 5 of 5 steps' "$s"
expect_grep "gpu-reference: first step past 1e-4 and the worst difference named" \
  '^gpu-reference +fail .*cuda:0 vs CPU: tiny: 5 of 5 steps, step 1 diff 0.00e\+00, first past 1e-4: step 3, worst 1.00e-03 at step 5' "$s"

# ---- 7. kernel-timing: the disabled timings run alone, their figure lines make the row, the measurements land ---------
run_check "$tmp/o8" --only kernel-timing
s="$tmp/o8/summary.txt"
expect_grep "kernel-timing: the printed figure makes the row" \
  '^kernel-timing +pass +[0-9]+ +fake timing of gpu_ops_test$' "$s"
expect_grep "kernel-timing: gpu_ops_test ran the KernelTiming tests only" '^gpu_ops_test KernelTiming\.\*$' "$FAKE_CALLS"
expect_grep "kernel-timing: the measurements are in OUTDIR/kernel_timing.jsonl" '"measurement":"fake"' \
  "$tmp/o8/kernel_timing.jsonl"
expect_grep "kernel-timing: the summary lists the file" 'files in .*kernel_timing\.jsonl' "$s"

# ---- 8. a check stopped mid-stage: the summary and the hung stage's log are left ------------------------------------------
rm -f "$FAKE_PIDFILE"
FAKE_HANG_BIN=gpu_ops_test bash "$check" --build-dir "$build" --only kernels,ops-parity --limit ops-parity=60 \
  "$tmp/o7" >"$tmp/o7.stdout" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q 'fake: hanging' "$tmp/o7/log.txt" 2>/dev/null && break; sleep 0.1; done
s="$tmp/o7/summary.txt"
expect_grep "running: the finished stage is in the summary already" '^kernels +pass ' "$s"
expect_grep "running: the running stage is listed as running, with its first share" '^ops-parity +running .*40s limit' "$s"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc -eq 143 ]] && ok "SIGTERM: exit 143" || bad "SIGTERM: exit $rc (want 143)"
expect_grep "SIGTERM: the stage is marked stopped" '^ops-parity +stopped .*stopped by SIGTERM' "$s"
expect_grep "SIGTERM: the hung stage's log is in log.txt" '^fake: hanging in Fake\.Bad' "$tmp/o7/log.txt"
gone=0
for _ in $(seq 1 50); do kill -0 "$(cat "$FAKE_PIDFILE" 2>/dev/null || echo 999999)" 2>/dev/null || { gone=1; break; }; sleep 0.1; done
[[ $gone -eq 1 ]] && ok "SIGTERM: the stage's processes are gone" || bad "SIGTERM: the hung test still runs"

# ---- 9. set-up: a host whose ldconfig lists no libstdc++ still gets its check; a failed set-up leaves its reason --------
mkdir -p "$tmp/noldconfig"
printf '#!/bin/sh\nexit 0\n' >"$tmp/noldconfig/ldconfig"
chmod +x "$tmp/noldconfig/ldconfig"
PATH="$tmp/noldconfig:$PATH" run_check "$tmp/o9" --only probe
expect_grep "set-up: no libstdc++ in ldconfig's cache, the probe still runs" '^probe +(pass|fail) ' "$tmp/o9/summary.txt"
echo 'not a tarball' >"$tmp/broken.tar.gz"
rc=0
bash "$check" --bundle "$tmp/broken.tar.gz" "$tmp/o10" >"$tmp/o10.stdout" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && ok "set-up: a broken bundle ends the check ($rc)" || bad "set-up: a broken bundle exited 0"
expect_grep "set-up: the failed command is in summary.txt" 'set-up failed \(exit [0-9]+\) at scripts/gpu-check.sh line [0-9]+: tar ' \
  "$tmp/o10/summary.txt"

# ---- 10. nccl-np2: two NCCL ranks need two GPUs; with them gpu_comm_test, then the NCCL layouts, under mpirun -np 2 --------
cp "$build/tests/gpu_cuda_test" "$build/tests/gpu_comm_test"
cp "$build/tests/gpu_cuda_test" "$build/tests/gpu_train_test"
run_check "$tmp/o11" --only nccl-np2
expect_grep "nccl-np2 on one GPU: skipped with the count" '^nccl-np2 +skipped +[0-9]+ +1 GPU visible; 2 NCCL ranks need 2' \
  "$tmp/o11/summary.txt"
expect_grep "nccl-np2 on one GPU: a short share" '^======== stage nccl-np2 \(limit +10s\)' "$tmp/o11/log.txt"
[[ ! -s "$FAKE_CALLS" ]] && ok "nccl-np2 on one GPU: no binary ran" || bad "nccl-np2 on one GPU ran: $(cat "$FAKE_CALLS")"
FAKE_GPUS=2 run_check "$tmp/o12" --only nccl-np2
expect_grep "nccl-np2 on two GPUs: both binaries on 2 ranks pass" \
  '^nccl-np2 +pass .*gpu_comm_test: 3 passed, 0 skipped of 3; layouts: 3 passed, 0 skipped of 3$' "$tmp/o12/summary.txt"
expect_grep "nccl-np2 on two GPUs: its 90 s limit" '^======== stage nccl-np2 \(limit +90s\)' "$tmp/o12/log.txt"
calls="$(sort "$FAKE_CALLS" | uniq -c | awk '{ $1 = $1; print }' | paste -sd ';' -)"
[[ "$calls" == "2 gpu_comm_test <all>;2 gpu_train_test GpuTraining.NcclLayoutsOnTwoGpus*" ]] \
  && ok "nccl-np2 on two GPUs: gpu_comm_test, then the NCCL layouts, each on 2 ranks" \
  || bad "nccl-np2 on two GPUs: calls '$calls'"
expect_grep "nccl-np2 on two GPUs: gpu_comm_test before the layouts" '^gpu_comm_test' <(sed -n 1p "$FAKE_CALLS")
FAKE_GPUS=2 CUDA_VISIBLE_DEVICES=1 run_check "$tmp/o13" --only nccl-np2
expect_grep "nccl-np2: CUDA_VISIBLE_DEVICES=1 of two GPUs is one" '^nccl-np2 +skipped .*1 GPU visible' "$tmp/o13/summary.txt"
rm -f "$build/tests/gpu_comm_test" "$build/tests/gpu_train_test"

if [[ $fails -gt 0 ]]; then echo "FAIL: $fails check(s) of scripts/gpu-check.sh's driver failed" >&2; exit 1; fi
echo "ok   scripts/gpu-check.sh driver: every check passed"
