// tools/decode_proto.cu - dev-only test and timing of the standalone multi-warp decode prototype
// (backends/cuda/attention/decode_mw/decode_mw.cuh) against a plain fp32 reference kernel.
// Built and run by tools/decode_proto.sh on an H100/H200; not part of the library build.
//
// Per case: random q (bf16), K/V caches (bf16, or E4M3 from random floats) in paged blocks with
// shuffled block ids, random fp8 descales, out and lse poisoned with NaN bit patterns, one launch,
// then: every element of out and lse written and finite, out and lse against the reference
// (max-abs and relative error). Batch invariance: sequences of a batch run alone must give the same
// out and lse bits. Timed sizes: 3 warm-ups, 20 timed launches (cudaEvent each, median), a 1 GiB
// device-to-device copy timed the same way is the bandwidth ceiling. A launch that does not finish
// within 10 s is reported as a hang. Last line: "N passed, M failed".
#include "../backends/cuda/attention/decode_mw/decode_mw.cuh"
#include "proto_util.cuh"

#include <cuda_fp8.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>


// ---- device-side inputs and reference ------------------------------------------------------------

// uniform in [-1, 1) times amp, never exactly zero
__device__ inline float rnd(uint64_t seed, uint64_t i, float amp)
{
    const float u = (proto_hash32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (1.0f / 8388608.0f) - 1.0f;
    return (u == 0.0f ? 0.5f : u) * amp;
}

__global__ void fill_bf16(__nv_bfloat16 *x, int64_t n, uint64_t seed, float amp)
{
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = __float2bfloat16_rn(rnd(seed, i, amp));
}

// E4M3 from random floats in [-2, 2) (subnormals near 0 included)
__global__ void fill_fp8(uint8_t *x, int64_t n, uint64_t seed)
{
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = __nv_cvt_float_to_fp8(rnd(seed, i, 2.0f), __NV_SATFINITE, __NV_E4M3);
}

__global__ void fill_u32(uint32_t *x, int64_t n, uint32_t v)
{
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = v;
}

// exact E4M3 decode (no NaN in the inputs)
__device__ inline float e4m3_to_float(uint8_t x)
{
    const int s = x >> 7, e = (x >> 3) & 15, mt = x & 7;
    const float v = e == 0 ? ldexpf(static_cast<float>(mt), -9) : ldexpf(1.0f + mt / 8.0f, e - 7);
    return s ? -v : v;
}

__device__ inline float kv_val(const void *c, bool fp8, int64_t i)
{
    return fp8 ? e4m3_to_float(static_cast<const uint8_t *>(c)[i])
               : __bfloat162float(static_cast<const __nv_bfloat16 *>(c)[i]);
}

// plain fp32 reference: one CTA per (query head, sequence); logits into scratch [B][Hq][maxL]
__global__ void reference_kernel(fa_dmw::Params p, int D, bool fp8, float *scratch, int maxL, float *ref_out,
                                 float *ref_lse)
{
    const int hq = blockIdx.x, b = blockIdx.y, kvh = hq / p.G;
    const int L = p.seq_lens[b];
    const __nv_bfloat16 *qr = p.q + (static_cast<int64_t>(b) * p.Hq + hq) * D;
    float *sc = scratch + (static_cast<int64_t>(b) * p.Hq + hq) * maxL;
    const float ks = fp8 ? p.k_descale[b * p.Hkv + kvh] : 1.0f;
    const float vs = fp8 ? p.v_descale[b * p.Hkv + kvh] : 1.0f;
    __shared__ float red[256];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const int blk = p.block_table[static_cast<int64_t>(b) * p.max_blocks + j / p.block_size];
        const int64_t off =
            blk * p.stride_blk + (j % p.block_size) * p.stride_tok + static_cast<int64_t>(kvh) * D;
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s = fmaf(__bfloat162float(qr[d]), kv_val(p.k_cache, fp8, off + d), s);
        s *= ks * p.sm_scale;
        sc[j] = s;
        mx = fmaxf(mx, s);
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float e = expf(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    sum = red[0];
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < L; ++j) {
            const int blk = p.block_table[static_cast<int64_t>(b) * p.max_blocks + j / p.block_size];
            const int64_t off =
                blk * p.stride_blk + (j % p.block_size) * p.stride_tok + static_cast<int64_t>(kvh) * D;
            acc = fmaf(sc[j], kv_val(p.v_cache, fp8, off + d), acc);
        }
        ref_out[(static_cast<int64_t>(b) * p.Hq + hq) * D + d] = acc * vs / sum;
    }
    if (threadIdx.x == 0) ref_lse[static_cast<int64_t>(b) * p.Hq + hq] = mx + logf(sum);
}

