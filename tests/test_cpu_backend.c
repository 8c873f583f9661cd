/* test_cpu_backend.c - the CPU reference backend (backends/cpu) against an independent oracle.

   The oracle below is a dense double-precision attention written for this file: its own
   gather through the block table, its own key ranges (mask), its own f16/bf16/fp8 decoders
   from the format formulas. It shares no code with the backend; the fa_cpu.h encoders are only
   used to produce inputs. Unused cache rows, rows past seqused_k, keys no query row may see and
   unused block-table slots hold NaN: any of them reaching an output fails the comparison.

   Suites: attention (sampled grid + directed cases), split (split-KV), cache
   (reshape_and_cache), merge, dcp (dcp_correct), comm (fake comm + an end-to-end DCP step),
   errors (messages, nothing written; bounds against num_blocks; int64 offsets), backend (vtable
   basics, the capability block, ops.check == op, per-thread messages), faults (the
   fault-injection hooks, directly and through the builder / fa_forward). */
#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fa_cpu.h"
#include "fa_fake_comm.h"

#include "backends/common/fa_backend_util.h"

/* ------------------------------------------------------------------------------------------ */
/* random numbers (splitmix64), never exactly zero where values are drawn */

typedef struct trng {
    uint64_t s;
} trng;

static uint64_t tr_next(trng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double tr_unif(trng *r) { return (double)(tr_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static double tr_range(trng *r, double lo, double hi) { return lo + (hi - lo) * tr_unif(r); }
static int tr_int(trng *r, int lo, int hi) { return lo + (int)(tr_next(r) % (uint64_t)(hi - lo + 1)); }

/* |x| in [0.05, amp], random sign */
static double tr_value(trng *r, double amp)
{
    double x = tr_range(r, 0.05, amp);
    return (tr_next(r) & 1) ? -x : x;
}

/* ------------------------------------------------------------------------------------------ */
/* dtypes: own decoders (formulas), encoders from fa_cpu.h (inputs only) */

static size_t t_size(fa_dtype t)
{
    return t == FA_DTYPE_F32 ? 4 : (t == FA_DTYPE_F16 || t == FA_DTYPE_BF16) ? 2 : 1;
}

static double t_dec_half(unsigned c)
{
    int e = (c >> 10) & 31, m = c & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25);
    return (c & 0x8000) ? -v : v;
}

static double t_dec_bf16(unsigned c)
{
    uint32_t u = (uint32_t)c << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

static double t_dec_e4m3(unsigned c)
{
    int e = (c >> 3) & 15, m = c & 7;
    double v = (e == 15 && m == 7) ? NAN : e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, e - 10);
    return (c & 0x80) ? -v : v;
}

static double t_dec_e5m2(unsigned c)
{
    int e = (c >> 2) & 31, m = c & 3;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp((double)m, -16) : ldexp(4.0 + m, e - 17);
    return (c & 0x80) ? -v : v;
}

static double t_get(const void *p, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return (double)((const float *)p)[i];
    case FA_DTYPE_F16: return t_dec_half(((const uint16_t *)p)[i]);
    case FA_DTYPE_BF16: return t_dec_bf16(((const uint16_t *)p)[i]);
    case FA_DTYPE_FP8_E4M3: return t_dec_e4m3(((const uint8_t *)p)[i]);
    case FA_DTYPE_FP8_E5M2: return t_dec_e5m2(((const uint8_t *)p)[i]);
    default: return NAN;
    }
}

static void t_put(void *p, int64_t i, fa_dtype t, double v)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case FA_DTYPE_F16: ((uint16_t *)p)[i] = fa_cpu_float_to_half((float)v); break;
    case FA_DTYPE_BF16: ((uint16_t *)p)[i] = fa_cpu_float_to_bf16((float)v); break;
    default: ((uint8_t *)p)[i] = fa_cpu_float_to_fp8((float)v, t); break;
    }
}

static void t_put_nan(void *p, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)p)[i] = NAN; break;
    case FA_DTYPE_F16: ((uint16_t *)p)[i] = 0x7E00; break;
    case FA_DTYPE_BF16: ((uint16_t *)p)[i] = 0x7FC0; break;
    default: ((uint8_t *)p)[i] = 0x7F; break;   /* NaN in both fp8 formats */
    }
}

/* v rounded to dt and back */
static double t_round(fa_dtype dt, double v)
{
    unsigned char tmp[8];
    t_put(tmp, 0, dt, v);
    return t_get(tmp, 0, dt);
}

static void *t_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p != NULL, "out of memory (%zu bytes)", bytes);
    return p;
}

static double t_tol(fa_dtype act) { return act == FA_DTYPE_F32 ? 2e-5 : act == FA_DTYPE_F16 ? 2e-3 : 2e-2; }

/* f32: within a few float roundings; f16 / bf16: the correctly rounded value (half an ulp of
   the format at want, plus a hair for the float32 partials of split-KV), and never beyond the
   coarse tolerance (f16 2e-3, bf16 2e-2). */
static int t_close(double got, double want, fa_dtype act)
{
    double ulp;
    int e;
    if (act == FA_DTYPE_F32) return fabs(got - want) <= 2e-6 + 2e-5 * fabs(want);
    (void)frexp(want, &e);   /* |want| in [2^(e-1), 2^e) */
    if (act == FA_DTYPE_F16)
        ulp = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    else
        ulp = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
    return fabs(got - want) <= 0.5 * ulp + 5e-7 + 1e-6 * fabs(want) && fabs(got - want) <= t_tol(act);
}

static int t_lse_close(double got, double want)
{
    if (isinf(want)) return got == want;
    return fabs(got - want) <= 1e-5 * (1.0 + fabs(want));
}

static fa_backend *t_backend(void)
{
    fa_backend *be = NULL;
    cr_assert_eq(fa_cpu_backend_create(&be), FA_OK);
    cr_assert(be != NULL);
    return be;
}

static const char *t_err(const fa_backend *be) { return be->ops.last_error(be->ctx); }

/* reports the first few mismatches of a check, counts all */
typedef struct tcheck {
    int fails;
} tcheck;

#define CHECK(ck, cond, ...) \
    do { \
        if (!(cond) && (ck)->fails++ < 6) cr_expect(0, __VA_ARGS__); \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* the attention oracle */

typedef struct acase {
    int D, Hq, Hkv, bs;
    fa_dtype act, kvdt;
    int causal, wl, wr;
    float softcap;
    int alibi;       /* 0 off, 1 slopes [Hq], 2 slopes [num_seqs, Hq] */
    int sinks;
    int splits;      /* 1: no split-KV; > 1: S */
    int plan;        /* 0: no split_plan; 1: counts in [1, S]; 2: and sequence 1 gets 0 */
    int hnd;
    int descale;     /* fp8: descale arrays [num_seqs, Hkv] instead of k_scale / v_scale */
    int dense;       /* cu_seqlens_k instead of a paged cache */
    int qgroup;      /* q_head_group; 0 = one group */
    int nseq, lq[6], lk[6];
    uint64_t seed;
} acase;

static void t_describe(const acase *c, char *buf, size_t n)
{
    int b, o = snprintf(buf, n,
                        "seed %llu D %d Hq %d Hkv %d bs %d act %d kv %d causal %d "
                        "win (%d,%d) cap %g alibi %d sinks %d splits %d plan %d hnd %d desc %d "
                        "dense %d qg %d seqs",
                        (unsigned long long)c->seed, c->D, c->Hq, c->Hkv, c->bs, (int)c->act, (int)c->kvdt,
                        c->causal, c->wl, c->wr, (double)c->softcap, c->alibi, c->sinks, c->splits, c->plan,
                        c->hnd, c->descale, c->dense, c->qgroup);
    for (b = 0; b < c->nseq && o > 0 && (size_t)o < n; ++b)
        o += snprintf(buf + o, n - (size_t)o, " (%d,%d)", c->lq[b], c->lk[b]);
}

/* Keys row i of a (lq, lk) sequence may see: [*lo, *hi] (empty when lo > hi). Written as
   ranges, unlike the backend's per-key predicate. */
static void t_key_range(const acase *c, int i, int lq, int lk, int *lo, int *hi)
{
    int diag = lk - lq + i;   /* the key aligned with row i (bottom-right) */
    int right = c->causal ? 0 : c->wr;
    *lo = 0;
    *hi = lk - 1;
    if (c->wl >= 0 && diag - c->wl > *lo) *lo = diag - c->wl;
    if (right >= 0 && diag + right < *hi) *hi = diag + right;
}

/* All buffers of one attention call. */
typedef struct abuf {
    acase c;
    int T, Tused, cu_q[7], cu_k[7];
    int32_t seqused[6];
    void *q;
    int64_t q_tok, q_head, q_grp;
    void *k, *v;
    int64_t blk_stride, row_stride, head_stride;
    int32_t *bt;
    int64_t bt_stride;
    int num_blocks;
    float *alibi, *sinks, *kdesc, *vdesc;
    int64_t desc_b, desc_h;
    float k_scale, v_scale, scale;
    int32_t *plan;
    float *split_out, *split_lse;
    void *out, *out0;
    int64_t out_tok;
    size_t out_bytes;
    float *lse, *lse0;
    int64_t lse_stride;
    size_t lse_bytes;
} abuf;

static int64_t t_q_index(const abuf *x, int t, int h)
{
    if (x->c.qgroup > 0)
        return (int64_t)(h / x->c.qgroup) * x->q_grp + (int64_t)t * x->q_tok +
               (int64_t)(h % x->c.qgroup) * x->q_head;
    return (int64_t)t * x->q_tok + (int64_t)h * x->q_head;
}

/* element index of (key j of sequence b, kv head g, d = 0) */
static int64_t t_kv_index(const abuf *x, int b, int j, int g)
{
    if (x->c.dense) return (int64_t)(x->cu_k[b] + j) * x->row_stride + (int64_t)g * x->head_stride;
    {
        int32_t page = x->bt[(int64_t)b * x->bt_stride + j / x->c.bs];
        return (int64_t)page * x->blk_stride + (int64_t)(j % x->c.bs) * x->row_stride +
               (int64_t)g * x->head_stride;
    }
}

static double t_kscale(const abuf *x, int b, int g, int is_v)
{
    if (x->c.kvdt != FA_DTYPE_FP8_E4M3 && x->c.kvdt != FA_DTYPE_FP8_E5M2) return 1.0;
    if (x->c.descale) return (double)(is_v ? x->vdesc : x->kdesc)[b * x->desc_b + g * x->desc_h];
    return (double)(is_v ? x->v_scale : x->k_scale);
}

static int t_seq_has_work(const abuf *x, int b) { return !(x->plan && x->plan[1 + b] == 0); }

/* The oracle: query row i of sequence b, head h, over the keys [j0, j1) (with the sink or
   not) -> o[D] and the LSE. */
static double t_ref_row(const abuf *x, int b, int i, int h, int j0, int j1, int with_sink, double *o)
{
    const acase *c = &x->c;
    const int D = c->D, lq = c->lq[b], lk = c->lk[b], t = x->cu_q[b] + i;
    const int qg = c->qgroup > 0 ? c->qgroup : c->Hq;  /* head groups, each over all KV heads */
    const int g = (h % qg) * c->Hkv / qg;               /* contiguous groups */
    const double ks = t_kscale(x, b, g, 0), vs = t_kscale(x, b, g, 1);
    double *s = (double *)t_alloc(sizeof(double) * (size_t)(lk + 1));
    double mx = -INFINITY, den = 0.0, z = 0.0, slope = 0.0;
    int lo, hi, j, d;

    t_key_range(c, i, lq, lk, &lo, &hi);
    if (lo < j0) lo = j0;
    if (hi > j1 - 1) hi = j1 - 1;
    if (c->alibi) slope = (double)x->alibi[(c->alibi == 2 ? b * c->Hq : 0) + h];
    for (d = 0; d < D; ++d) o[d] = 0.0;
    for (j = lo; j <= hi; ++j) {
        int64_t kb = t_kv_index(x, b, j, g);
        double dot = 0.0;
        for (d = 0; d < D; ++d)
            dot += t_get(x->q, t_q_index(x, t, h) + d, c->act) * t_get(x->k, kb + d, c->kvdt) * ks;
        s[j - lo] = dot * (double)x->scale;
        if (c->softcap > 0.0f) s[j - lo] = (double)c->softcap * tanh(s[j - lo] / (double)c->softcap);
        s[j - lo] -= slope * fabs((double)(lk - lq + i - j));
        mx = fmax(mx, s[j - lo]);
    }
    if (with_sink) {
        z = (double)x->sinks[h];
        mx = fmax(mx, z);
    }
    if (mx == -INFINITY) {
        free(s);
        return -INFINITY;
    }
    for (j = lo; j <= hi; ++j) {
        int64_t vb = t_kv_index(x, b, j, g);
        double p = exp(s[j - lo] - mx);
        den += p;
        for (d = 0; d < D; ++d) o[d] += p * t_get(x->v, vb + d, c->kvdt) * vs;
    }
    if (with_sink) den += exp(z - mx);
    for (d = 0; d < D; ++d) o[d] /= den;
    free(s);
    return mx + log(den);
}

static void ab_build(abuf *x, const acase *c)
{
    trng r = {c->seed * 7919u + 17u};
    const int D = c->D, Hq = c->Hq, Hkv = c->Hkv, bs = c->bs;
    const fa_dtype kvdt = c->kvdt;
    const int fp8 = kvdt == FA_DTYPE_FP8_E4M3 || kvdt == FA_DTYPE_FP8_E5M2;
    int b, i, j, g, d, t, h, maxblk = 0, total_k = 0;
    int64_t q_elems, kv_elems, nrows;
    char *vis;

    memset(x, 0, sizeof *x);
    x->c = *c;
    x->cu_q[0] = 0;
    x->cu_k[0] = 0;
    for (b = 0; b < c->nseq; ++b) {
        x->cu_q[b + 1] = x->cu_q[b] + c->lq[b];
        x->cu_k[b + 1] = x->cu_k[b] + c->lk[b];
        x->seqused[b] = c->lk[b];
        total_k += c->lk[b];
        if ((c->lk[b] + bs - 1) / bs > maxblk) maxblk = (c->lk[b] + bs - 1) / bs;
    }
    x->Tused = x->cu_q[c->nseq];
    x->T = x->Tused + 2;   /* two padding rows past cu_seqlens_q[num_seqs]: never touched */

    /* q: packed heads with a padded token stride, or grouped [group][T][qgroup][D] */
    if (c->qgroup > 0) {
        int ngroups = (Hq + c->qgroup - 1) / c->qgroup;
        x->q_head = D;
        x->q_tok = (int64_t)c->qgroup * D;
        x->q_grp = (int64_t)x->T * x->q_tok;
        q_elems = ngroups * x->q_grp;
    } else {
        x->q_head = D;
        x->q_tok = (int64_t)Hq * D + 8;
        q_elems = x->T * x->q_tok;
    }
    x->q = t_alloc((size_t)q_elems * t_size(c->act));
    for (i = 0; i < q_elems; ++i) t_put(x->q, i, c->act, tr_value(&r, 1.5));

    x->scale = (float)(tr_range(&r, 0.8, 1.2) / sqrt((double)D));
    x->k_scale = (float)tr_range(&r, 0.5, 1.5);
    x->v_scale = (float)tr_range(&r, 0.5, 1.5);

    /* K/V storage */
    if (c->dense) {
        x->row_stride = (int64_t)Hkv * D + 8;
        x->head_stride = D;
        nrows = total_k;
        kv_elems = nrows * x->row_stride;
    } else {
        int nused = 0, *perm, nassigned = 0;
        int32_t *assigned;
        x->num_blocks = 0;
        for (b = 0; b < c->nseq; ++b) x->num_blocks += (c->lk[b] + bs - 1) / bs;
        x->num_blocks += 4;   /* spares and, last, the poison block (NaN only) */
        x->blk_stride = (int64_t)bs * Hkv * D + ((tr_next(&r) & 1) ? 16 : 0);
        x->row_stride = c->hnd ? D : (int64_t)Hkv * D;
        x->head_stride = c->hnd ? (int64_t)bs * D : D;
        x->bt_stride = maxblk + 2 + ((tr_next(&r) & 1) ? 3 : 0);
        x->bt = (int32_t *)t_alloc(sizeof(int32_t) * (size_t)(c->nseq * x->bt_stride));
        perm = (int *)t_alloc(sizeof(int) * (size_t)x->num_blocks);
        assigned = (int32_t *)t_alloc(sizeof(int32_t) * (size_t)x->num_blocks);
        for (i = 0; i < x->num_blocks - 1; ++i) perm[i] = i;
        for (i = x->num_blocks - 2; i > 0; --i) {   /* shuffled ids */
            int k = tr_int(&r, 0, i), tmp = perm[i];
            perm[i] = perm[k];
            perm[k] = tmp;
        }
        for (b = 0; b < c->nseq; ++b) {
            int nb = (c->lk[b] + bs - 1) / bs;
            for (j = 0; j < x->bt_stride; ++j) {
                int32_t id;
                if (j >= nb)   /* unused slot: the poison block, or -1 */
                    id = (j == x->bt_stride - 1 && (tr_next(&r) & 1)) ? -1 : x->num_blocks - 1;
                else if (nassigned > 0 && tr_int(&r, 0, 4) == 0)
                    id = assigned[tr_int(&r, 0, nassigned - 1)];   /* a repeated id */
                else
                    id = assigned[nassigned++] = perm[nused++];
                x->bt[(int64_t)b * x->bt_stride + j] = id;
            }
        }
        free(perm);
        free(assigned);
        nrows = (int64_t)x->num_blocks * bs;
        kv_elems = x->num_blocks * x->blk_stride;
    }
    x->k = t_alloc((size_t)kv_elems * t_size(kvdt));
    x->v = t_alloc((size_t)kv_elems * t_size(kvdt));
    for (i = 0; i < kv_elems; ++i) {   /* NaN everywhere first */
        t_put_nan(x->k, i, kvdt);
        t_put_nan(x->v, i, kvdt);
    }
    /* values only in rows that some query row may see */
    vis = (char *)t_alloc((size_t)nrows + 1);
    for (b = 0; b < c->nseq; ++b) {
        for (i = 0; i < c->lq[b]; ++i) {
            int lo, hi;
            t_key_range(c, i, c->lq[b], c->lk[b], &lo, &hi);
            for (j = lo; j <= hi; ++j) {
                int64_t row = c->dense ? x->cu_k[b] + j
                                       : (int64_t)x->bt[(int64_t)b * x->bt_stride + j / bs] * bs + j % bs;
                if (vis[row]) continue;
                vis[row] = 1;
                for (g = 0; g < Hkv; ++g) {
                    int64_t kb = t_kv_index(x, b, j, g);
                    for (d = 0; d < D; ++d) {
                        double ks = fp8 ? 1.0 / x->k_scale : 1.0, vs = fp8 ? 1.0 / x->v_scale : 1.0;
                        if (fp8 && c->descale) {   /* stored relative to the per-seq scale */
                            ks = 1.0;
                            vs = 1.0;
                        }
                        t_put(x->k, kb + d, kvdt, tr_value(&r, 1.5) * ks);
                        t_put(x->v, kb + d, kvdt, tr_value(&r, 1.5) * vs);
                    }
                }
            }
        }
    }
    free(vis);

    if (c->alibi) {
        int n = c->alibi == 2 ? c->nseq * Hq : Hq;
        x->alibi = (float *)t_alloc(sizeof(float) * (size_t)n);
        for (i = 0; i < n; ++i) x->alibi[i] = (float)tr_range(&r, 0.01, 0.25);
    }
    if (c->sinks) {
        x->sinks = (float *)t_alloc(sizeof(float) * (size_t)Hq);
        for (h = 0; h < Hq; ++h) x->sinks[h] = (float)tr_range(&r, -2.0, 4.0);
    }
    if (fp8 && c->descale) {   /* [num_seqs, Hkv] with NaN between the used entries */
        int n;
        x->desc_h = 2;
        x->desc_b = (int64_t)Hkv * 2 + 1;
        n = (int)(c->nseq * x->desc_b);
        x->kdesc = (float *)t_alloc(sizeof(float) * (size_t)n);
        x->vdesc = (float *)t_alloc(sizeof(float) * (size_t)n);
        for (i = 0; i < n; ++i) x->kdesc[i] = x->vdesc[i] = NAN;
        for (b = 0; b < c->nseq; ++b)
            for (g = 0; g < Hkv; ++g) {
                x->kdesc[b * x->desc_b + g * x->desc_h] = (float)tr_range(&r, 0.5, 1.5);
                x->vdesc[b * x->desc_b + g * x->desc_h] = (float)tr_range(&r, 0.5, 1.5);
            }
        x->k_scale = x->v_scale = NAN;   /* must be ignored */
    }
    if (c->splits > 1) {
        int64_t n1 = (int64_t)c->splits * x->T * Hq * D, n2 = (int64_t)c->splits * Hq * x->T;
        x->split_out = (float *)t_alloc(sizeof(float) * (size_t)n1);
        x->split_lse = (float *)t_alloc(sizeof(float) * (size_t)n2);
        for (i = 0; i < n1; ++i) x->split_out[i] = NAN;
        for (i = 0; i < n2; ++i) x->split_lse[i] = NAN;
    }
    if (c->plan) {
        x->plan = (int32_t *)t_alloc(sizeof(int32_t) * (size_t)(c->nseq + 1));
        x->plan[0] = c->splits;
        for (b = 0; b < c->nseq; ++b) x->plan[1 + b] = tr_int(&r, 1, c->splits > 1 ? c->splits : 1);
        if (c->plan == 2 && c->nseq > 1) x->plan[2] = 0;
    }

    x->out_tok = (int64_t)Hq * D + 8;
    x->out_bytes = (size_t)(x->T * x->out_tok) * t_size(c->act);
    x->out = t_alloc(x->out_bytes);
    x->out0 = t_alloc(x->out_bytes);
    for (t = 0; t < (int)x->out_bytes; ++t)
        ((unsigned char *)x->out)[t] = (unsigned char)(0x3Au + (unsigned)t * 7u);
    memcpy(x->out0, x->out, x->out_bytes);
    x->lse_stride = x->T + 3;
    x->lse_bytes = sizeof(float) * (size_t)(Hq * x->lse_stride);
    x->lse = (float *)t_alloc(x->lse_bytes);
    x->lse0 = (float *)t_alloc(x->lse_bytes);
    for (t = 0; t < Hq * x->lse_stride; ++t) x->lse[t] = 1234.5f + (float)t;
    memcpy(x->lse0, x->lse, x->lse_bytes);
}

static void ab_args(const abuf *x, fa_attn_args *a)
{
    const acase *c = &x->c;
    memset(a, 0, sizeof *a);
    a->q = x->q;
    a->q_token_stride = x->q_tok;
    a->q_head_stride = x->q_head;
    a->q_group_stride = x->q_grp;
    a->q_head_group = c->qgroup;
    a->q_dtype = c->act;
    a->k = x->k;
    a->v = x->v;
    a->k_block_stride = a->v_block_stride = x->blk_stride;
    a->k_row_stride = a->v_row_stride = x->row_stride;
    a->k_head_stride = a->v_head_stride = x->head_stride;
    a->kv_dtype = c->kvdt;
    a->out = x->out;
    a->out_token_stride = x->out_tok;
    a->out_head_stride = c->D;
    a->lse = x->lse;
    a->lse_head_stride = x->lse_stride;
    a->cu_seqlens_q = x->cu_q;
    if (c->dense) {
        a->cu_seqlens_k = x->cu_k;
    } else {
        a->seqused_k = x->seqused;
        a->block_table = x->bt;
        a->block_table_stride = x->bt_stride;
        a->num_blocks = x->num_blocks;
    }
    a->num_seqs = c->nseq;
    a->num_tokens = x->T;
    a->max_seqlen_q = 64;
    a->max_seqlen_k = 512;
    a->num_heads_q = c->Hq;
    a->num_heads_kv = c->Hkv;
    a->head_size = c->D;
    a->block_size = c->bs;
    a->softmax_scale = x->scale;
    a->softcap = c->softcap;
    a->causal = c->causal;
    a->window_left = c->wl;
    a->window_right = c->wr;
    a->alibi_slopes = x->alibi;
    a->alibi_batch_stride = c->alibi == 2 ? c->Hq : 0;
    a->sinks = x->sinks;
    a->k_descale = x->kdesc;
    a->v_descale = x->vdesc;
    a->descale_batch_stride = x->desc_b;
    a->descale_head_stride = x->desc_h;
    a->k_scale = x->k_scale;
    a->v_scale = x->v_scale;
    a->num_splits = c->splits;
    a->split_plan = x->plan;
    a->split_out = x->split_out;
    a->split_lse = x->split_lse;
}

static void ab_free(abuf *x)
{
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->bt);
    free(x->alibi);
    free(x->sinks);
    free(x->kdesc);
    free(x->vdesc);
    free(x->plan);
    free(x->split_out);
    free(x->split_lse);
    free(x->out);
    free(x->out0);
    free(x->lse);
    free(x->lse0);
}

