// ZeRO-3's parameter store (parameter_shards.hpp): shards taken from the built values, per-block gathers with
// one block of prefetch, and whole values for the parts of a run that read them outside the step.
#include "engine/train/parameter_shards.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

// A stage's view of the store: block index -> the units that block reads.
class ParameterShards::StageResidency final : public pipeline::ParameterResidency {
 public:
  StageResidency(ParameterShards& owner, std::vector<std::vector<int>> units_of_block)
      : owner_(owner), units_of_block_(std::move(units_of_block)) {}

  void acquire(int block, int next) override {
    static const std::vector<int> none;
    owner_.acquire(units(block), next >= 0 ? units(next) : none);
  }
  void release(int block) override { owner_.release(units(block)); }

 private:
  const std::vector<int>& units(int block) const {
    CLEAVE_ASSERT(block >= 0 && static_cast<std::size_t>(block) < units_of_block_.size(),
                  "ZeRO-3: block {} of a stage of {} blocks", block, units_of_block_.size());
    return units_of_block_[static_cast<std::size_t>(block)];
  }

  ParameterShards& owner_;
  std::vector<std::vector<int>> units_of_block_;
};

ParameterShards::ParameterShards(std::vector<ParameterUnit> units, const std::vector<pipeline::StageModule*>& stages,
                                 comm::Communicator& dp, const ops::Context& context)
    : units_(std::move(units)), dp_(dp), context_(context), stages_(stages) {
  bf16_ = context.compute_dtype() == DType::kBF16;
  Allocator& allocator = *context.allocator;
  std::unordered_map<const layers::Param*, int> unit_of;
  state_.resize(units_.size());
  for (int u = 0; u < num_units(); ++u) {
    const ParameterUnit& unit = units_[static_cast<std::size_t>(u)];
    const auto& bucket = unit.bucketer->bucket(unit.bucket);
    CLEAVE_ASSERT(unit.bucketer->owns_shards(), "ZeRO-3: unit {} is not reduce-scattered into shards", u);
    CLEAVE_ASSERT(static_cast<int>(unit.params.size()) == bucket.end_grad - bucket.first_grad,
                  "ZeRO-3: unit {} lists {} parameters, its bucket {}", u, unit.params.size(),
                  bucket.end_grad - bucket.first_grad);
    const std::int64_t begin = shard_begin(u);
    const std::int64_t length = unit_numel(u) / group(u).size();
    UnitState& st = state_[static_cast<std::size_t>(u)];
    st.master = Tensor::empty({length}, DType::kF32, MemoryCategory::kParameters, allocator);
    ops::fill(context_, st.master, 0.0f);  // the padding between parameters stays zero (device-safe)
    for (std::size_t k = 0; k < unit.params.size(); ++k) {
      layers::Param& p = *unit.params[k];
      const auto& slot = unit.bucketer->slot(bucket.first_grad + static_cast<int>(k));
      CLEAVE_CHECK(p.value.defined() && p.value.dtype() == DType::kF32 && p.value.numel() == slot.numel,
                   "optimizer.zero_stage 3: parameter {} needs an f32 value of {} elements to shard", p.name,
                   slot.numel);
      const std::int64_t lo = std::max(begin, slot.offset);
      const std::int64_t hi = std::min(begin + length, slot.offset + slot.numel);
      if (lo < hi) {
        ops::copy(context_, p.value.view({slot.numel}).slice(lo - slot.offset, hi - slot.offset),
                  st.master.slice(lo - begin, hi - begin));
      }
      unit_of[&p] = u;
    }
    if (bf16_) {
      st.working = Tensor::empty({length}, DType::kBF16, MemoryCategory::kParameters, allocator);
      ops::copy(context_, st.master, st.working);
    }
  }
  for (const ParameterUnit& unit : units_) {
    for (const auto& p : unit.params) {
      p->value = Tensor();
      p->working = Tensor();
    }
  }
  for (pipeline::StageModule* stage : stages_) {
    std::vector<std::vector<int>> units_of_block(stage->num_blocks());
    for (std::size_t i = 0; i < stage->num_blocks(); ++i) {
      for (const auto& p : stage->block_params(i)) {
        const auto it = unit_of.find(p.get());
        CLEAVE_ASSERT(it != unit_of.end(), "ZeRO-3: parameter {} of block {} is in no unit", p->name, i);
        auto& list = units_of_block[i];
        if (std::find(list.begin(), list.end(), it->second) == list.end()) list.push_back(it->second);
      }
    }
    residencies_.push_back(std::make_unique<StageResidency>(*this, std::move(units_of_block)));
    stage->set_parameter_residency(residencies_.back().get());
  }
}

ParameterShards::~ParameterShards() {
  for (pipeline::StageModule* stage : stages_) stage->set_parameter_residency(nullptr);
  for (UnitState& st : state_) st.work.reset();  // a Work's destructor waits for it
}

