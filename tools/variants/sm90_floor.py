# tools/gpu_variants.sh spec: what the plain 16-bit wgmma kernel's long causal rows (head 128,
# 1 x 16384 / 4 x 4096) spend beside the dense prototype's loop. Each variant changes one thing:
#   persist   the dynamic persistent grid on every call (fa_cuda_backend_set_persistent's default)
#   regs24    the register split of the dense prototype: 24 producer / 240 consumer (from 40 / 232)
#   noexact   the softmax's difference-form fallback compiled out (the FFMA form on every tile;
#             WRONG at logits of 2^22+ in log2 units: a measurement of its code's cost only)
#   nopp      no ping-pong turns between the two consumer warpgroups
S = "backends/cuda/fa_cuda.cu"
K = "backends/cuda/attention/sm90/sm90_attention.cu"
T = "backends/cuda/attention/sm90/sm90_tile.cuh"
VARIANTS = {
    "persist": [(S, "    c->persist = FA_CUDA_PERSIST_AUTO;\n", "    c->persist = FA_CUDA_PERSIST_ON;\n")],
    "regs24": [(K, "constexpr int kLibProducerRegs = 40;", "constexpr int kLibProducerRegs = 24;"),
               (K, "constexpr int kLibConsumerRegs = 232;", "constexpr int kLibConsumerRegs = 240;")],
    "noexact": [(T, "fused = sl2 > 0.f && fabsf(u0) < 4194304.f && fabsf(u1) < 4194304.f;",
                 "fused = true; (void)u0; (void)u1;")],
    "nopp": [(T, "{ named_bar_sync(1 + cw, 256); }", "{ (void)cw; }"),
             (T, "if (!(last && cw == 1)) named_bar_arrive(2 - cw, 256);", "(void)cw; (void)last;"),
             (T, "if (cw == 1 && any_tile) named_bar_arrive(1, 256);", "(void)cw; (void)any_tile;")],
}
