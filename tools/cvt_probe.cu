// tools/cvt_probe.cu - what an E4M3 -> f16 conversion costs a warp on this GPU: the cvt
// instruction (`cvt.rn.f16x2.e4m3x2`, two codes) against integer forms of the same conversion,
// in issue cycles a warp instruction (throughput: 8 independent chains, 1 and 16 warps an SM
// sub-partition) and cycles a dependent step (latency: one chain, one warp).
//
//   nvcc -O3 -arch=sm_90a -o /tmp/cvt_probe tools/cvt_probe.cu && /tmp/cvt_probe
//
// Forms (each turns a 32-bit word of four E4M3 codes into two f16x2 words, then folds them back
// into the word so that the next step depends on it):
//   cvt   two cvt.rn.f16x2.e4m3x2 (the multi-warp decode tile's form)
//   shift the codes' bits placed in f16 fields by masks and shifts (the value times 2^-8; NaN
//         codes become 480 / 256: a real kernel needs a NaN check beside it)
//   none  the fold alone (the loop's own cost)
// Prints one line a form and configuration. A development probe, not a test.
#include <cstdio>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define CK(x) \
    do { \
        cudaError_t e_ = (x); \
        if (e_ != cudaSuccess) { \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            return 1; \
        } \
    } while (0)

enum { FORM_CVT, FORM_SHIFT, FORM_NONE };

template <int FORM> __device__ __forceinline__ uint32_t step(uint32_t w)
{
    uint32_t lo, hi;
    if (FORM == FORM_CVT) {
        const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
        const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
        lo = (uint32_t)a.x | ((uint32_t)a.y << 16);
        hi = (uint32_t)b.x | ((uint32_t)b.y << 16);
    } else if (FORM == FORM_SHIFT) {
        hi = (w & 0x80008000u) | ((w & 0x7f007f00u) >> 1);
        const uint32_t v = w << 8;
        lo = (v & 0x80008000u) | ((v & 0x7f007f00u) >> 1);
    } else {
        lo = w;
        hi = w >> 3;
    }
    return lo ^ (hi >> 5) ^ 0x3c3c3c3cu; // one LOP3 / SHF: the next step depends on both halves
}

template <int FORM, int CHAINS> __global__ void probe(uint32_t *out, long long *cycles, int iters)
{
    uint32_t x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = 0x38404850u + threadIdx.x * 977u + c * 131u;
    __syncwarp();
    const long long t0 = clock64();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = step<FORM>(x[c]);
    }
    const long long t1 = clock64();
    uint32_t s = 0;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if ((threadIdx.x & 31) == 0) cycles[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = t1 - t0;
}

template <int FORM, int CHAINS> static int run(const char *name, int warps_per_smsp, int sms)
{
    const int iters = 4096, threads = 128 * warps_per_smsp > 1024 ? 1024 : 128 * warps_per_smsp;
    const int blocks = sms * (128 * warps_per_smsp / threads);
    uint32_t *out;
    long long *cyc;
    CK(cudaMalloc(&out, sizeof(uint32_t) * blocks * threads));
    CK(cudaMalloc(&cyc, sizeof(long long) * blocks * (threads / 32)));
    probe<FORM, CHAINS><<<blocks, threads>>>(out, cyc, iters); // warm-up
    probe<FORM, CHAINS><<<blocks, threads>>>(out, cyc, iters);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const int nw = blocks * (threads / 32);
    long long *h = new long long[nw];
    CK(cudaMemcpy(h, cyc, sizeof(long long) * nw, cudaMemcpyDeviceToHost));
    double mean = 0;
    for (int i = 0; i < nw; ++i) mean += (double)h[i];
    mean /= nw;
    // cycles a step of one chain in one warp, and what an SM sub-partition spends a step of a warp
    const double per_step = mean / ((double)iters * CHAINS);
    printf("%-6s chains %d, %2d warps a sub-partition: %7.2f cycles a step a warp, %6.2f sub-partition "
           "cycles a step\n",
           name, CHAINS, warps_per_smsp, per_step, per_step / warps_per_smsp);
    delete[] h;
    CK(cudaFree(out));
    CK(cudaFree(cyc));
    return 0;
}

int main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("cvt_probe on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
    const int sms = prop.multiProcessorCount;
    int rc = 0;
    rc |= run<FORM_CVT, 1>("cvt", 1, sms);
    rc |= run<FORM_SHIFT, 1>("shift", 1, sms);
    rc |= run<FORM_NONE, 1>("none", 1, sms);
    rc |= run<FORM_CVT, 8>("cvt", 1, sms);
    rc |= run<FORM_SHIFT, 8>("shift", 1, sms);
    rc |= run<FORM_NONE, 8>("none", 1, sms);
    rc |= run<FORM_CVT, 8>("cvt", 8, sms);
    rc |= run<FORM_SHIFT, 8>("shift", 8, sms);
    rc |= run<FORM_NONE, 8>("none", 8, sms);
    return rc;
}
