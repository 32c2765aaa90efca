#!/usr/bin/env bash
# Verifies Cleave's CUDA build on a GPU host in one call, from the bundle scripts/gpu-bundle.sh packs:
#
#   bash scripts/gpu-check.sh OUTDIR                     # on the GPU host, from the repository root
#   bash scripts/gpu-check.sh --bundle DIR|TARBALL OUTDIR  # another bundle (an unpacked one, say)
#   bash scripts/gpu-check.sh --build-dir build --no-gpu OUTDIR  # self-test against a normal CUDA build
#
# Assumes: the repository tree and build-gpu/cleave-gpu-bundle.tar.gz (or --bundle); on the host only bash,
# coreutils (timeout), tar, ldd, the NVIDIA driver and the CUDA runtime libraries (found by
# scripts/gpu-env.sh --runtime: LD_LIBRARY_PATH, ldconfig, /usr/local/cuda, PyTorch's site-packages/nvidia
# wheels); nvidia-smi and compute-sanitizer are used when present. No build dependency of the project is needed.
#
# Stages, in this order, each in its own process under `timeout` (children included), each logging to its
# own file; a failing stage does not stop the next:
#   probe        GPU, driver, OS, glibc/libstdc++ against what the bundle needs, CUDA libraries found and where
#   ldd          every binary, bundled library and MPI component resolves every library
#   cpu-reference  cleave replays the bundle's CPU reference runs on this host's CPU and matches their losses
#   test:<bin>   each GPU test binary (gpu_*_test but the staged one), gtest XML
#   nccl-watchdog  an NCCL op held on the device past a 1 s timeout must end gpu_comm_test with the timeout report
#   staged-np1   gpu_staged_comm_test, one rank (no GPU: its StagedHost tests, which need none)
#   staged-np2   the same under the bundle's mpirun -np 2 (both ranks on cuda:0)
#   profile      cleave profile --gemm: cuBLASLt GEMM efficiency over GPT training GEMMs, written to
#                OUTDIR/gemm_profile.json (a GPU profile for profiles/) and read back by cleave plan
#   training     gpu_train_test: the Trainer on cuda:0 against the CPU (one rank), then its layouts on one GPU
#                through the staged world (mpirun -np 2), then (2+ GPUs only) its layouts on two GPUs over NCCL
#   bench        GPT-2 124M bf16 tokens/s and MFU: cleave train against PyTorch eager and torch.compile
#                (benchmarks/peers/gpt2_gpu_bench.py), with the ratios
#   memcheck     compute-sanitizer memcheck of the non-GEMM kernel tests, where the tool runs
# Without a visible GPU (or with --no-gpu) every stage that needs one reports "skipped: no GPU visible".
# The whole run is held to a budget (default 450 s, --budget): a stage gets min(its limit, what is left).
#
# OUTDIR receives summary.txt (the table printed last) and at most six other files: log.txt (every stage's
# full log, in order), probe.txt, gtest.xml (every binary's results, suites prefixed with the stage),
# gemm_profile.json (the profile stage's measured GPU profile, to commit into profiles/).
# Exit status: 0 when no stage failed, 1 otherwise, 2 for bad arguments.
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
repo="$(cd "$(dirname "$self")/.." && pwd)"

# ==== stage bodies (run as `gpu-check.sh --stage NAME` by the driver below, with its environment) ============

# result STATUS FIGURE: the stage's row in the summary (STATUS: pass, fail or skipped)
result() { printf '%s|%s\n' "$1" "$2" >"$CHECK_WORK/results/$CHECK_STAGE"; }

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
    local last
    last="$(grep -o '^\[ RUN      \] .*' "$log" | tail -n 1 | sed 's/^\[ RUN      \] //')"
    result fail "exited $rc before its summary${last:+ (last test started: $last)}"
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

