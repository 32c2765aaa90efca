// HardwareProfile: what the planner assumes about the machine a plan will run on: sustained GEMM FLOP/s by
// dtype, the link between ranks inside a node and between nodes (alpha-beta: latency + bytes / bandwidth),
// the memory bandwidth an optimizer step streams at, ranks per node (tensor parallelism stays inside a
// node) and device memory. Loaded from a JSON profile file (profiles/*.json ship published hardware, with
// their sources in the file) or measured on this machine (engine/planner/hardware_profile.hpp:
// calibrate_this_machine). This file holds the format: the struct, its one reader and its writer
// (hardware_profile.cpp); the prices it puts on work are hardware_profile_prices.cpp's.
// A profile written by `cleave profile` also carries MeasuredCosts (partition/measured_costs.hpp): per-block times by
// tp width and micro-batch, and alpha-beta fits of P2P and collectives, which the planner then uses instead
// of FLOPs over a rate and the link formulas.
// A GPU profile written by `cleave profile --gemm` (engine/planner/gemm_profile.hpp) carries a MEASURED efficiency
// curve per dtype (gemm_efficiency for bf16, gemm_efficiency_f32 for f32) and the timed GEMMs behind it.
// CPU profiles also say how many cores a node has and how many ranks shared them while the compute figures were
// taken, so a plan for another number of ranks per node is priced by its share of the cores (core_sharing).
// Invariant: every number is finite and > 0 once a profile is returned (device_memory: > 0, or 0 for the file's
// "none", no cap); a bad file is an Error naming the
// file and the key; profile_to_json(load_profile(f)) reads back to the same profile (round trip).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/device.hpp"
#include "engine/core/dtype.hpp"
#include "partition/attention_rates.hpp"
#include "partition/block_work.hpp"
#include "partition/gemm_shape_table.hpp"
#include "partition/load_check.hpp"
#include "partition/measured_costs.hpp"
#include "partition/routing_imbalance.hpp"

namespace cleave::partition {

struct Link {
  double latency_s = 20e-6;        // per message
  double bandwidth_Bps = 2e9;      // bytes per second, one direction
  // Ring all-reduce of `bytes` over `ranks`: 2 (n - 1) / n · bytes / bandwidth + 2 (n - 1) · latency.
  double all_reduce_s(double bytes, int ranks) const;
};

// The file's spelling of "no device memory cap" (device_memory_GiB; device_memory 0 in memory).
inline constexpr const char* kNoDeviceMemoryCap = "none";

struct HardwareProfile {
  std::string name;                   // "A100 80GB SXM (DGX A100)", "this machine (measured)"
  std::string source;                 // where the numbers come from
  DeviceType device_type = DeviceType::kCpu;  // file key device_type: "cpu" | "cuda" (what the written config uses)
  double flops_f32 = 0;               // sustained GEMM FLOP/s of one rank at training shapes
  double flops_bf16 = 0;
  double memory_bandwidth_Bps = 0;    // per rank, for optimizer steps
  Link intra_node;                    // tp collectives, p2p and dp inside a node
  Link inter_node;                    // between nodes
  int ranks_per_node = 1;             // tp never crosses a node
  // Bytes per rank; 0 = no cap of the profile's own (file: "device_memory_GiB": "none"; a profile the planner measures
  // itself states none): then only --memory-limit or device.memory_limit caps a plan.
  std::int64_t device_memory = 0;
  // Cores a node's ranks compute on (CPU profiles; file key cores_per_node, else this machine's count for a
  // cpu profile); 0 = every rank has a device of its own (GPU profiles): never shared.
  int cores_per_node = 0;
  // Ranks that shared those cores when the compute figures (rates, measured tables, optimizer) were taken:
  // the rank count `cleave profile` ran with, the ranks calibrate_this_machine priced (file key
  // measured_ranks_per_node; default measured.ranks for a measured profile, else 1).
  int measured_ranks_per_node = 1;
  // Cores of the machine the compute figures were taken on (file key measured_cores; `cleave profile` and
  // calibrate_this_machine write it). 0 = not recorded (a profile written before the key): assumed to be
  // cores_per_node, i.e. measured on a node like the one planned for. A profile edited for another node keeps
  // its figures' conditions here and the target's cores in cores_per_node.
  int measured_cores = 0;

