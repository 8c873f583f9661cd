// sm90_tile.cuh - the consumer steps of the sm_90a attention kernels (one warpgroup of 64
// query rows against a tile of keys, bf16 or f16): the shared-memory layout constants, S = Q K^T
// and O += P V by wgmma, the masked online softmax, the rescale of O and the packing of P into
// wgmma A fragments, for head sizes 64, 128 and 256 (Dims<D>). Used by the library kernel
// (sm90_attention.cu) and by the dense head-128 prototype (fa_sm90_prefill.cuh,
// tools/hopper_proto.cu), which uses the defaults (D = 128).
#pragma once

#include "sm90_ptx.cuh"

#include <math.h>

namespace fa_sm90 {

constexpr int kHeadDim = 128;      // the prototype's head size
constexpr int kBlockM = 128;       // query rows per CTA
constexpr int kBlockN = 128;       // keys per K/V tile at head 128 (the prototype's)
constexpr int kWgRows = 64;        // query rows per consumer warpgroup
constexpr int kConsumerWarps = 8;  // arrivals on an empty barrier (lane 0 of each consumer warp)
constexpr int kThreads = 384;      // producer warpgroup + 2 consumer warpgroups

// Tile shape per head size D: keys per tile BN (64 at head 256, where two 128-key stages of K
// and V would not fit beside Q in shared memory), 64-dim column blocks (128-byte swizzled rows),
// the floats a thread holds of S (BN / 2) and of O (D / 2).
template <int D> struct Dims {
    static_assert(D == 64 || D == 128 || D == 256, "sm90 family: head size 64, 128 or 256");
    static constexpr int kD = D;
    static constexpr int kBN = D > 128 ? 64 : 128;
    static constexpr int kCols = D / 64;
    static constexpr int kColsLog2 = D == 64 ? 0 : (D == 128 ? 1 : 2);
    static constexpr int kSRegs = kBN / 2;
    static constexpr int kORegs = D / 2;
};

// The CTA's shared memory: Q, then Stages K and V tiles (and with FP8 as many transposed V
// tiles, Vt, written by the producer warpgroup), then the mbarriers. FP8: e4m3 elements, a
// 128-byte swizzle row holds 128 dims (a column block), so at head 128 a row is one row of the
// swizzle and the tiles are half the bytes; at head 256 a row is two column blocks; at head 64
// a row is 64 bytes, one row of the 64-byte swizzle (kRowBytes).
// Raw > 0 (the KV8 kernels: a 16-bit query over an fp8 cache): Raw stages of the raw fp8 K and
// V tiles ([BN keys][D bytes] each, unswizzled, K then V) after the converted 16-bit stages,
// guarded by raw_full / raw_empty barriers.
template <int Stages, int D = kHeadDim, bool FP8 = false, int Raw = 0> struct Smem {
    static constexpr int kBN = Dims<D>::kBN;
    static constexpr uint32_t kElem = FP8 ? 1 : 2;
    static constexpr uint32_t kQWgBytes = kWgRows * D * kElem; // one warpgroup's Q rows (16384 at D 128)
    static constexpr uint32_t kQBytes = kBlockM * D * kElem;   // 32768 at D 128
    static constexpr uint32_t kTileBytes = kBN * D * kElem;    // a K or V tile (32768 at D 128)
    // bytes of a row of a column block: 128 (a 128-byte swizzle row), 64 for e4m3 at head 64
    static constexpr uint32_t kRowBytes = FP8 && D == 64 ? 64 : 128;
    static constexpr uint32_t kQColBytes = kWgRows * kRowBytes; // one column block of Q (8192)
    static constexpr uint32_t kKvColBytes = kBN * kRowBytes; // one column block of K/V (16384 at BN 128)
    static constexpr uint32_t kOffQ = 0;
    static constexpr uint32_t kOffK = kOffQ + kQBytes;
    static constexpr uint32_t kOffV = kOffK + Stages * kTileBytes;
    static constexpr uint32_t kOffVt = kOffV + Stages * kTileBytes;
    static constexpr uint32_t kRawBytes = kBN * D; // a raw fp8 K or V tile (Raw > 0)
    static constexpr uint32_t kOffRaw = kOffVt + (FP8 ? Stages * kTileBytes : 0u);
    static constexpr uint32_t kOffBar = kOffRaw + Raw * 2 * kRawBytes;
    // (+ q_empty; + the work-item mailbox: item_full[2], item_empty[2] and its two int32 slots)
    static constexpr uint32_t kBarBytes = 8 * (2 + (FP8 ? 6 : 4) * Stages + 2 * Raw) + 8 * 4 + 8;
    static constexpr uint32_t kTotal = kOffBar + kBarBytes;
    static constexpr uint32_t kAlloc = kTotal + 1024; // slack to align the dynamic base to 1024
    static_assert(kAlloc <= 227 * 1024, "shared memory per block on sm_90");
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90_DEVICE_OK 1
#else
#define FA_SM90_DEVICE_OK 0
#endif

// ---------------------------------------------------------------------------------------------
// Consumer steps (one warpgroup, 64 rows). Thread layout of the S and O accumulators: see
// wgmma_m64n128k16_ss. Rows r0 = 16 warp + g and r1 = r0 + 8 of the warpgroup's 64.
// ---------------------------------------------------------------------------------------------

// S = Q K^T, issued and committed (not waited for): A = Q (K-major SW128, D / 64 column blocks
// of 64 dims at 8192 bytes), B = the K tile (K-major SW128: N = BN keys, K = dims; column blocks
// at BN * 128 bytes). k-step kk: column block kk / 4, 32 bytes (16 dims) further per step in it.
template <int Stages, typename T = __nv_bfloat16, int D = kHeadDim>
__device__ __forceinline__ void issue_qk(float (&sacc)[Dims<D>::kSRegs], uint32_t qb, uint32_t kb) {
    using L = Smem<Stages, D>;
#pragma unroll
    for (int x = 0; x < Dims<D>::kSRegs; ++x) reg_fence(sacc[x]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint64_t da =
            make_smem_desc(qb + (kk >> 2) * L::kQColBytes + (kk & 3) * 32, 16, 1024, kSwizzle128B);
        const uint64_t db =
            make_smem_desc(kb + (kk >> 2) * L::kKvColBytes + (kk & 3) * 32, 16, 1024, kSwizzle128B);
        if constexpr (Dims<D>::kBN == 128) {
            wgmma_m64n128k16_ss<0, T>(sacc, da, db, kk > 0 ? 1 : 0);
        } else {
            wgmma_m64n64k16_ss<0, T>(sacc, da, db, kk > 0 ? 1 : 0);
        }
    }
    wgmma_commit_group();
}

// O += P V, issued and committed: A = P from registers, B = the V tile, MN-major SW128 (the
// GEMM's K = keys, 128-byte rows of 64 dims): for the dense tile LBO = BN * 128 (the next 64-dim
// column block), SBO = 1024 (the next 8 keys), k-step kk = 16 keys = 2048 bytes; a tile laid
// out in pages of R = 2^page_log2 keys ([page][column block][R][64], one TMA box a page) has
// LBO = 128 R, SBO = 1024 (R = 8: 2048, the next page) and k-step starts from the page. At head
// 256 each k-step is two N = 128 instructions, dims [0, 128) and [128, 256) (2 LBO further).
template <int Stages, typename T = __nv_bfloat16, int D = kHeadDim>
__device__ __forceinline__ void issue_pv(float (&o)[Dims<D>::kORegs], uint32_t (&pa)[Dims<D>::kBN / 16][4],
                                         uint32_t vb, uint32_t lbo, uint32_t sbo,
                                         int page_log2 = Dims<D>::kBN == 128 ? 7 : 6) {
    constexpr int kCols = Dims<D>::kCols, kSteps = Dims<D>::kBN / 16;
#pragma unroll
    for (int x = 0; x < Dims<D>::kORegs; ++x) reg_fence(o[x]);
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) reg_fence(pa[kk][x]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
        // keys [16 kk, 16 kk + 16): in pages of 2^page_log2 keys laid out [page][64-dim column
        // block][key][64] (one page = the whole tile: k-step = 2048 bytes)
        const uint32_t key = 16u * kk, rows = 1u << page_log2;
        const uint32_t start = vb + (key >> page_log2) * rows * (128u * kCols) + (key & (rows - 1u)) * 128u;
        const uint64_t dv = make_smem_desc(start, lbo, sbo, kSwizzle128B);
        if constexpr (D == 64) {
            wgmma_m64n64k16_rs<1, T>(o, pa[kk], dv, 1);
        } else if constexpr (D == 128) {
            wgmma_m64n128k16_rs<1, T>(o, pa[kk], dv, 1);
        } else {
            float(&o_lo)[64] = *reinterpret_cast<float(*)[64]>(&o[0]);
            float(&o_hi)[64] = *reinterpret_cast<float(*)[64]>(&o[64]);
            wgmma_m64n128k16_rs<1, T>(o_lo, pa[kk], dv, 1);
            wgmma_m64n128k16_rs<1, T>(o_hi, pa[kk], make_smem_desc(start + 2u * lbo, lbo, sbo, kSwizzle128B),
                                      1);
        }
    }
    wgmma_commit_group();
}

// FP8: S = Q K^T by D / 32 wgmma k32 e4m3 SS (m64n128k32; m64n64k32 for the 64-key tiles of
// head 256), issued and committed. Q and K K-major, rows of column blocks (Smem::kRowBytes):
// head 128 one SW128 row of 128 dims; head 256 two column blocks of 128 dims (SW128); head 64
// one SW64 row of 64 bytes (8-row atoms of 512 bytes: SBO 512). A k32 step is 32 bytes of a row.
template <int D = 128>
__device__ __forceinline__ void issue_qk_fp8(float (&sacc)[Dims<D>::kSRegs], uint32_t qb, uint32_t kb) {
    using L = Smem<1, D, true>;
    constexpr uint32_t kSw = L::kRowBytes == 64 ? kSwizzle64B : kSwizzle128B, kSbo = 8 * L::kRowBytes;
    constexpr int kRowSteps = L::kRowBytes / 32; // k32 steps in a row of a column block
#pragma unroll
    for (int x = 0; x < Dims<D>::kSRegs; ++x) reg_fence(sacc[x]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
        const uint32_t col = kk / kRowSteps, off = 32 * (kk % kRowSteps);
        const uint64_t da = make_smem_desc(qb + col * L::kQColBytes + off, 16, kSbo, kSw);
        const uint64_t db = make_smem_desc(kb + col * L::kKvColBytes + off, 16, kSbo, kSw);
        if constexpr (Dims<D>::kBN == 128)
            wgmma_m64n128k32_e4m3_ss(sacc, da, db, kk > 0 ? 1 : 0);
        else
            wgmma_m64n64k32_e4m3_ss(sacc, da, db, kk > 0 ? 1 : 0);
    }
    wgmma_commit_group();
}

// FP8: O += P V by BN / 32 k32 steps of wgmma e4m3 RS, B = the transposed tile Vt [D dims][BN
// keys] (K-major: a row of a dim's BN keys, SW128 at BN 128, SW64 at BN 64 (head 256); a k32
// step = 32 bytes), its keys in the order of pack_p_fp8 (each 16 keys permuted by pi16, see
// there), issued and committed. N = D: m64n128k32 at head 128, m64n64k32 at head 64, two
// m64n128k32 (dims [0, 128) and [128, 256), 128 rows of Vt apart) a step at head 256.
template <int D = 128>
__device__ __forceinline__ void issue_pv_fp8(float (&o)[Dims<D>::kORegs],
                                             uint32_t (&pa)[Dims<D>::kBN / 32][4], uint32_t vtb) {
    constexpr int BN = Dims<D>::kBN, kSteps = BN / 32;
    constexpr uint32_t kSw = BN == 64 ? kSwizzle64B : kSwizzle128B, kSbo = 8 * BN;
#pragma unroll
    for (int x = 0; x < Dims<D>::kORegs; ++x) reg_fence(o[x]);
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) reg_fence(pa[kk][x]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
        const uint64_t dv = make_smem_desc(vtb + 32 * kk, 16, kSbo, kSw);
        if constexpr (D == 64) {
            wgmma_m64n64k32_e4m3_rs(o, pa[kk], dv, 1);
        } else if constexpr (D == 128) {
            wgmma_m64n128k32_e4m3_rs(o, pa[kk], dv, 1);
        } else {
            float(&o_lo)[64] = *reinterpret_cast<float(*)[64]>(&o[0]);
            float(&o_hi)[64] = *reinterpret_cast<float(*)[64]>(&o[64]);
            wgmma_m64n128k32_e4m3_rs(o_lo, pa[kk], dv, 1);
            wgmma_m64n128k32_e4m3_rs(o_hi, pa[kk], make_smem_desc(vtb + 128 * BN + 32 * kk, 16, kSbo, kSw),
                                     1);
        }
    }
    wgmma_commit_group();
}

