// attention_kernel.cuh - the varlen paged / dense attention kernel family (CUDA, sm_80+).
//
// One template, instantiated per (padded head dim D, query dtype QT, KV storage kind KV) by the
// generated files in instances/ (gen_instances.py holds the axis lists). Each instance holds two
// tile shapes of the same kernel:
//
//   prefill  4 warps stacked along M, MF m16 fragments per warp (BM = 64 * MF rows), BN keys per
//            stage, every warp reads the whole key tile.
//   decode   one warp, 16 rows (the G query heads of one KV head for q_len 1, "packed GQA"),
//            small CTAs, 6 per SM at head 128 (few instructions a stage). It walks the keys in the
//            same steps as a prefill warp, so a row gets the same bits from either shape
//            (num_splits <= 1 is batch invariant).
//
// Rows of a tile are (query token, query head of the KV head) pairs, r = t * G + g, so the K/V
// tile staged in shared memory serves every query head of its KV head (GQA packing, prefill and
// decode); query_head() maps g to the head index (grouped queries included).
//
// Pipeline per key tile (16-bit K/V): one cp.async group per tile (K and V rows gathered through
// the block table, 16-byte copies, rows outside the CTA's key range zero-filled, never read), NS
// stages: tiles i+1 .. i+NS-1 are in flight while tile i is computed (prefill NS = 2, padded
// rows; decode NS = 2, swizzled rows). fp8 K/V: the raw bytes are staged the same way and
// converted in shared memory before the tile is used: K to QT, V to f16 (P . V runs in f16).
// Math: S = Q K^T and O += P V with mma.sync m16n8k16 (fp32 accumulate) fed by ldmatrix; online
// softmax in registers in log2 units; logits: scale -> softcap -> ALiBi -> mask (-inf) -> softmax
// with the sink as initial state (m = z, l = 1) of split 0.
#pragma once

#include "../fa_cuda_internal.cuh"
#include "attention_tiles.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

// The mask rule is every backend's FA_BU_KEY_ALLOWED (backends/common/fa_backend_util.h, through
// fa_cuda_internal.cuh): key j of a row whose diagonal key is diag_key is allowed when
// 0 <= j < lk and d = j - diag_key is in [-wl, wr].

namespace fa_attn {

enum { KV_SAME = 0, KV_FP8 = 1 };   // K/V storage: q dtype, or fp8 (e4m3 / e5m2 at run time)

// Flat kernel parameters (passed by value). Strides are in elements.
struct Params {
    const void *q;                    // [T, Hq, D] through the group addressing of fa_attn_args
    int64_t q_token_stride, q_head_stride, q_group_stride;
    int32_t q_head_group;             // qg > 0 (host replaces 0 by Hq), a multiple of Hkv
    int32_t q_group_kv;               // qg / Hkv: query heads per KV head within a group
    void *out;                        // [T, Hq, D] QT
    int64_t out_token_stride, out_head_stride;
    float *lse;                       // NULL-able [Hq, T]
    int64_t lse_head_stride;
    const void *k, *v;                // paged [NB, bs, Hkv, D] / dense [Tk, Hkv, D]
    int64_t k_block_stride, k_row_stride, k_head_stride;
    int64_t v_block_stride, v_row_stride, v_head_stride;
    const int32_t *cu_seqlens_q;      // [B + 1]
    const int32_t *seqused_k;         // [B] (paged)
    const int32_t *cu_seqlens_k;      // [B + 1] (dense) or NULL
    const int32_t *block_table;       // [B, *] or NULL (dense)
    int64_t block_table_stride;
    int64_t num_blocks;               // paged: ids outside [0, num_blocks) are never read
    uint32_t id_limit;                // min(num_blocks, 2^31): an id is good when (uint32_t)id < it
    FaDevErr *err_word;               // NULL-able: where a bad block id is reported
    int32_t num_seqs, num_tokens, num_heads_q, num_heads_kv, group, head_size;
    int32_t block_size, block_shift;  // block_shift = log2(block_size) or -1
    float softmax_scale;              // natural units
    float softcap;                    // 0 = off
    int32_t window_left, window_right; // -1 = unbounded (causal already folded into right = 0)
    const float *alibi_slopes;        // NULL-able [Hq] / [B, Hq]
    int64_t alibi_batch_stride;
    const float *sinks;               // NULL-able [Hq]
    const float *k_descale, *v_descale; // NULL-able [B, Hkv] (fp8 only)
    int64_t descale_batch_stride, descale_head_stride;
    float k_scale, v_scale;           // fp8 only, when the descale pointers are NULL
    int32_t kv_vec16;                 // fp8 only: 16-byte aligned rows (else 8-byte copies)
    int32_t kv_e5m2;                  // fp8 only: 1 = E5M2, 0 = E4M3
    int32_t num_splits;               // S >= 1
    int32_t tile_filter;              // 0: every sequence; 1: only those with Lq * G <= 16 (the
                                      // decode launch of a mixed batch); 2: only the others;
                                      // 3: those of 1 with Lq > 1; 4: Lq > 1 (3, 4: the
                                      // multi-warp decode tile runs Lq = 1)
    const int32_t *split_plan;        // NULL-able [1 + B]
    float *split_out;                 // [S, T, Hq, head_size] (S > 1)
    float *split_lse;                 // [S, Hq, T]
};

// Launches the kernel of one instance. decode selects the packed-decode tile shape.
// Returns the launch error (cudaSuccess when launched).
template <int D, typename QT, int KV>
cudaError_t launch_attention(const Params &p, bool decode, cudaStream_t stream);

// The multi-warp decode tile (decode_mw.cu): whether width D has it compiled, its launch (the
// sequences of p with one query token; f16: the q dtype is f16, else bf16; fp8: E4M3 K/V, else
// K/V of the q dtype), and its CTAs per SM on the current device (0 when unknown).
bool decode_mw_compiled(int D);
// deep: the kMwDeepStages ring where it is built (mw_deep widths; ignored elsewhere)
cudaError_t launch_decode_mw(const Params &p, int D, bool f16, bool fp8, bool deep, cudaStream_t stream);
int decode_mw_ctas_per_sm(int D);

// Dynamic shared memory of an instance's tile shape (bytes), for the host's capability check.
template <int D, typename QT, int KV> int64_t attention_smem_bytes(bool decode);

// CTAs of an instance's tile shape resident per SM on the current device (occupancy
// calculator; 0 when it fails).
template <int D, typename QT, int KV> int attention_ctas_per_sm(bool decode);

// Programmatic dependent launch (PTX ISA 8.x, "griddepcontrol"; sm_90+, no-ops below): a kernel
// lets the kernel launched behind it with the programmatic-serialization attribute start
// (launch_dependents), and that kernel waits for the first one's completion and memory flush
// before it touches what the first one wrote (wait).
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIP_PLATFORM_AMD__)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace fa_attn

#if defined(__HIP_PLATFORM_AMD__)
// HIP: mma.sync, ldmatrix and cp.async are NVIDIA instructions; the family is not built there
// (fa_cuda__attention reports FA_ERR_UNSUPPORTED).
#define FA_ATTN_INSTANTIATE(D, QT, KV)
#elif !defined(FA_ATTN_DECLS_ONLY)

