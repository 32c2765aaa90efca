#!/usr/bin/env bash
# `cleave bench` under mpiexec -n 2 (pp2, a tiny GPT): every registered schedule runs (plus interleaved
# with 3 virtual stages); bench.json holds one entry per schedule with its measured and predicted figures,
# per-rank bubbles under both definitions, peak memory and P2P bytes; bench.html is self-contained (no
# script, stylesheet, image or font from anywhere) and draws a predicted and a measured timeline per
# schedule; stdout has the table and names the machine. Bad input: an unknown schedule in the list, a
# schedule the model cannot be split for, an existing bench.json (never overwritten). A listed schedule the
# config cannot run (dualpipev with 2 micro-batches on pp2) is checked before the first run and reported with
# the reason in the table, bench.json and bench.html while the others run. Evaluation is off: a config without an
# evaluation split (data.val_fraction 0) benchmarks. At cp 2 the header names the layout as the trainer does (cp=2 dp=1).
# Usage: cli_bench.sh CLEAVE MPIEXEC [FLAGS...]
set -u
cleave=$(realpath "$1"); shift
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }
cat > tiny.json << 'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
  "parallel": {"pipeline_model_parallel_size": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"seed": 4},
  "data": {"type": "synthetic"}
}
JSON
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --steps 3 --warmup 1 --out out > bench.log 2>&1 \
  || { cat bench.log; fail "cleave bench --schedules all"; }
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --steps 2 --warmup 1 --schedules interleaved_1f1b:3,1f1b \
  --set parallel.p2p_progress=off --out out3 > bench3.log 2>&1 || { cat bench3.log; fail "cleave bench interleaved_1f1b:3"; }
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --steps 1 --warmup 0 --schedules 1f1b,dualpipev \
  --set batch.micro_batch_size=4 --out skip > skip.log 2>&1 || { cat skip.log; fail "bench with one schedule that cannot run"; }
grep -q "^dualpipev  *not run: .*dualpipev needs at least 4 micro-batches per step on pp_size 2, got 2" skip.log \
  || { cat skip.log; fail "the skipped schedule is not in the table with its reason"; }
[ "$(grep -c "cannot run this config, skipped" skip.log)" = 1 ] || { cat skip.log; fail "skip warning not printed once"; }
python3 - skip/bench.json skip/bench.html << 'PY' || fail "skipped schedule in bench.json / bench.html"
import json, sys
bench = json.load(open(sys.argv[1]))
html = open(sys.argv[2]).read()
assert [s["label"] for s in bench["schedules"]] == ["1f1b"], bench["schedules"]
assert [s["label"] for s in bench["skipped"]] == ["dualpipev"] and "micro-batches" in bench["skipped"][0]["reason"]
assert '<tr class="skipped"><td class="l">dualpipev</td>' in html and "not run: parallel.schedule: dualpipev needs" in html
PY
# Evaluation is off in a bench, so a config without an evaluation split (a text file, data.val_fraction 0, the
# default train.eval_batches 8) benchmarks rather than being refused for train.eval_batches.
head -c 3000 /dev/urandom | base64 > text.txt
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --steps 1 --warmup 0 --schedules 1f1b --set data.type=text \
  --set data.path=text.txt --set data.val_fraction=0 --set model.vocab_size=256 --out noval > noval.log 2>&1 \
  || { cat noval.log; fail "bench of a config without an evaluation split"; }
