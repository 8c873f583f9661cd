# tools/gpu_variants.sh spec: the wgmma family's fp8 query (e4m3 q, k, v) at the block sizes no
# TMA box serves (1, 3, 24, 48, ...: p.gather), built in the tree behind sm90_attention.cu's
# kQ8Gather (off: those calls are rejected with FA_ERR_UNSUPPORTED; not yet run on a GPU). "on"
# turns the gate on and test_gpu_fp8q's FP8Q_GATHER with it (its "gather" cases then run against
# the reference instead of expecting the rejection): gather_producer copies the e4m3 rows by
# cp.async in the boxes' layout and each tile's V is transposed as a box's is.
S = "backends/cuda/attention/sm90/sm90_attention.cu"
T = "tests/gpu/test_gpu_fp8q.c"
GATE = "constexpr bool kQ8Gather = false;\n"
TEST = "#define FP8Q_GATHER 0\n"
VARIANTS = {
    "on": [(S, GATE, GATE.replace("false", "true")), (T, TEST, TEST.replace("0", "1"))],
}
