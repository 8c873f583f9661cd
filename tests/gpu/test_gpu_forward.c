/* test_gpu_forward.c - every forward path on CUDA == on the CPU reference backend.

   Builds the same scene twice (CUDA backend and CPU backend: same block tables, same cache
   contents written through each backend's reshape_and_cache, same q/k/v), runs fa_forward on
   both and compares the outputs: plain (mixed q_len 1 + prefills; NHD and HND; bf16 and fp8
   caches; window + softcap + ALiBi + sinks), cascade, chunked local, encoder and encoder-only,
   cross-attention without new k/v, kv-sharing (no cache write), the profiling run, and DCP
   with one rank and with two ranks through an in-test comm over device memory (two threads,
   two streams on one GPU) against the single-rank CPU forward.
   Outputs are poisoned (0xFF bytes = NaN) before every run; data is random, never zeros.
   Prints one line per case and `N passed, M failed` last. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_cpu.h"
#include "fa_cuda.h"
#include "flashattn.h"
#include "gpu_family.h"

static int passed, failed;
static uint64_t rng_state = 0x243f6a8885a308d3ull;

static unsigned urand8(void);
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.f;
}

#define OK(call) \
    do { \
        fa_status s_ = (call); \
        if (s_ != FA_OK) { \
            printf("#   %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, fa_status_string(s_), \
                   fa_last_error()); \
            return -1; \
        } \
    } while (0)

static unsigned urand8(void) { return (unsigned)((frand() + 1.f) * 127.9f); }

/* ---- a scene: model, batch, cache contents ---------------------------------------------- */
typedef struct scene {
    int32_t hq, hkv, d, bs, nreq, t, nblocks, max_blocks;
    fa_kv_layout layout;
    fa_cache_dtype cache_dtype;
    int32_t qsl[65], seq[64], ctx[64];
    int32_t *bt;                      /* [nreq, max_blocks] host */
    int64_t *slots;                   /* [t] host: new tokens */
    int64_t *ctx_slots;               /* [sum ctx] host: context tokens */
    int32_t nctx;
    uint16_t *q, *k, *v;              /* bf16 host [t, h, d] */
    uint16_t *ck, *cv;                /* bf16 host [nctx, hkv, d] context k/v */
    int32_t chunk;                    /* chunked local attention (0 = off) */
    int32_t causal;
    int32_t interleave;               /* DCP interleave (0 = 1) */
} scene;

static void scene_free(scene *s)
{
    free(s->bt);
    free(s->slots);
    free(s->ctx_slots);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->ck);
    free(s->cv);
}

/* Request b: query length ql[b], context ctx[b]; `shared` leading blocks common to every row. */
static void scene_make(scene *s, int32_t nreq, const int32_t *ql, const int32_t *ctx, int32_t shared_blocks)
{
    int32_t b, j, t = 0, n = 0, free_block;
    int32_t maxlen = 0;
    s->nreq = nreq;
    s->qsl[0] = 0;
    for (b = 0; b < nreq; ++b) {
        s->ctx[b] = ctx[b];
        s->seq[b] = ctx[b] + ql[b];
        s->qsl[b + 1] = s->qsl[b] + ql[b];
        if (s->seq[b] > maxlen) maxlen = s->seq[b];
    }
    s->t = s->qsl[nreq];
    s->max_blocks = (maxlen + s->bs - 1) / s->bs + 2;
    s->nblocks = nreq * s->max_blocks + 16;
    s->bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nreq * s->max_blocks));
    /* shuffled block ids; the shared prefix blocks are the same physical blocks in every row */
    free_block = s->nblocks - 1;
    for (b = 0; b < nreq; ++b)
        for (j = 0; j < s->max_blocks; ++j)
            s->bt[b * s->max_blocks + j] = (j < shared_blocks && b > 0) ? s->bt[j] : free_block--;
    for (j = 0; j < nreq * s->max_blocks; ++j) { /* permute ids (a bijection keeps sharing) */
        s->bt[j] = (int32_t)(((int64_t)s->bt[j] * 7919 + 13) % s->nblocks);
    }
    s->slots = (int64_t *)malloc(sizeof(int64_t) * (size_t)s->t);
    s->nctx = 0;
    for (b = 0; b < nreq; ++b) s->nctx += ctx[b];
    s->ctx_slots = (int64_t *)malloc(sizeof(int64_t) * (size_t)(s->nctx + 1));
    for (b = 0; b < nreq; ++b) {
        for (j = 0; j < s->seq[b]; ++j) {
            int64_t slot = (int64_t)s->bt[b * s->max_blocks + j / s->bs] * s->bs + j % s->bs;
            if (j < ctx[b]) {
                /* shared blocks are written once (by row 0) */
                s->ctx_slots[n++] = (b > 0 && j / s->bs < shared_blocks) ? -1 : slot;
            } else {
                s->slots[t++] = slot;
            }
        }
    }
    s->q = (uint16_t *)malloc(2 * (size_t)s->t * s->hq * s->d);
    s->k = (uint16_t *)malloc(2 * (size_t)s->t * s->hkv * s->d);
    s->v = (uint16_t *)malloc(2 * (size_t)s->t * s->hkv * s->d);
    s->ck = (uint16_t *)malloc(2 * (size_t)(s->nctx + 1) * s->hkv * s->d);
    s->cv = (uint16_t *)malloc(2 * (size_t)(s->nctx + 1) * s->hkv * s->d);
    for (j = 0; j < s->t * s->hq * s->d; ++j) s->q[j] = fa_cpu_float_to_bf16(frand());
    for (j = 0; j < s->t * s->hkv * s->d; ++j) {
        s->k[j] = fa_cpu_float_to_bf16(frand());
        s->v[j] = fa_cpu_float_to_bf16(frand());
    }
    for (j = 0; j < s->nctx * s->hkv * s->d; ++j) {
        s->ck[j] = fa_cpu_float_to_bf16(frand());
        s->cv[j] = fa_cpu_float_to_bf16(frand());
    }
}

