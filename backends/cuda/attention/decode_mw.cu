// decode_mw.cu - the multi-warp decode tile: the sequences of a call with one query token, on
// head widths 64, 128 and 256 (attention_tiles.h: mw_width), 16-bit or E4M3 K/V.
//
// One CTA per (sequence, KV head, split), kMwWarps warps. The split's keys are cut into tiles of
// KT keys (mw_keys); warp w takes tiles w, w + NW, ... with its own cp.async ring of NS stages
// (mw_stages) and its own online softmax: no __syncthreads in the key loop. At the end the warps
// combine through shared memory in the order 0..NW-1, so a row's bits depend only on its sequence
// and the split count (never on the rest of the batch).
//
// Math in the transposed form: S^T = K Q^T (keys are the MMA's 16 rows, the G <= 16 query heads of
// the KV head its n8 columns: NF = 1 fragment for G <= 8, else 2), O^T += V^T P^T (head dims as
// rows, keys as the k dimension). With G = 4 a 16-key step of head 128 is 8 MMAs where a 16-row
// tile (12 rows of padding) needs 16. P^T goes from the S^T accumulator to the B operand with
// movmatrix.trans. Softmax in log2 units, per query column: x = logit (scale, softcap, ALiBi),
// m = max x, p = 2^(x - m): an exponent is a difference of rounded values, never positive.
//
// fp8 (E4M3) K/V: the raw bytes are staged by cp.async and converted to f16 pairs in registers
// while the MMA fragments are built (cvt e4m3x2 -> f16x2: exact, NaN kept); the MMAs run in f16.
// bf16 queries go to f16 scaled per query head by a power of two (largest |q| of the head in
// [2^14, 2^15)), undone in the logit constant; f16 queries as they are. P is f16 (more bits than
// bf16 for p in [0, 1]). The K dims are permuted inside each 64-dim group so that one 16-byte
// shared load feeds 4 k-steps (Q's fragments use the same permutation), and V's dims so that a
// lane's D / 8 dims are contiguous bytes (the combine's dim map undoes it).
#include "attention_kernel.cuh"

#if !defined(__HIP_PLATFORM_AMD__)

#include "dispatch_generated.h"

