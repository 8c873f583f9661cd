// cache_kernels.cu - reshape_and_cache: new K/V rows into the paged cache (SEMANTICS §2.2).
//
// For t < num_tokens with s = slot_mapping[t] >= 0 and every (h, d):
//     key_cache[s / bs, s % bs, h, d] = Q_k(key[t, h, d])      (value likewise, Q_v)
// at element offset blk * block_stride + off * page_stride + h * head_stride + d (64-bit).
// Q is a plain copy for an AUTO cache (same dtype) and saturate_finite_fp8(float(x) / scale)
// for an fp8 cache (division in fp32, round to nearest even), the quotient computed as
// x * (1 / scale) plus one fma correction: the same correctly rounded quotient, bit for bit, in
// fewer instructions than the division (store_fp8).
//
// Kernel shape (memory-bound: each byte is read once and written once). A thread moves one
// chunk of 8 consecutive elements of one (token, head) row, for K and for V: both loads are
// issued before either store. A block covers whole [Hkv x D] rows of consecutive tokens
// (FaRowMap), so consecutive threads touch consecutive pieces of a token's row, every head of
// it, and a block reads (and, for a cache whose page row is [Hkv, D], writes) contiguous
// memory. 32-bit divisions only (the map; slot / block_size when the slot fits). The chunk moves as 16-byte
// vectors (8-byte for an fp8 destination) when the pointers and strides allow it, else
// element by element (same mapping).
#include "fa_cuda_internal.cuh"
#include "fa_backend_util.h"

namespace {

constexpr int kChunk = 8;            // elements per thread and tensor
constexpr int kThreads = 256;        // per block

// ---------------------------------------------------------------------------------------------
// element types: the raw bits a chunk holds, and their value as float

struct TF32 {
    typedef uint32_t raw;
    static __device__ __forceinline__ float to_float(raw r) { return __uint_as_float(r); }
};
struct TF16 {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_float(raw r) { return __half2float(__ushort_as_half(r)); }
};
struct TBF16 {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_float(raw r) {
        return __bfloat162float(__ushort_as_bfloat16(r));
    }
};

enum CacheMode { kCopy = 0, kFp8E4M3 = 1, kFp8E5M2 = 2 };

struct CacheParams {
    const void *key, *value;             // [num_tokens, Hkv, D], token strides below
    int64_t key_token_stride, value_token_stride;
    void *key_cache, *value_cache;       // logical [num_blocks, bs, Hkv, D]
    int64_t block_stride, page_stride, head_stride;
    const int64_t *slot_mapping;         // [num_tokens]; negative = skip
    int64_t num_slots;                   // num_blocks * block_size: a slot at or past it is skipped
    int64_t num_blocks;                  // and reported in err_word
    FaDevErr *err_word;
    int32_t num_tokens, head_size, block_size;
    float k_scale, v_scale;              // fp8 only
    FaRowMap map;                        // threads -> (token, head, chunk)
};

template <class T> struct alignas(16) Chunk {
    typename T::raw e[kChunk];
};

template <class T, bool kVec> __device__ __forceinline__ Chunk<T> load_chunk(const typename T::raw *src) {
    Chunk<T> c;
    if (kVec) {
        constexpr int n = (int)sizeof(Chunk<T>) / 16;
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(&c);
#pragma unroll
        for (int i = 0; i < n; ++i) d[i] = __ldg(s + i);
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) c.e[i] = __ldg(src + i);
    }
    return c;
}

// AUTO cache: the same bits.
template <class T, bool kVec>
__device__ __forceinline__ void store_copy(typename T::raw *dst, const Chunk<T> &c) {
    if (kVec) {
        constexpr int n = (int)sizeof(Chunk<T>) / 16;
        const uint4 *s = reinterpret_cast<const uint4 *>(&c);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
#pragma unroll
        for (int i = 0; i < n; ++i) d[i] = s[i];
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) dst[i] = c.e[i];
    }
}

