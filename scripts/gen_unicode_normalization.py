#!/usr/bin/env python3
"""Writes engine/tokenizer/unicode_normalization_table.cpp: the data the NFC/NFD/NFKC/NFKD and Lowercase
normalizers need (unicode_normalization.hpp), from this Python's unicodedata (its Unicode version is written into
the file). Run once per Unicode update:

    python3 scripts/gen_unicode_normalization.py > engine/tokenizer/unicode_normalization_table.cpp

The target is what Hugging Face `tokenizers` does, not Unicode 14.0 itself: `tokenizers` 0.23.3 normalizes with
the unicode-normalization-alignments crate, whose data is older (code points assigned after Unicode 9.0 have no
decomposition and combining class 0 there), and lowercases with Rust's char::to_lowercase, whose data is newer
(Unicode 16.0). The differences from this Python's data over every code point are pinned below
(TOKENIZERS_NO_DECOMPOSITION, TOKENIZERS_NO_COMBINING_CLASS, TOKENIZERS_EXTRA_LOWERCASE); re-derive them with

    /work/venv-tok/bin/python scripts/gen_unicode_normalization.py --compare-tokenizers

(needs `pip install tokenizers`; prints the three lists for this Python's Unicode and the installed tokenizers).

Tables (Hangul syllables are left out: their decomposition and composition are arithmetic):
  kCombiningClasses  [first, last, ccc] ranges of the non-zero canonical combining classes
  kDecompositions    {cp | compat << 21 | length << 22}, sorted by (cp, compat): the full (recursive) canonical
                     decomposition of cp (compat 0, when NFD(cp) != cp) or its full compatibility one (compat 1,
                     when NFKD(cp) != NFD(cp)); the code points follow in kDecompositionPool in the same order
  kCompositions      {first, second, composite}: the primary composites (canonical decompositions of two code
                     points not excluded from composition), sorted by (first, second)
  kLowercase         {first, last, stride, delta}: cp in first..last step stride lowercases to cp + delta (one
                     code point; the one longer mapping, U+0130 -> "i\u0307", is in the code), as Rust's
                     char::to_lowercase, which `tokenizers` applies one character at a time
"""
import sys
import unicodedata as ud

# Code points with a decomposition in Unicode 14.0 that `tokenizers` 0.23.3 leaves alone (NFD/NFKD identity):
# they get no decomposition here, and so compose with nothing.
TOKENIZERS_NO_DECOMPOSITION = [(0x32FF, 0x32FF), (0xA7F2, 0xA7F4), (0xAB69, 0xAB69), (0x10781, 0x10785),
                               (0x10787, 0x107B0), (0x107B2, 0x107BA), (0x11938, 0x11938), (0x1F16C, 0x1F16C),
                               (0x1FBF0, 0x1FBF9)]
# Code points with a non-zero combining class in Unicode 14.0 that `tokenizers` 0.23.3 treats as starters.
TOKENIZERS_NO_COMBINING_CLASS = [
    (0x7FD, 0x7FD), (0x898, 0x89F), (0x8CA, 0x8D3), (0x9FE, 0x9FE), (0xC3C, 0xC3C), (0xD3B, 0xD3C), (0xEBA, 0xEBA),
    (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA), (0xA82C, 0xA82C), (0x10D24, 0x10D27), (0x10EAB, 0x10EAC),
    (0x10F46, 0x10F50), (0x10F82, 0x10F85), (0x11070, 0x11070), (0x1133B, 0x1133B), (0x1145E, 0x1145E),
    (0x11839, 0x1183A), (0x1193D, 0x1193E), (0x11943, 0x11943), (0x119E0, 0x119E0), (0x11A34, 0x11A34),
    (0x11A47, 0x11A47), (0x11A99, 0x11A99), (0x11D42, 0x11D42), (0x11D44, 0x11D45), (0x11D97, 0x11D97),
    (0x16FF0, 0x16FF1), (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF)]
# Lowercase mappings Rust's char::to_lowercase (Unicode 16.0) has and Unicode 14.0 lacks: {cp: lowercase}.
TOKENIZERS_EXTRA_LOWERCASE = {0x1C89: 0x1C8A, 0xA7CB: 0x264, 0xA7CC: 0xA7CD, 0xA7CE: 0xA7CF, 0xA7D2: 0xA7D3,
                              0xA7D4: 0xA7D5, 0xA7DA: 0xA7DB, 0xA7DC: 0x19B}
TOKENIZERS_EXTRA_LOWERCASE.update({cp: cp + 0x20 for cp in range(0x10D50, 0x10D66)})  # Garay
TOKENIZERS_EXTRA_LOWERCASE.update({cp: cp + 0x1B for cp in range(0x16EA0, 0x16EB9)})  # Beria Erfe


def pinned(ranges, cp):
    return any(a <= cp <= b for a, b in ranges)


def combining(cp):
    return 0 if pinned(TOKENIZERS_NO_COMBINING_CLASS, cp) else ud.combining(chr(cp))


def lower(ch):
    return chr(TOKENIZERS_EXTRA_LOWERCASE[ord(ch)]) if ord(ch) in TOKENIZERS_EXTRA_LOWERCASE else ch.lower()


def ranges_of(code_points):
    out = []
    for cp in code_points:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return ", ".join(f"(0x{a:X}, 0x{b:X})" for a, b in out)