/* ---- one backend's copy of the scene ----------------------------------------------------- */
typedef struct world {
    fa_backend *be;
    fa_builder *b;
    void *cache, *q, *k, *v, *out, *ck, *cv;
    int32_t *bt;
    int64_t *slots, *ctx_slots;
    fa_tensor cache_t;
    size_t cache_bytes;
} world;

static void *dalloc(fa_backend *be, size_t n)
{
    void *p = NULL;
    if (be->ops.alloc(be->ctx, n ? n : 16, &p) != FA_OK) return NULL;
    return p;
}

static void world_free(world *w)
{
    fa_backend *be = w->be;
    void *ps[] = {w->cache, w->q, w->k, w->v, w->out, w->ck, w->cv, w->bt, w->slots, w->ctx_slots};
    size_t i;
    for (i = 0; i < sizeof ps / sizeof ps[0]; ++i)
        if (ps[i]) be->ops.free(be->ctx, ps[i]);
    if (w->b) fa_builder_destroy(w->b);
    memset(w, 0, sizeof *w);
}

static fa_dtype cache_storage(const scene *s)
{
    return fa_cache_storage_dtype(s->cache_dtype, FA_DTYPE_BF16);
}

static fa_config scene_config(const scene *s, int32_t dcp, int32_t rank)
{
    fa_config c;
    memset(&c, 0, sizeof c);
    c.model.num_heads_q = s->hq;
    c.model.num_heads_kv = s->hkv;
    c.model.head_size = s->d;
    c.cache.block_size = s->bs;
    c.cache.cache_dtype = s->cache_dtype;
    c.cache.layout = s->layout;
    c.scheduler.max_num_seqs = 64;
    c.scheduler.max_num_batched_tokens = 4096;
    c.scheduler.attention_chunk_size = s->chunk;
    c.parallel.dcp_world_size = dcp;
    c.parallel.dcp_rank = rank;
    c.parallel.cp_kv_cache_interleave_size = s->interleave;
    return c;
}

/* Uploads the scene and writes the context K/V into the cache (through reshape_and_cache).
   ctx_slots may be a DCP rank's mapping. */
