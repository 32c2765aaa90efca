// Tensor-parallel layer helpers (see tp_util.hpp).
#include "layers/parallel/tp_util.hpp"

#include "engine/core/error.hpp"

namespace cleave::layers {

void check_tp_coordinates(int tp_size, int tp_rank, std::string_view who) {
  CLEAVE_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size,
               "{}: tensor-parallel rank {} must be in [0, tp_size {}) and tp_size >= 1", who, tp_rank, tp_size);
}

comm::Communicator* tp_group(const Context& ctx, int tp_size, int tp_rank, std::string_view who) {
  if (tp_size == 1) return nullptr;
  CLEAVE_CHECK(ctx.tp_comm != nullptr,
               "{}: built for tensor parallelism over {} ranks, but the context has no tp communicator "
               "(Context::tp_comm)",
               who, tp_size);
  CLEAVE_CHECK(ctx.tp_comm->size() == tp_size && ctx.tp_comm->rank() == tp_rank,
               "{}: built as tp rank {} of {}, but the context's tp communicator '{}' is rank {} of {}", who,
               tp_rank, tp_size, ctx.tp_comm->name(), ctx.tp_comm->rank(), ctx.tp_comm->size());
  return ctx.tp_comm;
}

void tp_all_reduce(const Tensor& tensor, comm::ReduceOp op, const Context& ctx, int tp_size, int tp_rank,
                   std::string_view who) {
  comm::Communicator* group = tp_group(ctx, tp_size, tp_rank, who);
  if (group == nullptr) return;
  group->all_reduce(tensor, op, *ctx.stream)->wait();
}

}  // namespace cleave::layers
