// attention_portable.cuh - the portable attention kernel: plain FMA over shared-memory tiles,
// no tensor-core instruction, no inline assembly. The HIP backend's attention (AMD has no
// mma.sync / ldmatrix / cp.async; an MFMA path does not exist yet), and, through the group
// width template parameter, a test bed for wave-64 logic on NVIDIA.
//
// Semantics: SEMANTICS §3.2 / fa_attn_args, every feature: paged (block table, seqused_k) and
// dense (cu_seqlens_k) K/V; bottom-right causal and (left, right) windows; softcap (after the
// scale); ALiBi ([Hq] or [B, Hq]); sinks (split 0 only, joins the max, no value row); GQA/MQA and
// query-head groups (q_head_group); split-KV with float32 partials + LSE and a combine kernel;
// fp8 E4M3 / E5M2 K/V with per-(sequence, KV head) descales (or k_scale / v_scale); LSE out.
//
// Work split. A CTA owns BM rows of one (sequence, KV head, split); a row is a (query token,
// query head of that KV head) pair, so a K/V tile serves every query head reading it (GQA
// packing, as in the CUDA kernels). The CTA's NT threads form NT / W groups of W lanes ("a
// group" = a warp when W == FA_WARP_SIZE; W = 64 on NVIDIA is two warps cooperating through
// shared memory: the wave-64 logic of AMD run on 32-lane hardware). Each group owns RPG rows.
// Per key tile (BN keys, staged in shared memory as the query dtype; fp8 converted on the way
// in, exactly):
//   S   lane l scores key l / C (+ k * W / C) over the dims c, c + C, ... (C = W / BN lanes
//       share a key when BN < W; their partial dots meet by shuffles inside one hardware warp);
//       scale, softcap, ALiBi, mask;
//   max the group's row maximum (shuffles; for W > FA_WARP_SIZE also shared memory); online
//       softmax: m, a per-lane partial of l, O rescaled by exp(m_old - m_new);
//   PV  p goes through shared memory; lane l accumulates the dims (2 l, 2 l + 1) + 2 W k.
// l is reduced over the group once, at the end.
//
// Shared memory rows are padded so that the S phase's reads (row stride RS words, lanes at
// key * RS + c) hit 32 distinct banks: RS = C (mod 32).
#pragma once

#include "fa_cuda_internal.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

