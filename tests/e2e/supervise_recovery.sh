#!/usr/bin/env bash
# `cleave run` (engine/supervise/) keeping a job going through failures, one scenario per ctest test. Faults come
# from the test hook CLEAVE_FAULT_INJECT_<attempt> (engine/train/fault_injection.hpp; the supervisor hands it to
# that attempt only) or CLEAVE_FAULT_INJECT (every attempt). A tiny GPT in deterministic mode, 12 steps.
#   keep     4 ranks dp2 x pp2, rank 3 SIGKILLed at step 5, then (at dp1 x pp2) rank 1 at step 8: --keep-layout
#            restarts twice on 2 ranks; from the first checkpoint on the losses equal, bit for bit, a run resuming
#            that checkpoint at dp1 x pp2 by hand, and within 1e-6 the uninterrupted 4-rank run (the reported loss
#            sums the dp ranks' means in another order); run.json, metrics.jsonl and supervisor.json record both restarts.
#   plan     the same kill, default layout choice: the planner's best plan for 3 ranks (a fixed CPU profile, so
#            the choice does not depend on this machine's timing); bit-identical to resuming by hand at that layout,
#            within the layout-change bound (1e-4 relative) of the uninterrupted run.
#   hang     dp2: rank 1 SIGSTOPs itself inside a gradient reduction; the watchdog ends the job naming it; restart.
#   save     dp2: rank 0 SIGKILLed inside its checkpoint writer (step 4): the previous checkpoint (step 2) is used;
#            --max-lost-seconds sets the restart's checkpoint.interval from the measured step time.
#   budget   a fault that repeats on every attempt (cp2 on 2 ranks): --max-restarts 2 ends the job with the report;
#            the newest checkpoint and the metrics rows are intact; the records' worlds count the cp ranks.
#   refuse   bad input: fewer ranks left than --min-ranks; no checkpoint yet (restart from step 0, said so; a
#            --health-check drops a slot too); a
#            memory cap no plan meets on the ranks left (the error names the smallest world that fits); an
#            out_dir that holds a run (nothing started); a --profile of another device than the config's, a broken
#            --profile, a bad --memory-limit, either under --keep-layout (exit 64, nothing started).
#   sigterm  SIGTERM to cleave run: every rank saves the current step and the job exits 75; the checkpoint resumes.
#   damaged  dp2, rank 1 SIGKILLed at step 5; while the job is down one bit of step 4's tensor data flips (the
#            --health-check command, run between the failure and the restart, stands in for a disk): the restart's
#            --resume auto skips step 4 (kept as damaged-step_0000004) for step 2, the record follows it, and the
#            losses are bit-identical to resuming step 2 by hand. Then every checkpoint damaged while the job is down:
#            the restarted trainer exits 66 (no intact checkpoint) and the supervisor stops at once without spending
#            --max-restarts; so does a first attempt given --resume auto over those checkpoints.
#   cure     failures no restart cures, each ending the job at once with the trainer's own message: the config
#            file edited while the job is down (optimizer.lr, a change --resume refuses) makes the restarted trainer
#            exit 78 (checkpoint mismatch), on a restart and on a first attempt given --resume auto; every checkpoint
#            cut short while the job is down (the supervisor's quick check sees it) stops the job before the restart
#            with the message the trainer gives for it (no "restarting from step 0"); bad input (exit 64): the config
#            edited while the job is down to hold an unknown key stops the job at the restart; a typo in
#            --allow-config-change is refused by the trainer before any work and by cleave run before any job; a config
#            over its own device.memory_limit stops the job after its first attempt (the trainer refuses it before the world).
# usage: supervise_recovery.sh SCENARIO CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
set -u
scenario=$1
cleave=$(realpath "$2")
src=$(realpath "$3")
shift 3
mpiexec=("$@")
launcher="${mpiexec[*]}"
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT; echo "work $work"
cd "$work"
fail() { echo "FAIL $scenario: $*"; exit 1; }
losses_from() { python3 -c "
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r['step']>=int(sys.argv[2]): print(r['step'], repr(r['loss']))" "$1" "$2"; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$1" "$2"; }

cat > tiny.json <<'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 16},
  "batch": {"global_batch_size": 8, "micro_batch_size": 2},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"steps": 12, "seed": 5, "deterministic": true, "eval_batches": 0, "log_interval": 100,
            "comm_timeout_s": 3, "report": false},
  "checkpoint": {"interval": 2},
  "data": {"type": "synthetic"}
}
JSON
pp2=(--set parallel.pipeline_model_parallel_size=2)
# The re-plan's fixed profile: the shipped H100 profile's numbers as a `cpu` machine of 8 cores, so the planner's
# choice depends neither on this machine's timing nor on its cores. It is a CPU profile because the job runs on the
# CPU: `cleave run` refuses a profile of another device than the config's (the H100 one itself: scenario refuse).
python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
p.update(device_type='cpu', cores_per_node=8, name='the H100 profile as a fixed cpu machine of 8 cores (a test fixture)')
json.dump(p, open(sys.argv[2], 'w'), indent=1)" "$src/profiles/h100_sxm.json" cpu_profile.json || fail "cpu_profile.json"
sup() { "$cleave" run --launcher "$launcher" --teardown-grace 10 "$@"; }
timed() { local t0=$(date +%s%N); "$@"; local rc=$?; echo "     ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"; return $rc; }

