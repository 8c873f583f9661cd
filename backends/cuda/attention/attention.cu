// attention.cu - fa_cuda__attention: argument checks, dispatch to the compiled instances
// (head dim x q dtype x KV kind), launch, and the split-KV combine kernel.
//
// Compiled head dims: -DFA_ATTN_HD_<d> for each kept width (meson.build passes them from the
// head_dims option, with -DFA_ATTN_HEAD_DIMS_SET); without FA_ATTN_HEAD_DIMS_SET every width of
// gen_instances.py's HEAD_DIMS is assumed. The per-width lists (kCompiledDims, the dispatch
// arms) come from dispatch_generated.h, which gen_instances.py writes from HEAD_DIMS.
#define FA_ATTN_DECLS_ONLY
#include "attention_kernel.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dispatch_generated.h"   // per-width lists, from gen_instances.py's HEAD_DIMS
#include "fa_cuda.h"   // fa_cuda_persist

#ifndef FA_CUDA_HAVE_SM90
#define FA_CUDA_HAVE_SM90 0   // meson: 1 when gpu_arch has sm_90a (sm90/sm90_attention.cu is built)
#endif

namespace {

// Compiled widths, ascending, 0-terminated.
const int kCompiledDims[] = FA_ATTN_COMPILED_DIMS_INIT;

// Smallest compiled width >= head_size, 0 if none.
int padded_dim(int head_size) {
    for (int i = 0; kCompiledDims[i] != 0; ++i) {
        if (kCompiledDims[i] >= head_size) return kCompiledDims[i];
    }
    return 0;
}

void compiled_dims_string(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; kCompiledDims[i] != 0 && len + 8 < n; ++i) {
        len += static_cast<size_t>(snprintf(buf + len, n - len, i ? ",%d" : "%d", kCompiledDims[i]));
    }
    if (kCompiledDims[0] == 0) snprintf(buf, n, "none");
}

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

#if !defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------------------------------------
// Split-KV combine: one warp per (token, head) of the sequences with more than one split.
// L = M + ln sum_s exp(L_s - M) (M := 0 when every L_s is -inf), O = sum_s exp(L_s - L) O_s.

__device__ __forceinline__ void store4(__half *dst, float a, float b, float c, float d) {
    __half2 v[2] = {__floats2half2_rn(a, b), __floats2half2_rn(c, d)};
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(v);
}

__device__ __forceinline__ void store4(__nv_bfloat16 *dst, float a, float b, float c, float d) {
    __nv_bfloat162 v[2] = {__floats2bfloat162_rn(a, b), __floats2bfloat162_rn(c, d)};
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(v);
}

