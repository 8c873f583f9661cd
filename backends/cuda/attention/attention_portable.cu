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
static_assert(kGroup >= FA_WARP_SIZE || FA_WARP_SIZE % kGroup == 0, "FA_PORTABLE_GROUP and the warp size must nest");
constexpr int kDims[] = {64, 128, 256};

bool aligned(const void *ptr, uintptr_t n) { return (reinterpret_cast<uintptr_t>(ptr) % n) == 0; }

// Every check of the op (the structural ones, then what this kernel needs); fills *p.
fa_status prepare(const fa_attn_args *a, fa_portable::Params *p, bool *empty, const fa_bu_err *e) {
    char n1[FA_BU_NAME_BUF];
    *empty = true;
    FA_BU_TRY(fa_bu_check_attention(e, a, fa_portable::kBlockSizeMultiple));
    if (a->q_dtype != FA_DTYPE_F16 && a->q_dtype != FA_DTYPE_BF16)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "q_dtype %s: the portable kernel takes f16 or bf16",
                          fa_bu_dtype_name(a->q_dtype, n1));
    if (fa_portable::padded_dim(a->head_size) == 0)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "head_size %d > 256", a->head_size);
    if (a->num_splits > fa_portable::kMaxSplits)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "num_splits %d > %d", a->num_splits, fa_portable::kMaxSplits);
    if (a->num_tokens == 0 || a->num_seqs == 0) return FA_OK;
    const int G = a->num_heads_q / a->num_heads_kv;
    if ((int64_t)a->num_tokens * G > 0x7fff0000LL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "num_tokens %d x %d query heads per KV head exceeds 2^31 rows",
                          a->num_tokens, G);
    if (a->max_seqlen_q <= 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "max_seqlen_q %d must be > 0 for a non-empty call", a->max_seqlen_q);
    const bool fp8 = a->kv_dtype != a->q_dtype;
    if (!aligned(a->q, 16) || a->q_token_stride % 8 || a->q_head_stride % 8 || a->q_group_stride % 8)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "q must be 16-byte aligned with strides multiple of 8 elements (q %p, strides %lld/%lld/%lld)",
                          a->q, (long long)a->q_token_stride, (long long)a->q_head_stride, (long long)a->q_group_stride);
    if (!aligned(a->out, 16) || a->out_token_stride % 8 || a->out_head_stride % 8)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "out must be 16-byte aligned with strides multiple of 8 elements (out %p, strides %lld/%lld)",
                          a->out, (long long)a->out_token_stride, (long long)a->out_head_stride);
    const int64_t kv_strides[6] = {a->k_block_stride, a->k_row_stride, a->k_head_stride,
                                   a->v_block_stride, a->v_row_stride, a->v_head_stride};
    static const char *const kv_names[6] = {"k_block_stride", "k_row_stride", "k_head_stride",
                                            "v_block_stride", "v_row_stride", "v_head_stride"};
    const bool paged = a->cu_seqlens_k == nullptr;
    for (int i = 0; i < 6; ++i) {
        if (!paged && (i == 0 || i == 3)) continue;   // dense: no block strides
        if (kv_strides[i] % 8)
            return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "K/V strides must be multiples of 8 elements (%s = %lld)",
                              kv_names[i], (long long)kv_strides[i]);
    }
    if (!aligned(a->k, fp8 ? 8 : 16) || !aligned(a->v, fp8 ? 8 : 16))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "k and v must be %d-byte aligned (k %p, v %p)", fp8 ? 8 : 16, a->k, a->v);
    if (a->num_splits > 1 && (!aligned(a->split_out, 8)))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "split_out must be 8-byte aligned (%p)", (void *)a->split_out);

    memset(p, 0, sizeof *p);
    p->q = a->q;
    p->q_token_stride = a->q_token_stride;
    p->q_head_stride = a->q_head_stride;
    p->q_group_stride = a->q_group_stride;
    p->q_head_group = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    p->k = a->k;
    p->v = a->v;
    p->k_block_stride = a->k_block_stride;
    p->k_row_stride = a->k_row_stride;
    p->k_head_stride = a->k_head_stride;
    p->v_block_stride = a->v_block_stride;
    p->v_row_stride = a->v_row_stride;
    p->v_head_stride = a->v_head_stride;
    p->out = a->out;
    p->out_token_stride = a->out_token_stride;
    p->out_head_stride = a->out_head_stride;
    p->lse = a->lse;
    p->lse_head_stride = a->lse_head_stride;
    p->cu_seqlens_q = a->cu_seqlens_q;
    p->seqused_k = paged ? a->seqused_k : nullptr;
    p->cu_seqlens_k = a->cu_seqlens_k;
    p->block_table = a->block_table;
    p->block_table_stride = a->block_table_stride;
    p->num_blocks = a->num_blocks;
    p->num_seqs = a->num_seqs;
    p->num_tokens = a->num_tokens;
    p->num_heads_q = a->num_heads_q;
    p->num_heads_kv = a->num_heads_kv;
    p->head_size = a->head_size;
    p->block_size = a->block_size;
    p->softmax_scale = a->softmax_scale;
    p->softcap = a->softcap;
    p->window_left = a->window_left;
    p->window_right = a->causal ? 0 : a->window_right;
    p->alibi_slopes = a->alibi_slopes;
    p->alibi_batch_stride = a->alibi_batch_stride;
    p->sinks = a->sinks;
    p->k_descale = a->k_descale;
    p->v_descale = a->v_descale;
    p->descale_batch_stride = a->descale_batch_stride;
    p->descale_head_stride = a->descale_head_stride;
    p->k_scale = a->k_scale;
    p->v_scale = a->v_scale;
    p->kv_e5m2 = a->kv_dtype == FA_DTYPE_FP8_E5M2;
    p->num_splits = a->num_splits > 1 ? a->num_splits : 1;
    p->split_plan = a->split_plan;
    p->split_out = a->split_out;
    p->split_lse = a->split_lse;
    *empty = false;
    return FA_OK;
}

