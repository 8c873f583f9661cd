// sm90_attention.cu - the sm_90a attention kernel family of the CUDA backend: paged varlen
// prefill for bf16 and f16, with wgmma (HGMMA) for both GEMMs, TMA loads of Q and of every
// K/V page into a shared-memory ring (lib_stages) guarded by mbarriers, and warp specialisation
// (a producer warp, two consumer warpgroups in ping-pong). Compiled only when gpu_arch has
// sm_90a (meson sets FA_CUDA_HAVE_SM90); attention.cu calls fa_sm90__launch for the calls
// fa_sm90__accepts takes and runs everything else in the mma.sync family.
//
// What a call may have here: q / k / v / out all bf16 or all f16, head size 64, 128 or 256
// (Dims<D>: 128-key tiles at 64 and 128, 64-key tiles at 256), a paged cache of any block size (a
// power of two in [8, BN]: a TMA box per page; a multiple of BN: a box of BN rows at a row offset
// inside the block; any other: the cp.async producer, gather_producer), or dense K/V with
// num_keys given (the same maps over one block of
// num_keys rows, a sequence's boxes from its cu_seqlens_k row); bottom-right causal and windows
// (left, right), softcap, LSE out, query-head groups (one launch per group, split-KV too),
// and, in the General kernels (the plain ones stay free of their work), split-KV (grid z = S, a
// CTA takes its split's share of the key tiles and writes float partials and LSEs for the
// combine kernel, in the mma.sync family's workspace layout), ALiBi (x = fma(slope, |td - j|, x)
// after the scale / softcap) and sinks (the initial state m = z, l = 1 of split 0), as the
// mma.sync family computes them. A 16-bit query over an fp8 (E4M3 / E5M2) cache runs here at heads
// 64 / 128 / 256, any block size or dense K/V (the KV8 kernels, below); an fp8 (E4M3) query with
// E4M3 K / V at heads 64, 128, 256, any block size or dense K/V, runs here only (the FP8 kernels,
// below).
//
// CTA = 3 warpgroups (384 threads): one (sequence, 128-token row block, query head).
//   producer warp (warpgroup 0, warp 0): setmaxnreg.dec 40. Lane 0 loads the Q tile (TMA, once);
//     per BN-key tile the lanes read the tile's block-table entries (a tile ahead) and issue one
//     TMA box per (page, 64-dim column block) into the K and V stages. A block id outside
//     [0, num_blocks) is loaded from coordinate num_blocks: past the tensor map, so TMA reads
//     nothing and fills zeros; the first one is recorded in the error word. Pages with no key
//     of the CTA's range (past the sequence, before a window) load zeros the same way.
//   consumers (warpgroups 1, 2): setmaxnreg.inc 232; 64 query rows each. S = Q K^T (D / 16
//     wgmma SS), mask, online softmax (sm90_tile.cuh), O += P V (BN / 16 wgmma RS; two per
//     k-step at head 256), FA3's intra-warpgroup overlap
//     (S(i) and P(i-1) V(i-1) in flight together) and ping-pong turns between the two
//     warpgroups (named barriers 1, 2). The last tile's V rows at or past the sequence's end
//     (the rest of its last page: stale, may hold NaN; P = 0 there, and 0 x NaN is NaN) are
//     zeroed before its P V.
//   FP8 (an e4m3 query, K and V at head 64 / 128 / 256, out bf16 / f16; head 64: rows of 64 bytes,
//     the 64-byte swizzle; head 256: 64-key tiles): S = Q K^T and O += P V by QGMMA
//     (wgmma .e4m3, sm90_tile.cuh), the q / k descales in the logit scale, P = 2^(x - m + 8)
//     rounded to e4m3 in place; QGMMA's B must be K-major, so the whole producer warpgroup
//     (setmaxnreg 56, consumers 224) transposes each landed V tile into a Vt stage (v_empty then
//     counts its 128 threads, vt_full / vt_empty guard Vt), zeroing the keys past the sequence.
//   KV8 (a bf16 / f16 query over an fp8 cache, heads 64 / 128 / 256, one raw stage at 256): warp
//     0 loads each tile's raw codes (one unswizzled uint8 box a page, K and V; at a block size no
//     box serves, the 128 producer threads copy the rows by cp.async into the same layout) into
//     a raw ring (raw_full / raw_empty); the whole producer warpgroup (setmaxnreg 56, consumers
//     224) converts them exactly into the 16-bit K (the query's type) and V (f16) stages in the
//     16-bit kernels' layout, zeroing keys past the sequence, fences the async proxy and arrives
//     (k_full / v_full count 128). S in the query's type, P V in f16; K's
//     descale in the logit scale, V's in the epilogue.
//   Epilogue: O / l to bf16 straight from the accumulators; LSE; a CTA under a causal / window
//   mask whose output holds a NaN recomputes those entries scalar over the row's allowed keys
//   (a non-finite V of a key masked for this row but staged for another reaches the row
//   through 0 x NaN; the reference never reads it).
#include "../../fa_cuda_internal.cuh"
#define FA_ATTN_DECLS_ONLY
#include "../attention_kernel.cuh"
#include "../dispatch_generated.h" // FA_ATTN_HD_<d>: the compiled widths
#include "sm90_tile.cuh"

#include <cuda_fp8.h>

#include <algorithm>
#include <limits.h>
#include <math.h>
#include <string.h>

namespace fa_sm90 {

#if FA_SM90_DEVICE_OK // (the kernel body is empty in the other architectures' code)
constexpr int kLibProducerRegs = 40; // 40 * 128 + 232 * 256 = 64512 <= 65536
constexpr int kLibConsumerRegs = 232;
// FP8: the producer warpgroup also transposes V; its consumers hold half the P registers
constexpr int kFp8ProducerRegs = 56; // 56 * 128 + 224 * 256 = 64512
constexpr int kFp8ConsumerRegs = 224;
#endif
// K / V ring stages of the 16-bit kernels at head size d: as many as fit beside Q in 227 KiB
// (head 256: 64 KiB of Q and 2 x 64 KiB; head 128: 32 + 3 x 64; head 64: 16 + 4 x 32). A deeper
// ring lets the producer issue a tile's boxes (8 pages x 3 at block 16) further ahead of use.
__host__ __device__ constexpr int lib_stages(int d) { return d == 256 ? 2 : (d == 128 ? 3 : 4); }
// The FP8 kernels' ring (a stage is K, V and the transposed Vt, each half the 16-bit tile's
// bytes): head 128 3 (32 + 3 x 48 KiB), head 256 (64-key tiles) 4 (32 + 4 x 48), head 64 4 (8 + 4
// x 24: the 16-bit kernels' depth there; more would fit, untimed).
__host__ __device__ constexpr int fp8_stages(int d) { return d == 128 ? 3 : 4; }
// KV8 (a 16-bit query over an fp8 cache): converted 16-bit K / V stages (the consumers' layout,
// 64 KiB a stage at heads 128 and 256) and raw fp8 stages (K and V, 32 KiB a stage at heads 128
// and 256): head 128 32 + 2 x 64 + 2 x 32 = 224 KiB, head 64 16 + 4 x 32 + 4 x 16 = 208 KiB,
// head 256 (64-key tiles) 64 + 2 x 64 + 1 x 32 = 224 KiB: one raw stage, so the load of raw tile
// i + 1 waits for the conversion of tile i.
__host__ __device__ constexpr int kv8_stages(int d) { return d == 64 ? 4 : 2; }
__host__ __device__ constexpr int kv8_raw_stages(int d) { return d == 256 ? 1 : (d == 128 ? 2 : 4); }
// (64 KiB of Q, 2 x 2 x 32 KiB converted, 2 x 16 KiB raw, the barriers and 1 KiB of alignment
// slack)
static_assert(Smem<kv8_stages(256), 256, false, kv8_raw_stages(256)>::kAlloc <= 227 * 1024,
              "KV8 at head 256: shared memory per block on sm_90");

// Kernel parameters besides the three tensor maps.
struct AttnParams {
    void *out; // T
    int64_t out_token_stride, out_head_stride;
    float *lse; // NULL-able [Hq, T], lse_head_stride
    int64_t lse_head_stride;
    const int32_t *cu_seqlens_q, *seqused_k, *block_table, *split_plan;
    const int32_t *cu_seqlens_k; // dense K/V: one "block" of num_keys rows, block_table NULL
    int64_t block_table_stride;
    FaDevErr *err_word;
    // for the NaN fix-up (scalar reads)
    const void *q, *k, *v; // T
    int64_t q_token_stride, q_head_stride;
    int64_t k_block_stride, k_row_stride, k_head_stride;
    int64_t v_block_stride, v_row_stride, v_head_stride;
    int32_t num_blocks; // < 2^31 (the host checks)
    int32_t num_seqs, num_heads_q, group;
    int32_t block_size, block_shift; // block_shift = log2(block_size) or -1
    int32_t box_rows, pages_per_tile; // TMA box rows per page (min(block_size, 128)), 128 / box_rows
    int32_t box_log2; // log2(box_rows)
    int32_t gather; // 1: K / V rows by cp.async in pages of 8 keys (a block size no box serves)
    int32_t mcast; // 2: the CTA pair of a cluster (query heads 2k, 2k + 1 of one KV head) shares
                   // the K / V boxes: each issues the pages of its rank, multicast to both; else 1
    int32_t window_left, window_right; // -1 = unbounded (causal folded into right = 0)
    int32_t skip_rows; // sequences with Lq * group <= skip_rows run in the decode tile (skipped)
    // GQA packing: a row block's rows are (token, query head) pairs of one KV head, token r >>
    // pack_log2 and query head (KV head << pack_log2) + r % 2^pack_log2 of row r (2^pack_log2 =
    // group: every query head of the KV head); 0: a row block is 128 tokens of one query head.
    // tile_shift = log2(tokens a row block) = 7 - pack_log2; item_heads: the heads the work
    // items walk (num_heads_q, or the KV heads when packed)
    int32_t pack_log2, tile_shift, item_heads;
    // work items (row-block tiles x splits x heads, heads innermost): items_x tiles, num_items in
    // all (num_heads_q heads a launch); a persistent grid walks them in rounds of gridDim.x,
    // every other round backwards
    int32_t items_x;
    int32_t heads_outer; // 1: the list head after head (one sequence), 0: heads innermost
    // a dynamic persistent grid (the plain 16-bit kernels at heads 64 / 128 with TMA boxes, no
    // multicast pair): [0] the next item, [1] the CTAs done (fa_attn_args.work_counters, zero on
    // entry and left zero); NULL: one CTA an item
    int32_t *work_counter;
    int64_t num_items;
    float scale_log2; // softmax scale * log2(e); with a softcap: softcap * log2(e)
    float sc_cap; // softmax scale / softcap (softcap only)
    // split-KV (the General kernels): S, and the float partials [S, T, Hq, D] / LSEs [S, Hq, T]
    // of the sequences whose plan entry is above 1 (the combine kernel merges them); with
    // query-head groups the pointers start at the launch's first head and split_heads is the
    // call's Hq (the partials' head count; num_heads_q is a group's)
    int32_t num_splits, num_tokens, split_heads;
    float *split_out, *split_lse;
    // ALiBi and sinks (the General kernels)
    const float *alibi_slopes; // NULL-able [Hq] / [B, Hq]
    int64_t alibi_batch_stride;
    const float *sinks; // NULL-able [Hq]
    // fp8 (the FP8 kernels: e4m3 q, k, v): q[t, h] stands for q_descale[b, hkv] x q (NULL: 1),
    // K and V for k_descale / v_descale [b, hkv] x the codes (NULL: k_scale / v_scale)
    const float *q_descale, *k_descale, *v_descale;
    int64_t descale_batch_stride, descale_head_stride;
    float k_scale, v_scale;
};

// Sequence b of flat row-block tile `tile`: the last b with tile_off(b) = cu_q[b] / TB + b <=
// tile (TB = 2^tile_shift tokens a row block; strictly increasing; sequence b owns tiles
// [tile_off(b), tile_off(b + 1)), at least its row blocks). Binary steps until at most 32
// candidates remain, then one ballot. Called by whole warps (each warp finds it on its own: the
// producer and the consumers walk their items apart).
__device__ __forceinline__ int seq_of_tile(const AttnParams &p, int tile) {
    int lo = 0, hi = p.num_seqs - 1;
    while (hi - lo >= 32) {
        const int mid = (lo + hi + 1) >> 1;
        if ((p.cu_seqlens_q[mid] >> p.tile_shift) + mid <= tile)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int cand = lo + 1 + static_cast<int>(threadIdx.x % 32);
    const bool ok = cand <= hi && (p.cu_seqlens_q[cand] >> p.tile_shift) + cand <= tile;
    return lo + __popc(__ballot_sync(0xffffffffu, ok));
}

// Whether a kernel can walk work items persistently (one CTA an SM taking items one by one from
// an atomic counter, the next item's Q and K / V loads under the last one's epilogue): the plain
// 16-bit kernels at heads 64 and 128 (the General kernels and head 256 would spill). It does so
// when the backend's mode takes it for the call (fa_cuda_backend_set_persistent: on, or auto with
// max_seqlen_q <= FA_CUDA_PERSIST_AUTO_ROWS; num_sms > 0 at the launch), the call gives work
// counters (p.work_counter) and its producer is the TMA warp without the multicast pair; else one
// item a CTA (the hardware's block scheduler). A static share of the items (rounds of G CTAs)
// measured up to 1.5x uneven where a CTA has few items (docs/perf-history.md, 2026-12-06 03:54):
// the items are taken dynamically, longest first.
__host__ __device__ constexpr bool sm90_persistent(bool general, int d) {
    return !general && (d == 64 || d == 128);
}

// A work item of the kernel: (row block of a sequence, head, split), its keys and its share of
// the key tiles [tb, tb + n_tiles) (decode() in the kernel). h: the item's head (a query head, or
// with GQA packing a KV head), hq0 = h << pack_log2 its first query head; rows = Lq << pack_log2
// (row r: token r >> pack_log2, query head hq0 + r % 2^pack_log2); m0 the row block's first row.
struct Item {
    int h, hq0, b, split, nsplit, q0, Lq, rows, m0, hkv, kb, Lk, diag, kmin, kmax, tb, n_tiles;
    const int32_t *bt;
};

// Allowed keys [lo, hi) of the row whose diagonal key is dk (FA_BU_KEY_ALLOWED's rule), clamped
// to [0, Lk]; an empty range has lo >= hi.
__device__ __forceinline__ void row_keys(int64_t dk, int Lk, int wl, int wr, int &lo, int &hi) {
    int64_t l = wl >= 0 ? dk - wl : 0;
    int64_t h = wr >= 0 ? dk + wr + 1 : Lk;
    l = l < 0 ? 0 : (l > Lk ? Lk : l);
    h = h < 0 ? 0 : (h > Lk ? Lk : h);
    lo = static_cast<int>(l);
    hi = static_cast<int>(h);
}

// The K / V element offset of key j of sequence row bt (dense: bt NULL, the sequence's keys from
// row kb), or false when its block id is outside the cache (the scalar fix-up skips it).
__device__ __forceinline__ bool key_offsets(const AttnParams &p, const int32_t *bt, int kb, int j, int hkv,
                                            int64_t &ok, int64_t &ov) {
    const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
    const int slot = j - bi * p.block_size + kb;
    const int32_t id = bt != nullptr ? bt[bi] : 0;
    if (static_cast<uint32_t>(id) >= static_cast<uint32_t>(p.num_blocks)) return false;
    ok = id * p.k_block_stride + slot * p.k_row_stride + hkv * p.k_head_stride;
    ov = id * p.v_block_stride + slot * p.v_row_stride + hkv * p.v_head_stride;
    return true;
}

// The rare path of the epilogue: entry (row token t of sequence b, dim d) recomputed scalar over
// the row's allowed keys [lo, hi) with the row's final offset m (log2 units) and sum l, in the
// kernel's units: p_j = 2^(fl(s_j sl2) - m) / l. Keys whose block id is bad are skipped (their
// staged rows were zeros). Out of line: the main loop keeps its registers.
template <typename T> __device__ __forceinline__ float to_f32(T x) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        return __bfloat162float(x);
    } else if constexpr (std::is_same<T, __nv_fp8_e4m3>::value || std::is_same<T, __nv_fp8_e5m2>::value) {
        return static_cast<float>(x);
    } else {
        return __half2float(x);
    }
}

