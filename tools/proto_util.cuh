// tools/proto_util.cuh - what the standalone kernel prototype test programs share
// (tools/hopper_proto.cu): the pass / fail counts and their closing line,
// a checked CUDA call, a stream wait with a wall-clock limit, and the hash of their random inputs.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

static int g_pass = 0, g_fail = 0;

// 64 -> 32-bit mix (a splitmix64-style finaliser): element i of a seeded random input is a
// function of (seed, i) alone, on the host and on the device.
__host__ __device__ inline uint32_t proto_hash32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<uint32_t>(x);
}

static void finish_and_exit(int code)
{
    printf("%d passed, %d failed\n", g_pass, g_fail);
    fflush(stdout);
    exit(code);
}

#define CK(call) \
    do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) { \
            printf("FATAL %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_)); \
            ++g_fail; \
            finish_and_exit(1); \
        } \
    } while (0)

// Waits for the stream with a wall-clock limit: a deadlocked pipeline (a barrier phase never
// completing) would otherwise hang the whole GPU call.
static void sync_or_die(cudaStream_t st, double limit_s, const char *what)
{
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) {
            printf("FATAL %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
            ++g_fail;
            finish_and_exit(1);
        }
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dt > limit_s) {
            printf("FATAL %s: not finished after %.0f s (hang: a barrier phase that never completes?)\n",
                   what, limit_s);
            ++g_fail;
            printf("%d passed, %d failed\n", g_pass, g_fail);
            fflush(stdout);
            _Exit(2); // the context cannot be torn down while the kernel spins
        }
    }
}