/* Compares out / lse with the oracle; everything the call must not touch is unchanged. */
static int ab_check(const abuf *x, const char *desc)
{
    const acase *c = &x->c;
    const size_t es = t_size(c->act);
    char *wout = (char *)t_alloc(x->out_bytes / es), *wlse = (char *)t_alloc(x->lse_bytes / 4);
    double *o = (double *)t_alloc(sizeof(double) * (size_t)c->D);
    tcheck ck = {0};
    int b, i, h, d;
    size_t e;

    for (b = 0; b < c->nseq; ++b) {
        if (!t_seq_has_work(x, b)) continue;
        for (i = 0; i < c->lq[b]; ++i) {
            int t = x->cu_q[b] + i;
            for (h = 0; h < c->Hq; ++h) {
                double lse = t_ref_row(x, b, i, h, 0, c->lk[b], c->sinks, o);
                int64_t li = (int64_t)h * x->lse_stride + t;
                for (d = 0; d < c->D; ++d) {
                    int64_t oi = (int64_t)t * x->out_tok + (int64_t)h * c->D + d;
                    double got = t_get(x->out, oi, c->act);
                    CHECK(&ck, t_close(got, o[d], c->act), "%s: out[t %d, h %d, d %d] = %.8g, want %.8g",
                          desc, t, h, d, got, o[d]);
                    wout[oi] = 1;
                }
                CHECK(&ck, t_lse_close((double)x->lse[li], lse), "%s: lse[h %d, t %d] = %.8g, want %.8g",
                      desc, h, t, (double)x->lse[li], lse);
                wlse[li] = 1;
            }
        }
    }
    /* split-KV: the partials themselves (whole blocks per split, the sink in split 0 only) */
    for (b = 0; b < c->nseq && c->splits > 1; ++b) {
        const int ns = x->plan ? x->plan[1 + b] : c->splits, lk = c->lk[b];
        const int kps = ns > 0 ? ((lk + c->bs - 1) / c->bs + ns - 1) / ns * c->bs : 0;
        int sp;
        for (sp = 0; sp < ns; ++sp) {
            int j0 = sp * kps < lk ? sp * kps : lk, j1 = j0 + kps < lk ? j0 + kps : lk;
            for (i = 0; i < c->lq[b]; ++i) {
                int t = x->cu_q[b] + i;
                for (h = 0; h < c->Hq; ++h) {
                    double lse = t_ref_row(x, b, i, h, j0, j1, c->sinks && sp == 0, o);
                    const float *so = x->split_out + (((int64_t)sp * x->T + t) * c->Hq + h) * c->D;
                    double got = x->split_lse[((int64_t)sp * c->Hq + h) * x->T + t];
                    CHECK(&ck, t_lse_close(got, lse), "%s: split %d lse[h %d, t %d] = %.8g, want %.8g", desc,
                          sp, h, t, got, lse);
                    for (d = 0; d < c->D; ++d)
                        CHECK(&ck, fabs(so[d] - o[d]) <= 1e-7 + 1e-6 * fabs(o[d]),
                              "%s: split %d out[t %d, h %d, d %d] = %.8g, want %.8g", desc, sp, t, h, d,
                              (double)so[d], o[d]);
                }
            }
        }
    }
    for (e = 0; e < x->out_bytes / es; ++e)
        CHECK(&ck, wout[e] || !memcmp((char *)x->out + e * es, (char *)x->out0 + e * es, es),
              "%s: out element %zu outside the rows to write was modified", desc, e);
    for (e = 0; e < x->lse_bytes / 4; ++e)
        CHECK(&ck, wlse[e] || !memcmp(&x->lse[e], &x->lse0[e], 4),
              "%s: lse element %zu outside the rows to write was modified", desc, e);
    free(wout);
    free(wlse);
    free(o);
    return ck.fails;
}

/* Builds, runs and checks one case. With unsplit_too, also reruns without split-KV and checks
   that the split result equals it up to rounding. Returns the number of mismatches. */
static int run_case(const fa_backend *be, const acase *c, int unsplit_too)
{
    char desc[512];
    abuf x;
    fa_attn_args a;
    fa_status st;
    int fails;

    t_describe(c, desc, sizeof desc);
    ab_build(&x, c);
    ab_args(&x, &a);
    st = be->ops.attention(be->ctx, &a);
    cr_assert_eq(st, FA_OK, "%s: attention failed: %s", desc, t_err(be));
    fails = ab_check(&x, desc);
    if (unsplit_too && c->splits > 1) {
        void *split_out = t_alloc(x.out_bytes);
        float *split_lse = (float *)t_alloc(x.lse_bytes);
        tcheck ck = {0};
        int b, i, h, d;
        memcpy(split_out, x.out, x.out_bytes);
        memcpy(split_lse, x.lse, x.lse_bytes);
        a.num_splits = 1;
        a.split_plan = NULL;
        a.split_out = NULL;
        a.split_lse = NULL;
        cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s: %s", desc, t_err(be));
        for (b = 0; b < c->nseq; ++b) {
            if (!t_seq_has_work(&x, b)) continue;
            for (i = x.cu_q[b]; i < x.cu_q[b + 1]; ++i)
                for (h = 0; h < c->Hq; ++h) {
                    double l1 = x.lse[h * x.lse_stride + i], l2 = split_lse[h * x.lse_stride + i];
                    CHECK(&ck, (isinf(l1) && l1 == l2) || fabs(l1 - l2) <= 1e-6 * (1 + fabs(l1)),
                          "%s: split lse %.9g vs unsplit %.9g (t %d h %d)", desc, l2, l1, i, h);
                    for (d = 0; d < c->D; ++d) {
                        int64_t oi = (int64_t)i * x.out_tok + (int64_t)h * c->D + d;
                        double o1 = t_get(x.out, oi, c->act), o2 = t_get(split_out, oi, c->act);
                        double tol = c->act == FA_DTYPE_F32 ? 1e-6 * (1 + fabs(o1)) : t_tol(c->act);
                        CHECK(&ck, fabs(o1 - o2) <= tol,
                              "%s: split out %.9g vs unsplit %.9g (t %d h %d d %d)", desc, o2, o1, i, h, d);
                    }
                }
        }
        fails += ck.fails;
        free(split_out);
        free(split_lse);
    }
    ab_free(&x);
    return fails;
}

/* A random mix of decodes (q_len 1), long prefills, chunked prefills, rows with no key
   (q_len > k_len) and empty key sets. The first two are a decode and a prefill. */
static void gen_seqs(trng *r, acase *c)
{
    const int maxq = c->D >= 256 ? 20 : 36, maxk = c->D >= 256 ? 96 : 150;
    int b;
    c->nseq = tr_int(r, 2, 5);
    for (b = 0; b < c->nseq; ++b) {
        int kind = b == 0 ? 0 : b == 1 ? 4 : tr_int(r, 0, 9);
        if (kind <= 3) {
            c->lq[b] = 1;
            c->lk[b] = tr_int(r, 1, maxk);
        } else if (kind <= 6) {
            c->lq[b] = tr_int(r, 8, maxq);
            c->lk[b] = c->lq[b] + tr_int(r, 0, maxk - maxq);
        } else if (kind == 7) {
            c->lq[b] = tr_int(r, 3, 8);
            c->lk[b] = tr_int(r, 0, c->lq[b] - 1);
        } else if (kind == 8) {
            c->lq[b] = tr_int(r, 1, 3);
            c->lk[b] = 0;
        } else {
            c->lq[b] = tr_int(r, 2, 12);
            c->lk[b] = c->lq[b] + tr_int(r, 20, maxk - 12);
        }
    }
}

/* One point of the grid, drawn from seed. */
static acase gen_case(uint64_t seed, fa_dtype act)
{
    static const int Ds[5] = {40, 64, 80, 128, 256};
    static const int heads[7][2] = {{1, 1}, {4, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}, {4, 2}};
    static const float caps[3] = {0.75f, 2.0f, 10.0f};
    trng r = {seed};
    acase c;
    int hp, w;
    memset(&c, 0, sizeof c);
    c.seed = seed;
    c.D = Ds[tr_int(&r, 0, 4)];
    hp = tr_int(&r, 0, 6);
    c.Hq = heads[hp][0];
    c.Hkv = heads[hp][1];
    {
        static const int bss[4] = {16, 32, 1, 3}; /* any block size >= 1, page size 1 included */
        c.bs = bss[tr_int(&r, 0, 3)];
    }
    c.act = act;
    w = tr_int(&r, 0, 3);
    c.kvdt = w <= 1 ? act : w == 2 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_FP8_E5M2;
    c.causal = tr_int(&r, 0, 1);
    c.wl = c.wr = -1;
    switch (tr_int(&r, 0, 7)) {
    case 0:
        c.wl = tr_int(&r, 0, 48);
        c.wr = 0;
        break;
    case 1: c.wl = c.wr = tr_int(&r, 0, 48); break;
    case 2: c.wl = tr_int(&r, 0, 48); break;
    case 3: c.wr = tr_int(&r, 0, 20); break;
    case 4:
        c.wl = tr_int(&r, 0, 30);
        c.wr = tr_int(&r, 0, 30);
        break;
    default: break;
    }
    c.softcap = tr_int(&r, 0, 1) ? caps[tr_int(&r, 0, 2)] : 0.0f;
    w = tr_int(&r, 0, 4);
    c.alibi = w <= 2 ? 0 : w - 2;
    c.sinks = tr_int(&r, 0, 2) == 0;
    c.splits = tr_int(&r, 0, 1) ? 3 : 1;
    c.plan = tr_int(&r, 0, 2);
    c.hnd = tr_int(&r, 0, 1);
    c.descale = tr_int(&r, 0, 1);
    c.qgroup = (tr_int(&r, 0, 3) == 0 && c.Hq > 1 && (c.Hq / 2) % c.Hkv == 0) ? c.Hq / 2 : 0;
    gen_seqs(&r, &c);
    return c;
}