std::int64_t ParameterShards::unit_numel(int u) const {
  const ParameterUnit& unit = units_.at(static_cast<std::size_t>(u));
  return unit.bucketer->bucket(unit.bucket).numel;
}

comm::Communicator& ParameterShards::group(int u) const {
  comm::Communicator* g = units_.at(static_cast<std::size_t>(u)).group;
  return g != nullptr ? *g : dp_;
}

std::int64_t ParameterShards::shard_begin(int u) const {
  const ParameterUnit& unit = units_.at(static_cast<std::size_t>(u));
  return unit.bucketer->shard_begin(unit.bucket);
}

void ParameterShards::gather(int u, DType dtype) {
  UnitState& st = state_[static_cast<std::size_t>(u)];
  if (st.full.defined()) {
    CLEAVE_ASSERT(st.full.dtype() == dtype, "ZeRO-3: unit {} is gathered as {}, wanted {}", u,
                  dtype_name(st.full.dtype()), dtype_name(dtype));
    return;
  }
  st.full = Tensor::empty({unit_numel(u)}, dtype, MemoryCategory::kParameters, *context_.allocator);
  const Tensor& source = dtype == DType::kBF16 ? st.working : st.master;
  st.work = group(u).all_gather(source, st.full, *context_.stream);
  ++gathers_;
  const ParameterUnit& unit = units_[static_cast<std::size_t>(u)];
  const int first = unit.bucketer->bucket(unit.bucket).first_grad;
  for (std::size_t k = 0; k < unit.params.size(); ++k) {
    const int index = first + static_cast<int>(k);
    const auto& slot = unit.bucketer->slot(index);
    Tensor view = st.full.slice(slot.offset, slot.offset + slot.numel).view(unit.bucketer->spec(index).shape);
    (dtype == DType::kBF16 ? unit.params[k]->working : unit.params[k]->value) = std::move(view);
  }
}

void ParameterShards::wait(int u) {
  UnitState& st = state_[static_cast<std::size_t>(u)];
  if (!st.work) return;
  st.work->wait();
  st.work.reset();
}

void ParameterShards::drop(int u) {
  wait(u);
  UnitState& st = state_[static_cast<std::size_t>(u)];
  for (const auto& p : units_[static_cast<std::size_t>(u)].params) {
    p->value = Tensor();
    p->working = Tensor();
  }
  st.full = Tensor();
  st.holders = 0;
}

void ParameterShards::acquire(const std::vector<int>& units, const std::vector<int>& next) {
  const DType dtype = bf16_ ? DType::kBF16 : DType::kF32;
  for (int u : units) {
    gather(u, dtype);  // already in flight when the previous block prefetched it
    wait(u);
    ++state_[static_cast<std::size_t>(u)].holders;
  }
  for (int u : next) {
    if (state_[static_cast<std::size_t>(u)].full.defined()) continue;
    gather(u, dtype);
    ++prefetches_;
  }
}

void ParameterShards::release(const std::vector<int>& units) {
  for (int u : units) {
    UnitState& st = state_[static_cast<std::size_t>(u)];
    CLEAVE_ASSERT(st.holders > 0, "ZeRO-3: unit {} released more often than acquired", u);
    if (--st.holders == 0) drop(u);
  }
}

void ParameterShards::release_unused() {
  for (int u = 0; u < num_units(); ++u) {
    const UnitState& st = state_[static_cast<std::size_t>(u)];
    if (st.full.defined() && st.holders == 0) drop(u);
  }
}

bool ParameterShards::any_gathered() const {
  return std::any_of(state_.begin(), state_.end(), [](const UnitState& st) { return st.full.defined(); });
}

void ParameterShards::refresh_working() {
  if (!bf16_) return;
  for (UnitState& st : state_) ops::copy(context_, st.master, st.working);
}

void ParameterShards::gather_all() {
  release_unused();
  CLEAVE_ASSERT(!any_gathered(), "ZeRO-3: whole parameters wanted while a block holds its unit");
  for (int u = 0; u < num_units(); ++u) gather(u, DType::kF32);
  for (int u = 0; u < num_units(); ++u) wait(u);
}

void ParameterShards::scatter_all() {
  for (int u = 0; u < num_units(); ++u) {
    wait(u);
    UnitState& st = state_[static_cast<std::size_t>(u)];
    if (!st.full.defined()) continue;
    CLEAVE_ASSERT(st.full.dtype() == DType::kF32 && st.holders == 0, "ZeRO-3: scatter_all of a unit a block holds");
    const std::int64_t begin = shard_begin(u);
    ops::copy(context_, st.full.slice(begin, begin + st.master.numel()), st.master);
    if (bf16_) ops::copy(context_, st.master, st.working);
    drop(u);
  }
}

FullParameters::FullParameters(ParameterShards* shards) : shards_(shards) {
  if (shards_ != nullptr) shards_->gather_all();
}

FullParameters::~FullParameters() {
  if (shards_ != nullptr) shards_->scatter_all();
}

}  // namespace cleave::train
