/* Forward paths end to end on the CPU backend against an independent double-precision attention
   written here: plain (GQA, NHD/HND, softcap, ALiBi, sinks, split-KV), sliding window, cascade ==
   plain, DCP over 2 and 4 fake ranks == one rank (with and without sinks), chunked local, encoder
   and encoder-only, profiling run, kv-sharing, fp8 caches, and NaN hygiene (NaN planted in unused
   cache slots, past seqused_k, in unused block-table columns and in masked positions). */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include "backends/cpu/fa_cpu.h"
#include "backends/cpu/fa_fake_comm.h"

#include <criterion/criterion.h>
#include <math.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---------------------------------------------------------------------------------------- */
/* random numbers, dtype helpers */

static float rng_unif(void) { return (float)((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static float round_to(fa_dtype t, float x)
{
    switch (t) {
    case FA_DTYPE_F16: return fa_cpu_half_to_float(fa_cpu_float_to_half(x));
    case FA_DTYPE_BF16: return fa_cpu_bf16_to_float(fa_cpu_float_to_bf16(x));
    default: return x;
    }
}
static void store(void *base, int64_t i, fa_dtype t, float x)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)base)[i] = x; break;
    case FA_DTYPE_F16: ((uint16_t *)base)[i] = fa_cpu_float_to_half(x); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[i] = fa_cpu_float_to_bf16(x); break;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: ((uint8_t *)base)[i] = fa_cpu_float_to_fp8(x, t); break;
    default: cr_assert_fail("store: dtype %d", (int)t);
    }
}
static float load(const void *base, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return ((const float *)base)[i];
    case FA_DTYPE_F16: return fa_cpu_half_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_BF16: return fa_cpu_bf16_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: return fa_cpu_fp8_to_float(((const uint8_t *)base)[i], t);
    default: cr_assert_fail("load: dtype %d", (int)t); return 0;
    }
}
/* the value attention sees for x stored in a cache of `cdt` with `scale` */
static float cache_value(fa_dtype act, fa_dtype cdt, float scale, float x)
{
    if (cdt == FA_DTYPE_FP8_E4M3 || cdt == FA_DTYPE_FP8_E5M2)
        return fa_cpu_fp8_to_float(fa_cpu_float_to_fp8(x / scale, cdt), cdt) * scale;
    return round_to(act, x);
}
static void fill_nan(void *base, int64_t n, fa_dtype t)
{
    for (int64_t i = 0; i < n; ++i) store(base, i, t, NAN);
}

/* ---------------------------------------------------------------------------------------- */
/* the reference: double precision, straight loops */

typedef struct refcfg {
    int Hq, Hkv, D;
    double scale, softcap;
    int causal, wl, wr, chunk;
    const float *alibi; /* [Hq] or NULL */
    const float *sinks; /* [Hq] or NULL */
} refcfg;

/* q [Lq][Hq][D] (row stride qs), k/v [Lk][Hkv][D]; out [Lq][Hq][D] */
static void ref_attn(const refcfg *c, const float *q, int64_t qs, const float *k, const float *v, int Lq,
                     int Lk, double *out)
{
    int G = c->Hq / c->Hkv;
    double *s = malloc(sizeof(double) * (size_t)(Lk > 0 ? Lk : 1));
    char *ok = malloc((size_t)(Lk > 0 ? Lk : 1));
    for (int i = 0; i < Lq; ++i) {
        int64_t p = (int64_t)i + Lk - Lq;
        int wr = c->causal ? 0 : c->wr;
        for (int h = 0; h < c->Hq; ++h) {
            int g = h / G;
            double m = -INFINITY;
            int any = 0;
            for (int j = 0; j < Lk; ++j) {
                ok[j] = 1;
                if (c->wl >= 0 && j < p - c->wl) ok[j] = 0;
                if (wr >= 0 && j > p + wr) ok[j] = 0;
                if (c->chunk > 0 && (j < (p / c->chunk) * c->chunk || j > p)) ok[j] = 0;
                if (!ok[j]) continue;
                double dot = 0;
                for (int d = 0; d < c->D; ++d)
                    dot += (double)q[i * qs + h * c->D + d] * (double)k[((int64_t)j * c->Hkv + g) * c->D + d];
                double x = dot * c->scale;
                if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
                if (c->alibi) x += -(double)c->alibi[h] * fabs((double)(p - j));
                s[j] = x;
                if (x > m) m = x;
                any = 1;
            }
            double z = c->sinks ? (double)c->sinks[h] : -INFINITY;
            double *o = out + ((int64_t)i * c->Hq + h) * c->D;
            for (int d = 0; d < c->D; ++d) o[d] = 0;
            if (!any) continue;
            if (z > m) m = z;
            double den = c->sinks ? exp(z - m) : 0.0;
            for (int j = 0; j < Lk; ++j) {
                if (!ok[j]) continue;
                double w = exp(s[j] - m);
                den += w;
                for (int d = 0; d < c->D; ++d) o[d] += w * (double)v[((int64_t)j * c->Hkv + g) * c->D + d];
            }
            for (int d = 0; d < c->D; ++d) o[d] /= den;
        }
    }
    free(s);
    free(ok);
}

/* ---------------------------------------------------------------------------------------- */
/* a paged-attention scenario */

enum { MAXR = 32 };

typedef struct scen {
    /* shape */
    int n, Hq, Hkv, D, bs;
    fa_dtype dt;        /* activations */
    fa_dtype cdt;       /* cache storage */
    fa_cache_dtype cache_dtype;
    float k_scale, v_scale;
    fa_kv_layout layout;
    int32_t qlen[MAXR], ctx[MAXR];
    int shared_blocks;  /* leading block-table columns shared by every request */
    int fused;          /* q/k/v are views of one fused [T, Hq + 2 Hkv, D] buffer (token stride > heads) */
    int cross;          /* cross-attention step: the keys are the cached context only, no new k/v */
    /* derived */
    int32_t qsl[MAXR + 1], seq[MAXR];
    int T, Tpad;
    int32_t *bt;
    int64_t bts;
    int32_t maxb;
    int64_t NB;
    int64_t *slots;
    float *K, *V; /* logical keys/values per request: K + koff[r] -> [seq][Hkv][D] (cache-visible values) */
    int64_t koff[MAXR];
    float *Q; /* [Tpad][Hq][D] (rounded) */
    float *Knew, *Vnew; /* [Tpad][Hkv][D] the values passed as k/v (rounded to dt) */
    void *q, *k, *v, *out, *cache, *qkv;
    int64_t cshape[5], cstride[5];
    size_t out_bytes, cache_bytes;
} scen;

static int64_t cache_index(const scen *s, int kv, int64_t blk, int off, int h, int d)
{
    return kv * s->cstride[0] + blk * s->cstride[1] + off * s->cstride[2] + h * s->cstride[3] + d;
}

/* Builds everything; the context (positions < ctx) is written into the cache directly, the new
   tokens are left for fa_forward's cache write (their slots hold NaN until then). */
