#!/usr/bin/env bash
# The CLI on bad input: each case must exit non-zero with a one-line error that names the key or file and
# the numbers, and must not create or modify the output directory. Also: a launcher that disagrees with MPI
# about the rank (rank discovery). Usage: cli_bad_input.sh CLEAVE SRC_DIR
set -u
cleave=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

# expect_error NAME REGEX ARGS...
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local out status
  out=$("$cleave" train "$@" 2>&1)
  status=$?
  if [ $status -eq 0 ]; then
    echo "FAIL $name: exit 0, expected an error"; failures=$((failures + 1)); return
  fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL $name: message does not match /$pattern/:"; echo "$out" | sed 's/^/    /'
    failures=$((failures + 1)); return
  fi
  if [ -e out ]; then
    echo "FAIL $name: wrote the output directory"; failures=$((failures + 1)); rm -rf out; return
  fi
  echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -n 1)"
}

printf '{"model": {"type": "gpt",}}' > malformed.json
printf '{"train": {"steps": 5, "steps": 6}}' > duplicate.json
printf '{"optimzer": {"lr": 0.1}}' > unknown.json
printf '{"optimizer": {"lr": "fast"}}' > wrongtype.json
printf 'not a shard' > bad.bin
head -c 4096 /dev/zero > zeros.bin

set_out=(--set train.out_dir=out --set train.steps=2)
expect_error malformed-json 'malformed.json.*line 1'                  malformed.json "${set_out[@]}"
expect_error duplicate-key  'train\.steps.*duplicate|duplicate.*train\.steps' duplicate.json "${set_out[@]}"
expect_error unknown-key    'optimzer.*optimizer'                      unknown.json "${set_out[@]}"
expect_error wrong-type     'optimizer\.lr.*number'                     wrongtype.json "${set_out[@]}"
expect_error missing-config 'nope\.json'                                nope.json "${set_out[@]}"
expect_error unknown-set    'train\.stepz'                              "${set_out[@]}" --set train.stepz=3
expect_error zero-size      'model\.d_model'                            "${set_out[@]}" --set model.d_model=0
expect_error negative-steps 'train\.steps'                              --set train.out_dir=out --set train.steps=-4
expect_error heads-divide   'model\.d_model.*100.*model\.n_heads.*3' "${set_out[@]}" --set model.d_model=100 --set model.n_heads=3
expect_error batch-contradiction 'global_batch_size.*10.*micro_batch_size.*4' "${set_out[@]}" --set batch.global_batch_size=10 --set batch.micro_batch_size=4
expect_error batch-triple   'batch.*16.*4.*3'                           "${set_out[@]}" --set batch.global_batch_size=16 --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=3
expect_error missing-data   'no/such/file\.txt'                         "${set_out[@]}" --set data.type=text --set data.path=no/such/file.txt
expect_error wrong-magic    'bad\.bin.*(magic|size|header)'            "${set_out[@]}" --set data.type=tokens --set data.path=bad.bin
expect_error zero-magic     'zeros\.bin.*magic'                         "${set_out[@]}" --set data.type=tokens --set data.path=zeros.bin
expect_error unknown-option 'unknown option'                            "${set_out[@]}" --frobnicate
expect_error cp-ring-chunks 'parallel\.context_parallel_size: 3 with context_parallel_comm "ring" cuts each sequence into 2 × 3 = 6 chunks.*use context_parallel_size in \{1, 2' "${set_out[@]}" --set parallel.context_parallel_size=3
expect_error cp-a2a-heads 'parallel\.context_parallel_size: 2 with context_parallel_comm "all_to_all".*3 query and 3 kv heads' "${set_out[@]}" --set model.n_heads=3 --set model.d_model=96 --set parallel.context_parallel_size=2 --set parallel.context_parallel_comm=all_to_all
expect_error cp-no-attention 'parallel\.context_parallel_size: 2 .*model\.type mlp has no attention; use 1' "${set_out[@]}" --set model.type=mlp --set parallel.context_parallel_size=2
expect_error cp-cnn-no-attention 'parallel\.context_parallel_size: 2 .*model\.type cnn has no attention; use 1' "${set_out[@]}" --set model.type=cnn --set parallel.context_parallel_size=2
expect_error cp-comm-without-cp 'parallel\.context_parallel_comm: "all_to_all" .*context_parallel_size is 1 \(no context parallelism\)' "${set_out[@]}" --set parallel.context_parallel_comm=all_to_all
expect_error format-without-tokens 'data\.format: "uint16" is the layout of a token file, and data\.type is "synthetic"' "${set_out[@]}" --set data.format=uint16
expect_error zero-stage-4   'optimizer\.zero_stage.*or 3 \(and parameters\), got 4' "${set_out[@]}" --set optimizer.zero_stage=4
# Mixture of experts (issue 33 part 7): each refused naming the key and the numbers, nothing written.
moe=(--set 'model.type="moe"')
expect_error moe-top-k      'model\.top_k.*5 is larger than model\.n_experts 4' "${set_out[@]}" "${moe[@]}" --set model.n_experts=4 --set model.top_k=5
expect_error moe-no-experts 'model\.n_experts.*must be positive, got 0'  "${set_out[@]}" "${moe[@]}" --set model.n_experts=0
expect_error moe-router     'model\.router.*"topk" is not a router kind' "${set_out[@]}" "${moe[@]}" --set 'model.router="topk"'
expect_error moe-tp-split   'model\.ffn_hidden_size.*30 is not divisible by parallel\.tensor_model_parallel_size 4' "${set_out[@]}" "${moe[@]}" --set model.ffn_hidden_size=30 --set parallel.tensor_model_parallel_size=4
# NCCL asked for where it cannot work: a CPU run (CUDA build) or a build without CUDA.
expect_error unknown-schedule 'parallel\.schedule.*"zb-h2".*zb_h2.*dualpipev.*auto.*did you mean "zb_h2"' "${set_out[@]}" --set parallel.schedule=zb-h2
expect_error auto-memory-not-auto 'parallel\.auto_schedule_memory_limit.*only.*"auto".*"1f1b"' "${set_out[@]}" --set parallel.auto_schedule_memory_limit=4
expect_error auto-memory-negative 'parallel\.auto_schedule_memory_limit' "${set_out[@]}" --set parallel.schedule=auto --set parallel.auto_schedule_memory_limit=-1
expect_error nccl-on-cpu    'parallel\.comm_backend.*nccl.*(device\.type is "cpu"|without)' "${set_out[@]}" --set parallel.comm_backend=nccl
# Over the memory cap: see memory-cap below (exit 64, before the world); following its hint trains.
if "$cleave" train --set train.out_dir=fits --set train.steps=1 --set device.memory_limit=4MiB \
     --set train.recompute=full > fits.log 2>&1; then
  echo "ok   memory-cap-recompute-followed: trains under 4 MiB with train.recompute=full"
