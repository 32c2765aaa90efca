#!/usr/bin/env bash
# The fine-tuning recipe of docs/models.md end to end, on Hugging Face directories this test writes itself
# (hf_fixture.py: tiny Llama / Mistral / Qwen2 with max_position_embeddings 32; the Llama with a Llama 2-style
# SentencePiece tokenizer.json (byte fallback, six merges, vocab 272); no downloads, no torch):
#  - cleave tokenize: text files -> token shards with the model's own tokenizer.json, ids checked against ids
#    worked by hand (and equal to `tokenizers` 0.23.3's), <s> before each document as its post_processor says;
#  - train --init-from HF_DIR on those shards at model.seq_len 8 (of 32) at tp2 x pp2 (mpiexec -n 4) has one
#    rank's first-step loss; the resolved config.json says seq_len 8 and max_seq_len 32, run.json's init_from
#    says which; the same command with --resume auto, launched twice, starts fresh from the weights and then
#    continues the run's checkpoint (cleave run's restart), with the uninterrupted run's losses;
#  - cleave generate on the run serves the model's context (32), not the seq_len 8 it trained at; without
#    --tokenizer its warning names the source's tokenizer.json;
#  - export --format hf of the fine-tuned run: config.json differs from the source's only in torch_dtype ->
#    dtype (docs/checkpoints.md), max_position_embeddings stays 32, generation_config.json and the tokenizer
#    files are there; re-importing it gives bit for bit the logits `cleave generate --tokenizer --logits` gives
#    on the run's checkpoint, which differ from the source model's (the run trained);
#  - Mistral (sliding window 4 under seq_len 8), Qwen2 (q/k/v biases) and Qwen2 with use_sliding_window (window 4
#    from layer 1 on): tp2 x pp2 against one rank, and each window changes the loss (the same weights without it
#    give another);
#  - bad input, one error naming it, nothing written: seq_len above the maximum, a relabelled Mistral, an
#    unknown config key, a model_type that contradicts architectures, byte-level text data on a model with a
#    tokenizer.json of its own, a config.json cut short.
# Usage: finetune_recipe.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
source "$src/tests/e2e/hf_lib.sh"  # fail, fixture, loss, refuse, refuse_input
common=(--set train.eval_batches=0 --set model.seq_len=8 --set optimizer.lr=0.01)
layout=(--set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2)

fixture llama --llama --max-positions 32 --tokenizer
# Text: two files, each one document. "the and hat" is ▁the ▁and ▁ h a t after <s>; "Tea!" is ▁ T e a ! with
# T and ! as byte-fallback tokens <0x54> <0x21>.
python3 - <<'PY' || fail "writing the corpus"
import random
rng = random.Random(35)
words = ["the", "and", "hat", "Tea!", "then", "hand", "at", "dad", "ant"]
for name, first in (("a.txt", "the and hat"), ("b.txt", "Tea! the")):
    text = first + " " + " ".join(rng.choice(words) for _ in range(700)) + "\n"
    open(name, "w").write(text)
PY
"$cleave" tokenize a.txt b.txt --tokenizer llama/tokenizer.json --out shards --val-fraction 0.1 > tok.log 2>&1 \
  || { cat tok.log; fail "tokenize with the model's tokenizer.json"; }
grep -q "SentencePiece-style BPE, 272 tokens, 6 merges" tok.log || { cat tok.log; fail "tokenize describe"; }
python3 - <<'PY' || fail "token shards"
import json, struct
def read(path):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[:2] == (20240520, 1), header[:3]
    return list(struct.unpack("<%dH" % header[2], data[1024:]))
train = read("shards/train.bin")
assert train[:7] == [1, 268, 271, 259, 261, 263, 260], train[:7]
starts = [i for i, t in enumerate(train + read("shards/val.bin")) if t == 1]
assert len(starts) == 2, f"<s> at {starts}: expected one per document"
b = (train + read("shards/val.bin"))[starts[1]:starts[1] + 7]
assert b == [1, 259, 87, 262, 263, 36, 268], b
m = json.load(open("shards/manifest.json"))
assert m["vocab_size"] == 272 and m["documents"] == 2, m
print(f"ok   cleave tokenize with the model's tokenizer.json: {len(train)} train tokens, <s> per document, "
      f"'the and hat' -> {train[1:7]}")
PY
data=(--set data.type=tokens --set data.path=shards/train.bin --set data.val_path=shards/val.bin)
"$cleave" train --init-from llama "${common[@]}" "${data[@]}" --set train.steps=1 --set checkpoint.save_final=false \
  --set train.out_dir=one > one.log 2>&1 || { cat one.log; fail "one rank"; }
