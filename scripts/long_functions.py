#!/usr/bin/env python3
"""Lists the longest C++/CUDA function bodies in the tree, longest first: a reading aid for splitting them.

  python3 scripts/long_functions.py [--min LINES] [PATH...]   (default: 80 lines, every tracked source file)

A function is a brace block at namespace or class level (depth 0 after namespace braces are discounted) whose
opening line is not a type, namespace, enum or initializer; its length counts the lines from its signature to its
closing brace. The scan is textual (strings and comments are stripped first), so it can miscount a macro-heavy
file; it reads files and changes nothing. Generated tables (engine/tokenizer/unicode_*table.cpp) are skipped.
"""
import argparse
import re
import subprocess
import sys

SKIP = re.compile(r"unicode_(normalization_)?table\.cpp$")
NOT_A_FUNCTION = re.compile(r"^\s*(template\s*<[^>]*>\s*)?(namespace|struct|class|union|enum)\b|=\s*$|=\s*\{?$")


def strip(text):
    """Blanks string, character literals and comments, keeping the line breaks."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(length, first line, signature) of each brace block outside any function that looks like a function body."""
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    text = re.sub(r"(?m)^[ \t]*#.*$", "", text)  # preprocessor lines hold no braces of ours
    found, stack = [], []  # stack: (is_function, start line, signature) per open brace
    head, head_line, number = [], 1, 1
    for c in text:
        if c == "\n":
            number += 1
        if c == "{":
            signature = " ".join("".join(head).split())
            inside_function = any(is_function for is_function, _, _ in stack)
            is_function = (not inside_function and ")" in signature and not NOT_A_FUNCTION.search(signature)
                           and not re.search(r"\b(if|for|while|switch|catch|do|else)\b\s*\(?", signature[:12]))
            stack.append((is_function, head_line, signature))
            head, head_line = [], number
        elif c == "}":
            if stack:
                is_function, start, signature = stack.pop()
                if is_function:
                    found.append((number - start + 1, start, signature))
            head, head_line = [], number
        elif c == ";":
            head, head_line = [], number
        else:
            if not head and c.isspace():
                head_line = number + (1 if c == "\n" else 0)
                continue
            head.append(c)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=int, default=80, help="shortest body listed, in lines (default 80)")
    parser.add_argument("paths", nargs="*", help="files or folders (default: every tracked source file)")
    args = parser.parse_args()
    listed = subprocess.run(["git", "ls-files", "--", *args.paths], capture_output=True, text=True, check=True)
    files = [f for f in listed.stdout.split() if f.endswith((".cpp", ".hpp", ".cu", ".cuh")) and not SKIP.search(f)]
    rows = []
    for path in files:
        for length, start, signature in functions(path):
            if length >= args.min:
                rows.append((length, f"{path}:{start}", signature[:100]))
    for length, where, signature in sorted(rows, reverse=True):
        print(f"{length:5d}  {where}  {signature}")
    sys.stdout.flush()
    print(f"{len(rows)} function(s) of {args.min} lines or more in {len(files)} file(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
