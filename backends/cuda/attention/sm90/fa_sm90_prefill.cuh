// fa_sm90_prefill.cuh - a Hopper-native (sm_90a) dense bf16 attention forward for head size 128:
// the prototype of the sm90 kernel family (the library's kernel is sm90_attention.cu; both use
// sm90_tile.cuh). Nothing in the library includes this file; tools/hopper_proto.cu tests and
// times it.
//
//   q   [B, Lq, H,   128] bf16, contiguous        out [B, Lq, H, 128] bf16, contiguous
//   k,v [B, Lk, Hkv, 128] bf16, contiguous        lse [B, H, Lq] fp32, natural log (NULL-able)
//   GQA: query head h reads kv head h / (H / Hkv). Causal: key j is allowed for query row i when
//   j <= i + (Lk - Lq) (bottom-right aligned, as in the library's CUDA backend). Rows with no
//   allowed key get out = 0 and lse = -inf.
//
// CTA = 3 warpgroups (384 threads), one (128-row Q tile, head, batch):
//   warpgroup 0  producer: setmaxnreg.dec to 24 registers; one thread issues TMA loads of the Q
//                tile (once) and of the 128-key K and V tiles into a Stages-deep shared ring, each
//                stage guarded by full (TMA complete_tx) and empty (consumer release) mbarriers.
//   warpgroups 1, 2  consumers: setmaxnreg.inc to 240; each owns 64 query rows. Per K/V tile:
//                S = Q K^T by 8 wgmma m64n128k16 (both operands in shared memory), mask, online
//                softmax in registers (exp2 with the scale folded in), P to bf16 registers,
//                O += P V by 8 wgmma m64n128k16 with A = P from registers, then release the stage.
//   Epilogue: O / l, bf16, plain global stores straight from the accumulator registers; LSE.
// Shared memory (1024-byte aligned, 128-byte TMA swizzle = wgmma's SW128 layout):
//   Q  [2 warpgroups][2 column blocks of 64 dims][64 rows][64] bf16      32 KiB
//   K  [Stages][2 column blocks][128 keys][64] bf16                       32 KiB a stage
//   V  [Stages][2 column blocks][128 keys][64] bf16                       32 KiB a stage
//   mbarriers: q_full, k_full[Stages], v_full[Stages], k_empty[Stages], v_empty[Stages] (K is
//   released as soon as S is computed, V after P V: with 2 stages each load still has about
//   one tile of lead time in the overlapped loop)
// Two consumer loops (template Overlap): plain (S, softmax, PV, each waited for), or FA3's
// intra-warpgroup overlap (S(i) and P(i-1) V(i-1) in flight together, softmax(i) under PV(i-1)).
// Not yet: ping-pong scheduling (named barriers) between the two consumer warpgroups, a
// persistent tile scheduler, smem-staged coalesced stores, paged K/V, fp8, splits (README.md).
#pragma once

#include "sm90_tile.cuh"

#include <math.h>

