# Sourced by the scripts beside it: the `cleave train --set` keys of the peer comparison's models, as
# benchmarks/peers/cpu_train_bench.py builds them (small: the peer GPT d 256, 4 layers, T 64, batch 16; large: d 512,
# 8 layers, T 128, batch 16; llama: the Llama example's model, batch 16 in 2 micro-batches), into the array `args`;
# vocab 256 and the run keys are the caller's.
peer_model_args() {
  case $1 in
    small) args=(model.type=gpt model.d_model=256 model.n_layers=4 model.n_heads=8 model.seq_len=64
                 batch.global_batch_size=16 batch.micro_batch_size=16) ;;
    large) args=(model.type=gpt model.d_model=512 model.n_layers=8 model.n_heads=8 model.seq_len=128
                 batch.global_batch_size=16 batch.micro_batch_size=16) ;;
    llama) args=(model.type=llama model.d_model=128 model.n_layers=4 model.n_heads=4 model.n_kv_heads=2
                 model.tie_embeddings=false model.seq_len=64 batch.global_batch_size=16 batch.micro_batch_size=8) ;;
    *) echo "model must be small, large or llama, got '$1'" >&2; return 2 ;;
  esac
}