// fp8 cache: saturate(x / scale), x / scale the IEEE fp32 quotient (round to nearest even),
// computed without the division (which also checks each quotient, FCHK, for a slow path) as
//     r = RN(1 / scale)                                          (fp8_recip, once per thread)
//     q0 = RN(x r),  e = RN(q0 scale - x),  q = RN(q0 - e r)     (fp8_quotient: FMUL, 2 FFMA)
// Markstein's correction step: q == RN(x / scale), correctly rounded, bit for bit, as long as no
// step underflows or overflows. Proof, scaled to x = a, scale = b in [1, 2) (b r = 1 + d,
// |d| < 2^-24): the last fma rounds the exact q0 - e r = a/b + (a/b - q0) d - (e's rounding) r;
// for a >= b, |q0 - a/b| < 2^-23 and that sum is within 3 2^-47 of a/b; for a < b,
// |q0 - a/b| < 3 2^-25 (q0 is not always within one ulp, Markstein's own premise) and the sum is
// within 4.5 2^-48 of a/b.
// a/b is never a rounding midpoint m: with A = a 2^23, B = b 2^23 and m = k 2^-24 (k odd; k 2^-25
// below 1), |a/b - m| = |N| 2^-47 / b (2^-48 / b) for an integer N = A 2^24 - B k (A 2^25 - B k)
// != 0, so a wrong rounding needs |N| < 6 (< 9). tools/fp8_div_check.cu enumerates every a, b
// with |N| <= 16 and finds q == a/b in each; it also compares the fp8 bytes with the division's
// exhaustively (every bf16 and every f16 x against 2146 scales; 10^7 random fp32 x and scales).
// The scaling holds where every step is exact or a normal number: scale in [2^-64, 2^126] (r is
// normal; for any other scale r is NaN and every element divides), |q0| <= 2^126 (else those 4
// elements divide: inf, NaN, quotients near overflow), |x| >= 2^-102 (e exact) and
// |x / scale| >= 2^-125. The last two fail only where |x / scale| < 2^-19 (as scale >= 2^-64);
// there q keeps x's sign and |q| < 1.51 |x / scale| (a subnormal q0 or e errs by at most half of
// |x / scale|), so both store the fp8 zero of x's sign. x = +-0 gives +-0: e is q0 scale - x, not
// x - q0 scale, so that for x = -0 the last fma is -0 - (+0) r = -0.
__device__ __forceinline__ float fp8_recip(float scale) {
    return scale >= 0x1p-64f && scale <= 0x1p126f ? __frcp_rn(scale) : __int_as_float(0x7fc00000);
}

// *q = x / scale from r = fp8_recip(scale); false where that is not proven (|q0| > 2^126, inf, NaN)
__device__ __forceinline__ bool fp8_quotient(float x, float scale, float r, float *q) {
    const float q0 = __fmul_rn(x, r);
    const float e = __fmaf_rn(q0, scale, -x);
    *q = __fmaf_rn(-e, r, q0);
    return fabsf(q0) <= 0x1p126f;
}

template <class T, int kMode, bool kVec>
__device__ __forceinline__ void store_fp8(uint8_t *dst, const Chunk<T> &c, float scale) {
    constexpr __nv_fp8_interpretation_t fmt = kMode == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    const float r = fp8_recip(scale);
    uint32_t w[2];
#pragma unroll
    for (int i = 0; i < kChunk / 4; ++i) {
        float q[4];
        bool proven = true;
#pragma unroll
        for (int j = 0; j < 4; ++j) proven &= fp8_quotient(T::to_float(c.e[4 * i + j]), scale, r, &q[j]);
        if (!proven) {                             // rare: the division, for 4 elements
#pragma unroll
            for (int j = 0; j < 4; ++j) q[j] = __fdiv_rn(T::to_float(c.e[4 * i + j]), scale);
        }
        // cvt.rn.satfinite.e4m3x2 / e5m2x2, two elements an instruction; element 2j in the low
        // byte of each pair: memory order is element order
        const uint32_t a = __nv_cvt_float2_to_fp8x2(make_float2(q[0], q[1]), __NV_SATFINITE, fmt);
        const uint32_t b = __nv_cvt_float2_to_fp8x2(make_float2(q[2], q[3]), __NV_SATFINITE, fmt);
        w[i] = a | (b << 16);
    }
    if (kVec) {
        *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
    } else {                                       // the same bytes, one by one
#pragma unroll
        for (int i = 0; i < kChunk; ++i) dst[i] = (uint8_t)(w[i / 4] >> (8 * (i % 4)));
    }
}

template <class T, int kMode, bool kVec>
__global__ void __launch_bounds__(kThreads) reshape_and_cache_kernel(const CacheParams p) {
    typedef typename T::raw R;
    int64_t t;
    int h, c;
    if (!fa_row_pos(p.map, &t, &h, &c) || t >= p.num_tokens) return;
    const int d = c * kChunk;
    const int64_t hd = (int64_t)h * p.head_size + d;
    // the slot and both source chunks in one round trip (row t of key/value exists even when
    // the slot is negative: they are [num_tokens, Hkv, D])
    const int64_t slot = __ldg(p.slot_mapping + t);
    const Chunk<T> kc = load_chunk<T, kVec>(static_cast<const R *>(p.key) + t * p.key_token_stride + hd);
    const Chunk<T> vc = load_chunk<T, kVec>(static_cast<const R *>(p.value) + t * p.value_token_stride + hd);
    if (slot < 0) return;                          // padding or another DCP rank's token
    if (slot >= p.num_slots) {                     // outside the cache: never written
        if (h == 0 && c == 0)
            fa_dev_err_report(p.err_word, FA_DEVERR_CACHE_SLOT, t, slot, p.num_blocks, p.block_size);
        return;
    }
    int64_t blk, off;
    if (slot <= (int64_t)INT32_MAX) {              // the common case: 32-bit division
        const uint32_t s = (uint32_t)slot, bs = (uint32_t)p.block_size;
        const uint32_t b = s / bs;
        blk = b;
        off = s - b * bs;
    } else {
        blk = slot / p.block_size;
        off = slot - blk * p.block_size;
    }
    const int64_t dst = blk * p.block_stride + off * p.page_stride + (int64_t)h * p.head_stride + d;
    if (kMode == kCopy) {
        store_copy<T, kVec>(static_cast<R *>(p.key_cache) + dst, kc);
        store_copy<T, kVec>(static_cast<R *>(p.value_cache) + dst, vc);
    } else {
        store_fp8<T, kMode, kVec>(static_cast<uint8_t *>(p.key_cache) + dst, kc, p.k_scale);
        store_fp8<T, kMode, kVec>(static_cast<uint8_t *>(p.value_cache) + dst, vc, p.v_scale);
    }
}