static int world_init(world *w, fa_backend *be, const scene *s, const fa_comm *comm, int32_t dcp,
                      int32_t rank, const int64_t *ctx_slots, const int64_t *slots)
{
    fa_config c = scene_config(s, dcp, rank);
    fa_dtype cdt = cache_storage(s);
    int64_t shape[5], strides[5];
    fa_cache_write_args wa;
    size_t q_bytes = 2 * (size_t)s->t * s->hq * s->d, kv_bytes = 2 * (size_t)s->t * s->hkv * s->d;
    memset(w, 0, sizeof *w);
    w->be = be;
    OK(fa_builder_create(be, &c, comm, &w->b));
    OK(fa_kv_cache_shape(s->nblocks, s->bs, s->hkv, s->d, shape));
    OK(fa_kv_cache_strides(s->layout, s->nblocks, s->bs, s->hkv, s->d, strides));
    w->cache_bytes = (size_t)(2 * (int64_t)s->nblocks * s->bs * s->hkv * s->d) * fa_dtype_size(cdt);
    w->cache = dalloc(be, w->cache_bytes);
    w->q = dalloc(be, q_bytes);
    w->k = dalloc(be, kv_bytes);
    w->v = dalloc(be, kv_bytes);
    w->out = dalloc(be, q_bytes);
    w->ck = dalloc(be, 2 * (size_t)(s->nctx + 1) * s->hkv * s->d);
    w->cv = dalloc(be, 2 * (size_t)(s->nctx + 1) * s->hkv * s->d);
    w->bt = (int32_t *)dalloc(be, sizeof(int32_t) * (size_t)(s->nreq * s->max_blocks));
    w->slots = (int64_t *)dalloc(be, sizeof(int64_t) * (size_t)s->t);
    w->ctx_slots = (int64_t *)dalloc(be, sizeof(int64_t) * (size_t)(s->nctx + 1));
    if (!w->cache || !w->q || !w->k || !w->v || !w->out || !w->ck || !w->cv || !w->bt || !w->slots ||
        !w->ctx_slots) {
        printf("#   allocation failed\n");
        return -1;
    }
    w->cache_t = fa_tensor_make(w->cache, cdt, 5, shape);
    memcpy(w->cache_t.stride, strides, sizeof strides);
    /* NaN bytes everywhere the scene never writes: unused slots, blocks past seqused_k */
    OK(be->ops.fill(be->ctx, w->cache, w->cache_bytes, 0xFF, w->cache_bytes, 1));
    OK(be->ops.copy(be->ctx, w->q, s->q, q_bytes, FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->k, s->k, kv_bytes, FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->v, s->v, kv_bytes, FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->ck, s->ck, 2 * (size_t)(s->nctx + 1) * s->hkv * s->d,
                    FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->cv, s->cv, 2 * (size_t)(s->nctx + 1) * s->hkv * s->d,
                    FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->bt, s->bt, sizeof(int32_t) * (size_t)(s->nreq * s->max_blocks),
                    FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->slots, slots, sizeof(int64_t) * (size_t)s->t, FA_COPY_HOST_TO_DEVICE));
    OK(be->ops.copy(be->ctx, w->ctx_slots, ctx_slots, sizeof(int64_t) * (size_t)(s->nctx + 1),
                    FA_COPY_HOST_TO_DEVICE));
    if (s->nctx > 0) {
        memset(&wa, 0, sizeof wa);
        wa.key = w->ck;
        wa.value = w->cv;
        wa.key_token_stride = wa.value_token_stride = (int64_t)s->hkv * s->d;
        wa.kv_dtype = FA_DTYPE_BF16;
        wa.key_cache = w->cache;
        wa.value_cache = (char *)w->cache + (size_t)strides[0] * fa_dtype_size(cdt);
        wa.cache_block_stride = strides[1];
        wa.cache_row_stride = strides[2];
        wa.cache_head_stride = strides[3];
        wa.cache_dtype = cdt;
        wa.slot_mapping = w->ctx_slots;
        wa.num_tokens = s->nctx;
        wa.num_heads_kv = s->hkv;
        wa.head_size = s->d;
        wa.block_size = s->bs;
        wa.num_blocks = s->nblocks;
        wa.k_scale = 0.02f;
        wa.v_scale = 0.02f;
        OK(be->ops.reshape_and_cache(be->ctx, &wa));
    }
    return 0;
}

static fa_batch world_batch(const world *w, const scene *s)
{
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = s->nreq;
    b.query_start_loc = s->qsl;
    b.seq_lens = s->seq;
    b.block_table = w->bt;
    b.block_table_stride = s->max_blocks;
    b.block_table_host = s->bt;
    b.slot_mapping = w->slots;
    b.causal = s->causal ? FA_CAUSAL_ON : FA_CAUSAL_OFF;
    return b;
}

/* Runs one forward and copies the output to host (bf16). k/v NULL when with_kv == 0. */
static int world_forward(world *w, const scene *s, const fa_layer *layer, const fa_metadata *md, int with_kv,
                         uint16_t *out_host)
{
    fa_backend *be = w->be;
    int64_t qs[3] = {s->t, s->hq, s->d}, ks[3] = {s->t, s->hkv, s->d};
    fa_tensor tq = fa_tensor_make(w->q, FA_DTYPE_BF16, 3, qs),
              to = fa_tensor_make(w->out, FA_DTYPE_BF16, 3, qs);
    fa_tensor tk = fa_tensor_make(w->k, FA_DTYPE_BF16, 3, ks),
              tv = fa_tensor_make(w->v, FA_DTYPE_BF16, 3, ks);
    size_t q_bytes = 2 * (size_t)s->t * s->hq * s->d;
    OK(be->ops.fill(be->ctx, w->out, q_bytes, 0xFF, q_bytes, 1)); /* poison */
    OK(fa_forward(layer, be, &tq, with_kv ? &tk : NULL, with_kv ? &tv : NULL, &w->cache_t, md, &to));
    OK(be->ops.copy(be->ctx, out_host, w->out, q_bytes, FA_COPY_DEVICE_TO_HOST));
    if (be->ops.synchronize) OK(be->ops.synchronize(be->ctx));
    return 0;
}