static void run_grid(fa_dtype act, uint64_t seed0, int n, int dense)
{
    fa_backend *be = t_backend();
    int k, fails = 0;
    for (k = 0; k < n; ++k) {
        acase c = gen_case(seed0 + (uint64_t)k, act);
        c.dense = dense;
        fails += run_case(be, &c, 0);
    }
    cr_assert_eq(fails, 0, "%d mismatches over %d cases", fails, n);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* attention: the grid */

Test(attention, grid_f32) { run_grid(FA_DTYPE_F32, 1000, 36, 0); }
Test(attention, grid_bf16) { run_grid(FA_DTYPE_BF16, 2000, 24, 0); }
Test(attention, grid_f16) { run_grid(FA_DTYPE_F16, 3000, 24, 0); }
Test(attention, grid_dense_f32) { run_grid(FA_DTYPE_F32, 4000, 14, 1); }
Test(attention, grid_dense_bf16) { run_grid(FA_DTYPE_BF16, 5000, 8, 1); }

/* every head size and head ratio at least once, with everything switched on */
Test(attention, all_head_sizes_and_ratios)
{
    static const int Ds[5] = {40, 64, 80, 128, 256};
    static const int heads[6][2] = {{1, 1}, {4, 1}, {4, 4}, {8, 1}, {8, 4}, {8, 8}};
    fa_backend *be = t_backend();
    int di, hi, fails = 0;
    for (di = 0; di < 5; ++di)
        for (hi = 0; hi < 6; ++hi) {
            acase c = gen_case(7000u + (uint64_t)(di * 6 + hi), FA_DTYPE_F32);
            trng r = {c.seed};
            c.D = Ds[di];
            c.Hq = heads[hi][0];
            c.Hkv = heads[hi][1];
            c.qgroup = 0;
            c.bs = (di + hi) % 2 ? 32 : 16;
            c.hnd = hi % 2;
            c.causal = 1;
            c.softcap = 2.0f;
            c.sinks = 1;
            c.alibi = 1 + hi % 2;
            c.wl = 20;
            c.wr = -1;
            c.kvdt = hi == 2 ? FA_DTYPE_FP8_E4M3 : hi == 5 ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_F32;
            c.splits = 1 + 2 * (hi % 2);
            gen_seqs(&r, &c);
            fails += run_case(be, &c, 0);
        }
    cr_assert_eq(fails, 0);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* split-KV */

Test(split, equals_unsplit_and_oracle)
{
    fa_backend *be = t_backend();
    int k, fails = 0;
    for (k = 0; k < 16; ++k) {
        acase c = gen_case(8000u + (uint64_t)k, k % 3 == 2 ? FA_DTYPE_BF16 : FA_DTYPE_F32);
        c.splits = k % 4 == 3 ? 5 : 3;
        c.plan = k % 3;
        fails += run_case(be, &c, 1);
    }
    cr_assert_eq(fails, 0);
    fa_cpu_backend_destroy(be);
}

/* more splits than key blocks: empty partials (-inf) in the combine; sink only in split 0 */
Test(split, empty_splits_and_sink)
{
    fa_backend *be = t_backend();
    acase c;
    int fails = 0;
    memset(&c, 0, sizeof c);
    c.seed = 99;
    c.D = 64;
    c.Hq = 4;
    c.Hkv = 2;
    c.bs = 16;
    c.act = c.kvdt = FA_DTYPE_F32;
    c.causal = 1;
    c.wl = -1;
    c.wr = -1;
    c.sinks = 1;
    c.splits = 6;
    c.nseq = 4;
    c.lq[0] = 1;
    c.lk[0] = 17;    /* 2 blocks over 6 splits */
    c.lq[1] = 6;
    c.lk[1] = 3;     /* rows 0..2 empty: LSE = sink */
    c.lq[2] = 2;
    c.lk[2] = 0;     /* no keys at all */
    c.lq[3] = 20;
    c.lk[3] = 90;
    fails += run_case(be, &c, 1);
    c.sinks = 0;
    c.seed = 100;
    fails += run_case(be, &c, 1);
    cr_assert_eq(fails, 0);
    fa_cpu_backend_destroy(be);
}

/* split_plan[1 + b] == 0: that sequence does nothing (its rows stay as they were) */
Test(split, zero_in_plan_leaves_rows_untouched)
{
    fa_backend *be = t_backend();
    acase c = gen_case(4242, FA_DTYPE_F32);
    int fails;
    c.splits = 3;
    c.plan = 2;
    fails = run_case(be, &c, 1);   /* ab_check verifies sequence 1's rows were not touched */
    cr_assert_eq(fails, 0);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* attention: directed cases with hand-computed answers */

/* One sequence, Hq heads over Hkv kv heads, D = 8, f32, paged NHD with bs 16 in block 0..:
   every key is all ones scaled by kval[j], every value row is vval[j] (all d), q all ones. */
typedef struct small_attn {
    float q[64 * 8 * 8], k[4 * 16 * 8 * 8], v[4 * 16 * 8 * 8], out[64 * 8 * 8], lse[8 * 64];
    int32_t cu_q[2], used[1], bt[4];
    fa_attn_args a;
} small_attn;

static void small_setup(small_attn *s, int lq, int lk, int Hq, int Hkv, const float *kval, const float *vval)
{
    int i, j, h, d;
    memset(s, 0, sizeof *s);
    for (i = 0; i < 64 * 8 * 8; ++i) s->q[i] = 1.0f;
    for (i = 0; i < 4 * 16 * 8 * 8; ++i) s->k[i] = s->v[i] = NAN;
    for (j = 0; j < lk; ++j)
        for (h = 0; h < Hkv; ++h)
            for (d = 0; d < 8; ++d) {
                s->k[(j * Hkv + h) * 8 + d] = kval ? kval[j] : 1.0f;
                s->v[(j * Hkv + h) * 8 + d] = vval[j] + 100.0f * (float)h;   /* head tag */
            }
    for (i = 0; i < 64 * 8 * 8; ++i) s->out[i] = -7.0f;
    for (i = 0; i < 8 * 64; ++i) s->lse[i] = -7.0f;
    s->cu_q[0] = 0;
    s->cu_q[1] = lq;
    s->used[0] = lk;
    for (i = 0; i < 4; ++i) s->bt[i] = i;
    s->a.q = s->q;
    s->a.q_token_stride = Hq * 8;
    s->a.q_head_stride = 8;
    s->a.q_dtype = FA_DTYPE_F32;
    s->a.k = s->k;
    s->a.v = s->v;
    s->a.k_block_stride = s->a.v_block_stride = 16 * Hkv * 8;
    s->a.k_row_stride = s->a.v_row_stride = Hkv * 8;
    s->a.k_head_stride = s->a.v_head_stride = 8;
    s->a.kv_dtype = FA_DTYPE_F32;
    s->a.out = s->out;
    s->a.out_token_stride = Hq * 8;
    s->a.out_head_stride = 8;
    s->a.lse = s->lse;
    s->a.lse_head_stride = 64;
    s->a.cu_seqlens_q = s->cu_q;
    s->a.seqused_k = s->used;
    s->a.block_table = s->bt;
    s->a.block_table_stride = 4;
    s->a.num_blocks = 4;
    s->a.num_seqs = 1;
    s->a.num_tokens = lq;
    s->a.max_seqlen_q = lq;
    s->a.max_seqlen_k = lk;
    s->a.num_heads_q = Hq;
    s->a.num_heads_kv = Hkv;
    s->a.head_size = 8;
    s->a.block_size = 16;
    s->a.softmax_scale = 0.125f;   /* q.k = 8 kval: logit = kval */
    s->a.window_left = s->a.window_right = -1;
    s->a.num_splits = 1;
}

static float small_out(const small_attn *s, int t, int h, int d)
{
    return s->out[(t * s->a.num_heads_q + h) * 8 + d];
}

/* SEMANTICS section 3.2: Lq=2, Lk=5 causal: row0 sees keys 0..3, row1 0..4; Lq=5, Lk=2: rows 0..2
   empty, row3 sees key 0, row4 keys 0..1. Equal logits: out = mean of V, LSE = ln(count). */
Test(attention, bottom_right_causal_examples)
{
    static const float vv[5] = {1, 2, 3, 4, 5};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    small_setup(s, 2, 5, 1, 1, NULL, vv);
    s->a.causal = 1;
    s->a.softmax_scale = 0.0f;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(small_out(s, 0, 0, 3), 2.5f, 1e-6);
    cr_expect_float_eq(small_out(s, 1, 0, 0), 3.0f, 1e-6);
    cr_expect_float_eq(s->lse[0], logf(4.0f), 1e-6);
    cr_expect_float_eq(s->lse[1], logf(5.0f), 1e-6);

    small_setup(s, 5, 2, 1, 1, NULL, vv);
    s->a.causal = 1;
    s->a.softmax_scale = 0.0f;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_eq(small_out(s, 0, 0, 0), 0.0f);
    cr_expect_eq(small_out(s, 2, 0, 7), 0.0f);
    cr_expect(isinf(s->lse[0]) && s->lse[0] < 0, "empty row LSE must be -inf, got %g", (double)s->lse[0]);
    cr_expect(isinf(s->lse[2]) && s->lse[2] < 0);
    cr_expect_float_eq(small_out(s, 3, 0, 0), 1.0f, 1e-6);
    cr_expect_float_eq(small_out(s, 4, 0, 5), 1.5f, 1e-6);
    cr_expect_float_eq(s->lse[3], 0.0f, 1e-6);
    cr_expect_float_eq(s->lse[4], logf(2.0f), 1e-6);

    /* window (1, 0) on Lq = Lk = 5: each row sees itself and its left neighbour */
    small_setup(s, 5, 5, 1, 1, NULL, vv);
    s->a.window_left = 1;
    s->a.window_right = 0;
    s->a.softmax_scale = 0.0f;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(small_out(s, 0, 0, 0), 1.0f, 1e-6);
    cr_expect_float_eq(small_out(s, 3, 0, 0), 3.5f, 1e-6);
    /* window (0, 1) non-causal: row i sees keys i, i+1 */
    small_setup(s, 5, 5, 1, 1, NULL, vv);
    s->a.window_left = 0;
    s->a.window_right = 1;
    s->a.softmax_scale = 0.0f;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(small_out(s, 0, 0, 0), 1.5f, 1e-6);
    cr_expect_float_eq(small_out(s, 4, 0, 0), 5.0f, 1e-6);
    /* causal forces right = 0 even with a right window */
    small_setup(s, 5, 5, 1, 1, NULL, vv);
    s->a.causal = 1;
    s->a.window_left = 0;
    s->a.window_right = 3;
    s->a.softmax_scale = 0.0f;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(small_out(s, 2, 0, 0), 3.0f, 1e-6);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* GQA: query head h reads kv head h / (Hq / Hkv), not h % Hkv. */
Test(attention, gqa_contiguous_groups)
{
    static const float vv[1] = {1};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    int h;
    small_setup(s, 1, 1, 8, 2, NULL, vv);
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    for (h = 0; h < 8; ++h)
        cr_expect_float_eq(small_out(s, 0, h, 0), h < 4 ? 1.0f : 101.0f, 1e-6, "head %d", h);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* A sink: not scaled, not capped, no value row. One key with logit 0 and a sink z:
   out = v / (1 + e^z), LSE = ln(1 + e^z). A huge z must not overflow (it joins the max). */
Test(attention, sink_semantics)
{
    static const float kv[1] = {0}, vv[1] = {2};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    float z[1] = {1.5f};
    small_setup(s, 1, 1, 1, 1, kv, vv);
    s->a.sinks = z;
    s->a.softmax_scale = 100.0f;   /* would change a scaled sink */
    s->a.softcap = 0.5f;            /* would change a capped sink */
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(small_out(s, 0, 0, 0), (float)(2.0 / (1.0 + exp(1.5))), 1e-6);
    cr_expect_float_eq(s->lse[0], (float)log(1.0 + exp(1.5)), 1e-6);

    z[0] = 1000.0f;
    small_setup(s, 1, 1, 1, 1, kv, vv);
    s->a.sinks = z;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_eq(small_out(s, 0, 0, 0), 0.0f, "a huge sink takes all the weight: %g",
                 (double)small_out(s, 0, 0, 0));
    cr_expect_float_eq(s->lse[0], 1000.0f, 1e-3);

    /* empty row with a sink: out 0, LSE = z */
    z[0] = -0.25f;
    small_setup(s, 3, 1, 1, 1, kv, vv);
    s->a.sinks = z;
    s->a.causal = 1;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect_eq(small_out(s, 0, 0, 0), 0.0f);
    cr_expect_eq(s->lse[0], -0.25f);
    cr_expect_eq(s->lse[1], -0.25f);
    cr_expect_float_eq(s->lse[2], (float)log(exp(0.0) + exp(-0.25)), 1e-6);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* softcap on the scaled logit, ALiBi after it: two keys with logits a, b */
Test(attention, softcap_then_alibi)
{
    static const float kv[2] = {3.0f, -1.0f}, vv[2] = {1.0f, 5.0f};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    float slope[1] = {0.3f};
    double la, lb, wa, wb;
    small_setup(s, 1, 2, 1, 1, kv, vv);
    s->a.softcap = 2.0f;
    s->a.alibi_slopes = slope;
    cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    la = 2.0 * tanh(3.0 / 2.0) - 0.3 * 1.0;   /* key 0 is one step left of the diagonal */
    lb = 2.0 * tanh(-1.0 / 2.0);
    wa = exp(la) / (exp(la) + exp(lb));
    wb = 1.0 - wa;
    cr_expect_float_eq(small_out(s, 0, 0, 0), (float)(wa * 1.0 + wb * 5.0), 1e-6);
    cr_expect_float_eq(s->lse[0], (float)log(exp(la) + exp(lb)), 1e-6);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* num_seqs 0 and empty query segments: nothing happens, nothing is read */
Test(attention, nothing_to_do)
{
    fa_backend *be = t_backend();
    fa_attn_args a;
    memset(&a, 0, sizeof a);
    a.head_size = 64;
    a.num_heads_q = a.num_heads_kv = 1;
    a.q_dtype = a.kv_dtype = FA_DTYPE_BF16;
    cr_expect_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    fa_cpu_backend_destroy(be);
}

/* fa_attn_args.work_counters: the CPU backend neither reads nor writes them. They lie on a page
   without access here, so a read or a write of any word would kill the test (SIGSEGV); the
   results are those of a call without counters, with and without splits. */
Test(attention, work_counters_never_touched)
{
    static const float vv[5] = {1, 2, 3, 4, 5};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s), *ref = (small_attn *)t_alloc(sizeof *ref);
    static float split_out[2 * 5 * 2 * 8], split_lse[2 * 2 * 5];
    const size_t page = 1 << 16; /* a multiple of any page size in use */
    void *guard = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(guard != MAP_FAILED, "mmap of a PROT_NONE page failed");
    for (int splits = 1; splits <= 2; ++splits) {
        small_setup(ref, 5, 5, 2, 1, NULL, vv);
        ref->a.causal = 1;
        if (splits > 1) {
            ref->a.num_splits = 2;
            ref->a.split_out = split_out;
            ref->a.split_lse = split_lse;
        }
        cr_assert_eq(be->ops.attention(be->ctx, &ref->a), FA_OK, "%s", t_err(be));
        small_setup(s, 5, 5, 2, 1, NULL, vv);
        s->a.causal = 1;
        s->a.num_splits = ref->a.num_splits;
        s->a.split_out = ref->a.split_out;
        s->a.split_lse = ref->a.split_lse;
        s->a.work_counters = (int32_t *)guard;
        cr_assert_eq(be->ops.check(be->ctx, FA_OP_ATTENTION, &s->a), FA_OK, "%s", t_err(be));
        cr_assert_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
        cr_assert(!memcmp(s->out, ref->out, sizeof s->out), "splits %d: out differs with work counters",
                  splits);
        cr_assert(!memcmp(s->lse, ref->lse, sizeof s->lse), "splits %d: lse differs with work counters",
                  splits);
    }
    munmap(guard, page);
    free(s);
    free(ref);
    fa_cpu_backend_destroy(be);
}

static unsigned t_nearest_fp8(double x, fa_dtype fmt);

/* 64-bit offsets: block 70000 of an fp8 cache with 32768-byte blocks lies beyond 2^31 elements.
   Only the touched pages of the (sparse, reserved-only) mappings are ever committed. */
Test(attention, offsets_beyond_2g)
{
    enum { D = 256, HKV = 8, HQ = 8, BS = 16, T = 5, BLK = 70000 };
    const size_t blk_bytes = (size_t)BS * HKV * D, bytes = (size_t)(BLK + 1) * blk_bytes;
    fa_backend *be;
    uint8_t *kc, *vc;
    float *key, *val, *q, *out, lse[HQ];
    int64_t slots[T];
    int32_t cu[2] = {0, 1}, used[1] = {T}, bt[1] = {BLK};
    fa_cache_write_args w;
    fa_attn_args a;
    tcheck ck = {0};
    int t, h, d;

    cr_assert(BLK * (double)blk_bytes > 2147483648.0);
    kc = (uint8_t *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                         0);
    vc = (uint8_t *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                         0);
    if (kc == (uint8_t *)MAP_FAILED || vc == (uint8_t *)MAP_FAILED)
        cr_skip_test("cannot reserve 2 x %zu bytes of address space", bytes);
    be = t_backend();
    key = (float *)t_alloc(sizeof(float) * T * HKV * D);
    val = (float *)t_alloc(sizeof(float) * T * HKV * D);
    q = (float *)t_alloc(sizeof(float) * HQ * D);
    out = (float *)t_alloc(sizeof(float) * HQ * D);
    for (t = 0; t < T * HKV * D; ++t) {
        key[t] = (float)sin(0.37 * t) * 2.0f;
        val[t] = (float)cos(0.11 * t) * 3.0f;
    }
    for (t = 0; t < HQ * D; ++t) q[t] = (float)cos(0.05 * t);
    for (t = 0; t < T; ++t) slots[t] = (int64_t)BLK * BS + t;
    memset(&w, 0, sizeof w);
    w.key = key;
    w.value = val;
    w.key_token_stride = w.value_token_stride = HKV * D;
    w.kv_dtype = FA_DTYPE_F32;
    w.key_cache = kc;
    w.value_cache = vc;
    w.cache_block_stride = (int64_t)blk_bytes;
    w.cache_row_stride = HKV * D;
    w.cache_head_stride = D;
    w.cache_dtype = FA_DTYPE_FP8_E4M3;
    w.slot_mapping = slots;
    w.num_tokens = T;
    w.num_heads_kv = HKV;
    w.head_size = D;
    w.block_size = BS;
    w.num_blocks = BLK + 1;
    w.k_scale = 0.5f;
    w.v_scale = 0.25f;
    cr_assert_eq(be->ops.reshape_and_cache(be->ctx, &w), FA_OK, "%s", t_err(be));
    for (t = 0; t < T * HKV * D; ++t) {
        size_t at = (size_t)BLK * blk_bytes + (size_t)t;
        CHECK(&ck,
              kc[at] == t_nearest_fp8(key[t] / 0.5f, FA_DTYPE_FP8_E4M3) &&
                  vc[at] == t_nearest_fp8(val[t] / 0.25f, FA_DTYPE_FP8_E4M3),
              "element %d of block %d not where 64-bit offsets put it", t, BLK);
    }
    memset(&a, 0, sizeof a);
    a.q = q;
    a.q_token_stride = HQ * D;
    a.q_head_stride = D;
    a.q_dtype = FA_DTYPE_F32;
    a.k = kc;
    a.v = vc;
    a.k_block_stride = a.v_block_stride = (int64_t)blk_bytes;
    a.k_row_stride = a.v_row_stride = HKV * D;
    a.k_head_stride = a.v_head_stride = D;
    a.kv_dtype = FA_DTYPE_FP8_E4M3;
    a.out = out;
    a.out_token_stride = HQ * D;
    a.out_head_stride = D;
    a.lse = lse;
    a.lse_head_stride = 1;
    a.cu_seqlens_q = cu;
    a.seqused_k = used;
    a.block_table = bt;
    a.block_table_stride = 1;
    a.num_blocks = BLK + 1;
    a.num_seqs = 1;
    a.num_tokens = 1;
    a.max_seqlen_q = 1;
    a.max_seqlen_k = T;
    a.num_heads_q = HQ;
    a.num_heads_kv = HKV;
    a.head_size = D;
    a.block_size = BS;
    a.softmax_scale = 0.0625f;
    a.causal = 1;
    a.window_left = a.window_right = -1;
    a.k_scale = w.k_scale;
    a.v_scale = w.v_scale;
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    for (h = 0; h < HQ; ++h) {   /* the oracle on the decoded cache contents */
        double sc[T], mx = -INFINITY, den = 0.0;
        for (t = 0; t < T; ++t) {
            double dot = 0.0;
            for (d = 0; d < D; ++d)
                dot += q[h * D + d] *
                       t_dec_e4m3(kc[(size_t)BLK * blk_bytes + (size_t)(t * HKV + h) * D + d]) * 0.5;
            sc[t] = 0.0625 * dot;
            mx = fmax(mx, sc[t]);
        }
        for (t = 0; t < T; ++t) den += exp(sc[t] - mx);
        CHECK(&ck, t_lse_close(lse[h], mx + log(den)), "lse h %d: %g vs %g", h, (double)lse[h],
              mx + log(den));
        for (d = 0; d < D; ++d) {
            double o = 0.0;
            for (t = 0; t < T; ++t)
                o += exp(sc[t] - mx) / den *
                     t_dec_e4m3(vc[(size_t)BLK * blk_bytes + (size_t)(t * HKV + h) * D + d]) * 0.25;
            CHECK(&ck, t_close(out[h * D + d], o, FA_DTYPE_F32), "out h %d d %d: %g vs %g", h, d,
                  (double)out[h * D + d], o);
        }
    }
    cr_assert_eq(ck.fails, 0);
    munmap(kc, bytes);
    munmap(vc, bytes);
    free(key);
    free(val);
    free(q);
    free(out);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* reshape_and_cache */

/* nearest finite fp8 code to x by brute force (ties to even), saturating */
static unsigned t_nearest_fp8(double x, fa_dtype fmt)
{
    double maxv = fmt == FA_DTYPE_FP8_E4M3 ? 448.0 : 57344.0, best_err = INFINITY;
    unsigned c, best = 0;
    x = x > maxv ? maxv : x < -maxv ? -maxv : x;
    for (c = 0; c < 256; ++c) {
        double v = fmt == FA_DTYPE_FP8_E4M3 ? t_dec_e4m3(c) : t_dec_e5m2(c), err;
        if (isnan(v) || isinf(v) || ((c & 0x7F) == 0 && (c >> 7) != (unsigned)(x < 0))) continue;
        err = fabs(v - x);
        if (err < best_err || (err == best_err && !(c & 1))) {
            best = c;
            best_err = err;
        }
    }
    return best;
}

static int run_cache_case(fa_dtype act, fa_dtype cdt, int hnd, int bs, int D, int Hkv, int T, int stride_mult,
                          uint64_t seed)
{
    fa_backend *be = t_backend();
    trng r = {seed};
    const int NB = 7;
    const size_t ae = t_size(act), ce = t_size(cdt);
    const int64_t tok = (int64_t)stride_mult * Hkv * D;
    const int64_t blk = (int64_t)bs * Hkv * D + 24, row = hnd ? D : (int64_t)Hkv * D,
                  head = hnd ? (int64_t)bs * D : D;
    const size_t cache_bytes = (size_t)(NB * blk) * ce;
    void *key = t_alloc((size_t)(T * tok) * ae), *val = t_alloc((size_t)(T * tok) * ae);
    unsigned char *kc = (unsigned char *)t_alloc(cache_bytes), *vc = (unsigned char *)t_alloc(cache_bytes);
    unsigned char *kc0 = (unsigned char *)t_alloc(cache_bytes), *vc0 = (unsigned char *)t_alloc(cache_bytes);
    char *written = (char *)t_alloc(cache_bytes / ce);
    int64_t *slots = (int64_t *)t_alloc(sizeof(int64_t) * (size_t)T);
    int *perm = (int *)t_alloc(sizeof(int) * (size_t)(NB * bs));
    fa_cache_write_args a;
    tcheck ck = {0};
    int i, t, h, d;
    size_t e;
    const int fp8 = cdt == FA_DTYPE_FP8_E4M3 || cdt == FA_DTYPE_FP8_E5M2;
    const float ks = fp8 ? 0.37f : 1.0f, vs = fp8 ? 2.5f : 1.0f;

    for (i = 0; i < T * tok; ++i) {   /* some fp8 values beyond the max: they saturate */
        double amp = fp8 && i % 17 == 0 ? (cdt == FA_DTYPE_FP8_E4M3 ? 300.0 : 30000.0) : 3.0;
        t_put(key, i, act, tr_value(&r, amp));
        t_put(val, i, act, tr_value(&r, amp) * 2.0);
    }
    for (e = 0; e < cache_bytes; ++e) {
        kc[e] = (unsigned char)(0xA5u ^ (unsigned)e);
        vc[e] = (unsigned char)(0x5Au ^ (unsigned)e);
    }
    memcpy(kc0, kc, cache_bytes);
    memcpy(vc0, vc, cache_bytes);
    for (i = 0; i < NB * bs; ++i) perm[i] = i;
    for (i = NB * bs - 1; i > 0; --i) {
        int k = tr_int(&r, 0, i), tmp = perm[i];
        perm[i] = perm[k];
        perm[k] = tmp;
    }
    for (t = 0; t < T; ++t)   /* unique slots, some negative (skipped) */
        slots[t] = t % 5 == 3 ? -1 - t : perm[t];

    memset(&a, 0, sizeof a);
    a.key = key;
    a.value = val;
    a.key_token_stride = a.value_token_stride = tok;
    a.kv_dtype = act;
    a.key_cache = kc;
    a.value_cache = vc;
    a.cache_block_stride = blk;
    a.cache_row_stride = row;
    a.cache_head_stride = head;
    a.cache_dtype = cdt;
    a.slot_mapping = slots;
    a.num_tokens = T;
    a.num_heads_kv = Hkv;
    a.head_size = D;
    a.block_size = bs;
    a.num_blocks = NB;
    a.k_scale = ks;
    a.v_scale = vs;
    cr_assert_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_OK, "%s", t_err(be));

    for (t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        for (h = 0; h < Hkv; ++h)
            for (d = 0; d < D; ++d) {
                int64_t ci = (slots[t] / bs) * blk + (slots[t] % bs) * row + h * head + d;
                int64_t si = t * tok + (int64_t)h * D + d;
                written[ci] = 1;
                if (!fp8) {
                    CHECK(&ck,
                          !memcmp(kc + ci * ce, (char *)key + si * ae, ae) &&
                              !memcmp(vc + ci * ce, (char *)val + si * ae, ae),
                          "cache copy differs at token %d head %d d %d", t, h, d);
                } else {
                    /* the code nearest to x / scale, the division in fp32 */
                    float kq = (float)t_get(key, si, act) / ks, vq = (float)t_get(val, si, act) / vs;
                    unsigned kw = t_nearest_fp8(kq, cdt), vw = t_nearest_fp8(vq, cdt);
                    CHECK(&ck, kc[ci] == kw && vc[ci] == vw,
                          "fp8 %d: token %d head %d d %d: k 0x%02X (want 0x%02X for %g), "
                          "v 0x%02X (want 0x%02X for %g)",
                          (int)cdt, t, h, d, kc[ci], kw, (double)kq, vc[ci], vw, (double)vq);
                }
            }
    }
    for (e = 0; e < cache_bytes / ce; ++e)
        CHECK(&ck,
              written[e] ||
                  (!memcmp(kc + e * ce, kc0 + e * ce, ce) && !memcmp(vc + e * ce, vc0 + e * ce, ce)),
              "cache element %zu was written but no slot maps to it", e);
    free(key);
    free(val);
    free(kc);
    free(vc);
    free(kc0);
    free(vc0);
    free(written);
    free(slots);
    free(perm);
    fa_cpu_backend_destroy(be);
    return ck.fails;
}

Test(cache, nhd_f32) { cr_assert_eq(run_cache_case(FA_DTYPE_F32, FA_DTYPE_F32, 0, 16, 64, 8, 21, 1, 1), 0); }
Test(cache, hnd_bf16_fused_qkv_stride)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_BF16, FA_DTYPE_BF16, 1, 16, 80, 4, 21, 3, 2), 0);
}
Test(cache, hnd_f16_bs32)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_F16, FA_DTYPE_F16, 1, 32, 40, 2, 30, 2, 3), 0);
}
Test(cache, nhd_f16_d256)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_F16, FA_DTYPE_F16, 0, 16, 256, 1, 9, 1, 4), 0);
}
Test(cache, fp8_e4m3_from_bf16)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_BF16, FA_DTYPE_FP8_E4M3, 0, 16, 64, 4, 21, 3, 5), 0);
}
Test(cache, fp8_e5m2_from_f32_hnd)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_F32, FA_DTYPE_FP8_E5M2, 1, 32, 64, 2, 21, 1, 6), 0);
}
Test(cache, fp8_e4m3_from_f16_hnd)
{
    cr_assert_eq(run_cache_case(FA_DTYPE_F16, FA_DTYPE_FP8_E4M3, 1, 16, 128, 2, 12, 2, 7), 0);
}

