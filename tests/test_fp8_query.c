/* test_fp8_query.c - the attention op with an fp8 (E4M3) query on the CPU reference backend:
   q_dtype FP8_E4M3, per-(sequence, KV head) q_descale, E4M3 K/V with their descales, out in
   out_dtype.

   Two oracles, both float64 and written here: (1) attention over the dequantised operands
   (q_descale x q, k_descale x K, v_descale x V): the backend must match it to the output
   dtype's rounding; (2) attention over the unquantised operands: the distance to it is what
   the fp8 query and cache cost, measured on random data and held to a bound (printed with
   FP8Q_SHOW=1; docs/semantics.md quotes it). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_cpu.h"
#include "flashattn.h"

#define NS 3
#define HQ 8
#define HKV 2
#define D 64

static uint64_t g_rng = 88172645463325252ull;
static double urand(void) /* uniform in [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

typedef struct world {
    int32_t lq[NS], lk[NS], cuq[NS + 1], cuk[NS + 1], T, TK;
    double *q, *k, *v;                 /* float64 operands [T|TK, H, D] */
    uint8_t *q8, *k8, *v8;             /* E4M3 codes */
    float qd[NS * HKV], kd[NS * HKV], vd[NS * HKV]; /* descales [seq, kv head] */
} world;

/* E4M3 quantisation of x[rows, heads, D] per (sequence, head), descale = amax / 448 */
static void quantise(const double *x, uint8_t *x8, float *desc, const int32_t *cu, int heads)
{
    for (int s = 0; s < NS; ++s)
        for (int h = 0; h < heads; ++h) {
            double amax = 0;
            for (int t = cu[s]; t < cu[s + 1]; ++t)
                for (int d = 0; d < D; ++d) amax = fmax(amax, fabs(x[((int64_t)t * heads + h) * D + d]));
            desc[s * HKV + h] = amax > 0 ? (float)(amax / 448.0) : 1.0f;
            for (int t = cu[s]; t < cu[s + 1]; ++t)
                for (int d = 0; d < D; ++d) {
                    int64_t i = ((int64_t)t * heads + h) * D + d;
                    x8[i] = fa_cpu_float_to_fp8((float)(x[i] / desc[s * HKV + h]), FA_DTYPE_FP8_E4M3);
                }
        }
}

static void world_make(world *w, const int32_t *lq, const int32_t *lk)
{
    memset(w, 0, sizeof *w);
    for (int s = 0; s < NS; ++s) {
        w->lq[s] = lq[s];
        w->lk[s] = lk[s];
        w->cuq[s + 1] = w->cuq[s] + lq[s];
        w->cuk[s + 1] = w->cuk[s] + lk[s];
    }
    w->T = w->cuq[NS];
    w->TK = w->cuk[NS];
    w->q = malloc(sizeof(double) * (size_t)w->T * HQ * D);
    w->k = malloc(sizeof(double) * (size_t)w->TK * HKV * D);
    w->v = malloc(sizeof(double) * (size_t)w->TK * HKV * D);
    w->q8 = malloc((size_t)w->T * HQ * D);
    w->k8 = malloc((size_t)w->TK * HKV * D);
    w->v8 = malloc((size_t)w->TK * HKV * D);
    cr_assert(w->q && w->k && w->v && w->q8 && w->k8 && w->v8);
    /* magnitudes that differ per head and sequence, so the descales matter */
    for (int64_t i = 0; i < (int64_t)w->T * HQ * D; ++i) w->q[i] = urand() * (1.0 + (double)((i / D) % HQ));
    for (int64_t i = 0; i < (int64_t)w->TK * HKV * D; ++i) {
        w->k[i] = urand() * (0.5 + (double)((i / D) % HKV));
        w->v[i] = urand() * 3.0;
    }
    /* q's descale per (sequence, KV head): over the query heads of that KV head */
    for (int s = 0; s < NS; ++s)
        for (int g = 0; g < HKV; ++g) {
            double amax = 0;
            for (int t = w->cuq[s]; t < w->cuq[s + 1]; ++t)
                for (int h = g * (HQ / HKV); h < (g + 1) * (HQ / HKV); ++h)
                    for (int d = 0; d < D; ++d) amax = fmax(amax, fabs(w->q[((int64_t)t * HQ + h) * D + d]));
            w->qd[s * HKV + g] = (float)(amax / 448.0);
            for (int t = w->cuq[s]; t < w->cuq[s + 1]; ++t)
                for (int h = g * (HQ / HKV); h < (g + 1) * (HQ / HKV); ++h)
                    for (int d = 0; d < D; ++d) {
                        int64_t i = ((int64_t)t * HQ + h) * D + d;
                        w->q8[i] =
                            fa_cpu_float_to_fp8((float)(w->q[i] / w->qd[s * HKV + g]), FA_DTYPE_FP8_E4M3);
                    }
        }
    quantise(w->k, w->k8, w->kd, w->cuk, HKV);
    quantise(w->v, w->v8, w->vd, w->cuk, HKV);
}

