# tools/gpu_variants.sh spec: the wgmma family's KV8 kernels (a bf16 / f16 query over an fp8 E4M3 /
# E5M2 cache) at the block sizes no TMA box serves (1, 3, 24, 48, ...: p.gather), built in the
# tree behind sm90_attention.cu's kKv8Gather (off: those calls run in the mma.sync family; not yet
# run on a GPU). "on" turns the gate on: fa_sm90__accepts then takes fp8 caches at any block size
# at heads 64 / 128 (256 only with kKv8Head256 as well: tools/variants/sm90_kv8h256.py), and the
# 128 producer threads copy each tile's raw K / V rows by cp.async into the raw ring that
# convert_kv8 reads.
S = "backends/cuda/attention/sm90/sm90_attention.cu"
GATE = "constexpr bool kKv8Gather = false;\n"
VARIANTS = {
    "on": [(S, GATE, GATE.replace("false", "true"))],
}