/* written by reshape_and_cache, read back by attention: the fp8 round trip x -> x8 * scale */
Test(cache, write_then_attend_fp8)
{
    fa_backend *be = t_backend();
    enum { D = 64, T = 5 };
    float key[T * D], val[T * D], q[D], out[D], lse[1];
    uint8_t kc[16 * D], vc[16 * D];
    int64_t slots[T];
    int32_t cu[2] = {0, 1}, used[1] = {T}, bt[1] = {0};
    fa_cache_write_args w;
    fa_attn_args a;
    double s[T], mx = -INFINITY, den = 0.0, o0 = 0.0;
    int t, d;
    for (t = 0; t < T * D; ++t) {
        key[t] = (float)sin(0.37 * t) * 3.0f;
        val[t] = (float)cos(0.11 * t) * 5.0f;
    }
    for (d = 0; d < D; ++d) q[d] = (float)cos(0.5 * d);
    for (t = 0; t < T; ++t) slots[t] = t;
    memset(&w, 0, sizeof w);
    w.key = key;
    w.value = val;
    w.key_token_stride = w.value_token_stride = D;
    w.kv_dtype = FA_DTYPE_F32;
    w.key_cache = kc;
    w.value_cache = vc;
    w.cache_block_stride = 16 * D;
    w.cache_row_stride = D;
    w.cache_head_stride = D;
    w.cache_dtype = FA_DTYPE_FP8_E4M3;
    w.slot_mapping = slots;
    w.num_tokens = T;
    w.num_heads_kv = 1;
    w.head_size = D;
    w.block_size = 16;
    w.num_blocks = 1;
    w.k_scale = 0.02f;
    w.v_scale = 0.05f;
    cr_assert_eq(be->ops.reshape_and_cache(be->ctx, &w), FA_OK, "%s", t_err(be));
    memset(&a, 0, sizeof a);
    a.q = q;
    a.q_token_stride = D;
    a.q_head_stride = D;
    a.q_dtype = FA_DTYPE_F32;
    a.k = kc;
    a.v = vc;
    a.k_block_stride = a.v_block_stride = 16 * D;
    a.k_row_stride = a.v_row_stride = D;
    a.k_head_stride = a.v_head_stride = D;
    a.kv_dtype = FA_DTYPE_FP8_E4M3;
    a.out = out;
    a.out_token_stride = D;
    a.out_head_stride = D;
    a.lse = lse;
    a.lse_head_stride = 1;
    a.cu_seqlens_q = cu;
    a.seqused_k = used;
    a.block_table = bt;
    a.block_table_stride = 1;
    a.num_blocks = 1;
    a.num_seqs = 1;
    a.num_tokens = 1;
    a.max_seqlen_q = 1;
    a.max_seqlen_k = T;
    a.num_heads_q = a.num_heads_kv = 1;
    a.head_size = D;
    a.block_size = 16;
    a.softmax_scale = 0.125f;
    a.causal = 1;
    a.window_left = a.window_right = -1;
    a.k_scale = w.k_scale;
    a.v_scale = w.v_scale;
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    /* the attention on the original values, within the fp8 error (3 mantissa bits) */
    for (t = 0; t < T; ++t) {
        double dot = 0.0;
        for (d = 0; d < D; ++d) dot += (double)q[d] * key[t * D + d];
        s[t] = 0.125 * dot;
        mx = fmax(mx, s[t]);
    }
    for (t = 0; t < T; ++t) {
        den += exp(s[t] - mx);
        o0 += exp(s[t] - mx) * val[t * D];
    }
    cr_expect(fabs(out[0] - o0 / den) < 0.25, "fp8 round trip: %g vs %g", (double)out[0], o0 / den);
    cr_expect(fabs(lse[0] - (mx + log(den))) < 0.25, "fp8 round trip lse: %g vs %g", (double)lse[0],
              mx + log(den));
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* merge_states */

static void merge_setup(fa_merge_args *a, fa_dtype dt, int T, int H, int D, void *out, float *olse,
                        const void *po, const float *pl, const void *so, const float *sl)
{
    memset(a, 0, sizeof *a);
    a->out = out;
    a->out_token_stride = (int64_t)H * D;
    a->out_head_stride = D;
    a->out_lse = olse;
    a->out_lse_head_stride = T;
    a->prefix_out = po;
    a->prefix_token_stride = (int64_t)H * D;
    a->prefix_head_stride = D;
    a->prefix_lse = pl;
    a->prefix_lse_head_stride = T;
    a->suffix_out = so;
    a->suffix_token_stride = (int64_t)H * D;
    a->suffix_head_stride = D;
    a->suffix_lse = sl;
    a->suffix_lse_head_stride = T;
    a->dtype = dt;
    a->num_tokens = T;
    a->num_heads = H;
    a->head_size = D;
}

/* SEMANTICS section 4: O_p = [1,2], L_p = 0, O_s = [3,4], L_s = ln 3 -> [2.5, 3.5], ln 4 */
Test(merge, worked_example_and_empty_sides)
{
    fa_backend *be = t_backend();
    float po[8], so[8], out[8], ol[1], pl[1], sl[1];
    fa_merge_args a;
    int d;
    for (d = 0; d < 8; ++d) {
        po[d] = d % 2 ? 2.0f : 1.0f;
        so[d] = d % 2 ? 4.0f : 3.0f;
    }
    merge_setup(&a, FA_DTYPE_F32, 1, 1, 8, out, ol, po, pl, so, sl);
    pl[0] = 0.0f;
    sl[0] = logf(3.0f);
    cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(out[0], 2.5f, 1e-6);
    cr_expect_float_eq(out[1], 3.5f, 1e-6);
    cr_expect_float_eq(ol[0], logf(4.0f), 1e-6);

    /* +inf is empty (FA2's empty-row LSE): the other side wins, even over NaN garbage */
    pl[0] = INFINITY;
    sl[0] = 0.7f;
    po[0] = NAN;
    cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
    cr_expect_eq(out[0], 3.0f);
    cr_expect_eq(out[1], 4.0f);
    cr_expect_float_eq(ol[0], 0.7f, 1e-6);
    pl[0] = 0.2f;
    sl[0] = -INFINITY;
    po[0] = 1.0f;
    so[1] = NAN;
    cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
    cr_expect_eq(out[0], 1.0f);
    cr_expect_eq(out[1], 2.0f);
    cr_expect_float_eq(ol[0], 0.2f, 1e-6);

    /* both empty (any mix of +-inf): 0 and -inf, never NaN */
    {
        static const float pairs[4][2] = {{-INFINITY, -INFINITY},
                                          {INFINITY, -INFINITY},
                                          {INFINITY, INFINITY},
                                          {-INFINITY, INFINITY}};
        int k;
        for (k = 0; k < 4; ++k) {
            pl[0] = pairs[k][0];
            sl[0] = pairs[k][1];
            cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
            for (d = 0; d < 8; ++d) cr_expect_eq(out[d], 0.0f, "pair %d d %d: %g", k, d, (double)out[d]);
            cr_expect(isinf(ol[0]) && ol[0] < 0, "pair %d: lse %g", k, (double)ol[0]);
        }
    }
    /* out_lse may be NULL */
    a.out_lse = NULL;
    pl[0] = 0.0f;
    sl[0] = 0.0f;
    so[1] = 4.0f;
    cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
    cr_expect_float_eq(out[1], 3.0f, 1e-6);
    fa_cpu_backend_destroy(be);
}

static void run_merge_random(fa_dtype dt, uint64_t seed)
{
    fa_backend *be = t_backend();
    trng r = {seed};
    enum { T = 37, H = 4, D = 64 };
    const size_t es = t_size(dt), n = (size_t)T * H * D;
    void *po = t_alloc(n * es), *so = t_alloc(n * es), *out = t_alloc(n * es);
    float pl[H * T], sl[H * T], ol[H * T];
    fa_merge_args a;
    tcheck ck = {0};
    int t, h, d;
    for (t = 0; t < (int)n; ++t) {   /* some tiny values: f16 subnormals */
        double amp = t % 7 == 0 ? 1e-5 : 2.0;
        t_put(po, t, dt, tr_value(&r, 2.0) * (amp / 2.0));
        t_put(so, t, dt, tr_value(&r, 2.0) * (amp / 2.0));
    }
    for (t = 0; t < H * T; ++t) {   /* about 10% +inf on either side, never both */
        int k = tr_int(&r, 0, 19);
        pl[t] = k == 0 ? INFINITY : (float)tr_range(&r, -3.0, 3.0);
        sl[t] = k == 1 ? INFINITY : (float)tr_range(&r, -3.0, 3.0);
    }
    merge_setup(&a, dt, T, H, D, out, ol, po, pl, so, sl);
    cr_assert_eq(be->ops.merge_states(be->ctx, &a), FA_OK, "%s", t_err(be));
    for (t = 0; t < T; ++t)
        for (h = 0; h < H; ++h) {
            double p = pl[h * T + t], s = sl[h * T + t], m, wp, ws;
            if (isinf(p)) p = -INFINITY;
            if (isinf(s)) s = -INFINITY;
            m = fmax(p, s);
            wp = p == -INFINITY ? 0.0 : exp(p - m);
            ws = s == -INFINITY ? 0.0 : exp(s - m);
            CHECK(&ck,
                  t_lse_close(ol[h * T + t], m + log(wp + ws)) ||
                      fabs(ol[h * T + t] - (m + log(wp + ws))) < 1e-6,
                  "lse t %d h %d: %g vs %g", t, h, (double)ol[h * T + t], m + log(wp + ws));
            for (d = 0; d < D; ++d) {
                int64_t i = ((int64_t)t * H + h) * D + d;
                double want = (wp * t_get(po, i, dt) + ws * t_get(so, i, dt)) / (wp + ws);
                CHECK(&ck, t_close(t_get(out, i, dt), want, dt), "dtype %d t %d h %d d %d: %g vs %g", (int)dt,
                      t, h, d, t_get(out, i, dt), want);
            }
        }
    cr_assert_eq(ck.fails, 0);
    free(po);
    free(so);
    free(out);
    fa_cpu_backend_destroy(be);
}

Test(merge, random_f32) { run_merge_random(FA_DTYPE_F32, 11); }
Test(merge, random_f16) { run_merge_random(FA_DTYPE_F16, 12); }
Test(merge, random_bf16) { run_merge_random(FA_DTYPE_BF16, 13); }

/* cascade identity: attention over keys [0, P) and [P, Lk) merged == attention over all */
Test(merge, prefix_suffix_equals_full)
{
    fa_backend *be = t_backend();
    acase c = gen_case(31337, FA_DTYPE_F32);
    abuf x;
    fa_attn_args a;
    fa_merge_args m;
    int32_t pre_used[6], suf_used[6];
    float *po, *so, *full, *pl, *sl, *ml;
    size_t n;
    int b, e, nbp = 2;   /* prefix: the first two blocks of every sequence */
    tcheck ck = {0};

    c.causal = 0;
    c.wl = c.wr = -1;
    c.alibi = 0;
    c.sinks = 0;
    c.splits = 1;
    c.plan = 0;
    c.qgroup = 0;
    c.kvdt = FA_DTYPE_F32;
    for (b = 0; b < c.nseq; ++b)
        if (c.lk[b] < nbp * c.bs + 1) c.lk[b] = nbp * c.bs + 1 + b;
    ab_build(&x, &c);
    ab_args(&x, &a);
    n = (size_t)(x.T * x.out_tok);
    po = (float *)t_alloc(n * 4);
    so = (float *)t_alloc(n * 4);
    full = (float *)t_alloc(n * 4);
    pl = (float *)t_alloc(x.lse_bytes);
    sl = (float *)t_alloc(x.lse_bytes);
    ml = (float *)t_alloc(x.lse_bytes);
    a.out = full;
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    for (b = 0; b < c.nseq; ++b) {
        pre_used[b] = nbp * c.bs;
        suf_used[b] = c.lk[b] - nbp * c.bs;
    }
    a.out = po;
    a.lse = pl;
    a.seqused_k = pre_used;
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    a.out = so;
    a.lse = sl;
    a.seqused_k = suf_used;
    a.block_table = x.bt + nbp;
    cr_assert_eq(be->ops.attention(be->ctx, &a), FA_OK, "%s", t_err(be));
    merge_setup(&m, FA_DTYPE_F32, x.Tused, c.Hq, c.D, x.out, ml, po, pl, so, sl);
    m.out_token_stride = m.prefix_token_stride = m.suffix_token_stride = x.out_tok;
    m.out_lse_head_stride = m.prefix_lse_head_stride = m.suffix_lse_head_stride = x.lse_stride;
    cr_assert_eq(be->ops.merge_states(be->ctx, &m), FA_OK, "%s", t_err(be));
    for (e = 0; e < x.Tused; ++e) {
        int h, d;
        for (h = 0; h < c.Hq; ++h)
            for (d = 0; d < c.D; ++d) {
                int64_t i = e * x.out_tok + h * c.D + d;
                CHECK(&ck, fabs(((float *)x.out)[i] - full[i]) < 1e-5, "t %d h %d d %d: %g vs %g", e, h, d,
                      (double)((float *)x.out)[i], (double)full[i]);
            }
    }
    for (e = 0; e < c.Hq * x.lse_stride; ++e)
        if (e % x.lse_stride < x.Tused)
            CHECK(&ck, fabs(ml[e] - x.lse[e]) < 1e-5 * (1 + fabs(x.lse[e])), "lse %d: %g vs %g", e,
                  (double)ml[e], (double)x.lse[e]);
    cr_assert_eq(ck.fails, 0);
    free(po);
    free(so);
    free(full);
    free(pl);
    free(sl);
    free(ml);
    ab_free(&x);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* dcp_correct against brute force */

static void run_dcp_correct(fa_dtype dt, int W, uint64_t seed)
{
    fa_backend *be = t_backend();
    trng r = {seed};
    enum { T = 9, H = 4, D = 32 };
    const size_t es = t_size(dt);
    void *out = t_alloc((size_t)T * H * D * es), *orig = t_alloc((size_t)T * H * D * es);
    float *lse_all = (float *)t_alloc(sizeof(float) * (size_t)(W * H * T)), lse_out[H * T];
    fa_dcp_correct_args a;
    tcheck ck = {0};
    int rank, t, h, d, s;
    for (rank = 0; rank < W; ++rank) {
        for (t = 0; t < W * H * T; ++t) {
            int k = tr_int(&r, 0, 11);
            lse_all[t] = k == 0   ? -INFINITY
                         : k == 1 ? INFINITY
                         : k == 2 ? NAN
                                  : (float)tr_range(&r, -4.0, 6.0);
        }
        for (h = 0; h < H; ++h)   /* token 0 head h: every rank empty */
            for (s = 0; s < W; ++s) lse_all[(s * H + h) * T + 0] = s % 2 ? INFINITY : -INFINITY;
        for (t = 0; t < T * H * D; ++t) t_put(orig, t, dt, tr_value(&r, 2.0));
        for (d = 0; d < D; ++d)   /* garbage in an empty rank's row must not survive */
            t_put_nan(orig, d, dt);
        memcpy(out, orig, (size_t)T * H * D * es);
        memset(&a, 0, sizeof a);
        a.out = out;
        a.out_token_stride = H * D;
        a.out_head_stride = D;
        a.dtype = dt;
        a.lse_all = lse_all;
        a.lse_out = lse_out;
        a.world_size = W;
        a.rank = rank;
        a.num_tokens = T;
        a.num_heads = H;
        a.head_size = D;
        cr_assert_eq(be->ops.dcp_correct(be->ctx, &a), FA_OK, "%s", t_err(be));
        for (t = 0; t < T; ++t)
            for (h = 0; h < H; ++h) {
                double m = -INFINITY, sum = 0.0, L, e;
                for (s = 0; s < W; ++s) {
                    double l = lse_all[(s * H + h) * T + t];
                    if (!(l < INFINITY)) l = -INFINITY;
                    m = fmax(m, l);
                }
                if (m == -INFINITY) m = 0.0;
                for (s = 0; s < W; ++s) {
                    double l = lse_all[(s * H + h) * T + t];
                    if (l < INFINITY && l > -INFINITY) sum += exp(l - m);
                }
                L = m + log(sum);
                e = lse_all[(rank * H + h) * T + t] - L;
                if (!(e < INFINITY)) e = -INFINITY;
                CHECK(&ck, t_lse_close(lse_out[h * T + t], L) || fabs(lse_out[h * T + t] - L) < 1e-5,
                      "W %d rank %d lse_out t %d h %d: %g vs %g", W, rank, t, h, (double)lse_out[h * T + t],
                      L);
                for (d = 0; d < D; ++d) {
                    int64_t i = ((int64_t)t * H + h) * D + d;
                    double want = e == -INFINITY ? 0.0 : t_get(orig, i, dt) * exp(e);
                    CHECK(&ck,
                          t_close(t_get(out, i, dt), want, dt) ||
                              fabs(t_get(out, i, dt) - want) < 1e-5 * (1 + fabs(want)),
                          "W %d rank %d dtype %d t %d h %d d %d: %g vs %g", W, rank, (int)dt, t, h, d,
                          t_get(out, i, dt), want);
                }
            }
    }
    cr_assert_eq(ck.fails, 0);
    free(out);
    free(orig);
    free(lse_all);
    fa_cpu_backend_destroy(be);
}

Test(dcp, correct_f32_w2) { run_dcp_correct(FA_DTYPE_F32, 2, 21); }
Test(dcp, correct_f32_w4) { run_dcp_correct(FA_DTYPE_F32, 4, 22); }
Test(dcp, correct_bf16_w4) { run_dcp_correct(FA_DTYPE_BF16, 4, 23); }
Test(dcp, correct_f16_w3) { run_dcp_correct(FA_DTYPE_F16, 3, 24); }

/* ------------------------------------------------------------------------------------------ */
/* fake comm */

typedef struct comm_job {
    fa_comm *comm;
    int count;
    fa_dtype dt;
    fa_status st_ag, st_rs, st_bad;
    void *ag_recv, *rs_recv;
} comm_job;

static void *comm_rank(void *p)
{
    comm_job *j = (comm_job *)p;
    const int r = j->comm->rank, W = j->comm->world_size, n = j->count;
    const size_t es = t_size(j->dt);
    void *send = t_alloc((size_t)n * W * es);
    int i;
    for (i = 0; i < n; ++i) t_put(send, i, j->dt, 10.0 * r + i);
    j->st_ag = j->comm->all_gather(j->comm->ctx, send, j->ag_recv, (size_t)n, j->dt);
    for (i = 0; i < n * W; ++i)   /* chunk c, element e: r + 0.25 * c + e / 8 */
        t_put(send, i, j->dt, r + 0.25 * (i / n) + (double)(i % n) / 8.0);
    j->st_rs = j->comm->reduce_scatter(j->comm->ctx, send, j->rs_recv, (size_t)n, j->dt);
    /* mismatched counts: every rank fails, none hangs */
    j->st_bad = j->comm->all_gather(j->comm->ctx, send, j->ag_recv, (size_t)(r == 0 ? 1 : 2), j->dt);
    free(send);
    return NULL;
}

static void run_comm(int W, fa_dtype dt)
{
    fa_comm *comms = NULL;
    comm_job jobs[8];
    void *args[8];
    const int n = 24;
    int r, i, q;
    cr_assert_eq(fa_fake_comm_group_create(W, &comms), FA_OK);
    for (r = 0; r < W; ++r) {
        cr_expect_eq(comms[r].rank, r);
        cr_expect_eq(comms[r].world_size, W);
        cr_expect_eq(comms[r].api_version, (uint32_t)FA_BACKEND_API_VERSION);
        jobs[r].comm = &comms[r];
        jobs[r].count = n;
        jobs[r].dt = dt;
        jobs[r].ag_recv = t_alloc((size_t)n * W * t_size(dt));
        jobs[r].rs_recv = t_alloc((size_t)n * t_size(dt));
        args[r] = &jobs[r];
    }
    cr_assert_eq(fa_fake_comm_run(W, comm_rank, args), FA_OK);
    for (r = 0; r < W; ++r) {
        cr_expect_eq(jobs[r].st_ag, FA_OK);
        cr_expect_eq(jobs[r].st_rs, FA_OK);
        cr_expect_eq(jobs[r].st_bad, FA_ERR_INVALID_ARG);
        cr_expect(strstr(comms[r].last_error(comms[r].ctx), "count") != NULL, "%s",
                  comms[r].last_error(comms[r].ctx));
        for (q = 0; q < W; ++q)
            for (i = 0; i < n; ++i)
                cr_expect_eq(t_get(jobs[r].ag_recv, q * n + i, dt), 10.0 * q + i,
                             "rank %d all_gather[%d][%d]", r, q, i);
        for (i = 0; i < n; ++i) {   /* sum over ranks of chunk r: W(W-1)/2 + W (0.25 r + i/8) */
            double want = W * (W - 1) / 2.0 + W * (0.25 * r + i / 8.0);
            cr_expect(t_close(t_get(jobs[r].rs_recv, i, dt), want, dt),
                      "rank %d reduce_scatter[%d] = %g, want %g", r, i, t_get(jobs[r].rs_recv, i, dt), want);
        }
        free(jobs[r].ag_recv);
        free(jobs[r].rs_recv);
    }
    fa_fake_comm_group_destroy(comms);
}

Test(comm, two_ranks_f32) { run_comm(2, FA_DTYPE_F32); }
Test(comm, four_ranks_f32) { run_comm(4, FA_DTYPE_F32); }
Test(comm, four_ranks_bf16) { run_comm(4, FA_DTYPE_BF16); }
Test(comm, two_ranks_f16) { run_comm(2, FA_DTYPE_F16); }

Test(comm, bad_arguments)
{
    fa_comm *comms = NULL;
    cr_expect_eq(fa_fake_comm_group_create(0, &comms), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_group_create(2, NULL), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_run(0, comm_rank, NULL), FA_ERR_INVALID_ARG);
    fa_fake_comm_group_destroy(NULL);
    cr_assert_eq(fa_fake_comm_group_create(1, &comms), FA_OK);
    {   /* a group of one: all_gather copies, reduce_scatter of an unsupported dtype fails */
        float s[4] = {1, 2, 3, 4}, rv[4] = {0, 0, 0, 0};
        int32_t is[2] = {1, 2}, ir[2];
        cr_expect_eq(comms[0].all_gather(comms[0].ctx, s, rv, 4, FA_DTYPE_F32), FA_OK);
        cr_expect_eq(rv[3], 4.0f);
        cr_expect_eq(comms[0].reduce_scatter(comms[0].ctx, is, ir, 2, FA_DTYPE_I32), FA_ERR_UNSUPPORTED);
        cr_expect(strstr(comms[0].last_error(comms[0].ctx), "dtype") != NULL);
    }
    fa_fake_comm_group_destroy(comms);
}

/* One DCP step on the CPU backend + fake comm, against full attention over all keys:
   gather q along heads, attend the rank's key shard with LSE, all_gather the LSEs, correct,
   reduce_scatter along heads (SEMANTICS section 7.3). */
enum { DCP_H = 2, DCP_HKV = 2, DCP_D = 64, DCP_BS = 16, DCP_NSEQ = 3, DCP_MAXK = 200 };

typedef struct dcp_job {
    const fa_backend *be;
    fa_comm *comm;
    fa_dtype dt;
    int interleave, T;
    const int *lq, *lk;
    const float *kg, *vg;   /* global keys / values [seq][DCP_MAXK][Hkv][D] */
    const void *q_local;    /* [T][H][D] of this rank */
    void *result;           /* [T][H][D] */
    float *lse_global;      /* [N*H][T] */
    fa_status st;
    char err[256];
} dcp_job;

#define DCP_FAIL(j, expr) \
    do { \
        fa_status s_ = (expr); \
        if (s_ != FA_OK && (j)->st == FA_OK) { \
            (j)->st = s_; \
            snprintf((j)->err, sizeof(j)->err, "%s", #expr); \
        } \
    } while (0)

static void *dcp_rank(void *p)
{
    dcp_job *j = (dcp_job *)p;
    const int N = j->comm->world_size, r = j->comm->rank, T = j->T, H = DCP_H, HA = N * DCP_H;
    const size_t es = t_size(j->dt);
    const int nblk = (DCP_MAXK + DCP_BS - 1) / DCP_BS + 1;
    void *q_all = t_alloc((size_t)N * T * H * DCP_D * es);
    void *o = t_alloc((size_t)T * HA * DCP_D * es), *send = t_alloc((size_t)T * HA * DCP_D * es);
    float *l = (float *)t_alloc(sizeof(float) * (size_t)(HA * T));
    float *lse_all = (float *)t_alloc(sizeof(float) * (size_t)(N * HA * T));
    void *kc = t_alloc((size_t)DCP_NSEQ * nblk * DCP_BS * DCP_HKV * DCP_D * es);
    void *vc = t_alloc((size_t)DCP_NSEQ * nblk * DCP_BS * DCP_HKV * DCP_D * es);
    int32_t bt[DCP_NSEQ * 16], used[DCP_NSEQ], cu[DCP_NSEQ + 1];
    fa_attn_args a;
    fa_dcp_correct_args c;
    int b, pos, i, t, h, d;

    cu[0] = 0;
    for (b = 0; b < DCP_NSEQ; ++b) {   /* this rank's shard: positions with (p / I) % N == r */
        cu[b + 1] = cu[b] + j->lq[b];
        used[b] = 0;
        for (i = 0; i < nblk; ++i) bt[b * 16 + i] = (DCP_NSEQ - 1 - b) * nblk + i; /* reversed block order */
        for (pos = 0; pos < j->lk[b]; ++pos) {
            int loc;
            if ((pos / j->interleave) % N != r) continue;
            loc = used[b]++;
            for (h = 0; h < DCP_HKV; ++h)
                for (d = 0; d < DCP_D; ++d) {
                    int64_t ci =
                        ((int64_t)bt[b * 16 + loc / DCP_BS] * DCP_BS + loc % DCP_BS) * DCP_HKV * DCP_D +
                        h * DCP_D + d;
                    int64_t gi = (((int64_t)b * DCP_MAXK + pos) * DCP_HKV + h) * DCP_D + d;
                    t_put(kc, ci, j->dt, j->kg[gi]);
                    t_put(vc, ci, j->dt, j->vg[gi]);
                }
        }
    }
    j->st = FA_OK;
    DCP_FAIL(j, j->comm->all_gather(j->comm->ctx, j->q_local, q_all, (size_t)T * H * DCP_D, j->dt));
    memset(&a, 0, sizeof a);
    a.q = q_all; /* [N][T][H][D] seen as [T][N*H][D] through the head groups */
    a.q_head_group = H;
    a.q_group_stride = (int64_t)T * H * DCP_D;
    a.q_token_stride = (int64_t)H * DCP_D;
    a.q_head_stride = DCP_D;
    a.q_dtype = j->dt;
    a.k = kc;
    a.v = vc;
    a.k_block_stride = a.v_block_stride = (int64_t)DCP_BS * DCP_HKV * DCP_D;
    a.k_row_stride = a.v_row_stride = (int64_t)DCP_HKV * DCP_D;
    a.k_head_stride = a.v_head_stride = DCP_D;
    a.kv_dtype = j->dt;
    a.out = o;
    a.out_token_stride = (int64_t)HA * DCP_D;
    a.out_head_stride = DCP_D;
    a.lse = l;
    a.lse_head_stride = T;
    a.cu_seqlens_q = cu;
    a.seqused_k = used;
    a.block_table = bt;
    a.block_table_stride = 16;
    a.num_blocks = (int64_t)DCP_NSEQ * nblk;
    a.num_seqs = DCP_NSEQ;
    a.num_tokens = T;
    a.max_seqlen_q = T;
    a.max_seqlen_k = DCP_MAXK;
    a.num_heads_q = HA;
    a.num_heads_kv = DCP_HKV;
    a.head_size = DCP_D;
    a.block_size = DCP_BS;
    a.softmax_scale = 0.125f;
    a.window_left = a.window_right = -1;
    a.num_splits = 1;
    DCP_FAIL(j, j->be->ops.attention(j->be->ctx, &a));
    DCP_FAIL(j, j->comm->all_gather(j->comm->ctx, l, lse_all, (size_t)HA * T, FA_DTYPE_F32));
    memset(&c, 0, sizeof c);
    c.out = o;
    c.out_token_stride = (int64_t)HA * DCP_D;
    c.out_head_stride = DCP_D;
    c.dtype = j->dt;
    c.lse_all = lse_all;
    c.lse_out = j->lse_global;
    c.world_size = N;
    c.rank = r;
    c.num_tokens = T;
    c.num_heads = HA;
    c.head_size = DCP_D;
    DCP_FAIL(j, j->be->ops.dcp_correct(j->be->ctx, &c));
    for (i = 0; i < N; ++i) /* [T][N*H][D] -> chunks [N][T][H][D] */
        for (t = 0; t < T; ++t)
            for (h = 0; h < H; ++h)
                memcpy((char *)send + ((((size_t)i * T + t) * H + h) * DCP_D) * es,
                       (char *)o + (((size_t)t * HA + i * H + h) * DCP_D) * es, DCP_D * es);
    DCP_FAIL(j, j->comm->reduce_scatter(j->comm->ctx, send, j->result, (size_t)T * H * DCP_D, j->dt));
    free(q_all);
    free(o);
    free(send);
    free(l);
    free(lse_all);
    free(kc);
    free(vc);
    return NULL;
}

static void run_dcp_step(int N, int interleave, fa_dtype dt)
{
    static const int lq[DCP_NSEQ] = {1, 4, 1}, lk[DCP_NSEQ] = {37, 150, 64};
    fa_backend *be = t_backend();
    fa_comm *comms = NULL;
    trng r = {(uint64_t)(N * 100 + interleave)};
    const int T = 6, HA = N * DCP_H;
    const size_t es = t_size(dt);
    float *kg = (float *)t_alloc(sizeof(float) * DCP_NSEQ * DCP_MAXK * DCP_HKV * DCP_D);
    float *vg = (float *)t_alloc(sizeof(float) * DCP_NSEQ * DCP_MAXK * DCP_HKV * DCP_D);
    dcp_job jobs[4];
    void *args[4];
    tcheck ck = {0};
    int i, rank, b, t, h, d, pos;

    for (i = 0; i < DCP_NSEQ * DCP_MAXK * DCP_HKV * DCP_D; ++i) { /* representable in dt */
        kg[i] = (float)t_round(dt, tr_value(&r, 1.5));
        vg[i] = (float)t_round(dt, tr_value(&r, 1.5));
    }
    cr_assert_eq(fa_fake_comm_group_create(N, &comms), FA_OK);
    for (rank = 0; rank < N; ++rank) {
        memset(&jobs[rank], 0, sizeof jobs[rank]);
        jobs[rank].be = be;
        jobs[rank].comm = &comms[rank];
        jobs[rank].dt = dt;
        jobs[rank].interleave = interleave;
        jobs[rank].T = T;
        jobs[rank].lq = lq;
        jobs[rank].lk = lk;
        jobs[rank].kg = kg;
        jobs[rank].vg = vg;
        jobs[rank].q_local = t_alloc((size_t)T * DCP_H * DCP_D * es);
        for (i = 0; i < T * DCP_H * DCP_D; ++i) t_put((void *)jobs[rank].q_local, i, dt, tr_value(&r, 1.5));
        jobs[rank].result = t_alloc((size_t)T * DCP_H * DCP_D * es);
        jobs[rank].lse_global = (float *)t_alloc(sizeof(float) * (size_t)(HA * T));
        args[rank] = &jobs[rank];
    }
    cr_assert_eq(fa_fake_comm_run(N, dcp_rank, args), FA_OK);
    for (rank = 0; rank < N; ++rank) {
        cr_assert_eq(jobs[rank].st, FA_OK, "rank %d: %s", rank, jobs[rank].err);
        for (b = 0, t = 0; b < DCP_NSEQ; ++b)
            for (i = 0; i < lq[b]; ++i, ++t)
                for (h = 0; h < DCP_H; ++h) { /* full attention over all lk[b] keys */
                    const int g = h * DCP_HKV / DCP_H; /* each rank's heads over the replicated KV heads */
                    double s[DCP_MAXK], mx = -INFINITY, den = 0.0, o[DCP_D], L;
                    for (pos = 0; pos < lk[b]; ++pos) {
                        double dot = 0.0;
                        for (d = 0; d < DCP_D; ++d)
                            dot += t_get(jobs[rank].q_local, ((int64_t)t * DCP_H + h) * DCP_D + d, dt) *
                                   kg[(((int64_t)b * DCP_MAXK + pos) * DCP_HKV + g) * DCP_D + d];
                        s[pos] = 0.125 * dot;
                        mx = fmax(mx, s[pos]);
                    }
                    for (d = 0; d < DCP_D; ++d) o[d] = 0.0;
                    for (pos = 0; pos < lk[b]; ++pos) {
                        double w = exp(s[pos] - mx);
                        den += w;
                        for (d = 0; d < DCP_D; ++d)
                            o[d] += w * vg[(((int64_t)b * DCP_MAXK + pos) * DCP_HKV + g) * DCP_D + d];
                    }
                    L = mx + log(den);
                    CHECK(&ck,
                          fabs(jobs[rank].lse_global[(rank * DCP_H + h) * T + t] - L) < 1e-4 * (1 + fabs(L)),
                          "N %d I %d rank %d t %d h %d: lse %g vs %g", N, interleave, rank, t, h,
                          (double)jobs[rank].lse_global[(rank * DCP_H + h) * T + t], L);
                    for (d = 0; d < DCP_D; ++d) {
                        double got = t_get(jobs[rank].result, ((int64_t)t * DCP_H + h) * DCP_D + d, dt);
                        double tol = dt == FA_DTYPE_F32 ? 1e-5 : 3e-2;
                        CHECK(&ck, fabs(got - o[d] / den) < tol, "N %d I %d rank %d t %d h %d d %d: %g vs %g",
                              N, interleave, rank, t, h, d, got, o[d] / den);
                    }
                }
        free((void *)jobs[rank].q_local);
        free(jobs[rank].result);
        free(jobs[rank].lse_global);
    }
    cr_assert_eq(ck.fails, 0);
    fa_fake_comm_group_destroy(comms);
    free(kg);
    free(vg);
    fa_cpu_backend_destroy(be);
}

Test(comm, dcp_step_2_ranks_f32) { run_dcp_step(2, 1, FA_DTYPE_F32); }
Test(comm, dcp_step_4_ranks_f32_interleave16) { run_dcp_step(4, 16, FA_DTYPE_F32); }
Test(comm, dcp_step_4_ranks_bf16) { run_dcp_step(4, 4, FA_DTYPE_BF16); }

/* ------------------------------------------------------------------------------------------ */
/* errors: status + a message naming the argument and value, nothing written */

static void expect_attn_error(fa_attn_args *a, small_attn *s, fa_status want, const char *w1, const char *w2)
{
    fa_backend *be = t_backend();
    float before[sizeof s->out / sizeof(float)], lbefore[sizeof s->lse / sizeof(float)];
    fa_status st;
    const char *msg;
    memcpy(before, s->out, sizeof s->out);
    memcpy(lbefore, s->lse, sizeof s->lse);
    st = be->ops.attention(be->ctx, a);
    msg = t_err(be);
    cr_expect_eq(st, want, "status %d, want %d (%s)", (int)st, (int)want, msg);
    cr_expect(strstr(msg, w1) != NULL, "message '%s' does not name '%s'", msg, w1);
    if (w2) cr_expect(strstr(msg, w2) != NULL, "message '%s' does not name '%s'", msg, w2);
    cr_expect(!memcmp(before, s->out, sizeof s->out), "out was written on error");
    cr_expect(!memcmp(lbefore, s->lse, sizeof s->lse), "lse was written on error");
    fa_cpu_backend_destroy(be);
}

Test(errors, attention_arguments)
{
    static const float vv[3] = {1, 2, 3};
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    int32_t cuk[2] = {0, 3}, plan[2] = {3, 5};
    float split[1024], slse[64];
    char num[64];

#define FRESH() small_setup(s, 2, 3, 2, 1, NULL, vv)
    FRESH();
    s->a.head_size = 100;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "head_size", "100");
    FRESH();
    s->a.head_size = 264;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "head_size", "264");
    FRESH();
    s->a.q = NULL;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "q is NULL", NULL);
    FRESH();
    s->a.out = NULL;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "out is NULL", NULL);
    FRESH();
    s->a.block_table = NULL;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table", NULL);
    FRESH();
    s->a.q_dtype = (fa_dtype)99;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "q_dtype", "99");
    FRESH();
    s->a.kv_dtype = FA_DTYPE_F16;
    snprintf(num, sizeof num, "kv_dtype %d", (int)FA_DTYPE_F16);
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, num, NULL);
    FRESH();
    s->a.num_heads_q = 3;
    s->a.num_heads_kv = 2;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "num_heads_q 3", "num_heads_kv 2");
    FRESH();
    s->a.num_heads_kv = 0;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "num_heads_kv", "0");
    FRESH();
    s->a.cu_seqlens_k = cuk;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "seqused_k", "cu_seqlens_k");
    FRESH();
    s->a.seqused_k = NULL;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "seqused_k", "cu_seqlens_k");
    FRESH();
    s->a.seqused_k = NULL;
    s->a.cu_seqlens_k = cuk;
    s->a.num_keys = -3;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "num_keys -3", "dense");
    FRESH();
    s->a.softcap = -1.0f;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "softcap", "-1");
    FRESH();
    s->a.softmax_scale = NAN;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "softmax_scale", NULL);
    FRESH();
    s->a.softmax_scale = -INFINITY;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "softmax_scale", "inf");
    FRESH();
    s->a.softcap = INFINITY;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "softcap", "inf");
    FRESH();
    s->a.kv_dtype = FA_DTYPE_FP8_E5M2;
    s->a.k_scale = 1.0f;
    s->a.v_scale = NAN;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "v_scale", "nan");
    FRESH();
    s->a.num_splits = 3;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "split_out", "3");
    FRESH();
    s->a.num_splits = 3;
    s->a.split_out = split;
    s->a.split_lse = slse;
    s->a.split_plan = plan;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "split_plan", "5");
    FRESH();
    s->bt[0] = -4;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table", "-4");
    FRESH();
    s->cu_q[1] = 9;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "cu_seqlens_q", "9");
    FRESH();
    s->used[0] = -1;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "seqused_k", "-1");
    FRESH();
    s->a.kv_dtype = FA_DTYPE_FP8_E4M3;
    s->a.k_scale = 0.0f;
    s->a.v_scale = 1.0f;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "k_scale", "0");
    FRESH();
    s->a.block_size = 0;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_size", "0");
    FRESH();
    s->a.q_head_group = -2;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "q_head_group", "-2");
    FRESH();
    s->a.work_counters = (int32_t *)((char *)split + 2); /* int32 words must be 4-byte aligned */
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "work_counters", "aligned");
#undef FRESH
    {
        fa_backend *be = t_backend();
        cr_expect_eq(be->ops.attention(be->ctx, NULL), FA_ERR_INVALID_ARG);
        cr_expect(strstr(t_err(be), "NULL") != NULL);
        fa_cpu_backend_destroy(be);
    }
    free(s);
}