// FP8: P as the e4m3 A operand of P V (the kernel's P is in [0, 2^kFp8POff]: its small values
// stay normal in e4m3, whose largest is 448), without moving a value between threads. k-step kk
// covers keys [32 kk, 32 kk + 32); of each 16 keys the thread holds the S columns 2q, 2q + 1,
// 8 + 2q, 9 + 2q (q = t % 4), which the k32 A fragment places at columns 4q .. 4q + 3: so column c
// of a 16-key group of the fragment is key pi16(c) = 2 (c / 4) + (c % 2) + 8 ((c % 4) / 2), and
// Vt holds its keys in that order (checked by tools/qgmma_probe.cu).
constexpr int kFp8POff = 8; // P up to 2^8 = 256
__host__ __device__ constexpr int pi16(int c) { return 2 * (c / 4) + (c % 2) + 8 * ((c % 4) / 2); }
template <int K = 4> // k32 steps: BN / 32
__device__ __forceinline__ void pack_p_fp8(uint32_t (&pa)[K][4], const float (&sacc)[16 * K]) {
#pragma unroll
    for (int kk = 0; kk < K; ++kk)
#pragma unroll
        for (int h = 0; h < 2; ++h) // the step's two 16-key halves: n8 blocks j0, j0 + 1
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) { // rows g, g + 8
                const int j0 = 4 * kk + 2 * h, j1 = j0 + 1;
                pa[kk][2 * h + rr] = pack_e4m3x4(sacc[4 * j0 + 2 * rr], sacc[4 * j0 + 2 * rr + 1],
                                                 sacc[4 * j1 + 2 * rr], sacc[4 * j1 + 2 * rr + 1]);
            }
}