template <typename QT>
__global__ void __launch_bounds__(128) combine_kernel(const __grid_constant__ fa_attn::Params p) {
    const int lane = threadIdx.x & 31;
    const int64_t pair = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
    if (pair >= static_cast<int64_t>(p.num_tokens) * p.num_heads_q) return;
    const int tok = static_cast<int>(pair / p.num_heads_q);
    const int h = static_cast<int>(pair % p.num_heads_q);
    // sequence of the token: the last b with cu_q[b] <= tok
    int lo = 0, hi = p.num_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.cu_seqlens_q[mid] <= tok)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int b = lo;
    if (tok < p.cu_seqlens_q[b] || tok >= p.cu_seqlens_q[b + 1]) return;   // padding token
    int ns = p.num_splits;
    if (p.split_plan != nullptr) ns = min(p.split_plan[1 + b], ns);
    if (ns <= 1) return;   // 0: no work; 1: the kernel wrote out directly

    // launched as a programmatic dependent of the kernel before it (sm_90+): the partials are read
    // only once that grid has finished and its writes are visible
    fa_attn::grid_dependency_wait();
    const int64_t lse_stride = static_cast<int64_t>(p.num_heads_q) * p.num_tokens;
    const float *ls = p.split_lse + static_cast<int64_t>(h) * p.num_tokens + tok;
    // each lane owns float4 chunks c = lane and lane + 32 of the row (head_size <= 256)
    const int nchunk = p.head_size / 4;
    const int64_t ostride = static_cast<int64_t>(p.num_tokens) * p.num_heads_q * p.head_size;
    const float *os = p.split_out + (static_cast<int64_t>(tok) * p.num_heads_q + h) * p.head_size;
    // batches of CB splits: every read of a batch is issued before the first is used (the
    // partial rows were just written and sit in L2; a read per round trip made the combine of
    // a 64-split request ~latency x 64). The first batch goes out with the first 32 LSEs, before
    // any weight is known (every split below ns wrote its row: an empty one zeros and -inf).
    // Accumulation order: s ascending, as one loop would.
    constexpr int CB = 16; // 16 splits (the planner's count at 1 x 8k..32k) in one round trip
    float4 v0[CB], v1[CB];
    auto load = [&](int s, int cnt) { // splits s .. s + CB - 1 that are below cnt
#pragma unroll
        for (int j = 0; j < CB; ++j) {
            const float *src = os + static_cast<int64_t>(s + j) * ostride;
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            const bool in = s + j < cnt;
            v0[j] = in && lane < nchunk ? *reinterpret_cast<const float4 *>(src + lane * 4) : z;
            v1[j] = in && lane + 32 < nchunk ? *reinterpret_cast<const float4 *>(src + (lane + 32) * 4) : z;
        }
    };
    const float l0 = lane < ns ? ls[lane * lse_stride] : -INFINITY;
    load(0, ns);
    float M = l0;
    for (int s = 32 + lane; s < ns; s += 32) M = fmaxf(M, ls[s * lse_stride]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float Muse = M == -INFINITY ? 0.f : M;
    float sum = lane < ns ? expf(l0 - Muse) : 0.f;
    for (int s = 32 + lane; s < ns; s += 32) sum += expf(ls[s * lse_stride] - Muse);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float L = sum == 0.f ? -INFINITY : Muse + logf(sum);

    float4 acc0 = make_float4(0.f, 0.f, 0.f, 0.f), acc1 = acc0;
    for (int s0 = 0; s0 < ns; s0 += 32) {
        const int sl = s0 + lane;
        const float lsl = s0 == 0 ? l0 : (sl < ns ? ls[sl * lse_stride] : -INFINITY);
        const float wl = (sl < ns && L != -INFINITY) ? expf(lsl - L) : 0.f;
        const int cnt = min(32, ns - s0);
        for (int k0 = 0; k0 < cnt; k0 += CB) {
            if (s0 + k0 > 0) load(s0 + k0, ns);
            float w[CB];
#pragma unroll
            for (int j = 0; j < CB; ++j) {
                const float wj = __shfl_sync(0xffffffffu, wl, (k0 + j) & 31);
                w[j] = k0 + j < cnt ? wj : 0.f;   // 0: past the last split, or an empty split
            }
#pragma unroll
            for (int j = 0; j < CB; ++j) {
                if (w[j] == 0.f) continue;   // empty split (its O is 0): nothing added
                acc0.x += w[j] * v0[j].x;
                acc0.y += w[j] * v0[j].y;
                acc0.z += w[j] * v0[j].z;
                acc0.w += w[j] * v0[j].w;
                acc1.x += w[j] * v1[j].x;
                acc1.y += w[j] * v1[j].y;
                acc1.z += w[j] * v1[j].z;
                acc1.w += w[j] * v1[j].w;
            }
        }
    }
    QT *dst = static_cast<QT *>(p.out) + static_cast<int64_t>(tok) * p.out_token_stride +
              static_cast<int64_t>(h) * p.out_head_stride;
    if (lane < nchunk) store4(dst + lane * 4, acc0.x, acc0.y, acc0.z, acc0.w);
    if (lane + 32 < nchunk) store4(dst + (lane + 32) * 4, acc1.x, acc1.y, acc1.z, acc1.w);
    if (lane == 0 && p.lse != nullptr) p.lse[static_cast<int64_t>(h) * p.lse_head_stride + tok] = L;
}

// The combine right behind the kernel that wrote the partials; on sm_90+ as its programmatic
// dependent (CUDA Programming Guide, "Programmatic Dependent Launch"): the combine's CTAs launch
// while that kernel's last CTAs run and wait in grid_dependency_wait, which hides a launch.
template <typename QT>
cudaError_t launch_combine(const fa_attn::Params &p, int64_t blocks, bool pdl, cudaStream_t stream) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks), 1, 1);
    cfg.blockDim = dim3(128, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, combine_kernel<QT>, p);
}

