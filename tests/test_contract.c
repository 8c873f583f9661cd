/* The contract of the backend API v2 / metadata-generation change, one test per promise:
   causality from the layer type (fa_causal), cascade next to windowed layers (set_layers and the
   plain fallback), stale / foreign / destroyed metadata, nothing written when a check fails (the
   capability block and the backend's ops.check), fault injection (alloc, a failing attention op),
   the validation mode, overflow inputs, and message quality. Each error case checks the status,
   that fa_last_error() names the argument and value, and that outputs and the cache are byte for
   byte unchanged (canaries around out). Runs on the CPU backend, or on a counting wrapper of it
   (real cache writes and real answers, with fault injection). */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include "backends/cpu/fa_cpu.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---------------------------------------------------------------------------------------- */
/* checking helpers */

/* alts: '|'-separated alternatives, one of which must occur in msg */
static int has_one(const char *msg, const char *alts)
{
    char buf[256];
    const char *s = alts;
    while (*s) {
        const char *e = strchr(s, '|');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (n && strstr(msg, buf)) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

/* spec: '&'-separated groups that must all occur, each a '|' list of alternatives */
static int has_all(const char *msg, const char *spec)
{
    char buf[512];
    const char *s = spec;
    while (*s) {
        const char *e = strchr(s, '&');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (n && !has_one(msg, buf)) return 0;
        if (!e) break;
        s = e + 1;
    }
    return 1;
}

/* 1 when the decimal number v occurs in msg as a whole number (not part of a longer one) */
static int has_number(const char *msg, long long v)
{
    char num[32];
    size_t n;
    const char *p = msg;
    snprintf(num, sizeof num, "%lld", v);
    n = strlen(num);
    while ((p = strstr(p, num)) != NULL) {
        int before = p > msg && ((p[-1] >= '0' && p[-1] <= '9') || (v >= 0 && p[-1] == '-'));
        int after = p[n] >= '0' && p[n] <= '9';
        if (!before && !after) return 1;
        ++p;
    }
    return 0;
}

static void check_err(fa_status st, fa_status want, const char *names, const char *expr, int line)
{
    const char *msg = fa_last_error();
    cr_assert_neq(st, FA_OK, "line %d: %s unexpectedly returned FA_OK", line, expr);
    cr_assert_eq(st, want, "line %d: %s -> %d (%s), expected %d (%s); message: %s", line, expr, (int)st,
                 fa_status_string(st), (int)want, fa_status_string(want), msg);
    cr_assert(msg != NULL && msg[0] != 0, "line %d: %s failed with an empty fa_last_error()", line, expr);
    if (getenv("CONTRACT_SHOW"))
        fprintf(stderr, "MSG line %d: %s\n", line, msg); /* CONTRACT_SHOW=1: print them */
    if (names)
        cr_assert(has_all(msg, names), "line %d: %s: message \"%s\" does not name [%s]", line, expr, msg,
                  names);
}
#define EXPECT_ERR(expr, want, names) check_err((expr), (want), (names), #expr, __LINE__)

/* ---------------------------------------------------------------------------------------- */
/* a counting wrapper of the CPU backend: host memory, real cache writes and real answers;
   counts ops, allocs and frees; injects faults (alloc N, attention call N, ops.check) */

enum { W_CACHE, W_ATTN, W_MERGE, W_DCP, W_NOPS };

typedef struct wrap_ctx {
    fa_backend *inner;
    int ops[W_NOPS], total;          /* device ops that ran */
    int alloc_calls, allocs, frees;  /* alloc calls, successful allocs, frees */
    int fail_alloc_at;               /* 0 = never; else the alloc call that fails */
    fa_status alloc_status;
    int fail_attn_at;                /* 0 = never; else the attention call that fails */
    int reject_attention;            /* ops.check rejects FA_OP_ATTENTION */
    char msg[160];
} wrap_ctx;

static fa_status w_cache(void *c, const fa_cache_write_args *a)
{
    wrap_ctx *w = (wrap_ctx *)c;
    w->ops[W_CACHE]++;
    w->total++;
    return w->inner->ops.reshape_and_cache(w->inner->ctx, a);
}
static fa_status w_attn(void *c, const fa_attn_args *a)
{
    wrap_ctx *w = (wrap_ctx *)c;
    w->ops[W_ATTN]++;
    w->total++;
    if (w->fail_attn_at != 0 && w->ops[W_ATTN] == w->fail_attn_at) {
        snprintf(w->msg, sizeof w->msg, "injected device fault in attention call %d", w->ops[W_ATTN]);
        return FA_ERR_BACKEND;
    }
    return w->inner->ops.attention(w->inner->ctx, a);
}
static fa_status w_merge(void *c, const fa_merge_args *a)
{
    wrap_ctx *w = (wrap_ctx *)c;
    w->ops[W_MERGE]++;
    w->total++;
    return w->inner->ops.merge_states(w->inner->ctx, a);
}
static fa_status w_dcp(void *c, const fa_dcp_correct_args *a)
{
    wrap_ctx *w = (wrap_ctx *)c;
    w->ops[W_DCP]++;
    w->total++;
    return w->inner->ops.dcp_correct(w->inner->ctx, a);
}
static fa_status w_copy(void *c, void *dst, const void *src, size_t n, fa_copy_kind k)
{
    wrap_ctx *w = (wrap_ctx *)c;
    return w->inner->ops.copy(w->inner->ctx, dst, src, n, k);
}
static fa_status w_fill(void *c, void *dst, size_t pitch, int value, size_t width, size_t rows)
{
    wrap_ctx *w = (wrap_ctx *)c;
    return w->inner->ops.fill(w->inner->ctx, dst, pitch, value, width, rows);
}
static fa_status w_copy_2d(void *c, void *dst, size_t dp, const void *src, size_t sp, size_t width,
                           size_t rows, fa_copy_kind k)
{
    wrap_ctx *w = (wrap_ctx *)c;
    return w->inner->ops.copy_2d(w->inner->ctx, dst, dp, src, sp, width, rows, k);
}
static fa_status w_alloc(void *c, size_t n, void **p)
{
    wrap_ctx *w = (wrap_ctx *)c;
    fa_status s;
    w->alloc_calls++;
    if (w->fail_alloc_at != 0 && w->alloc_calls == w->fail_alloc_at) {
        snprintf(w->msg, sizeof w->msg, "injected failure of alloc call %d (%zu bytes)", w->alloc_calls, n);
        *p = NULL;
        return w->alloc_status;
    }
    s = w->inner->ops.alloc(w->inner->ctx, n, p);
    if (s == FA_OK) w->allocs++;
    return s;
}
static fa_status w_free(void *c, void *p)
{
    wrap_ctx *w = (wrap_ctx *)c;
    w->frees++;
    return w->inner->ops.free(w->inner->ctx, p);
}
static fa_status w_sync(void *c)
{
    wrap_ctx *w = (wrap_ctx *)c;
    return w->inner->ops.synchronize(w->inner->ctx);
}
static const char *w_last_error(void *c)
{
    wrap_ctx *w = (wrap_ctx *)c;
    if (w->msg[0]) return w->msg;
    return w->inner->ops.last_error ? w->inner->ops.last_error(w->inner->ctx) : NULL;
}
static fa_status w_check(void *c, fa_op op, const void *args)
{
    wrap_ctx *w = (wrap_ctx *)c;
    (void)args;
    if (op == FA_OP_ATTENTION && w->reject_attention) {
        snprintf(w->msg, sizeof w->msg, "wrap has no attention kernel for these arguments");
        return FA_ERR_UNSUPPORTED;
    }
    return FA_OK;
}

static void make_wrap(fa_backend *be, wrap_ctx *w, fa_backend *inner)
{
    memset(be, 0, sizeof *be);
    memset(w, 0, sizeof *w);
    w->inner = inner;
    w->alloc_status = FA_ERR_OUT_OF_MEMORY;
    be->api_version = FA_BACKEND_API_VERSION;
    be->name = "wrap";
    be->ctx = w;
    be->info = inner->info;
    be->caps = inner->caps;
    be->ops.reshape_and_cache = w_cache;
    be->ops.attention = w_attn;
    be->ops.merge_states = w_merge;
    be->ops.dcp_correct = w_dcp;
    be->ops.copy = w_copy;
    be->ops.fill = w_fill;
    be->ops.alloc = w_alloc;
    be->ops.free = w_free;
    be->ops.synchronize = w_sync;
    be->ops.last_error = w_last_error;
    be->ops.copy_2d = w_copy_2d;
    be->ops.check = w_check;
}

static fa_backend *cpu_backend(void)
{
    fa_backend *be = NULL;
    ASSERT_OK(fa_cpu_backend_create(&be));
    return be;
}

/* ---------------------------------------------------------------------------------------- */
/* a paged f32 scenario: n requests (query lengths qlen, cached context ctx; the first `shared`
   block-table columns are the same blocks for every request), q/k/v/cache random, out between
   canaries. Buffers are 64-byte aligned. */

enum { MAXR = 16, CAN = 64 };
#define CANARY 0x7fc0dead

typedef struct env {
    fa_backend *be;
    int Hq, Hkv, D, bs, n, shared, cross;
    int32_t qlen[MAXR], ctx[MAXR];
    int32_t qsl[MAXR + 1], seq[MAXR];
    int T, Tpad;
    int32_t *bt;
    int64_t bts;
    int32_t maxb;
    int64_t NB;
    int64_t *slots;
    float *q, *k, *v, *cache, *obuf, *out;
    size_t qn, kn, on, cn; /* floats */
    fa_tensor tq, tk, tv, tc, tout;
} env;

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    bytes = (bytes + 63) / 64 * 64;
    cr_assert(posix_memalign(&p, 64, bytes ? bytes : 64) == 0 && p != NULL, "out of memory");
    return p;
}

static float rnd(void) { return (float)((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static fa_tensor t3(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return fa_tensor_make(data, dt, 3, s);
}

static void env_fill_out(env *e, float value)
{
    uint32_t can = CANARY;
    size_t i;
    for (i = 0; i < CAN; ++i) {
        memcpy(&e->obuf[i], &can, 4);
        memcpy(&e->obuf[CAN + e->on + i], &can, 4);
    }
    for (i = 0; i < e->on; ++i) e->out[i] = value;
}

static void env_canaries_ok(const env *e, int line)
{
    uint32_t can = CANARY, x;
    size_t i;
    for (i = 0; i < CAN; ++i) {
        memcpy(&x, &e->obuf[i], 4);
        cr_assert_eq(x, can, "line %d: the canary before out was overwritten", line);
        memcpy(&x, &e->obuf[CAN + e->on + i], 4);
        cr_assert_eq(x, can, "line %d: the canary after out was overwritten", line);
    }
}

/* Set be, Hq, Hkv, D, n, qlen, ctx, shared, cross first (bs 0 -> 16). */
static void env_init(env *e, int64_t nb_min)
{
    int r, c, i;
    int32_t maxseq = 0;
    int64_t next;
    if (e->bs == 0) e->bs = 16;
    e->qsl[0] = 0;
    for (r = 0; r < e->n; ++r) {
        e->seq[r] = e->cross ? e->ctx[r] : e->ctx[r] + e->qlen[r];
        e->qsl[r + 1] = e->qsl[r] + e->qlen[r];
        if (e->seq[r] > maxseq) maxseq = e->seq[r];
        if (e->shared > 0)
            cr_assert(e->ctx[r] >= e->shared * e->bs, "env: request %d is shorter than the prefix", r);
    }
    e->T = e->qsl[e->n];
    e->Tpad = e->T + 2;
    e->maxb = (maxseq + e->bs - 1) / e->bs + 1;
    if (e->maxb < e->shared + 1) e->maxb = e->shared + 1;
    e->bts = e->maxb + 2;
    e->bt = (int32_t *)xalloc(sizeof(int32_t) * (size_t)(e->n * e->bts));
    next = e->shared;
    for (r = 0; r < e->n; ++r) {
        int nb = (e->seq[r] + e->bs - 1) / e->bs;
        for (c = 0; c < e->bts; ++c) {
            if (c < e->shared)
                e->bt[r * e->bts + c] = c;
            else if (c < nb)
                e->bt[r * e->bts + c] = (int32_t)next++;
            else
                e->bt[r * e->bts + c] = 0;
        }
    }
    e->NB = next + 2 > nb_min ? next + 2 : nb_min;
    e->slots = (int64_t *)xalloc(sizeof(int64_t) * (size_t)e->Tpad);
    for (r = 0, i = 0; r < e->n; ++r)
        for (c = 0; c < e->qlen[r]; ++c, ++i) {
            int64_t p = (int64_t)e->seq[r] - e->qlen[r] + c;
            e->slots[i] = e->cross || p < 0 ? -1 : (int64_t)e->bt[r * e->bts + p / e->bs] * e->bs + p % e->bs;
        }
    for (; i < e->Tpad; ++i) e->slots[i] = -1;
    e->qn = (size_t)e->Tpad * e->Hq * e->D;
    e->kn = (size_t)e->Tpad * e->Hkv * e->D;
    e->on = e->qn;
    e->cn = (size_t)2 * (size_t)e->NB * e->bs * e->Hkv * e->D;
    e->q = (float *)xalloc(4 * (e->qn + 16));
    e->k = (float *)xalloc(4 * e->kn);
    e->v = (float *)xalloc(4 * e->kn);
    e->cache = (float *)xalloc(4 * e->cn);
    e->obuf = (float *)xalloc(4 * (e->on + 2 * CAN));
    e->out = e->obuf + CAN;
    for (i = 0; i < (int)(e->qn + 16); ++i) e->q[i] = rnd();
    for (i = 0; i < (int)e->kn; ++i) {
        e->k[i] = rnd();
        e->v[i] = rnd();
    }
    for (size_t j = 0; j < e->cn; ++j) e->cache[j] = rnd();
    env_fill_out(e, 12345.f);
    e->tq = t3(e->q, FA_DTYPE_F32, e->Tpad, e->Hq, e->D);
    e->tk = t3(e->k, FA_DTYPE_F32, e->Tpad, e->Hkv, e->D);
    e->tv = t3(e->v, FA_DTYPE_F32, e->Tpad, e->Hkv, e->D);
    e->tout = t3(e->out, FA_DTYPE_F32, e->Tpad, e->Hq, e->D);
    {
        int64_t s[5] = {2, e->NB, e->bs, e->Hkv, e->D};
        e->tc = fa_tensor_make(e->cache, FA_DTYPE_F32, 5, s);
    }
}

static void env_free(env *e)
{
    free(e->bt);
    free(e->slots);
    free(e->q);
    free(e->k);
    free(e->v);
    free(e->cache);
    free(e->obuf);
}

static fa_batch env_batch(const env *e, fa_causal causal)
{
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = e->n;
    b.query_start_loc = e->qsl;
    b.seq_lens = e->seq;
    b.block_table = e->bt;
    b.block_table_stride = e->bts;
    b.max_blocks = e->maxb;
    b.block_table_host = e->bt;
    b.slot_mapping = e->slots;
    b.causal = causal;
    return b;
}

static fa_config env_cfg(const env *e)
{
    return test_cfg(e->Hq, e->Hkv, e->D, FA_DTYPE_F32, e->bs, 64, 4096);
}

static fa_builder *env_builder(const env *e, const fa_backend *be, const fa_config *cfg)
{
    fa_builder *b = NULL;
    fa_config c = cfg ? *cfg : env_cfg(e);
    ASSERT_OK(fa_builder_create(be ? be : e->be, &c, NULL, &b));
    return b;
}

static fa_layer env_layer(const env *e, fa_attn_type ty, int32_t window, int kv_sharing)
{
    fa_layer L;
    fa_layer_desc d = test_desc(e->Hq, e->Hkv, e->D, FA_DTYPE_F32);
    d.attn_type = ty;
    d.sliding_window = window;
    d.kv_sharing = kv_sharing;
    ASSERT_OK(fa_layer_init(&L, &d));
    return L;
}

static fa_status env_fwd(env *e, const fa_backend *be, const fa_layer *L, const fa_metadata *md, int with_kv)
{
    return fa_forward(L, be ? be : e->be, &e->tq, with_kv ? &e->tk : NULL, with_kv ? &e->tv : NULL, &e->tc,
                      md, &e->tout);
}

/* out (with its canaries) and the cache, byte for byte */
typedef struct snap {
    void *out, *cache;
    size_t ob, cb;
} snap;

static snap snap_take(const env *e)
{
    snap s;
    s.ob = 4 * (e->on + 2 * CAN);
    s.cb = 4 * e->cn;
    s.out = malloc(s.ob);
    s.cache = malloc(s.cb);
    cr_assert(s.out && s.cache);
    memcpy(s.out, e->obuf, s.ob);
    memcpy(s.cache, e->cache, s.cb);
    return s;
}
static void snap_same(const env *e, const snap *s, int line)
{
    cr_assert(memcmp(s->out, e->obuf, s->ob) == 0, "line %d: out (or a canary) was written by a failing call",
              line);
    cr_assert(memcmp(s->cache, e->cache, s->cb) == 0, "line %d: the kv cache was written by a failing call",
              line);
}
static void snap_free(snap *s)
{
    free(s->out);
    free(s->cache);
}

/* fa_forward must fail with `want`, name `names`, and write neither out nor the cache */
static void forward_fails(env *e, const fa_backend *be, const fa_layer *L, const fa_metadata *md, int with_kv,
                          fa_status want, const char *names, int line)
{
    snap s = snap_take(e);
    fa_status st = env_fwd(e, be, L, md, with_kv);
    check_err(st, want, names, "fa_forward", line);
    snap_same(e, &s, line);
    snap_free(&s);
}
#define FORWARD_FAILS(e, be, L, md, kv, want, names) \
    forward_fails((e), (be), (L), (md), (kv), (want), (names), __LINE__)

static float *copy_out(const env *e)
{
    float *o = (float *)malloc(4 * e->on);
    cr_assert(o);
    memcpy(o, e->out, 4 * e->on);
    return o;
}

/* max |a - b| over the first T rows (the rows fa_forward writes) */
static double max_diff(const env *e, const float *a, const float *b)
{
    double m = 0;
    size_t i, n = (size_t)e->T * e->Hq * e->D;
    for (i = 0; i < n; ++i) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN -> NaN */
    }
    return m;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. causality from the layer type */

/* a decoder prefill batch: request 0 is a pure prefill, the others have a cached context */
static void causal_env(env *e, fa_backend *be)
{
    memset(e, 0, sizeof *e);
    e->be = be;
    e->Hq = 4;
    e->Hkv = 2;
    e->D = 32;
    e->n = 3;
    e->qlen[0] = 9;
    e->ctx[0] = 0;
    e->qlen[1] = 6;
    e->ctx[1] = 11;
    e->qlen[2] = 1;
    e->ctx[2] = 20;
    rng_seed(101);
    env_init(e, 0);
}

Test(contract, causal_auto_zero_batch_is_causal_for_decoder_prefill)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_metadata md;
    float *o_auto, *o_on;

    /* a zero-initialised batch: causal 0 = AUTO */
    fa_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.num_reqs = e.n;
    bt.query_start_loc = e.qsl;
    bt.seq_lens = e.seq;
    bt.block_table = e.bt;
    bt.block_table_stride = e.bts;
    bt.max_blocks = e.maxb;
    bt.slot_mapping = e.slots;
    cr_assert_eq((int)bt.causal, (int)FA_CAUSAL_AUTO);
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    cr_assert_eq((int)md.causal, (int)FA_CAUSAL_AUTO);
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md, 1));
    cr_assert_str_eq(fa_last_error(), "");
    env_canaries_ok(&e, __LINE__);
    o_auto = copy_out(&e);

    bt.causal = FA_CAUSAL_ON;
    env_fill_out(&e, 12345.f);
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md, 1));
    o_on = copy_out(&e);
    cr_assert(memcmp(o_auto, o_on, 4 * (size_t)e.T * e.Hq * e.D) == 0,
              "AUTO on a decoder layer differs from FA_CAUSAL_ON (max diff %g)", max_diff(&e, o_auto, o_on));

    bt.causal = FA_CAUSAL_OFF;
    env_fill_out(&e, 12345.f);
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md, 1));
    cr_assert(max_diff(&e, o_auto, e.out) > 1e-3,
              "AUTO on a decoder prefill equals FA_CAUSAL_OFF: it did not attend causally");
    env_canaries_ok(&e, __LINE__);

    free(o_auto);
    free(o_on);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, causal_auto_is_bidirectional_for_cross_attention)
{
    fa_backend *be = cpu_backend();
    env e;
    memset(&e, 0, sizeof e);
    e.be = be;
    e.Hq = 4;
    e.Hkv = 2;
    e.D = 32;
    e.n = 2;
    e.cross = 1;
    /* cross-attention: the keys are the encoder's, already cached (seq = ctx) */
    e.qlen[0] = 5;
    e.ctx[0] = 12;
    e.qlen[1] = 3;
    e.ctx[1] = 7;
    rng_seed(102);
    env_init(&e, 0);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer cross = env_layer(&e, FA_ATTN_ENCODER_DECODER, 0, 0);
    fa_metadata md;
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    float *o_auto;
    snap s = snap_take(&e);

    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &cross, &md, 0));
    o_auto = copy_out(&e);
    cr_assert(memcmp(s.cache, e.cache, s.cb) == 0, "a cross-attention layer without k/v wrote the cache");

    bt.causal = FA_CAUSAL_OFF;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &cross, &md, 0));
    cr_assert(memcmp(o_auto, e.out, 4 * (size_t)e.T * e.Hq * e.D) == 0,
              "AUTO on an ENCODER_DECODER layer differs from FA_CAUSAL_OFF (max diff %g)",
              max_diff(&e, o_auto, e.out));

    bt.causal = FA_CAUSAL_ON;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &cross, &md, 0));
    cr_assert(max_diff(&e, o_auto, e.out) > 1e-3,
              "AUTO on cross-attention equals FA_CAUSAL_ON: it attended causally");
    env_canaries_ok(&e, __LINE__);

    snap_free(&s);
    free(o_auto);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, more_queries_than_keys_rejected_for_causal_decoder_runs_for_cross)
{
    fa_backend *be = cpu_backend();
    env e;
    memset(&e, 0, sizeof e);
    e.be = be;
    e.Hq = 4;
    e.Hkv = 2;
    e.D = 32;
    e.n = 2;
    e.cross = 1;
    e.qlen[0] = 8;
    e.ctx[0] = 5;  /* 8 queries, 5 keys */
    e.qlen[1] = 2;
    e.ctx[1] = 9;
    rng_seed(103);
    env_init(&e, 0);
    /* slots a decoder layer would write (so a premature cache write would show) */
    for (int t = 0; t < e.T; ++t) e.slots[t] = t;
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_layer cross = env_layer(&e, FA_ATTN_ENCODER_DECODER, 0, 0);
    fa_metadata md;
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);

    ASSERT_OK(fa_builder_build(b, &bt, 0, &md)); /* build accepts: the layer decides */
    cr_assert_eq(md.query_exceeds_keys, 1);
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "more queries than keys&causal");
    ASSERT_OK(env_fwd(&e, NULL, &cross, &md, 0));
    env_canaries_ok(&e, __LINE__);
    for (size_t i = 0; i < (size_t)e.T * e.Hq * e.D; ++i)
        cr_assert(isfinite(e.out[i]) && e.out[i] != 12345.f, "cross-attention output %zu not written", i);

    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, batch_causal_out_of_range_rejected_by_build)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md, before;
    int32_t p = -1;
    bt.causal = (fa_causal)7;
    memset(&md, 0xA5, sizeof md);
    before = md;
    EXPECT_ERR(fa_builder_build(b, &bt, 0, &md), FA_ERR_INVALID_ARG, "causal&7");
    cr_assert(memcmp(&md, &before, sizeof md) == 0, "md_out was written by a failing build");
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, &bt, 1, &p), FA_ERR_INVALID_ARG, "causal&7");
    cr_assert_eq(p, -1, "prefix_len_out written by a failing call");
    bt.causal = (fa_causal)-1;
    EXPECT_ERR(fa_builder_build(b, &bt, 0, &md), FA_ERR_INVALID_ARG, "causal&-1");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. cascade next to windowed layers */

