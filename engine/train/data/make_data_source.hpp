// Builds the training or evaluation DataSource that a RunConfig's `data` section describes.
//
//   synthetic  gpt: SyntheticTokenSource (model.vocab_size, model.seq_len); mlp/cnn: SyntheticClassSource
//   text       bytes of data.path as tokens 0..255
//   tokens     data.format llmc (llm.c shard) or uint16 (headerless)
//   digits     data.path (default data/digits.csv.gz); inputs [64] for mlp, [1, 8, 8] for cnn
// Evaluation data is data.val_path when given, else the last data.val_fraction of data.path (digits: the
// last val_fraction of the rows, its test split). Samples are drawn with train.seed.
// Errors (one line, naming the file and the numbers): missing, empty, truncated, wrong magic, odd size,
// a split too short for seq_len + 1 tokens, a token id ≥ model.vocab_size, malformed digits rows. Each is an
// InputError (bad input: `cleave` exits 64 and `cleave run` does not restart into it); a failing open, stat or
// mmap of an existing file stays an Error.
#pragma once

#include <memory>

#include "engine/config/config.hpp"
#include "engine/train/data/data_source.hpp"

namespace cleave::train {

std::unique_ptr<DataSource> make_data_source(const config::RunConfig& config, Split split);

// The files make_data_source would open for `config`, opened and checked without reading their tokens: every glob
// matches, every file exists with a valid header (text: not empty; llm.c: magic, version, size; uint16: even size),
// a manifest.json beside a shard admits model.vocab_size, and the digits file parses; data.val_path only when
// train.eval_batches > 0 (the run reads it then only). For `cleave train` before the world and the model are built:
// each refusal is an InputError (exit 64) naming the file. The token ids and the split lengths are checked when
// the sources are made (make_data_source, an InputError too).
void check_data_files(const config::RunConfig& config);

}  // namespace cleave::train