// ---------------------------------------------------------------------------------------------
// Dispatch: runtime values -> template arguments; the default arm reports what is missing.

#define FA_ATTN_DISPATCH_HEAD_DIM(dim, DIM, ...) \
    switch (dim) { \
        FA_ATTN_ARMS(DIM, __VA_ARGS__) \
    default: return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "unsupported head_dim: %d", dim); \
    }

#define FA_ATTN_DISPATCH_Q_DTYPE(dtype, QT, ...) \
    switch (dtype) { \
    case FA_DTYPE_F16: { \
        using QT = __half; \
        __VA_ARGS__ \
    } break; \
    case FA_DTYPE_BF16: { \
        using QT = __nv_bfloat16; \
        __VA_ARGS__ \
    } break; \
    default: return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "unsupported q_dtype: %d", (int)(dtype)); \
    }

#define FA_ATTN_DISPATCH_KV_KIND(kind, KV, ...) \
    switch (kind) { \
    case fa_attn::KV_SAME: { \
        constexpr int KV = fa_attn::KV_SAME; \
        __VA_ARGS__ \
    } break; \
    case fa_attn::KV_FP8: { \
        constexpr int KV = fa_attn::KV_FP8; \
        __VA_ARGS__ \
    } break; \
    default: return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "unsupported kv kind: %d", kind); \
    }

#endif  // !__HIP_PLATFORM_AMD__

}  // namespace

#if defined(__HIP_PLATFORM_AMD__)

fa_status fa_cuda__attention_check(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    (void)a;
    (void)L;
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    return fa_bu_fail(&e, FA_ERR_UNSUPPORTED,
                      "not built for HIP (the kernels use mma.sync / ldmatrix / cp.async)");
}

fa_status fa_cuda__attention(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    (void)L;
    return fa_cuda__attention_check(a, nullptr, err, err_size);
}

void fa_cuda__attention_caps(fa_backend_caps *caps, int) { caps->num_dims = 0; }

#else  // !__HIP_PLATFORM_AMD__