/* 8 requests sharing a 512-token prefix, 4600+ tokens each: a 4096 window really cuts the prefix */
static void cascade_env(env *e, fa_backend *be, int long_ctx)
{
    static const int32_t ql[8] = {1, 2, 3, 1, 2, 3, 1, 2};
    memset(e, 0, sizeof *e);
    e->be = be;
    e->Hq = 4;
    e->Hkv = 2;
    e->D = 32;
    e->n = 8;
    e->shared = long_ctx ? 32 : 16;
    for (int r = 0; r < 8; ++r) {
        e->qlen[r] = ql[r];
        e->ctx[r] = long_ctx ? 4600 + 13 * r : 256 + 5 * r + 3;
    }
    rng_seed(long_ctx ? 201 : 202);
    env_init(e, 0);
}

Test(contract, cascade_with_window_layer_is_exact)
{
    fa_backend *be = cpu_backend();
    env e;
    cascade_env(&e, be, 1);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer layers[2];
    layers[0] = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    layers[1] = env_layer(&e, FA_ATTN_DECODER, 4096, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    int32_t P = -1;
    float *plain[2];

    ASSERT_OK(fa_builder_set_layers(b, layers, 2));
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bt, e.shared, &P));
    cr_assert_gt(P, 0,
                 "cascade_prefix_len declined a 512-token prefix shared by 8 requests with a full layer");
    cr_assert_eq(P % e.bs, 0);

    /* the plain answers */
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    cr_assert_eq(md.use_cascade, 0);
    for (int l = 0; l < 2; ++l) {
        env_fill_out(&e, 12345.f);
        ASSERT_OK(env_fwd(&e, NULL, &layers[l], &md, 1));
        plain[l] = copy_out(&e);
    }
    cr_assert(max_diff(&e, plain[0], plain[1]) > 1e-3,
              "the 4096 window does not change the answer: test is vacuous");

    /* the cascade step: both layers OK, both equal their plain answers */
    ASSERT_OK(fa_builder_build(b, &bt, P, &md));
    cr_assert_eq(md.use_cascade, 1);
    cr_assert_eq(md.common_prefix_len, P);
    for (int l = 0; l < 2; ++l) {
        env_fill_out(&e, 12345.f);
        ASSERT_OK(env_fwd(&e, NULL, &layers[l], &md, 1));
        env_canaries_ok(&e, __LINE__);
        double d = max_diff(&e, plain[l], e.out);
        cr_assert(d <= 2e-5, "layer %d (%s): cascade step differs from the plain step by %g", l,
                  l ? "window 4096" : "full", d);
    }
    free(plain[0]);
    free(plain[1]);

    /* only windowed layers: cascade is never exact, P = 0 */
    {
        fa_builder *b2 = env_builder(&e, NULL, NULL);
        int32_t P2 = -1;
        ASSERT_OK(fa_builder_set_layers(b2, &layers[1], 1));
        ASSERT_OK(fa_builder_cascade_prefix_len(b2, &bt, e.shared, &P2));
        cr_assert_eq(P2, 0, "cascade_prefix_len picked %d with only windowed layers registered", P2);
        fa_builder_destroy(b2);
    }
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, cascade_build_rejects_causal_off)
{
    fa_backend *be = cpu_backend();
    env e;
    cascade_env(&e, be, 0);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_batch bt = env_batch(&e, FA_CAUSAL_OFF);
    fa_metadata md, before;
    memset(&md, 0x5A, sizeof md);
    before = md;
    EXPECT_ERR(fa_builder_build(b, &bt, 256, &md), FA_ERR_INVALID_ARG, "causal&256");
    cr_assert(memcmp(&md, &before, sizeof md) == 0, "md_out was written by a failing build");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, cascade_prefix_len_declines_non_causal_batch_that_build_accepts)
{
    fa_backend *be = cpu_backend();
    env e;
    memset(&e, 0, sizeof e);
    e.be = be;
    e.Hq = 4;
    e.Hkv = 2;
    e.D = 32;
    e.n = 2;
    e.cross = 1;
    e.qlen[0] = 8;
    e.ctx[0] = 5; /* q > seq */
    e.qlen[1] = 1;
    e.ctx[1] = 300;
    rng_seed(203);
    env_init(&e, 0);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_metadata md;
    for (int c = 0; c < 2; ++c) {
        fa_batch bt = env_batch(&e, c == 0 ? FA_CAUSAL_OFF : FA_CAUSAL_AUTO);
        int32_t P = -1;
        ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
        fa_status st = fa_builder_cascade_prefix_len(b, &bt, 1, &P);
        cr_assert_eq(st, FA_OK, "causal %d: cascade_prefix_len rejected a batch build accepts: %s",
                     (int)bt.causal, fa_last_error());
        cr_assert_eq(P, 0, "causal %d: P = %d", (int)bt.causal, P);
    }
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. stale, foreign, destroyed metadata; md NULL; k/v NULL */

Test(contract, stale_metadata_of_earlier_build_rejected)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md1, md2;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md1));
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md2));
    cr_assert_neq(md1.generation, md2.generation);
    FORWARD_FAILS(&e, NULL, &dec, &md1, 1, FA_ERR_INVALID_ARG, "md&build&generation|build 1|since");
    cr_assert(has_number(fa_last_error(), (long long)md1.generation) &&
                  has_number(fa_last_error(), (long long)md2.generation),
              "message \"%s\" does not give the generations %llu and %llu", fa_last_error(),
              (unsigned long long)md1.generation, (unsigned long long)md2.generation);
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md2, 1));
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, metadata_of_destroyed_builder_rejected)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL), *b2;
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md, md2;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    fa_builder_destroy(b); /* md->builder now dangles: fa_forward must not read it (ASan) */
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "destroyed");
    /* a new builder (it may take the freed slot, or even the address) does not revive md */
    b2 = env_builder(&e, NULL, NULL);
    ASSERT_OK(fa_builder_build(b2, &bt, 0, &md2));
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "destroyed");
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md2, 1));
    fa_builder_destroy(b2);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, zeroed_or_hand_made_metadata_rejected)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md, fake;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));

    memset(&fake, 0, sizeof fake);
    FORWARD_FAILS(&e, NULL, &dec, &fake, 1, FA_ERR_INVALID_ARG, "md&fa_builder_build|builder");

    /* hand-made: every field of a real build but no registry identity */
    fake = md;
    fake.builder_id = 0;
    FORWARD_FAILS(&e, NULL, &dec, &fake, 1, FA_ERR_INVALID_ARG, "md");
    /* a made-up identity */
    fake = md;
    fake.builder_id = md.builder_id + 1000;
    FORWARD_FAILS(&e, NULL, &dec, &fake, 1, FA_ERR_INVALID_ARG, "md");
    /* a slot outside the registry */
    fake = md;
    fake.builder_slot = 1 << 30;
    FORWARD_FAILS(&e, NULL, &dec, &fake, 1, FA_ERR_INVALID_ARG, "md&slot");
    /* a generation that was never built */
    fake = md;
    fake.generation = md.generation + 1;
    FORWARD_FAILS(&e, NULL, &dec, &fake, 1, FA_ERR_INVALID_ARG, "build");
    /* the real one still runs */
    ASSERT_OK(env_fwd(&e, NULL, &dec, &md, 1));
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, metadata_with_another_backend_rejected)
{
    fa_backend *be = cpu_backend(), *other = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    FORWARD_FAILS(&e, other, &dec, &md, 1, FA_ERR_INVALID_ARG, "backend&builder");
    /* builder B on the other backend: A's metadata with B's backend is still refused */
    {
        fa_builder *bB = env_builder(&e, other, NULL);
        fa_metadata mdB;
        ASSERT_OK(fa_builder_build(bB, &bt, 0, &mdB));
        FORWARD_FAILS(&e, other, &dec, &md, 1, FA_ERR_INVALID_ARG, "backend&builder");
        FORWARD_FAILS(&e, be, &dec, &mdB, 1, FA_ERR_INVALID_ARG, "backend&builder");
        ASSERT_OK(env_fwd(&e, other, &dec, &mdB, 1));
        fa_builder_destroy(bB);
    }
    /* and a wrapper (another backend struct around the same device) is another backend too */
    {
        fa_backend wbe;
        wrap_ctx w;
        make_wrap(&wbe, &w, be);
        FORWARD_FAILS(&e, &wbe, &dec, &md, 1, FA_ERR_INVALID_ARG, "backend 'wrap'|'wrap'");
        cr_assert_eq(w.total, 0);
    }
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(other);
    fa_cpu_backend_destroy(be);
}

