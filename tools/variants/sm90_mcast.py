# tools/gpu_variants.sh spec: the wgmma family's paged prefill without the multicast pair (every
# CTA issues all of a tile's K / V boxes itself, no cluster launch), and with it on every shape
# the boxes allow (every head size, any query length).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
ON = "p.pages_per_tile >= 2 && D == 128 &&\n                      a->max_seqlen_q >= kMcastMinRows &&"
VARIANTS = {
    "nomcast": [(S, ON, "false &&")],
    "mcastall": [(S, ON, "p.pages_per_tile >= 2 &&\n                     ")],
}
