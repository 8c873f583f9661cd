/* gpu_test_util.h - shared helpers of the GPU test programs (tests/gpu/test_gpu_*.c).

   A GPU test program runs the CUDA backend against the CPU reference backend on the same
   random inputs (never zeros), with outputs poisoned first (every byte 0xFF: NaN in every
   float format) and every status checked. Its output is TAP (meson's `protocol : 'tap'`): one
   `ok N - name` / `not ok N - name` / `ok N - name # SKIP` line per case, details as `#`
   comments, the plan `1..N` at the end, then `N passed, M failed` (the one non-TAP line, which
   tests/gpu/run_gpu_tests.sh and scripts/count_cases.py read); its exit status is 0 exactly
   when M == 0. Plain C99, no Criterion.

   Skeleton
       int main(int argc, char **argv) {
           if (gt_init(argc, argv) != 0) return gt_finish();
           if (gt_case("merge f32 T=%d", 7)) { ... gt_check(st, gt_gpu(), "merge_states");
                                                 gt_compare("out", got, want, n, FA_DTYPE_F32,
                                                            1e-5, 1e-5);
                                                 gt_case_end(); }
           return gt_finish();
       }

   Command line and environment (every program honours them)
       --quick  or FA_GPU_TEST_QUICK=1   small subset (what compute-sanitizer runs): heavy
                                         cases call gt_heavy() and are skipped
       --seed N or FA_GPU_TEST_SEED=N    random seed (default 1234)
       --shard K/N or FA_GPU_TEST_SHARD=K/N   only every N-th case from the K-th (0-based), so
                                         N processes together run every case once (the
                                         compute-sanitizer runs of the full set go side by side)
       FA_GPU_TEST_SANITIZER=1           under compute-sanitizer: deliberately failing CUDA
                                         calls are left out (gt_sanitized())
       any other argument                run only cases whose name contains it
   Compiled with -DGT_GPU_IS_CPU, the "GPU" is a second CPU backend: a self-check of a test
   program's own indexing on a machine without a GPU (CUDA-only cases must skip themselves).

   The 16-bit and fp8 conversions are the CPU backend's (fa_cpu.h): round to nearest even.
*/
#ifndef GPU_TEST_UTIL_H
#define GPU_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "fa_cpu.h"
#include "fa_cuda.h"
#include "gpu_family.h"

#define GT_POISON 0xFF   /* poison byte: NaN in f32, f16, bf16, fp8 e4m3 and e5m2 */

typedef struct gt_ctx {
    fa_backend *gpu, *cpu;
    int quick;
    int sanitized;            /* FA_GPU_TEST_SANITIZER=1: under compute-sanitizer */
    const char *filter;
    int shard, shards;        /* --shard K/N: run only the cases whose index mod N is K */
    int case_index;           /* cases seen so far (before the filter), numbering the shards */
    uint64_t rng;
    int passed, failed, skipped;
    int tap_n;                /* TAP test number of the last finished case */
    int in_case, case_failed, case_skipped;
    char case_name[256];
    double case_max_err;      /* largest |got - want| compared in the case */
} gt_ctx;

static inline gt_ctx *gt(void)
{
    static gt_ctx c;
    return &c;
}

static inline fa_backend *gt_gpu(void) { return gt()->gpu; }
static inline fa_backend *gt_cpu(void) { return gt()->cpu; }
static inline int gt_quick(void) { return gt()->quick; }

/* ---------------------------------------------------------------------------------------- */
/* cases */

/* Records a failure of the current case (or of the program outside a case). */
static inline void gt_fail(const char *fmt, ...)
{
    va_list ap;
    printf("#     FAIL: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (gt()->in_case) {
        gt()->case_failed = 1;
    } else {   /* outside a case: a failing test point of its own */
        gt()->failed++;
        printf("not ok %d - (outside a case)\n", ++gt()->tap_n);
    }
}

/* Starts a case; returns 0 (and starts nothing) when the name does not match the filter. */
static inline int gt_case(const char *fmt, ...)
{
    gt_ctx *c = gt();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->case_name, sizeof c->case_name, fmt, ap);
    va_end(ap);
    if (c->filter && !strstr(c->case_name, c->filter)) return 0;
    if (c->shards > 1 && c->case_index++ % c->shards != c->shard) return 0;
    c->in_case = 1;
    c->case_failed = 0;
    c->case_skipped = 0;
    c->case_max_err = 0.0;
    return 1;
}

