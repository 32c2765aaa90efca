#!/usr/bin/env bash
# `cleave verify` through the CLI under mpiexec (engine/cli/verify.cpp, engine/train/verify.cpp):
#  - dp 2 against the single-rank reference passes: exit 0, PASS, the comm backend it used is printed;
#  - tp 2 with --param-tolerance 0 fails: exit 1 with the report ending in FAIL and a parameter difference
#    above 0 (tensor parallelism sums partial products, so parameters differ from one rank in the last bits);
#    an error exit would have no report, so the exit code alone cannot pass this case;
#  - a llama (grouped-query) at tp 2 x pp 2 against one rank passes (np 4);
#  - context parallelism: the tiny gpt at cp 2 (ring and all_to_all, np 2) and the llama at cp 2 x tp 2 (ring,
#    np 4) against one rank pass; so does the default gpt at cp 2 under AdamW, its attention key biases (gradient
#    zero in exact arithmetic) held to AdamW's drift bound and named in the report; in bf16 it passes within 3 x the
#    noise floor of two twin references (another CPU GEMM library, attention's sums reordered), which the report
#    names, and so do cp 2 ring and tp 2 at seeds 4 and 6 on that floor alone (x sqrt(2) at tp 2); a d_model 32 gpt at tp 2
#    in bf16 (1 and 6 SGD steps) passes within 3 x sqrt(2) of each tensor's precision-twin difference (the
#    reference in fp32), and fails without the twins;
#  - expert parallelism: a tiny moe at ep 2 (dp 2), at ep 2 × tp 2 on 4 ranks, and at ep 2 × tp 2 × pp 2 under zb_v
#    on 8 ranks (oversubscribed), against one rank passes, the layout line naming ep=2; ep 3 on
#    4 experts is refused with one error naming the key, before any step (nothing trained);
#  - the default --loss-tolerance follows device.precision (bf16: 2^-8 / sqrt(tokens per step), x sqrt((tp + 2) / 2)
#    at tp > 1: the default gpt at tp 2 in bf16 under SGD passes within it);
#  - a bad option value is refused before MPI starts.
# Usage: cli_verify.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/mpi_script_setup.sh" "$@"  # cleave, mpiexec, $work (entered, removed on exit)
failures=0
cat > tiny.json <<'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16},
  "batch": {"global_batch_size": 8, "micro_batch_size": 4},
  "optimizer": {"type": "sgd", "lr": 0.05},
  "data": {"type": "synthetic"}
}
JSON

fail() { echo "FAIL $1"; sed 's/^/    /' "$2"; failures=$((failures + 1)); }
# verify_passes NAME NP LAYOUT CONFIG [OPTIONS...]: `cleave verify CONFIG --steps 3 OPTIONS` on NP ranks exits 0
# with a report ending in PASS and a layout line holding LAYOUT (its output in NAME.log).
verify_passes() {
  local name=$1 np=$2 layout=$3 config=$4 status; shift 4
  "${mpiexec[@]}" -n "$np" "$cleave" verify "$config" --steps 3 "$@" > "$name.log" 2>&1
  status=$?
  if [ $status -ne 0 ] || ! grep -q ': PASS$' "$name.log" || ! grep -qF -- "$layout" "$name.log"; then
    fail "$name-passes: status $status" "$name.log"
  else
    echo "ok   $name-passes: $(grep -E ': PASS$' "$name.log")"
  fi
}

verify_passes dp2 2 'tp=1 pp=1 dp=2 (world 2)' tiny.json
grep -q 'comm backend mpi (auto: device.type is "cpu")' dp2.log || fail "dp2-names-its-comm-backend" dp2.log

"${mpiexec[@]}" -n 2 "$cleave" verify tiny.json --steps 3 --set parallel.tensor_model_parallel_size=2 \
    --param-tolerance 0 > tp2.log 2>&1
status=$?
summary=$(grep -E '^max loss difference .*max parameter difference .* \(tolerance 0\): FAIL$' tp2.log)
difference=$(sed -n 's/.*max parameter difference \([^ ]*\) (tolerance 0).*/\1/p' tp2.log)
if [ $status -ne 1 ] || [ -z "$summary" ] || ! awk -v d="$difference" 'BEGIN { exit !(d > 0) }'; then
  fail "tp2-exact-fails: status $status, parameter difference '$difference'" tp2.log