// FP8: the producer warpgroup's transpose of a V tile [BN keys][D dims] (TMA's swizzled rows)
// into Vt [D dims][BN keys] (swizzled rows, each 16 keys in pi16 order). A unit of work is a
// pair of 16-dim chunks and one 16-key group G; the 4 warps share the D / 32 x BN / 16 units
// (head 128: warp w the pair w, every G; head 64: the pair w / 2, half the G's; head 256: the
// pairs 2w, 2w + 1, every G). A unit: ldmatrix .trans (four 8 x 8 b16
// matrices: keys 16G + 0..7 and 8..15 of each chunk) gives thread t, per matrix, the b16 column
// t / 4 (dims 2 (t / 4), + 1 of the chunk) of the rows (keys) 2 (t % 4), + 1; two byte
// permutes per pair of matrices make the words of keys {2m, 2m + 1, 2m + 8, 2m + 9} (m = t % 4) of
// each of the two dims, which is word m of the dim's 16-key chunk in pi16 order; stmatrix writes
// word m of row t / 4 of each matrix, whose rows (one dim each) the lanes address. Which of a
// thread's two dims goes to which matrix alternates with t / 16, so that the 8 rows of every
// matrix sit at 8 distinct 16-byte places of their rows (no bank conflict; the loads' rows are
// 8 consecutive keys, also at 8 distinct places). Keys at or past `valid` are written as 0 (the
// stale rest of a sequence's last page: P is 0 there, and 0 x NaN is NaN).
// Layouts. V: head 128 [128 keys][128] SW128 (chunk c of key r at c ^ (r % 8)); head 64 [128
// keys][64] SW64 (at c ^ (r / 2 % 4)); head 256 in pages of 2^rlog keys [page][column block of
// 128 dims][2^rlog][128] SW128 (one TMA box a page; the others are the same as flat). Vt: BN 128
// rows of 128 bytes SW128 (chunk G of dim d at G ^ (d % 8)); head 256 (BN 64) rows of 64 bytes
// SW64 (at G ^ (d / 2 % 4)).
template <int D = 128>
__device__ __forceinline__ void transpose_v_fp8(uint32_t vb, uint32_t vtb, int tid, int valid, int rlog = 7) {
    constexpr int BN = Dims<D>::kBN;
    constexpr int kPairsW = D == 256 ? 2 : 1; // chunk pairs a warp
    constexpr int kGroupsW = D == 64 ? BN / 32 : BN / 16; // 16-key groups a warp (of each pair)
    const int lane = tid & 31, w = tid >> 5;
    const int k = lane >> 3, rho = lane & 7; // the matrix and the row this lane addresses
    const int hi = rho >> 2;
    const int G0 = D == 64 ? (w & 1) * kGroupsW : 0;
    // this thread's data: keys 16G + 2m + {0, 1} (+ 8) of dims 2 (lane / 4) + {0, 1}
    const int m = lane & 3;
    const uint32_t sel0 = (lane >> 4) ? 0x7531u : 0x6420u, sel1 = sel0 ^ 0x1111u;
#pragma unroll
    for (int pp = 0; pp < kPairsW; ++pp) {
        const int pair = D == 64 ? (w >> 1) : w * kPairsW + pp;
        const int chunk = 2 * pair + (k >> 1); // the 16-dim chunk of the row (D / 16 of them)
        // ldmatrix row: key 16 G + 8 (k % 2) + rho, the chunk at its swizzled place
        const int krow = 8 * (k & 1) + rho;
        uint32_t ld0;
        if constexpr (D == 64)
            ld0 = vb + static_cast<uint32_t>(krow * 64 + ((chunk ^ (rho >> 1)) << 4));
        else
            ld0 = vb + static_cast<uint32_t>(krow * 128 + (((D == 256 ? chunk & 7 : chunk) ^ rho) << 4));
        // stmatrix row: Vt row d, the 16-key chunk G at its swizzled place
        const int d = 16 * chunk + 2 * rho + ((k & 1) ? 1 - hi : hi);
        const uint32_t st0 = vtb + static_cast<uint32_t>(d * BN);
        const uint32_t dsw = BN == 64 ? static_cast<uint32_t>((d >> 1) & 3) : static_cast<uint32_t>(d & 7);
#pragma unroll 2
        for (int gi = 0; gi < kGroupsW; ++gi) {
            const int G = G0 + gi;
            uint32_t r[4];
            if constexpr (D == 256) // the key's page, then its column block in the page
                ldsm_x4_trans(ld0 + static_cast<uint32_t>(G) * 2048u +
                                  ((static_cast<uint32_t>(((16 * G + krow) >> rlog) + (chunk >> 3)))
                                   << (rlog + 7)),
                              r);
            else
                ldsm_x4_trans(ld0 + static_cast<uint32_t>(G) * (16u * (D == 64 ? 64u : 128u)), r);
            if (16 * G + 16 > valid) {
                const int a = 16 * G + 2 * m;
                const uint32_t mlo = (a < valid ? 0xffffu : 0u) | (a + 1 < valid ? 0xffff0000u : 0u);
                const uint32_t mhi = (a + 8 < valid ? 0xffffu : 0u) | (a + 9 < valid ? 0xffff0000u : 0u);
                r[0] &= mlo;
                r[2] &= mlo;
                r[1] &= mhi;
                r[3] &= mhi;
            }
            const uint32_t s[4] = {__byte_perm(r[0], r[1], sel0), __byte_perm(r[0], r[1], sel1),
                                   __byte_perm(r[2], r[3], sel0), __byte_perm(r[2], r[3], sel1)};
            stsm_x4(st0 + ((static_cast<uint32_t>(G) ^ dsw) << 4), s);
        }
    }
}