# The command attempt N ran (supervisor.json), re-run by hand: its out_dir replaced, resuming CKPT.
# within_bound RUN REF BOUND: all 12 step losses of RUN within BOUND (relative) of REF's; prints the largest.
within_bound() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" << 'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
bound = float(sys.argv[3])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"     largest relative loss difference from the uninterrupted dp2 x pp2 run: {worst:.2e} (bound {bound:g})")
assert len(a) == len(b) == 12 and worst <= bound
PY
}
by_hand() {  # by_hand RUN_DIR ATTEMPT OUT CKPT
  python3 - "$1/supervisor/supervisor.json" "$2" "$3" "$4" > cmd.txt << 'PY'
import json, sys
rec = json.load(open(sys.argv[1])); cmd = rec["attempts"][int(sys.argv[2]) - 1]["command"]
out, ckpt = sys.argv[3], sys.argv[4]
i = cmd.index("--resume"); cmd = cmd[:i]   # drop --resume auto --restart-record FILE (last on the line)
print("\0".join(cmd + ["--set", "train.out_dir=" + out, "--resume", ckpt]), end="")
PY
  local args=()
  while IFS= read -r -d '' a; do args+=("$a"); done < <(cat cmd.txt; printf '\0')
  "${args[@]}" > "$3.log" 2>&1 || { cat "$3.log"; fail "the by-hand resume failed: ${args[*]}"; }
}

# same_as_by_hand CKPT STEP: attempt 2's command re-run by hand from CKPT (by_hand, into ref_hand) gives run's losses
# from STEP on, bit for bit (both listed side by side when they differ).
same_as_by_hand() {
  by_hand run 2 ref_hand "$1"
  diff <(losses_from run/metrics.jsonl "$2") <(losses_from ref_hand/metrics.jsonl "$2") > /dev/null \
    || { paste <(losses_from run/metrics.jsonl "$2") <(losses_from ref_hand/metrics.jsonl "$2"); fail "losses differ from the by-hand resume"; }
}

check_restart_rows() {  # the first row after each restart carries its number and timings
  python3 - "$1" "$2" << 'PY' || fail "metrics.jsonl does not record the restarts"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
assert [r["step"] for r in rows] == list(range(1, 13)), [r["step"] for r in rows]
marked = [r for r in rows if "restart" in r]
assert len(marked) == int(sys.argv[2]), marked
for r in marked:
    assert r["restart_startup_s"] > 0 and r["restart_load_s"] >= 0 and r["restart_first_step_s"] > 0, r
PY
}

case $scenario in
keep)
  export CLEAVE_FAULT_INJECT_1=3:5:forward:kill CLEAVE_FAULT_INJECT_2=1:8:forward:kill
  timed sup --slots 4 --keep-layout -- tiny.json "${pp2[@]}" --set train.out_dir=run --set checkpoint.background=false \
    > run.log 2>&1 || { cat run.log; fail "cleave run did not complete"; }
  unset CLEAVE_FAULT_INJECT_1 CLEAVE_FAULT_INJECT_2
  grep -E "run: restart|run: completed|run: attempt . failed" run.log
  [ "$(field run/run.json 'len(d["restarts"])')" = 2 ] || fail "run.json does not hold 2 restarts"
  [ "$(field run/run.json 'd["restarts"][0]["failed_ranks"]')" = "[3]" ] || fail "restart 1 does not name rank 3"
  [ "$(field run/run.json 'd["restarts"][0]["new_layout"].split(",")[0]')" = "tp1 pp2 dp1" ] || fail "not dp shrunk"
  [ "$(field run/run.json 'd["restarts"][0]["resumed_at_step"]')" = 4 ] || fail "restart 1 not from step 4"
  [ "$(field run/run.json 'd["restarts"][1]["steps_redone"]')" = 1 ] || fail "restart 2 should redo step 7"
  field run/run.json '[round(r["seconds_lost"],2) for r in d["restarts"]]' | grep -q '^\[[0-9.]*, [0-9.]*\]$' || fail "seconds lost"
  check_restart_rows run 2
  same_as_by_hand run/checkpoints/step_0000004 5
  "${mpiexec[@]}" -n 4 "$cleave" train tiny.json "${pp2[@]}" --set train.out_dir=ref_full > ref_full.log 2>&1 \
    || { cat ref_full.log; fail "uninterrupted run"; }
  # The reported step loss adds the dp ranks' partial means, in another order at dp1 than at dp2: its last bits
  # may differ (3e-8 relative measured, docs/multi-rank.md), while the by-hand resume above is bit-identical.
  within_bound run ref_full 1e-6 || fail "losses differ from the uninterrupted run beyond 1e-6"
  ls run/supervisor/attempt_1.metrics.jsonl run/supervisor/attempt_2.metrics.jsonl > /dev/null || fail "attempt metrics not kept"
  echo "ok   keep: 2 restarts (dp2 x pp2 -> dp1 x pp2 twice); steps 5-12 bit-identical to the by-hand resume, all 12 within 1e-6 of the uninterrupted run"
  ;;