Test(contract, md_null_is_an_error_and_profile_zeroes_out)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    FORWARD_FAILS(&e, NULL, &dec, NULL, 1, FA_ERR_INVALID_ARG, "md");
    ASSERT_OK(fa_forward_profile(&dec, be, &e.tout));
    env_canaries_ok(&e, __LINE__);
    for (size_t i = 0; i < e.on; ++i)
        cr_assert_eq(e.out[i], 0.f, "fa_forward_profile left out[%zu] = %g", i, e.out[i]);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

/* Overlapping output rows are rejected before anything is written: by fa_forward_profile (every
   row of out is written: a token stride of 0 used to reach the backend's fill) and by fa_forward
   (token stride == head_size with several heads: token t's head 1 is token t+1's head 0). */
Test(contract, overlapping_out_rows_rejected_before_any_write)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    const int64_t bad0[3] = {0, e.D, e.D}; /* token strides that alias rows */
    for (int i = 0; i < 3; ++i) {
        fa_tensor o = e.tout;
        o.stride[0] = bad0[i];
        if (i == 2) { /* head-major [H, T, D] whose head stride is too short for the T written rows */
            o.stride[0] = e.D;
            o.stride[1] = (int64_t)e.D * (e.T - 1);
        }
        snap s = snap_take(&e);
        EXPECT_ERR(fa_forward_profile(&dec, be, &o), FA_ERR_INVALID_ARG, "out&overlap");
        snap_same(&e, &s, __LINE__);
        fa_tensor keep = e.tout;
        e.tout = o;
        FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "out&overlap");
        e.tout = keep;
        snap_same(&e, &s, __LINE__);
        snap_free(&s);
    }
    { /* a negative leading extent is an error, not a fill of (size_t)-220 rows (fuzz finding) */
        fa_tensor o = e.tout;
        o.shape[0] = -220;
        snap s = snap_take(&e);
        EXPECT_ERR(fa_forward_profile(&dec, be, &o), FA_ERR_INVALID_ARG, "out&shape [-220");
        snap_same(&e, &s, __LINE__);
        snap_free(&s);
    }
    { /* the disjoint head-major layout [H, T, D] is accepted (profiling zeroes it all) */
        fa_tensor o = e.tout;
        o.stride[0] = e.D;
        o.stride[1] = (int64_t)e.D * e.Tpad;
        cr_assert(e.on >= (size_t)e.Tpad * e.Hq * e.D);
        ASSERT_OK(fa_forward_profile(&dec, be, &o));
    }
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, kv_null_rejected_for_writing_decoder_layer)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    FORWARD_FAILS(&e, NULL, &dec, &md, 0, FA_ERR_INVALID_ARG, "k&NULL");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, kv_null_runs_for_kv_sharing_and_cross_attention)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer share = env_layer(&e, FA_ATTN_DECODER, 0, 1);
    fa_layer cross = env_layer(&e, FA_ATTN_ENCODER_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    snap s = snap_take(&e);
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    ASSERT_OK(env_fwd(&e, NULL, &share, &md, 0));
    cr_assert(memcmp(s.cache, e.cache, s.cb) == 0, "a kv_sharing layer wrote the cache");
    env_canaries_ok(&e, __LINE__);
    env_fill_out(&e, 12345.f);
    ASSERT_OK(env_fwd(&e, NULL, &cross, &md, 0));
    cr_assert(memcmp(s.cache, e.cache, s.cb) == 0, "a cross-attention layer without k/v wrote the cache");
    env_canaries_ok(&e, __LINE__);
    for (size_t i = 0; i < (size_t)e.T * e.Hq * e.D; ++i)
        cr_assert(e.out[i] != 12345.f, "out[%zu] not written", i);
    snap_free(&s);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

/* ---------------------------------------------------------------------------------------- */
/* 4. nothing written on error: ops.check and the capability block */

/* token 0 is request 0's position 0, stored at slot 0 = cache[0]; the cache starts zeroed and
   k is all ones, so a premature cache write shows as cache[0] going 0 -> 1 */
static void zero_cache_env(env *e, fa_backend *be, int D)
{
    memset(e, 0, sizeof *e);
    e->be = be;
    e->Hq = 4;
    e->Hkv = 2;
    e->D = D;
    e->n = 2;
    e->qlen[0] = 3;
    e->ctx[0] = 0;
    e->qlen[1] = 1;
    e->ctx[1] = 17;
    rng_seed(401);
    env_init(e, 0);
    cr_assert_eq(e->slots[0], 0);
    memset(e->cache, 0, 4 * e->cn);
    for (size_t i = 0; i < e->kn; ++i) e->k[i] = 1.f;
}

Test(contract, ops_check_rejection_writes_nothing)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    env e;
    make_wrap(&wbe, &w, cpu);
    zero_cache_env(&e, &wbe, 32);
    fa_builder *b = env_builder(&e, &wbe, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    w.reject_attention = 1;
    FORWARD_FAILS(&e, &wbe, &dec, &md, 1, FA_ERR_UNSUPPORTED, "wrap&attention&no attention kernel");
    cr_assert_eq(w.total, 0, "%d ops ran before the rejection (cache write %d)", w.total, w.ops[W_CACHE]);
    cr_assert_eq(e.cache[0], 0.f, "cache[0] went 0 -> %g: the cache write ran before the check", e.cache[0]);
    /* accepted again: it runs and writes */
    w.reject_attention = 0;
    w.msg[0] = 0;
    ASSERT_OK(env_fwd(&e, &wbe, &dec, &md, 1));
    cr_assert_eq(e.cache[0], 1.f);
    cr_assert_eq(w.ops[W_CACHE], 1);
    cr_assert_eq(w.ops[W_ATTN], 1);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(cpu);
}

Test(contract, caps_pruned_head_size_writes_nothing)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    env e;
    make_wrap(&wbe, &w, cpu);
    zero_cache_env(&e, &wbe, 128);
    fa_builder *b = env_builder(&e, &wbe, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    /* the backend's build pruned every width from 128 up */
    while (wbe.caps.num_dims > 1 && wbe.caps.dims[wbe.caps.num_dims - 1].head_dim >= 128) wbe.caps.num_dims--;
    cr_assert_lt(wbe.caps.dims[wbe.caps.num_dims - 1].head_dim, 128);
    FORWARD_FAILS(&e, &wbe, &dec, &md, 1, FA_ERR_UNSUPPORTED, "head_size&128&wrap");
    cr_assert_eq(w.total, 0);
    cr_assert_eq(e.cache[0], 0.f);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(cpu);
}

Test(contract, caps_alignment_writes_nothing)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    env e;
    make_wrap(&wbe, &w, cpu);
    zero_cache_env(&e, &wbe, 128);
    fa_builder *b = env_builder(&e, &wbe, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    wbe.caps.align_bytes = 64;
    ASSERT_OK(env_fwd(&e, &wbe, &dec, &md, 1)); /* every buffer is 64-byte aligned: runs */
    memset(e.cache, 0, 4 * e.cn);
    env_fill_out(&e, 12345.f);
    w.total = 0;
    memset(w.ops, 0, sizeof w.ops);
    e.tq.data = e.q + 1; /* 4 bytes off */
    FORWARD_FAILS(&e, &wbe, &dec, &md, 1, FA_ERR_UNSUPPORTED, "aligned&64&wrap");
    cr_assert_eq(w.total, 0);
    cr_assert_eq(e.cache[0], 0.f);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(cpu);
}

Test(contract, caps_without_fp8_rejects_fp8_layer_writes_nothing)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    env e;
    make_wrap(&wbe, &w, cpu);
    zero_cache_env(&e, &wbe, 32);
    fa_builder *b = env_builder(&e, &wbe, NULL);
    fa_layer_desc d = test_desc(e.Hq, e.Hkv, e.D, FA_DTYPE_F32);
    fa_layer fp8;
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    d.kv_cache_dtype = FA_CACHE_FP8_E4M3;
    ASSERT_OK(fa_layer_init(&fp8, &d));
    e.tc.dtype = FA_DTYPE_FP8_E4M3; /* the same (zeroed) bytes, read as an fp8 cache */
    {
        int64_t s[5] = {2, e.NB, e.bs, e.Hkv, e.D};
        e.tc = fa_tensor_make(e.cache, FA_DTYPE_FP8_E4M3, 5, s);
    }
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    wbe.caps.cache_dtypes &= ~(1u << FA_DTYPE_FP8_E4M3 | 1u << FA_DTYPE_FP8_E5M2);
    FORWARD_FAILS(&e, &wbe, &fp8, &md, 1, FA_ERR_UNSUPPORTED, "fp8_e4m3&cache&wrap");
    cr_assert_eq(w.total, 0);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(cpu);
}

