#!/usr/bin/env bash
# Verifies Cleave's CUDA build on a GPU host in one call, from the bundle scripts/gpu-bundle.sh packs:
#
#   bash scripts/gpu-check.sh OUTDIR                       # on the GPU host, from the repository root
#   bash scripts/gpu-check.sh --only STAGE[,STAGE] OUTDIR   # a targeted second call: those stages only
#   bash scripts/gpu-check.sh --bundle DIR|TARBALL OUTDIR    # another bundle (an unpacked one, say)
#   bash scripts/gpu-check.sh --build-dir build --no-gpu OUTDIR  # self-test against a normal CUDA build
#   options: --budget SECONDS (default 400), --limit STAGE=SECONDS[:FIRST] (repeatable: that stage's own limit, and
#            for a test binary's stage the share of it its first part gets)
#
# Assumes: the repository tree and build-gpu/cleave-gpu-bundle.tar.gz (or --bundle); on the host only bash,
# coreutils (timeout), tar, ldd, the NVIDIA driver and the CUDA runtime libraries (found by
# scripts/gpu-env.sh --runtime: LD_LIBRARY_PATH, ldconfig, /usr/local/cuda, PyTorch's site-packages/nvidia
# wheels); nvidia-smi and compute-sanitizer are used when present. No build dependency of the project is needed.
#
# Stages, short ones first, so that every stage runs in a first call (the bodies are in scripts/gpu-check-stages.sh;
# docs/cuda.md describes each): probe, ldd, cpu-reference, gpu-reference, comm, staged-np1, staged-np2, nccl-np2
# (two GPUs only), nccl-watchdog,
# kernels, ops-parity, train-1rank, test:<bin> (any other gpu_*_test binary), train-layouts; then the second parts of
# the test binaries cut at their first-call share; then the measurements: kernel-timing, profile, bench.
# Each runs in its own process under `timeout` (children included); a failing stage does not stop the next. The run
# is held to the budget, and every stage not yet started keeps half its first-call share of it in reserve: a stage
# gets min(its share, what is left after the reserve) but at least half its share, and is skipped (with the reason)
# only when less than that is left. A test binary cut at its share has run part of its tests ("unfinished"); after the
# other test stages, a second part runs the tests it did not reach (its limit less what it used). summary.txt ends
# with the stages and tests that did not run and the --only line that reruns them.
# Without a visible GPU (or with --no-gpu) the GPU stages report skipped.
# The check unsets NVIDIA_TF32_OVERRIDE (it would turn strict f32 GEMMs into TF32) and sets NCCL_DEBUG=WARN.
#
# OUTDIR, written as the check goes so that a check cut off by a time limit still leaves them:
#   summary.txt   the table, rewritten before and after every stage (the running stage and those not yet run
#                 are listed; a SIGTERM/SIGINT marks the running stage "stopped" and ends the check)
#   log.txt       every stage's log, streamed as it is produced, each stage headed and closed by its row
#   probe.txt     the probe's report; gtest.xml every gtest run's suites (rewritten after each stage);
#   gemm_profile.json  the profile stage's measured GPU profile (to commit into profiles/)
#   kernel_timing.jsonl  the kernel-timing stage's measurements (one JSON object per line)
# Exit status: 0 when no stage failed, 1 otherwise, 2 for bad arguments (an unknown stage name included),
# 128+N when stopped by signal N.
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
repo="$(cd "$(dirname "$self")/.." && pwd)"
stages_sh="$repo/scripts/gpu-check-stages.sh"