plan)
  export CLEAVE_FAULT_INJECT_1=3:5:forward:kill
  timed sup --slots 4 --profile cpu_profile.json -- tiny.json "${pp2[@]}" --set train.out_dir=run \
    --set checkpoint.background=false > run.log 2>&1 || { cat run.log; fail "cleave run did not complete"; }
  unset CLEAVE_FAULT_INJECT_1
  grep -E "run: restart|run: completed" run.log
  [ "$(field run/run.json 'd["restarts"][0]["new_world"]')" = 3 ] || fail "the planner's plan does not use the 3 ranks left"
  field run/run.json 'd["restarts"][0]["layout_choice"]' | grep -q "planner's best" || fail "layout not the planner's"
  check_restart_rows run 1
  same_as_by_hand run/checkpoints/step_0000004 5
  "${mpiexec[@]}" -n 4 "$cleave" train tiny.json "${pp2[@]}" --set train.out_dir=ref_full > ref_full.log 2>&1 \
    || { cat ref_full.log; fail "uninterrupted run"; }
  within_bound run ref_full 1e-4 || fail "the planner's layout is outside the layout-change bound of the uninterrupted run"
  echo "ok   plan: restart on 3 ranks at $(field run/run.json 'd["restarts"][0]["new_layout"]'); bit-identical to the by-hand resume"
  ;;
measured)
  # No --profile: the supervisor measures this machine once for the re-plan and keeps the profile it read back,
  # with no memory cap of its own, as `cleave plan` without --profile ("device_memory_GiB": "none").
  export CLEAVE_FAULT_INJECT_1=3:5:forward:kill
  timed sup --slots 4 -- tiny.json "${pp2[@]}" --set train.out_dir=run --set checkpoint.background=false > run.log 2>&1 \
    || { cat run.log; fail "cleave run did not complete with a measured profile"; }
  unset CLEAVE_FAULT_INJECT_1
  grep -E "run: measuring|run: restart|run: completed" run.log
  [ "$(field run/supervisor/profile.json 'd["device_memory_GiB"]')" = none ] \
    || fail "the kept profile states a memory cap of its own: $(cat run/supervisor/profile.json)"
  field run/run.json 'd["restarts"][0]["layout_choice"]' | grep -q "planner's best" || fail "layout not the planner's"
  echo "ok   measured: restart on $(field run/run.json 'd["restarts"][0]["new_world"]') ranks, planned on the measured profile"
  ;;
hang)
  export CLEAVE_FAULT_INJECT_1=1:5:dp_reduce:stop
  timed sup --slots 2 --keep-layout -- tiny.json --set train.out_dir=run --set train.comm_timeout_s=2 \
    > run.log 2>&1 || { cat run.log; fail "cleave run did not complete"; }
  unset CLEAVE_FAULT_INJECT_1
  grep -E "not answering|run: restart|run: completed" run.log
  [ "$(field run/run.json 'd["restarts"][0]["kind"]')" = hung ] || fail "not recorded as a hang"
  [ "$(field run/run.json 'd["restarts"][0]["failed_ranks"]')" = "[1]" ] || fail "the hung rank is not rank 1"
  check_restart_rows run 1
  ckpt=$(field run/run.json 'd["restarts"][0]["checkpoint"]')
  step=$(field run/run.json 'd["restarts"][0]["resumed_at_step"]')
  same_as_by_hand "$ckpt" $((step + 1))
  echo "ok   hang: watchdog named rank 1; restarted from step $step on 1 rank; bit-identical to the by-hand resume"
  ;;
save)
  export CLEAVE_FAULT_INJECT_1=0:4:save:kill
  timed sup --slots 2 --keep-layout --max-lost-seconds 0.05 -- tiny.json --set train.out_dir=run > run.log 2>&1 \
    || { cat run.log; fail "cleave run did not complete"; }
  unset CLEAVE_FAULT_INJECT_1
  grep -E "run: restart|run: completed|run: checkpoint.interval" run.log
  grep -q "run: checkpoint.interval [0-9]* (--max-lost-seconds 0.05 at" run.log || fail "--max-lost-seconds set no interval"
  field run/supervisor/supervisor.json 'd["attempts"][1]["command"]' | grep -q "checkpoint.interval=" \
    || fail "the restart does not carry the checkpoint interval"
  [ "$(field run/run.json 'd["restarts"][0]["resumed_at_step"]')" = 2 ] || fail "the previous checkpoint (step 2) was not used"
  same_as_by_hand run/checkpoints/step_0000002 3
  echo "ok   save: killed inside the step-4 checkpoint write; resumed from step 2; bit-identical to the by-hand resume"
  ;;