// (E: the element type of q, KE of k and v (an fp8 cache under a 16-bit query: the codes, K's
// descale in sc.sl2 / sc.sc_cap, V's in sc.vd); sc: the CTA's logit scales sl2, sc_cap and V's
// descale)
struct Scales {
    float sl2, sc_cap, vd;
};
template <typename E, bool Softcap, int D, bool Alibi, typename KE = E>
__device__ __forceinline__ float fix_nan_core(const AttnParams &p, int q_tok, int h, int hkv,
                                              const int32_t *bt, int kb, int lo, int hi, int d, float m,
                                              float l, Scales sc, float slope, int td) {
    const E *qr = static_cast<const E *>(p.q) + q_tok * p.q_token_stride + h * p.q_head_stride;
    const KE *kp = static_cast<const KE *>(p.k), *vp = static_cast<const KE *>(p.v);
    float acc = 0.f;
    for (int j = lo; j < hi; ++j) {
        int64_t ok, ov;
        if (!key_offsets(p, bt, kb, j, hkv, ok, ov)) continue;
        float s = 0.f;
        for (int x = 0; x < D; ++x) s += to_f32(qr[x]) * to_f32(kp[ok + x]);
        float xl = Softcap ? __fmul_rn(sc.sl2, tanh_approx(__fmul_rn(s, sc.sc_cap))) : s * sc.sl2;
        if constexpr (Alibi) xl = __fmaf_rn(slope, fabsf(static_cast<float>(td - j)), xl);
        acc += ex2_approx(xl - m) * to_f32(vp[ov + d]);
    }
    return l > 0.f ? acc * sc.vd / l : 0.f;
}
template <typename E, bool Softcap, int D, typename KE = E>
static __device__ __noinline__ float fix_nan_entry(const AttnParams &p, int q_tok, int h, int hkv,
                                                   const int32_t *bt, int kb, int lo, int hi, int d, float m,
                                                   float l, Scales sc) {
    return fix_nan_core<E, Softcap, D, false, KE>(p, q_tok, h, hkv, bt, kb, lo, hi, d, m, l, sc, 0.f, 0);
}
// The same with the ALiBi bias (the General kernels; slope in log2 units, td the row's diagonal key).
template <typename E, bool Softcap, int D, typename KE = E>
static __device__ __noinline__ float fix_nan_entry_alibi(const AttnParams &p, int q_tok, int h, int hkv,
                                                         const int32_t *bt, int kb, int lo, int hi, int d,
                                                         float m, float l, Scales sc, float slope, int td) {
    return fix_nan_core<E, Softcap, D, true, KE>(p, q_tok, h, hkv, bt, kb, lo, hi, d, m, l, sc, slope, td);
}

__device__ __forceinline__ bool is_nan(float x) { return x != x; }

// Zero V rows [n, BN) of a stage laid out in pages of R = 2^rlog keys ([page][64-dim column
// block][R][64]; a swizzle moves 16-byte chunks within a 128-byte row only, so key r's column
// block c is the 128 bytes at page (r / R), block c, row r % R), by the 128 threads of one
// consumer warpgroup, then make the writes visible to wgmma (async proxy) and wait for the
// warpgroup (named barrier bar_id).
template <int D>
__device__ __forceinline__ void zero_v_tail(uint32_t vb, int n, int rlog, int tid, uint32_t bar_id) {
    constexpr int kCols = Dims<D>::kCols, kShift = 3 + Dims<D>::kColsLog2; // 8 kCols 16-byte chunks a key
    const int R = 1 << rlog;
    for (int x = tid; x < (Dims<D>::kBN - n) << kShift; x += 128) {
        const int r = n + (x >> kShift), c = (x >> 3) & (kCols - 1), chunk = x & 7;
        const uint32_t a = vb + static_cast<uint32_t>(((r >> rlog) * kCols + c) * R * 128 +
                                                      (r & (R - 1)) * 128 + chunk * 16);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0u) : "memory");
    }
    fence_proxy_async_smem();
    named_bar_sync(bar_id, 128);
}

// The producer of a block size no TMA box serves (p.gather): the 128 threads of warpgroup 0
// copy the K and V rows of each BN-key tile with cp.async into the layout the boxes would give
// with pages of 8 keys (K [column block][BN][128 bytes], V [page][column block][8][128 bytes],
// 128-byte rows swizzled as TMA's SWIZZLE_128B: chunk c of row r at c ^ (r % 8); a column block
// is 64 16-bit dims or 128 e4m3 dims. FP8 (an e4m3 cache under an e4m3 query) at head 64: one
// column block of 64-byte rows, SWIZZLE_64B: chunk c of row r at c ^ (r / 2 % 4), the same for
// K and V). Thread x takes key row x / TPR of the tile, its 16-byte chunks [x % TPR, +1) x NC
// (TPR = 128 / BN threads a row), and looks its block id up a tile ahead. Keys outside [kmin,
// kmax) and keys of a block id outside [0, num_blocks) are zero-filled (nothing read); the first
// bad id is recorded in the error word. A stage is full when every thread's copies into it have
// landed (cp.async.mbarrier.arrive.noinc: 128 arrivals); the consumers fence the async proxy
// before wgmma reads it.
// it0: the ring position of the item's first tile (the K / V tiles of the CTA's earlier items).
// after(i): called by every thread once its copies of tile i are issued (FP8: the transpose of
// tile i - 1).
template <typename T, int D, bool FP8, typename After>
__device__ __forceinline__ void gather_producer(const AttnParams &p, const int32_t *bt, int hkv, int b,
                                                int tb, int n_tiles, int kmin, int kmax, int it0, uint32_t sK,
                                                uint32_t sV, uint32_t bar_kf, uint32_t bar_vf,
                                                uint32_t bar_ke, uint32_t bar_ve, After after) {
    constexpr int ST = FP8 ? fp8_stages(D) : lib_stages(D);
    using L = Smem<ST, D, FP8>;
    using KT = typename std::conditional<FP8, uint8_t, T>::type; // (strides in elements)
    constexpr int BN = Dims<D>::kBN;
    constexpr int kRowB = static_cast<int>(L::kRowBytes), kChunksRow = kRowB / 16; // a column block's row
    constexpr int kCols = D * static_cast<int>(sizeof(KT)) / kRowB; // column blocks
    constexpr int TPR = 128 / BN,
                  NC = D * static_cast<int>(sizeof(KT)) / 16 / TPR; // threads a row, chunks a thread
    const int x = static_cast<int>(threadIdx.x);
    const int r = x / TPR, c0 = (x % TPR) * NC;
    const uint32_t sw = static_cast<uint32_t>(kRowB == 64 ? (r >> 1) & 3 : r & 7);
    const uint32_t k_row = static_cast<uint32_t>(r * kRowB);
    const uint32_t v_row = static_cast<uint32_t>((r >> 3) * 8 * kRowB * kCols + (r & 7) * kRowB);
    bool bad = false; // a bad id reported (the first of this thread's)
    // the block id and slot of this thread's row of tile i; id -1 when it loads zeros
    auto row_at = [&](int i, int &id, int &slot) {
        const int j = (tb + i) * BN + r;
        id = -1;
        slot = 0;
        if (j < kmin || j >= kmax) return;
        const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
        const int32_t x = bt[bi];
        if (static_cast<uint32_t>(x) >= static_cast<uint32_t>(p.num_blocks)) {
            if (!bad) fa_dev_err_report(p.err_word, FA_DEVERR_BLOCK_ID, b, x, p.num_blocks, bi);
            bad = true;
            return;
        }
        id = x;
        slot = j - bi * p.block_size;
    };
    // 16-byte chunks c0 .. c0 + NC - 1 of a row from src (zeros when n is 0) into the row at dst
    // of a stage whose column blocks are col_bytes apart
    auto copy_row = [&](uint32_t dst, const KT *src, uint32_t n, uint32_t col_bytes) {
#pragma unroll 2
        for (int c = 0; c < NC; ++c) {
            const int ch = c0 + c; // column block ch / kChunksRow, chunk ch % kChunksRow
            cp_async16(dst + static_cast<uint32_t>(ch / kChunksRow) * col_bytes +
                           ((static_cast<uint32_t>(ch % kChunksRow) ^ sw) << 4),
                       src + ch * (16 / static_cast<int>(sizeof(KT))), n);
        }
    };
    int id, slot;
    row_at(0, id, slot);
    for (int i = 0; i < n_tiles; ++i) {
        const int s = (it0 + i) % ST;
        const uint32_t par = (static_cast<uint32_t>((it0 + i) / ST) & 1u) ^ 1u;
        int nid = -1, nslot = 0;
        if (i + 1 < n_tiles) row_at(i + 1, nid, nslot); // a tile ahead
        const uint32_t n = id >= 0 ? 16u : 0u;
        const int64_t blk = id >= 0 ? id : 0;
        mbar_wait(bar_ke + 8 * s, par);
        copy_row(sK + s * L::kTileBytes + k_row,
                 static_cast<const KT *>(p.k) + blk * p.k_block_stride + slot * p.k_row_stride +
                     static_cast<int64_t>(hkv) * p.k_head_stride,
                 n, L::kKvColBytes);
        cp_async_arrive_noinc(bar_kf + 8 * s);
        mbar_wait(bar_ve + 8 * s, par);
        copy_row(sV + s * L::kTileBytes + v_row,
                 static_cast<const KT *>(p.v) + blk * p.v_block_stride + slot * p.v_row_stride +
                     static_cast<int64_t>(hkv) * p.v_head_stride,
                 n, 8u * kRowB);
        cp_async_arrive_noinc(bar_vf + 8 * s);
        id = nid;
        slot = nslot;
        after(i);
    }
}

