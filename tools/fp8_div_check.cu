// tools/fp8_div_check.cu - proof by exhaustion of the fp8 cache write's division
// (backends/cuda/cache_kernels.cu: fp8_recip, fp8_quotient, store_fp8): the fp8 byte of
//     r  = RN(1 / scale)   (NaN when scale is outside [2^-64, 2^126])
//     q0 = RN(x r),  e = RN(q0 scale - x),  q = RN(q0 - e r)
//     q  = x / scale  instead where !(|q0| <= 2^126)
// against the fp8 byte of the IEEE fp32 division x / scale, both through cuda_fp8.h's
// __nv_cvt_float_to_fp8(., __NV_SATFINITE, E4M3 / E5M2) (the host code of the conversion that
// cvt.rn.satfinite does on the GPU). The host arithmetic is IEEE fp32 (SSE / AArch64 scalar, no
// contraction: build with -ffp-contract=off; fmaf is libm's exact fma): what the device's
// __frcp_rn, __fmul_rn, __fmaf_rn and __fdiv_rn compute. (The kernel divides all 4 elements of a
// group when one of them needs it; a divided element is the reference itself, so checking the
// choice element by element is the same.) Cases:
//   1. every bf16 and every f16 bit pattern as x, times 2146 scales: 1, 0.5, 2, powers of two
//      2^-30 .. 2^30, 1/3, 0.1, amax / 448 and 448 / amax style scales (57344 too), the ends of
//      the fast path's range, 1, 2, the smallest normal, subnormals and FLT_MAX with their
//      neighbours, 2000 log-uniform random scales in [2^-40, 2^40] (fixed seed);
//   2. 10^7 random fp32 bit patterns as x (inf, NaN, subnormals included) with random scales
//      (any positive finite fp32, one of the set, or log-uniform in [2^-40, 2^40]);
//   3. the hard cases of the fp32 quotient: every a, b in [1, 2) with A 2^24 - B k or
//      A 2^25 - B k in [-16, 16] for an integer k (A = a 2^23, B = b 2^23): the a, b whose
//      quotient lies within 16 2^-47 / b (a >= b) or 16 2^-48 / b (a < b) of a rounding
//      midpoint. Only those can be rounded wrongly (cache_kernels.cu: |N| < 6 and < 9), so
//      q == a / b on all of them proves q == x / scale wherever the fast path's steps are normal
//      or exact (|x| >= 2^-102, |x / scale| >= 2^-125).
// Every case counts the fp8 bytes that differ (each format) and where q differs from x / scale
// in fp32: allowed only outside that range (quotients below 2^-19, all an fp8 zero of x's sign).
// It checks that 1 / scale is the correctly rounded reciprocal (what __frcp_rn gives). Controls,
// which must differ somewhere or the check could not tell formulas apart: the fp8 bytes of q0
// alone (x * (1 / scale), no correction), and case 3 with r rounded the other way (a reciprocal
// within one ulp but not correctly rounded). Exit status 0 when all of this holds.
//   nvcc -O2 -std=c++17 -Xcompiler -ffp-contract=off tools/fp8_div_check.cu -o /tmp/fp8_div_check
//   /tmp/fp8_div_check            (about 25 s)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace
{

constexpr float kScaleLo = 0x1p-64f, kScaleHi = 0x1p126f; // the fast path's scales
constexpr float kQuotHi = 0x1p126f;                       // and its |q0|

float bits_f(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint32_t f_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// the kernel's reciprocal and quotient (cache_kernels.cu: fp8_recip, fp8_quotient)
float recip(float scale)
{
    return scale >= kScaleLo && scale <= kScaleHi ? 1.0f / scale : bits_f(0x7fc00000u);
}
float quotient(float x, float scale, float r)
{
    const float q0 = x * r;
    const float e = fmaf(q0, scale, -x);
    float q = fmaf(-e, r, q0);
    if (!(fabsf(q0) <= kQuotHi)) q = x / scale;
    return q;
}

uint8_t fp8(float v, __nv_fp8_interpretation_t fmt)
{
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt);
}

uint64_t rng_state = 0x5eed2026f8d1c0deull;
uint64_t rng() // splitmix64
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
double uniform01() { return (double)(rng() >> 11) * 0x1p-53; }
float log_uniform(int lo, int hi) { return (float)exp2(lo + (hi - lo) * uniform01()); }

struct Tally {
    uint64_t n = 0;             // comparisons (x, scale) pairs
    uint64_t bad[2] = {0, 0};   // fp8 bytes that differ: E4M3, E5M2
    uint64_t fp32_tiny = 0;     // q != x / scale in fp32, inside the allowed (tiny) range
    uint64_t fp32_bad = 0;      // q != x / scale in fp32 outside it
    uint64_t naive_bad = 0;     // control: fp8 bytes of q0 alone that differ (E4M3 + E5M2)
    bool fp8 = true;            // fp8 bytes compared (case 3 compares fp32 quotients only)
    int shown = 0;
};

const __nv_fp8_interpretation_t kFmt[2] = {__NV_E4M3, __NV_E5M2};
const char *const kFmtName[2] = {"E4M3", "E5M2"};

void compare(Tally &t, float x, float scale, float r)
{
    const float ref = x / scale, q = quotient(x, scale, r), q0 = x * r;
    ++t.n;
    for (int f = 0; f < 2; ++f) {
        const uint8_t want = fp8(ref, kFmt[f]), got = fp8(q, kFmt[f]);
        if (want != got) {
            ++t.bad[f];
            if (t.shown++ < 8)
                printf("  MISMATCH %s: x %a (0x%08x) scale %a: x/scale %a -> 0x%02x, q %a -> 0x%02x\n",
                       kFmtName[f], x, f_bits(x), scale, ref, want, q, got);
        }
        if (std::isfinite(r) && fp8(q0, kFmt[f]) != want) ++t.naive_bad;
    }
    if (f_bits(q) != f_bits(ref) && !(std::isnan(q) && std::isnan(ref))) {
        const double qd = fabs((double)x / (double)scale);
        if (fabsf(x) < 0x1p-102f || qd < 0x1p-125) {
            ++t.fp32_tiny;
        } else {
            ++t.fp32_bad;
            if (t.shown++ < 8) printf("  FP32 MISMATCH: x %a scale %a: x/scale %a, q %a\n", x, scale, ref, q);
        }
    }
}

uint64_t total_n = 0, total_bad = 0, total_naive = 0;

bool report(const char *name, const Tally &t)
{
    char fp8s[96] = "fp8 not compared";
    if (t.fp8)
        snprintf(fp8s, sizeof fp8s, "fp8 mismatches E4M3 %" PRIu64 " E5M2 %" PRIu64, t.bad[0], t.bad[1]);
    printf("%-34s %12" PRIu64 " pairs  %s  fp32: %" PRIu64 " differ (tiny, allowed) %" PRIu64
           " (not allowed)  control %" PRIu64 "\n",
           name, t.n, fp8s, t.fp32_tiny, t.fp32_bad, t.naive_bad);
    total_n += t.n;
    total_bad += t.bad[0] + t.bad[1] + t.fp32_bad;
    total_naive += t.naive_bad;
    return t.bad[0] == 0 && t.bad[1] == 0 && t.fp32_bad == 0;
}

// 1 / scale is the correctly rounded reciprocal: nearer to 1 / scale than either neighbour
// (r * scale and the neighbours' products are exact in double; 1 / scale is never a midpoint)
bool recip_is_rn(float scale)
{
    const float r = 1.0f / scale;
    if (!std::isfinite(r) || r == 0.0f || fabsf(r) < FLT_MIN) return true; // not used by the fast path
    const double d = fabs(1.0 - (double)r * scale);
    const float up = nextafterf(r, INFINITY), dn = nextafterf(r, 0.0f);
    return d < fabs(1.0 - (double)up * scale) && d < fabs(1.0 - (double)dn * scale);
}

std::vector<float> scale_set()
{
    std::vector<float> s = {1.0f, 0.5f, 2.0f, 1.0f / 3.0f, 0.1f, 3.0f, 1.5f, 0.3f, 7.0f, 10.0f};
    for (int k = -30; k <= 30; ++k) s.push_back(ldexpf(1.0f, k));
    const float amax[] = {0.5f,  1.0f,  2.0f,   3.0f,    5.0f,     7.5f,
                          10.0f, 17.3f, 100.0f, 1000.0f, 65504.0f, 3.3895e38f};
    for (float a : amax) {
        s.push_back(a / 448.0f);
        s.push_back(448.0f / a);
        s.push_back(a / 57344.0f);
        s.push_back(57344.0f / a);
    }
    const float edges[] = {1.0f, 2.0f, kScaleLo, kScaleHi, FLT_MIN, FLT_MAX, 0x1p-127f, 0x1p-128f};
    for (float v : edges) {
        s.push_back(v);
        s.push_back(nextafterf(v, 0.0f));
        s.push_back(nextafterf(v, INFINITY));
    }
    s.push_back(0x1.8p-127f);   // subnormals
    s.push_back(0x1p-140f);
    s.push_back(0x1p-149f);
    s.push_back(0x1.fffffcp-127f);
    for (int i = 0; i < 2000; ++i) s.push_back(log_uniform(-40, 40));
    std::vector<float> out;
    for (float v : s)
        if (std::isfinite(v) && v > 0.0f) out.push_back(v);
    return out;
}

// case 3: A 2^t - B k = N, t = 24 (a / b in [1, 2): midpoints k 2^-24, k odd) and t = 25 (in
// [1/2, 1): k 2^-25), 0 < |N| <= 16, k any integer, so A = N / 2^t modulo B (2^v2(B) divides N).
// Also the control: the same quotients from r rounded the other way.
bool hard_cases()
{
    Tally t;
    t.fp8 = false;
    uint64_t unfaithful = 0, wrong_r_bad = 0;
    const int kMaxN = 16;
    for (uint32_t B = 1u << 23; B < (1u << 24); ++B) {
        const float b = ldexpf((float)B, -23), r = recip(b);
        const float r_wrong = (double)r > 1.0 / b ? nextafterf(r, 0.0f) : nextafterf(r, INFINITY);
        const int tz = __builtin_ctz(B);
        const uint64_t Bp = B >> tz;
        for (int tpow = 24; tpow <= 25; ++tpow) {
            uint64_t inv = 1; // of 2^(tpow - tz) modulo the odd Bp
            const uint64_t inv2 = (Bp + 1) / 2;
            for (int i = 0; i < tpow - tz; ++i) inv = inv * inv2 % Bp;
            for (int N = -kMaxN; N <= kMaxN; ++N) {
                if (N == 0 || (N & ((1 << tz) - 1)) != 0) continue;
                const int64_t Np = N / (1 << tz);
                const uint64_t A0 = (uint64_t)((Np % (int64_t)Bp + (int64_t)Bp) % (int64_t)Bp) * inv % Bp;
                uint64_t A = A0 + ((1u << 23) > A0 ? ((1u << 23) - A0 + Bp - 1) / Bp * Bp : 0);
                for (; A < (1u << 24); A += Bp) {
                    const float a = ldexpf((float)A, -23);
                    const float ref = a / b, q = quotient(a, b, r), q0 = a * r;
                    ++t.n;
                    if (q != ref) {
                        ++t.fp32_bad;
                        if (t.shown++ < 8)
                            printf("  HARD CASE MISMATCH: a %a b %a: a/b %a, q %a\n", a, b, ref, q);
                    }
                    if (quotient(a, b, r_wrong) != ref) ++wrong_r_bad;
                    if (q0 != ref) ++t.naive_bad;
                    // q0 within one ulp of a / b? (a - b ref is exact in double; its sign says
                    // on which side of ref a / b lies)
                    const double rem = (double)a - (double)b * ref;
                    const float other = rem > 0 ? nextafterf(ref, INFINITY) : nextafterf(ref, 0.0f);
                    if (q0 != ref && (q0 != other || rem == 0)) ++unfaithful;
                }
            }
        }
    }
    bool ok = report("3. hard cases, a, b in [1, 2)", t);
    printf("   (q0 = a * (1 / b) alone: %" PRIu64 " differ from a / b, %" PRIu64
           " not within one ulp of it; q from r rounded the other way: %" PRIu64 " differ)\n",
           t.naive_bad, unfaithful, wrong_r_bad);
    total_naive += wrong_r_bad;
    ok &= wrong_r_bad > 0;
    return ok;
}

} // namespace