else
  echo "ok   tp2-exact-fails: $summary"
fi

cat > llama.json <<'JSON'
{
  "model": {"type": "llama", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
            "seq_len": 16},
  "batch": {"global_batch_size": 8, "micro_batch_size": 2},
  "optimizer": {"type": "sgd", "lr": 0.05},
  "data": {"type": "synthetic"}
}
JSON
verify_passes llama-tp2-pp2 4 'tp=2 pp=2 dp=1 (world 4)' llama.json --set parallel.tensor_model_parallel_size=2 \
    --set parallel.pipeline_model_parallel_size=2

for comm in ring all_to_all; do
  verify_passes cp2-$comm 2 'tp=1 cp=2 dp=1 pp=1 (world 2)' tiny.json --set parallel.context_parallel_size=2 \
      --set parallel.context_parallel_comm=$comm
done

# AdamW, the default optimizer, on the default gpt at cp 2 (ring): the attention key biases' gradient is zero in exact
# arithmetic, so AdamW turns their rounding noise into steps up to lr (the normalised difference of qkv.bias was
# 1.2e-3 after 3 steps, past 1e-3); verify holds those slices to AdamW's drift bound instead, names them, and
# compares every other element as before.
echo '{}' > default.json
verify_passes gpt-adamw-cp2 2 'tp=1 cp=2 dp=1 pp=1 (world 2)' default.json --set parallel.context_parallel_size=2
held=$(grep -cE '^blocks\.[01]\.attn\.qkv\.bias +\[64, 128\) max \|diff\| .*: within \(the attention key bias' \
       gpt-adamw-cp2.log)
if ! grep -q "^held to AdamW's bound instead" gpt-adamw-cp2.log || [ "$held" -ne 2 ]; then
  fail "gpt-adamw-cp2-names-the-key-biases: $held key-bias lines" gpt-adamw-cp2.log
else
  echo "ok   gpt-adamw-cp2-names-the-key-biases: $(grep -m1 'attn.qkv.bias .*within' gpt-adamw-cp2.log | cut -c1-90)"
fi

# bf16 under AdamW on the default gpt at cp 2: AdamW turns the bf16 roundings that cp's merge moves into parameter
# differences of several 1e-3 of a tensor's scale (6e-3 here), which a correct one-rank run with another GEMM library
# shows too; verify measures that floor with a twin reference and passes the layout within 3 x it, naming the twin.
# A build with one CPU GEMM library has no twin: the report then lacks the floor line, and this case is skipped.
"${mpiexec[@]}" -n 2 "$cleave" verify default.json --steps 3 --set parallel.context_parallel_size=2 \
    --set device.precision=bf16 > gpt-adamw-cp2-bf16.log 2>&1
status=$?
if grep -q '^max loss difference' gpt-adamw-cp2-bf16.log &&
   ! grep -q '^bf16 noise floor' gpt-adamw-cp2-bf16.log; then
  echo "skip gpt-adamw-cp2-bf16: this build has one CPU GEMM library, so no twin reference"
elif [ $status -ne 0 ] || ! grep -q "or the bf16 floor's .* of movement.*): PASS$" gpt-adamw-cp2-bf16.log ||
     ! grep -q '^bf16 noise floor: the reference run again with device.blas [a-z]* instead of [a-z]*' \
       gpt-adamw-cp2-bf16.log; then
  fail "gpt-adamw-cp2-bf16-passes-within-the-floor: status $status" gpt-adamw-cp2-bf16.log
else
  echo "ok   gpt-adamw-cp2-bf16-passes-within-the-floor: $(grep -E ': PASS$' gpt-adamw-cp2-bf16.log)"
fi