static void scen_init(scen *s)
{
    int n = s->n;
    if (!s->cdt) s->cdt = s->dt;
    if (s->k_scale == 0) s->k_scale = 1;
    if (s->v_scale == 0) s->v_scale = 1;
    s->qsl[0] = 0;
    int32_t maxseq = 0;
    for (int r = 0; r < n; ++r) {
        s->seq[r] = s->cross ? s->ctx[r] : s->ctx[r] + s->qlen[r];
        s->qsl[r + 1] = s->qsl[r] + s->qlen[r];
        if (s->seq[r] > maxseq) maxseq = s->seq[r];
    }
    s->T = s->qsl[n];
    s->Tpad = s->T + 3;
    s->maxb = (maxseq + s->bs - 1) / s->bs + 2; /* two spare columns: point at NaN blocks */
    s->bts = s->maxb + 3;
    int64_t need = 2 + s->shared_blocks;
    for (int r = 0; r < n; ++r) need += (s->seq[r] + s->bs - 1) / s->bs;
    s->NB = need + 8;
    /* blocks 0 and 1 are NaN blocks that are never written (the spare and unused columns point
       at them); every other block id comes from a random permutation */
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)s->NB);
    for (int64_t i = 0; i < s->NB; ++i) perm[i] = i;
    for (int64_t i = s->NB - 1; i > 2; --i) {
        int64_t j = 2 + (int64_t)(rng_u64() % (uint64_t)(i - 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    s->bt = malloc(sizeof(int32_t) * (size_t)(n * s->bts));
    int64_t next = 2 + s->shared_blocks;
    for (int r = 0; r < n; ++r) {
        int nb = (s->seq[r] + s->bs - 1) / s->bs;
        for (int c = 0; c < s->bts; ++c) {
            int32_t id;
            if (c >= nb)
                id = c % 2; /* unused column: a NaN block */
            else if (c < s->shared_blocks)
                id = (int32_t)perm[2 + c]; /* shared by every row */
            else
                id = (int32_t)perm[next++];
            s->bt[r * s->bts + c] = id;
        }
    }
    cr_assert_leq(next, s->NB);
    free(perm);
    /* logical K/V */
    int64_t tot = 0;
    for (int r = 0; r < n; ++r) {
        s->koff[r] = tot;
        tot += (int64_t)s->seq[r] * s->Hkv * s->D;
    }
    s->K = malloc(sizeof(float) * (size_t)(tot ? tot : 1));
    s->V = malloc(sizeof(float) * (size_t)(tot ? tot : 1));
    float *Kraw = malloc(sizeof(float) * (size_t)(tot ? tot : 1));
    float *Vraw = malloc(sizeof(float) * (size_t)(tot ? tot : 1));
    for (int64_t i = 0; i < tot; ++i) {
        Kraw[i] = rng_unif();
        Vraw[i] = rng_unif();
    }
    /* shared prefix: same keys/values for every request */
    int64_t pre = (int64_t)s->shared_blocks * s->bs;
    for (int r = 1; r < n; ++r) {
        int64_t m = pre < s->seq[r] ? pre : s->seq[r];
        if (m > s->seq[0]) m = s->seq[0];
        memcpy(Kraw + s->koff[r], Kraw + s->koff[0], sizeof(float) * (size_t)(m * s->Hkv * s->D));
        memcpy(Vraw + s->koff[r], Vraw + s->koff[0], sizeof(float) * (size_t)(m * s->Hkv * s->D));
    }
    for (int64_t i = 0; i < tot; ++i) {
        s->K[i] = cache_value(s->dt, s->cdt, s->k_scale, round_to(s->dt, Kraw[i]));
        s->V[i] = cache_value(s->dt, s->cdt, s->v_scale, round_to(s->dt, Vraw[i]));
    }
    /* cache: NaN everywhere, then the context */
    int64_t shape[5];
    ASSERT_OK(fa_kv_cache_shape(s->NB, s->bs, s->Hkv, s->D, shape));
    /* the strides of a contiguous allocation in the layout's physical order, computed here
       (not with fa_kv_cache_strides) so the test does not share a mistake with the library */
    if (s->layout == FA_LAYOUT_NHD) {
        s->cstride[4] = 1;
        s->cstride[3] = s->D;
        s->cstride[2] = (int64_t)s->Hkv * s->D;
        s->cstride[1] = (int64_t)s->bs * s->Hkv * s->D;
    } else {
        s->cstride[4] = 1;
        s->cstride[2] = s->D;
        s->cstride[3] = (int64_t)s->bs * s->D;
        s->cstride[1] = (int64_t)s->Hkv * s->bs * s->D;
    }
    s->cstride[0] = s->NB * s->cstride[1];
    memcpy(s->cshape, shape, sizeof shape);
    int64_t celems = 2 * s->NB * s->bs * s->Hkv * s->D;
    s->cache_bytes = (size_t)celems * fa_dtype_size(s->cdt);
    s->cache = malloc(s->cache_bytes);
    fill_nan(s->cache, celems, s->cdt);
    for (int r = 0; r < n; ++r)
        for (int p = 0; p < s->ctx[r]; ++p) {
            int64_t blk = s->bt[r * s->bts + p / s->bs];
            for (int h = 0; h < s->Hkv; ++h)
                for (int d = 0; d < s->D; ++d) {
                    int64_t li = s->koff[r] + ((int64_t)p * s->Hkv + h) * s->D + d;
                    float kx = round_to(s->dt, Kraw[li]), vx = round_to(s->dt, Vraw[li]);
                    int fp8 = s->cdt == FA_DTYPE_FP8_E4M3 || s->cdt == FA_DTYPE_FP8_E5M2;
                    store(s->cache, cache_index(s, 0, blk, p % s->bs, h, d), s->cdt,
                          fp8 ? kx / s->k_scale : kx);
                    store(s->cache, cache_index(s, 1, blk, p % s->bs, h, d), s->cdt,
                          fp8 ? vx / s->v_scale : vx);
                }
        }
    /* q, new k/v, slots, out */
    s->Q = malloc(sizeof(float) * (size_t)(s->Tpad * s->Hq * s->D));
    for (int64_t i = 0; i < (int64_t)s->Tpad * s->Hq * s->D; ++i) s->Q[i] = round_to(s->dt, rng_unif());
    size_t es = fa_dtype_size(s->dt);
    s->q = malloc((size_t)s->Tpad * s->Hq * s->D * es);
    s->out = malloc((size_t)s->Tpad * s->Hq * s->D * es);
    s->out_bytes = (size_t)s->Tpad * s->Hq * s->D * es;
    s->k = malloc((size_t)s->Tpad * s->Hkv * s->D * es);
    s->v = malloc((size_t)s->Tpad * s->Hkv * s->D * es);
    s->Knew = malloc(sizeof(float) * (size_t)(s->Tpad * s->Hkv * s->D));
    s->Vnew = malloc(sizeof(float) * (size_t)(s->Tpad * s->Hkv * s->D));
    for (int64_t i = 0; i < (int64_t)s->Tpad * s->Hq * s->D; ++i) {
        store(s->q, i, s->dt, s->Q[i]);
        store(s->out, i, s->dt, 7.0f); /* sentinel: rows past T must keep it */
    }
    s->slots = malloc(sizeof(int64_t) * (size_t)s->Tpad);
    int t = 0;
    for (int r = 0; r < n && !s->cross; ++r)
        for (int i = 0; i < s->qlen[r]; ++i, ++t) {
            int p = s->ctx[r] + i;
            s->slots[t] = (int64_t)s->bt[r * s->bts + p / s->bs] * s->bs + p % s->bs;
            for (int h = 0; h < s->Hkv; ++h)
                for (int d = 0; d < s->D; ++d) {
                    int64_t li = s->koff[r] + ((int64_t)p * s->Hkv + h) * s->D + d;
                    int64_t ti = ((int64_t)t * s->Hkv + h) * s->D + d;
                    s->Knew[ti] = round_to(s->dt, Kraw[li]);
                    s->Vnew[ti] = round_to(s->dt, Vraw[li]);
                    store(s->k, ti, s->dt, s->Knew[ti]);
                    store(s->v, ti, s->dt, s->Vnew[ti]);
                }
        }
    if (s->cross) {
        for (int64_t i = 0; i < (int64_t)s->T * s->Hkv * s->D; ++i) {
            store(s->k, i, s->dt, NAN);
            store(s->v, i, s->dt, NAN);
        }
        for (t = 0; t < s->T; ++t) s->slots[t] = -1;
    }
    for (; t < s->Tpad; ++t) {
        s->slots[t] = -1;
        for (int64_t i = 0; i < (int64_t)s->Hkv * s->D; ++i) {
            store(s->k, (int64_t)t * s->Hkv * s->D + i, s->dt, NAN); /* padding rows never written */
            store(s->v, (int64_t)t * s->Hkv * s->D + i, s->dt, NAN);
        }
    }
    free(Kraw);
    free(Vraw);
    if (s->fused) { /* one row per token: [q heads | k heads | v heads] */
        int64_t W = (int64_t)(s->Hq + 2 * s->Hkv) * s->D;
        s->qkv = malloc((size_t)(s->Tpad * W) * es);
        for (int tt = 0; tt < s->Tpad; ++tt) {
            for (int64_t i = 0; i < (int64_t)s->Hq * s->D; ++i)
                store(s->qkv, tt * W + i, s->dt, load(s->q, (int64_t)tt * s->Hq * s->D + i, s->dt));
            for (int64_t i = 0; i < (int64_t)s->Hkv * s->D; ++i) {
                store(s->qkv, tt * W + (int64_t)s->Hq * s->D + i, s->dt,
                      load(s->k, (int64_t)tt * s->Hkv * s->D + i, s->dt));
                store(s->qkv, tt * W + (int64_t)(s->Hq + s->Hkv) * s->D + i, s->dt,
                      load(s->v, (int64_t)tt * s->Hkv * s->D + i, s->dt));
            }
        }
    }
}

static void scen_free(scen *s)
{
    free(s->bt);
    free(s->slots);
    free(s->K);
    free(s->V);
    free(s->Q);
    free(s->Knew);
    free(s->Vnew);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->out);
    free(s->cache);
    free(s->qkv);
}

/* A scenario's first lines: the seed, a zeroed scenario and its shape. */
static void scen_begin(scen *s, uint64_t seed, int Hq, int Hkv, int D, int bs, fa_dtype dt)
{
    rng_seed(seed);
    memset(s, 0, sizeof *s);
    s->Hq = Hq;
    s->Hkv = Hkv;
    s->D = D;
    s->bs = bs;
    s->dt = dt;
}

/* Its last: the builder, the backend and the scenario's arrays. */
static void scen_end(scen *s, fa_builder *b, fa_backend *be)
{
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
    scen_free(s);
}

static fa_batch scen_batch(const scen *s, int causal)
{
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = s->n;
    b.num_actual_tokens = s->T;
    b.query_start_loc = s->qsl;
    b.seq_lens = s->seq;
    b.block_table = s->bt;
    b.block_table_stride = s->bts;
    b.max_blocks = s->maxb;
    b.block_table_host = s->bt;
    b.slot_mapping = s->slots;
    b.causal = causal;
    return b;
}

static fa_config scen_cfg(const scen *s)
{
    fa_config c = test_cfg(s->Hq, s->Hkv, s->D, s->dt, s->bs, 64, 4096);
    c.cache.cache_dtype = s->cache_dtype;
    c.cache.layout = s->layout;
    return c;
}

static fa_layer_desc scen_desc(const scen *s)
{
    fa_layer_desc d = test_desc(s->Hq, s->Hkv, s->D, s->dt);
    d.kv_cache_dtype = s->cache_dtype;
    d.k_scale = s->k_scale;
    d.v_scale = s->v_scale;
    return d;
}

static fa_tensor t3(void *p, fa_dtype t, int64_t a, int64_t b, int64_t c)
{
    int64_t sh[3] = {a, b, c};
    return fa_tensor_make(p, t, 3, sh);
}

static fa_tensor scen_cache_tensor(const scen *s)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = s->cache;
    t.dtype = s->cdt;
    t.rank = 5;
    for (int i = 0; i < 5; ++i) {
        t.shape[i] = s->cshape[i];
        t.stride[i] = s->cstride[i];
    }
    return t;
}

