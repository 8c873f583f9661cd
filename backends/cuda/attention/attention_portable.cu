// attention_portable.cu - the attention op of the HIP backend (and of the HIP-on-NVIDIA build):
// checks, dispatch onto the portable kernel (attention_portable.cuh), and the capability block.
// Same contract as attention.cu (fa_cuda_internal.cuh): fa_cuda__attention_check,
// fa_cuda__attention, fa_cuda__attention_caps. A build compiles exactly one of the two files.
//
// FA_PORTABLE_GROUP: lanes of a group (default FA_WARP_SIZE: 64 on CDNA, 32 on NVIDIA). The
// HIP-on-NVIDIA build sets 64, so that the whole GPU suite runs the wave-64 logic on NVIDIA.
// Compiled widths: 64, 128, 256 (head sizes that are multiples of 8 up to 256, padded).
#include "attention_portable.cuh"

#include <string.h>

#ifndef FA_PORTABLE_GROUP
#define FA_PORTABLE_GROUP FA_WARP_SIZE
#endif  // FA_PORTABLE_GROUP

namespace {

constexpr int kGroup = FA_PORTABLE_GROUP;
static_assert(kGroup == 32 || kGroup == 64, "FA_PORTABLE_GROUP must be 32 or 64");
static_assert(kGroup >= FA_WARP_SIZE || FA_WARP_SIZE % kGroup == 0,
              "FA_PORTABLE_GROUP and the warp size must nest");
constexpr int kDims[] = {64, 128, 256};

}  // namespace

fa_status fa_cuda__attention_check(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    (void)L;
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    fa_portable::Params p;
    bool empty;
    return fa_portable::prepare(a, &p, &empty, &e);
}

fa_status fa_cuda__attention(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    fa_portable::Params p;
    bool empty;
    FA_BU_TRY(fa_portable::prepare(a, &p, &empty, &e));
    if (empty) return FA_OK;
    p.err_word = L->err_word;
    const cudaError_t ce = fa_portable::run<kGroup>(a, p, L->stream);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return fa_bu_fail(&e, FA_ERR_BACKEND, "portable kernel launch failed: %s", cudaGetErrorString(ce));
    }
    return FA_OK;
}

// The portable kernel's tile facts. One tile shape serves prefill and decode: a call whose
// max_q x (Hq / Hkv) fits the BM rows runs one CTA per (sequence, KV head, split), which is
// what the planner's decode rule assumes. Step time: a first estimate (plain FMA over a BN-key
// tile, about 4x the CUDA decode tile's 1.6 us at head 128), not a measurement on AMD.
void fa_cuda__attention_caps(fa_backend_caps *caps, int) {
    caps->num_dims = 0;
    for (int i = 0; i < 3 && caps->num_dims < FA_MAX_KERNEL_DIMS; ++i) {
        const int dim = kDims[i];
        fa_kernel_dim *k = &caps->dims[caps->num_dims++];
        memset(k, 0, sizeof(*k));
        k->head_dim = dim;
        k->prefill_tile_m = fa_portable::kRows;
        k->prefill_tile_n = fa_portable::tile_keys(dim);
        k->decode_tile_n = fa_portable::tile_keys(dim);
        k->decode_step_us = 6.4 * dim / 128.0 * fa_portable::tile_keys(dim) / 32.0;
        switch (dim) {
        case 64:
            k->decode_ctas_per_sm =
                fa_portable::ctas_per_sm<64, fa_portable::BF16, fa_portable::KV_SAME, kGroup>();
            break;
        case 128:
            k->decode_ctas_per_sm =
                fa_portable::ctas_per_sm<128, fa_portable::BF16, fa_portable::KV_SAME, kGroup>();
            break;
        default:
            k->decode_ctas_per_sm =
                fa_portable::ctas_per_sm<256, fa_portable::BF16, fa_portable::KV_SAME, kGroup>();
            break;
        }
    }
    caps->act_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->cache_dtypes =
        (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_FP8_E4M3) | (1u << FA_DTYPE_FP8_E5M2);
    caps->block_size_multiple = fa_portable::kBlockSizeMultiple;
    caps->head_size_multiple = fa_portable::kHeadSizeMultiple;
    caps->decode_max_rows = fa_portable::kRows;
    caps->max_splits = fa_portable::kMaxSplits;
    caps->align_bytes = fa_portable::kAlignBytes;
    caps->sm_bytes_per_us = 32.0 * 1024.0;
    caps->cta_us = 0.008;
    caps->combine_us = 6.0;
    caps->combine_us_per_split = 0.2;
}