int main()
{
    bool ok = true;
    const std::vector<float> scales = scale_set();

    int recip_bad = 0;
    for (float s : scales) recip_bad += !recip_is_rn(s);
    printf("%zu scales; 1 / scale not correctly rounded: %d\n", scales.size(), recip_bad);
    ok &= recip_bad == 0;

    for (int src = 0; src < 2; ++src) {
        Tally t;
        for (float s : scales) {
            const float r = recip(s);
            for (uint32_t u = 0; u < 65536; ++u) {
                float x;
                if (src == 0) {
                    x = bits_f(u << 16); // bf16: the high half of an fp32
                } else {
                    __half_raw h;
                    h.x = (unsigned short)u;
                    x = __half2float(__half(h));
                }
                compare(t, x, s, r);
            }
        }
        ok &= report(src == 0 ? "1. every bf16 x, the scale set" : "1. every f16 x, the scale set", t);
    }

    {
        Tally t;
        int recip_bad2 = 0;
        for (int i = 0; i < 10000000; ++i) {
            const float x = bits_f((uint32_t)rng());
            float s;
            const uint64_t k = rng() % 4;
            if (k == 0) { // any positive finite fp32 (subnormal and huge included)
                do s = bits_f((uint32_t)rng() & 0x7fffffffu);
                while (!(s > 0.0f) || !std::isfinite(s));
            } else if (k == 1) {
                s = scales[rng() % scales.size()];
            } else {
                s = log_uniform(-40, 40);
            }
            if (i % 64 == 0) recip_bad2 += !recip_is_rn(s);
            compare(t, x, s, recip(s));
        }
        ok &= report("2. 1e7 random fp32 x, random scale", t);
        printf("   (1 / scale not correctly rounded: %d of 156250 checked)\n", recip_bad2);
        ok &= recip_bad2 == 0;
    }

    ok &= hard_cases();

    // the control must fail somewhere: else this program could not tell the formulas apart
    const bool control = total_naive > 0;
    printf("total: %" PRIu64 " comparisons, %" PRIu64
           " mismatches; controls (q0 alone, r rounded the other way) %" PRIu64 " mismatches%s\n",
           total_n, total_bad, total_naive, control ? "" : " (NONE: the check is blind)");
    ok &= control;
    printf("%s\n", ok ? "fp8_div_check: PASS" : "fp8_div_check: FAIL");
    return ok ? 0 : 1;
}
