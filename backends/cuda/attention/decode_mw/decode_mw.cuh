// decode_mw.cuh - standalone prototype of a multi-warp paged decode tile (sm_80+ mma.sync; built
// for sm_90a by tools/decode_proto.sh). Not part of the library build (no meson.build names it).
//
// One CTA per (sequence, KV head, split); NW warps split the CTA's keys (warp w takes key tiles
// w, w + NW, ... of the split's range), each with its own cp.async ring of NS stages and its own
// online softmax; at the end the warps combine through shared memory in the fixed order 0..NW-1,
// so a row's bits depend only on its sequence and the split count, never on the batch.
//
// Math in the transposed form: S^T = K Q^T (keys are the MMA's M rows, the G <= 16 query heads
// of the KV head its N columns, NF = 1 or 2 n8 fragments), O^T += V^T P^T (head dims as M rows,
// keys as the k dimension). P^T goes from the S^T accumulator to the B operand with
// movmatrix.trans (one per 8 x 8 pair block). Softmax in log2 units; the row maximum is rounded
// up (__fmul_ru) before p = exp2(fma(s, c, -m)), so no exponent is positive (fp8: at most 64,
// a constant offset, see below).
//
// fp8 E4M3 K/V (per (sequence, KV head) descales): the raw bytes are staged by cp.async and turned
// into bf16 A fragments in registers: a byte's sign and 7 low bits placed in a bf16 (5 integer
// instructions per 4 values) give the value times 2^-120 exactly (E4M3 subnormals become bf16
// subnormals; NaN 0x7f/0xff becomes 480 * 2^-120: not kept). The 2^-120 of K is balanced by Q
// times 2^64 (exact) and folded into the logit scale; the 2^-120 of V by p carrying 2^64 (the
// softmax offset m - 64), folded into the final 1/l. The K dims and the V dims are permuted so that
// one 16-byte shared load feeds 4 MMA k-steps (K) or every m-tile of a thread (V); Q's fragments
// and the output store use the same permutations.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace fa_dmw {

struct Params {
    const __nv_bfloat16 *q;   // [B][Hq][D]
    const void *k_cache;      // [num_blocks][block_size][Hkv][D] (bf16 or E4M3 bytes)
    const void *v_cache;      // same layout as k_cache
    const int *block_table;   // [B][max_blocks]
    const int *seq_lens;      // [B]
    const float *k_descale;   // [B][Hkv] (fp8 only)
    const float *v_descale;   // [B][Hkv] (fp8 only)
    __nv_bfloat16 *out;       // [B][Hq][D]
    float *lse;               // [B][Hq], natural log
    float *part_o;            // [S][B][Hq][D] (num_splits > 1)
    float *part_lse;          // [S][B][Hq], log2 units (num_splits > 1)
    int64_t stride_blk;       // elements between blocks (block_size * Hkv * D)
    int64_t stride_tok;       // elements between tokens of a block (Hkv * D)
    int num_seqs, Hq, Hkv, G; // G = Hq / Hkv <= 16; query head of (kvh, g) = kvh * G + g
    int max_blocks, block_size, num_splits;
    float sm_scale;
};

// Tile shape per (head dim, cache type). KT keys per warp step (KM m16 tiles), NS stages per warp.
template <int D_, bool FP8_> struct Cfg {
    static constexpr int D = D_;
    static constexpr bool FP8 = FP8_;
    static constexpr int NW = 4;
    static constexpr int KT = D <= 64 ? 32 : 16;
    static constexpr int NS = FP8 ? 4 : 3;
    static constexpr int ES = FP8 ? 1 : 2;
    static constexpr int ROWB = D * ES;        // bytes of one key row
    static constexpr int CPR = ROWB / 16;      // 16-byte chunks per row
    static constexpr int TILEB = KT * ROWB;    // one K (or V) tile
    static constexpr int STAGEB = 2 * TILEB;   // K + V
    static constexpr int WARPB = NS * STAGEB;  // one warp's ring
    static constexpr int KM = KT / 16;
    static constexpr int KS = D / 16;          // k-steps of S^T
    static constexpr int MT = D / 16;          // m-tiles of O^T
    static constexpr int NT = NW * 32;
    static constexpr int COMB = NW * 16 * (D + 2) * 4; // combine area, NF = 2
    static constexpr int SMEM = NW * WARPB > COMB ? NW *WARPB : COMB;
    static_assert(D == 64 || D == 128, "head 64 or 128");
    static_assert(KT == 16 || KT == 32, "one key offset per lane");
    static_assert(CPR <= 32 && (KT * CPR) % 32 == 0, "whole chunk rounds per lane");
    static_assert(FP8 || CPR >= 8, "bf16 swizzle needs 8 chunks a row");
};