/* runs forward on `s` with a layer; returns the status */
static fa_status scen_forward(scen *s, fa_backend *be, const fa_layer *L, const fa_metadata *md, int with_kv)
{
    fa_tensor q = t3(s->q, s->dt, s->Tpad, s->Hq, s->D), o = t3(s->out, s->dt, s->Tpad, s->Hq, s->D);
    fa_tensor k = t3(s->k, s->dt, s->Tpad, s->Hkv, s->D), v = t3(s->v, s->dt, s->Tpad, s->Hkv, s->D);
    fa_tensor c = scen_cache_tensor(s);
    if (s->fused) {
        int64_t W = (int64_t)(s->Hq + 2 * s->Hkv) * s->D;
        size_t es = fa_dtype_size(s->dt);
        q.data = s->qkv;
        k.data = (char *)s->qkv + (size_t)s->Hq * s->D * es;
        v.data = (char *)s->qkv + (size_t)(s->Hq + s->Hkv) * s->D * es;
        q.stride[0] = k.stride[0] = v.stride[0] = W;
    }
    return fa_forward(L, be, &q, with_kv ? &k : NULL, with_kv ? &v : NULL, &c, md, &o);
}

static double tol_for(fa_dtype t) { return t == FA_DTYPE_F32 ? 2e-5 : t == FA_DTYPE_F16 ? 4e-3 : 3e-2; }

/* compares out rows [0, T) with the reference of each request; rows past T keep the sentinel */
static void scen_check(const scen *s, const refcfg *rc0, double atol, const char *what)
{
    refcfg rc = *rc0;
    rc.Hq = s->Hq;
    rc.Hkv = s->Hkv;
    rc.D = s->D;
    double maxerr = 0;
    for (int r = 0; r < s->n; ++r) {
        int Lq = s->qlen[r], Lk = s->seq[r];
        double *ref = malloc(sizeof(double) * (size_t)(Lq * s->Hq * s->D + 1));
        ref_attn(&rc, s->Q + (int64_t)s->qsl[r] * s->Hq * s->D, (int64_t)s->Hq * s->D, s->K + s->koff[r],
                 s->V + s->koff[r], Lq, Lk, ref);
        for (int i = 0; i < Lq; ++i)
            for (int h = 0; h < s->Hq; ++h)
                for (int d = 0; d < s->D; ++d) {
                    int64_t oi = (((int64_t)s->qsl[r] + i) * s->Hq + h) * s->D + d;
                    double got = load(s->out, oi, s->dt), want = ref[((int64_t)i * s->Hq + h) * s->D + d];
                    cr_assert(isfinite(got),
                              "%s: req %d row %d head %d dim %d is %g (NaN reached the output?)", what, r, i,
                              h, d, got);
                    double e = fabs(got - want);
                    if (e > maxerr) maxerr = e;
                    cr_assert(
                        e <= atol + 1e-2 * fabs(want) * (s->dt != FA_DTYPE_F32),
                        "%s: req %d (q %d, k %d) row %d head %d dim %d: %.7g, reference %.7g (err %.3g)",
                        what, r, Lq, Lk, i, h, d, got, want, e);
                }
        free(ref);
    }
    for (int64_t i = (int64_t)s->T * s->Hq * s->D; i < (int64_t)s->Tpad * s->Hq * s->D; ++i)
        cr_assert_eq(load(s->out, i, s->dt), 7.0f, "%s: padding row %lld of out was written", what,
                     (long long)(i / ((int64_t)s->Hq * s->D)));
}

static refcfg ref_from_layer(const fa_layer *L, int causal)
{
    refcfg r;
    memset(&r, 0, sizeof r);
    r.scale = L->scale;
    r.softcap = L->softcap;
    r.causal = causal;
    r.wl = L->window.left;
    r.wr = L->window.right;
    r.alibi = L->desc.alibi_slopes;
    r.sinks = L->desc.sinks;
    return r;
}

static fa_backend *cpu(void)
{
    fa_backend *be = NULL;
    ASSERT_OK(fa_cpu_backend_create(&be));
    return be;
}

/* the usual step: builder from cfg, layer from d, plain build (no cascade) of the scenario's batch,
   one forward; returns the builder for the caller to destroy */
/* builder + layer + metadata of the scenario (common prefix P, 0 = none); the caller frees b */
static fa_builder *scen_build(scen *s, fa_backend *be, fa_config cfg, fa_layer_desc d, int causal, int32_t P,
                              fa_layer *L, fa_metadata *md)
{
    fa_builder *b;
    ASSERT_OK(fa_builder_create(be, &cfg, NULL, &b));
    ASSERT_OK(fa_layer_init(L, &d));
    fa_batch bt = scen_batch(s, causal);
    ASSERT_OK(fa_builder_build(b, &bt, P, md));
    return b;
}

static fa_builder *scen_build_forward(scen *s, fa_backend *be, fa_config cfg, fa_layer_desc d, int causal,
                                      int with_kv, fa_layer *L, fa_metadata *md)
{
    fa_builder *b = scen_build(s, be, cfg, d, causal, 0, L, md);
    ASSERT_OK(scen_forward(s, be, L, md, with_kv));
    return b;
}

/* a mixed batch: decodes, prefills with and without context, one long request */
static void mixed_shape(scen *s, int n)
{
    s->n = n;
    for (int r = 0; r < n; ++r) {
        switch (r % 4) {
        case 0:
            s->qlen[r] = 1;
            s->ctx[r] = rng_int(1, 300);
            break; /* decode */
        case 1:
            s->qlen[r] = rng_int(2, 40);
            s->ctx[r] = rng_int(1, 200);
            break; /* chunked prefill */
        case 2:
            s->qlen[r] = rng_int(1, 30);
            s->ctx[r] = 0;
            break; /* fresh prefill */
        default:
            s->qlen[r] = rng_int(1, 5);
            s->ctx[r] = rng_int(300, 700);
            break;
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* plain decoder */

static void plain_case_bs(fa_dtype dt, fa_kv_layout layout, int softcap, int alibi, int sinks, uint64_t seed,
                          int bs)
{
    scen s;
    scen_begin(&s, seed, 8, 2, 64, bs, dt);
    s.layout = layout;
    mixed_shape(&s, 7);
    scen_init(&s);
    static float slopes[8], sk[8];
    for (int h = 0; h < 8; ++h) {
        slopes[h] = 0.02f * (float)(h + 1);
        sk[h] = 2.0f * rng_unif();
    }
    fa_backend *be = cpu();
    fa_layer_desc d = scen_desc(&s);
    if (softcap) d.logits_soft_cap = 5.0f;
    if (alibi) {
        d.alibi_slopes = slopes;
        d.num_alibi_slopes = 8;
    }
    if (sinks) {
        d.sinks = sk;
        d.num_sinks = 8;
    }
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), d, 1, 1, &L, &md);
    refcfg rc = ref_from_layer(&L, 1);
    char what[128];
    snprintf(what, sizeof what, "plain %s layout %d softcap %d alibi %d sinks %d block %d", fa_dtype_name(dt),
             (int)layout, softcap, alibi, sinks, bs);
    scen_check(&s, &rc, tol_for(dt), what);
    scen_end(&s, b, be);
}

static void plain_case(fa_dtype dt, fa_kv_layout layout, int softcap, int alibi, int sinks, uint64_t seed)
{
    plain_case_bs(dt, layout, softcap, alibi, sinks, seed, 16);
}

Test(forward, plain_f32_nhd) { plain_case(FA_DTYPE_F32, FA_LAYOUT_NHD, 0, 0, 0, 101); }
Test(forward, plain_f32_hnd_softcap_sinks) { plain_case(FA_DTYPE_F32, FA_LAYOUT_HND, 1, 0, 1, 102); }
Test(forward, plain_f32_alibi) { plain_case(FA_DTYPE_F32, FA_LAYOUT_NHD, 0, 1, 0, 103); }
Test(forward, plain_f16_all_features) { plain_case(FA_DTYPE_F16, FA_LAYOUT_HND, 1, 1, 1, 104); }
Test(forward, plain_bf16) { plain_case(FA_DTYPE_BF16, FA_LAYOUT_NHD, 0, 0, 1, 105); }
/* any block size >= 1: page size 1 (a radix cache's), an odd size, a size between the kernels' tiles */
Test(forward, plain_block_size_1) { plain_case_bs(FA_DTYPE_F32, FA_LAYOUT_NHD, 0, 0, 0, 106, 1); }
Test(forward, plain_block_size_3_hnd_sinks) { plain_case_bs(FA_DTYPE_BF16, FA_LAYOUT_HND, 1, 0, 1, 107, 3); }
Test(forward, plain_block_size_40_alibi) { plain_case_bs(FA_DTYPE_F16, FA_LAYOUT_NHD, 0, 1, 0, 108, 40); }

/* q/k/v as strided views of one fused QKV buffer (token stride (Hq + 2 Hkv) * D) */
Test(forward, plain_fused_qkv_views)
{
    scen s;
    scen_begin(&s, 108, 8, 2, 32, 16, FA_DTYPE_F16);
    s.layout = FA_LAYOUT_HND;
    s.fused = 1;
    mixed_shape(&s, 6);
    scen_init(&s);
    fa_backend *be = cpu();
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), scen_desc(&s), 1, 1, &L, &md);
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, tol_for(s.dt), "fused qkv");
    scen_end(&s, b, be);
}

