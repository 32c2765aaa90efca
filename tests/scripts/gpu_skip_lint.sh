#!/usr/bin/env bash
# Lint for the GPU check's whole-binary stages: scripts/gpu-check.sh fails a stage whose gtest run skips a test
# while a GPU is visible (judge_gtest: a gpu test skips only when it cannot use a device). Its kernels and
# ops-parity stages run gpu_cuda_test and gpu_ops_test whole on the lent machine, which has one GPU, so a
# GTEST_SKIP in their test sources may appear only in the fixtures' no-device check (tests/gpu/cuda/
# cuda_test_util.hpp, tests/gpu/ops/parity_util.hpp, not scanned). A test that would need a second GPU tests what
# one GPU allows instead (tests/gpu/cuda/device_test.cpp). The other binaries' one-rank stages leave their
# multi-rank tests out by name (scripts/gpu-check-stages.sh) and are not linted here.
# Usage: gpu_skip_lint.sh REPO_ROOT  (exit 1 naming each offending line)
set -u
root="${1:?usage: gpu_skip_lint.sh REPO_ROOT}"
cd "$root" || exit 2
hits="$(grep -n 'GTEST_SKIP' tests/gpu/cuda/*.cpp tests/gpu/ops/*.cpp 2>/dev/null || true)"
if [[ -n "$hits" ]]; then
  echo "$hits"
  echo "FAIL: a test of gpu_cuda_test or gpu_ops_test skips outside the no-device fixture; on the one-GPU machine" \
       "gpu-check.sh would fail its stage although every test passed (test what one GPU allows instead)" >&2
  exit 1
fi
n="$(ls tests/gpu/cuda/*.cpp tests/gpu/ops/*.cpp | wc -l)"
echo "ok   $n gpu_cuda_test / gpu_ops_test sources: no GTEST_SKIP outside the no-device fixtures"