namespace fa_attn {
namespace {

template <int D_, bool FP8_, bool DEEP = false> struct MwCfg {
    static constexpr int D = D_;
    static constexpr bool FP8 = FP8_;
    static constexpr int NW = kMwWarps;
    static constexpr int KT = mw_keys(D);
    static constexpr int NS = DEEP ? kMwDeepStages : mw_stages(D, FP8);
    static constexpr int ES = FP8 ? 1 : 2;     // bytes per element of K/V
    static constexpr int ROWB = D * ES;        // bytes of one key row
    static constexpr int CPR = ROWB / 16;      // 16-byte chunks per row
    static constexpr int TILEB = KT * ROWB;    // one K (or V) tile
    static constexpr int STAGEB = 2 * TILEB;   // K + V
    static constexpr int WARPB = NS * STAGEB;  // one warp's ring
    static constexpr int KM = KT / 16;         // m16 tiles of S^T a step
    static constexpr int KS = D / 16;          // k-steps of S^T
    static constexpr int MT = D / 16;          // m-tiles of O^T
    static constexpr int NT = NW * 32;
    static constexpr int QN = kMwMaxGroup;     // combine columns
    static constexpr int LDO = mw_combine_ld(D, FP8); // combine row (floats)
    static constexpr int GRP = D / 8 + 2;             // E4M3: a lane group's dims in a combine row
    static constexpr int COMB = NW * QN * LDO * 4 + 2 * NW * QN * 4;
    static constexpr int SMEM = NW * WARPB > COMB ? NW *WARPB : COMB;
    static_assert(D == 64 || D == 128 || D == 256, "mw widths: 64, 128, 256");
    static_assert(KT == 16 || KT == 32, "one key offset per lane");
    static_assert(CPR <= 32 && (KT * CPR) % 32 == 0, "whole chunk rounds per lane");
    static_assert(FP8 || CPR >= 8, "16-bit swizzle needs 8 chunks a row");
    static_assert(SMEM == mw_smem_bytes(D, FP8, DEEP), "attention_tiles.h: mw_smem_bytes");
    static_assert(!DEEP || mw_deep(D, FP8), "the deep ring is built for mw_deep widths only");
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// 8 x 8 b16 transpose across the warp (fragment of X -> fragment of X^T)
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// fp8 V's 16-byte chunk c of key row `row` sits at chunk c ^ mw_vswz(row) of the staged row: the
// P^T V loads (a lane reads its D / 8 bytes of rows 2 q + {0, 1, 8, 9}, q = (row >> 1) & 3) then
// hit distinct banks in each 8-lane phase at heads 128 / 256 (unswizzled: 4 lanes on one bank
// group), 2-way at head 64 (4 chunks a row)
template <int D> __device__ __forceinline__ int mw_vswz(int row) {
    const int qq = (row >> 1) & 3;
    return D == 64 ? (qq & 1) << 1 : (D == 128 ? qq << 1 : ((qq & 1) << 2) | (qq >> 1));
}

// K's chunk c of key row `row` sits at chunk c ^ mw_kswz(row), a function of row % 8 (the fp8 S^T
// loads of rows r and r + 8 share it). 16-bit: the ldmatrix rows of a phase are 8 rows at the
// same logical chunk. fp8 at heads 128 / 256: a phase is rows {2 i, 2 i + 1} x chunks 4 g + q, so
// odd rows go to the other half of the 8 bank groups; head 64's rows already alternate halves.
template <int D, bool FP8> __device__ __forceinline__ int mw_kswz(int row) {
    return !FP8 ? row & 7 : (D == 64 ? row & 3 : ((row & 1) << 2) | ((row >> 1) & 3));
}

// Four E4M3 bytes -> two f16 pairs: lo = bytes {0, 1}, hi = bytes {2, 3} (first in the low half).
__device__ __forceinline__ void e4m3x4_to_f16(uint32_t w, uint32_t &lo, uint32_t &hi) {
    const __half2_raw a =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
    lo = static_cast<uint32_t>(a.x) | (static_cast<uint32_t>(a.y) << 16);
    hi = static_cast<uint32_t>(b.x) | (static_cast<uint32_t>(b.y) << 16);
}

__device__ __forceinline__ void lds128(uint32_t (&x)[4], uint32_t addr) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                 : "r"(addr));
}

__device__ __forceinline__ void lds64(uint32_t (&x)[2], uint32_t addr) {
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(x[0]), "=r"(x[1]) : "r"(addr));
}

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// The exponent e of the power of two that brings a query head's largest |q| (amax >= 0, not NaN)
// into [2^14, 2^15): amax = 1.m * 2^(E - 127) with E its exponent field, so e = 141 - E, at most
// 127 (E = 0: a subnormal amax); 0 for 0 and Inf. Integer work from the bits (a frexpf / ldexpf
// pair and a division cost a one-tile call 0.2 us on its dependent chain).
__device__ __forceinline__ int q_f16_exp(float amax) {
    const int E = static_cast<int>(__float_as_uint(amax) >> 23);
    return amax > 0.f && E < 255 ? min(127, 141 - E) : 0;
}

// max |a[i]| over N (a power of two) values, as a tree of depth log2 N (NaN dropped where the
// other operand is not NaN)
template <int N> __device__ __forceinline__ float tree_absmax(const float *a) {
    if constexpr (N == 1)
        return fabsf(a[0]);
    else
        return fmaxf(tree_absmax<N / 2>(a), tree_absmax<N / 2>(a + N / 2));
}

// 2^e, exactly, for e in [-127, 127]
__device__ __forceinline__ float pow2f(int e) {
    return e >= -126 ? __uint_as_float(static_cast<uint32_t>(e + 127) << 23) : __uint_as_float(0x00400000u);
}