/* cross-attention decode step: keys are the cached encoder states, k/v NULL, non-causal */
Test(forward, cross_attention_decode_step)
{
    scen s;
    scen_begin(&s, 109, 8, 4, 32, 16, FA_DTYPE_F32);
    s.cross = 1;
    s.n = 5;
    for (int r = 0; r < s.n; ++r) {
        s.ctx[r] = rng_int(10, 200);
        s.qlen[r] = r == 2 ? rng_int(2, 9) : 1;
    }
    scen_init(&s);
    void *snap = malloc(s.cache_bytes);
    memcpy(snap, s.cache, s.cache_bytes);
    fa_backend *be = cpu();
    fa_layer_desc d = scen_desc(&s);
    d.attn_type = FA_ATTN_ENCODER_DECODER;
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), d, 0, 0, &L, &md);
    cr_assert(memcmp(snap, s.cache, s.cache_bytes) == 0,
              "cross-attention step with k/v NULL wrote the cache");
    refcfg rc = ref_from_layer(&L, 0);
    scen_check(&s, &rc, 2e-5, "cross attention");
    free(snap);
    scen_end(&s, b, be);
}

/* the new tokens were written where the slot mapping says, in the cache's layout */
Test(forward, cache_write_lands_at_slots)
{
    scen s;
    scen_begin(&s, 106, 4, 4, 32, 32, FA_DTYPE_F16);
    s.layout = FA_LAYOUT_HND;
    mixed_shape(&s, 5);
    scen_init(&s);
    fa_backend *be = cpu();
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), scen_desc(&s), 1, 1, &L, &md);
    for (int t = 0; t < s.T; ++t)
        for (int h = 0; h < s.Hkv; ++h)
            for (int dd = 0; dd < s.D; ++dd) {
                int64_t blk = s.slots[t] / s.bs;
                int off = (int)(s.slots[t] % s.bs);
                cr_assert_eq(load(s.cache, cache_index(&s, 0, blk, off, h, dd), s.cdt),
                             s.Knew[((int64_t)t * s.Hkv + h) * s.D + dd]);
                cr_assert_eq(load(s.cache, cache_index(&s, 1, blk, off, h, dd), s.cdt),
                             s.Vnew[((int64_t)t * s.Hkv + h) * s.D + dd]);
            }
    /* the two NaN blocks were never written (padding rows have slot -1) */
    for (int blk = 0; blk < 2; ++blk)
        for (int off = 0; off < s.bs; ++off)
            cr_assert(isnan(load(s.cache, cache_index(&s, 0, blk, off, 0, 0), s.cdt)), "NaN block %d written",
                      blk);
    scen_end(&s, b, be);
}

/* long contexts so the builder splits the keys (exercises the split-KV combine) */
Test(forward, long_context_split_kv)
{
    scen s;
    scen_begin(&s, 107, 8, 1, 64, 16, FA_DTYPE_F32);
    s.n = 2;
    s.qlen[0] = 1;
    s.ctx[0] = 6000;
    s.qlen[1] = 2;
    s.ctx[1] = 3001;
    scen_init(&s);
    fa_backend *be = cpu();
    static float sk[8];
    for (int h = 0; h < 8; ++h) sk[h] = 3.0f * rng_unif();
    fa_layer_desc d = scen_desc(&s);
    d.sinks = sk;
    d.num_sinks = 8;
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build(&s, be, scen_cfg(&s), d, 1, 0, &L, &md);
    cr_assert_gt(md.num_splits, 1, "the test needs a split plan (got %d splits)", md.num_splits);
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, 2e-5, "split-KV");
    scen_end(&s, b, be);
}

/* ---------------------------------------------------------------------------------------- */
/* sliding window: keys masked for every query hold NaN */

Test(forward, sliding_window_layer)
{
    scen s;
    scen_begin(&s, 201, 8, 4, 32, 16, FA_DTYPE_F32);
    mixed_shape(&s, 8);
    scen_init(&s);
    const int W = 37;
    /* keys before the first query's window are masked for all of the request's queries */
    for (int r = 0; r < s.n; ++r) {
        int first_allowed = s.ctx[r] - (W - 1);
        for (int p = 0; p < first_allowed; ++p) {
            int64_t blk = s.bt[r * s.bts + p / s.bs];
            for (int h = 0; h < s.Hkv; ++h)
                for (int dd = 0; dd < s.D; ++dd) {
                    store(s.cache, cache_index(&s, 0, blk, p % s.bs, h, dd), s.cdt, NAN);
                    store(s.cache, cache_index(&s, 1, blk, p % s.bs, h, dd), s.cdt, NAN);
                }
        }
    }
    fa_backend *be = cpu();
    fa_config cfg = scen_cfg(&s);
    fa_builder *b;
    ASSERT_OK(fa_builder_create(be, &cfg, NULL, &b));
    fa_layer_desc d = scen_desc(&s);
    d.sliding_window = W;
    fa_layer L;
    ASSERT_OK(fa_layer_init(&L, &d));
    ASSERT_OK(fa_builder_set_layers(b, &L, 1));
    fa_batch bt = scen_batch(&s, 1);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    refcfg rc = ref_from_layer(&L, 1);
    cr_assert_eq(rc.wl, W - 1);
    scen_check(&s, &rc, 2e-5, "sliding window");
    scen_end(&s, b, be);
}

/* ---------------------------------------------------------------------------------------- */
/* cascade == plain */

static void cascade_case_bs(fa_dtype dt, int sinks, int softcap, uint64_t seed, int bs)
{
    scen s;
    scen_begin(&s, seed, 8, 2, 64, bs, dt);
    s.n = 10;
    s.shared_blocks = 80 / bs; /* 80 shared tokens */
    for (int r = 0; r < s.n; ++r) {
        s.qlen[r] = (r % 3 == 0) ? rng_int(2, 20) : 1;
        s.ctx[r] = 80 + rng_int(0, 200);
    }
    scen_init(&s);
    static float sk[8];
    for (int h = 0; h < 8; ++h) sk[h] = 2.0f * rng_unif();
    fa_backend *be = cpu();
    fa_layer_desc d = scen_desc(&s);
    if (sinks) {
        d.sinks = sk;
        d.num_sinks = 8;
    }
    if (softcap) d.logits_soft_cap = 4.0f;
    fa_layer L;
    fa_metadata md;
    /* cascade with P = 64 (4 of the 5 shared blocks of 16) */
    fa_builder *b = scen_build(&s, be, scen_cfg(&s), d, 1, 64, &L, &md);
    cr_assert_eq(md.use_cascade, 1);
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, tol_for(dt), "cascade");
    size_t ob = s.out_bytes;
    void *cas = malloc(ob);
    memcpy(cas, s.out, ob);
    /* plain on the same batch (the cache already holds the new tokens; writing them again is idempotent) */
    fa_batch bt = scen_batch(&s, 1);
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    cr_assert_eq(md.use_cascade, 0);
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    scen_check(&s, &rc, tol_for(dt), "plain (cascade control)");
    double maxd = 0;
    for (int64_t i = 0; i < (int64_t)s.T * s.Hq * s.D; ++i) {
        double e = fabs((double)load(cas, i, dt) - (double)load(s.out, i, dt));
        if (e > maxd) maxd = e;
    }
    cr_assert_leq(maxd, dt == FA_DTYPE_F32 ? 1e-5 : 2 * tol_for(dt), "cascade vs plain differ by %g", maxd);
    /* P = 80: all five shared blocks */
    ASSERT_OK(fa_builder_build(b, &bt, 80, &md));
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    scen_check(&s, &rc, tol_for(dt), "cascade P = 80");
    free(cas);
    scen_end(&s, b, be);
}

static void cascade_case(fa_dtype dt, int sinks, int softcap, uint64_t seed)
{
    cascade_case_bs(dt, sinks, softcap, seed, 16);
}

Test(forward, cascade_equals_plain_f32) { cascade_case(FA_DTYPE_F32, 0, 0, 301); }
Test(forward, cascade_equals_plain_block_size_1) { cascade_case_bs(FA_DTYPE_F32, 1, 0, 304, 1); }
Test(forward, cascade_equals_plain_sinks_softcap) { cascade_case(FA_DTYPE_F32, 1, 1, 302); }
Test(forward, cascade_equals_plain_bf16) { cascade_case(FA_DTYPE_BF16, 1, 0, 303); }

/* ---------------------------------------------------------------------------------------- */
/* chunked local attention: query at p sees keys in [C*floor(p/C), p] */

Test(forward, chunked_local)
{
    scen s;
    scen_begin(&s, 401, 4, 2, 32, 16, FA_DTYPE_F32);
    mixed_shape(&s, 9);
    s.qlen[1] = 10;
    s.ctx[1] = 54; /* seq 64: ends on a chunk boundary (last chunk full) */
    s.qlen[3] = 32;
    s.ctx[3] = 96; /* queries fill exactly one chunk */
    s.qlen[5] = 70;
    s.ctx[5] = 5; /* queries span three chunks */
    scen_init(&s);
    const int C = 32;
    /* keys before the first query's chunk are masked for every query: NaN them */
    for (int r = 0; r < s.n; ++r) {
        int first_chunk = (s.ctx[r] / C) * C;
        for (int p = 0; p < first_chunk; ++p) {
            int64_t blk = s.bt[r * s.bts + p / s.bs];
            for (int h = 0; h < s.Hkv; ++h)
                for (int dd = 0; dd < s.D; ++dd) {
                    store(s.cache, cache_index(&s, 0, blk, p % s.bs, h, dd), s.cdt, NAN);
                    store(s.cache, cache_index(&s, 1, blk, p % s.bs, h, dd), s.cdt, NAN);
                }
        }
    }
    fa_backend *be = cpu();
    fa_config cfg = scen_cfg(&s);
    cfg.scheduler.attention_chunk_size = C;
    fa_layer_desc d = scen_desc(&s);
    d.attention_chunk_size = C;
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build(&s, be, cfg, d, 1, 0, &L, &md);
    cr_assert_eq(md.has_local, 1);
    ASSERT_OK(scen_forward(&s, be, &L, &md, 1));
    refcfg rc = ref_from_layer(&L, 1);
    rc.chunk = C;
    scen_check(&s, &rc, 2e-5, "chunked local");
    scen_end(&s, b, be);
}