budget)
  export CLEAVE_FAULT_INJECT=0:4:forward:throw
  sup --slots 2 --max-restarts 2 --keep-layout -- tiny.json --set parallel.context_parallel_size=2 --set train.out_dir=run \
    --set checkpoint.background=false > run.log 2>&1 && fail "a job failing on every attempt exited 0"
  unset CLEAVE_FAULT_INJECT
  grep -q "giving up: the restart budget is spent: 2 restarts made, --max-restarts 2; nothing is lost: the newest intact checkpoint is .*step_0000002" run.log \
    || { cat run.log; fail "no clear report of the spent budget"; }
  [ -f run/checkpoints/step_0000002/index.json ] || fail "the newest checkpoint is gone"
  [ "$(wc -l < run/metrics.jsonl)" = 3 ] || fail "metrics rows 1..3 not intact"
  [ "$(field run/supervisor/supervisor.json 'len(d["attempts"])')" = 3 ] || fail "not 3 attempts"
  # cp2 on 2 ranks: the restart record's worlds count the context-parallel ranks too.
  [ "$(field run/supervisor/supervisor.json '[(r["old_world"], r["new_world"]) for r in d["restarts"]]')" = "[(2, 2), (2, 2)]" ] \
    || fail "restart worlds: $(field run/supervisor/supervisor.json '[(r["old_world"], r["new_world"]) for r in d["restarts"]]')"
  echo "ok   budget: $(grep -o 'giving up: [^;]*' run.log)"
  ;;
refuse)
  # Fewer ranks left than --min-ranks.
  CLEAVE_FAULT_INJECT_1=1:3:forward:kill sup --slots 2 --min-ranks 2 -- tiny.json --set train.out_dir=few \
    --set checkpoint.background=false > few.log 2>&1 \
    && fail "--min-ranks 2 with 1 rank left exited 0"
  grep -q "giving up: 1 rank left, fewer than --min-ranks 2; nothing is lost: the newest intact checkpoint is .*step_0000002" few.log \
    || { cat few.log; fail "--min-ranks refusal unclear"; }
  [ -f few/checkpoints/step_0000002/index.json ] || fail "--min-ranks: checkpoint gone"
  # No checkpoint yet: restart from step 0 and say so (checkpoint.interval 0: only the final one).
  # (3 slots, dp2 on the first two, and a health check that refuses slot 2: the dead rank's slot and slot 2 are
  # both dropped.) A config that does not run on the slots given is refused before anything starts.
  sup --slots 3 -- tiny.json --set train.out_dir=odd > odd.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat odd.log; fail "dp3 of a global batch of 8: exit $status, expected 64 (bad input)"; }
  grep -q "run: the config does not run on the 3 slots given: .*global_batch_size 8 is not divisible.*nothing was started" \
    odd.log || { cat odd.log; fail "the refusal of a config that does not fit the slots"; }
  [ ! -e odd ] || fail "the refused run created its out_dir"
  CLEAVE_FAULT_INJECT_1=1:3:forward:kill sup --slots 3 --keep-layout --health-check 'test "$CLEAVE_SLOT_INDEX" != 2' \
    -- tiny.json --set parallel.data_parallel_size=2 --set train.out_dir=fresh --set checkpoint.interval=0 > fresh.log 2>&1 \
    || { cat fresh.log; fail "restart without a checkpoint"; }
  [ "$(field fresh/run.json 'd["restarts"][0]["dropped_slots"]')" = "['localhost:1', 'localhost:2']" ] \
    || fail "the dead rank's slot and the unhealthy one are not both dropped"
  grep -q "no checkpoint yet under .*: restarting from step 0 (2 steps done so far are redone)" fresh.log \
    || { cat fresh.log; fail "the restart from step 0 is not said"; }
  [ "$(field fresh/run.json 'd["restarts"][0]["steps_redone"]')" = 2 ] || fail "steps redone"
  # The restart from step 0 (--resume auto, no checkpoint) moved the failed attempt's rows aside, not over them.
  [ "$(wc -l < fresh/earlier_attempt_1/metrics.jsonl)" -eq 2 ] || fail "the failed attempt's metrics.jsonl was not kept"
  # A memory cap no plan meets on the one rank left: the error names the smallest world that fits.
  "$cleave" plan tiny.json --world 1 --profile cpu_profile.json --json one.json > /dev/null 2>&1 \
    || fail "cleave plan --world 1"
  cap=$(python3 -c "import json; d=json.load(open('one.json')); p=d['plans'] if isinstance(d,dict) else d; print(int(min(x['peak_bytes'] for x in p) * 0.9))")
  CLEAVE_FAULT_INJECT_1=1:3:forward:kill sup --slots 2 --profile cpu_profile.json --memory-limit "$cap" -- \
    tiny.json "${pp2[@]}" --set train.out_dir=cap --set checkpoint.background=false > cap.log 2>&1 && fail "a cap no plan meets exited 0"
  grep -q "giving up: no layout fits at the 1 rank left (no plan on 1 rank fits the memory cap .*); the smallest world that fits is 2 ranks" cap.log \
    || { cat cap.log; fail "the memory-cap refusal does not name the smallest world"; }
  [ -f cap/checkpoints/step_0000002/index.json ] || fail "memory cap: checkpoint gone"
  # An out_dir that holds a run: refused before anything starts.
  sup --slots 2 -- tiny.json --set train.out_dir=few > again.log 2>&1 && fail "a run directory was reused"
  grep -q "train.out_dir few already holds a run; nothing was started" again.log || { cat again.log; fail "out_dir refusal"; }
  [ ! -d few/supervisor.2 ] || fail "the refused run created files"
  # The re-plan's inputs are checked before the first attempt (they were read only at the first failure), and
  # --keep-layout, which never re-plans, refuses them: bad input, exit 64 (they exited 1).
  printf '{"format": "cleave-hardware-profile"' > broken.json
  # Each is bad input: exit 64 (cleave run's own, before any job).
  sup --slots 2 --profile broken.json -- tiny.json --set train.out_dir=badprof > badprof.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat badprof.log; fail "a broken --profile: exit $status, expected 64"; }
  grep -q "run: profile broken.json: not valid JSON .*; nothing was started" badprof.log || { cat badprof.log; fail "--profile refusal"; }
  sup --slots 2 --memory-limit 4XB -- tiny.json --set train.out_dir=badprof > badcap.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat badcap.log; fail "--memory-limit 4XB: exit $status, expected 64"; }
  grep -q "run: --memory-limit: unknown unit 'XB' in '4XB'.*; nothing was started" badcap.log || { cat badcap.log; fail "--memory-limit refusal"; }
  sup --slots 2 --keep-layout --profile cpu_profile.json -- tiny.json --set train.out_dir=badprof > keepprof.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat keepprof.log; fail "--keep-layout with --profile: exit $status, expected 64"; }
  grep -q "run: --profile prices the planner's re-plan, but --keep-layout .*never re-plans; nothing was started" keepprof.log \
    || { cat keepprof.log; fail "--keep-layout --profile refusal"; }
  # A profile of another device than the job's: the re-plan would price a machine the job does not run on.
  sup --slots 2 --profile "$src/profiles/h100_sxm.json" -- tiny.json --set train.out_dir=badprof > gpuprof.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat gpuprof.log; fail "a cuda --profile for a cpu job: exit $status, expected 64"; }
  grep -q "run: --profile .*h100_sxm.json describes a cuda machine, but the job runs on the config's device.type \"cpu\".*nothing was started.*set device.type=cuda after the --" gpuprof.log \
    || { cat gpuprof.log; fail "the device refusal does not name both devices and the fix"; }
  grep -q "run: attempt" gpuprof.log && fail "a job was started with a cuda --profile"
  [ ! -e badprof ] || fail "a refused run created its out_dir"
  # A launcher that cannot start: refused before the first attempt (it used to fail every attempt with exit 127,
  # re-planning each time, until the restart budget was spent).
  "$cleave" run --slots 2 --launcher /nonexistent/mpiexec -- tiny.json --set train.out_dir=badprof > nolaunch.log 2>&1 \
    && fail "a launcher that does not exist accepted"
  grep -q "run: the launcher /nonexistent/mpiexec cannot be started (not an executable file); nothing was started" nolaunch.log \
    || { cat nolaunch.log; fail "launcher refusal"; }
  "$cleave" run --slots 2 --launcher "no-such-launcher-xyz -x" -- tiny.json --set train.out_dir=badprof > nolaunch2.log 2>&1 \
    && fail "a launcher not in PATH accepted"
  grep -q "run: the launcher no-such-launcher-xyz cannot be started (not found in PATH)" nolaunch2.log \
    || { cat nolaunch2.log; fail "launcher (PATH) refusal"; }
  [ ! -e badprof ] || fail "a refused run created its out_dir"
  echo "ok   refuse: --min-ranks, no checkpoint (restart from 0), memory cap (smallest world 2), out_dir in use, re-plan inputs, launcher"
  ;;