template <int D, typename QT, bool FP8, int NF, bool DEEP>
__global__ void __launch_bounds__(kMwWarps * 32, mw_min_blocks(D, FP8, NF))
    decode_mw_kernel(const __grid_constant__ Params p) {
    using C = MwCfg<D, FP8, DEEP>;
    using OT = typename std::conditional<FP8, __half, QT>::type; // MMA operand type
    constexpr int KT = C::KT, NS = C::NS, NW = C::NW, KM = C::KM, KS = C::KS, MT = C::MT;
    constexpr float kLog2e = 1.4426950408889634f;
    constexpr unsigned kAll = 0xffffffffu;
    extern __shared__ __align__(128) unsigned char smem[];
    const int Hkv = p.num_heads_kv, G = p.group;
    const int b = static_cast<int>(blockIdx.x) / Hkv, kvh = static_cast<int>(blockIdx.x) - b * Hkv;
    const int split = static_cast<int>(blockIdx.y);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int r = lane >> 2, q = lane & 3;
    grid_dependency_launch(); // the split combine's CTAs may launch now (it waits for this grid)
    const int q0 = p.cu_seqlens_q[b];
    if (p.cu_seqlens_q[b + 1] - q0 != 1) return; // the other launches' sequences
    int nsplit = p.num_splits;
    if (p.split_plan != nullptr) nsplit = min(p.split_plan[1 + b], nsplit);
    if (split >= nsplit) return; // includes "the sequence does no work" (0)
    const bool to_split = nsplit > 1;

    // keys: the row's allowed range [kmin, kmax) (its diagonal key is the last one; a left window
    // moves the start), this split's share of its KT-key tiles, this warp's tiles in it
    KeyRange kr;
    kr.seq = b;
    int Lk;
    if (p.cu_seqlens_k != nullptr) {
        kr.kstart = p.cu_seqlens_k[b];
        Lk = p.cu_seqlens_k[b + 1] - kr.kstart;
        kr.bt = nullptr;
    } else {
        kr.kstart = 0;
        Lk = p.seqused_k[b];
        kr.bt = p.block_table + static_cast<int64_t>(b) * p.block_table_stride;
    }
    const int td = Lk - 1;
    const int kmin = p.window_left >= 0 ? max(0, td - p.window_left) : 0;
    const int kmax = max(Lk, kmin);
    kr.kmin = kmin;
    kr.kmax = kmax;
    const int ntiles = static_cast<int>((static_cast<int64_t>(kmax) - kmin + KT - 1) / KT);
    const int t0 = static_cast<int>(static_cast<int64_t>(ntiles) * split / nsplit);
    const int t1 = static_cast<int>(static_cast<int64_t>(ntiles) * (split + 1) / nsplit);
    const int k0 = static_cast<int>(min(static_cast<int64_t>(kmax), kmin + static_cast<int64_t>(t0) * KT));
    const int k1 = static_cast<int>(min(static_cast<int64_t>(kmax), kmin + static_cast<int64_t>(t1) * KT));
    const int nt = t1 - t0 > w ? (t1 - t0 - w + NW - 1) / NW : 0;

    // per-column constants: column n = f * 8 + 2 q + e of the S^T accumulator
    float kdesc = 1.f, vdesc = 1.f;
    if constexpr (FP8) {
        const int64_t di = static_cast<int64_t>(b) * p.descale_batch_stride +
                           static_cast<int64_t>(kvh) * p.descale_head_stride;
        kdesc = p.k_descale != nullptr ? p.k_descale[di] : p.k_scale;
        vdesc = p.v_descale != nullptr ? p.v_descale[di] : p.v_scale;
    }
    const float scale_nat = p.softmax_scale * kdesc;
    const float cst0 = p.softcap > 0.f ? scale_nat / p.softcap : scale_nat * kLog2e; // times Q's 2^-qe
    const bool has_cap = p.softcap > 0.f, has_alibi = p.alibi_slopes != nullptr;
    const float cap2 = p.softcap * kLog2e;

    // Q^T as B fragments (n = query head g = f * 8 + r, k = head dims), zero past G
    uint32_t qb[KS][NF][2];
    int qe[NF]; // Q's scale 2^qe per fragment row's query head (bf16 query, E4M3 K/V; else 0)
    uint2 qraw[FP8 ? NF : 1][FP8 ? KS : 1]; // fp8: Q's raw pairs until the first tiles are issued
    {
        const QT *qp = static_cast<const QT *>(p.q);
        const int qhg = p.q_head_group;
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            const int n = f * 8 + r;
            const bool valid = n < G;
            const int h = query_head(p, kvh, valid ? n : 0);
            const QT *qr = qp + static_cast<int64_t>(h / qhg) * p.q_group_stride +
                           static_cast<int64_t>(h % qhg) * p.q_head_stride +
                           static_cast<int64_t>(q0) * p.q_token_stride;
            qe[f] = 0;
            if constexpr (!FP8) {
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    qb[s][f][0] =
                        valid ? __ldg(reinterpret_cast<const unsigned int *>(qr + 16 * s + 2 * q)) : 0u;
                    qb[s][f][1] =
                        valid ? __ldg(reinterpret_cast<const unsigned int *>(qr + 16 * s + 8 + 2 * q)) : 0u;
                }
            } else {
                // k-step s = 4 g + t: this lane's pairs are dims 64 g + 16 q + 4 t + {0, 1} (b0) and
                // + {2, 3} (b1), as the K fragments below; converted after the first K / V tiles
                // are issued (the scale waits for the loads: their latency then overlaps the tiles')
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    const int d0 = 64 * (s / 4) + 16 * q + 4 * (s % 4);
                    qraw[f][s] = valid ? __ldg(reinterpret_cast<const uint2 *>(qr + d0)) : make_uint2(0u, 0u);
                }
            }
        }
    }
    const unsigned char *kc =
        static_cast<const unsigned char *>(p.k) + static_cast<int64_t>(kvh) * p.k_head_stride * C::ES;
    const unsigned char *vc =
        static_cast<const unsigned char *>(p.v) + static_cast<int64_t>(kvh) * p.v_head_stride * C::ES;
    const uint32_t wbase = smem_addr(smem) + w * C::WARPB;
    uint32_t bad = 0;

    // this lane's key (lane % KT) of the warp's j-th tile: its block-table entry (loaded a tile
    // before key_off looks at it, so that a page-size-1 table's loads overlap a tile's math; 0
    // dense or past the split) and its element offset: -1 past the split (masked), -2 a block id
    // outside the cache (a zero row, logit 0, reported after the loop)
    auto key_at = [&](int j) -> int64_t { return k0 + static_cast<int64_t>(w + j * NW) * KT + (lane % KT); };
    auto key_id = [&](int j) -> int32_t {
        const int64_t key = key_at(j);
        if (j >= nt || key >= k1 || kr.bt == nullptr) return 0;
        const int kk = static_cast<int>(key);
        return __ldg(kr.bt + (p.block_shift >= 0 ? (kk >> p.block_shift) : (kk / p.block_size)));
    };
    auto key_off = [&](int j, int32_t id) -> int64_t {
        const int64_t key = key_at(j);
        if (j >= nt || key >= k1) return -1;
        const int kk = static_cast<int>(key);
        if (kr.bt == nullptr) return static_cast<int64_t>(kr.kstart + kk) * p.k_row_stride;
        if (static_cast<uint32_t>(id) >= p.id_limit) {
            bad = 1u;
            return -2;
        }
        const int bi = p.block_shift >= 0 ? (kk >> p.block_shift) : (kk / p.block_size);
        return static_cast<int64_t>(id) * p.k_block_stride +
               static_cast<int64_t>(kk - bi * p.block_size) * p.k_row_stride;
    };
    // the warp's j-th tile into stage j % NS (one commit group, empty past the warp's tiles)
    auto issue = [&](int j, int64_t off) {
        if (j < nt) {
            const uint32_t sk = wbase + (j % NS) * C::STAGEB, sv = sk + C::TILEB;
            const int ch = lane % C::CPR;
#pragma unroll
            for (int i = 0; i < KT * C::CPR / 32; ++i) {
                const int row = lane / C::CPR + (32 / C::CPR) * i;
                const int64_t o = __shfl_sync(kAll, off, row);
                const bool ok = o >= 0;
                const int64_t src = ok ? o * C::ES + ch * 16 : 0;
                const int kch = ch ^ mw_kswz<D, FP8>(row);
                const int vch = FP8 ? ch ^ mw_vswz<D>(row) : kch;
                cp_async16(sk + row * C::ROWB + kch * 16, kc + src, ok ? 16 : 0);
                cp_async16(sv + row * C::ROWB + vch * 16, vc + src, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    int32_t id_next = key_id(1);
    int64_t off_next = key_off(0, key_id(0));
#pragma unroll
    for (int j = 0; j < NS - 1; ++j) {
        issue(j, off_next);
        off_next = key_off(j + 1, id_next);
        id_next = key_id(j + 2);
    }

    if constexpr (FP8) { // Q to f16 fragments (bf16: scaled per query head by a power of two)
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            if constexpr (std::is_same<QT, __nv_bfloat16>::value) {
                float v[4 * KS]; // the lane's 4 KS values of the head
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    const __nv_bfloat16 *x = reinterpret_cast<const __nv_bfloat16 *>(&qraw[f][s]);
#pragma unroll
                    for (int i = 0; i < 4; ++i) v[4 * s + i] = to_float(x[i]);
                }
                float amax = fmaxf(tree_absmax<4 * KS>(v), 0.f); // fmaxf drops NaN, as the scale's rule wants
                amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, 1));
                amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, 2));
                qe[f] = q_f16_exp(amax);
                const float sc = pow2f(qe[f]);
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    qb[s][f][0] = pack2<__half>(v[4 * s] * sc, v[4 * s + 1] * sc);
                    qb[s][f][1] = pack2<__half>(v[4 * s + 2] * sc, v[4 * s + 3] * sc);
                }
            } else {
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    qb[s][f][0] = qraw[f][s].x;
                    qb[s][f][1] = qraw[f][s].y;
                }
            }
        }
    }
    float cst[NF][2], slope[NF][2];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = f * 8 + 2 * q + e;
            const float inv = pow2f(-__shfl_sync(kAll, qe[f], (2 * q + e) * 4));
            cst[f][e] = cst0 * inv;
            slope[f][e] = has_alibi && n < G
                              ? -kLog2e * p.alibi_slopes[static_cast<int64_t>(b) * p.alibi_batch_stride +
                                                         query_head(p, kvh, n)]
                              : 0.f;
        }
    }

    // softmax state per column; the sink (split 0, warp 0): m = z, l = 1 (l is a per-lane partial)
    float m[NF][2], l[NF][2], o[MT][NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = f * 8 + 2 * q + e;
            m[f][e] = -INFINITY;
            l[f][e] = 0.f;
            if (p.sinks != nullptr && split == 0 && w == 0 && n < G) {
                m[f][e] = p.sinks[query_head(p, kvh, n)] * kLog2e;
                l[f][e] = r == 0 ? 1.f : 0.f;
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) o[mt][f][0] = o[mt][f][1] = o[mt][f][2] = o[mt][f][3] = 0.f;
    }


    // E4M3 V^T's A fragments: a lane reads its D / 8 dims (bytes r D / 8 ..) of key rows 2 q,
    // 2 q + 1, 2 q + 8, 2 q + 9 of m16 key block km (v_words); m-tile 2 i + h takes bytes 2 h,
    // 2 h + 1 of word i of each row, two keys paired by a byte permute (v_frag): dims r D / 8 +
    // 4 i + 2 h (A row r) and + 1 (A row r + 8)
    constexpr int NWD = D / 32; // words per lane and row
    auto v_words = [&](uint32_t sv, int km, uint32_t(&x)[4][NWD]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int row = km * 16 + 2 * q + (k & 1) + 8 * (k >> 1);
            const uint32_t ad = sv + row * C::ROWB;
            const int sw = mw_vswz<D>(row);
            if constexpr (NWD == 2) {
                lds64(reinterpret_cast<uint32_t(&)[2]>(x[k]), ad + (((r >> 1) ^ sw) << 4) + (r & 1) * 8);
            } else {
#pragma unroll
                for (int c = 0; c < NWD / 4; ++c)
                    lds128(*reinterpret_cast<uint32_t(*)[4]>(&x[k][4 * c]),
                           ad + (((r * (NWD / 4) + c) ^ sw) << 4));
            }
        }
    };
    auto v_frag = [&](const uint32_t(&x)[4][NWD], int i, int h, uint32_t(&a)[4]) {
        const uint32_t sel = h == 0 ? 0x5140u : 0x7362u;
        e4m3x4_to_f16(prmt(x[0][i], x[1][i], sel), a[0], a[1]);
        e4m3x4_to_f16(prmt(x[2][i], x[3][i], sel), a[2], a[3]);
    };

    for (int j = 0; j < nt; ++j) {
        issue(j + NS - 1, off_next);
        off_next = key_off(j + NS, id_next);
        id_next = key_id(j + NS + 1);
        cp_async_wait<NS - 1>();
        __syncwarp();
        const uint32_t sk = wbase + (j % NS) * C::STAGEB, sv = sk + C::TILEB;
        const int kbase = k0 + (w + j * NW) * KT;

        // S^T = K Q^T
        float acc[KM][NF][4];
#pragma unroll
        for (int km = 0; km < KM; ++km) {
#pragma unroll
            for (int f = 0; f < NF; ++f) acc[km][f][0] = acc[km][f][1] = acc[km][f][2] = acc[km][f][3] = 0.f;
            if constexpr (!FP8) {
                const int row = km * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    uint32_t a[4];
                    ldsm_x4(a, sk + row * C::ROWB + (((2 * s + (lane >> 4)) ^ (lane & 7)) << 4));
#pragma unroll
                    for (int f = 0; f < NF; ++f) mma16816<OT>(acc[km][f], a, qb[s][f][0], qb[s][f][1]);
                }
            } else {
                const int row = km * 16 + r;
#pragma unroll
                for (int g = 0; g < D / 64; ++g) {
                    const int pc = (4 * g + q) ^ mw_kswz<D, FP8>(row); // row + 8: the same
                    uint32_t wl[4], wh[4];
                    lds128(wl, sk + row * C::ROWB + pc * 16);
                    lds128(wh, sk + (row + 8) * C::ROWB + pc * 16);
#pragma unroll
                    for (int t = 0; t < 4; ++t) {
                        uint32_t a[4];
                        e4m3x4_to_f16(wl[t], a[0], a[2]);
                        e4m3x4_to_f16(wh[t], a[1], a[3]);
#pragma unroll
                        for (int f = 0; f < NF; ++f)
                            mma16816<OT>(acc[km][f], a, qb[4 * g + t][f][0], qb[4 * g + t][f][1]);
                    }
                }
            }
        }
        // logits in log2 units: scale (or softcap), ALiBi, keys past the split -inf