namespace fa_attn {

// ---------------------------------------------------------------------------------------------
// Tile shapes

template <int D_, int WM_, int MF_, int BN_, int BNC_, int MINB_, int KV_, int NS_, bool SWZ_> struct Cfg {
    static constexpr int D = D_;                 // padded head dim (multiple of 16)
    static constexpr int WM = WM_;               // warps (stacked along the rows)
    static constexpr int NT = WM * 32;
    static constexpr int MF = MF_;               // m16 fragments per warp
    static constexpr int BM = WM * MF * 16;      // rows per CTA
    static constexpr int BN = BN_;               // keys per stage
    static constexpr int BNC = BNC_ < BN_ ? BNC_ : BN_;  // keys per online-softmax step
    static constexpr int NF = BNC / 8;           // n8 fragments of S per warp and step
    static constexpr int KS = D / 16;            // k16 steps of Q K^T
    static constexpr int DF = D / 8;             // n8 fragments of O
    static constexpr int MINB = MINB_;
    static constexpr int NS = NS_;               // K/V pipeline stages (NS - 1 tiles in flight)
    static constexpr bool FP8 = KV_ != KV_SAME;
    // Shared-memory rows: either padded by 16 bytes (ldmatrix rows land in distinct banks and
    // every fragment address is one base register plus an immediate), or unpadded with the
    // 16-byte chunks XOR-swizzled by (row & 7) (SWZ: denser, so more stages fit; needs
    // D % 64 == 0 so that a row holds whole groups of 8 chunks).
    static constexpr bool SWZ = SWZ_;
    static constexpr int LD = SWZ ? D : D + 8;   // smem row length (elements)
    static constexpr int KST = FP8 ? 1 : NS;     // QT stages of K and of V
    // one-warp tiles (D <= 128) keep Q's MMA fragments in registers for the whole loop (KS x 4 registers),
    // loaded straight from global memory: no Q tile in shared memory, no ldmatrix per step
    static constexpr bool QREG = WM == 1 && MF == 1 && D <= 128;
    static constexpr int Q_BYTES = QREG ? 0 : BM * LD * 2;
    static constexpr int KV_TILE_BYTES = BN * LD * 2;
    static constexpr int RAW_TILE_BYTES = FP8 ? BN * D : 0; // one raw fp8 tile (K or V)
    static constexpr int MAIN_BYTES = Q_BYTES + 2 * KST * KV_TILE_BYTES + NS * 2 * RAW_TILE_BYTES;
    static constexpr int OLD = D + 8; // fp32 epilogue row length (float2 stores conflict-free)
    static constexpr int EPI_BYTES = BM * OLD * 4; // fp32 (split) or QT staging of O
    static constexpr int OFF_OFF = MAIN_BYTES; // int64 K/V row offsets [2][2][BN]
    static constexpr int SLOPE_OFF = OFF_OFF + 2 * 2 * BN * 8; // ALiBi slopes [BM] (log2 units)
    static constexpr int SMEM_MAIN = SLOPE_OFF + BM * 4;
    static constexpr int INFO_OFF = ((SMEM_MAIN > EPI_BYTES ? SMEM_MAIN : EPI_BYTES) + 15) / 16 * 16;
    static constexpr int ROW_OFF = INFO_OFF + 64; // int64 per-row q / out offsets [BM]
    static constexpr int LSE_OFF = ROW_OFF + BM * 8; // float per-row LSE, log2 units [BM]
    static constexpr int SMEM = LSE_OFF + BM * 4; // CtaInfo, row offsets, LSEs: never aliased
    static_assert(BNC % 16 == 0 && BN % BNC == 0, "keys per step: multiples of 16");
    static_assert((BNC / 8) % 2 == 0 && ((BNC / 8) & (BNC / 8 - 1)) == 0, "n8 fragments: power of 2");
    static_assert(D % 16 == 0, "padded head dim must be a multiple of 16");
    static_assert(!SWZ || D % 64 == 0, "swizzled rows need whole groups of 8 chunks");
    static_assert(NS >= 2, "at least two stages");
    static_assert(BM <= NT, "one thread per row in the epilogue");
};

// The two tile shapes, from the constants of attention_tiles.h (which the capability block
// reads too). Prefill: two stages, padded rows. Decode: one warp, 16 rows (q_len x heads of one
// KV head), one step per stage, swizzled unpadded rows (D % 64 == 0), Q in registers; its stage
// budget lets 6 CTAs share an SM at head 128 (one warp's stage is latency-bound, so warps per SM
// set the speed; docs/perf.md). Every width gets 2 stages but head 32 (4).
template <int D, int KV>
using PrefillCfg = Cfg<D, prefill_warps(D), prefill_frags(D), prefill_stage_keys(D), step_keys(D),
                       prefill_min_blocks(D), KV, kPrefillStages, false>;
template <int D, int KV>
using DecodeCfg = Cfg<D, 1, 1, decode_keys(D), decode_keys(D), kDecodeMinBlocks, KV,
                      decode_stages(D, KV != KV_SAME), (D % 64 == 0)>;

template <int D, int KV> struct CheckCfgs {
    using P = PrefillCfg<D, KV>;
    using Q = DecodeCfg<D, KV>;
    static_assert(P::BM == prefill_rows(D) && P::BN == prefill_stage_keys(D) && P::BNC == step_keys(D),
                  "prefill tile = attention_tiles.h");
    static_assert(Q::BM == kDecodeRows && Q::BN == decode_keys(D) && Q::BNC == step_keys(D),
                  "decode tile = attention_tiles.h");
    static constexpr bool ok = true;
};

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Hides a value from the optimiser: fragment addresses stay "base register + immediate" instead
// of one hoisted register per (fragment, k-step) pair, which would spill.
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
    asm volatile("" : "+r"(x));
    return x;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async8(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

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

template <typename QT>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> packed QT pair (first in the low half).
template <typename QT> __device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float fast_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two fp8 values (low byte first) -> a QT pair, exactly (fp8 is a subset of f16; f16 -> bf16
// through float is exact for fp8 values, NaN and Inf kept).
template <typename QT, bool E5M2> __device__ __forceinline__ uint32_t fp8x2_to_qt2(uint32_t two) {
    const __nv_fp8x2_storage_t x = static_cast<__nv_fp8x2_storage_t>(two & 0xffffu);
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(x, E5M2 ? __NV_E5M2 : __NV_E4M3);
    if constexpr (std::is_same<QT, __half>::value) {
        return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    } else {
        __half2 hh = *reinterpret_cast<__half2 *>(&h);
        float2 f = __half22float2(hh);
        return pack2<__nv_bfloat16>(f.x, f.y);
    }
}

// Query head of the g-th (0 <= g < Hq / Hkv) query head that reads KV head kvh. Query heads
// form groups of qg = q_head_group; within a group head h reads KV head (h % qg) / (qg / Hkv).
// One group (qg = Hq): h = kvh * G + g.
__device__ __forceinline__ int query_head(const Params &p, int kvh, int g) {
    const int gq = p.q_group_kv;
    return (g / gq) * p.q_head_group + kvh * gq + g % gq;
}

// Byte offset of (row, 16-byte chunk) in a [rows][LD] 16-bit tile (padded or swizzled rows).
template <class C> __device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
    if constexpr (C::SWZ)
        return static_cast<uint32_t>(row * C::LD * 2 + ((chunk ^ (row & 7)) << 4));
    else
        return static_cast<uint32_t>(row * C::LD * 2 + (chunk << 4));
}

// A lane's ldmatrix row address in a tile: its row and chunk (0 or 1), then moved by whole
// 8-row groups and even chunk counts (at()), which keeps (row & 7) and the chunk's low bit:
// padded rows add an immediate; swizzled rows XOR the chunk offset with the lane's (row & 6).
template <class C> struct Frag {
    uint32_t base, x;
    __device__ __forceinline__ uint32_t at(int row_add, int chunk_add) const {
        if constexpr (C::SWZ)
            return base + row_add * C::LD * 2 + ((static_cast<uint32_t>(chunk_add) << 4) ^ x);
        else
            return base + (row_add * C::LD + chunk_add * 8) * 2;
    }
};

template <class C> __device__ __forceinline__ Frag<C> frag_of(uint32_t tile, int row, int chunk) {
    Frag<C> f;
    if constexpr (C::SWZ) {
        f.base = opaque(tile + row * C::LD * 2 + (((chunk ^ row) & 1) << 4));
        f.x = static_cast<uint32_t>(row & 6) << 4;
    } else {
        f.base = opaque(tile + tile_off<C>(row, chunk));
        f.x = 0;
    }
    return f;
}

// Row offsets of one key tile: sOffK/sOffV[r] = element offset of key (n0 + r) in the K / V
// cache (head offset not included), -1 for keys outside [kmin, kmax) (zero-filled, never read).
// Computed one tile ahead by threads tid < BN: the block id is loaded early (block_id_of) and
// the offsets stored late (store_offsets), so the latency of the block-table read hides behind a
// tile's compute and the copy loops are just shared loads and cp.async.
struct KeyRange {
    int kmin, kmax; // keys [kmin, kmax) are read
    int kstart; // dense: first key row of the sequence
    int seq; // the sequence (block-table row), for error reports
    const int32_t *bt; // block-table row of the sequence (NULL = dense)
};

// Per-CTA values needed only at the edges of the main loop, parked in shared memory so that
// they do not hold registers through it.
struct CtaInfo { // (fits the 64 bytes at INFO_OFF)
    KeyRange kr;
    int32_t m0, rows; // first row of the tile, rows of the sequence (t * G + g)
    int32_t q0, to_split;
    float vdesc;
    int32_t key_lo, key_hi; // keys of this split: [key_lo, key_hi)
    int32_t diag; // Lk - Lq
    int32_t edge; // rows of several tokens under a window / causal mask: a
        // key can be masked for one row and read for another
};

static_assert(sizeof(CtaInfo) <= 64, "CtaInfo fits its slot (Cfg::ROW_OFF = INFO_OFF + 64)");

// Block-table entry of key j (paged: the id as read, its 32 bits zero-extended, so that any
// entry is >= 0), or its row (dense); -1 outside [kmin, kmax). Nothing here looks at the value:
// it is loaded a tile ahead and checked where it is used (store_offsets), so the load's latency
// stays hidden behind the tile's compute.
__device__ __forceinline__ int64_t block_id_of(const Params &p, const KeyRange &kr, int j) {
    if (j < kr.kmin || j >= kr.kmax) return -1;
    if (kr.bt == nullptr) return static_cast<int64_t>(kr.kstart) + j;
    const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
    return static_cast<int64_t>(static_cast<uint32_t>(kr.bt[bi]));
}

// The K / V element offsets of key j from its block_id_of value (-1, -1: no row). A block id
// outside [0, num_blocks) (negative ids too: one 32-bit compare) is read as no row: its keys are
// zero rows (logit 0 against zero V), so the row's result is wrong but finite; `bad` becomes
// nonzero. No branch and no report here (the key loop stays as without the check): the kernel
// reports after its loop (report_bad_block_id).
__device__ __forceinline__ void store_offsets(const Params &p, const KeyRange &kr, int j, int64_t id,
                                              int64_t *offk, int64_t *offv, uint32_t &bad) {
    int64_t ok, ov;
    if (kr.bt == nullptr) {
        ok = id >= 0 ? id * p.k_row_stride : -1;
        ov = id >= 0 ? id * p.v_row_stride : -1;
    } else {
        // one unsigned compare: the -1 sentinel (no key) fails it as an id past the cache does;
        // only a real entry (>= 0) marks the CTA bad
        const bool in = static_cast<uint64_t>(id) < p.id_limit;
        bad |= static_cast<uint32_t>(!in & (id >= 0));
        const int slot = p.block_shift >= 0 ? (j & (p.block_size - 1)) : (j % p.block_size);
        ok = in ? id * p.k_block_stride + static_cast<int64_t>(slot) * p.k_row_stride : -1;
        ov = in ? id * p.v_block_stride + static_cast<int64_t>(slot) * p.v_row_stride : -1;
    }
    *offk = ok;
    *offv = ov;
}

// The bad path of the block-id check, once per CTA after its key loop, only in a thread whose
// store_offsets saw a bad id: find the first bad entry of the CTA's keys [key_lo, key_hi) and
// record it (the first record of the call wins, in p.err_word).
static __device__ __noinline__ void report_bad_block_id(const Params &p, const KeyRange &kr, int key_lo,
                                                        int key_hi) {
    if (kr.bt == nullptr || key_lo >= key_hi) return;
    const int b0 = key_lo / p.block_size, b1 = (key_hi - 1) / p.block_size;
    for (int bi = b0; bi <= b1; ++bi) {
        const int32_t id = kr.bt[bi];
        if (static_cast<uint32_t>(id) >= p.id_limit) {
            fa_dev_err_record(p.err_word, FA_DEVERR_BLOCK_ID, kr.seq, id, p.num_blocks, bi);
            return;
        }
    }
}

// One chunk (row r, chunk c) of K and of V into their tiles: 16-bit tiles through tile_off,
// raw fp8 tiles unpadded; `bytes` < CH zero-fills the rest (0 = a zero chunk, nothing read).
template <class C, typename T, int CH>
__device__ __forceinline__ void cp_chunk_kv(uint32_t sk, uint32_t sv, int r, int c, const T *ks, const T *vs,
                                            int bytes) {
    uint32_t o;
    if constexpr (sizeof(T) == 1) {
        o = static_cast<uint32_t>(r * C::D + c * CH);
    } else {
        o = tile_off<C>(r, c);
    }
    if constexpr (CH == 16) {
        cp_async16(sk + o, ks, bytes);
        cp_async16(sv + o, vs, bytes);
    } else {
        cp_async8(sk + o, ks, bytes);
        cp_async8(sv + o, vs, bytes);
    }
}

// Lanes per row of load_kv_rows: the largest power of two <= 8 dividing the chunks per row.
template <int CPR>
constexpr int kLanesPerRow = CPR % 8 == 0 ? 8 : (CPR % 4 == 0 ? 4 : (CPR % 2 == 0 ? 2 : 1));

// K and V tile -> smem through the row offsets. 16-bit: QT tile (padded or swizzled rows);
// fp8: raw [BN][D] bytes (converted later). Chunks past head_size and invalid rows are
// zero-filled. LPR (<= 8) consecutive lanes share a row: lane l takes chunks
// (l % LPR) + LPR * j, so one instruction moves NT / LPR rows x 128 bytes (whole cache lines),
// a thread reads each of its rows' offsets once, and the source (and, for LPR = 8, the
// destination) offsets of its chunks are immediates: a few instructions per 16 bytes.
template <class C, typename T, int CH, bool FULL>
__device__ __forceinline__ void load_kv_rows(const Params &p, const T *kb, const T *vb, const int64_t *offk,
                                             const int64_t *offv, uint32_t sk, uint32_t sv, int tid) {
    constexpr int EPC = CH / static_cast<int>(sizeof(T)); // elements per chunk
    constexpr int CPR = C::D / EPC; // chunks per row
    constexpr int LPR = kLanesPerRow<CPR>;
    constexpr int RPP = C::NT / LPR; // rows per pass
    static_assert(C::NT % LPR == 0 && C::BN % RPP == 0, "whole rows per pass");
    const int c0 = tid % LPR, r0 = tid / LPR;
#pragma unroll
    for (int k = 0; k < C::BN / RPP; ++k) {
        const int r = r0 + k * RPP;
        const int64_t ok = offk[r], ov = offv[r];
        const bool valid = ok >= 0;
        const T *ks = kb + (valid ? ok : 0) + c0 * EPC;
        const T *vs = vb + (valid ? ov : 0) + c0 * EPC;
#pragma unroll
        for (int j = 0; j < CPR / LPR; ++j) {
            const int c = c0 + LPR * j;
            int bytes = valid ? CH : 0;
            const T *ksrc = ks + LPR * j * EPC, *vsrc = vs + LPR * j * EPC;
            if constexpr (!FULL) {
                const int rem = (p.head_size - c * EPC) * static_cast<int>(sizeof(T));
                bytes = rem <= 0 ? 0 : min(bytes, rem);
                if (bytes == 0) {
                    ksrc = kb;
                    vsrc = vb;
                }
            }
            cp_chunk_kv<C, T, CH>(sk, sv, r, c, ksrc, vsrc, bytes);
        }
    }
}

// The same copy with the chunks of the tile dealt out flat over the threads (prefill, and
// widths whose chunks per row do not divide the decode warp).
template <class C, typename T, int CH>
__device__ __forceinline__ void load_kv_flat(const Params &p, const T *kb, const T *vb, const int64_t *offk,
                                             const int64_t *offv, uint32_t sk, uint32_t sv, int tid) {
    constexpr int EPC = CH / static_cast<int>(sizeof(T)); // elements per chunk
    constexpr int CPR = C::D / EPC; // chunks per row
    constexpr int TOTAL = C::BN * CPR;
#pragma unroll 4
    for (int it = 0; it < (TOTAL + C::NT - 1) / C::NT; ++it) {
        const int i = tid + it * C::NT;
        if (TOTAL % C::NT == 0 || i < TOTAL) {
            const int r = i / CPR, c = i % CPR;
            const int64_t ok = offk[r], ov = offv[r];
            const int rem = p.head_size - c * EPC; // elements of this chunk in the head
            const bool valid = ok >= 0 && rem > 0;
            const int bytes = valid ? min(rem, EPC) * static_cast<int>(sizeof(T)) : 0;
            const T *ks = valid ? kb + ok + c * EPC : kb;
            const T *vs = valid ? vb + ov + c * EPC : vb;
            cp_chunk_kv<C, T, CH>(sk, sv, r, c, ks, vs, bytes);
        }
    }
}

template <class C, typename T, int CH>
__device__ __forceinline__ void load_kv(const Params &p, const T *kb, const T *vb, const int64_t *offk,
                                        const int64_t *offv, uint32_t sk, uint32_t sv, int tid) {
    constexpr int LPR = kLanesPerRow<C::D *static_cast<int>(sizeof(T)) / CH>;
    if constexpr (C::WM > 1 || LPR < 2 || C::BN % (C::NT / LPR) != 0)
        load_kv_flat<C, T, CH>(p, kb, vb, offk, offv, sk, sv, tid);
    else if (p.head_size == C::D)
        load_kv_rows<C, T, CH, true>(p, kb, vb, offk, offv, sk, sv, tid);
    else
        load_kv_rows<C, T, CH, false>(p, kb, vb, offk, offv, sk, sv, tid);
}

// One key row (all chunks of K and of V) of a tile, for the prologue.
template <class C, typename T, int CH>
__device__ __forceinline__ void load_row(const Params &p, const T *kb, const T *vb, int64_t ok, int64_t ov,
                                         uint32_t sk, uint32_t sv, int r) {
    constexpr int EPC = CH / static_cast<int>(sizeof(T));
#pragma unroll
    for (int c = 0; c < C::D / EPC; ++c) {
        const int rem = p.head_size - c * EPC;
        const bool valid = ok >= 0 && rem > 0;
        const int bytes = valid ? min(rem, EPC) * static_cast<int>(sizeof(T)) : 0;
        cp_chunk_kv<C, T, CH>(sk, sv, r, c, valid ? kb + ok + c * EPC : kb, valid ? vb + ov + c * EPC : vb,
                              bytes);
    }
}

// Raw fp8 tile [BN][D] -> QT tile (padded rows).
template <class C, typename QT, bool KV>
__device__ __forceinline__ void convert_tile(const uint8_t *raw, unsigned char *dst, int tid) {
    constexpr int CPR = C::D / 16; // 16 fp8 values -> two 16-byte QT chunks
    constexpr int TOTAL = C::BN * CPR;
#pragma unroll
    for (int it = 0; it < (TOTAL + C::NT - 1) / C::NT; ++it) {
        const int i = tid + it * C::NT;
        if (TOTAL % C::NT == 0 || i < TOTAL) {
            const int r = i / CPR, c = i % CPR;
            const uint4 x = *reinterpret_cast<const uint4 *>(raw + r * C::D + c * 16);
            uint4 lo, hi;
            lo.x = fp8x2_to_qt2<QT, KV>(x.x);
            lo.y = fp8x2_to_qt2<QT, KV>(x.x >> 16);
            lo.z = fp8x2_to_qt2<QT, KV>(x.y);
            lo.w = fp8x2_to_qt2<QT, KV>(x.y >> 16);
            hi.x = fp8x2_to_qt2<QT, KV>(x.z);
            hi.y = fp8x2_to_qt2<QT, KV>(x.z >> 16);
            hi.z = fp8x2_to_qt2<QT, KV>(x.w);
            hi.w = fp8x2_to_qt2<QT, KV>(x.w >> 16);
            *reinterpret_cast<uint4 *>(dst + tile_off<C>(r, 2 * c)) = lo;
            *reinterpret_cast<uint4 *>(dst + tile_off<C>(r, 2 * c + 1)) = hi;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NaN hygiene at mask edges. A key masked for one row of a tile but allowed for another is
// staged (it is in the CTA's key range) and its p is 0 for the masked row: a NaN (or Inf) in its
// V reaches that row through 0 x NaN in the P . V product, where the reference never reads it.
// The epilogue looks for NaN in the staged output (a few shared loads, one vote); a CTA that has
// some (rare: the data is already non-finite) recomputes each NaN entry here, scalar, over the
// row's allowed keys of this split only, with the row's final LSE: p_j = 2^(x_j - lse2). An
// entry that is NaN because an allowed key is non-finite stays NaN; the others get the value the
// reference has, written over the stored NaN. Every entry that was not NaN keeps its bits. Out of
// line: the kernel's main loop keeps its registers.

// 1 when one of the two 16-bit QT values of w is a NaN.
template <typename QT> __device__ __forceinline__ bool nan2(uint32_t w) {
    constexpr uint32_t e = std::is_same<QT, __half>::value ? 0x7c00u : 0x7f80u;
    constexpr uint32_t m = std::is_same<QT, __half>::value ? 0x03ffu : 0x007fu;
    return ((w & e) == e && (w & m) != 0) || (((w >> 16) & e) == e && ((w >> 16) & m) != 0);
}

template <bool E5M2> __device__ __forceinline__ float fp8_to_float(uint8_t x) {
    const __half_raw h =
        __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x), E5M2 ? __NV_E5M2 : __NV_E4M3);
    return __half2float(__half(h));
}

template <typename QT, int KV>
__device__ __forceinline__ float kv_at(const void *base, int64_t i, bool e5m2) {
    if constexpr (KV == KV_SAME) {
        const unsigned short r = static_cast<const unsigned short *>(base)[i];
        if constexpr (std::is_same<QT, __half>::value)
            return __half2float(__ushort_as_half(r));
        else
            return __bfloat162float(__ushort_as_bfloat16(r));
    } else {
        const uint8_t r = static_cast<const uint8_t *>(base)[i];
        return e5m2 ? fp8_to_float<true>(r) : fp8_to_float<false>(r);
    }
}

template <class C, typename QT, int KV>
__device__ __noinline__ void fix_nan_entries(const Params &p, unsigned char *smem, int kvh, int tid) {
    constexpr float kLog2e = 1.4426950408889634f;
    const CtaInfo *info = reinterpret_cast<const CtaInfo *>(smem + C::INFO_OFF);
    const int64_t *sRow = reinterpret_cast<const int64_t *>(smem + C::ROW_OFF);
    const float *sLse = reinterpret_cast<const float *>(smem + C::LSE_OFF);
    float *sOf = reinterpret_cast<float *>(smem);
    const KeyRange kr = info->kr;
    const int b = kr.seq, G = p.group;
    const bool to_split = info->to_split != 0;
    float kdesc = 1.f;
    if constexpr (KV != KV_SAME) {
        kdesc = p.k_descale != nullptr ? p.k_descale[static_cast<int64_t>(b) * p.descale_batch_stride +
                                                     static_cast<int64_t>(kvh) * p.descale_head_stride]
                                       : p.k_scale;
    }
    const float scale_nat = p.softmax_scale * kdesc;
    const bool has_softcap = p.softcap > 0.f;
    const float sc_log2 = scale_nat * kLog2e;
    const float sc_cap = has_softcap ? scale_nat / p.softcap : 0.f;
    const float cap2 = p.softcap * kLog2e;
    const bool e5m2 = p.kv_e5m2 != 0;
    const void *kb =
        KV == KV_SAME ? static_cast<const void *>(static_cast<const QT *>(p.k) + kvh * p.k_head_stride)
                      : static_cast<const void *>(static_cast<const uint8_t *>(p.k) + kvh * p.k_head_stride);
    const void *vb =
        KV == KV_SAME ? static_cast<const void *>(static_cast<const QT *>(p.v) + kvh * p.v_head_stride)
                      : static_cast<const void *>(static_cast<const uint8_t *>(p.v) + kvh * p.v_head_stride);
    const QT *qb = static_cast<const QT *>(p.q);
    for (int i = tid; i < C::BM * p.head_size; i += C::NT) {
        const int row = i / p.head_size, col = i % p.head_size;
        if (sRow[row] < 0) continue;
        const unsigned short *qs =
            reinterpret_cast<const unsigned short *>(smem + tile_off<C>(row, col >> 3) + 2 * (col & 7));
        float cur;
        if (to_split)
            cur = sOf[row * C::OLD + col];
        else if constexpr (std::is_same<QT, __half>::value)
            cur = __half2float(__ushort_as_half(*qs));
        else
            cur = __bfloat162float(__ushort_as_bfloat16(*qs));
        if (!isnan(cur)) continue;
        const float lse2 = sLse[row];
        if (lse2 == -INFINITY) continue;
        const int gr = info->m0 + row, t = gr / G;
        const int h = query_head(p, kvh, gr - t * G);
        const int tdr = t + info->diag;
        const int qhg = p.q_head_group;
        const QT *qr = qb + static_cast<int64_t>(h / qhg) * p.q_group_stride +
                       static_cast<int64_t>(h % qhg) * p.q_head_stride +
                       static_cast<int64_t>(info->q0 + t) * p.q_token_stride;
        const float slope = p.alibi_slopes != nullptr
                                ? -kLog2e * p.alibi_slopes[static_cast<int64_t>(b) * p.alibi_batch_stride + h]
                                : 0.f;
        float acc = 0.f;
        for (int j = info->key_lo; j < info->key_hi; ++j) {
            // the shared mask rule; j < key_hi <= Lk, so key_hi stands for Lk
            if (!FA_BU_KEY_ALLOWED(j, tdr, info->key_hi, p.window_left, p.window_right)) continue;
            int64_t ok, ov;
            uint32_t bad = 0; // (the key loop reported it)
            store_offsets(p, kr, j, block_id_of(p, kr, j), &ok, &ov, bad);
            float qk = 0.f;
            if (ok >= 0)
                for (int dd = 0; dd < p.head_size; ++dd)
                    qk += static_cast<float>(qr[dd]) * kv_at<QT, KV>(kb, ok + dd, e5m2);
            float x = has_softcap ? cap2 * fast_tanh(qk * sc_cap) : qk * sc_log2;
            if (p.alibi_slopes != nullptr) x += slope * fabsf(static_cast<float>(tdr - j));
            const float v = ov >= 0 ? kv_at<QT, KV>(vb, ov + col, e5m2) : 0.f;
            acc += exp2f(x - lse2) * v;
            if (isnan(acc)) break; // NaN from an allowed key: the reference has NaN too
        }
        const float val = acc * info->vdesc;
        if (to_split)
            p.split_out[sRow[row] + col] = val;
        else
            static_cast<QT *>(p.out)[sRow[row] + col] = static_cast<QT>(val);
    }
}

// The epilogue's stores: staged rows -> out (or split_out), 16-byte chunks; with CHECK, whether
// a stored value is NaN.
template <class C, typename QT, bool CHECK>
__device__ __forceinline__ bool copy_out(const Params &p, const unsigned char *smem, const int64_t *sRow,
                                         bool to_split, int tid) {
    bool nan_seen = false;
    if (to_split) {
        const float *sOf = reinterpret_cast<const float *>(smem);
        constexpr int CPR = C::D / 4;
        for (int i = tid; i < C::BM * CPR; i += C::NT) {
            const int row = i / CPR, c = i % CPR;
            const int64_t off = sRow[row];
            if (off < 0 || c * 4 >= p.head_size) continue;
            const float4 x = *reinterpret_cast<const float4 *>(sOf + row * C::OLD + c * 4);
            if constexpr (CHECK) nan_seen |= isnan(x.x) | isnan(x.y) | isnan(x.z) | isnan(x.w);
            *reinterpret_cast<float4 *>(p.split_out + off + c * 4) = x;
        }
    } else {
        constexpr int CPR = C::D / 8;
        for (int i = tid; i < C::BM * CPR; i += C::NT) {
            const int row = i / CPR, c = i % CPR;
            const int64_t off = sRow[row];
            if (off < 0 || c * 8 >= p.head_size) continue;
            const uint4 x = *reinterpret_cast<const uint4 *>(smem + tile_off<C>(row, c));
            if constexpr (CHECK) nan_seen |= nan2<QT>(x.x) | nan2<QT>(x.y) | nan2<QT>(x.z) | nan2<QT>(x.w);
            *reinterpret_cast<uint4 *>(static_cast<QT *>(p.out) + off + c * 8) = x;
        }
    }
    return nan_seen;
}

// ---------------------------------------------------------------------------------------------
// The kernel, in phases (each __forceinline__, state passed by reference in small structs, so
// the compiled arithmetic and its order are those of one long body):
//
//   cta_tile        which sequence, rows and split this CTA owns
//   cta_key_span    the rows' union [kmin, kmax) and intersection [full_lo, full_hi) of
//                   allowed keys, and the split's stage tiles
//   logit_consts    per-sequence scale, softcap, ALiBi switches, fp8 descales
//   init_rows       per-thread rows: diagonal key, running max and sum (sinks), ALiBi slopes
//   load_q          Q: MMA fragments in registers (one-warp tiles) or a cp.async tile
//   kv_prologue     first NS - 1 K/V tiles in flight, the next tile's row offsets
//   kv_wait / kv_issue / kv_fetch_ids / kv_store_ids / kv_ready
//                   the K/V pipeline: wait for a stage, issue the one NS - 1 ahead, the block
//                   ids of the tile after that, the fp8 conversion
//   qk_step         S = Q K^T for one softmax step
//   logits_mask     scale -> softcap -> ALiBi -> mask (FA_BU_KEY_ALLOWED)
//   softmax_step    row max, rescale factor, p = exp2, row sums, P packed for the MMA
//   rescale_o       O *= alpha when some row's max moved
//   pv_step         O += P V
//   epilogue        normalise, LSE, stage O in shared memory, stores (out or split partials),
//                   NaN fix-up at mask edges

// The CTA's tile (FA2's block_info): sequence b, KV head, rows [m0, m0 + BM) of rows = Lq * G,
// and the split.
struct TileRows {
    int G; // query heads per KV head (p.group, read once)
    int b, kvh, q0, Lq, rows, m0;
    int split, nsplit;
    bool to_split;
    bool half; // one-fragment tile whose rows g + 8 are all past the end
};

// false: this CTA has nothing to do (every thread returns). Reversed tile order so that the
// longest (last) row blocks of causal prefills start first.
template <class C> __device__ __forceinline__ bool cta_tile(const Params &p, int tid, TileRows &t) {
    const int64_t idx = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
    t.kvh = static_cast<int>(idx % p.num_heads_kv);
    const int64_t tile = idx / p.num_heads_kv;
    const int G = p.group;
    t.G = G;
    // sequence b = the last one whose first tile tile_off(b) = cu_q[b] * G / BM + b <= tile
    // (tile_off is strictly increasing and leaves each sequence >= its row blocks); binary
    // steps until at most NT candidates remain, then one parallel count.
    int b;
    {
        int lo = 0, hi = p.num_seqs - 1;
        while (hi - lo >= C::NT) {
            const int mid = (lo + hi + 1) >> 1;
            const int64_t off = static_cast<int64_t>(p.cu_seqlens_q[mid]) * G / C::BM + mid;
            if (off <= tile)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int cand = lo + 1 + tid;
        const bool ok = cand <= hi && static_cast<int64_t>(p.cu_seqlens_q[cand]) * G / C::BM + cand <= tile;
        b = lo + __syncthreads_count(ok);
    }
    t.b = b;
    t.q0 = p.cu_seqlens_q[b];
    t.Lq = p.cu_seqlens_q[b + 1] - t.q0;
    if (p.tile_filter == 4 ? t.Lq == 1 : p.tile_filter != 0 && ((t.Lq * G <= 16) != (p.tile_filter != 2)))
        return false; // the other launch's
    if (p.tile_filter == 3 && t.Lq == 1) return false; // the multi-warp decode tile's
    const int64_t mblk = tile - (static_cast<int64_t>(t.q0) * G / C::BM + b);
    t.rows = t.Lq * G; // host: num_tokens * G < 2^31
    if (mblk < 0 || mblk * C::BM >= t.rows) return false;
    t.m0 = static_cast<int>(mblk) * C::BM;
    // one-fragment tiles whose rows g + 8 are all past the sequence (decode with G <= 8 query
    // heads per KV head): their softmax is skipped (P = 0). A valid row's operations, and so its
    // bits, are the same either way.
    t.half = C::WM == 1 && C::MF == 1 && t.rows - t.m0 <= 8;

    const int S = p.num_splits;
    t.nsplit = S;
    if (p.split_plan != nullptr) t.nsplit = min(p.split_plan[1 + b], S);
    t.split = blockIdx.y;
    if (t.split >= t.nsplit) return false; // includes "sequence does no work" (0)
    t.to_split = t.nsplit > 1;
    return true;
}

// The keys of the CTA (FA2's block_info / mask bounds).
struct KeySpan {
    KeyRange kr; // union of the rows' allowed keys [kmin, kmax)
    int Lk;
    int diag; // Lk - Lq: key j is on row t's diagonal when j == t + diag
    int t_lo, t_hi; // tokens of the tile's first and last row
    int wl, wr; // window (-1 = unbounded; causal: wr = 0)
    int full_lo, full_hi; // intersection: keys allowed for every row
    int my_tb, my_te; // this split's stage tiles [my_tb, my_te)
};

template <class C>
__device__ __forceinline__ void cta_key_span(const Params &p, const TileRows &t, KeySpan &ks) {
    const int b = t.b, G = t.G;
    KeyRange &kr = ks.kr;
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
    ks.Lk = Lk;
    const int diag = Lk - t.Lq;
    ks.diag = diag;
    const int t_lo = static_cast<int>(t.m0 / G);
    const int t_hi = (min(t.m0 + C::BM, t.rows) - 1) / G;
    ks.t_lo = t_lo;
    ks.t_hi = t_hi;
    const int wl = p.window_left, wr = p.window_right;
    ks.wl = wl;
    ks.wr = wr;
    // union of the rows' allowed keys [kmin, kmax) and their intersection [full_lo, full_hi)
    int64_t kmin = 0, kmax = Lk;
    int full_lo = 0, full_hi = Lk;
    if (wl >= 0) {
        kmin = max(int64_t(0), int64_t(t_lo) + diag - wl);
        full_lo = static_cast<int>(min(int64_t(Lk), max(int64_t(0), int64_t(t_hi) + diag - wl)));
    }
    if (wr >= 0) {
        kmax = min(int64_t(Lk), int64_t(t_hi) + diag + wr + 1);
        full_hi = static_cast<int>(max(int64_t(0), min(int64_t(Lk), int64_t(t_lo) + diag + wr + 1)));
    }
    if (kmax < kmin) kmax = kmin;
    ks.full_lo = full_lo;
    ks.full_hi = full_hi;
    kr.kmin = static_cast<int>(kmin);
    kr.kmax = static_cast<int>(kmax);
    const int tb = kr.kmin / C::BN;
    const int te = kr.kmax > kr.kmin ? (kr.kmax + C::BN - 1) / C::BN : tb;
    const int nt = te - tb;
    ks.my_tb = tb + static_cast<int>(static_cast<int64_t>(nt) * t.split / t.nsplit);
    ks.my_te = tb + static_cast<int>(static_cast<int64_t>(nt) * (t.split + 1) / t.nsplit);
}

// Per-sequence logit constants. plain (no softcap, no ALiBi, positive scale): S stays raw and
// the scale is applied in the exponent.
struct Logits {
    float vdesc;
    float sc_log2; // plain:  s2 = qk * sc_log2
    float sc_cap; // capped: s2 = cap2 * tanh(qk * sc_cap)
    float cap2;
    float exp_scale; // S -> log2 units inside the exponent
    bool has_softcap, has_alibi, plain;
};

template <class C> __device__ __forceinline__ void logit_consts(const Params &p, int b, int kvh, Logits &lg) {
    constexpr float kLog2e = 1.4426950408889634f;
    float kdesc = 1.f, vdesc = 1.f;
    if constexpr (C::FP8) {
        const int64_t di = static_cast<int64_t>(b) * p.descale_batch_stride +
                           static_cast<int64_t>(kvh) * p.descale_head_stride;
        kdesc = p.k_descale != nullptr ? p.k_descale[di] : p.k_scale;
        vdesc = p.v_descale != nullptr ? p.v_descale[di] : p.v_scale;
    }
    const float scale_nat = p.softmax_scale * kdesc;
    const bool has_softcap = p.softcap > 0.f;
    const bool has_alibi = p.alibi_slopes != nullptr;
    const float sc_log2 = scale_nat * kLog2e;
    const float sc_cap = has_softcap ? scale_nat / p.softcap : 0.f;
    const float cap2 = p.softcap * kLog2e;
    const bool plain = !has_softcap && !has_alibi && sc_log2 > 0.f;
    const float exp_scale = plain ? sc_log2 : 1.f;
    lg.vdesc = vdesc;
    lg.sc_log2 = sc_log2;
    lg.sc_cap = sc_cap;
    lg.cap2 = cap2;
    lg.exp_scale = exp_scale;
    lg.has_softcap = has_softcap;
    lg.has_alibi = has_alibi;
    lg.plain = plain;
}

// The thread's rows (two per m16 fragment: g and g + 8) and its share of O.
template <class C> struct RowState {
    int td[C::MF][2]; // token + diag: the row's diagonal key
    float m[C::MF][2]; // running max (log2 units)
    float l[C::MF][2]; // running sum (a per-thread partial until the epilogue)
};

template <class C> struct OAcc {
    float o[C::MF][C::DF][4];
};

// ALiBi slopes of the CTA's rows into shared memory (log2 units; read after the first barrier of
// the main loop), the rows' diagonals, and the softmax state: empty, or the sink of split 0 (m = z,
// l = 1).
template <class C>
__device__ __forceinline__ void init_rows(const Params &p, const TileRows &t, const KeySpan &ks,
                                          const Logits &lg, float *sSlope, int tid, int wm, int g, int tig,
                                          RowState<C> &rs, OAcc<C> &acc) {
    constexpr float kLog2e = 1.4426950408889634f;
    const int G = t.G;
    if (lg.has_alibi && tid < C::BM) {
        const int r = min(t.m0 + tid, t.rows - 1);
        const int h = query_head(p, t.kvh, r % G);
        sSlope[tid] = -kLog2e * p.alibi_slopes[static_cast<int64_t>(t.b) * p.alibi_batch_stride + h];
    }
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = min(t.m0 + wm * C::MF * 16 + mf * 16 + g + 8 * hf, t.rows - 1);
            const int tk = r / G;
            const int h = query_head(p, t.kvh, r - tk * G);
            rs.td[mf][hf] = tk + ks.diag;
            rs.m[mf][hf] = -INFINITY;
            rs.l[mf][hf] = 0.f;
            if (p.sinks != nullptr && t.split == 0) {
                rs.m[mf][hf] = p.sinks[h] * kLog2e;
                rs.l[mf][hf] = tig == 0 ? 1.f : 0.f; // l is a per-thread partial sum
            }
        }
    }
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf)
#pragma unroll
        for (int df = 0; df < C::DF; ++df)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc.o[mf][df][e] = 0.f;
}

// Q in registers (QREG): a[ks] = the A fragment of k-step ks, rows g and g + 8.
template <class C> struct QFrags {
    uint32_t a[C::QREG ? C::KS : 1][4];
};

// Q of the tile: straight into MMA fragments (QREG), else whole rows into the Q tile by cp.async
// (joins the first K/V group of the prologue). No barrier.
template <class C, typename QT>
__device__ __forceinline__ void load_q(const Params &p, const TileRows &t, uint32_t sQa, int tid, int g,
                                       int tig, QFrags<C> &q) {
    const int G = t.G;
    const QT *qb = static_cast<const QT *>(p.q);
    if constexpr (C::QREG) {
        int64_t qoff[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int gr = t.m0 + g + 8 * hf;
            qoff[hf] = -1;
            if (gr < t.rows) {
                const int tk = gr / G;
                const int h = query_head(p, t.kvh, gr - tk * G);
                const int qhg = p.q_head_group;
                qoff[hf] = static_cast<int64_t>(h / qhg) * p.q_group_stride +
                           static_cast<int64_t>(h % qhg) * p.q_head_stride +
                           static_cast<int64_t>(t.q0 + tk) * p.q_token_stride;
            }
        }
#pragma unroll
        for (int ks = 0; ks < C::KS; ++ks) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hf = e & 1, col = ks * 16 + 2 * tig + 8 * (e >> 1);
                const bool valid = qoff[hf] >= 0 && col < p.head_size;
                q.a[ks][e] = valid ? __ldg(reinterpret_cast<const unsigned int *>(qb + qoff[hf] + col)) : 0u;
            }
        }
    } else {
        for (int r = tid; r < C::BM; r += C::NT) {
            const int gr = t.m0 + r;
            int64_t off = -1;
            if (gr < t.rows) {
                const int tk = gr / G;
                const int h = query_head(p, t.kvh, gr - tk * G);
                const int qhg = p.q_head_group;
                off = static_cast<int64_t>(h / qhg) * p.q_group_stride +
                      static_cast<int64_t>(h % qhg) * p.q_head_stride +
                      static_cast<int64_t>(t.q0 + tk) * p.q_token_stride;
            }
#pragma unroll
            for (int c = 0; c < C::D / 8; ++c) {
                const bool valid = off >= 0 && c * 8 < p.head_size;
                cp_async16(sQa + tile_off<C>(r, c), valid ? qb + off + c * 8 : qb, valid ? 16 : 0);
            }
        }
    }
}

