// tools/hopper_proto.cu - dev-only test and timing of the standalone sm_90a prefill prototype
// (backends/cuda/attention/sm90/fa_sm90_prefill.cuh) against a plain fp32 reference kernel.
// Built and run by tools/hopper_proto.sh on an H100/H200; not part of the library build.
//
// Per case: random bf16 q, k, v (a hash of the index, never all zeros), out and lse poisoned with
// NaN bit patterns, one launch, then: every element of out written (no poison left, all finite),
// lse finite or -inf, out and lse against the reference on every row (small cases) or on a sample
// of rows (the timed sizes). The timed sizes then run 3 warm-ups and 20 timed launches (cudaEvent
// per launch, median). Every CUDA call is checked; a launch that does not finish within a time
// limit is reported as a hang. Last line: "N passed, M failed".
#include "../backends/cuda/attention/sm90/fa_sm90_prefill.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static int g_pass = 0, g_fail = 0;

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
            printf("FATAL %s: not finished after %.0f s (hang: an mbarrier phase that never completes?)\n",
                   what, limit_s);
            ++g_fail;
            printf("%d passed, %d failed\n", g_pass, g_fail);
            fflush(stdout);
            _Exit(2); // the context cannot be torn down while the kernel spins
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Device helpers: inputs, poison, scan, reference
// ---------------------------------------------------------------------------------------------
static const uint16_t kPoisonBits = 0x7FC1; // a quiet NaN the kernel never writes
static const uint32_t kPoisonLse = 0x7FC00001u;

__device__ __forceinline__ uint32_t hash_u32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<uint32_t>(x);
}

__global__ void fill_random(__nv_bfloat16 *x, size_t n, uint64_t seed, float amp)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = (hash_u32(seed * 0x9E3779B97F4A7C15ull + i) >> 8) * (1.0f / 16777216.0f); // [0, 1)
        float v = (2.f * u - 1.f) * amp;
        if (v == 0.f) v = amp * (1.f / 64.f);
        x[i] = __float2bfloat16(v);
    }
}

__global__ void fill_u16(uint16_t *x, size_t n, uint16_t bits)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = bits;
}

__global__ void fill_u32(uint32_t *x, size_t n, uint32_t bits)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = bits;
}

// counts[0]: out elements still holding the poison; counts[1]: non-finite out elements;
// counts[2]: NaN lse values (-inf is legal: a row with no allowed key)
__global__ void scan_output(const uint16_t *out, size_t n, const float *lse, size_t nl,
                            unsigned long long *counts)
{
    unsigned long long poison = 0, nonfinite = 0, lnan = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint16_t b = out[i];
        if (b == kPoisonBits)
            ++poison;
        else if ((b & 0x7F80u) == 0x7F80u)
            ++nonfinite; // bf16 exponent all ones: inf or NaN
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nl;
         i += (size_t)gridDim.x * blockDim.x)
        if (isnan(lse[i])) ++lnan;
    if (poison) atomicAdd(&counts[0], poison);
    if (nonfinite) atomicAdd(&counts[1], nonfinite);
    if (lnan) atomicAdd(&counts[2], lnan);
}

