#!/usr/bin/env bash
# Self-test of benchmarks/kernels/tokens_per_s_ab.sh: two fake `cleave` binaries that report the same speed except
# that whichever runs first in a round is twice as fast (a machine under load favouring the first process: the bias
# the script must cancel). The script alternates the order per round, so over an even number of rounds each binary
# runs first as often as second and after / before of the medians is 1.000; run before-first every round (as it
# once did), the first binary would read 2x faster. Also: each round names its order, and the medians are reported
# per binary over both orders and per order.
# Usage: tokens_per_s_ab_selftest.sh REPO_ROOT
set -u
root="${1:?usage: tokens_per_s_ab_selftest.sh REPO_ROOT}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL $*"; exit 1; }

# fake NAME: a `cleave train` that writes metrics.jsonl into its --set train.out_dir; odd calls (first in a round)
# step in 10 ms, even calls in 20 ms, 1000 tokens a step; the call count is shared by both fakes.
fake() {
  cat > "$work/$1" <<'FAKE'
#!/usr/bin/env bash
dir= steps=
for a in "$@"; do
  case $a in train.out_dir=*) dir=${a#train.out_dir=} ;; train.steps=*) steps=${a#train.steps=} ;; esac
done
n=$(( $(cat "$COUNTER" 2>/dev/null || echo 0) + 1 )); echo $n > "$COUNTER"
ms=$(( n % 2 == 1 ? 10 : 20 ))
mkdir -p "$dir"
for ((s = 1; s <= steps; ++s)); do
  echo "{\"step\": $s, \"step_ms\": $ms, \"tokens_per_s\": $((1000000 / ms))}"
done > "$dir/metrics.jsonl"
FAKE
  chmod +x "$work/$1"
}
fake before && fake after
export COUNTER="$work/count"
out=$(bash "$root/benchmarks/kernels/tokens_per_s_ab.sh" "$work/before" "$work/after" small fp32 5 4 1 2>&1) \
  || { echo "$out"; fail "the script failed"; }
echo "$out"
grep -q '^round 1 before first ' <<< "$out" && grep -q '^round 2 after first ' <<< "$out" \
  && grep -q '^round 3 before first ' <<< "$out" || fail "rounds do not alternate the order"
grep -q '^median before 75000 after 75000 after/before 1\.000 ' <<< "$out" \
  || fail "the medians over both orders are not equal for two binaries of the same speed"
grep -q '^  before first: before 100000 after 50000' <<< "$out" && grep -q '^  after first: before 50000 after 100000' <<< "$out" \
  || fail "the medians per order"
[ "$(cat "$COUNTER")" = 8 ] || fail "expected 8 runs (4 rounds of 2), got $(cat "$COUNTER")"
echo "ok   tokens_per_s_ab.sh alternates the order per round and reports medians per binary over both orders"