// The K/V pipeline's places: the KV head's cache bases and the shared-memory stages.
// 16-bit K/V: NS stages of K and of V; fp8: NS raw stages [K, V][BN * D] and one converted K / V
// tile. Row offsets of a tile x in slot x & 1 of sOff ([slot][K, V][BN]).
template <class C> struct KvPipe {
    const void *kbase, *vbase;
    unsigned char *sK, *sV, *sRaw;
    uint32_t sKa, sVa, sRawa;
    int64_t *sOff;
};

template <class C, typename QT>
__device__ __forceinline__ void kv_pipe_init(const Params &p, unsigned char *smem, int kvh, KvPipe<C> &kv) {
    kv.sK = smem + C::Q_BYTES;
    kv.sV = kv.sK + C::KST * C::KV_TILE_BYTES;
    kv.sRaw = kv.sV + C::KST * C::KV_TILE_BYTES;
    kv.sKa = smem_addr(kv.sK);
    kv.sVa = smem_addr(kv.sV);
    kv.sRawa = smem_addr(kv.sRaw);
    kv.sOff = reinterpret_cast<int64_t *>(smem + C::OFF_OFF);
    if constexpr (C::FP8) {
        kv.kbase = static_cast<const uint8_t *>(p.k) + kvh * p.k_head_stride;
        kv.vbase = static_cast<const uint8_t *>(p.v) + kvh * p.v_head_stride;
    } else {
        kv.kbase = static_cast<const QT *>(p.k) + kvh * p.k_head_stride;
        kv.vbase = static_cast<const QT *>(p.v) + kvh * p.v_head_stride;
    }
}