static void world_free(world *w)
{
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->q8);
    free(w->k8);
    free(w->v8);
}

/* float64 causal (bottom-right) attention; quantised = 1 reads the dequantised codes of q, K and
   V, 2 those of K and V only (the query exact: what an fp8 cache alone costs) */
static void reference(const world *w, int quantised, double *out)
{
    const double scale = 1.0 / sqrt((double)D);
    double *lg = malloc(sizeof(double) * 4096);
    cr_assert(lg);
    for (int s = 0; s < NS; ++s)
        for (int i = 0; i < w->lq[s]; ++i)
            for (int h = 0; h < HQ; ++h) {
                const int g = h / (HQ / HKV), t = w->cuq[s] + i;
                const int last = i + w->lk[s] - w->lq[s]; /* keys [0, last] */
                double m = -INFINITY, den = 0;
                for (int j = 0; j <= last; ++j) {
                    double dot = 0;
                    for (int d = 0; d < D; ++d) {
                        int64_t qi = ((int64_t)t * HQ + h) * D + d;
                        int64_t ki = ((int64_t)(w->cuk[s] + j) * HKV + g) * D + d;
                        double qv = quantised == 1 ? fa_cpu_fp8_to_float(w->q8[qi], FA_DTYPE_FP8_E4M3) *
                                                         (double)w->qd[s * HKV + g]
                                                   : w->q[qi];
                        double kv = quantised ? fa_cpu_fp8_to_float(w->k8[ki], FA_DTYPE_FP8_E4M3) *
                                                    (double)w->kd[s * HKV + g]
                                              : w->k[ki];
                        dot += qv * kv;
                    }
                    lg[j] = dot * scale;
                    m = fmax(m, lg[j]);
                }
                for (int d = 0; d < D; ++d) out[((int64_t)t * HQ + h) * D + d] = 0;
                for (int j = 0; j <= last; ++j) {
                    double p = exp(lg[j] - m);
                    den += p;
                    for (int d = 0; d < D; ++d) {
                        int64_t vi = ((int64_t)(w->cuk[s] + j) * HKV + g) * D + d;
                        double vv = quantised ? fa_cpu_fp8_to_float(w->v8[vi], FA_DTYPE_FP8_E4M3) *
                                                    (double)w->vd[s * HKV + g]
                                              : w->v[vi];
                        out[((int64_t)t * HQ + h) * D + d] += p * vv;
                    }
                }
                for (int d = 0; d < D; ++d) out[((int64_t)t * HQ + h) * D + d] /= den;
            }
    free(lg);
}

