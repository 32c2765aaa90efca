#!/usr/bin/env bash
# Lint: in every script that runs under `set -o pipefail`, no pipeline may end in a reader that stops before
# its writer is done (`| head`, `| grep -q`/`-m`, `| awk ... exit`, `| sed ... q`). Such a reader exits while
# the writer still writes; the writer dies of SIGPIPE (status 141), pipefail makes that the pipeline's status,
# and `set -e` ends the script without a word. Read every line instead: `sed -n 1p`, `grep -c ... >/dev/null`
# (GNU grep quits at the first match when its output is /dev/null, -c makes it count them all), awk with a
# `found` flag.
# Usage: pipefail_readers.sh REPO_ROOT  (exit 1 and the offending lines when any is found)
set -u
root="${1:?usage: pipefail_readers.sh REPO_ROOT}"
cd "$root" || exit 2
bad=0
files=()
while IFS= read -r f; do files+=("$f"); done < <(grep -rl --include='*.sh' -e 'pipefail' scripts tests .ci 2>/dev/null; echo .ci/run)
early='\|[[:space:]]*(head\b|grep[[:space:]]+(-[a-zA-Z]*[qm]|--quiet|--max-count)|awk[^|]*\bexit\b[^|]*\}|sed[[:space:]]+(-[a-z]+[[:space:]]+)?.[^|]*[0-9/][[:space:]]*q\b)'
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  grep -q pipefail "$f" || continue
  # awk 'BEGIN { exit ... }' reads no input; it is not a reader.
  hits="$(grep -nE "$early" "$f" | grep -vE "awk[^|]*'BEGIN[[:space:]]*\{[^}]*exit" | grep -vE '^[0-9]+:[[:space:]]*#' || true)"
  if [ -n "$hits" ]; then
    bad=1
    while IFS= read -r h; do echo "$f:$h"; done <<<"$hits"
  fi
done
if [ "$bad" -ne 0 ]; then
  echo "FAIL: pipelines above end in a reader that can exit before its writer (SIGPIPE under pipefail)" >&2
  exit 1
fi
echo "ok   ${#files[@]} pipefail scripts: no early-exit reader after a writer"