# The stages in the order they run: NAME:LIMIT (seconds, one run) or NAME:LIMIT:FIRST for a test binary's stage, whose
# first part is cut at FIRST seconds and continued after the other test stages (at most LIMIT in all). Short stages
# first (comm, the one NCCL all-to-all test, no longer waits behind the kernels), the long test binaries capped, the
# measurements (kernel-timing, profile, bench) last: what they validate, ops-parity has checked already. Half of every
# FIRST (or LIMIT) is kept in reserve for the stages not yet started; on a host of one GPU the halves add up to 395 s
# of the default 400 s budget, so in a first call every stage runs (with two GPUs nccl-np2 runs and adds 40 s: give
# --budget 440). Other gpu_*_test binaries found in the bundle run as test:<binary>
# (120:30) after train-1rank.
plan=(probe:30 ldd:30 cpu-reference:50 gpu-reference:80 comm:90:40 staged-np1:60:30 staged-np2:50 nccl-np2:90
      nccl-watchdog:30 kernels:150:40 ops-parity:150:40 train-1rank:180:40 train-layouts:90 kernel-timing:60 profile:60
      bench:110)
# nccl-np2 needs two GPUs (one per NCCL rank); on a host with fewer it only reports so, and its share is this.
nccl_np2_alone=10
# The measurements: they run after the second parts of the test binaries.
late_stages=" kernel-timing profile bench "
# Binaries with stages of their own (not run again as test:<binary>).
own_stage_bins=" gpu_cuda_test gpu_ops_test gpu_train_test gpu_comm_test gpu_staged_comm_test "

# known_stage NAME: NAME is a stage of the plan or test:gpu_<something>_test
known_stage() {
  local p
  for p in "${plan[@]}"; do [[ "${p%%:*}" == "$1" ]] && return 0; done
  [[ "$1" =~ ^test:gpu_[A-Za-z0-9_]+_test$ ]]
}
stage_names() { local p; for p in "${plan[@]}"; do printf '%s ' "${p%%:*}"; done; printf 'test:<gpu_*_test binary>'; }
# bad_arg MESSAGE: exit 2 with MESSAGE; once OUTDIR exists (a stage checked against the bundle's binaries), also in
# summary.txt and log.txt, so a targeted call with a mistyped stage says why it ran nothing.
bad_arg() {
  echo "gpu-check: $*" >&2
  if [[ -n "${CHECK_OUT:-}" ]]; then
    printf 'Cleave GPU check · bad arguments (exit 2): %s · no stage ran\n' "$*" | tee -a "$CHECK_OUT/log.txt" \
      >"$CHECK_OUT/summary.txt"
  fi
  exit 2
}

# ==== arguments ===================================================================================================
usage() { sed -n '2,9p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bundle_arg="" build_dir="" budget=400 no_gpu=0 outdir="" only=() declare_limits=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bundle) bundle_arg="${2:?--bundle needs a directory or tarball}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --only) IFS=',' read -r -a names <<<"${2:?--only needs STAGE[,STAGE]}"; only+=("${names[@]}"); shift 2 ;;
    --limit) declare_limits+=("${2:?--limit needs STAGE=SECONDS}"); shift 2 ;;
    --no-gpu) no_gpu=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) [[ -z "$outdir" ]] || usage; outdir="$1"; shift ;;
  esac
done
[[ -n "$outdir" ]] || usage
[[ "$budget" =~ ^[0-9]+$ && "$budget" -gt 0 ]] || bad_arg "--budget $budget: want a number of seconds > 0"
for n in "${only[@]}"; do
  known_stage "$n" || bad_arg "unknown stage '$n' in --only; the stages are: $(stage_names)"
done
declare -A limit_of=() first_of=()
for l in "${declare_limits[@]}"; do
  n="${l%%=*}" s="${l#*=}"
  [[ "$l" == *=* ]] && known_stage "$n" \
    || bad_arg "--limit $l: want STAGE=SECONDS[:FIRST]; the stages are: $(stage_names)"
  [[ "$s" =~ ^[0-9]+(:[0-9]+)?$ && "${s%%:*}" -gt 0 ]] || bad_arg "--limit $l: want a number of seconds > 0 after '='"
  limit_of["$n"]="${s%%:*}"
  [[ "$n" == nccl-np2 ]] && declared_nccl_np2_limit=1
  if [[ "$s" == *:* ]]; then
    [[ "${s#*:}" -gt 0 && "${s#*:}" -le "${s%%:*}" ]] || bad_arg "--limit $l: FIRST must be > 0 and at most SECONDS"
    first_of["$n"]="${s#*:}"
  fi
