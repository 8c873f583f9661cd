# tools/gpu_variants.sh spec: the wgmma family's dynamic persistent grid (one CTA an SM taking
# work items longest first from fa_attn_args.work_counters). The tree's default is
# FA_CUDA_PERSIST_AUTO (the grid where max_seqlen_q <= FA_CUDA_PERSIST_AUTO_ROWS); the variants
# set the backend's default to always (on) and never (off). bench_gpu's paged prefill rows go
# through fa_forward (the builder's counters), its dense rows give the op a zeroed set of their
# own; `bench_gpu --persist on|off|auto` sets it in one build too.
S = "backends/cuda/fa_cuda.cu"
VARIANTS = {
    "on": [(S, "    c->persist = FA_CUDA_PERSIST_AUTO;\n", "    c->persist = FA_CUDA_PERSIST_ON;\n")],
    "off": [(S, "    c->persist = FA_CUDA_PERSIST_AUTO;\n", "    c->persist = FA_CUDA_PERSIST_OFF;\n")],
}
