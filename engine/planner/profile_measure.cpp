// See profile_measure.hpp.
#include "engine/planner/profile_measure.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "engine/comm/link_probe.hpp"
#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "engine/core/tensor.hpp"
#include "engine/planner/median.hpp"
#include "engine/planner/stopwatch.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"
#include "layers/layer_util.hpp"
#include "layers/models/builder.hpp"
#include "layers/moe/router_log.hpp"

namespace cleave::planner {
namespace {

// Rank 0 of a tensor-parallel group of `width`, whose collectives complete at once without moving data: the
// shard's compute is timed alone (its outputs are partial sums, which timing does not care about).
class ShardTimingComm final : public comm::Communicator {
 public:
  explicit ShardTimingComm(int width) : width_(width), ranks_(static_cast<std::size_t>(width)) {
    for (int r = 0; r < width; ++r) ranks_[static_cast<std::size_t>(r)] = r;
  }
  int rank() const override { return 0; }
  int size() const override { return width_; }
  std::string_view backend() const override { return "shard-timing"; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  const comm::CommOptions& options() const override { return options_; }
  [[noreturn]] void abort(const std::string& reason) override { CLEAVE_THROW("profile: {}", reason); }

 protected:
  std::unique_ptr<Communicator> split_impl(int, int, std::string) override {
    CLEAVE_THROW("profile: a block asked to split its tensor-parallel group");
  }
  comm::WorkPtr all_reduce_impl(const Tensor&, comm::ReduceOp, const Stream&) override { return done(); }
  comm::WorkPtr reduce_scatter_impl(const Tensor&, const Tensor&, comm::ReduceOp, const Stream&) override { return done(); }
  comm::WorkPtr all_gather_impl(const Tensor&, const Tensor&, const Stream&) override { return done(); }
  comm::WorkPtr broadcast_impl(const Tensor&, int, const Stream&) override { return done(); }
  comm::WorkPtr barrier_impl(const Stream&) override { return done(); }
  comm::WorkPtr batch_p2p_impl(std::span<const comm::P2POp>, const Stream&) override {
    CLEAVE_THROW("profile: a block sent a point-to-point message inside its tensor-parallel group");
  }

 private:
  static comm::WorkPtr done() { return std::make_unique<comm::CompletedWork>(); }
  int width_;
  std::vector<int> ranks_;
  std::string name_ = "profile/tp";
  comm::CommOptions options_;
};

Shape with_batch(std::int64_t batch, const Shape& per_sample) {
  std::vector<std::int64_t> dims{batch};
  for (auto d : per_sample.dims()) dims.push_back(d);
  return Shape(std::span<const std::int64_t>(dims));
}

Tensor filled_like(const Shape& shape, float value, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::fill(ops::Context{}, t, value);
  return t;
}

// The rows per expert one micro-batch routed in `log` (every timed backward adds one micro-batch), summed over its
// blocks (a timed layer is one block); empty when nothing was routed.
std::vector<std::int64_t> routed_rows_per_micro_batch(const layers::RouterLog& log) {
  std::vector<std::int64_t> rows;
  std::int64_t micro_batches = 0;
  for (const auto& [name, routing] : log.blocks()) {
    if (rows.size() < routing.counts.size()) rows.resize(routing.counts.size(), 0);
    for (std::size_t e = 0; e < routing.counts.size(); ++e) rows[e] += routing.counts[e];
    micro_batches = std::max(micro_batches, routing.micro_batches);
  }
  for (auto& r : rows) r /= std::max<std::int64_t>(1, micro_batches);
  return rows;
}

double max_over_ranks(double value, comm::Communicator& comm) {
  float v = static_cast<float>(value);
  Tensor t = Tensor::from_floats(std::span<const float>(&v, 1), Shape{1}, MemoryCategory::kWorkspace);
  comm.all_reduce(t, comm::ReduceOp::kMax)->wait();
  return static_cast<double>(t.data<float>()[0]);
}

// A sysfs cache attribute of cpu0's cache `index` ("" when absent).
std::string cache_attribute(int index, const char* name) {
  std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/{}", index, name));
  std::string value;
  std::getline(in, value);
  return value;
}

// "0-1,4,6-7" -> 5.
int count_cpus(const std::string& list) {
  int count = 0;
  std::stringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    const auto dash = range.find('-');
    try {
      count += dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return 0;
    }
  }
  return count;
}

}  // namespace

void mean_over_ranks(std::vector<double>& values, comm::Communicator* comm) {
  if (comm == nullptr || comm->size() == 1 || values.empty()) return;
  std::vector<float> f(values.begin(), values.end());
  Tensor t = Tensor::from_floats(f, Shape{static_cast<std::int64_t>(f.size())}, MemoryCategory::kWorkspace);
  comm->all_reduce(t, comm::ReduceOp::kSum)->wait();
  const float* p = t.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(p[i]) / comm->size();
}

CacheInfo last_level_cache() {
  // sysfs names the cache the CPU has (an AMD EPYC VM here: 32 MiB shared by 2 CPUs, where sysconf says 256 MiB,
  // the whole package's).
  CacheInfo best;
  int best_level = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string level = cache_attribute(index, "level"), size = cache_attribute(index, "size");
    if (level.empty() || size.empty()) continue;
    try {
      const int l = std::stoi(level);
      std::int64_t bytes = std::stoll(size);
      if (size.back() == 'K') bytes <<= 10;
      if (size.back() == 'M') bytes <<= 20;
      if (l > best_level && bytes > 0) {
        best_level = l;
        best = {bytes, std::max(1, count_cpus(cache_attribute(index, "shared_cpu_list")))};
      }
    } catch (const std::exception&) {
      continue;
    }
  }
  if (best.bytes > 0) return best;
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? CacheInfo{l3, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))} : CacheInfo{};
}