/* fa_bu_check_attention (every backend's structural check): work_counters NULL or 4-byte
   aligned; a misaligned pointer is named with its value, also for an empty call */
Test(errors, work_counters_alignment)
{
    static const float vv[3] = {1, 2, 3};
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    int32_t words[FA_WORK_COUNTERS + 1] = {0};
    char buf[256], ptr[64];
    const fa_bu_err e = fa_bu_err_make(buf, sizeof buf, "test attention");
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    buf[0] = 0;
    cr_expect_eq(fa_bu_check_attention(&e, &s->a, 1), FA_OK, "NULL: %s", buf);
    s->a.work_counters = words;
    cr_expect_eq(fa_bu_check_attention(&e, &s->a, 1), FA_OK, "aligned: %s", buf);
    for (int off = 1; off < 4; ++off) {
        int32_t *bad = (int32_t *)((char *)words + off);
        s->a.work_counters = bad;
        snprintf(ptr, sizeof ptr, "%p", (void *)bad);
        buf[0] = 0;
        cr_expect_eq(fa_bu_check_attention(&e, &s->a, 1), FA_ERR_INVALID_ARG, "offset %d accepted", off);
        cr_expect(strstr(buf, "work_counters") != NULL, "message '%s' does not name work_counters", buf);
        cr_expect(strstr(buf, ptr) != NULL, "message '%s' does not give the pointer %s", buf, ptr);
        cr_expect(strstr(buf, "aligned") != NULL, "message '%s' does not say why", buf);
    }
    s->a.num_tokens = 0; /* an empty call: still checked */
    cr_expect_eq(fa_bu_check_attention(&e, &s->a, 1), FA_ERR_INVALID_ARG);
    free(s);
}

