// Optimizer interface and the two optimizers (AdamW, SGD with momentum) over a rank's Params.
//
// Invariants:
//  - Each Param is updated once per step even when a model lists it twice (a tied LM head returns the
//    embedding table again): the constructor keeps the first occurrence of each Param object.
//  - Optimizer state (AdamW m and v, SGD momentum buffers) is allocated once, at construction, zeroed, in
//    MemoryCategory::kOptimizerState; step() allocates nothing.
//  - step(lr) reads each grad and leaves it as it was; zero_grad() clears grads for the next accumulation.
//  - Params with weight_decay == false (biases, norms, position tables) get no decay.
// The math is the op seam's adamw_update_many / sgd_update_many (kernels/ops/ops.hpp; PyTorch semantics; all
// parameters in one call, bit for bit the per-parameter updates), on whatever device the context names. Parameters, grads and state are f32; the ZeRO-1 sharded wrapper is separate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/context.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"

namespace cleave::optim {

using ParamList = std::vector<std::shared_ptr<layers::Param>>;

// `params` without repeated Param objects, first occurrence order kept.
ParamList unique_params(const ParamList& params);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from its current grad with learning rate `lr`. Synchronous.
  void step(double lr);
  // grad := 0 for every parameter.
  void zero_grad();
  // Bytes of optimizer state held (what the allocator counts under kOptimizerState for this optimizer).
  std::int64_t state_bytes() const;
  // Updates done so far (the next step() is update number steps_done() + 1).
  std::int64_t steps_done() const { return steps_; }
  // Restores the update count from a checkpoint (the next step() is update number n + 1).
  void set_steps_done(std::int64_t n) { steps_ = n; }
  // Runs the updates in the run's op context: its device, stream (docs/cuda.md, "The trainer on `cuda`": a GPU
  // update must be enqueued on the run's stream, after the kernels that wrote the gradients), handles and slot
  // table. The state keeps the allocator it was made on. CLEAVE_CHECK: the parameters live on run.device.
  void run_on(const ops::Context& run);
  const ParamList& params() const { return params_; }
  // State tensors named "<param name>.<state name>" (exp_avg, exp_avg_sq, momentum_buffer), for
  // checkpoints and tests.
  std::vector<std::pair<std::string, Tensor>> state() const;

 protected:
  explicit Optimizer(const ParamList& params);
  // Adds one state tensor per parameter, zeroed, named `name`.
  void add_state(const std::string& name, Allocator& allocator);
  ops::Context ctx_;  // where the updates run: the parameters' device, the state's allocator, the run's stream (run_on)
  // Updates every parameter for update number `step` (1-based); state_[k][i] is params_[i]'s k-th state tensor.
  virtual void update(float lr, std::int64_t step) = 0;

  ParamList params_;
  std::vector<std::string> state_names_;
  std::vector<std::vector<Tensor>> state_;  // [state kind][param]

 private:
  std::int64_t steps_ = 0;
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled: p -= lr * wd * p
};

class AdamW final : public Optimizer {
 public:
  AdamW(const ParamList& params, const AdamWOptions& options, Allocator& allocator);

 private:
  void update(float lr, std::int64_t step) override;
  AdamWOptions options_;
  std::vector<ops::AdamWItem> items_;  // the call's list, rebuilt each step (a grad may be re-pointed between steps)
};

struct SgdOptions {
  double momentum = 0.0;  // 0: plain SGD, no buffer allocated
  double weight_decay = 0.0;  // coupled L2: g += wd * p
  bool nesterov = false;
};
// Throws Error unless momentum is in [0, 1) and nesterov has momentum > 0 (Sgd and ShardedSgd check alike).
void check_sgd_options(const SgdOptions& options);

class Sgd final : public Optimizer {
 public:
  Sgd(const ParamList& params, const SgdOptions& options, Allocator& allocator);

 private:
  void update(float lr, std::int64_t step) override;
  SgdOptions options_;
  std::vector<ops::SgdItem> items_;
};

}  // namespace cleave::optim
