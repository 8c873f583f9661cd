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

// Tile experiments (65 < D <= 128 only): -D overrides for measurements, never in a build that
// ships; the defaults are the tested shape.
#ifndef FA_ATTN_STEP
#define FA_ATTN_STEP 32
#endif
#ifndef FA_ATTN_PF_WM
#define FA_ATTN_PF_WM 4
#endif
#ifndef FA_ATTN_PF_MF
#define FA_ATTN_PF_MF 2
#endif
#ifndef FA_ATTN_PF_BN
#define FA_ATTN_PF_BN 64
#endif
#ifndef FA_ATTN_PF_MINB
#define FA_ATTN_PF_MINB 2
#endif
// decode: K + V bytes of the pipeline stages (fp8: half of it raw, the converted tile the other
// half); 32 KB lets 6 CTAs share an SM at head 128 (docs/perf.md)
#ifndef FA_ATTN_DEC_STAGE_BYTES
#define FA_ATTN_DEC_STAGE_BYTES (32 * 1024)
#endif

namespace fa_attn {

// ---- tile shapes -------------------------------------------------------------------------------
// keys per online-softmax step
constexpr int step_keys(int D) { return D <= 64 ? 64 : (D <= 128 ? FA_ATTN_STEP : 32); }
// prefill: warps (stacked along the rows), m16 fragments per warp, keys per pipeline stage
constexpr bool prefill_knobbed(int D) { return D > 64 && D <= 128; }
constexpr int prefill_warps(int D) { return prefill_knobbed(D) ? FA_ATTN_PF_WM : 4; }
constexpr int prefill_frags(int D) { return prefill_knobbed(D) ? FA_ATTN_PF_MF : (D <= 128 ? 2 : 1); }
constexpr int prefill_stage_keys(int D) { return prefill_knobbed(D) ? FA_ATTN_PF_BN : (D <= 128 ? 64 : 32); }
constexpr int prefill_min_blocks(int D) { return prefill_knobbed(D) ? FA_ATTN_PF_MINB : 2; }
constexpr int prefill_rows(int D) { return prefill_warps(D) * prefill_frags(D) * 16; }
constexpr int kPrefillStages = 2;
// decode: one warp, one m16 fragment: 16 rows (query rows x query heads of one KV head)
constexpr int kDecodeRows = 16;
constexpr int kDecodeMinBlocks = 8;          // __launch_bounds__ minimum blocks per SM
constexpr int decode_keys(int D) { return step_keys(D); }
constexpr int decode_stage_bytes(int D, bool fp8) { return 2 * step_keys(D) * D * (fp8 ? 1 : 2); }
constexpr int decode_stage_fit(int D, bool fp8) {
    return (fp8 ? FA_ATTN_DEC_STAGE_BYTES / 2 : FA_ATTN_DEC_STAGE_BYTES) / decode_stage_bytes(D, fp8);
}
constexpr int decode_stages(int D, bool fp8) {
    return decode_stage_fit(D, fp8) > 6 ? 6 : (decode_stage_fit(D, fp8) < 2 ? 2 : decode_stage_fit(D, fp8));
}

// ---- what calls the kernels accept -------------------------------------------------------------
constexpr int kBlockSizeMultiple = 16;       // paged block sizes: positive multiples of this
constexpr int kHeadSizeMultiple = 8;         // head sizes: multiples of this up to the last width
constexpr int kAlignBytes = 16;              // q / out / 16-bit K/V pointers and strides
constexpr int kMaxSplits = 128;              // splits of one call the planner may use (the
                                             // combine reads any count; the grid allows 65535)

// ---- cost constants of the planner's decode model (fitted to the H200 split sweeps,
// docs/perf.md; not measured per device) -------------------------------------------------------
constexpr float kDecodeStepUs = 1.6f;        // one decode step of one tile at head 128, alone
constexpr float decode_step_factor(int D) { return D <= 64 ? 0.8f : (D <= 128 ? 1.0f : 1.3f); }
constexpr float kSmBytesPerUs = 32.0f * 1024.0f;
constexpr float kCtaUs = 0.008f;
constexpr float kCombineUs = 6.0f;
constexpr float kCombineUsPerSplit = 0.2f;

static_assert(kDecodeRows == 16, "the decode tile is one m16 fragment of one warp");
static_assert(step_keys(64) == 64 && step_keys(256) == 32, "steps: 64 keys up to head 64, else 32");

}  // namespace fa_attn