namespace fa_portable {

enum { KV_SAME = 0, KV_FP8 = 1 };

constexpr int kThreads = 256;                 // per CTA (4 waves of 64, 8 warps of 32)
constexpr int kRows = 32;                     // BM: rows (token, query head) per CTA
constexpr int kBlockSizeMultiple = 1;         // any block size >= 1, as the CUDA kernels
constexpr int kHeadSizeMultiple = 8;          // one 16-byte chunk of a 16-bit row
constexpr int kAlignBytes = 16;
constexpr int kMaxSplits = 128;

// Compiled widths (a head size runs in the next one, padded with zeros).
constexpr int padded_dim(int head_size) {
    return head_size <= 64 ? 64 : (head_size <= 128 ? 128 : (head_size <= 256 ? 256 : 0));
}
// BN: keys per tile (shared memory stays under 48 KB at every width and group size).
constexpr int tile_keys(int D) { return D <= 64 ? 64 : (D <= 128 ? 32 : 16); }

struct Params {
    const void *q;                      // [T, Hq, D] through the group addressing
    int64_t q_token_stride, q_head_stride, q_group_stride;
    int32_t q_head_group;               // heads per group (resolved: never 0)
    const void *k, *v;
    int64_t k_block_stride, k_row_stride, k_head_stride;
    int64_t v_block_stride, v_row_stride, v_head_stride;
    void *out;                          // [T, Hq, D]
    int64_t out_token_stride, out_head_stride;
    float *lse;                         // NULL-able [Hq, T]
    int64_t lse_head_stride;
    const int32_t *cu_seqlens_q;        // [B + 1]
    const int32_t *seqused_k;           // [B] paged, else NULL
    const int32_t *cu_seqlens_k;        // [B + 1] dense, else NULL
    const int32_t *block_table;         // [B, *]
    int64_t block_table_stride, num_blocks;
    int32_t num_seqs, num_tokens, num_heads_q, num_heads_kv, head_size, block_size;
    float softmax_scale, softcap;
    int32_t window_left, window_right;  // right already 0 when causal
    const float *alibi_slopes;          // NULL-able
    int64_t alibi_batch_stride;
    const float *sinks;                 // NULL-able [Hq]
    const float *k_descale, *v_descale; // NULL-able [B, Hkv]
    int64_t descale_batch_stride, descale_head_stride;
    float k_scale, v_scale;
    int32_t kv_e5m2;                    // fp8: 1 = E5M2
    int32_t num_splits;                 // static S (>= 1)
    const int32_t *split_plan;          // NULL-able [1 + B]
    float *split_out, *split_lse;       // S > 1: [S, T, Hq, head_size], [S, Hq, T]
    FaDevErr *err_word;                 // the backend's error word (bad block ids)
};

// ---- the query dtype's 16 bits -----------------------------------------------------------------
struct F16 {
    static __device__ __forceinline__ float to_float(uint32_t u) {
        return __half2float(__ushort_as_half((unsigned short)u));
    }
    static __device__ __forceinline__ uint32_t from_float(float f) {
        return __half_as_ushort(__float2half_rn(f));
    }
};
struct BF16 {
    static __device__ __forceinline__ float to_float(uint32_t u) { return __uint_as_float(u << 16); }
    static __device__ __forceinline__ uint32_t from_float(float f) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

// ---- the tile shape of one instance ------------------------------------------------------------
template <int D, int W> struct Tile {
    static constexpr int NT = kThreads;
    static constexpr int NG = NT / W;                  // groups per CTA
    static constexpr int BM = kRows;
    static constexpr int RPG = BM / NG;                // rows per group
    static constexpr int BN = tile_keys(D);
    static constexpr int C = W > BN ? W / BN : 1;      // lanes sharing one key in the S phase
    static constexpr int KPL = BN > W ? BN / W : 1;    // keys per lane in the S phase
    static constexpr int DW = D / 2;                   // 32-bit words of a row (2 elements)
    static constexpr int NWL = (DW + W - 1) / W;       // PV: words per lane
    static constexpr int RS = DW + (((C - DW) % 32) + 32) % 32;   // padded K/V row, = C (mod 32)
    static constexpr int CHUNKS = D / 8;               // 8-element chunks of a row
    static constexpr int HW = W < FA_WARP_SIZE ? W : FA_WARP_SIZE;   // lanes a shuffle reaches
    static constexpr int WARPS_PER_GROUP = W / HW;
    static_assert(NT % W == 0 && BM % NG == 0, "tile: rows must split evenly over the groups");
    static_assert(W % BN == 0 || BN % W == 0, "tile: keys and lanes must nest");
    static_assert(C <= FA_WARP_SIZE, "tile: the lanes of one key must sit in one hardware warp");
    static_assert(DW % C == 0, "tile: dims must split evenly over the lanes of a key");
    static_assert((W / C) * KPL == BN, "tile: lanes x keys per lane must cover the tile");
};

// Reduces N values over the W lanes of this thread's group (max or sum); every thread of the
// CTA must call it (W > FA_WARP_SIZE: it synchronises the CTA). red: NT / FA_WARP_SIZE * N floats.
template <int W, int N, bool kMax> __device__ __forceinline__ void group_reduce(float (&v)[N], float *red) {
    constexpr int HW = W < FA_WARP_SIZE ? W : FA_WARP_SIZE;
#pragma unroll
    for (int o = HW / 2; o > 0; o >>= 1) {
#pragma unroll
        for (int n = 0; n < N; ++n) {
            const float x = fa_shfl_xor(FA_FULL_LANE_MASK, v[n], o, HW);
            v[n] = kMax ? fmaxf(v[n], x) : v[n] + x;
        }
    }
    if constexpr (W > FA_WARP_SIZE) {   // emulated wide group: the hardware warps meet in shared memory
        constexpr int WPG = W / FA_WARP_SIZE;
        const int warp = (int)threadIdx.x / FA_WARP_SIZE;
        __syncthreads();   // red is free (its previous readers are done)
        if ((int)threadIdx.x % FA_WARP_SIZE == 0) {
#pragma unroll
            for (int n = 0; n < N; ++n) red[warp * N + n] = v[n];
        }
        __syncthreads();
        const int first = (warp / WPG) * WPG;
#pragma unroll
        for (int n = 0; n < N; ++n) {
            float acc = red[first * N + n];
#pragma unroll
            for (int k = 1; k < WPG; ++k) {
                const float x = red[(first + k) * N + n];
                acc = kMax ? fmaxf(acc, x) : acc + x;
            }
            v[n] = acc;
        }
    }
}

// Splits of sequence b (0: no work for it; the CPU reference's rule).
__device__ __forceinline__ int seq_splits(const Params &p, int b) {
    int n = p.split_plan ? p.split_plan[1 + b] : p.num_splits;
    if (p.num_splits <= 1 && n > 1) n = 1;
    return n;
}

// Query head of row index `idx` in [0, G) of KV head g.
__device__ __forceinline__ int row_head(const Params &p, int g, int idx) {
    const int gpk = p.q_head_group / p.num_heads_kv;   // query heads per KV head in one group
    return (idx / gpk) * p.q_head_group + g * gpk + idx % gpk;
}

template <int D, class QT, int KV, int W>
__global__ void __launch_bounds__(kThreads) attention_kernel(const Params p) {
    using T = Tile<D, W>;
    constexpr int BM = T::BM, BN = T::BN, C = T::C, KPL = T::KPL, DW = T::DW, NWL = T::NWL;
    constexpr int RS = T::RS, RPG = T::RPG, CHUNKS = T::CHUNKS, NT = T::NT;
    __shared__ uint32_t sQ[BM * DW];
    __shared__ uint32_t sK[BN * RS];
    __shared__ uint32_t sV[BN * RS];
    __shared__ float sP[BM * BN];
    __shared__ float sRed[(NT / FA_WARP_SIZE) * RPG];

    const int tid = (int)threadIdx.x;
    const int lane = tid % W, grp = tid / W;
    const int c_lane = lane % C, k_lane = lane / C;
    const int G = p.num_heads_q / p.num_heads_kv;
    const int sp = (int)blockIdx.z;

    for (int bg = (int)blockIdx.y; bg < p.num_seqs * p.num_heads_kv; bg += (int)gridDim.y) {
        const int b = bg / p.num_heads_kv, g = bg % p.num_heads_kv;
        const int q0 = p.cu_seqlens_q[b];
        const int lq = p.cu_seqlens_q[b + 1] - q0;
        const int rows = lq * G;
        const int r0 = (int)blockIdx.x * BM;
        if (r0 >= rows) continue;
        const int ns = seq_splits(p, b);
        if (ns <= 0 || sp >= ns) continue;   // no work planned (rows untouched) / unused split
        const int64_t lk =
            p.seqused_k ? (int64_t)p.seqused_k[b] : (int64_t)p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        // keys of this split: whole blocks, ceil(blocks / ns) of them (the CPU reference's rule)
        int64_t j0 = 0, j1 = lk;
        if (p.num_splits > 1) {
            const int64_t unit = p.block_size > 0 ? p.block_size : 1;
            const int64_t kps = ((lk + unit - 1) / unit + ns - 1) / ns * unit;
            j0 = (int64_t)sp * kps < lk ? (int64_t)sp * kps : lk;
            j1 = j0 + kps < lk ? j0 + kps : lk;
        }
        // keys any row of the tile may see (bottom-right aligned window / causal)
        const int r_last = (r0 + BM < rows ? r0 + BM : rows) - 1;
        const int64_t i_min = r0 / G, i_max = r_last / G, shift = lk - lq;
        int64_t lo = j0, hi = j1;
        if (p.window_left >= 0 && i_min + shift - p.window_left > lo) lo = i_min + shift - p.window_left;
        if (p.window_right >= 0 && i_max + shift + p.window_right + 1 < hi)
            hi = i_max + shift + p.window_right + 1;
        // key tiles start at j0 + a multiple of BN whatever rows share the CTA, so that a row
        // gets the same bits in any batch (the keys below the true lo are masked per row)
        if (lo > j0) lo = j0 + (lo - j0) / BN * BN;

        float kscale = 1.0f, vscale = 1.0f;
        if (KV == KV_FP8) {
            const int64_t di = (int64_t)b * p.descale_batch_stride + (int64_t)g * p.descale_head_stride;
            kscale = p.k_descale ? p.k_descale[di] : p.k_scale;
            vscale = p.v_descale ? p.v_descale[di] : p.v_scale;
        }
        const float qk_scale = p.softmax_scale * kscale;

        // ---- Q tile -> shared memory (zero rows past the sequence, zero dims past head_size)
        __syncthreads();   // the previous (sequence, head) of this CTA is done with the tiles
        for (int x = tid; x < BM * CHUNKS; x += NT) {
            const int r = x / CHUNKS, c = x % CHUNKS;
            uint4 w = make_uint4(0u, 0u, 0u, 0u);
            const int rr = r0 + r;
            if (rr < rows && c * 8 < p.head_size) {
                const int h = row_head(p, g, rr % G);
                const int64_t t = (int64_t)q0 + rr / G;
                const int64_t off = (int64_t)(h / p.q_head_group) * p.q_group_stride +
                                    (int64_t)(h % p.q_head_group) * p.q_head_stride + t * p.q_token_stride;
                w = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p.q) + off + c * 8);
            }
            uint32_t *d = sQ + r * DW + c * 4;
            d[0] = w.x;
            d[1] = w.y;
            d[2] = w.z;
            d[3] = w.w;
        }

