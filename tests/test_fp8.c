/* test_fp8.c - the CPU backend's software fp8 / f16 / bf16 conversions (fa_cpu.h).

   Oracles are written here from the format definitions (value = (-1)^s * 2^(e - bias) * 1.m,
   subnormals 2^(1 - bias) * 0.m), never from the backend's code: exhaustive decodes, round
   trips of every code, and round-to-nearest-even checked against a brute-force nearest search
   with ties to the even code. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fa_cpu.h"

/* ---- oracles ------------------------------------------------------------------------------ */

static double ref_e4m3(unsigned c)
{
    int s = (c >> 7) & 1, e = (c >> 3) & 15, m = c & 7;
    double v;
    if (e == 15 && m == 7) return NAN;
    v = e == 0 ? (m / 8.0) * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -v : v;
}

/* An IEEE-style binary format (sign, ebits exponent bits, mbits mantissa bits; an all-ones
   exponent is Inf / NaN), decoded exactly. */
static double ref_ieee(unsigned c, int ebits, int mbits)
{
    int s = (c >> (ebits + mbits)) & 1, e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
    int bias = (1 << (ebits - 1)) - 1;
    double frac = (double)m / (double)(1 << mbits), v;
    if (e == (1 << ebits) - 1)
        v = m == 0 ? INFINITY : NAN;
    else
        v = e == 0 ? frac * pow(2.0, 1 - bias) : (1.0 + frac) * pow(2.0, e - bias);
    return s ? -v : v;
}

static double ref_e5m2(unsigned c) { return ref_ieee(c, 5, 2); }
static double ref_half(unsigned c) { return ref_ieee(c, 5, 10); }
static double ref_bf16(unsigned c) { return ref_ieee(c, 8, 7); }

static double ref_fp8(unsigned c, fa_dtype fmt)
{
    return fmt == FA_DTYPE_FP8_E4M3 ? ref_e4m3(c) : ref_e5m2(c);
}

/* Nearest finite fp8 code to x by scanning every code (ties: the even code). Values beyond the
   largest finite magnitude saturate to it. x must not be NaN. */
static unsigned nearest_fp8(double x, fa_dtype fmt)
{
    unsigned best = 0, c;
    double best_err = INFINITY, maxv = fmt == FA_DTYPE_FP8_E4M3 ? 448.0 : 57344.0;
    if (x > maxv) x = maxv;
    if (x < -maxv) x = -maxv;
    for (c = 0; c < 256; ++c) {
        double v = ref_fp8(c, fmt), err;
        if (isnan(v) || isinf(v)) continue;
        if ((c & 0x7F) == 0 && ((c >> 7) != (unsigned)(signbit(x) != 0)))
            continue;   /* zero: keep the sign of x */
        err = fabs(v - x);
        if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
            best = c;
            best_err = err;
        }
    }
    return best;
}

/* xorshift64* */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

/* ---- fp8 ---------------------------------------------------------------------------------- */

Test(fp8, exhaustive_decode_e4m3)
{
    unsigned c;
    for (c = 0; c < 256; ++c) {
        double got = fa_cpu_fp8_to_float((uint8_t)c, FA_DTYPE_FP8_E4M3);
        cr_expect(same_double(got, ref_e4m3(c)), "e4m3 code 0x%02X: got %.9g want %.9g", c, got, ref_e4m3(c));
    }
    cr_expect_eq(fa_cpu_fp8_to_float(0x7E, FA_DTYPE_FP8_E4M3), 448.0f);
    cr_expect_eq(fa_cpu_fp8_to_float(0x01, FA_DTYPE_FP8_E4M3), ldexpf(1.0f, -9));
    cr_expect(isnan(fa_cpu_fp8_to_float(0x7F, FA_DTYPE_FP8_E4M3)));
    cr_expect(isnan(fa_cpu_fp8_to_float(0xFF, FA_DTYPE_FP8_E4M3)));
    cr_expect_eq(fa_cpu_fp8_to_float(0x78, FA_DTYPE_FP8_E4M3), 256.0f, "no inf in e4m3fn");
}

