// merge_kernels.cu - merge_states (SEMANTICS §4) and dcp_correct (§7.3), with the decision
// table's rules for empty partial states.
//
// merge_states, per (token t, head h), float32 math:
//     p = prefix_lse[h, t], s = suffix_lse[h, t]; +-inf and NaN -> -inf (empty), as the CPU
//     M = max(p, s); both empty -> out = 0, out_lse = -inf
//     a = exp(p - M), c = exp(s - M), S = a + c
//     out = prefix * (a / S) + suffix * (c / S); out_lse = ln S + M
//   A side whose weight is 0 is not read (its output may hold anything, NaN included).
// dcp_correct, per (t, h), in place:
//     l_s = lse_all[s, h, t], NaN / +inf -> -inf; M = max_s l_s, M := 0 if all are -inf
//     L = M + ln sum_s exp(l_s - M)              (-inf when every rank is empty)
//     e = lse_all[rank, h, t] - L, NaN / +inf -> -inf
//     out[t, h, :] *= exp(e) (a factor of 0 writes 0); lse_out[h, t] = L
//
// Kernel shape (memory-bound). merge_states: a thread owns one 16-byte chunk of one (t, h) row
// (8 elements of f16 / bf16, 4 of f32) and computes the row's weights itself from the LSEs (a
// broadcast read within the warp); a block covers whole [H x D] rows of consecutive tokens
// (FaRowMap), so its reads and writes are contiguous. dcp_correct: a team of 2^k lanes owns a
// (t, h) row, each lane up to kDcpPer chunks of it (lane + j * team), and the lanes of a warp
// hold consecutive tokens of one head: the warp's LSE reads lse_all[s, h, t..] share one
// sector per rank, and a block is a tile of (2^m tokens x heads). Every load of a dcp_correct
// thread (its chunks and the row's first kDcpLse LSEs) is issued before the LSE math. Plain
// (coherent) loads throughout: out may alias an input (dcp_correct is in place). 16-byte loads
// and stores when the pointers and strides allow, else element by element (same mapping).
#include "fa_cuda_internal.cuh"

#include <math.h>

