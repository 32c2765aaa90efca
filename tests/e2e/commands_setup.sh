# Sourced by readme_commands.sh and docs_commands.sh (arguments: CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]): sets
# cleave, src and the mpiexec array from them, a scratch directory $work (removed on exit) with $work/bin/cleave
# linked to the binary, fail(), and skips (exit 77) where the fortunes file the examples train on is missing.
set -u
cleave=$(realpath "$1"); src=$(realpath "$2"); shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL $*"; exit 1; }
data=/usr/share/games/fortunes/cookie  # what examples/gpt_fortunes.json trains on
[ -f "$data" ] || { echo "SKIP: $data missing (scripts/install-deps.sh installs the fortunes package)"; exit 77; }
mkdir -p "$work/bin"
ln -s "$cleave" "$work/bin/cleave"
