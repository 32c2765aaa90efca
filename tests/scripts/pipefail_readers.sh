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

# logical_lines FILE: "LINE<TAB>TEXT" for each command line as bash reads it (see above).
logical_lines() {
  awk '
    function scan(s,   i, n, c) {  # quote state across s; sets cut to the start of a trailing comment
      n = length(s); cut = 0
      for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (sq) { if (c == "\047") sq = 0; continue }
        if (c == "\\") { i++; continue }
        if (dq) { if (c == "\"") dq = 0; continue }
        if (c == "\047") sq = 1
        else if (c == "\"") dq = 1
        else if (c == "#" && (i == 1 || substr(s, i - 1, 1) ~ /[ \t;(]/)) { cut = i; return }
      }
    }
    hd != "" {  # a heredoc body: each line on its own, until the delimiter
      t = $0
      if (hd_tabs) sub(/^\t+/, "", t)
      if (t == hd) { hd = ""; next }
      print NR "\t" $0
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
      if (!was_quoted && !sq && !dq && match(line, /<<-?[ \t]*["\047]?[A-Za-z_][A-Za-z_0-9]*/) &&
          substr(line, RSTART + 2, 1) != "<" && (RSTART == 1 || substr(line, RSTART - 1, 1) != "<")) {
        d = substr(line, RSTART, RLENGTH)
        hd_tabs = d ~ /^<<-/
        sub(/^<<-?[ \t]*["\047]?/, "", d)
        hd = d
      }
      if (sq || dq || line ~ /(\\|\||&&)[ \t]*$/) next
      print start "\t" buf
      buf = ""
    }
    END { if (buf != "") print start "\t" buf }' "$1"
}

# early_readers FILE: "FILE:LINE: TEXT" for every pipeline of FILE that ends in an early-exit reader.
early_readers() {
  local pipe='(^|[^|])\|[[:space:]]*'
  local grep_opts='grep([[:space:]]+-[-a-zA-Z0-9=]+)*[[:space:]]+(-[a-zA-Z]*[qmlL]|--(quiet|silent|max-count|files-with-matches|files-without-match)\b)'
  local line text prog
  while IFS=$'\t' read -r line text; do
    if grep -qE "${pipe}(head\\b|${grep_opts}|\\{?[[:space:]]*read\\b)" <<<"$text"; then
      echo "$1:$line: $text"
      continue
    fi
    if grep -qE "${pipe}sed\\b" <<<"$text" && grep -oE "${pipe}sed\\b[^|]*" <<<"$text" |
         grep -cE "[;{}'\"[:space:]0-9\$/][qQ][0-9]*[[:space:]]*(['\";}]|\$)" >/dev/null; then
      echo "$1:$line: $text"
      continue
    fi
    # awk: the first quoted program after `awk` and its options; exit anywhere in it but a BEGIN-only program.
    while IFS= read -r prog; do
      prog="${prog#*\'}"
      prog="${prog%\'}"
      [[ "$prog" =~ (^|[^a-zA-Z_])exit([^a-zA-Z_]|$) ]] || continue
      [[ "$prog" =~ ^[[:space:]]*BEGIN[[:space:]]*\{[^}]*\}[[:space:]]*$ ]] && continue
      echo "$1:$line: $text"
      break
    done < <(grep -oE "${pipe}awk([[:space:]]+-[^[:space:]']+([[:space:]]+[^-[:space:]'][^[:space:]']*)?)*[[:space:]]+'[^']*'" \
             <<<"$text")
  done < <(logical_lines "$1")
}

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
  hits="$(early_readers "$f")"
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
