# tools/gpu_variants.sh spec: the three switches of the wgmma family's fp8 paths (on in the tree
# since 2026-12-06), turned off for an A/B against the tree:
#   h256    kKv8Head256 off: an fp8 cache under a 16-bit query at head 256 back to mma.sync
#   gather  kKv8Gather off: an fp8 cache at the block sizes no TMA box serves back to mma.sync
#   q8      kQ8Gather off: the fp8 query at those block sizes refused (FA_ERR_UNSUPPORTED), and
#           test_gpu_fp8q's FP8Q_GATHER with it (its "gather" cases then expect the refusal)
#   all     the three
# e.g. FA_PF_SPEC=tools/variants/sm90_kv8gates.py FA_VAR_ONLY="h256 gather" bash tools/gpu_prefill.sh
# variants (bench_gpu's kv=fp8 rows at --dim 256 and at --block 3 side by side).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
T = "tests/gpu/test_gpu_fp8q.c"


def _off(name):
    gate = "constexpr bool %s = true;\n" % name
    return (S, gate, gate.replace("true", "false"))


H256 = [_off("kKv8Head256")]
GATHER = [_off("kKv8Gather")]
Q8 = [_off("kQ8Gather"), (T, "#define FP8Q_GATHER 1\n", "#define FP8Q_GATHER 0\n")]
VARIANTS = {"h256": H256, "gather": GATHER, "q8": Q8, "all": H256 + GATHER + Q8}