#pragma unroll
        for (int km = 0; km < KM; ++km)
#pragma unroll
            for (int f = 0; f < NF; ++f)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int e = i & 1;
                    float x = acc[km][f][i];
                    x = has_cap ? cap2 * fast_tanh(x * cst[f][e]) : x * cst[f][e];
                    if (has_alibi)
                        x = fmaf(slope[f][e], static_cast<float>(td - (kbase + km * 16 + r + 8 * (i >> 1))),
                                 x);
                    acc[km][f][i] = x;
                }
        if (kbase + KT > k1) {
#pragma unroll
            for (int km = 0; km < KM; ++km)
#pragma unroll
                for (int f = 0; f < NF; ++f)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        if (kbase + km * 16 + r + 8 * (i >> 1) >= k1) acc[km][f][i] = -INFINITY;
        }
        // online softmax per column
        float mu[NF][2];
#pragma unroll
        for (int f = 0; f < NF; ++f) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float mx = fmaxf(acc[0][f][e], acc[0][f][2 + e]);
#pragma unroll
                for (int km = 1; km < KM; ++km) mx = fmaxf(mx, fmaxf(acc[km][f][e], acc[km][f][2 + e]));
                mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 16));
                const float mnew = fmaxf(m[f][e], mx);
                const float msafe = mnew == -INFINITY ? 0.f : mnew;
                const float alpha = fast_exp2(m[f][e] - msafe);
                m[f][e] = mnew;
                mu[f][e] = msafe;
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
                    const float pv = fast_exp2(acc[km][f][i] - mu[f][i & 1]);
                    l[f][i & 1] += pv;
                    acc[km][f][i] = pv;
                }

        // O^T += V^T P^T
