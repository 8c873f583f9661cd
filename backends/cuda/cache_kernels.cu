// cache_kernels.cu - reshape_and_cache: new K/V rows into the paged cache (SEMANTICS §2.2).
//
// For t < num_tokens with s = slot_mapping[t] >= 0 and every (h, d):
//     key_cache[s / bs, s % bs, h, d] = Q_k(key[t, h, d])      (value likewise, Q_v)
// at element offset blk * block_stride + off * page_stride + h * head_stride + d (64-bit).
// Q is a plain copy for an AUTO cache (same dtype) and saturate_finite_fp8(float(x) / scale)
// for an fp8 cache (division in fp32, round to nearest even; the CUDA intrinsic).
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

#include <stdarg.h>
#include <stdio.h>

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
    int32_t num_tokens, head_size, block_size;
    float k_scale, v_scale;              // fp8 only
    FaRowMap map;                        // threads -> (token, head, chunk)
};

template <class T>
struct alignas(16) Chunk {
    typename T::raw e[kChunk];
};

template <class T, bool kVec>
__device__ __forceinline__ Chunk<T> load_chunk(const typename T::raw *src) {
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

// fp8 cache: saturate(x / scale), the division in fp32.
template <class T, int kMode, bool kVec>
__device__ __forceinline__ void store_fp8(uint8_t *dst, const Chunk<T> &c, float scale) {
    constexpr __nv_fp8_interpretation_t fmt = kMode == kFp8E4M3 ? __NV_E4M3 : __NV_E5M2;
    if (kVec) {
        uint32_t w[2];
#pragma unroll
        for (int i = 0; i < kChunk / 4; ++i) {
            float2 lo = make_float2(T::to_float(c.e[4 * i + 0]) / scale,
                                    T::to_float(c.e[4 * i + 1]) / scale);
            float2 hi = make_float2(T::to_float(c.e[4 * i + 2]) / scale,
                                    T::to_float(c.e[4 * i + 3]) / scale);
            // element 2j in the low byte of each pair: memory order is element order
            uint32_t a = (uint32_t)__nv_cvt_float2_to_fp8x2(lo, __NV_SATFINITE, fmt);
            uint32_t b = (uint32_t)__nv_cvt_float2_to_fp8x2(hi, __NV_SATFINITE, fmt);
            w[i] = a | (b << 16);
        }
        *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
            dst[i] = (uint8_t)__nv_cvt_float_to_fp8(T::to_float(c.e[i]) / scale, __NV_SATFINITE, fmt);
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

__attribute__((format(printf, 4, 5)))
fa_status fail(char *err, size_t err_size, fa_status st, const char *fmt, ...) {
    if (err && err_size) {
        int n = snprintf(err, err_size, "reshape_and_cache: ");
        if (n < 0) n = 0;
        if ((size_t)n < err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, err_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return st;
}

const char *dtype_name(fa_dtype t) {
    switch (t) {
    case FA_DTYPE_F32: return "F32";
    case FA_DTYPE_F16: return "F16";
    case FA_DTYPE_BF16: return "BF16";
    case FA_DTYPE_FP8_E4M3: return "FP8_E4M3";
    case FA_DTYPE_FP8_E5M2: return "FP8_E5M2";
    case FA_DTYPE_I32: return "I32";
    case FA_DTYPE_I64: return "I64";
    default: return "unknown";
    }
}

int elem_size(fa_dtype t) {
    switch (t) {
    case FA_DTYPE_F32: return 4;
    case FA_DTYPE_F16: case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3: case FA_DTYPE_FP8_E5M2: return 1;
    default: return 0;
    }
}

bool aligned(const void *p, int64_t a) { return ((uintptr_t)p % (uintptr_t)a) == 0; }

template <class T, int kMode>
void launch(const CacheParams &p, bool vec, dim3 grid, dim3 block, cudaStream_t stream) {
    if (vec)
        reshape_and_cache_kernel<T, kMode, true><<<grid, block, 0, stream>>>(p);
    else
        reshape_and_cache_kernel<T, kMode, false><<<grid, block, 0, stream>>>(p);
}

template <class T>
void launch_fp8(const CacheParams &p, int mode, bool vec, dim3 grid, dim3 block,
                cudaStream_t stream) {
    if (mode == kFp8E4M3)
        launch<T, kFp8E4M3>(p, vec, grid, block, stream);
    else
        launch<T, kFp8E5M2>(p, vec, grid, block, stream);
}

}  // namespace

fa_status fa_cuda__reshape_and_cache(const fa_cache_write_args *a, cudaStream_t stream, char *err,
                                     size_t err_size) {
    if (!a) return fail(err, err_size, FA_ERR_INVALID_ARG, "args is NULL");
    if (a->num_tokens < 0)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "num_tokens %d is negative", (int)a->num_tokens);
    if (a->num_heads_kv < 1 || a->num_heads_kv > 65535)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "num_heads_kv %d is outside [1, 65535]",
                    (int)a->num_heads_kv);
    if (a->head_size % 8 != 0)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "head_size %d is not a multiple of 8",
                    (int)a->head_size);
    if (a->head_size < 8 || a->head_size > 256)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "head_size %d is outside [8, 256]",
                    (int)a->head_size);
    if (a->block_size < 1)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "block_size %d must be >= 1", (int)a->block_size);
    if (a->kv_dtype != FA_DTYPE_F32 && a->kv_dtype != FA_DTYPE_F16 && a->kv_dtype != FA_DTYPE_BF16)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "kv_dtype %s (%d) is not F32, F16 or BF16",
                    dtype_name(a->kv_dtype), (int)a->kv_dtype);
    int mode;
    if (a->cache_dtype == a->kv_dtype)
        mode = kCopy;
    else if (a->cache_dtype == FA_DTYPE_FP8_E4M3)
        mode = kFp8E4M3;
    else if (a->cache_dtype == FA_DTYPE_FP8_E5M2)
        mode = kFp8E5M2;
    else
        return fail(err, err_size, FA_ERR_UNSUPPORTED,
                    "cache_dtype %s (%d) is neither kv_dtype %s nor FP8_E4M3 / FP8_E5M2",
                    dtype_name(a->cache_dtype), (int)a->cache_dtype, dtype_name(a->kv_dtype));
    if (mode != kCopy) {
        // !(x > 0) also catches NaN; x - x != 0 catches +inf
        if (!(a->k_scale > 0.0f) || a->k_scale - a->k_scale != 0.0f)
            return fail(err, err_size, FA_ERR_INVALID_ARG, "k_scale %g must be positive and finite",
                        (double)a->k_scale);
        if (!(a->v_scale > 0.0f) || a->v_scale - a->v_scale != 0.0f)
            return fail(err, err_size, FA_ERR_INVALID_ARG, "v_scale %g must be positive and finite",
                        (double)a->v_scale);
    }
    if (a->num_tokens == 0) return FA_OK;
    if (!a->key) return fail(err, err_size, FA_ERR_INVALID_ARG, "key is NULL");
    if (!a->value) return fail(err, err_size, FA_ERR_INVALID_ARG, "value is NULL");
    if (!a->key_cache) return fail(err, err_size, FA_ERR_INVALID_ARG, "key_cache is NULL");
    if (!a->value_cache) return fail(err, err_size, FA_ERR_INVALID_ARG, "value_cache is NULL");
    if (!a->slot_mapping) return fail(err, err_size, FA_ERR_INVALID_ARG, "slot_mapping is NULL");
    const int64_t row = (int64_t)a->num_heads_kv * a->head_size;
    if (a->num_tokens > 1 && a->key_token_stride < row)
        return fail(err, err_size, FA_ERR_INVALID_ARG,
                    "key_token_stride %lld is smaller than num_heads_kv * head_size = %lld",
                    (long long)a->key_token_stride, (long long)row);
    if (a->num_tokens > 1 && a->value_token_stride < row)
        return fail(err, err_size, FA_ERR_INVALID_ARG,
                    "value_token_stride %lld is smaller than num_heads_kv * head_size = %lld",
                    (long long)a->value_token_stride, (long long)row);
    if (a->cache_block_stride < 0)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "cache_block_stride %lld is negative",
                    (long long)a->cache_block_stride);
    if (a->cache_page_stride < 0)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "cache_page_stride %lld is negative",
                    (long long)a->cache_page_stride);
    if (a->cache_head_stride < 0)
        return fail(err, err_size, FA_ERR_INVALID_ARG, "cache_head_stride %lld is negative",
                    (long long)a->cache_head_stride);

    // 16-byte source vectors; 16-byte destination vectors (8-byte for fp8)
    const int in_es = elem_size(a->kv_dtype), out_es = elem_size(a->cache_dtype);
    const int64_t out_align = out_es == 1 ? 8 : 16;
    const bool vec = aligned(a->key, 16) && aligned(a->value, 16) &&
                     (a->key_token_stride * in_es) % 16 == 0 &&
                     (a->value_token_stride * in_es) % 16 == 0 &&
                     aligned(a->key_cache, out_align) && aligned(a->value_cache, out_align) &&
                     (a->cache_block_stride * out_es) % out_align == 0 &&
                     (a->cache_page_stride * out_es) % out_align == 0 &&
                     (a->cache_head_stride * out_es) % out_align == 0;

    CacheParams p;
    p.key = a->key;
    p.value = a->value;
    p.key_token_stride = a->key_token_stride;
    p.value_token_stride = a->value_token_stride;
    p.key_cache = a->key_cache;
    p.value_cache = a->value_cache;
    p.block_stride = a->cache_block_stride;
    p.page_stride = a->cache_page_stride;
    p.head_stride = a->cache_head_stride;
    p.slot_mapping = a->slot_mapping;
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
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail(err, err_size, FA_ERR_BACKEND, "kernel launch failed: %s", cudaGetErrorString(e));
    return FA_OK;
}