namespace {

// A call's kernel parameters and launch choice, from its arguments: every check of the op runs
// here (structural ones in fa_bu_check_attention, then what these kernels need), so that
// ops.check and the op itself can never disagree. *empty: nothing to launch.
struct Plan {
    fa_attn::Params p;
    int dim;          // compiled width
    int kv_kind;
    bool decode;      // whole call in the packed decode tile
    bool mixed;       // decode rows in the decode tile, the rest in the prefill tile
    bool sm90;        // the sm_90a family runs the sequences with Lq * G > sm90_skip_rows
    bool sm90_decode; // ... and the decode tile the others (a launch with tile_filter 1)
    int sm90_skip_rows;
    bool mw;          // the multi-warp decode tile runs the one-token sequences (decode_mw.cu);
                      // the packed decode tile then takes 1 < Lq, Lq * G <= 16 (filter 3), the
                      // prefill tile Lq > 1 (filter 4)
    bool dec_skip;    // ... and no sequence of the call is for the packed decode tile
    bool empty;
};

// The multi-warp decode tile's calls: its widths (head_size equal to the width), G <= mw_max_group,
// 16-bit K/V of the q dtype or E4M3 with 16-byte rows, K and V with the same block and row
// strides, its shared memory within the device's. The others keep the packed decode tile.
bool mw_accepts(const fa_attn_args *a, int dim, int kv_kind, bool kv16, bool paged, int group,
                int64_t smem_limit) {
    if (!fa_attn::mw_width(dim) || a->head_size != dim || !fa_attn::decode_mw_compiled(dim)) return false;
    if (group > fa_attn::mw_max_group(dim)) return false;
    const bool fp8 = kv_kind != fa_attn::KV_SAME;
    if (fp8 && (a->kv_dtype != FA_DTYPE_FP8_E4M3 || !kv16)) return false;
    if (a->k_row_stride != a->v_row_stride || (paged && a->k_block_stride != a->v_block_stride)) return false;
    return smem_limit <= 0 || fa_attn::mw_smem_bytes(dim, fp8) <= smem_limit;
}

// Alignment: 16-byte rows for the copies (q, out, 16-bit K/V); fp8 K/V 8 or 16 bytes. *kv16:
// the K/V rows allow 16-byte vector copies.
fa_status check_alignment(const fa_attn_args *a, bool paged, bool fp8, const fa_bu_err *e, bool *kv16_out) {
    if (!aligned16(a->q) || a->q_token_stride % 8 || a->q_head_stride % 8 || a->q_group_stride % 8)
        return fa_bu_fail(
            e, FA_ERR_UNSUPPORTED,
            "q must be 16-byte aligned with strides multiple of 8 elements (q %p, strides %lld/%lld/%lld)",
            a->q, (long long)a->q_token_stride, (long long)a->q_head_stride, (long long)a->q_group_stride);
    if (!aligned16(a->out) || a->out_token_stride % 8 || a->out_head_stride % 8)
        return fa_bu_fail(
            e, FA_ERR_UNSUPPORTED,
            "out must be 16-byte aligned with strides multiple of 8 elements (out %p, strides %lld/%lld)",
            a->out, (long long)a->out_token_stride, (long long)a->out_head_stride);
    const int64_t kv_strides[6] = {a->k_block_stride, a->k_row_stride, a->k_head_stride,
                                   a->v_block_stride, a->v_row_stride, a->v_head_stride};
    bool kv16 = aligned16(a->k) && aligned16(a->v);
    bool kv8 = (reinterpret_cast<uintptr_t>(a->k) & 7u) == 0 && (reinterpret_cast<uintptr_t>(a->v) & 7u) == 0;
    for (int i = 0; i < 6; ++i) {
        if (!paged && (i == 0 || i == 3)) continue;   // dense: no block stride
        const int64_t bytes = kv_strides[i] * (fp8 ? 1 : 2);
        if (bytes % 16) kv16 = false;
        if (bytes % 8) kv8 = false;
    }
    if (fp8 && a->head_size % 16) kv16 = false;
    if (!(fp8 ? kv8 : kv16))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "k/v must be %d-byte aligned (pointers and strides)",
                          fp8 ? 8 : 16);
    *kv16_out = kv16;
    return FA_OK;
}

// The kernel parameters of a checked call.
void fill_params(const fa_attn_args *a, bool paged, bool fp8, bool kv16, int group, int S,
                 fa_attn::Params &p) {
    memset(&p, 0, sizeof(p));
    p.q = a->q;
    p.q_token_stride = a->q_token_stride;
    p.q_head_stride = a->q_head_stride;
    p.q_group_stride = a->q_group_stride;
    p.q_head_group = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    p.q_group_kv = p.q_head_group / a->num_heads_kv;
    p.out = a->out;
    p.out_token_stride = a->out_token_stride;
    p.out_head_stride = a->out_head_stride;
    p.lse = a->lse;
    p.lse_head_stride = a->lse_head_stride;
    p.k = a->k;
    p.v = a->v;
    p.k_block_stride = a->k_block_stride;
    p.k_row_stride = a->k_row_stride;
    p.k_head_stride = a->k_head_stride;
    p.v_block_stride = a->v_block_stride;
    p.v_row_stride = a->v_row_stride;
    p.v_head_stride = a->v_head_stride;
    p.cu_seqlens_q = a->cu_seqlens_q;
    p.seqused_k = paged ? a->seqused_k : nullptr;
    p.cu_seqlens_k = paged ? nullptr : a->cu_seqlens_k;
    p.block_table = paged ? a->block_table : nullptr;
    p.block_table_stride = a->block_table_stride;
    p.num_blocks = paged ? a->num_blocks : 0;
    p.id_limit = static_cast<uint32_t>(p.num_blocks < (int64_t(1) << 31) ? p.num_blocks : (int64_t(1) << 31));
    p.num_seqs = a->num_seqs;
    p.num_tokens = a->num_tokens;
    p.num_heads_q = a->num_heads_q;
    p.num_heads_kv = a->num_heads_kv;
    p.group = group;
    p.head_size = a->head_size;
    p.block_size = paged ? a->block_size : 1;
    p.block_shift = -1;
    if (paged && (a->block_size & (a->block_size - 1)) == 0) {
        int sh = 0;
        while ((1 << sh) < a->block_size) ++sh;
        p.block_shift = sh;
    }
    p.softmax_scale = a->softmax_scale;
    p.softcap = a->softcap > 0.f ? a->softcap : 0.f;
    p.window_left = a->window_left < 0 ? -1 : a->window_left;
    p.window_right = a->causal ? 0 : (a->window_right < 0 ? -1 : a->window_right);
    p.alibi_slopes = a->alibi_slopes;
    p.alibi_batch_stride = a->alibi_batch_stride;
    p.sinks = a->sinks;
    p.k_descale = fp8 ? a->k_descale : nullptr;
    p.v_descale = fp8 ? a->v_descale : nullptr;
    p.descale_batch_stride = a->descale_batch_stride;
    p.descale_head_stride = a->descale_head_stride;
    p.k_scale = fp8 ? a->k_scale : 1.f;
    p.v_scale = fp8 ? a->v_scale : 1.f;
    p.kv_vec16 = kv16 ? 1 : 0;
    p.kv_e5m2 = a->kv_dtype == FA_DTYPE_FP8_E5M2 ? 1 : 0;
    p.num_splits = S;
    p.split_plan = a->split_plan;   // also with S == 1: a 0 entry leaves the sequence untouched
    p.split_out = S > 1 ? a->split_out : nullptr;
    p.split_lse = S > 1 ? a->split_lse : nullptr;
}