Test(forward, chunked_local_metadata_plain_layer)
{
    /* a layer without a chunk size on chunked-local metadata attends the whole context */
    scen s;
    scen_begin(&s, 402, 4, 2, 32, 16, FA_DTYPE_F32);
    mixed_shape(&s, 6);
    scen_init(&s);
    fa_backend *be = cpu();
    fa_config cfg = scen_cfg(&s);
    cfg.scheduler.attention_chunk_size = 64;
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, cfg, scen_desc(&s), 1, 1, &L, &md);
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, 2e-5, "plain layer, local metadata");
    scen_end(&s, b, be);
}

/* ---------------------------------------------------------------------------------------- */
/* fp8 caches */

static void fp8_case(fa_cache_dtype cd, fa_dtype storage, fa_dtype act, uint64_t seed)
{
    scen s;
    scen_begin(&s, seed, 8, 2, 64, 16, act);
    s.cache_dtype = cd;
    s.cdt = storage;
    s.k_scale = 0.05f;
    s.v_scale = 0.02f;
    mixed_shape(&s, 6);
    scen_init(&s);
    fa_backend *be = cpu();
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), scen_desc(&s), 1, 1, &L, &md);
    /* the new tokens are stored as saturate(x / scale) */
    for (int t = 0; t < s.T; ++t)
        for (int h = 0; h < s.Hkv; ++h)
            for (int dd = 0; dd < s.D; ++dd) {
                int64_t blk = s.slots[t] / s.bs;
                int off = (int)(s.slots[t] % s.bs);
                int64_t ti = ((int64_t)t * s.Hkv + h) * s.D + dd;
                uint8_t kb = ((uint8_t *)s.cache)[cache_index(&s, 0, blk, off, h, dd)];
                uint8_t vb = ((uint8_t *)s.cache)[cache_index(&s, 1, blk, off, h, dd)];
                cr_assert_eq(kb, fa_cpu_float_to_fp8(s.Knew[ti] / s.k_scale, storage), "k byte at token %d",
                             t);
                cr_assert_eq(vb, fa_cpu_float_to_fp8(s.Vnew[ti] / s.v_scale, storage), "v byte at token %d",
                             t);
            }
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, tol_for(act), "fp8 cache");
    scen_end(&s, b, be);
}

Test(forward, fp8_e4m3_cache) { fp8_case(FA_CACHE_FP8, FA_DTYPE_FP8_E4M3, FA_DTYPE_F32, 501); }
Test(forward, fp8_e5m2_cache) { fp8_case(FA_CACHE_FP8_E5M2, FA_DTYPE_FP8_E5M2, FA_DTYPE_F32, 502); }
Test(forward, fp8_e4m3_cache_bf16) { fp8_case(FA_CACHE_FP8_E4M3, FA_DTYPE_FP8_E4M3, FA_DTYPE_BF16, 503); }

/* ---------------------------------------------------------------------------------------- */
/* kv-sharing, profiling, k/v NULL */

Test(forward, kv_sharing_skips_the_write)
{
    scen s;
    scen_begin(&s, 601, 8, 2, 32, 16, FA_DTYPE_F32);
    mixed_shape(&s, 6);
    scen_init(&s);
    /* the owning layer already wrote this step's tokens: put them in the cache ourselves ... */
    for (int t = 0; t < s.T; ++t)
        for (int h = 0; h < s.Hkv; ++h)
            for (int dd = 0; dd < s.D; ++dd) {
                int64_t blk = s.slots[t] / s.bs;
                int off = (int)(s.slots[t] % s.bs);
                int64_t ti = ((int64_t)t * s.Hkv + h) * s.D + dd;
                store(s.cache, cache_index(&s, 0, blk, off, h, dd), s.cdt, s.Knew[ti]);
                store(s.cache, cache_index(&s, 1, blk, off, h, dd), s.cdt, s.Vnew[ti]);
            }
    /* ... and hand the sharing layer different k/v, which must not be written */
    for (int64_t i = 0; i < (int64_t)s.T * s.Hkv * s.D; ++i) {
        store(s.k, i, s.dt, 100.0f + rng_unif());
        store(s.v, i, s.dt, -100.0f + rng_unif());
    }
    void *snap = malloc(s.cache_bytes);
    memcpy(snap, s.cache, s.cache_bytes);
    fa_backend *be = cpu();
    fa_layer_desc d = scen_desc(&s);
    d.kv_sharing = 1;
    fa_layer L;
    fa_metadata md;
    fa_builder *b = scen_build_forward(&s, be, scen_cfg(&s), d, 1, 1, &L, &md);
    cr_assert(memcmp(snap, s.cache, s.cache_bytes) == 0, "a kv-sharing layer wrote the cache");
    refcfg rc = ref_from_layer(&L, 1);
    scen_check(&s, &rc, 2e-5, "kv-sharing");
    /* k/v NULL on an ordinary layer: an error (it used to return OK without writing the new
       tokens, a wrong answer), and nothing written */
    fa_layer_desc d2 = scen_desc(&s);
    ASSERT_OK(fa_layer_init(&L, &d2));
    cr_assert_eq(scen_forward(&s, be, &L, &md, 0), FA_ERR_INVALID_ARG);
    cr_assert(strstr(fa_last_error(), "k and v are NULL") != NULL, "%s", fa_last_error());
    cr_assert(memcmp(snap, s.cache, s.cache_bytes) == 0, "k/v NULL: the cache was written");
    free(snap);
    scen_end(&s, b, be);
}

/* ---------------------------------------------------------------------------------------- */
/* work counters (fa_attn_args.work_counters): the builder's FA_WORK_COUNTERS words, zero after
   creation and after every step; every attention call gets them (the CPU backend leaves them) */

static const fa_backend *WC_INNER; /* the CPU backend under the observing wrapper */
static const int32_t *WC_WANT; /* the builder's counters */
static int WC_CALLS, WC_SPLITS;

static fa_status wc_attention(void *ctx, const fa_attn_args *a)
{
    (void)ctx;
    cr_assert_eq(a->work_counters, WC_WANT, "attention call %d: work_counters %p, the builder's %p", WC_CALLS,
                 (void *)a->work_counters, (const void *)WC_WANT);
    for (int w = 0; w < FA_WORK_COUNTERS; ++w) /* CPU: device memory is host memory */
        cr_assert_eq(a->work_counters[w], 0, "attention call %d: work_counters[%d] = %d on entry", WC_CALLS,
                     w, a->work_counters[w]);
    WC_CALLS++;
    WC_SPLITS += a->num_splits > 1;
    return WC_INNER->ops.attention(WC_INNER->ctx, a);
}

/* the counters read back through the backend's copy (device to host) */
static void wc_expect_zero(const fa_backend *be, const fa_builder *b, const char *when)
{
    int32_t h[FA_WORK_COUNTERS];
    memset(h, 0x5c, sizeof h);
    ASSERT_OK(be->ops.copy(be->ctx, h, b->work_counters, sizeof h, FA_COPY_DEVICE_TO_HOST));
    for (int w = 0; w < FA_WORK_COUNTERS; ++w)
        cr_assert_eq(h[w], 0, "%s: work_counters[%d] = %d", when, w, h[w]);
}

Test(forward, work_counters_zero_across_steps)
{
    scen s;
    scen_begin(&s, 611, 8, 2, 64, 16, FA_DTYPE_F32);
    s.n = 6;
    s.shared_blocks = 5; /* 80 shared tokens: a cascade step */
    for (int r = 0; r < s.n; ++r) {
        s.qlen[r] = (r % 3 == 0) ? rng_int(2, 20) : 1;
        s.ctx[r] = 80 + rng_int(0, 200);
    }
    s.ctx[1] = 3000; /* a long decode row: a split step */
    scen_init(&s);
    fa_backend *inner = cpu();
    fa_backend be = *inner;
    WC_INNER = inner;
    be.ops.attention = wc_attention;
    fa_config cfg = scen_cfg(&s);
    cfg.scheduler.attention_chunk_size = 32;
    fa_layer_desc d = scen_desc(&s), dl = d;
    dl.attention_chunk_size = 32;
    fa_layer L, Ll;
    fa_metadata md;
    fa_builder *b = scen_build(&s, &be, cfg, d, 1, 64, &L, &md), *b2 = NULL;
    ASSERT_OK(fa_layer_init(&Ll, &dl));
    ASSERT_OK(fa_builder_create(&be, &cfg, NULL, &b2));
    cr_assert_not_null(b->work_counters);
    cr_assert_not_null(b2->work_counters);
    cr_assert_neq(b->work_counters, b2->work_counters, "two builders share their work counters");
    cr_assert_eq((uintptr_t)b->work_counters % 16, 0);
    wc_expect_zero(&be, b, "after create");
    wc_expect_zero(&be, b2, "after create (second builder)");
    WC_WANT = b->work_counters;
    cr_assert_eq(md.use_cascade, 1);
    cr_assert_eq(md.has_local, 1);
    fa_batch bt = scen_batch(&s, 1);
    int want = 0;
    for (int step = 0; step < 3; ++step) {
        if (step > 0) ASSERT_OK(fa_builder_build(b, &bt, step == 1 ? 0 : 64, &md));
        const int calls = WC_CALLS;
        want += (md.use_cascade ? 2 : 1) + 1;
        ASSERT_OK(scen_forward(&s, &be, &L, &md, 1)); /* cascade (steps 0, 2) or plain (1) */
        cr_assert_eq(WC_CALLS - calls, md.use_cascade ? 2 : 1, "step %d: %d attention calls", step,
                     WC_CALLS - calls);
        wc_expect_zero(&be, b, "after a full-attention layer");
        ASSERT_OK(scen_forward(&s, &be, &Ll, &md, 1)); /* chunked local (the same cache write) */
        wc_expect_zero(&be, b, "after a chunked-local layer");
    }
    cr_assert_eq(WC_CALLS, want, "attention calls: %d, expected %d", WC_CALLS, want);
    cr_assert_gt(WC_SPLITS, 0, "no call split its keys: the split path went unchecked");
    /* the last step's output is right (the counters changed nothing) */
    refcfg rc = ref_from_layer(&Ll, 1);
    rc.chunk = 32;
    scen_check(&s, &rc, 2e-5, "chunked local after the counters' steps");
    wc_expect_zero(&be, b2, "the second builder, after the first one's steps");
    fa_builder_destroy(b2);
    scen_end(&s, b, inner);
}

