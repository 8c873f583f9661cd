// cache_kernels.cu - reshape_and_cache: new K/V rows into the paged cache (SEMANTICS §2.2).
//
// For t < num_tokens with s = slot_mapping[t] >= 0 and every (h, d):
//     key_cache[s / bs, s % bs, h, d] = Q_k(key[t, h, d])      (value likewise, Q_v)
// at element offset blk * block_stride + off * page_stride + h * head_stride + d (64-bit).
// Q is a plain copy for an AUTO cache (same dtype) and saturate_finite_fp8(float(x) / scale)
// for an fp8 cache (division in fp32, round to nearest even; the CUDA intrinsic).
//
// Kernel shape (memory-bound: each byte is read once and written once). A thread moves one
// chunk of 8 consecutive elements of one (token, head) row, for K and for V, for kTok
// consecutive tokens: every load (the kTok slots and the 2 * kTok source chunks) is issued
// before any store, so a thread has 2 * kTok 16-byte loads in flight and its index math is paid
// once for kTok tokens. A block covers whole [Hkv x D] rows of consecutive tokens, so the lanes
// of a warp touch consecutive pieces of a token's row (every head of it) and a block reads
// (and, for a cache whose page row is [Hkv, D], writes) contiguous memory. No integer division
// on the device but slot / block_size for a slot past 2^31: the thread map and the slot's block
// divide by multiply-high with host-made magic numbers (FastDiv). The chunk moves as 16-byte
// vectors (8-byte for an fp8 destination) when the pointers and strides allow it, else element
// by element (same mapping).
//
// fp8 (vector path): q = x / scale is not divided per element. The host brackets 1 / scale by
// two floats y_lo <= 1 / scale <= y_hi (adjacent floats, or both 1 / scale when that is exact,
// as for a power-of-two scale); rounding is monotonic, so RN(x * y_lo) and RN(x * y_hi) bracket
// RN(x / scale), and so do their fp8 conversions (monotonic too). When the two conversions of
// a chunk agree, that is the conversion of RN(x / scale), bit for bit (NaN, +-inf, zeros and
// subnormals included: the bracket holds for every x); when they differ (x / scale within two
// float ulps of an fp8 rounding boundary, about 1 chunk in 10^4 on random data, or y_lo 0 / y_hi
// inf at extreme scales) the chunk is converted again with the division. With y_lo == y_hi the
// bracket is one product and the check is skipped.
#include "fa_cuda_internal.cuh"
#include "fa_backend_util.h"

#include <math.h>

namespace {

constexpr int kChunk = 8;            // elements per thread and tensor
constexpr int kTok = 2;              // consecutive tokens a thread moves
constexpr int kThreads = 256;        // per block

// n / d for n < 2^31 and 1 <= d <= 2^31 (Granlund-Montgomery, round-up multiplier):
// q = (mulhi(n, m) + n) >> s, the sum < 2^32 because n < 2^31.
struct FastDiv {
    uint32_t m, s;
};

FastDiv fast_div(uint32_t d) {
    uint32_t l = 0;
    while (l < 31 && (1u << l) < d) ++l;
    FastDiv f;
    f.s = l;
    f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - d)) / d + 1);
    return f;
}

__device__ __forceinline__ uint32_t div_fast(uint32_t n, FastDiv f) { return (__umulhi(n, f.m) + n) >> f.s; }

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
    int32_t num_tokens, block_size;
    int32_t cph, cpr;                    // chunks a head row, a token row (Hkv * cph)
    int32_t rows;                        // token groups (of kTok) a block; 1: a group spans blocks
    FastDiv div_cpr, div_cph, div_bs;
    float k_scale, v_scale;              // fp8 only
    float k_lo, k_hi, v_lo, v_hi;        // fp8: y_lo <= 1 / scale <= y_hi (see the top)
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

// Four fp8 bytes of x[0..3] * y (element 2j in the low byte of each pair: memory order is
// element order).
template <int kMode> __device__ __forceinline__ uint32_t fp8x4(const float *x, float y) {
    constexpr __nv_fp8_interpretation_t fmt = kMode == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    const uint32_t a =
        (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(x[0] * y, x[1] * y), __NV_SATFINITE, fmt);
    const uint32_t b =
        (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(x[2] * y, x[3] * y), __NV_SATFINITE, fmt);
    return a | (b << 16);
}

// fp8 cache: saturate(x / scale), the division in fp32 (the vector path through the bracket
// y_lo, y_hi described at the top of the file, bit for bit the same bytes).
template <class T, int kMode, bool kVec>
__device__ __forceinline__ void store_fp8(uint8_t *dst, const Chunk<T> &c, float scale, float y_lo,
                                          float y_hi) {
    constexpr __nv_fp8_interpretation_t fmt = kMode == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    if (kVec) {
        float x[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) x[i] = T::to_float(c.e[i]);
        uint32_t w0 = fp8x4<kMode>(x, y_lo), w1 = fp8x4<kMode>(x + 4, y_lo);
        if (y_lo != y_hi && (w0 != fp8x4<kMode>(x, y_hi) || w1 != fp8x4<kMode>(x + 4, y_hi))) {
            uint32_t w[2]; // near a rounding boundary: the division decides
#pragma unroll
            for (int i = 0; i < kChunk / 4; ++i) {
                const float *v = x + 4 * i;
                const uint32_t a = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[0] / scale, v[1] / scale),
                                                                      __NV_SATFINITE, fmt);
                const uint32_t b = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[2] / scale, v[3] / scale),
                                                                      __NV_SATFINITE, fmt);
                w[i] = a | (b << 16);
            }
            w0 = w[0];
            w1 = w[1];
        }
        *reinterpret_cast<uint2 *>(dst) = make_uint2(w0, w1);
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
            dst[i] = (uint8_t)__nv_cvt_float_to_fp8(T::to_float(c.e[i]) / scale, __NV_SATFINITE, fmt);
    }
}

