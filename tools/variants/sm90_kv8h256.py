# tools/gpu_variants.sh spec: the wgmma family's KV8 kernels (a bf16 / f16 query over an fp8 E4M3 /
# E5M2 cache) at head 256, built in the tree behind sm90_attention.cu's kKv8Head256 (off: those
# calls run in the mma.sync family; not yet run on a GPU). "on" turns the gate on: fa_sm90__accepts
# then takes head-256 fp8 caches (block sizes a TMA box serves at head 256, or dense K/V) and the
# kernels are instantiated (64-key tiles, 2 converted stages and 1 raw stage).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
GATE = "constexpr bool kKv8Head256 = false;\n"
VARIANTS = {
    "on": [(S, GATE, GATE.replace("false", "true"))],
}