// Mask and online softmax of one S tile, in place: sacc becomes P (fp32), the running maxima
// and the thread's row-sum parts are updated, and the factors that the O rows must be
// multiplied by are returned in alpha0 / alpha1 (O itself is not touched: it may still be in
// flight); the return value says whether either factor differs from 1 (the caller skips the
// rescale of O when no thread of the warp needs one: multiplying by 1 changes no bit). Row r0
// (r1) may see keys [lo0, hi0) ([lo1, hi1)); key0 = kbase + 2 (t % 4) is the thread's first
// column. Units: log2 (sl2 = softmax scale * log2 e > 0). The running max m of a row is kept
// rounded up: m >= s * sl2 exactly for every key seen, so that the exponent
// fma(s, sl2, -m) (one FFMA, rounded once) is <= 0 and p = 2^(s sl2 - m) <= 1; with 16-bit P
// m is the maximum of an earlier tile while no tile's exceeds it by more than kMaxSlack (then
// p <= 2^kMaxSlack and l, O carry the same factor: O / l and the LSE m + log2 l are the same
// quantities; O's fp32 sums can overflow only where |V| passes ~2^120 / keys). Rows whose max
// reaches 2^22 in log2 units (logits ~1e6 and beyond), and every row under softcap or ALiBi, use
// the difference form instead: x = fl(s * sl2) (after the softcap / ALiBi terms), m = max x,
// p = 2^(x - m), which is exact at any magnitude (x <= m and rounding keeps the sign of a
// difference; the FFMA's round-up gap would underflow such a row). A row with nothing allowed
// yet (max -inf) uses offset 0, so that every p is 0, never NaN; alpha = 2^(m_old - m_new) <= 1,
// 0 while the old max is -inf.
// Softcap: x = fl(sl2 * tanh(fl(s * sc_cap))) with sl2 = softcap * log2 e and sc_cap = scale /
// softcap (the mma.sync family's order of operations). Alibi: then x = fma(slope, |td - j|, x)
// for key j of the row whose diagonal key is td (td0, td1), slope (slope0, slope1: the rows may
// be of two query heads, GQA packing) = -log2 e * the head's slope (0 leaves x as it is).
// POff > 0: p = 2^(x - m + POff) (the fp8 kernels' P in e4m3's range; the row sums then carry
// the same factor 2^POff).
constexpr float kMaxSlack = 8.f; // log2 units: a kept row maximum's p are at most 2^8
template <bool Softcap = false, int N = 64, bool Alibi = false, int POff = 0>
__device__ __forceinline__ bool
softmax_tile(float (&sacc)[N], bool need_mask, int key0, int lo0, int hi0, int lo1, int hi1, float sl2,
             float sc_cap, float &mrow0, float &mrow1, float &lrow0, float &lrow1, float &alpha0,
             float &alpha1, float slope0 = 0.f, float slope1 = 0.f, int td0 = 0, int td1 = 0) {
    constexpr bool kFused = !Softcap && !Alibi; // the FFMA form is possible
    if constexpr (!kFused) {
#pragma unroll
        for (int x = 0; x < N; ++x) {
            if constexpr (Softcap) {
                sacc[x] = __fmul_rn(sl2, tanh_approx(__fmul_rn(sacc[x], sc_cap)));
            } else {
                sacc[x] *= sl2;
            }
        }
    }
    if constexpr (Alibi) {
#pragma unroll
        for (int j = 0; j < N / 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = key0 + 8 * j + e;
                sacc[4 * j + e] = __fmaf_rn(slope0, fabsf(static_cast<float>(td0 - key)), sacc[4 * j + e]);
                sacc[4 * j + 2 + e] =
                    __fmaf_rn(slope1, fabsf(static_cast<float>(td1 - key)), sacc[4 * j + 2 + e]);
            }
    }
    if (need_mask) {
#pragma unroll
        for (int j = 0; j < N / 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = key0 + 8 * j + e;
                if (key < lo0 || key >= hi0) sacc[4 * j + e] = -INFINITY;
                if (key < lo1 || key >= hi1) sacc[4 * j + 2 + e] = -INFINITY;
            }
    }
    // the row maxima of the tile (a row's 2 N keys live in the 4 threads of a quad), in a tree:
    // raw scores in the FFMA form, log2 units otherwise
    float t0[N / 8], t1[N / 8];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        t0[j] = fmaxf(fmaxf(sacc[8 * j], sacc[8 * j + 1]), fmaxf(sacc[8 * j + 4], sacc[8 * j + 5]));
        t1[j] = fmaxf(fmaxf(sacc[8 * j + 2], sacc[8 * j + 3]), fmaxf(sacc[8 * j + 6], sacc[8 * j + 7]));
    }