// ---- device helpers ----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 8 x 8 b16 transpose across the warp (fragment of X -> fragment of X^T)
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Four E4M3 bytes -> two bf16 pairs of (value * 2^-120): lo = {byte 0, byte 2}, hi = {byte 1,
// byte 3} (low half first). Exact for every finite E4M3 value.
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t w, uint32_t &lo, uint32_t &hi) {
    lo = ((w << 8) & 0x80008000u) | ((w << 4) & 0x07f007f0u);
    hi = (w & 0x80008000u) | ((w >> 4) & 0x07f007f0u);
}

// ---- the kernel --------------------------------------------------------------------------------

template <int D, bool FP8, int NF>
__global__ void __launch_bounds__(Cfg<D, FP8>::NT, 2) decode_mw_kernel(const Params p) {
    using C = Cfg<D, FP8>;
    constexpr int KT = C::KT, NS = C::NS, NW = C::NW, KM = C::KM, KS = C::KS, MT = C::MT;
    extern __shared__ __align__(128) unsigned char smem[];
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int r = lane >> 2, q = lane & 3;
    const int G = p.G;
    const int L = p.seq_lens[b];
    int per = (L + p.num_splits - 1) / p.num_splits;
    per = (per + KT - 1) / KT * KT;
    const int k0 = min(L, split * per), k1 = min(L, k0 + per);
    const int ntiles = (k1 - k0 + KT - 1) / KT;
    const int nt = ntiles > w ? (ntiles - w + NW - 1) / NW : 0; // this warp's tiles

    // Q^T as B fragments (n = query head g = f * 8 + r, k = head dims), zero past G
    uint32_t qb[KS][NF][2];
    {
        const __nv_bfloat16 *qh = p.q + (static_cast<int64_t>(b) * p.Hq + static_cast<int64_t>(kvh) * G) * D;
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            const int n = f * 8 + r;
            const __nv_bfloat16 *qr = qh + static_cast<int64_t>(n) * D;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                if (n >= G) {
                    qb[s][f][0] = qb[s][f][1] = 0u;
                } else if constexpr (!FP8) {
                    qb[s][f][0] = *reinterpret_cast<const uint32_t *>(qr + 16 * s + 2 * q);
                    qb[s][f][1] = *reinterpret_cast<const uint32_t *>(qr + 16 * s + 8 + 2 * q);
                } else {
                    // the K fragment's permuted dims: k-step s = 4 g + t covers dims 64 g + 16 q' + 4 t +
                    // {0, 2} (b0) and {1, 3} (b1) for lane q'; Q times 2^64 (exact)
                    const int d0 = 64 * (s / 4) + 16 * q + 4 * (s % 4);
                    const uint2 raw = *reinterpret_cast<const uint2 *>(qr + d0);
                    const __nv_bfloat162 x01 = *reinterpret_cast<const __nv_bfloat162 *>(&raw.x);
                    const __nv_bfloat162 x23 = *reinterpret_cast<const __nv_bfloat162 *>(&raw.y);
                    const float k64 = 18446744073709551616.0f; // 2^64
                    qb[s][f][0] = pack_bf16(__low2float(x01) * k64, __low2float(x23) * k64);
                    qb[s][f][1] = pack_bf16(__high2float(x01) * k64, __high2float(x23) * k64);
                }
            }
        }
    }
    float kscale = 1.0f, vfac = 1.0f;
    if constexpr (FP8) {
        kscale = p.k_descale[b * p.Hkv + kvh];
        vfac = p.v_descale[b * p.Hkv + kvh] * 1.329227995784916e36f; // * 2^120
    }
    // logit (log2 units) = acc * c; fp8: acc carries 2^64 * 2^-120
    const float c = p.sm_scale * 1.4426950408889634f * kscale * (FP8 ? 72057594037927936.0f : 1.0f); // 2^56
    const float poff = FP8 ? 64.0f : 0.0f; // p carries 2^poff

    const unsigned char *kc = static_cast<const unsigned char *>(p.k_cache);
    const unsigned char *vc = static_cast<const unsigned char *>(p.v_cache);
    const int *bt = p.block_table + static_cast<int64_t>(b) * p.max_blocks;
    const uint32_t wbase = smem_u32(smem) + w * C::WARPB;

    // element offset of this lane's key (lane % KT) of the warp's j-th tile, -1 past the range
    auto key_off = [&](int j) -> int64_t {
        const int key = k0 + (w + j * NW) * KT + (lane % KT);
        if (j >= nt || key >= k1) return -1;
        const int blk = __ldg(bt + key / p.block_size);
        return static_cast<int64_t>(blk) * p.stride_blk +
               static_cast<int64_t>(key % p.block_size) * p.stride_tok + static_cast<int64_t>(kvh) * D;
    };
    // the warp's j-th tile into stage j % NS (one commit group, empty past the warp's tiles)
    auto issue = [&](int j, int64_t off) {
        if (j < nt) {
            const uint32_t sk = wbase + (j % NS) * C::STAGEB, sv = sk + C::TILEB;
            const int ch = lane % C::CPR;
#pragma unroll
            for (int i = 0; i < KT * C::CPR / 32; ++i) {
                const int row = lane / C::CPR + (32 / C::CPR) * i;
                const int64_t o = __shfl_sync(0xffffffffu, off, row);
                const bool ok = o >= 0;
                const int64_t src = ok ? o * C::ES + ch * 16 : 0;
                const int kch = FP8 ? (ch ^ (row & (C::CPR - 1))) : (ch ^ (row & 7));
                const int vch = FP8 ? ch : kch;
                cp_async16(sk + row * C::ROWB + kch * 16, kc + src, ok ? 16 : 0);
                cp_async16(sv + row * C::ROWB + vch * 16, vc + src, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    float m[NF][2], l[NF][2], o[MT][NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
        m[f][0] = m[f][1] = -INFINITY;
        l[f][0] = l[f][1] = 0.0f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) o[mt][f][0] = o[mt][f][1] = o[mt][f][2] = o[mt][f][3] = 0.0f;
    }

    int64_t off_next = key_off(0);
#pragma unroll
    for (int j = 0; j < NS - 1; ++j) {
        issue(j, off_next);
        off_next = key_off(j + 1);
    }

    for (int j = 0; j < nt; ++j) {
        issue(j + NS - 1, off_next);
        off_next = key_off(j + NS);
        cp_async_wait<NS - 1>();
        __syncwarp();
        const uint32_t sk = wbase + (j % NS) * C::STAGEB, sv = sk + C::TILEB;
        const int kbase = k0 + (w + j * NW) * KT;

        // S^T = K Q^T
        float acc[KM][NF][4];
#pragma unroll
        for (int km = 0; km < KM; ++km) {
#pragma unroll
            for (int f = 0; f < NF; ++f) acc[km][f][0] = acc[km][f][1] = acc[km][f][2] = acc[km][f][3] = 0.0f;
            if constexpr (!FP8) {
                const int row = km * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    uint32_t a[4];
                    ldsm_x4(a, sk + row * C::ROWB + (((2 * s + (lane >> 4)) ^ (lane & 7)) << 4));
#pragma unroll
                    for (int f = 0; f < NF; ++f) mma_bf16(acc[km][f], a, qb[s][f][0], qb[s][f][1]);
                }
            } else {
                const int row = km * 16 + r;
#pragma unroll
                for (int g = 0; g < D / 64; ++g) {
                    const int pc = (4 * g + q) ^ (row & (C::CPR - 1)); // rows row and row + 8 share it
                    uint4 lo4, hi4;
                    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                                 : "=r"(lo4.x), "=r"(lo4.y), "=r"(lo4.z), "=r"(lo4.w)
                                 : "r"(sk + row * C::ROWB + pc * 16));
                    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                                 : "=r"(hi4.x), "=r"(hi4.y), "=r"(hi4.z), "=r"(hi4.w)
                                 : "r"(sk + (row + 8) * C::ROWB + pc * 16));
                    const uint32_t wl[4] = {lo4.x, lo4.y, lo4.z, lo4.w};
                    const uint32_t wh[4] = {hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
                    for (int t = 0; t < 4; ++t) {
                        uint32_t a[4];
                        e4m3x4_to_bf16(wl[t], a[0], a[2]);
                        e4m3x4_to_bf16(wh[t], a[1], a[3]);
#pragma unroll
                        for (int f = 0; f < NF; ++f)
                            mma_bf16(acc[km][f], a, qb[4 * g + t][f][0], qb[4 * g + t][f][1]);
                    }
                }
            }
        }
        // keys past the range (last tile of the split only): -inf
        if (kbase + KT > k1) {
#pragma unroll
            for (int km = 0; km < KM; ++km)
#pragma unroll
                for (int f = 0; f < NF; ++f)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        if (kbase + km * 16 + r + 8 * (i >> 1) >= k1) acc[km][f][i] = -INFINITY;
        }
        // online softmax per query column (2q + e of fragment f); the max is rounded up
        float mu[NF][2];
#pragma unroll
        for (int f = 0; f < NF; ++f) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float mx = fmaxf(acc[0][f][e], acc[0][f][2 + e]);
#pragma unroll
                for (int km = 1; km < KM; ++km) mx = fmaxf(mx, fmaxf(acc[km][f][e], acc[km][f][2 + e]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float mnew = fmaxf(m[f][e], __fmul_ru(mx, c));
                const float msafe = mnew == -INFINITY ? 0.0f : mnew;
                const float alpha = ex2(m[f][e] - msafe);
                m[f][e] = mnew;
                mu[f][e] = FP8 ? __fadd_ru(msafe, -poff) : msafe;
                l[f][e] *= alpha;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    o[mt][f][e] *= alpha;
                    o[mt][f][2 + e] *= alpha;
                }
            }
        }
#pragma unroll
        for (int km = 0; km < KM; ++km)
#pragma unroll
            for (int f = 0; f < NF; ++f)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float pv = ex2(fmaf(acc[km][f][i], c, -mu[f][i & 1]));
                    l[f][i & 1] += pv;
                    acc[km][f][i] = pv;
                }

        // O^T += V^T P^T