Test(fp8, exhaustive_decode_e5m2)
{
    unsigned c;
    for (c = 0; c < 256; ++c) {
        double got = fa_cpu_fp8_to_float((uint8_t)c, FA_DTYPE_FP8_E5M2);
        cr_expect(same_double(got, ref_e5m2(c)), "e5m2 code 0x%02X: got %.9g want %.9g", c, got, ref_e5m2(c));
    }
    cr_expect_eq(fa_cpu_fp8_to_float(0x7B, FA_DTYPE_FP8_E5M2), 57344.0f);
    cr_expect(isinf(fa_cpu_fp8_to_float(0x7C, FA_DTYPE_FP8_E5M2)));
    cr_expect_eq(fa_cpu_fp8_to_float(0x01, FA_DTYPE_FP8_E5M2), ldexpf(1.0f, -16));
}

Test(fp8, round_trip_every_finite_code)
{
    static const fa_dtype fmts[2] = {FA_DTYPE_FP8_E4M3, FA_DTYPE_FP8_E5M2};
    int f;
    unsigned c;
    for (f = 0; f < 2; ++f) {
        for (c = 0; c < 256; ++c) {
            double v = ref_fp8(c, fmts[f]);
            if (isnan(v) || isinf(v)) continue;
            cr_expect_eq(fa_cpu_float_to_fp8((float)v, fmts[f]), c,
                         "fmt %d: code 0x%02X (%g) did not round-trip (got 0x%02X)", (int)fmts[f], c, v,
                         fa_cpu_float_to_fp8((float)v, fmts[f]));
        }
    }
}