        // ---- per-row state: row lr = grp * RPG + r of the tile
        float m[RPG], l[RPG], o[RPG][2 * NWL];
        int64_t ti[RPG];     // query index i in the sequence (-1: no row)
        float slope[RPG];
#pragma unroll
        for (int r = 0; r < RPG; ++r) {
            const int rr = r0 + grp * RPG + r;
            ti[r] = rr < rows ? rr / G : -1;
            const int h = rr < rows ? row_head(p, g, rr % G) : 0;
            slope[r] =
                (rr < rows && p.alibi_slopes) ? p.alibi_slopes[(int64_t)b * p.alibi_batch_stride + h] : 0.0f;
            const bool sink = rr < rows && p.sinks != nullptr && sp == 0;
            m[r] = sink ? p.sinks[h] : -INFINITY;           // the sink logit joins the max...
            l[r] = (sink && lane == 0) ? 1.0f : 0.0f;       // ...and the sum (once: lane 0)
#pragma unroll
            for (int k = 0; k < 2 * NWL; ++k) o[r][k] = 0.0f;
        }

        for (int64_t k0 = lo; k0 < hi; k0 += BN) {
            // ---- K / V tile -> shared memory, as the query dtype (fp8 converted exactly)
            __syncthreads();
            for (int x = tid; x < BN * CHUNKS; x += NT) {
                const int j = x / CHUNKS, c = x % CHUNKS;
                const int64_t key = k0 + j;
                uint32_t kw[4] = {0u, 0u, 0u, 0u}, vw[4] = {0u, 0u, 0u, 0u};
                if (key < hi && c * 8 < p.head_size) {
                    int64_t krow, vrow;
                    bool ok = true;
                    if (p.cu_seqlens_k) {
                        const int64_t tok = (int64_t)p.cu_seqlens_k[b] + key;
                        krow = tok * p.k_row_stride;
                        vrow = tok * p.v_row_stride;
                    } else {
                        const int64_t col = key / p.block_size, in = key % p.block_size;
                        const int64_t blk = p.block_table[(int64_t)b * p.block_table_stride + col];
                        ok = blk >= 0 && blk < p.num_blocks;
                        if (!ok && c == 0)
                            fa_dev_err_report(p.err_word, FA_DEVERR_BLOCK_ID, b, blk, p.num_blocks, col);
                        krow = blk * p.k_block_stride + in * p.k_row_stride;
                        vrow = blk * p.v_block_stride + in * p.v_row_stride;
                    }
                    if (ok) {
                        krow += (int64_t)g * p.k_head_stride + c * 8;
                        vrow += (int64_t)g * p.v_head_stride + c * 8;
                        if (KV == KV_SAME) {
                            const uint4 a =
                                *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p.k) + krow);
                            const uint4 v =
                                *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p.v) + vrow);
                            kw[0] = a.x;
                            kw[1] = a.y;
                            kw[2] = a.z;
                            kw[3] = a.w;
                            vw[0] = v.x;
                            vw[1] = v.y;
                            vw[2] = v.z;
                            vw[3] = v.w;
                        } else {
                            const uint2 a =
                                *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(p.k) + krow);
                            const uint2 v =
                                *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(p.v) + vrow);
                            const uint32_t ka[2] = {a.x, a.y}, va[2] = {v.x, v.y};
                            const bool e5 = p.kv_e5m2 != 0;
#pragma unroll
                            for (int h = 0; h < 4; ++h) {
                                const uint32_t kb = ka[h / 2] >> (16 * (h % 2)),
                                               vb = va[h / 2] >> (16 * (h % 2));
                                kw[h] = QT::from_float(fa_fp8_to_float(kb, e5)) |
                                        (QT::from_float(fa_fp8_to_float(kb >> 8, e5)) << 16);
                                vw[h] = QT::from_float(fa_fp8_to_float(vb, e5)) |
                                        (QT::from_float(fa_fp8_to_float(vb >> 8, e5)) << 16);
                            }
                        }
                    }
                }
                uint32_t *dk = sK + j * RS + c * 4, *dv = sV + j * RS + c * 4;
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    dk[h] = kw[h];
                    dv[h] = vw[h];
                }
            }
            __syncthreads();

            // ---- S = scale * Q K^T (+ softcap, ALiBi, mask), per row of this group
            float s[RPG][KPL], mx[RPG];