static double max_err(const uint16_t *a, const uint16_t *b, size_t n)
{
    double e = 0;
    size_t i;
    for (i = 0; i < n; ++i) {
        double x = fa_cpu_bf16_to_float(a[i]), y = fa_cpu_bf16_to_float(b[i]), d = fabs(x - y);
        if (d != d) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

static void report(const char *name, int rc, double err, double tol)
{
    int ok = rc == 0 && err <= tol;
    /* TAP: one test point per case */
    printf("%sok %d - %s (max abs err %.3g, tol %.3g)\n", ok ? "" : "not ", passed + failed + 1, name, err,
           tol);
    if (ok)
        passed++;
    else
        failed++;
}

static fa_backend *g_cuda, *g_cpu;
static float *g_sinks_dev, *g_sinks_host, *g_alibi_dev, *g_alibi_host;

/* One case: same scene on both backends; the CPU side runs plain (no cascade) unless told. */
static void run_case(const char *name, scene *s, const fa_layer_desc *ld, int32_t prefix, int with_kv,
                     double tol)
{
    world wc, wh;
    fa_layer lc, lh;
    fa_layer_desc dc = *ld, dh = *ld;
    fa_batch bc, bh;
    fa_metadata mc, mh;
    uint16_t *oc = (uint16_t *)malloc(2 * (size_t)s->t * s->hq * s->d);
    uint16_t *oh = (uint16_t *)malloc(2 * (size_t)s->t * s->hq * s->d);
    int rc = -1;
    double err = INFINITY;
    memset(&wc, 0, sizeof wc);
    memset(&wh, 0, sizeof wh);
    if (ld->sinks) {
        dc.sinks = g_sinks_dev;
        dh.sinks = g_sinks_host;
    }
    if (ld->alibi_slopes) {
        dc.alibi_slopes = g_alibi_dev;
        dh.alibi_slopes = g_alibi_host;
    }
    if (fa_layer_init(&lc, &dc) != FA_OK || fa_layer_init(&lh, &dh) != FA_OK) {
        printf("#   layer: %s\n", fa_last_error());
        goto done;
    }
    if (world_init(&wc, g_cuda, s, NULL, 1, 0, s->ctx_slots, s->slots) ||
        world_init(&wh, g_cpu, s, NULL, 1, 0, s->ctx_slots, s->slots))
        goto done;
    bc = world_batch(&wc, s);
    bh = world_batch(&wh, s);
    if (fa_builder_build(wc.b, &bc, prefix, &mc) != FA_OK || fa_builder_build(wh.b, &bh, 0, &mh) != FA_OK) {
        printf("#   build: %s\n", fa_last_error());
        goto done;
    }
    if (world_forward(&wc, s, &lc, &mc, with_kv, oc) || world_forward(&wh, s, &lh, &mh, with_kv, oh))
        goto done;
    err = max_err(oc, oh, (size_t)s->t * s->hq * s->d);
    rc = 0;
done:
    report(name, rc, err, tol);
    world_free(&wc);
    world_free(&wh);
    free(oc);
    free(oh);
}

/* ---- a comm for several ranks on one GPU: device buffers, host staging, threads ---------- */
typedef struct dev_comm_group {
    int32_t n;
    pthread_barrier_t bar;
    fa_backend **be;                  /* per rank */
    const void **send;
    unsigned char *stage;             /* host */
    size_t stage_bytes;
} dev_comm_group;

typedef struct dev_comm_rank {
    dev_comm_group *g;
    int32_t rank;
} dev_comm_rank;

static fa_status dc_all_gather(void *ctx, const void *send, void *recv, size_t count, fa_dtype dt)
{
    dev_comm_rank *r = (dev_comm_rank *)ctx;
    dev_comm_group *g = r->g;
    fa_backend *be = g->be[r->rank];
    size_t bytes = count * fa_dtype_size(dt);
    fa_status s;
    if (bytes * (size_t)g->n > g->stage_bytes) return FA_ERR_WORKSPACE;
    /* each rank stages its chunk on the host, then every rank uploads the whole gather */
    s = be->ops.copy(be->ctx, g->stage + bytes * (size_t)r->rank, send, bytes, FA_COPY_DEVICE_TO_HOST);
    if (s == FA_OK) s = be->ops.synchronize(be->ctx);
    pthread_barrier_wait(&g->bar);
    if (s == FA_OK) s = be->ops.copy(be->ctx, recv, g->stage, bytes * (size_t)g->n, FA_COPY_HOST_TO_DEVICE);
    if (s == FA_OK) s = be->ops.synchronize(be->ctx);
    pthread_barrier_wait(&g->bar);
    return s;
}

static fa_status dc_reduce_scatter(void *ctx, const void *send, void *recv, size_t count, fa_dtype dt)
{
    dev_comm_rank *r = (dev_comm_rank *)ctx;
    dev_comm_group *g = r->g;
    fa_backend *be = g->be[r->rank];
    size_t total = count * (size_t)g->n, i, es = fa_dtype_size(dt);
    unsigned char *mine = g->stage + total * es * (size_t)r->rank;
    uint16_t *res;
    fa_status s;
    int32_t k;
    if (dt != FA_DTYPE_BF16 || total * es * (size_t)(g->n + 1) > g->stage_bytes) return FA_ERR_UNSUPPORTED;
    s = be->ops.copy(be->ctx, mine, send, total * es, FA_COPY_DEVICE_TO_HOST);
    if (s == FA_OK) s = be->ops.synchronize(be->ctx);
    pthread_barrier_wait(&g->bar);
    /* rank r sums chunk r of every rank in float, rounds once */
    res = (uint16_t *)(g->stage + total * es * (size_t)g->n) + count * (size_t)r->rank;
    for (i = 0; i < count; ++i) {
        float acc = 0.f;
        for (k = 0; k < g->n; ++k)
            acc += fa_cpu_bf16_to_float(
                ((const uint16_t *)(g->stage + total * es * (size_t)k))[count * (size_t)r->rank + i]);
        res[i] = fa_cpu_float_to_bf16(acc);
    }
    if (s == FA_OK) s = be->ops.copy(be->ctx, recv, res, count * es, FA_COPY_HOST_TO_DEVICE);
    if (s == FA_OK) s = be->ops.synchronize(be->ctx);
    pthread_barrier_wait(&g->bar);
    return s;
}

typedef struct dcp_arg {
    const scene *s;
    const fa_layer_desc *ld;
    fa_comm *comm;
    fa_backend *be;
    int32_t rank, n, interleave;
    uint16_t *out;
    int rc;
} dcp_arg;

static int dcp_rank_run(dcp_arg *a)
{
    const scene *s = a->s;
    int64_t *cs = (int64_t *)malloc(sizeof(int64_t) * (size_t)(s->nctx + 1));
    int64_t *ns = (int64_t *)malloc(sizeof(int64_t) * (size_t)s->t);
    int32_t *req = (int32_t *)malloc(sizeof(int32_t) * (size_t)(s->nctx + s->t + 1));
    int32_t *pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)(s->nctx + s->t + 1));
    int32_t b, j, n = 0, m = 0;
    world w;
    fa_layer layer;
    fa_layer_desc d = *a->ld;
    fa_batch batch;
    fa_metadata md;
    int rc = -1;
    memset(&w, 0, sizeof w);
    /* this rank's slots: context tokens then new tokens, through the DCP slot mapping */
    for (b = 0; b < s->nreq; ++b)
        for (j = 0; j < s->ctx[b]; ++j) {
            req[n] = b;
            pos[n] = j;
            n++;
        }
    for (b = 0; b < s->nreq; ++b)
        for (j = s->ctx[b]; j < s->seq[b]; ++j) {
            req[n + m] = b;
            pos[n + m] = j;
            m++;
        }
    if (fa_dcp_slot_mapping(s->bt, s->max_blocks, s->max_blocks, s->bs, req, pos, n, a->n, a->rank,
                            a->interleave, cs) != FA_OK ||
        fa_dcp_slot_mapping(s->bt, s->max_blocks, s->max_blocks, s->bs, req + n, pos + n, m, a->n, a->rank,
                            a->interleave, ns) != FA_OK) {
        printf("#   slot mapping: %s\n", fa_last_error());
        goto out;
    }
    d.dcp_world_size = a->n;
    if (d.sinks) d.sinks = g_sinks_dev;
    if (fa_layer_init(&layer, &d) != FA_OK) {
        printf("#   layer: %s\n", fa_last_error());
        goto out;
    }
    {
        scene s2 = *s; /* the DCP config: this rank, the interleave */
        s2.interleave = a->interleave;
        if (world_init(&w, a->be, &s2, a->comm, a->n, a->rank, cs, ns)) goto out;
    }
    batch = world_batch(&w, s);
    if (fa_builder_build(w.b, &batch, 0, &md) != FA_OK) {
        printf("#   build: %s\n", fa_last_error());
        goto out;
    }
    if (world_forward(&w, s, &layer, &md, 1, a->out)) goto out;
    rc = 0;
out:
    world_free(&w);
    free(cs);
    free(ns);
    free(req);
    free(pos);
    return rc;
}