/* ---------------------------------------------------------------------------------------- */
/* 5. fault injection */

static void create_alloc_failures(fa_status inject)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    fa_config cfg = test_cfg(8, 2, 64, FA_DTYPE_F16, 16, 32, 512);
    fa_builder *b = NULL, *const sentinel = (fa_builder *)(uintptr_t)0x1234;
    int n_allocs;
    make_wrap(&wbe, &w, cpu);
    ASSERT_OK(fa_builder_create(&wbe, &cfg, NULL, &b));
    n_allocs = w.alloc_calls;
    cr_assert_geq(n_allocs, 1, "fa_builder_create made no alloc call");
    fa_builder_destroy(b);
    cr_assert_eq(w.allocs, w.frees, "a created and destroyed builder leaks %d allocations",
                 w.allocs - w.frees);
    for (int N = 1; N <= n_allocs; ++N) {
        fa_status st;
        make_wrap(&wbe, &w, cpu);
        w.fail_alloc_at = N;
        w.alloc_status = inject;
        b = sentinel;
        st = fa_builder_create(&wbe, &cfg, NULL, &b);
        cr_assert(st == FA_ERR_OUT_OF_MEMORY || st == FA_ERR_BACKEND,
                  "alloc %d of %d failing: status %d (%s): %s", N, n_allocs, (int)st, fa_status_string(st),
                  fa_last_error());
        if (getenv("CONTRACT_SHOW")) fprintf(stderr, "MSG alloc %d: %s\n", N, fa_last_error());
        cr_assert(has_all(fa_last_error(), "alloc&wrap&injected"),
                  "alloc %d failing: message \"%s\" does not name alloc", N, fa_last_error());
        cr_assert_eq(b, sentinel, "alloc %d failing: *out was written", N);
        cr_assert_eq(w.allocs, w.frees, "alloc %d failing: %d successful allocs, %d frees (a leak)", N,
                     w.allocs, w.frees);
    }
    fa_cpu_backend_destroy(cpu);
}