// Prologue, no barrier: each thread issues whole rows of the first NS - 1 tiles of the split (its
// own block-table reads; one cp.async group a tile, Q joins the first), then stores the row
// offsets of tile NS - 1 into its slot; the first barrier of the main loop publishes them. The
// block ids of all NS tiles are loaded first (independent loads, one round trip), then used.
template <class C, typename QT>
__device__ __forceinline__ void kv_prologue(const Params &p, const KeyRange &kr, const KvPipe<C> &kv,
                                            int my_tb, int my_te, int tid, uint32_t &bad) {
    constexpr int PRO_ROWS = (C::BN + C::NT - 1) / C::NT; // rows per thread and tile
    int64_t pro_id[C::NS][PRO_ROWS];
#pragma unroll
    for (int i = 0; i < C::NS; ++i)
#pragma unroll
        for (int k = 0; k < PRO_ROWS; ++k) {
            const int r = tid + k * C::NT;
            pro_id[i][k] = my_tb + i < my_te && r < C::BN ? block_id_of(p, kr, (my_tb + i) * C::BN + r) : -1;
        }
#pragma unroll
    for (int i = 0; i < C::NS - 1; ++i) {
#pragma unroll
        for (int k = 0; k < PRO_ROWS; ++k) {
            const int r = tid + k * C::NT;
            if (my_tb + i < my_te && r < C::BN) {
                const int j = (my_tb + i) * C::BN + r;
                int64_t ok, ov;
                store_offsets(p, kr, j, pro_id[i][k], &ok, &ov, bad);
                if constexpr (C::FP8) {
                    const uint8_t *kb = static_cast<const uint8_t *>(kv.kbase);
                    const uint8_t *vb = static_cast<const uint8_t *>(kv.vbase);
                    const uint32_t rs = kv.sRawa + i * 2 * C::RAW_TILE_BYTES;
                    if (p.kv_vec16)
                        load_row<C, uint8_t, 16>(p, kb, vb, ok, ov, rs, rs + C::RAW_TILE_BYTES, r);
                    else
                        load_row<C, uint8_t, 8>(p, kb, vb, ok, ov, rs, rs + C::RAW_TILE_BYTES, r);
                } else {
                    load_row<C, QT, 16>(p, static_cast<const QT *>(kv.kbase),
                                        static_cast<const QT *>(kv.vbase), ok, ov,
                                        kv.sKa + i * C::KV_TILE_BYTES, kv.sVa + i * C::KV_TILE_BYTES, r);
                }
            }
        }
        cp_async_commit();
    }
#pragma unroll
    for (int k = 0; k < PRO_ROWS; ++k) {
        const int r = tid + k * C::NT;
        if (my_tb + C::NS - 1 < my_te && r < C::BN) {
            const int j = (my_tb + C::NS - 1) * C::BN + r;
            constexpr int slot = (C::NS - 1) & 1;
            store_offsets(p, kr, j, pro_id[C::NS - 1][k], kv.sOff + slot * 2 * C::BN + r,
                          kv.sOff + slot * 2 * C::BN + C::BN + r, bad);
        }
    }
}