done

mkdir -p "$outdir"
CHECK_OUT="$(cd "$outdir" && pwd)"
rm -f "$CHECK_OUT"/{summary.txt,log.txt,probe.txt,gtest.xml,gemm_profile.json,kernel_timing.jsonl}
: >"$CHECK_OUT/log.txt"
t_start=$SECONDS
deadline=$((t_start + budget))

CHECK_WORK="$(mktemp -d "${TMPDIR:-/tmp}/cleave-gpu-check.XXXXXX")"
trap '[[ "${CLEAVE_GPU_CHECK_KEEP:-0}" == 1 ]] || rm -rf "$CHECK_WORK"' EXIT
# Until the first stage starts, a failing command ends the check (set -e) before summary.txt exists: say where, in
# summary.txt and log.txt, so a cut-short first call on a GPU host still tells why.
setup_failed() {
  printf 'Cleave GPU check · set-up failed (exit %s) at scripts/gpu-check.sh line %s: %s · no stage ran\n' "$1" "$2" \
         "$3" | tee -a "$CHECK_OUT/log.txt" >"$CHECK_OUT/summary.txt"
}
arm_setup_trap() { trap 'setup_failed "$?" "$LINENO" "$BASH_COMMAND"' ERR; }
arm_setup_trap
mkdir -p "$CHECK_WORK"/{results,logs,xml}
export CHECK_OUT CHECK_WORK
export PATH="$PATH:/sbin:/usr/sbin"  # ldconfig, for a user whose PATH lacks them
export GTEST_COLOR=no  # Open MPI hands ranks a pseudo-terminal; colour codes would break the log parsing
# NVIDIA_TF32_OVERRIDE=1 would turn every strict-f32 GEMM into TF32 (and break the fp32 bounds); NCCL's warnings
# explain a failed communicator, its INFO lines would drown the log.
CHECK_TF32_OVERRIDE_WAS="${NVIDIA_TF32_OVERRIDE-unset}"
unset NVIDIA_TF32_OVERRIDE
export NCCL_DEBUG=WARN CHECK_TF32_OVERRIDE_WAS

# ---- the binaries: a bundle (unpacked into the work dir) or a build tree ------------------------------------------
if [[ -n "$build_dir" ]]; then
  build_dir="$(cd "$build_dir" && pwd)"
  CHECK_BUNDLE="$build_dir"
  CHECK_BIN="$CHECK_WORK/bin"
  mkdir -p "$CHECK_BIN"
  [[ -x "$build_dir/bin/cleave" ]] && ln -s "$build_dir/bin/cleave" "$CHECK_BIN/cleave"
  while IFS= read -r f; do ln -sf "$f" "$CHECK_BIN/$(basename "$f")"; done \
    < <(find "$build_dir/tests" -type f -name 'gpu_*_test' -perm -u+x 2>/dev/null)
  CHECK_MPIRUN="$(command -v mpirun || command -v mpiexec || echo mpirun)"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_ess_singleton_isolated=1
else
  bundle="${bundle_arg:-$repo/build-gpu/cleave-gpu-bundle.tar.gz}"
  if [[ -d "$bundle" ]]; then
    CHECK_BUNDLE="$(cd "$bundle" && pwd)"
  elif [[ -f "$bundle" ]]; then
    tar -C "$CHECK_WORK" -xzf "$bundle"
    CHECK_BUNDLE="$CHECK_WORK/cleave-gpu-bundle"
  else
    bad_arg "no bundle at $bundle: build it with scripts/gpu-bundle.sh and upload build-gpu/"
  fi
  [[ -f "$CHECK_BUNDLE/env.sh" ]] || bad_arg "$CHECK_BUNDLE has no env.sh: not a bundle"
  CHECK_HOST_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"  # before the bundle's lib/ is put first (the bench's PyTorch)
  # shellcheck source=/dev/null
  . "$CHECK_BUNDLE/env.sh"
  CHECK_BIN="$CHECK_BUNDLE/bin"
  CHECK_MPIRUN="$CHECK_BUNDLE/mpi/bin/mpirun"