/* the dense attention call of the world with an fp8 query */
static fa_attn_args args_of(world *w, void *out, fa_dtype odt, int32_t *dcuq, int32_t *dcuk)
{
    fa_attn_args a;
    memset(&a, 0, sizeof a);
    memcpy(dcuq, w->cuq, sizeof w->cuq);
    memcpy(dcuk, w->cuk, sizeof w->cuk);
    a.q = w->q8;
    a.q_token_stride = HQ * D;
    a.q_head_stride = D;
    a.q_dtype = FA_DTYPE_FP8_E4M3;
    a.k = w->k8;
    a.v = w->v8;
    a.k_row_stride = a.v_row_stride = HKV * D;
    a.k_head_stride = a.v_head_stride = D;
    a.kv_dtype = FA_DTYPE_FP8_E4M3;
    a.out = out;
    a.out_token_stride = HQ * D;
    a.out_head_stride = D;
    a.out_dtype = odt;
    a.cu_seqlens_q = dcuq;
    a.cu_seqlens_k = dcuk;
    a.num_seqs = NS;
    a.num_tokens = w->T;
    a.max_seqlen_q = 0;
    for (int s = 0; s < NS; ++s) {
        if (w->lq[s] > a.max_seqlen_q) a.max_seqlen_q = w->lq[s];
        if (w->lk[s] > a.max_seqlen_k) a.max_seqlen_k = w->lk[s];
    }
    a.num_heads_q = HQ;
    a.num_heads_kv = HKV;
    a.head_size = D;
    a.softmax_scale = (float)(1.0 / sqrt((double)D));
    a.causal = 1;
    a.window_left = a.window_right = -1;
    a.k_descale = w->kd;
    a.v_descale = w->vd;
    a.q_descale = w->qd;
    a.descale_batch_stride = HKV;
    a.descale_head_stride = 1;
    return a;
}

static const char *berr(const fa_backend *be)
{
    const char *m = be->ops.last_error ? be->ops.last_error(be->ctx) : NULL;
    return m ? m : "";
}