namespace {

constexpr int kThreads = 256;
constexpr int kDcpPer = 4; // dcp_correct: chunks a lane (vector path; 2 element by element)

struct TF32 {
    typedef float raw;
    static __device__ __forceinline__ float to_float(raw r) { return r; }
    static __device__ __forceinline__ raw from_float(float x) { return x; }
};
struct TF16 {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_float(raw r) { return __half2float(__ushort_as_half(r)); }
    static __device__ __forceinline__ raw from_float(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
struct TBF16 {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_float(raw r) {
        return __bfloat162float(__ushort_as_bfloat16(r));
    }
    static __device__ __forceinline__ raw from_float(float x) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    }
};

template <class T> struct alignas(16) Chunk {
    static constexpr int n = 16 / (int)sizeof(typename T::raw);
    typename T::raw e[n];
};

template <class T, bool kVec>
__device__ __forceinline__ void load_raw(const typename T::raw *src, Chunk<T> *c) {
    if (kVec) {
        *reinterpret_cast<uint4 *>(c) = *reinterpret_cast<const uint4 *>(src);
    } else {
#pragma unroll
        for (int i = 0; i < Chunk<T>::n; ++i) c->e[i] = src[i];
    }
}

template <class T, bool kVec>
__device__ __forceinline__ void store_raw(typename T::raw *dst, const Chunk<T> &c) {
    if (kVec) {
        *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(&c);
    } else {
#pragma unroll
        for (int i = 0; i < Chunk<T>::n; ++i) dst[i] = c.e[i];
    }
}

template <class T, bool kVec>
__device__ __forceinline__ void load_chunk(const typename T::raw *src, float *x) {
    Chunk<T> c;
    load_raw<T, kVec>(src, &c);
#pragma unroll
    for (int i = 0; i < Chunk<T>::n; ++i) x[i] = T::to_float(c.e[i]);
}

template <class T, bool kVec>
__device__ __forceinline__ void store_chunk(typename T::raw *dst, const float *x) {
    Chunk<T> c;
#pragma unroll
    for (int i = 0; i < Chunk<T>::n; ++i) c.e[i] = T::from_float(x[i]);
    store_raw<T, kVec>(dst, c);
}

// ---------------------------------------------------------------------------------------------
// merge_states

struct MergeParams {
    void *out; // [T, H, D]
    int64_t out_token_stride, out_head_stride;
    float *out_lse; // NULL-able; [H, T]
    int64_t out_lse_head_stride;
    const void *prefix; // [T, H, D]
    int64_t prefix_token_stride, prefix_head_stride;
    const float *prefix_lse; // [H, T]
    int64_t prefix_lse_head_stride;
    const void *suffix;
    int64_t suffix_token_stride, suffix_head_stride;
    const float *suffix_lse;
    int64_t suffix_lse_head_stride;
    int32_t num_tokens;
    FaRowMap map;
};

// merge: an LSE that is not finite (+-inf, NaN) marks an empty side
__device__ __forceinline__ float empty_if_not_finite(float l) { return isfinite(l) ? l : -INFINITY; }

template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads) merge_states_kernel(const MergeParams p) {
    typedef typename T::raw R;
    constexpr int n = Chunk<T>::n;
    int64_t t;
    int hh, c;
    if (!fa_row_pos(p.map, &t, &hh, &c) || t >= p.num_tokens) return;
    const int64_t h = hh;
    const int d = c * n;

    // every load first (one round trip); a side with weight 0 is then ignored, never
    // multiplied by 0 (its output may hold anything, NaN included)
    const float pl = empty_if_not_finite(*(p.prefix_lse + h * p.prefix_lse_head_stride + t));
    const float sl = empty_if_not_finite(*(p.suffix_lse + h * p.suffix_lse_head_stride + t));
    float px[n], sx[n];
    load_chunk<T, kVec>(static_cast<const R *>(p.prefix) + t * p.prefix_token_stride +
                            h * p.prefix_head_stride + d,
                        px);
    load_chunk<T, kVec>(static_cast<const R *>(p.suffix) + t * p.suffix_token_stride +
                            h * p.suffix_head_stride + d,
                        sx);
    const float m = fmaxf(pl, sl);
    float pw = 0.0f, sw = 0.0f, lse = -INFINITY;
    if (m != -INFINITY) { // at least one side holds keys
        const float a = expf(pl - m), c = expf(sl - m), s = a + c;
        pw = a / s;
        sw = c / s;
        lse = logf(s) + m;
    }
    float acc[n];
#pragma unroll
    for (int i = 0; i < n; ++i) {
        float v = 0.0f;
        if (pw != 0.0f) v = px[i] * pw;
        if (sw != 0.0f) v += sx[i] * sw;
        acc[i] = v;
    }
    store_chunk<T, kVec>(static_cast<R *>(p.out) + t * p.out_token_stride + h * p.out_head_stride + d, acc);
    if (p.out_lse && c == 0) p.out_lse[h * p.out_lse_head_stride + t] = lse;
}

// ---------------------------------------------------------------------------------------------
// dcp_correct

struct DcpParams {
    void *out; // [T, H, D], in place
    int64_t out_token_stride, out_head_stride;
    const float *lse_all; // [W, H, T] contiguous
    float *lse_out; // NULL-able; [H, T] contiguous
    int32_t world_size, rank, num_tokens, num_heads;
    int32_t cph; // 16-byte chunks a (t, h) row
    int32_t team_log2; // lanes a row
    int32_t tok_log2; // tokens a block tile (a block: 2^tok_log2 tokens x blockDim.x >> (both) heads)
    int32_t token_tiles; // ceil(num_tokens / 2^tok_log2); blockIdx.y strides over them
};

constexpr int kDcpLse = 4; // LSEs a thread loads up front (ranks past it are read in the math)

__device__ __forceinline__ float empty_if_nan_or_pinf(float l) {
    return (isnan(l) || l == INFINITY) ? -INFINITY : l;
}

// A thread corrects the chunks lane + j * team (j < kPer, chunk < cph) of row (t, h): the row's
// weight (W LSE reads, exp, log) is computed once for all of them, after every load is issued.
template <class T, bool kVec, int kPer>
__global__ void __launch_bounds__(kThreads) dcp_correct_kernel(const DcpParams p) {
    typedef typename T::raw R;
    const uint32_t team = 1u << p.team_log2;
    const uint32_t lane = threadIdx.x & (team - 1);
    const uint32_t tl = (threadIdx.x >> p.team_log2) & ((1u << p.tok_log2) - 1);
    const uint32_t hl = threadIdx.x >> (p.team_log2 + p.tok_log2);
    const int64_t h = (int64_t)blockIdx.x * (blockDim.x >> (p.team_log2 + p.tok_log2)) + hl;
    if (h >= p.num_heads) return;
    const int64_t rank_stride = (int64_t)p.num_heads * p.num_tokens;
    for (int64_t tile = blockIdx.y; tile < p.token_tiles; tile += gridDim.y) {
        const int64_t t = (tile << p.tok_log2) + tl;
        if (t >= p.num_tokens) return;
        R *row = static_cast<R *>(p.out) + t * p.out_token_stride + h * p.out_head_stride;
        const float *col = p.lse_all + h * p.num_tokens + t;
        // every load first: the row's chunks, then its first kDcpLse LSEs (one round trip)
        Chunk<T> x[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j)
            if (lane + j * team < (uint32_t)p.cph)
                load_raw<T, kVec>(row + (lane + j * team) * Chunk<T>::n, &x[j]);
        float l[kDcpLse];
#pragma unroll
        for (int s = 0; s < kDcpLse; ++s) l[s] = s < p.world_size ? col[s * rank_stride] : -INFINITY;
        // the weight, in the order of the CPU reference: max, then the sum from rank 0 up
        float m = -INFINITY;
#pragma unroll
        for (int s = 0; s < kDcpLse; ++s) m = fmaxf(m, empty_if_nan_or_pinf(l[s]));
        for (int s = kDcpLse; s < p.world_size; ++s) m = fmaxf(m, empty_if_nan_or_pinf(col[s * rank_stride]));
        if (m == -INFINITY) m = 0.0f; // every rank empty: L becomes -inf, not NaN
        float sum = 0.0f;
#pragma unroll
        for (int s = 0; s < kDcpLse; ++s)
            if (s < p.world_size) sum += expf(empty_if_nan_or_pinf(l[s]) - m);
        for (int s = kDcpLse; s < p.world_size; ++s)
            sum += expf(empty_if_nan_or_pinf(col[s * rank_stride]) - m);
        const float L = m + logf(sum);
        float lr = 0.0f;
#pragma unroll
        for (int s = 0; s < kDcpLse; ++s)
            if (s == p.rank) lr = l[s];
        if (p.rank >= kDcpLse) lr = col[p.rank * rank_stride];
        float e = lr - L;
        if (isnan(e) || e == INFINITY) e = -INFINITY;
        const float f = expf(e);
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            if (lane + j * team >= (uint32_t)p.cph) continue;
#pragma unroll
            for (int i = 0; i < Chunk<T>::n; ++i) {
                const float v = T::to_float(x[j].e[i]);
                x[j].e[i] = T::from_float(f != 0.0f ? v * f : 0.0f); // 0, never 0 * NaN
            }
            store_raw<T, kVec>(row + (lane + j * team) * Chunk<T>::n, x[j]);
        }
        if (p.lse_out && lane == 0) p.lse_out[h * p.num_tokens + t] = L;
    }
}