Test(contract, create_alloc_failure_out_of_memory_no_leak) { create_alloc_failures(FA_ERR_OUT_OF_MEMORY); }
Test(contract, create_alloc_failure_backend_error_no_leak) { create_alloc_failures(FA_ERR_BACKEND); }

Test(contract, cascade_attention_fault_then_next_forward_ok)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    env e;
    make_wrap(&wbe, &w, cpu);
    cascade_env(&e, &wbe, 0);
    fa_builder *b = env_builder(&e, &wbe, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    int32_t P = 0;
    float *ref;
    fa_status st;
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bt, e.shared, &P));
    cr_assert_gt(P, 0, "no cascade for this batch");
    ASSERT_OK(fa_builder_build(b, &bt, P, &md));
    cr_assert_eq(md.use_cascade, 1);

    ASSERT_OK(env_fwd(&e, &wbe, &dec, &md, 1));
    cr_assert_eq(w.ops[W_ATTN], 2, "a cascade forward makes two attention calls (made %d)", w.ops[W_ATTN]);
    cr_assert_eq(w.ops[W_MERGE], 1);
    ref = copy_out(&e);

    env_fill_out(&e, 12345.f);
    w.fail_attn_at = w.ops[W_ATTN] + 2; /* the suffix call */
    st = env_fwd(&e, &wbe, &dec, &md, 1);
    EXPECT_ERR(st, FA_ERR_BACKEND, "backend 'wrap'&op 'attention'&injected");
    cr_assert_eq(w.ops[W_MERGE], 1, "merge ran after the failing attention call");
    env_canaries_ok(&e, __LINE__);

    w.fail_attn_at = 0;
    w.msg[0] = 0;
    env_fill_out(&e, 12345.f);
    ASSERT_OK(env_fwd(&e, &wbe, &dec, &md, 1));
    cr_assert(memcmp(ref, e.out, 4 * (size_t)e.T * e.Hq * e.D) == 0,
              "the forward after a fault gives another answer");
    env_canaries_ok(&e, __LINE__);

    /* and that answer is the plain one */
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    env_fill_out(&e, 12345.f);
    ASSERT_OK(env_fwd(&e, &wbe, &dec, &md, 1));
    cr_assert(max_diff(&e, ref, e.out) <= 2e-5, "cascade differs from plain by %g", max_diff(&e, ref, e.out));
    free(ref);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(cpu);
}

