// The CUDA backend's embedding slots (contracts in ops.hpp) over kernels/cuda/embedding: token embeddings over
// a VocabRange (tensor-parallel vocabulary shards: ids outside the range give zero rows and no gradient) and
// learned position embeddings, f32 or bf16 activations, f32 gradients. A token id outside the vocabulary is
// recorded in the device status, not checked by a synchronising read: check_device_status throws the CPU
// kernel's message at the step's end.
#include "kernels/cuda/embedding.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

kd::EmbeddingRange range_of(const VocabRange& r) { return {r.first, r.valid, r.vocab}; }

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& out,
                       const VocabRange& range) {
  std::uint64_t* status = device_status(ctx).ids_word(range.vocab, stream_of(ctx));
  kd::embedding_forward(ids.data<std::int32_t>(), table.raw_data(), float_type(table), out.raw_data(), float_type(out),
                        status, ids.numel(), table.dim(1), range_of(range), stream_of(ctx));
}

void embedding_backward(const Context& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                        const VocabRange& range) {
  const std::size_t bytes = kd::embedding_backward_workspace_size(ids.numel(), range.valid);
  Tensor ws = scratch(ctx, bytes);
  kd::embedding_backward(ids.data<std::int32_t>(), dout.raw_data(), float_type(dout), dtable.data<float>(),
                         ids.numel(), dtable.dim(1), range_of(range), ws.raw_data(), bytes, stream_of(ctx));
}

void position_embedding_forward(const Context& ctx, const Tensor& x, const Tensor& pos) {
  kd::position_embedding_forward(x.raw_data(), float_type(x), pos.raw_data(), float_type(pos), x.dim(0), x.dim(1),
                                 x.dim(2), stream_of(ctx));
}

void position_embedding_backward(const Context& ctx, const Tensor& dx, const Tensor& dpos) {
  kd::position_embedding_backward(dx.raw_data(), float_type(dx), dpos.data<float>(), dx.dim(0), dx.dim(1), dx.dim(2),
                                  stream_of(ctx));
}

}  // namespace cleave::ops::cuda_detail
