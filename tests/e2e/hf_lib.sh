# Helpers the Hugging Face e2e scripts share (hf_checkpoints.sh, hf_moe.sh, hf_qwen3.sh, finetune_recipe.sh): sourced
# after they set $cleave and $src and cd into their scratch directory.
#   fail TEXT                      print "FAIL TEXT", exit 1
#   fixture OUT_DIR [FLAGS...]     hf_fixture.py (a tiny HF model directory, standard library only)
#   loss RUN_DIR                   the first step's loss from RUN_DIR/metrics.jsonl
#   refuse NAME TEXT OUT -- CMD... CMD fails with exactly one error line holding TEXT and writes nothing at OUT
#   refuse_input NAME TEXT OUT -- CMD...  refuse, with exit 64 (bad input)
#   same_hf_tensors A B            two safetensors files hold the same names, dtypes, shapes and bytes
#   edit SRC DST KEY JSON_VALUE    copy model directory SRC to DST with config.json's KEY set to JSON_VALUE
#   init_losses_agree NAME ONE FRESH LAYOUT=RUN...  each LAYOUT run's first-step loss equals run ONE's within
#                                  1e-5 relative, and run FRESH's (a fresh model) differs from it by more than 0.05
#   import_export_round_trip HF CK OUT  import HF -> CK, export CK -> OUT (--format hf), OUT's tensors are HF's
#                                  byte for byte, and OUT re-imports to CK's weights bit-exactly
fail() { echo "FAIL $*"; exit 1; }
fixture() { python3 "$src/tests/e2e/hf_fixture.py" "$@" || fail "fixture $*"; }
loss() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$1/metrics.jsonl"; }
refuse() {
  local name=$1 want=$2 out=$3; shift 4
  "$@" > bad.log 2>&1; refused_status=$?
  [ "$refused_status" -ne 0 ] || fail "$name: accepted"
  grep -qF -- "$want" bad.log || { cat bad.log; fail "$name: no '$want' in the message"; }
  [ "$(grep -c 'error' bad.log)" -eq 1 ] || { cat bad.log; fail "$name: not one error line"; }
  [ ! -e "$out" ] || fail "$name: $out was written"
  echo "ok   refused $name: $(grep error bad.log | cut -c1-160)"
}
# refuse, and the exit code is 64 (bad input, engine/core/exit_code.hpp): `cleave run` stops at once on it instead of
# restarting into the same error.
refuse_input() {
  refuse "$@"
  [ "$refused_status" -eq 64 ] || { cat bad.log; fail "$1: exit $refused_status, expected 64 (bad input)"; }
}
same_hf_tensors() {
  python3 - "$1" "$2" <<'PY' || fail "tensors of $1 and $2 differ"
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), f"names differ: {sorted(a.keys() ^ b.keys())[:5]}"
for k in a:
    assert a[k] == b[k], f"{k} differs"
print(f"ok   {len(a)} tensors of {sys.argv[2]} byte-identical to {sys.argv[1]}'s")
PY
}
edit() {
  cp -r "$1" "$2" && python3 -c "
import json, sys; p = sys.argv[1] + '/config.json'; c = json.load(open(p)); c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(p, 'w'))" "$2" "$3" "$4"
}
init_losses_agree() {
  local name=$1 one=$2 fresh=$3 runs=() run; shift 3
  for run in "$@"; do runs+=("${run%%=*}" "$(loss "${run#*=}")"); done
  python3 - "$name" "$(loss "$one")" "$(loss "$fresh")" "${runs[@]}" <<'PY' || fail "$name losses"
import sys
name, one, fresh, runs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
layouts = list(zip(runs[0::2], map(float, runs[1::2])))
for layout, x in layouts:
    assert abs(x - one) <= 1e-5 * abs(one), f"{name} {layout} first-step loss {x} != one rank's {one}"
assert abs(fresh - one) > 0.05, f"{name}: the imported model's loss {one} is a fresh model's {fresh}: weights not loaded?"
print(f"ok   {name} --init-from first-step loss: one rank {one}, "
      + ", ".join(f"{layout} {x}" for layout, x in layouts) + f"; fresh model {fresh}")
PY
}
import_export_round_trip() {
  local hf=$1 ck=$2 out=$3
  "$cleave" import "$hf" --out "$ck" > import.log 2>&1 || { cat import.log; fail "import $hf"; }
  "$cleave" export "$ck" --format hf --out "$out" > export.log 2>&1 || { cat export.log; fail "export $ck"; }
  same_hf_tensors "$hf/model.safetensors" "$out/model.safetensors"
  "$cleave" import "$out" --out "${ck}_back" > back.log 2>&1 || { cat back.log; fail "re-import $out"; }
  cmp -s "$ck/step_0000000/weights.safetensors" "${ck}_back/step_0000000/weights.safetensors" \
    || fail "$out does not re-import bit-exactly"
}