#pragma unroll
        for (int km = 0; km < KM; ++km) {
            uint32_t pb[NF][2];
#pragma unroll
            for (int f = 0; f < NF; ++f) {
                pb[f][0] = movmatrix_t(pack2<OT>(acc[km][f][0], acc[km][f][1]));
                pb[f][1] = movmatrix_t(pack2<OT>(acc[km][f][2], acc[km][f][3]));
            }
            if constexpr (!FP8) {
                const int row = km * 16 + (lane & 7) + (lane >> 4) * 8;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    uint32_t a[4];
                    ldsm_x4_t(a, sv + row * C::ROWB + (((2 * mt + ((lane >> 3) & 1)) ^ (lane & 7)) << 4));
#pragma unroll
                    for (int f = 0; f < NF; ++f) mma16816<OT>(o[mt][f], a, pb[f][0], pb[f][1]);
                }
            } else {
                uint32_t x[4][NWD];
                v_words(sv, km, x);
#pragma unroll
                for (int i = 0; i < NWD; ++i) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        uint32_t a[4];
                        v_frag(x, i, h, a);
#pragma unroll
                        for (int f = 0; f < NF; ++f) mma16816<OT>(o[2 * i + h][f], a, pb[f][0], pb[f][1]);
                    }
                }
            }
        }
        __syncwarp(); // every lane is done with this stage before it is refilled
    }
    cp_async_wait<0>();
    if (__any_sync(kAll, bad != 0u) && lane == 0) report_bad_block_id(p, kr, k0, k1);

    // the warp's row sums (each lane holds its keys' part), fixed shuffle order
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            l[f][e] += __shfl_xor_sync(kAll, l[f][e], 4);
            l[f][e] += __shfl_xor_sync(kAll, l[f][e], 8);
            l[f][e] += __shfl_xor_sync(kAll, l[f][e], 16);
        }

    // combine the warps in the order 0..NW-1
    __syncthreads();
    constexpr int QN = C::QN, LDO = C::LDO;
    float *sO = reinterpret_cast<float *>(smem); // [NW][QN][LDO]
    float *sM = sO + NW * QN * LDO; // [NW][QN]
    float *sL = sM + NW * QN; // [NW][QN]
    // 16-bit: a lane's dims 16 mt + r (+ 8), banks 8 q + r. E4M3: its dims r D / 8 + 2 mt (+ 1), one
    // float2 at r GRP + 2 mt: a half warp's 16 lanes (r in 4 values, q) hit 16 distinct 8-byte bank
    // pairs (4 q + r (D / 16 + 1) mod 16); at r D / 8 they would share 4 banks (8-way)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float *row = sO + (w * QN + f * 8 + 2 * q + e) * LDO;
                if constexpr (FP8) {
                    *reinterpret_cast<float2 *>(row + r * C::GRP + 2 * mt) =
                        make_float2(o[mt][f][e], o[mt][f][2 + e]);
                } else {
                    row[16 * mt + r] = o[mt][f][e];
                    row[16 * mt + r + 8] = o[mt][f][2 + e];
                }
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
    const int64_t tok = q0;
    for (int idx = threadIdx.x; idx < G * (D / 2); idx += C::NT) {
        const int n = idx / (D / 2), d = 2 * (idx % (D / 2));
        const int dp = FP8 ? (d / (D / 8)) * C::GRP + d % (D / 8) : d; // d's place in a combine row
        float M = sM[n];
#pragma unroll
        for (int v = 1; v < NW; ++v) M = fmaxf(M, sM[v * QN + n]);
        float Ls = 0.f, a0 = 0.f, a1 = 0.f;
#pragma unroll
        for (int v = 0; v < NW; ++v) {
            const float mv = sM[v * QN + n];
            const float wt = mv == -INFINITY ? 0.f : fast_exp2(mv - M);
            const float2 ov = *reinterpret_cast<const float2 *>(sO + (v * QN + n) * LDO + dp);
            Ls = fmaf(sL[v * QN + n], wt, Ls);
            a0 = fmaf(ov.x, wt, a0);
            a1 = fmaf(ov.y, wt, a1);
        }
        const float inv = Ls > 0.f ? vdesc / Ls : 0.f;
        const float lse =
            Ls > 0.f ? ((M == -INFINITY ? 0.f : M) + __log2f(Ls)) * 0.6931471805599453f : -INFINITY;
        const int h = query_head(p, kvh, n);
        if (!to_split) {
            QT *dst = static_cast<QT *>(p.out) + tok * p.out_token_stride +
                      static_cast<int64_t>(h) * p.out_head_stride;
            *reinterpret_cast<uint32_t *>(dst + d) = pack2<QT>(a0 * inv, a1 * inv);
            if (d == 0 && p.lse != nullptr) p.lse[static_cast<int64_t>(h) * p.lse_head_stride + tok] = lse;
        } else {
            float *dst =
                p.split_out +
                ((static_cast<int64_t>(split) * p.num_tokens + tok) * p.num_heads_q + h) * p.head_size;
            *reinterpret_cast<float2 *>(dst + d) = make_float2(a0 * inv, a1 * inv);
            if (d == 0)
                p.split_lse[(static_cast<int64_t>(split) * p.num_heads_q + h) * p.num_tokens + tok] = lse;
        }
    }
}