damaged)
  cat > damage.sh << 'SH'
#!/bin/sh
# Once (it runs for every slot): one bit in the middle of step 4's tensor data, which only a full read notices.
[ -e damaged.done ] && exit 0
python3 - run/checkpoints/step_0000004/rank_00000.safetensors << 'PY'
import struct, sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", d[:8])[0]
d[(8 + n + len(d)) // 2] ^= 1; open(p, "wb").write(d)
PY
touch damaged.done
SH
  chmod +x damage.sh
  export CLEAVE_FAULT_INJECT_1=1:5:forward:kill
  timed sup --slots 2 --keep-layout --health-check "$work/damage.sh" -- tiny.json --set train.out_dir=run \
    --set checkpoint.background=false > run.log 2>&1 || { cat run.log; fail "cleave run did not complete"; }
  unset CLEAVE_FAULT_INJECT_1
  [ -e damaged.done ] || fail "the health check did not run"
  grep -E "run: restart|run: completed" run.log
  grep -q "run: restart 1 resumed from step 2, not 4: the trainer skipped a damaged checkpoint" run.log \
    || { cat run.log; fail "the supervisor did not follow the fallback"; }
  grep -q "warning: checkpoint: --resume skipped step_0000004 (step 4), damaged: checkpoint file .*rank_00000.safetensors: bytes .* fail their checksum" \
    run/supervisor/attempt_2.log || { cat run/supervisor/attempt_2.log; fail "the trainer's skip line"; }
  [ -d run/checkpoints/damaged-step_0000004 ] || fail "the damaged checkpoint was not kept"
  [ "$(field run/run.json 'd["restarts"][0]["resumed_at_step"]')" = 2 ] || fail "the record does not say step 2"
  field run/run.json 'd["restarts"][0]["checkpoint"]' | grep -q "step_0000002$" || fail "the record names another checkpoint"
  [ "$(field run/run.json 'd["restarts"][0]["steps_redone"]')" = 2 ] || fail "steps 3 and 4 are redone"
  check_restart_rows run 1
  same_as_by_hand run/checkpoints/step_0000002 3
  echo "ok   damaged: step 4 damaged while down; restarted from step 2 (step 4 kept as damaged-step_0000004); bit-identical to the by-hand resume"
  # Every checkpoint damaged while the job is down (tensor data: the quick check passes, the restarted trainer's load
  # finds it): the trainer exits 66 and the supervisor stops at once, budget unspent, naming each checkpoint.
  cat > damage_all.sh << 'SH'
#!/bin/sh
[ -e all.done ] && exit 0
for f in all/checkpoints/step_*/rank_00000.safetensors; do python3 - "$f" << 'PY'
import struct, sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", d[:8])[0]
d[(8 + n + len(d)) // 2] ^= 1; open(p, "wb").write(d)
PY
done
touch all.done
SH
  chmod +x damage_all.sh
  no_intact="no intact checkpoint: --resume auto: no intact checkpoint under all/checkpoints: step_0000004 (step 4): .*fail their checksum.*; step_0000002 (step 2): .*fail their checksum"
  CLEAVE_FAULT_INJECT_1=1:5:forward:kill timed sup --slots 2 --keep-layout --max-restarts 3 --health-check "$work/damage_all.sh" \
    -- tiny.json --set train.out_dir=all --set checkpoint.background=false > all.log 2>&1; rc=$?
  [ $rc = 66 ] || { cat all.log; fail "every checkpoint damaged: cleave run exited $rc, not the job's 66"; }
  grep -q "run: giving up at once, a restart cannot cure this (1 of --max-restarts 3 restarts made, the rest not spent): $no_intact" all.log \
    || { cat all.log; fail "every checkpoint damaged: the supervisor's message"; }
  [ "$(field all/supervisor/supervisor.json 'len(d["attempts"])')" = 2 ] || { cat all.log; fail "every checkpoint damaged: restarted again"; }
  field all/supervisor/supervisor.json 'd["outcome"]' | grep -q "^failed: $no_intact" || fail "every checkpoint damaged: the record's outcome"
  [ "$(field all/supervisor/supervisor.json 'd["attempts"][1]["exit_code"]')" = 66 ] || fail "the attempt's exit code is not 66"
  [ -d all/checkpoints/step_0000002 ] && [ -d all/checkpoints/step_0000004 ] || fail "every checkpoint damaged: a checkpoint was renamed"
  # The same run continued by hand (--resume auto after the --): its first attempt stops it, no restart at all.
  timed sup --slots 2 --max-restarts 3 -- tiny.json --set train.out_dir=all --resume auto > again.log 2>&1 \
    && { cat again.log; fail "resuming every-damaged checkpoints: exit 0"; }
  grep -q "run: giving up at once, a restart cannot cure this (0 of --max-restarts 3 restarts made, the rest not spent): $no_intact" again.log \
    && [ "$(field all/supervisor.2/supervisor.json 'len(d["attempts"])')" = 1 ] || { cat again.log; fail "--resume auto of every-damaged checkpoints"; }
  echo "ok   damaged: every checkpoint damaged: the supervisor stops at once (exit 66 from the trainer), on a restart and on a first attempt"
  ;;
cure)
  cp tiny.json cfg.json
  cat > edit_lr.sh << 'SH'
#!/bin/sh
sed -i 's/"lr": 0.003/"lr": 0.001/' cfg.json
SH
  chmod +x edit_lr.sh
  CLEAVE_FAULT_INJECT_1=1:5:forward:kill timed sup --slots 2 --keep-layout --max-restarts 3 --health-check "$work/edit_lr.sh" \
    -- cfg.json --set train.out_dir=lr --set checkpoint.background=false > lr.log 2>&1; rc=$?
  [ $rc = 78 ] || { cat lr.log; fail "a refused config change: cleave run exited $rc, not the job's 78"; }
  mismatch="checkpoint mismatch: --resume lr/checkpoints/step_0000004: the config differs from the one the checkpoint was trained with: optimizer.lr 0.003 -> 0.001; .*--allow-config-change optimizer.lr .*--set optimizer.lr=0.003"
  grep -q "run: giving up at once, a restart cannot cure this (1 of --max-restarts 3 restarts made, the rest not spent): $mismatch; .*make the config fit the checkpoint" lr.log \
    || { cat lr.log; fail "a refused config change: the supervisor's message"; }
  [ "$(field lr/supervisor/supervisor.json 'len(d["attempts"])')" = 2 ] || { cat lr.log; fail "a refused config change: restarted again"; }
  [ "$(field lr/supervisor/supervisor.json 'd["attempts"][1]["exit_code"]')" = 78 ] || fail "the attempt's exit code is not 78"
  field lr/supervisor/supervisor.json 'd["outcome"]' | grep -q "^failed: $mismatch" || fail "a refused config change: the record's outcome"
  # The same run continued by hand on 2 ranks (--resume auto after the --): its first attempt stops it.
  timed sup --slots 2 --max-restarts 3 -- cfg.json --set train.out_dir=lr --resume auto > lr2.log 2>&1 \
    && { cat lr2.log; fail "resuming with a refused config change: exit 0"; }
  grep -q "run: giving up at once, a restart cannot cure this (0 of --max-restarts 3 restarts made, the rest not spent): checkpoint mismatch: rank 0: --resume lr/checkpoints/step_0000004: the config differs" lr2.log \
    && [ "$(field lr/supervisor.2/supervisor.json 'len(d["attempts"])')" = 1 ] || { cat lr2.log; fail "--resume auto with a refused config change"; }
  # Every checkpoint cut short while the job is down: the quick check finds it before the restart.
  cat > cut_all.sh << 'SH'
#!/bin/sh
for f in cut/checkpoints/step_*/rank_00000.safetensors; do truncate -s 100 "$f"; done
SH
  chmod +x cut_all.sh
  CLEAVE_FAULT_INJECT_1=1:5:forward:kill timed sup --slots 2 --keep-layout --max-restarts 3 --health-check "$work/cut_all.sh" \
    -- tiny.json --set train.out_dir=cut --set checkpoint.background=false > cut.log 2>&1 && { cat cut.log; fail "every checkpoint cut: exit 0"; }
  no_intact="no intact checkpoint: --resume auto: no intact checkpoint under cut/checkpoints: step_0000004 (step 4): .*rank_00000.safetensors.*; step_0000002 (step 2): .*rank_00000.safetensors.*; nothing was loaded, renamed or written"
  grep -q "run: giving up at once, a restart cannot cure this (0 of --max-restarts 3 restarts made, the rest not spent): $no_intact" cut.log \
    || { cat cut.log; fail "every checkpoint cut: the supervisor's message"; }
  ! grep -q "restarting from step 0\|run: restart 1" cut.log || { cat cut.log; fail "every checkpoint cut: a restart was announced"; }
  [ "$(field cut/supervisor/supervisor.json 'len(d["attempts"])')" = 1 ] || { cat cut.log; fail "every checkpoint cut: restarted"; }
  [ "$(field cut/supervisor/supervisor.json 'len(d["restarts"])')" = 0 ] || fail "every checkpoint cut: a restart recorded"
  # The trainer's own message for the same checkpoints, word for word.
  "$cleave" train tiny.json --set train.out_dir=cut --resume auto > cut_train.log 2>&1; rc=$?
  [ $rc = 66 ] || { cat cut_train.log; fail "the trainer over cut checkpoints exited $rc, not 66"; }
  trainer=$(sed -n 's/^error: //p' cut_train.log)
  grep -qF "): no intact checkpoint: $trainer" cut.log || { echo "trainer: $trainer"; cat cut.log; fail "the supervisor's message is not the trainer's"; }
  # Bad input (exit 64): the config edited while the job is down to hold an unknown key stops the job at the restart.
  cat > edit_key.sh << 'SH'
#!/bin/sh
sed -i 's/"lr": 0.003/"lrr": 0.003/' key.json
SH
  chmod +x edit_key.sh
  cp tiny.json key.json
  CLEAVE_FAULT_INJECT_1=1:5:forward:kill timed sup --slots 2 --keep-layout --max-restarts 3 --health-check "$work/edit_key.sh" \
    -- key.json --set train.out_dir=key --set checkpoint.background=false > key.log 2>&1; rc=$?
  [ $rc = 64 ] || { cat key.log; fail "an unknown key: cleave run exited $rc, not the job's 64"; }
  grep -q "error: config key.json: unknown key optimizer.lrr (did you mean optimizer.lr?)" key.log &&
    grep -q "run: giving up at once, a restart cannot cure this (1 of --max-restarts 3 restarts made, the rest not spent): the job refused its command line or config before any work (bad input, exit 64; its error above says what to change); once that is changed, continue from key/checkpoints/step_0000004 with the same cleave run command and --resume auto after the --" key.log \
    || { cat key.log; fail "an unknown key: the supervisor's message"; }
  [ "$(field key/supervisor/supervisor.json 'len(d["attempts"])')" = 2 ] || { cat key.log; fail "an unknown key: restarted again"; }
  [ "$(field key/supervisor/supervisor.json 'd["attempts"][1]["exit_code"]')" = 64 ] || fail "the attempt's exit code is not 64"
  # A typo in --allow-config-change: the trainer refuses it before any work (no run directory, no world), exit 64,
  # naming the key and the nearest one; cleave run refuses it before starting any job.
  "$cleave" train tiny.json --set train.out_dir=typo --resume auto --allow-config-change optimizer.lrr > typo.log 2>&1; rc=$?
  [ $rc = 64 ] || { cat typo.log; fail "a typo in --allow-config-change: the trainer exited $rc, not 64"; }
  grep -q "^error: --allow-config-change: 'optimizer.lrr' is not a config key (did you mean optimizer.lr?)" typo.log \
    || { cat typo.log; fail "a typo in --allow-config-change: the trainer's message"; }
  [ ! -e typo ] && ! grep -q "comm backend" typo.log || { cat typo.log; fail "a typo in --allow-config-change: work was done first"; }
  timed sup --slots 2 --max-restarts 3 -- tiny.json --set train.out_dir=typo --resume auto --allow-config-change optimizer.lrr \
    > typo_run.log 2>&1; rc=$?
  [ $rc = 64 ] && grep -q "error: --allow-config-change: 'optimizer.lrr' is not a config key (did you mean optimizer.lr?)" typo_run.log \
    && ! grep -q "run: attempt 1" typo_run.log || { cat typo_run.log; fail "cleave run with a typo in --allow-config-change (exit $rc)"; }
  # An unknown --set key and an unknown option: exit 64 from the trainer too.
  "$cleave" train tiny.json --set train.out_dir=typo --set optimizer.lrr=1 > set.log 2>&1; rc=$?
  [ $rc = 64 ] && grep -q "unknown key optimizer.lrr (did you mean optimizer.lr?)" set.log || { cat set.log; fail "an unknown --set key: exit $rc"; }
  "$cleave" train tiny.json --set train.out_dir=typo --resum auto > opt.log 2>&1; rc=$?
  [ $rc = 64 ] && grep -q "unknown option '--resum' (did you mean --resume?)" opt.log || { cat opt.log; fail "an unknown option: exit $rc"; }
  # A config over its own memory cap (bad input, exit 64): the supervisor makes the config's plan as the trainer would
  # and refuses it before any job (it exited 1, and the same layout was restarted until the budget was spent; then
  # its first attempt stopped with the trainer's refusal).
  timed sup --slots 2 --max-restarts 3 -- tiny.json "${pp2[@]}" --set train.out_dir=cap --set device.memory_limit=64KiB \
    > cap.log 2>&1; rc=$?
  [ $rc = 64 ] || { cat cap.log; fail "a config over its memory cap: cleave run exited $rc, not 64"; }
  grep -q "run: the config does not run on the 2 slots given: memory: pp rank [01] needs about .* but device.memory_limit is 64.00 KiB.*nothing was started" cap.log \
    || { cat cap.log; fail "a config over its memory cap: the supervisor's message"; }
  [ ! -e cap ] || { cat cap.log; fail "a config over its memory cap: a job was started (cap/ written)"; }
  # Ranks past this host's memory (about 800 TiB of parameters and state; the supervisor's own check knows no host, as
  # its ranks may run elsewhere): the job refuses its config before any work (exit 64) and the supervisor says so, with
  # no talk of checkpoints or recovery, as nothing crashed and none was written.
  timed sup --slots 2 --max-restarts 3 -- tiny.json --set train.out_dir=host --set model.d_model=65536 \
    --set model.n_layers=1024 --set model.n_heads=64 > host.log 2>&1; rc=$?
  [ $rc = 64 ] || { cat host.log; fail "ranks past the host's memory: cleave run exited $rc, not the job's 64"; }
  grep -q "^error: memory: the 2 ranks on this host need .* of host memory" host.log &&
    grep -q "run: giving up at once, a restart cannot cure this (0 of --max-restarts 3 restarts made, the rest not spent): the job refused its command line or config before any work (bad input, exit 64; its error above says what to change); once that is changed, run the same cleave run command again (no checkpoint was written)$" host.log \
    || { cat host.log; fail "ranks past the host's memory: the supervisor's message"; }
  ! grep -q "nothing was renamed or deleted\|run: restart" host.log || { cat host.log; fail "ranks past the host's memory: recovery talk"; }
  [ "$(field host/supervisor/supervisor.json 'len(d["attempts"])')" = 1 ] || { cat host.log; fail "ranks past the host's memory: restarted"; }
  echo "ok   cure: a refused config change (exit 78), every checkpoint cut short (quick check), an unknown key in the edited config, a typo in --allow-config-change, a config over its memory cap and ranks past the host's memory (exit 64) stop the job at once"
  ;;
sigterm)
  sed 's/"steps": 12/"steps": 100000/' tiny.json > long.json
  "$cleave" run --launcher "$launcher" --slots 2 -- long.json --set train.out_dir=run --set checkpoint.interval=0 \
    --set checkpoint.save_final=false > run.log 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [ "$(wc -l < run/metrics.jsonl 2> /dev/null || echo 0)" -ge 3 ] && break; sleep 0.05; done
  kill -TERM $pid
  wait $pid
  rc=$?
  [ $rc = 75 ] || { cat run.log; fail "exit code $rc after SIGTERM (expected 75)"; }
  last=$(tail -n 1 run/metrics.jsonl | python3 -c "import json,sys; print(json.load(sys.stdin)['step'])")
  [ -f "run/checkpoints/step_$(printf %07d "$last")/index.json" ] || { cat run.log; fail "no checkpoint of step $last"; }
  grep -q "stopped on request (SIGUSR1, the preemption notice) after step $last" run.log || fail "the stop is not said"
  echo "ok   sigterm: exit 75 with checkpoint step $last saved"
  ;;
*) fail "unknown scenario" ;;
esac