#pragma unroll
    for (int w = N / 16; w >= 1; w /= 2)
#pragma unroll
        for (int i = 0; i < w; ++i) {
            t0[i] = fmaxf(t0[i], t0[i + w]);
            t1[i] = fmaxf(t1[i], t1[i + w]);
        }
    float mx0 = t0[0], mx1 = t1[0];
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    bool fused = false; // (quad-uniform: it depends on the rows' values only)
    if constexpr (kFused) {
        // to log2 units, rounded up; a row at 2^22+ (either of the thread's two) falls back to
        // the difference form for this tile, as does a scale that is not > 0 (the max of the raw
        // scores is then not the max of the scaled ones)
        const float u0 = fmaxf(mrow0, __fmul_ru(mx0, sl2)), u1 = fmaxf(mrow1, __fmul_ru(mx1, sl2));
        fused = sl2 > 0.f && fabsf(u0) < 4194304.f && fabsf(u1) < 4194304.f;
        if (fused) {
            // 16-bit P (POff 0): a row keeps its maximum until a tile's exceeds it by more than
            // kMaxSlack (p up to 2^kMaxSlack, exact in bf16 / f16 as any p is), so that O is
            // rescaled only where a maximum jumps; e4m3 P (POff 8) has no such room
            mx0 = (POff == 0 && u0 <= mrow0 + kMaxSlack) ? mrow0 : u0;
            mx1 = (POff == 0 && u1 <= mrow1 + kMaxSlack) ? mrow1 : u1;
        } else {
            mx0 = fmaxf(mrow0, __fmul_rn(mx0, sl2));
            mx1 = fmaxf(mrow1, __fmul_rn(mx1, sl2));
#pragma unroll
            for (int x = 0; x < N; ++x) sacc[x] *= sl2;
        }
    } else {
        mx0 = fmaxf(mx0, mrow0);
        mx1 = fmaxf(mx1, mrow1);
    }
    const float ms0 = mx0 == -INFINITY ? 0.f : mx0;
    const float ms1 = mx1 == -INFINITY ? 0.f : mx1;
    alpha0 = ex2_approx(mrow0 - ms0);
    alpha1 = ex2_approx(mrow1 - ms1);
    mrow0 = mx0;
    mrow1 = mx1;
    const float ps0 = ms0 - static_cast<float>(POff), ps1 = ms1 - static_cast<float>(POff);
    // one exponent loop for both forms: fma(s, sl2, -m) in the FFMA form, and in the difference
    // form fma(x, 1, -m), which is x - m rounded once, the same bits as the subtraction (x * 1 is
    // exact), so that the loop is in the code once
    const float ea = fused ? sl2 : 1.f;
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        sacc[4 * j + 0] = ex2_approx(__fmaf_rn(sacc[4 * j + 0], ea, -ps0));
        sacc[4 * j + 1] = ex2_approx(__fmaf_rn(sacc[4 * j + 1], ea, -ps0));
        sacc[4 * j + 2] = ex2_approx(__fmaf_rn(sacc[4 * j + 2], ea, -ps1));
        sacc[4 * j + 3] = ex2_approx(__fmaf_rn(sacc[4 * j + 3], ea, -ps1));
    }
    // the thread's row-sum parts, in a tree
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        t0[j] = (sacc[8 * j] + sacc[8 * j + 1]) + (sacc[8 * j + 4] + sacc[8 * j + 5]);
        t1[j] = (sacc[8 * j + 2] + sacc[8 * j + 3]) + (sacc[8 * j + 6] + sacc[8 * j + 7]);
    }