// ---------------------------------------------------------------------------------------------
// host side

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

int elem_size(fa_dtype t) { return (int)fa_bu_dtype_size(t); }

bool vec_ok(const void *ptr, int64_t token_stride, int64_t head_stride, int es) {
    return aligned16(ptr) && (token_stride * es) % 16 == 0 && (head_stride * es) % 16 == 0;
}

FaRowMap shape(fa_dtype dtype, int32_t num_tokens, int32_t num_heads, int32_t head_size, dim3 *grid,
               dim3 *block) {
    const int chunks = head_size * elem_size(dtype) / 16; // 1..64 per head
    return fa_row_map(num_tokens, num_heads, chunks, kThreads, grid, block);
}

template <class T>
void launch_merge(const MergeParams &p, bool vec, dim3 grid, dim3 block, cudaStream_t stream) {
    if (vec)
        merge_states_kernel<T, true><<<grid, block, 0, stream>>>(p);
    else
        merge_states_kernel<T, false><<<grid, block, 0, stream>>>(p);
}

template <class T> void launch_dcp(const DcpParams &p, bool vec, dim3 grid, dim3 block, cudaStream_t stream) {
    if (vec)
        dcp_correct_kernel<T, true, kDcpPer><<<grid, block, 0, stream>>>(p);
    else
        dcp_correct_kernel<T, false, 2><<<grid, block, 0, stream>>>(p);
}

int ceil_log2(int64_t x) {
    int l = 0;
    while (((int64_t)1 << l) < x) ++l;
    return l;
}

fa_status launched(const fa_bu_err *e) {
    const cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return fa_bu_fail(e, FA_ERR_BACKEND, "kernel launch failed: %s", cudaGetErrorString(ce));
    return FA_OK;
}

} // namespace

fa_status fa_cuda__merge_states_check(const fa_merge_args *a, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "merge_states");
    return fa_bu_check_merge(&e, a);
}

