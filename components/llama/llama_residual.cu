// llama_residual: the residual stream as an operand (llama_residual.toml). Nothing to compute: its port hands
// the operand itself to the o-projection, which reads it after its own grid barrier.
extern "C" __device__ void llama_residual(pl_ctx, pl_bind_llama_residual) {}
