# tools/gpu_variants.sh spec: the P V wait after the softmax (sm90_attention.cu). ptxas hoists the
# tree's plain wgmma_wait_group<0> above the softmax's exponents (they run after the P V wait, not
# under it: tools/sass_overlap.py on the SASS); the variants:
#   pin      the wait in a branch on the row sums (both arms wait), which keeps it after them: the
#            exponents under P V (2026-12-06 10:13, H100: no faster, the 1 x 16384 rows 1.00-1.02x
#            the plain wait's time)
#   oldexp   the softmax's two exponent loops of before (tools/variants/sm90_exp.py dup)
import os
import runpy
K = "backends/cuda/attention/sm90/sm90_attention.cu"
P = "backends/cuda/attention/sm90/sm90_ptx.cuh"
FN = """// wgmma.wait_group N once `dep` is computed: the wait sits in a branch on dep's value (both arms
// wait; their asm texts differ, so that they are not merged back into one unconditional wait),
// so that ptxas cannot schedule it above the instructions dep depends on.
template <int N> __device__ __forceinline__ void wgmma_wait_group_after(float dep) {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group: 0..7");
    if (dep >= 0.f)
        asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
    else
        asm volatile("wgmma.wait_group.sync.aligned %0; // dep < 0 or NaN" ::"n"(N) : "memory");
}"""
ANCHOR = "// Keeps the compiler from moving reads/writes of accumulator registers across a wgmma sequence"
WAIT = "                wgmma_wait_group<0>(); // P(i-1) V(i-1) done: O and pa may be touched again"
DUP = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sm90_exp.py"))["VARIANTS"]["dup"]
VARIANTS = {
    "pin": [(P, ANCHOR, FN + "\n" + ANCHOR),
            (K, WAIT, "                wgmma_wait_group_after<0>(lrow0 + lrow1); // P(i-1) V(i-1) done")],
    "oldexp": DUP,
}