else
  echo "FAIL memory-cap-recompute-followed:"; sed 's/^/    /' fits.log; failures=$((failures + 1))
fi
rm -rf fits

# Data files that cannot serve the run and a virtual-stage count the schedule cannot run are bad input: exit 64
# (ExitCode::kBadInput, so `cleave run` stops instead of spending its restarts on them; they exited 1), and the
# files are checked before the world and the model are built (no layout line: "early") where no token needs
# reading; the token ids and the split lengths when the data source is made ("late"). Nothing written.
printf '' > empty.txt
printf 'short text' > short.txt
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<4H', 1, 2, 300, 4))" > big_ids.bin
mkdir -p a_dir
bad_input() {  # NAME early|late REGEX ARGS...
  local name=$1 when=$2 pattern=$3
  shift 3
  local out status
  out=$("$cleave" train "${set_out[@]}" "$@" 2>&1); status=$?
  if [ $status -ne 64 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ -e out ] ||
     { [ "$when" = early ] && grep -q "cleave: tp=" <<<"$out"; }; then
    echo "FAIL $name: status $status (expected 64, $when)"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1))
    rm -rf out; return
  fi
  echo "ok   $name: exit 64 ($when): $(grep -E -- "$pattern" <<<"$out" | head -n 1 | cut -c1-150)"
}
text_data=(--set data.type=text --set model.vocab_size=256)
bad_input data-missing early 'data file .*no/such/file\.txt: no such file' "${text_data[@]}" --set data.path=no/such/file.txt
bad_input data-empty early 'data file .*empty\.txt: the file is empty' "${text_data[@]}" --set data.path=empty.txt
bad_input data-val-dir early 'data file .*a_dir: not a regular file' "${text_data[@]}" --set data.path=bad.bin --set data.val_path=a_dir
bad_input data-magic early 'bad\.bin.*(magic|shorter)' --set data.type=tokens --set data.path=bad.bin
bad_input data-glob early 'data\.paths\[0\]: the glob ".*none_\*\.bin" matches no file' --set data.type=tokens --set 'data.paths=["none_*.bin"]'
bad_input data-digits early 'data file .*none\.csv: no such file' --set model.type=mlp --set data.type=digits --set data.path=none.csv
bad_input data-short-split late 'short\.txt: the train split .* has 10 tokens, but model\.seq_len 32 needs at least 33 \(seq_len \+ 1\); lower model\.seq_len to at most 9, or give more text' \
    "${text_data[@]}" --set data.path=short.txt --set train.eval_batches=0 --set data.val_fraction=0
bad_input data-short-eval-split late 'short\.txt: the eval split \(last 20% = data\.val_fraction of 10 tokens\) has 2 tokens, but model\.seq_len 7 needs at least 8 \(seq_len \+ 1\); lower model\.seq_len to at most 1, or raise data\.val_fraction or give a longer data\.val_path, or set train\.eval_batches=0' \
    "${text_data[@]}" --set data.path=short.txt --set data.val_fraction=0.2 --set model.seq_len=7
bad_input data-token-id late 'big_ids\.bin: token 300 at position 2 is ≥ model\.vocab_size 256' --set data.type=tokens \
    --set data.format=uint16 --set data.path=big_ids.bin --set model.seq_len=2 --set train.eval_batches=0
# A layout the world size does not divide: bad input too (it exited 1), refused before the data files and the world.
bad_input world-layout early '--set parallel\.pipeline_model_parallel_size=2: parallel\.pipeline_model_parallel_size: world size 1 is not divisible by tp\(1\) × pp\(2\) = 2 \(parallel\.tensor_model_parallel_size × parallel\.pipeline_model_parallel_size\); launch a multiple of 2 ranks, or set tp × pp to a divisor of 1 \(1\)' \
    --set parallel.pipeline_model_parallel_size=2 --set data.type=tokens --set data.path=no/such/file.bin
bad_input cp-world early '--set parallel\.context_parallel_size=2: parallel\.context_parallel_size: world size 1 is not divisible by tp\(1\) × cp\(2\) × pp\(1\) = 2.*context_parallel_size to 1' \
    --set parallel.context_parallel_size=2
bad_input virtual-stages early 'parallel\.virtual_pipeline_stages: schedule 1f1b runs one stage per rank.*got virtual_stages 3.*set it to 1' \
    --set parallel.virtual_pipeline_stages=3
# The ep memory figures (parallel.ep_stash_imbalance, ep_peak_imbalance) at ep 1 (the default model as moe, 8 experts
# top-2): they size nothing there, so any value is refused alike while the config is read, 1 included (accepted once,
# while 1.5 was refused as past the bound 1), naming the key, the value, the ep size and the fix.
bad_input ep-memory-figure early 'parallel\.ep_peak_imbalance: 1\.5 sizes the routed rows expert parallelism sends a rank, and parallel\.expert_model_parallel_size is 1 .*set expert_model_parallel_size > 1, or remove the key' \
    --set 'model.type="moe"' --set parallel.ep_peak_imbalance=1.5
bad_input ep-memory-figure-one early 'parallel\.ep_stash_imbalance: 1 sizes the routed rows expert parallelism sends a rank, and parallel\.expert_model_parallel_size is 1 .*or remove the key' \
    --set 'model.type="moe"' --set parallel.ep_stash_imbalance=1
# Over the memory cap: bad input (exit 64, it exited 1 once the world was built, and `cleave run` restarted it), refused
# before the world; the refusal says how much is activations and what each recompute mode would need (the default
# model fits 4 MiB only under full recomputation), and points at `cleave plan`.
bad_input memory-cap early 'memory: pp rank 0 needs about [0-9.]+ MiB .* but device\.memory_limit is 4\.00 MiB; activations are [0-9.]+ [KM]iB \([0-9]+%\), train\.recompute=selective needs about [0-9.]+ MiB \(activations [0-9.]+ [KM]iB\), train\.recompute=full needs about [0-9.]+ MiB \(activations [0-9.]+ [KM]iB, fits\).*cleave plan CONFIG --world N' \
    --set device.memory_limit=4MiB
# A model far past any machine's memory (about 768 TiB per rank by its plan), no device.memory_limit: refused before
# the world against the memory this host allows (its physical memory, or its cgroup's limit in a container:
# engine/run_plan/host_fit.hpp), not failed once it is built or killed by the OOM killer. No machine has that much, so
# the case does not depend on this one's size (nor on whether it runs in a container). verify shares the check.
huge_model=(--set model.d_model=65536 --set model.n_layers=1024 --set model.n_heads=64)
bad_input host-memory early 'memory: the 1 rank on this host needs [0-9.]+ GiB of host memory \(the memory plan: parameters [0-9.]+ GiB, .*total [0-9.]+ GiB\), but this host allows [0-9.]+ [KMGT]iB of memory \((its physical memory, (MemTotal in /proc/meminfo|sysconf.*)|the cgroup limit in /sys/fs/cgroup/([^ ]*/)?memory\.(max|limit_in_bytes), (below its physical memory [0-9.]+ [KMGT]iB \((MemTotal in /proc/meminfo|sysconf.*)\)|its physical memory unknown))\) and a run may plan 90% of it.*nothing was started.*--memory-limit SIZE` with SIZE at most [0-9.]+ [GM]iB' \
    "${huge_model[@]}"