// KV8: one raw fp8 tile [BN keys][D bytes] (TMA, unswizzled) converted exactly into a 16-bit
// stage of the consumers' layout ([64-dim column block][BN keys][64], 128-byte rows, 16-byte
// chunk c of key r at c ^ (r % 8)) in type OT (the query's type for K, f16 for V), by the 128
// threads of the producer warpgroup; keys at or past `valid` are written as zeros (the stale rest
// of a sequence's last page: P is 0 there, and 0 x NaN is NaN). A thread takes 16 codes (16 dims
// of a key: two 16-byte chunks of the stage row) a step. Each 8 threads (one shared-memory phase
// of 16-byte accesses) take keys r, r + 1 (r even): at head 64 the 4 chunks of each (128
// consecutive raw bytes), at head 128 half a row of each, column block 0 of one and 1 of the
// other (raw bytes [0, 64) of one row and [64, 128) of the next: 32 distinct banks); their
// stores go to chunks {0, 2, 4, 6} ^ (r % 8) and {0, 2, 4, 6} ^ ((r + 1) % 8), 8 distinct
// places, so neither the loads nor the stores conflict. At head 256 a raw row is 256 bytes (16
// chunks; chunk u of any row on banks 4 (u % 8) .. 4 (u % 8) + 3) and a warp takes the 32 chunks
// of keys r, r + 1 (8 steps of the 128 threads: 64 keys): its phase f (lanes 8 f .. 8 f + 7) takes
// column block f of key r (lanes 0-3 of the phase) and f ^ 1 of key r + 1 (lanes 4-7), i.e. raw
// chunks 4 f .. 4 f + 3 and 4 (f ^ 1) .. 4 (f ^ 1) + 3: u % 8 = {0..3} + 4 (f % 2) and {0..3} +
// 4 (1 - f % 2), the 32 banks once; the stores again go to {0, 2, 4, 6} ^ (r % 8) and
// {0, 2, 4, 6} ^ ((r + 1) % 8) (a stage row is 128 bytes: past the swizzle, neither the key nor
// the column block moves the bank), so nothing conflicts.
template <typename OT, bool E5M2, int D>
__device__ __forceinline__ void convert_kv8(uint32_t src, uint32_t dst, int tid, int valid) {
    constexpr int BN = Dims<D>::kBN, kSteps = BN * D / 16 / 128;
#pragma unroll 2
    for (int it = 0; it < kSteps; ++it) {
        const int x = tid + 128 * it;
        int r, u; // key, 16-byte raw chunk (dims 16 u .. 16 u + 15)
        if constexpr (D == 64) {
            r = x >> 2;
            u = x & 3;
        } else if constexpr (D == 128) {
            const int cb = (x >> 2) & 1;
            r = 2 * (x >> 4) + (cb ^ ((x >> 3) & 1));
            u = 4 * cb + (x & 3);
        } else {
            const int hk = (x >> 2) & 1; // key r or r + 1 of the warp's pair
            r = 2 * (x >> 5) + hk;
            u = 4 * (((x >> 3) & 3) ^ hk) + (x & 3);
        }
        uint4 w = ld_shared_v4(src + static_cast<uint32_t>(r * D + u * 16));
        if (r >= valid) w = make_uint4(0u, 0u, 0u, 0u);
        uint32_t h[8];
        fp8x4_to_f16x4<E5M2>(w.x, h[0], h[1]);
        fp8x4_to_f16x4<E5M2>(w.y, h[2], h[3]);
        fp8x4_to_f16x4<E5M2>(w.z, h[4], h[5]);
        fp8x4_to_f16x4<E5M2>(w.w, h[6], h[7]);
        if constexpr (std::is_same<OT, __nv_bfloat16>::value) {
#pragma unroll
            for (int e = 0; e < 8; ++e) h[e] = f16x2_to_bf16x2(h[e]);
        }
        const uint32_t row = dst + static_cast<uint32_t>((u >> 2) * BN * 128 + r * 128);
        const uint32_t sw = static_cast<uint32_t>(r & 7), c0 = static_cast<uint32_t>(2 * u) & 7u;
        st_shared_v4(row + ((c0 ^ sw) << 4), h[0], h[1], h[2], h[3]);
        st_shared_v4(row + (((c0 + 1u) ^ sw) << 4), h[4], h[5], h[6], h[7]);
    }
}