Test(errors, cache_write_arguments)
{
    fa_backend *be = t_backend();
    float key[64], val[64], kc[16 * 64], vc[16 * 64], kc0[16 * 64];
    int64_t slot[1] = {3};
    char num[64];
    fa_cache_write_args a, base;
    int i;
    for (i = 0; i < 64; ++i) key[i] = val[i] = 1.0f + (float)i;
    for (i = 0; i < 16 * 64; ++i) kc[i] = vc[i] = kc0[i] = -3.0f;
    memset(&base, 0, sizeof base);
    base.key = key;
    base.value = val;
    base.key_token_stride = base.value_token_stride = 64;
    base.kv_dtype = FA_DTYPE_F32;
    base.key_cache = kc;
    base.value_cache = vc;
    base.cache_block_stride = 16 * 64;
    base.cache_row_stride = 64;
    base.cache_head_stride = 64;
    base.cache_dtype = FA_DTYPE_F32;
    base.slot_mapping = slot;
    base.num_tokens = 1;
    base.num_heads_kv = 1;
    base.head_size = 64;
    base.block_size = 16;
    base.num_blocks = 1;

    a = base;
    a.head_size = 100;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "head_size 100") != NULL, "%s", t_err(be));
    a = base;
    a.cache_dtype = FA_DTYPE_I32;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_UNSUPPORTED);
    snprintf(num, sizeof num, "cache_dtype %d", (int)FA_DTYPE_I32);
    cr_expect(strstr(t_err(be), num) != NULL, "%s", t_err(be));
    a = base;
    a.kv_dtype = FA_DTYPE_FP8_E4M3;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    snprintf(num, sizeof num, "kv_dtype %d", (int)FA_DTYPE_FP8_E4M3);
    cr_expect(strstr(t_err(be), num) != NULL, "%s", t_err(be));
    a = base;
    a.slot_mapping = NULL;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "slot_mapping") != NULL, "%s", t_err(be));
    a = base;
    a.cache_dtype = FA_DTYPE_FP8_E5M2;
    a.k_scale = 1.0f;
    a.v_scale = -1.0f;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "v_scale -1") != NULL, "%s", t_err(be));
    a = base;
    a.block_size = -16;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "block_size -16") != NULL, "%s", t_err(be));
    a = base;
    a.num_tokens = 2;
    a.key_token_stride = 32;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "key_token_stride 32") != NULL, "%s", t_err(be));
    cr_expect(!memcmp(kc, kc0, sizeof kc) && !memcmp(vc, kc0, sizeof vc), "cache written on error");
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, NULL), FA_ERR_INVALID_ARG);
    /* the valid call works */
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &base), FA_OK, "%s", t_err(be));
    cr_expect_eq(kc[3 * 64 + 5], 6.0f);
    fa_cpu_backend_destroy(be);
}

Test(errors, merge_dcp_memory_arguments)
{
    fa_backend *be = t_backend();
    float o[64], p[64], s[64], pl[1] = {0}, sl[1] = {0}, lall[2] = {0, 0}, o0[64];
    fa_merge_args m;
    fa_dcp_correct_args c;
    void *ptr = NULL;
    char num[64];
    int i;
    for (i = 0; i < 64; ++i) o[i] = o0[i] = p[i] = s[i] = 0.5f;
    merge_setup(&m, (fa_dtype)42, 1, 1, 64, o, NULL, p, pl, s, sl);
    cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "dtype 42") != NULL, "%s", t_err(be));
    merge_setup(&m, FA_DTYPE_F32, 1, 1, 64, o, NULL, p, NULL, s, sl);
    cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "prefix_lse") != NULL, "%s", t_err(be));
    merge_setup(&m, FA_DTYPE_F32, 1, 1, 12, o, NULL, p, pl, s, sl);
    cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "head_size 12") != NULL, "%s", t_err(be));

    memset(&c, 0, sizeof c);
    c.out = o;
    c.out_token_stride = 64;
    c.out_head_stride = 64;
    c.dtype = FA_DTYPE_F32;
    c.lse_all = lall;
    c.world_size = 2;
    c.rank = 2;
    c.num_tokens = 1;
    c.num_heads = 1;
    c.head_size = 64;
    cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "rank 2") != NULL, "%s", t_err(be));
    c.rank = 0;
    c.world_size = 0;
    cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "world_size 0") != NULL, "%s", t_err(be));
    c.world_size = 2;
    c.lse_all = NULL;
    cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "lse_all") != NULL, "%s", t_err(be));
    c.lse_all = lall;
    c.dtype = FA_DTYPE_FP8_E4M3;
    cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_ERR_INVALID_ARG);
    snprintf(num, sizeof num, "dtype %d", (int)FA_DTYPE_FP8_E4M3);
    cr_expect(strstr(t_err(be), num) != NULL, "%s", t_err(be));
    cr_expect(!memcmp(o, o0, sizeof o), "out written on error");

    cr_expect_eq(be->ops.copy(be->ctx, NULL, o, 4, FA_COPY_HOST_TO_DEVICE), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "dst") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.copy(be->ctx, p, o, 4, (fa_copy_kind)7), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "kind 7") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.fill(be->ctx, o, 8, 0, 16, 2), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "pitch 8") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.copy_2d(be->ctx, o, 64, p, 12, 16, 2, FA_COPY_DEVICE_TO_DEVICE), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "spitch 12") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.copy_2d(be->ctx, o, 64, NULL, 64, 16, 2, FA_COPY_DEVICE_TO_DEVICE),
                 FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "src") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.copy_2d(be->ctx, o, 64, p, 64, 16, 2, (fa_copy_kind)-1), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "kind -1") != NULL, "%s", t_err(be));
    cr_expect_eq(be->ops.alloc(be->ctx, 16, NULL), FA_ERR_INVALID_ARG);
    cr_expect_eq(be->ops.alloc(be->ctx, (size_t)-1, &ptr), FA_ERR_OUT_OF_MEMORY);
    cr_expect(ptr == NULL);
    cr_expect_eq(fa_cpu_backend_create(NULL), FA_ERR_INVALID_ARG);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* backend basics */

