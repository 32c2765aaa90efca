// `cleave train --init-from SOURCE` on token shards: the shards' ids must be those of SOURCE's own tokenizer.
// A model imported from a Hugging Face directory that has a tokenizer.json reads token ids of that tokenizer;
// shards `cleave tokenize` wrote with another one (their manifest.json names it) hold ids that mean other tokens to
// the model, and a fine-tune on them runs and learns nothing it was meant to. Refused before any work, naming both
// tokenizers and the command that writes the right shards.
// Invariant: a shard without a manifest, a source without a tokenizer.json (or with one the reader cannot read),
// and a copy of the same tokenizer (the same bytes, or the same vocabulary size and description) pass.
#pragma once

#include "engine/config/config.hpp"
#include "engine/train/checkpoint/weight_source.hpp"

namespace cleave::cli {

// Throws InputError (bad input: exit 64) when a data file of `config` (data.path, data.val_path, data.paths entries that are files, not
// globs) has a manifest.json naming another tokenizer than `source`'s own tokenizer.json.
void check_shards_match_source_tokenizer(const config::RunConfig& config, const train::WeightSource& source);

}  // namespace cleave::cli
