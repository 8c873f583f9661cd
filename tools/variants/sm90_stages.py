# tools/gpu_variants.sh spec: the wgmma family's K / V ring depth (sm90_attention.cu lib_stages,
# fp8_stages), each variant against the tree (4 / 3 / 2 stages at heads 64 / 128 / 256; the fp8
# query 4 / 3 / 4): "st2" is the two-stage ring everywhere (the ring before), "h128s2" 2 stages
# at head 128 only (the dense prototype's depth; 2026-12-06 10:07), "h64s3" 3 stages at head 64,
# "fp8s4" 4 stages for the fp8 query at head 128, "gather16" block 16 through the cp.async
# producer instead of TMA boxes, "q8gather" the fp8 query at blocks 8 and 16 through the
# cp.async producer (at block 3 it ran at 0.95 of the boxes' time at block 16: 2026-12-06 13:58).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
STAGES = "__host__ __device__ constexpr int lib_stages(int d) { return d == 256 ? 2 : (d == 128 ? 3 : 4); }"
FP8 = "__host__ __device__ constexpr int fp8_stages(int d) { return d == 128 ? 3 : 4; }"
VARIANTS = {
    "st2": [(S, STAGES, STAGES.replace("return d == 256 ? 2 : (d == 128 ? 3 : 4);", "return (void)d, 2;")),
            (S, FP8, FP8.replace("return d == 128 ? 3 : 4;", "return (void)d, 2;"))],
    "h128s2": [(S, STAGES, STAGES.replace("(d == 128 ? 3 : 4)", "(d == 128 ? 2 : 4)"))],
    "h64s3": [(S, STAGES, STAGES.replace("(d == 128 ? 3 : 4)", "3"))],
    "fp8s4": [(S, FP8, FP8.replace("d == 128 ? 3 : 4", "(void)d, 4"))],
    "gather16": [(S, "    p.gather = !dense && !block_on(a->block_size, D) ? 1 : 0;\n",
                  "    p.gather = !dense && ((!q8 && a->block_size == 16) || !block_on(a->block_size, D)) ? 1 : 0;\n")],
    "q8gather": [(S, "    p.gather = !dense && !block_on(a->block_size, D) ? 1 : 0;\n",
                  "    p.gather = !dense && ((q8 && a->block_size <= 16) || !block_on(a->block_size, D)) ? 1 : 0;\n")],
}
