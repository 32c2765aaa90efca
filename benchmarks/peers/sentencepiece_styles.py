"""SentencePiece-style BPE tokenizer.json files made with Hugging Face `tokenizers`, in the styles models ship
(shared by sentencepiece_check.py and the fixture writer below; needs `pip install tokenizers`).

The base tokenizer is trained offline on a corpus with a Metaspace pre-tokenizer; its vocabulary is then laid out
as Llama 2's is: <unk> <s> </s> (ids 0-2), the 256 byte-fallback tokens <0x00>..<0xFF> (ids 3-258), then the
learned tokens. Each style replaces keys of that file:
  llama2            normalizer Sequence [Prepend "▁", Replace " " -> "▁"], pre_tokenizer null, byte_fallback,
                    decoder Sequence [Replace, ByteFallback, Fuse, Strip], post_processor "<s> $A", merges as
                    "a b" strings, a normalized added token "ab cd"
  metaspace_first   normalizer null, Metaspace prepend_scheme "first", split false (Mistral, newer Llama files)
  metaspace_always  Metaspace "always", split true
  metaspace_never   Metaspace "never", split true
  ignore_merges     metaspace_always with ignore_merges true, merges as ["a", "b"] pairs
  unk               llama2 without byte_fallback: characters with no token become <unk>, runs fused
  legacy_metaspace  Metaspace written by older `tokenizers`: add_prefix_space true, no prepend_scheme or split

Write the make-test fixture (tests/unit/tokenizer/data/, once; the ids are the `tokenizers` version's):
    venv/bin/python benchmarks/peers/sentencepiece_styles.py --write-fixture
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_util import ROOT, repo_text  # noqa: E402,F401 (ROOT and repo_text are also this module's, as sp.ROOT)
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402
SP = "\u2581"
STYLES = ["llama2", "metaspace_first", "metaspace_always", "metaspace_never", "ignore_merges", "unk",
          "legacy_metaspace"]

# Normalizers a tokenizer is trained with (train_base(normalizer=...)), then written in the metaspace_always style.
NORMALIZERS = {
    "nfc": lambda: normalizers.NFC(),
    "nfd": lambda: normalizers.NFD(),
    "nfkc": lambda: normalizers.NFKC(),
    "nfkd": lambda: normalizers.NFKD(),
    "lowercase": lambda: normalizers.Lowercase(),
    "strip": lambda: normalizers.Strip(left=True, right=True),
    "regex_spaces": lambda: normalizers.Replace(Regex(" {2,}"), " "),
    "nfkc_lower_strip": lambda: normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                                      normalizers.Replace(Regex("\\.\\.\\."), "\u2026"),
                                                      normalizers.Strip(left=False, right=True)]),
}


def awkward_text(rng, chars):
    """The awkward text of tokenizer_check.py (byte-level proof) plus SentencePiece edge cases."""
    pieces = ["don't", "I'M", "we'RE", "they've", "'ll", "'d", "'s", "x's", "'ſ", "’s", "123", "4567890",
              "3.14159", "½²³", "Ⅻ", "٣٤٥", "héllo", "naïve", "Ελληνικά", "кириллица", "日本語のテキスト", "中文",
              "한국어", "😀", "👩‍💻", "🇫🇷", "\u00a0", "\u3000", "\u2009", "\t", "\r\n", "\n\n", "\r", "   ", "  \n ",
              "<s>", "</s>", " <s> ", "<unk>", "<0x41>", "ab cd", " ab cd ", SP, SP + SP + "x", " " + SP,
              "((", "...", "—", "\"quoted\"", "e\u0301", "ǅ", "ß", "İ", "\u200b",
              "\u0085", "\U0001d400\U0001d401", "a\u0300\u0301b", "x" * 40, " " * 17, "9" * 20]
    out, size = [], 0
    while size < chars:
        r = rng.random()
        if r < 0.5:
            s = rng.choice(pieces)
        elif r < 0.8:
            s = " " + "".join(rng.choice("abcdefghijKLMNOPQRS") for _ in range(rng.randint(1, 9)))
        else:
            s = "".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                        rng.randint(0x3000, 0xd7ff), rng.randint(0xe000, 0xfffd),
                                        rng.randint(0x10000, 0x1faff)])) for _ in range(rng.randint(1, 6)))
        out.append(s)
        size += len(s)
    return "".join(out)


def train_base(corpus_path, vocab, normalizer=None):
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if normalizer is not None:
        tok.normalizer = NORMALIZERS[normalizer]()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train([corpus_path], trainer)
    base = json.loads(tok.to_str())
    # Llama 2's layout: specials, then the 256 byte tokens, then the rest.
    vocab_in = sorted(base["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = [t for t, _ in vocab_in[:3]]
    assert specials == ["<unk>", "<s>", "</s>"], specials
    new = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        new["<0x%02X>" % b] = len(new)
    for t, _ in vocab_in[3:]:
        if t not in new:
            new[t] = len(new)
    base["model"]["vocab"] = new
    return base


def style(base, name):
    j = json.loads(json.dumps(base))
    meta = lambda scheme, split: {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}
    llama2_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    as_strings = lambda: [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    if name in ("llama2", "unk"):
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
        j["pre_tokenizer"] = None
        j["decoder"] = llama2_decoder
        j["post_processor"] = template
        j["model"]["merges"] = as_strings()
        j["model"]["byte_fallback"] = name == "llama2"
    elif name == "metaspace_first":
        j["normalizer"] = None
        j["pre_tokenizer"] = meta("first", False)
        j["decoder"] = meta("first", False)
    elif name in ("metaspace_always", "ignore_merges"):
        j["pre_tokenizer"] = meta("always", True)
        j["decoder"] = llama2_decoder
        j["model"]["ignore_merges"] = name == "ignore_merges"
        j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    elif name == "metaspace_never":
        j["pre_tokenizer"] = meta("never", True)
        j["decoder"] = meta("never", True)
    elif name == "legacy_metaspace":
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP, "add_prefix_space": True}
        j["decoder"] = {"type": "Metaspace", "replacement": SP, "add_prefix_space": True}
    else:
        raise ValueError(name)
    tok = Tokenizer.from_str(json.dumps(j))
    if name == "llama2":
        tok.add_tokens([AddedToken("ab cd", normalized=True, special=False)])
    return tok


def write_fixture(vocab):
    import tokenizers
    rng = random.Random(35)
    corpus_path = "/tmp/sp_fixture_corpus.txt"
    open(corpus_path, "w", encoding="utf-8").write(repo_text())
    base = train_base(corpus_path, vocab)
    text = " leading space, <s>then</s> text" + awkward_text(rng, 1000) + " trailing "
    out_dir = os.path.join(ROOT, "tests", "unit", "tokenizer", "data")
    os.makedirs(out_dir, exist_ok=True)
    json.dump(base, open(os.path.join(out_dir, "sp_base.json"), "w", encoding="utf-8"), ensure_ascii=False)
    styles = []
    for name in STYLES:
        tok = style(base, name)
        j = json.loads(tok.to_str())
        changed = {k: j[k] for k in ("normalizer", "pre_tokenizer", "decoder", "post_processor", "added_tokens")}
        model_keys = {k: j["model"][k] for k in ("byte_fallback", "ignore_merges")}
        merges_as = "strings" if isinstance(j["model"]["merges"][0], str) else "pairs"
        ids = tok.encode(text, add_special_tokens=False).ids
        styles.append({"name": name, "set": changed, "model": model_keys, "merges_as": merges_as, "ids": ids,
                       "with_special": tok.encode(text).ids[:3], "decoded": tok.decode(ids, skip_special_tokens=False)})
    fixture = {"tokenizers_version": tokenizers.__version__, "text": text, "styles": styles}
    json.dump(fixture, open(os.path.join(out_dir, "sp_expected.json"), "w", encoding="utf-8"), ensure_ascii=False)
    print("wrote", out_dir, "with", len(text), "code points,", [len(s["ids"]) for s in styles], "ids")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-fixture", action="store_true")
    ap.add_argument("--vocab", type=int, default=600)
    a = ap.parse_args()
    if a.write_fixture:
        write_fixture(a.vocab)
    else:
        print(__doc__)