Test(backend, vtable_and_memory_ops)
{
    fa_backend *be = t_backend();
    unsigned char *p = NULL, src[100], dst[100];
    int i;
    cr_expect_eq(be->api_version, (uint32_t)FA_BACKEND_API_VERSION);
    cr_expect_str_eq(be->name, "cpu");
    cr_expect_str_eq(be->info.name, "cpu");
    cr_expect_eq(be->info.cc_major, 0);
    cr_expect_eq(be->info.cc_minor, 0);
    cr_expect_eq(be->info.num_sms, 132);
    cr_expect_eq(be->info.smem_per_block, 0);
    cr_expect(be->ops.reshape_and_cache && be->ops.attention && be->ops.merge_states && be->ops.dcp_correct &&
              be->ops.copy && be->ops.fill && be->ops.alloc && be->ops.free && be->ops.synchronize &&
              be->ops.last_error && be->ops.copy_2d);
    cr_expect_str_eq(t_err(be), "");
    cr_assert_eq(be->ops.alloc(be->ctx, 1000, (void **)&p), FA_OK);
    cr_expect((uintptr_t)p % 256 == 0, "alloc is not 256-byte aligned: %p", (void *)p);
    for (i = 0; i < 1000; ++i) cr_expect_eq(p[i], 0);
    for (i = 0; i < 100; ++i) src[i] = (unsigned char)i;
    cr_expect_eq(be->ops.copy(be->ctx, p, src, 100, FA_COPY_HOST_TO_DEVICE), FA_OK);
    cr_expect_eq(be->ops.copy(be->ctx, p + 100, p, 100, FA_COPY_DEVICE_TO_DEVICE), FA_OK);
    cr_expect_eq(be->ops.copy(be->ctx, dst, p + 100, 100, FA_COPY_DEVICE_TO_HOST), FA_OK);
    cr_expect(!memcmp(src, dst, 100));
    cr_expect_eq(be->ops.copy(be->ctx, NULL, NULL, 0, FA_COPY_HOST_TO_DEVICE), FA_OK);
    /* fill: 3 rows of 5 bytes with pitch 8 */
    memset(p, 0x11, 64);
    cr_expect_eq(be->ops.fill(be->ctx, p, 8, 0xAB, 5, 3), FA_OK);
    for (i = 0; i < 64; ++i) cr_expect_eq(p[i], (i < 24 && i % 8 < 5) ? 0xAB : 0x11, "fill byte %d", i);
    /* copy_2d: 4 rows of 3 bytes, source pitch 10, destination pitch 5 */
    memset(dst, 0xEE, sizeof dst);
    cr_expect_eq(be->ops.copy_2d(be->ctx, dst, 5, src, 10, 3, 4, FA_COPY_HOST_TO_DEVICE), FA_OK);
    for (i = 0; i < 25; ++i)
        cr_expect_eq(dst[i], (i < 20 && i % 5 < 3) ? (unsigned char)((i / 5) * 10 + i % 5) : 0xEE,
                     "copy_2d byte %d", i);
    cr_expect_eq(be->ops.copy_2d(be->ctx, NULL, 0, NULL, 0, 0, 9, FA_COPY_HOST_TO_DEVICE), FA_OK);
    cr_expect_eq(be->ops.synchronize(be->ctx), FA_OK);
    cr_expect_eq(be->ops.free(be->ctx, p), FA_OK);
    cr_expect_eq(be->ops.free(be->ctx, NULL), FA_OK);
    cr_assert_eq(be->ops.alloc(be->ctx, 0, (void **)&p), FA_OK);
    cr_expect_eq(be->ops.free(be->ctx, p), FA_OK);
    fa_cpu_backend_destroy(be);
    fa_cpu_backend_destroy(NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* backend API v2: the capability block */

Test(backend, caps_block)
{
    static const int32_t dims[6] = {32, 64, 96, 128, 192, 256};
    fa_backend *be = t_backend();
    const fa_backend_caps *c = &be->caps;
    int i;
    cr_assert_eq(c->num_dims, 6);
    for (i = 0; i < 6; ++i) {
        const fa_kernel_dim *k = &c->dims[i];
        const int hd = dims[i];
        const double f = hd <= 64 ? 0.8 : hd <= 128 ? 1.0 : 1.3;
        cr_expect_eq(k->head_dim, hd);
        cr_expect_eq(k->prefill_tile_m, hd <= 128 ? 128 : 64, "head_dim %d", hd);
        cr_expect_eq(k->prefill_tile_n, hd <= 128 ? 128 : 64, "head_dim %d", hd);
        cr_expect_eq(k->decode_tile_n, 32, "head_dim %d", hd);
        cr_expect_eq(k->decode_ctas_per_sm, hd <= 128 ? 6 : 3, "head_dim %d", hd);
        cr_expect(fabs((double)k->decode_step_us - 1.6 * f) < 1e-6, "head_dim %d: %g", hd,
                  (double)k->decode_step_us);
    }
    cr_expect_eq(c->act_dtypes, (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_F32));
    cr_expect_eq(c->cache_dtypes, (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_F32) |
                                      (1u << FA_DTYPE_FP8_E4M3) | (1u << FA_DTYPE_FP8_E5M2));
    cr_expect_eq(c->block_size_multiple, 1);
    cr_expect_eq(c->head_size_multiple, 8);
    cr_expect_eq(c->decode_max_rows, 16);
    cr_expect_eq(c->max_splits, 128);
    cr_expect_eq(c->align_bytes, 1);
    cr_expect_eq(c->sm_bytes_per_us, 32768.0f);
    cr_expect(fabs((double)c->cta_us - 0.008) < 1e-9);
    cr_expect_eq(c->combine_us, 6.0f);
    cr_expect(fabs((double)c->combine_us_per_split - 0.2) < 1e-7);
    cr_expect(be->ops.check != NULL);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* ops.check: the op's own checks, without running it */

/* check(op, args) and then the op itself: the same status and the same message, and a failing
   call (either) writes nothing to [buf, buf + n). Returns the status. */
static fa_status check_then_op(fa_backend *be, fa_op op, const void *args, const void *buf, size_t n)
{
    unsigned char *before = (unsigned char *)t_alloc(n);
    char msg[512];
    fa_status sc, so;
    memcpy(before, buf, n);
    sc = be->ops.check(be->ctx, op, args);
    snprintf(msg, sizeof msg, "%s", t_err(be));
    cr_expect(!memcmp(before, buf, n), "check wrote to the output");
    switch (op) {
    case FA_OP_RESHAPE_AND_CACHE:
        so = be->ops.reshape_and_cache(be->ctx, (const fa_cache_write_args *)args);
        break;
    case FA_OP_ATTENTION: so = be->ops.attention(be->ctx, (const fa_attn_args *)args); break;
    case FA_OP_MERGE_STATES: so = be->ops.merge_states(be->ctx, (const fa_merge_args *)args); break;
    default: so = be->ops.dcp_correct(be->ctx, (const fa_dcp_correct_args *)args); break;
    }
    cr_expect_eq(sc, so, "op %d: check says %d (%s), the op %d (%s)", (int)op, (int)sc, msg, (int)so,
                 t_err(be));
    if (sc != FA_OK) {
        static const char *prefix[4] = {"cpu reshape_and_cache: ", "cpu attention: ", "cpu merge_states: ",
                                        "cpu dcp_correct: "};
        cr_expect_str_eq(msg, t_err(be), "op %d: check and op disagree", (int)op);
        cr_expect(strncmp(msg, prefix[op], strlen(prefix[op])) == 0, "message '%s' does not start with '%s'",
                  msg, prefix[op]);
        cr_expect(!memcmp(before, buf, n), "op %d wrote to the output on error: %s", (int)op, msg);
    }
    free(before);
    return sc;
}

/* a one-token cache write of [1 head, D 8] f32 into a cache of nb blocks of 16 slots */
typedef struct cw {
    float key[4 * 8], val[4 * 8];
    float *kc, *vc;
    int64_t slot[4];
    fa_cache_write_args a;
} cw;

static void cw_setup(cw *w, int64_t nb)
{
    int i;
    memset(w, 0, sizeof *w);
    for (i = 0; i < 4 * 8; ++i) w->key[i] = w->val[i] = 1.0f + (float)i;
    w->kc = (float *)t_alloc(sizeof(float) * (size_t)(2 * nb * 16 * 8));
    w->vc = w->kc + nb * 16 * 8;
    for (i = 0; i < 4; ++i) w->slot[i] = 3 + 20 * i;
    w->a.key = w->key;
    w->a.value = w->val;
    w->a.key_token_stride = w->a.value_token_stride = 8;
    w->a.kv_dtype = FA_DTYPE_F32;
    w->a.key_cache = w->kc;
    w->a.value_cache = w->vc;
    w->a.cache_block_stride = 16 * 8;
    w->a.cache_row_stride = 8;
    w->a.cache_head_stride = 8;
    w->a.cache_dtype = FA_DTYPE_F32;
    w->a.slot_mapping = w->slot;
    w->a.num_blocks = nb;
    w->a.num_tokens = 4;
    w->a.num_heads_kv = 1;
    w->a.head_size = 8;
    w->a.block_size = 16;
}

Test(backend, check_agrees_with_ops)
{
    fa_backend *be = t_backend();
    static const float vv[3] = {1, 2, 3};
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    cw w;
    fa_cache_write_args ca;
    fa_merge_args m;
    fa_dcp_correct_args c;
    float o[64], p[64], sx[64], pl[1] = {0}, sl[1] = {0}, lall[2] = {0, 0};
    int i;

    /* reshape_and_cache: bad ones, then the good one */
    cw_setup(&w, 64);
    ca = w.a;
    ca.head_size = 12;
    cr_expect_eq(check_then_op(be, FA_OP_RESHAPE_AND_CACHE, &ca, w.kc, sizeof(float) * 2 * 64 * 128),
                 FA_ERR_INVALID_ARG);
    ca = w.a;
    ca.cache_dtype = FA_DTYPE_I32;
    cr_expect_eq(check_then_op(be, FA_OP_RESHAPE_AND_CACHE, &ca, w.kc, sizeof(float) * 2 * 64 * 128),
                 FA_ERR_UNSUPPORTED);
    ca = w.a;
    ca.slot_mapping = NULL;
    cr_expect_eq(check_then_op(be, FA_OP_RESHAPE_AND_CACHE, &ca, w.kc, sizeof(float) * 2 * 64 * 128),
                 FA_ERR_INVALID_ARG);
    ca = w.a;
    w.slot[2] = 64 * 16;
    cr_expect_eq(check_then_op(be, FA_OP_RESHAPE_AND_CACHE, &ca, w.kc, sizeof(float) * 2 * 64 * 128),
                 FA_ERR_INVALID_ARG);
    w.slot[2] = 43;
    cr_expect_eq(check_then_op(be, FA_OP_RESHAPE_AND_CACHE, NULL, w.kc, 4), FA_ERR_INVALID_ARG);
    cr_expect_eq(be->ops.check(be->ctx, FA_OP_RESHAPE_AND_CACHE, &w.a), FA_OK, "%s", t_err(be));
    for (i = 0; i < 2 * 64 * 128; ++i) cr_assert_eq(w.kc[i], 0.0f, "check wrote the cache");
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_OK, "%s", t_err(be));
    cr_expect_eq(w.kc[3 * 8 + 5], 6.0f);

    /* attention */
#define ATT(mod, want) \
    do { \
        small_setup(s, 2, 3, 2, 1, NULL, vv); \
        s->a.num_blocks = 4; \
        mod; \
        cr_expect_eq(check_then_op(be, FA_OP_ATTENTION, &s->a, s->out, sizeof s->out), want, "%s", #mod); \
    } while (0)
    ATT(s->a.head_size = 100, FA_ERR_INVALID_ARG);
    ATT(s->a.q = NULL, FA_ERR_INVALID_ARG);
    ATT(s->a.kv_dtype = FA_DTYPE_F16, FA_ERR_INVALID_ARG);
    ATT(s->bt[0] = -4, FA_ERR_INVALID_ARG);
    ATT(s->bt[0] = 4, FA_ERR_INVALID_ARG);
    ATT(s->used[0] = -1, FA_ERR_INVALID_ARG);
    ATT(s->cu_q[1] = 9, FA_ERR_INVALID_ARG);
    ATT(s->a.num_blocks = -1, FA_ERR_INVALID_ARG);
    ATT(s->a.num_splits = 3, FA_ERR_INVALID_ARG);
    ATT((void)0, FA_OK);
#undef ATT
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    cr_expect_eq(be->ops.check(be->ctx, FA_OP_ATTENTION, &s->a), FA_OK, "%s", t_err(be));
    for (i = 0; i < 2 * 2 * 8; ++i) cr_expect_eq(s->out[i], -7.0f, "check wrote out[%d]", i);

    /* merge_states and dcp_correct */
    for (i = 0; i < 64; ++i) o[i] = p[i] = sx[i] = 0.5f;
    merge_setup(&m, (fa_dtype)42, 1, 1, 64, o, NULL, p, pl, sx, sl);
    cr_expect_eq(check_then_op(be, FA_OP_MERGE_STATES, &m, o, sizeof o), FA_ERR_INVALID_ARG);
    merge_setup(&m, FA_DTYPE_F32, 1, 1, 64, o, NULL, p, NULL, sx, sl);
    cr_expect_eq(check_then_op(be, FA_OP_MERGE_STATES, &m, o, sizeof o), FA_ERR_INVALID_ARG);
    merge_setup(&m, FA_DTYPE_F32, 1, 1, 64, o, NULL, p, pl, sx, sl);
    cr_expect_eq(check_then_op(be, FA_OP_MERGE_STATES, &m, o, sizeof o), FA_OK);
    memset(&c, 0, sizeof c);
    c.out = o;
    c.out_token_stride = 64;
    c.out_head_stride = 64;
    c.dtype = FA_DTYPE_F32;
    c.lse_all = lall;
    c.world_size = 2;
    c.rank = 2;
    c.num_tokens = 1;
    c.num_heads = 1;
    c.head_size = 64;
    cr_expect_eq(check_then_op(be, FA_OP_DCP_CORRECT, &c, o, sizeof o), FA_ERR_INVALID_ARG);
    c.rank = 1;
    cr_expect_eq(check_then_op(be, FA_OP_DCP_CORRECT, &c, o, sizeof o), FA_OK);

    /* an op the backend does not know */
    cr_expect_eq(be->ops.check(be->ctx, (fa_op)9, &c), FA_ERR_UNSUPPORTED);
    cr_expect(strstr(t_err(be), "op 9") != NULL, "%s", t_err(be));
    free(w.kc);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* bounds: slots and block ids against num_blocks, int64 offsets */

Test(errors, cache_slot_outside_cache)
{
    fa_backend *be = t_backend();
    const size_t bytes = sizeof(float) * 2 * 64 * 16 * 8;
    float *snap = (float *)t_alloc(bytes);
    cw w;
    cw_setup(&w, 64);
    memcpy(snap, w.kc, bytes);
    /* tokens 0..2 are fine: the call is still rejected before any of them is written */
    w.slot[3] = (int64_t)1 << 40;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_INVALID_ARG);
    cr_expect_str_eq(t_err(be), "cpu reshape_and_cache: slot_mapping[3] = 1099511627776 is "
                                "outside the cache (64 blocks x 16 slots)");
    cr_expect(!memcmp(snap, w.kc, bytes), "cache written on error");
    /* the first slot past the end; the last one inside; negative = skip */
    w.slot[3] = 64 * 16;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "slot_mapping[3] = 1024") != NULL, "%s", t_err(be));
    cr_expect(!memcmp(snap, w.kc, bytes), "cache written on error");
    w.slot[0] = -1;
    w.slot[3] = 64 * 16 - 1;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_OK, "%s", t_err(be));
    cr_expect_eq(w.kc[(int64_t)(64 * 16 - 1) * 8 + 2], 3.0f + 24.0f);
    cr_expect_eq(w.vc[(int64_t)(64 * 16 - 1) * 8 + 2], 3.0f + 24.0f);
    cr_expect_eq(w.kc[3 * 8], 0.0f, "a skipped token was written");
    /* the cache's block count is required (the header fills it: fa_backend_util.h) */
    w.a.num_blocks = 0;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "num_blocks 0") != NULL, "%s", t_err(be));
    w.a.num_blocks = -2;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "num_blocks -2") != NULL, "%s", t_err(be));
    free(w.kc);
    free(snap);
    fa_cpu_backend_destroy(be);
}

Test(errors, attention_block_id_outside_cache)
{
    static const float vv[40] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30};
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
#define FRESH() (small_setup(s, 2, 20, 2, 1, NULL, vv), s->a.num_blocks = 4)
    /* seqused_k 20, block_size 16: columns 0 and 1 are read */
    FRESH();
    s->bt[1] = 1000;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table[0, 1] = 1000", "4 blocks");
    FRESH();
    s->bt[1] = 1000;
    s->a.num_blocks = 64;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG,
                      "cpu attention: block_table[0, 1] = 1000 is outside the cache", "64 blocks");
    FRESH();
    s->bt[0] = -1;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table[0, 0] = -1", NULL);
    FRESH();
    s->bt[1] = INT32_MIN;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table[0, 1] = -2147483648", NULL);
    FRESH();
    s->a.num_blocks = 0; /* the cache's block count is required */
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "num_blocks 0", NULL);
    FRESH();
    s->bt[1] = 4; /* == num_blocks */
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block_table[0, 1] = 4", NULL);
#undef FRESH
    { /* columns not read may hold anything; so may a row of a sequence without queries */
        fa_backend *be = t_backend();
        small_setup(s, 2, 20, 2, 1, NULL, vv);
        s->a.num_blocks = 4;
        s->bt[2] = 1000;
        s->bt[3] = -5;
        cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
        small_setup(s, 0, 20, 2, 1, NULL, vv);
        s->a.num_blocks = 4;
        s->bt[0] = 1000;
        cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
        { /* a sequence with no work planned (split_plan 0) reads nothing */
            int32_t plan[2] = {1, 0};
            small_setup(s, 2, 20, 2, 1, NULL, vv);
            s->a.num_blocks = 4;
            s->a.split_plan = plan;
            s->bt[0] = 1000;
            cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
            cr_expect_eq(s->out[0], -7.0f, "a sequence without work was written");
            plan[1] = 1;
            cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_ERR_INVALID_ARG);
            cr_expect(strstr(t_err(be), "block_table[0, 0] = 1000") != NULL, "%s", t_err(be));
        }
        fa_cpu_backend_destroy(be);
    }
    free(s);
}

Test(errors, offsets_overflow_int64)
{
    static const float vv[3] = {1, 2, 3};
    fa_backend *be = t_backend();
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    const size_t bytes = sizeof(float) * 2 * 64 * 16 * 8;
    float *snap = (float *)t_alloc(bytes);
    cw w;
    /* cache write: block 1 (of 64) x 2^62 elements x 4 bytes is past int64 */
    cw_setup(&w, 64);
    memcpy(snap, w.kc, bytes);
    w.a.cache_block_stride = (int64_t)1 << 62;
    cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(be), "slot_mapping[1] = 23") != NULL, "%s", t_err(be));
    cr_expect(strstr(t_err(be), "overflows int64") != NULL, "%s", t_err(be));
    cr_expect(!memcmp(snap, w.kc, bytes), "cache written on error");
    /* a block id that fits int32 times a stride that does not fit int64 */
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    s->bt[0] = 3;
    s->a.k_block_stride = (int64_t)1 << 61;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "block id 3", "k_block_stride");
    /* query token stride */
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    s->a.q_token_stride = INT64_MAX / 2;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "q offsets overflow", "q_token_stride");
    /* out's head stride */
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    s->a.out_head_stride = INT64_MAX / 3;
    expect_attn_error(&s->a, s, FA_ERR_INVALID_ARG, "out offsets overflow", "out_head_stride");
    /* merge: a head stride of 2^62 elements */
    {
        float o[64], p[64], sx[64], pl[2] = {0, 0}, sl[2] = {0, 0};
        fa_merge_args m;
        merge_setup(&m, FA_DTYPE_F32, 1, 2, 8, o, NULL, p, pl, sx, sl);
        m.suffix_head_stride = (int64_t)1 << 62;
        cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_ERR_INVALID_ARG);
        cr_expect(strstr(t_err(be), "suffix_out") != NULL, "%s", t_err(be));
    }
    free(w.kc);
    free(snap);
    free(s);
    fa_cpu_backend_destroy(be);
}

/* ------------------------------------------------------------------------------------------ */
/* the error message is per thread */

/* Two threads fail on one backend with different messages. Strict turns: A fails, then B fails,
   then A reads its message: a message shared between threads would be B's by then. Then both
   fail at once many times (a data race under -fsanitize=thread if the buffer were shared). */
typedef struct err_pair {
    fa_backend *be;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step;
    int a_ok, b_ok, a_loop_bad, b_loop_bad;
    char a_msg[512], b_msg[512];
} err_pair;