#pragma unroll
    for (int w = N / 16; w >= 1; w /= 2)
#pragma unroll
        for (int i = 0; i < w; ++i) {
            t0[i] += t0[i + w];
            t1[i] += t1[i + w];
        }
    lrow0 = __fmaf_rn(lrow0, alpha0, t0[0]);
    lrow1 = __fmaf_rn(lrow1, alpha1, t1[0]);
    return alpha0 != 1.f || alpha1 != 1.f;
}

// O *= alpha, skipped when no thread of the warp has a factor other than 1 (`moved`, from
// softmax_tile; the branch is warp-uniform, so that the warp reaches its next wgmma converged)
template <int N>
__device__ __forceinline__ void rescale_o(float (&o)[N], float alpha0, float alpha1, bool moved = true) {
    if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        o[4 * j + 0] *= alpha0;
        o[4 * j + 1] *= alpha0;
        o[4 * j + 2] *= alpha1;
        o[4 * j + 3] *= alpha1;
    }
}

// P as the A operand of P V: k-step kk covers keys [16kk, 16kk + 16) = the n8 blocks 2kk and
// 2kk + 1 of S, i.e. sacc[8kk .. 8kk + 7] (the same register shape as mma.sync's m16n8k16 A)
template <typename T = __nv_bfloat16, int K = 8>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[K][4], const float (&sacc)[8 * K]) {
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
        pa[kk][0] = pack2<T>(sacc[8 * kk + 0], sacc[8 * kk + 1]);
        pa[kk][1] = pack2<T>(sacc[8 * kk + 2], sacc[8 * kk + 3]);
        pa[kk][2] = pack2<T>(sacc[8 * kk + 4], sacc[8 * kk + 5]);
        pa[kk][3] = pack2<T>(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
}

// The CTA's shared-memory ring (layout Smem<Stages, D, FP8>, from the dynamic base rounded up
// to 1024 bytes): the Q tile, the K and V stages and their mbarriers (q_empty last: lane 0 of
// each consumer warp, once its last S = Q K^T of a work item is done). full[s] (k_full, v_full):
// one arrival (arrive.expect_tx) plus the TMA bytes; empty[s] (k_empty, v_empty): lane 0 of each
// of the 8 consumer warps, K released after S = Q K^T, V after O += P V. FP8: V is read by the
// producer warpgroup, which writes it transposed into vt[s]: v_empty then counts its 128
// threads, and vt_full[s] (its 128 threads) / vt_empty[s] (the consumer warps) guard vt.
// Raw > 0 (KV8): raw[r] holds raw stage r's fp8 K tile, then its V tile; raw_full[r] (rf: one
// arrival plus the TMA bytes of both, or the 128 producer threads' cp.async arrivals) and
// raw_empty[r] (re: each of the 128 producer threads, once its part of the stage is converted) guard
// it; k_full / v_full then count the producer's 128 threads (each converts part of the tile,
// fences the async proxy, arrives).
template <int Stages, int D = kHeadDim, bool FP8 = false, int Raw = 0> struct Ring {
    uint32_t q, k, v, vt; // Q tile, K stages, V stages, transposed V stages (FP8)
    uint32_t raw; // raw fp8 K / V stages (Raw > 0)
    uint32_t bar_q; // Q landed
    uint32_t kf, vf, ke, ve, tf, te; // k_full[s] = kf + 8 s, v_full, k_empty, v_empty, vt_full, vt_empty
    uint32_t rf, re; // raw_full[r] = rf + 8 r, raw_empty[r] (Raw > 0)
    uint32_t qe; // q_empty: the consumer warps are done with the Q tile (a persistent CTA's next Q)
    // the work-item mailbox of a dynamic persistent grid: item slot j (int32 at mail + 4 j) is
    // written by the producer warp's lane 0 (one arrival on item_full[j] = itf + 8 j) and read by
    // the consumer warps (lane 0 of each arrives on item_empty[j] = ite + 8 j)
    uint32_t itf, ite, mail;
    __device__ __forceinline__ explicit Ring(const void *smem_raw) {
        using L = Smem<Stages, D, FP8, Raw>;
        const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
        q = base + L::kOffQ;
        k = base + L::kOffK;
        v = base + L::kOffV;
        vt = base + L::kOffVt;
        raw = base + L::kOffRaw;
        bar_q = base + L::kOffBar;
        kf = bar_q + 8;
        vf = kf + 8 * Stages;
        ke = vf + 8 * Stages;
        ve = ke + 8 * Stages;
        tf = ve + 8 * Stages;
        te = tf + 8 * Stages;
        qe = bar_q + 8 * (1 + (FP8 ? 6 : 4) * Stages);
        rf = qe + 8;
        re = rf + 8 * Raw;
        itf = re + 8 * Raw;
        ite = itf + 16;
        mail = ite + 16;
    }
    // thread 0: prefetch the three tensor maps and initialise the barriers (the caller then
    // synchronises the CTA)
    // (full_count: arrivals that fill a K / V stage: 1 for TMA, the producer threads for cp.async)
    // (empty_count: arrivals that free a stage: the consumer warps of every CTA that reads it)
    // (raw_full_count: arrivals that fill a raw stage: 1 for TMA, 128 for the cp.async copies)
    __device__ __forceinline__ void init(const void *tmQ, const void *tmK, const void *tmV,
                                         uint32_t full_count = 1, uint32_t empty_count = kConsumerWarps,
                                         uint32_t raw_full_count = 1) const {
        prefetch_tensormap(tmQ);
        prefetch_tensormap(tmK);
        prefetch_tensormap(tmV);
        mbar_init(bar_q, 1);
        mbar_init(qe, kConsumerWarps);
        for (int s = 0; s < Stages; ++s) {
            mbar_init(kf + 8 * s, full_count);
            mbar_init(vf + 8 * s, full_count);
            mbar_init(ke + 8 * s, empty_count);
            mbar_init(ve + 8 * s, FP8 ? 128u : empty_count);
            if (FP8) {
                mbar_init(tf + 8 * s, 128u);
                mbar_init(te + 8 * s, empty_count);
            }
        }
        for (int r = 0; r < Raw; ++r) {
            mbar_init(rf + 8 * r, raw_full_count);
            mbar_init(re + 8 * r, 128u);
        }
        for (int j = 0; j < 2; ++j) {
            mbar_init(itf + 8 * j, 1u);
            mbar_init(ite + 8 * j, kConsumerWarps);
        }
        fence_mbarrier_init();
    }
};

// A consumer warp's full-barrier wait, then the warp reconverged before the .sync.aligned
// wgmma instructions; its release of a stage (lane 0 arrives for the warp).
__device__ __forceinline__ void wait_full(uint32_t bar, uint32_t phase) {
    mbar_wait(bar, phase);
    __syncwarp();
}
__device__ __forceinline__ void release(uint32_t bar, int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
}

// Ping-pong turns of consumer warpgroup cw (0 / 1): it waits on named barrier 1 + cw and hands
// over on 2 - cw; the upper warpgroup lets the lower one start (turns_open) and skips its last
// hand-over, so every bar.sync has exactly one matching bar.arrive (turns = tiles + 1 each).
__device__ __forceinline__ void turns_open(int cw, bool any_tile) {
    if (cw == 1 && any_tile) named_bar_arrive(1, 256);
}
__device__ __forceinline__ void turn_begin(int cw) { named_bar_sync(1 + cw, 256); }
__device__ __forceinline__ void turn_end(int cw, bool last) {
    if (!(last && cw == 1)) named_bar_arrive(2 - cw, 256);
}

} // namespace fa_sm90
