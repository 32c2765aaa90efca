#!/usr/bin/env bash
# Crash safety through the CLI: a pp2 run (2 ranks, deterministic, checkpoint every step, keep_last 2) has
# one rank SIGKILLed mid-training, after at least 6 checkpoints, while it checkpoints every step (so the
# kill often lands inside a write). `cleave train --resume auto` in the same directory picks the newest
# complete checkpoint, and the run finishes with the same 200 metrics rows (no duplicated step), the same
# losses bit for bit and byte-identical final checkpoint files as an uninterrupted run.
# With CRASH_INTERVAL=5 in the environment it checkpoints every 5 steps instead and the kill lands in
# the middle of training, steps after the newest checkpoint: the resumed run redoes them and drops their
# metrics rows. The watchdog is on in both (train.comm_timeout_s 20).
# Usage: checkpoint_crash.sh CLEAVE MPIEXEC [FLAGS...]   (Open MPI 4: ranks are mpiexec's children)
source "$(dirname "$0")/checkpoint_setup.sh" "$@"  # cleave, mpiexec, $work, fail, losses, tiny_config
interval=${CRASH_INTERVAL:-1}
# Long enough that the kill always lands before the end, even when the poll below is starved under ctest -j2
# (with 60 steps the run once finished first).
total=200
tiny_config parallel.pipeline_model_parallel_size=2 train.steps="$total" train.seed=9 train.comm_timeout_s=20 \
  checkpoint.interval="$interval" checkpoint.keep_last=2

"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set train.out_dir=ref > ref.log 2>&1 || { cat ref.log; fail "reference run"; }

"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set train.out_dir=run > crash.log 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do
  step=$(cat run/checkpoints/latest 2> /dev/null | sed 's/step_0*//')
  # Mid-training variant: also wait for two metrics rows past the newest checkpoint.
  [ -n "$step" ] && [ "$step" -ge 6 ] && [ "$(wc -l < run/metrics.jsonl)" -ge $((step + (interval > 1 ? 2 : 0))) ] && break
  sleep 0.05
done
victim=$(pgrep -P "$launcher" | tail -n 1)
[ -n "$victim" ] || { wait "$launcher"; cat crash.log; fail "no rank process to kill (the run ended first?)"; }
kill -9 "$victim"
wait "$launcher" && fail "the killed run exited 0"
[ -d "run/checkpoints/step_$(printf %07d "$total")" ] && fail "the run finished before the kill; nothing was tested"
# What a kill inside a later write leaves behind: a temporary directory with a partial shard. Never picked.
tmp="run/checkpoints/.tmp-step_$(printf %07d $((total - 1)))"
mkdir -p "$tmp" && head -c 1000 /dev/urandom > "$tmp/rank_00000.safetensors"
echo "     killed rank pid $victim with $(wc -l < run/metrics.jsonl) metrics rows at checkpoint $(cat run/checkpoints/latest); left: $(ls -A run/checkpoints | tr '\n' ' ')"

"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set train.out_dir=run --resume auto > resume.log 2>&1 \
  || { cat resume.log; fail "resume after the crash"; }
resumed=$(grep -o 'resumed from .*(step [0-9]*' resume.log) || { cat resume.log; fail "did not resume"; }
[ "$(sed 's/.*"step":\([0-9]*\),.*/\1/' run/metrics.jsonl | tr '\n' ' ')" = "$(seq 1 "$total" | tr '\n' ' ')" ] \
  || fail "metrics.jsonl steps are not 1..$total exactly once"
diff <(losses ref) <(losses run) > /dev/null || { paste <(losses ref) <(losses run); fail "losses differ"; }
final="step_$(printf %07d "$total")"
for f in ref/checkpoints/$final/*.safetensors; do
  cmp -s "$f" "run/checkpoints/$final/$(basename "$f")" || fail "final $(basename "$f") differs"
done
echo "ok   crash: $resumed); $total losses and the final checkpoint bit-identical to the uninterrupted run"
