# Sourced by the checkpoint_*.sh tests that train a tiny GPT through the CLI (arguments: CLEAVE MPIEXEC [FLAGS...]):
# sets cleave and the mpiexec array from them, makes a scratch directory $work (removed on exit) and enters it
# (mpi_script_setup.sh), and defines fail(), losses() and tiny_config().
# Invariant: every test starts from the one tiny config below and states only the keys it changes, so what a test
# trains is read in that test.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_script_setup.sh" "$@"  # cleave, mpiexec, $work (entered)

fail() { echo "FAIL $*"; exit 1; }
# losses RUN_DIR: the loss of each row of RUN_DIR/metrics.jsonl, one a line.
losses() { sed 's/.*"loss":\([^,]*\),.*/\1/' "$1/metrics.jsonl"; }

# tiny_config [SECTION.KEY=JSON ...]: writes tiny.json, a 4-layer byte-sized GPT (vocab 64, d_model 32, seq_len 16)
# trained deterministically for 12 steps on synthetic data with AdamW, a checkpoint every 4 steps, each KEY set to
# its JSON value (e.g. train.seed=9, parallel.pipeline_model_parallel_size=2).
tiny_config() {
  python3 - "$@" > tiny.json << 'PY'
import json, sys
config = {
    "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
    "batch": {"global_batch_size": 8, "micro_batch_size": 2},
    "optimizer": {"type": "adamw", "lr": 0.003, "grad_clip": 0.5, "warmup_steps": 2},
    "train": {"steps": 12, "seed": 7, "deterministic": True, "eval_batches": 0, "log_interval": 100},
    "checkpoint": {"interval": 4},
    "data": {"type": "synthetic"},
}
for setting in sys.argv[1:]:
    key, value = setting.split("=", 1)
    section, name = key.split(".", 1)
    config.setdefault(section, {})[name] = json.loads(value)
print(json.dumps(config, indent=2))
PY
}