// does mma.sync keep a subnormal bf16 input? (the fp8 path's E4M3 subnormals are bf16 subnormals)
__global__ void probe_subnormal(float *res)
{
    uint32_t a[4] = {0x00100010u, 0x00100010u, 0x00100010u, 0x00100010u}; // 2^-129 each
    const uint32_t one64 = 0x5f805f80u;                                     // 2^64 each
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    fa_dmw::mma_bf16(c, a, one64, one64);
    if (threadIdx.x == 0) res[0] = c[0]; // 16 * 2^-65 = 2^-61 when kept
}

// ---- host side -----------------------------------------------------------------------------------

static uint64_t g_seed = 1;

struct Case {
    const char *name;
    std::vector<int> lens;
    int Hq, Hkv, D;
    bool fp8;
    int bs, splits;
    float qamp;
    bool timed;
};

struct Bufs {
    void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
    int *bt = nullptr, *lens = nullptr;
    float *kd = nullptr, *vd = nullptr, *lse = nullptr, *po = nullptr, *pl = nullptr;
    float *scratch = nullptr, *rout = nullptr, *rlse = nullptr;
    void release()
    {
        void *ps[] = {q, k, v, out, bt, lens, kd, vd, lse, po, pl, scratch, rout, rlse};
        for (void *x : ps)
            if (x) cudaFree(x);
        *this = Bufs();
    }
};

static int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535)); }