fi
CHECK_HOST_LD_LIBRARY_PATH="${CHECK_HOST_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
export CHECK_BUNDLE CHECK_BIN CHECK_MPIRUN CHECK_HOST_LD_LIBRARY_PATH

# The stages of this run (names): the plan with test:<binary> for the other test binaries, less those --only leaves
# out; each one's limit and first-call share (limit_of, first_of: --limit's values, else the plan's; FIRST = LIMIT for
# a stage that runs once) and whether its first part can be continued (resumable_of).
stages=() all_stages=()
declare -A resumable_of=()
add_stage() {  # add_stage NAME LIMIT [FIRST]
  all_stages+=("$1")
  local lim="${limit_of[$1]:-$2}" first="${first_of[$1]:-${3:-}}"
  if [[ -n "${3:-}" ]]; then
    resumable_of["$1"]=1
    [[ -n "${first_of[$1]:-}" ]] || (( first <= lim )) || first=$lim
  else
    first=$lim
  fi
  limit_of["$1"]=$lim first_of["$1"]=$first
}
for p in "${plan[@]}"; do
  IFS=: read -r n lim first <<<"$p"
  add_stage "$n" "$lim" "$first"
  if [[ "$n" == train-1rank ]]; then
    for f in "$CHECK_BIN"/gpu_*_test; do
      [[ -e "$f" ]] || continue
      [[ "$own_stage_bins" == *" $(basename "$f") "* ]] || add_stage "test:$(basename "$f")" 120 30
    done
  fi
done
for n in "${only[@]}"; do
  [[ " ${all_stages[*]} " == *" $n "* ]] || bad_arg "stage '$n' in --only: no such test binary in $CHECK_BIN"