// T: the element type of q, k, v and out (bf16 / f16); with FP8 q, k, v are e4m3 and T is
// out's type; with KV8 (1: E4M3, 2: E5M2) q and out are T and k, v the fp8 cache's codes: the
// producer warpgroup loads the raw pages by TMA (or copies their rows by cp.async) into a raw ring
// and converts each tile into the 16-bit stages the consumers read (K in T, V in f16), S = Q K^T in
// T, P rounded to f16 and O += P V in f16 (as the mma.sync family does for fp8 caches), K's
// descale in the logit scale and V's in the epilogue.
// Persist: the instantiation that can walk work items (sm90_persistent; its own kernel, as the
// loop across items costs the one-item kernel registers: ptxas spills)
template <typename T, bool Softcap, int D, bool General, bool FP8 = false, int KV8 = 0, bool Persist = false>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_attention_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                          const __grid_constant__ CUtensorMap tmV, const __grid_constant__ AttnParams p) {
#if FA_SM90_DEVICE_OK
    constexpr bool K8 = KV8 != 0; // a 16-bit query over an fp8 cache
    static_assert(!K8 || !FP8, "sm90 family: an fp8 cache under a 16-bit query, or an fp8 query");
    constexpr int ST = FP8 ? fp8_stages(D) : (K8 ? kv8_stages(D) : lib_stages(D)); // ring stages
    constexpr int RAW = K8 ? kv8_raw_stages(D) : 0; // raw fp8 stages (KV8)
    // FP8: P = 2^(x - m + POFF), in e4m3's range (the row sums carry the factor 2^POFF)
    constexpr int POFF = FP8 ? kFp8POff : 0;
    using L = Smem<ST, D, FP8, RAW>;
    using E = typename std::conditional<FP8, __nv_fp8_e4m3, T>::type; // q (and k, v) elements
    // k, v elements (KV8: the cache's fp8 codes); P V's operand type (KV8: f16)
    using KE = typename std::conditional<KV8 == 2, __nv_fp8_e5m2,
                                         typename std::conditional<KV8 == 1, __nv_fp8_e4m3, E>::type>::type;
    using PT = typename std::conditional<K8, __half, T>::type;
    // column blocks of a row: 128 bytes each (64 bf16 / f16 dims, 128 e4m3 dims; e4m3 head 64:
    // one block of 64 bytes, L::kRowBytes)
    constexpr int BN = Dims<D>::kBN, kColDims = FP8 ? (D == 64 ? 64 : 128) : 64, kCols = D / kColDims;
    constexpr int kColsLog2 = FP8 ? (D == 256 ? 1 : 0) : Dims<D>::kColsLog2;
    constexpr bool kPersist = Persist && sm90_persistent(General, D) && !FP8 && !K8;
    constexpr int kMaxItems = kPersist ? INT_MAX : 1; // work items a CTA may take
    extern __shared__ uint8_t smem_raw[];
    const Ring<ST, D, FP8, RAW> ring(smem_raw);
    const uint32_t sQ = ring.q, sK = ring.k, sV = ring.v;
    const uint32_t bar_q = ring.bar_q, bar_kf = ring.kf, bar_vf = ring.vf, bar_ke = ring.ke, bar_ve = ring.ve;
    const int wg = static_cast<int>(threadIdx.x) / 128;

    // with a multicast pair, a stage is free once the consumer warps of both CTAs released it,
    // and neither CTA's TMA may reach the other before the other's barriers exist
    const uint32_t mc = static_cast<uint32_t>(p.mcast);
    // (KV8 at a block size no box serves: raw_full counts the 128 producer threads' cp.async
    // arrivals, not the boxes' one arrive.expect_tx)
    if (threadIdx.x == 0)
        ring.init(&tmQ, &tmK, &tmV, p.gather || K8 ? 128u : 1u, kConsumerWarps * mc,
                  K8 && p.gather ? 128u : 1u);
    if (mc > 1)
        cluster_sync();
    else
        __syncthreads();

    // ---- work items: query head h = hp * mc + r (the multicast pair's two heads are items 2k,
    // 2k + 1; HP = heads / mc), x = the row-block tile counted from the end (causal / windowed
    // long row blocks first), S splits. Heads innermost (p.heads_outer 0): w = ((x * S + split) *
    // HP + hp) * mc + r, one longest-first list across every head, which the block scheduler
    // (greedy, in launch order) turns into an even finish where sequences are many (head after
    // head left the last head's long row blocks for the end: a tail of up to 3 % at 4 x 4096 and
    // 16 x 1024 in a list-scheduling model). Heads outermost (one sequence): w = ((hp * S +
    // split) * X + x) * mc + r. One item a CTA (grid = num_items; num_items < 2^31: the host
    // checks), or with work counters (kPersist kernels) the CTA's k-th item is the next of the
    // list: the producer warp's lane 0 takes it (atomicAdd on counter 0; -1 past the list) and
    // posts it in mailbox slot k % 2 for the consumer warps, so the list is taken in order,
    // longest first, by whichever CTA is free.
    const bool dyn = kPersist && p.work_counter != nullptr && !p.gather && mc == 1;
    auto item_of = [&](int k) -> int {
        if (!dyn) return k == 0 ? static_cast<int>(blockIdx.x) : -1;
        const uint32_t j = static_cast<uint32_t>(k) & 1u, par = (static_cast<uint32_t>(k) >> 1) & 1u;
        int w = -1;
        if (wg == 0) { // the producer warp: lane 0 takes the item, the warp gets it by shuffle
            if (threadIdx.x == 0) {
                mbar_wait(ring.ite + 8 * j, par ^ 1u); // the slot's last item was read
                const int x = atomicAdd(p.work_counter, 1);
                w = static_cast<int64_t>(x) < p.num_items ? x : -1;
                st_shared_s32(ring.mail + 4 * j, w);
                mbar_arrive(ring.itf + 8 * j);
            }
            return __shfl_sync(0xffffffffu, w, 0);
        }
        mbar_wait(ring.itf + 8 * j, par);
        w = ld_shared_s32(ring.mail + 4 * j);
        __syncwarp();
        if ((threadIdx.x & 31) == 0) mbar_arrive(ring.ite + 8 * j);
        return w;
    };
    // the item's sequence, rows, keys and share of the key tiles (false: nothing to do)
    auto decode = [&](int w, Item &I) -> bool {
        const int pw = w / static_cast<int>(mc); // (the pair's item)
        const int S = General ? p.num_splits : 1;
        int tile, hsel; // the row-block tile, the head (pair) index
        if (p.heads_outer) {
            tile = p.items_x - 1 - pw % p.items_x;
            const int rest = pw / p.items_x;
            I.split = rest % S;
            hsel = rest / S;
        } else {
            const int hp = p.item_heads / static_cast<int>(mc); // head pairs (heads without the pair)
            const int rest = pw / hp;
            tile = p.items_x - 1 - rest / S;
            I.split = rest % S;
            hsel = pw % hp;
        }
        I.h = hsel * static_cast<int>(mc) + w % static_cast<int>(mc);
        const int b = seq_of_tile(p, tile);
        I.b = b;
        I.q0 = p.cu_seqlens_q[b];
        I.Lq = p.cu_seqlens_q[b + 1] - I.q0;
        const int mblk = tile - ((I.q0 >> p.tile_shift) + b);
        I.rows = I.Lq << p.pack_log2; // (< 2^31: the host packs only where num_tokens << pack_log2 is)
        if (mblk < 0 || mblk >= (I.rows + kBlockM - 1) / kBlockM) return false;
        if (static_cast<int64_t>(I.Lq) * p.group <= p.skip_rows) return false; // the decode tile's
        if (p.split_plan != nullptr && p.split_plan[1 + b] == 0) return false; // no work
        // split-KV: split z of the sequence's nsplit (its plan entry, at most S) takes the z-th
        // share of the key tiles; with nsplit 1 it writes out directly
        I.nsplit = 1;
        if constexpr (General) {
            I.nsplit = p.split_plan != nullptr ? min(p.split_plan[1 + b], p.num_splits) : p.num_splits;
            if (I.split >= I.nsplit) return false;
        }
        I.m0 = mblk * kBlockM;
        I.hq0 = I.h << p.pack_log2;
        I.hkv = I.hq0 / p.group;
        const bool dense = p.cu_seqlens_k != nullptr;
        I.kb = dense ? p.cu_seqlens_k[b] : 0; // dense: the sequence's first key row
        I.Lk = dense ? p.cu_seqlens_k[b + 1] - I.kb : p.seqused_k[b];
        I.diag = I.Lk - I.Lq;
        I.bt = dense ? nullptr : p.block_table + static_cast<int64_t>(b) * p.block_table_stride;
        // keys of the item: the union of its rows' ranges (the first and the last row's tokens)
        int lo_a, hi_a, lo_b, hi_b;
        const int t_lo = I.m0 >> p.pack_log2, t_hi = (min(I.m0 + kBlockM, I.rows) - 1) >> p.pack_log2;
        row_keys(static_cast<int64_t>(t_lo) + I.diag, I.Lk, p.window_left, p.window_right, lo_a, hi_a);
        row_keys(static_cast<int64_t>(t_hi) + I.diag, I.Lk, p.window_left, p.window_right, lo_b, hi_b);
        I.kmin = lo_a;
        I.kmax = max(hi_b, I.kmin);
        I.tb = I.kmin / BN;
        I.n_tiles = I.kmax > I.kmin ? (I.kmax + BN - 1) / BN - I.tb : 0;
        if constexpr (General) {
            const int t0 = static_cast<int>(static_cast<int64_t>(I.n_tiles) * I.split / I.nsplit);
            const int t1 = static_cast<int>(static_cast<int64_t>(I.n_tiles) * (I.split + 1) / I.nsplit);
            I.tb += t0;
            I.n_tiles = t1 - t0;
        }
        return true;
    };

    if (wg == 0) {
        // ---------------- producer ----------------
        setmaxnreg_dec<FP8 || K8 ? kFp8ProducerRegs : kLibProducerRegs>();
        // (FP8: the whole warpgroup stays to transpose V, KV8 to convert K and V; only warp 0
        // issues boxes)
        if (threadIdx.x >= 32 && !p.gather && !FP8 && !K8) return;
        const int lane = static_cast<int>(threadIdx.x);
        // lane l < kCols * pages_per_tile issues page l / kCols, column block l % kCols of each
        // tile; in a multicast pair only the pages p with p % 2 = this CTA's rank
        const int ppt = p.pages_per_tile;
        const uint32_t rank = mc > 1 ? cluster_ctarank() : 0u;
        const uint16_t mask = static_cast<uint16_t>((1u << mc) - 1u);
        const int page = lane >> kColsLog2, col = lane & (kCols - 1);
        const bool active = lane < kCols * ppt && (static_cast<uint32_t>(page) & (mc - 1u)) == rank;
        const bool v_active = lane < ppt && (static_cast<uint32_t>(lane) & (mc - 1u)) == rank;
        auto wait_empty = [&](uint32_t bar, uint32_t par) {
            if (mc > 1)
                mbar_wait_cluster(bar, par);
            else
                mbar_wait(bar, par);
        };
        int ring_pos = 0, qn = 0; // K / V tiles issued so far (the ring's position), Q tiles loaded
        for (int k = 0; k < kMaxItems; ++k) {
            const int w = item_of(k);
            if (w < 0) break;
            Item I;
            if (!decode(w, I) || I.n_tiles == 0) continue;
            const int n_tiles = I.n_tiles, tb = I.tb, kmin = I.kmin, kmax = I.kmax, it0 = ring_pos;
            ring_pos += n_tiles;
            if (lane == 0) {
                if (qn > 0)
                    mbar_wait(ring.qe, static_cast<uint32_t>(qn - 1) & 1u); // the last item's Q is done
                mbar_arrive_expect_tx(bar_q, L::kQBytes);
                for (int half = 0; half < 2; ++half) {
                    // a box wholly past the sequence's rows (the upper warpgroup of a short last
                    // row block) re-reads the lower rows: never stored. The box is {column
                    // block, 2^pack_log2 heads, 64 >> pack_log2 tokens}: 64 rows in (token, head)
                    // order, the layout of 64 tokens of one head
                    const int r = I.m0 + half * kWgRows < I.rows ? I.m0 + half * kWgRows : I.m0;
                    const int qrow = I.q0 + (r >> p.pack_log2);
                    for (int c = 0; c < kCols; ++c)
                        tma_load_3d(sQ + half * L::kQWgBytes + c * L::kQColBytes, &tmQ, bar_q, c * kColDims,
                                    I.hq0, qrow);
                }
            }
            ++qn;
            if constexpr (K8) {
                // KV8: warp 0 loads raw tile i (K and V: one box a page each, [BN][D] bytes) into
                // raw stage (it0 + i) % RAW, RAW tiles ahead of the conversion; a box with no key
                // of [kmin, kmax) or of a bad block id loads from coordinate num_blocks (zeros,
                // nothing read); the first bad id is reported. All 128 threads convert tile i
                // into the 16-bit stage (it0 + i) % ST, then fence the async proxy and arrive.
                bool bad = false;
                int bad_id = 0, bad_col = 0;
                auto issue = [&](int i) {
                    const int q = it0 + i, r = q % RAW;
                    if (lane == 0) {
                        mbar_wait(ring.re + 8 * r, (static_cast<uint32_t>(q / RAW) & 1u) ^ 1u);
                        mbar_arrive_expect_tx(ring.rf + 8 * r, 2 * L::kRawBytes);
                    }
                    __syncwarp();
                    if (lane < ppt) {
                        const int j = (tb + i) * BN + lane * p.box_rows;
                        int blk = p.num_blocks, row = 0;
                        if (j < kmax && j + p.box_rows > kmin) {
                            const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
                            row = j - bi * p.block_size + I.kb;
                            const int32_t id = I.bt != nullptr ? I.bt[bi] : 0;
                            if (static_cast<uint32_t>(id) < static_cast<uint32_t>(p.num_blocks)) {
                                blk = id;
                            } else {
                                row = 0;
                                if (!bad) {
                                    bad = true;
                                    bad_id = id;
                                    bad_col = bi;
                                }
                            }
                        }
                        const uint32_t dst = ring.raw + r * 2 * L::kRawBytes + lane * p.box_rows * D;
                        tma_load_4d(dst, &tmK, ring.rf + 8 * r, 0, row, I.hkv, blk);
                        tma_load_4d(dst + L::kRawBytes, &tmV, ring.rf + 8 * r, 0, row, I.hkv, blk);
                    }
                };
                auto convert = [&](int i) {
                    const int q = it0 + i, r = q % RAW, s = q % ST;
                    const uint32_t par = (static_cast<uint32_t>(q / ST) & 1u) ^ 1u;
                    const uint32_t src = ring.raw + r * 2 * L::kRawBytes;
                    const int valid = I.Lk - (tb + i) * BN;
                    mbar_wait(ring.rf + 8 * r, static_cast<uint32_t>(q / RAW) & 1u);
                    mbar_wait(bar_ke + 8 * s, par);
                    convert_kv8<T, KV8 == 2, D>(src, sK + s * L::kTileBytes, lane, valid);
                    fence_proxy_async_smem();
                    mbar_arrive(bar_kf + 8 * s);
                    mbar_wait(bar_ve + 8 * s, par);
                    convert_kv8<__half, KV8 == 2, D>(src + L::kRawBytes, sV + s * L::kTileBytes, lane, valid);
                    fence_proxy_async_smem();
                    mbar_arrive(bar_vf + 8 * s);
                    mbar_arrive(ring.re + 8 * r); // this thread's reads of the raw stage are done
                };
                if (p.gather) {
                    // a block size no box serves: the 128 threads copy raw tile i's K and V
                    // rows by cp.async (16 bytes a copy) into raw stage (it0 + i) % RAW in the
                    // boxes' layout (key j of the tile at byte j * D, unswizzled), and the
                    // conversion reads it as it is. Warp w takes the tile's keys
                    // [RW w, RW w + RW) (RW = BN / 4); lane l looks up the block id and slot
                    // of key RW w + l % RW, a tile ahead, and the warp copies its keys CPR =
                    // D / 16 lanes a key, RPS keys a step, each key's id and slot shuffled from
                    // the lane that looked it up (a phase of 8 lanes: 128 consecutive bytes of
                    // the stage, of one cache row, two at head 64). Keys outside [kmin, kmax)
                    // and keys of a bad block id are zero-filled (nothing read); the first bad
                    // id is reported after the loop. raw_full counts the 128 threads' arrivals
                    // (cp.async.mbarrier.arrive.noinc: when the thread's copies have landed);
                    // every thread waits for the stage's release (raw_empty: the 128 threads'
                    // conversion of the tile RAW before) before its copies.
                    constexpr int RW = BN / 4, CPR = D / 16, RPS = 32 / CPR;
                    const int wl = lane & 31, w0 = (lane >> 5) * RW, ch = lane & (CPR - 1);
                    auto row_at = [&](int i, int &id, int &slot) {
                        const int j = (tb + i) * BN + w0 + wl % RW;
                        id = -1;
                        slot = 0;
                        if (j < kmin || j >= kmax) return;
                        const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
                        const int32_t x = I.bt[bi];
                        if (static_cast<uint32_t>(x) >= static_cast<uint32_t>(p.num_blocks)) {
                            if (!bad) {
                                bad = true;
                                bad_id = x;
                                bad_col = bi;
                            }
                            return;
                        }
                        id = x;
                        slot = j - bi * p.block_size;
                    };
                    int id, slot;
                    row_at(0, id, slot);
                    auto copy = [&](int i) {
                        const int q = it0 + i, r = q % RAW;
                        int nid = -1, nslot = 0;
                        if (i + 1 < n_tiles) row_at(i + 1, nid, nslot); // a tile ahead
                        mbar_wait(ring.re + 8 * r, (static_cast<uint32_t>(q / RAW) & 1u) ^ 1u);
                        const uint32_t dst = ring.raw + r * 2 * L::kRawBytes + ch * 16;
#pragma unroll 1 // (unrolled by 2, the general head-64 kernels spill at setmaxnreg 56)
                        for (int t = 0; t < RW / RPS; ++t) {
                            const int src = t * RPS + wl / CPR; // the key's lane (and key - w0)
                            const int kid = __shfl_sync(0xffffffffu, id, src);
                            const int kslot = __shfl_sync(0xffffffffu, slot, src);
                            const uint32_t n = kid >= 0 ? 16u : 0u;
                            const int64_t blk = kid >= 0 ? kid : 0;
                            const uint32_t d = dst + static_cast<uint32_t>((w0 + src) * D);
                            cp_async16(d,
                                       static_cast<const uint8_t *>(p.k) + blk * p.k_block_stride +
                                           kslot * p.k_row_stride +
                                           static_cast<int64_t>(I.hkv) * p.k_head_stride + ch * 16,
                                       n);
                            cp_async16(d + L::kRawBytes,
                                       static_cast<const uint8_t *>(p.v) + blk * p.v_block_stride +
                                           kslot * p.v_row_stride +
                                           static_cast<int64_t>(I.hkv) * p.v_head_stride + ch * 16,
                                       n);
                        }
                        cp_async_arrive_noinc(ring.rf + 8 * r);
                        id = nid;
                        slot = nslot;
                    };
                    for (int i = 0; i < min(RAW, n_tiles); ++i) copy(i);
                    for (int i = 0; i < n_tiles; ++i) {
                        convert(i);
                        if (i + RAW < n_tiles) copy(i + RAW);
                    }
                    if (bad)
                        fa_dev_err_report(p.err_word, FA_DEVERR_BLOCK_ID, I.b, bad_id, p.num_blocks, bad_col);
                    continue;
                }
                if (lane < 32)
                    for (int i = 0; i < min(RAW, n_tiles); ++i) issue(i);
                for (int i = 0; i < n_tiles; ++i) {
                    convert(i);
                    if (lane < 32 && i + RAW < n_tiles) issue(i + RAW);
                }
                if (bad)
                    fa_dev_err_report(p.err_word, FA_DEVERR_BLOCK_ID, I.b, bad_id, p.num_blocks, bad_col);
                continue;
            }
            // FP8: V tile j of the item, once landed and once its Vt stage is free, transposed by
            // the 128 threads (keys at or past Lk zeroed), then Vt full and the V stage free
            auto transpose_tile = [&](int j) {
                const int s = (it0 + j) % ST;
                const uint32_t par = static_cast<uint32_t>((it0 + j) / ST) & 1u;
                mbar_wait(bar_vf + 8 * s, par);
                mbar_wait(ring.te + 8 * s, par ^ 1u);
                transpose_v_fp8<D>(sV + s * L::kTileBytes, ring.vt + s * L::kTileBytes, lane,
                                   I.Lk - (tb + j) * BN, p.box_log2);
                fence_proxy_async_smem();
                mbar_arrive(ring.tf + 8 * s);
                mbar_arrive(bar_ve + 8 * s);
            };
            if (p.gather) { // (FP8: each landed tile transposed one tile behind the copies)
                gather_producer<T, D, FP8>(p, I.bt, I.hkv, I.b, tb, n_tiles, kmin, kmax, it0, sK, sV, bar_kf,
                                           bar_vf, bar_ke, bar_ve, [&](int i) {
                                               if constexpr (FP8)
                                                   if (i > 0) transpose_tile(i - 1);
                                           });
                if constexpr (FP8) transpose_tile(n_tiles - 1);
                continue;
            }
            bool bad = false;
            int bad_id = 0, bad_col = 0;
            // block coordinate and row-in-page of this lane's box of tile i. A box with no key of
            // the item's range [kmin, kmax) (before a window, past the sequence) and a bad block
            // id load from coordinate num_blocks: wholly past the tensor map, so TMA reads
            // nothing, fills zeros and still counts the box's bytes.
            auto coords = [&](int i, int &blk, int &row) {
                const int j = (tb + i) * BN + page * p.box_rows;
                blk = p.num_blocks;
                row = 0;
                if (j >= kmax || j + p.box_rows <= kmin) return;
                const int bi = p.block_shift >= 0 ? (j >> p.block_shift) : (j / p.block_size);
                row = j - bi * p.block_size + I.kb; // 0 unless the block is longer than the box (or dense)
                const int32_t id = I.bt != nullptr ? I.bt[bi] : 0;
                if (static_cast<uint32_t>(id) < static_cast<uint32_t>(p.num_blocks)) {
                    blk = id;
                } else if (!bad) {
                    bad = true;
                    bad_id = id;
                    bad_col = bi;
                }
            };
            int blk = 0, row = 0;
            if (active) coords(0, blk, row);
            for (int i = 0; i < n_tiles; ++i) {
                const int s = (it0 + i) % ST;
                const uint32_t par = (static_cast<uint32_t>((it0 + i) / ST) & 1u) ^ 1u;
                int nblk = 0, nrow = 0;
                if (active && i + 1 < n_tiles) coords(i + 1, nblk, nrow); // a tile ahead
                const uint32_t off =
                    page * p.box_rows * L::kRowBytes + col * L::kKvColBytes; // K: [column block][BN][64]
                if (lane == 0) {
                    wait_empty(bar_ke + 8 * s, par);
                    mbar_arrive_expect_tx(bar_kf + 8 * s, L::kTileBytes); // the whole tile, both ranks' boxes
                }
                __syncwarp();
                if (active) {
                    if (mc > 1)
                        tma_load_4d_mc(sK + s * L::kTileBytes + off, &tmK, bar_kf + 8 * s, col * kColDims,
                                       row, I.hkv, blk, mask);
                    else
                        tma_load_4d(sK + s * L::kTileBytes + off, &tmK, bar_kf + 8 * s, col * kColDims, row,
                                    I.hkv, blk);
                }
                if (lane == 0) {
                    wait_empty(bar_ve + 8 * s, par);
                    mbar_arrive_expect_tx(bar_vf + 8 * s, L::kTileBytes);
                }
                __syncwarp();
                // V: [page][column block][box_rows][64], every column block in one 5-D box a
                // page: lane l < ppt takes page l's coordinates from lane kCols l (its K box of
                // column block 0)
                const int vblk = __shfl_sync(0xffffffffu, blk, (kCols * lane) & 31);
                const int vrow = __shfl_sync(0xffffffffu, row, (kCols * lane) & 31);
                if (v_active) {
                    const uint32_t dst = sV + s * L::kTileBytes + lane * p.box_rows * L::kRowBytes * kCols;
                    if (mc > 1)
                        tma_load_5d_mc(dst, &tmV, bar_vf + 8 * s, 0, vrow, 0, I.hkv, vblk, mask);
                    else
                        tma_load_5d(dst, &tmV, bar_vf + 8 * s, 0, vrow, 0, I.hkv, vblk);
                }
                blk = nblk;
                row = nrow;
                if constexpr (FP8)
                    if (i > 0) transpose_tile(i - 1);
            }
            if constexpr (FP8) transpose_tile(n_tiles - 1);
            if (bad) fa_dev_err_report(p.err_word, FA_DEVERR_BLOCK_ID, I.b, bad_id, p.num_blocks, bad_col);
        }
        // a multicast pair: this CTA exits only after both CTAs' consumers released its last
        // stages (no box of its issue is then still landing in the other CTA, and no arrival of
        // the other's consumers is still to come on its barriers)
        if (mc > 1 && lane == 0)
            for (int i = max(0, ring_pos - ST); i < ring_pos; ++i) {
                const uint32_t par = static_cast<uint32_t>(i / ST) & 1u;
                mbar_wait_cluster(bar_ke + 8 * (i % ST), par);
                mbar_wait_cluster(bar_ve + 8 * (i % ST), par);
            }
        // work counters: this CTA takes no more items; the last CTA to get here (every other
        // CTA has taken its last) leaves both counters zero for the next call
        // (the fence orders this CTA's last take before its count)
        if (dyn && lane == 0) __threadfence();
        if (dyn && lane == 0 && atomicAdd(p.work_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
            atomicExch(p.work_counter, 0);
            atomicExch(p.work_counter + 1, 0);
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<FP8 || K8 ? kFp8ConsumerRegs : kLibConsumerRegs>();
    const int cw = wg - 1; // rows [m0 + 64 cw, m0 + 64 cw + 64) of an item
    const int tid = static_cast<int>(threadIdx.x) % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t4 = lane % 4;
    // a stage's release: this CTA's barrier, and in a multicast pair the other CTA's too
    const uint32_t peer = mc > 1 ? cluster_ctarank() ^ 1u : 0u;
    const uint32_t pke = mc > 1 ? mapa_shared(bar_ke, peer) : 0u,
                   pve = mc > 1 ? mapa_shared(bar_ve, peer) : 0u;
    auto release_k = [&](int s) {
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(bar_ke + 8 * s);
            if (mc > 1) mbar_arrive_cluster(pke + 8 * s);
        }
    };
    // P V reads the V stage (FP8: the transposed one)
    const uint32_t bar_pf = FP8 ? ring.tf : bar_vf, bar_pe = FP8 ? ring.te : bar_ve;
    const uint32_t sPV = FP8 ? ring.vt : sV;
    auto release_v = [&](int s) {
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(bar_pe + 8 * s);
            if (mc > 1) mbar_arrive_cluster(pve + 8 * s);
        }
    };
    // the item's last S = Q K^T is done: the producer may load the next item's Q
    auto release_q = [&]() {
        __syncwarp();
        if (lane == 0) mbar_arrive(ring.qe);
    };
    const int wl = p.window_left, wr = p.window_right;
    const uint32_t qb = sQ + cw * L::kQWgBytes;
    // V's pages of box_rows keys: LBO = the next 64-dim column block, SBO = the next 8 keys
    // (with 8-key pages the next page, kCols column blocks further)
    // (KV8: the converted V stage is one page of BN keys, [column block][BN][64])
    const uint32_t v_lbo = K8 ? BN * 128u : static_cast<uint32_t>(p.box_rows) * 128u;
    const uint32_t v_sbo = !K8 && p.box_rows == 8 ? 1024u * kCols : 1024u;
    constexpr int kV8Log2 = BN == 128 ? 7 : 6; // (KV8: pages of BN keys)
    int ring_pos = 0, qn = 0; // as the producer's
    for (int k = 0; k < kMaxItems; ++k) {
        const int w = item_of(k);
        if (w < 0) break;
        Item I;
        if (!decode(w, I)) continue;
        const int b = I.b, q0 = I.q0, rows = I.rows, Lk = I.Lk, diag = I.diag, hkv = I.hkv;
        const int tb = I.tb, n_tiles = I.n_tiles, split = I.split, nsplit = I.nsplit;
        const int it0 = ring_pos;
        ring_pos += n_tiles;
        const int row_lo = I.m0 + cw * kWgRows;
        const int r0 = row_lo + warp * 16 + g, r1 = r0 + 8;
        // the two rows' tokens and query heads (GQA packing: (token, head) pairs; else the item's
        // tokens of query head hq0)
        const int pl = p.pack_log2, pm = (1 << pl) - 1;
        const int tok0 = r0 >> pl, tok1 = r1 >> pl;
        const int h0 = I.hq0 + (r0 & pm), h1 = I.hq0 + (r1 & pm);
        // the logit scales (FP8: with the query's and K's descales folded in) and V's descale
        Scales sc = {p.scale_log2, p.sc_cap, 1.f};
        if constexpr (FP8 || K8) { // (KV8: q_descale is NULL)
            const int64_t di = static_cast<int64_t>(b) * p.descale_batch_stride + hkv * p.descale_head_stride;
            const float qk = (p.q_descale != nullptr ? p.q_descale[di] : 1.f) *
                             (p.k_descale != nullptr ? p.k_descale[di] : p.k_scale);
            if (Softcap)
                sc.sc_cap *= qk;
            else
                sc.sl2 *= qk;
            sc.vd = p.v_descale != nullptr ? p.v_descale[di] : p.v_scale;
        }
        const float sl2 = sc.sl2;
        int lo0, hi0, lo1, hi1;
        row_keys(static_cast<int64_t>(tok0) + diag, Lk, wl, wr, lo0, hi0);
        row_keys(static_cast<int64_t>(tok1) + diag, Lk, wl, wr, lo1, hi1);
        // keys allowed for every row of the warpgroup: [full_lo, full_hi) (nothing when it has no row)
        int full_lo = INT_MAX, full_hi = INT_MIN;
        if (row_lo < rows) {
            int a, c;
            row_keys(static_cast<int64_t>((min(row_lo + kWgRows, rows) - 1) >> pl) + diag, Lk, wl, wr,
                     full_lo, a);
            row_keys(static_cast<int64_t>(row_lo >> pl) + diag, Lk, wl, wr, c, full_hi);
        }
        auto needs_mask = [&](int kbase) { return kbase < full_lo || kbase + BN > full_hi; };
        // the last tile holds keys at or past Lk: its V rows from there on are zeroed
        const int last_kbase = (tb + n_tiles - 1) * BN;
        const int tail_valid = Lk - last_kbase; // < BN: zero rows [tail_valid, BN)

        float o[Dims<D>::kORegs];
        float sacc[Dims<D>::kSRegs];
        uint32_t pa[FP8 ? BN / 32 : BN / 16][4]; // P as the A operand: k16 (k32 for e4m3) steps
#pragma unroll
        for (int i = 0; i < Dims<D>::kORegs; ++i) o[i] = 0.f;
#pragma unroll
        for (int i = 0; i < Dims<D>::kSRegs; ++i) sacc[i] = 0.f;
        float mrow0 = -INFINITY, mrow1 = -INFINITY; // running max, log2 units
        float lrow0 = 0.f, lrow1 = 0.f; // this thread's part of the row sums
        float slope0 = 0.f, slope1 = 0.f; // ALiBi of the rows' heads, log2 units (General; 0 without)
        if constexpr (General) {
            constexpr float kLog2e = 1.44269504088896340736f;
            if (p.alibi_slopes != nullptr) {
                const float *sl = p.alibi_slopes + static_cast<int64_t>(b) * p.alibi_batch_stride;
                slope0 = -kLog2e * sl[h0];
                slope1 = -kLog2e * sl[h1];
            }
            if (p.sinks != nullptr && split == 0) { // the sink as the initial state (m = z, l = 1)
                mrow0 = p.sinks[h0] * kLog2e;
                mrow1 = p.sinks[h1] * kLog2e;
                lrow0 = lrow1 =
                    t4 == 0 ? static_cast<float>(1 << POFF) : 0.f; // l is a per-thread partial sum
            }
        }
        turns_open(cw, n_tiles > 0);

        if (n_tiles > 0) {
            wait_full(bar_q, static_cast<uint32_t>(qn) & 1u);
            ++qn;
            { // prologue: S(0), softmax(0), P(0)
                const int s = it0 % ST;
                wait_full(bar_kf + 8 * s, static_cast<uint32_t>(it0 / ST) & 1u);
                if (p.gather) fence_proxy_async_smem(); // cp.async's writes, before wgmma reads them
                turn_begin(cw);
                if constexpr (FP8)
                    issue_qk_fp8<D>(sacc, qb, sK + s * L::kTileBytes);
                else
                    issue_qk<ST, T, D>(sacc, qb, sK + s * L::kTileBytes);
                turn_end(cw, false);
                wgmma_wait_group<0>();
#pragma unroll
                for (int x = 0; x < Dims<D>::kSRegs; ++x) reg_fence(sacc[x]);
                release_k(s);
                if (n_tiles == 1) release_q();
                float a0, a1;
                const int kbase = tb * BN;
                (void)softmax_tile<Softcap, Dims<D>::kSRegs, General, POFF>(sacc, needs_mask(kbase),
                                                                            kbase + 2 * t4, lo0, hi0, lo1,
                                                                            hi1, sl2, sc.sc_cap, mrow0, mrow1,
                                                                            lrow0, lrow1, a0, a1, slope0,
                                                                            slope1, tok0 + diag, tok1 + diag);
                if constexpr (FP8) // O is still 0: nothing to rescale
                    pack_p_fp8(pa, sacc);
                else
                    pack_p<PT>(pa, sacc);
            }
            for (int i = 1; i < n_tiles; ++i) {
                const int s = (it0 + i) % ST, sp = (it0 + i - 1) % ST;
                const uint32_t phase = static_cast<uint32_t>((it0 + i) / ST) & 1u;
                const uint32_t phase_p = static_cast<uint32_t>((it0 + i - 1) / ST) & 1u;
                const int kbase = (tb + i) * BN;
                wait_full(bar_kf + 8 * s, phase);
                wait_full(bar_pf + 8 * sp, phase_p);
                if (p.gather) fence_proxy_async_smem();
                turn_begin(cw);
                if constexpr (FP8) {
                    issue_qk_fp8<D>(sacc, qb, sK + s * L::kTileBytes); // S(i)
                    issue_pv_fp8<D>(o, pa, sPV + sp * L::kTileBytes); // P(i-1) V(i-1)
                } else {
                    issue_qk<ST, T, D>(sacc, qb, sK + s * L::kTileBytes); // S(i)
                    issue_pv<ST, PT, D>(o, pa, sPV + sp * L::kTileBytes, v_lbo, v_sbo,
                                        K8 ? kV8Log2 : p.box_log2); // P(i-1) V(i-1)
                }
                turn_end(cw, false);
                wgmma_wait_group<1>(); // S(i) done (groups retire in order)
#pragma unroll
                for (int x = 0; x < Dims<D>::kSRegs; ++x) reg_fence(sacc[x]);
                release_k(s);
                if (i == n_tiles - 1) release_q();
                float a0, a1;
                const bool moved = softmax_tile<Softcap, Dims<D>::kSRegs, General, POFF>(
                    sacc, needs_mask(kbase), kbase + 2 * t4, lo0, hi0, lo1, hi1, sl2, sc.sc_cap, mrow0, mrow1,
                    lrow0, lrow1, a0, a1, slope0, slope1, tok0 + diag, tok1 + diag);
                wgmma_wait_group<0>(); // P(i-1) V(i-1) done: O and pa may be touched again
#pragma unroll
                for (int x = 0; x < Dims<D>::kORegs; ++x) reg_fence(o[x]);
                release_v(sp);
                rescale_o(o, a0, a1, moved);
                if constexpr (FP8)
                    pack_p_fp8(pa, sacc);
                else
                    pack_p<PT>(pa, sacc);
            }
            {
                const int s = (it0 + n_tiles - 1) % ST;
                wait_full(bar_pf + 8 * s, static_cast<uint32_t>((it0 + n_tiles - 1) / ST) & 1u);
                if (p.gather) fence_proxy_async_smem();
                // (FP8: the producer's transpose zeroed the keys past Lk)
                if (!FP8 && !K8 && tail_valid < BN)
                    zero_v_tail<D>(sV + s * L::kTileBytes, tail_valid, p.box_log2, tid, 3 + cw);
                turn_begin(cw);
                if constexpr (FP8)
                    issue_pv_fp8<D>(o, pa, sPV + s * L::kTileBytes);
                else
                    issue_pv<ST, PT, D>(o, pa, sPV + s * L::kTileBytes, v_lbo, v_sbo,
                                        K8 ? kV8Log2 : p.box_log2);
                turn_end(cw, true);
                wgmma_wait_group<0>();
#pragma unroll
                for (int x = 0; x < Dims<D>::kORegs; ++x) reg_fence(o[x]);
                release_v(s);
            }
        }

        // ---------------- epilogue ----------------
        const int32_t *bt = I.bt;
        const int kb = I.kb;
        lrow0 += __shfl_xor_sync(0xffffffffu, lrow0, 1);
        lrow0 += __shfl_xor_sync(0xffffffffu, lrow0, 2);
        lrow1 += __shfl_xor_sync(0xffffffffu, lrow1, 1);
        lrow1 += __shfl_xor_sync(0xffffffffu, lrow1, 2);
        // (FP8: O and l carry the same factor 2^POFF; O is of V's codes: times V's descale)
        const float oscale = FP8 || K8 ? sc.vd : 1.f;
        const float inv0 = lrow0 > 0.f ? oscale / lrow0 : 0.f;
        const float inv1 = lrow1 > 0.f ? oscale / lrow1 : 0.f;
        const bool edge = wl >= 0 || wr >= 0; // some staged key may be masked for a row
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            if ((half ? r1 : r0) >= rows) continue;
            const int tok = half ? tok1 : tok0, h = half ? h1 : h0; // the row's token and query head
            const float inv = half ? inv1 : inv0;
            float v[D / 4];
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                v[2 * j] = o[4 * j + 2 * half] * inv;
                v[2 * j + 1] = o[4 * j + 2 * half + 1] * inv;
            }
            if (edge) {
                bool any = false;
#pragma unroll
                for (int x = 0; x < D / 4; ++x) any |= is_nan(v[x]);
                if (__builtin_expect(any, 0)) {
                    int lo = half ? lo1 : lo0, hi = half ? hi1 : hi0;
                    if constexpr (General) { // this split's keys only
                        lo = max(lo, tb * BN);
                        hi = min(hi, (tb + n_tiles) * BN);
                    }
                    // (l without the factor 2^POFF: the fix-up's p are 2^(x - m))
                    const float m = half ? mrow1 : mrow0, l = (half ? lrow1 : lrow0) * (1.f / (1 << POFF));
                    for (int x = 0; x < D / 4; ++x)
                        if (is_nan(v[x])) {
                            const int d = 8 * (x >> 1) + 2 * t4 + (x & 1);
                            if constexpr (General)
                                v[x] = fix_nan_entry_alibi<E, Softcap, D, KE>(p, q0 + tok, h, hkv, bt, kb, lo,
                                                                              hi, d, m, l, sc,
                                                                              half ? slope1 : slope0,
                                                                              tok + diag);
                            else
                                v[x] = fix_nan_entry<E, Softcap, D, KE>(p, q0 + tok, h, hkv, bt, kb, lo, hi,
                                                                        d, m, l, sc);
                        }
                }
            }
            if (General && nsplit > 1) { // a partial: float O / l and the split's LSE
                float *dst =
                    p.split_out +
                    ((static_cast<int64_t>(split) * p.num_tokens + q0 + tok) * p.split_heads + h) * D +
                    2 * t4;
#pragma unroll
                for (int j = 0; j < D / 8; ++j)
                    *reinterpret_cast<float2 *>(dst + 8 * j) = make_float2(v[2 * j], v[2 * j + 1]);
                if (t4 == 0) {
                    const float l = half ? lrow1 : lrow0, m = half ? mrow1 : mrow0;
                    p.split_lse[(static_cast<int64_t>(split) * p.split_heads + h) * p.num_tokens + q0 + tok] =
                        l > 0.f ? (m + (__log2f(l) - static_cast<float>(POFF))) * 0.693147180559945309f
                                : -INFINITY;
                }
                continue;
            }
            T *dst = static_cast<T *>(p.out) + static_cast<int64_t>(q0 + tok) * p.out_token_stride +
                     static_cast<int64_t>(h) * p.out_head_stride + 2 * t4;
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<uint32_t *>(dst + 8 * j) = pack2<T>(v[2 * j], v[2 * j + 1]);
            if (p.lse != nullptr && t4 == 0) {
                const float l = half ? lrow1 : lrow0, m = half ? mrow1 : mrow0;
                p.lse[static_cast<int64_t>(h) * p.lse_head_stride + q0 + tok] =
                    l > 0.f ? (m + (__log2f(l) - static_cast<float>(POFF))) * 0.693147180559945309f
                            : -INFINITY;
            }
        }
    }