# The same at other seeds, and at tp 2: seed 6 failed cp 2 ring when the floor was one twin's largest (0.381 of
# movement against 3 x 0.0689: the layout flipped the sign of a near-zero first AdamW update, the twin did not), seeds 4
# and 6 failed tp 2. The floor now covers one such flip (2 lr_1 / sum of lr) and the largest of three pairs of
# equivalent runs, at sqrt((tp + 2) / 2) x at tp > 1: each passes on the floor (benchmarks/verify/RESULTS-2026-11-30-b-verify-floor.md).
for run in "cp2-ring 4 parallel.context_parallel_size=2" "cp2-ring 6 parallel.context_parallel_size=2" \
           "tp2 4 parallel.tensor_model_parallel_size=2" "tp2 6 parallel.tensor_model_parallel_size=2"; do
  set -- $run
  name=gpt-adamw-$1-bf16-seed$2
  "${mpiexec[@]}" -n 2 "$cleave" verify default.json --steps 3 --set device.precision=bf16 --set train.seed=$2 \
      --set "$3" > $name.log 2>&1
  status=$?
  largest=$(sed -n "s/.*, \([0-9.e+-]*\), of its movement: the layout's largest is \([0-9.e+-]*\) .*/\2 \1/p" $name.log)
  if grep -q '^max loss difference' $name.log && ! grep -q '^bf16 noise floor' $name.log; then
    echo "skip $name: this build has one CPU GEMM library, so no twin references"
  elif [ $status -ne 0 ] || ! grep -q ': PASS$' $name.log || [ -z "$largest" ] ||
       ! awk -v l="${largest% *}" -v t="${largest#* }" 'BEGIN { exit !(l <= t) }'; then
    fail "$name-passes-on-the-floor: status $status, largest and tolerance '$largest'" $name.log
  else
    echo "ok   $name-passes-on-the-floor: largest ${largest% *} of movement, tolerance ${largest#* }"
  fi
done

# The default loss tolerance follows the precision: fp32 1e-5 (the cp2 ring run above), bf16 2^-8 / sqrt(tokens per
# step) (train::default_loss_tolerance): 8 x 16 tokens here, 3.45e-4; an explicit --loss-tolerance still wins.
"${mpiexec[@]}" -n 2 "$cleave" verify tiny.json --steps 3 --set parallel.context_parallel_size=2 \
    --set device.precision=bf16 > cp2_bf16.log 2>&1
status=$?
"${mpiexec[@]}" -n 2 "$cleave" verify tiny.json --steps 3 --set parallel.context_parallel_size=2 \
    --set device.precision=bf16 --loss-tolerance 0 > cp2_bf16_zero.log 2>&1
status_zero=$?
if [ $status -ne 0 ] || ! grep -q '(tolerance 0.000345), .*: PASS$' cp2_bf16.log ||
   ! grep -q 'max loss difference .*(tolerance 1e-05)' cp2-ring.log || [ $status_zero -ne 1 ] ||
   ! grep -q '(tolerance 0), .*: FAIL$' cp2_bf16_zero.log; then
  fail "bf16-loss-tolerance: status $status, explicit 0: $status_zero" cp2_bf16.log
else
  echo "ok   bf16-loss-tolerance: $(grep -E ': PASS$' cp2_bf16.log)"
fi
# Tensor parallelism rounds each row-parallel output's bf16 partials before their sum: the default loss tolerance is
# sqrt((tp + 2) / 2) times the above at tp > 1 (train::tp_rounding_factor). The default gpt (256 tokens a step:
# 2^-8 / 16 x sqrt(2) = 3.45e-4) at tp 2 in bf16 under SGD, 10 steps, passes within it.
"${mpiexec[@]}" -n 2 "$cleave" verify default.json --steps 10 --set parallel.tensor_model_parallel_size=2 \
    --set device.precision=bf16 --set optimizer.type=sgd > gpt-sgd-tp2-bf16.log 2>&1
status=$?
if [ $status -ne 0 ] || ! grep -q '^max loss difference .*(tolerance 0.000345), .*: PASS$' gpt-sgd-tp2-bf16.log; then
  fail "gpt-sgd-tp2-bf16-loss-tolerance: status $status" gpt-sgd-tp2-bf16.log
else
  echo "ok   gpt-sgd-tp2-bf16-loss-tolerance: $(grep -E ': PASS$' gpt-sgd-tp2-bf16.log)"