done
for n in "${all_stages[@]}"; do
  [[ ${#only[@]} -eq 0 || " ${only[*]} " == *" $n "* ]] && stages+=("$n")
done

# ---- CUDA libraries, the GPU, the tools ---------------------------------------------------------------------------
CLEAVE_CUDA_SONAMES="$(tr '\n' ' ' 2>/dev/null <"$CHECK_BUNDLE/cuda-sonames.txt" || true)"
CLEAVE_CUDA_SONAMES="${CLEAVE_CUDA_SONAMES:-libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2}"
export CLEAVE_CUDA_SONAMES
set +e; trap - ERR  # a missing library is the probe's to report
# shellcheck source=/dev/null
. "$repo/scripts/gpu-env.sh" --runtime >"$CHECK_WORK/cuda-env.txt" 2>&1
set -e; arm_setup_trap
sed -n 's/^gpu-env: \([^ ]*\) not found.*/\1/p' "$CHECK_WORK/cuda-env.txt" >"$CHECK_WORK/cuda-missing.txt"
export LD_LIBRARY_PATH

CHECK_GPU=no CHECK_GPU_REASON="nvidia-smi lists no GPU" CHECK_NO_GPU_NOTE=""
if [[ $no_gpu -eq 1 ]]; then
  CHECK_GPU_REASON="--no-gpu given"; CHECK_NO_GPU_NOTE=" (--no-gpu)"
elif command -v nvidia-smi >/dev/null; then
  # A wedged driver can hang nvidia-smi: the driver's own calls are held to 20 s (the stages run under timeout).
  smi_rc=0
  smi_list="$(timeout -k 5 20 nvidia-smi -L 2>/dev/null)" || smi_rc=$?
  if grep -c '^GPU [0-9]' <<<"$smi_list" >/dev/null; then
    CHECK_GPU=yes CHECK_GPU_REASON="nvidia-smi -L"
  elif [[ $smi_rc -eq 124 || $smi_rc -eq 137 ]]; then
    CHECK_GPU=yes CHECK_GPU_REASON="nvidia-smi -L hung for 20 s (a wedged driver?); GPU stages run anyway"
  fi
elif ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  CHECK_GPU=yes CHECK_GPU_REASON="/dev/nvidia0 exists (no nvidia-smi)"
else
  CHECK_GPU_REASON="no nvidia-smi and no /dev/nvidia0"
fi
# The GPUs a process of the check sees: nvidia-smi's count (or /dev/nvidia*), at most CUDA_VISIBLE_DEVICES' entries.
CHECK_GPU_COUNT=0
if [[ "$CHECK_GPU" == yes ]]; then
  CHECK_GPU_COUNT="$(grep -c '^GPU [0-9]' <<<"${smi_list:-}" || true)"
  [[ "$CHECK_GPU_COUNT" -gt 0 ]] || CHECK_GPU_COUNT="$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)"
  if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
    listed="$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)"
    (( listed < CHECK_GPU_COUNT )) && CHECK_GPU_COUNT=$listed
  fi
fi
# With fewer than two, nccl-np2 only reports that: it keeps a short share (unless --limit gave it one).
if (( CHECK_GPU_COUNT < 2 )) && [[ -n "${limit_of[nccl-np2]:-}" && -z "${declared_nccl_np2_limit:-}" ]]; then
  limit_of[nccl-np2]=$nccl_np2_alone first_of[nccl-np2]=$nccl_np2_alone
fi
CHECK_SANITIZER="$(command -v compute-sanitizer || true)"
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$CHECK_SANITIZER" && -x "$c" ]] && CHECK_SANITIZER="$c"
done
# Either may find nothing (no x86-64 libstdc++ in ldconfig's cache: an aarch64 host, a container without
# /etc/ld.so.cache, no ldconfig): the probe reports it, the check goes on.
CHECK_LIBSTDCXX="$(ldconfig -p 2>/dev/null | awk '!found && $1 == "libstdc++.so.6" && /x86-64/ { print $NF; found = 1 }' \
                   || true)"
CHECK_GLIBCXX="$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "${CHECK_LIBSTDCXX:-/dev/null}" 2>/dev/null | sort -uV | tail -n 1 || true)"
export CHECK_GPU CHECK_GPU_REASON CHECK_NO_GPU_NOTE CHECK_GPU_COUNT CHECK_SANITIZER CHECK_LIBSTDCXX CHECK_GLIBCXX

# ==== the report: summary.txt and gtest.xml, rewritten before and after every stage ===============================
rows=()     # finished, skipped or unfinished stages: "name|status|secs|figure" (a second part replaces its row)
tails=()    # the last lines of each failed stage's log
running=""  # the stage now running: "name|start SECONDS|limit"
pending=("${stages[@]}")  # the stages not yet started
mkdir -p "$CHECK_WORK/remaining"  # remaining/STAGE: the gtest filter of the tests an unfinished stage did not reach
gpu_line="$(timeout -k 5 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed -n 1p \
            | sed 's/, / · driver /' || true)"
commit="$(sed -n 's/^commit *: //p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null || true)"
any_fail=0

write_xml() {
  local xmls x label
  shopt -s nullglob
  xmls=("$CHECK_WORK"/xml/*.xml)
  shopt -u nullglob
  [[ ${#xmls[@]} -gt 0 ]] || return 0
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuites name="cleave-gpu-check">'
    for x in "${xmls[@]}"; do
      label="$(basename "$x" .xml)"
      grep -v '^<?xml\|^<testsuites\|^</testsuites>' "$x" | sed "s/<testsuite name=\"/<testsuite name=\"$label./"
    done
    echo '</testsuites>'
  } >"$CHECK_OUT/.gtest.xml.tmp"
  mv -f "$CHECK_OUT/.gtest.xml.tmp" "$CHECK_OUT/gtest.xml"
}

# write_report [FINAL_NOTE]: summary.txt from rows, running and pending (written whole, then renamed into place)
write_report() {
  local r n st secs fig verdict=pass files=""
  [[ $any_fail -eq 1 ]] && verdict=FAIL
  if [[ -n "$running" || ${#pending[@]} -gt 0 || " ${rows[*]}" == *"|unfinished|"* ]]; then
    verdict=INCOMPLETE
    [[ $any_fail -eq 1 ]] && verdict+=" (a stage failed)"
  fi
  write_xml || true
  for f in summary.txt log.txt probe.txt gtest.xml gemm_profile.json kernel_timing.jsonl; do
    [[ -s "$CHECK_OUT/$f" || "$f" == summary.txt ]] && files+=" $f"
  done
  {
    if [[ ${#tails[@]} -gt 0 ]]; then printf '%s\n' "${tails[@]}"; echo; fi
    echo "Cleave GPU check · $(date -u '+%Y-%m-%d %H:%M UTC') · ${commit:-build tree} · ${gpu_line:-no GPU visible}${only:+ · --only ${only[*]}}"
    printf '%-16s %-8s %5s  %s\n' stage status secs result
    for r in "${rows[@]}"; do
      IFS='|' read -r n st secs fig <<<"$r"
      printf '%-16s %-8s %5s  %s\n' "$n" "$st" "$secs" "$fig" | cut -c1-400
    done
    if [[ -n "$running" ]]; then
      IFS='|' read -r n secs fig <<<"$running"
      printf '%-16s %-8s %5s  %s\n' "$n" running "$((SECONDS - secs))" \
             "started with a ${fig}s limit; its log so far ends log.txt"
    fi
    for r in "${pending[@]}"; do printf '%-16s %-8s %5s  %s\n' "$r" pending - "limit ${first_of[$r]}s"; done
    echo "total $((SECONDS - t_start))s (budget ${budget}s) · $verdict · files in $CHECK_OUT:$files"
    [[ $# -gt 0 ]] && echo "$1"
    not_run_report
  } >"$CHECK_OUT/.summary.txt.tmp"
  mv -f "$CHECK_OUT/.summary.txt.tmp" "$CHECK_OUT/summary.txt"
}

# not_run_report: what did not run and how to run it: the stages skipped for the budget, unfinished (with the tests
# not reached), stopped, running or pending, then the failed ones, and one gpu-check.sh line that reruns them all.
not_run_report() {
  local r n st secs fig missing=() failed=() again=() names count first3 total=0
  for r in "${rows[@]}"; do
    IFS='|' read -r n st secs fig <<<"$r"
    case "$st" in
      fail) failed+=("$n"); again+=("$n") ;;
      unfinished)
        names="$(cat "$CHECK_WORK/remaining/${n//:/_}" 2>/dev/null || true)"
        count="$(tr ':' '\n' <<<"$names" | grep -c . || true)"
        first3="$(tr ':' '\n' <<<"$names" | sed -n 1,3p | paste -sd ' ' - || true)"
        if (( count > 3 )); then first3+=" ..."; fi
        missing+=("$n ($count tests not reached: $first3; the list is in log.txt)")
        again+=("$n") ;;
      skipped) if [[ "$fig" == budget:* ]]; then missing+=("$n (skipped for the budget)"); again+=("$n"); fi ;;
      stopped|"not run") missing+=("$n ($st)"); again+=("$n") ;;
    esac
  done
  if [[ -n "$running" ]]; then missing+=("${running%%|*} (running when this was written)"); again+=("${running%%|*}"); fi
  for n in "${pending[@]}"; do missing+=("$n (pending)"); again+=("$n"); done
  if [[ ${#again[@]} -eq 0 ]]; then echo "not run: none · nothing to rerun"; return; fi
  if [[ ${#missing[@]} -gt 0 ]]; then echo "not run: $(printf '%s; ' "${missing[@]}" | sed 's/; $//')"; fi
  if [[ ${#failed[@]} -gt 0 ]]; then echo "failed:  ${failed[*]}"; fi
  for n in "${again[@]}"; do total=$((total + ${limit_of[$n]})); done
  (( total > 200 )) && total=200
  echo "rerun:   bash scripts/gpu-check.sh --budget $total --only $(IFS=,; echo "${again[*]}") \"\$OUT\"" \
       "(timeout_s $((total + 60)); a --limit STAGE=SECONDS gives one more time)"
}

# ==== running the stages ==========================================================================================
stage_pid=""
# on_signal SIG NUMBER: stops the running stage (timeout passes the signal to its process group, then KILL after
# 10 s), records it as stopped and the rest as not run, and ends the check with 128 + NUMBER.
on_signal() {
  local sig="$1" num="$2" i n t0 lim
  trap - TERM INT HUP
  if [[ -n "$stage_pid" ]]; then
    kill -TERM "$stage_pid" 2>/dev/null || true
    for i in $(seq 1 30); do kill -0 "$stage_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  if [[ -n "$running" ]]; then
    IFS='|' read -r n t0 lim <<<"$running"
    rows+=("$n|stopped|$((SECONDS - t0))|the check was stopped by SIG$sig after $((SECONDS - t0))s of this stage's ${lim}s limit; its log ends log.txt")
    tails+=("---- $n (stopped; last lines of its log)" "$(tail -n 8 "$CHECK_OUT/log.txt" | cut -c1-150)")
    printf '\n======== stage %s: stopped by SIG%s after %ss\n' "$n" "$sig" "$((SECONDS - t0))" >>"$CHECK_OUT/log.txt"
    running=""
  fi
  for i in "${pending[@]}"; do rows+=("$i|not run|0|the check was stopped by SIG$sig"); done
  pending=()
  any_fail=1
  write_report "stopped by SIG$sig"
  echo "gpu-check: stopped by SIG$sig" >&2
  cat "$CHECK_OUT/summary.txt"
  exit $((128 + num))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

# reserve_after NAME: seconds kept for the stages not yet started other than NAME (half of each one's first share)
reserve_after() {
  local n sum=0
  for n in "${pending[@]}"; do [[ "$n" == "$1" ]] || sum=$((sum + (first_of[$n] + 1) / 2)); done
  echo "$sum"
}

# run_stage NAME PART: one stage in its own process group under `timeout`, its output appended to log.txt as it comes.
# PART 1: its first run, given min(its first share, what is left less the reserve), at least half its share, skipped
# when less than that is left. PART 2: the tests a first part cut at its share did not reach, given what is left of
# its limit (at most what is left of the budget after the reserve); its row replaces the first part's.
run_stage() {
  local name="$1" part="$2" left need limit t0 rc=0 st fig secs offset log capped=0 first_row="" i row_at=${#rows[@]}
  log="$CHECK_WORK/logs/${name//:/_}.part$part.log"
  left=$((deadline - SECONDS))
  if [[ $part -eq 1 ]]; then
    local kept=()  # started (or skipped): no longer pending, no longer in the reserve
    for i in "${pending[@]}"; do [[ "$i" == "$name" ]] || kept+=("$i"); done
    pending=("${kept[@]}")
    need=$(( (first_of[$name] + 1) / 2 ))
    limit=$(( left - $(reserve_after "$name") ))
    (( limit > first_of[$name] )) && limit=${first_of[$name]}
    (( limit < need )) && limit=$need
    fig="budget: needs at least ${need}s (half its ${first_of[$name]}s first-call share),"
    fig+=" ${left}s of the ${budget}s left"
    [[ -n "${resumable_of[$name]:-}" ]] && (( limit < limit_of[$name] )) && capped=1
  else
    for i in "${!rows[@]}"; do if [[ "${rows[$i]%%|*}" == "$name" ]]; then first_row="${rows[$i]}" row_at=$i; fi; done
    IFS='|' read -r _ _ secs _ <<<"$first_row"
    limit=$(( limit_of[$name] - secs ))
    need=$(( limit < 10 ? limit : 10 ))
    # The measurements not yet started keep their reserve: a second part is extra.
    left=$(( left - $(reserve_after "") ))
    fig="budget: its second part needs at least ${need}s, ${left}s of the ${budget}s left after the reserve"
  fi
  if (( left < need || limit <= 0 )); then
    echo "gpu-check: $(printf '%-16s' "$name") skipped ($fig)"
    printf '======== stage %s: skipped, %s\n\n' "$name" "$fig" >>"$CHECK_OUT/log.txt"
    if [[ $part -eq 1 ]]; then rows+=("$name|skipped|0|$fig")
    else rows[row_at]="${first_row%|*}|${first_row##*|}; part 2 not run (${fig#budget: })"; fi
    write_report
    return
  fi
  (( limit > left )) && limit=$left
  printf 'gpu-check: %-16s (limit %3ds%s) ... ' "$name" "$limit" "$( ((part == 2)) && echo ', part 2')"
  printf '======== stage %s (limit %ss%s) started %s\n' "$name" "$limit" \
    "$( ((part == 2)) && echo ', part 2: the tests part 1 did not reach')" "$(date -u +%H:%M:%S)" >>"$CHECK_OUT/log.txt"
  offset="$(stat -c %s "$CHECK_OUT/log.txt")"
  running="$name|$SECONDS|$limit"
  write_report
  t0=$SECONDS
  rm -f "$CHECK_WORK/results/$name"
  CHECK_STAGE_LIMIT="$limit" CHECK_STAGE_PART="$part" CHECK_STAGE_CAPPED="$capped" \
    timeout -k 10 "$limit" bash "$stages_sh" "$name" >>"$CHECK_OUT/log.txt" 2>&1 </dev/null &
  stage_pid=$!
  wait "$stage_pid" || rc=$?
  stage_pid=""
  secs=$((SECONDS - t0))
  tail -c +"$((offset + 1))" "$CHECK_OUT/log.txt" >"$log"
  if [[ -f "$CHECK_WORK/results/$name" ]]; then
    IFS='|' read -r st fig <"$CHECK_WORK/results/$name"
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then st=fail fig="timed out after ${limit}s; $fig"; fi
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    st=fail fig="timed out after ${limit}s (its log is in log.txt)"
  else
    st=fail fig="the stage exited $rc without a result"
  fi
  if [[ $part -eq 2 ]]; then
    local st1 secs1 fig1
    IFS='|' read -r _ st1 secs1 fig1 <<<"$first_row"
    # A failure in the first part fails the stage; the row keeps both parts' figures.
    if [[ "$(cat "$CHECK_WORK/remaining/${name//:/_}.failed" 2>/dev/null || true)" =~ ^[1-9] ]]; then st=fail; fi
    fig="part 1 (${secs1}s): $fig1; part 2 (${secs}s): $fig"
    secs=$((secs1 + secs))
  fi
  echo "$st (${secs}s)"
  printf '======== stage %s: %s, %ss, %s\n\n' "$name" "$st" "$secs" "$fig" >>"$CHECK_OUT/log.txt"
  running=""
  rows[row_at]="$name|$st|$secs|$fig"  # a second part's row replaces its first part's
  if [[ "$st" == fail ]]; then
    any_fail=1
    if [[ -s "$log" ]]; then tails+=("---- $name (last lines; full log in log.txt)" "$(tail -n 6 "$log" | cut -c1-150)"); fi
  fi
  write_report
}

trap - ERR  # set-up done: from here every stage leaves its row, and summary.txt is rewritten around each
echo "gpu-check: bundle $CHECK_BUNDLE, GPU visible: $CHECK_GPU ($CHECK_GPU_REASON), budget ${budget}s," \
     "stages: ${stages[*]}"
# The test stages, then the second parts of those cut at their share, then the measurements.
for name in "${stages[@]}"; do [[ "$late_stages" == *" $name "* ]] || run_stage "$name" 1; done
for r in "${rows[@]}"; do
  [[ "$r" == *"|unfinished|"* ]] && run_stage "${r%%|*}" 2
done
for name in "${stages[@]}"; do [[ "$late_stages" == *" $name "* ]] && run_stage "$name" 1; done

set +e  # only reporting from here on
write_report
echo
cat "$CHECK_OUT/summary.txt"
exit "$any_fail"