#else
    (void)tmQ;
    (void)tmK;
    (void)tmV;
    (void)p;
#endif
}

} // namespace fa_sm90

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------
namespace {

using fa_sm90_host::EncodeTiledFn;

int ilog2_exact(int64_t x) {
    if (x <= 0 || (x & (x - 1)) != 0) return -1;
    int s = 0;
    while ((int64_t(1) << s) < x) ++s;
    return s;
}

// A stride of elements of es bytes that TMA takes (a multiple of 16 bytes below 2^40).
bool stride_ok(int64_t elems, int64_t es = 2) {
    return elems > 0 && (elems * es) % 16 == 0 && elems * es < (int64_t(1) << 40);
}

// The head sizes whose kernels this build has (of 64, 128 and 256).
bool head_on(int d) {
    switch (d) {
#ifdef FA_ATTN_HD_64
    case 64: return true;
#endif
#ifdef FA_ATTN_HD_128
    case 128: return true;
#endif
#ifdef FA_ATTN_HD_256
    case 256: return true;
#endif
    default: return false;
    }
}

// Keys per tile at head size d, and the block sizes the producer's TMA boxes serve: a power of
// two in [8, BN] (a box per page, BN / block pages a tile), or a multiple of BN (a box of BN
// rows at a row offset inside the block).
int tile_keys(int d) { return d > 128 ? 64 : 128; }

bool block_on(int64_t bs, int d) {
    const int bn = tile_keys(d);
    return (bs >= 8 && bs <= bn && ilog2_exact(bs) >= 0) || (bs > bn && bs % bn == 0);
}

} // namespace

