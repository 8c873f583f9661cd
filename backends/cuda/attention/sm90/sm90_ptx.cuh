// sm90_ptx.cuh - small named inline-PTX wrappers for the Hopper (sm_90a) attention kernels:
// mbarriers, the async-proxy fence, TMA (cp.async.bulk.tensor) and plain bulk copies into shared
// memory, wgmma (HGMMA) with shared-memory matrix descriptors, setmaxnreg, and the host-side
// creation of TMA descriptors (cuTensorMapEncodeTiled through the runtime's driver entry point,
// so nothing links -lcuda).
//
// Every wrapper names the PTX ISA section it implements. Section numbers are those of PTX ISA
// 9.0 (CUDA 13); they move between ISA versions, so the anchor of the online document is given
// too (https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#<anchor>).
//
// Used by sm90_tile.cuh, the library kernel (sm90_attention.cu) and the prototype
// (fa_sm90_prefill.cuh, tools/hopper_proto.cu). Device code needs sm_90a (wgmma and setmaxnreg
// are "a"-only features).
#pragma once

#include <cuda.h> // CUtensorMap and the CUtensorMap* enums only: no driver symbol is linked
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

namespace fa_sm90 {

// ---------------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------------

// 32-bit shared-state-space address of a generic pointer into shared memory (PTX ISA cvta,
// #data-movement-and-conversion-instructions-cvta; the .shared::cta operands take these).
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------------
// mbarrier (PTX ISA 9.7.13.15, #parallel-synchronization-and-communication-instructions-mbarrier)
// ---------------------------------------------------------------------------------------------

// PTX ISA 9.7.13.15.9 mbarrier.init: expected arrival count `count`, phase 0, tx-count 0.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// PTX ISA 9.7.13.4 membar/fence: fence.mbarrier_init makes the preceding mbarrier.init visible
// to other threads and to the async proxy (TMA's complete_tx) before they use the barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive (with the .expect_tx form of 9.7.13.15.11): raise the
// barrier's expected transaction count by `tx_bytes`, then arrive once. The producer calls this
// before issuing the TMA copies that will complete_tx the same number of bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(tx_bytes)
                 : "memory");
}

// PTX ISA 9.7.13.15.13 mbarrier.arrive: one arrival (release semantics at CTA scope).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// PTX ISA 9.7.13.15.16 mbarrier.try_wait.parity: true once the phase of parity `parity` has
// completed (acquire at CTA scope). A fresh barrier is in phase 0, so waiting on parity 1
// returns at once: the "previous phase" counts as complete.
__device__ __forceinline__ bool mbar_try_wait_parity(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}

// Spin on mbar_try_wait_parity (try_wait itself suspends for a hardware time limit per call).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait_parity(bar, parity)) {}
}

// ---------------------------------------------------------------------------------------------
// Named barriers (PTX ISA 9.7.13.1 bar / barrier, #parallel-synchronization-and-communication-
// instructions-bar-barrier): barrier `id` (1..15; 0 is __syncthreads) completes when `nthreads`
// threads (a multiple of 32) have arrived. bar.sync arrives and waits, bar.arrive only arrives:
// the consumer warpgroups' ping-pong hand-over.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Proxy fence (PTX ISA 9.7.13.4 membar/fence, #parallel-synchronization-and-communication-
// instructions-membar): orders this thread's generic-proxy shared-memory accesses with later
// async-proxy ones (TMA, wgmma operand reads), e.g. after writing smem that wgmma will read.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// Per-thread asynchronous copies (PTX ISA 9.7.9.25.3 cp.async, #data-movement-and-conversion-
// instructions-cp-async): 16 bytes global -> shared, the rest of the 16 zero-filled past
// src_bytes (0: nothing read, 16 zeros); completion signalled on an mbarrier
// (cp.async.mbarrier.arrive.noinc: the arrival counts as one of the barrier's expected ones, so
// the barrier is initialised with the number of threads that arrive this way).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Warp-wide shared-memory matrix moves (PTX ISA, warp-level matrix instructions ldmatrix and
// stmatrix, #warp-level-matrix-instructions-ldmatrix / -stmatrix), four 8 x 8 matrices of b16: lane 8k + i gives the shared address of row i of matrix k (16 bytes); register k of thread
// t holds matrix k's row t / 4, b16 columns 2 (t % 4), + 1 (stmatrix, and ldmatrix without .trans)
// or, with .trans, rows 2 (t % 4) (low half) and + 1 (high half) of b16 column t / 4.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// ---------------------------------------------------------------------------------------------
// Bulk copies global -> shared, completing on an mbarrier (complete_tx::bytes)
// ---------------------------------------------------------------------------------------------