[ -s noval/bench.json ] || fail "no bench.json for the config without an evaluation split"
echo "ok   bench of a config without an evaluation split (data.val_fraction 0)"
grep -q "^schedule .*step_ms .*bubble" bench.log || { cat bench.log; fail "no summary table on stdout"; }
grep -Eq "[0-9]+ cores?, 2 ranks on the node x 1 thread per rank" bench.log || { cat bench.log; fail "machine line"; }
# The suite runs Open MPI without single copy (any container): the default run has a progress thread (parallel.
# p2p_progress auto; Open MPI grants MPI_THREAD_MULTIPLE), so no warning; the run with it off must say what that
# costs.
machine() { python3 -c "import json; print(json.load(open('$1'))['machine']['$2'])"; }
[ "$(machine out/bench.json mpi_progress_thread)" = True ] || { cat bench.log; fail "progress thread off by default"; }
[ "$(machine out3/bench.json mpi_progress_thread)" = False ] || { cat bench3.log; fail "p2p_progress=off ignored"; }
grep -q "progress thread on" bench.log || { cat bench.log; fail "machine line does not say the progress thread is on"; }
grep -q "WARNING: Open MPI runs" bench.log && { cat bench.log; fail "single-copy warning despite the progress thread"; }
if [ "$(machine out3/bench.json mpi_single_copy)" = none ]; then
  grep -q "WARNING: Open MPI runs with btl_vader_single_copy_mechanism=none and no progress thread" bench3.log \
    || { cat bench3.log; fail "single-copy warning"; }
  grep -q "btl_vader_single_copy_mechanism=none" out3/bench.html || fail "single-copy warning in bench.html"
fi
python3 - out/bench.json out/bench.html out3/bench.json << 'PY' || fail "bench.json / bench.html contents"
import json, re, sys
from subprocess import check_output
bench = json.load(open(sys.argv[1]))
html = open(sys.argv[2]).read()
names = [s["label"] for s in bench["schedules"]]
expected = ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_v"]
assert all(n in names for n in expected), f"schedules {names}, expected at least {expected}"
assert bench["machine"]["cores"] >= 1 and bench["machine"]["threads_per_rank"] >= 1, bench["machine"]
for s in bench["schedules"]:
    assert len(s["step_ms"]) == 3 and s["median_step_ms"] > 0 and s["tokens_per_s"] > 0, s["label"]
    assert s["first_loss"] == bench["schedules"][0]["first_loss"] or \
        abs(s["first_loss"] - bench["schedules"][0]["first_loss"]) < 1e-5, s["label"]
    assert len(s["pp_ranks"]) == 2 and len(s["peak_bytes_per_rank"]) == 2 and len(s["p2p_bytes_per_rank_per_step"]) == 2
    assert all(b > 0 for b in s["peak_bytes_per_rank"]) and all(b > 0 for b in s["p2p_bytes_per_rank_per_step"])
    for key in ("measured", "predicted"):
        assert 0 <= s[key]["bubble_fraction"] < 1 and 0 <= s[key]["stage_bubble_fraction"] < 1, (s["label"], key)
        assert s[key]["makespan_ms"] > 0
    for r in s["pp_ranks"]:
        assert 0 <= r["bubble_fraction"] < 1 and 0 <= r["stage_bubble_fraction"] <= r["bubble_fraction"] + 1e-9
    # The reported bubble is the drawn timeline's: idle over ranks x makespan from each rank's busy time.
    busy = sum(r["busy_ms"] for r in s["pp_ranks"])
    span = s["measured"]["makespan_ms"]
    assert abs((1 - busy / (len(s["pp_ranks"]) * span)) - s["measured"]["bubble_fraction"]) < 1e-9, s["label"]
    assert s["stages"] == (4 if s["schedule"] in ("interleaved_1f1b", "zb_v") else s["stages"])
    # The timelines: every rank's actions with times; the replay runs each work action for exactly its measured
    # duration, so its busy time per rank is the measured one.
    tl = s["timelines"]
    assert len(tl["measured"]) == len(tl["replayed"]) == len(tl["predicted"]) == 2, s["label"]
    for rank in range(2):
        def busy(actions):
            return sum(e - b for name, b, e in actions if "SEND" not in name and "RECV" not in name)
        assert abs(busy(tl["replayed"][rank]) - s["pp_ranks"][rank]["busy_ms"]) < 1e-3 * max(1.0, s["pp_ranks"][rank]["busy_ms"]), \
            (s["label"], rank, busy(tl["replayed"][rank]), s["pp_ranks"][rank]["busy_ms"])
        assert abs(busy(tl["measured"][rank]) - s["pp_ranks"][rank]["busy_ms"]) < 1e-3 * max(1.0, s["pp_ranks"][rank]["busy_ms"])
    assert 0 <= s["replayed"]["bubble_fraction"] < 1 and s["replayed"]["makespan_ms"] > 0, s["label"]