/* ---------------------------------------------------------------------------------------- */
/* 6. validation mode */

static void validate_env(env *e, fa_backend *be)
{
    memset(e, 0, sizeof *e);
    e->be = be;
    e->Hq = 4;
    e->Hkv = 2;
    e->D = 32;
    e->n = 3;
    e->qlen[0] = 2;
    e->ctx[0] = 20;
    e->qlen[1] = 1;
    e->ctx[1] = 40;
    e->qlen[2] = 3;
    e->ctx[2] = 9;
    rng_seed(601);
    env_init(e, 64);
    cr_assert_eq(e->NB, 64);
}

static fa_builder *validating_builder(const env *e)
{
    fa_config cfg = env_cfg(e);
    cfg.debug.validate = 1;
    return env_builder(e, NULL, &cfg);
}

Test(contract, validate_block_table_entry_past_cache)
{
    fa_backend *be = cpu_backend();
    env e;
    validate_env(&e, be);
    fa_builder *b = validating_builder(&e);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    e.bt[1 * e.bts + 1] = 1000; /* request 1 reads columns 0..2 */
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "block_table[1][1] = 1000");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, validate_negative_block_id)
{
    fa_backend *be = cpu_backend();
    env e;
    validate_env(&e, be);
    fa_builder *b = validating_builder(&e);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    e.bt[2 * e.bts + 0] = -7;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "block_table[2][0] = -7");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, validate_slot_past_cache)
{
    fa_backend *be = cpu_backend();
    env e;
    validate_env(&e, be);
    fa_builder *b = validating_builder(&e);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    e.slots[3] = e.NB * e.bs; /* 1024: one past the last slot */
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "slot_mapping[3] = 1024");
    e.slots[3] = (int64_t)1 << 40;
    FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, "slot_mapping[3] = 1099511627776");
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, validate_valid_step_matches_unvalidated_bitwise)
{
    fa_backend *be = cpu_backend();
    env e;
    validate_env(&e, be);
    fa_builder *bv = validating_builder(&e), *bp = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata mv, mp;
    float *ov;
    /* columns past a request's keys are never read: garbage there is not an error */
    for (int r = 0; r < e.n; ++r)
        for (int64_t c = (e.seq[r] + e.bs - 1) / e.bs; c < e.bts; ++c)
            e.bt[r * e.bts + c] = 1000000 + (int32_t)c;
    ASSERT_OK(fa_builder_build(bv, &bt, 0, &mv));
    ASSERT_OK(env_fwd(&e, NULL, &dec, &mv, 1));
    ov = copy_out(&e);
    env_fill_out(&e, 12345.f);
    ASSERT_OK(fa_builder_build(bp, &bt, 0, &mp));
    ASSERT_OK(env_fwd(&e, NULL, &dec, &mp, 1));
    cr_assert(memcmp(ov, e.out, 4 * e.on) == 0, "validated and unvalidated outputs differ");
    free(ov);
    fa_builder_destroy(bv);
    fa_builder_destroy(bp);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}