#pragma unroll
        for (int km = 0; km < KM; ++km) {
            uint32_t pb[NF][2];
#pragma unroll
            for (int f = 0; f < NF; ++f) {
                pb[f][0] = movmatrix_t(pack_bf16(acc[km][f][0], acc[km][f][1]));
                pb[f][1] = movmatrix_t(pack_bf16(acc[km][f][2], acc[km][f][3]));
            }
            if constexpr (!FP8) {
                const int row = km * 16 + (lane & 7) + (lane >> 4) * 8;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    uint32_t a[4];
                    ldsm_x4_t(a, sv + row * C::ROWB + (((2 * mt + ((lane >> 3) & 1)) ^ (lane & 7)) << 4));
#pragma unroll
                    for (int f = 0; f < NF; ++f) mma_bf16(o[mt][f], a, pb[f][0], pb[f][1]);
                }
            } else {
                // rows 2q, 2q + 1, 2q + 8, 2q + 9; this lane's D / 8 dims at r * D / 8 (m-tile mt: dims
                // r * D / 8 + 2 mt (row r) and + 1 (row r + 8))
                constexpr int NWD = D / 32; // words per row
                uint32_t x[4][NWD];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const uint32_t ad =
                        sv + (km * 16 + 2 * q + (k & 1) + 8 * (k >> 1)) * C::ROWB + r * (D / 8);
                    if constexpr (NWD == 4)
                        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                                     : "=r"(x[k][0]), "=r"(x[k][1]), "=r"(x[k][2]), "=r"(x[k][3])
                                     : "r"(ad));
                    else
                        asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n"
                                     : "=r"(x[k][0]), "=r"(x[k][1])
                                     : "r"(ad));
                }