# More pipeline stages than the model has blocks: the plan cannot be made at this world; bad input before the world.
bad_input fewer-blocks-one-rank early 'only 5 blocks' --set model.n_layers=1 --set parallel.virtual_pipeline_stages=8 \
    --set parallel.schedule=interleaved_1f1b
bad_input virtual-stages-zbv early 'parallel\.virtual_pipeline_stages: schedule zb_v runs exactly 2 chunks per rank' \
    --set parallel.schedule=zb_v --set parallel.virtual_pipeline_stages=3
# The same under cleave run: refused before any job starts (it launched the job, which failed on every attempt
# for the data file, and re-planned the virtual stages away for a layout of its own choosing), and cleave run's own
# command-line errors likewise.
run_input() {  # NAME REGEX ARGS...
  local name=$1 pattern=$2
  shift 2
  local out status
  out=$("$cleave" run "$@" 2>&1); status=$?
  if [ $status -ne 64 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ -e out ] || grep -q "run: attempt" <<<"$out"; then
    echo "FAIL $name: status $status (expected 64, no attempt)"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1))
    rm -rf out; return
  fi
  echo "ok   $name: exit 64, no job: $(grep -E -- "$pattern" <<<"$out" | head -n 1 | cut -c1-150)"
}
run_input run-data-missing 'data file .*no/such/file\.txt: no such file' --slots 1 -- "${set_out[@]}" "${text_data[@]}" \
    --set data.path=no/such/file.txt
run_input run-virtual-stages 'parallel\.virtual_pipeline_stages: schedule 1f1b' --slots 1 -- "${set_out[@]}" \
    --set parallel.virtual_pipeline_stages=3
# A config whose plan the engine refuses (more stages than the 5 blocks of a one-layer GPT): before any job (a job was
# started, and its first attempt stopped with the refusal), its key named with where it came from.
run_input run-too-many-stages 'run: the config does not run on the 1 slot given: --set parallel\.virtual_pipeline_stages=8: parallel\.virtual_pipeline_stages: 8 pipeline stages .*nothing was started' \
    --slots 1 -- "${set_out[@]}" --set model.n_layers=1 --set parallel.schedule=interleaved_1f1b --set parallel.virtual_pipeline_stages=8
run_input run-no-slots 'run: give --slots N or --hostfile FILE' -- "${set_out[@]}"
run_input run-no-dashes 'run: put the training job after --' --slots 1
# The config among run's own options (no --): the refusal says where it goes (it said only "unexpected argument").
run_input run-config-before-dashes "run: unexpected argument 'nope\.json' .*; the training job \(CONFIG\.json, its --set\) goes after --, e\.g\. cleave run --slots 4 -- CONFIG\.json" \
    --slots 1 nope.json
# Inside a SLURM allocation without --slots, SLURM_NTASKS gives the slots: a malformed value is refused (atoi read
# "4x" as 4 and "abc" as 0).
for ntasks in abc 4x 0; do
  SLURM_JOB_ID=1 SLURM_NTASKS=$ntasks run_input "run-slurm-ntasks-$ntasks" \
      "run: SLURM_NTASKS='$ntasks' is not a positive task count; .*--slots N" -- "${set_out[@]}"
done
run_input run-min-ranks 'run: 1 slot is fewer than --min-ranks 2' --slots 1 --min-ranks 2 -- "${set_out[@]}"
run_input run-launcher-missing 'run: the launcher no-such-launcher cannot be started \(not found in PATH\); nothing was started' \
    --slots 1 --launcher "no-such-launcher -x" -- "${set_out[@]}"
run_input run-launcher-empty 'run: --launcher is empty' --slots 1 --launcher "" -- "${set_out[@]}"
run_input run-health-check-empty 'run: --health-check is empty' --slots 1 --health-check " " -- "${set_out[@]}"
run_input run-resume-no-dir '--resume no/such/dir: no such checkpoint directory' --slots 1 -- "${set_out[@]}" \
    --resume no/such/dir
# A hostfile that is malformed or a directory: bad input (a malformed one exited 1), before any job.
printf 'node1 slotz=2\n' > hosts_bad.txt
run_input run-hostfile-malformed "hostfile hosts_bad\.txt line 1: 'node1 slotz=2' is not 'HOST \[slots=N\]' \(unknown word 'slotz=2'\)" \
    --hostfile hosts_bad.txt -- "${set_out[@]}"
printf '# no hosts\n' > hosts_empty.txt
run_input run-hostfile-empty "hostfile hosts_empty\.txt: no slots \(expected lines 'HOST slots=N'\)" --hostfile hosts_empty.txt -- "${set_out[@]}"
run_input run-hostfile-dir "run: --hostfile a_dir is a directory; give a file of 'HOST slots=N' lines" --hostfile a_dir -- "${set_out[@]}"
run_input run-out-dir-is-a-file 'train\.out_dir hosts_bad\.txt exists and is not a directory' --slots 1 -- \
    --set train.out_dir=hosts_bad.txt --set train.steps=2
mkdir -p held && echo '{"step": 1}' > held/metrics.jsonl
run_input run-out-dir-holds-run 'run: train.out_dir held already holds a run; nothing was started' --slots 1 -- \
    --set train.out_dir=held --set train.steps=2