std::int64_t cache_bytes_per_rank(const CacheInfo& cache, int ranks_on_node, int threads_per_rank) {
  if (cache.bytes <= 0) return 0;
  const int sharing = std::clamp(cache.shared_by_cpus / std::max(1, threads_per_rank), 1, std::max(1, ranks_on_node));
  return cache.bytes / sharing;
}

CacheEvictor::CacheEvictor(std::int64_t cache_bytes) {
  const std::int64_t bytes = std::clamp<std::int64_t>(cache_bytes > 0 ? 2 * cache_bytes : 64 << 20, 8 << 20, 256 << 20);
  buffer_.assign(static_cast<std::size_t>(bytes) / sizeof(float), 1.0f);
}

void CacheEvictor::evict() {
  // Reads allocate lines in every cache level (non-temporal stores would not), one float per 64-byte line.
  float sum = 0;
  for (std::size_t i = 0; i < buffer_.size(); i += 16) sum += buffer_[i];
  sink_ = sum;
}

Tensor random_input(const Shape& shape, DType dtype, std::int64_t vocab) {
  constexpr std::uint64_t kSeed = 20261130;
  const std::int64_t n = shape.numel();
  if (dtype == DType::kI32) {
    CLEAVE_CHECK(vocab > 0, "profile: a block with token inputs needs a vocabulary size, got {}", vocab);
    Tensor t = Tensor::empty(shape, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
    auto* p = t.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      p[i] = static_cast<std::int32_t>(rng::bits64(kSeed, rng::hash_key("tokens"), static_cast<std::uint64_t>(i)) %
                                       static_cast<std::uint64_t>(vocab));
    }
    return t;
  }
  std::vector<float> values(static_cast<std::size_t>(n));
  rng::fill_normal(values.data(), n, kSeed, rng::hash_key("activations"), 0.0f, 1.0f);
  Tensor f32 = Tensor::from_floats(values, shape, MemoryCategory::kActivations);
  if (dtype == DType::kF32) return f32;
  Tensor t = Tensor::empty(shape, dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::copy(ops::Context{}, f32, t);
  return t;
}

partition::BlockTimes time_block(layers::Layer& layer, const Tensor& x, const Tensor& dy, layers::Context& ctx,
                                 int repeats, Tensor* output, CacheEvictor* evictor, partition::BlockTimes* warm,
                                 const Tensor& targets) {
  CLEAVE_CHECK(repeats >= 1, "profile: repeats must be >= 1, got {}", repeats);
  // One forward, input-gradient and weight-gradient pass, each timed alone; `cold` evicts the caches before each.
  const auto pass = [&](bool cold) {
    const auto evict = [&] {
      if (cold && evictor != nullptr) evictor->evict();
    };
    layers::Stash stash;
    evict();
    auto start = ProfileClock::now();
    Tensor y = layers::forward_block(layer, x, targets, stash, ctx);
    const double tf = seconds_since(start);
    evict();
    start = ProfileClock::now();
    layer.backward_input(dy, stash, ctx);
    const double ti = seconds_since(start);
    evict();
    start = ProfileClock::now();
    layer.backward_weight(stash, ctx);
    const double tw = seconds_since(start);
    if (output != nullptr) *output = y;
    return partition::BlockTimes{tf, ti, tw};
  };
  const bool both = evictor != nullptr && warm != nullptr;
  std::vector<double> f, bi, bw, wf, wi, ww;
  for (int rep = 0; rep <= repeats; ++rep) {
    const partition::BlockTimes t = pass(true);
    const partition::BlockTimes w = both ? pass(false) : partition::BlockTimes{};
    if (rep == 0) continue;  // untimed: first touch of buffers, thread pool start
    f.push_back(t.forward_s), bi.push_back(t.input_grad_s), bw.push_back(t.weight_grad_s);
    wf.push_back(w.forward_s), wi.push_back(w.input_grad_s), ww.push_back(w.weight_grad_s);
  }
  if (both) *warm = {upper_median(wf), upper_median(wi), upper_median(ww)};
  return {upper_median(f), upper_median(bi), upper_median(bw)};
}

namespace {

// One pass over every measurement: for each tp width and micro-batch size, every distinct block shape in model
// order (a measured shape's output feeds the next block), each block built alone.
// The distinct block shapes of `spec` (what one round measures per tp width and micro-batch size).
int distinct_shapes(const partition::ModelSpec& spec) {
  std::set<std::string> keys;
  for (const auto& block : spec.blocks) keys.insert(partition::block_shape_key(block));
  return static_cast<int>(keys.size());
}

// `round` counts from 0; `done` counts measurements over all rounds (for request.progress).
std::vector<partition::MeasuredBlock> measure_round(const partition::ModelSpec& spec,
                                                    const BlockProfileRequest& request, CacheEvictor* evictor,
                                                    comm::Communicator* comm, int round, int& done) {
  const int total = request.rounds * static_cast<int>(request.tp_widths.size() * request.micro_batches.size()) *
                    distinct_shapes(spec);
  std::vector<partition::MeasuredBlock> measured;
  const auto resources = ops::make_device_resources(Device::cpu());  // a run's CPU state: GEMM primitives kept
  for (int tp : request.tp_widths) {
    ShardTimingComm shard_comm(tp);
    layers::BuildOptions build{cpu_allocator()};  // a CPU profile: host memory, no run cap to respect
    build.tp_size = tp;
    for (std::int64_t micro : request.micro_batches) {
      layers::Context ctx;
      ctx.resources = resources.get();
      ctx.tp_comm = tp > 1 ? &shard_comm : nullptr;
      ctx.precision = request.precision;
      std::map<std::string, Tensor> output_of;
      Tensor current;
      for (std::size_t i = 0; i < spec.blocks.size(); ++i) {
        const partition::BlockSpec& block = spec.blocks[i];
        const std::string key = partition::block_shape_key(block);
        if (auto it = output_of.find(key); it != output_of.end()) {
          current = it->second;
          continue;
        }
        if (!current.defined()) {
          current = random_input(with_batch(micro, block.input),
                                 block.input_dtype == DType::kI32 ? DType::kI32 : ctx.compute_dtype(), block.vocab_size);
        }
        auto layers = layers::build_blocks(spec, i, i + 1, build);
        layers::Layer& layer = *layers.front();
        layers::refresh_working_copies(layer.params(), ctx);  // bf16: the copies training computes with
        Tensor targets;  // the loss block's (undefined for the others)
        if (block.kind == partition::BlockKind::kSoftmaxCrossEntropy) {
          std::vector<std::int64_t> rows(current.shape().dims().begin(), current.shape().dims().end() - 1);
          targets = Tensor::zeros(Shape(std::span<const std::int64_t>(rows)), DType::kI32, MemoryCategory::kActivations,
                                  cpu_allocator());
        }
        if (comm != nullptr) comm->barrier()->wait();  // every rank computes at once, as in training
        Tensor output;
        {  // the output gradient has the output's shape (the loss takes a one-element scale)
          layers::Stash probe;
          output = layers::forward_block(layer, current, targets, probe, ctx);
        }
        const Tensor dy = block.kind == partition::BlockKind::kSoftmaxCrossEntropy
                              ? filled_like(Shape{1}, 1.0f)
                              : filled_like(output.shape(), 0.01f, output.dtype());
        partition::BlockTimes warm;
        layers::RouterLog routed;  // what a moe block routes while it is timed (the trainer keeps one too)
        ctx.router_log = &routed;
        const partition::BlockTimes t =
            time_block(layer, current, dy, ctx, request.repeats, &output, evictor, &warm, targets);
        ctx.router_log = nullptr;
        measured.push_back({key, tp, micro, t.forward_s, t.input_grad_s, t.weight_grad_s, warm.forward_s,
                            warm.input_grad_s, warm.weight_grad_s, routed_rows_per_micro_batch(routed)});
        output_of[key] = output;
        current = output;
        if (request.progress) {
          request.progress(++done, total, fmt::format("{}, tp {}, micro-batch {}, round {}/{}", key, tp, micro,
                                                      round + 1, request.rounds));
        }
      }
    }
  }
  return measured;
}

}  // namespace

void measure_blocks(partition::MeasuredCosts& costs, const partition::ModelSpec& spec, const BlockProfileRequest& request,
                    comm::Communicator* comm) {
  CLEAVE_CHECK(request.repeats >= 1 && request.rounds >= 1, "profile: repeats and rounds must be >= 1, got {} and {}",
               request.repeats, request.rounds);
  std::optional<CacheEvictor> evictor;
  if (request.cold_caches) {
    // Twice this rank's share of the cache, which the caller records in `costs` (0: not known, the whole cache).
    evictor.emplace(costs.cache_bytes_per_rank > 0 ? costs.cache_bytes_per_rank : last_level_cache().bytes);
  }
  // rounds[r][k]: the k-th measurement of round r (the same order every round).
  std::vector<std::vector<partition::MeasuredBlock>> rounds;
  int done = 0;
  for (int round = 0; round < request.rounds; ++round) {
    rounds.push_back(measure_round(spec, request, evictor ? &*evictor : nullptr, comm, round, done));
  }
  // Per measurement, the median over rounds of each round's median, then the mean over ranks.
  std::vector<partition::MeasuredBlock> measured = rounds.front();
  std::vector<double> values;
  for (std::size_t k = 0; k < measured.size(); ++k) {
    std::vector<std::vector<double>> v(6);
    for (const auto& round : rounds) {
      const auto& m = round[k];
      const double all[] = {m.forward_s, m.input_grad_s, m.weight_grad_s, m.warm_forward_s, m.warm_input_grad_s,
                            m.warm_weight_grad_s};
      for (std::size_t j = 0; j < v.size(); ++j) v[j].push_back(all[j]);
    }
    for (const auto& x : v) values.push_back(upper_median(x));
  }
  mean_over_ranks(values, comm);
  for (std::size_t k = 0; k < measured.size(); ++k) {
    auto& m = measured[k];
    const double* x = &values[6 * k];
    m.forward_s = x[0], m.input_grad_s = x[1], m.weight_grad_s = x[2];
    m.warm_forward_s = x[3], m.warm_input_grad_s = x[4], m.warm_weight_grad_s = x[5];  // 0 when not measured
    costs.blocks.push_back(m);
  }
}

void measure_optimizer(partition::MeasuredCosts& costs, std::int64_t params, int repeats, int rounds,
                       comm::Communicator* comm, ops::Precision precision) {
  CLEAVE_CHECK(params >= 1 && repeats >= 1 && rounds >= 1,
               "profile: optimizer timing needs params, repeats and rounds >= 1");
  // A run's CPU state, as the trainer's context holds it: the multi-tensor slots keep their tensor lists in its
  // kernel scratch (kernels/ops/cpu/scratch_table.hpp); a bare context would lease scratch of its own per call and
  // time an allocation the trainer never makes.
  const auto resources = ops::make_device_resources(Device::cpu());
  ops::Context ctx;
  ctx.resources = resources.get();
  // As the trainer runs its OPTIMIZER_STEP (engine/train/step_tail.hpp): one multi-tensor call per step over all
  // of the rank's parameters, here `params` elements split into kPieces tensors.
  constexpr std::int64_t kPieces = 16;
  std::vector<Tensor> values, grads, ms, vs, working;
  std::vector<float> spread;  // gradients of many magnitudes, as a step's are (the exact norm buckets by exponent)
  for (std::int64_t p = 0; p < kPieces; ++p) {
    const std::int64_t n = params / kPieces + (p < params % kPieces ? 1 : 0);
    if (n == 0) continue;
    spread.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      spread[static_cast<std::size_t>(i)] = 1e-2f / static_cast<float>(1 + (i * 7919) % 4096);
    }
    values.push_back(filled_like(Shape{n}, 0.5f));
    grads.push_back(Tensor::from_floats(spread, Shape{n}, MemoryCategory::kGradients));
    ms.push_back(filled_like(Shape{n}, 0.0f));
    vs.push_back(filled_like(Shape{n}, 0.0f));
    // Mixed precision: the trainer refreshes each parameter's bf16 working copy after its update.
    if (precision == ops::Precision::kBf16) working.push_back(filled_like(Shape{n}, 0.0f, DType::kBF16));
  }
  std::vector<ops::AdamWItem> adamw_items;
  std::vector<ops::SgdItem> sgd_items, momentum_items;
  for (std::size_t p = 0; p < values.size(); ++p) {
    adamw_items.push_back({values[p], grads[p], ms[p], vs[p], 0.1f});
    sgd_items.push_back({values[p], grads[p], Tensor(), 0.1f});
    momentum_items.push_back({values[p], grads[p], ms[p], 0.1f});
  }
  const auto time = [&](auto&& run, bool update) {
    if (comm != nullptr) comm->barrier()->wait();
    std::vector<double> t;
    for (int rep = 0; rep <= repeats; ++rep) {
      const auto start = ProfileClock::now();
      run(rep + 1);
      if (update) {
        for (std::size_t p = 0; p < working.size(); ++p) ops::copy(ctx, values[p], working[p]);
      }
      if (rep > 0) t.push_back(seconds_since(start));
    }
    return upper_median(t) / static_cast<double>(params);
  };
  double norm_sink = 0;  // keeps the sums live
  std::vector<double> adamw, sgd, momentum, norm, clip;  // one median per round
  for (int round = 0; round < rounds; ++round) {
    adamw.push_back(time([&](int step) {
      ops::adamw_update_many(ctx, adamw_items, ops::AdamWHyper{.lr = 1e-4f, .step = step});
    }, true));
    sgd.push_back(time([&](int) { ops::sgd_update_many(ctx, sgd_items, ops::SgdHyper{.lr = 1e-4f}); }, true));
    momentum.push_back(time([&](int step) {
      ops::sgd_update_many(ctx, momentum_items, ops::SgdHyper{.lr = 1e-4f, .momentum = 0.9f, .first_step = step == 1});
    }, true));
    norm.push_back(time([&](int) { norm_sink += ops::sum_squares_exact(ctx, grads).to_double(); }, false));
    // Alternating factors keep the gradients' magnitudes (and so the norm's buckets) from drifting.
    clip.push_back(time([&](int rep) { ops::scale_inplace_many(ctx, grads, rep % 2 == 0 ? 0.5f : 2.0f); }, false));
  }
  CLEAVE_CHECK(std::isfinite(norm_sink), "profile: the timed gradient norm is not finite ({})", norm_sink);
  std::vector<double> medians = {upper_median(adamw), upper_median(sgd), upper_median(momentum), upper_median(norm),
                                 upper_median(clip)};
  mean_over_ranks(medians, comm);
  costs.adamw_s_per_param = medians[0];
  costs.sgd_s_per_param = medians[1];
  costs.sgd_momentum_s_per_param = medians[2];
  costs.grad_norm_s_per_param = medians[3];
  costs.grad_clip_s_per_param = medians[4];
}