fa_status prepare(const fa_attn_args *a, const FaLaunch *L, Plan *pl, const fa_bu_err *e) {
    char n1[FA_BU_NAME_BUF];
    const fa_device_info *info = L != nullptr ? L->info : nullptr;
    pl->empty = true;
    pl->sm90 = pl->sm90_decode = false;
    pl->sm90_skip_rows = 0;
    pl->mw = pl->dec_skip = false;
    FA_BU_TRY(fa_bu_check_attention(e, a, fa_attn::kBlockSizeMultiple));
    // an fp8 (e4m3) query runs only in the sm_90a family (QGMMA); every other call's q is f16 / bf16
    const bool q8 = a->q_dtype == FA_DTYPE_FP8_E4M3;
    if (a->q_dtype != FA_DTYPE_F16 && a->q_dtype != FA_DTYPE_BF16 && !q8)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "q_dtype %s: the CUDA backend takes f16, bf16 or fp8_e4m3",
                          fa_bu_dtype_name(a->q_dtype, n1));
    const int kv_kind = a->kv_dtype == a->q_dtype && !q8 ? fa_attn::KV_SAME : fa_attn::KV_FP8;
    const bool paged = a->cu_seqlens_k == nullptr;
    const int dim = padded_dim(a->head_size);
    if (dim == 0) {
        char dims[64];
        compiled_dims_string(dims, sizeof(dims));
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "head_size %d not compiled in (head_dims=%s)", a->head_size,
                          dims);
    }
    const int S = a->num_splits > 1 ? a->num_splits : 1;
    if (S > 65535) return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "num_splits %d > 65535", a->num_splits);
    if (a->num_tokens == 0 || a->num_seqs == 0) return FA_OK;
    const int group = a->num_heads_q / a->num_heads_kv;
    if (static_cast<int64_t>(a->num_tokens) * group > 0x7fff0000LL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "num_tokens %d x %d query heads per KV head "
                          "exceeds 2^31 rows",
                          a->num_tokens, group);
    if (S > 1 && (static_cast<int64_t>(a->num_tokens) * a->num_heads_q + 3) / 4 > 0x7fffffffLL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "num_tokens %d x num_heads_q %d: too many rows for the split combine",
                          a->num_tokens, a->num_heads_q);

    const bool fp8 = kv_kind != fa_attn::KV_SAME;
    bool kv16 = false;
    FA_BU_TRY(check_alignment(a, paged, fp8, e, &kv16));
    fill_params(a, paged, fp8, kv16, group, S, pl->p);
    if (q8) {
#if FA_CUDA_HAVE_SM90
        const char *why = nullptr;
        if (L == nullptr || !L->sm90)
            return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                              "q_dtype fp8_e4m3 runs in the sm_90a (wgmma) family only, which %s",
                              L == nullptr ? "has no device here"
                                           : "this device / family setting does not use");
        if (!fa_sm90__accepts(a, &why))
            return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                              "q_dtype fp8_e4m3: the sm_90a family does not take the call: %s", why);
        pl->dim = dim;
        pl->kv_kind = kv_kind;
        pl->decode = pl->mixed = false;
        pl->sm90 = true; // every sequence, decode ones too
        pl->empty = false;
        return FA_OK;