"${mpiexec[@]}" -n 4 "$cleave" train --init-from llama "${common[@]}" "${data[@]}" "${layout[@]}" --set train.steps=3 \
  --set train.out_dir=ft > ft.log 2>&1 || { cat ft.log; fail "tp2 x pp2 fine-tune"; }
grep -q "init: seq_len 8 of at most 32 (rotary positions: nothing sliced)" ft.log || { cat ft.log; fail "no context line"; }
python3 - "$(loss one)" "$(loss ft)" <<'PY' || fail "first-step loss"
import json, sys
one, ft = map(float, sys.argv[1:])
assert abs(ft - one) <= 1e-5 * abs(one), f"tp2 x pp2 first-step loss {ft} != one rank's {one}"
model = json.load(open("ft/config.json"))["model"]
assert (model["seq_len"], model["max_seq_len"]) == (8, 32), model
record = json.load(open("ft/run.json"))["init_from"]
assert "LlamaForCausalLM in llama: seq_len 8 of at most 32" in record, record
print(f"ok   --init-from at seq_len 8 of 32: tp2 x pp2 first-step loss {ft} = one rank's {one}; run.json: {record}")
PY

# Restarting the fine-tune's own command line with --resume auto (what cleave run does after a failure): the
# first launch finds no checkpoint and starts from the model's weights, the second continues the run's checkpoint
# (the weights are not loaded again), and the losses are the uninterrupted tp2 x pp2 run's.
for steps in 2 3; do
  "$cleave" train --init-from llama "${common[@]}" "${data[@]}" --set train.steps=$steps --set train.out_dir=rs \
    --resume auto > rs$steps.log 2>&1 || { cat rs$steps.log; fail "--init-from with --resume auto ($steps steps)"; }
done
grep -q "found no checkpoint under rs/checkpoints; starting fresh" rs2.log || { cat rs2.log; fail "first launch"; }
grep -q "init: parameters from" rs2.log || { cat rs2.log; fail "first launch did not load the model's weights"; }
grep -q "init: --init-from Hugging Face LlamaForCausalLM in llama is not loaded: the run continues from its checkpoint (--resume auto)" \
  rs3.log || { cat rs3.log; fail "second launch did not continue the checkpoint"; }