/* Marks the current case skipped (not counted), e.g. not enough device memory. */
static inline void gt_skip(const char *fmt, ...)
{
    va_list ap;
    printf("#     skip: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    gt()->case_skipped = 1;
}

/* 1 under compute-sanitizer (FA_GPU_TEST_SANITIZER=1, set by tests/gpu/run_gpu_tests.sh): a
   case leaves out a deliberately failing CUDA call, which the tool reports as an error; the
   plain run covers it. */
static inline int gt_sanitized(void) { return gt()->sanitized; }

/* 1 if the current case is heavy and the run is --quick (the case is then marked skipped). */
static inline int gt_heavy(void)
{
    if (!gt()->quick) return 0;
    gt_skip("heavy case, --quick");
    return 1;
}

static inline void gt_case_end(void)
{
    gt_ctx *c = gt();
    if (!c->in_case) return;
    c->tap_n++;
    if (c->case_failed) {
        c->failed++;
        printf("not ok %d - %s\n", c->tap_n, c->case_name);
    } else if (c->case_skipped) {
        c->skipped++;
        printf("ok %d - %s # SKIP\n", c->tap_n, c->case_name);
    } else {
        c->passed++;
        if (c->case_max_err > 0.0)
            printf("ok %d - %s (max abs err %.3g)\n", c->tap_n, c->case_name, c->case_max_err);
        else
            printf("ok %d - %s\n", c->tap_n, c->case_name);
    }
    fflush(stdout);
    c->in_case = 0;
}

/* 1 if st == FA_OK, else records a failure naming the call and the backend's message. */
static inline int gt_check(fa_status st, const fa_backend *be, const char *what)
{
    if (st == FA_OK) return 1;
    gt_fail("%s on %s returned %d: %s", what, be ? be->name : "?", (int)st,
            be && be->ops.last_error ? be->ops.last_error(be->ctx) : "");
    return 0;
}

/* 1 if st == want, else records a failure. */
static inline int gt_expect_status(fa_status st, fa_status want, const fa_backend *be, const char *what)
{
    if (st == want) return 1;
    gt_fail("%s on %s returned %d, expected %d (%s)", what, be ? be->name : "?", (int)st, (int)want,
            be && be->ops.last_error ? be->ops.last_error(be->ctx) : "");
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* random numbers (splitmix64: deterministic for a seed) */

static inline uint64_t gt_u64(void)
{
    uint64_t z = (gt()->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n). */
static inline int64_t gt_randint(int64_t n) { return n <= 0 ? 0 : (int64_t)(gt_u64() % (uint64_t)n); }

/* Uniform float in [lo, hi). */
static inline float gt_uniform(float lo, float hi)
{
    double u = (double)(gt_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

/* Standard normal (Box-Muller). */
static inline float gt_normal(void)
{
    double u1 = ((double)(gt_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(gt_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---------------------------------------------------------------------------------------- */
/* dtypes */

static inline size_t gt_dtype_size(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32:
    case FA_DTYPE_I32: return 4;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: return 1;
    case FA_DTYPE_I64: return 8;
    default: return 0;
    }
}

static inline const char *gt_dtype_name(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return "f32";
    case FA_DTYPE_F16: return "f16";
    case FA_DTYPE_BF16: return "bf16";
    case FA_DTYPE_FP8_E4M3: return "e4m3";
    case FA_DTYPE_FP8_E5M2: return "e5m2";
    case FA_DTYPE_I32: return "i32";
    case FA_DTYPE_I64: return "i64";
    default: return "?";
    }
}

/* Element i of a float array of dtype t, as float (exact). */
static inline float gt_load(const void *base, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return ((const float *)base)[i];
    case FA_DTYPE_F16: return fa_cpu_half_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_BF16: return fa_cpu_bf16_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: return fa_cpu_fp8_to_float(((const uint8_t *)base)[i], t);
    default: return NAN;
    }
}

/* Stores v rounded to nearest even into element i of dtype t. */
static inline void gt_store(void *base, int64_t i, fa_dtype t, float v)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)base)[i] = v; break;
    case FA_DTYPE_F16: ((uint16_t *)base)[i] = fa_cpu_float_to_half(v); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[i] = fa_cpu_float_to_bf16(v); break;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: ((uint8_t *)base)[i] = fa_cpu_float_to_fp8(v, t); break;
    default: break;
    }
}

/* n elements uniform in [lo, hi), rounded to t; never exactly zero. */
static inline void gt_fill_uniform(void *base, int64_t n, fa_dtype t, float lo, float hi)
{
    int64_t i;
    for (i = 0; i < n; ++i) {
        float v;
        do {
            gt_store(base, i, t, gt_uniform(lo, hi));
            v = gt_load(base, i, t);
        } while (v == 0.0f);
    }
}

static inline void gt_poison(void *p, size_t bytes) { memset(p, GT_POISON, bytes); }

/* Host memory; a failed malloc ends the program (a test, not the library). */
static inline void *gt_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! malloc of %zu bytes failed\n%d passed, %d failed\n", bytes, gt()->passed,
               gt()->failed + 1);
        exit(1);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* comparison */

static inline int gt_same_special(double a, double b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b;   /* infinities of the same sign, or equal numbers */
}

/* Element-wise |got - want| <= atol + rtol * |want| over n elements of dtype t (NaN matches
   only NaN, an infinity only itself). Reports the mismatch count, the first mismatch and the
   largest error; returns 1 when every element matches. */
static inline int gt_compare(const char *what, const void *got, const void *want, int64_t n, fa_dtype t,
                             double atol, double rtol)
{
    int64_t i, bad = 0, first = -1;
    double max_err = 0.0;
    for (i = 0; i < n; ++i) {
        double g = gt_load(got, i, t), w = gt_load(want, i, t);
        int ok;
        if (isnan(g) || isnan(w) || isinf(g) || isinf(w)) {
            ok = gt_same_special(g, w);
        } else {
            double e = fabs(g - w);
            if (e > max_err) max_err = e;
            ok = e <= atol + rtol * fabs(w);
        }
        if (!ok) {
            if (first < 0) first = i;
            ++bad;
        }
    }
    if (max_err > gt()->case_max_err) gt()->case_max_err = max_err;
    if (bad) {
        gt_fail("%s: %lld of %lld %s elements differ (atol %g, rtol %g); first at %lld: got %.9g, "
                "want %.9g; max abs err %.3g",
                what, (long long)bad, (long long)n, gt_dtype_name(t), atol, rtol, (long long)first,
                (double)gt_load(got, first, t), (double)gt_load(want, first, t), max_err);
        return 0;
    }
    return 1;
}

/* Byte-exact comparison. */
static inline int gt_compare_bytes(const char *what, const void *got, const void *want, size_t bytes)
{
    const uint8_t *g = (const uint8_t *)got, *w = (const uint8_t *)want;
    size_t i, bad = 0, first = 0;
    for (i = 0; i < bytes; ++i) {
        if (g[i] != w[i]) {
            if (!bad) first = i;
            ++bad;
        }
    }
    if (bad) {
        gt_fail("%s: %zu of %zu bytes differ; first at byte %zu: got 0x%02x, want 0x%02x", what, bad, bytes,
                first, g[first], w[first]);
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* device memory through the CUDA backend's ops */

/* Device allocation; NULL (and a recorded failure unless quiet) when it fails. *st_out, if
   given, receives the status (FA_ERR_OUT_OF_MEMORY lets a heavy case skip). */
static inline void *gt_dmalloc_status(size_t bytes, int quiet, fa_status *st_out)
{
    fa_backend *be = gt_gpu();
    void *p = NULL;
    fa_status st = be->ops.alloc(be->ctx, bytes, &p);
    if (st_out) *st_out = st;
    if (st != FA_OK) {
        if (!quiet) gt_check(st, be, "alloc");
        return NULL;
    }
    return p;
}

static inline void *gt_dmalloc(size_t bytes) { return gt_dmalloc_status(bytes, 0, NULL); }

static inline void gt_dfree(void *p)
{
    fa_backend *be = gt_gpu();
    if (p) gt_check(be->ops.free(be->ctx, p), be, "free");
}

static inline int gt_h2d(void *dst, const void *src, size_t bytes)
{
    fa_backend *be = gt_gpu();
    return gt_check(be->ops.copy(be->ctx, dst, src, bytes, FA_COPY_HOST_TO_DEVICE), be, "copy H2D");
}

static inline int gt_sync(void)
{
    fa_backend *be = gt_gpu();
    return gt_check(be->ops.synchronize(be->ctx), be, "synchronize");
}

/* Device to host, then waits for the stream (the result is on the host on return). */
static inline int gt_d2h(void *dst, const void *src, size_t bytes)
{
    fa_backend *be = gt_gpu();
    if (!gt_check(be->ops.copy(be->ctx, dst, src, bytes, FA_COPY_DEVICE_TO_HOST), be, "copy D2H")) return 0;
    return gt_sync();
}

/* A device copy of a host buffer (NULL on failure). */
static inline void *gt_dup(const void *host, size_t bytes)
{
    void *d = gt_dmalloc(bytes);
    if (d && !gt_h2d(d, host, bytes)) {
        gt_dfree(d);
        return NULL;
    }
    return d;
}

/* ---------------------------------------------------------------------------------------- */
/* program start and end */

/* "K/N" with 0 <= K < N: the shard to run. 0, or -1 (recorded as a failure) on a bad value. */
static inline int gt__parse_shard(const char *text)
{
    gt_ctx *c = gt();
    int k = -1, n = 0;
    if (sscanf(text, "%d/%d", &k, &n) != 2 || n < 1 || k < 0 || k >= n) {
        gt_fail("--shard / FA_GPU_TEST_SHARD: '%s' is not K/N with 0 <= K < N", text);
        return -1;
    }
    c->shard = k;
    c->shards = n;
    return 0;
}

/* Parses the command line, creates both backends. Returns 0, or -1 when the GPU backend is
   unavailable (recorded as a failure: the caller returns gt_finish()). */
static inline int gt_init(int argc, char **argv)
{
    gt_ctx *c = gt();
    const char *env;
    fa_status st;
    int i;
    c->rng = 1234;
    env = getenv("FA_GPU_TEST_QUICK");
    if (env && *env && strcmp(env, "0") != 0) c->quick = 1;
    env = getenv("FA_GPU_TEST_SEED");
    if (env && *env) c->rng = strtoull(env, NULL, 10);
    env = getenv("FA_GPU_TEST_SANITIZER");
    if (env && *env && strcmp(env, "0") != 0) c->sanitized = 1;
    env = getenv("FA_GPU_TEST_SHARD");
    if (env && *env && gt__parse_shard(env) != 0) return -1;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick"))
            c->quick = 1;
        else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            if (gt__parse_shard(argv[++i]) != 0) return -1;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            c->rng = strtoull(argv[++i], NULL, 10);
        else
            c->filter = argv[i];
    }
    printf("# %s: seed %llu%s%s%s", argc > 0 ? argv[0] : "gpu test", (unsigned long long)c->rng,
           c->quick ? ", quick" : "", c->filter ? ", filter " : "", c->filter ? c->filter : "");
    if (c->shards > 1) printf(", shard %d/%d", c->shard, c->shards);
    printf("\n");
    st = fa_cpu_backend_create(&c->cpu);
    if (st != FA_OK) {
        gt_fail("fa_cpu_backend_create returned %d", (int)st);
        return -1;
    }
#ifdef GT_GPU_IS_CPU   /* self-check of the harness on a machine without a GPU */
    st = fa_cpu_backend_create(&c->gpu);
#else   /* !GT_GPU_IS_CPU */
    st = fa_cuda_backend_create(0, NULL, &c->gpu);
#endif  /* GT_GPU_IS_CPU */
    if (st != FA_OK) {
        gt_fail("fa_cuda_backend_create returned %d: %s", (int)st, fa_cuda_create_error());
        return -1;
    }
    if (gt_apply_family(c->gpu) != 0) return -1;
    printf("# device: %s, cc %d.%d, %d SMs, smem %lld per block (opt-in), %lld per SM\n", c->gpu->info.name,
           (int)c->gpu->info.cc_major, (int)c->gpu->info.cc_minor, (int)c->gpu->info.num_sms,
           (long long)c->gpu->info.smem_per_block, (long long)c->gpu->info.smem_per_sm);
    fflush(stdout);
    return 0;
}

/* Destroys the backends, prints `N passed, M failed` last; the exit status. */
static inline int gt_finish(void)
{
    gt_ctx *c = gt();
    gt_case_end();
#ifdef GT_GPU_IS_CPU
    if (c->gpu) fa_cpu_backend_destroy(c->gpu);
#else   /* !GT_GPU_IS_CPU */
    if (c->gpu) fa_cuda_backend_destroy(c->gpu);
#endif  /* GT_GPU_IS_CPU */
    if (c->cpu) fa_cpu_backend_destroy(c->cpu);
    c->gpu = c->cpu = NULL;
    if (c->skipped) printf("# %d skipped\n", c->skipped);
    if (c->tap_n == 0) {   /* no case ran (e.g. no GPU): one failing test point */
        c->tap_n = 1;
        printf("not ok 1 - %s\n", c->failed ? "setup failed" : "no case ran");
        if (!c->failed) c->failed = 1;
    }
    printf("1..%d\n", c->tap_n);
    printf("%d passed, %d failed\n", c->passed, c->failed);
    fflush(stdout);
    return c->failed == 0 && c->passed > 0 ? 0 : 1;
}

#endif /* GPU_TEST_UTIL_H */