// PTX ISA 9.7.9.25.4.1 cp.async.bulk (#data-movement-and-conversion-instructions-cp-async-bulk):
// `bytes` (multiple of 16, both addresses 16-byte aligned) from global `src` to shared `dst`.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

// PTX ISA 9.7.9.25.5.2 cp.async.bulk.tensor (#data-movement-and-conversion-instructions-cp-async-
// bulk-tensor), tile mode: the box of the tensor map `tmap` (address of a __grid_constant__
// CUtensorMap kernel parameter) at element coordinates c0 (innermost) .. into shared `dst`
// (1024-byte aligned for the 128-byte swizzle). Out-of-range elements are filled with zeros and
// still count towards the transaction bytes; so is a box wholly out of range (the library kernel
// loads pages it must not read from a block coordinate past the map: its GPU tests, bad block
// ids and tiles past the sequence's last page included, pass on the H200 without a hang).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                            int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                            int32_t c1, int32_t c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

__device__ __forceinline__ void tma_load_5d(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3, int32_t c4) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
                 : "memory");
}

// The same copies with .multicast::cluster (PTX ISA 9.7.9.25.5.2): the box lands at offset `dst`
// of the shared memory of every CTA of the cluster whose bit is set in `cta_mask` (rank order),
// and each of those CTAs' mbarrier at offset `bar` receives the box's complete_tx bytes.
__device__ __forceinline__ void tma_load_4d_mc(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                               int32_t c1, int32_t c2, int32_t c3, uint16_t cta_mask) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(cta_mask)
                 : "memory");
}

__device__ __forceinline__ void tma_load_5d_mc(uint32_t dst, const void *tmap, uint32_t bar, int32_t c0,
                                               int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                                               uint16_t cta_mask) {
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;" ::"r"(dst),
                 "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "h"(cta_mask)
                 : "memory");
}

// ---------------------------------------------------------------------------------------------
// Thread-block clusters (PTX ISA 10 special registers %cluster_ctarank; 9.7.9.15 mapa; 9.7.13.2
// barrier.cluster; 9.7.13.15.13 mbarrier.arrive on a shared::cluster address)
// ---------------------------------------------------------------------------------------------

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The shared::cluster address of the variable at shared::cta address `addr` in the CTA of rank
// `rank` (the CTAs of a cluster have the same layout).
__device__ __forceinline__ uint32_t mapa_shared(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

// One arrival on an mbarrier of another CTA of the cluster (its shared::cluster address),
// release at cluster scope: this CTA's earlier reads of the stage happen before the peer's
// producer overwrites it.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar)
                 : "memory");
}

// mbar_wait with acquire at cluster scope (a barrier that other CTAs' threads arrive on).
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    uint32_t ok = 0;
    while (!ok) {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    }
}

// Every thread of every CTA of the cluster arrives (release), then waits (acquire): the
// barriers one CTA initialised are visible to the others before they are used.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

// PTX ISA prefetch, .tensormap form (#data-movement-and-conversion-instructions-prefetch-
// prefetchu): bring a tensor map into the descriptor cache once per CTA.
__device__ __forceinline__ void prefetch_tensormap(const void *tmap) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(tmap) : "memory");
}