Test(forward, profiling_run_zeroes_out)
{
    rng_seed(602);
    fa_backend *be = cpu();
    const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    for (int i = 0; i < 3; ++i) {
        fa_layer_desc d;
        memset(&d, 0, sizeof d);
        d.num_heads_q = 6;
        d.num_heads_kv = 2;
        d.head_size = 40;
        d.dtype = dts[i];
        fa_layer L;
        ASSERT_OK(fa_layer_init(&L, &d));
        size_t es = fa_dtype_size(dts[i]);
        void *o = malloc(37 * 6 * 40 * es), *q = malloc(37 * 6 * 40 * es);
        for (int64_t j = 0; j < 37 * 6 * 40; ++j) {
            store(o, j, dts[i], rng_unif() + 2.0f);
            store(q, j, dts[i], rng_unif());
        }
        fa_tensor to = t3(o, dts[i], 37, 6, 40), tq = t3(q, dts[i], 37, 6, 40);
        ASSERT_OK(fa_forward_profile(&L, be, &to));
        cr_assert_eq(fa_forward(&L, be, &tq, NULL, NULL, NULL, NULL, &to), FA_ERR_INVALID_ARG,
                     "md NULL is an error (it used to run the profiling path silently)");
        for (int64_t j = 0; j < 37 * 6 * 40; ++j)
            cr_assert_eq(load(o, j, dts[i]), 0.0f, "%s: out[%lld] = %g after a profiling run",
                         fa_dtype_name(dts[i]), (long long)j, (double)load(o, j, dts[i]));
        /* a strided out view (a slice of a wider buffer): only the view is zeroed */
        for (int64_t j = 0; j < 37 * 6 * 40; ++j) store(o, j, dts[i], 3.0f);
        fa_tensor sv = t3(o, dts[i], 18, 6, 40);
        sv.stride[0] = 2 * 6 * 40; /* every other row */
        ASSERT_OK(fa_forward_profile(&L, be, &sv));
        for (int64_t r = 0; r < 36; ++r)
            for (int64_t j = 0; j < 6 * 40; ++j)
                cr_assert_eq(load(o, r * 240 + j, dts[i]), (r % 2 == 0) ? 0.0f : 3.0f,
                             "strided profiling row %lld", (long long)r);
        free(o);
        free(q);
    }
    fa_cpu_backend_destroy(be);
}

/* ---------------------------------------------------------------------------------------- */
/* encoder and encoder-only: dense over q/k/v, no cache */

static void encoder_case(fa_attn_type type, int W, fa_dtype dt, uint64_t seed)
{
    rng_seed(seed);
    const int n = 5, Hq = 6, Hkv = 3, D = 48;
    int32_t qsl[6], seq[5], bt[5 * 4];
    int64_t sl[128];
    qsl[0] = 0;
    for (int r = 0; r < n; ++r) {
        int l = rng_int(1, 25);
        qsl[r + 1] = qsl[r] + l;
        seq[r] = l;
    }
    int T = qsl[n], Tpad = T + 2;
    for (int i = 0; i < 20; ++i) bt[i] = i;
    for (int i = 0; i < Tpad; ++i) sl[i] = -1;
    size_t es = fa_dtype_size(dt);
    float *Q = malloc(sizeof(float) * (size_t)Tpad * Hq * D),
          *K = malloc(sizeof(float) * (size_t)Tpad * Hkv * D);
    float *V = malloc(sizeof(float) * (size_t)Tpad * Hkv * D);
    void *q = malloc((size_t)Tpad * Hq * D * es), *k = malloc((size_t)Tpad * Hkv * D * es);
    void *v = malloc((size_t)Tpad * Hkv * D * es), *o = malloc((size_t)Tpad * Hq * D * es);
    for (int64_t i = 0; i < (int64_t)Tpad * Hq * D; ++i) {
        Q[i] = round_to(dt, rng_unif());
        store(q, i, dt, Q[i]);
        store(o, i, dt, 7.0f);
    }
    for (int64_t i = 0; i < (int64_t)Tpad * Hkv * D; ++i) {
        K[i] = round_to(dt, rng_unif());
        V[i] = round_to(dt, rng_unif());
        int pad = i >= (int64_t)T * Hkv * D;
        store(k, i, dt, pad ? NAN : K[i]);
        store(v, i, dt, pad ? NAN : V[i]);
    }
    /* a cache tensor that must stay untouched */
    uint16_t *cache = malloc(2 * 4 * 16 * Hkv * D * sizeof(uint16_t));
    for (int i = 0; i < 2 * 4 * 16 * Hkv * D; ++i) cache[i] = (uint16_t)(i * 7);
    uint16_t *snap = malloc(2 * 4 * 16 * Hkv * D * sizeof(uint16_t));
    memcpy(snap, cache, 2 * 4 * 16 * Hkv * D * sizeof(uint16_t));
    int64_t cs[5] = {2, 4, 16, Hkv, D};
    fa_tensor tc = fa_tensor_make(cache, dt, 5, cs);

    fa_backend *be = cpu();
    fa_config cfg = test_cfg(Hq, Hkv, D, dt, 0, 0, 0);
    fa_builder *b;
    ASSERT_OK(fa_builder_create(be, &cfg, NULL, &b));
    fa_layer_desc d = test_desc(Hq, Hkv, D, dt);
    d.attn_type = type;
    d.sliding_window = W;
    fa_layer L;
    ASSERT_OK(fa_layer_init(&L, &d));
    fa_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = n;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.block_table = bt;
    batch.block_table_stride = 4;
    batch.block_table_host = bt;
    batch.slot_mapping = sl;
    batch.causal = 0;
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &batch, 0, &md));
    fa_tensor tq = t3(q, dt, Tpad, Hq, D), tk = t3(k, dt, Tpad, Hkv, D), tv = t3(v, dt, Tpad, Hkv, D),
              to = t3(o, dt, Tpad, Hq, D);
    ASSERT_OK(fa_forward(&L, be, &tq, &tk, &tv, &tc, &md, &to));
    cr_assert(memcmp(snap, cache, 2 * 4 * 16 * Hkv * D * sizeof(uint16_t)) == 0,
              "encoder attention touched the cache");
    refcfg rc;
    memset(&rc, 0, sizeof rc);
    rc.Hq = Hq;
    rc.Hkv = Hkv;
    rc.D = D;
    rc.scale = L.scale;
    rc.causal = 0;
    rc.wl = W > 0 ? W - 1 : -1;
    rc.wr = W > 0 ? (type == FA_ATTN_ENCODER_ONLY ? W - 1 : 0) : -1;
    for (int r = 0; r < n; ++r) {
        int l = seq[r];
        double *ref = malloc(sizeof(double) * (size_t)l * Hq * D);
        ref_attn(&rc, Q + (int64_t)qsl[r] * Hq * D, (int64_t)Hq * D, K + (int64_t)qsl[r] * Hkv * D,
                 V + (int64_t)qsl[r] * Hkv * D, l, l, ref);
        for (int64_t i = 0; i < (int64_t)l * Hq * D; ++i) {
            double got = load(o, (int64_t)qsl[r] * Hq * D + i, dt);
            cr_assert(isfinite(got));
            cr_assert_leq(fabs(got - ref[i]), tol_for(dt) + 1e-2 * fabs(ref[i]) * (dt != FA_DTYPE_F32),
                          "encoder type %d W %d: req %d elem %lld: %g vs %g", (int)type, W, r, (long long)i,
                          got, ref[i]);
        }
        free(ref);
    }
    for (int64_t i = (int64_t)T * Hq * D; i < (int64_t)Tpad * Hq * D; ++i)
        cr_assert_eq(load(o, i, dt), 7.0f, "padding rows written");
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
    free(Q);
    free(K);
    free(V);
    free(q);
    free(k);
    free(v);
    free(o);
    free(cache);
    free(snap);
}

