# tools/gpu_variants.sh spec: the wgmma family's dynamic persistent grid (one CTA an SM taking
# work items longest first from fa_attn_args.work_counters) on by default in the CUDA backend,
# against the tree (one CTA an item). bench_gpu's paged prefill rows go through fa_forward (the
# builder's counters), its dense rows give the op a zeroed set of their own; `bench_gpu
# --persist` turns it on in one build too.
S = "backends/cuda/fa_cuda.cu"
VARIANTS = {
    "persist": [(S, "    c->persist = 0;\n", "    c->persist = 1;\n")],
}