bool fa_sm90__serves_head(int d) { return head_on(d); }

// Whether this family runs the call (every condition in one place: the op and its check use it);
// *why names the first unmet condition (for the dispatch's reports and tests).
bool fa_sm90__accepts(const fa_attn_args *a, const char **why) {
    const char *w = nullptr;
    const bool paged = a->cu_seqlens_k == nullptr;
    // an fp8 query: e4m3 q, k, v at head 64, 128 or 256, out bf16 / f16
    const bool q8 = a->q_dtype == FA_DTYPE_FP8_E4M3;
    // a 16-bit query over an fp8 cache (KV8): heads 64, 128 and 256
    const bool kv8 = !q8 && (a->kv_dtype == FA_DTYPE_FP8_E4M3 || a->kv_dtype == FA_DTYPE_FP8_E5M2);
    const int64_t es = q8 ? 1 : 2, kes = q8 || kv8 ? 1 : 2; // bytes of a q, of a k / v element
    if (q8 && a->kv_dtype != FA_DTYPE_FP8_E4M3)
        w = "kv_dtype (fp8_e4m3 with an fp8 query)";
    else if (q8 && a->out_dtype != FA_DTYPE_BF16 && a->out_dtype != FA_DTYPE_F16)
        w = "out_dtype (bf16 or f16 with an fp8 query)";
    else if (q8 &&
             ((a->head_size != 64 && a->head_size != 128 && a->head_size != 256) || !head_on(a->head_size)))
        w = "head_size (64, 128 or 256, compiled, with an fp8 query)";
    else if (!q8 && ((a->q_dtype != FA_DTYPE_BF16 && a->q_dtype != FA_DTYPE_F16) ||
                     (a->kv_dtype != a->q_dtype && !kv8)))
        w = "q / kv dtype (bf16 or f16, the same, or an fp8 cache)";
    else if (!head_on(a->head_size))
        w = "head_size (64, 128 or 256, compiled)";
    else if (!paged && (a->num_keys < 1 || a->num_keys >= (int64_t(1) << 31) - 1024))
        w = "dense K/V without num_keys in [1, 2^31 - 1024)";
    else if (a->num_splits > 1 && (a->split_out == nullptr || a->split_lse == nullptr))
        w = "split-KV";
    else if (a->q_head_group != 0 && a->q_head_group != a->num_heads_q && !stride_ok(a->q_group_stride, es))
        w = "q_group_stride (TMA: a multiple of 16 bytes below 2^40)";
    else if (!(a->softmax_scale > 0.f))
        w = "softmax_scale <= 0";
    else if (paged && (a->num_blocks < 1 || a->num_blocks >= (int64_t(1) << 31)))
        w = "num_blocks";
    else if (a->num_heads_q > 65535)
        w = "num_heads_q";
    else if (!stride_ok(a->q_token_stride, es) || !stride_ok(a->q_head_stride, es) ||
             (paged && (!stride_ok(a->k_block_stride, kes) || !stride_ok(a->v_block_stride, kes))) ||
             !stride_ok(a->k_row_stride, kes) || !stride_ok(a->k_head_stride, kes) ||
             !stride_ok(a->v_row_stride, kes) || !stride_ok(a->v_head_stride, kes))
        w = "strides (TMA: multiples of 16 bytes below 2^40)";
    else if ((reinterpret_cast<uintptr_t>(a->q) | reinterpret_cast<uintptr_t>(a->k) |
              reinterpret_cast<uintptr_t>(a->v) | reinterpret_cast<uintptr_t>(a->out)) %
                 16 !=
             0)
        w = "alignment";
    if (why != nullptr) *why = w;
    return w == nullptr;
}