// builds the inputs of a case; returns the params (device pointers) and the longest length (maxL)
static fa_dmw::Params build(const Case &c, Bufs &bf, int &maxL)
{
    const int B = static_cast<int>(c.lens.size());
    maxL = *std::max_element(c.lens.begin(), c.lens.end());
    const int maxb = (maxL + c.bs - 1) / c.bs;
    int nblk = 0;
    for (int b = 0; b < B; ++b) nblk += (c.lens[b] + c.bs - 1) / c.bs;
    nblk += 3; // a few unused blocks
    std::vector<int> perm(nblk);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(static_cast<uint32_t>(g_seed * 7919));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int> bt(static_cast<size_t>(B) * maxb, -1);
    int next = 0;
    for (int b = 0; b < B; ++b)
        for (int i = 0; i < (c.lens[b] + c.bs - 1) / c.bs; ++i)
            bt[static_cast<size_t>(b) * maxb + i] = perm[next++];
    const int64_t es = c.fp8 ? 1 : 2;
    const int64_t kv_elems = static_cast<int64_t>(nblk) * c.bs * c.Hkv * c.D;
    const int64_t qn = static_cast<int64_t>(B) * c.Hq * c.D;
    CK(cudaMalloc(&bf.q, qn * 2));
    CK(cudaMalloc(&bf.k, kv_elems * es));
    CK(cudaMalloc(&bf.v, kv_elems * es));
    CK(cudaMalloc(&bf.out, qn * 2));
    CK(cudaMalloc(&bf.bt, bt.size() * sizeof(int)));
    CK(cudaMalloc(&bf.lens, B * sizeof(int)));
    CK(cudaMalloc(&bf.kd, B * c.Hkv * sizeof(float)));
    CK(cudaMalloc(&bf.vd, B * c.Hkv * sizeof(float)));
    CK(cudaMalloc(&bf.lse, B * c.Hq * sizeof(float)));
    CK(cudaMalloc(&bf.po, static_cast<int64_t>(c.splits) * qn * sizeof(float)));
    CK(cudaMalloc(&bf.pl, static_cast<int64_t>(c.splits) * B * c.Hq * sizeof(float)));
    CK(cudaMemcpy(bf.bt, bt.data(), bt.size() * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bf.lens, c.lens.data(), B * sizeof(int), cudaMemcpyHostToDevice));
    std::vector<float> ds(2 * B * c.Hkv);
    for (auto &x : ds) x = 0.5f + 1.5f * (rng() % 1000) / 1000.0f;
    CK(cudaMemcpy(bf.kd, ds.data(), B * c.Hkv * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bf.vd, ds.data() + B * c.Hkv, B * c.Hkv * sizeof(float), cudaMemcpyHostToDevice));
    fill_bf16<<<grid_for(qn), 256>>>(static_cast<__nv_bfloat16 *>(bf.q), qn, g_seed * 3 + 1, c.qamp);
    if (c.fp8) {
        fill_fp8<<<grid_for(kv_elems), 256>>>(static_cast<uint8_t *>(bf.k), kv_elems, g_seed * 3 + 2);
        fill_fp8<<<grid_for(kv_elems), 256>>>(static_cast<uint8_t *>(bf.v), kv_elems, g_seed * 3 + 3);
    } else {
        fill_bf16<<<grid_for(kv_elems), 256>>>(static_cast<__nv_bfloat16 *>(bf.k), kv_elems, g_seed * 3 + 2,
                                               1.0f);
        fill_bf16<<<grid_for(kv_elems), 256>>>(static_cast<__nv_bfloat16 *>(bf.v), kv_elems, g_seed * 3 + 3,
                                               1.0f);
    }
    CK(cudaGetLastError());
    ++g_seed;
    fa_dmw::Params p{};
    p.q = static_cast<const __nv_bfloat16 *>(bf.q);
    p.k_cache = bf.k;
    p.v_cache = bf.v;
    p.block_table = bf.bt;
    p.seq_lens = bf.lens;
    p.k_descale = bf.kd;
    p.v_descale = bf.vd;
    p.out = static_cast<__nv_bfloat16 *>(bf.out);
    p.lse = bf.lse;
    p.part_o = bf.po;
    p.part_lse = bf.pl;
    p.stride_tok = static_cast<int64_t>(c.Hkv) * c.D;
    p.stride_blk = p.stride_tok * c.bs;
    p.num_seqs = B;
    p.Hq = c.Hq;
    p.Hkv = c.Hkv;
    p.G = c.Hq / c.Hkv;
    p.max_blocks = maxb;
    p.block_size = c.bs;
    p.num_splits = c.splits;
    p.sm_scale = 1.0f / sqrtf(static_cast<float>(c.D));
    return p;
}

static void poison(const fa_dmw::Params &p, int D)
{
    const int64_t qn = static_cast<int64_t>(p.num_seqs) * p.Hq * D;
    fill_u32<<<grid_for(qn / 2), 256>>>(reinterpret_cast<uint32_t *>(p.out), qn / 2, 0xffffffffu);
    fill_u32<<<grid_for(p.num_seqs * p.Hq), 256>>>(reinterpret_cast<uint32_t *>(p.lse), p.num_seqs * p.Hq,
                                                   0x7fc00001u);
    CK(cudaGetLastError());
}