// Wait for the oldest stage in flight; the barrier also frees the stage consumed last.
template <class C> __device__ __forceinline__ void kv_wait() {
    cp_async_wait<C::NS - 2>();
    __syncthreads();
}

// Issue the tile whose row offsets sit in `slot` into `stage` (no commit).
template <class C, typename QT>
__device__ __forceinline__ void kv_issue(const Params &p, const KvPipe<C> &kv, int slot, int stage, int tid) {
    const int64_t *ok = kv.sOff + slot * 2 * C::BN;
    const int64_t *ov = ok + C::BN;
    if constexpr (C::FP8) {
        const uint32_t rs = kv.sRawa + stage * 2 * C::RAW_TILE_BYTES;
        const uint8_t *kb = static_cast<const uint8_t *>(kv.kbase);
        const uint8_t *vb = static_cast<const uint8_t *>(kv.vbase);
        if (p.kv_vec16)
            load_kv<C, uint8_t, 16>(p, kb, vb, ok, ov, rs, rs + C::RAW_TILE_BYTES, tid);
        else
            load_kv<C, uint8_t, 8>(p, kb, vb, ok, ov, rs, rs + C::RAW_TILE_BYTES, tid);
    } else {
        load_kv<C, QT, 16>(p, static_cast<const QT *>(kv.kbase), static_cast<const QT *>(kv.vbase), ok, ov,
                           kv.sKa + stage * C::KV_TILE_BYTES, kv.sVa + stage * C::KV_TILE_BYTES, tid);
    }
}