stage_probe() {
  local p="$CHECK_OUT/probe.txt"
  {
    echo "== host"
    echo "date     : $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "kernel   : $(uname -srm)"
    echo "os       : $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)"
    echo "cpu      : $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)"
    echo "memory   : $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "glibc    : $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "libstdc++: ${CHECK_LIBSTDCXX:-not found} (newest $CHECK_GLIBCXX)"
    echo "== GPU"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
      nvidia-smi 2>&1 | sed -n 's/.*\(Driver Version: [0-9.]*\).*\(CUDA Version: [0-9.]*\).*/\1  \2/p' | sed -n 1p
    else
      echo "nvidia-smi not found"
    fi
    ls /dev/nvidia* 2>/dev/null | tr '\n' ' '; echo
    echo "gpu visible: $CHECK_GPU ($CHECK_GPU_REASON)"
    echo "== CUDA libraries (scripts/gpu-env.sh --runtime; CLEAVE_CUDA_SONAMES=$CLEAVE_CUDA_SONAMES)"
    cat "$CHECK_WORK/cuda-env.txt"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "== tools"
    echo "nvcc     : $(command -v nvcc >/dev/null && nvcc --version | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not found')"
    echo "sanitizer: ${CHECK_SANITIZER:-not found}"
    echo "mpirun   : $CHECK_MPIRUN"
    echo "== bundle ($CHECK_BUNDLE)"
    sed -n '1,/^files:/p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null | grep -v '^files:' || echo "(no MANIFEST.txt: not a bundle)"
  } >"$p" 2>&1
  cat "$p"
  local gpu figure host_glibc need_glibc need_glibcxx problems=""
  gpu="$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p \
         | sed 's/, / · driver /; s/, / · sm /')"
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
  figure="${gpu:-no GPU visible} · glibc ${host_glibc:-?} · $( (. /etc/os-release && echo "$ID $VERSION_ID") 2>/dev/null)"
  if [[ -n "$problems" ]]; then
    result fail "$problems$figure"
  else
    result pass "$figure"
  fi
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

stage_test() {
  local bin="$1" rc=0
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  OMP_WAIT_POLICY=passive "$CHECK_BIN/$bin" --gtest_output="xml:$CHECK_WORK/xml/$CHECK_STAGE.xml" \
    >"$CHECK_WORK/gtest.log" 2>&1 || rc=$?
  cat "$CHECK_WORK/gtest.log"
  judge_gtest "$rc" "$CHECK_WORK/gtest.log"
}

stage_nccl_watchdog() {
  # tests/gpu/comm/nccl_completion_test.cpp: wait() returns at once (device-side completion), the watchdog thread
  # aborts the communicator after the 1 s timeout, the next call reports "comm timeout after" and MPI_Abort ends
  # the process (exit 3, kWatchdogExitCode). Disabled in the binary's own stage because it ends the process.
  local bin="$CHECK_BIN/gpu_comm_test" rc=0 reports
  [[ -x "$bin" ]] || { result fail "gpu_comm_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  "$bin" --gtest_also_run_disabled_tests --gtest_filter='NcclCompletion.DISABLED_TimeoutOnTheDeviceIsReported' \
    >"$CHECK_WORK/gtest.log" 2>&1 || rc=$?
  cat "$CHECK_WORK/gtest.log"
  reports="$(grep -c 'comm timeout after' "$CHECK_WORK/gtest.log")"
  if [[ "$rc" -ne 0 && "$reports" -gt 0 ]]; then result pass "held op reported after the 1 s timeout, exit $rc"
  else result fail "exit $rc with $reports timeout report(s): want a non-zero exit (3) and the report"; fi
}

stage_staged() {
  local ranks="$1" rc=0 filter=() note=""
  local bin="$CHECK_BIN/gpu_staged_comm_test"
  [[ -x "$bin" ]] || { result fail "gpu_staged_comm_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then
    filter=(--gtest_filter='StagedHost.*'); note=" (StagedHost only, no GPU visible${CHECK_NO_GPU_NOTE})"
  fi
  if [[ "$ranks" -eq 1 ]]; then
    OMP_WAIT_POLICY=passive "$bin" "${filter[@]}" --gtest_output="xml:$CHECK_WORK/xml/$CHECK_STAGE.xml" \
      >"$CHECK_WORK/gtest.log" 2>&1 || rc=$?
  else
    # Each rank writes its own XML (gtest would have both write one file); rank 0's goes into gtest.xml.
    OMP_WAIT_POLICY=passive "$CHECK_MPIRUN" -np "$ranks" --oversubscribe --bind-to none \
      bash -c 'echo "gpu-check: rank ${OMPI_COMM_WORLD_RANK:-?} of ${OMPI_COMM_WORLD_SIZE:-?} on $(uname -n)"
               exec "$0" "$@" --gtest_output="xml:'"$CHECK_WORK"'/xml/'"$CHECK_STAGE"'.rank${OMPI_COMM_WORLD_RANK:-0}.xml"' \
      "$bin" "${filter[@]}" >"$CHECK_WORK/gtest.log" 2>&1 || rc=$?
    [[ -f "$CHECK_WORK/xml/$CHECK_STAGE.rank0.xml" ]] \
      && mv "$CHECK_WORK/xml/$CHECK_STAGE.rank0.xml" "$CHECK_WORK/xml/$CHECK_STAGE.xml"
    rm -f "$CHECK_WORK/xml/$CHECK_STAGE".rank*.xml
  fi
  cat "$CHECK_WORK/gtest.log"
  if [[ "$CHECK_GPU" == yes ]]; then judge_gtest "$rc" "$CHECK_WORK/gtest.log"
  else judge_gtest "$rc" "$CHECK_WORK/gtest.log" 0; fi
  local st fig started
  IFS='|' read -r st fig <"$CHECK_WORK/results/$CHECK_STAGE"
  if [[ "$ranks" -gt 1 ]]; then
    started="$(grep -c "^gpu-check: rank [0-9]* of $ranks " "$CHECK_WORK/gtest.log")"
    if [[ "$started" -ne "$ranks" ]]; then st=fail fig="mpirun started $started of $ranks ranks; $fig"
    else fig="$ranks ranks: $fig"; fi
  fi
  result "$st" "$fig$note"
}

stage_memcheck() {
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  if [[ -z "$CHECK_SANITIZER" ]]; then result skipped "compute-sanitizer not found (PATH, /usr/local/cuda)"; return; fi
  # The non-GEMM kernels: cuBLASLt's own kernels are NVIDIA's to check and slow under memcheck.
  local targets=("gpu_cuda_test:-*Gemm*" "gpu_ops_test:-*Gemm*") t bin filter rc errors total=0 figure="" failed=0
  for t in "${targets[@]}"; do
    bin="${t%%:*}" filter="${t#*:}"
    [[ -x "$CHECK_BIN/$bin" ]] || continue
    rc=0
    OMP_WAIT_POLICY=passive "$CHECK_SANITIZER" --tool memcheck --leak-check no --report-api-errors no \
      --error-exitcode 97 "$CHECK_BIN/$bin" --gtest_filter="$filter" >"$CHECK_WORK/memcheck.log" 2>&1 || rc=$?
    cat "$CHECK_WORK/memcheck.log"
    if grep -qi 'device not supported\|not supported on this\|unable to run on' "$CHECK_WORK/memcheck.log"; then
      result skipped "compute-sanitizer cannot run here: $(grep -i -m1 'not supported\|unable' "$CHECK_WORK/memcheck.log")"
      return
    fi
    errors="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$CHECK_WORK/memcheck.log" | tail -n 1)"
    gtest_counts "$CHECK_WORK/memcheck.log"
    figure+="$bin: ${errors:-?} errors, ${ran:-?} tests; "
    total=$((total + ${errors:-0}))
    if [[ "$rc" -ne 0 || -z "$errors" || -z "$ran" ]]; then failed=1; fi
  done
  [[ -n "$figure" ]] || { result skipped "no test binary to check"; return; }
  if [[ $failed -eq 0 && $total -eq 0 ]]; then result pass "${figure%; }"
  else result fail "${figure%; } (exit status or failures: see log.txt)"; fi
}

# losses FILE: "step loss" for each training step in a metrics.jsonl
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([-0-9.eE+]*\),.*/\1 \2/p' "$1"; }

# replay_reference DIR RUN: `cleave train` with the bundle's reference DIR's config and arguments, into RUN
replay_reference() {
  local dir="$1" run="$2" a args=()
  while IFS= read -r a; do a="${a//@BUNDLE@/$CHECK_BUNDLE}"; args+=("${a//@OUT_DIR@/$run}"); done <"$dir/args.txt"
  echo "+ cleave train $dir/config.json ${args[*]}"
  OMP_WAIT_POLICY=passive "$CHECK_BIN/cleave" train "$dir/config.json" "${args[@]}"
}

stage_cpu_reference() {
  # cleave on this host's CPU replays each CPU reference the bundle carries and matches its losses: proves the
  # bundled OpenBLAS/OpenMP/fmt run here and the data and references are in place for the GPU comparisons.
  # Another CPU may pick other OpenBLAS kernels (summation order), hence a tolerance rather than bit equality.
  local tol=1e-3 dir ref run rc figure="" failed=0 worst n
  shopt -s nullglob
  local dirs=("$CHECK_BUNDLE"/reference/*/)
  shopt -u nullglob
  [[ ${#dirs[@]} -gt 0 ]] || { result skipped "no CPU reference in the bundle (a --build-dir run has none)"; return; }
  for dir in "${dirs[@]}"; do
    dir="${dir%/}" ref="$(basename "$dir")" run="$CHECK_WORK/runs/$(basename "$dir")" rc=0
    replay_reference "$dir" "$run" || rc=$?
    if [[ $rc -ne 0 || ! -s "$run/metrics.jsonl" ]]; then
      failed=1 figure+="$ref: cleave exited $rc; "; continue
    fi
    read -r n worst < <(join <(losses "$dir/metrics.jsonl" | sort -k1,1) <(losses "$run/metrics.jsonl" | sort -k1,1) \
      | awk '{ d = $3 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r; n++ }
             END { printf "%d %.2e\n", n, w }')
    echo "$ref: $n steps compared, worst relative loss difference $worst (tolerance $tol)"
    if [[ "$n" -eq 0 || "$n" -ne "$(losses "$dir/metrics.jsonl" | wc -l)" ]] \
       || awk -v w="$worst" -v t="$tol" 'BEGIN { exit !(w > t) }'; then
      failed=1 figure+="$ref: $n steps, worst rel. loss diff $worst > $tol; "
    else
      figure+="$ref: $n steps, worst rel. loss diff $worst; "
    fi
  done
  if [[ $failed -eq 0 ]]; then result pass "${figure%; }"; else result fail "${figure%; }"; fi
}

stage_training() {
  # The Trainer on cuda:0 against the same runs on this host's CPU (tests/gpu/train/train_gpu_test.cpp): the
  # tiny GPT fp32 within 1e-4 of the CPU, two deterministic runs bit-identical, bf16 against fp32, checkpoints
  # moving GPU -> CPU -> GPU, MLP and CNN, no cudaMalloc and exactly 3 host waits in a steady-state step (one
  # rank); then pp2 under every schedule, dp2 + ZeRO-1 and tp2 with both ranks on cuda:0 through the staged MPI
  # world (mpirun -np 2); where 2 or more GPUs are visible, pp2 / dp2 (ZeRO 0-2) / tp2 on two GPUs through the
  # NCCL world against one GPU rank (mpirun -np 2, one GPU each).
  local bin="$CHECK_BIN/gpu_train_test" rc=0 st1 fig1 src="$repo"
  [[ -x "$bin" ]] || { result fail "gpu_train_test is not in the bundle"; return; }
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  [[ -f "$CHECK_BUNDLE/data/digits.csv.gz" ]] && src="$CHECK_BUNDLE"  # the MLP and CNN read data/digits.csv.gz
  CLEAVE_SOURCE_DIR="$src" OMP_WAIT_POLICY=passive "$bin" \
    --gtest_filter='-GpuTraining.LayoutsOnOneGpu*:GpuTraining.NcclLayoutsOnTwoGpus*' \
    --gtest_output="xml:$CHECK_WORK/xml/$CHECK_STAGE.xml" >"$CHECK_WORK/gtest.log" 2>&1 || rc=$?
  cat "$CHECK_WORK/gtest.log"
  judge_gtest "$rc" "$CHECK_WORK/gtest.log"
  IFS='|' read -r st1 fig1 <"$CHECK_WORK/results/$CHECK_STAGE"
  rc=0
  CLEAVE_SOURCE_DIR="$src" OMP_WAIT_POLICY=passive "$CHECK_MPIRUN" -np 2 --oversubscribe --bind-to none \
    "$bin" --gtest_filter='GpuTraining.LayoutsOnOneGpu*' >"$CHECK_WORK/gtest-np2.log" 2>&1 || rc=$?
  cat "$CHECK_WORK/gtest-np2.log"
  judge_gtest "$rc" "$CHECK_WORK/gtest-np2.log"
  local st2 fig2
  IFS='|' read -r st2 fig2 <"$CHECK_WORK/results/$CHECK_STAGE"
  # Two NCCL ranks need two GPUs (one each): run only where the host has them.
  local gpus st3=pass fig3
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')"
  [[ "$gpus" -gt 0 ]] || gpus="$(ls /dev/nvidia[0-9]* 2>/dev/null | wc -l)"
  if [[ "$gpus" -ge 2 ]]; then
    rc=0
    CLEAVE_SOURCE_DIR="$src" OMP_WAIT_POLICY=passive "$CHECK_MPIRUN" -np 2 --oversubscribe --bind-to none \
      "$bin" --gtest_filter='GpuTraining.NcclLayoutsOnTwoGpus*' >"$CHECK_WORK/gtest-nccl.log" 2>&1 || rc=$?
    cat "$CHECK_WORK/gtest-nccl.log"
    judge_gtest "$rc" "$CHECK_WORK/gtest-nccl.log"
    IFS='|' read -r st3 fig3 <"$CHECK_WORK/results/$CHECK_STAGE"
  else
    fig3="not run ($gpus GPU visible; 2 NCCL ranks need 2)"
  fi
  if [[ "$st1" == pass && "$st2" == pass && "$st3" == pass ]]; then
    result pass "one rank: $fig1; layouts np2: $fig2; nccl np2: $fig3"
  else result fail "one rank: $st1 ($fig1); layouts np2: $st2 ($fig2); nccl np2: $st3 ($fig3)"; fi
}

stage_bench() {
  # GPT-2 124M shapes in bf16 on cuda:0 (benchmarks/peers/gpt2_124m_gpu.json: batch 4 x 1024 tokens, AdamW):
  # `cleave train` for 3 warm-up + 20 timed steps (median step_ms of metrics.jsonl), then the same model, batch
  # and optimizer in PyTorch eager, eager with the probabilities materialised, and torch.compile
  # (benchmarks/peers/gpt2_gpu_bench.py: tokens/s, MFU = tokens/s x (6 N + 12 L d T) / peak, and the ratios).
  # A benchmark, not a test: it fails only when an implementation that could run failed.
  local cfg="$repo/benchmarks/peers/gpt2_124m_gpu.json" out="$CHECK_WORK/bench" rc=0 py="${CLEAVE_PYTHON:-python3}"
  local t0=$SECONDS cleave_note="" args=()
  if [[ "$CHECK_GPU" != yes ]]; then result skipped "no GPU visible${CHECK_NO_GPU_NOTE}"; return; fi
  [[ -x "$CHECK_BIN/cleave" ]] || { result fail "cleave is not in the bundle"; return; }
  mkdir -p "$out"
  # Half of the stage's time at most for cleave (the peers' torch.compile needs about a minute).
  timeout -k 5 $(( ${CHECK_STAGE_LIMIT:-150} / 2 )) "$CHECK_BIN/cleave" train "$cfg" --set train.steps=23 \
    --set "train.out_dir=$out/cleave" >"$out/cleave.log" 2>&1 || rc=$?
  tail -n 25 "$out/cleave.log"
  if [[ $rc -eq 0 && -s "$out/cleave/metrics.jsonl" ]]; then args=(--cleave-metrics "$out/cleave/metrics.jsonl")
  else cleave_note="cleave train exited $rc: $(grep -m1 -i 'error' "$out/cleave.log" | cut -c1-120)"; fi
  if ! command -v "$py" >/dev/null; then
    if [[ -n "$cleave_note" ]]; then result fail "$cleave_note; no $py for the PyTorch peers"
    else result pass "$(python_free_figure "$out/cleave/metrics.jsonl"); PyTorch peers skipped: no $py"; fi
    return
  fi
  local left=$(( ${CHECK_STAGE_LIMIT:-150} - (SECONDS - t0) - 10 )) modes="eager,eager-math,compile"
  [[ ${#args[@]} -gt 0 ]] && modes="cleave,$modes"
  rc=0
  # The host's own library path: the bundle's lib/ is for cleave, PyTorch brings its own CUDA libraries.
  LD_LIBRARY_PATH="${CHECK_HOST_LD_LIBRARY_PATH:-}" timeout -k 5 "$(( left > 1 ? left : 1 ))" "$py" \
    "$repo/benchmarks/peers/gpt2_gpu_bench.py" --config "$cfg" --modes "$modes" "${args[@]}" --deadline-s "$left" \
    --json "$out/bench.json" >"$out/peers.log" 2>&1 || rc=$?
  cat "$out/peers.log"
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
    "$CHECK_BIN/cleave" profile --gemm --base "$repo/$base" --out "$out" --budget "$budget" >"$log" 2>&1 || rc=$?
  else
    "$CHECK_BIN/cleave" profile --gemm --device cpu --small --samples 1 --base "$repo/$base" \
      --peak-tflops-bf16 10 --peak-tflops-f32 10 --out "$CHECK_WORK/cpu_gemm_profile.json" >"$log" 2>&1 || rc=$?
    out="$CHECK_WORK/cpu_gemm_profile.json"
  fi
  cat "$log"
  if [[ $rc -ne 0 || ! -s "$out" ]]; then
    result fail "cleave profile --gemm exited $rc: $(grep -m1 -i 'error' "$log" | cut -c1-110)"
    return
  fi
  rc=0
  "$CHECK_BIN/cleave" plan "$cfg" --world 8 --profile "$out" >"$CHECK_WORK/plan.log" 2>&1 || rc=$?
  head -n 8 "$CHECK_WORK/plan.log"
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

if [[ "${1:-}" == "--stage" ]]; then
  CHECK_STAGE="$2"
  set +e  # stage bodies check each step themselves; a failed grep must not end the stage without a result
  case "$2" in
    probe) stage_probe ;;
    ldd) stage_ldd ;;
    cpu-reference) stage_cpu_reference ;;
    test:*) stage_test "${2#test:}" ;;
    nccl-watchdog) stage_nccl_watchdog ;;
    staged-np1) stage_staged 1 ;;
    staged-np2) stage_staged 2 ;;
    memcheck) stage_memcheck ;;
    training) stage_training ;;
    bench) stage_bench ;;
    profile) stage_profile ;;
    *) echo "unknown stage $2" >&2; exit 2 ;;
  esac
  exit 0
fi

# ==== the driver ================================================================================================
usage() { sed -n '2,8p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bundle_arg="" build_dir="" budget=450 no_gpu=0 outdir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bundle) bundle_arg="${2:?}"; shift 2 ;;
    --build-dir) build_dir="${2:?}"; shift 2 ;;
    --budget) budget="${2:?}"; shift 2 ;;
    --no-gpu) no_gpu=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) [[ -z "$outdir" ]] || usage; outdir="$1"; shift ;;
  esac
done
[[ -n "$outdir" ]] || usage
mkdir -p "$outdir"
CHECK_OUT="$(cd "$outdir" && pwd)"
rm -f "$CHECK_OUT"/{summary.txt,log.txt,probe.txt,gtest.xml,gemm_profile.json}
t_start=$SECONDS
deadline=$((t_start + budget))

CHECK_WORK="$(mktemp -d "${TMPDIR:-/tmp}/cleave-gpu-check.XXXXXX")"
trap '[[ "${CLEAVE_GPU_CHECK_KEEP:-0}" == 1 ]] || rm -rf "$CHECK_WORK"' EXIT
mkdir -p "$CHECK_WORK"/{results,logs,xml}
export CHECK_OUT CHECK_WORK
export PATH="$PATH:/sbin:/usr/sbin"  # ldconfig, for a user whose PATH lacks them
export GTEST_COLOR=no  # Open MPI hands ranks a pseudo-terminal; colour codes would break the log parsing

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
    echo "gpu-check: no bundle at $bundle: build it with scripts/gpu-bundle.sh and upload build-gpu/" >&2
    exit 2
  fi
  [[ -f "$CHECK_BUNDLE/env.sh" ]] || { echo "gpu-check: $CHECK_BUNDLE has no env.sh: not a bundle" >&2; exit 2; }
  CHECK_HOST_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"  # before the bundle's lib/ is put first (the bench's PyTorch)
  # shellcheck source=/dev/null
  . "$CHECK_BUNDLE/env.sh"
  CHECK_BIN="$CHECK_BUNDLE/bin"
  CHECK_MPIRUN="$CHECK_BUNDLE/mpi/bin/mpirun"
fi
CHECK_HOST_LD_LIBRARY_PATH="${CHECK_HOST_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
export CHECK_BUNDLE CHECK_BIN CHECK_MPIRUN CHECK_HOST_LD_LIBRARY_PATH

# ---- CUDA libraries, the GPU, the tools ---------------------------------------------------------------------------
CLEAVE_CUDA_SONAMES="$(tr '\n' ' ' 2>/dev/null <"$CHECK_BUNDLE/cuda-sonames.txt" || true)"
CLEAVE_CUDA_SONAMES="${CLEAVE_CUDA_SONAMES:-libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2}"
export CLEAVE_CUDA_SONAMES
set +e
# shellcheck source=/dev/null
. "$repo/scripts/gpu-env.sh" --runtime >"$CHECK_WORK/cuda-env.txt" 2>&1
set -e
sed -n 's/^gpu-env: \([^ ]*\) not found.*/\1/p' "$CHECK_WORK/cuda-env.txt" >"$CHECK_WORK/cuda-missing.txt"
export LD_LIBRARY_PATH

CHECK_GPU=no CHECK_GPU_REASON="nvidia-smi lists no GPU" CHECK_NO_GPU_NOTE=""
if [[ $no_gpu -eq 1 ]]; then
  CHECK_GPU_REASON="--no-gpu given"; CHECK_NO_GPU_NOTE=" (--no-gpu)"
elif command -v nvidia-smi >/dev/null; then
  if nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]' >/dev/null; then CHECK_GPU=yes CHECK_GPU_REASON="nvidia-smi -L"; fi
elif ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  CHECK_GPU=yes CHECK_GPU_REASON="/dev/nvidia0 exists (no nvidia-smi)"
else
  CHECK_GPU_REASON="no nvidia-smi and no /dev/nvidia0"
fi
CHECK_SANITIZER="$(command -v compute-sanitizer || true)"
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$CHECK_SANITIZER" && -x "$c" ]] && CHECK_SANITIZER="$c"
done
CHECK_LIBSTDCXX="$(ldconfig -p 2>/dev/null | awk '!found && $1 == "libstdc++.so.6" && /x86-64/ { print $NF; found = 1 }')"
CHECK_GLIBCXX="$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "${CHECK_LIBSTDCXX:-/dev/null}" 2>/dev/null | sort -uV | tail -n 1)"
export CHECK_GPU CHECK_GPU_REASON CHECK_NO_GPU_NOTE CHECK_SANITIZER CHECK_LIBSTDCXX CHECK_GLIBCXX

# ---- run the stages -----------------------------------------------------------------------------------------------
rows=() tails=() any_fail=0
run_stage() {  # NAME LIMIT_SECONDS
  local name="$1" limit="$2" left t0 rc=0 st fig secs log
  log="$CHECK_WORK/logs/$(printf '%02d' ${#rows[@]})-${name//:/_}.log"
  left=$((deadline - SECONDS))
  if (( left < 10 )); then
    rows+=("$name|skipped|0|time budget of ${budget}s spent")
    return
  fi
  (( limit > left )) && limit=$left
  printf 'gpu-check: %-26s (limit %3ds) ... ' "$name" "$limit"
  t0=$SECONDS
  CHECK_STAGE_LIMIT="$limit" timeout -k 10 "$limit" bash "$self" --stage "$name" >"$log" 2>&1 || rc=$?
  secs=$((SECONDS - t0))
  if [[ -f "$CHECK_WORK/results/$name" ]]; then
    IFS='|' read -r st fig <"$CHECK_WORK/results/$name"
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then st=fail fig="timed out after ${limit}s; $fig"; fi
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    st=fail fig="timed out after ${limit}s (log kept)"
  else
    st=fail fig="the stage exited $rc without a result"
  fi
  echo "$st (${secs}s)"
  rows+=("$name|$st|$secs|$fig")
  { echo "======== stage $name: $st, ${secs}s, $fig"; cat "$log"; echo; } >>"$CHECK_OUT/log.txt"
  if [[ "$st" == fail ]]; then
    any_fail=1
    tails+=("---- $name (last lines; full log in log.txt)" "$(tail -n 6 "$log" | cut -c1-150)")
  fi
}

echo "gpu-check: bundle $CHECK_BUNDLE, GPU visible: $CHECK_GPU ($CHECK_GPU_REASON), budget ${budget}s"
run_stage probe 30
run_stage ldd 60
run_stage cpu-reference 60
for f in "$CHECK_BIN"/gpu_*_test; do
  [[ -e "$f" ]] || continue
  b="$(basename "$f")"
  [[ "$b" == gpu_staged_comm_test || "$b" == gpu_train_test ]] && continue  # their own stages
  run_stage "test:$b" 150
done
run_stage nccl-watchdog 60
run_stage staged-np1 90
run_stage staged-np2 120
run_stage profile 60  # short, and it leaves a file to commit: before the long training and bench stages
run_stage training 240
run_stage bench 150
run_stage memcheck 200

# ---- gtest.xml: every run's suites in one file, suite names prefixed with the stage ------------------------------
set +e  # from here on only reporting: a failed grep must not lose the summary
shopt -s nullglob
xmls=("$CHECK_WORK"/xml/*.xml)
shopt -u nullglob
files="summary.txt log.txt probe.txt"
[[ -s "$CHECK_OUT/gemm_profile.json" ]] && files+=" gemm_profile.json"
if [[ ${#xmls[@]} -gt 0 ]]; then
  files+=" gtest.xml"
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuites name="cleave-gpu-check">'
    for x in "${xmls[@]}"; do
      label="$(basename "$x" .xml)"
      grep -v '^<?xml\|^<testsuites\|^</testsuites>' "$x" | sed "s/<testsuite name=\"/<testsuite name=\"$label./"
    done
    echo '</testsuites>'
  } >"$CHECK_OUT/gtest.xml"
fi

# ---- the summary, printed last -------------------------------------------------------------------------------------
total=$((SECONDS - t_start))
gpu_line="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed -n 1p \
            | sed 's/, / · driver /' || true)"
{
  if [[ ${#tails[@]} -gt 0 ]]; then printf '%s\n' "${tails[@]}"; echo; fi
  echo "Cleave GPU check · $(date -u '+%Y-%m-%d %H:%M UTC') · $(sed -n 's/^commit *: //p' "$CHECK_BUNDLE/MANIFEST.txt" 2>/dev/null || echo 'build tree') · ${gpu_line:-no GPU visible}"
  printf '%-26s %-8s %5s  %s\n' stage status secs result
  for r in "${rows[@]}"; do
    IFS='|' read -r n st secs fig <<<"$r"
    printf '%-26s %-8s %5s  %s\n' "$n" "$st" "$secs" "$fig" | cut -c1-160
  done
  verdict=pass; [[ $any_fail -eq 1 ]] && verdict=FAIL
  echo "total ${total}s (budget ${budget}s) · $verdict · files in $CHECK_OUT: $files"
} >"$CHECK_OUT/summary.txt"
echo
cat "$CHECK_OUT/summary.txt"
exit "$any_fail"