# Pipeline plans that cannot work are refused before any rank computes (2 ranks, pp = 2).
if [ $# -ge 3 ]; then
  shift 2
  mpiexec=("$@")
  pp_error() {  # NAME REGEX ARGS...
    local name=$1 pattern=$2; shift 2
    local out status
    out=$("${mpiexec[@]}" -n 2 "$cleave" train --set train.out_dir=out --set train.steps=2 \
          --set parallel.pipeline_model_parallel_size=2 "$@" 2>&1)
    status=$?
    if [ $status -eq 0 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ -e out ]; then
      echo "FAIL $name: status $status"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1)); rm -rf out; return
    fi
    echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -n 1)"
  }
  # One error under mpirun is printed once, not once per rank, and without MPI_Abort's banner: an error every
  # rank sees (a bad value, the command line, a schedule the batch gives too few micro-batches) ends the job cleanly
  # with the same exit code: 64 for bad input read before any work (engine/core/exit_code.hpp, ExitCode::kBadInput).
  once() {  # NAME STATUS ARGS...
    local name=$1 want=$2; shift 2
    local out status
    out=$("${mpiexec[@]}" -n 2 "$cleave" train --set train.out_dir=out "$@" 2>&1); status=$?
    if [ $status -ne "$want" ] || [ "$(grep -c 'error: ' <<<"$out")" != 1 ] || grep -q 'MPI_ABORT' <<<"$out" || [ -e out ]; then
      echo "FAIL $name: status $status"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1)); rm -rf out; return
    fi
    echo "ok   $name: printed once: $(grep 'error: ' <<<"$out" | cut -c1-80)"
  }
  once error-once-config 64 --set optimizer.lr=fast
  # A layout or batch the world size does not divide is bad input on every rank alike (each knows the world size):
  # exit 64 on all, the error once, no hang, before the data files (a missing one here) and the world.
  world_input() {  # NAME RANKS REGEX ARGS...
    local name=$1 ranks=$2 pattern=$3; shift 3
    local out status
    out=$("${mpiexec[@]}" -n "$ranks" "$cleave" train --set train.out_dir=out --set train.steps=2 \
          --set data.type=tokens --set data.path=no/such/file.bin "$@" 2>&1); status=$?
    if [ $status -ne 64 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ "$(grep -c 'error: ' <<<"$out")" != 1 ] ||
       grep -q 'MPI_ABORT' <<<"$out" || grep -q 'cleave: tp=' <<<"$out" || [ -e out ]; then
      echo "FAIL $name: status $status (expected 64 on $ranks ranks)"; echo "$out" | sed 's/^/    /'
      failures=$((failures + 1)); rm -rf out; return
    fi
    echo "ok   $name: exit 64 on $ranks ranks: $(grep -E -- "$pattern" <<<"$out" | head -n 1 | cut -c1-150)"
  }
  world_input world-tp 3 '--set parallel\.tensor_model_parallel_size=2: parallel\.tensor_model_parallel_size: world size 3 is not divisible by tp\(2\) × pp\(1\) = 2 \(parallel\.tensor_model_parallel_size × parallel\.pipeline_model_parallel_size\); launch a multiple of 2 ranks, or set tp × pp to a divisor of 3 \(1, 3\)' \
      --set parallel.tensor_model_parallel_size=2
  world_input world-cp 3 '--set parallel\.context_parallel_size=2: parallel\.context_parallel_size: world size 3 is not divisible by tp\(1\) × cp\(2\) × pp\(1\) = 2 \(parallel\.context_parallel_size = 2\); launch a multiple of 2 ranks, or set parallel\.context_parallel_size to a divisor of 3' \
      --set parallel.context_parallel_size=2
  world_input world-dp 2 '--set parallel\.data_parallel_size=4: parallel\.data_parallel_size: 4, but world size 2 / \(tp 1 × cp 1 × pp 1\) = 2; launch 4 ranks or set it to -1' \
      --set parallel.data_parallel_size=4
  echo '{"parallel": {"tensor_model_parallel_size": 2}}' > tp2.json
  world_input world-tp-file 3 'error: config tp2\.json: parallel\.tensor_model_parallel_size: world size 3 is not divisible by tp\(2\) × pp\(1\) = 2' \
      tp2.json
  world_input world-batch 3 'batch: global_batch_size 8 is not divisible by data-parallel size 3' --set batch.global_batch_size=8
  # The refusals made once the world size is known name where their key came from, as the config reader's do.
  world_input world-ep 3 '--set parallel\.expert_model_parallel_size=2: parallel\.expert_model_parallel_size: 2 does not divide the dp × cp = 3 × 1 = 3 ranks.*use expert_model_parallel_size in' \
      --set 'model.type="moe"' --set parallel.expert_model_parallel_size=2
  echo '{"model": {"type": "moe", "router": "sigmoid", "bias_update_rate": 0.001}, "optimizer": {"zero_stage": 3}}' > bias.json
  world_input world-bias-zero3 2 'error: config bias\.json: model\.bias_update_rate: 0\.001 moves the sigmoid router.s bias .*optimizer\.zero_stage 3 over dp × cp = 2 × 1 ranks' \
      bias.json
  echo '{"parallel": {"pipeline_model_parallel_size": 2, "schedule": "dualpipev"}, "batch": {"global_batch_size": 8, "micro_batch_size": 4}}' > dual.json
  world_input world-dualpipev-file 2 'error: config dual\.json: parallel\.schedule: dualpipev needs at least 4 micro-batches per step on pp_size 2, got 2' \
      dual.json
  # A layout over its memory cap on every rank alike: exit 64 on both, printed once, before the world.
  world_input memory-cap-pp2 2 'memory: pp rank [01] needs about .* but device\.memory_limit is 1\.00 MiB' \
      --set parallel.pipeline_model_parallel_size=2 --set device.memory_limit=1MiB
  # Two ranks on this host past its physical memory (the launcher's local size): the same, both ranks counted.
  world_input host-memory-2 2 'memory: the 2 ranks on this host need [0-9.]+ GiB of host memory \(the memory plan: 2 ranks x about' \
      "${huge_model[@]}"
  out=$("${mpiexec[@]}" -n 2 "$cleave" verify --steps 1 "${huge_model[@]}" 2>&1); status=$?
  if [ $status -ne 64 ] || ! grep -q 'memory: the 2 ranks on this host need' <<<"$out" ||
     [ "$(grep -c 'error: ' <<<"$out")" != 1 ] || grep -q 'comm backend\|^verify: tp=' <<<"$out"; then
    echo "FAIL verify-host-memory: status $status (expected 64 before the world)"; echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok   verify-host-memory: exit 64 on 2 ranks before the world"
  fi
  once error-once-command-line 64 --frobnicate
  mkdir -p held2 && echo '{"step": 1}' > held2/metrics.jsonl
  once error-once-out-dir-holds-run 64 --set train.out_dir=held2 --set train.steps=2
  once error-once-plan 64 --set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=dualpipev \
      --set batch.global_batch_size=8 --set batch.micro_batch_size=4
  pp_error fewer-blocks-than-stages 'only 5 blocks' --set model.n_layers=1 --set parallel.virtual_pipeline_stages=4 \
      --set parallel.schedule=interleaved_1f1b
  pp_error blocks-per-stage-sum 'sum 7 != 6' --set parallel.partition.method=manual \
      --set 'parallel.partition.blocks_per_stage=[3,4]'
  # DualPipeV needs 2 × pp = 4 micro-batches per step; this batch gives 2.
  # The hint names keys a user sets, with values that work: following it trains (it once named the derived
  # batch.gradient_accumulation_steps alone, which then contradicted global_batch_size / micro_batch_size).
  pp_error dualpipev-too-few-microbatches '--set parallel\.schedule=dualpipev: parallel\.schedule: dualpipev needs at least 4 micro-batches per step on pp_size 2, got 2.*keep the global batch with --set batch.micro_batch_size=2 --set batch.gradient_accumulation_steps=4' \
      --set parallel.schedule=dualpipev --set batch.global_batch_size=8 --set batch.micro_batch_size=4
  out=$("${mpiexec[@]}" -n 2 "$cleave" train --set train.out_dir=hint --set train.steps=1 \
        --set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=dualpipev --set batch.global_batch_size=8 \
        --set batch.micro_batch_size=4 --set batch.micro_batch_size=2 --set batch.gradient_accumulation_steps=4 2>&1) \
    && echo "ok   dualpipev-hint-followed: trains" \
    || { echo "FAIL dualpipev-hint-followed:"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1)); }
  rm -rf hint
  printf 'rank 0: 0F0 0Z0\nrank 1: 1F0\n' > unknown.sched
  pp_error schedule-unknown-action "unknown action kind 'Z'" --set parallel.schedule=unknown.sched
  printf 'rank 0: 0F0 0B0\nrank 1: 1B0 1F0\n' > swapped.sched
  pp_error schedule-swapped '1B0 on rank 1 comes before 1F0' --set parallel.schedule=swapped.sched \
      --set batch.global_batch_size=8 --set batch.micro_batch_size=8