template <int D, typename QT, bool FP8, int NF, bool DEEP>
cudaError_t launch_mw_ring(const Params &p, cudaStream_t stream) {
    using C = MwCfg<D, FP8, DEEP>;
    const int64_t blocks = static_cast<int64_t>(p.num_seqs) * p.num_heads_kv;
    if (blocks > 0x7fffffffLL || p.num_splits > 65535) return cudaErrorInvalidConfiguration;
    auto kern = decode_mw_kernel<D, QT, FP8, NF, DEEP>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    kern<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_splits), 1), C::NT, C::SMEM,
           stream>>>(p);
    return cudaGetLastError();
}

template <int D, typename QT, bool FP8, int NF>
cudaError_t launch_mw(const Params &p, bool deep, cudaStream_t stream) {
    if constexpr (mw_deep(D, FP8)) {
        if (deep) return launch_mw_ring<D, QT, FP8, NF, true>(p, stream);
    }
    return launch_mw_ring<D, QT, FP8, NF, false>(p, stream);
}

template <int D, typename QT, bool FP8>
cudaError_t launch_mw_groups(const Params &p, bool deep, cudaStream_t stream) {
    if constexpr (mw_max_group(D) <= 8) {
        return p.group <= 8 ? launch_mw<D, QT, FP8, 1>(p, deep, stream) : cudaErrorInvalidValue;
    } else {
        return p.group <= 8 ? launch_mw<D, QT, FP8, 1>(p, deep, stream)
                            : launch_mw<D, QT, FP8, 2>(p, deep, stream);
    }
}