#pragma unroll
            for (int r = 0; r < RPG; ++r) {
                const uint32_t *qrow = sQ + (grp * RPG + r) * DW;
                mx[r] = -INFINITY;
#pragma unroll
                for (int kk = 0; kk < KPL; ++kk) {
                    const int j = k_lane + kk * (W / C);
                    const uint32_t *krow = sK + j * RS;
                    float dot = 0.0f;
#pragma unroll 8
                    for (int t = c_lane; t < DW; t += C) {
                        const uint32_t qa = qrow[t], ka = krow[t];
                        dot = fmaf(QT::to_float(qa & 0xffffu), QT::to_float(ka & 0xffffu), dot);
                        dot = fmaf(QT::to_float(qa >> 16), QT::to_float(ka >> 16), dot);
                    }
#pragma unroll
                    for (int o2 = C / 2; o2 > 0; o2 >>= 1)
                        dot += fa_shfl_xor(FA_FULL_LANE_MASK, dot, o2, FA_WARP_SIZE);
                    const int64_t key = k0 + j;
                    float x = dot * qk_scale;
                    if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
                    const int64_t diag = ti[r] + shift;
                    x -= slope[r] * fabsf((float)(diag - key));
                    // the shared mask rule (fa_backend_util.h); hi <= lk also bounds the split
                    const bool allowed =
                        ti[r] >= 0 && key < hi &&
                        FA_BU_KEY_ALLOWED(key, diag, lk, (int64_t)p.window_left, (int64_t)p.window_right);
                    s[r][kk] = allowed ? x : -INFINITY;
                    mx[r] = fmaxf(mx[r], s[r][kk]);
                }
            }
            group_reduce<W, RPG, true>(mx, sRed);

            // ---- online softmax: p into shared memory, O and l rescaled