// The reference: one 128-thread block per checked (b, h, row), fp32 throughout, two passes over
// the keys with the scores in shared memory (Lk floats).
__global__ void reference_rows(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                               const int3 *rows, int Lq, int Lk, int H, int Hkv, float scale, bool causal,
                               float *ref_out, float *ref_lse)
{
    extern __shared__ float sh[];
    float *sq = sh;              // [128]
    float *red = sh + 128;       // [4]
    float *sc = sh + 128 + 32;   // [Lk]
    const int3 rw = rows[blockIdx.x];
    const int b = rw.x, h = rw.y, r = rw.z, d = threadIdx.x;
    const int hk = h / (H / Hkv);
    sq[d] = __bfloat162float(q[((size_t)b * Lq + r) * H * 128 + (size_t)h * 128 + d]);
    __syncthreads();
    const int lim = causal ? min(Lk, r + (Lk - Lq) + 1) : Lk; // keys [0, lim) allowed
    float mx = -INFINITY;
    for (int j = d; j < Lk; j += 128) {
        float s = -INFINITY;
        if (j < lim) {
            const uint4 *kr =
                reinterpret_cast<const uint4 *>(k + ((size_t)b * Lk + j) * Hkv * 128 + (size_t)hk * 128);
            float acc = 0.f;
            for (int e8 = 0; e8 < 16; ++e8) { // 8 bf16 a load
                const uint4 w = kr[e8];
                const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
                for (int x = 0; x < 4; ++x) {
                    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&wd[x]));
                    acc += sq[8 * e8 + 2 * x] * f.x + sq[8 * e8 + 2 * x + 1] * f.y;
                }
            }
            s = acc * scale;
        }
        sc[j] = s;
        mx = fmaxf(mx, s);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((d & 31) == 0) red[d >> 5] = mx;
    __syncthreads();
    mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    __syncthreads();
    float sum = 0.f;
    for (int j = d; j < Lk; j += 128) {
        const float pj = (mx == -INFINITY) ? 0.f : expf(sc[j] - mx);
        sc[j] = pj;
        sum += pj;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if ((d & 31) == 0) red[d >> 5] = sum;
    __syncthreads();
    sum = red[0] + red[1] + red[2] + red[3];
    float acc = 0.f;
    for (int j = 0; j < lim; ++j)
        acc += sc[j] * __bfloat162float(v[((size_t)b * Lk + j) * Hkv * 128 + (size_t)hk * 128 + d]);
    ref_out[(size_t)blockIdx.x * 128 + d] = sum > 0.f ? acc / sum : 0.f;
    if (d == 0) ref_lse[blockIdx.x] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

static float bf16_bits_to_float(uint16_t b)
{
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---------------------------------------------------------------------------------------------
// One case
// ---------------------------------------------------------------------------------------------
struct Case {
    int B, Lq, Lk, H, Hkv;
    bool causal;
    bool timed;      // timed sizes: sampled check, then 20 timed launches
};

static void run_case(const Case &c, cudaStream_t st, std::vector<double> *tflops_out)
{
    char name[160];
    snprintf(name, sizeof name, "B=%d Lq=%d Lk=%d H=%d Hkv=%d %s", c.B, c.Lq, c.Lk, c.H, c.Hkv,
             c.causal ? "causal" : "non-causal");
    const size_t nq = (size_t)c.B * c.Lq * c.H * 128, nkv = (size_t)c.B * c.Lk * c.Hkv * 128;
    const size_t nl = (size_t)c.B * c.H * c.Lq;
    __nv_bfloat16 *q, *k, *v, *out;
    float *lse;
    CK(cudaMalloc(&q, nq * 2));
    CK(cudaMalloc(&k, nkv * 2));
    CK(cudaMalloc(&v, nkv * 2));
    CK(cudaMalloc(&out, nq * 2));
    CK(cudaMalloc(&lse, nl * 4));
    const uint64_t seed = (uint64_t)c.B * 1000003u + (uint64_t)c.Lq * 7919u + (uint64_t)c.Lk * 104729u + c.H;
    // q with a larger range so that the softmax is peaked (scaled scores of standard deviation
    // about 2): a wrong column or row mapping then moves outputs far more than rounding does
    fill_random<<<1024, 256, 0, st>>>(q, nq, seed + 1, 6.0f);
    CK(cudaGetLastError());
    fill_random<<<1024, 256, 0, st>>>(k, nkv, seed + 2, 1.0f);
    CK(cudaGetLastError());
    fill_random<<<1024, 256, 0, st>>>(v, nkv, seed + 3, 1.0f);
    CK(cudaGetLastError());
    fill_u16<<<1024, 256, 0, st>>>(reinterpret_cast<uint16_t *>(out), nq, kPoisonBits);
    CK(cudaGetLastError());
    fill_u32<<<1024, 256, 0, st>>>(reinterpret_cast<uint32_t *>(lse), nl, kPoisonLse);
    CK(cudaGetLastError());
    sync_or_die(st, 30, "input fill");

    const float scale = 1.0f / sqrtf(128.f);
    fa_sm90_host::PrefillPlan plan;
    const char *err = "";
    if (fa_sm90_host::prefill_plan(&plan, q, k, v, out, lse, c.B, c.Lq, c.Lk, c.H, c.Hkv, scale, c.causal,
                                   &err) != 0) {
        printf("FAIL %s: plan: %s\n", name, err);
        ++g_fail;
        return;
    }
    CK(fa_sm90_host::prefill_launch(plan, st));
    sync_or_die(st, 20, name);

    // every element written, nothing non-finite
    unsigned long long *counts, hc[3];
    CK(cudaMalloc(&counts, sizeof hc));
    CK(cudaMemsetAsync(counts, 0, sizeof hc, st));
    scan_output<<<1024, 256, 0, st>>>(reinterpret_cast<const uint16_t *>(out), nq, lse, nl, counts);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(hc, counts, sizeof hc, cudaMemcpyDeviceToHost, st));
    sync_or_die(st, 30, "scan");

    // rows to check: all of them, or (timed sizes) every stride-th row (odd stride, so every
    // position in a 128-row tile is hit somewhere; about 2^27 row-keys for the reference) and the
    // first and last two, of every batch and head
    long long stride = 1;
    if (c.timed) stride = std::max(1LL, ((long long)c.B * c.H * c.Lq * c.Lk) >> 27) | 1LL;
    std::vector<int3> rows;
    for (int b = 0; b < c.B; ++b)
        for (int h = 0; h < c.H; ++h)
            for (int r = 0; r < c.Lq; ++r)
                if (r % stride == 0 || r < 2 || r >= c.Lq - 2) rows.push_back(make_int3(b, h, r));
    const size_t nr = rows.size();
    int3 *drows;
    float *ref_out, *ref_lse;
    CK(cudaMalloc(&drows, nr * sizeof(int3)));
    CK(cudaMalloc(&ref_out, nr * 128 * 4));
    CK(cudaMalloc(&ref_lse, nr * 4));
    CK(cudaMemcpyAsync(drows, rows.data(), nr * sizeof(int3), cudaMemcpyHostToDevice, st));
    const size_t ref_smem = (128 + 32 + (size_t)c.Lk) * 4;
    CK(cudaFuncSetAttribute(reference_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ref_smem));
    reference_rows<<<(unsigned)nr, 128, ref_smem, st>>>(q, k, v, drows, c.Lq, c.Lk, c.H, c.Hkv, scale,
                                                        c.causal, ref_out, ref_lse);
    CK(cudaGetLastError());
    std::vector<uint16_t> hout(nq);
    std::vector<float> hlse(nl), hro(nr * 128), hrl(nr);
    CK(cudaMemcpyAsync(hout.data(), out, nq * 2, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(hlse.data(), lse, nl * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(hro.data(), ref_out, nr * 128 * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(hrl.data(), ref_lse, nr * 4, cudaMemcpyDeviceToHost, st));
    sync_or_die(st, 60, "reference");

    const double atol = 4e-3, rtol = 2e-2, lse_tol = 2e-3;
    double max_abs = 0, max_ref = 0, max_lse = 0;
    size_t bad = 0, bad_lse = 0;
    long first_bad = -1;
    for (size_t i = 0; i < nr; ++i) {
        const int3 rw = rows[i];
        const size_t ob = (((size_t)rw.x * c.Lq + rw.z) * c.H + rw.y) * 128;
        for (int d = 0; d < 128; ++d) {
            const double o = bf16_bits_to_float(hout[ob + d]), r = hro[i * 128 + d];
            const double e = fabs(o - r);
            if (!(e <= atol + rtol * fabs(r))) {
                if (first_bad < 0) first_bad = (long)i;
                ++bad;
            }
            if (e > max_abs || e != e) max_abs = e;
            max_ref = std::max(max_ref, fabs(r));
        }
        const double lo = hlse[((size_t)rw.x * c.H + rw.y) * c.Lq + rw.z], lr = hrl[i];
        const bool both_neg_inf = std::isinf(lo) && lo < 0 && std::isinf(lr) && lr < 0;
        if (!both_neg_inf) {
            const double e = fabs(lo - lr);
            if (!(e <= lse_tol)) ++bad_lse;
            if (e > max_lse || e != e) max_lse = e;
        }
    }
    const bool ok = hc[0] == 0 && hc[1] == 0 && hc[2] == 0 && bad == 0 && bad_lse == 0;
    printf(
        "%s %-48s rows %zu%s: max|err| %.3g (max|ref| %.3g, rel %.3g), lse max|err| %.3g, bad %zu, bad lse "
        "%zu, unwritten %llu, non-finite %llu, lse NaN %llu\n",
        ok ? "PASS" : "FAIL", name, nr, c.timed ? " (sampled)" : "", max_abs, max_ref,
        max_ref > 0 ? max_abs / max_ref : 0.0, max_lse, bad, bad_lse, hc[0], hc[1], hc[2]);
    if (first_bad >= 0) {
        const int3 rw = rows[first_bad];
        const size_t ob = (((size_t)rw.x * c.Lq + rw.z) * c.H + rw.y) * 128;
        printf("     first bad row b=%d h=%d row=%d: out[0..3] %.4f %.4f %.4f %.4f ref %.4f %.4f %.4f %.4f\n",
               rw.x, rw.y, rw.z, bf16_bits_to_float(hout[ob]), bf16_bits_to_float(hout[ob + 1]),
               bf16_bits_to_float(hout[ob + 2]), bf16_bits_to_float(hout[ob + 3]), hro[first_bad * 128],
               hro[first_bad * 128 + 1], hro[first_bad * 128 + 2], hro[first_bad * 128 + 3]);
    }
    if (ok)
        ++g_pass;
    else
        ++g_fail;

    if (c.timed) {
        for (int i = 0; i < 3; ++i) CK(fa_sm90_host::prefill_launch(plan, st));
        sync_or_die(st, 30, "warm-up");
        const int N = 20;
        cudaEvent_t ev[2 * N];
        for (int i = 0; i < 2 * N; ++i) CK(cudaEventCreate(&ev[i]));
        for (int i = 0; i < N; ++i) {
            CK(cudaEventRecord(ev[2 * i], st));
            CK(fa_sm90_host::prefill_launch(plan, st));
            CK(cudaEventRecord(ev[2 * i + 1], st));
        }
        sync_or_die(st, 60, "timing");
        std::vector<float> ms(N);
        for (int i = 0; i < N; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
        for (int i = 0; i < 2 * N; ++i) CK(cudaEventDestroy(ev[i]));
        std::sort(ms.begin(), ms.end());
        const double med = 0.5 * (ms[N / 2 - 1] + ms[N / 2]);
        double flops = 4.0 * c.B * c.H * (double)c.Lq * c.Lk * 128;
        if (c.causal) flops *= 0.5;
        const double tf = flops / (med * 1e-3) / 1e12;
        printf("TIME %-48s median %.3f ms (min %.3f, max %.3f) %.1f TFLOP/s\n", name, med, ms[0], ms[N - 1],
               tf);
        if (tflops_out) tflops_out->push_back(tf);
    }
    CK(cudaFree(q));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(out));
    CK(cudaFree(lse));
    CK(cudaFree(counts));
    CK(cudaFree(drows));
    CK(cudaFree(ref_out));
    CK(cudaFree(ref_lse));
}

int main()
{
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device %s, sm_%d%d, %d SMs, %zu KiB shared memory per block (opt-in)\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, prop.sharedMemPerBlockOptin / 1024);
    if (prop.major != 9) {
        printf("FAIL: the prototype needs sm_90 (Hopper)\n");
        ++g_fail;
        finish_and_exit(1);
    }
    {
        cudaFuncAttributes a0, a1;
        CK(cudaFuncGetAttributes(&a0, fa_sm90::fa_sm90_prefill_kernel<false, 2>));
        CK(cudaFuncGetAttributes(&a1, fa_sm90::fa_sm90_prefill_kernel<true, 2>));
        printf(
            "kernel non-causal: %d regs/thread at launch, %zu B local; causal: %d regs, %zu B local; dynamic "
            "smem %u B; %d threads\n",
            a0.numRegs, a0.localSizeBytes, a1.numRegs, a1.localSizeBytes, fa_sm90::Smem<2>::kAlloc,
            fa_sm90::kThreads);
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // correctness: every row checked (partial tiles, GQA, Lq != Lk both ways, a single tile)
    const Case small[] = {
        {2, 256, 256, 4, 2, false, false},   {2, 256, 256, 4, 2, true, false},
        {1, 1000, 1000, 2, 1, false, false}, {1, 1000, 1000, 2, 1, true, false},
        {2, 300, 777, 4, 4, false, false},   {2, 300, 777, 4, 4, true, false},
        {1, 513, 200, 2, 2, false, false},   {1, 513, 200, 2, 2, true, false},
        {3, 77, 77, 8, 2, false, false},     {3, 77, 77, 8, 2, true, false},
        {1, 64, 4096, 4, 1, false, false},   {1, 64, 4096, 4, 1, true, false},
    };
    for (const Case &c : small) run_case(c, st, nullptr);

    // timed sizes (H = 32, Hkv = 8), sampled check first
    const Case timed[] = {
        {1, 16384, 16384, 32, 8, false, true}, {1, 16384, 16384, 32, 8, true, true},
        {4, 4096, 4096, 32, 8, false, true},   {4, 4096, 4096, 32, 8, true, true},
        {16, 1024, 1024, 32, 8, false, true},  {16, 1024, 1024, 32, 8, true, true},
    };
    std::vector<double> tf;
    for (const Case &c : timed) run_case(c, st, &tf);

    CK(cudaStreamDestroy(st));
    finish_and_exit(g_fail == 0 ? 0 : 1);
}