// ---------------------------------------------------------------------------------------------
// host side

bool aligned(const void *p, int64_t a) { return ((uintptr_t)p % (uintptr_t)a) == 0; }

template <class T, int kMode>
void launch(const CacheParams &p, bool vec, dim3 grid, dim3 block, cudaStream_t stream) {
    if (vec)
        reshape_and_cache_kernel<T, kMode, true><<<grid, block, 0, stream>>>(p);
    else
        reshape_and_cache_kernel<T, kMode, false><<<grid, block, 0, stream>>>(p);
}

template <class T>
void launch_fp8(const CacheParams &p, int mode, bool vec, dim3 grid, dim3 block, cudaStream_t stream) {
    if (mode == kFp8E4M3)
        launch<T, kFp8E4M3>(p, vec, grid, block, stream);
    else
        launch<T, kFp8E5M2>(p, vec, grid, block, stream);
}

}  // namespace

fa_status fa_cuda__reshape_and_cache_check(const fa_cache_write_args *a, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "reshape_and_cache");
    return fa_bu_check_cache_write(&e, a);
}

fa_status fa_cuda__reshape_and_cache(const fa_cache_write_args *a, const FaLaunch *L, char *err,
                                     size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "reshape_and_cache");
    const fa_status st = fa_cuda__reshape_and_cache_check(a, err, err_size);
    if (st != FA_OK || a->num_tokens == 0) return st;
    cudaStream_t stream = L->stream;
    const int mode = a->cache_dtype == a->kv_dtype         ? kCopy
                     : a->cache_dtype == FA_DTYPE_FP8_E4M3 ? kFp8E4M3
                                                           : kFp8E5M2;

    // 16-byte source vectors; 16-byte destination vectors (8-byte for fp8)
    const int in_es = (int)fa_bu_dtype_size(a->kv_dtype), out_es = (int)fa_bu_dtype_size(a->cache_dtype);
    const int64_t out_align = out_es == 1 ? 8 : 16;
    const bool vec =
        aligned(a->key, 16) && aligned(a->value, 16) && (a->key_token_stride * in_es) % 16 == 0 &&
        (a->value_token_stride * in_es) % 16 == 0 && aligned(a->key_cache, out_align) &&
        aligned(a->value_cache, out_align) && (a->cache_block_stride * out_es) % out_align == 0 &&
        (a->cache_row_stride * out_es) % out_align == 0 && (a->cache_head_stride * out_es) % out_align == 0;

    CacheParams p;
    p.key = a->key;
    p.value = a->value;
    p.key_token_stride = a->key_token_stride;
    p.value_token_stride = a->value_token_stride;
    p.key_cache = a->key_cache;
    p.value_cache = a->value_cache;
    p.block_stride = a->cache_block_stride;
    p.page_stride = a->cache_row_stride;
    p.head_stride = a->cache_head_stride;
    p.slot_mapping = a->slot_mapping;
    p.num_blocks = a->num_blocks;
    p.num_slots = a->num_blocks * a->block_size;   // < 2^63: the cache holds that many rows
    p.err_word = L->err_word;
    p.num_tokens = a->num_tokens;
    p.head_size = a->head_size;
    p.block_size = a->block_size;
    p.k_scale = a->k_scale;
    p.v_scale = a->v_scale;

    dim3 grid, block;
    p.map = fa_row_map(a->num_tokens, a->num_heads_kv, a->head_size / kChunk, kThreads, &grid, &block);

    if (mode == kCopy) {  // AUTO cache: the bits move unchanged, so only the width matters
        if (a->kv_dtype == FA_DTYPE_F32)
            launch<TF32, kCopy>(p, vec, grid, block, stream);
        else
            launch<TF16, kCopy>(p, vec, grid, block, stream);
    } else if (a->kv_dtype == FA_DTYPE_F32) {
        launch_fp8<TF32>(p, mode, vec, grid, block, stream);
    } else if (a->kv_dtype == FA_DTYPE_F16) {
        launch_fp8<TF16>(p, mode, vec, grid, block, stream);
    } else {
        launch_fp8<TBF16>(p, mode, vec, grid, block, stream);
    }
    const cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return fa_bu_fail(&e, FA_ERR_BACKEND, "kernel launch failed: %s", cudaGetErrorString(ce));
    return FA_OK;
}