#pragma unroll
            for (int r = 0; r < RPG; ++r) {
                const float m_new = fmaxf(m[r], mx[r]);
                const float alpha = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
                float psum = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KPL; ++kk) {
                    const bool masked = s[r][kk] == -INFINITY;
                    const float pj = masked ? 0.0f : expf(s[r][kk] - m_new);
                    psum += pj;
                    // a masked key is -0.0 in sP: the PV loop skips it, so that a NaN in a V row
                    // that another row of the tile may see never reaches this row as 0 x NaN
                    if (c_lane == 0) sP[(grp * RPG + r) * BN + k_lane + kk * (W / C)] = masked ? -0.0f : pj;
                }
                l[r] = l[r] * alpha + (c_lane == 0 ? psum : 0.0f);
                m[r] = m_new;
#pragma unroll
                for (int k = 0; k < 2 * NWL; ++k) o[r][k] *= alpha;
            }
            __syncthreads(); // sP (written by lanes of other warps when W > FA_WARP_SIZE)

            // ---- O += P V
            const int jn = hi - k0 < BN ? (int)(hi - k0) : BN;
#pragma unroll
            for (int r = 0; r < RPG; ++r) {
                if (ti[r] < 0) continue;
                const float *prow = sP + (grp * RPG + r) * BN;
                for (int j = 0; j < jn; ++j) {
                    const float pj = prow[j];
                    if (__float_as_uint(pj) == 0x80000000u) continue; // masked for this row
                    const uint32_t *vrow = sV + j * RS;
#pragma unroll
                    for (int w = 0; w < NWL; ++w) {
                        const int t = lane + w * W;
                        if (DW % W == 0 || t < DW) {
                            const uint32_t va = vrow[t];
                            o[r][2 * w] = fmaf(pj, QT::to_float(va & 0xffffu), o[r][2 * w]);
                            o[r][2 * w + 1] = fmaf(pj, QT::to_float(va >> 16), o[r][2 * w + 1]);
                        }
                    }
                }
            }
        }

        // ---- l over the group, then out (or the split's partial) and the LSE
        group_reduce<W, RPG, false>(l, sRed);