namespace fa_sm90 {

struct PrefillParams {
    __nv_bfloat16 *out;
    float *lse; // [B, H, Lq] natural log; NULL: not written
    int B, Lq, Lk, H, Hkv;
    float scale_log2; // softmax scale * log2(e)
    // V's descriptor strides (bytes). (16384, 1024) by the PTX ISA's MN-major SW128 canonical
    // layout (LBO: the next 64-dim column block, SBO: the next 8 keys); a run-time value only so
    // that the prototype's test can apply what its layout probe found without a rebuild.
    uint32_t v_lbo, v_sbo;
};

constexpr int kProducerRegs = 24;  // setmaxnreg budgets: 24 * 128 + 240 * 256 = 64512 <= 65536
constexpr int kConsumerRegs = 240;

// Overlap = false: per tile S = QK^T, wait, softmax, O += PV, wait (the two consumer warpgroups
// still overlap each other's softmax with their GEMMs, unsynchronised).
// Overlap = true: FA3's intra-warpgroup pipelining: S(i) = Q K(i) and O += P(i-1) V(i-1) are in
// flight together; the softmax of tile i runs while the tensor cores do P(i-1) V(i-1).
// PingPong = true (with Overlap): FA3's inter-warpgroup schedule: the two consumer warpgroups take
// turns issuing their GEMMs (named barriers 1 and 2), so that one's softmax runs under the
// other's GEMMs. Both then run all n_tiles tiles (the lower warpgroup's causal tile above the
// diagonal is computed, fully masked) so that their turn counts are equal.
template <bool Causal, bool Overlap, bool PingPong = false, int Stages = 2>
__global__ void __launch_bounds__(kThreads, 1)
    fa_sm90_prefill_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                           const __grid_constant__ CUtensorMap tmV, const PrefillParams p) {
    static_assert(!PingPong || Overlap, "ping-pong is built on the overlapped loop");
#if FA_SM90_DEVICE_OK
    using L = Smem<Stages>;
    extern __shared__ uint8_t smem_raw[];
    const Ring<Stages> ring(smem_raw);
    const uint32_t sQ = ring.q, sK = ring.k, sV = ring.v;
    const uint32_t bar_q = ring.bar_q, bar_kf = ring.kf, bar_vf = ring.vf, bar_ke = ring.ke, bar_ve = ring.ve;

    // causal: the longest row blocks (the last ones) start first
    const int mblk = Causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const int h = blockIdx.y, b = blockIdx.z;
    const int hkv = h / (p.H / p.Hkv);
    const int m0 = mblk * kBlockM;
    const int diag = p.Lk - p.Lq;
    int kend = p.Lk; // keys [0, kend) are visible to some row of this CTA
    if (Causal) kend = min(kend, min(m0 + kBlockM, p.Lq) + diag);
    const int n_tiles = kend > 0 ? (kend + kBlockN - 1) / kBlockN : 0;

    const int wg = static_cast<int>(threadIdx.x) / 128;

    if (threadIdx.x == 0) {
        ring.init(&tmQ, &tmK, &tmV);
        fence_proxy_async_smem();
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer ----------------
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0 && n_tiles > 0) {
            mbar_arrive_expect_tx(bar_q, L::kQBytes);
            for (int w = 0; w < 2; ++w) {
                // a box wholly past Lq (the upper warpgroup of a last, short row block) reads the
                // lower one's rows instead: only partly out-of-range boxes are relied on to be
                // zero-filled and counted; that warpgroup's rows are never stored anyway
                const int qrow = m0 + w * kWgRows < p.Lq ? m0 + w * kWgRows : m0;
                for (int c = 0; c < 2; ++c)
                    tma_load_4d(sQ + w * L::kQWgBytes + c * L::kQColBytes, &tmQ, bar_q, c * 64, h, qrow, b);
            }
            for (int i = 0; i < n_tiles; ++i) {
                const int s = i % Stages;
                // use u of stage s needs release u - 1; on a fresh barrier parity 1 passes at once
                const uint32_t par = (static_cast<uint32_t>(i / Stages) & 1u) ^ 1u;
                const uint32_t kdst = sK + s * L::kTileBytes, vdst = sV + s * L::kTileBytes;
                mbar_wait(bar_ke + 8 * s, par);
                mbar_arrive_expect_tx(bar_kf + 8 * s, L::kTileBytes);
                tma_load_4d(kdst, &tmK, bar_kf + 8 * s, 0, hkv, i * kBlockN, b);
                tma_load_4d(kdst + L::kKvColBytes, &tmK, bar_kf + 8 * s, 64, hkv, i * kBlockN, b);
                mbar_wait(bar_ve + 8 * s, par);
                mbar_arrive_expect_tx(bar_vf + 8 * s, L::kTileBytes);
                tma_load_4d(vdst, &tmV, bar_vf + 8 * s, 0, hkv, i * kBlockN, b);
                tma_load_4d(vdst + L::kKvColBytes, &tmV, bar_vf + 8 * s, 64, hkv, i * kBlockN, b);
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1; // consumer warpgroup 0 / 1: rows [m0 + 64 cw, m0 + 64 cw + 64)
    const int tid = static_cast<int>(threadIdx.x) % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t4 = lane % 4;
    const int row_lo = m0 + cw * kWgRows;
    const int r0 = row_lo + warp * 16 + g, r1 = r0 + 8;
    const float sl2 = p.scale_log2;

    float o[64];
    float sacc[64];
    uint32_t pa[8][4];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        o[i] = 0.f;
        sacc[i] = 0.f;
    }
    float mrow0 = -INFINITY, mrow1 = -INFINITY; // running max of the scaled scores (log2 units)
    float lrow0 = 0.f, lrow1 = 0.f; // this thread's part of the row sums

    // tiles [0, n_live) have an allowed key for some row of this warpgroup; the rest (causal, the
    // other warpgroup's last tile) are only waited for and released
    int n_live = n_tiles;
    if (Causal && !PingPong) {
        const int last = row_lo + kWgRows - 1 + diag; // largest allowed key of the warpgroup
        n_live = last < 0 ? 0 : min(n_tiles, last / kBlockN + 1);
    }
    // the causal limit of the row: keys < lim are allowed
    const int lim0 = Causal ? min(p.Lk, r0 + diag + 1) : p.Lk;
    const int lim1 = Causal ? min(p.Lk, r1 + diag + 1) : p.Lk;
    const uint32_t qb = sQ + cw * L::kQWgBytes;
    // a tile needs the mask when it crosses Lk or (causal) the first row's diagonal
    auto tile_needs_mask = [&](int kbase) {
        return (kbase + kBlockN > p.Lk) || (Causal && kbase + kBlockN - 1 > row_lo + diag);
    };
    // ping-pong turns (sm90_tile.cuh), only in the ping-pong loop
    auto turn_begin_pp = [&]() {
        if constexpr (PingPong) turn_begin(cw);
    };
    auto turn_end_pp = [&](bool last) {
        if constexpr (PingPong) turn_end(cw, last);
    };
    if constexpr (PingPong) {
        turns_open(cw, n_tiles > 0);
    }

    if (n_live > 0) wait_full(bar_q, 0);
    if (!Overlap) {
        for (int i = 0; i < n_live; ++i) {
            const int s = i % Stages;
            const uint32_t phase = static_cast<uint32_t>(i / Stages) & 1u;
            const int kbase = i * kBlockN;
            wait_full(bar_kf + 8 * s, phase);
            issue_qk<Stages>(sacc, qb, sK + s * L::kTileBytes);
            wgmma_wait_group<0>();
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(sacc[x]);
            release(bar_ke + 8 * s, lane);
            float a0, a1;
            softmax_tile(sacc, tile_needs_mask(kbase), kbase + 2 * t4, 0, lim0, 0, lim1, sl2, 0.f, mrow0,
                         mrow1, lrow0, lrow1, a0, a1);
            rescale_o(o, a0, a1);
            pack_p(pa, sacc);
            wait_full(bar_vf + 8 * s, phase);
            issue_pv<Stages>(o, pa, sV + s * L::kTileBytes, p.v_lbo, p.v_sbo);
            wgmma_wait_group<0>();
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(o[x]);
            release(bar_ve + 8 * s, lane);
        }
    } else if (n_live > 0) {
        // prologue: S(0), softmax(0), P(0)
        {
            wait_full(bar_kf, 0);
            turn_begin_pp();
            issue_qk<Stages>(sacc, qb, sK);
            turn_end_pp(false);
            wgmma_wait_group<0>();
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(sacc[x]);
            release(bar_ke, lane);
            float a0, a1;
            softmax_tile(sacc, tile_needs_mask(0), 2 * t4, 0, lim0, 0, lim1, sl2, 0.f, mrow0, mrow1, lrow0,
                         lrow1, a0, a1);
            pack_p(pa, sacc); // O is still 0: nothing to rescale
        }
        for (int i = 1; i < n_live; ++i) {
            const int s = i % Stages, sp = (i - 1) % Stages;
            const uint32_t phase = static_cast<uint32_t>(i / Stages) & 1u;
            const uint32_t phase_p = static_cast<uint32_t>((i - 1) / Stages) & 1u;
            const int kbase = i * kBlockN;
            if constexpr (PingPong) { // both operands ready before taking the turn
                wait_full(bar_kf + 8 * s, phase);
                wait_full(bar_vf + 8 * sp, phase_p);
                turn_begin_pp();
                issue_qk<Stages>(sacc, qb, sK + s * L::kTileBytes);
                issue_pv<Stages>(o, pa, sV + sp * L::kTileBytes, p.v_lbo, p.v_sbo);
                turn_end_pp(false);
            } else {
                wait_full(bar_kf + 8 * s, phase);
                issue_qk<Stages>(sacc, qb, sK + s * L::kTileBytes); // S(i)
                wait_full(bar_vf + 8 * sp, phase_p);
                issue_pv<Stages>(o, pa, sV + sp * L::kTileBytes, p.v_lbo, p.v_sbo); // O += P(i-1) V(i-1)
            }
            wgmma_wait_group<1>(); // S(i) done (groups retire in order)
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(sacc[x]);
            release(bar_ke + 8 * s, lane);
            float a0, a1;
            softmax_tile(sacc, tile_needs_mask(kbase), kbase + 2 * t4, 0, lim0, 0, lim1, sl2, 0.f, mrow0,
                         mrow1, lrow0, lrow1, a0, a1);
            wgmma_wait_group<0>(); // P(i-1) V(i-1) done: O and pa may be touched again
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(o[x]);
            release(bar_ve + 8 * sp, lane);
            rescale_o(o, a0, a1);
            pack_p(pa, sacc);
        }
        {
            const int i = n_live - 1, s = i % Stages;
            wait_full(bar_vf + 8 * s, static_cast<uint32_t>(i / Stages) & 1u);
            turn_begin_pp();
            issue_pv<Stages>(o, pa, sV + s * L::kTileBytes, p.v_lbo, p.v_sbo);
            turn_end_pp(true);
            wgmma_wait_group<0>();
#pragma unroll
            for (int x = 0; x < 64; ++x) reg_fence(o[x]);
            release(bar_ve + 8 * s, lane);
        }
    }
    // tiles with nothing for this warpgroup: wait for them (keeps the barrier phases in step: an
    // arrival must not reach a stage's next phase early) and release them
    for (int i = n_live; i < n_tiles; ++i) {
        const int s = i % Stages;
        const uint32_t phase = static_cast<uint32_t>(i / Stages) & 1u;
        wait_full(bar_kf + 8 * s, phase);
        release(bar_ke + 8 * s, lane);
        wait_full(bar_vf + 8 * s, phase);
        release(bar_ve + 8 * s, lane);
    }

    // ---------------- epilogue ----------------
    lrow0 += __shfl_xor_sync(0xffffffffu, lrow0, 1);
    lrow0 += __shfl_xor_sync(0xffffffffu, lrow0, 2);
    lrow1 += __shfl_xor_sync(0xffffffffu, lrow1, 1);
    lrow1 += __shfl_xor_sync(0xffffffffu, lrow1, 2);
    const float inv0 = lrow0 > 0.f ? 1.f / lrow0 : 0.f;
    const float inv1 = lrow1 > 0.f ? 1.f / lrow1 : 0.f;
    const int64_t row_stride = static_cast<int64_t>(p.H) * kHeadDim;
    if (r0 < p.Lq) {
        __nv_bfloat16 *dst =
            p.out + (static_cast<int64_t>(b) * p.Lq + r0) * row_stride + h * kHeadDim + 2 * t4;
#pragma unroll
        for (int j = 0; j < 16; ++j)
            *reinterpret_cast<uint32_t *>(dst + 8 * j) = pack_bf16x2(o[4 * j] * inv0, o[4 * j + 1] * inv0);
    }
    if (r1 < p.Lq) {
        __nv_bfloat16 *dst =
            p.out + (static_cast<int64_t>(b) * p.Lq + r1) * row_stride + h * kHeadDim + 2 * t4;
#pragma unroll
        for (int j = 0; j < 16; ++j)
            *reinterpret_cast<uint32_t *>(dst + 8 * j) =
                pack_bf16x2(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
    if (p.lse != nullptr && t4 == 0) {
        const float ln2 = 0.693147180559945309f;
        float *lse = p.lse + (static_cast<int64_t>(b) * p.H + h) * p.Lq;
        // the running max is the exponents' offset (log2 units): l is relative to it
        if (r0 < p.Lq) lse[r0] = lrow0 > 0.f ? (mrow0 + __log2f(lrow0)) * ln2 : -INFINITY;
        if (r1 < p.Lq) lse[r1] = lrow1 > 0.f ? (mrow1 + __log2f(lrow1)) * ln2 : -INFINITY;
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
// Host side: argument checks, the three tensor maps, the launch.
// ---------------------------------------------------------------------------------------------
namespace fa_sm90_host {

struct PrefillPlan {
    CUtensorMap tmQ, tmK, tmV;
    fa_sm90::PrefillParams p;
    dim3 grid;
    bool causal;
    int mode; // consumer loop: 0 plain, 1 intra-warpgroup overlap, 2 overlap + ping-pong
};

// Checks the arguments and builds the plan (tensor maps encoded once; launches reuse them).
// Returns 0, or nonzero with a message in *err.
static inline int prefill_plan(PrefillPlan *plan, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                               const __nv_bfloat16 *v, __nv_bfloat16 *out, float *lse, int B, int Lq, int Lk,
                               int H, int Hkv, float softmax_scale, bool causal, int mode, const char **err) {
    using namespace fa_sm90;
    if (B < 1 || Lq < 1 || Lk < 1 || H < 1 || Hkv < 1 || H % Hkv != 0) {
        *err = "bad shape (B, Lq, Lk, H >= 1; H a multiple of Hkv)";
        return 1;
    }
    if (B > 65535 || H > 65535 || (Lq + kBlockM - 1) / kBlockM > 0x7fffffff) {
        *err = "grid too large";
        return 1;
    }
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out) % 16 != 0) {
        *err = "q, k, v, out must be 16-byte aligned";
        return 1;
    }
    if (!(softmax_scale > 0.f)) {
        *err = "softmax_scale must be > 0";
        return 1;
    }
    int r = make_tmap_bhld(&plan->tmQ, q, B, Lq, H, kHeadDim, kWgRows, err);
    if (r == 0) r = make_tmap_bhld(&plan->tmK, k, B, Lk, Hkv, kHeadDim, kBlockN, err);
    if (r == 0) r = make_tmap_bhld(&plan->tmV, v, B, Lk, Hkv, kHeadDim, kBlockN, err);
    if (r != 0) return r;
    plan->p.out = out;
    plan->p.lse = lse;
    plan->p.B = B;
    plan->p.Lq = Lq;
    plan->p.Lk = Lk;
    plan->p.H = H;
    plan->p.Hkv = Hkv;
    plan->p.scale_log2 = softmax_scale * 1.44269504088896340736f;
    plan->p.v_lbo = Smem<2>::kKvColBytes;
    plan->p.v_sbo = 1024;
    plan->grid = dim3((Lq + kBlockM - 1) / kBlockM, H, B);
    plan->causal = causal;
    if (mode < 0 || mode > 2) {
        *err = "mode: 0 plain, 1 overlap, 2 overlap + ping-pong";
        return 1;
    }
    plan->mode = mode;
    return 0;
}

template <bool Causal, bool Overlap, bool PingPong, int Stages>
static inline cudaError_t prefill_launch_t(const PrefillPlan &plan, cudaStream_t st) {
    using namespace fa_sm90;
    constexpr uint32_t smem = Smem<Stages>::kAlloc;
    static bool attr_set = false;
    if (!attr_set) {
        cudaError_t e =
            cudaFuncSetAttribute(fa_sm90_prefill_kernel<Causal, Overlap, PingPong, Stages>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    fa_sm90_prefill_kernel<Causal, Overlap, PingPong, Stages>
        <<<plan.grid, kThreads, smem, st>>>(plan.tmQ, plan.tmK, plan.tmV, plan.p);
    return cudaGetLastError();
}

static inline cudaError_t prefill_launch(const PrefillPlan &plan, cudaStream_t st) {
    if (plan.mode == 2)
        return plan.causal ? prefill_launch_t<true, true, true, 2>(plan, st)
                           : prefill_launch_t<false, true, true, 2>(plan, st);
    if (plan.mode == 1)
        return plan.causal ? prefill_launch_t<true, true, false, 2>(plan, st)
                           : prefill_launch_t<false, true, false, 2>(plan, st);
    return plan.causal ? prefill_launch_t<true, false, false, 2>(plan, st)
                       : prefill_launch_t<false, false, false, 2>(plan, st);
}

} // namespace fa_sm90_host
