#!/usr/bin/env bash
# The stage bodies of scripts/gpu-check.sh: `bash scripts/gpu-check-stages.sh STAGE` runs one stage, streaming its
# log to stdout and writing its row (STATUS|FIGURE, STATUS pass, fail, skipped or unfinished) to
# $CHECK_WORK/results/STAGE.
# The driver (gpu-check.sh) runs each stage in its own process under `timeout`, with this environment:
#   CHECK_OUT CHECK_WORK        the output folder and the check's private work folder (results/, xml/, runs/)
#   CHECK_BUNDLE CHECK_BIN      the unpacked bundle (or build tree) and the folder of its binaries
#   CHECK_MPIRUN                mpirun of the bundle (or the system's, with --build-dir)
#   CHECK_GPU CHECK_GPU_REASON CHECK_NO_GPU_NOTE   "yes" when a GPU is visible, why (not), and a note for rows
#   CHECK_GPU_COUNT             the GPUs a process sees (nvidia-smi's, at most CUDA_VISIBLE_DEVICES' entries); 0 without
#   CHECK_SANITIZER             compute-sanitizer, or empty
#   CHECK_STAGE_LIMIT           the seconds this stage was given (its own limit or what was left of the budget)
#   CHECK_STAGE_PART CHECK_STAGE_CAPPED  1 or 2 (a second part runs the tests a first part did not reach); 1 when a
#                               first part is cut at its first-call share (a time-out there is unfinished, not a hang)
#   CHECK_LIBSTDCXX CHECK_GLIBCXX CHECK_HOST_LD_LIBRARY_PATH CHECK_TF32_OVERRIDE_WAS CLEAVE_CUDA_SONAMES (probe, bench)
# Invariant: every stage ends with exactly one result written, whatever failed inside it (no `set -e` here); the
# log goes to stdout as it is produced (binaries run under `tee`), so a stage cut off by a time limit has left
# everything it printed in OUTDIR/log.txt.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# result STATUS FIGURE: the stage's row in the summary (STATUS: pass, fail, skipped or unfinished)
result() { printf '%s|%s\n' "$1" "$2" >"$CHECK_WORK/results/$CHECK_STAGE"; }

# stage_left: seconds left of this stage's limit
stage_left() { echo $(( ${CHECK_STAGE_LIMIT:-150} - SECONDS )); }

# gtest_counts LOG: sets ran passed failed skipped from the last gtest summary in LOG (empty when none)
gtest_counts() {
  ran="$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$1" | tail -n 1)"
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -n 1)"
  failed="$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$1" | tail -n 1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$1" | tail -n 1)"
  failed="${failed:-0}" skipped="${skipped:-0}"
}

# judge_gtest RC LOG [GPU_VISIBLE]: the result of a gtest run from its exit status and its own summary. With a
# GPU visible (the default) a skipped test is a failure: the gpu tests skip only when they cannot use a device.
judge_gtest() {
  local rc="$1" log="$2" gpu_visible="${3:-1}"
  gtest_counts "$log"
  if [[ -z "$ran" ]]; then
    local last how="exited $rc before its summary"
    last="$(grep -o '^\[ RUN      \] .*' "$log" | tail -n 1 | sed 's/^\[ RUN      \] //')"
    [[ "$rc" -eq 124 || "$rc" -eq 137 ]] && how="timed out (exit $rc)"
    result fail "$how${last:+ (last test started: $last)}"
  elif [[ "$rc" -ne 0 || "$failed" -gt 0 ]]; then
    result fail "$failed of $ran failed ($(grep -o '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$log" | sed -n 1,2p \
                 | sed 's/^\[  FAILED  \] //' | tr '\n' ' ')...), exit $rc"
  elif [[ "$gpu_visible" -eq 1 && "$skipped" -gt 0 ]]; then
    result fail "$skipped of $ran skipped although a GPU is visible: $(grep -A1 -m1 ': Skipped$' "$log" | tail -n 1)"
  elif [[ "$ran" -eq 0 ]]; then
    result fail "no test ran"
  else
    result pass "$passed passed, $skipped skipped of $ran"
  fi
}

# read_result: sets st and fig from this stage's result file
read_result() { IFS='|' read -r st fig <"$CHECK_WORK/results/$CHECK_STAGE"; }

# ==== sticky CUDA errors: rerun without the test that broke the binary, that test alone under memcheck ==========
# A kernel fault (illegal address, launch failure, device assert, ...) is sticky: the CUDA context is lost and every
# later test of the process fails with the same error, or the process dies. cudaGetErrorString's texts and the
# error names, as CLEAVE_CUDA_CHECK and NCCL print them.
sticky_re='an illegal memory access was encountered|unspecified launch failure|misaligned address|an illegal instruction was encountered|invalid program counter|hardware stack error|device-side assert triggered|the launch timed out and was terminated|uncorrectable ECC error encountered|cudaErrorIllegalAddress|cudaErrorLaunchFailure|cudaErrorMisalignedAddress|cudaErrorAssert|CUDA_ERROR_ILLEGAL_ADDRESS|CUDA_ERROR_LAUNCH_FAILED'

# sticky_culprit LOG RC: "TEST<TAB>REASON" for the test that broke a gtest run, or nothing: the first test whose
# output holds a sticky CUDA error; else, when the binary never reached its summary, the last test it started and
# did not finish (it crashed, or hung when RC is 124/137).
sticky_culprit() {
  awk -v re="$sticky_re" -v rc="$2" '
    /^\[ RUN      \] / { cur = substr($0, 14); last = cur; open = 1 }
    found == "" && cur != "" && $0 ~ re { found = cur; match($0, re); why = substr($0, RSTART, RLENGTH) }
    /^\[       OK \] |^\[  FAILED  \] |^\[  SKIPPED \] / { cur = ""; open = 0 }
    /^\[==========\] [0-9]+ tests? from .* ran\./ { summary = 1 }
    END {
      if (found != "") printf "%s\tsticky CUDA error (%s)\n", found, why
      else if (!summary && open && last != "")
        printf "%s\t%s\n", last, ((rc == 124 || rc == 137) ? "hung" : "crashed (exit " rc ")")
    }' "$1"
}