// ---------------------------------------------------------------------------------------------
// setmaxnreg (PTX ISA 9.7.19.5, #miscellaneous-instructions-setmaxnreg): warpgroup-wide change of
// the per-thread register budget; every warp of the warpgroup executes the same instruction.
// The kernel needs __launch_bounds__ (a known entry register count) or ptxas ignores it (C7508).
// ---------------------------------------------------------------------------------------------
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---------------------------------------------------------------------------------------------
// wgmma (PTX ISA 9.7.15, #asynchronous-warpgroup-level-matrix-instructions)
// ---------------------------------------------------------------------------------------------

// PTX ISA 9.7.15.5.1.2.2 Matrix Descriptor Format
// (#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor), 64 bits:
//   [13:0]  start address >> 4           [29:16] leading dimension byte offset (LBO) >> 4
//   [45:32] stride dimension byte offset (SBO) >> 4
//   [51:49] base offset (0: the swizzle pattern starts on a 1024-byte boundary for 128B)
//   [63:62] swizzle: 0 none, 1 128B, 2 64B, 3 32B
// For the 128-byte swizzle (PTX ISA 9.7.15.5.1.2.1, canonical layouts, T = 8 bf16 per 16 bytes):
//   K-major  Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T)): rows of 128 bytes, 8-row atoms of
//            1024 bytes; SBO = byte step between 8-row groups; LBO unused ("assumed 1").
//   MN-major Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 64 MN-contiguous elements per
//            128-byte row, 8 K-rows per atom; LBO = byte step between 64-element MN blocks, SBO =
//            byte step between 8-row K groups.
// Stepping K inside a 128-byte swizzled row (k16 = 32 bytes) is done by adding the byte offset to
// the start address; the swizzle XOR is applied by the hardware on address bits [6:4] ^ [9:7],
// which is why the atoms must sit on 1024-byte boundaries.
enum : uint32_t { kSwizzleNone = 0, kSwizzle128B = 1, kSwizzle64B = 2, kSwizzle32B = 3 };

__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                   uint32_t swizzle) {
    uint64_t d = 0;
    d |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
    d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16;
    d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32;
    d |= static_cast<uint64_t>(swizzle & 3u) << 62;
    return d;
}

// PTX ISA 9.7.15 wgmma.fence (#asynchronous-warpgroup-level-matrix-instructions-wgmma-fence):
// orders earlier register writes (accumulators, register-A fragments) and shared-memory writes
// with the wgmma.mma_async operations that follow. Needed before the first wgmma of a batch
// whenever the accumulator or A registers were touched by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// PTX ISA 9.7.15 wgmma.commit_group (#asynchronous-warpgroup-level-matrix-instructions-wgmma-
// commit-group): the wgmma.mma_async operations issued so far (and not yet
// committed) form one wgmma-group.
__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// PTX ISA 9.7.15 wgmma.wait_group N (#asynchronous-warpgroup-level-matrix-instructions-wgmma-
// wait-group): wait until at most N wgmma-groups are pending. Only after
// this may the accumulators be read and the operand shared memory be reused.
template <int N> __device__ __forceinline__ void wgmma_wait_group() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group: 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads/writes of accumulator registers across a wgmma sequence
// (CUTLASS calls its equivalent warpgroup_fence_operand): an empty asm that "modifies" the value.
__device__ __forceinline__ void reg_fence(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }

