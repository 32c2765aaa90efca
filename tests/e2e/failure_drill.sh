#!/usr/bin/env bash
# Failure drills: `cleave train` under a real mpiexec, with one rank failing on purpose (the test hook
# CLEAVE_FAULT_INJECT, engine/train/fault_injection.hpp) or the output directory's disk filling up. Each drill
# checks what docs/multi-rank.md, "Watchdog and failure drills" promises:
#   - the job exits non-zero, within train.comm_timeout_s + 5 s of the fault (the fault's own log line, or the
#     launch for disk_full);
#   - its output names the failing rank, the operation, and the peer (regexes below, per drill);
#   - no process of the job is left in the process table (matched by this drill's private directory, which
#     is on every rank's command line; zombies excepted).
# disk_full also checks that metrics.jsonl keeps every row before the failed one, complete and in order.
#
# usage: failure_drill.sh DRILL CLEAVE MPIEXEC [FLAGS...]
#   DRILL: pipeline_kill | dp_stop | layer_throw | disk_full
set -u
drill=$1
cleave=$2
shift 2
mpiexec=("$@")
timeout_s=3
work=$(mktemp -d)
mounted=""
cleanup() {
  [ -n "$mounted" ] && umount "$mounted" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL $drill: $*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# A small GPT, 2 ranks, many cheap steps: the fault lands mid-run.
cat > "$work/drill.json" <<JSON
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 16},
  "batch": {"global_batch_size": 8, "micro_batch_size": 2},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"steps": 400, "seed": 5, "eval_batches": 0, "log_interval": 1000, "comm_timeout_s": $timeout_s},
  "checkpoint": {"save_final": false},
  "data": {"type": "synthetic"}
}
JSON

out_dir=$work/run
wrapper=()
fault_regex='fault injection \(CLEAVE_FAULT_INJECT\)'
case $drill in
  pipeline_kill)
    # Rank 1 (the last pipeline stage) SIGKILLs itself before its forward of micro-batch 1 in step 3: rank 0
    # has micro-batch 0's activations in flight to it. Open MPI's launcher sees the death and ends the job
    # at once (SIGTERM to the survivors): its message names the dead rank and the signal, and rank 0's wait
    # notice (engine/comm/mpi/wait_notice.hpp) names the operation it was blocked in and the peer.
    layout=(--set parallel.pipeline_model_parallel_size=2)
    export CLEAVE_FAULT_INJECT=1:3:forward:kill
    expect=('rank 1 .*(exited on signal 9|Killed)|not answering within [0-9.]+s: rank 1'
            'step 3, stage 1 forward of micro-batch 1: rank 1 SIGKILLs itself'
            "\\[rank 0/2\\] terminated by SIGTERM .* while waiting in batch_p2p on comm 'world/pp' .*pending: .*from rank 1 ")
    ;;
  dp_stop)
    # Rank 1 SIGSTOPs itself right after posting its first data-parallel gradient bucket of step 3: rank 0
    # waits inside the bucket's all_reduce until the watchdog fires, finds rank 1 silent, and aborts the job.
    layout=(--set parallel.data_parallel_size=2)
    export CLEAVE_FAULT_INJECT=1:3:dp_reduce:stop
    expect=("\\[rank 0/2\\] comm timeout after [0-9.]+s in all_reduce \\(group 'world/dp' = world ranks \\[0,1\\]"
            'not answering within [0-9.]+s: rank 1([^0-9]|$)')
    ;;
  layer_throw)
    # Rank 1 throws inside its stage's forward of micro-batch 1 in step 3 (where a failing layer throws), with
    # rank 0's activations in flight to it: the error must reach the user at once, not after the watchdog.
    layout=(--set parallel.pipeline_model_parallel_size=2)
    export CLEAVE_FAULT_INJECT=1:3:forward:throw
    expect=('\[rank 1/2\] error: injected fault \(CLEAVE_FAULT_INJECT\) in step 3, stage 1 forward of micro-batch 1 on rank 1')
    ;;
  disk_full)
    # The output directory is a 16 KiB tmpfs: config.json takes a page, metrics.jsonl fills the rest and a
    # row's write fails with ENOSPC. Rank 0 must say which file and step, keep every earlier row, and end the
    # job (rank 1 is waiting in the next step's collectives). Without mount rights (an unprivileged
    # container), a file-size limit on the ranks (ulimit -f 16: writes past 16 KiB fail with EFBIG; cleave
    # ignores SIGXFSZ) stands in for the full disk, with MPI over TCP so no shared-memory file hits the limit.
    layout=(--set parallel.data_parallel_size=2)
    mkdir -p "$work/disk"
    if [ -z "${CLEAVE_DRILL_NO_MOUNT:-}" ] && mount -t tmpfs -o size=16k tmpfs "$work/disk" 2> /dev/null; then
      mounted=$work/disk
      method="tmpfs of 16 KiB"
    else
      method="ulimit -f 16 on the ranks (no mount rights for a tmpfs)"
      wrapper=(bash -c 'ulimit -f 16 && exec "$@"' limit)
      mpiexec=("${mpiexec[@]/self,vader/self,tcp}")
    fi
    out_dir=$work/disk/run
    fault_regex='metrics file .*metrics.jsonl: writing the row of step'
    expect=('\[rank 0/2\] error: metrics file .*/metrics.jsonl: writing the row of step [0-9]+ failed \((No space left on device|File too large)\); the [0-9]+ rows before it are intact')
    ;;
  *) fail "unknown drill (pipeline_kill | dp_stop | layer_throw | disk_full)" ;;