  // Measured on this machine (calibrate_this_machine with a model): the FLOP/s a real transformer block
  // reaches in its forward, input-gradient and weight-gradient passes (f32), which the planner uses instead
  // of the GEMM rate; 0 = not measured.
  double block_forward_flops = 0, block_input_grad_flops = 0, block_weight_grad_flops = 0;

  // Roofline (shipped profiles of hardware not measured here; optional): peak GEMM FLOP/s by dtype and the
  // fraction of it one GEMM reaches by its FLOPs per call, (flops, fraction) ascending, piecewise linear in
  // log FLOPs and flat beyond the ends. When present, blocks are priced kernel by kernel (roofline_seconds)
  // instead of FLOPs over the sustained rate.
  double peak_flops_f32 = 0, peak_flops_bf16 = 0;
  std::vector<std::pair<double, double>> gemm_efficiency;
  // f32 GEMMs' own curve (file key gemm_efficiency_f32, optional; a measured profile has it: f32 GEMMs run on
  // other units than bf16 ones); empty = f32 uses gemm_efficiency too, as the shipped profiles do.
  std::vector<std::pair<double, double>> gemm_efficiency_f32;
  // The most the fused memory-efficient attention kernel's products reach, as a fraction of the peak (file key
  // attention_efficiency, optional, roofline only): those products (Gemm::fused_attention) are priced at
  // min(the curve's efficiency, this); 0 = the curve alone. A published kernel benchmark, not a GEMM one.
  double attention_efficiency = 0;
  // The fused attention kernels' published speed by pass, mask, head dimension and sequence length (file key
  // attention_rates, optional, roofline only; partition/attention_rates.hpp): per kernel family, a curve each for the
  // forward and the backward. Read only for a run that names its kernel (attention_kernel below).
  AttentionRates attention_rates;
  // The attention kernel family the priced run launched (not a file key: the run's option, `cleave simulate
  // --attention-kernel`; it must be one of attention_rates' kernels). When set, the fused attention kernel's products
  // are priced at attention_rates' FLOP/s for their pass (forward or backward), mask, head dim and sequence length,
  // in place of the curve capped at attention_efficiency; "" = that cap (both passes alike).
  std::string attention_kernel;
  // Tile and wave quantization (file keys sm_count and gemm_tiles, optional together, roofline only; NVIDIA's
  // "Matrix Multiplication Background User's Guide"): a library GEMM cuts its m x n output into tiles of tm x tn, one
  // thread block each, and runs them in waves of sm_count (one block per SM at these tile sizes); a wave takes as long
  // as a full one however few tiles it holds. 0 / empty = no quantization term.
  int sm_count = 0;
  std::vector<std::pair<int, int>> gemm_tiles;  // (tm, tn) the library may pick from; the fastest is taken
  // bf16 library GEMMs' efficiency by shape (file key gemm_shape_efficiency, optional, roofline only): a full grid of
  // timed GEMMs [m, n, k, fraction of the peak] (partition/gemm_shape_table.hpp). When present a bf16 library GEMM
  // (not the fused attention kernel's products, not f32) is priced at the table's fraction for its m, n, k in place of
  // the size curve, and without the wave term: the timed shapes carry their own tile and wave quantization.
  GemmShapeTable gemm_shape_efficiency;
  // What a kernel launch costs the GPU (file key kernel_launch_us, optional, roofline only): the idle time between two
  // dependent kernels on a stream, the previous one's teardown and the next one's setup; each kernel of a pass
  // (PassWork::kernels) adds it. 0 = not priced.
  double kernel_launch_s = 0;
  // The GEMMs `cleave profile --gemm` timed (file key gemm_measured; the curves are fitted to them). Evidence
  // for a reader and for tests: the planner prices from the curves only.
  struct MeasuredGemm {
    DType dtype = DType::kF32;  // bf16 (bf16 inputs, f32 accumulation) or f32 (TF32 off)
    std::string what;      // "fc1 forward d768 ff3072 tokens 4096"
    std::int64_t m = 0, n = 0, k = 0;
    double seconds = 0;    // one GEMM, median over the samples
    double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  };
  std::vector<MeasuredGemm> measured_gemms;

