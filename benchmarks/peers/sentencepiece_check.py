#!/usr/bin/env python3
"""Exactness and speed of `cleave tokenize` on SentencePiece-style BPE tokenizers against Hugging Face
`tokenizers` (not in CI: it needs `pip install tokenizers`; nothing is downloaded).

A tokenizer is trained here, offline, on this repository's text and laid out as Llama 2's (sentencepiece_styles.py:
<unk> <s> </s>, 256 <0xNN> byte-fallback tokens, learned tokens), then written in each style models ship
(Llama 2's Prepend/Replace normalizer with no pre-tokenizer, Metaspace first/always/never with and without split,
ignore_merges, no byte fallback (unknown token), the older add_prefix_space form) plus `llama2_wide`: the llama2
style with its learned tokens moved above id 70,000, so ids need 32-bit shards. Then (--normalizers) one tokenizer
trained with each normalizer (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace Regex " {2,}", and a Sequence of
NFKC, Lowercase, Replace Regex "\\.\\.\\." and Strip right) in the metaspace_always style, each checked the same way. The test file is the awkward
text of the byte-level proof (tokenizer_check.py: random code points of many scripts, emoji, digit runs, runs of
spaces, \\r\\n, "▁" and "<s>" inside text) followed by repository text repeated to --mb MB. For each style
`cleave tokenize FILE --tokenizer T --out DIR --bos-eos none` must give exactly
`T.encode(text, add_special_tokens=False).ids`; then encode speed (tokens/s and MB/s, one core), median of
interleaved runs.

    /work/venv-tok/bin/python benchmarks/peers/sentencepiece_check.py --cleave build/bin/cleave [--mb 4] [--runs 5]

Exit status 0 when every style's ids match exactly, 1 otherwise.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sentencepiece_styles as sp  # noqa: E402
from peer_util import read_shard  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def wide(tok):
    """The same tokenizer with every learned token's id raised by 70,000 (ids below filled by unused tokens)."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    first_learned = 259
    new = {t: i for t, i in vocab.items() if i < first_learned}
    for k in range(70000):
        new["<unused_%d>" % k] = first_learned + k
    for t, i in vocab.items():
        if i >= first_learned:
            new[t] = i + 70000
    j["model"]["vocab"] = new
    j["added_tokens"] = [a for a in j["added_tokens"] if a["id"] < first_learned]
    return Tokenizer.from_str(json.dumps(j))


def cleave_tokenize(cleave, text_path, tok_path, out):
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([cleave, "tokenize", text_path, "--tokenizer", tok_path, "--out", out, "--bos-eos", "none"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("cleave tokenize failed:\n" + proc.stdout + proc.stderr)
    return float(proc.stdout.split(" s (")[0].split(" in ")[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", default=os.path.join(sp.ROOT, "build", "bin", "cleave"))
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per style (0: check the ids only)")
    ap.add_argument("--styles", default=",".join(sp.STYLES + ["llama2_wide"]))
    ap.add_argument("--normalizers", default=",".join(sp.NORMALIZERS), help="trained-with normalizers ('' for none)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sentencepiece_check_")
    rng = random.Random(1234)
    corpus = sp.repo_text()
    corpus_path = os.path.join(work, "corpus.txt")
    open(corpus_path, "w", encoding="utf-8").write(corpus)
    target = int(args.mb * 1e6)
    text = sp.awkward_text(rng, 300_000)
    while len(text.encode()) < target:
        text += corpus
    text = text.encode()[:target].decode("utf-8", errors="ignore")
    text_path = os.path.join(work, "test.txt")
    open(text_path, "w", encoding="utf-8", newline="").write(text)
    mb = len(text.encode()) / 1e6
    import tokenizers
    print(f"test file: {mb:.2f} MB ({len(text)} code points); tokenizers {tokenizers.__version__}; "
          f"vocabulary {args.vocab}")
    base = sp.train_base(corpus_path, args.vocab)
    # The normalizer cases read the same text after a line of their edge cases.
    norm_text = ("  \u00a0 \ufb01 \u212b \uff76\uff9e \u1e9b\u0323 a\u0301\u0323 \u0958 \ud55c \u1112\u1161\u11ab "
                 "\u0130STANBUL \u0391\u03a3 \u01c4 \u1e9e \u212a ... .... x    y\t\u3000 \u2460\u2461 \u00bd \u33a1 "
                 "\U0001d400 \u0b47\u0b3e \u0345\u0301 \n") + text + " \u3000 "
    norm_path = os.path.join(work, "test_norm.txt")
    open(norm_path, "w", encoding="utf-8", newline="").write(norm_text)
    ok = True
    cases = [(name, None) for name in args.styles.split(",") if name]
    cases += [("norm_" + n, n) for n in args.normalizers.split(",") if n]
    for name, normalizer in cases:
        if normalizer is not None:
            tok = sp.style(sp.train_base(corpus_path, args.vocab, normalizer), "metaspace_always")
        else:
            tok = wide(sp.style(base, "llama2")) if name == "llama2_wide" else sp.style(base, name)
        tok_path = os.path.join(work, f"{name}.json")
        tok.save(tok_path)
        case_text, case_path = (norm_text, norm_path) if normalizer is not None else (text, text_path)
        expected = tok.encode(case_text, add_special_tokens=False).ids
        out = os.path.join(work, "out")
        cleave_tokenize(args.cleave, case_path, tok_path, out)
        got = read_shard(os.path.join(out, "train.bin"))
        bits = json.load(open(os.path.join(out, "manifest.json")))["bits"]
        if got != expected:
            ok = False
            first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            lo = max(0, first - 5)
            print(f"{name}: MISMATCH at token {first} of {len(expected)} (cleave {len(got)} tokens)")
            print("  expected", [tok.id_to_token(i) for i in expected[lo:first + 8]])
            print("  cleave  ", [tok.id_to_token(i) for i in got[lo:first + 8]])
            continue
        print(f"{name}: exact match, {len(got)} tokens, {bits}-bit shard, max id {max(got)}")
        if args.runs == 0:  # exactness only
            continue
        lines = case_text.splitlines(keepends=True)
        cleave_s, hf_s, hf_batch_s = [], [], []
        for _ in range(args.runs):
            cleave_s.append(cleave_tokenize(args.cleave, case_path, tok_path, out))
            start = time.perf_counter()
            tok.encode(case_text, add_special_tokens=False)
            hf_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            tok.encode_batch(lines, add_special_tokens=False)
            hf_batch_s.append(time.perf_counter() - start)
        c, h, b = statistics.median(cleave_s), statistics.median(hf_s), statistics.median(hf_batch_s)
        n = len(got)
        print(f"{name}: median of {args.runs}, one core: cleave {n / c / 1e6:.2f} M tokens/s ({mb / c:.1f} MB/s, "
              f"{c:.3f} s); tokenizers encode(whole file) {n / h / 1e6:.2f} M tokens/s ({h:.3f} s), "
              f"encode_batch(lines) {n / b / 1e6:.2f} M tokens/s ({b:.3f} s)")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