#pragma unroll
        for (int r = 0; r < RPG; ++r) {
            if (ti[r] < 0) continue;
            const int rr = r0 + grp * RPG + r;
            const int h = row_head(p, g, rr % G);
            const int64_t t = (int64_t)q0 + ti[r];
            const float inv = l[r] > 0.0f ? vscale / l[r] : 0.0f;
            const float lse = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
            if (p.num_splits > 1) {
                float *so =
                    p.split_out + (((int64_t)sp * p.num_tokens + t) * p.num_heads_q + h) * p.head_size;
#pragma unroll
                for (int w = 0; w < NWL; ++w) {
                    const int d = 2 * (lane + w * W);
                    if (d < p.head_size) {
                        so[d] = o[r][2 * w] * inv;
                        so[d + 1] = o[r][2 * w + 1] * inv;
                    }
                }
                if (lane == 0) p.split_lse[((int64_t)sp * p.num_heads_q + h) * p.num_tokens + t] = lse;
            } else {
                uint32_t *dst = reinterpret_cast<uint32_t *>(
                    static_cast<uint16_t *>(p.out) + t * p.out_token_stride + (int64_t)h * p.out_head_stride);
#pragma unroll
                for (int w = 0; w < NWL; ++w) {
                    const int word = lane + w * W;
                    if (2 * word < p.head_size)
                        dst[word] =
                            QT::from_float(o[r][2 * w] * inv) | (QT::from_float(o[r][2 * w + 1] * inv) << 16);
                }
                if (lane == 0 && p.lse) p.lse[(int64_t)h * p.lse_head_stride + t] = lse;
            }
        }
    }
}

