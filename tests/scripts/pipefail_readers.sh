#!/usr/bin/env bash
# Lint: in every shell script of the repository that runs under `set -o pipefail` (CI runs scripts/, tests/,
# .ci/run and the benchmark scripts ctest names; a file sourced by such a script says `pipefail` too), no pipeline
# may end in a reader that stops before its writer is done: `| head`, `| grep` with -q/-m/-l/-L (or --quiet,
# --silent, --max-count, --files-with(out)-match(es)), `| read`, `| sed` with a q/Q command, `| awk` whose program
# can `exit` (a BEGIN-only program reads nothing and is fine). Such a reader exits while the writer still writes;
# the writer dies of SIGPIPE (status 141), pipefail makes that the pipeline's status, and `set -e` ends the script
# without a word (or an `if` takes the wrong branch). Read every line instead: `sed -n 1p`, `grep -c ... >/dev/null`
# (GNU grep quits at the first match when its output is /dev/null, -c makes it count them all), awk with a
# `found` flag.
# Pipelines are checked as the shell reads them: a line continued by `\`, a trailing `|`, `||` or `&&`, or an open
# quote (a multi-line awk program) is joined with the next; comments are dropped; heredoc bodies are checked line
# by line (they are often scripts of their own). A file holding the line `# lint: pipefail-readers fixtures` (the
# self-test's bad snippets) is skipped.
# Usage: pipefail_readers.sh REPO_ROOT  (exit 1 and the offending lines when any is found)
#        pipefail_readers.sh --check FILE...  (the same check on the given files, whatever they say: the self-test)
set -u

# The checker, one awk pass per file (portable awk: mawk has no \b, so word edges are spelled out). It joins the
# file's lines into logical lines and prints "FILE:LINE: TEXT" for each pipeline that ends in an early reader.
read -r -d '' checker <<'AWK'
function scan(s,   i, n, c) {  # quote state across s; sets cut to the start of a trailing comment
  n = length(s); cut = 0
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1)
    if (sq) { if (c == Q) sq = 0; continue }
    if (c == "\\") { i++; continue }
    if (dq) { if (c == "\"") dq = 0; continue }
    if (c == Q) sq = 1
    else if (c == "\"") dq = 1
    else if (c == "#" && (i == 1 || substr(s, i - 1, 1) ~ /[ \t;(]/)) { cut = i; return }
  }
}
# Whether a `| awk` of text has a program that can exit (its quoted words up to the next unquoted | ; ) &).
function awk_exits(text,   rest, i, n, c, word, inq) {
  while (match(text, PIPE "awk([ \t]|$)")) {
    rest = substr(text, RSTART + RLENGTH); text = rest
    n = length(rest); inq = 0; word = ""
    for (i = 1; i <= n; i++) {
      c = substr(rest, i, 1)
      if (inq) {
        if (c == Q) {
          inq = 0
          if (word ~ /(^|[^A-Za-z0-9_])exit([^A-Za-z0-9_]|$)/ && word !~ /^[ \t]*BEGIN[ \t]*\{[^}]*\}[ \t]*$/) return 1
          word = ""
        } else word = word c
        continue
      }
      if (c == Q) inq = 1
      else if (c ~ /[|;)&]/) break
    }
  }
  return 0
}
function check(line, text) {
  if (text ~ (PIPE "head([^A-Za-z0-9_-]|$)") || text ~ GREP || text ~ (PIPE "(\\{[ \t]*)?read([^A-Za-z0-9_]|$)") ||
      text ~ SED || awk_exits(text)) print FILENAME ":" line ": " text
}
BEGIN {
  Q = "\047"
  PIPE = "(^|[^|])\\|[ \t]*"
  GREP = PIPE "grep([ \t]+-[-A-Za-z0-9=]+)*[ \t]+(-[A-Za-z]*[qmlL]|--(quiet|silent|max-count|files-with-matches|files-without-match)([^A-Za-z-]|$))"
  SED = PIPE "sed[ \t][^|]*[;{}" Q "\" \t0-9$/][qQ][0-9]*[ \t]*([" Q "\";})&|]|$)"
}
hd != "" {  # a heredoc body: each line on its own, until the delimiter
  t = $0
  if (hd_tabs) sub(/^\t+/, "", t)
  if (t == hd) { hd = ""; next }
  check(NR, $0)
  next
}
{
  line = $0
  if (buf == "" && line ~ /^[ \t]*#/) next
  was_quoted = sq || dq
  scan(line)
  if (cut) line = substr(line, 1, cut - 1)
  if (buf == "") start = NR
  buf = buf (buf == "" ? "" : " ") line
  if (!was_quoted && !sq && !dq && match(line, /<<-?[ \t]*["']?[A-Za-z_][A-Za-z_0-9]*/) &&
      substr(line, RSTART + 2, 1) != "<" && (RSTART == 1 || substr(line, RSTART - 1, 1) != "<")) {
    d = substr(line, RSTART, RLENGTH)
    hd_tabs = d ~ /^<<-/
    sub(/^<<-?[ \t]*["']?/, "", d)
    hd = d
  }
  if (sq || dq || line ~ /(\\|\||&&)[ \t]*$/) next
  check(start, buf)
  buf = ""
}
END { if (buf != "") check(start, buf) }
AWK

files=() explicit=0
if [[ "${1:-}" == "--check" ]]; then
  shift
  explicit=1
  files=("$@")
else
  root="${1:?usage: pipefail_readers.sh REPO_ROOT | --check FILE...}"
  cd "$root" || exit 2
  while IFS= read -r f; do files+=("$f"); done \
    < <(grep -rl --include='*.sh' -e 'pipefail' scripts tests .ci benchmarks cmake 2>/dev/null; echo .ci/run)
fi
bad=0 checked=0
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  if [[ $explicit -eq 0 ]]; then
    grep -c pipefail "$f" >/dev/null || continue
    grep -c '^# lint: pipefail-readers fixtures' "$f" >/dev/null && continue  # snippets that must fail (self-test)
  fi
  checked=$((checked + 1))
  hits="$(awk "$checker" "$f")" || { echo "pipefail_readers: the checker failed on $f" >&2; exit 2; }
  if [[ -n "$hits" ]]; then
    bad=1
    echo "$hits"
  fi
done
if [[ "$bad" -ne 0 ]]; then
  echo "FAIL: pipelines above end in a reader that can exit before its writer (SIGPIPE under pipefail)" >&2
  exit 1
fi
echo "ok   $checked pipefail scripts: no early-exit reader after a writer"
