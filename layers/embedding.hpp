// Embedding: token table "<prefix>.token" [vocab, dim] plus learned positions "<prefix>.position"
// [seq_len, dim]; ids i32 [B, T] (T <= seq_len) -> [B, T, dim]. Both tables normal(0, 0.02) (GPT-2);
// the position table is not weight-decayed. seq_len 0: no position table (llama; any T).
//
// The ids have no gradient: backward_input returns an undefined Tensor and keeps dy. Stash after forward:
// {ids}; after backward_input: {ids, dy}. backward_weight scatter-adds into both tables, then clears.
// token_table() is the Param a tied LM head shares.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class Embedding final : public Layer {
 public:
  Embedding(std::string prefix, std::int64_t vocab_size, std::int64_t seq_len, std::int64_t dim,
            const ParamInit& init);

  std::string_view kind() const override { return "embedding"; }
  Tensor forward(const Tensor& ids, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override {
    if (!position_) return {token_};
    return {token_, position_};
  }

  const std::shared_ptr<Param>& token_table() const { return token_; }
  const std::shared_ptr<Param>& position_table() const { return position_; }  // null when seq_len is 0

 private:
  std::string prefix_;
  std::int64_t vocab_, seq_len_, dim_;
  std::shared_ptr<Param> token_;
  std::shared_ptr<Param> position_;
  std::string who_ = "embedding " + prefix_;  // built once: messages name the layer without a string per call
};

// The token table a tied head on another pipeline stage creates for itself: same logical name
// ("<prefix>.token") and same initial values as Embedding's, so the two copies start identical.
std::shared_ptr<Param> make_token_table(const std::string& prefix, std::int64_t vocab_size, std::int64_t dim,
                                        const ParamInit& init);

// What Embedding and VocabParallelEmbedding (layers/parallel/) share, so the two read and check the same way:
// the sizes checked at construction (vocab_size, dim > 0; seq_len >= 0, 0: no position table), the position
// table "<prefix>.position" [seq_len, dim] (replicated, not decayed, normal(0, 0.02); null when seq_len is 0:
// positions come from elsewhere, llama's rotary embeddings), and the ids checked at forward (i32 [batch, seq],
// seq <= seq_len when there is a position table). `who` names the layer in the messages.
void check_embedding_sizes(std::int64_t vocab_size, std::int64_t seq_len, std::int64_t dim, const std::string& who);
std::shared_ptr<Param> make_position_table(const std::string& prefix, std::int64_t seq_len, std::int64_t dim,
                                           const ParamInit& init);
void check_token_ids(const Context& ctx, const Tensor& ids, std::int64_t seq_len, const std::string& who);

}  // namespace cleave::layers