# Self-contained: nothing is fetched (the SVG namespace URI is a name, not a request).
for bad in ("<script", "<link", "<img", "src=", "@import", "url("):
    assert bad not in html, f"bench.html contains {bad}"
assert not re.search(r'href="(?!#)', html), "bench.html links outside itself"
for n in names:
    assert f'<h2 id="{n}">' in html, f"no section for {n}"
assert html.count("<svg") == 2 * len(names), f"{html.count('<svg')} timelines for {len(names)} schedules"
# Timelines fit the page: scaled to its width by their viewBox, not one horizontal scroll bar per timeline.
assert ".tl svg{display:block;max-width:100%;height:auto}" in html and "overflow-x" not in html
assert all("viewBox=" in part.split(">", 1)[0] for part in html.split("<svg")[1:]), "a timeline without a viewBox"
assert html.count(": predicted (simulator") == len(names) and html.count(": measured (the median step)") == len(names)
three = json.load(open(sys.argv[3]))
assert [s["label"] for s in three["schedules"]] == ["interleaved_1f1b:3", "1f1b"], three["schedules"]
assert three["schedules"][0]["stages"] == 6
print(f"ok   bench.json: {len(names)} schedules ({', '.join(names)}); bench.html: {html.count('<svg')} inline timelines, self-contained")
PY

# The header names the layout as the trainer does: cp 2 on 2 ranks is "tp=1 cp=2 dp=1 pp=1" (it said dp=2).
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --set parallel.pipeline_model_parallel_size=1 \
  --set parallel.context_parallel_size=2 --schedules 1f1b --steps 1 --warmup 0 --out cp2 > cp2.log 2>&1 \
  || { cat cp2.log; fail "cleave bench at cp 2"; }
grep -q "cleave bench: tp=1 cp=2 dp=1 pp=1 (world 2)" cp2.log || { cat cp2.log; fail "the cp 2 bench's layout"; }
echo "ok   $(grep -o 'cleave bench: tp=1 cp=2 dp=1 pp=1 (world 2)' cp2.log)"

# Bad input: each refused with the reason; nothing written.
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --schedules 1f1b,zb_x --out bad1 > bad1.log 2>&1 && fail "unknown schedule accepted"
grep -q "entry 'zb_x' is not a schedule; known: gpipe" bad1.log || { cat bad1.log; fail "unknown schedule message"; }
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --schedules interleaved_1f1b:8 --steps 1 --out bad2 > bad2.log 2>&1; status=$?
# No listed schedule can run the config: bad input (exit 64; it exited 1).
[ $status -eq 64 ] || { cat bad2.log; fail "16 stages of an 8-block model: exit $status, expected 64"; }
grep -q "schedule interleaved_1f1b:8 cannot run this config" bad2.log || { cat bad2.log; fail "too many stages message"; }
[ ! -e bad1/bench.json ] && [ ! -e bad2/bench.json ] || fail "a refused bench wrote bench.json"
before=$(md5sum out/bench.json)
"${mpiexec[@]}" -n 2 "$cleave" bench tiny.json --out out > bad3.log 2>&1 && fail "an existing bench.json was overwritten"
grep -q "out/bench.json exists; not overwriting it" bad3.log || { cat bad3.log; fail "overwrite message"; }
[ "$before" = "$(md5sum out/bench.json)" ] || fail "bench.json changed"
echo "ok   bad input: $(grep -o "entry 'zb_x'.*" bad1.log | head -n 1 | cut -c1-60)...; $(grep -o 'schedule interleaved_1f1b:8 cannot.*' bad2.log | head -n 1 | cut -c1-90)..."