  MeasuredCosts measured;  // empty unless written by `cleave profile`
  // The routing imbalance `cleave profile` measured by training the config's model on its data at ep = its ranks
  // (file key "routing_imbalance", partition/routing_imbalance.hpp; absent from profiles written before 2026-12-01 (w),
  // from models without routed experts and from shipped ones): the planner's default ep imbalance at that ep.
  std::optional<MeasuredRoutingImbalance> routing_imbalance;
  // The profile's record of its own load (file key "load_check"; absent from profiles written before it, and from
  // shipped ones). Never priced: it says whether to trust the prices (partition/load_check.hpp).
  std::optional<LoadCheck> load_check;

  // Where each number comes from (file key `sources`, optional): (key, citation) for every number of the profile
  // the cost model reads, keyed by its name in the file ("peak_tflops.bf16", "intra_node.bandwidth_GBps",
  // "gemm_efficiency", ...: sourced_keys()). When present the reader refuses a key the profile does not have and a
  // number without its entry, so a shipped profile cannot gain an uncited number. Empty = the profile only has
  // the free-text `source` (measured profiles, older files). The core counts (cores_per_node, measured_ranks_per_node,
  // measured_cores) may be cited and need not be: they describe the node a user plans for.
  std::vector<std::pair<std::string, std::string>> sources;
  // The numbers of this profile that `sources` must cite, by file key, in file order.
  std::vector<std::string> sourced_keys() const;