template <int D>
cudaError_t dispatch_dtypes(const fa_attn_args *a, const fa_portable::Params &p, cudaStream_t s) {
    const bool fp8 = a->kv_dtype != a->q_dtype;
    if (a->q_dtype == FA_DTYPE_BF16)
        return fp8 ? fa_portable::launch<D, fa_portable::BF16, fa_portable::KV_FP8, kGroup>(p, a->max_seqlen_q, s)
                   : fa_portable::launch<D, fa_portable::BF16, fa_portable::KV_SAME, kGroup>(p, a->max_seqlen_q, s);
    return fp8 ? fa_portable::launch<D, fa_portable::F16, fa_portable::KV_FP8, kGroup>(p, a->max_seqlen_q, s)
               : fa_portable::launch<D, fa_portable::F16, fa_portable::KV_SAME, kGroup>(p, a->max_seqlen_q, s);
}

}  // namespace

fa_status fa_cuda__attention_check(const fa_attn_args *a, const fa_device_info *info, char *err, size_t err_size) {
    (void)info;
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    fa_portable::Params p;
    bool empty;
    return prepare(a, &p, &empty, &e);
}

fa_status fa_cuda__attention(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    fa_portable::Params p;
    bool empty;
    FA_BU_TRY(prepare(a, &p, &empty, &e));
    if (empty) return FA_OK;
    p.err_word = L->err_word;
    cudaError_t ce;
    switch (fa_portable::padded_dim(a->head_size)) {
    case 64: ce = dispatch_dtypes<64>(a, p, L->stream); break;
    case 128: ce = dispatch_dtypes<128>(a, p, L->stream); break;
    default: ce = dispatch_dtypes<256>(a, p, L->stream); break;
    }
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
void fa_cuda__attention_caps(fa_backend_caps *caps) {
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
        case 64: k->decode_ctas_per_sm = fa_portable::ctas_per_sm<64, fa_portable::BF16, fa_portable::KV_SAME, kGroup>(); break;
        case 128: k->decode_ctas_per_sm = fa_portable::ctas_per_sm<128, fa_portable::BF16, fa_portable::KV_SAME, kGroup>(); break;
        default: k->decode_ctas_per_sm = fa_portable::ctas_per_sm<256, fa_portable::BF16, fa_portable::KV_SAME, kGroup>(); break;
        }
    }
    caps->act_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->cache_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_FP8_E4M3) |
                         (1u << FA_DTYPE_FP8_E5M2);
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