#pragma unroll
                for (int i = 0; i < NWD; ++i) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) { // m-tile 2 i + h: bytes 2 h, 2 h + 1 of the words
                        const uint32_t sel = h == 0 ? 0x5410u : 0x7632u;
                        uint32_t a[4];
                        e4m3x4_to_bf16(prmt(x[0][i], x[1][i], sel), a[0], a[1]);
                        e4m3x4_to_bf16(prmt(x[2][i], x[3][i], sel), a[2], a[3]);
#pragma unroll
                        for (int f = 0; f < NF; ++f) mma_bf16(o[2 * i + h][f], a, pb[f][0], pb[f][1]);
                    }
                }
            }
        }
        __syncwarp(); // every lane is done with this stage before it is refilled
    }
    cp_async_wait<0>();

    // the warp's row sums (each lane holds its keys' part), fixed shuffle order
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            l[f][e] += __shfl_xor_sync(0xffffffffu, l[f][e], 4);
            l[f][e] += __shfl_xor_sync(0xffffffffu, l[f][e], 8);
            l[f][e] += __shfl_xor_sync(0xffffffffu, l[f][e], 16);
        }

    // combine the warps in the order 0..NW-1
    __syncthreads();
    constexpr int QN = NF * 8;
    float *sO = reinterpret_cast<float *>(smem); // [NW][QN][D]
    float *sM = sO + NW * QN * D; // [NW][QN]
    float *sL = sM + NW * QN; // [NW][QN]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = f * 8 + 2 * q + (i & 1);
                const int dim = FP8 ? r * (D / 8) + 2 * mt + (i >> 1) : 16 * mt + r + 8 * (i >> 1);
                sO[(w * QN + n) * D + dim] = o[mt][f][i];
            }
    if (r == 0) {
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                sM[w * QN + f * 8 + 2 * q + e] = m[f][e];
                sL[w * QN + f * 8 + 2 * q + e] = l[f][e];
            }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += C::NT) {
        const int n = idx / D, d = idx % D;
        float M = sM[n];
#pragma unroll
        for (int v = 1; v < NW; ++v) M = fmaxf(M, sM[v * QN + n]);
        float Ls = 0.0f, acc = 0.0f;
#pragma unroll
        for (int v = 0; v < NW; ++v) {
            const float mv = sM[v * QN + n];
            const float wt = mv == -INFINITY ? 0.0f : ex2(mv - M);
            Ls = fmaf(sL[v * QN + n], wt, Ls);
            acc = fmaf(sO[(v * QN + n) * D + d], wt, acc);
        }
        const float val = Ls > 0.0f ? acc * (vfac / Ls) : 0.0f;
        const float lse2 = Ls > 0.0f ? M + __log2f(Ls) - poff : -INFINITY;
        const int64_t h = static_cast<int64_t>(b) * p.Hq + static_cast<int64_t>(kvh) * G + n;
        if (p.num_splits == 1) {
            p.out[h * D + d] = __float2bfloat16_rn(val);
            if (d == 0) p.lse[h] = lse2 * 0.6931471805599453f;
        } else {
            const int64_t sh = static_cast<int64_t>(split) * p.num_seqs * p.Hq + h;
            p.part_o[sh * D + d] = val;
            if (d == 0) p.part_lse[sh] = lse2;
        }
    }
}

