// split_combine.cuh - the split-KV combine of one (token, query head) row by one warp: the body
// of attention.cu's combine kernel and of the multi-warp decode tile's fused combine (the last
// CTA of a (sequence, KV head) merges its splits, decode_mw.cu), one function so that both give
// a row the same bits.
//
// L = M + ln sum_s exp(L_s - M) (M := 0 when every L_s is -inf), O = sum_s exp(L_s - L) O_s,
// s ascending. Partials: split_out [S, T, Hq, D] f32, split_lse [S, Hq, T] (every split below
// the sequence's count wrote its row: an empty split zeros and -inf).
#pragma once

#include "attention_kernel.cuh"

#if !defined(__HIP_PLATFORM_AMD__)

namespace fa_attn {

__device__ __forceinline__ void combine_store4(__half *dst, float a, float b, float c, float d) {
    __half2 v[2] = {__floats2half2_rn(a, b), __floats2half2_rn(c, d)};
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(v);
}

__device__ __forceinline__ void combine_store4(__nv_bfloat16 *dst, float a, float b, float c, float d) {
    __nv_bfloat162 v[2] = {__floats2bfloat162_rn(a, b), __floats2bfloat162_rn(c, d)};
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(v);
}

// CG: loads through L2 only (ld.global.cg): the fused combine reads partials other CTAs of the
// same grid wrote, which this SM's L1 may hold stale; the combine kernel (a later grid) reads
// them plainly.
template <bool CG> __device__ __forceinline__ float combine_ld(const float *src) {
    if constexpr (CG) return __ldcg(src);
    return *src;
}

template <bool CG> __device__ __forceinline__ float4 combine_ld4(const float *src) {
    if constexpr (CG) return __ldcg(reinterpret_cast<const float4 *>(src));
    return *reinterpret_cast<const float4 *>(src);
}

// Merges the ns > 1 partials of row (tok, h) into out (and lse): the whole warp calls it, lane
// = its lane. CB: splits whose rows are loaded in one round trip (a divisor of 32; the bits do
// not depend on it: the accumulation is s ascending either way, CB only batches the loads).
template <typename QT, int CB, bool CG>
__device__ __forceinline__ void combine_row(const Params &p, int tok, int h, int ns, int lane) {
    static_assert(CB >= 1 && 32 % CB == 0, "CB divides 32");
    const int64_t lse_stride = static_cast<int64_t>(p.num_heads_q) * p.num_tokens;
    const float *ls = p.split_lse + static_cast<int64_t>(h) * p.num_tokens + tok;
    // each lane owns float4 chunks c = lane and lane + 32 of the row (head_size <= 256)
    const int nchunk = p.head_size / 4;
    const int64_t ostride = static_cast<int64_t>(p.num_tokens) * p.num_heads_q * p.head_size;
    const float *os = p.split_out + (static_cast<int64_t>(tok) * p.num_heads_q + h) * p.head_size;
    // batches of CB splits: every read of a batch is issued before the first is used (the
    // partial rows were just written and sit in L2; a read per round trip made the combine of
    // a 64-split request ~latency x 64). The first batch goes out with the first 32 LSEs, before
    // any weight is known. Accumulation order: s ascending, as one loop would.
    float4 v0[CB], v1[CB];
    auto load = [&](int s, int cnt) { // splits s .. s + CB - 1 that are below cnt
#pragma unroll
        for (int j = 0; j < CB; ++j) {
            const float *src = os + static_cast<int64_t>(s + j) * ostride;
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            const bool in = s + j < cnt;
            v0[j] = in && lane < nchunk ? combine_ld4<CG>(src + lane * 4) : z;
            v1[j] = in && lane + 32 < nchunk ? combine_ld4<CG>(src + (lane + 32) * 4) : z;
        }
    };
    const float l0 = lane < ns ? combine_ld<CG>(ls + lane * lse_stride) : -INFINITY;
    load(0, ns);
    float M = l0;
    for (int s = 32 + lane; s < ns; s += 32) M = fmaxf(M, combine_ld<CG>(ls + s * lse_stride));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float Muse = M == -INFINITY ? 0.f : M;
    float sum = lane < ns ? expf(l0 - Muse) : 0.f;
    for (int s = 32 + lane; s < ns; s += 32) sum += expf(combine_ld<CG>(ls + s * lse_stride) - Muse);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float L = sum == 0.f ? -INFINITY : Muse + logf(sum);

    float4 acc0 = make_float4(0.f, 0.f, 0.f, 0.f), acc1 = acc0;
    for (int s0 = 0; s0 < ns; s0 += 32) {
        const int sl = s0 + lane;
        const float lsl = s0 == 0 ? l0 : (sl < ns ? combine_ld<CG>(ls + sl * lse_stride) : -INFINITY);
        const float wl = (sl < ns && L != -INFINITY) ? expf(lsl - L) : 0.f;
        const int cnt = min(32, ns - s0);
        for (int k0 = 0; k0 < cnt; k0 += CB) {
            if (s0 + k0 > 0) load(s0 + k0, ns);
            float w[CB];
#pragma unroll
            for (int j = 0; j < CB; ++j) {
                const float wj = __shfl_sync(0xffffffffu, wl, (k0 + j) & 31);
                w[j] = k0 + j < cnt ? wj : 0.f; // 0: past the last split, or an empty split
            }
#pragma unroll
            for (int j = 0; j < CB; ++j) {
                if (w[j] == 0.f) continue; // empty split (its O is 0): nothing added
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
    if (lane < nchunk) combine_store4(dst + lane * 4, acc0.x, acc0.y, acc0.z, acc0.w);
    if (lane + 32 < nchunk) combine_store4(dst + (lane + 32) * 4, acc1.x, acc1.y, acc1.z, acc1.w);
    if (lane == 0 && p.lse != nullptr) p.lse[static_cast<int64_t>(h) * p.lse_head_stride + tok] = L;
}

} // namespace fa_attn

#endif // !__HIP_PLATFORM_AMD__
