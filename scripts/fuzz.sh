#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang + ASan + UBSan in their own build directory and
# runs each one on its seed corpus (docs/testing.md, "Fuzzing"). Every input must parse or yield one cleave::Error
# line; a crash, a sanitizer report, an allocation over the limit or a hang fails the run, and libFuzzer
# leaves the input as crash-*/oom-*/timeout-* in the work directory.
#
#   scripts/fuzz.sh [SECONDS]           each target for SECONDS (default 60), corpus grown in the work dir
#   scripts/fuzz.sh -runs=N             each target for N inputs (the long run: -runs=1000000)
#   scripts/fuzz.sh --smoke             what ctest runs (label fuzz): -O0 build, 3 s per target, exit 77
#                                       (ctest: skipped) without clang / libFuzzer
#   scripts/fuzz.sh --regress           only replays the committed corpora (crash inputs included), no fuzzing
# Options (before the mode): --build-dir DIR (default build-fuzz), --work-dir DIR (default DIR/work),
#   --targets "a b" (default: every tests/fuzz/*_fuzz.cpp), --jobs N (build parallelism, default nproc).
# Prints one line per target: inputs executed, seconds, exec/s, corpus size, result.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
work=""
targets=""
jobs=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --work-dir) work=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) break ;;
  esac
done
mode=${1:-60}
skip=0
opt=-O1
case $mode in
  --smoke) skip=77; limit=(-max_total_time=3); opt=-O0 ;;
  --regress) limit=(-runs=0) ;;
  -runs=*) limit=("$mode") ;;
  *[!0-9]*|"") echo "usage: scripts/fuzz.sh [--build-dir D] [--work-dir D] [--targets 'a b'] [SECONDS | -runs=N | --smoke | --regress]" >&2; exit 2 ;;
  *) limit=(-max_total_time="$mode") ;;
esac
build=$(mkdir -p "$build" && cd "$build" && pwd)
work=${work:-$build/work}
mkdir -p "$work" && work=$(cd "$work" && pwd)

# clang with libFuzzer (Debian: clang + libclang-rt-14-dev). Without them the smoke run skips (ctest SKIP).
cxx=${CLEAVE_FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++ clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$(command -v "$c"); break; fi
  done
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if [ -z "$cxx" ]; then
  echo "fuzz: SKIP: clang++ not found (install clang and libclang-rt-14-dev: scripts/install-deps.sh)"
  exit $((skip ? skip : 1))
fi
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: SKIP: $cxx cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev): $(head -n 1 "$probe/err")"
  exit $((skip ? skip : 1))
fi

start=$(date +%s)
if [ ! -f "$build/CMakeCache.txt" ] || ! grep -q "^CLEAVE_FUZZ_OPT:STRING=$opt\$" "$build/CMakeCache.txt"; then
  cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCLEAVE_FUZZ_OPT="$opt" \
    >"$probe/configure.log" 2>&1 || { cat "$probe/configure.log"; echo "fuzz: configure failed"; exit 1; }
fi
cmake --build "$build" -j"$jobs" >"$probe/build.log" 2>&1 || { tail -n 40 "$probe/build.log"; echo "fuzz: build failed"; exit 1; }
echo "fuzz: built in $(( $(date +%s) - start )) s ($build)"

if [ -z "$targets" ]; then
  targets=$(cd "$root/tests/fuzz" && ls *_fuzz.cpp | sed 's/\.cpp$//')
fi
mkdir -p "$work"
# 512 MiB: the inputs are at most a few KiB, so a larger allocation is sized by a number nobody checked.
common=(-malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=10 -max_len=8192 -print_final_stats=1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for t in $targets; do
  name=${t%_fuzz}
  seeds=$root/tests/fuzz/corpus/$name
  grown=$work/corpus/$name
  mkdir -p "$grown" "$work/artifacts/$name"
  dict=()
  [ -f "$root/tests/fuzz/dicts/$name.dict" ] && dict=(-dict="$root/tests/fuzz/dicts/$name.dict")
  log=$work/$name.log
  t0=$(date +%s.%N)
  if [ "$mode" = --regress ]; then
    (cd "$work/artifacts/$name" && "$build/$t" "${common[@]}" "${dict[@]}" "${limit[@]}" "$seeds") >"$log" 2>&1
  else
    (cd "$work/artifacts/$name" && "$build/$t" "${common[@]}" "${dict[@]}" "${limit[@]}" "$grown" "$seeds") >"$log" 2>&1
  fi
  status=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
  corpus=$(find "$grown" -type f | wc -l)
  if [ $status -eq 0 ]; then
    printf 'fuzz: %-18s ok    %9s inputs  %7s s  %6s exec/s  corpus %s\n' "$name" "${runs:-?}" "$secs" "${rate:-?}" "$corpus"
  else
    failed=1
    printf 'fuzz: %-18s FAIL  (exit %s after %s s; log %s)\n' "$name" "$status" "$secs" "$log"
    grep -E 'contract violated|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|SUMMARY|Test unit written' "$log" | sed -n 1,8p
    ls "$work/artifacts/$name" 2>/dev/null | sed 's/^/    artifact: /'
  fi
done
echo "fuzz: total $(( $(date +%s) - start )) s"
exit $failed
