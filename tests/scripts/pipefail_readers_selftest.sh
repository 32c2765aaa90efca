#!/usr/bin/env bash
# Self-test of tests/scripts/pipefail_readers.sh: each snippet below is written to a file of its own and checked with
# `pipefail_readers.sh --check`; a `bad` snippet (a pipeline under pipefail that ends in a reader able to exit before
# its writer) must be reported, a `good` one must not. Covers what the first version of the lint missed: a reader
# on the line after a trailing `|`, a multi-line awk program, grep's early options after another option, `| read`,
# sed's q inside a block, a generated script in a heredoc, and what must stay quiet (a BEGIN-only awk, `|| exit` after a pipeline, sed's s/q/,
# quotes inside double quotes, an apostrophe in a heredoc body, comments).
# Usage: pipefail_readers_selftest.sh REPO_ROOT
# lint: pipefail-readers fixtures
set -u
root="${1:?usage: pipefail_readers_selftest.sh REPO_ROOT}"
lint="$root/tests/scripts/pipefail_readers.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fails=0 n=0

# check KIND SNIPPET: KIND bad (must be reported) or good (must not)
check() {
  local kind="$1" f rc=0
  n=$((n + 1))
  f="$work/case$n.sh"
  printf 'set -euo pipefail\n%s\n' "$2" >"$f"
  bash "$lint" --check "$f" >"$work/out" 2>&1 || rc=$?
  if [[ "$kind" == bad && $rc -ne 1 ]] || [[ "$kind" == good && $rc -ne 0 ]]; then
    fails=$((fails + 1))
    echo "FAIL case $n ($kind, lint exit $rc):"
    sed 's/^/     | /' "$f"
    sed 's/^/     > /' "$work/out"
  fi
}

check bad "x=\"\$(ldconfig -p | awk '\$1 == \"a\" { print \$NF; exit }')\""
check bad "ldconfig -p | awk '
  /x86-64/ { print \$NF; exit }
'"
check bad 'ls / | head -n 1'
check bad 'ls / |
  head -1'
check bad 'if ls / | grep -E -q usr; then :; fi'
check bad 'ls / | grep -l usr'
check bad "ls / | sed -n '/usr/{p;q}'"
check bad 'ls / | sed 1q'
check bad 'ls / | read -r first'
check bad 'ls / \
  | grep --max-count=1 usr'
check bad 'ls / | grep -m1 usr'
check bad "ls / | awk -F: -v x=1 '{ if (\$1 == x || \$2) exit 0 }'"
check bad "cat >fake.sh <<EOF
ls / | head -n 1
EOF"

check good "awk 'BEGIN { exit 1 }'"
check good "ls / | awk 'BEGIN { n = 0 } { n++ } END { print n }'"
check good "ls / | sed 's/q/x/'"
check good 'ls / | sed -n 1p'
check good 'ls / | grep -c usr >/dev/null'
check good 'grep -m1 root /etc/passwd | cut -c1-10'
check good '# ls / | head -n 1'
check good "echo \"don't\" | tr a b
ls / | sed -n 1p"
check good "ls / | awk '!found && /usr/ { print; found = 1 }'"
check good "ls / | awk '{ print }' || exit 1"
check good "cat <<'EOF'
it's a heredoc body: its lines are checked one by one
EOF
ls / | sed -n 1p"
check good 'while read -r x; do :; done < <(ls /)'
check good 'ls / | while read -r x; do echo "$x"; done'
check good "ls / | grep -o 'u' | tail -n 1"

if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails of $n cases"
  exit 1
fi
echo "ok   $n cases: every early-exit reader reported, no correct pipeline reported"