#else
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "q_dtype fp8_e4m3 runs in the sm_90a (wgmma) family only, not built here (gpu_arch "
                          "without sm_90a)");
#endif
    }

    // ---- tile shape and shared memory. The packed decode tile (kDecodeRows rows = query
    // rows x heads of a KV head) when every sequence fits; a mixed batch (decode queries next to
    // longer ones, as the caller's min_seqlen_q hint says) runs its decode sequences there and
    // the rest in the prefill tile, one launch each (same bits per row).
    bool decode =
        a->max_seqlen_q > 0 && static_cast<int64_t>(a->max_seqlen_q) * group <= fa_attn::kDecodeRows;
    bool mixed = false;
    int64_t dec_smem = 0;
    const int64_t smem_limit = info != nullptr && info->smem_per_block > 0 ? info->smem_per_block : 0;
    FA_ATTN_DISPATCH_HEAD_DIM(
        dim, DIM,
        FA_ATTN_DISPATCH_Q_DTYPE(
            a->q_dtype, QT, FA_ATTN_DISPATCH_KV_KIND(kv_kind, KV, {
                const int64_t dec_need = fa_attn::attention_smem_bytes<DIM, QT, KV>(true);
                dec_smem = dec_need;
                if (smem_limit > 0 && decode && dec_need > smem_limit) decode = false;
                const int64_t need = fa_attn::attention_smem_bytes<DIM, QT, KV>(decode);
                if (smem_limit > 0 && need > smem_limit)
                    return fa_bu_fail(
                        e, FA_ERR_UNSUPPORTED,
                        "head_size %d needs %lld bytes of shared memory per block, device has %lld",
                        a->head_size, static_cast<long long>(need), static_cast<long long>(smem_limit));
                mixed = !decode && a->min_seqlen_q > 0 &&
                        static_cast<int64_t>(a->min_seqlen_q) * group <= fa_attn::kDecodeRows &&
                        (smem_limit <= 0 || dec_need <= smem_limit);
            })))
    // The multi-warp decode tile takes every one-token sequence of a call it accepts (unless the
    // caller's min_seqlen_q says there is none); a sequence's tile then depends only on its own
    // query length (batch invariance). The others: a decode call's in the packed decode tile
    // (filter 3), another call's in the prefill tile (filter 4; both tiles give a row the same
    // bits), or with the sm_90a family as below.
    const bool dec_ok = smem_limit <= 0 || dec_smem <= smem_limit;
    if (dec_ok && a->min_seqlen_q <= 1 && mw_accepts(a, dim, kv_kind, kv16, paged, group, smem_limit)) {
        pl->mw = true;
        mixed = false; // the prefill tile takes every other sequence (filter 4), the same bits
        // no sequence with 1 < Lq and Lq * G <= 16: every query is one token, or G > 8
        pl->dec_skip = (decode && a->max_seqlen_q == 1) || 2 * group > fa_attn::kDecodeRows;
    }
    pl->dim = dim;
    pl->kv_kind = kv_kind;
    pl->decode = decode;
    pl->mixed = mixed;
    pl->empty = false;
#if FA_CUDA_HAVE_SM90
    // The sm_90a family takes the sequences longer than the decode tile's rows of a call it
    // accepts; a sequence's family depends only on its own query length, never on the rest of
    // the batch (batch invariance): Lq * G <= kDecodeRows always runs in the decode tile.
    // Family wgmma (L->sm90 == 2) takes every sequence of a call it accepts, decode ones too.
    if (L != nullptr && L->sm90 && (!decode || L->sm90 == 2) && fa_sm90__accepts(a, nullptr)) {
        pl->sm90 = true;
        if (L->sm90 == 2) {
            pl->mw = false;
            pl->sm90_skip_rows = 0;
            pl->sm90_decode = false;
        } else {
            pl->sm90_skip_rows = dec_ok ? fa_attn::kDecodeRows : 0;
            pl->sm90_decode =
                dec_ok && (a->min_seqlen_q <= 0 ||
                           static_cast<int64_t>(a->min_seqlen_q) * group <= fa_attn::kDecodeRows);
        }
    }