// Block ids of tile x (loaded early; kv_store_ids stores the offsets late, after the tile's compute).
template <class C> constexpr int kPfRows = (C::BN + C::NT - 1) / C::NT; // rows per thread

template <class C>
__device__ __forceinline__ void kv_fetch_ids(const Params &p, const KeyRange &kr, bool pf, int x, int tid,
                                             int64_t (&pf_id)[kPfRows<C>]) {
#pragma unroll
    for (int k = 0; k < kPfRows<C>; ++k) {
        const int r = tid + k * C::NT;
        pf_id[k] = pf && r < C::BN ? block_id_of(p, kr, x * C::BN + r) : -1;
    }
}

template <class C>
__device__ __forceinline__ void kv_store_ids(const Params &p, const KeyRange &kr, const KvPipe<C> &kv,
                                             int slot, int x, int tid, const int64_t (&pf_id)[kPfRows<C>],
                                             uint32_t &bad) {
#pragma unroll
    for (int k = 0; k < kPfRows<C>; ++k) {
        const int r = tid + k * C::NT;
        if (r < C::BN)
            store_offsets(p, kr, x * C::BN + r, pf_id[k], kv.sOff + slot * 2 * C::BN + r,
                          kv.sOff + slot * 2 * C::BN + C::BN + r, bad);
    }
}

// The K and V tiles of `stage`, ready for ldmatrix: 16-bit, the stage itself; fp8, converted to
// QT (K) and PT (V) in shared memory, then a barrier.
template <class C, typename QT, typename PT>
__device__ __forceinline__ void kv_ready(const Params &p, const KvPipe<C> &kv, int stage, int tid,
                                         uint32_t &kt, uint32_t &vt) {
    if constexpr (C::FP8) {
        const uint8_t *rs = kv.sRaw + stage * 2 * C::RAW_TILE_BYTES;
        if (p.kv_e5m2) {
            convert_tile<C, QT, true>(rs, kv.sK, tid);
            convert_tile<C, PT, true>(rs + C::RAW_TILE_BYTES, kv.sV, tid);
        } else {
            convert_tile<C, QT, false>(rs, kv.sK, tid);
            convert_tile<C, PT, false>(rs + C::RAW_TILE_BYTES, kv.sV, tid);
        }
        __syncthreads();
        kt = kv.sKa;
        vt = kv.sVa;
    } else {
        kt = kv.sKa + stage * C::KV_TILE_BYTES;
        vt = kv.sVa + stage * C::KV_TILE_BYTES;
    }
}

// S = Q K^T for the keys [sub * BNC, (sub + 1) * BNC) of the stage.
template <class C> using STile = float[C::MF][C::NF][4];

template <class C, typename QT>
__device__ __forceinline__ void qk_step(STile<C> &s, const QFrags<C> &q, const Frag<C> &qfb,
                                        const Frag<C> &kfb, int sub) {
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf)
#pragma unroll
        for (int nf = 0; nf < C::NF; ++nf)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mf][nf][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < C::KS; ++ks) {
        uint32_t a[C::MF][4];
#pragma unroll
        for (int mf = 0; mf < C::MF; ++mf) {
            if constexpr (C::QREG) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[mf][e] = q.a[ks][e];
            } else {
                ldsm_x4(a[mf], qfb.at(mf * 16, 2 * ks));
            }
        }
#pragma unroll
        for (int np = 0; np < C::NF / 2; ++np) {
            uint32_t bb[4];
            ldsm_x4(bb, kfb.at(sub * C::BNC + np * 16, 2 * ks));
#pragma unroll
            for (int mf = 0; mf < C::MF; ++mf) {
                mma16816<QT>(s[mf][2 * np], a[mf], bb[0], bb[1]);
                mma16816<QT>(s[mf][2 * np + 1], a[mf], bb[2], bb[3]);
            }
        }
    }
}

