#!/usr/bin/env python3
"""Exactness and speed of `cleave tokenize` against Hugging Face `tokenizers` (not in CI: it needs the
`tokenizers` package, `pip install tokenizers`; nothing is downloaded).

Two byte-level BPE tokenizer.json files are trained here, offline, on the repository's own text (README.md,
docs/*.md and the C++ sources, concatenated):
  gpt2    ByteLevel pre-tokenizer (the GPT-2 pattern), add_prefix_space false, ByteLevel decoder
  gpt2p   the same with add_prefix_space true
  llama3  Sequence [Split(the Llama 3 pattern, isolated), ByteLevel(use_regex false)], ignore_merges true
each with "<|endoftext|>" as a special token. A test file of a few MB is then made of the repository text and
an awkward part (random UTF-8: letters of several scripts, CJK, emoji, digit runs, contractions in both cases,
runs of spaces, tabs, \\r\\n, U+00A0 and U+3000, "<|endoftext|>" inside text). For each tokenizer:
`cleave tokenize FILE --tokenizer T --out DIR` must give exactly tokenizers' encode(text,
add_special_tokens=False).ids; then encode speed (MB/s, one core) of both, median of interleaved runs.

    venv/bin/python benchmarks/peers/tokenizer_check.py --cleave build/bin/cleave [--mb 4] [--runs 5]

Exit status 0 when every tokenizer's ids match exactly, 1 otherwise.
"""
import argparse
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
from peer_util import ROOT, read_shard, repo_text  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def awkward_text(rng, chars):
    pieces = ["don't", "I'M", "we'RE", "they've", "'ll", "'d", "'s", "x's", "'ſ", "’s", "123", "4567890",
              "3.14159", "½²³", "Ⅻ", "٣٤٥", "héllo", "naïve", "Ελληνικά", "кириллица", "日本語のテキスト", "中文",
              "한국어", "😀", "👩‍💻", "🇫🇷", "\u00a0", "\u3000", "\u2009", "\t", "\r\n", "\n\n", "\r", "   ", "  \n ",
              "<|endoftext|>", "<|endoftext", "((", "...", "—", "\"quoted\"", "e\u0301", "ǅ", "ß", "İ", "\u200b",
              "\u0085", "\U0001d400\U0001d401", "a\u0300\u0301b", "x" * 40, " " * 17, "9" * 20]
    out, size = [], 0
    while size < chars:
        r = rng.random()
        if r < 0.5:
            s = rng.choice(pieces)
        elif r < 0.8:
            s = " " + "".join(rng.choice("abcdefghijKLMNOPQRS") for _ in range(rng.randint(1, 9)))
        else:  # random code points from assigned-looking ranges, no surrogates
            s = "".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                        rng.randint(0x3000, 0xd7ff), rng.randint(0xe000, 0xfffd),
                                        rng.randint(0x10000, 0x1faff)])) for _ in range(rng.randint(1, 6)))
        out.append(s)
        size += len(s)
    return "".join(out)


def train(kind, corpus_path, vocab):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=(kind == "gpt2p"))
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus_path], trainer)
    return tok


def cleave_tokenize(cleave, text_path, tok_path, out):
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run([cleave, "tokenize", text_path, "--tokenizer", tok_path, "--out", out],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit("cleave tokenize failed:\n" + proc.stdout + proc.stderr)
    return wall, proc.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", default=os.path.join(ROOT, "build", "bin", "cleave"))
    ap.add_argument("--mb", type=float, default=4.0, help="size of the test file in MB")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kinds", default="gpt2,gpt2p,llama3")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tokenizer_check_")
    rng = random.Random(1234)
    corpus = repo_text()
    corpus_path = os.path.join(work, "corpus.txt")
    open(corpus_path, "w", encoding="utf-8").write(corpus)
    # The test file: awkward text first, then repository text repeated to the size.
    target = int(args.mb * 1e6)
    text = awkward_text(rng, 300_000)
    while len(text.encode()) < target:
        text += corpus
    text = text.encode()[:target].decode("utf-8", errors="ignore")
    text_path = os.path.join(work, "test.txt")
    open(text_path, "w", encoding="utf-8", newline="").write(text)
    mb = len(text.encode()) / 1e6
    print(f"test file: {mb:.2f} MB ({len(text)} code points); tokenizers {__import__('tokenizers').__version__}")
    ok = True
    for kind in args.kinds.split(","):
        tok = train(kind, corpus_path, args.vocab)
        tok_path = os.path.join(work, f"{kind}.json")
        tok.save(tok_path)
        expected = tok.encode(text, add_special_tokens=False).ids
        out = os.path.join(work, "out")
        cleave_tokenize(args.cleave, text_path, tok_path, out)
        got = read_shard(os.path.join(out, "train.bin"))
        if got == expected:
            print(f"{kind}: exact match, {len(got)} tokens (vocab {tok.get_vocab_size()})")
        else:
            ok = False
            first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            lo = max(0, first - 5)
            print(f"{kind}: MISMATCH at token {first} of {len(expected)} (cleave {len(got)} tokens)")
            print("  expected", [tok.id_to_token(i) for i in expected[lo:first + 8]])
            print("  cleave  ", [tok.id_to_token(i) for i in got[lo:first + 8]])
            continue
        if kind != "gpt2p":  # add_prefix_space adds a space that decoding keeps
            assert tok.decode(got, skip_special_tokens=False) == text, "tokenizers' decode of the ids is not the text"
        lines = text.splitlines(keepends=True)
        cleave_s, hf_s, hf_batch_s = [], [], []
        for _ in range(args.runs):  # interleaved
            _, stdout = cleave_tokenize(args.cleave, text_path, tok_path, out)
            cleave_s.append(float(stdout.split(" s (")[0].split(" in ")[-1]))
            start = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            hf_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            tok.encode_batch(lines, add_special_tokens=False)
            hf_batch_s.append(time.perf_counter() - start)
        c, h, b = statistics.median(cleave_s), statistics.median(hf_s), statistics.median(hf_batch_s)
        print(f"{kind}: encode speed, median of {args.runs}, one core: cleave {mb / c:.1f} MB/s ({c:.3f} s); "
              f"tokenizers encode(whole file) {mb / h:.1f} MB/s ({h:.3f} s), "
              f"encode_batch(lines, 1 thread) {mb / b:.1f} MB/s ({b:.3f} s)")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