fi

# Rank discovery: a process the launcher calls rank 1 of 2 that MPI starts as a world of one (srun without
# --mpi=pmix) stops with both views named, before writing anything. A batch script's own SLURM_PROCID=0 /
# SLURM_NTASKS (no SLURM_STEP_NUM_TASKS: not an srun task) do not count, so a plain run there still works.
out=$(SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 "$cleave" train "${set_out[@]}" 2>&1); status=$?
pattern='SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2.*MPI_COMM_WORLD says rank 0 of 1.*srun --mpi=pmix'
if [ $status -eq 0 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ -e out ]; then
  echo "FAIL launcher-mismatch: status $status"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1)); rm -rf out
else
  echo "ok   launcher-mismatch: $(grep -E -- "$pattern" <<<"$out" | head -n 1)"
fi
if SLURM_PROCID=0 SLURM_NTASKS=8 "$cleave" train --set train.out_dir=batch --set train.steps=1 >batch.log 2>&1; then
  echo "ok   batch-script-variables: a plain run inside an allocation is a world of one"
else
  echo "FAIL batch-script-variables"; sed 's/^/    /' batch.log; failures=$((failures + 1))
fi

# An output directory that already holds a run is refused and left untouched: bad input, exit 64, before the world and
# the model are built (no "comm backend" line; it exited 1 after building them), and so is an out_dir that is a file.
mkdir -p prev && echo '{"step": 1}' > prev/metrics.jsonl && cp prev/metrics.jsonl before.jsonl
out=$("$cleave" train --set train.out_dir=prev --set train.steps=2 2>&1); status=$?
if [ $status -ne 64 ] || ! grep -q "train.out_dir prev already holds a run (metrics.jsonl exists).*train.out_dir=prev-2" <<<"$out" ||
   grep -q "comm backend" <<<"$out" || ! cmp -s prev/metrics.jsonl before.jsonl; then
  echo "FAIL existing-run: status $status, output: $out"; failures=$((failures + 1))
else
  echo "ok   existing-run: exit 64: $(grep -m 1 prev <<<"$out")"
fi
out=$("$cleave" train --set train.out_dir=before.jsonl --set train.steps=2 2>&1); status=$?
if [ $status -ne 64 ] || ! grep -q "train.out_dir before.jsonl exists and is not a directory" <<<"$out" ||
   ! cmp -s prev/metrics.jsonl before.jsonl; then
  echo "FAIL out-dir-is-a-file: status $status, output: $out"; failures=$((failures + 1))
else
  echo "ok   out-dir-is-a-file: exit 64: $(grep -m 1 before.jsonl <<<"$out")"
fi

# A fresh run whose checkpoint.dir holds another run's checkpoints is refused before any step (its saves would
# replace that run's steps and prune the rest), as bad input (exit 64); the other run's checkpoints stay as they
# were, nothing is written.
"$cleave" train --set train.out_dir=ck1 --set train.steps=2 --set checkpoint.interval=1 > ck1.log 2>&1 \
  || { echo "FAIL ck1"; sed 's/^/    /' ck1.log; failures=$((failures + 1)); }