Test(contract, validate_needs_synchronize)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    fa_config cfg = test_cfg(4, 2, 32, FA_DTYPE_F32, 16, 8, 64);
    fa_builder *b = (fa_builder *)(uintptr_t)0x1234;
    make_wrap(&wbe, &w, cpu);
    wbe.ops.synchronize = NULL;
    cfg.debug.validate = 1;
    EXPECT_ERR(fa_builder_create(&wbe, &cfg, NULL, &b), FA_ERR_UNSUPPORTED, "synchronize&wrap");
    cr_assert_eq(b, (fa_builder *)(uintptr_t)0x1234, "*out written by a failing create");
    cr_assert_eq(w.allocs, w.frees);
    cfg.debug.validate = 0; /* without validation it is optional */
    ASSERT_OK(fa_builder_create(&wbe, &cfg, NULL, &b));
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(cpu);
}

/* the registry of live builders is finite: creating past it fails cleanly (no leak, *out
   untouched), and a slot freed by a destroy is usable again */
Test(contract, registry_full_create_fails_cleanly)
{
    fa_backend *cpu = cpu_backend(), wbe;
    wrap_ctx w;
    fa_config cfg = test_cfg(4, 2, 32, FA_DTYPE_F32, 16, 2, 8);
    enum { MAXB = 4096 };
    fa_builder **bs = (fa_builder **)calloc(MAXB, sizeof *bs), *extra = (fa_builder *)(uintptr_t)0x1234;
    int n = 0;
    fa_status st = FA_OK;
    cr_assert(bs);
    make_wrap(&wbe, &w, cpu);
    while (n < MAXB && (st = fa_builder_create(&wbe, &cfg, NULL, &bs[n])) == FA_OK) ++n;
    cr_assert_lt(n, MAXB, "no limit on live builders reached after %d", n);
    cr_assert_eq(st, FA_ERR_OUT_OF_MEMORY, "create past the registry: %d (%s): %s", (int)st,
                 fa_status_string(st), fa_last_error());
    cr_assert(has_all(fa_last_error(), "builders"), "message \"%s\" does not say what ran out",
              fa_last_error());
    cr_assert(has_number(fa_last_error(), n), "message \"%s\" does not give the limit %d", fa_last_error(),
              n);
    cr_assert_eq(w.allocs - w.frees, n, "the failing create leaked a workspace (%d live allocs, %d builders)",
                 w.allocs - w.frees, n);
    cr_assert_null(bs[n], "*out written by the failing create");
    EXPECT_ERR(fa_builder_create(&wbe, &cfg, NULL, &extra), FA_ERR_OUT_OF_MEMORY, "builders");
    cr_assert_eq(extra, (fa_builder *)(uintptr_t)0x1234);
    fa_builder_destroy(bs[n / 2]);
    ASSERT_OK(fa_builder_create(&wbe, &cfg, NULL, &bs[n / 2]));
    for (int i = 0; i < n; ++i) fa_builder_destroy(bs[i]);
    cr_assert_eq(w.allocs, w.frees);
    free(bs);
    fa_cpu_backend_destroy(cpu);
}

/* ---------------------------------------------------------------------------------------- */
/* 7. overflow inputs */

Test(contract, overflow_use_cascade_int32_max_prefix)
{
    int32_t ql[64];
    for (int i = 0; i < 64; ++i) ql[i] = 1;
    cr_assert_eq(fa_use_cascade_attention(2147483647, ql, 64, 32, 8, 0, 0, 0, 132, 1), 1);
}

Test(contract, overflow_use_cascade_huge_heads_and_reqs)
{
    const int32_t n = 1 << 20;
    int32_t *ql = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    cr_assert(ql);
    for (int32_t i = 0; i < n; ++i) ql[i] = 1;
    cr_assert_eq(fa_use_cascade_attention(2147483447, ql, n, 1 << 30, 2, 0, 0, 0, 3, 1), 0);
    free(ql);
}

Test(contract, overflow_builder_dcp_max_context_len)
{
    fa_backend *be = cpu_backend();
    fa_config cfg = test_cfg(4, 2, 32, FA_DTYPE_F32, 16, 4, 16);
    fa_comm comm = make_comm(2, 0);
    fa_builder *b = NULL;
    int32_t qsl[2] = {0, 1}, seq[1] = {2147483647};
    int64_t slot[1] = {-1};
    fa_batch bt;
    fa_metadata md;
    int64_t sum = 0;
    for (int r = 0; r < 2; ++r) sum += fa_dcp_local_seq_len(2147483647, 2, r, 1);
    cr_assert_eq(sum, 2147483647LL);
    cr_assert_eq(fa_dcp_local_seq_len(2147483647, 2, 0, 1), 1073741824);
    cfg.parallel.dcp_world_size = 2;
    cfg.parallel.dcp_rank = 0;
    cfg.parallel.cp_kv_cache_interleave_size = 1;
    ASSERT_OK(fa_builder_create(be, &cfg, &comm, &b));
    memset(&bt, 0, sizeof bt);
    bt.num_reqs = 1;
    bt.query_start_loc = qsl;
    bt.seq_lens = seq;
    bt.slot_mapping = slot;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    cr_assert_eq(md.max_dcp_context_kv_len, 1073741824, "max_dcp_context_kv_len %d",
                 md.max_dcp_context_kv_len);
    /* the CPU backend's device memory is host memory */
    cr_assert_eq(md.dcp_context_kv_lens[0], fa_dcp_local_seq_len(2147483646, 2, 0, 1));
    cr_assert_eq(md.dcp_context_kv_lens[0], 1073741823);
    /* a small case: 37 tokens over 2 ranks -> at most 19 per rank */
    seq[0] = 37;
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    cr_assert_eq(md.max_dcp_context_kv_len, 19);
    cr_assert_eq(md.dcp_context_kv_lens[0], 18); /* context 36: positions 0, 2, .., 34 */
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
}

Test(contract, overflow_cascade_prefix_len_many_blocks)
{
    int32_t computed[64], ql[64], p = -1;
    fa_cascade_query q;
    for (int i = 0; i < 64; ++i) {
        computed[i] = 5000;
        ql[i] = 1;
    }
    memset(&q, 0, sizeof q);
    q.num_common_prefix_blocks = 134217728;
    q.block_size = 16;
    q.num_computed_tokens = computed;
    q.query_lens = ql;
    q.num_reqs = 64;
    q.num_heads_q = 32;
    q.num_heads_kv = 8;
    q.num_sms = 132;
    q.dcp_world_size = 1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 4992);
}

Test(contract, overflow_dcp_local_seq_len_huge_interleave)
{
    cr_assert_eq(fa_dcp_local_seq_len(5, 4, 3, 1 << 30), 0);
    cr_assert_eq(fa_dcp_local_seq_len(5, 4, 0, 1 << 30), 5);
}

Test(contract, overflow_kv_cache_strides_num_blocks)
{
    int64_t st[5] = {7, 7, 7, 7, 7}, before[5] = {7, 7, 7, 7, 7};
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_NHD, (int64_t)1 << 62, 16, 8, 128, st), FA_ERR_INVALID_ARG,
               "num_blocks");
    cr_assert(memcmp(st, before, sizeof st) == 0, "strides_out written by a failing call");
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_HND, (int64_t)1 << 62, 16, 8, 128, st), FA_ERR_INVALID_ARG,
               "num_blocks");
    cr_assert(memcmp(st, before, sizeof st) == 0, "strides_out written by a failing call");
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_NHD, (int64_t)1 << 50, 16, 8, 128, st), FA_ERR_INVALID_ARG,
               "num_blocks");
    cr_assert(memcmp(st, before, sizeof st) == 0, "strides_out written by a failing call");
    for (int i = 0; i < 5; ++i) cr_assert_neq(st[i], 0);
}

Test(contract, overflow_supports_compute_capability)
{
    cr_assert_eq(fa_supports_compute_capability(214748365, 0), 1);
    cr_assert_eq(fa_supports_compute_capability(INT32_MAX, INT32_MAX), 1);
    cr_assert_eq(fa_supports_compute_capability(7, INT32_MAX), 0);
}

Test(contract, overflow_tensor_make_element_count)
{
    int64_t shape[3] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40};
    char x;
    fa_tensor t = fa_tensor_make(&x, FA_DTYPE_F16, 3, shape);
    cr_assert_eq(t.rank, 0, "a shape of 2^120 elements made a rank-%d tensor", t.rank);
}

