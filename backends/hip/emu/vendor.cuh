// backends/hip/emu/vendor.cuh - a CPU stand-in for backends/cuda/vendor.cuh: the CUDA subset
// that the portable attention kernel and tests/gpu/test_gpu_portable.cu use, emulated with host
// threads (one std::thread per GPU thread, one CTA at a time; __syncthreads and the shuffles are
// CTA-wide barriers, which the kernel allows: it calls both uniformly). FA_WARP_SIZE is 32 or 64
// (-DFA_WARP_SIZE=64: AMD's wavefront, the shuffles reach 64 lanes). Half conversions are the CPU
// backend's, bf16 / fp8 the software ones of vendor_soft.cuh. run_emu.sh builds and runs it.
// A development aid for machines without a GPU: it checks the kernel's logic, not its speed,
// memory model or the real hardware's shuffles.
#pragma once
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
#include <atomic>
#include "fa_cpu.h"
#define FA_HIP 1
#define FA_SOFT_BF16 1
#define FA_SOFT_FP8 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(x)
#define __shared__ static
#ifndef FA_WARP_SIZE
#define FA_WARP_SIZE 32
#endif
typedef uint32_t fa_lane_mask_t;
#define FA_FULL_LANE_MASK 0xffffffffu
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct uint2 {
    uint32_t x, y;
};
struct float2 {
    float x, y;
};
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern std::barrier<> *g_bar;
extern float g_shfl[1024];
inline void __syncthreads() { g_bar->arrive_and_wait(); }
template <class T> T fa_shfl_xor(fa_lane_mask_t, T v, int o, int width = FA_WARP_SIZE)
{
    (void)width;
    const int t = (int)threadIdx.x;
    g_shfl[t] = (float)v;
    g_bar->arrive_and_wait();
    T r = (T)g_shfl[t ^ o];
    g_bar->arrive_and_wait();
    return r;
}
typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
inline cudaError_t cudaGetLastError() { return 0; }
inline const char *cudaGetErrorString(cudaError_t) { return "emu"; }
inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
struct __half {
    uint16_t x;
};
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) { return fa_cpu_half_to_float(h.x); }
inline __half __float2half_rn(float f) { return {fa_cpu_float_to_half(f)}; }
template <class T> int atomicCAS(T *p, T a, T b)
{
    T o = *p;
    if (o == a) *p = b;
    return o;
}
template <class T> int atomicExch(T *p, T b)
{
    T o = *p;
    *p = b;
    return o;
}
inline void __threadfence_system() {}
template <class K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, int)
{
    *n = 1;
    return 0;
}
#include "vendor_soft.cuh"
inline float fa_fp8_to_float(uint32_t b, bool e5) { return fa_soft_fp8_to_float(b, e5); }
// launch: one CTA at a time, blockDim.x threads
template <class F> void emu_launch(dim3 grid, dim3 block, F f)
{
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                std::barrier<> bar((ptrdiff_t)block.x);
                g_bar = &bar;
                std::vector<std::thread> th;
                for (unsigned t = 0; t < block.x; ++t)
                    th.emplace_back([&, t, x, y, z] {
                        threadIdx = dim3(t, 0, 0);
                        blockIdx = dim3(x, y, z);
                        f();
                    });
                for (auto &h : th) h.join();
            }
}
// runtime for the test
inline cudaError_t cudaMalloc(void *p, size_t n)
{
    *(void **)p = calloc(1, n);
    return 0;
}
template <class T> cudaError_t cudaMalloc(T **p, size_t n)
{
    *p = (T *)calloc(1, n);
    return 0;
}
inline cudaError_t cudaFree(void *p)
{
    free(p);
    return 0;
}
#define cudaMemcpyHostToDevice 0
#define cudaMemcpyDeviceToHost 1
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int)
{
    memcpy(d, s, n);
    return 0;
}
inline cudaError_t cudaMemset(void *d, int v, size_t n)
{
    memset(d, v, n);
    return 0;
}
inline cudaError_t cudaDeviceSynchronize() { return 0; }
inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return 0;
}