def compare_tokenizers():
    """Prints the three pinned lists as this Python and the installed `tokenizers` give them."""
    import tokenizers
    from tokenizers import normalizers as N
    nfd, nfkd, low = N.NFD(), N.NFKD(), N.Lowercase()
    scalars = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    no_decomposition = [cp for cp in scalars if nfkd.normalize_str(chr(cp)) != ud.normalize("NFKD", chr(cp)) or
                        nfd.normalize_str(chr(cp)) != ud.normalize("NFD", chr(cp))]
    # A mark that `tokenizers` does not reorder before U+0334 (class 1), or after U+0301 (class 230) when its
    # own class is 1, has class 0 there.
    no_class = [cp for cp in scalars if ud.combining(chr(cp)) > 1 and
                nfd.normalize_str(chr(cp) + "\u0334") != ud.normalize("NFD", chr(cp) + "\u0334")]
    no_class += [cp for cp in scalars if ud.combining(chr(cp)) == 1 and
                 nfd.normalize_str("a\u0301" + chr(cp)) != ud.normalize("NFD", "a\u0301" + chr(cp))]
    extra = {cp: low.normalize_str(chr(cp)) for cp in scalars if low.normalize_str(chr(cp)) != chr(cp).lower()}
    print(f"Unicode {ud.unidata_version}, tokenizers {tokenizers.__version__}")
    print("TOKENIZERS_NO_DECOMPOSITION", ranges_of(no_decomposition))
    print("TOKENIZERS_NO_COMBINING_CLASS", ranges_of(sorted(no_class)))
    print("TOKENIZERS_EXTRA_LOWERCASE", {hex(cp): [hex(ord(c)) for c in v] for cp, v in extra.items()})


def main():
    w = sys.stdout.write
    ccc = []
    for cp in range(0x110000):
        c = combining(cp)
        if c and ccc and ccc[-1][1] == cp - 1 and ccc[-1][2] == c:
            ccc[-1][1] = cp
        elif c:
            ccc.append([cp, cp, c])
    decomps, pool = [], []
    comps = []
    lower_runs = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3:
            continue
        ch = chr(cp)
        lo = lower(ch)
        if lo != ch and len(lo) == 1:
            delta, last = ord(lo) - cp, lower_runs[-1] if lower_runs else None
            if last and last[3] == delta and (cp - last[1]) in (1, 2) and (last[0] == last[1] or cp - last[1] == last[2]):
                last[2] = cp - last[1]
                last[1] = cp
            else:
                lower_runs.append([cp, cp, 1, delta])
        elif len(lo) > 1:
            assert cp == 0x130 and lo == "i\u0307", hex(cp)
        if pinned(TOKENIZERS_NO_DECOMPOSITION, cp):
            continue  # no decomposition, so no composition either
        nfd, nfkd = ud.normalize("NFD", ch), ud.normalize("NFKD", ch)
        for compat, d in ((0, nfd), (1, nfkd)):
            if d != (ch if compat == 0 else nfd):
                assert len(d) < 32
                decomps.append(cp | compat << 21 | len(d) << 22)
                pool.extend(ord(x) for x in d)
        raw = ud.decomposition(ch)
        if raw and not raw.startswith("<"):
            parts = [int(x, 16) for x in raw.split()]
            if len(parts) == 2 and ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) == ch:
                comps.append((parts[0], parts[1], cp))
    comps.sort()

    def numbers(values, per_line=12):
        for i in range(0, len(values), per_line):
            w("    " + ", ".join(str(v) for v in values[i:i + per_line]) + ",\n")

    w(f"""// The Unicode normalization and lowercase tables (unicode_normalization.hpp). Generated by
// scripts/gen_unicode_normalization.py from Unicode {ud.unidata_version} (Python {sys.version.split()[0]} unicodedata), with
// the differences of `tokenizers` 0.23.3 pinned as the script lists them; do not edit: rerun the script.
// {len(ccc)} combining-class ranges, {len(decomps)} decompositions ({len(pool)} code points), {len(comps)} compositions,
// {len(lower_runs)} lowercase runs. Numbers are decimal to keep the file small.
#include "engine/tokenizer/unicode_normalization.hpp"

namespace cleave::tokenizer::unicode_data {{

const char kNormalizationUnicodeVersion[] = "{ud.unidata_version}";

const CombiningRange kCombiningClasses[] = {{
""")
    for a, b, c in ccc:
        w(f"    {{{a}, {b}, {c}}},\n")
    w(f"}};\nconst std::size_t kCombiningClassCount = {len(ccc)};\n\nconst std::uint32_t kDecompositions[] = {{\n")
    numbers(decomps)
    w(f"}};\nconst std::size_t kDecompositionCount = {len(decomps)};\n\nconst char32_t kDecompositionPool[] = {{\n")
    numbers(pool, 14)
    w(f"}};\nconst std::size_t kDecompositionPoolSize = {len(pool)};\n\nconst Composition kCompositions[] = {{\n")
    for i in range(0, len(comps), 5):
        w("    " + ", ".join(f"{{{a}, {b}, {c}}}" for a, b, c in comps[i:i + 5]) + ",\n")
    w(f"}};\nconst std::size_t kCompositionCount = {len(comps)};\n\nconst LowercaseRun kLowercase[] = {{\n")
    for i in range(0, len(lower_runs), 4):
        w("    " + ", ".join(f"{{{a}, {b}, {s}, {d}}}" for a, b, s, d in lower_runs[i:i + 4]) + ",\n")
    w(f"}};\nconst std::size_t kLowercaseCount = {len(lower_runs)};\n\n}}  // namespace cleave::tokenizer::unicode_data\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--compare-tokenizers"]:
        compare_tokenizers()
    else:
        main()