python3 - <<'PY' || fail "resumed fine-tune"
import json
rows = lambda d: [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"loss"' in l]
rs, ft = rows("rs"), rows("ft")
assert [r["step"] for r in rs] == [r["step"] for r in ft], (rs, ft)
for a, b in zip(rs, ft):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"]), f"resumed {a['loss']} != uninterrupted {b['loss']}"
record = json.load(open("rs/run.json"))["init_from"]
assert "LlamaForCausalLM in llama: seq_len 8 of at most 32" in record, record
print(f"ok   --init-from + --resume auto twice: fresh, then continued at step 2; losses {[r['loss'] for r in rs]} "
      f"= the uninterrupted tp2 x pp2 run's")
PY

"$cleave" export ft/checkpoints --format hf --out exported > export.log 2>&1 || { cat export.log; fail "export"; }
"$cleave" import exported --out back > back.log 2>&1 || { cat back.log; fail "re-import"; }
"$cleave" import llama --out source > source.log 2>&1 || { cat source.log; fail "source import"; }
for f in generation_config.json tokenizer.json tokenizer_config.json; do [ -f exported/$f ] || fail "export has no $f: $(ls exported)"; done
"$cleave" generate ft/checkpoints --tokenizer llama/tokenizer.json --prompt "the and hat" --tokens 0 --logits run.json.logits > g1.log 2>&1 || { cat g1.log; fail "generate run"; }
"$cleave" generate back --tokenizer exported/tokenizer.json --prompt "the and hat" --tokens 0 --logits back.logits > g2.log 2>&1 || { cat g2.log; fail "generate back"; }
"$cleave" generate source --tokenizer llama/tokenizer.json --prompt "the and hat" --tokens 0 --logits source.logits > g3.log 2>&1 || { cat g3.log; fail "generate source"; }
# Without --tokenizer the ids are printed, and the warning names the tokenizer of the weights' source (index.json
# "source"), which the fine-tuned checkpoint knows (it said "tokenizer.json" only).
"$cleave" generate ft/checkpoints --prompt "the" --tokens 1 > g0.log 2>&1 || { cat g0.log; fail "generate without --tokenizer"; }
grep -q "pass --tokenizer $PWD/llama/tokenizer.json (the weights' source's) for text" g0.log \
  || { cat g0.log; fail "generate without --tokenizer: no hint of the source's tokenizer"; }
echo "ok   generate without --tokenizer names the source's: $(grep -o 'pass --tokenizer [^ ]*' g0.log)"
# The fine-tuned model serves its whole context (32), not the seq_len 8 it trained at: a 13-token prompt gives the
# re-imported export's logits (its seq_len is 32), bit for bit.
long_prompt="the and hat then hand at dad ant the hat"
"$cleave" generate ft/checkpoints --tokenizer llama/tokenizer.json --prompt "$long_prompt" --tokens 0 --logits long_run.logits > g4.log 2>&1 || { cat g4.log; fail "generate a prompt longer than seq_len 8"; }
"$cleave" generate back --tokenizer llama/tokenizer.json --prompt "$long_prompt" --tokens 0 --logits long_back.logits > g5.log 2>&1 || { cat g5.log; fail "generate back (long prompt)"; }
python3 - <<'PY' || fail "generate at the model's context"
import json
run, back = (json.load(open(f)) for f in ("long_run.logits", "long_back.logits"))
assert len(run["tokens"]) > 8 and run["logits"] == back["logits"], (len(run["tokens"]), "logits differ")
print(f"ok   generate on the run (seq_len 8 of 32): a {len(run['tokens'])}-token prompt, logits bit for bit the export's")
PY
python3 - <<'PY' || fail "export"
import json
src, out = json.load(open("llama/config.json")), json.load(open("exported/config.json"))
diff = sorted(k for k in set(src) | set(out) if src.get(k, "<absent>") != out.get(k, "<absent>"))
assert set(diff) <= {"torch_dtype", "dtype"}, f"exported config.json differs from the source in {diff}"
assert out["max_position_embeddings"] == 32 and out["bos_token_id"] == 1 and out["eos_token_id"] == 2, out
run, back, source = (json.load(open(f))["logits"] for f in ("run.json.logits", "back.logits", "source.logits"))
assert run == back, "re-imported export's logits differ from the run's"
moved = max(abs(a - b) for r, s in zip(run, source) for a, b in zip(r, s))
assert moved > 1e-4, f"the fine-tuned logits equal the source model's (moved {moved}): nothing trained?"
print(f"ok   export -> import: logits bit for bit the run's (moved {moved:.3g} from the source's); config.json "
      f"differs from the source only in {diff}; generation_config.json and tokenizer files carried")
PY

# Mistral (window 4 < seq_len 8) and Qwen2 (biases): tp2 x pp2 against one rank.
fixture mistral --mistral 4 --max-positions 32
fixture qwen2 --qwen2 --max-positions 32
fixture qwen2_window --qwen2 --qwen2-window 4 --max-window-layers 1 --max-positions 32
for m in mistral qwen2 qwen2_window; do
  "$cleave" train --init-from $m "${common[@]}" --set train.steps=1 --set checkpoint.save_final=false \
    --set train.out_dir=${m}_one > ${m}_one.log 2>&1 || { cat ${m}_one.log; fail "$m one rank"; }
  "${mpiexec[@]}" -n 4 "$cleave" train --init-from $m "${common[@]}" "${layout[@]}" --set train.steps=1 \
    --set checkpoint.save_final=false --set train.out_dir=${m}_ft > ${m}_ft.log 2>&1 || { cat ${m}_ft.log; fail "$m tp2 x pp2"; }
  python3 - "$m" "$(loss ${m}_one)" "$(loss ${m}_ft)" <<'PY' || fail "$m losses"
import sys
name, one, ft = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
assert abs(ft - one) <= 1e-5 * abs(one), f"{name} tp2 x pp2 first-step loss {ft} != one rank's {one}"
print(f"ok   {name}: tp2 x pp2 first-step loss {ft} = one rank's {one}")
PY
done

# The window is applied: the same weights without it (sliding_window null) give another loss.
fixture mistral_full --mistral 0 --max-positions 32
"$cleave" train --init-from mistral_full "${common[@]}" --set train.steps=1 --set checkpoint.save_final=false \
  --set train.out_dir=full_one > full_one.log 2>&1 || { cat full_one.log; fail "mistral without a window"; }
python3 - "$(loss mistral_one)" "$(loss full_one)" "$(loss qwen2_window_one)" "$(loss qwen2_one)" <<'PY' || fail "window"
import sys
window, full, qwen_window, qwen_full = map(float, sys.argv[1:])
assert abs(window - full) > 1e-4, f"window 4 under seq_len 8 gives the loss {window} of no window {full}"
assert abs(qwen_window - qwen_full) > 1e-4, f"Qwen2's window from layer 1 gives the loss {qwen_window} of none"
print(f"ok   sliding window 4 under seq_len 8: first-step loss {window}, without the window {full}; Qwen2 with the "
      f"window from layer 1 {qwen_window}, without {qwen_full}")
PY

# Bad input is refused with exit 64 (the config or the data contradicts the weights): `cleave run` stops at once on
# it instead of restarting into the same error (refuse_input, hf_lib.sh).
refuse_input "seq_len above the maximum" "model.seq_len 33 is above the model's maximum 32 (max_position_embeddings in llama/config.json)" \
  run1 -- "$cleave" train --init-from llama --set model.seq_len=33 --set train.out_dir=run1
refuse_input "seq_len above the maximum (checkpoint)" "model.seq_len 40 is above the model's maximum 32" \
  run2 -- "$cleave" train --init-from source --set model.seq_len=40 --set train.out_dir=run2
# Byte-level text data on a model with a tokenizer of its own: the bytes would be other tokens to it.
refuse_input "text data on a model with its own tokenizer" 'llama/tokenizer.json), but data.type is "text"' run7 -- \
  "$cleave" train --init-from llama --set model.seq_len=8 --set data.type=text --set data.path=a.txt --set train.out_dir=run7
# Shards written by another tokenizer (the fixture's GPT-2-style one, 261 ids: they fit the vocabulary of 272)
# hold ids that are other tokens to this model.
python3 - <<'PY' || fail "writing a byte-level tokenizer"
import json
chars = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(0xA1, 0xAD)] + [chr(c) for c in range(0xAE, 0x100)]
chars += [chr(256 + n) for n in range(256 - len(chars))]
vocab = {c: i for i, c in enumerate(chars)}
json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": []}, "added_tokens": [],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel"}}, open("bytes_tokenizer.json", "w"))
PY
"$cleave" tokenize a.txt --tokenizer bytes_tokenizer.json --out other_shards > other_tok.log 2>&1 \
  || { cat other_tok.log; fail "tokenize with another tokenizer"; }
