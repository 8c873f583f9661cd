# tools/gpu_variants.sh spec: the ring depth of the plain 16-bit kernel at head 128 (the dense
# prototype runs 2 stages, the library 3)
K = "backends/cuda/attention/sm90/sm90_attention.cu"
VARIANTS = {
    "st2": [(K, "return d == 256 ? 2 : (d == 128 ? 3 : 4);", "return d == 256 ? 2 : (d == 128 ? 2 : 4);")],
}
