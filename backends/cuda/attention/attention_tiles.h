// attention_tiles.h - the tile facts of the attention kernel family, in one place.
//
// The kernel's tile configurations (attention_kernel.cuh: PrefillCfg, DecodeCfg) are built
// from these constexprs and static_assert against them; the backend's capability block
// (fa_backend_caps, filled in fa_cuda.cu through fa_cuda__attention_caps) is read from them. So
// what the planner is told is what the kernels are compiled with.
//
// Per padded head dim D (a compiled width):
//
//   D          prefill rows x stage keys (warps x fragments)   softmax step   decode tile
//   <= 64      128 x 64  (4 x 2)                               64 keys        16 rows x 64 keys
//   65..128    128 x 64  (4 x 2)                               32 keys        16 rows x 32 keys
//   > 128       64 x 32  (4 x 1)                               32 keys        16 rows x 32 keys
//
// A "step" is one online-softmax update; both tiles walk a row's keys in the same steps, so a row
// gets the same bits from either (num_splits = 1 is batch invariant). The prefill tile moves
// stage-keys per pipeline stage (two stages) in steps of step-keys; the decode tile moves one step
// per stage.
#pragma once

namespace fa_attn {

// ---- tile shapes -------------------------------------------------------------------------------
// The tested shape, fixed (the former -DFA_ATTN_* experiment overrides are these constants now;
// an experiment edits them here, and the static_asserts below say what must still hold).
// Heads 65..128: keys per softmax step, prefill warps x m16 fragments per warp, keys per
// prefill stage, __launch_bounds__ minimum blocks per SM of the prefill tile.
constexpr int kStepKeysMid = 32;
constexpr int kPrefillWarpsMid = 4;
constexpr int kPrefillFragsMid = 2;
constexpr int kPrefillStageKeysMid = 64;
constexpr int kPrefillMinBlocks = 2;          // every width
// decode: K + V bytes of the pipeline stages (fp8: half of it raw, the converted tile the other
// half); 32 KB lets 6 CTAs share an SM at head 128 (docs/perf.md)
constexpr int kDecodeStageBytes = 32 * 1024;
constexpr int kDecodeMinStages = 2;
constexpr int kDecodeMaxStages = 6;

// keys per online-softmax step
constexpr int step_keys(int D) { return D <= 64 ? 64 : (D <= 128 ? kStepKeysMid : 32); }
// prefill: warps (stacked along the rows), m16 fragments per warp, keys per pipeline stage
constexpr int prefill_warps(int D) { return D > 64 && D <= 128 ? kPrefillWarpsMid : 4; }
constexpr int prefill_frags(int D) { return D > 64 && D <= 128 ? kPrefillFragsMid : (D <= 128 ? 2 : 1); }
constexpr int prefill_stage_keys(int D) {
    return D > 64 && D <= 128 ? kPrefillStageKeysMid : (D <= 128 ? 64 : 32);
}
constexpr int prefill_min_blocks(int) { return kPrefillMinBlocks; }
constexpr int prefill_rows(int D) { return prefill_warps(D) * prefill_frags(D) * 16; }
constexpr int kPrefillStages = 2;
// decode: one warp, one m16 fragment: 16 rows (query rows x query heads of one KV head)
constexpr int kDecodeRows = 16;
constexpr int kDecodeMinBlocks = 8;          // __launch_bounds__ minimum blocks per SM
constexpr int decode_keys(int D) { return step_keys(D); }
constexpr int decode_stage_bytes(int D, bool fp8) { return 2 * step_keys(D) * D * (fp8 ? 1 : 2); }
constexpr int decode_stage_fit(int D, bool fp8) {
    return (fp8 ? kDecodeStageBytes / 2 : kDecodeStageBytes) / decode_stage_bytes(D, fp8);
}
constexpr int decode_stages(int D, bool fp8) {
    return decode_stage_fit(D, fp8) > kDecodeMaxStages
               ? kDecodeMaxStages
               : (decode_stage_fit(D, fp8) < kDecodeMinStages ? kDecodeMinStages : decode_stage_fit(D, fp8));
}

// the multi-warp decode tile (decode_mw.cu): the sequences with one query token on widths 64, 128
// and 256, up to mw_max_group query heads per KV head (16, 8 at 256: the O^T accumulators of 16
// heads would not fit the registers); kMwWarps warps a CTA split the keys in tiles of mw_keys,
// each warp with its own ring of mw_stages (3) stages of K and V (16-bit at 256 holds one CTA an
// SM, 192 KiB; 4 stages were measured slower for E4M3 at 128 and for 16-bit at 128: perf.md)
constexpr int kMwWarps = 4;
constexpr int kMwMaxGroup = 16;
// __launch_bounds__ minimum blocks per SM (nf: n8 fragments of query heads, 1 for G <= 8): 4 for
// E4M3 at head 64 and at head 128 with nf 1 (registers <= 128 without spills, a 3-stage ring at
// 64), so that 16 warps an SM hide the conversion's dependent chains; else 2
constexpr int mw_min_blocks(int D, bool fp8, int nf) {
    return fp8 && (D == 64 || (D == 128 && nf == 1)) ? 4 : 2;
}
constexpr bool mw_width(int D) { return D == 64 || D == 128 || D == 256; }
constexpr int mw_max_group(int D) { return D > 128 ? 8 : kMwMaxGroup; }
constexpr int mw_keys(int D) { return D <= 64 ? 32 : 16; }
constexpr int mw_stages(int, bool) { return 3; }
// a deeper ring, built for E4M3 at head 64 only: a decode call that fills the SMs (more than two
// CTAs an SM) with long splits (kMwDeepKeys keys and more) streams faster with 6 stages (0.74-0.87
// of the 3-stage time at batch 64 / 256 with 8k / 32k keys, H200), shorter ones slower (1.02-1.20:
// the prologue's tiles and the larger code); the stage count changes no arithmetic (a row's bits
// are the same with either ring)
constexpr int kMwDeepStages = 6;
constexpr int kMwDeepKeys = 8192;
constexpr bool mw_deep(int D, bool fp8) { return fp8 && D == 64; }
constexpr int mw_ring_bytes(int D, bool fp8, bool deep = false) {
    return kMwWarps * (deep ? kMwDeepStages : mw_stages(D, fp8)) * 2 * mw_keys(D) * D * (fp8 ? 1 : 2);
}
// the warps' combine rows (floats): 16-bit K/V D + 4; E4M3 D + 20, its 8 lane groups of D / 8 dims
// at a stride of D / 8 + 2 (decode_mw.cu: conflict-free float2 writes)
constexpr int mw_combine_ld(int D, bool fp8) { return fp8 ? D + 20 : D + 4; }
constexpr int mw_combine_bytes(int D, bool fp8) {
    return kMwWarps * kMwMaxGroup * mw_combine_ld(D, fp8) * 4 + 2 * kMwWarps * kMwMaxGroup * 4;
}
constexpr int mw_smem_bytes(int D, bool fp8, bool deep = false) {
    return mw_ring_bytes(D, fp8, deep) > mw_combine_bytes(D, fp8) ? mw_ring_bytes(D, fp8, deep)
                                                                  : mw_combine_bytes(D, fp8);
}

// What the constants must keep: a step is a multiple of 16 keys with a power-of-two count of n8
// fragments (the softmax trees), a prefill stage is whole steps, the prefill rows fit one thread
// each of the CTA in the epilogue, and the values are today's tested shape (docs/cuda.md table).
static_assert(kStepKeysMid % 16 == 0 && ((kStepKeysMid / 8) & (kStepKeysMid / 8 - 1)) == 0,
              "step keys: multiple of 16, power-of-two n8 fragments");
static_assert(kPrefillStageKeysMid % kStepKeysMid == 0, "a prefill stage is whole softmax steps");
static_assert(kPrefillWarpsMid * kPrefillFragsMid * 16 <= kPrefillWarpsMid * 32,
              "one epilogue thread per prefill row");
static_assert(kStepKeysMid == 32 && kPrefillWarpsMid == 4 && kPrefillFragsMid == 2 &&
                  kPrefillStageKeysMid == 64 && kPrefillMinBlocks == 2,
              "the tested prefill shape (changing it changes bits: step keys set the softmax order)");
static_assert(kDecodeStageBytes == 32 * 1024 && kDecodeMinStages == 2 && kDecodeMaxStages == 6,
              "the tested decode stage budget");
static_assert(decode_stages(128, false) == 2 && decode_stages(32, false) == 4 &&
                  decode_stages(256, true) == kDecodeMinStages,
              "decode stages: head 32 gets 4, the others 2 (docs/cuda.md)");
static_assert(prefill_rows(64) == 128 && prefill_rows(128) == 128 && prefill_rows(256) == 64 &&
                  prefill_stage_keys(128) == 64 && prefill_stage_keys(256) == 32,
              "prefill tiles: 128 x 64 up to head 128, 64 x 32 above");

// ---- what calls the kernels accept -------------------------------------------------------------
constexpr int kBlockSizeMultiple = 1;        // paged block sizes: any size >= 1 (the loader
                                             // looks up each key's block; sizes 1, 3 and 8 are
                                             // in test_gpu_attention)
constexpr int kHeadSizeMultiple = 8;         // head sizes: multiples of this up to the last width
constexpr int kAlignBytes = 16;              // q / out / 16-bit K/V pointers and strides
constexpr int kMaxSplits = 128;              // splits of one call the planner may use (the
                                             // combine reads any count; the grid allows 65535)

// ---- cost constants of the planner's decode model (fitted to the H200 split sweeps,
// docs/perf.md; not measured per device) -------------------------------------------------------
constexpr float kDecodeStepUs = 1.6f;        // one decode step of one tile at head 128, alone
constexpr float decode_step_factor(int D) { return D <= 64 ? 0.8f : (D <= 128 ? 1.0f : 1.3f); }
constexpr float kSmBytesPerUs = 32.0f * 1024.0f;
constexpr float kMwStepUs = 1.0f;            // one step of the multi-warp decode tile, alone
// head 256: a step moves 64 KiB of 16-bit K/V, more than one SM pulls in 1.0 us (1.38 us measured
// at 8 x 8k, 32/8 heads, one split, H200); head 64: a step is 128 keys, twice the softmax work of
// head 128's 64 (1 x 1k, 32/8 heads: 10.2 us in one split of 8 steps, 9.1 in 4, H200)
constexpr float mw_step_factor(int D) { return D > 128 ? 1.4f : (D <= 64 ? 1.3f : 1.0f); }
constexpr float kCtaUs = 0.008f;
// the split combine: 6 us as a plain launch, 4 us on sm_90+, where it is launched as a
// programmatic dependent of the decode kernel (H200, 2026-12-03: 0.7-1.1 us less a call at
// 1 x 1k); 0.05 us a split, as it reads 16 splits' rows a round trip (fitted to that day's
// split sweeps: perf.md)
constexpr float kCombineUs = 6.0f;
constexpr float kCombineUsPdl = 4.0f;
constexpr float kCombineUsPerSplit = 0.05f;

static_assert(kDecodeRows == 16, "the decode tile is one m16 fragment of one warp");
static_assert(step_keys(64) == 64 && step_keys(256) == 32, "steps: 64 keys up to head 64, else 32");

}  // namespace fa_attn