ck_state() { ls ck1/checkpoints; cat ck1/checkpoints/latest; md5sum ck1/checkpoints/step_*/*; }
before=$(ck_state)
out=$("$cleave" train --set train.out_dir=ck2 --set train.steps=3 --set checkpoint.interval=1 --set checkpoint.keep_last=1 \
      --set checkpoint.dir=ck1/checkpoints 2>&1); status=$?
if [ $status -ne 64 ] || [ -e ck2 ] || [ "$before" != "$(ck_state)" ] ||
   ! grep -q "checkpoint.dir ck1/checkpoints already holds checkpoints (latest, step_0000001, step_0000002) of another run.*--resume auto" <<<"$out"; then
  echo "FAIL checkpoint-dir-of-another-run: status $status (expected 64)"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1))
else
  echo "ok   checkpoint-dir-of-another-run: $(grep -m 1 'already holds checkpoints' <<<"$out" | cut -c1-120)"
fi

# A run that saves only on SIGUSR1 (checkpoint.interval 0, no final save: cleave train always installs the handler)
# checks its checkpoint.dir at start as any saving run does: a file there, or another run's checkpoints, are bad input
# before any step (the signal's save found them after the steps it was meant to keep). ck1 untouched.
printf 'x' > ckfile
# Both are found before the world and the model are built (they were found once both were: "late").
bad_input signal-save-dir-is-a-file early 'checkpoint.dir ckfile exists and is not a directory' \
  --set checkpoint.interval=0 --set checkpoint.save_final=false --set checkpoint.dir=ckfile
bad_input signal-save-dir-of-another-run early 'checkpoint.dir ck1/checkpoints already holds checkpoints' \
  --set checkpoint.interval=0 --set checkpoint.save_final=false --set checkpoint.dir=ck1/checkpoints
[ "$before" = "$(ck_state)" ] || { echo "FAIL signal-save: ck1's checkpoints changed"; failures=$((failures + 1)); }

# The run's config.json trained again elsewhere: its checkpoint.dir (ck1/checkpoints, derived from the out_dir) follows
# the new train.out_dir, so the round trip trains (it was refused for saving into ck1's checkpoints), ck1 untouched.
if "$cleave" train ck1/config.json --set train.out_dir=ck3 --set train.steps=1 > ck3.log 2>&1 && [ -d ck3/checkpoints ] &&
   grep -q '"dir": "ck3/checkpoints"' ck3/config.json && [ "$before" = "$(ck_state)" ]; then
  echo "ok   config-round-trip: ck1/config.json trained into ck3 with its checkpoints"
else
  echo "FAIL config-round-trip"; sed 's/^/    /' ck3.log; failures=$((failures + 1))
fi

# The other commands' own command-line errors (a required argument or option missing, a value not among the
# choices) are bad input as train's are: exit 64 (engine/core/exit_code.hpp, ExitCode::kBadInput), nothing written.
cmd_error() {  # NAME REGEX COMMAND ARGS...
  local name=$1 pattern=$2; shift 2
  local out status
  out=$("$cleave" "$@" 2>&1); status=$?
  if [ $status -ne 64 ] || ! grep -Eq -- "$pattern" <<<"$out" || [ -e out ]; then
    echo "FAIL $name: status $status (expected 64)"; echo "$out" | sed 's/^/    /'; failures=$((failures + 1)); rm -rf out
    return
  fi
  echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -n 1)"
}
cmd_error export-no-out 'export: --out FILE\.safetensors is required' export ck1/checkpoints
cmd_error export-format "export: --format must be cleave or hf, got 'onnx'" export ck1/checkpoints --format onnx --out out
cmd_error export-dtype "export: --dtype must be f32 or bf16, got 'f16'" export ck1/checkpoints --dtype f16 --out out
cmd_error export-shard-zero "export: --max-shard-size 0: a shard holds at least one tensor" export ck1/checkpoints \
  --format hf --max-shard-size 0 --out out
cmd_error import-no-out 'import: --out CKPT is required' import ck1
cmd_error import-run-dir 'import: ck1 is a Cleave run directory, not a Hugging Face model directory: cleave train --init-from ck1/checkpoints' import ck1 --out out
cmd_error import-checkpoint 'import: ck1/checkpoints is a Cleave checkpoint, not a Hugging Face' import ck1/checkpoints --out out
cmd_error import-a-file 'import: before\.jsonl: not a directory' import before.jsonl --out out
cmd_error import-no-dir 'import: nope_dir: no such directory' import nope_dir --out out
cmd_error generate-no-prompt 'generate: --prompt TEXT is required' generate ck1/checkpoints
cmd_error report-no-dir 'report: give a run directory' report
cmd_error profile-no-config 'profile: give the config' profile --out out
cmd_error plan-no-world 'plan: --world N is required' plan
cmd_error simulate-no-schedule 'simulate: --schedule is required' simulate
cmd_error simulate-no-stages 'simulate: --stages P is required with schedule 1f1b' simulate --schedule 1f1b --microbatches 4
cmd_error simulate-unknown-schedule "simulate: unknown schedule 'zb-h9'" simulate --schedule zb-h9 --stages 2 --microbatches 4
cmd_error bench-unknown-schedule "bench: --schedules entry 'zb-h9' is not a schedule" bench --schedules 1f1b,zb-h9 --out out
cmd_error bench-repeated-schedule "bench: --schedules lists '1f1b' twice" bench --schedules 1f1b,zb_h1,1f1b --out out
cmd_error bench-virtual-stages "bench: --schedules entry 'zb_v:x': virtual stages after ':' must be a whole number" bench --schedules zb_v:x --out out
# Files the command line names that are missing or unreadable: bad input too (they exited 1).
printf 'some text\n' > text.txt
cmd_error tokenize-no-tokenizer 'tokenizer .*nope-tokenizer\.json: no such file' tokenize text.txt --tokenizer nope-tokenizer.json --out out
cmd_error tokenize-no-text 'tokenize: text file nope\.txt: no such file' tokenize nope.txt --tokenizer nope-tokenizer.json --out out
cmd_error tokenize-bits "tokenize: --bits is '8'; expected auto, 16 or 32" tokenize text.txt --tokenizer nope-tokenizer.json --out out --bits 8
cmd_error tokenize-val-fraction 'tokenize: --val-fraction must be in \[0, 1\), got 1' tokenize text.txt --tokenizer nope-tokenizer.json --out out --val-fraction 1
cmd_error generate-no-tokenizer 'tokenizer .*nope-tokenizer\.json: no such file' generate ck1/checkpoints --prompt x --tokenizer nope-tokenizer.json
# A --profile that is missing, not JSON or not a profile (each exited 1, so `cleave run` restarted into it).
printf '{"format": "something else"}' > other.json
cmd_error plan-no-profile 'profile nope-profile\.json: cannot open it' plan ck1/config.json --world 1 --profile nope-profile.json
cmd_error simulate-profile-not-json 'profile text\.txt: not valid JSON' simulate --config ck1/config.json --world 1 --profile text.txt
cmd_error train-profile-not-a-profile 'profile other\.json: expected an object with "format": "cleave-hardware-profile"' train ck1/config.json --profile other.json --set train.out_dir=out
# parallel.auto_schedule_profile is read with the config (it was read when the schedule was built: exit 1).
auto_pp=(--set parallel.schedule=auto --set parallel.pipeline_model_parallel_size=1 --set train.out_dir=out)
cmd_error auto-profile-missing 'parallel\.auto_schedule_profile: .*nope-profile\.json.*cleave profile CONFIG' train "${auto_pp[@]}" --set parallel.auto_schedule_profile=nope-profile.json
cmd_error auto-profile-not-a-profile 'parallel\.auto_schedule_profile: .*other\.json: expected an object' plan ck1/config.json --world 1 "${auto_pp[@]}" --set parallel.auto_schedule_profile=other.json
cmd_error generate-run-dir 'generate: ck1 is not a checkpoint .*; a run directory keeps its checkpoints in ck1/checkpoints' generate ck1 --prompt x
cmd_error export-run-dir 'export: ck1 is not a checkpoint .*; a run directory keeps its checkpoints in ck1/checkpoints' export ck1 --out out
cmd_error simulate-schedule-dir "simulate: schedule file 'a_dir' is a directory" simulate --schedule a_dir --stages 2 --microbatches 4
cmd_error simulate-schedule-malformed "simulate: schedule file 'text\.txt' line 1: expected 'rank N: actions\.\.\.' or 'key: value', got 'some text'" simulate --schedule text.txt --stages 2 --microbatches 4
cmd_error train-schedule-malformed "parallel\.schedule: schedule file 'text\.txt' line 1: expected .*got 'some text'; fix the file" train --set parallel.schedule=text.txt --set train.out_dir=out
cmd_error simulate-virtual 'simulate: schedule interleaved_1f1b runs at least 2 virtual stages per rank.*got virtual_stages 1' simulate --schedule interleaved_1f1b --stages 2 --microbatches 4 --virtual 1
cmd_error simulate-dualpipev-m 'simulate: schedule dualpipev needs at least 8 micro-batches per step on --stages 4, got --microbatches 4' simulate --schedule dualpipev --stages 4 --microbatches 4
cmd_error simulate-config-no-world 'simulate --config: --world N is required' simulate --config ck1/config.json
# An output that already exists is bad input too, refused before any work and left as it was (each exited 1, so a
# script could not tell it from a failure mid-run): engine/core/output_path.hpp and the commands' own checks.
printf 'keep' > exists.json
mkdir -p bench_out tok_out && printf 'keep' > bench_out/bench.json && printf 'keep' > tok_out/train.bin
cmd_error import-out-exists 'import: --out exists\.json already exists; nothing was written' import ck1 --out exists.json
cmd_error export-out-exists 'export: --out exists\.json already exists; nothing was written' export ck1/checkpoints --out exists.json
cmd_error export-hf-out-exists 'export: --out exists\.json already exists' export ck1/checkpoints --format hf --out exists.json
cmd_error plan-write-exists 'plan: --write exists\.json exists; not overwriting it' plan ck1/config.json --world 1 --write exists.json
cmd_error simulate-svg-exists 'simulate: --svg exists\.json already exists' simulate --schedule 1f1b --stages 2 --microbatches 4 --svg exists.json
cmd_error plan-same-output 'plan: --write and --json both name \./same\.json: one would replace the other' plan ck1/config.json --world 1 --write same.json --json ./same.json
cmd_error simulate-same-output 'simulate: --trace and --svg both name same\.json: one would replace the other' simulate --schedule 1f1b --stages 2 --microbatches 4 --svg same.json --trace same.json
cmd_error simulate-config-same-output 'simulate --config: --svg and --trace both name same\.json' simulate --config ck1/config.json --world 1 --svg same.json --trace same.json
cmd_error generate-logits-exists 'generate: --logits exists\.json already exists' generate ck1/checkpoints --prompt x --logits exists.json
cmd_error profile-out-exists 'profile: exists\.json exists; not overwriting it' profile ck1/config.json --out exists.json
cmd_error bench-out-exists 'bench: bench_out/bench\.json exists; not overwriting it' bench --schedules 1f1b --out bench_out
cmd_error tokenize-out-exists 'tokenize: tok_out/train\.bin already exists; nothing was written' tokenize text.txt --tokenizer nope-tokenizer.json --out tok_out
cmd_error output-under-a-file 'import: --out exists\.json/ck: exists\.json is a file, not a directory' import ck1 --out exists.json/ck
# Option values and combinations the commands refuse before any work: bad input as well (they exited 1).
cmd_error export-max-shard-size 'export: --max-shard-size applies to --format hf' export ck1/checkpoints --out out --max-shard-size 2GB
cmd_error plan-trial-only 'plan: --trial-steps sets how --trial K trains the top plans' plan ck1/config.json --world 1 --trial-steps 5
cmd_error verify-one-rank 'verify: a world of one rank trains the single-rank reference against itself.*mpirun -np 2 cleave verify' verify --steps 1
cmd_error version-extra "version: takes no arguments, got 'extra'" version extra
cmd_error report-no-such-dir 'report: nosuch is not a directory' report nosuch
cmd_error report-not-a-run 'report: a_dir/metrics\.jsonl not found' report a_dir
cmd_error plan-world-beyond-reach 'plan: --world 1000000 is more ranks than any layout of this config can use: at most [0-9]+ = tp' \
    plan ck1/config.json --world 1000000 --profile "$src/profiles/h100_sxm.json"
cmd_error plan-trial-launcher "plan --trial: cannot start the launcher 'no-such-launcher' \(not found in PATH\); nothing was searched" \
    plan ck1/config.json --world 1 --trial 1 --launcher no-such-launcher
cmd_error plan-ep-imbalance 'plan: --ep-imbalance 0\.5 is below 1' plan ck1/config.json --world 1 --ep-imbalance 0.5
cmd_error plan-ep-no-experts 'plan: --ep-imbalance 2 prices expert parallelism, and model.type gpt has no experts' plan ck1/config.json --world 1 --ep-imbalance 2
cmd_error plan-ep-stash-imbalance 'plan: --ep-stash-imbalance 0\.5 is below 1' plan ck1/config.json --world 1 --ep-stash-imbalance 0.5
cmd_error simulate-config-ep-peak-no-experts "simulate --config: --ep-peak-imbalance 2 sizes expert parallelism's rows, and model.type gpt has no experts" \
    simulate --config ck1/config.json --world 1 --ep-peak-imbalance 2
cmd_error plan-ep-peak-below-stash 'plan: --ep-peak-imbalance 1\.2 is below --ep-stash-imbalance 1\.5' \
    plan "$src/examples/moe/config.json" --world 2 --ep-stash-imbalance 1.5 --ep-peak-imbalance 1.2
# A flag against the config's key: the pair the plan would use is checked, each named by where it came from.
cmd_error plan-ep-peak-below-config-stash "plan: --ep-peak-imbalance 1\\.2 is below the config's parallel\\.ep_stash_imbalance 1\\.5" \
    plan "$src/examples/moe/config.json" --world 2 --set parallel.expert_model_parallel_size=2 \
    --set parallel.ep_stash_imbalance=1.5 --ep-peak-imbalance 1.2
cmd_error simulate-stash-limits "simulate: give the auto scheduler's limit once" simulate --schedule auto --stages 2 --microbatches 4 --max-stashes 2 --memory-limit 1MiB --stash-bytes 1024
cmd_error simulate-config-gather-dtype "simulate --config: --param-gather-dtype 'f16' is f32" simulate --config ck1/config.json --world 1 --param-gather-dtype f16
# More stages than the model has blocks: the key named with where it came from, as the config reader's refusals are
# ("config FILE: key: ..." or "--set k=v: key: ..."; it was "parallel: 8 pipeline stages ..."), in train and verify
# (train::plan_before_world) and simulate --config (which exited 1; plan's refused candidates are worded alike:
# PlanSearch.ARefusedCandidate...). A one-layer GPT has 5 blocks.
printf '{"model": {"n_layers": 1}, "parallel": {"schedule": "interleaved_1f1b", "virtual_pipeline_stages": 8}}' > stages.json
stages_refusal='parallel\.virtual_pipeline_stages: 8 pipeline stages \(pipeline_model_parallel_size 1 x virtual stages 8\) but the model has only 5 blocks'
cmd_error train-stages-file "error: config stages\.json: $stages_refusal" train stages.json --set train.out_dir=out
cmd_error train-stages-set "error: --set parallel\.virtual_pipeline_stages=8: $stages_refusal" train --set train.out_dir=out \
    --set model.n_layers=1 --set parallel.schedule=interleaved_1f1b --set parallel.virtual_pipeline_stages=8
cmd_error simulate-config-stages "error: simulate --config: config stages\.json: $stages_refusal" \
    simulate --config stages.json --world 1 --profile "$src/profiles/h100_sxm.json" --svg out
# The ep imbalance flags at ep 1: refused as train refuses the config's keys there, whatever their value (simulate
# took them silently; plan takes them for its ep > 1 candidates).
printf '{"model": {"type": "moe"}}' > moe_ep1.json
for flag in --ep-imbalance --ep-stash-imbalance --ep-peak-imbalance; do
  cmd_error "simulate-config${flag#-}-at-ep-1" "simulate --config: $flag 1\.5 sizes the routed rows expert parallelism sends a rank, and parallel\.expert_model_parallel_size is 1 .*drop $flag" \
      simulate --config moe_ep1.json --world 1 --profile "$src/profiles/h100_sxm.json" $flag 1.5
done
# simulate's two forms mixed: the schedule form's options with --config say which key the config sets instead (they
# were refused as unknown options of simulate --config).
cmd_error simulate-config-schedule-form "simulate: --config simulates the config's own plan, and --stages belongs to the schedule form \(no --config\); the config sets it as parallel\.pipeline_model_parallel_size: drop --stages and give --set parallel\.pipeline_model_parallel_size=VALUE" \
    simulate --config ck1/config.json --world 1 --stages 2
[ -e same.json ] && { echo "FAIL same.json was written"; failures=$((failures + 1)); }
for kept in exists.json bench_out/bench.json tok_out/train.bin; do
  [ "$(cat "$kept")" = keep ] || { echo "FAIL $kept was changed"; failures=$((failures + 1)); }
done

# Inputs found once the command has read what they name (they exited 1): a --resume that names no checkpoint (checked
# before the world: "early"), one that holds weights only (cleave import's: --init-from starts a run from it), an
# --init-from model holding a NaN (found as the weights load, on every rank alike: "late"); generate's prompt too
# long for --logits (before the model is built); profile's --tp, --device and peaks; a --profile file that cannot be
# read (train's, before the world; plan's is plan-no-profile above). Exit 64, nothing written.
python3 "$src/tests/e2e/hf_fixture.py" hf_nan --nan transformer.h.1.mlp.c_fc.weight || { echo "FAIL hf fixture"; exit 1; }
python3 "$src/tests/e2e/hf_fixture.py" hf_ok || { echo "FAIL hf fixture"; exit 1; }
"$cleave" import hf_ok --out weights_only > import.log 2>&1 || { echo "FAIL import"; cat import.log; exit 1; }
mkdir -p no_checkpoints
hf_model=(--set model.vocab_size=261 --set model.d_model=16 --set model.n_heads=4 --set model.seq_len=12 --set model.d_ff=24)
bad_input resume-no-dir early '--resume no/such/dir: no such checkpoint directory; give a checkpoint.s step_NNNNNNN directory.*or --resume auto' \
    --resume no/such/dir
bad_input resume-no-checkpoint early '--resume no_checkpoints: holds no checkpoint \(no index\.json, no step_NNNNNNN/\)' \
    --resume no_checkpoints
bad_input resume-run-dir early '--resume ck1: holds no checkpoint \(no index\.json, no step_NNNNNNN/\); a run directory keeps its checkpoints in ck1/checkpoints' \
    --resume ck1
bad_input resume-weights-only late '--resume weights_only/step_0000000: this checkpoint holds weights only.*--init-from weights_only/step_0000000' \
    --resume weights_only "${hf_model[@]}"
bad_input init-from-nan late 'hf_nan: tensor blocks\.1\.mlp\.fc\.weight holds 1 non-finite value of 384 \(first: element 48 is nan\)' \
    --init-from hf_nan
bad_input train-profile-missing early 'profile no_such_profile\.json: cannot open it' --profile no_such_profile.json
bad_input train-profile-other-device early "train: --profile .*h100_sxm\.json describes a cuda machine .*but this run trains on device\.type \"cpu\".*give a profile of this cpu machine" \
    --profile "$src/profiles/h100_sxm.json"
long_prompt=$(printf 'a%.0s' $(seq 1 40))
cmd_error generate-logits-long 'generate: --logits needs a prompt of at most 32 tokens .*got 40; shorten the prompt' \
    generate ck1/checkpoints --prompt "$long_prompt" --logits out/logits.json
cmd_error profile-tp 'profile: --tp 3 does not divide n_heads 4 .*use tp in \{1, 2, 4\}' profile ck1/config.json --tp 3 --out out
cmd_error profile-gemm-device 'profile --gemm: --device tpu is not cpu or cuda:N' \
    profile --gemm --base "$src/profiles/h100_sxm.json" --device tpu --out out
cmd_error profile-gemm-peaks 'profile --gemm: the peaks must be > 0 TFLOP/s \(--peak-tflops-bf16 0,' \
    profile --gemm --base "$src/profiles/h100_sxm.json" --device cpu --peak-tflops-bf16 0 --out out

# Keys whose field documents that they do nothing in some layout run, and the run says so once.
if "$cleave" train --set train.out_dir=noop --set train.steps=1 --set train.eval_interval=2 --set train.eval_batches=0 \
     --set optimizer.zero_reduce=per_step --set optimizer.momentum=0.5 --set train.report=false \
     --set parallel.partition.method=uniform --set parallel.p2p_progress=thread --set checkpoint.save_final=false \
     --set checkpoint.keep_last=2 --set parallel.grad_reduce_dtype=bf16 >noop.log 2>&1 &&
   [ "$(grep -c 'parallel.grad_reduce_dtype bf16 has no effect: data_parallel_size x context_parallel_size is 1' noop.log)" -eq 1 ] &&
   [ "$(grep -c 'parallel.partition.method uniform has no effect: the model runs as one stage' noop.log)" -eq 1 ] &&
   [ "$(grep -c 'parallel.p2p_progress "thread" has no effect: the world is one rank' noop.log)" -eq 1 ] &&
   [ "$(grep -c 'checkpoint.keep_last 2 has no effect: checkpoint.interval 0 and checkpoint.save_final false save no checkpoint' noop.log)" -eq 1 ] &&
   [ "$(grep -c 'train.eval_interval 2 has no effect: train.eval_batches 0 turns evaluation off' noop.log)" -eq 1 ] &&
   [ "$(grep -c "optimizer.momentum 0.5 has no effect: it is SGD's" noop.log)" -eq 1 ] &&
   [ "$(grep -c 'optimizer.zero_reduce per_step has no effect with optimizer.zero_stage 0' noop.log)" -eq 1 ]; then
  echo "ok   no-effect-said-once: $(grep -c 'has no effect' noop.log) lines"
else
  echo "FAIL no-effect-said-once"; sed 's/^/    /' noop.log; failures=$((failures + 1))
fi

# And a good run writes what docs/report.md promises, and says which communicator carried it: parallel.comm_backend
# "auto" resolves to "mpi" on the CPU, in the log and in the resolved config.json.
if "$cleave" train --set train.out_dir=good --set train.steps=3 --set train.log_interval=1 >good.log 2>&1 &&
   [ -s good/config.json ] && [ "$(wc -l < good/metrics.jsonl)" -eq 3 ] &&
   grep -q '"grad_norm"' good/metrics.jsonl && grep -q '"peak_bytes"' good/metrics.jsonl &&
   grep -q 'comm backend mpi (auto: device.type is "cpu")' good.log &&
   grep -q '"comm_backend": "mpi"' good/config.json; then
  echo "ok   good-run: config.json (comm_backend mpi), 3 metrics lines, $(grep 'comm backend' good.log)"
else
  echo "FAIL good-run"; sed 's/^/    /' good.log; grep comm_backend good/config.json; failures=$((failures + 1))
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