static void *dcp_thread(void *p)
{
    dcp_arg *a = (dcp_arg *)p;
    a->rc = dcp_rank_run(a);
    return NULL;
}

static void run_dcp_case(const char *name, scene *s, const fa_layer_desc *ld, int32_t n, int32_t interleave)
{
    dev_comm_group g;
    dev_comm_rank rk[4];
    fa_comm comms[4];
    fa_backend *bes[4];
    dcp_arg args[4];
    pthread_t th[4];
    world wh;
    fa_layer lh;
    fa_batch bh;
    fa_metadata mh;
    size_t q_elems = (size_t)s->t * s->hq * s->d;
    uint16_t *oh = (uint16_t *)malloc(2 * q_elems), *outs[4];
    int32_t r;
    int rc = 0;
    double err = 0;
    memset(&g, 0, sizeof g);
    memset(&wh, 0, sizeof wh);
    g.n = n;
    g.be = bes;
    g.stage_bytes = (size_t)(n + 1) * (size_t)n * 4 * (size_t)s->t * s->hq * s->d * 2 + (1u << 20);
    g.stage = (unsigned char *)malloc(g.stage_bytes);
    pthread_barrier_init(&g.bar, NULL, (unsigned)n);
    for (r = 0; r < n; ++r) {
        outs[r] = (uint16_t *)malloc(2 * q_elems);
        if (fa_cuda_backend_create(0, NULL, &bes[r]) != FA_OK) {
            printf("#   cuda: %s\n", fa_cuda_create_error());
            rc = -1;
        } else if (gt_apply_family(bes[r]) != 0) {
            rc = -1;
        }
        rk[r].g = &g;
        rk[r].rank = r;
        memset(&comms[r], 0, sizeof comms[r]);
        comms[r].api_version = FA_BACKEND_API_VERSION;
        comms[r].world_size = n;
        comms[r].rank = r;
        comms[r].ctx = &rk[r];
        comms[r].all_gather = dc_all_gather;
        comms[r].reduce_scatter = dc_reduce_scatter;
        args[r].s = s;
        args[r].ld = ld;
        args[r].comm = &comms[r];
        args[r].be = bes[r];
        args[r].rank = r;
        args[r].n = n;
        args[r].interleave = interleave;
        args[r].out = outs[r];
        args[r].rc = -1;
    }
    if (rc == 0) {
        for (r = 0; r < n; ++r) pthread_create(&th[r], NULL, dcp_thread, &args[r]);
        for (r = 0; r < n; ++r) pthread_join(th[r], NULL);
        for (r = 0; r < n; ++r) rc |= args[r].rc;
    }
    /* reference: one CPU rank, plain */
    if (rc == 0) {
        fa_layer_desc dh = *ld;
        if (ld->sinks) dh.sinks = g_sinks_host;
        if (fa_layer_init(&lh, &dh) != FA_OK || world_init(&wh, g_cpu, s, NULL, 1, 0, s->ctx_slots, s->slots))
            rc = -1;
    }
    if (rc == 0) {
        bh = world_batch(&wh, s);
        if (fa_builder_build(wh.b, &bh, 0, &mh) != FA_OK || world_forward(&wh, s, &lh, &mh, 1, oh)) rc = -1;
    }
    if (rc == 0)
        for (r = 0; r < n; ++r) {
            double e = max_err(outs[r], oh, q_elems);
            if (e > err) err = e;
        }
    report(name, rc, rc ? INFINITY : err, 2e-2);
    world_free(&wh);
    for (r = 0; r < n; ++r) {
        free(outs[r]);
        if (bes[r]) fa_cuda_backend_destroy(bes[r]);
    }
    pthread_barrier_destroy(&g.bar);
    free(g.stage);
    free(oh);
}