// PTX ISA 9.7.15.5.2 wgmma.mma_async (#asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-
// async), shape m64n128k16, D f32, A and B bf16 (T = __half: f16), both from shared memory
// (descriptors):
//   D[64x128] = (scale_d ? D : 0) + A[64x16] * B[16x128]
// TransB = 0: B is K-major (stored N rows of K); TransB = 1: B is MN-major (K rows of N).
// A is K-major (imm-trans-a 0). Accumulator layout (PTX ISA 9.7.15.5.1.1.1, Figure 149): thread t
// of warp w of the warpgroup holds, for n8 block j = 0..15,
//   d[4j+0], d[4j+1] = D[16w + t/4    ][8j + 2(t%4) + {0,1}]
//   d[4j+2], d[4j+3] = D[16w + t/4 + 8][8j + 2(t%4) + {0,1}]
// clang-format off
// The 64 f32 accumulator operands of an N = 128 wgmma (%0 .. %63, read and written).
#define FA_SM90_D64_REGS \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define FA_SM90_D64_OUT \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FA_SM90_WGMMA_SS(TY) \
    asm volatile( \
        "{\n\t.reg .pred p;\n\t" \
        "setp.ne.b32 p, %66, 0;\n\t" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
        FA_SM90_D64_REGS \
        "%64, %65, p, 1, 1, 0, %67;\n\t}" \
        : FA_SM90_D64_OUT \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));

template <int TransB, typename T = __nv_bfloat16>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d)
{
    if constexpr (std::is_same<T, __half>::value) {
        FA_SM90_WGMMA_SS("f16");
    } else {
        FA_SM90_WGMMA_SS("bf16");
    }
}

// PTX ISA 9.7.15.5.2 wgmma.mma_async, m64n128k16, A from registers (the "RS" form):
//   D[64x128] = (scale_d ? D : 0) + A[64x16] * B[16x128]
// A fragment (PTX ISA 9.7.15.5.1.1.1, Figure 148), thread t of warp w, g = t/4, c = 2(t%4):
//   a[0] = A[16w+g][c..c+1]   a[1] = A[16w+g+8][c..c+1]
//   a[2] = A[16w+g][c+8..c+9] a[3] = A[16w+g+8][c+8..c+9]   (bf16x2, lower column in the low half)
#define FA_SM90_WGMMA_RS(TY) \
    asm volatile( \
        "{\n\t.reg .pred p;\n\t" \
        "setp.ne.b32 p, %69, 0;\n\t" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
        FA_SM90_D64_REGS \
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n\t}" \
        : FA_SM90_D64_OUT \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB));

template <int TransB, typename T = __nv_bfloat16>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                    int scale_d)
{
    if constexpr (std::is_same<T, __half>::value) {
        FA_SM90_WGMMA_RS("f16");
    } else {
        FA_SM90_WGMMA_RS("bf16");
    }
}
// The N = 64 accumulator (d[32]) as wgmma operands: its registers and its asm outputs.
#define FA_SM90_D32_REGS \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define FA_SM90_D32_OUT \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// The same two forms at N = 64 (PTX ISA 9.7.15.5.2, m64n64k16): D[64x64], d[32] with the layout
// above for n8 blocks j = 0..7. Head 64's O += P V and head 256's S = Q K^T (64-key tiles).
#define FA_SM90_WGMMA_SS64(TY) \
    asm volatile( \
        "{\n\t.reg .pred p;\n\t" \
        "setp.ne.b32 p, %34, 0;\n\t" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
        FA_SM90_D32_REGS \
        "%32, %33, p, 1, 1, 0, %35;\n\t}" \
        : FA_SM90_D32_OUT \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransB));

template <int TransB, typename T = __nv_bfloat16>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d)
{
    if constexpr (std::is_same<T, __half>::value) {
        FA_SM90_WGMMA_SS64("f16");
    } else {
        FA_SM90_WGMMA_SS64("bf16");
    }
}

#define FA_SM90_WGMMA_RS64(TY) \
    asm volatile( \
        "{\n\t.reg .pred p;\n\t" \
        "setp.ne.b32 p, %37, 0;\n\t" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
        FA_SM90_D32_REGS \
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n\t}" \
        : FA_SM90_D32_OUT \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB));