// Split combine: out[t, h] = sum_s exp(lse_s - L) partial_s, L = M + ln sum_s exp(lse_s - M)
// over the finite partial LSEs (SEMANTICS §9.4; all empty: zeros and -inf). One CTA per
// (query token of a sequence); threads over (head, dim).
template <class QT> __global__ void __launch_bounds__(kThreads) combine_kernel(const Params p) {
    const int i = (int)blockIdx.x;
    for (int b = (int)blockIdx.y; b < p.num_seqs; b += (int)gridDim.y) {
        const int q0 = p.cu_seqlens_q[b];
        if (i >= p.cu_seqlens_q[b + 1] - q0) continue;
        const int ns = seq_splits(p, b);
        if (ns <= 0) continue;
        const int64_t t = (int64_t)q0 + i, T = p.num_tokens;
        const int Hq = p.num_heads_q, hs = p.head_size;
        for (int x = (int)threadIdx.x; x < Hq * (hs / 2); x += (int)blockDim.x) {
            const int h = x / (hs / 2), d = 2 * (x % (hs / 2));
            float M = -INFINITY;
            for (int s = 0; s < ns; ++s) {
                const float ls = p.split_lse[((int64_t)s * Hq + h) * T + t];
                if (isfinite(ls) && ls > M) M = ls;
            }
            if (M == -INFINITY) M = 0.0f;
            float sum = 0.0f;
            for (int s = 0; s < ns; ++s) {
                const float ls = p.split_lse[((int64_t)s * Hq + h) * T + t];
                if (isfinite(ls)) sum += expf(ls - M);
            }
            const float L = sum > 0.0f ? M + logf(sum) : -INFINITY;
            float a0 = 0.0f, a1 = 0.0f;
            if (sum > 0.0f) {
                for (int s = 0; s < ns; ++s) {
                    const float ls = p.split_lse[((int64_t)s * Hq + h) * T + t];
                    if (!isfinite(ls)) continue;
                    const float wgt = expf(ls - L);
                    const float *so = p.split_out + ((s * T + t) * Hq + h) * (int64_t)hs;
                    a0 = fmaf(wgt, so[d], a0);
                    a1 = fmaf(wgt, so[d + 1], a1);
                }
            }
            uint32_t *dst = reinterpret_cast<uint32_t *>(
                static_cast<uint16_t *>(p.out) + t * p.out_token_stride + (int64_t)h * p.out_head_stride + d);
            *dst = QT::from_float(a0) | (QT::from_float(a1) << 16);
            if (d == 0 && p.lse) p.lse[(int64_t)h * p.lse_head_stride + t] = L;
        }
    }
}

// Launches the attention (and, for S > 1, the combine) of one call on `stream`.
// grid_rows: ceil(max_seqlen_q * G / BM) row tiles.
template <int D, class QT, int KV, int W>
cudaError_t launch(const Params &p, int max_seqlen_q, cudaStream_t stream) {
    using T = Tile<D, W>;
    const int G = p.num_heads_q / p.num_heads_kv;
    const int64_t tiles = ((int64_t)max_seqlen_q * G + T::BM - 1) / T::BM;
    const int64_t bh = (int64_t)p.num_seqs * p.num_heads_kv;
    if (tiles <= 0 || bh <= 0) return cudaSuccess;
    const int S = p.num_splits > 1 ? p.num_splits : 1;
    dim3 grid((unsigned)tiles, (unsigned)(bh < 65535 ? bh : 65535), (unsigned)S);
    attention_kernel<D, QT, KV, W><<<grid, dim3(T::NT), 0, stream>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || S <= 1) return e;
    dim3 cgrid((unsigned)max_seqlen_q, (unsigned)(p.num_seqs < 65535 ? p.num_seqs : 65535));
    combine_kernel<QT><<<cgrid, dim3(kThreads), 0, stream>>>(p);
    return cudaGetLastError();
}

// CTAs of one instance resident per multiprocessor (the capability block's decode residency).
template <int D, class QT, int KV, int W> int ctas_per_sm() {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attention_kernel<D, QT, KV, W>, kThreads, 0) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return n > 0 ? n : 1;
}

inline bool aligned(const void *ptr, uintptr_t n) { return (reinterpret_cast<uintptr_t>(ptr) % n) == 0; }