// Logits of one step. plain (no softcap, no ALiBi): S stays raw, masked keys -inf, the scale is
// applied in the exponent (p = 2^(s * scale - m), one FFMA). Otherwise S becomes the final logit
// in log2 units: scale -> softcap -> ALiBi -> mask, and p = 2^(x - m). Explicit _rn operations:
// every tile rounds a row alike (masked or not), so that a row's bits do not depend on the tile
// shape or the batch. The mask is the shared rule (FA_BU_KEY_ALLOWED); jbase is the thread's
// first key of the step.
template <class C>
__device__ __forceinline__ void logits_mask(STile<C> &s, const Logits &lg, const KeySpan &ks,
                                            const RowState<C> &rs, const float *sSlope, int jbase,
                                            bool need_mask, bool half, int wm, int g) {
    const int Lk = ks.Lk, wl = ks.wl, wr = ks.wr;
    __builtin_assume(jbase >= 0); // keys are >= 0: the rule's j >= 0 costs nothing here
    if (lg.plain) {
        if (need_mask) {
#pragma unroll
            for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    if (hf == 1 && half) continue;
                    const int tdr = rs.td[mf][hf];
#pragma unroll
                    for (int nf = 0; nf < C::NF; ++nf) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int j = jbase + nf * 8 + e;
                            const bool ok = FA_BU_KEY_ALLOWED(j, tdr, Lk, wl, wr);
                            if (!ok) s[mf][nf][2 * hf + e] = -INFINITY;
                        }
                    }
                }
            }
        }
    } else {
#pragma unroll
        for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                if (hf == 1 && half) continue;
                const int row = wm * C::MF * 16 + mf * 16 + g + 8 * hf;
                const float slope = lg.has_alibi ? sSlope[row] : 0.f;
                const int tdr = rs.td[mf][hf];
#pragma unroll
                for (int nf = 0; nf < C::NF; ++nf) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int j = jbase + nf * 8 + e;
                        float x = s[mf][nf][2 * hf + e];
                        x = lg.has_softcap ? __fmul_rn(lg.cap2, fast_tanh(__fmul_rn(x, lg.sc_cap)))
                                           : __fmul_rn(x, lg.sc_log2);
                        if (lg.has_alibi) x = __fmaf_rn(slope, fabsf(static_cast<float>(tdr - j)), x);
                        if (need_mask) {
                            const bool ok = FA_BU_KEY_ALLOWED(j, tdr, Lk, wl, wr);
                            if (!ok) x = -INFINITY;
                        }
                        s[mf][nf][2 * hf + e] = x;
                    }
                }
            }
        }
    }
}

// Online softmax of one step (each thread holds 2 rows per fragment; reduce over the quad): the
// new row max, alpha = 2^(m_old - m_new), p = 2^(x - m), the row sums; P is packed to PT pairs
// right away: pk[mf][nf][hf] = keys (2tig, 2tig + 1) of row hf. Returns whether a row's max moved.
template <class C> using PTile = uint32_t[C::MF][C::NF][2];

template <class C, typename PT>
__device__ __forceinline__ bool softmax_step(const STile<C> &s, float exp_scale, bool half, RowState<C> &rs,
                                             PTile<C> &pk, float (&alpha)[C::MF][2]) {
    bool rescale = false;
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            if (hf == 1 && half) {
#pragma unroll
                for (int nf = 0; nf < C::NF; ++nf) pk[mf][nf][1] = 0u;
                alpha[mf][1] = 1.f;
                continue;
            }
            // pairwise trees (short dependency chains; the same order in every tile)
            float tr[C::NF];
#pragma unroll
            for (int nf = 0; nf < C::NF; ++nf)
                tr[nf] = fmaxf(__fmul_rn(s[mf][nf][2 * hf], exp_scale),
                               __fmul_rn(s[mf][nf][2 * hf + 1], exp_scale));
#pragma unroll
            for (int w = C::NF / 2; w >= 1; w /= 2)
#pragma unroll
                for (int i = 0; i < w; ++i) tr[i] = fmaxf(tr[i], tr[i + w]);
            float mx = tr[0];
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // The max of the scaled logits (log2 units): each exponent below is the difference
            // of two floats, x - muse, so the max key's is exactly 0 and every other one <= 0
            // at any magnitude. (The fused fma(s, exp_scale, -muse) with a separately rounded
            // maximum leaves the max key up to half an ulp of muse above 0: past |muse| = 2^31,
            // logits near 1e10, that overflowed exp2 and gave NaN rows; rounding the maximum
            // up instead sent the whole row to 0.)
            const float mold = rs.m[mf][hf];
            const float mnew = fmaxf(mold, mx);
            const float muse = mnew == -INFINITY ? 0.f : mnew;
            alpha[mf][hf] = fast_exp2(mold - muse);
            rescale |= mnew != mold;
            rs.m[mf][hf] = mnew;
#pragma unroll
            for (int nf = 0; nf < C::NF; ++nf) {
                const float p0 = fast_exp2(__fsub_rn(__fmul_rn(s[mf][nf][2 * hf], exp_scale), muse));
                const float p1 = fast_exp2(__fsub_rn(__fmul_rn(s[mf][nf][2 * hf + 1], exp_scale), muse));
                tr[nf] = __fadd_rn(p0, p1);
                pk[mf][nf][hf] = pack2<PT>(p0, p1);
            }
#pragma unroll
            for (int w = C::NF / 2; w >= 1; w /= 2)
#pragma unroll
                for (int i = 0; i < w; ++i) tr[i] = __fadd_rn(tr[i], tr[i + w]);
            rs.l[mf][hf] = __fmaf_rn(rs.l[mf][hf], alpha[mf][hf], tr[0]);
        }
    }
    return rescale;
}

// O *= alpha, skipped when no row of the warp changed its maximum.
template <class C>
__device__ __forceinline__ void rescale_o(OAcc<C> &acc, const float (&alpha)[C::MF][2], bool rescale,
                                          bool half) {
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int mf = 0; mf < C::MF; ++mf)
#pragma unroll
            for (int df = 0; df < C::DF; ++df) {
                acc.o[mf][df][0] *= alpha[mf][0];
                acc.o[mf][df][1] *= alpha[mf][0];
                if (!half) {
                    acc.o[mf][df][2] *= alpha[mf][1];
                    acc.o[mf][df][3] *= alpha[mf][1];
                }
            }
    }
}

// O += P V for the keys of step sub.
template <class C, typename PT>
__device__ __forceinline__ void pv_step(OAcc<C> &acc, const PTile<C> &pk, const Frag<C> &vfb, int sub) {
#pragma unroll
    for (int kk = 0; kk < C::BNC / 16; ++kk) {
        uint32_t pa[C::MF][4];
#pragma unroll
        for (int mf = 0; mf < C::MF; ++mf) {
            pa[mf][0] = pk[mf][2 * kk][0];
            pa[mf][1] = pk[mf][2 * kk][1];
            pa[mf][2] = pk[mf][2 * kk + 1][0];
            pa[mf][3] = pk[mf][2 * kk + 1][1];
        }
#pragma unroll
        for (int dp = 0; dp < C::D / 16; ++dp) {
            uint32_t bb[4];
            ldsm_x4_t(bb, vfb.at(sub * C::BNC + kk * 16, 2 * dp));
#pragma unroll
            for (int mf = 0; mf < C::MF; ++mf) {
                mma16816<PT>(acc.o[mf][2 * dp], pa[mf], bb[0], bb[1]);
                mma16816<PT>(acc.o[mf][2 * dp + 1], pa[mf], bb[2], bb[3]);
            }
        }
    }
}

// Epilogue: normalise in registers, LSE, stage O in shared memory, coalesced stores to out (or
// the split partials and their LSEs), the NaN fix-up at mask edges. The CTA's values come back
// from CtaInfo (shared memory), which keeps them out of registers during the main loop.
template <class C, typename QT, int KV>
__device__ __forceinline__ void epilogue(const Params &p, unsigned char *smem, RowState<C> &rs,
                                         const OAcc<C> &acc, int G, int kvh, int split, int tid, int wm,
                                         int g, int tig) {
    constexpr float kLn2 = 0.6931471805599453f;
    const CtaInfo *info = reinterpret_cast<const CtaInfo *>(smem + C::INFO_OFF);
    int64_t *sRow = reinterpret_cast<int64_t *>(smem + C::ROW_OFF); // out offsets
    float *sLse = reinterpret_cast<float *>(smem + C::LSE_OFF); // LSEs (log2)
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            rs.l[mf][hf] += __shfl_xor_sync(0xffffffffu, rs.l[mf][hf], 1);
            rs.l[mf][hf] += __shfl_xor_sync(0xffffffffu, rs.l[mf][hf], 2);
        }
    }
    cp_async_wait_all();
    __syncthreads(); // all warps done with the tiles: the staging reuses the space
    const int m0 = info->m0, rows = info->rows;
    const int q0 = info->q0;
    const bool to_split = info->to_split != 0;
    const float vdesc = info->vdesc;
    float *sOf = reinterpret_cast<float *>(smem); // split: fp32 [BM][OLD]; else QT [BM][LD]
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = wm * C::MF * 16 + mf * 16 + g + 8 * hf;
            const float L = rs.l[mf][hf], M = rs.m[mf][hf];
            const float inv = L == 0.f ? 0.f : vdesc / L; // NaN from valid keys stays NaN
            if (to_split) {
                float *dst = sOf + row * C::OLD + 2 * tig;
#pragma unroll
                for (int df = 0; df < C::DF; ++df)
                    *reinterpret_cast<float2 *>(dst + df * 8) =
                        make_float2(acc.o[mf][df][2 * hf] * inv, acc.o[mf][df][2 * hf + 1] * inv);
            } else {
#pragma unroll
                for (int df = 0; df < C::DF; ++df)
                    *reinterpret_cast<uint32_t *>(smem + tile_off<C>(row, df) + 4 * tig) =
                        pack2<QT>(acc.o[mf][df][2 * hf] * inv, acc.o[mf][df][2 * hf + 1] * inv);
            }
            if (tig == 0) {
                // LSE (natural log; -inf for an empty row) and the row's output offset
                const int gr = m0 + row;
                int64_t off = -1;
                if (gr < rows) {
                    const float lse = L == 0.f ? -INFINITY : ((M == -INFINITY ? 0.f : M) + __log2f(L)) * kLn2;
                    const int t = gr / G;
                    const int h = query_head(p, kvh, gr - t * G);
                    const int64_t tok = static_cast<int64_t>(q0) + t;
                    if (to_split) {
                        p.split_lse[(static_cast<int64_t>(split) * p.num_heads_q + h) * p.num_tokens + tok] =
                            lse;
                        off = ((static_cast<int64_t>(split) * p.num_tokens + tok) * p.num_heads_q + h) *
                              p.head_size;
                    } else {
                        if (p.lse != nullptr) p.lse[static_cast<int64_t>(h) * p.lse_head_stride + tok] = lse;
                        off = tok * p.out_token_stride + static_cast<int64_t>(h) * p.out_head_stride;
                    }
                }
                sRow[row] = off;
                sLse[row] = L == 0.f ? -INFINITY : (M == -INFINITY ? 0.f : M) + __log2f(L);
            }
        }
    }
    __syncthreads();
    // NaN hygiene at mask edges (see fix_nan_entries): only tiles with an edge look at the
    // values they store (CTA-uniform); the others (every decode tile) copy as before
    // (prefill: one loop that always looks, which keeps the kernel's registers; its stores are
    // few next to its main loop)
    const bool edge = info->edge != 0;
    if constexpr (C::WM == 1) {
        if (edge) {
            if (__any_sync(0xffffffffu, copy_out<C, QT, true>(p, smem, sRow, to_split, tid)))
                fix_nan_entries<C, QT, KV>(p, smem, kvh, tid); // rare
        } else {
            copy_out<C, QT, false>(p, smem, sRow, to_split, tid);
        }
    } else {
        const bool nan_seen = copy_out<C, QT, true>(p, smem, sRow, to_split, tid);
        if (edge && __syncthreads_or(nan_seen) != 0) fix_nan_entries<C, QT, KV>(p, smem, kvh, tid); // rare
    }
}