fa_status fa_cuda__merge_states(const fa_merge_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "merge_states");
    const fa_status st = fa_cuda__merge_states_check(a, err, err_size);
    cudaStream_t stream = L->stream;
    if (st != FA_OK || a->num_tokens == 0) return st;

    MergeParams p;
    p.out = a->out;
    p.out_token_stride = a->out_token_stride;
    p.out_head_stride = a->out_head_stride;
    p.out_lse = a->out_lse;
    p.out_lse_head_stride = a->out_lse_head_stride;
    p.prefix = a->prefix_out;
    p.prefix_token_stride = a->prefix_token_stride;
    p.prefix_head_stride = a->prefix_head_stride;
    p.prefix_lse = a->prefix_lse;
    p.prefix_lse_head_stride = a->prefix_lse_head_stride;
    p.suffix = a->suffix_out;
    p.suffix_token_stride = a->suffix_token_stride;
    p.suffix_head_stride = a->suffix_head_stride;
    p.suffix_lse = a->suffix_lse;
    p.suffix_lse_head_stride = a->suffix_lse_head_stride;
    p.num_tokens = a->num_tokens;

    const int es = elem_size(a->dtype);
    const bool vec = vec_ok(a->out, a->out_token_stride, a->out_head_stride, es) &&
                     vec_ok(a->prefix_out, a->prefix_token_stride, a->prefix_head_stride, es) &&
                     vec_ok(a->suffix_out, a->suffix_token_stride, a->suffix_head_stride, es);
    dim3 grid, block;
    p.map = shape(a->dtype, a->num_tokens, a->num_heads, a->head_size, &grid, &block);
    switch (a->dtype) {
    case FA_DTYPE_F32: launch_merge<TF32>(p, vec, grid, block, stream); break;
    case FA_DTYPE_F16: launch_merge<TF16>(p, vec, grid, block, stream); break;
    default: launch_merge<TBF16>(p, vec, grid, block, stream); break;
    }
    return launched(&e);
}

fa_status fa_cuda__dcp_correct_check(const fa_dcp_correct_args *a, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "dcp_correct");
    return fa_bu_check_dcp_correct(&e, a);
}

fa_status fa_cuda__dcp_correct(const fa_dcp_correct_args *a, const FaLaunch *L, char *err, size_t err_size) {
    const fa_bu_err e = fa_bu_err_make(err, err_size, "dcp_correct");
    const fa_status st = fa_cuda__dcp_correct_check(a, err, err_size);
    cudaStream_t stream = L->stream;
    if (st != FA_OK || a->num_tokens == 0) return st;

    DcpParams p;
    p.out = a->out;
    p.out_token_stride = a->out_token_stride;
    p.out_head_stride = a->out_head_stride;
    p.lse_all = a->lse_all;
    p.lse_out = a->lse_out;
    p.world_size = a->world_size;
    p.rank = a->rank;
    p.num_tokens = a->num_tokens;
    p.num_heads = a->num_heads;

    const bool vec = vec_ok(a->out, a->out_token_stride, a->out_head_stride, elem_size(a->dtype));
    // a row's team: the fewest lanes (a power of two) that cover its chunks at kPer a lane; a
    // block: 256 / team rows, as many consecutive tokens of a head as there are (up to all of
    // them), then further heads
    const int per = vec ? kDcpPer : 2;
    p.cph = a->head_size * elem_size(a->dtype) / 16; // 1..64
    p.team_log2 = ceil_log2((p.cph + per - 1) / per);
    const int rows_log2 = ceil_log2(kThreads) - p.team_log2;
    p.tok_log2 = ceil_log2(a->num_tokens) < rows_log2 ? ceil_log2(a->num_tokens) : rows_log2;
    const int heads_log2 = rows_log2 - p.tok_log2;
    p.token_tiles = (int32_t)(((int64_t)a->num_tokens + ((int64_t)1 << p.tok_log2) - 1) >> p.tok_log2);
    const dim3 block((unsigned)kThreads);
    const dim3 grid((unsigned)((a->num_heads + (1 << heads_log2) - 1) >> heads_log2),
                    (unsigned)(p.token_tiles < 65535 ? p.token_tiles : 65535));
    switch (a->dtype) {
    case FA_DTYPE_F32: launch_dcp<TF32>(p, vec, grid, block, stream); break;
    case FA_DTYPE_F16: launch_dcp<TF16>(p, vec, grid, block, stream); break;
    default: launch_dcp<TBF16>(p, vec, grid, block, stream); break;
    }
    return launched(&e);
}