template <int D>
cudaError_t launch_mw_width(const Params &p, bool f16, bool fp8, bool deep, cudaStream_t stream) {
    if (f16)
        return fp8 ? launch_mw_groups<D, __half, true>(p, deep, stream)
                   : launch_mw_groups<D, __half, false>(p, deep, stream);
    return fp8 ? launch_mw_groups<D, __nv_bfloat16, true>(p, deep, stream)
               : launch_mw_groups<D, __nv_bfloat16, false>(p, deep, stream);
}

// CTAs of the 16-bit-K/V kernel (bf16, one n8 fragment) an SM holds
template <int D> cudaError_t mw_occupancy(int *n) {
    auto kern = decode_mw_kernel<D, __nv_bfloat16, false, 1, false>;
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, MwCfg<D, false>::SMEM);
    if (e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, kern, kMwWarps * 32, MwCfg<D, false>::SMEM);
}

} // namespace

bool decode_mw_compiled(int D) {
#ifdef FA_ATTN_HD_64
    if (D == 64) return true;
#endif
#ifdef FA_ATTN_HD_128
    if (D == 128) return true;
#endif
#ifdef FA_ATTN_HD_256
    if (D == 256) return true;
#endif
    (void)D;
    return false;
}

cudaError_t launch_decode_mw(const Params &p, int D, bool f16, bool fp8, bool deep, cudaStream_t stream) {
#ifdef FA_ATTN_HD_64
    if (D == 64) return launch_mw_width<64>(p, f16, fp8, deep, stream);
#endif
#ifdef FA_ATTN_HD_128
    if (D == 128) return launch_mw_width<128>(p, f16, fp8, deep, stream);
#endif
#ifdef FA_ATTN_HD_256
    if (D == 256) return launch_mw_width<256>(p, f16, fp8, deep, stream);
#endif
    (void)p;
    (void)f16;
    (void)fp8;
    (void)deep;
    (void)stream;
    return cudaErrorInvalidValue;
}

int decode_mw_ctas_per_sm(int D) {
    int n = 0;
    cudaError_t e = cudaErrorInvalidValue;
#ifdef FA_ATTN_HD_64
    if (D == 64) e = mw_occupancy<64>(&n);
#endif
#ifdef FA_ATTN_HD_128
    if (D == 128) e = mw_occupancy<128>(&n);
#endif
#ifdef FA_ATTN_HD_256
    if (D == 256) e = mw_occupancy<256>(&n);
#endif
    if (e != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

} // namespace fa_attn

#endif // !__HIP_PLATFORM_AMD__
