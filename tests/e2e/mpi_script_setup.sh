# Sourced first by the e2e scripts that drive the CLI under mpiexec (arguments: CLEAVE MPIEXEC [FLAGS...]; a script
# run as CLEAVE SOURCE_DIR MPIEXEC [FLAGS...] reads SOURCE_DIR first and passes the rest, cli_plan.sh): sets
# cleave and the mpiexec array from them, makes a scratch directory $work and enters it.
# Invariant: $work is removed on exit, whatever the script's outcome (a script that traps EXIT itself must remove it).
set -u
cleave=$1; shift
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
