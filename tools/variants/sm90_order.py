# tools/gpu_variants.sh spec: the wgmma family's order of work items against the tree (heads
# innermost: one longest-first list across every head): "hout" is heads outermost (each head's
# row blocks longest-first, head after head: the order before).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
INNER = """        const int hp = p.num_heads_q / static_cast<int>(mc); // head pairs (heads without the pair)
        const int rest = pw / hp;
        const int tile = p.items_x - 1 - rest / S;
        I.split = rest % S;
        I.h = pw % hp * static_cast<int>(mc) + w % static_cast<int>(mc);
"""
OUTER = """        const int tile = p.items_x - 1 - pw % p.items_x;
        const int rest = pw / p.items_x;
        I.split = rest % S;
        I.h = rest / S * static_cast<int>(mc) + w % static_cast<int>(mc);
"""
VARIANTS = {
    "hout": [(S, INNER, OUTER)],
}