refuse_input "shards of another tokenizer" "was tokenized with $work/bytes_tokenizer.json (byte-level BPE, 256 tokens" run9 -- \
  "$cleave" train --init-from llama --set model.seq_len=8 --set data.type=tokens --set data.path=other_shards/train.bin \
  --set train.out_dir=run9
grep -qF "cleave tokenize FILES --tokenizer $work/llama/tokenizer.json --out DIR" bad.log || { cat bad.log; fail "the fix is not named"; }
# A copy of the model's own tokenizer elsewhere is the same tokenizer: accepted.
mkdir -p copy && cp llama/tokenizer.json llama/tokenizer_config.json copy/
"$cleave" tokenize a.txt --tokenizer copy/tokenizer.json --out copy_shards > copy_tok.log 2>&1 || { cat copy_tok.log; fail "tokenize copy"; }
"$cleave" train --init-from llama "${common[@]}" --set data.type=tokens --set data.path=copy_shards/train.bin --set train.steps=1 \
  --set checkpoint.save_final=false --set train.out_dir=copy_run > copy_run.log 2>&1 || { cat copy_run.log; fail "a copy of the model's tokenizer"; }
# A model directory whose config.json does not parse is named as such, not as "neither a model nor a checkpoint".
cp -r llama cut && head -c 40 llama/config.json > cut/config.json
refuse "config.json cut short (--init-from)" "cut/config.json is not valid JSON" run8 -- \
  "$cleave" train --init-from cut --set model.seq_len=8 --set train.out_dir=run8
cp -r mistral relabelled && python3 -c "
import json; c = json.load(open('relabelled/config.json')); c.update(architectures=['LlamaForCausalLM'], model_type='llama')
json.dump(c, open('relabelled/config.json', 'w'))"
refuse "relabelled Mistral" "sliding_window is 4, a MistralForCausalLM key that LlamaForCausalLM ignores" out3 -- \
  "$cleave" import relabelled --out out3
refuse "relabelled Mistral (--init-from)" "sliding_window is 4" run4 -- "$cleave" train --init-from relabelled --set train.out_dir=run4
cp -r llama unknown && python3 -c "
import json; c = json.load(open('unknown/config.json')); c['attn_logit_softcapping'] = 50.0
json.dump(c, open('unknown/config.json', 'w'))"
refuse "unknown key" 'key "attn_logit_softcapping"' out5 -- "$cleave" import unknown --out out5
cp -r qwen2 mixed && python3 -c "
import json; c = json.load(open('mixed/config.json')); c['model_type'] = 'mistral'
json.dump(c, open('mixed/config.json', 'w'))"
refuse "model_type against architectures" 'architectures names Qwen2ForCausalLM but model_type is "mistral"' out6 -- \
  "$cleave" import mixed --out out6
