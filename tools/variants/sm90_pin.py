# tools/gpu_variants.sh spec: the P V wait after the softmax (sm90_attention.cu). The tree pins it
# after the row sums (wgmma_wait_group_after); the variants:
#   nopin    a plain wgmma_wait_group<0> there (ptxas hoisted it above the exponents)
#   old      nopin with the softmax's two exponent loops of before (tools/variants/sm90_exp.py dup)
import runpy, os
K = "backends/cuda/attention/sm90/sm90_attention.cu"
PIN = ("""                // P(i-1) V(i-1) done: O and pa may be touched again (the wait pinned after the
                // row sums, so that the exponents run under P V)
                wgmma_wait_group_after<0>(lrow0 + lrow1);""",
       """                wgmma_wait_group<0>(); // P(i-1) V(i-1) done: O and pa may be touched again""")
DUP = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sm90_exp.py"))["VARIANTS"]["dup"]
VARIANTS = {
    "nopin": [(K,) + PIN],
    "old": [(K,) + PIN] + DUP,
}
