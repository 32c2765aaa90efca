#!/usr/bin/env bash
# `cleave tokenize` end to end on a tiny GPT-2-style byte-level BPE tokenizer.json written here (256 byte
# tokens, 12 merges, "<|endoftext|>"; the ids below were worked by hand and agree with `tokenizers` 0.23.3):
# two text files with --eot and --val-fraction give llm.c shards holding exactly the expected ids and a
# manifest.json, which `cleave train` then reads (data.type tokens). A vocabulary over 65,536 gives 32-bit
# shards (llm.c's Llama 3 header) that train reads. A tiny SentencePiece-style (Llama 2) tokenizer.json with
# byte fallback: BOS per document from its post_processor, BOS and EOS when tokenizer_config.json says
# add_eos_token; --shard-tokens writes numbered shards that data.paths reads by glob; --doc-separator and
# --jsonl make documents within a file; a model vocab_size below the manifest's is refused before training. Bad inputs (a missing text file or tokenizer, WordPiece,
# an unsupported pre-tokenizer pattern, an unknown normalizer, a malformed merge, invalid UTF-8, bad JSONL
# lines, --doc-separator with --jsonl, an existing output, a vocabulary too large for --bits 16) each fail with one line naming the file and the key, and
# write nothing. `cleave generate --tokenizer` on the trained model encodes the prompt with the tokenizer (after the
# template's BOS, as transformers does; --bos none: without) and decodes the output (the decoder's leading space
# stripped); with a tokenizer a vocabulary below 256 is sampled, and a tokenizer larger than the model is
# refused as bad input (exit 64).
# Usage: cli_tokenize.sh CLEAVE
set -u
cleave=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }

# tok.json, or a variant: mk.py [wordpiece|pattern|merge|big]
cat > mk.py <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
char = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {char[b]: b for b in range(256)}
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("l", "l"), ("he", "ll"), ("a", "a"),
          ("aa", "aa"), ("b", "c"), ("a", "b"), ("'", "s")]
for i, (a, b) in enumerate(merges):
    vocab[a + b] = 256 + i
pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
model = {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": [a + " " + b for a, b in merges]}
variant = sys.argv[1] if len(sys.argv) > 1 else ""
eot_id = 268  # tokenizers gives an added token the next id after the vocabulary's entries
if variant == "wordpiece":
    model = {"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab}
elif variant == "pattern":
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\w+|[^\w\s]+"}, "behavior": "Isolated", "invert": False},
        dict(pre, use_regex=False)]}
elif variant == "merge":
    model["merges"][4] = "Ġa"
elif variant == "big":
    model["vocab"]["zz"] = 70000
    eot_id = 269
elif variant.startswith("sp"):
    # Llama 2 style: <unk> <s> </s>, 256 byte-fallback tokens, then ▁ h e l l o and four merges; sp_small: no
    # byte tokens and no byte fallback (12 tokens: a character outside them is <unk>).
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(0 if variant == "sp_small" else 256):
        vocab["<0x%02X>" % b] = 3 + b
    for t in ["▁", "h", "e", "l", "o", "▁h", "ll", "▁he", "▁hell"]:
        vocab[t] = len(vocab)
    norm = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    if variant == "sp_bert":
        norm["normalizers"].append({"type": "BertNormalizer"})
    specials = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    print(json.dumps({"version": "1.0", "added_tokens": specials, "normalizer": norm, "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": variant != "sp_small",
                  "vocab": vocab, "merges": [["▁", "h"], ["l", "l"], ["▁h", "e"], ["▁he", "ll"]]}}))
    sys.exit(0)