/* ---- profiling run and kv-sharing ------------------------------------------------------- */
static void run_profiling_case(scene *s)
{
    world w;
    fa_layer layer;
    fa_layer_desc d;
    int64_t qs[3] = {s->t, s->hq, s->d};
    uint16_t *o = (uint16_t *)malloc(2 * (size_t)s->t * s->hq * s->d);
    size_t i, bytes = 2 * (size_t)s->t * s->hq * s->d;
    int rc = -1;
    double err = INFINITY;
    memset(&d, 0, sizeof d);
    d.num_heads_q = s->hq;
    d.num_heads_kv = s->hkv;
    d.head_size = s->d;
    if (fa_layer_init(&layer, &d) == FA_OK &&
        world_init(&w, g_cuda, s, NULL, 1, 0, s->ctx_slots, s->slots) == 0) {
        fa_tensor to = fa_tensor_make(w.out, FA_DTYPE_BF16, 3, qs);
        if (g_cuda->ops.fill(g_cuda->ctx, w.out, bytes, 0xFF, bytes, 1) == FA_OK &&
            fa_forward_profile(&layer, g_cuda, &to) == FA_OK &&
            g_cuda->ops.copy(g_cuda->ctx, o, w.out, bytes, FA_COPY_DEVICE_TO_HOST) == FA_OK &&
            g_cuda->ops.synchronize(g_cuda->ctx) == FA_OK) {
            rc = 0;
            err = 0;
            for (i = 0; i < bytes / 2; ++i)
                if (o[i] != 0) err = INFINITY;
        } else {
            printf("#   %s\n", fa_last_error());
        }
        world_free(&w);
    }
    report("profiling run (no metadata) zeroes the output", rc, err, 0);
    free(o);
}

static void run_kv_sharing_case(scene *s)
{
    world w;
    fa_layer layer;
    fa_layer_desc d;
    fa_batch b;
    fa_metadata md;
    unsigned char *before, *after;
    uint16_t *o = (uint16_t *)malloc(2 * (size_t)s->t * s->hq * s->d);
    int rc = -1;
    double err = INFINITY;
    memset(&d, 0, sizeof d);
    d.num_heads_q = s->hq;
    d.num_heads_kv = s->hkv;
    d.head_size = s->d;
    d.kv_sharing = 1;
    if (fa_layer_init(&layer, &d) != FA_OK || world_init(&w, g_cuda, s, NULL, 1, 0, s->ctx_slots, s->slots)) {
        report("kv-sharing layer does not write the cache", -1, err, 0);
        free(o);
        return;
    }
    before = (unsigned char *)malloc(w.cache_bytes);
    after = (unsigned char *)malloc(w.cache_bytes);
    b = world_batch(&w, s);
    if (g_cuda->ops.copy(g_cuda->ctx, before, w.cache, w.cache_bytes, FA_COPY_DEVICE_TO_HOST) == FA_OK &&
        fa_builder_build(w.b, &b, 0, &md) == FA_OK && world_forward(&w, s, &layer, &md, 1, o) == 0 &&
        g_cuda->ops.copy(g_cuda->ctx, after, w.cache, w.cache_bytes, FA_COPY_DEVICE_TO_HOST) == FA_OK &&
        g_cuda->ops.synchronize(g_cuda->ctx) == FA_OK) {
        rc = 0;
        err = memcmp(before, after, w.cache_bytes) == 0 ? 0 : INFINITY;
    }
    report("kv-sharing layer does not write the cache", rc, err, 0);
    world_free(&w);
    free(before);
    free(after);
    free(o);
}