static float bf2f(uint16_t h)
{
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// correctness of the launch just made against the reference
static bool check(const Case &c, const fa_dmw::Params &p, Bufs &bf, int maxL)
{
    const int B = p.num_seqs;
    const int64_t qn = static_cast<int64_t>(B) * c.Hq * c.D;
    CK(cudaMalloc(&bf.scratch, static_cast<int64_t>(B) * c.Hq * maxL * sizeof(float)));
    CK(cudaMalloc(&bf.rout, qn * sizeof(float)));
    CK(cudaMalloc(&bf.rlse, B * c.Hq * sizeof(float)));
    reference_kernel<<<dim3(c.Hq, B), 256>>>(p, c.D, c.fp8, bf.scratch, maxL, bf.rout, bf.rlse);
    CK(cudaGetLastError());
    sync_or_die(0, 10, "reference");
    std::vector<uint16_t> out(qn);
    std::vector<float> ro(qn), lse(B * c.Hq), rl(B * c.Hq);
    CK(cudaMemcpy(out.data(), p.out, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ro.data(), bf.rout, qn * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), p.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(rl.data(), bf.rlse, rl.size() * 4, cudaMemcpyDeviceToHost));
    int64_t nonfinite = 0, bad = 0, first_bad = -1;
    double max_abs = 0, max_ref = 0, max_rel = 0, lse_err = 0;
    for (int64_t i = 0; i < qn; ++i) {
        const float x = bf2f(out[i]);
        if (!std::isfinite(x)) {
            ++nonfinite;
            if (first_bad < 0) first_bad = i;
            continue;
        }
        const double e = fabs(static_cast<double>(x) - ro[i]);
        max_abs = std::max(max_abs, e);
        max_ref = std::max(max_ref, fabs(static_cast<double>(ro[i])));
        if (e > 1e-3 + 2e-2 * fabs(ro[i])) {
            ++bad;
            if (first_bad < 0) first_bad = i;
        }
        max_rel = std::max(max_rel, e / std::max(1e-3, fabs(static_cast<double>(ro[i]))));
    }
    int64_t lse_bad = 0;
    for (size_t i = 0; i < lse.size(); ++i) {
        if (!std::isfinite(lse[i])) {
            ++lse_bad;
            continue;
        }
        const double e = fabs(static_cast<double>(lse[i]) - rl[i]);
        lse_err = std::max(lse_err, e / (1.0 + fabs(static_cast<double>(rl[i]))));
        if (e > 1e-3 + 1e-4 * fabs(static_cast<double>(rl[i]))) ++lse_bad;
    }
    const bool ok = nonfinite == 0 && bad == 0 && lse_bad == 0;
    printf("%s %s: out max_abs %.3g (max |ref| %.3g, max rel %.3g), lse rel %.3g, %lld non-finite/unwritten, "
           "%lld out of tolerance, %lld bad lse\n",
           ok ? "PASS" : "FAIL", c.name, max_abs, max_ref, max_rel, lse_err,
           static_cast<long long>(nonfinite), static_cast<long long>(bad), static_cast<long long>(lse_bad));
    if (!ok && first_bad >= 0) {
        const int64_t row = first_bad / c.D;
        printf("  first bad: seq %lld head %lld dim %lld: got %g ref %g\n",
               static_cast<long long>(row / c.Hq), static_cast<long long>(row % c.Hq),
               static_cast<long long>(first_bad % c.D), bf2f(out[first_bad]), ro[first_bad]);
    }
    ok ? ++g_pass : ++g_fail;
    cudaFree(bf.scratch);
    cudaFree(bf.rout);
    cudaFree(bf.rlse);
    bf.scratch = bf.rout = bf.rlse = nullptr;
    return ok;
}

// sequence i run alone (pointers moved to its rows) must give the batch's bits
static void check_invariance(const Case &c, fa_dmw::Params p, const std::vector<int> &seqs)
{
    const int B = p.num_seqs;
    const int64_t qn = static_cast<int64_t>(B) * c.Hq * c.D;
    std::vector<uint16_t> out(qn), out1(static_cast<size_t>(c.Hq) * c.D);
    std::vector<float> lse(B * c.Hq), lse1(c.Hq);
    CK(cudaMemcpy(out.data(), p.out, qn * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), p.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
    int diff = 0;
    for (int i : seqs) {
        fa_dmw::Params a = p;
        const int64_t hq = static_cast<int64_t>(i) * c.Hq;
        a.num_seqs = 1;
        a.q = p.q + hq * c.D;
        a.block_table = p.block_table + static_cast<int64_t>(i) * p.max_blocks;
        a.seq_lens = p.seq_lens + i;
        a.k_descale = p.k_descale + i * c.Hkv;
        a.v_descale = p.v_descale + i * c.Hkv;
        a.out = p.out + hq * c.D; // rewrites the same rows
        a.lse = p.lse + hq;
        poison(p, c.D);
        CK(fa_dmw::launch(a, c.D, c.fp8, 0));
        sync_or_die(0, 10, "invariance launch");
        CK(cudaMemcpy(out1.data(), a.out, out1.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(lse1.data(), a.lse, lse1.size() * 4, cudaMemcpyDeviceToHost));
        if (memcmp(out1.data(), out.data() + hq * c.D, out1.size() * 2) != 0 ||
            memcmp(lse1.data(), lse.data() + hq, lse1.size() * 4) != 0)
            ++diff;
    }
    printf("%s %s: batch invariance (%zu sequences alone vs in the batch of %d, splits %d): %d differ\n",
           diff == 0 ? "PASS" : "FAIL", c.name, seqs.size(), B, c.splits, diff);
    diff == 0 ? ++g_pass : ++g_fail;
}

static double g_copy_gbs = 0;

static double median_ms(cudaStream_t st, int n, const std::function<void()> &f)
{
    std::vector<cudaEvent_t> ev(2 * n);
    for (auto &e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < 3; ++i) f();
    sync_or_die(st, 10, "warm-up");
    for (int i = 0; i < n; ++i) {
        CK(cudaEventRecord(ev[2 * i], st));
        f();
        CK(cudaEventRecord(ev[2 * i + 1], st));
    }
    sync_or_die(st, 10, "timed launches");
    std::vector<float> ms(n);
    for (int i = 0; i < n; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (auto &e : ev) CK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    return ms[n / 2];
}

static void run_case(const Case &c)
{
    Bufs bf;
    int maxL = 0;
    fa_dmw::Params p = build(c, bf, maxL);
    poison(p, c.D);
    cudaError_t e = fa_dmw::launch(p, c.D, c.fp8, 0);
    if (e != cudaSuccess) {
        printf("FAIL %s: launch: %s\n", c.name, cudaGetErrorString(e));
        ++g_fail;
        bf.release();
        return;
    }
    sync_or_die(0, 10, c.name);
    CK(cudaGetLastError());
    check(c, p, bf, maxL);
    if (!c.timed && c.lens.size() > 1) {
        std::vector<int> seqs = {0, static_cast<int>(c.lens.size()) - 1};
        check_invariance(c, p, seqs);
    }
    if (c.timed) {
        int64_t keys = 0;
        for (int x : c.lens) keys += x;
        const double bytes = 2.0 * keys * c.Hkv * c.D * (c.fp8 ? 1 : 2) +
                             2.0 * 2.0 * static_cast<double>(c.lens.size()) * c.Hq * c.D;
        const double ms = median_ms(0, 20, [&] { fa_dmw::launch(p, c.D, c.fp8, 0); });
        CK(cudaGetLastError());
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("TIME %-40s %9.1f us %7.0f GB/s %.3f of copy (splits %d)\n", c.name, ms * 1e3, gbs,
               gbs / g_copy_gbs, c.splits);
    }
    bf.release();
}

static int pick_splits(int B, int Hkv, int L, int sms)
{
    int s = 1;
    while (B * Hkv * s < 2 * sms && L / (2 * s) >= 256 && s < 128) s *= 2;
    return s;
}

int main()
{
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    if (prop.major < 8) {
        printf("FAIL: the prototype needs sm_80+\n");
        ++g_fail;
        finish_and_exit(1);
    }
    {
        float *r;
        CK(cudaMalloc(&r, 4));
        probe_subnormal<<<1, 32>>>(r);
        CK(cudaGetLastError());
        float h = 0;
        CK(cudaMemcpy(&h, r, 4, cudaMemcpyDeviceToHost));
        printf("INFO probe: mma.sync with a subnormal bf16 input: %s (%g, 2^-61 = %g)\n",
               h == ldexpf(1.0f, -61) ? "kept" : "FLUSHED or inexact", h, ldexpf(1.0f, -61));
        cudaFree(r);
    }
    {
        const size_t n = size_t(1) << 30;
        void *a, *b;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        CK(cudaMemset(a, 1, n));
        const double ms = median_ms(0, 20, [&] { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0); });
        g_copy_gbs = 2.0 * n / (ms * 1e-3) / 1e9;
        printf("INFO copy: 1 GiB device-to-device %.3f ms, %.0f GB/s (read + write)\n", ms, g_copy_gbs);
        cudaFree(a);
        cudaFree(b);
    }

    std::vector<Case> cases;
    for (int fp8 = 0; fp8 < 2; ++fp8)
        for (int D : {128, 64})
            for (int bs : {16, 1}) {
                static char names[64][96];
                static int ni = 0;
                auto add = [&](const char *what, std::vector<int> lens, int Hq, int Hkv, int splits,
                               float amp) {
                    snprintf(names[ni], 96, "%s d%d %s bs%d", what, D, fp8 ? "fp8" : "bf16", bs);
                    cases.push_back({names[ni++], lens, Hq, Hkv, D, fp8 != 0, bs, splits, amp, false});
                };
                add("gqa4 lens 1/37/300/1000", {1, 37, 300, 1000}, 32, 8, 1, 4.0f);
                add("gqa16 splits3", {700, 5, 2049}, 32, 2, 3, 4.0f);
                if (bs == 16) {
                    add("mha g1", {129, 64}, 8, 8, 1, 4.0f);
                    add("gqa6 splits4", {4097, 31, 600}, 12, 2, 4, 4.0f);
                    add("gqa4 hot q*256", {513, 2000}, 32, 8, 1, 256.0f);
                    // huge logits (the rounded-up maximum); fp8 scales Q by 2^64 in the kernel, so its
                    // queries stay below 2^63
                    if (fp8)
                        add("gqa4 huge q*1e15", {300, 77}, 32, 8, 2, 1e15f);
                    else
                        add("gqa4 huge q*1e30", {300, 77}, 32, 8, 2, 1e30f);
                }
            }
    for (const Case &c : cases) run_case(c);

    // invariance on a larger batch of mixed lengths
    {
        std::vector<int> lens;
        std::mt19937 rng(5);
        for (int i = 0; i < 16; ++i) lens.push_back(1 + static_cast<int>(rng() % 3000));
        for (int fp8 = 0; fp8 < 2; ++fp8)
            for (int S : {1, 4}) {
                Case c{fp8 ? "batch16 mixed d128 fp8 bs16" : "batch16 mixed d128 bf16 bs16",
                       lens,
                       32,
                       8,
                       128,
                       fp8 != 0,
                       16,
                       S,
                       4.0f,
                       false};
                Bufs bf;
                int maxL = 0;
                fa_dmw::Params p = build(c, bf, maxL);
                poison(p, c.D);
                CK(fa_dmw::launch(p, c.D, c.fp8, 0));
                sync_or_die(0, 10, c.name);
                check(c, p, bf, maxL);
                check_invariance(c, p, {0, 3, 7, 15});
                bf.release();
            }
    }

    // timed sizes
    struct Shape {
        int B, L;
    };
    const Shape shapes[] = {{1, 32768}, {8, 8192}, {64, 8192}, {256, 1024}};
    for (int D : {128, 64})
        for (int fp8 = 0; fp8 < 2; ++fp8)
            for (const Shape &s : shapes) {
                static char names[32][96];
                static int ni = 0;
                snprintf(names[ni], 96, "%dx%d h32/8 d%d %s bs16", s.B, s.L, D, fp8 ? "fp8" : "bf16");
                Case c{names[ni++], std::vector<int>(s.B, s.L),
                       32,          8,
                       D,           fp8 != 0,
                       16,          pick_splits(s.B, 8, s.L, prop.multiProcessorCount),
                       4.0f,        true};
                run_case(c);
            }
    {
        Case c{
            "64x8192 h32/8 d128 bf16 bs1", std::vector<int>(64, 8192), 32, 8, 128, false, 1, 1, 4.0f, true};
        run_case(c);
    }
    finish_and_exit(g_fail == 0 ? 0 : 1);
}
