# tools/gpu_variants.sh spec: the wgmma family's paged prefill with the multicast pair (a cluster
# of two CTAs, query heads 2k and 2k + 1 of one KV head, each box multicast to both; off in the
# tree, kMcastOn) where it was built for (head 128, queries of 4096+ rows), and on every shape
# the boxes allow (every head size, any query length).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
OFF = "    constexpr bool kMcastOn = false;\n"
ON = "p.pages_per_tile >= 2 && D == 128 &&\n                      a->max_seqlen_q >= kMcastMinRows &&"
VARIANTS = {
    "mcast": [(S, OFF, OFF.replace("false", "true"))],
    "mcastall": [(S, OFF, OFF.replace("false", "true")), (S, ON, "p.pages_per_tile >= 2 &&\n                     ")],
}