/* copy_2d (used by DCP for a token-strided q): rows of a strided source into a packed buffer */
static void run_copy_2d_case(void)
{
    enum { ROWS = 37, W = 200, SP = 328, DP = 256 };
    unsigned char src[ROWS * SP], got[ROWS * DP], want[ROWS * DP];
    void *ds = dalloc(g_cuda, sizeof src), *dd = dalloc(g_cuda, sizeof got);
    int i, rc = -1;
    double err = INFINITY;
    for (i = 0; i < (int)sizeof src; ++i) src[i] = (unsigned char)(urand8());
    memset(want, 0xAB, sizeof want);
    for (i = 0; i < ROWS; ++i) memcpy(want + i * DP, src + i * SP, W);
    if (ds && dd && g_cuda->ops.copy_2d &&
        g_cuda->ops.copy(g_cuda->ctx, ds, src, sizeof src, FA_COPY_HOST_TO_DEVICE) == FA_OK &&
        g_cuda->ops.fill(g_cuda->ctx, dd, sizeof got, 0xAB, sizeof got, 1) == FA_OK &&
        g_cuda->ops.copy_2d(g_cuda->ctx, dd, DP, ds, SP, W, ROWS, FA_COPY_DEVICE_TO_DEVICE) == FA_OK &&
        g_cuda->ops.copy(g_cuda->ctx, got, dd, sizeof got, FA_COPY_DEVICE_TO_HOST) == FA_OK &&
        g_cuda->ops.synchronize(g_cuda->ctx) == FA_OK) {
        rc = 0;
        err = memcmp(got, want, sizeof got) == 0 ? 0 : INFINITY;
    }
    report("copy_2d device to device (pitched rows)", rc, err, 0);
    if (ds) g_cuda->ops.free(g_cuda->ctx, ds);
    if (dd) g_cuda->ops.free(g_cuda->ctx, dd);
}

static void scene_init(scene *s, int32_t hq, int32_t hkv, int32_t d, int32_t bs)
{
    memset(s, 0, sizeof *s);
    s->hq = hq;
    s->hkv = hkv;
    s->d = d;
    s->bs = bs;
    s->causal = 1;
}

