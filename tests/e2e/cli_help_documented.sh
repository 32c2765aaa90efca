#!/usr/bin/env bash
# Every option a command's --help lists is documented: for each command of `cleave --help` (and the forms with
# their own help: `simulate --config`, `profile --gemm`), each `--flag` its help names appears on a page of docs/
# that also names the command (`cleave CMD`, `` `CMD` `` or `CMD --`). The other direction (every option a page
# shows is one the help lists) is docs_commands.sh's; together a flag added to the CLI without the docs, or
# removed from it with the docs left, fails. Runs no training: seconds.
# Usage: cli_help_documented.sh CLEAVE SOURCE_DIR
set -u
cleave=$1; src=$2
fail() { echo "FAIL $*"; exit 1; }
pages=("$src"/docs/*.md)
commands=$("$cleave" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[ "$(wc -w <<<"$commands")" -ge 10 ] || fail "cleave --help lists too few commands: $commands"

missing=() checked=0
check() {  # NAME HELP-WORDS...: the options of `cleave HELP-WORDS --help`, each on a page naming NAME
  local name=$1; shift
  local help flag page found
  help=$("$cleave" "$@" --help 2>&1) || fail "cleave $* --help exited non-zero"
  # a flag is --name not followed by '-' (so "--peak-tflops-*" in prose is not a flag "--peak-tflops")
  for flag in $(grep -oE '(^|[ [(,|])--[a-z][a-z0-9-]*[a-z0-9]([^a-z0-9*-]|$)' <<<"$help" |
                sed -E 's/^[ [(,|]//; s/[^a-z0-9]$//' | sort -u); do
    [ "$flag" = --help ] && continue
    checked=$((checked + 1)) found=0
    for page in "${pages[@]}"; do
      grep -qE -- "(^|[^a-z0-9-])$flag([^a-z0-9-]|\$)" "$page" &&
        grep -qE "(cleave $name|\`$name\`|$name --)" "$page" && { found=1; break; }
    done
    [ $found = 1 ] || missing+=("cleave $* --help lists $flag, which no page of docs/ naming '$name' shows")
  done
}
for command in $commands; do check "$command" "$command"; done
check simulate simulate --config "$src/examples/gpt_fortunes.json"
check profile profile --gemm
[ "$checked" -ge 100 ] || fail "only $checked options found in the commands' --help"
[ ${#missing[@]} -eq 0 ] || { printf '  %s\n' "${missing[@]}"; fail "${#missing[@]} options undocumented"; }
echo "PASS: the $checked options of the commands' --help are on the pages of docs/"