// Split partials -> out and lse, splits in the order 0..S-1. Grid (Hq, B), D threads.
template <int D> __global__ void __launch_bounds__(D) decode_mw_combine(const Params p) {
    const int hq = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
    const int64_t h = static_cast<int64_t>(b) * p.Hq + hq;
    const int64_t sstride = static_cast<int64_t>(p.num_seqs) * p.Hq;
    float M = -INFINITY;
    for (int s = 0; s < p.num_splits; ++s) M = fmaxf(M, p.part_lse[s * sstride + h]);
    float Ls = 0.0f, acc = 0.0f;
    for (int s = 0; s < p.num_splits; ++s) {
        const float ls = p.part_lse[s * sstride + h];
        const float wt = ls == -INFINITY ? 0.0f : ex2(ls - M);
        Ls += wt;
        acc = fmaf(p.part_o[(s * sstride + h) * D + d], wt, acc);
    }
    p.out[h * D + d] = __float2bfloat16_rn(Ls > 0.0f ? acc / Ls : 0.0f);
    if (d == 0) p.lse[h] = Ls > 0.0f ? (M + __log2f(Ls)) * 0.6931471805599453f : -INFINITY;
}

// Host launch of one instance (and the combine when num_splits > 1). G <= 8: NF = 1, else 2.
template <int D, bool FP8, int NF> cudaError_t launch_instance(const Params &p, cudaStream_t st) {
    using C = Cfg<D, FP8>;
    static bool attr = false;
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(decode_mw_kernel<D, FP8, NF>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        if (e != cudaSuccess) return e;
        attr = true;
    }
    dim3 grid(p.Hkv, p.num_seqs, p.num_splits);
    decode_mw_kernel<D, FP8, NF><<<grid, C::NT, C::SMEM, st>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || p.num_splits == 1) return e;
    decode_mw_combine<D><<<dim3(p.Hq, p.num_seqs), D, 0, st>>>(p);
    return cudaGetLastError();
}

inline cudaError_t launch(const Params &p, int D, bool fp8, cudaStream_t st) {
    if (p.G < 1 || p.G > 16 || p.num_splits < 1) return cudaErrorInvalidValue;
    const bool two = p.G > 8;
    if (D == 128) {
        if (fp8) return two ? launch_instance<128, true, 2>(p, st) : launch_instance<128, true, 1>(p, st);
        return two ? launch_instance<128, false, 2>(p, st) : launch_instance<128, false, 1>(p, st);
    }
    if (D == 64) {
        if (fp8) return two ? launch_instance<64, true, 2>(p, st) : launch_instance<64, true, 1>(p, st);
        return two ? launch_instance<64, false, 2>(p, st) : launch_instance<64, false, 1>(p, st);
    }
    return cudaErrorInvalidValue;
}

} // namespace fa_dmw