Test(forward, encoder) { encoder_case(FA_ATTN_ENCODER, 0, FA_DTYPE_F32, 701); }
Test(forward, encoder_window_left_only) { encoder_case(FA_ATTN_ENCODER, 6, FA_DTYPE_F32, 702); }
Test(forward, encoder_only) { encoder_case(FA_ATTN_ENCODER_ONLY, 0, FA_DTYPE_F16, 703); }
Test(forward, encoder_only_window_symmetric) { encoder_case(FA_ATTN_ENCODER_ONLY, 6, FA_DTYPE_F32, 704); }

/* ---------------------------------------------------------------------------------------- */
/* DCP: N fake ranks, each with its own cache and thread, == one rank with all heads */

typedef struct dcp_rank {
    int rank, N, I, H, Hkv, with_sinks, fused;
    const scen *g; /* the global problem (Hq = N*H heads, Hkv 1) */
    fa_comm *comm;
    const float *sinks; /* this rank's [H] */
    int32_t *bt; /* shared block table [n, bts] (DCP virtual blocks) */
    int64_t bts;
    int32_t maxb;
    int64_t NB;
    void *cache, *q, *out, *qkv;
    int64_t *slots;
    int fail; /* 1: this rank passes q with token stride 0 (caught by its checks) */
    fa_status st;
    char err[256];
} dcp_rank;

static void *dcp_rank_main(void *p)
{
    dcp_rank *a = (dcp_rank *)p;
    const scen *g = a->g;
    fa_backend *be = NULL;
    fa_builder *b = NULL;
    a->st = fa_cpu_backend_create(&be);
    if (a->st != FA_OK) goto done;
    fa_config c = test_cfg(a->H, a->Hkv, g->D, g->dt, g->bs, 64, 4096);
    c.parallel.dcp_world_size = a->N;
    c.parallel.dcp_rank = a->rank;
    c.parallel.cp_kv_cache_interleave_size = a->I;
    a->st = fa_builder_create(be, &c, a->comm, &b);
    if (a->st != FA_OK) goto done;
    fa_layer_desc d = test_desc(a->H, a->Hkv, g->D, g->dt);
    d.dcp_world_size = a->N;
    if (a->with_sinks) {
        d.sinks = a->sinks;
        d.num_sinks = a->H;
    }
    fa_layer L;
    a->st = fa_layer_init(&L, &d);
    if (a->st != FA_OK) goto done;
    fa_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = g->n;
    batch.num_actual_tokens = g->T;
    batch.query_start_loc = g->qsl;
    batch.seq_lens = g->seq;
    batch.block_table = a->bt;
    batch.block_table_stride = a->bts;
    batch.max_blocks = a->maxb;
    batch.block_table_host = a->bt;
    batch.slot_mapping = a->slots;
    batch.causal = 1;
    fa_metadata md;
    a->st = fa_builder_build(b, &batch, 0, &md);
    if (a->st != FA_OK) goto done;
    fa_tensor q = t3(a->q, g->dt, g->Tpad, a->H, g->D), o = t3(a->out, g->dt, g->Tpad, a->H, g->D);
    fa_tensor k = t3(g->k, g->dt, g->Tpad, a->Hkv, g->D), v = t3(g->v, g->dt, g->Tpad, a->Hkv, g->D);
    if (a->fused) { /* q, k, v: views of one [T, H + 2 Hkv, D] buffer */
        size_t es = fa_dtype_size(g->dt);
        q.data = a->qkv;
        k.data = (char *)a->qkv + (size_t)a->H * g->D * es;
        v.data = (char *)a->qkv + (size_t)(a->H + a->Hkv) * g->D * es;
        q.stride[0] = k.stride[0] = v.stride[0] = (int64_t)(a->H + 2 * a->Hkv) * g->D;
    }
    if (a->fail) q.stride[0] = 0; /* every token would read one row */
    fa_tensor kc;
    memset(&kc, 0, sizeof kc);
    kc.data = a->cache;
    kc.dtype = g->dt;
    kc.rank = 5;
    a->st = fa_kv_cache_shape(a->NB, g->bs, a->Hkv, g->D, kc.shape);
    if (a->st == FA_OK) a->st = fa_kv_cache_strides(FA_LAYOUT_NHD, a->NB, g->bs, a->Hkv, g->D, kc.stride);
    if (a->st == FA_OK) a->st = fa_forward(&L, be, &q, &k, &v, &kc, &md, &o);
done:
    snprintf(a->err, sizeof a->err, "%s", fa_last_error());
    if (b) fa_builder_destroy(b);
    if (be) fa_cpu_backend_destroy(be);
    return NULL;
}

static void dcp_case_ex(int N, int I, int with_sinks, fa_dtype dt, int Hkv, int fused, uint64_t seed,
                        int fail_rank);