int main(void)
{
    scene s;
    fa_layer_desc ld;
    int32_t i, ql[64], ctx[64];
    if (fa_cuda_backend_create(0, NULL, &g_cuda) != FA_OK) {
        printf("not ok 1 - no CUDA device: %s\n1..1\n0 passed, 1 failed\n", fa_cuda_create_error());
        return 1;
    }
    if (gt_apply_family(g_cuda) != 0) {
        printf("not ok 1 - kernel family\n1..1\n0 passed, 1 failed\n");
        return 1;
    }
    if (fa_cpu_backend_create(&g_cpu) != FA_OK) return 1;
    printf("# test_gpu_forward on %s (sm_%d%d, %d SMs)\n", g_cuda->info.name, g_cuda->info.cc_major,
           g_cuda->info.cc_minor, g_cuda->info.num_sms);
    g_sinks_host = (float *)malloc(sizeof(float) * 64);
    g_alibi_host = (float *)malloc(sizeof(float) * 64);
    for (i = 0; i < 64; ++i) {
        g_sinks_host[i] = 2.f * frand();
        g_alibi_host[i] = 0.05f * (1.f + frand());
    }
    g_sinks_dev = (float *)dalloc(g_cuda, 256);
    g_alibi_dev = (float *)dalloc(g_cuda, 256);
    g_cuda->ops.copy(g_cuda->ctx, g_sinks_dev, g_sinks_host, 256, FA_COPY_HOST_TO_DEVICE);
    g_cuda->ops.copy(g_cuda->ctx, g_alibi_dev, g_alibi_host, 256, FA_COPY_HOST_TO_DEVICE);

    /* mixed batch: decodes and prefills, 8/2 heads, d 128, block 16 */
    for (i = 0; i < 10; ++i) {
        ql[i] = (i % 3 == 0) ? 37 + 29 * i : 1;
        ctx[i] = 50 + 97 * i;
    }
    memset(&ld, 0, sizeof ld);
    ld.num_heads_q = 8;
    ld.num_heads_kv = 2;
    ld.head_size = 128;
    scene_init(&s, 8, 2, 128, 16);
    scene_make(&s, 10, ql, ctx, 0);
    run_case("plain, mixed batch, NHD, bf16 cache", &s, &ld, 0, 1, 2e-2);
    s.layout = FA_LAYOUT_HND;
    run_case("plain, mixed batch, HND, bf16 cache", &s, &ld, 0, 1, 2e-2);
    s.layout = FA_LAYOUT_NHD;
    {
        fa_layer_desc l2 = ld;
        l2.sliding_window = 100;
        l2.logits_soft_cap = 30.f;
        l2.sinks = g_sinks_host;
        l2.num_sinks = 8;
        l2.alibi_slopes = g_alibi_host;
        l2.num_alibi_slopes = 8;
        run_case("plain, window 100 + softcap 30 + ALiBi + sinks", &s, &l2, 0, 1, 2e-2);
        s.cache_dtype = FA_CACHE_FP8_E4M3;
        l2 = ld;
        l2.kv_cache_dtype = FA_CACHE_FP8_E4M3;
        l2.k_scale = 0.02f;
        l2.v_scale = 0.02f;
        run_case("plain, fp8 e4m3 cache (scale 0.02)", &s, &l2, 0, 1, 1.5e-1);
        s.cache_dtype = FA_CACHE_FP8_E5M2;
        l2.kv_cache_dtype = FA_CACHE_FP8_E5M2;
        run_case("plain, fp8 e5m2 cache (scale 0.02)", &s, &l2, 0, 1, 1.5e-1);
        s.cache_dtype = FA_CACHE_AUTO;
    }
    {   /* cross-attention decode step: keys are the encoder's (already cached), no new k/v */
        scene x = s;
        int32_t b, xs[64];
        for (b = 0; b < x.nreq; ++b) xs[b] = x.ctx[b];
        memcpy(x.seq, xs, sizeof(int32_t) * (size_t)x.nreq);
        fa_layer_desc lx = ld;
        lx.attn_type = FA_ATTN_ENCODER_DECODER;   /* the layers that may run without new k/v */
        x.causal = 0;
        run_case("cross-attention step: no new k/v (no cache write)", &x, &lx, 0, 0, 2e-2);
    }
    run_kv_sharing_case(&s);
    run_copy_2d_case();
    run_profiling_case(&s);
    scene_free(&s);

    /* cascade: 12 requests sharing 256 tokens (16 blocks), decodes and short prefills */
    for (i = 0; i < 12; ++i) {
        ql[i] = i % 4 == 0 ? 20 + i : 1;
        ctx[i] = 300 + 41 * i;
    }
    scene_init(&s, 8, 2, 128, 16);
    scene_make(&s, 12, ql, ctx, 16);
    run_case("cascade (prefix 256) on CUDA == plain on CPU", &s, &ld, 256, 1, 2e-2);
    {
        fa_layer_desc l2 = ld;
        l2.sinks = g_sinks_host;
        l2.num_sinks = 8;
        l2.logits_soft_cap = 20.f;
        run_case("cascade + sinks + softcap == plain", &s, &l2, 256, 1, 2e-2);
    }
    scene_free(&s);

    /* chunked local attention: chunk 64, block 16 */
    for (i = 0; i < 6; ++i) {
        ql[i] = i % 2 ? 1 : 70 + 11 * i;
        ctx[i] = 30 + 53 * i;
    }
    scene_init(&s, 8, 2, 64, 16);
    s.chunk = 64;
    scene_make(&s, 6, ql, ctx, 0);
    {
        fa_layer_desc l2 = ld;
        l2.head_size = 64;
        l2.attention_chunk_size = 64;
        run_case("chunked local attention (chunk 64)", &s, &l2, 0, 1, 2e-2);
    }
    scene_free(&s);

    /* encoder paths: no cache, bidirectional */
    for (i = 0; i < 5; ++i) {
        ql[i] = 17 + 41 * i;
        ctx[i] = 0;
    }
    scene_init(&s, 8, 8, 80, 16);
    s.causal = 0;
    scene_make(&s, 5, ql, ctx, 0);
    {
        fa_layer_desc l2 = ld;
        l2.num_heads_q = 8;
        l2.num_heads_kv = 8;
        l2.head_size = 80;
        l2.attn_type = FA_ATTN_ENCODER_ONLY;
        l2.sliding_window = 32;
        run_case("encoder-only, window 32 (symmetric)", &s, &l2, 0, 1, 2e-2);
        l2.attn_type = FA_ATTN_ENCODER;
        l2.sliding_window = 0;
        run_case("encoder, no window", &s, &l2, 0, 1, 2e-2);
    }
    scene_free(&s);

    /* DCP on one GPU: 2 ranks through an in-test comm, and 1 rank */
    for (i = 0; i < 6; ++i) {
        ql[i] = i == 0 ? 33 : 1;
        ctx[i] = 200 + 131 * i;
    }
    scene_init(&s, 8, 2, 128, 16);
    scene_make(&s, 6, ql, ctx, 0);
    run_dcp_case("DCP, 1 rank == CPU plain", &s, &ld, 1, 1);
    run_dcp_case("DCP, 2 ranks (interleave 1) == CPU one rank", &s, &ld, 2, 1);
    run_dcp_case("DCP, 2 ranks (interleave 16) == CPU one rank", &s, &ld, 2, 16);
    {
        fa_layer_desc l2 = ld;
        l2.sinks = g_sinks_host;
        l2.num_sinks = 8;
        run_dcp_case("DCP, 4 ranks (interleave 16) + sinks == CPU one rank", &s, &l2, 4, 16);
    }
    scene_free(&s);

    printf("1..%d\n%d passed, %d failed\n", passed + failed, passed, failed);
    g_cuda->ops.free(g_cuda->ctx, g_sinks_dev);
    g_cuda->ops.free(g_cuda->ctx, g_alibi_dev);
    free(g_sinks_host);
    free(g_alibi_host);
    fa_cuda_backend_destroy(g_cuda);
    fa_cpu_backend_destroy(g_cpu);
    return failed ? 1 : 0;
}