// Every check of the op (the structural ones, then what this kernel needs); fills *p.
// *empty: nothing to launch.
inline fa_status prepare(const fa_attn_args *a, Params *p, bool *empty, const fa_bu_err *e) {
    char n1[FA_BU_NAME_BUF];
    *empty = true;
    FA_BU_TRY(fa_bu_check_attention(e, a, kBlockSizeMultiple));
    if (a->q_dtype != FA_DTYPE_F16 && a->q_dtype != FA_DTYPE_BF16)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "q_dtype %s: the portable kernel takes f16 or bf16",
                          fa_bu_dtype_name(a->q_dtype, n1));
    if (padded_dim(a->head_size) == 0)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "head_size %d > 256", a->head_size);
    if (a->num_splits > kMaxSplits)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "num_splits %d > %d", a->num_splits, kMaxSplits);
    if (a->num_tokens == 0 || a->num_seqs == 0) return FA_OK;
    const int G = a->num_heads_q / a->num_heads_kv;
    if ((int64_t)a->num_tokens * G > 0x7fff0000LL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "num_tokens %d x %d query heads per KV head exceeds 2^31 rows", a->num_tokens, G);
    if (a->max_seqlen_q <= 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "max_seqlen_q %d must be > 0 for a non-empty call",
                          a->max_seqlen_q);
    const bool fp8 = a->kv_dtype != a->q_dtype;
    if (!aligned(a->q, 16) || a->q_token_stride % 8 || a->q_head_stride % 8 || a->q_group_stride % 8)
        return fa_bu_fail(
            e, FA_ERR_UNSUPPORTED,
            "q must be 16-byte aligned with strides multiple of 8 elements (q %p, strides %lld/%lld/%lld)",
            a->q, (long long)a->q_token_stride, (long long)a->q_head_stride, (long long)a->q_group_stride);
    if (!aligned(a->out, 16) || a->out_token_stride % 8 || a->out_head_stride % 8)
        return fa_bu_fail(
            e, FA_ERR_UNSUPPORTED,
            "out must be 16-byte aligned with strides multiple of 8 elements (out %p, strides %lld/%lld)",
            a->out, (long long)a->out_token_stride, (long long)a->out_head_stride);
    const int64_t kv_strides[6] = {a->k_block_stride, a->k_row_stride, a->k_head_stride,
                                   a->v_block_stride, a->v_row_stride, a->v_head_stride};
    static const char *const kv_names[6] = {"k_block_stride", "k_row_stride", "k_head_stride",
                                            "v_block_stride", "v_row_stride", "v_head_stride"};
    const bool paged = a->cu_seqlens_k == nullptr;
    for (int i = 0; i < 6; ++i) {
        if (!paged && (i == 0 || i == 3)) continue; // dense: no block strides
        if (kv_strides[i] % 8)
            return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                              "K/V strides must be multiples of 8 elements (%s = %lld)", kv_names[i],
                              (long long)kv_strides[i]);
    }
    if (!aligned(a->k, fp8 ? 8 : 16) || !aligned(a->v, fp8 ? 8 : 16))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "k and v must be %d-byte aligned (k %p, v %p)", fp8 ? 8 : 16,
                          a->k, a->v);
    if (a->num_splits > 1 && (!aligned(a->split_out, 8)))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "split_out must be 8-byte aligned (%p)",
                          (void *)a->split_out);

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

template <int D, int W> cudaError_t dispatch_dtypes(const fa_attn_args *a, const Params &p, cudaStream_t s) {
    const bool fp8 = a->kv_dtype != a->q_dtype;
    if (a->q_dtype == FA_DTYPE_BF16)
        return fp8 ? launch<D, BF16, KV_FP8, W>(p, a->max_seqlen_q, s)
                   : launch<D, BF16, KV_SAME, W>(p, a->max_seqlen_q, s);
    return fp8 ? launch<D, F16, KV_FP8, W>(p, a->max_seqlen_q, s)
               : launch<D, F16, KV_SAME, W>(p, a->max_seqlen_q, s);
}

// Runs a prepared call with groups of W lanes: the head-size width, then the dtypes.
template <int W> cudaError_t run(const fa_attn_args *a, const Params &p, cudaStream_t s) {
    switch (padded_dim(a->head_size)) {
    case 64: return dispatch_dtypes<64, W>(a, p, s);
    case 128: return dispatch_dtypes<128, W>(a, p, s);
    default: return dispatch_dtypes<256, W>(a, p, s);
    }
}

} // namespace fa_portable