static void dcp_case(int N, int I, int with_sinks, fa_dtype dt, int Hkv, int fused, uint64_t seed)
{
    dcp_case_ex(N, I, with_sinks, dt, Hkv, fused, seed, -1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void dcp_case_ex(int N, int I, int with_sinks, fa_dtype dt, int Hkv, int fused, uint64_t seed,
                        int fail_rank)
{
    rng_seed(seed);
    const int H = 4; /* local query heads per rank */
    /* the global problem: N*H query heads; the Hkv KV heads are replicated on every rank, and
       rank r's local head h reads KV head h / (H / Hkv) as it would without DCP */
    scen g;
    memset(&g, 0, sizeof g);
    g.Hq = N * H;
    g.Hkv = Hkv;
    g.D = 32;
    g.bs = 16;
    g.dt = dt;
    mixed_shape(&g, 8);
    g.qlen[2] = 1;
    g.ctx[2] = 0; /* a request without context: its context part is empty */
    scen_init(&g);
    static float sinks[64];
    for (int h = 0; h < N * H; ++h) sinks[h] = 2.0f * rng_unif();
    /* one rank, all heads: the plain path on g's cache (g.cache holds the context); with one
       KV head this is exactly the DCP group's model */
    fa_backend *be = cpu();
    fa_layer_desc d1 = scen_desc(&g);
    if (with_sinks) {
        d1.sinks = sinks;
        d1.num_sinks = N * H;
    }
    fa_layer L1;
    fa_metadata md1;
    fa_builder *b1 = scen_build_forward(&g, be, scen_cfg(&g), d1, 1, 1, &L1, &md1);
    refcfg rc = ref_from_layer(&L1, 1);
    if (Hkv == 1) scen_check(&g, &rc, tol_for(dt), "DCP control: one rank");
    fa_builder_destroy(b1);
    fa_cpu_backend_destroy(be);

    /* DCP: a block table of virtual blocks (bs*N tokens each), one cache per rank */
    int32_t maxb = 1;
    for (int r = 0; r < g.n; ++r) {
        int nb = (g.seq[r] + g.bs * N - 1) / (g.bs * N);
        if (nb > maxb) maxb = nb;
    }
    maxb += 1;
    int64_t bts = maxb + 2, NB = (int64_t)g.n * maxb + 4;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(g.n * bts));
    for (int r = 0; r < g.n; ++r)
        for (int c = 0; c < bts; ++c) bt[r * bts + c] = (c < maxb) ? (int32_t)(NB - 1 - (r * maxb + c)) : 0;
    fa_comm *comms = NULL;
    ASSERT_OK(fa_fake_comm_group_create(N, &comms));
    dcp_rank ranks[8];
    void *args[8];
    size_t es = fa_dtype_size(dt);
    int64_t celems = 2 * NB * g.bs * Hkv * g.D;
    /* all positions of every request (context and new): req / position lists for the slot mapping */
    int32_t tot = 0;
    for (int r = 0; r < g.n; ++r) tot += g.seq[r];
    int32_t *req_of = malloc(sizeof(int32_t) * (size_t)tot), *pos = malloc(sizeof(int32_t) * (size_t)tot);
    int64_t *sm = malloc(sizeof(int64_t) * (size_t)tot);
    tot = 0;
    for (int r = 0; r < g.n; ++r)
        for (int p = 0; p < g.seq[r]; ++p, ++tot) {
            req_of[tot] = r;
            pos[tot] = p;
        }
    for (int rk = 0; rk < N; ++rk) {
        dcp_rank *a = &ranks[rk];
        memset(a, 0, sizeof *a);
        a->rank = rk;
        a->N = N;
        a->I = I;
        a->H = H;
        a->Hkv = Hkv;
        a->with_sinks = with_sinks;
        a->g = &g;
        a->fused = fused;
        a->comm = &comms[rk];
        a->sinks = sinks + rk * H;
        a->bt = bt;
        a->bts = bts;
        a->maxb = maxb;
        a->NB = NB;
        a->cache = malloc((size_t)celems * es);
        fill_nan(a->cache, celems, dt);
        /* this rank's slots for every position; write the context tokens it owns */
        ASSERT_OK(fa_dcp_slot_mapping(bt, bts, maxb, g.bs, req_of, pos, tot, N, rk, I, sm));
        a->slots = malloc(sizeof(int64_t) * (size_t)g.Tpad);
        for (int t = 0; t < g.Tpad; ++t) a->slots[t] = -1;
        int64_t cstr[5];
        ASSERT_OK(fa_kv_cache_strides(FA_LAYOUT_NHD, NB, g.bs, Hkv, g.D, cstr));
        int32_t idx = 0, t = 0;
        for (int r = 0; r < g.n; ++r)
            for (int p = 0; p < g.seq[r]; ++p, ++idx) {
                if (p >= g.ctx[r]) {
                    a->slots[t++] = sm[idx];
                    continue;
                } /* new token: fa_forward writes it */
                if (sm[idx] < 0) continue;
                int64_t blk = sm[idx] / g.bs, off = sm[idx] % g.bs;
                for (int h = 0; h < Hkv; ++h)
                    for (int dd = 0; dd < g.D; ++dd) {
                        int64_t li = g.koff[r] + ((int64_t)p * Hkv + h) * g.D + dd;
                        store(a->cache, blk * cstr[1] + off * cstr[2] + h * cstr[3] + dd, dt, g.K[li]);
                        store(a->cache, cstr[0] + blk * cstr[1] + off * cstr[2] + h * cstr[3] + dd, dt,
                              g.V[li]);
                    }
            }
        /* this rank's query heads */
        a->q = malloc((size_t)g.Tpad * H * g.D * es);
        a->out = malloc((size_t)g.Tpad * H * g.D * es);
        for (int tt = 0; tt < g.Tpad; ++tt)
            for (int h = 0; h < H; ++h)
                for (int dd = 0; dd < g.D; ++dd) {
                    store(a->q, ((int64_t)tt * H + h) * g.D + dd, dt,
                          g.Q[((int64_t)tt * g.Hq + rk * H + h) * g.D + dd]);
                    store(a->out, ((int64_t)tt * H + h) * g.D + dd, dt, 7.0f);
                }
        if (fused) {
            int64_t W = (int64_t)(H + 2 * Hkv) * g.D;
            a->qkv = malloc((size_t)(g.Tpad * W) * es);
            for (int tt = 0; tt < g.Tpad; ++tt) {
                for (int64_t i = 0; i < (int64_t)H * g.D; ++i)
                    store(a->qkv, tt * W + i, dt, load(a->q, (int64_t)tt * H * g.D + i, dt));
                for (int64_t i = 0; i < (int64_t)Hkv * g.D; ++i) {
                    store(a->qkv, tt * W + (int64_t)H * g.D + i, dt,
                          load(g.k, (int64_t)tt * Hkv * g.D + i, dt));
                    store(a->qkv, tt * W + (int64_t)(H + Hkv) * g.D + i, dt,
                          load(g.v, (int64_t)tt * Hkv * g.D + i, dt));
                }
            }
        }
        a->fail = rk == fail_rank;
        args[rk] = a;
    }
    if (fail_rank >= 0) {
        /* one rank fails its checks before any collective: every rank returns, none waits for
           the group's timeout (set far out, so only the failing rank's abort can end the wait),
           and the failing rank wrote nothing */
        void *snap = malloc((size_t)celems * es);
        memcpy(snap, ranks[fail_rank].cache, (size_t)celems * es);
        ASSERT_OK(fa_fake_comm_group_set_timeout(comms, 120000));
        const double t0 = now_s();
        ASSERT_OK(fa_fake_comm_run(N, dcp_rank_main, args));
        const double dt_s = now_s() - t0;
        cr_assert_lt(dt_s, 20.0, "the ranks took %.1f s: they waited for the failing rank", dt_s);
        for (int rk = 0; rk < N; ++rk) {
            if (rk == fail_rank) {
                cr_assert_eq(ranks[rk].st, FA_ERR_INVALID_ARG, "failing rank: %d (%s)", (int)ranks[rk].st,
                             ranks[rk].err);
                cr_assert(strstr(ranks[rk].err, "token stride") != NULL, "%s", ranks[rk].err);
                cr_assert(memcmp(snap, ranks[rk].cache, (size_t)celems * es) == 0,
                          "the failing rank wrote its cache");
            } else {
                cr_assert_neq(ranks[rk].st, FA_OK, "rank %d finished a step its peer failed", rk);
                cr_assert(strstr(ranks[rk].err, "abort") != NULL, "rank %d: %s", rk, ranks[rk].err);
            }
        }
        free(snap);
        for (int rk = 0; rk < N; ++rk) {
            free(ranks[rk].cache);
            free(ranks[rk].q);
            free(ranks[rk].out);
            free(ranks[rk].slots);
            free(ranks[rk].qkv);
        }
        fa_fake_comm_group_destroy(comms);
        free(bt);
        free(req_of);
        free(pos);
        free(sm);
        scen_free(&g);
        return;
    }
    ASSERT_OK(fa_fake_comm_run(N, dcp_rank_main, args));
    for (int rk = 0; rk < N; ++rk)
        cr_assert_eq(ranks[rk].st, FA_OK, "DCP N %d I %d rank %d: status %d: %s", N, I, rk, (int)ranks[rk].st,
                     ranks[rk].err);
    /* each rank == the same layer without DCP: its H heads over all keys (independent reference) */
    for (int rk = 0; rk < N; ++rk) {
        refcfg lr;
        memset(&lr, 0, sizeof lr);
        lr.Hq = H;
        lr.Hkv = Hkv;
        lr.D = g.D;
        lr.scale = L1.scale;
        lr.causal = 1;
        lr.wl = lr.wr = -1;
        lr.sinks = with_sinks ? sinks + rk * H : NULL;
        for (int r = 0; r < g.n; ++r) {
            int Lq = g.qlen[r], Lk = g.seq[r];
            float *qr = malloc(sizeof(float) * (size_t)Lq * H * g.D);
            double *ref = malloc(sizeof(double) * (size_t)Lq * H * g.D);
            for (int i = 0; i < Lq; ++i)
                for (int h = 0; h < H; ++h)
                    for (int dd = 0; dd < g.D; ++dd)
                        qr[((int64_t)i * H + h) * g.D + dd] =
                            g.Q[(((int64_t)g.qsl[r] + i) * g.Hq + rk * H + h) * g.D + dd];
            ref_attn(&lr, qr, (int64_t)H * g.D, g.K + g.koff[r], g.V + g.koff[r], Lq, Lk, ref);
            for (int i = 0; i < Lq; ++i)
                for (int h = 0; h < H; ++h)
                    for (int dd = 0; dd < g.D; ++dd) {
                        double got = load(ranks[rk].out, (((int64_t)g.qsl[r] + i) * H + h) * g.D + dd, dt);
                        double want = ref[((int64_t)i * H + h) * g.D + dd];
                        cr_assert_leq(fabs(got - want),
                                      2 * tol_for(dt) + 2e-2 * fabs(want) * (dt != FA_DTYPE_F32),
                                      "DCP N %d I %d Hkv %d sinks %d rank %d req %d row %d head %d dim %d: "
                                      "%.7g, reference %.7g",
                                      N, I, Hkv, with_sinks, rk, r, i, h, dd, got, want);
                    }
            free(qr);
            free(ref);
        }
    }
    /* compare: rank rk's heads == the one-rank result's heads [rk*H, (rk+1)*H) (g.out) */
    double maxd = 0;
    for (int rk = 0; rk < N && Hkv == 1; ++rk)
        for (int t = 0; t < g.T; ++t)
            for (int h = 0; h < H; ++h)
                for (int dd = 0; dd < g.D; ++dd) {
                    double got = load(ranks[rk].out, ((int64_t)t * H + h) * g.D + dd, dt);
                    double one = load(g.out, ((int64_t)t * g.Hq + rk * H + h) * g.D + dd, dt);
                    cr_assert(isfinite(got), "DCP N %d rank %d token %d head %d: %g", N, rk, t, h, got);
                    double e = fabs(got - one);
                    if (e > maxd) maxd = e;
                    cr_assert_leq(
                        e, 2 * tol_for(dt) + 2e-2 * fabs(one) * (dt != FA_DTYPE_F32),
                        "DCP N %d I %d sinks %d rank %d token %d head %d dim %d: %.7g, one rank %.7g", N, I,
                        with_sinks, rk, t, h, dd, got, one);
                }
    for (int rk = 0; rk < N; ++rk)
        for (int64_t i = (int64_t)g.T * H * g.D; i < (int64_t)g.Tpad * H * g.D; ++i)
            cr_assert_eq(load(ranks[rk].out, i, dt), 7.0f, "DCP rank %d: padding rows written", rk);
    for (int rk = 0; rk < N; ++rk) {
        free(ranks[rk].cache);
        free(ranks[rk].q);
        free(ranks[rk].out);
        free(ranks[rk].slots);
        free(ranks[rk].qkv);
    }
    fa_fake_comm_group_destroy(comms);
    free(bt);
    free(req_of);
    free(pos);
    free(sm);
    scen_free(&g);
}

Test(forward, dcp2_i1) { dcp_case(2, 1, 0, FA_DTYPE_F32, 1, 0, 801); }
/* a rank whose q has token stride 0 fails before the cache write and any collective (it used
   to pass the header's checks and fail in copy_2d after writing the cache), and its peers
   return at once through the comm's abort instead of waiting */
Test(forward, dcp_failing_rank_aborts_the_group) { dcp_case_ex(3, 1, 0, FA_DTYPE_F32, 1, 0, 808, 1); }
Test(forward, dcp2_i4_sinks) { dcp_case(2, 4, 1, FA_DTYPE_F32, 1, 0, 802); }
Test(forward, dcp4_i1_sinks) { dcp_case(4, 1, 1, FA_DTYPE_F32, 1, 0, 803); }
Test(forward, dcp4_i16) { dcp_case(4, 16, 0, FA_DTYPE_F32, 1, 0, 804); }
Test(forward, dcp2_bf16_sinks) { dcp_case(2, 2, 1, FA_DTYPE_BF16, 1, 0, 805); }
/* q/k/v as views of a fused QKV projection (token stride > heads * D): the q gather packs it */
Test(forward, dcp2_fused_qkv_sinks) { dcp_case(2, 1, 1, FA_DTYPE_F32, 1, 1, 806); }
/* two KV heads on every rank (GQA inside a rank): each rank must equal its layer without DCP */
Test(forward, dcp2_two_kv_heads) { dcp_case(2, 1, 0, FA_DTYPE_F32, 2, 0, 807); }