# exclude_test FILTER TEST: the gtest filter FILTER (POSITIVE[-NEGATIVE], ':'-separated; empty = all) without TEST
exclude_test() { if [[ "$1" == *-* ]]; then printf '%s:%s' "$1" "$2"; else printf '%s-%s' "$1" "$2"; fi; }

# memcheck_one BIN TEST SECONDS: TEST alone under compute-sanitizer memcheck with CUDA_LAUNCH_BLOCKING=1 (the fault
# reported at its kernel); streams the tool's log and sets mc_figure: the error count, the first error and its place.
memcheck_one() {
  local bin="$1" test="$2" secs="$3" rc log="$CHECK_WORK/memcheck.log" errors first at
  if [[ -z "$CHECK_SANITIZER" ]]; then mc_figure="memcheck not run: compute-sanitizer not found"; return; fi
  echo "+ CUDA_LAUNCH_BLOCKING=1 compute-sanitizer --tool memcheck $(basename "$bin") --gtest_filter=$test"
  CUDA_LAUNCH_BLOCKING=1 OMP_WAIT_POLICY=passive timeout --foreground -k 5 "$secs" "$CHECK_SANITIZER" --tool memcheck \
    --leak-check no --report-api-errors no --error-exitcode 97 "$bin" --gtest_filter="$test" 2>&1 | tee "$log"
  rc="${PIPESTATUS[0]}"
  if grep -qi 'device not supported\|not supported on this\|unable to run on' "$log"; then
    mc_figure="memcheck could not run: $(grep -i -m1 'not supported\|unable to run' "$log" | cut -c1-80)"; return
  fi
  errors="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -n 1)"
  first="$(grep -E -m1 '^=+ +(Invalid|Out-of-range|Misaligned|Malformed|Hardware|Illegal|Barrier|Uninitialized|Program hit|Cuda)' \
           "$log" | sed 's/^=* *//' | cut -c1-70)"
  at="$(grep -E -m1 '^=+ +at ' "$log" | sed 's/^=* *at //' | cut -c1-70)"
  if [[ -z "$errors" ]]; then mc_figure="memcheck exited $rc without an error summary"
  else mc_figure="memcheck: $errors error(s)${first:+: $first}${at:+ at $at}"; fi
}

# list_tests BIN FILTER: BIN's tests under FILTER (empty = all), one Suite.Name a line (gtest's own listing, less the
# DISABLED_ tests it lists but does not run unless GTEST_ALSO_RUN_DISABLED_TESTS=1)
list_tests() {
  local fargs=() disabled="${GTEST_ALSO_RUN_DISABLED_TESTS:-0}"
  [[ -n "$2" ]] && fargs=(--gtest_filter="$2")
  timeout --foreground -k 5 30 "$1" --gtest_list_tests "${fargs[@]}" 2>/dev/null \
    | awk '/^[^ ]/ { suite = $1 } /^  [^ ]/ && suite != "" { print suite $1 }' \
    | if [[ "$disabled" == 1 ]]; then cat; else grep -v '^DISABLED_\|[./]DISABLED_' || true; fi
}

# record_unfinished BIN FILTER LOG SECONDS: a first part cut at its share (CHECK_STAGE_CAPPED=1) is not a hang: the
# tests it did not reach (BIN's tests under FILTER less those LOG finished) go to $CHECK_WORK/remaining/STAGE as a
# gtest filter, the failures it had to remaining/STAGE.failed, and the row says "unfinished"; the driver runs the
# rest as the stage's second part after the other test stages.
record_unfinished() {
  local bin="$1" filter="$2" log="$3" secs="$4" file="$CHECK_WORK/remaining/${CHECK_STAGE//:/_}" listed left done
  done="$(sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([^ ]*\).*/\2/p' "$log" | sort -u)"
  listed="$(list_tests "$bin" "$filter")"
  left="$(grep -vxF -f <(printf '%s\n' "$done") <<<"$listed" | grep . | paste -sd ':' -)"
  printf '%s' "$left" >"$file"
  local p f n r
  p="$(grep -c '^\[       OK \] ' "$log")" f="$(grep -c '^\[  FAILED  \] ' "$log")"
  n="$(grep -c . <<<"$done")" r="$(tr ':' '\n' <<<"$left" | grep -c .)"
  echo "$f" >"$file.failed"
  echo "gpu-check: the first part reached its ${secs}s share after $n tests; the $r not reached run after the other" \
       "test stages: $left"
  if [[ -z "$listed" ]]; then result fail "no result within ${secs}s and --gtest_list_tests listed nothing"; return; fi
  result unfinished "$p passed, $f failed$( ((f > 0)) && echo " ($(grep -o '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$log" \
    | sed -n 1,2p | sed 's/^\[  FAILED  \] //' | tr '\n' ' ')...)") in its ${secs}s first share; $r not reached (from $(
    tr ':' '\n' <<<"$left" | sed -n 1p))"
}