template <int TransB, typename T = __nv_bfloat16>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                   int scale_d)
{
    if constexpr (std::is_same<T, __half>::value) {
        FA_SM90_WGMMA_RS64("f16");
    } else {
        FA_SM90_WGMMA_RS64("bf16");
    }
}
// PTX ISA 9.7.15.5.2 wgmma.mma_async, m64n128k32, D f32, A and B e4m3 (QGMMA; no transpose
// operands: for 8-bit types both A and B must be K-major), with the accumulator layout above.
// SS: A and B by descriptor; RS: A from registers, k32 fragment (PTX ISA 9.7.15.5.1.1.1, Figure
// 148 for 8-bit A), thread t of warp w, g = t/4, c = 4(t%4):
//   a[0] = A[16w+g][c..c+3]       a[1] = A[16w+g+8][c..c+3]
//   a[2] = A[16w+g][c+16..c+19]   a[3] = A[16w+g+8][c+16..c+19]   (the lowest column in byte 0)
// Measured on the H200 (tools/qgmma_probe.cu): the sums are accumulated in less than f32
// precision (3e-4 of the largest |S| over 128 products, where f32 gives 1e-7).
#define FA_SM90_WGMMA_E4M3(PRED, AOPS) \
    "{\n\t.reg .pred p;\n\t" \
    "setp.ne.b32 p, %" #PRED ", 0;\n\t" \
    "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " \
    FA_SM90_D64_REGS AOPS ", p, 1, 1;\n\t}"

__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                         int scale_d)
{
    asm volatile(FA_SM90_WGMMA_E4M3(66, "%64, %65") : FA_SM90_D64_OUT : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                         int scale_d)
{
    asm volatile(FA_SM90_WGMMA_E4M3(69, "{%64, %65, %66, %67}, %68")
                 : FA_SM90_D64_OUT
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}
// The same two e4m3 forms at N = 64 (m64n64k32): d[32], n8 blocks j = 0..7. Head 64's O += P V
// (64 dims) and head 256's S = Q K^T (64-key tiles).
#define FA_SM90_WGMMA_E4M3_N64(PRED, AOPS) \
    "{\n\t.reg .pred p;\n\t" \
    "setp.ne.b32 p, %" #PRED ", 0;\n\t" \
    "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " \
    FA_SM90_D32_REGS AOPS ", p, 1, 1;\n\t}"

__device__ __forceinline__ void wgmma_m64n64k32_e4m3_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                        int scale_d)
{
    asm volatile(FA_SM90_WGMMA_E4M3_N64(34, "%32, %33") : FA_SM90_D32_OUT : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                        int scale_d)
{
    asm volatile(FA_SM90_WGMMA_E4M3_N64(37, "{%32, %33, %34, %35}, %36")
                 : FA_SM90_D32_OUT
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}
// clang-format on

// ---------------------------------------------------------------------------------------------
// Small arithmetic helpers
// ---------------------------------------------------------------------------------------------

// PTX ISA ex2 (#floating-point-instructions-ex2): 2^x, approximate, flush-to-zero;
// ex2(-inf) = +0.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// PTX ISA tanh (#floating-point-instructions-tanh): approximate tanh (the softcap).
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// PTX ISA cvt (#data-movement-and-conversion-instructions-cvt), .bf16x2.f32: packs two
// floats, round to nearest even; `lo` lands in bits [15:0] (the lower column of an A fragment).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The same for f16 (.f16x2.f32), and the pair in the element type T (bf16 or f16).
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        return pack_bf16x2(lo, hi);
    } else {
        return pack_f16x2(lo, hi);
    }
}

// Four fp8 codes (byte 0 first) to four f16, exactly (every E4M3 and E5M2 value is an f16; NaN
// and Inf kept): lo = codes 0, 1 (code 0 in bits [15:0]), hi = codes 2, 3. E4M3: PTX ISA cvt
// (#data-movement-and-conversion-instructions-cvt), .f16x2.e4m3x2, the upper code to the upper
// half. E5M2 is f16 without its 8 low mantissa bits: the code shifted up by 8 (a byte permute).
template <bool E5M2> __device__ __forceinline__ void fp8x4_to_f16x4(uint32_t w, uint32_t &lo, uint32_t &hi) {
    if constexpr (E5M2) {
        lo = __byte_perm(w, 0u, 0x1404u); // bytes {0, code 0, 0, code 1}
        hi = __byte_perm(w, 0u, 0x3424u);
    } else {
        asm("{\n\t.reg .b16 a, b;\n\t"
            "mov.b32 {a, b}, %2;\n\t"
            "cvt.rn.f16x2.e4m3x2 %0, a;\n\t"
            "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
            : "=r"(lo), "=r"(hi)
            : "r"(w));
    }
}

// An f16 pair to bf16, exactly for the values of fp8 codes (f16 -> f32 is exact, and an E4M3 /
// E5M2 value has at most 3 significant bits and an exponent in [-16, 15], inside bf16's normal
// range; NaN stays NaN, Inf Inf): two cvt.f32.f16 and one cvt.rn.bf16x2.f32.
__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h) {
    uint32_t r;
    asm("{\n\t.reg .b16 a, b;\n\t.reg .f32 x, y;\n\t"
        "mov.b32 {a, b}, %1;\n\t"
        "cvt.f32.f16 x, a;\n\t"
        "cvt.f32.f16 y, b;\n\t"
        "cvt.rn.bf16x2.f32 %0, y, x;\n\t}"
        : "=r"(r)
        : "r"(h));
    return r;
}