template <class C, typename QT, int KV>
__global__ void __launch_bounds__(C::NT, C::MINB) attention_kernel(const __grid_constant__ Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    // P . V operand type: the query dtype, but f16 for fp8 caches (fp8 -> f16 is one instruction
    // a pair and exact, NaN and Inf included; P in [0, 1] keeps more bits in f16 than in bf16)
    using PT = typename std::conditional<C::FP8, __half, QT>::type;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp;
    const int g = lane >> 2, tig = lane & 3;

    TileRows t;
    if (!cta_tile<C>(p, tid, t)) return;
    KeySpan ks;
    cta_key_span<C>(p, t, ks);
    Logits lg;
    logit_consts<C>(p, t.b, t.kvh, lg);

    float *sSlope = reinterpret_cast<float *>(smem + C::SLOPE_OFF);
    RowState<C> rs;
    OAcc<C> acc;
    init_rows<C>(p, t, ks, lg, sSlope, tid, wm, g, tig, rs, acc);

    const uint32_t sQa = smem_addr(smem);
    KvPipe<C> kv;
    kv_pipe_init<C, QT>(p, smem, t.kvh, kv);
    QFrags<C> q;
    load_q<C, QT>(p, t, sQa, tid, g, tig, q);
    uint32_t bad_id = 0; // a block id outside the cache was read as no row (store_offsets)
    kv_prologue<C, QT>(p, ks.kr, kv, ks.my_tb, ks.my_te, tid, bad_id);

    CtaInfo *info = reinterpret_cast<CtaInfo *>(smem + C::INFO_OFF);
    if (tid == 0) {
        info->kr = ks.kr;
        info->m0 = t.m0;
        info->rows = t.rows;
        info->q0 = t.q0;
        info->to_split = t.to_split;
        info->vdesc = lg.vdesc;
        info->key_lo = max(ks.kr.kmin, ks.my_tb * C::BN);
        info->key_hi = min(ks.kr.kmax, ks.my_te * C::BN);
        info->diag = ks.diag;
        info->edge = ks.t_lo != ks.t_hi && (ks.wl >= 0 || ks.wr >= 0);
    }

    // ldmatrix lane offsets. Q (A, x4): lanes 0-15 rows 0-15 at k 0, lanes 16-31 at k 8.
    // K (B, x4): matrices (n0-7,k0) (n0-7,k8) (n8-15,k0) (n8-15,k8) -> b0 b1 of two n8 fragments.
    // V (B, x4.trans): matrices (key0-7,d0) (key8-15,d0) (key0-7,d8) (key8-15,d8).
    const int q_lane_row = wm * C::MF * 16 + (lane & 15), q_lane_chunk = lane >> 4;
    const int k_lane_row = ((lane >> 4) << 3) + (lane & 7), k_lane_chunk = (lane >> 3) & 1;
    const int v_lane_row = (((lane >> 3) & 1) << 3) + (lane & 7), v_lane_chunk = lane >> 4;
    int stage = 0; // smem stage of tile nb (tile index within the split, mod NS)

    // ---- main loop over the key tiles of this split: tile i = nb - my_tb sits in stage i % NS,
    // the row offsets of tile x in slot x & 1
    for (int nb = ks.my_tb; nb < ks.my_te; ++nb) {
        const int i = nb - ks.my_tb;
        kv_wait<C>(); // tile nb, the offsets of nb + NS - 1 (and, first time, the prologue's
            // slopes and CtaInfo) visible; tile nb - 1 consumed
        if (nb + C::NS - 1 < ks.my_te)
            kv_issue<C, QT>(p, kv, (i + C::NS - 1) & 1, stage == 0 ? C::NS - 1 : stage - 1, tid);
        cp_async_commit();
        const bool pf = nb + C::NS < ks.my_te;
        int64_t pf_id[kPfRows<C>];
        kv_fetch_ids<C>(p, info->kr, pf, nb + C::NS, tid, pf_id);
        uint32_t kt, vt;
        kv_ready<C, QT, PT>(p, kv, stage, tid, kt, vt);

        // per-lane fragment bases (ldmatrix row addresses), fresh each tile
        const Frag<C> qfb = frag_of<C>(sQa, q_lane_row, q_lane_chunk);
        const Frag<C> kfb = frag_of<C>(kt, k_lane_row, k_lane_chunk);
        const Frag<C> vfb = frag_of<C>(vt, v_lane_row, v_lane_chunk);
        const int nbase = nb * C::BN;
        const bool need_mask = nbase < ks.full_lo || nbase + C::BN > ks.full_hi;

        // the stage's BN keys in steps of BNC (one online-softmax update each)
#pragma unroll
        for (int sub = 0; sub < C::BN / C::BNC; ++sub) {
            float s[C::MF][C::NF][4];
            qk_step<C, QT>(s, q, qfb, kfb, sub);
            logits_mask<C>(s, lg, ks, rs, sSlope, nbase + sub * C::BNC + 2 * tig, need_mask, t.half, wm, g);
            uint32_t pk[C::MF][C::NF][2];
            float alpha[C::MF][2];
            const bool rescale = softmax_step<C, PT>(s, lg.exp_scale, t.half, rs, pk, alpha);
            rescale_o<C>(acc, alpha, rescale, t.half);
            pv_step<C, PT>(acc, pk, vfb, sub);
        }
        if (pf) kv_store_ids<C>(p, info->kr, kv, (i + C::NS) & 1, nb + C::NS, tid, pf_id, bad_id);
        stage = stage + 1 == C::NS ? 0 : stage + 1;
    }
    if (__builtin_expect(bad_id != 0, 0)) report_bad_block_id(p, info->kr, info->key_lo, info->key_hi);

    epilogue<C, QT, KV>(p, smem, rs, acc, t.G, t.kvh, t.split, tid, wm, g, tig);
}

// ---------------------------------------------------------------------------------------------
// Host side of one instance

template <class C, typename QT, int KV> static cudaError_t launch_cfg(const Params &p, cudaStream_t stream) {
    const int64_t tiles = static_cast<int64_t>(p.num_tokens) * p.group / C::BM + p.num_seqs + 1;
    const int64_t blocks = tiles * p.num_heads_kv;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    auto kern = attention_kernel<C, QT, KV>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_splits), 1);
    kern<<<grid, C::NT, C::SMEM, stream>>>(p);
    return cudaGetLastError();
}

template <int D, typename QT, int KV>
cudaError_t launch_attention(const Params &p, bool decode, cudaStream_t stream) {
    if (decode) return launch_cfg<DecodeCfg<D, KV>, QT, KV>(p, stream);
    return launch_cfg<PrefillCfg<D, KV>, QT, KV>(p, stream);
}

template <int D, typename QT, int KV> int64_t attention_smem_bytes(bool decode) {
    static_assert(CheckCfgs<D, KV>::ok, "tiles");
    return decode ? DecodeCfg<D, KV>::SMEM : PrefillCfg<D, KV>::SMEM;
}

template <class C, typename QT, int KV> static int ctas_per_sm_cfg() {
    auto kern = attention_kernel<C, QT, KV>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, C::NT, C::SMEM) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

template <int D, typename QT, int KV> int attention_ctas_per_sm(bool decode) {
    if (decode) return ctas_per_sm_cfg<DecodeCfg<D, KV>, QT, KV>();
    return ctas_per_sm_cfg<PrefillCfg<D, KV>, QT, KV>();
}

} // namespace fa_attn

// Explicit instantiation of one (D, QT, KV) instance (used by the generated files).
#define FA_ATTN_INSTANTIATE(D, QT, KV) \
    template cudaError_t fa_attn::launch_attention<D, QT, KV>(const fa_attn::Params &, bool, cudaStream_t); \
    template int64_t fa_attn::attention_smem_bytes<D, QT, KV>(bool); \
    template int fa_attn::attention_ctas_per_sm<D, QT, KV>(bool);

#endif  // __HIP_PLATFORM_AMD__ / !FA_ATTN_DECLS_ONLY