Test(contract, overflow_workspace_size_names_region)
{
    fa_config cfg = test_cfg(1 << 20, 0, 256, FA_DTYPE_F16, 16, INT32_MAX, INT32_MAX);
    size_t bytes = 777;
    fa_status st;
    cfg.compilation.max_num_splits = 128;
    st = fa_builder_workspace_size(&cfg, &bytes);
    cr_assert_neq(st, FA_OK, "workspace size of a 2^66-byte layout returned FA_OK with %zu bytes", bytes);
    cr_assert(has_all(fa_last_error(),
                      "region&split_out|split_lse|prefix_out|prefix_lse|suffix|dcp|metadata"),
              "message \"%s\" does not name the region", fa_last_error());
    cr_assert_eq(bytes, 777u, "bytes_out written by a failing call");
}

static void plan_huge_window(int32_t qlen)
{
    int32_t cu[2] = {0, qlen}, sk[1] = {INT32_MAX - 1}, plan[2] = {-1, -1};
    fa_split_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 1;
    p.cu_seqlens_q = cu;
    p.seqused_k = sk;
    p.num_heads_q = 8;
    p.num_heads_kv = 8;
    p.head_size = 128;
    p.causal = 0;
    p.window.left = INT32_MAX - 2;
    p.window.right = INT32_MAX - 1;
    p.num_sms = 132;
    p.max_num_splits = 128;
    p.caps = test_caps();
    ASSERT_OK(fa_plan_splits(&p, plan, 2));
    cr_assert(plan[0] >= 1 && plan[0] <= 128, "qlen %d: static splits %d", qlen, plan[0]);
    cr_assert(plan[1] >= 1 && plan[1] <= plan[0], "qlen %d: splits %d of %d", qlen, plan[1], plan[0]);
    /* the window spans every key: the plan is the unwindowed one */
    {
        int32_t plan2[2];
        p.window.left = -1;
        p.window.right = -1;
        ASSERT_OK(fa_plan_splits(&p, plan2, 2));
        cr_assert(plan[0] == plan2[0] && plan[1] == plan2[1],
                  "qlen %d: a window wider than the keys changed the plan "
                  "(%d,%d) vs (%d,%d)",
                  qlen, plan[0], plan[1], plan2[0], plan2[1]);
    }
}

Test(contract, overflow_plan_splits_huge_window_non_causal)
{
    plan_huge_window(1);    /* decode tile */
    plan_huge_window(1000); /* prefill tile */
}

Test(contract, overflow_block_table_stride_2_pow_33_max_blocks_0)
{
    fa_backend *be = cpu_backend();
    fa_config cfg = test_cfg(4, 2, 32, FA_DTYPE_F32, 16, 4, 64);
    fa_builder *b = NULL;
    int32_t qsl[2] = {0, 40}, seq[1] = {40}, bt[8] = {11, 12, 13, 14, 15, 16, 17, 18};
    int64_t slots[40];
    fa_batch batch;
    fa_metadata md;
    for (int i = 0; i < 40; ++i) slots[i] = i;
    cfg.scheduler.attention_chunk_size = 32; /* chunked local reads the host table through max_blocks */
    ASSERT_OK(fa_builder_create(be, &cfg, NULL, &b));
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = 1;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.block_table = bt;
    batch.block_table_host = bt;
    batch.block_table_stride = (int64_t)1 << 33;
    batch.max_blocks = 0;
    batch.slot_mapping = slots;
    ASSERT_OK(fa_builder_build(b, &batch, 0, &md));
    cr_assert_eq(md.block_table_stride, (int64_t)1 << 33);
    cr_assert_eq(md.has_local, 1);
    cr_assert_eq(md.local.num_virtual, 2);
    /* chunks [0, 32) and [32, 40): columns 0,1 and 2,3 (no clipping to a truncated max_blocks) */
    cr_assert_eq(md.local.block_table[0], 11);
    cr_assert_eq(md.local.block_table[1], 12);
    cr_assert_eq(md.local.block_table[2], 13);
    cr_assert_eq(md.local.block_table[3], 14);
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
}

Test(contract, overflow_query_start_loc_wraps_rejected)
{
    fa_backend *be = cpu_backend();
    fa_config cfg = test_cfg(4, 2, 32, FA_DTYPE_F32, 16, 8, 64);
    fa_builder *b = NULL;
    int32_t qsl[5] = {0, INT32_MAX, INT32_MIN, -5, 5}, seq[4] = {1, 1, 1, 1};
    fa_batch batch;
    fa_metadata md, before;
    int32_t p = -1;
    ASSERT_OK(fa_builder_create(be, &cfg, NULL, &b));
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = 4;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.causal = FA_CAUSAL_OFF;
    memset(&md, 0x3C, sizeof md);
    before = md;
    EXPECT_ERR(fa_builder_build(b, &batch, 0, &md), FA_ERR_INVALID_ARG, "query_start_loc");
    cr_assert(memcmp(&md, &before, sizeof md) == 0, "md_out written by a failing build");
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, &batch, 0, &p), FA_ERR_INVALID_ARG, "query_start_loc");
    cr_assert_eq(p, -1);
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
}

/* ---------------------------------------------------------------------------------------- */
/* 8. message quality */

/* Every error about a dtype value that is not an fa_dtype (9) prints the number. Runs every case
   and lists the messages that do not, so one run gives the whole list. */
Test(contract, unknown_dtype_value_is_printed)
{
    fa_backend *be = cpu_backend();
    env e;
    causal_env(&e, be);
    fa_builder *b = env_builder(&e, NULL, NULL);
    fa_layer dec = env_layer(&e, FA_ATTN_DECODER, 0, 0);
    fa_batch bt = env_batch(&e, FA_CAUSAL_AUTO);
    fa_metadata md;
    fa_tensor *which[4] = {&e.tq, &e.tk, &e.tout, &e.tc};
    const char *names[4] = {"q", "k", "out", "kv_cache"};
    char missing[2048] = "";
    ASSERT_OK(fa_builder_build(b, &bt, 0, &md));
    for (int i = 0; i < 4; ++i) {
        fa_dtype keep = which[i]->dtype;
        which[i]->dtype = (fa_dtype)9;
        FORWARD_FAILS(&e, NULL, &dec, &md, 1, FA_ERR_INVALID_ARG, names[i]);
        cr_assert(has_all(fa_last_error(), "dtype"), "message \"%s\" does not say dtype", fa_last_error());
        if (!has_number(fa_last_error(), 9))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                     "\n  fa_forward (%s.dtype = 9): \"%s\"", names[i], fa_last_error());
        which[i]->dtype = keep;
    }
    {
        fa_tensor o = e.tout;
        snap s = snap_take(&e);
        o.dtype = (fa_dtype)9;
        EXPECT_ERR(fa_forward_profile(&dec, be, &o), FA_ERR_INVALID_ARG, "out&dtype");
        snap_same(&e, &s, __LINE__);
        snap_free(&s);
        if (!has_number(fa_last_error(), 9))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                     "\n  fa_forward_profile (out.dtype = 9): \"%s\"", fa_last_error());
    }
    {
        fa_config c = env_cfg(&e), r;
        c.model.dtype = (fa_dtype)9;
        EXPECT_ERR(fa_config_resolve(&c, &r), FA_ERR_INVALID_ARG, "dtype");
        if (!has_number(fa_last_error(), 9))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                     "\n  fa_config_resolve (model.dtype = 9): \"%s\"", fa_last_error());
    }
    {
        fa_layer_desc d = test_desc(e.Hq, e.Hkv, e.D, (fa_dtype)9);
        fa_layer L;
        EXPECT_ERR(fa_layer_init(&L, &d), FA_ERR_INVALID_ARG, "dtype");
        if (!has_number(fa_last_error(), 9))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                     "\n  fa_layer_init (dtype = 9): \"%s\"", fa_last_error());
    }
    cr_assert(missing[0] == 0, "messages that do not print the unknown dtype value 9:%s", missing);
    fa_builder_destroy(b);
    env_free(&e);
    fa_cpu_backend_destroy(be);
}
