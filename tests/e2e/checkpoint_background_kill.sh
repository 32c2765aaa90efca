#!/usr/bin/env bash
# Background checkpoint saves (checkpoint.background, the default) under failure, through the CLI on pp2 (2
# ranks, deterministic, a checkpoint every 4 of 12 steps):
#  1. rank 1 SIGKILLs itself in its background writer of the step-8 checkpoint, once its file is written and
#     before the commit (CLEAVE_FAULT_INJECT=1:8:save:kill): the run dies with that save in flight. The
#     step-4 checkpoint is the newest complete one (`latest` names it; .tmp-step_0000008 holds the partial
#     save and no index.json), and `--resume auto` continues from it to the same 12 losses bit for bit and a
#     final checkpoint byte-identical to an uninterrupted run's.
#  2. rank 0's writer of the step-8 checkpoint throws (ACTION throw): the error surfaces on every rank at that
#     checkpoint's commit, naming the step and the temporary directory; nothing is committed past step 4.
#  3. checkpoint.background=false writes the same files as the background run (the save is the same bytes).
# Usage: checkpoint_background_kill.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/checkpoint_setup.sh" "$@"  # cleave, mpiexec, $work, fail, losses, tiny_config
tiny_config parallel.pipeline_model_parallel_size=2 train.seed=9 train.comm_timeout_s=20
train() { "${mpiexec[@]}" -n 2 "$cleave" train tiny.json "$@"; }

train --set train.out_dir=ref > ref.log 2>&1 || { cat ref.log; fail "reference run"; }
grep -q "files are written in the background" ref.log || { cat ref.log; fail "the reference run did not save in the background"; }

# 1. SIGKILL inside the background writer.
CLEAVE_FAULT_INJECT=1:8:save:kill train --set train.out_dir=run > kill.log 2>&1 && { cat kill.log; fail "the killed run exited 0"; }
grep -q "fault injection (CLEAVE_FAULT_INJECT): step 8, checkpoint writer of step 8" kill.log \
  || { cat kill.log; fail "the fault did not fire in the writer"; }
[ "$(cat run/checkpoints/latest)" = step_0000004 ] || { ls -A run/checkpoints; fail "latest is not step_0000004"; }
[ -d run/checkpoints/.tmp-step_0000008 ] || { ls -A run/checkpoints; fail "no save was in flight"; }
[ -e run/checkpoints/.tmp-step_0000008/index.json ] && fail "the in-flight save has an index.json"
[ -d run/checkpoints/step_0000008 ] && fail "the killed save was committed"
left=$(ls -A run/checkpoints | tr '\n' ' ')
train --set train.out_dir=run --resume auto > resume.log 2>&1 || { cat resume.log; fail "resume after the kill"; }
grep -q "resumed from run/checkpoints/step_0000004 (step 4" resume.log || { cat resume.log; fail "did not resume from step 4"; }
[ "$(sed 's/.*"step":\([0-9]*\),.*/\1/' run/metrics.jsonl | tr '\n' ' ')" = "$(seq 1 12 | tr '\n' ' ')" ] \
  || fail "metrics.jsonl steps are not 1..12 exactly once"
diff <(losses ref) <(losses run) > /dev/null || { paste <(losses ref) <(losses run); fail "losses differ"; }
for f in ref/checkpoints/step_0000012/*.safetensors; do
  cmp -s "$f" "run/checkpoints/step_0000012/$(basename "$f")" || fail "final $(basename "$f") differs"
done
echo "ok   kill in the step-8 background writer (left: $left): resumed at step 4, 12 losses and the final checkpoint bit-identical"

# 2. An error in the background writer surfaces at the commit, with the path.
CLEAVE_FAULT_INJECT=0:8:save:throw train --set train.out_dir=thrown > throw.log 2>&1 && { cat throw.log; fail "a failed background save exited 0"; }
grep -q "checkpoint of step 8 into thrown/checkpoints/.tmp-step_0000008: injected fault" throw.log \
  || { cat throw.log; fail "the writer's error does not name the step and the path"; }
[ "$(cat thrown/checkpoints/latest)" = step_0000004 ] || fail "a failed save moved latest"
echo "ok   writer error surfaced: $(grep -o 'checkpoint of step 8 into [^:]*: injected fault' throw.log | head -n 1)"

# 3. The synchronous save writes the same bytes.
train --set train.out_dir=sync --set checkpoint.background=false > sync.log 2>&1 || { cat sync.log; fail "synchronous run"; }
grep -q "written in the background" sync.log && fail "checkpoint.background=false saved in the background"
for f in ref/checkpoints/step_0000012/*.safetensors; do
  cmp -s "$f" "sync/checkpoints/step_0000012/$(basename "$f")" || fail "synchronous $(basename "$f") differs"
done
echo "ok   checkpoint.background=false writes byte-identical files"
