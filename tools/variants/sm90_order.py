# tools/gpu_variants.sh spec: the wgmma family's order of work items against the tree (heads
# outermost for a call of one sequence, heads innermost otherwise; p.heads_outer): "hout" heads
# outermost on every call (each head's row blocks longest-first, head after head), "hin" heads
# innermost on every call (one longest-first list across every head).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
SEL = "    p.heads_outer = a->num_seqs == 1 ? 1 : 0;\n"
VARIANTS = {
    "hout": [(S, SEL, "    p.heads_outer = 1;\n")],
    "hin": [(S, SEL, "    p.heads_outer = 0;\n")],
}