namespace {

// (sw: the 128-byte swizzle, or 64-byte for the 64-byte rows of an fp8 query at head 64)
int encode(EncodeTiledFn fn, CUtensorMap *tm, CUtensorMapDataType dt, const void *base, int rank,
           const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
           CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_128B) {
    const cuuint32_t estr[5] = {1, 1, 1, 1, 1};
    return fn(tm, dt, static_cast<cuuint32_t>(rank), const_cast<void *>(base), dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : 1;
}

} // namespace

namespace {

using KernelFn = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, fa_sm90::AttnParams);

// The kernel of head size D for the call's dtype and softcap, plain or general (split-KV, ALiBi
// or sinks), and its shared memory.
template <int D, bool General, bool Persist = false> KernelFn pick_kernel(bool f16, bool softcap, int &smem) {
    using namespace fa_sm90;
    smem = static_cast<int>(Smem<lib_stages(D), D>::kAlloc);
    return f16 ? (softcap ? sm90_attention_kernel<__half, true, D, General, false, 0, Persist>
                          : sm90_attention_kernel<__half, false, D, General, false, 0, Persist>)
               : (softcap ? sm90_attention_kernel<__nv_bfloat16, true, D, General, false, 0, Persist>
                          : sm90_attention_kernel<__nv_bfloat16, false, D, General, false, 0, Persist>);
}
// (persist: the walking kernel, for the plain kernels sm90_persistent takes)
template <int D> KernelFn pick_kernel(bool f16, bool softcap, bool general, bool persist, int &smem) {
    if constexpr (fa_sm90::sm90_persistent(false, D)) {
        if (persist && !general) return pick_kernel<D, false, true>(f16, softcap, smem);
    }
    return general ? pick_kernel<D, true>(f16, softcap, smem) : pick_kernel<D, false>(f16, softcap, smem);
}
// The same for an fp8 query at head size D (f16: out's dtype).
template <int D, bool General> KernelFn pick_kernel_fp8(bool f16, bool softcap, int &smem) {
    using namespace fa_sm90;
    smem = static_cast<int>(Smem<fp8_stages(D), D, true>::kAlloc);
    return f16 ? (softcap ? sm90_attention_kernel<__half, true, D, General, true>
                          : sm90_attention_kernel<__half, false, D, General, true>)
               : (softcap ? sm90_attention_kernel<__nv_bfloat16, true, D, General, true>
                          : sm90_attention_kernel<__nv_bfloat16, false, D, General, true>);
}
template <int D> KernelFn pick_kernel_fp8(bool f16, bool softcap, bool general, int &smem) {
    return general ? pick_kernel_fp8<D, true>(f16, softcap, smem)
                   : pick_kernel_fp8<D, false>(f16, softcap, smem);
}
// The same for a 16-bit query over an fp8 cache (f16: the query's dtype).
template <int D, bool General, int KV8> KernelFn pick_kernel_kv8(bool f16, bool softcap, int &smem) {
    using namespace fa_sm90;
    smem = static_cast<int>(Smem<kv8_stages(D), D, false, kv8_raw_stages(D)>::kAlloc);
    return f16 ? (softcap ? sm90_attention_kernel<__half, true, D, General, false, KV8>
                          : sm90_attention_kernel<__half, false, D, General, false, KV8>)
               : (softcap ? sm90_attention_kernel<__nv_bfloat16, true, D, General, false, KV8>
                          : sm90_attention_kernel<__nv_bfloat16, false, D, General, false, KV8>);
}
template <int D> KernelFn pick_kernel_kv8(bool e5m2, bool f16, bool softcap, bool general, int &smem) {
    return general ? (e5m2 ? pick_kernel_kv8<D, true, 2>(f16, softcap, smem)
                           : pick_kernel_kv8<D, true, 1>(f16, softcap, smem))
                   : (e5m2 ? pick_kernel_kv8<D, false, 2>(f16, softcap, smem)
                           : pick_kernel_kv8<D, false, 1>(f16, softcap, smem));
}

} // namespace

