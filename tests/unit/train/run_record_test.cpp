// run.json's cpu_gemm (engine/train/run_record.hpp cpu_gemm_record): what cpu_blas.hpp's rule decides for the
// config's device.blas, per operand dtype, on this process's facts, named as device.blas names them; a key that
// forces a library is followed whatever the CPU; a cuda run records none. The expectations are the decision
// function's answers, never a property of the CPU running the test.
#include "engine/train/run_record.hpp"

#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/gemm_backend.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train::run_record_test {
namespace {

config::RunConfig cpu_run(ops::CpuBlas blas) {
  config::RunConfig c;
  c.device.type = DeviceType::kCpu;
  c.device.blas = blas;
  return c;
}

// The decision on this process's facts (the libraries built, oneDNN's own answer about bf16 instructions).
ops::CpuGemmChoices decided(ops::CpuBlas blas) {
  return ops::choose_cpu_gemms(blas, ops::build_cpu_blas_facts(kernels::cpu::onednn_bf16_instructions()));
}

// The kernels' library of a device.blas name ("openblas", "blis", "onednn").
kernels::cpu::GemmBackend backend_named(const std::string& name) {
  using kernels::cpu::GemmBackend;
  for (const GemmBackend b : {GemmBackend::kOpenBlas, GemmBackend::kBlis, GemmBackend::kOneDnn}) {
    if (name == kernels::cpu::gemm_backend_name(b)) return b;
  }
  ADD_FAILURE() << "no GEMM library is named " << name;
  return GemmBackend::kOpenBlas;
}

TEST(RunRecordCpuGemm, RecordsTheDecisionPerDtypeForEveryBuiltLibrary) {
  for (const ops::CpuBlas blas : {ops::CpuBlas::kAuto, ops::CpuBlas::kOpenBlas, ops::CpuBlas::kBlis,
                                  ops::CpuBlas::kOneDnn}) {
    if (!ops::cpu_blas_built(blas)) continue;
    const std::string name(enum_name(blas));
    const report::CpuGemmRecord r = cpu_gemm_record(cpu_run(blas));
    const ops::CpuGemmChoices want = decided(blas);
    EXPECT_EQ(r.device_blas, name);
    EXPECT_EQ(r.f32, enum_name(want.f32.library)) << name;
    EXPECT_EQ(r.bf16, enum_name(want.bf16.library)) << name;
    EXPECT_EQ(r.bf16_kernels, want.bf16.bf16_kernels) << name;
    // The description is the decision's words, then the library's own line (version, what it picked).
    EXPECT_EQ(r.description.rfind(ops::describe_cpu_gemms(want) + ": ", 0), 0u) << r.description;
    EXPECT_NE(r.description.find(kernels::cpu::gemm_backend_description(backend_named(r.f32))), std::string::npos)
        << r.description;
    EXPECT_EQ(r.description, ops::cpu_gemm_description(blas));
    // A library named by the key is the one both dtypes run on.
    if (blas != ops::CpuBlas::kAuto) {
      EXPECT_EQ(r.f32, name);
      EXPECT_EQ(r.bf16, name);
    }
  }
}

TEST(RunRecordCpuGemm, TheKeyChangesTheRecord) {
  const report::CpuGemmRecord openblas = cpu_gemm_record(cpu_run(ops::CpuBlas::kOpenBlas));
  EXPECT_EQ(openblas.f32, "openblas");
  EXPECT_EQ(openblas.bf16, "openblas");
  EXPECT_FALSE(openblas.bf16_kernels);  // only oneDNN has bf16 kernels
  EXPECT_NE(openblas.description.find("bf16 openblas widened to f32 (device.blas openblas)"), std::string::npos)
      << openblas.description;
  const report::CpuGemmRecord automatic = cpu_gemm_record(cpu_run(ops::CpuBlas::kAuto));
  EXPECT_EQ(automatic.device_blas, "auto");
  // auto is oneDNN wherever the build has it (the rule, not the CPU), else OpenBLAS: then only the key's name differs.
  EXPECT_EQ(automatic.f32, ops::cpu_blas_built(ops::CpuBlas::kOneDnn) ? "onednn" : "openblas");
  EXPECT_NE(automatic.description, openblas.description);
}

TEST(RunRecordCpuGemm, ACudaRunRecordsNone) {
  config::RunConfig c = cpu_run(ops::CpuBlas::kOpenBlas);
  c.device.type = DeviceType::kCuda;
  EXPECT_EQ(cpu_gemm_record(c), report::CpuGemmRecord{});
}

}  // namespace
}  // namespace cleave::train::run_record_test