#endif
    return FA_OK;
}

}  // namespace

void fa_cuda__attention_caps(fa_backend_caps *caps, int cc_major) {
    caps->num_dims = 0;
    for (int i = 0; kCompiledDims[i] != 0 && caps->num_dims < FA_MAX_KERNEL_DIMS; ++i) {
        const int dim = kCompiledDims[i];
        fa_kernel_dim *k = &caps->dims[caps->num_dims++];
        memset(k, 0, sizeof(*k));
        k->head_dim = dim;
        k->prefill_tile_m = fa_attn::prefill_rows(dim);
        k->prefill_tile_n = fa_attn::prefill_stage_keys(dim);
        // the multi-warp decode tile where it is built and fits the device (16-bit head 256 needs
        // 192 KiB of shared memory): a step is its warps' tiles, side by side
        const int mw_ctas = fa_attn::mw_width(dim) && fa_attn::decode_mw_compiled(dim)
                                ? fa_attn::decode_mw_ctas_per_sm(dim)
                                : 0;
        if (mw_ctas > 0) {
            k->decode_tile_n = fa_attn::kMwWarps * fa_attn::mw_keys(dim);
            k->decode_step_us = fa_attn::kMwStepUs * fa_attn::mw_step_factor(dim);
            k->decode_ctas_per_sm = mw_ctas;
            continue;
        }
        k->decode_tile_n = fa_attn::decode_keys(dim);
        k->decode_step_us = fa_attn::kDecodeStepUs * fa_attn::decode_step_factor(dim);
        switch (dim) {
            FA_ATTN_ARMS(DIM, {
                k->decode_ctas_per_sm =
                    fa_attn::attention_ctas_per_sm<DIM, __nv_bfloat16, fa_attn::KV_SAME>(true);
            })
        default: break;
        }
    }
    caps->act_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->cache_dtypes =
        (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_FP8_E4M3) | (1u << FA_DTYPE_FP8_E5M2);
    caps->block_size_multiple = fa_attn::kBlockSizeMultiple;
    caps->head_size_multiple = fa_attn::kHeadSizeMultiple;
    caps->decode_max_rows = fa_attn::kDecodeRows;
    caps->max_splits = fa_attn::kMaxSplits;
    caps->align_bytes = fa_attn::kAlignBytes;
    caps->sm_bytes_per_us = fa_attn::kSmBytesPerUs;
    caps->cta_us = fa_attn::kCtaUs;
    caps->combine_us = cc_major >= 9 ? fa_attn::kCombineUsPdl : fa_attn::kCombineUs; // launch_combine's PDL
    caps->combine_us_per_split = fa_attn::kCombineUsPerSplit;
}

fa_status fa_cuda__attention_check(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "attention");
    Plan pl;
    return prepare(a, L, &pl, &e);
}