esac

start=$(now_ms)
"${mpiexec[@]}" -n 2 "${wrapper[@]}" "$cleave" train "$work/drill.json" --set train.out_dir="$out_dir" "${layout[@]}" \
  > "$work/out" 2>&1 &
launcher=$!
fault_at=""
# Watch the job: the time its fault shows up, and a hard stop (timeout + 30 s) so ctest never hangs on it.
while kill -0 "$launcher" 2> /dev/null; do
  if [ -z "$fault_at" ] && grep -Eq "$fault_regex" "$work/out"; then fault_at=$(now_ms); fi
  if [ $(( $(now_ms) - start )) -gt $(( (timeout_s + 30) * 1000 )) ]; then
    kill -KILL "$launcher" 2> /dev/null
    cat "$work/out"
    fail "the job did not end by itself within $((timeout_s + 30)) s (killed here)"
  fi
  sleep 0.05
done
wait "$launcher"
rc=$?
end=$(now_ms)
[ -z "$fault_at" ] && grep -Eq "$fault_regex" "$work/out" && fault_at=$end
[ "$drill" = disk_full ] && fault_at=$start
cat "$work/out" | sed 's/^/    | /'
[ -n "$fault_at" ] || fail "the fault never happened (no line matches /$fault_regex/)"
since_fault=$(( end - fault_at ))
echo "     exit code $rc, $(( (end - start) / 1000 )).$(printf %03d $(( (end - start) % 1000 )))s after launch," \
     "$(( since_fault / 1000 )).$(printf %03d $(( since_fault % 1000 )))s after the fault (limit $((timeout_s + 5)) s)"
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$since_fault" -le $(( (timeout_s + 5) * 1000 )) ] || fail "the job took ${since_fault} ms after the fault"
for pattern in "${expect[@]}"; do
  grep -Eq -- "$pattern" "$work/out" || fail "no line matches /$pattern/"
done

# The process table: nothing whose command line mentions this drill's directory may survive the job.
sleep 1
left=$(ps -eo pid=,stat=,args= | awk -v dir="$work/" 'index($0, dir) && $2 !~ /^Z/ && !/awk/ {print $1}')
if [ -n "$left" ]; then
  ps -o pid,stat,args -p "$(echo $left | tr ' ' ',')"
  for pid in $left; do kill -KILL "$pid" 2> /dev/null; done
  fail "processes outlived the job: $left"
fi

if [ "$drill" = disk_full ]; then
  metrics=$out_dir/metrics.jsonl
  rows=$(wc -l < "$metrics")
  [ "$rows" -ge 3 ] || fail "only $rows metrics rows before the disk filled (expected a run that got going)"
  # Every row complete (a JSON object on one line, newline-terminated) and the steps 1..rows in order.
  [ "$(tail -c 1 "$metrics" | od -An -c | tr -d ' ')" = '\n' ] || fail "metrics.jsonl ends in a partial row"
  grep -vEq '^\{"step":[0-9]+,.*\}$' "$metrics" && fail "metrics.jsonl holds a malformed row"
  [ "$(sed 's/^{"step":\([0-9]*\),.*/\1/' "$metrics" | tr '\n' ' ')" = "$(seq 1 "$rows" | tr '\n' ' ')" ] \
    || fail "metrics.jsonl steps are not 1..$rows"
  failed_step=$(grep -Eo 'writing the row of step [0-9]+' "$work/out" | grep -Eo '[0-9]+$' | head -n 1)
  [ "$failed_step" = $((rows + 1)) ] || fail "the error names step $failed_step but the file holds $rows rows"
  echo "     disk full ($method): $rows complete rows kept, the error names step $failed_step"
fi
echo "ok   $drill"
