# tools/gpu_variants.sh spec: the wgmma family's paged prefill without the multicast pair (every
# CTA issues all of a tile's K / V boxes itself, no cluster launch).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
ON = "(qg / a->num_heads_kv) % 2 == 0 ? 2 : 1;"
VARIANTS = {
    "nomcast": [(S, ON, ON.replace("? 2 : 1", "? 1 : 1"))],
}