template <class T, int kMode, bool kVec>
__global__ void __launch_bounds__(kThreads) reshape_and_cache_kernel(const CacheParams p) {
    typedef typename T::raw R;
    // this thread's token group g (tokens g * kTok + j) and chunk k of the token row
    uint32_t r = 0, k = threadIdx.x;
    if (p.rows > 1) {
        r = div_fast(threadIdx.x, p.div_cpr);
        k = threadIdx.x - r * (uint32_t)p.cpr;
    } else {
        k += blockIdx.y * blockDim.x;
        if (k >= (uint32_t)p.cpr) return;
    }
    const int64_t t0 = ((int64_t)blockIdx.x * p.rows + r) * kTok;
    if (t0 >= p.num_tokens) return;
    const uint32_t h = div_fast(k, p.div_cph), c = k - h * (uint32_t)p.cph;
    // every load first, one round trip (row t of key/value exists even when the slot is
    // negative: they are [num_tokens, Hkv, D]); heads are packed: (h, c) is at k * kChunk
    int64_t slot[kTok];
    Chunk<T> kc[kTok], vc[kTok];
    const R *ksrc = static_cast<const R *>(p.key) + t0 * p.key_token_stride + (int64_t)k * kChunk;
    const R *vsrc = static_cast<const R *>(p.value) + t0 * p.value_token_stride + (int64_t)k * kChunk;
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
        slot[j] = -1;
        if (j == 0 || t0 + j < p.num_tokens) {
            slot[j] = __ldg(p.slot_mapping + t0 + j);
            kc[j] = load_chunk<T, kVec>(ksrc + j * p.key_token_stride);
            vc[j] = load_chunk<T, kVec>(vsrc + j * p.value_token_stride);
        }
    }
    const int64_t hc = (int64_t)h * p.head_stride + (int64_t)c * kChunk;
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
        const int64_t s = slot[j];
        if (s < 0) continue;                       // padding, another DCP rank's token, past the end
        if (s >= p.num_slots) {                    // outside the cache: never written
            if (k == 0)
                fa_dev_err_report(p.err_word, FA_DEVERR_CACHE_SLOT, t0 + j, s, p.num_blocks, p.block_size);
            continue;
        }
        int64_t blk, off;
        if (s <= (int64_t)INT32_MAX) {             // the common case: multiply-high
            const uint32_t b = div_fast((uint32_t)s, p.div_bs);
            blk = b;
            off = (uint32_t)s - b * (uint32_t)p.block_size;
        } else {
            blk = s / p.block_size;
            off = s - blk * p.block_size;
        }
        const int64_t dst = blk * p.block_stride + off * p.page_stride + hc;
        if (kMode == kCopy) {
            store_copy<T, kVec>(static_cast<R *>(p.key_cache) + dst, kc[j]);
            store_copy<T, kVec>(static_cast<R *>(p.value_cache) + dst, vc[j]);
        } else {
            store_fp8<T, kMode, kVec>(static_cast<uint8_t *>(p.key_cache) + dst, kc[j], p.k_scale, p.k_lo,
                                      p.k_hi);
            store_fp8<T, kMode, kVec>(static_cast<uint8_t *>(p.value_cache) + dst, vc[j], p.v_scale, p.v_lo,
                                      p.v_hi);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// host side

bool aligned(const void *p, int64_t a) { return ((uintptr_t)p % (uintptr_t)a) == 0; }

// y_lo <= 1 / s <= y_hi as real numbers (s positive and finite): y = RN(1 / s), and the sign of
// y * s - 1, exact in double (two 24-bit significands), says on which side of 1 / s it lies;
// the neighbour on the other side then brackets it. Anything unexpected: the widest bracket
// (0, inf), which sends every chunk to the division.
void rcp_bracket(float s, float *lo, float *hi) {
    const float y = 1.0f / s;
    const double p = (double)y * (double)s;
    *lo = *hi = y;
    if (p < 1.0)
        *hi = nextafterf(y, INFINITY);
    else if (p > 1.0)
        *lo = nextafterf(y, 0.0f);
    if (!((double)*lo * (double)s <= 1.0 && (double)*hi * (double)s >= 1.0)) {
        *lo = 0.0f;
        *hi = INFINITY;
    }
}

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
    p.block_size = a->block_size;
    p.k_scale = a->k_scale;
    p.v_scale = a->v_scale;
    p.k_lo = p.k_hi = p.v_lo = p.v_hi = 1.0f;
    if (mode != kCopy) {
        rcp_bracket(a->k_scale, &p.k_lo, &p.k_hi);
        rcp_bracket(a->v_scale, &p.v_lo, &p.v_hi);
    }

    // threads: kTok-token groups x cpr chunks, whole groups a block when a group fits in one
    const int32_t groups = (int32_t)((a->num_tokens + (int64_t)kTok - 1) / kTok);
    p.cph = a->head_size / kChunk;
    p.cpr = a->num_heads_kv * p.cph;   // <= 65535 * 32
    dim3 grid, block;
    if (p.cpr <= kThreads) {
        p.rows = kThreads / p.cpr;
        block = dim3((unsigned)(p.rows * p.cpr));
        grid = dim3((unsigned)((groups + p.rows - 1) / p.rows), 1);
    } else {
        p.rows = 1;
        block = dim3((unsigned)kThreads);
        grid = dim3((unsigned)groups, (unsigned)((p.cpr + kThreads - 1) / kThreads));
    }
    p.div_cpr = fast_div((uint32_t)p.cpr);
    p.div_cph = fast_div((uint32_t)p.cph);
    p.div_bs = fast_div((uint32_t)a->block_size);

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