print(json.dumps({"version": "1.0", "added_tokens": [
    {"id": eot_id, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": False, "special": True}],
    "normalizer": None, "pre_tokenizer": pre, "post_processor": None, "decoder": {"type": "ByteLevel"},
    "model": model}))
PY
python3 mk.py > tok.json || fail "writing tok.json"
printf "hello the abc it's aaaa" > a.txt
printf 'a<|endoftext|>b\n' > b.txt

"$cleave" tokenize a.txt b.txt --tokenizer tok.json --out shards --eot '<|endoftext|>' --val-fraction 0.25 \
  > out.log 2> err.log || { cat out.log err.log; fail "tokenize"; }
grep -q "model.vocab_size >= 269" out.log || { cat out.log; fail "the vocabulary size is not printed"; }
grep -q "100%" err.log || { cat err.log; fail "no progress bar on stderr"; }
python3 - <<'PY' || fail "shard contents"
import struct
def read(path):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[:3] == (20240520, 1, (len(data) - 1024) // 2), header[:3]
    return list(struct.unpack("<%dH" % header[2], data[1024:]))
# <eot> "hello" " the" " abc" " it" "'s" " aaaa" <eot> "a" <|endoftext|> "b" "\n"; the last 25% (4 tokens) is val.
expected = [268, 262, 111, 258, 260, 265, 32, 105, 116, 267, 260, 263, 97, 268, 97, 268, 98, 10]
train, val = read("shards/train.bin"), read("shards/val.bin")
assert train + val == expected and len(val) == 4, (train, val)
import json
m = json.load(open("shards/manifest.json"))
assert m["bits"] == 16 and m["vocab_size"] == 269 and m["documents"] == 2, m
assert m["train"] == [{"path": "train.bin", "tokens": 14}] and m["val"] == [{"path": "val.bin", "tokens": 4}], m
PY
echo "ok   tokenize: $(head -1 out.log)"

"$cleave" train --set data.type=tokens --set data.path=shards/train.bin --set data.val_path=shards/val.bin \
  --set model.vocab_size=269 --set model.seq_len=3 --set model.d_model=16 --set model.n_heads=2 --set train.steps=2 \
  --set train.out_dir=run > train.log 2>&1 || { cat train.log; fail "training on the shards"; }
grep -q "llm.c token shard shards/train.bin" train.log || grep -q "done: 2 steps" train.log || { cat train.log; fail "train log"; }
echo "ok   cleave train reads the shards: $(grep -o 'done: 2 steps.*' train.log | cut -c1-60)"

# 32 bits: a vocabulary over 65,536 (70,001 here) gives llm.c's Llama 3 shards, which train reads.
python3 mk.py big > big.json || fail "writing big.json"
"$cleave" tokenize a.txt --tokenizer big.json --out wide > wide.log 2>&1 || { cat wide.log; fail "tokenize 32-bit"; }
python3 - <<'PY' || fail "32-bit shard"
import struct, json
data = open("wide/train.bin", "rb").read()
header = struct.unpack("<256i", data[:1024])
assert header[:3] == (20240801, 7, (len(data) - 1024) // 4), header[:3]
assert list(struct.unpack("<%dI" % header[2], data[1024:])) == [262, 111, 258, 260, 265, 32, 105, 116, 267, 260, 263, 97]
assert json.load(open("wide/manifest.json"))["bits"] == 32
PY
"$cleave" train --set data.type=tokens --set data.path=wide/train.bin --set data.val_fraction=0.2 \
  --set model.vocab_size=70001 --set model.seq_len=3 --set model.d_model=16 --set model.n_heads=2 --set train.steps=1 \
  --set train.eval_batches=0 --set train.out_dir=wide_run > wide_train.log 2>&1 || { cat wide_train.log; fail "training on 32-bit shards"; }
echo "ok   a 70,001-token vocabulary writes 32-bit shards that train reads"

# SentencePiece-style (Llama 2): "hello" -> ▁hell o; "hi!" -> ▁h <0x69> <0x21> (byte fallback); <s> per document
# from the post_processor, and </s> too once tokenizer_config.json says add_eos_token.
mkdir -p sp sp_eos && python3 mk.py sp > sp/tokenizer.json && cp sp/tokenizer.json sp_eos/tokenizer.json
printf '{"add_bos_token": true, "add_eos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}}' \
  > sp_eos/tokenizer_config.json
printf 'hello' > h.txt
printf 'hi!' > i.txt
"$cleave" tokenize h.txt i.txt --tokenizer sp/tokenizer.json --out sp_out > sp.log 2>&1 || { cat sp.log; fail "tokenize sp"; }
grep -q "SentencePiece-style BPE" sp.log || { cat sp.log; fail "sp describe"; }
"$cleave" tokenize h.txt i.txt h.txt --tokenizer sp_eos/tokenizer.json --out sp_eos_out --shard-tokens 4 \
  > sp_eos.log 2>&1 || { cat sp_eos.log; fail "tokenize sp eos"; }
grep -q "tokenizer_config.json (add_bos_token true, add_eos_token true)" sp_eos.log || { cat sp_eos.log; fail "eos source"; }
python3 - <<'PY' || fail "sp shards"
import struct, json, glob
def read(path):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    return list(struct.unpack("<%dH" % header[2], data[1024:]))
assert read("sp_out/train.bin") == [1, 267, 263, 1, 264, 108, 36], read("sp_out/train.bin")
shards = sorted(glob.glob("sp_eos_out/train_*.bin"))
assert [len(read(s)) for s in shards] == [4, 4, 4, 1], shards
ids = sum((read(s) for s in shards), [])
assert ids == [1, 267, 263, 2, 1, 264, 108, 36, 2, 1, 267, 263, 2], ids
m = json.load(open("sp_eos_out/manifest.json"))
assert [s["path"] for s in m["train"]] == ["train_00000.bin", "train_00001.bin", "train_00002.bin", "train_00003.bin"]
PY
echo "ok   SentencePiece-style ids with byte fallback, BOS/EOS per document, 4-token shards"
# Documents within a file: --doc-separator (blank lines; leading, repeated and trailing separators make no empty
# document) and --jsonl KEY give the three documents of h.txt i.txt h.txt above, each with <s> ... </s>.
printf '\n\nhello\n\nhi!\n\n\n\nhello\n\n' > docs.txt
printf '{"text": "hello", "id": 1}\n\n{"id": 2, "text": "hi!"}\n{"text": "hello"}' > docs.jsonl
"$cleave" tokenize docs.txt --tokenizer sp_eos/tokenizer.json --out sep_out --doc-separator '\n\n' > sep.log 2>&1 \
  || { cat sep.log; fail "tokenize --doc-separator"; }
grep -q "documents are the pieces between --doc-separator strings" sep.log || { cat sep.log; fail "separator describe"; }
"$cleave" tokenize docs.jsonl --tokenizer sp_eos/tokenizer.json --out jsonl_out --jsonl text > jsonl.log 2>&1 \
  || { cat jsonl.log; fail "tokenize --jsonl"; }
python3 - <<'PY' || fail "documents within a file"
import struct, json
def read(path):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    return list(struct.unpack("<%dH" % header[2], data[1024:]))
want = [1, 267, 263, 2, 1, 264, 108, 36, 2, 1, 267, 263, 2]
for d in ("sep_out", "jsonl_out"):
    assert read(d + "/train.bin") == want, (d, read(d + "/train.bin"))
    assert json.load(open(d + "/manifest.json"))["documents"] == 3, d
PY
echo "ok   --doc-separator '\n\n' and --jsonl text: three documents per file, <s> ... </s> each"
"$cleave" train --set data.type=tokens --set 'data.paths=["sp_eos_out/train_*.bin"]' --set data.val_fraction=0.25 \
  --set model.vocab_size=268 --set model.seq_len=2 --set model.d_model=16 --set model.n_heads=2 --set train.steps=1 \
  --set train.eval_batches=0 --set train.out_dir=sp_run > sp_train.log 2>&1 || { cat sp_train.log; fail "training on data.paths"; }
"$cleave" train --set data.type=tokens --set 'data.paths=["sp_eos_out/train_*.bin"]' --set model.vocab_size=265 \
  --set model.seq_len=2 --set model.d_model=16 --set model.n_heads=2 --set train.steps=1 --set train.eval_batches=0 \
  --set train.out_dir=sp_bad > sp_bad.log 2>&1 && fail "a model vocab smaller than the tokenizer's was accepted"
grep -q "vocabulary of 268 ids (.*sp_eos_out/manifest.json), but model.vocab_size is 265" sp_bad.log || { cat sp_bad.log; fail "vocab mismatch message"; }
"$cleave" train --set data.type=tokens --set 'data.paths=["sp_eos_out/nothing_*.bin"]' --set model.vocab_size=268 \
  --set model.seq_len=2 --set model.d_model=16 --set model.n_heads=2 --set train.steps=1 --set train.eval_batches=0 \
  --set train.out_dir=sp_none > sp_none.log 2>&1 && fail "an empty glob was accepted"
grep -q 'data.paths\[0\]: the glob ".*/sp_eos_out/nothing_\*.bin" matches no file' sp_none.log || { cat sp_none.log; fail "empty glob message"; }
[ ! -e sp_bad ] && [ ! -e sp_none ] || fail "a refused run wrote its out_dir"
echo "ok   data.paths by glob trains; a smaller model vocabulary and an empty glob are refused: $(grep -o 'error.*' sp_bad.log | cut -c1-120)"

# generate --tokenizer: the prompt is encoded by the tokenizer (its ids are the context --logits reports) and
# the output is decoded text that starts with the prompt.
"$cleave" generate run/checkpoints --prompt "hello the" --tokenizer tok.json --tokens 12 --seed 4 \
  --logits logits.json > gen.txt 2> gen.log || { cat gen.log; fail "generate --tokenizer"; }
python3 - <<'PY' || fail "generate --tokenizer output"
import json
assert json.load(open("logits.json"))["tokens"] == [262, 111, 258]
out = open("gen.txt", "rb").read()
assert out.startswith(b"hello the") and len(out) > len(b"hello the\n"), out
PY
"$cleave" train --set train.steps=1 --set model.vocab_size=260 --set train.out_dir=small > small.log 2>&1 || fail "small run"
"$cleave" generate small/checkpoints --prompt x --tokenizer tok.json > gen.log 2>&1
rc=$?
[ $rc -ne 0 ] || fail "a vocab-260 model took a 269-token tokenizer"
grep -q "has 269 tokens but checkpoint .* has model.vocab_size 260: the tokenizer's ids 260..268 would not fit" gen.log \
  || { cat gen.log; fail "vocabulary mismatch message"; }
[ $rc -eq 64 ] || fail "a tokenizer larger than the model's vocabulary exits $rc, not 64 (bad input)"
echo "ok   generate --tokenizer encodes the prompt as [262, 111, 258] and refuses a smaller model vocabulary (exit 64)"
# With a tokenizer, a vocabulary below 256 is no byte model's: a 12-token tokenizer samples a vocab-16 model
# (ids below 16 only), and a vocab-8 model is refused naming both sizes.
python3 mk.py sp_small > small_tok.json || fail "writing small_tok.json"
"$cleave" train --set train.steps=1 --set model.vocab_size=16 --set train.out_dir=v16 > v16.log 2>&1 || { cat v16.log; fail "vocab-16 run"; }
"$cleave" generate v16/checkpoints --prompt "hello" --tokenizer small_tok.json --tokens 6 --seed 2 --logits v16.json \
  > v16_gen.txt 2> v16_gen.log || { cat v16_gen.log; fail "generate --tokenizer with a vocab-16 model"; }
"$cleave" generate v16/checkpoints --prompt "hello" --tokenizer small_tok.json --tokens 0 --bos none --logits v16_none.json \
  > v16_none.txt 2> v16_none.log || { cat v16_none.log; fail "generate --bos none"; }
python3 - <<'PY' || fail "vocab-16 generate output"
import json
# The prompt follows the template's <s> (1), as tokenizers' encode gives [1, 11, 7]; --bos none: the prompt alone.
d = json.load(open("v16.json"))
assert d["tokens"] == [1, 11, 7] and all(len(row) == 16 for row in d["logits"]), d["tokens"]
assert json.load(open("v16_none.json"))["tokens"] == [11, 7]
out = open("v16_gen.txt", "rb").read()
# The decoder's "▁" is a space, and its Strip drops the text's leading one (tokenizers' decode gives "hello", with
# <s> skipped); ids 12..15 (the model's, not the tokenizer's) print as <|id N|>.
import re
assert out.startswith(b"hello") and len(out) > len(b"hello\n"), out
assert open("v16_none.txt", "rb").read() == b"hello\n"
assert all(12 <= int(n) < 16 for n in re.findall(rb"<\|id (\d+)\|>", out)), out
PY
"$cleave" train --set train.steps=1 --set model.vocab_size=8 --set train.out_dir=v8 > v8.log 2>&1 || { cat v8.log; fail "vocab-8 run"; }
"$cleave" generate v8/checkpoints --prompt "hello" --tokenizer small_tok.json > v8_gen.log 2>&1
[ $? -eq 64 ] || { cat v8_gen.log; fail "a 12-token tokenizer on a vocab-8 model was not refused as bad input"; }
grep -q "small_tok.json has 12 tokens but checkpoint .* has model.vocab_size 8" v8_gen.log || { cat v8_gen.log; fail "vocab-8 message"; }
"$cleave" generate v8/checkpoints --prompt "hello" > v8_bytes.log 2>&1
[ $? -eq 64 ] || { cat v8_bytes.log; fail "a vocab-8 model without --tokenizer was not refused as bad input"; }
grep -q "with vocab_size 8; generation needs .* vocab_size >= 256" v8_bytes.log || { cat v8_bytes.log; fail "vocab-8 bytes message"; }
echo "ok   generate --tokenizer puts the BOS before the prompt (--bos none: not) and prints the text without the decoder's leading space"
echo "ok   generate --tokenizer samples a vocab-16 model with a 12-token tokenizer; refuses it on vocab 8: $(grep -o 'generate: .*' v8_gen.log | cut -c1-100)"

# refuse CASE GREP ARGS...: exit 64 (bad input: the text, the tokenizer or an option; a JSONL line that is not JSON,
# text that is not UTF-8 and an unknown --eot exited 1), one error line holding GREP, and no out/ directory written.
refuse() {
  local name=$1 pattern=$2 status; shift 2
  rm -rf out
  "$cleave" tokenize "$@" > refuse.log 2>&1; status=$?
  [ $status -eq 64 ] || { cat refuse.log; fail "$name: exit $status, expected 64 (bad input)"; }
  grep -q -- "$pattern" refuse.log || { cat refuse.log; fail "$name: message lacks '$pattern'"; }
  [ "$(grep -c 'error' refuse.log)" -eq 1 ] || { cat refuse.log; fail "$name: not one error line"; }
  [ ! -e out ] || fail "$name: out/ was written"
  echo "ok   refused $name: $(grep -o 'error.*\|tokenize:.*' refuse.log | tail -1 | cut -c1-150)"
}
refuse "a missing text file" "text file nope.txt: no such file" a.txt nope.txt --tokenizer tok.json --out out
refuse "a missing tokenizer" "tokenizer nope.json: no such file" a.txt --tokenizer nope.json --out out
python3 mk.py wordpiece > wordpiece.json && refuse "WordPiece" 'wordpiece.json: model.type is "WordPiece"' \
  a.txt --tokenizer wordpiece.json --out out
python3 mk.py pattern > pattern.json && refuse "another pattern" "pattern.json: pre_tokenizer.pretokenizers\[0\].pattern.Regex" \
  a.txt --tokenizer pattern.json --out out
python3 mk.py merge > merge.json && refuse "a malformed merge" "merge.json: model.merges\[4\]" a.txt --tokenizer merge.json --out out
python3 mk.py big > big.json && refuse "a vocabulary over 65536 in 16 bits" "70001 tokens; 16-bit shards hold ids up to 65,535" \
  a.txt --tokenizer big.json --out out --bits 16
python3 mk.py sp_bert > bert.json && refuse "an unknown normalizer" 'bert.json: normalizer.normalizers\[2\].type is "BertNormalizer"' \
  a.txt --tokenizer bert.json --out out
printf '{"text": "a"}\nnot json\n' > bad1.jsonl
refuse "a JSONL line that is not JSON" "text file bad1.jsonl line 2 is not JSON" bad1.jsonl --tokenizer tok.json --out out --jsonl text
printf '{"text": "a"}\n{"body": "b"}\n' > bad2.jsonl
refuse "a JSONL line without the key" 'text file bad2.jsonl line 2: no key "text"' bad2.jsonl --tokenizer tok.json --out out --jsonl text
refuse "--doc-separator with --jsonl" "both given" a.txt --tokenizer tok.json --out out --jsonl text --doc-separator x
printf 'ok\nbad \xff here\n' > bad.txt
refuse "invalid UTF-8" "bad.txt is not valid UTF-8 at byte 7 (line 2, byte 5 of the line" a.txt bad.txt --tokenizer tok.json --out out
refuse "an unknown --eot" "not an added token of tokenizer tok.json; give one of its added tokens: '<|endoftext|>'" \
  a.txt --tokenizer tok.json --out out --eot '<|eot|>'
# A directory that cannot be made (under /proc: refused by the check before work, root included):
# one error naming --out, never the library's "filesystem error".
refuse "an --out that cannot be created" "error: tokenize: --out /proc/cleave_tokenize_out" a.txt --tokenizer tok.json \
  --out /proc/cleave_tokenize_out
before=$(cksum shards/train.bin shards/val.bin)
"$cleave" tokenize a.txt --tokenizer tok.json --out shards > refuse.log 2>&1; status=$?
[ $status -eq 64 ] || { cat refuse.log; fail "an existing output: exit $status, expected 64 (bad input)"; }
grep -q "shards/train.bin already exists; nothing was written" refuse.log || { cat refuse.log; fail "existing output message"; }
[ "$(cksum shards/train.bin shards/val.bin)" = "$before" ] || fail "the existing shards changed"
echo "ok   refused an existing output: $(grep -o 'tokenize: .*' refuse.log)"