# gtest_with_recovery BIN FILTER [GPU_VISIBLE]: BIN's tests (FILTER may be empty) with gtest XML, judged as
# judge_gtest does. When one test broke the run (sticky_culprit), BIN is run once more without it, so the other
# tests still report, and, for a sticky error or a crash, that test alone under memcheck_one; the row then names
# the test, the reason, the rerun's result and memcheck's. The first run gets the stage's time less a reserve of a
# third (at most 90 s) for the recovery.
gtest_with_recovery() {
  local bin="$1" filter="$2" gpu_visible="${3:-1}" rc=0 first reserve culprit test why
  local log="$CHECK_WORK/gtest.log" fargs=() label="$CHECK_STAGE"
  # A second part runs the tests the first did not reach (record_unfinished), under its own XML name.
  if [[ "${CHECK_STAGE_PART:-1}" == 2 ]]; then
    filter="$(cat "$CHECK_WORK/remaining/${CHECK_STAGE//:/_}")" label="$CHECK_STAGE.part2"
  fi
  [[ -n "$filter" ]] && fargs=(--gtest_filter="$filter")
  reserve=$(( ${CHECK_STAGE_LIMIT:-150} / 3 )); (( reserve > 90 )) && reserve=90
  first=$(( $(stage_left) - reserve ))
  if (( first < 5 )); then first=$(( $(stage_left) - 1 )); (( first > 5 )) && first=5; (( first < 1 )) && first=1; fi
  echo "+ $(basename "$bin") ${fargs[*]} (at most ${first}s)"
  OMP_WAIT_POLICY=passive timeout --foreground -k 5 "$first" "$bin" "${fargs[@]}" \
    --gtest_output="xml:$CHECK_WORK/xml/$label.xml" 2>&1 | tee "$log"
  rc="${PIPESTATUS[0]}"
  judge_gtest "$rc" "$log" "$gpu_visible"
  culprit="$(sticky_culprit "$log" "$rc")"
  [[ -n "$culprit" ]] || return 0
  if [[ "${CHECK_STAGE_CAPPED:-0}" == 1 && "$culprit" == *$'\t'hung ]]; then
    record_unfinished "$bin" "$filter" "$log" "$first"
    return 0
  fi
  test="${culprit%%$'\t'*}" why="${culprit#*$'\t'}"
  local st fig st2 fig2 mc_figure="" left
  read_result
  local hung=0
  if [[ "$why" == hung ]]; then hung=1 why="no result within ${first}s (hung or slow)"; fi
  echo "gpu-check: $test broke the run: $why; rerunning once without it"
  left="$(stage_left)"
  if (( left < 3 )); then result fail "$why in $test; no time left to rerun ($fig)"; return 0; fi
  local filter2 xml2="$CHECK_WORK/xml/$label.rerun.xml" secs=$(( left - 1 ))
  filter2="$(exclude_test "$filter" "$test")"
  # After a fault the rerun leaves time for memcheck: two thirds of what is left.
  [[ $hung -eq 1 ]] || secs=$(( left * 2 / 3 ))
  echo "+ $(basename "$bin") --gtest_filter=$filter2 (at most ${secs}s)"
  OMP_WAIT_POLICY=passive timeout --foreground -k 5 "$secs" "$bin" --gtest_filter="$filter2" \
    --gtest_output="xml:$xml2" 2>&1 | tee "$CHECK_WORK/gtest-rerun.log"
  rc="${PIPESTATUS[0]}"
  judge_gtest "$rc" "$CHECK_WORK/gtest-rerun.log" "$gpu_visible"
  # A first part's rerun cut at the share: the tests it did not reach go to the second part, the culprit counts as
  # a failure there (the stage fails however the rest goes).
  local final=fail rest
  if [[ "${CHECK_STAGE_CAPPED:-0}" == 1 ]]; then
    rest="$(sticky_culprit "$CHECK_WORK/gtest-rerun.log" "$rc")"
    if [[ "$rest" == *$'\t'hung ]]; then
      record_unfinished "$bin" "$filter2" "$CHECK_WORK/gtest-rerun.log" "$secs"
      rest="$CHECK_WORK/remaining/${CHECK_STAGE//:/_}.failed"
      echo $(( $(cat "$rest") + 1 )) >"$rest"
      final=unfinished
    fi
  fi
  IFS='|' read -r st2 fig2 <"$CHECK_WORK/results/$CHECK_STAGE"
  left="$(stage_left)"
  if [[ $hung -eq 0 ]]; then
    if (( left >= 5 )); then memcheck_one "$bin" "$test" "$((left - 2))"
    else mc_figure="memcheck not run: no time left"; fi
    echo "gpu-check: $mc_figure"
  fi
  result "$final" "$why in $test; rerun without it: $st2 ($fig2)${mc_figure:+; $mc_figure}"
}

# ==== the stages =================================================================================================
stage_probe() {
  local p="$CHECK_OUT/probe.txt"
  {
    echo "== host"
    echo "date     : $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "kernel   : $(uname -srm)"
    echo "os       : $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)"
    echo "cpu      : $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)"
    echo "memory   : $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "/dev/shm : $(df -h /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 " total, " $4 " free" }')"
    echo "glibc    : $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "libstdc++: ${CHECK_LIBSTDCXX:-not found} (newest $CHECK_GLIBCXX)"
    echo "== GPU"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>&1
      nvidia-smi --query-gpu=index,compute_mode,ecc.mode.current,mig.mode.current,persistence_mode,clocks.max.sm,power.limit \
        --format=csv 2>&1
      nvidia-smi 2>&1 | sed -n 's/.*\(Driver Version: [0-9.]*\).*\(CUDA Version: [0-9.]*\).*/\1  \2/p' | sed -n 1p
    else
      echo "nvidia-smi not found"
    fi
    ls /dev/nvidia* 2>/dev/null | tr '\n' ' '; echo
    echo "gpu visible: $CHECK_GPU ($CHECK_GPU_REASON)"
    echo "== environment (CUDA, NCCL, NVIDIA, OMPI/OPAL/PMIX, LD_; the check sets NCCL_DEBUG=WARN and unsets"
    echo "   NVIDIA_TF32_OVERRIDE, which was: ${CHECK_TF32_OVERRIDE_WAS:-unset})"
    env | grep -E '^(CUDA|NCCL|NVIDIA|OMPI|OPAL|PMIX|LD_)' | sort
    echo "== ulimit -a"
    ulimit -a
    echo "== CUDA libraries (scripts/gpu-env.sh --runtime; CLEAVE_CUDA_SONAMES=$CLEAVE_CUDA_SONAMES)"
    cat "$CHECK_WORK/cuda-env.txt"
    echo "== tools"
    echo "nvcc     : $(command -v nvcc >/dev/null && nvcc --version | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not found')"
    echo "sanitizer: ${CHECK_SANITIZER:-not found}"
    echo "mpirun   : $CHECK_MPIRUN"
    echo "== bundle ($CHECK_BUNDLE)"
    sed -n '1,/^files:/p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null | grep -v '^files:' || echo "(no MANIFEST.txt: not a bundle)"
  } >"$p" 2>&1
  cat "$p"
  local gpu figure host_glibc need_glibc need_glibcxx problems="" modes
  gpu="$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p \
         | sed 's/, / · driver /; s/, / · sm /')"
  # Compute mode, ECC, MIG of GPU 0: "Exclusive_Process" or MIG "Enabled" change what the later stages can do.
  modes="$(nvidia-smi --query-gpu=compute_mode,ecc.mode.current,mig.mode.current --format=csv,noheader 2>/dev/null \
           | sed -n 1p | awk -F', *' 'NF >= 3 { printf "%s, ECC %s, MIG %s", $1, $2, $3 }')"
  host_glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')"
  need_glibc="$(sed -n 's/^host needs *: GLIBC_\([0-9.]*\).*/\1/p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null)"
  need_glibcxx="$(sed -n 's/^host needs *: .*GLIBCXX_\([0-9.]*\).*/\1/p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null)"
  older() { [[ -n "$1" && -n "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | sed -n 1p)" != "$2" ]]; }
  if older "$host_glibc" "$need_glibc"; then problems+="glibc $host_glibc < $need_glibc needed; "; fi
  if older "${CHECK_GLIBCXX#GLIBCXX_}" "$need_glibcxx"; then
    problems+="libstdc++ $CHECK_GLIBCXX < GLIBCXX_$need_glibcxx needed; "
  fi
  # Without a GPU the driver's libcuda.so.1 may well be absent; with one it must be found.
  local missing
  missing="$(tr '\n' ' ' <"$CHECK_WORK/cuda-missing.txt")"
  [[ "$CHECK_GPU" == yes ]] || missing="${missing//libcuda.so.1 /}"
  if [[ -n "$missing" ]]; then problems+="not found: $missing; "; fi
  figure="${gpu:-no GPU visible}${modes:+ · $modes} · glibc ${host_glibc:-?} · $( (. /etc/os-release && echo "$ID $VERSION_ID") 2>/dev/null)"
  if [[ -n "$problems" ]]; then result fail "$problems$figure"; else result pass "$figure"; fi
}

stage_ldd() {
  local files=() f n=0 bad=0 out
  for f in "$CHECK_BIN"/*; do [[ -e "$f" ]] && files+=("$(readlink -f "$f")"); done
  # A bundle's libraries, Open MPI programs and components (a --build-dir run has none of these folders).
  for f in "$CHECK_BUNDLE"/lib/* "$CHECK_BUNDLE"/mpi/bin/* "$CHECK_BUNDLE"/pmix/lib/pmix/*.so \
           $(find "$CHECK_BUNDLE/mpi" -name 'mca_*.so' 2>/dev/null); do
    [[ -f "$f" && ! -L "$f" ]] && files+=("$f")
  done
  for f in "${files[@]}"; do
    n=$((n + 1))
    out="$(ldd "$f" 2>&1 || true)"
    if grep -q 'not found\|not a dynamic executable' <<<"$out"; then
      if grep -q 'not a dynamic executable' <<<"$out"; then continue; fi
      bad=$((bad + 1))
      echo "== ${f#"$CHECK_BUNDLE"/}"; grep 'not found' <<<"$out"
    fi
  done
  echo "checked $n files, $bad with unresolved libraries"
  echo "== the CUDA libraries the test binaries load"
  for f in "$CHECK_BIN"/*; do ldd "$f" 2>/dev/null; done \
    | awk '$1 ~ /^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl)\.so/ { print $1, $2, $3 }' | sort -u
  if [[ $bad -eq 0 ]]; then result pass "$n files, every library found"
  else result fail "$bad of $n files miss libraries: $(grep -h -o '[^[:space:]]* => not found' \
                   <<<"$(for f in "${files[@]}"; do ldd "$f" 2>&1; done)" | sort -u | sed -n 1,3p | tr '\n' ' ')"; fi
}

# losses FILE: "step loss" for each training step in a metrics.jsonl
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([-0-9.eE+]*\),.*/\1 \2/p' "$1"; }

# compare_losses REF RUN TOL: compares the per-step losses of two metrics.jsonl; prints one line
#   "OK|BAD <figure>": OK when RUN has every step of REF and none differs by more than TOL relative to REF. The
#   figure: steps compared, the first step's difference, the first step past TOL, the worst difference and its step.
compare_losses() {
  local ref="$1" run="$2" tol="$3" m
  m="$(losses "$ref" | wc -l)"
  join <(losses "$ref" | sort -k1,1) <(losses "$run" | sort -k1,1) | sort -n -k1,1 \
    | awk -v tol="$tol" -v m="$m" '
        { d = $3 - $2; if (d < 0) d = -d; a = ($2 < 0 ? -$2 : $2); r = (a > 0 ? d / a : d)
          if (n == 0) { s1 = $1; r1 = r }
          if (r > w || n == 0) { w = r; ws = $1 }
          if (past == "" && r > tol) past = $1
          n++ }
        END {
          ok = (n > 0 && n == m && past == "")
          printf "%s %d of %d steps, step %s diff %.2e, ", (ok ? "OK" : "BAD"), n, m, (n ? s1 : "-"), r1
          printf "%s, worst %.2e at step %s (relative, tolerance %s)\n", \
                 (past == "" ? "none past " tol : "first past " tol ": step " past), w, (n ? ws : "-"), tol
        }'
}

# replay_reference DIR RUN [ARG...]: `cleave train` with the bundle's reference DIR's config and arguments (and
# ARG... after them), into RUN; streams cleave's output
replay_reference() {
  local dir="$1" run="$2" a args=()
  shift 2
  while IFS= read -r a; do a="${a//@BUNDLE@/$CHECK_BUNDLE}"; args+=("${a//@OUT_DIR@/$run}"); done <"$dir/args.txt"
  args+=("$@")
  echo "+ cleave train $dir/config.json ${args[*]}"
  OMP_WAIT_POLICY=passive "$CHECK_BIN/cleave" train "$dir/config.json" "${args[@]}" 2>&1 | tee "$run.log"
  return "${PIPESTATUS[0]}"
}

# references TOL DEVICE_ARGS...: replays every bundled CPU reference with DEVICE_ARGS and compares losses within TOL;
# sets ref_ok (1 when every one matched) and ref_figure; returns 1 when the bundle has no reference.
references() {
  local tol="$1" dir ref run rc line
  shift
  shopt -s nullglob
  local dirs=("$CHECK_BUNDLE"/reference/*/)
  shopt -u nullglob
  ref_ok=1 ref_figure=""
  [[ ${#dirs[@]} -gt 0 ]] || return 1
  mkdir -p "$CHECK_WORK/runs"
  for dir in "${dirs[@]}"; do
    dir="${dir%/}" ref="$(basename "$dir")" run="$CHECK_WORK/runs/$CHECK_STAGE-$ref" rc=0
    replay_reference "$dir" "$run" "$@" || rc=$?
    if [[ $rc -ne 0 || ! -s "$run/metrics.jsonl" ]]; then
      ref_ok=0 ref_figure+="$ref: cleave exited $rc: $(grep -m1 -i 'error' "$run.log" | cut -c1-110); "
      continue
    fi
    line="$(compare_losses "$dir/metrics.jsonl" "$run/metrics.jsonl" "$tol")"
    echo "$ref: ${line#* }"
    [[ "$line" == OK* ]] || ref_ok=0
    ref_figure+="$ref: ${line#* }; "
  done
  ref_figure="${ref_figure%; }"
}

# has_references: the bundle carries at least one CPU reference run
has_references() { compgen -G "$CHECK_BUNDLE/reference/*/args.txt" >/dev/null; }

stage_cpu_reference() {
  # cleave on this host's CPU replays each CPU reference the bundle carries and matches its losses: proves the
  # bundled OpenBLAS/OpenMP/fmt run here and the data and references are in place for the GPU comparisons.
  # Another CPU may pick other OpenBLAS kernels (summation order), hence a tolerance rather than bit equality.
  if ! has_references; then result skipped "no CPU reference in the bundle (a --build-dir run has none)"; return; fi
  [[ -x "$CHECK_BIN/cleave" ]] || { result fail "cleave is not in the bundle"; return; }
  references 1e-3
  if [[ $ref_ok -eq 1 ]]; then result pass "$ref_figure"; else result fail "$ref_figure"; fi
}

stage_gpu_reference() {
  # The bundled CPU reference runs replayed on cuda:0 in a world of one over the staged MPI world (no NCCL), fp32
  # strict (no TF32): the one direct answer to "does training work on this GPU". Per-step losses within 1e-4
  # relative of the CPU's (the bound of tests/gpu/train's fp32 comparison); the figure names the first step past
  # it and the worst. Without a GPU the same replay runs on the CPU (plumbing only) and the stage reports skipped.
  local device=cuda
  if ! has_references; then result skipped "no CPU reference in the bundle (a --build-dir run has none)"; return; fi
  [[ -x "$CHECK_BIN/cleave" ]] || { result fail "cleave is not in the bundle"; return; }
  [[ "$CHECK_GPU" == yes ]] || device=cpu
  references 1e-4 --set device.type="$device" --set parallel.comm_backend=mpi
  if [[ "$device" == cpu ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}; on the CPU: $ref_figure"
  elif [[ $ref_ok -eq 1 ]]; then result pass "cuda:0 vs CPU: $ref_figure"
  else result fail "cuda:0 vs CPU: $ref_figure"; fi
}

# stage_test BIN [FILTER]: a GPU test binary with gtest XML and sticky-error recovery
stage_test() {
  local bin="$1" filter="${2:-}"
  [[ -x "$CHECK_BIN/$bin" ]] || { result fail "$bin is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  gtest_with_recovery "$CHECK_BIN/$bin" "$filter"
}

stage_kernel_timing() {
  # tests/gpu/ops/kernel_timing_test.cpp: gpu_ops_test's DISABLED_ KernelTiming tests (gtest runs them when
  # GTEST_ALSO_RUN_DISABLED_TESTS=1): the exact gradient-norm sum against the rounded one on GPT-2 small's 148
  # gradients, the fused add+RMSNorm kernels against the unfused pairs and the MoE routing weights' gradient, each
  # validated before it is timed. Each test prints one "kernel-timing: " line (the row's figure) and appends its
  # measurements as JSON Lines to OUTDIR/kernel_timing.jsonl. Without a GPU the binary only lists the three tests
  # (plumbing) and the stage skips.
  local bin="$CHECK_BIN/gpu_ops_test" out="$CHECK_OUT/kernel_timing.jsonl" st fig figure listed
  [[ -x "$bin" ]] || { result fail "gpu_ops_test is not in the bundle"; return; }
  rm -f "$out"
  if [[ "$CHECK_GPU" != yes ]]; then
    listed="$("$bin" --gtest_list_tests --gtest_filter='KernelTiming.*' 2>&1 | grep -c '^  DISABLED_')"
    if [[ "$listed" -eq 3 ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}; gpu_ops_test lists its 3 timings"
    else result fail "gpu_ops_test lists $listed KernelTiming tests (want 3)"; fi
    return
  fi
  GTEST_ALSO_RUN_DISABLED_TESTS=1 CLEAVE_KERNEL_TIMING_OUT="$out" gtest_with_recovery "$bin" 'KernelTiming.*'
  read_result
  figure="$(sed -n 's/^kernel-timing: //p' "$CHECK_WORK/gtest.log" | paste -sd ';' - | sed 's/;/; /g')"
  if [[ "$st" == pass ]]; then result pass "${figure:-no kernel-timing line printed}"
  else result "$st" "$fig${figure:+; $figure}"; fi
}

# CLEAVE_SOURCE_DIR for gpu_train_test: the MLP and CNN read data/digits.csv.gz (the bundle's copy when it has one)
train_source_dir() { if [[ -f "$CHECK_BUNDLE/data/digits.csv.gz" ]]; then echo "$CHECK_BUNDLE"; else echo "$repo"; fi; }

stage_train_1rank() {
  # The Trainer on cuda:0 against the same runs on this host's CPU, one rank (tests/gpu/train/train_gpu_test.cpp):
  # the tiny GPT fp32 within 1e-4 of the CPU, two deterministic runs bit-identical, bf16 against fp32,
  # checkpoints moving GPU -> CPU -> GPU, MLP and CNN, no cudaMalloc and exactly 3 host waits in a steady step.
  [[ -x "$CHECK_BIN/gpu_train_test" ]] || { result fail "gpu_train_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  CLEAVE_SOURCE_DIR="$(train_source_dir)" gtest_with_recovery "$CHECK_BIN/gpu_train_test" \
    '-GpuTraining.LayoutsOnOneGpu*:GpuTraining.NcclLayoutsOnTwoGpus*'
}

# mpi_gtest RANKS LOG LABEL BIN ARG...: BIN under the bundle's mpirun; each rank's start is logged ("gpu-check: rank
# r of N"), rank 0's gtest XML is kept as xml/LABEL.xml (gtest would have every rank write one file)
mpi_gtest() {
  local ranks="$1" log="$2" label="$3" bin="$4"
  shift 4
  echo "+ mpirun -np $ranks $(basename "$bin") $*"
  OMP_WAIT_POLICY=passive "$CHECK_MPIRUN" -np "$ranks" --oversubscribe --bind-to none \
    bash -c 'echo "gpu-check: rank ${OMPI_COMM_WORLD_RANK:-?} of ${OMPI_COMM_WORLD_SIZE:-?} on $(uname -n)"
             exec "$0" "$@" --gtest_output="xml:'"$CHECK_WORK"'/xml/'"$CHECK_STAGE"'.rank${OMPI_COMM_WORLD_RANK:-0}.xml"' \
    "$bin" "$@" 2>&1 | tee "$log"
  local rc="${PIPESTATUS[0]}"
  [[ -f "$CHECK_WORK/xml/$CHECK_STAGE.rank0.xml" ]] \
    && mv "$CHECK_WORK/xml/$CHECK_STAGE.rank0.xml" "$CHECK_WORK/xml/$label.xml"
  rm -f "$CHECK_WORK/xml/$CHECK_STAGE".rank*.xml
  return "$rc"
}

# ranks_started LOG RANKS: "" when every rank logged its start, else "mpirun started N of RANKS ranks; "
ranks_started() {
  local started
  started="$(grep -c "^gpu-check: rank [0-9]* of $2 " "$1")"
  [[ "$started" -eq "$2" ]] || echo "mpirun started $started of $2 ranks; "
}

stage_staged() {
  local ranks="$1" rc=0 filter="" note="" gpu_visible=1 st fig
  local bin="$CHECK_BIN/gpu_staged_comm_test"
  [[ -x "$bin" ]] || { result fail "gpu_staged_comm_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then
    filter='StagedHost.*' note=" (StagedHost only, no GPU visible${CHECK_NO_GPU_NOTE})" gpu_visible=0
  fi
  if [[ "$ranks" -eq 1 ]]; then
    gtest_with_recovery "$bin" "$filter" "$gpu_visible"
    read_result
    result "$st" "$fig$note"
    return
  fi
  local log="$CHECK_WORK/gtest-np$ranks.log" fargs=()
  [[ -n "$filter" ]] && fargs=(--gtest_filter="$filter")
  mpi_gtest "$ranks" "$log" "$CHECK_STAGE" "$bin" "${fargs[@]}" || rc=$?
  judge_gtest "$rc" "$log" "$gpu_visible"
  read_result
  local short
  short="$(ranks_started "$log" "$ranks")"
  if [[ -n "$short" ]]; then result fail "$short$fig$note"; else result "$st" "$ranks ranks: $fig$note"; fi
}

stage_nccl_watchdog() {
  # tests/gpu/comm/nccl_completion_test.cpp: wait() returns at once (device-side completion), the watchdog thread
  # aborts the communicator after the 1 s timeout, the next call reports "comm timeout after" and MPI_Abort ends
  # the process (exit 3, kWatchdogExitCode). Disabled in the binary's own stage because it ends the process.
  local bin="$CHECK_BIN/gpu_comm_test" rc reports log="$CHECK_WORK/watchdog.log"
  [[ -x "$bin" ]] || { result fail "gpu_comm_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  "$bin" --gtest_also_run_disabled_tests --gtest_filter='NcclCompletion.DISABLED_TimeoutOnTheDeviceIsReported' 2>&1 \
    | tee "$log"
  rc="${PIPESTATUS[0]}"
  reports="$(grep -c 'comm timeout after' "$log")"
  if [[ "$rc" -ne 0 && "$reports" -gt 0 ]]; then result pass "held op reported after the 1 s timeout, exit $rc"
  else result fail "exit $rc with $reports timeout report(s): want a non-zero exit (3) and the report"; fi
}

stage_train_layouts() {
  # gpu_train_test's layouts: pp2 under every schedule, dp2 + ZeRO 0-3, tp2, cp2 and MoE ep2 with both ranks on
  # cuda:0 through the staged MPI world (mpirun -np 2). The same layouts over NCCL on two GPUs are nccl-np2's.
  local bin="$CHECK_BIN/gpu_train_test" rc=0 st fig short
  [[ -x "$bin" ]] || { result fail "gpu_train_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  CLEAVE_SOURCE_DIR="$(train_source_dir)" mpi_gtest 2 "$CHECK_WORK/gtest-layouts.log" "$CHECK_STAGE" "$bin" \
    --gtest_filter='GpuTraining.LayoutsOnOneGpu*' || rc=$?
  judge_gtest "$rc" "$CHECK_WORK/gtest-layouts.log"
  read_result
  short="$(ranks_started "$CHECK_WORK/gtest-layouts.log" 2)"
  if [[ -n "$short" ]]; then result fail "staged np2 on cuda:0: $short$fig"
  else result "$st" "staged np2 on cuda:0: $fig"; fi
}

# nccl_np2_part LABEL LOG BIN ARG...: one binary under mpirun -np 2 (one GPU each); sets part_st and part_fig
nccl_np2_part() {
  local label="$1" log="$2" rc=0 short st fig
  shift 2
  CLEAVE_SOURCE_DIR="$(train_source_dir)" mpi_gtest 2 "$log" "$label" "$@" || rc=$?
  judge_gtest "$rc" "$log"
  read_result
  short="$(ranks_started "$log" 2)"
  part_st="$st" part_fig="$short$fig"
  [[ -n "$short" ]] && part_st=fail
  return 0
}

stage_nccl_np2() {
  # Two NCCL ranks, one GPU each (ctest's gpu_comm_test_np2 and gpu_train_test_nccl_np2): gpu_comm_test's collectives,
  # batch_p2p, all_to_all_v with 0-row blocks and the deterministic reduction between ranks, then gpu_train_test's
  # NcclLayoutsOnTwoGpus* (pp2, dp2 with ZeRO 0-2, tp2 over the NCCL world against one GPU rank). A host with one GPU
  # cannot answer either: skipped with the count (the lent machine has one).
  local comm="$CHECK_BIN/gpu_comm_test" train="$CHECK_BIN/gpu_train_test" part_st part_fig st1 fig1
  [[ -x "$comm" ]] || { result fail "gpu_comm_test is not in the bundle"; return; }
  [[ -x "$train" ]] || { result fail "gpu_train_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  if (( ${CHECK_GPU_COUNT:-0} < 2 )); then
    result skipped "${CHECK_GPU_COUNT:-0} GPU visible; 2 NCCL ranks need 2 (one each)"
    return
  fi
  nccl_np2_part "$CHECK_STAGE.comm" "$CHECK_WORK/gtest-nccl-comm.log" "$comm"
  st1="$part_st" fig1="$part_fig"
  nccl_np2_part "$CHECK_STAGE.layouts" "$CHECK_WORK/gtest-nccl-layouts.log" "$train" \
    --gtest_filter='GpuTraining.NcclLayoutsOnTwoGpus*'
  if [[ "$st1" == pass && "$part_st" == pass ]]; then result pass "gpu_comm_test: $fig1; layouts: $part_fig"
  else result fail "gpu_comm_test: $st1 ($fig1); layouts: $part_st ($part_fig)"; fi
}

stage_profile() {
  # `cleave profile --gemm` on cuda:0 (engine/cli/profile_gemm.cpp): the forward, input-gradient and weight-gradient
  # GEMMs of GPT blocks (d 768..4096, 1024..8192 tokens, GPT-2's LM head, awkward small ones) through ops::gemm in
  # bf16 (f32 accumulation) and f32 (TF32 off), event-timed and checked against a double reference; efficiency as
  # a fraction of the shipped profile's peaks. Writes OUTDIR/gemm_profile.json for the next session to commit into
  # profiles/ (docs/planner.md, "Measured GPU profiles") and checks that `cleave plan --profile` reads it. Without
  # a GPU the command is run on the CPU (--device cpu --small) so the stage's plumbing is exercised, and the stage
  # reports skipped.
  local out="$CHECK_OUT/gemm_profile.json" base="profiles/h100_sxm.json" rc=0 name="" note="" budget figure
  local log="$CHECK_WORK/profile.log" cfg="$repo/benchmarks/peers/gpt2_124m_gpu.json"
  [[ -x "$CHECK_BIN/cleave" ]] || { result fail "cleave is not in the bundle"; return; }
  rm -f "$out"
  if [[ "$CHECK_GPU" == yes ]]; then
    name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)"
    case "$name" in
      *A100*) base="profiles/a100_80gb_sxm.json" ;;
      *H100*PCIe*|*H100*NVL*) note="; peaks of the H100 SXM assumed for '$name' (lower efficiencies than its own)" ;;
      *H100*|*H200*) ;;
      *) note="; unknown GPU '${name:-?}': peaks of the H100 SXM assumed" ;;
    esac
    budget=$(( ${CHECK_STAGE_LIMIT:-60} - 20 )); (( budget < 10 )) && budget=10
    "$CHECK_BIN/cleave" profile --gemm --base "$repo/$base" --out "$out" --budget "$budget" 2>&1 | tee "$log"
    rc="${PIPESTATUS[0]}"
  else
    "$CHECK_BIN/cleave" profile --gemm --device cpu --small --samples 1 --base "$repo/$base" \
      --peak-tflops-bf16 10 --peak-tflops-f32 10 --out "$CHECK_WORK/cpu_gemm_profile.json" 2>&1 | tee "$log"
    rc="${PIPESTATUS[0]}"
    out="$CHECK_WORK/cpu_gemm_profile.json"
  fi
  if [[ $rc -ne 0 || ! -s "$out" ]]; then
    result fail "cleave profile --gemm exited $rc: $(grep -m1 -i 'error' "$log" | cut -c1-110)"
    return
  fi
  rc=0
  "$CHECK_BIN/cleave" plan "$cfg" --world 8 --profile "$out" >"$CHECK_WORK/plan.log" 2>&1 || rc=$?
  sed -n 1,8p "$CHECK_WORK/plan.log"
  if [[ $rc -ne 0 ]]; then
    result fail "cleave plan --profile refused the written profile: $(grep -m1 -i 'error' "$CHECK_WORK/plan.log" | cut -c1-100)"
    return
  fi
  # "efficiency bf16 at 1e9/1e10/1e11 FLOPs: 0.52/0.70/0.75 (assumed 0.42/0.62/0.70)" -> "bf16 .52/.70/.75 (assumed ...)"
  figure="$(sed -n 's/^efficiency \([a-z0-9]*\) at 1e9\/1e10\/1e11 FLOPs: /\1 /p' "$log" | sed 's/0\././g' | paste -sd ',' - \
            | sed 's/,/, /g')"
  local skipped
  skipped="$(sed -n 's/.* GEMMs timed, \([0-9]*\) skipped by the.*/\1/p' "$log" | tail -n 1)"
  [[ "${skipped:-0}" -gt 0 ]] && note+="; $skipped GEMMs skipped (budget)"
  if [[ "$CHECK_GPU" == yes ]]; then
    result pass "eff@1e9/1e10/1e11 $figure; gemm_profile.json ($base)$note"
  else
    result skipped "no GPU visible${CHECK_NO_GPU_NOTE}; on the CPU: plan read it; $(echo "$figure" | cut -d, -f1)"
  fi
}

# python_free_figure METRICS: cleave's median step time over the timed steps (after 3 warm-up) and tokens/s at it
python_free_figure() {
  local ms n tokens
  ms="$(sed -n 's/^{"step":\([0-9]*\),.*"step_ms":\([0-9.eE+-]*\).*/\1 \2/p' "$1" | awk '$1 > 3 { print $2 }' | sort -g)"
  n="$(printf '%s\n' "$ms" | grep -c .)"
  [[ "$n" -gt 0 ]] || { echo "cleave: no timed step in $1"; return; }
  ms="$(printf '%s\n' "$ms" | sed -n "$(( (n + 1) / 2 ))p")"
  local cfg="$repo/benchmarks/peers/gpt2_124m_gpu.json"
  tokens="$(( $(sed -n 's/.*"seq_len": *\([0-9]*\).*/\1/p' "$cfg") \
              * $(sed -n 's/.*"global_batch_size": *\([0-9]*\).*/\1/p' "$cfg") ))"
  awk -v ms="$ms" -v n="$n" -v t="$tokens" 'BEGIN { printf "cleave %.2f ms/step median of %d, %.0f tok/s", ms, n, t / (ms / 1000) }'
}

stage_bench() {
  # GPT-2 124M shapes in bf16 on cuda:0 (benchmarks/peers/gpt2_124m_gpu.json: batch 4 x 1024 tokens, AdamW):
  # `cleave train` for 3 warm-up + 20 timed steps (median step_ms of metrics.jsonl), then the same model, batch
  # and optimizer in PyTorch eager, eager with the probabilities materialised, and torch.compile
  # (benchmarks/peers/gpt2_gpu_bench.py: tokens/s, MFU = tokens/s x (6 N + 12 L d T) / peak, and the ratios).
  # A benchmark, not a test: it fails only when an implementation that could run failed.
  local cfg="$repo/benchmarks/peers/gpt2_124m_gpu.json" out="$CHECK_WORK/bench" rc py="${CLEAVE_PYTHON:-python3}"
  local cleave_note="" args=()
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  [[ -x "$CHECK_BIN/cleave" ]] || { result fail "cleave is not in the bundle"; return; }
  mkdir -p "$out"
  # Half of the stage's time at most for cleave (the peers' torch.compile needs about a minute).
  timeout --foreground -k 5 $(( ${CHECK_STAGE_LIMIT:-150} / 2 )) "$CHECK_BIN/cleave" train "$cfg" --set train.steps=23 \
    --set "train.out_dir=$out/cleave" 2>&1 | tee "$out/cleave.log"
  rc="${PIPESTATUS[0]}"
  if [[ $rc -eq 0 && -s "$out/cleave/metrics.jsonl" ]]; then args=(--cleave-metrics "$out/cleave/metrics.jsonl")
  else cleave_note="cleave train exited $rc: $(grep -m1 -i 'error' "$out/cleave.log" | cut -c1-120)"; fi
  if ! command -v "$py" >/dev/null; then
    if [[ -n "$cleave_note" ]]; then result fail "$cleave_note; no $py for the PyTorch peers"
    else result pass "$(python_free_figure "$out/cleave/metrics.jsonl"); PyTorch peers skipped: no $py"; fi
    return
  fi
  local left=$(( $(stage_left) - 10 )) modes="eager,eager-math,compile"
  [[ ${#args[@]} -gt 0 ]] && modes="cleave,$modes"
  # The host's own library path: the bundle's lib/ is for cleave, PyTorch brings its own CUDA libraries.
  LD_LIBRARY_PATH="${CHECK_HOST_LD_LIBRARY_PATH:-}" timeout --foreground -k 5 "$(( left > 1 ? left : 1 ))" "$py" \
    "$repo/benchmarks/peers/gpt2_gpu_bench.py" --config "$cfg" --modes "$modes" "${args[@]}" --deadline-s "$left" \
    --json "$out/bench.json" 2>&1 | tee "$out/peers.log"
  rc="${PIPESTATUS[0]}"
  local figure
  figure="$(sed -n 's/^figure: //p' "$out/peers.log" | tail -n 1)"
  if [[ $rc -eq 3 ]]; then  # no PyTorch or no CUDA in it: cleave's figure alone
    figure="$(sed -n 's/^gpt2_gpu_bench: skipped: //p' "$out/peers.log")"
    if [[ -n "$cleave_note" ]]; then result fail "$cleave_note; peers skipped: $figure"
    else result pass "$(python_free_figure "$out/cleave/metrics.jsonl"); peers skipped: $figure"; fi
  elif [[ $rc -ne 0 || -n "$cleave_note" ]]; then
    result fail "${cleave_note:+$cleave_note; }${figure:-gpt2_gpu_bench.py exited $rc}"
  else
    result pass "$figure"
  fi
}

# ==== dispatch ======================================================================================================
CHECK_STAGE="${1:?usage: gpu-check-stages.sh STAGE (run by scripts/gpu-check.sh)}"
case "$CHECK_STAGE" in
  probe) stage_probe ;;
  ldd) stage_ldd ;;
  cpu-reference) stage_cpu_reference ;;
  gpu-reference) stage_gpu_reference ;;
  kernels) stage_test gpu_cuda_test ;;
  ops-parity) stage_test gpu_ops_test ;;
  kernel-timing) stage_kernel_timing ;;
  train-1rank) stage_train_1rank ;;
  comm) stage_test gpu_comm_test ;;
  test:*) stage_test "${CHECK_STAGE#test:}" ;;
  staged-np1) stage_staged 1 ;;
  staged-np2) stage_staged 2 ;;
  nccl-np2) stage_nccl_np2 ;;
  nccl-watchdog) stage_nccl_watchdog ;;
  train-layouts) stage_train_layouts ;;
  profile) stage_profile ;;
  bench) stage_bench ;;
  *) echo "gpu-check-stages: unknown stage $CHECK_STAGE" >&2; exit 2 ;;
esac
exit 0