// 16-byte shared-memory load and store (PTX ISA ld / st, .shared.v4.u32).
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
}
// 4-byte shared-memory load and store (PTX ISA ld / st, .shared.b32).
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_s32(uint32_t addr, int v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// PTX ISA cvt (#data-movement-and-conversion-instructions-cvt), .e4m3x2.f32 with .satfinite:
// four floats to four e4m3 (OCP float8_e4m3fn), round to nearest even; b0 lands in byte 0.
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo, hi;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
        "mov.b32 %0, {lo, hi};\n\t}"
        : "=r"(r)
        : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
    return r;
}

} // namespace fa_sm90

// ---------------------------------------------------------------------------------------------
// Host: TMA descriptors (CUDA driver API cuTensorMapEncodeTiled, reached through
// cudaGetDriverEntryPointByVersion - the non-deprecated form of cudaGetDriverEntryPoint - so the
// program needs no -lcuda). A descriptor is 128 bytes, passed as a __grid_constant__ parameter.
// ---------------------------------------------------------------------------------------------
namespace fa_sm90_host {

typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                  CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                  CUtensorMapFloatOOBfill);

// The entry point (cached), or NULL with a message in *err.
static inline EncodeTiledFn encode_tiled_fn(const char **err) {
    static EncodeTiledFn fn = nullptr;
    if (fn != nullptr) return fn;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
        *err = "cudaGetDriverEntryPoint(cuTensorMapEncodeTiled) failed";
        return nullptr;
    }
    fn = reinterpret_cast<EncodeTiledFn>(p);
    return fn;
}

// A 4D bf16 tensor map over [B, L, H, D] (D innermost, contiguous, D * 2 bytes = 256 here) with
// a box of {64 (D elements: one 128-byte swizzle row), 1 (head), rows, 1 (batch)} and the 128-byte
// swizzle. The box lands in shared memory as [rows][64] bf16, 128 bytes a row, swizzled in
// 8-row (1024-byte) atoms: the K-major SW128 canonical layout that wgmma reads, and for V the
// MN-major one. Rows past L are zero-filled. Returns 0, or a CUresult / -1 on failure.
static inline int make_tmap_bhld(CUtensorMap *tm, const void *base, int B, int L, int H, int D, int box_rows,
                                 const char **err) {
    EncodeTiledFn fn = encode_tiled_fn(err);
    if (fn == nullptr) return -1;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)L, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)H * D * 2, (cuuint64_t)L * H * D * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    CUresult r = fn(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void *>(base), dims, strides, box,
                    estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        *err = "cuTensorMapEncodeTiled failed";
        return static_cast<int>(r);
    }
    return 0;
}

} // namespace fa_sm90_host