static double rel_l2(const double *x, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        num += (x[i] - ref[i]) * (x[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void run(fa_dtype odt, const int32_t *lq, const int32_t *lk, double tol_exact, double tol_cost)
{
    world w;
    fa_backend *be = NULL;
    int32_t dcuq[NS + 1], dcuk[NS + 1];
    world_make(&w, lq, lk);
    const int64_t n = (int64_t)w.T * HQ * D;
    const size_t es = fa_dtype_size(odt);
    unsigned char *out = malloc((size_t)n * es);
    double *got = malloc(sizeof(double) * (size_t)n), *rq = malloc(sizeof(double) * (size_t)n),
           *rx = malloc(sizeof(double) * (size_t)n), *rkv = malloc(sizeof(double) * (size_t)n);
    cr_assert(out && got && rq && rx && rkv);
    memset(out, 0xff, (size_t)n * es); /* poison: NaN in every dtype */
    cr_assert_eq(fa_cpu_backend_create(&be), FA_OK);
    fa_attn_args a = args_of(&w, out, odt, dcuq, dcuk);
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", berr(be));
    for (int64_t i = 0; i < n; ++i) {
        got[i] = odt == FA_DTYPE_F32    ? (double)((float *)out)[i]
                 : odt == FA_DTYPE_BF16 ? (double)fa_cpu_bf16_to_float(((uint16_t *)out)[i])
                                        : (double)fa_cpu_half_to_float(((uint16_t *)out)[i]);
        cr_assert(isfinite(got[i]), "out[%lld] not written or not finite", (long long)i);
    }
    reference(&w, 1, rq);
    reference(&w, 0, rx);
    reference(&w, 2, rkv);
    double e_exact = rel_l2(got, rq, n), e_cost = rel_l2(got, rx, n), e_ref = rel_l2(rq, rx, n);
    if (getenv("FP8Q_SHOW"))
        fprintf(stderr,
                "fp8 query, out %s: vs dequantised reference %.3g, vs unquantised %.3g; float64 with "
                "fp8 q+K+V vs unquantised %.3g, with fp8 K+V only %.3g\n",
                fa_dtype_name(odt), e_exact, e_cost, e_ref, rel_l2(rkv, rx, n));
    cr_assert_leq(e_exact, tol_exact, "vs the dequantised reference: %g", e_exact);
    cr_assert_leq(e_cost, tol_cost, "vs the unquantised reference: %g", e_cost);
    cr_assert_gt(e_ref, 0.0, "quantisation changed nothing: the test would not see a missing descale");
    fa_cpu_backend_destroy(be);
    free(out);
    free(got);
    free(rq);
    free(rx);
    free(rkv);
    world_free(&w);
}

static const int32_t g_lq[NS] = {1, 37, 5}, g_lk[NS] = {300, 37, 120};

Test(fp8_query, f32_out_matches_dequantised_reference) { run(FA_DTYPE_F32, g_lq, g_lk, 1e-6, 8e-2); }
Test(fp8_query, bf16_out) { run(FA_DTYPE_BF16, g_lq, g_lk, 6e-3, 8e-2); }
Test(fp8_query, f16_out) { run(FA_DTYPE_F16, g_lq, g_lk, 1e-3, 8e-2); }

/* the world of g_lq / g_lk, a CPU backend and an f32 output buffer of the world's size */
typedef struct fixture {
    world w;
    fa_backend *be;
    int32_t dcuq[NS + 1], dcuk[NS + 1];
    int64_t n;
    float *out;
} fixture;

static void fixture_make(fixture *f)
{
    world_make(&f->w, g_lq, g_lk);
    f->n = (int64_t)f->w.T * HQ * D;
    f->out = malloc(sizeof(float) * (size_t)f->n);
    cr_assert(f->out);
    f->be = NULL;
    cr_assert_eq(fa_cpu_backend_create(&f->be), FA_OK);
}

static void fixture_free(fixture *f)
{
    fa_cpu_backend_destroy(f->be);
    free(f->out);
    world_free(&f->w);
}

/* a wrong descale must be seen: q_descale NULL means 1, which is far from the data's */
Test(fp8_query, descale_is_applied)
{
    fixture fx;
    fixture_make(&fx);
    const int64_t n = fx.n;
    float *out = fx.out;
    double *got = malloc(sizeof(double) * (size_t)n), *rq = malloc(sizeof(double) * (size_t)n);
    cr_assert(got && rq);
    fa_attn_args a = args_of(&fx.w, out, FA_DTYPE_F32, fx.dcuq, fx.dcuk);
    a.q_descale = NULL;
    cr_assert_eq(fx.be->ops.attention(fx.be->ctx, &a), FA_OK, "%s", berr(fx.be));
    for (int64_t i = 0; i < n; ++i) got[i] = out[i];
    reference(&fx.w, 1, rq);
    cr_assert_gt(rel_l2(got, rq, n), 1e-2, "q_descale NULL (= 1) gave the descaled answer");
    free(got);
    free(rq);
    fixture_free(&fx);
}

Test(fp8_query, bad_dtypes_rejected_before_writing)
{
    fixture fx;
    fixture_make(&fx);
    for (int c = 0; c < 3; ++c) {
        fa_attn_args a = args_of(&fx.w, fx.out, FA_DTYPE_F32, fx.dcuq, fx.dcuk);
        const char *want = NULL;
        memset(fx.out, 0x5a, sizeof(float) * (size_t)fx.n);
        if (c == 0) {
            a.kv_dtype = FA_DTYPE_FP8_E5M2; /* an fp8 query reads an E4M3 cache only */
            want = "kv_dtype is fp8_e5m2";
        } else if (c == 1) {
            a.out_dtype = FA_DTYPE_FP8_E4M3; /* out is not fp8 */
            want = "out_dtype fp8_e4m3";
        } else {
            a.q_dtype = FA_DTYPE_FP8_E5M2; /* the query is E4M3 only */
            want = "q_dtype fp8_e5m2";
        }
        cr_assert_eq(fx.be->ops.attention(fx.be->ctx, &a), FA_ERR_INVALID_ARG, "case %d", c);
        const char *m = berr(fx.be);
        cr_assert(m && strstr(m, want), "case %d: message '%s' does not name '%s'", c, m, want);
        cr_assert_eq(fx.be->ops.check(fx.be->ctx, FA_OP_ATTENTION, &a), FA_ERR_INVALID_ARG, "check, case %d",
                     c);
        for (int64_t i = 0; i < fx.n; ++i) {
            uint32_t u;
            memcpy(&u, &fx.out[i], 4);
            cr_assert_eq(u, 0x5a5a5a5au, "case %d: out written on error", c);
        }
    }
    fixture_free(&fx);
}
