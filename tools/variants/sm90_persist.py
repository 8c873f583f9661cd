# tools/gpu_variants.sh spec: the wgmma family's dynamic persistent grid (one CTA an SM taking
# work items from fa_attn_args.work_counters, longest first) on, against the tree (one CTA an
# item). bench_gpu's prefill rows go through fa_forward, which passes the builder's counters.
S = "backends/cuda/attention/sm90/sm90_attention.cu"
VARIANTS = {
    "persist": [(S, "constexpr bool kPersistOn = false;\n", "constexpr bool kPersistOn = true;\n")],
}
