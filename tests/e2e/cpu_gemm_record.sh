#!/usr/bin/env bash
# Which library runs the CPU GEMMs, per operand dtype, as `cleave version`, the run log and run.json say it (issue 39):
#  - device.blas auto: the run's one `gemm:` log line and run.json's cpu_gemm.description equal what `cleave version`
#    says (the same decision, kernels/ops/cpu_blas.hpp, on the same machine; which library that is, is not asserted);
#  - run.json's fields (device_blas, f32, bf16, bf16_kernels) are the words of the description;
#  - a key that forces a library (openblas; blis and onednn where this build has them) is what both dtypes record,
#    and changes the line; oneDNN named by the key uses its bf16 kernels exactly when auto's oneDNN does.
# Usage: cpu_gemm_record.sh CLEAVE
set -u
cleave=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }

"$cleave" version > version.txt 2>&1 || { cat version.txt; fail "cleave version"; }
cat version.txt
version_gemm=$(sed -n 's/^gemm: \(.*\) | device\.blas in this build: .*$/\1/p' version.txt)
built=$(sed -n 's/^gemm: .* | device\.blas in this build: //p' version.txt)
[ -n "$version_gemm" ] || fail "cleave version has no 'gemm: ... | device.blas in this build: ...' line"
case "$version_gemm" in
  *" (device.blas auto): "*) ;;
  *) fail "cleave version's gemm line is not for device.blas auto: $version_gemm" ;;
esac

tiny=(--set model.d_model=32 --set model.n_layers=2 --set model.seq_len=16 --set batch.global_batch_size=4
      --set batch.micro_batch_size=4 --set train.eval_batches=0 --set train.report=false --set train.steps=1)

# field RUN_JSON KEY: run.json's cpu_gemm.KEY (booleans as true/false).
field() {
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))["cpu_gemm"][sys.argv[2]]
print(str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"
}

# train NAME [ARGS...]: one step; its log line and run.json agree, fields and words agree. Sets f32, bf16,
# kernels, blas and recorded for the caller.
train() {
  local name=$1
  shift
  "$cleave" train "${tiny[@]}" --set train.out_dir="$name" "$@" > "$name.log" 2>&1 \
    || { cat "$name.log"; fail "train $name"; }
  [ "$(grep -c '^gemm: ' "$name.log")" = 1 ] || { cat "$name.log"; fail "$name: the gemm line is not said once"; }
  local logged
  logged=$(sed -n 's/^gemm: //p' "$name.log")
  recorded=$(field "$name/run.json" description) || fail "$name: run.json has no cpu_gemm"
  [ "$logged" = "$recorded" ] || fail "$name: the log says '$logged', run.json '$recorded'"
  f32=$(field "$name/run.json" f32)
  bf16=$(field "$name/run.json" bf16)
  kernels=$(field "$name/run.json" bf16_kernels)
  blas=$(field "$name/run.json" device_blas)
  local how="widened to f32"
  [ "$kernels" = true ] && how="on bf16 kernels"
  case "$recorded" in
    "f32 $f32, bf16 $bf16 $how (device.blas $blas): "?*) ;;
    *) fail "$name: run.json's fields (f32 $f32, bf16 $bf16, bf16_kernels $kernels, device_blas $blas) are not " \
            "its description '$recorded'" ;;
  esac
  echo "ok   $name: $recorded"
}

train auto
[ "$blas" = auto ] || fail "auto: device_blas is '$blas'"
[ "$recorded" = "$version_gemm" ] || fail "auto: run.json says '$recorded', cleave version '$version_gemm'"
auto_line=$recorded
auto_kernels=$kernels

for library in openblas blis onednn; do
  case ", $built," in
    *", $library,"*) ;;
    *) echo "skip $library: not built into this cleave ($built)"; continue ;;
  esac
  train "$library" --set device.blas="$library"
  [ "$blas" = "$library" ] && [ "$f32" = "$library" ] && [ "$bf16" = "$library" ] \
    || fail "$library: device.blas $library recorded device_blas $blas, f32 $f32, bf16 $bf16"
  [ "$recorded" != "$auto_line" ] || fail "$library: the key did not change the line ('$recorded')"
  if [ "$library" = onednn ]; then
    [ "$kernels" = "$auto_kernels" ] || fail "onednn: bf16_kernels $kernels, auto's oneDNN $auto_kernels"
  else
    [ "$kernels" = false ] || fail "$library: bf16_kernels $kernels (only oneDNN has bf16 kernels)"
  fi
done
echo "PASS"