std::vector<int> profile_group_sizes(int world_size) {
  std::vector<int> groups;
  for (int g = 2; g < world_size; g *= 2) {
    if (world_size % g == 0) groups.push_back(g);
  }
  groups.push_back(world_size);
  return groups;
}

void measure_collectives(partition::MeasuredCosts& costs, comm::Communicator& world, int repeats) {
  CLEAVE_CHECK(world.size() >= 2, "profile: collectives need 2 or more ranks (run under mpirun), got {}", world.size());
  const std::vector<std::int64_t> sizes = {4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20};  // bytes
  const int rank = world.rank();
  costs.p2p = partition::fit_alpha_beta(comm::time_ping_pong(world, sizes, repeats), 2);
  // Collectives on groups of g consecutive ranks, every group at once.
  for (int g : profile_group_sizes(world.size())) {
    auto group = world.split(rank / g, rank, fmt::format("profile{}", g));
    for (const auto& entry : enum_table<partition::Collective>()) {
      const partition::Collective op = entry.value;
      std::vector<std::pair<double, double>> points;
      for (std::int64_t bytes : sizes) {
        const std::int64_t n = bytes / 4 / g * g;  // elements of the whole buffer, divisible by the group
        Tensor whole = Tensor::zeros(Shape{n}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
        Tensor part = Tensor::zeros(Shape{n / g}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
        std::vector<double> times;
        world.barrier()->wait();
        for (int rep = 0; rep <= repeats; ++rep) {
          const auto start = ProfileClock::now();
          switch (op) {
            case partition::Collective::kAllReduce: group->all_reduce(whole, comm::ReduceOp::kSum)->wait(); break;
            case partition::Collective::kReduceScatter: group->reduce_scatter(whole, part)->wait(); break;
            case partition::Collective::kAllGather: group->all_gather(part, whole)->wait(); break;
          }
          if (rep > 0) times.push_back(seconds_since(start));
        }
        points.push_back({static_cast<double>(n * 4), max_over_ranks(upper_median(times), world)});
      }
      const partition::AlphaBeta fit = partition::fit_alpha_beta(points, g);
      costs.fits(op).push_back(fit);
    }
  }
}

}  // namespace cleave::planner