Test(fp8, saturation)
{
    /* E4M3: max 448 = 0x7E; anything larger, including inf and ties at 464, clamps */
    cr_expect_eq(fa_cpu_float_to_fp8(448.0f, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(449.0f, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(464.0f, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(500.0f, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(1e10f, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(FLT_MAX, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(INFINITY, FA_DTYPE_FP8_E4M3), 0x7E);
    cr_expect_eq(fa_cpu_float_to_fp8(-449.0f, FA_DTYPE_FP8_E4M3), 0xFE);
    cr_expect_eq(fa_cpu_float_to_fp8(-INFINITY, FA_DTYPE_FP8_E4M3), 0xFE);
    cr_expect_eq(fa_cpu_fp8_to_float(fa_cpu_float_to_fp8(-1e30f, FA_DTYPE_FP8_E4M3), FA_DTYPE_FP8_E4M3),
                 -448.0f);
    /* E5M2: max 57344 = 0x7B; 61440 is the tie with 65536 (inf): still clamps */
    cr_expect_eq(fa_cpu_float_to_fp8(57344.0f, FA_DTYPE_FP8_E5M2), 0x7B);
    cr_expect_eq(fa_cpu_float_to_fp8(60000.0f, FA_DTYPE_FP8_E5M2), 0x7B);
    cr_expect_eq(fa_cpu_float_to_fp8(61440.0f, FA_DTYPE_FP8_E5M2), 0x7B);
    cr_expect_eq(fa_cpu_float_to_fp8(1e9f, FA_DTYPE_FP8_E5M2), 0x7B);
    cr_expect_eq(fa_cpu_float_to_fp8(INFINITY, FA_DTYPE_FP8_E5M2), 0x7B);
    cr_expect_eq(fa_cpu_float_to_fp8(-INFINITY, FA_DTYPE_FP8_E5M2), 0xFB);
    cr_expect_eq(fa_cpu_float_to_fp8(-1e9f, FA_DTYPE_FP8_E5M2), 0xFB);
}

Test(fp8, nan_stays_nan)
{
    cr_expect_eq(fa_cpu_float_to_fp8(NAN, FA_DTYPE_FP8_E4M3), 0x7F);
    cr_expect_eq(fa_cpu_float_to_fp8(-NAN, FA_DTYPE_FP8_E4M3), 0xFF);
    cr_expect(isnan(ref_e5m2(fa_cpu_float_to_fp8(NAN, FA_DTYPE_FP8_E5M2))));
    cr_expect(isnan(ref_e5m2(fa_cpu_float_to_fp8(-NAN, FA_DTYPE_FP8_E5M2))));
    cr_expect(isnan(fa_cpu_fp8_to_float(fa_cpu_float_to_fp8(NAN, FA_DTYPE_FP8_E5M2), FA_DTYPE_FP8_E5M2)));
}

Test(fp8, ties_to_even)
{
    /* E4M3 near 1: ulp 1/8. 1 + 1/16 ties between 1.0 (mantissa 000) and 1.125 (001) */
    cr_expect_eq(fa_cpu_float_to_fp8(1.0f + 1.0f / 16, FA_DTYPE_FP8_E4M3), 0x38);
    cr_expect_eq(fa_cpu_float_to_fp8(1.0f + 3.0f / 16, FA_DTYPE_FP8_E4M3), 0x3A);
    cr_expect_eq(fa_cpu_float_to_fp8(1.0f + 1.0f / 16 + 1e-6f, FA_DTYPE_FP8_E4M3), 0x39);
    cr_expect_eq(fa_cpu_float_to_fp8(1.0f + 1.0f / 16 - 1e-6f, FA_DTYPE_FP8_E4M3), 0x38);
    cr_expect_eq(fa_cpu_float_to_fp8(-(1.0f + 3.0f / 16), FA_DTYPE_FP8_E4M3), 0xBA);
    /* a tie that carries into the next binade: 1.9375 -> 2.0 */
    cr_expect_eq(fa_cpu_float_to_fp8(1.9375f, FA_DTYPE_FP8_E4M3), 0x40);
    /* E5M2 near 1: ulp 1/4 */
    cr_expect_eq(fa_cpu_float_to_fp8(1.125f, FA_DTYPE_FP8_E5M2), 0x3C);
    cr_expect_eq(fa_cpu_float_to_fp8(1.375f, FA_DTYPE_FP8_E5M2), 0x3E);
    cr_expect_eq(fa_cpu_float_to_fp8(1.376f, FA_DTYPE_FP8_E5M2), 0x3E);
    cr_expect_eq(fa_cpu_float_to_fp8(1.124f, FA_DTYPE_FP8_E5M2), 0x3C);
}

Test(fp8, subnormals)
{
    const float s4 = ldexpf(1.0f, -9), s5 = ldexpf(1.0f, -16);   /* smallest subnormals */
    cr_expect_eq(fa_cpu_float_to_fp8(s4, FA_DTYPE_FP8_E4M3), 0x01);
    cr_expect_eq(fa_cpu_float_to_fp8(0.5f * s4, FA_DTYPE_FP8_E4M3), 0x00, "tie to even zero");
    cr_expect_eq(fa_cpu_float_to_fp8(-0.5f * s4, FA_DTYPE_FP8_E4M3), 0x80, "-0 keeps its sign");
    cr_expect_eq(fa_cpu_float_to_fp8(0.51f * s4, FA_DTYPE_FP8_E4M3), 0x01);
    cr_expect_eq(fa_cpu_float_to_fp8(1.5f * s4, FA_DTYPE_FP8_E4M3), 0x02, "tie to even 2");
    cr_expect_eq(fa_cpu_float_to_fp8(2.5f * s4, FA_DTYPE_FP8_E4M3), 0x02, "tie to even 2");
    cr_expect_eq(fa_cpu_float_to_fp8(7.0f * s4, FA_DTYPE_FP8_E4M3), 0x07);
    cr_expect_eq(fa_cpu_float_to_fp8(7.5f * s4, FA_DTYPE_FP8_E4M3), 0x08, "into the normals");
    cr_expect_eq(fa_cpu_float_to_fp8(-3.0f * s4, FA_DTYPE_FP8_E4M3), 0x83);
    cr_expect_eq(fa_cpu_float_to_fp8(1e-30f, FA_DTYPE_FP8_E4M3), 0x00);
    cr_expect_eq(fa_cpu_fp8_to_float(0x05, FA_DTYPE_FP8_E4M3), 5.0f * s4);
    cr_expect_eq(fa_cpu_float_to_fp8(s5, FA_DTYPE_FP8_E5M2), 0x01);
    cr_expect_eq(fa_cpu_float_to_fp8(0.5f * s5, FA_DTYPE_FP8_E5M2), 0x00);
    cr_expect_eq(fa_cpu_float_to_fp8(1.5f * s5, FA_DTYPE_FP8_E5M2), 0x02);
    cr_expect_eq(fa_cpu_float_to_fp8(3.5f * s5, FA_DTYPE_FP8_E5M2), 0x04, "into the normals");
    cr_expect_eq(fa_cpu_fp8_to_float(0x83, FA_DTYPE_FP8_E5M2), -3.0f * s5);
    cr_expect_eq(fa_cpu_float_to_fp8(0.0f, FA_DTYPE_FP8_E5M2), 0x00);
    cr_expect_eq(fa_cpu_float_to_fp8(-0.0f, FA_DTYPE_FP8_E5M2), 0x80);
}

/* float -> fp8 against the brute-force nearest code, over values spread log-uniformly from
   below the smallest subnormal to beyond the max, both signs, plus exact midpoints. */
Test(fp8, nearest_even_vs_brute_force)
{
    static const fa_dtype fmts[2] = {FA_DTYPE_FP8_E4M3, FA_DTYPE_FP8_E5M2};
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int f, n, bad = 0;
    for (f = 0; f < 2; ++f) {
        for (n = 0; n < 20000; ++n) {
            double lo = fmts[f] == FA_DTYPE_FP8_E4M3 ? -12.0 : -19.0;
            double hi = fmts[f] == FA_DTYPE_FP8_E4M3 ? 10.0 : 17.0;
            float x = (float)ldexp(1.0 + rng_uniform(&s), (int)floor(lo + (hi - lo) * rng_uniform(&s)));
            unsigned want, got;
            if (n % 2) x = -x;
            if (n % 5 == 0) {   /* an exact midpoint between two neighbouring codes */
                unsigned c = (unsigned)(rng_next(&s) % 255);
                double a = ref_fp8(c & 0x7F, fmts[f]), b = ref_fp8((c & 0x7F) + 1, fmts[f]);
                if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) continue;
                x = (float)(0.5 * (a + b));
            }
            want = nearest_fp8((double)x, fmts[f]);
            got = fa_cpu_float_to_fp8(x, fmts[f]);
            if (got != want && bad++ < 10)
                cr_expect_eq(got, want, "fmt %d x %.9g: got 0x%02X want 0x%02X", (int)fmts[f], (double)x, got,
                             want);
        }
    }
    cr_assert_eq(bad, 0, "%d conversions differ from the nearest-even code", bad);
}

Test(fp8, other_format_is_rejected)
{
    cr_expect_eq(fa_cpu_float_to_fp8(1.0f, FA_DTYPE_F16), 0);
    cr_expect(isnan(fa_cpu_fp8_to_float(0x38, FA_DTYPE_BF16)));
}

/* ---- f16 / bf16 --------------------------------------------------------------------------- */

Test(half, exhaustive_decode_and_round_trip)
{
    unsigned c;
    for (c = 0; c < 65536; ++c) {
        double want = ref_half(c);
        float got = fa_cpu_half_to_float((uint16_t)c);
        cr_expect(same_double(got, want), "half 0x%04X: got %.9g want %.9g", c, (double)got, want);
        if (!isnan(want))
            cr_expect_eq(fa_cpu_float_to_half(got), c, "half 0x%04X did not round-trip", c);
        else
            cr_expect(isnan(ref_half(fa_cpu_float_to_half(got))), "NaN 0x%04X", c);
    }
}

Test(half, rounding)
{
    cr_expect_eq(fa_cpu_float_to_half(1.0f), 0x3C00);
    cr_expect_eq(fa_cpu_float_to_half(1.0f + ldexpf(1.0f, -11)), 0x3C00, "tie to even");
    cr_expect_eq(fa_cpu_float_to_half(1.0f + 3.0f * ldexpf(1.0f, -11)), 0x3C02, "tie to even");
    cr_expect_eq(fa_cpu_float_to_half(65504.0f), 0x7BFF);
    cr_expect_eq(fa_cpu_float_to_half(65519.0f), 0x7BFF);
    cr_expect_eq(fa_cpu_float_to_half(65520.0f), 0x7C00, "tie above max rounds to inf");
    cr_expect_eq(fa_cpu_float_to_half(-1e9f), 0xFC00);
    cr_expect_eq(fa_cpu_float_to_half(INFINITY), 0x7C00);
    cr_expect_eq(fa_cpu_float_to_half(ldexpf(1.0f, -24)), 0x0001);
    cr_expect_eq(fa_cpu_float_to_half(ldexpf(1.0f, -25)), 0x0000, "tie to even zero");
    cr_expect_eq(fa_cpu_float_to_half(ldexpf(3.0f, -25)), 0x0002);
    cr_expect_eq(fa_cpu_float_to_half(-0.0f), 0x8000);
    cr_expect(isnan(ref_half(fa_cpu_float_to_half(NAN))));
    cr_expect_eq(fa_cpu_float_to_half(-NAN) & 0x8000, 0x8000, "NaN keeps its sign");
}

/* float -> half / bf16: the result is the nearest code (compared with both neighbours), ties to
   the even code, over random bit patterns of every magnitude. */
static void check_nearest_16(int is_bf16)
{
    uint64_t s = is_bf16 ? 77 : 99;
    int n, bad = 0;
    for (n = 0; n < 200000; ++n) {
        float x = bits_to_float((uint32_t)(rng_next(&s) >> 32));
        unsigned c, lo, hi;
        double v, vlo, vhi, err;
        if (isnan(x) || isinf(x)) continue;
        if (!is_bf16 && fabsf(x) >= 65520.0f) continue;   /* overflow checked separately */
        if (is_bf16 && fabs((double)x) >= ref_bf16(0x7F7F) + ldexp(1.0, 119)) continue;
        c = is_bf16 ? fa_cpu_float_to_bf16(x) : fa_cpu_float_to_half(x);
        v = is_bf16 ? ref_bf16(c) : ref_half(c);
        err = fabs(v - (double)x);
        lo = (c & 0x7FFF) ? c - 1 : c;   /* neighbours of the same sign (magnitude +-1) */
        hi = c + 1;
        vlo = is_bf16 ? ref_bf16(lo) : ref_half(lo);
        vhi = is_bf16 ? ref_bf16(hi) : ref_half(hi);
        if (((signbit(x) != 0) != ((c >> 15) != 0)) || fabs(vlo - (double)x) < err ||
            (!isinf(vhi) && fabs(vhi - (double)x) < err) ||
            (fabs(vlo - (double)x) == err && lo != c && (c & 1)) ||
            (!isinf(vhi) && fabs(vhi - (double)x) == err && (c & 1))) {
            if (bad++ < 10)
                cr_expect(0, "%s of %.9g (0x%08X) = 0x%04X is not the nearest-even code",
                          is_bf16 ? "bf16" : "half", (double)x, float_to_bits(x), c);
        }
    }
    cr_assert_eq(bad, 0);
}

Test(half, nearest_even_random) { check_nearest_16(0); }
Test(bf16, nearest_even_random) { check_nearest_16(1); }

Test(bf16, exhaustive_decode_and_round_trip)
{
    unsigned c;
    for (c = 0; c < 65536; ++c) {
        double want = ref_bf16(c);
        float got = fa_cpu_bf16_to_float((uint16_t)c);
        cr_expect(same_double(got, want), "bf16 0x%04X: got %.9g want %.9g", c, (double)got, want);
        if (!isnan(want)) cr_expect_eq(fa_cpu_float_to_bf16(got), c, "bf16 0x%04X did not round-trip", c);
    }
}

Test(bf16, rounding)
{
    uint64_t s = 5;
    int n;
    cr_expect_eq(fa_cpu_float_to_bf16(1.0f), 0x3F80);
    cr_expect_eq(fa_cpu_float_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80, "tie to even");
    cr_expect_eq(fa_cpu_float_to_bf16(1.0f + 3.0f * ldexpf(1.0f, -8)), 0x3F82, "tie to even");
    cr_expect_eq(fa_cpu_float_to_bf16(FLT_MAX), 0x7F80, "rounds up to inf");
    cr_expect_eq(fa_cpu_float_to_bf16(-INFINITY), 0xFF80);
    cr_expect_eq(fa_cpu_float_to_bf16(ldexpf(1.0f, -133)), 0x0001, "smallest subnormal");
    cr_expect_eq(fa_cpu_float_to_bf16(bits_to_float(0x00008000u)), 0x0000, "tie to even zero");
    cr_expect(isnan(ref_bf16(fa_cpu_float_to_bf16(NAN))));
    cr_expect(isnan(ref_bf16(fa_cpu_float_to_bf16(bits_to_float(0x7F800001u)))),
              "a NaN with only low payload bits must not become inf");
    /* against the classic bit trick (u + 0x7FFF + lsb) >> 16 for every non-NaN input */
    for (n = 0; n < 1000000; ++n) {
        uint32_t u = (uint32_t)(rng_next(&s) >> 32);
        float x = bits_to_float(u);
        uint16_t want;
        if (isnan(x)) continue;
        want = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        if (fa_cpu_float_to_bf16(x) != want) {
            cr_assert_eq(fa_cpu_float_to_bf16(x), want, "bf16 of 0x%08X", u);
        }
    }
}