fa_status fa_cuda__attention(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e0 = fa_bu_err_make(err, err_size, "attention");
    const fa_bu_err *e = &e0;
    Plan pl;
    FA_BU_TRY(prepare(a, L, &pl, e));
    if (pl.empty) return FA_OK;
    fa_attn::Params &p = pl.p;
    p.err_word = L->err_word;
    cudaStream_t stream = L->stream;
    const int dim = pl.dim, kv_kind = pl.kv_kind;
    cudaError_t ce = cudaSuccess;
#if FA_CUDA_HAVE_SM90
    if (pl.sm90) {
        // the wgmma launch first: its tensor maps are encoded before anything runs, so that a
        // failure there launches nothing
        // the persistent grid: always (ON), or for calls of short row blocks (AUTO)
        const bool persist =
            L->persist == FA_CUDA_PERSIST_ON ||
            (L->persist == FA_CUDA_PERSIST_AUTO && a->max_seqlen_q <= FA_CUDA_PERSIST_AUTO_ROWS);
        // GQA packing: always (ON, where the group allows), or for calls of short queries (AUTO)
        const bool pack =
            L->gqa_pack == FA_CUDA_GQA_PACK_ON ||
            (L->gqa_pack == FA_CUDA_GQA_PACK_AUTO && a->max_seqlen_q <= FA_CUDA_GQA_PACK_AUTO_ROWS);
        FA_BU_TRY(fa_sm90__launch(a, L->tmap_encode, pl.sm90_skip_rows,
                                  persist && L->info != nullptr ? L->info->num_sms : 0, pack, L->err_word,
                                  stream, e));
        if (pl.sm90_decode && !pl.dec_skip) {
            p.tile_filter = pl.mw ? 3 : 1;
            FA_ATTN_DISPATCH_HEAD_DIM(
                dim, DIM, FA_ATTN_DISPATCH_Q_DTYPE(a->q_dtype, QT, FA_ATTN_DISPATCH_KV_KIND(kv_kind, KV, {
                                                       ce = fa_attn::launch_attention<DIM, QT, KV>(p, true,
                                                                                                   stream);
                                                   })))
            if (ce != cudaSuccess)
                return fa_bu_fail(e, FA_ERR_BACKEND, "kernel launch: %s", cudaGetErrorString(ce));
        }
    }
    const bool sm90_ran = pl.sm90;
#else
    const bool sm90_ran = false;
#endif
    if (!sm90_ran) {
        FA_ATTN_DISPATCH_HEAD_DIM(
            dim, DIM,
            FA_ATTN_DISPATCH_Q_DTYPE(a->q_dtype, QT, FA_ATTN_DISPATCH_KV_KIND(kv_kind, KV, {
                                         if (pl.mixed) {
                                             p.tile_filter = 1;
                                             ce = fa_attn::launch_attention<DIM, QT, KV>(p, true, stream);
                                             p.tile_filter = 2;
                                         }
                                         if (pl.mw) p.tile_filter = pl.decode ? 3 : 4;
                                         if (ce == cudaSuccess && !(pl.decode && pl.dec_skip))
                                             ce =
                                                 fa_attn::launch_attention<DIM, QT, KV>(p, pl.decode, stream);
                                     })))
        if (ce != cudaSuccess)
            return fa_bu_fail(e, FA_ERR_BACKEND, "kernel launch: %s", cudaGetErrorString(ce));
    }
    if (pl.mw) {
        p.tile_filter = 0;
        // the deep ring (attention_tiles.h): more than two CTAs an SM, kMwDeepKeys keys a split
        const bool fp8 = kv_kind != fa_attn::KV_SAME;
        const int64_t ctas =
            static_cast<int64_t>(a->num_seqs) * a->num_heads_kv * (p.num_splits > 1 ? p.num_splits : 1);
        const bool deep = fa_attn::mw_deep(dim, fp8) && L->info != nullptr && ctas > 2LL * L->info->num_sms &&
                          a->max_seqlen_k / (p.num_splits > 1 ? p.num_splits : 1) >= fa_attn::kMwDeepKeys;
        ce = fa_attn::launch_decode_mw(p, dim, a->q_dtype == FA_DTYPE_F16, fp8, deep, stream);
        if (ce != cudaSuccess)
            return fa_bu_fail(e, FA_ERR_BACKEND, "multi-warp decode launch: %s", cudaGetErrorString(ce));
    }
    // the split combine (every tile's partials: the same [S, T, Hq, D] / [S, Hq, T] layout)
    if (p.num_splits > 1) {
        const int64_t blocks = (static_cast<int64_t>(a->num_tokens) * a->num_heads_q + 3) / 4;
        const bool pdl = L->info != nullptr && L->info->cc_major >= 9;
        const fa_dtype odt = a->q_dtype == FA_DTYPE_FP8_E4M3 ? a->out_dtype : a->q_dtype;
        ce = odt == FA_DTYPE_F16 ? launch_combine<__half>(p, blocks, pdl, stream)
                                 : launch_combine<__nv_bfloat16>(p, blocks, pdl, stream);
        if (ce != cudaSuccess)
            return fa_bu_fail(e, FA_ERR_BACKEND, "split combine launch: %s", cudaGetErrorString(ce));
    }
    return FA_OK;
}

#endif  // __HIP_PLATFORM_AMD__