fi
# A d_model 32 gpt at tp 2 in bf16 under SGD with momentum (benchmarks/verify/RESULTS-2026-11-29-matrix.md's model):
# its zero-started biases sum many small bf16 values that cancel, so tp's extra roundings move them 6e-3 of their
# scale (1.3e-2 at step 1), past --param-tolerance, and the GEMM twin sums as the reference does (no floor). The
# precision twin (the reference in fp32) moves each such tensor as far: the layout passes within 3 x sqrt(2) of it,
# naming it; without the twins (--noise-multiple 0) the same layout fails on those biases.
cat > matrix_gpt.json <<'JSON'
{"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
 "batch": {"global_batch_size": 8, "micro_batch_size": 2},
 "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05},
 "data": {"type": "synthetic"}}
JSON
for steps in 1 6; do
  "${mpiexec[@]}" -n 2 "$cleave" verify matrix_gpt.json --steps $steps --set parallel.tensor_model_parallel_size=2 \
      --set device.precision=bf16 > tiny-tp2-bf16-$steps.log 2>&1
  status=$?
  "${mpiexec[@]}" -n 2 "$cleave" verify matrix_gpt.json --steps $steps --set parallel.tensor_model_parallel_size=2 \
      --set device.precision=bf16 --noise-multiple 0 > tiny-tp2-bf16-$steps-no-twin.log 2>&1
  status_none=$?
  if [ $status -ne 0 ] || ! grep -q 'or 4.24 x vs fp32): PASS$' tiny-tp2-bf16-$steps.log ||
     ! grep -q '^bf16 rounding per tensor: the reference run again with device.precision fp32 instead of bf16' \
       tiny-tp2-bf16-$steps.log || [ $status_none -ne 1 ] ||
     ! grep -q '(tolerance 0.001): FAIL$' tiny-tp2-bf16-$steps-no-twin.log; then
    fail "tiny-tp2-bf16-$steps-steps-passes-within-the-precision-twin: status $status, without: $status_none" \
      tiny-tp2-bf16-$steps.log
  else
    echo "ok   tiny-tp2-bf16-$steps-steps-passes-within-the-precision-twin: $(grep -E ': PASS$' tiny-tp2-bf16-$steps.log)"
  fi
done
verify_passes llama-cp2-tp2 4 'tp=2 cp=2 dp=1 pp=1 (world 4)' llama.json --set parallel.tensor_model_parallel_size=2 \
    --set parallel.context_parallel_size=2

cat > moe.json <<'JSON'
{
  "model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 8,
            "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2},
  "batch": {"global_batch_size": 4, "micro_batch_size": 1},
  "optimizer": {"type": "sgd", "lr": 0.05},
  "data": {"type": "synthetic"}
}
JSON
verify_passes moe-ep2 2 'tp=1 pp=1 dp=2 ep=2 (world 2)' moe.json --set parallel.expert_model_parallel_size=2
verify_passes moe-ep2-tp2 4 'tp=2 pp=1 dp=2 ep=2 (world 4)' moe.json --set parallel.expert_model_parallel_size=2 \
    --set parallel.tensor_model_parallel_size=2
verify_passes moe-ep2-tp2-pp2-zb_v 8 'tp=2 pp=2 dp=2 ep=2 (world 8), schedule zb_v' moe.json \
    --set parallel.expert_model_parallel_size=2 --set parallel.tensor_model_parallel_size=2 \
    --set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=zb_v
"${mpiexec[@]}" -n 2 "$cleave" verify moe.json --steps 3 --set parallel.expert_model_parallel_size=3 > ep3.log 2>&1
status=$?
if [ $status -eq 0 ] || ! grep -q 'parallel.expert_model_parallel_size: 3 does not divide model.n_experts 4' ep3.log ||
   grep -q ': PASS$' ep3.log; then
  fail "moe-ep3-refused: status $status" ep3.log
else
  echo "ok   moe-ep3-refused: $(grep -m1 'expert_model_parallel_size' ep3.log)"
fi

out=$("$cleave" verify tiny.json --param-tolerance fast 2>&1); status=$?
if [ $status -eq 0 ] || ! grep -q -- "--param-tolerance expects a non-negative number, got 'fast'" <<<"$out"; then
  echo "FAIL bad-tolerance: status $status: $out"; failures=$((failures + 1))
else
  echo "ok   bad-tolerance: $out"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