  double flops(bool bf16) const { return bf16 ? flops_bf16 : flops_f32; }
  // Cores one rank computes on when `ranks` ranks share a node's cores, by the trainer's thread rule
  // (engine/train/threads.hpp): floor(cores / ranks) threads while every rank fits, else cores / ranks of a
  // core (time-shared). 0 when the profile has no core count.
  double cores_per_rank(int ranks) const;
  // The same rule for `ranks` ranks on `cores` cores (0 when cores <= 0).
  static double cores_per_rank(int cores, int ranks);
  // How many times longer a rank's compute takes with `ranks_on_node` ranks on a node than under the conditions
  // the profile's figures were taken in: cores_per_rank(measured_cores, measured_ranks_per_node) /
  // cores_per_rank(ranks_on_node); 1 without a core count. Above 1 with more ranks than cores: a rank waiting for
  // a core does not compute.
  double core_sharing(int ranks_on_node) const;
  // A collective over `ranks` ranks, `per_node` of them on each node (a group with stride tp has ranks_per_node / tp
  // per node), of `bytes` per rank (the all-reduced tensor, the reduce-scatter input, the all-gather output), as
  // NCCL runs it: a reduce-scatter or an all-gather is ring_collective_s; an all-reduce across nodes is the faster of
  // ring_collective_s and tree_all_reduce_s (NCCL times every algorithm by its own latency-bandwidth model and runs
  // the fastest: the ring's latency grows with the ranks, the tree's with log2 of the nodes). One node: the
  // intra-node ring.
  double spread_collective_s(double bytes, int ranks, int per_node, bool all_reduce) const;
  // NCCL's ring over all n ranks, its channels spread over the node's per_node NICs: every ring edge carries
  // f (n - 1) / n · bytes / channels, one edge per ring leaves each node, so each NIC carries f (n - 1) / n · bytes /
  // per_node and NVLink each rank's f (n - 1) / n · bytes; the slower of the two sets the time (f = 2 for an
  // all-reduce, 1 for a reduce-scatter or an all-gather), plus a latency per ring step (n - k inside nodes, k - 1
  // between). So the NIC-bound bus bandwidth is per_node x the NIC's whatever the node count, as NVIDIA's published
  // nccl-tests all-reduce figures show (DGX A100 192 GB/s = 8 x 24, DGX H100 380 = 8 x 47.5; profiles' sources).
  // One node: the intra-node ring. per_node 1: the flat ring over the inter-node link, as Link::all_reduce_s.
  double ring_collective_s(double bytes, int ranks, int per_node, bool all_reduce) const;
  // NCCL's tree all-reduce over k = ranks / per_node nodes (k >= 2): a chain through the node's per_node ranks and a
  // double binary tree between nodes, reduced up and broadcast down. Each rank's NVLink carries 2 · bytes each way
  // (the chain, both phases); each node's NICs carry bytes each way on 2 nodes and 2 · bytes on more (an inner node
  // of one tree is a leaf of the other: 2 children's halves in, a half out, and back), spread over its per_node NICs.
  // Latency: 2 ((per_node - 1) intra-node steps + floor(log2 k) inter-node steps), up and down. So on 2 nodes the
  // network carries half the ring's bytes (bus bandwidth above the NICs', up to NVLink's), and at many nodes the
  // latency is logarithmic where the ring's is linear (NVIDIA/nccl issues #330, #946; docs/planner.md).
  double tree_all_reduce_s(double bytes, int ranks, int per_node) const;
  bool has_roofline() const { return !gemm_efficiency.empty(); }
  // The fraction of peak a GEMM of `flops` FLOPs reaches (has_roofline() only): bf16's curve, and for f32
  // (bf16 false) gemm_efficiency_f32 when the profile has one.
  double gemm_efficiency_at(double flops, bool bf16 = true) const;
  // The quantized time of one GEMM (one launch of a grouped one; 0 without sm_count, and for the fused attention kernel's products, which are not
  // library GEMMs): min over gemm_tiles of ceil(batch · ceil(m / tm) · ceil(n / tn) / sm_count) waves, each
  // 2 · tm · tn · k FLOPs on one SM at the curve's top efficiency: waves · 2 tm tn k · sm_count / (peak · top).
  double gemm_wave_seconds(const Gemm& gemm, bool bf16) const;
  // The fraction of peak one GEMM reaches (has_roofline() only): the shape table's for a bf16 library GEMM when the
  // profile has one; for a fused attention kernel's product, with attention_kernel set, attention_rates' FLOP/s for
  // its pass, mask, head dim and sequence over the peak (a head dim between two published ones interpolated:
  // AttentionRates::flops_per_s_between_head_dims; bf16 only: the tables are bf16 benchmarks; an f32 run is
  // refused); else the size curve's at its FLOPs, capped at attention_efficiency for the fused attention kernel's
  // products.
  double gemm_efficiency_of(const Gemm& gemm, bool bf16) const;
  // One GEMM: max(FLOPs / (peak x gemm_efficiency_of), its wave-quantized time (not with the shape table, whose timed
  // shapes are quantized already), traffic bytes / memory bandwidth) (has_roofline() only); a grouped GEMM
  // (Gemm::groups) is that of one launch, times its groups.
  double gemm_seconds(const Gemm& gemm, bool bf16) const;
  // The three parts of a pass on the roofline: its GEMMs (gemm_seconds summed), its elementwise, normalisation and
  // softmax traffic (stream_bytes / memory bandwidth) and its kernel launches (kernels x kernel_launch_s).
  double gemm_pass_seconds(const PassWork& work, bool bf16) const;
  double elementwise_seconds(const PassWork& work) const { return work.stream_bytes / memory_bandwidth_Bps; }
  double launch_seconds(const PassWork& work) const { return work.kernels * kernel_launch_s; }
  // One pass of a block: the sum of its three parts above (has_roofline() only).
  double roofline_seconds(const PassWork& work, bool bf16) const;
  // Whether gemm_efficiency_of reads the shape table for this GEMM (a bf16 library GEMM on a profile with one).
  bool uses_shape_table(const Gemm& gemm, bool bf16) const;
  // A probabilities run's attention core (S, softmax, P·V and their gradients, with the launches between them) at the
  // published rate of the unfused kernel the run names (attention_kernel, e.g. "pytorch": PyTorch's standard
  // attention in the FlashAttention-2 paper's benchmark): {forward, backward} seconds. The unfused path computes all
  // T² scores whatever the mask, so the kernel's curve without the mask prices it, its FLOPs counted as the benchmark
  // counts them: forward 4·T²·d per head, backward 2.5 times that; never below the roofline's price of the same
  // products, softmax bytes and launches (the rate is the benchmark's, at 16k tokens x 2048 width: a smaller problem
  // runs no faster). bf16 only (the benchmarks ran 16-bit); a head dim between two published ones takes the rate
  // interpolated between them (AttentionRates::flops_per_s_between_head_dims); one outside them is refused by name.
  std::pair<double, double> unfused_attention_seconds(const ProbabilitiesWork& work, bool bf16) const;
};

// Reads a profile file (format: profiles/README.md): the one reader of profile files. Throws InputError (bad input,
// exit 64: every profile read is a file the command line names) naming the file and the key (a missing file, not
// JSON, not a profile, a bad value).
HardwareProfile load_profile(const std::string& path);
// The profile in that file format (what `cleave profile` writes).
nlohmann::json profile_to_json(const HardwareProfile& profile);

}  // namespace cleave::partition