// Launches the family for a call fa_sm90__accepts took. skip_rows: sequences with Lq * G at or
// below it are left to the decode tile. num_sms: the persistent grid's size (0: one CTA an item).
// pack: GQA packing where the query-head group allows it (the backend's fa_cuda_gqa_pack mode).
// encode_fn: cuTensorMapEncodeTiled (the backend resolves it once). Returns FA_OK or fails with
// the CUDA / driver error.
fa_status fa_sm90__launch(const fa_attn_args *a, void *encode_fn, int skip_rows, int num_sms, bool pack,
                          FaDevErr *err_word, cudaStream_t stream, const fa_bu_err *e) {
    using namespace fa_sm90;
    EncodeTiledFn fn = reinterpret_cast<EncodeTiledFn>(encode_fn);
    if (fn == nullptr)
        return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: cuTensorMapEncodeTiled unavailable");
    CUtensorMap tq, tk, tv;
    const int D = a->head_size, bn = tile_keys(D);
    // query-head groups (DCP): one launch per group of qg heads, its q / out / LSE / slopes /
    // sinks from the group's first head (every group reads the same KV heads)
    const int qg = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    const int ngroups = a->num_heads_q / qg;
    // an fp8 query: q, k, v e4m3 (1 byte, column blocks of 128 dims; at head 64 one of 64 dims,
    // rows of 64 bytes with the 64-byte swizzle), out in out_dtype
    const bool q8 = a->q_dtype == FA_DTYPE_FP8_E4M3;
    // a 16-bit query over an fp8 cache: q in 64-dim column blocks, k / v maps of the raw codes
    // (uint8, one unswizzled box of D bytes a row per page)
    const bool kv8 = !q8 && (a->kv_dtype == FA_DTYPE_FP8_E4M3 || a->kv_dtype == FA_DTYPE_FP8_E5M2);
    const int64_t es = q8 ? 1 : 2, kes = q8 || kv8 ? 1 : 2;
    const int colw = q8 ? (D == 64 ? 64 : 128) : 64, kcolw = kv8 ? D : colw;
    const CUtensorMapSwizzle sw = colw * es == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
    const bool f16 = (q8 ? a->out_dtype : a->q_dtype) == FA_DTYPE_F16;
    const bool softcap = a->softcap > 0.f;
    const CUtensorMapDataType dt = q8    ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                         : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const CUtensorMapDataType kdt = kv8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : dt;
    // dense K/V: the paged maps over one "block" of num_keys rows; a tile's box starts at the
    // sequence's first key row plus the tile's keys (the kernel adds cu_seqlens_k[b])
    const bool dense = a->cu_seqlens_k != nullptr;
    const int64_t bsz = dense ? a->num_keys : a->block_size, nblk = dense ? 1 : a->num_blocks;
    const int64_t kbs = dense ? a->k_row_stride : a->k_block_stride; // (any valid stride: one block)
    const int64_t vbs = dense ? a->v_row_stride : a->v_block_stride;
    const int box_rows = dense || a->block_size >= bn ? bn : a->block_size;
    const int cols = D / colw;
    // GQA packing: a row block's 128 rows are (token, query head) pairs of one KV head, 128 / G
    // tokens x the G query heads of a group, so that a short query (a speculative-decoding verify
    // step of a few tokens) fills the warpgroups' rows and each KV head's K / V is streamed once a
    // row block rather than once a query head. Taken where the caller asks (pack: the backend's
    // fa_cuda_gqa_pack mode) and G = qg / Hkv is a power of two in [2, 64] (a Q box of {column
    // block, G heads, 64 / G tokens}). A row's result does not depend on it outside split-KV (the
    // same keys in the same tiles, rows independent in the GEMMs and the softmax:
    // test_gpu_attention's "gqa packing" runs its cases both ways, bit for bit).
    const int G = qg / a->num_heads_kv, gl = ilog2_exact(G);
    const int pack_log2 =
        pack && G >= 2 && G <= kWgRows && gl > 0 && (int64_t(a->num_tokens) << gl) < INT_MAX ? gl : 0;
    // q: one map a group, encoded right before its launch; the first and the last group's here,
    // before anything runs (the groups' bases are the first's plus multiples of a 16-byte
    // stride, so every map between them encodes when those two do)
    const auto encode_q = [&](int gi, CUtensorMap *tm) {
        const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)qg, (cuuint64_t)a->num_tokens};
        const cuuint64_t str[2] = {(cuuint64_t)(a->q_head_stride * es), (cuuint64_t)(a->q_token_stride * es)};
        const cuuint32_t box[3] = {(cuuint32_t)colw, 1u << pack_log2, (cuuint32_t)(kWgRows >> pack_log2)};
        const void *qbase = static_cast<const char *>(a->q) + gi * a->q_group_stride * es;
        return encode(fn, tm, dt, qbase, 3, dims, str, box, sw);
    };
    if (encode_q(ngroups - 1, &tq) || encode_q(0, &tq))
        return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: the tensor map of q failed to encode");
    const cuuint64_t kdims[4] = {(cuuint64_t)D, (cuuint64_t)bsz, (cuuint64_t)a->num_heads_kv,
                                 (cuuint64_t)nblk};
    const cuuint32_t kvbox[4] = {(cuuint32_t)kcolw, (cuuint32_t)box_rows, 1, 1};
    {
        const cuuint64_t str[3] = {(cuuint64_t)(a->k_row_stride * kes), (cuuint64_t)(a->k_head_stride * kes),
                                   (cuuint64_t)(kbs * kes)};
        if (encode(fn, &tk, kdt, a->k, 4, kdims, str, kvbox, kv8 ? CU_TENSOR_MAP_SWIZZLE_NONE : sw))
            return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: the tensor map of k failed to encode");
    }
    if (kv8) { // V as K: [blocks][heads][rows][D] bytes, a box of D bytes x box_rows a page
        const cuuint64_t str[3] = {(cuuint64_t)a->v_row_stride, (cuuint64_t)a->v_head_stride,
                                   (cuuint64_t)vbs};
        if (encode(fn, &tv, kdt, a->v, 4, kdims, str, kvbox, CU_TENSOR_MAP_SWIZZLE_NONE))
            return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: the tensor map of v failed to encode");
    } else {
        // V as [blocks][heads][column blocks][rows][colw]: one box holds all of a page's column
        // blocks (128 bytes a row of a column block; fp8 at head 64: one block of 64 bytes)
        const cuuint64_t dims[5] = {(cuuint64_t)colw, (cuuint64_t)bsz, (cuuint64_t)cols,
                                    (cuuint64_t)a->num_heads_kv, (cuuint64_t)nblk};
        const cuuint64_t str[4] = {(cuuint64_t)(a->v_row_stride * es), 128,
                                   (cuuint64_t)(a->v_head_stride * es), (cuuint64_t)(vbs * es)};
        const cuuint32_t box[5] = {(cuuint32_t)colw, (cuuint32_t)box_rows, (cuuint32_t)cols, 1, 1};
        if (encode(fn, &tv, dt, a->v, 5, dims, str, box, sw))
            return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: the tensor map of v failed to encode");
    }
    AttnParams p;
    memset(&p, 0, sizeof(p));
    p.out = a->out;
    p.out_token_stride = a->out_token_stride;
    p.out_head_stride = a->out_head_stride;
    p.lse = a->lse;
    p.lse_head_stride = a->lse_head_stride;
    p.cu_seqlens_q = a->cu_seqlens_q;
    p.seqused_k = a->seqused_k;
    p.cu_seqlens_k = a->cu_seqlens_k;
    p.block_table = dense ? nullptr : a->block_table;
    p.split_plan = a->split_plan;
    p.block_table_stride = a->block_table_stride;
    p.err_word = err_word;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.q_token_stride = a->q_token_stride;
    p.q_head_stride = a->q_head_stride;
    p.k_block_stride = dense ? 0 : a->k_block_stride;
    p.k_row_stride = a->k_row_stride;
    p.k_head_stride = a->k_head_stride;
    p.v_block_stride = dense ? 0 : a->v_block_stride;
    p.v_row_stride = a->v_row_stride;
    p.v_head_stride = a->v_head_stride;
    p.num_blocks = static_cast<int32_t>(nblk);
    p.num_seqs = a->num_seqs;
    p.num_heads_q = qg;
    p.group = qg / a->num_heads_kv;
    p.block_size = static_cast<int32_t>(bsz);
    p.block_shift = dense ? 31 : ilog2_exact(a->block_size); // dense: block 0 for every key
    // a block size no box serves: cp.async in pages of 8 keys (the maps are encoded, unused)
    p.gather = !dense && !block_on(a->block_size, D) ? 1 : 0;
    p.box_rows = p.gather ? 8 : box_rows;
    p.pages_per_tile = bn / p.box_rows;
    // TMA boxes of pages, at least two a tile, and query heads in pairs of one KV head: a cluster
    // of two CTAs (heads 2k, 2k + 1) shares every K / V box (half the boxes a CTA issues). Off
    // (kMcastOn): with the 3-stage ring the pair measured slower on every paged row it took (H100,
    // 2026-12-06, docs/perf.md: 1.13-1.15x the time of one CTA a head at 1 x 16384 and 4 x 4096,
    // causal and not; it had been 0.97-0.98 with the 2-stage ring on an H200). Kept working for
    // the shapes it may win on another card: head 128 with queries of at least kMcastMinRows.
    constexpr bool kMcastOn = false;
    constexpr int kMcastMinRows = 4096;
    p.mcast = kMcastOn && pack_log2 == 0 && !q8 && !kv8 && !dense && !p.gather && p.pages_per_tile >= 2 &&
                      D == 128 && a->max_seqlen_q >= kMcastMinRows && qg % 2 == 0 &&
                      (qg / a->num_heads_kv) % 2 == 0
                  ? 2
                  : 1;
    p.box_log2 = ilog2_exact(p.box_rows); // a power of two in [8, bn]
    p.window_left = a->window_left < 0 ? -1 : a->window_left;
    p.window_right = a->causal ? 0 : (a->window_right < 0 ? -1 : a->window_right);
    p.skip_rows = skip_rows;
    const bool split = a->num_splits > 1;
    p.num_splits = split ? a->num_splits : 1;
    p.num_tokens = a->num_tokens;
    p.split_heads = a->num_heads_q;
    p.split_out = split ? a->split_out : nullptr;
    p.split_lse = split ? a->split_lse : nullptr;
    const bool extra = a->alibi_slopes != nullptr || a->sinks != nullptr;
    p.alibi_slopes = a->alibi_slopes;
    p.alibi_batch_stride = a->alibi_batch_stride;
    p.sinks = a->sinks;
    p.q_descale = q8 ? a->q_descale : nullptr;
    p.k_descale = q8 || kv8 ? a->k_descale : nullptr;
    p.v_descale = q8 || kv8 ? a->v_descale : nullptr;
    p.descale_batch_stride = a->descale_batch_stride;
    p.descale_head_stride = a->descale_head_stride;
    p.k_scale = a->k_scale;
    p.v_scale = a->v_scale;
    const float log2e = 1.44269504088896340736f;
    p.scale_log2 = softcap ? a->softcap * log2e : a->softmax_scale * log2e;
    p.sc_cap = softcap ? a->softmax_scale / a->softcap : 0.f;
    p.pack_log2 = pack_log2;
    static_assert(kBlockM == 128 && kWgRows == 64, "sm90 family: row blocks of 2^7 rows, 2^6 a warpgroup");
    p.tile_shift = 7 - pack_log2; // log2(kBlockM >> pack_log2)
    p.item_heads = pack_log2 > 0 ? a->num_heads_kv : qg;
    const int64_t tiles = (static_cast<int64_t>(a->num_tokens) >> p.tile_shift) + a->num_seqs + 1;
    if (tiles > 0x7fffffffLL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "sm90 family: %lld row blocks", (long long)tiles);
    // the work items and the grid: one CTA an item, or with work counters (the plain kernels at
    // heads 64 / 128, the TMA producer without the multicast pair) one CTA an SM taking items
    p.items_x = static_cast<int32_t>(tiles);
    // one sequence: each head's row blocks longest-first, head after head (the CTAs running at
    // once share few heads' K / V; 0.99 of heads innermost's time at 1 x 16384 in two H100 calls);
    // more: heads innermost, one longest-first list (0.97-0.98 at 4 x 4096 / 16 x 1024 paged).
    // GQA packing: head after head too, so that the row blocks of one (sequence, KV head), whose
    // short queries read nearly the same keys, run side by side and share them through the L2
    // (heads innermost put a KV head's second row block a whole round of heads after its first)
    p.heads_outer = a->num_seqs == 1 || pack_log2 > 0 ? 1 : 0;
    p.num_items = tiles * p.item_heads * p.num_splits;
    int64_t grid = p.num_items;
    const bool dyn = a->work_counters != nullptr && num_sms >= 1 && !q8 && !kv8 && !p.gather &&
                     p.mcast == 1 && sm90_persistent(split || extra, D);
    p.work_counter = dyn ? a->work_counters : nullptr;
    if (dyn) grid = std::min<int64_t>(grid, num_sms);
    if (p.num_items > 0x7fffffffLL)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "sm90 family: %lld work items (row blocks x heads x splits)",
                          (long long)p.num_items);
    KernelFn kern = nullptr;
    int smem = 0;
    const bool e5m2 = a->kv_dtype == FA_DTYPE_FP8_E5M2;
    switch (q8 ? -D : (kv8 ? 1000 + D : D)) {
#ifdef FA_ATTN_HD_64
    case -64: kern = pick_kernel_fp8<64>(f16, softcap, split || extra, smem); break;
    case 1064: kern = pick_kernel_kv8<64>(e5m2, f16, softcap, split || extra, smem); break;
#endif
#ifdef FA_ATTN_HD_128
    case -128: kern = pick_kernel_fp8<128>(f16, softcap, split || extra, smem); break;
    case 1128: kern = pick_kernel_kv8<128>(e5m2, f16, softcap, split || extra, smem); break;
#endif
#ifdef FA_ATTN_HD_256
    case -256: kern = pick_kernel_fp8<256>(f16, softcap, split || extra, smem); break;
    case 1256: kern = pick_kernel_kv8<256>(e5m2, f16, softcap, split || extra, smem); break;
#endif
#ifdef FA_ATTN_HD_64
    case 64: kern = pick_kernel<64>(f16, softcap, split || extra, dyn, smem); break;
#endif
#ifdef FA_ATTN_HD_128
    case 128: kern = pick_kernel<128>(f16, softcap, split || extra, dyn, smem); break;
#endif
#ifdef FA_ATTN_HD_256
    case 256: kern = pick_kernel<256>(f16, softcap, split || extra, false, smem); break;
#endif
    default: break;
    }
    if (kern == nullptr)
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED, "sm90 family: no kernel built for head_size %d", D);
    cudaError_t ce = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int gi = 0; gi < ngroups && ce == cudaSuccess; ++gi) {
        AttnParams pg = p;
        const int64_t h0 = static_cast<int64_t>(gi) * qg;
        pg.out = static_cast<char *>(a->out) + h0 * a->out_head_stride * 2;
        pg.lse = a->lse != nullptr ? a->lse + h0 * a->lse_head_stride : nullptr;
        pg.q = static_cast<const char *>(a->q) + gi * a->q_group_stride * es;
        pg.alibi_slopes = a->alibi_slopes != nullptr ? a->alibi_slopes + h0 : nullptr;
        pg.sinks = a->sinks != nullptr ? a->sinks + h0 : nullptr;
        pg.split_out = split ? a->split_out + h0 * D : nullptr;
        pg.split_lse = split ? a->split_lse + h0 * a->num_tokens : nullptr;
        // the decode tile routes by Lq * (Hq / Hkv) <= skip_rows; here G is qg / Hkv = (Hq / Hkv) /
        // ngroups, and Lq * G * ngroups <= skip_rows exactly when Lq * G <= skip_rows / ngroups
        pg.skip_rows = skip_rows / ngroups;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(static_cast<unsigned>(grid));
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = static_cast<size_t>(smem);
        cfg.stream = stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = static_cast<unsigned>(p.mcast);
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = p.mcast > 1 ? 1 : 0;
        if (gi > 0 && encode_q(gi, &tq)) // (checked above: not expected)
            return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 family: the tensor map of q failed to encode");
        ce = cudaLaunchKernelEx(&cfg, kern, tq, tk, tv, pg);
        if (ce != cudaSuccess && pg.mcast > 1) {
            // a launch the device (partition) refuses with the pair (cluster size, resources):
            // the same call with one CTA a head (the pair changes which CTA issues a box, not a
            // result); an error that is not the cluster's comes back from this launch too
            cudaGetLastError();
            pg.mcast = 1;
            cfg.numAttrs = 0;
            ce = cudaLaunchKernelEx(&cfg, kern, tq, tk, tv, pg);
        }
    }
    if (ce != cudaSuccess)
        return fa_bu_fail(e, FA_ERR_BACKEND, "sm90 kernel launch: %s", cudaGetErrorString(ce));
    return FA_OK;
}

// The driver's cuTensorMapEncodeTiled through the runtime (no -lcuda), or NULL.
void *fa_sm90__encode_fn(void) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return p;
}