static void ep_wait(err_pair *p, int step)
{
    pthread_mutex_lock(&p->mu);
    while (p->step < step) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void ep_set(err_pair *p, int step)
{
    pthread_mutex_lock(&p->mu);
    p->step = step;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static fa_status ep_fail_a(fa_backend *be) /* "cpu fill: pitch 8 ..." */
{
    unsigned char buf[64];
    return be->ops.fill(be->ctx, buf, 8, 0, 16, 2);
}

static fa_status ep_fail_b(fa_backend *be) /* "cpu dcp_correct: world_size 0 ..." */
{
    fa_dcp_correct_args c;
    memset(&c, 0, sizeof c);
    c.dtype = FA_DTYPE_F32;
    c.num_heads = 1;
    c.head_size = 64;
    return be->ops.dcp_correct(be->ctx, &c);
}

static void *ep_thread_a(void *arg)
{
    err_pair *p = (err_pair *)arg;
    int i;
    p->a_ok = ep_fail_a(p->be) == FA_ERR_INVALID_ARG;
    ep_set(p, 1);
    ep_wait(p, 2); /* B has failed too */
    snprintf(p->a_msg, sizeof p->a_msg, "%s", p->be->ops.last_error(p->be->ctx));
    ep_set(p, 3);
    for (i = 0; i < 2000; ++i) {
        ep_fail_a(p->be);
        if (strncmp(p->be->ops.last_error(p->be->ctx), "cpu fill: pitch 8", 17) != 0) p->a_loop_bad++;
    }
    return NULL;
}

static void *ep_thread_b(void *arg)
{
    err_pair *p = (err_pair *)arg;
    int i;
    ep_wait(p, 1);
    p->b_ok = ep_fail_b(p->be) == FA_ERR_INVALID_ARG;
    ep_set(p, 2);
    ep_wait(p, 3);
    snprintf(p->b_msg, sizeof p->b_msg, "%s", p->be->ops.last_error(p->be->ctx));
    for (i = 0; i < 2000; ++i) {
        ep_fail_b(p->be);
        if (strncmp(p->be->ops.last_error(p->be->ctx), "cpu dcp_correct: world_size 0", 29) != 0)
            p->b_loop_bad++;
    }
    return NULL;
}

Test(backend, error_message_per_thread)
{
    err_pair p;
    pthread_t ta, tb;
    memset(&p, 0, sizeof p);
    p.be = t_backend();
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    cr_assert_eq(pthread_create(&ta, NULL, ep_thread_a, &p), 0);
    cr_assert_eq(pthread_create(&tb, NULL, ep_thread_b, &p), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_expect(p.a_ok && p.b_ok);
    cr_expect(strstr(p.a_msg, "cpu fill: pitch 8") == p.a_msg, "thread A reads '%s'", p.a_msg);
    cr_expect(strstr(p.b_msg, "cpu dcp_correct: world_size 0") == p.b_msg, "thread B reads '%s'", p.b_msg);
    cr_expect_eq(p.a_loop_bad, 0, "thread A read another thread's message %d times", p.a_loop_bad);
    cr_expect_eq(p.b_loop_bad, 0, "thread B read another thread's message %d times", p.b_loop_bad);
    /* this thread failed nothing */
    cr_expect_str_eq(t_err(p.be), "");
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    fa_cpu_backend_destroy(p.be);
}

Test(backend, error_message_per_backend)
{
    fa_backend *a = t_backend(), *b = t_backend();
    unsigned char buf[64];
    cr_expect_eq(a->ops.fill(a->ctx, buf, 8, 0, 16, 2), FA_ERR_INVALID_ARG);
    cr_expect(strstr(t_err(a), "cpu fill: pitch 8") != NULL, "%s", t_err(a));
    cr_expect_str_eq(t_err(b), "", "backend b reports a's failure");
    fa_cpu_backend_destroy(a);
    a = t_backend(); /* a new backend starts without a message, wherever it lies */
    cr_expect_str_eq(t_err(a), "");
    fa_cpu_backend_destroy(a);
    fa_cpu_backend_destroy(b);
}

/* ------------------------------------------------------------------------------------------ */
/* fault injection (fa_cpu_backend_options) */

static fa_backend *t_backend_opts(const fa_cpu_backend_options *o)
{
    fa_backend *be = NULL;
    cr_assert_eq(fa_cpu_backend_create_ex(o, &be), FA_OK);
    cr_assert(be != NULL);
    return be;
}

Test(faults, alloc_at_nth)
{
    fa_cpu_backend_options o;
    fa_backend *be;
    void *p[4] = {NULL, NULL, NULL, NULL};
    int i;
    memset(&o, 0, sizeof o);
    o.fail_alloc_at = 3;
    be = t_backend_opts(&o);
    for (i = 0; i < 4; ++i) {
        fa_status st = be->ops.alloc(be->ctx, 64, &p[i]);
        if (i == 2) {
            cr_expect_eq(st, FA_ERR_OUT_OF_MEMORY);
            cr_expect(p[i] == NULL);
            cr_expect(strstr(t_err(be), "cpu alloc: injected failure at call 3") != NULL, "%s", t_err(be));
        } else {
            cr_expect_eq(st, FA_OK, "alloc %d: %s", i + 1, t_err(be));
            cr_expect(p[i] != NULL);
        }
    }
    for (i = 0; i < 4; ++i) cr_expect_eq(be->ops.free(be->ctx, p[i]), FA_OK);
    /* re-armed: counting restarts */
    o.fail_alloc_at = 1;
    cr_expect_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
    cr_expect_eq(be->ops.alloc(be->ctx, 8, &p[0]), FA_ERR_OUT_OF_MEMORY);
    cr_expect_eq(be->ops.alloc(be->ctx, 8, &p[0]), FA_OK);
    cr_expect_eq(be->ops.free(be->ctx, p[0]), FA_OK);
    cr_expect_eq(fa_cpu_backend_set_options(be, NULL), FA_OK);
    cr_expect_eq(fa_cpu_backend_set_options(NULL, &o), FA_ERR_INVALID_ARG);
    fa_cpu_backend_destroy(be);
    cr_expect_eq(fa_cpu_backend_create_ex(&o, NULL), FA_ERR_INVALID_ARG);
}

Test(faults, op_at_nth)
{
    static const float vv[3] = {1, 2, 3};
    small_attn *s = (small_attn *)t_alloc(sizeof *s);
    fa_cpu_backend_options o;
    fa_backend *be;
    float before[sizeof s->out / sizeof(float)];
    memset(&o, 0, sizeof o);
    o.fail_op = FA_OP_ATTENTION;
    o.fail_op_at = 2;
    be = t_backend_opts(&o);
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    small_setup(s, 2, 3, 2, 1, NULL, vv);
    memcpy(before, s->out, sizeof before);
    /* the second call: its checks pass (ops.check agrees it would run), then it fails */
    cr_expect_eq(be->ops.check(be->ctx, FA_OP_ATTENTION, &s->a), FA_OK);
    cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_ERR_BACKEND);
    cr_expect_str_eq(t_err(be), "cpu attention: injected failure at call 2 "
                                "(fa_cpu_backend_options.fail_op_at)");
    cr_expect(!memcmp(before, s->out, sizeof before), "the failing call wrote out");
    /* the next call works; other ops are not affected */
    cr_expect_eq(be->ops.attention(be->ctx, &s->a), FA_OK, "%s", t_err(be));
    cr_expect(fabs(small_out(s, 0, 0, 0) - 2.0) < 1e-6, "%g", (double)small_out(s, 0, 0, 0));
    fa_cpu_backend_destroy(be);

    /* each of the other device ops */
    {
        cw w;
        float o2[64], p[64], sx[64], pl[1] = {0}, sl[1] = {0}, lall[2] = {0, 0};
        fa_merge_args m;
        fa_dcp_correct_args c;
        int i;
        for (i = 0; i < 64; ++i) o2[i] = p[i] = sx[i] = 0.5f;
        cw_setup(&w, 64);
        o.fail_op = FA_OP_RESHAPE_AND_CACHE;
        o.fail_op_at = 1;
        be = t_backend_opts(&o);
        cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_ERR_BACKEND);
        cr_expect(strstr(t_err(be), "cpu reshape_and_cache: injected") != NULL, "%s", t_err(be));
        cr_expect_eq(w.kc[3 * 8 + 5], 0.0f, "the failing call wrote the cache");
        cr_expect_eq(be->ops.reshape_and_cache(be->ctx, &w.a), FA_OK);
        cr_expect_eq(w.kc[3 * 8 + 5], 6.0f);
        o.fail_op = FA_OP_MERGE_STATES;
        cr_expect_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
        merge_setup(&m, FA_DTYPE_F32, 1, 1, 64, o2, NULL, p, pl, sx, sl);
        cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_ERR_BACKEND);
        cr_expect(strstr(t_err(be), "cpu merge_states: injected") != NULL, "%s", t_err(be));
        cr_expect_eq(be->ops.merge_states(be->ctx, &m), FA_OK);
        o.fail_op = FA_OP_DCP_CORRECT;
        cr_expect_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
        memset(&c, 0, sizeof c);
        c.out = o2;
        c.out_token_stride = 64;
        c.out_head_stride = 64;
        c.dtype = FA_DTYPE_F32;
        c.lse_all = lall;
        c.world_size = 2;
        c.rank = 0;
        c.num_tokens = 1;
        c.num_heads = 1;
        c.head_size = 64;
        cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_ERR_BACKEND);
        cr_expect(strstr(t_err(be), "cpu dcp_correct: injected") != NULL, "%s", t_err(be));
        cr_expect_eq(be->ops.dcp_correct(be->ctx, &c), FA_OK);
        free(w.kc);
        fa_cpu_backend_destroy(be);
    }
    free(s);
}

Test(faults, copy_at_nth)
{
    fa_cpu_backend_options o;
    fa_backend *be;
    unsigned char src[16], dst[16];
    memset(&o, 0, sizeof o);
    o.fail_copy_at = 2;
    be = t_backend_opts(&o);
    memset(src, 1, sizeof src);
    memset(dst, 0, sizeof dst);
    cr_expect_eq(be->ops.copy(be->ctx, dst, src, 4, FA_COPY_HOST_TO_DEVICE), FA_OK);
    cr_expect_eq(be->ops.copy_2d(be->ctx, dst + 4, 4, src, 4, 4, 2, FA_COPY_HOST_TO_DEVICE), FA_ERR_BACKEND);
    cr_expect(strstr(t_err(be), "cpu copy_2d: injected failure at call 2") != NULL, "%s", t_err(be));
    cr_expect_eq(dst[4], 0, "the failing copy copied");
    cr_expect_eq(be->ops.copy(be->ctx, dst, src, 16, FA_COPY_HOST_TO_DEVICE), FA_OK);
    cr_expect_eq(dst[15], 1);
    fa_cpu_backend_destroy(be);
}

/* Through flashattn.h: a one-request forward (5 new tokens, Hq 2, Hkv 1, D 32, bs 16, f32). */
enum { FW_T = 5, FW_HQ = 2, FW_D = 32, FW_BS = 16, FW_NB = 4 };

typedef struct fwd {
    fa_layer L;
    fa_metadata md;
    float q[FW_T * FW_HQ * FW_D], k[FW_T * FW_D], v[FW_T * FW_D], out[FW_T * FW_HQ * FW_D];
    float cache[2 * FW_NB * FW_BS * FW_D];
    int32_t qsl[2], seq[1], bt[FW_NB];
    int64_t slots[FW_T];
    fa_tensor tq, tk, tv, tc, to;
} fwd;

static fa_config fw_cfg(void)
{
    fa_config c;
    memset(&c, 0, sizeof c);
    c.model.num_heads_q = FW_HQ;
    c.model.num_heads_kv = 1;
    c.model.head_size = FW_D;
    c.model.dtype = FA_DTYPE_F32;
    c.cache.block_size = FW_BS;
    c.scheduler.max_num_seqs = 8;
    c.scheduler.max_num_batched_tokens = 64;
    return c;
}

static void fw_init(fwd *f)
{
    fa_layer_desc d;
    int i;
    int64_t sh[3];
    memset(f, 0, sizeof *f);
    for (i = 0; i < FW_T * FW_HQ * FW_D; ++i) f->q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (i = 0; i < FW_T * FW_D; ++i) {
        f->k[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
        f->v[i] = (float)((i * 3) % 17) / 17.0f;
    }
    f->qsl[0] = 0;
    f->qsl[1] = FW_T;
    f->seq[0] = FW_T;
    for (i = 0; i < FW_NB; ++i) f->bt[i] = FW_NB - 1 - i;
    for (i = 0; i < FW_T; ++i) f->slots[i] = (int64_t)f->bt[0] * FW_BS + i;
    memset(&d, 0, sizeof d);
    d.num_heads_q = FW_HQ;
    d.num_heads_kv = 1;
    d.head_size = FW_D;
    d.dtype = FA_DTYPE_F32;
    cr_assert_eq(fa_layer_init(&f->L, &d), FA_OK, "%s", fa_last_error());
    sh[0] = FW_T;
    sh[1] = FW_HQ;
    sh[2] = FW_D;
    f->tq = fa_tensor_make(f->q, FA_DTYPE_F32, 3, sh);
    f->to = fa_tensor_make(f->out, FA_DTYPE_F32, 3, sh);
    sh[1] = 1;
    f->tk = fa_tensor_make(f->k, FA_DTYPE_F32, 3, sh);
    f->tv = fa_tensor_make(f->v, FA_DTYPE_F32, 3, sh);
    f->tc.data = f->cache;
    f->tc.dtype = FA_DTYPE_F32;
    f->tc.rank = 5;
    cr_assert_eq(fa_kv_cache_shape(FW_NB, FW_BS, 1, FW_D, f->tc.shape), FA_OK);
    cr_assert_eq(fa_kv_cache_strides(FA_LAYOUT_NHD, FW_NB, FW_BS, 1, FW_D, f->tc.stride), FA_OK);
}

static fa_status fw_build(fwd *f, fa_builder *b)
{
    fa_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = 1;
    batch.num_actual_tokens = FW_T;
    batch.query_start_loc = f->qsl;
    batch.seq_lens = f->seq;
    batch.block_table = f->bt;
    batch.block_table_stride = FW_NB;
    batch.slot_mapping = f->slots;
    batch.causal = 1;
    return fa_builder_build(b, &batch, 0, &f->md);
}

static fa_status fw_forward(fwd *f, const fa_backend *be)
{
    return fa_forward(&f->L, be, &f->tq, &f->tk, &f->tv, &f->tc, &f->md, &f->to);
}

/* The CPU backend with its alloc / free counted (live allocations). */
static int64_t cnt_live;
static fa_status (*cnt_inner_alloc)(void *, size_t, void **);
static fa_status (*cnt_inner_free)(void *, void *);

static fa_status cnt_alloc(void *ctx, size_t bytes, void **ptr)
{
    fa_status st = cnt_inner_alloc(ctx, bytes, ptr);
    if (st == FA_OK) cnt_live++;
    return st;
}

static fa_status cnt_free(void *ctx, void *ptr)
{
    if (ptr) cnt_live--;
    return cnt_inner_free(ctx, ptr);
}

Test(faults, builder_create_alloc_failure_leaks_nothing)
{
    fa_config cfg = fw_cfg();
    int64_t n;
    int done = 0, failed = 0;
    for (n = 1; n <= 64 && !done; ++n) {
        fa_cpu_backend_options o;
        fa_backend *inner, c;
        fa_builder *b = NULL;
        fa_status st;
        memset(&o, 0, sizeof o);
        o.fail_alloc_at = n;
        inner = t_backend_opts(&o);
        c = *inner;
        cnt_inner_alloc = inner->ops.alloc;
        cnt_inner_free = inner->ops.free;
        c.ops.alloc = cnt_alloc;
        c.ops.free = cnt_free;
        cnt_live = 0;
        st = fa_builder_create(&c, &cfg, NULL, &b);
        if (st == FA_OK) {
            done = 1; /* n is past the builder's allocations */
            cr_expect(cnt_live > 0);
            fa_builder_destroy(b);
        } else {
            cr_expect_eq(st, FA_ERR_OUT_OF_MEMORY, "alloc %lld: status %d: %s", (long long)n, (int)st,
                         fa_last_error());
            cr_expect(strstr(fa_last_error(), "injected failure") != NULL, "%s", fa_last_error());
            failed++;
        }
        cr_expect_eq(cnt_live, 0, "failing alloc %lld: %lld allocations left", (long long)n,
                     (long long)cnt_live);
        fa_cpu_backend_destroy(inner);
    }
    cr_expect(done, "the builder never succeeded (n %lld)", (long long)n);
    cr_expect_eq(failed, n - 2, "%d of the builder's %lld allocations failed", failed, (long long)(n - 2));
    cr_expect(failed >= 1, "no allocation was made to fail");
}

Test(faults, forward_op_failure_then_next_call_works)
{
    static fwd f, g;
    fa_config cfg = fw_cfg();
    fa_backend *ref = t_backend(), *be;
    fa_builder *b = NULL, *rb = NULL;
    fa_cpu_backend_options o;
    int i;
    /* the reference: a clean run */
    fw_init(&g);
    cr_assert_eq(fa_builder_create(ref, &cfg, NULL, &rb), FA_OK, "%s", fa_last_error());
    cr_assert_eq(fw_build(&g, rb), FA_OK, "%s", fa_last_error());
    cr_assert_eq(fw_forward(&g, ref), FA_OK, "%s", fa_last_error());
    /* attention fails at its first call */
    fw_init(&f);
    be = t_backend();
    cr_assert_eq(fa_builder_create(be, &cfg, NULL, &b), FA_OK, "%s", fa_last_error());
    cr_assert_eq(fw_build(&f, b), FA_OK, "%s", fa_last_error());
    memset(&o, 0, sizeof o);
    o.fail_op = FA_OP_ATTENTION;
    o.fail_op_at = 1;
    cr_assert_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
    cr_expect_eq(fw_forward(&f, be), FA_ERR_BACKEND);
    cr_expect(strstr(fa_last_error(), "cpu") != NULL && strstr(fa_last_error(), "attention") != NULL, "%s",
              fa_last_error());
    cr_expect(strstr(fa_last_error(), "injected failure") != NULL, "%s", fa_last_error());
    for (i = 0; i < FW_T * FW_HQ * FW_D; ++i)
        cr_assert_eq(f.out[i], 0.0f, "out[%d] written by the failed forward", i);
    /* the next call works and gives the clean run's answer */
    cr_expect_eq(fw_forward(&f, be), FA_OK, "%s", fa_last_error());
    for (i = 0; i < FW_T * FW_HQ * FW_D; ++i)
        cr_assert_eq(f.out[i], g.out[i], "out[%d] %g, clean run %g", i, (double)f.out[i], (double)g.out[i]);
    /* the cache write failing: the same */
    o.fail_op = FA_OP_RESHAPE_AND_CACHE;
    cr_assert_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
    cr_expect_eq(fw_forward(&f, be), FA_ERR_BACKEND);
    cr_expect(strstr(fa_last_error(), "reshape_and_cache") != NULL, "%s", fa_last_error());
    cr_expect_eq(fw_forward(&f, be), FA_OK, "%s", fa_last_error());
    fa_builder_destroy(b);
    fa_builder_destroy(rb);
    fa_cpu_backend_destroy(be);
    fa_cpu_backend_destroy(ref);
}

/* The builder's one upload (ops.copy) fails: fa_builder_build returns FA_ERR_BACKEND naming
   backend and op; the next build and a forward work. */
Test(faults, build_copy_failure_then_next_build_works)
{
    static fwd f;
    fa_config cfg = fw_cfg();
    fa_backend *be = t_backend();
    fa_builder *b = NULL;
    fa_cpu_backend_options o;
    fw_init(&f);
    cr_assert_eq(fa_builder_create(be, &cfg, NULL, &b), FA_OK, "%s", fa_last_error());
    memset(&o, 0, sizeof o);
    o.fail_copy_at = 1;
    cr_assert_eq(fa_cpu_backend_set_options(be, &o), FA_OK);
    cr_expect_eq(fw_build(&f, b), FA_ERR_BACKEND);
    cr_expect(strstr(fa_last_error(), "cpu") != NULL && strstr(fa_last_error(), "copy") != NULL &&
                  strstr(fa_last_error(), "injected failure") != NULL,
              "%s", fa_last_error());
    cr_expect_eq(fw_build(&f, b), FA_OK, "%s", fa_last_error());
    cr_expect_eq(fw_forward(&f, be), FA_OK, "%s", fa_last_error());
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
}
