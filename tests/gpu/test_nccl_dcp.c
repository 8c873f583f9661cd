/* test_nccl_dcp.c - decode context parallelism (DCP) over NCCL on GPUs, checked against the
   single-GPU forward on the same inputs.

   Usage: test_nccl_dcp [--world N] [--procs] [--host-only] [--cpu] [--seed S]
                        [--timeout SECONDS] [FILTER]
     (default)     one process, one thread per rank, N = 2 GPUs (fa_nccl_comms_create_local)
     --world N     N ranks on GPUs 0..N-1; --world 1 runs on a one-GPU machine (the DCP cases
                   then take the plain path on both sides; comm creation, the collectives and
                   the configuration errors are still checked)
     --procs       N processes (fork), one GPU each, the NCCL id handed over through a file in
                   /tmp; a second comm is made from an id handed over by loopback TCP
     --host-only   only the checks that need no GPU (unique-id hand-over through a file and TCP,
                   configuration errors, the slot mapping of every rank)
     --cpu         the same DCP cases, collectives and configuration checks on the CPU
                   reference backend and the in-process fake comm (no GPU, no NCCL; slow:
                   use a FILTER); it checks this program and flashattn.h's DCP path
     FILTER        run only cases whose name contains it

   Each DCP case: every rank builds the same random inputs (seeded): the group's N*H query
   heads, of which rank r holds [r*H, (r+1)*H), and the Hkv KV heads that every rank holds. As
   the reference, each rank runs its H query heads against the WHOLE KV cache on its own GPU
   through the plain path (world size 1; with Hkv = 1 this is exactly the single-GPU forward of
   the whole N*H-head model). Then it runs its DCP rank (its shard of the KV cache, written by
   fa_forward's cache write with its slot mapping from fa_dcp_slot_mapping) for two steps: a
   prefill of every request's context (no cached context yet), then the case's step (decode
   only, or prefill chunks + fresh prefill + decodes). The outputs must agree: max abs err
   <= 2e-2 (bf16 cache), 1.5e-1 (fp8 cache).
   Outputs and caches are poisoned (0xFF bytes: NaN) first; every status is checked.

   Prints one line per case and `N passed, M failed` last; exit status 0 exactly when M == 0.
   NCCL_NVLS_ENABLE is set to 0 before anything else (NVLink multicast stays off).
*/
#include <cuda_runtime_api.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fa_cpu.h"
#include "fa_cuda.h"
#include "fa_fake_comm.h"
#include "fa_nccl.h"
#include "flashattn.h"

enum {
    H_LOC = 4,            /* query heads per rank */
    HEAD = 128,           /* head size */
    BS = 16,              /* block size */
    MAXB = 8,             /* requests per step, at most */
    MAX_TOKENS = 2048,    /* builder max_num_batched_tokens */
    MAX_SEQS = 16,        /* builder max_num_seqs */
    MAX_WORLD = 8
};

static struct {
    int world, procs, host_only, cpu, timeout_s;
    uint64_t seed;
    const char *filter;
} opt;

/* ---------------------------------------------------------------------------------------- */
/* reporting */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_passed, g_failed;
static char g_current[160] = "setup";

typedef struct result {
    int failed, skipped;
    double max_err;
    char msg[700];
} result;

static void res_fail(result *r, const char *fmt, ...)
{
    va_list ap;
    size_t n = strlen(r->msg);
    r->failed++;
    if (r->failed > 3 || n + 8 >= sizeof r->msg) return;   /* keep the first few messages */
    if (n > 0) {
        strcat(r->msg, "; ");
        n += 2;
    }
    va_start(ap, fmt);
    vsnprintf(r->msg + n, sizeof r->msg - n, fmt, ap);
    va_end(ap);
}

static void set_current(const char *name)
{
    pthread_mutex_lock(&g_mu);
    snprintf(g_current, sizeof g_current, "%.150s", name);
    pthread_mutex_unlock(&g_mu);
}

static void report_line(const char *prefix, const char *name, const result *r)
{
    pthread_mutex_lock(&g_mu);
    if (r->failed) {
        g_failed++;
        printf("FAIL %s%s: %s\n", prefix, name, r->msg);
    } else if (r->skipped) {
        printf("skip %s%s: %s\n", prefix, name, r->msg);
    } else {
        g_passed++;
        if (r->max_err > 0.0)
            printf("ok   %s%s (max abs err %.3g)\n", prefix, name, r->max_err);
        else
            printf("ok   %s%s\n", prefix, name);
    }
    fflush(stdout);
    pthread_mutex_unlock(&g_mu);
}

static int summary(void)
{
    printf("%d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
    return g_failed == 0 && g_passed > 0 ? 0 : 1;
}

static void on_alarm(int sig)
{
    char buf[400];
    int n;
    (void)sig;
    n = snprintf(buf, sizeof buf,
                 "FAIL watchdog: no end after %d s, stuck in '%s' (a collective waiting for "
                 "its peer?)\n%d passed, %d failed\n",
                 opt.timeout_s, g_current, g_passed, g_failed + 1);
    if (n > 0) {
        ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
        (void)w;
    }
    _exit(3);
}

/* expected status, and (optionally) a word the detail message must contain */
static int expect(result *r, fa_status got, fa_status want, const char *what, const char *msg,
                  const char *needle)
{
    if (got != want) {
        res_fail(r, "%s returned %d (%s), expected %d (%s): %s", what, (int)got, fa_status_string(got),
                 (int)want, fa_status_string(want), msg ? msg : "");
        return 0;
    }
    if (needle && (!msg || !strstr(msg, needle))) {
        res_fail(r, "%s: message '%s' does not mention '%s'", what, msg ? msg : "(null)", needle);
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* random numbers (splitmix64) and dtypes */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_u64(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_uniform(rng *r, float lo, float hi)
{
    double u = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

static uint16_t bf16_random(rng *r)
{
    uint16_t v;
    do v = fa_cpu_float_to_bf16(rng_uniform(r, -1.f, 1.f));
    while (v == 0 || v == 0x8000);   /* never exact zeros */
    return v;
}

static size_t dt_size(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32:
    case FA_DTYPE_I32: return 4;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_I64: return 8;
    default: return 1;
    }
}

/* Stores v (an integer-valued double) as element i of a buffer of dtype t. */
static void put_val(void *buf, size_t i, fa_dtype t, double v)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case FA_DTYPE_F16: ((uint16_t *)buf)[i] = fa_cpu_float_to_half((float)v); break;
    case FA_DTYPE_BF16: ((uint16_t *)buf)[i] = fa_cpu_float_to_bf16((float)v); break;
    case FA_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FA_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    }
}

static double get_val(const void *buf, size_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return ((const float *)buf)[i];
    case FA_DTYPE_F16: return fa_cpu_half_to_float(((const uint16_t *)buf)[i]);
    case FA_DTYPE_BF16: return fa_cpu_bf16_to_float(((const uint16_t *)buf)[i]);
    case FA_DTYPE_I32: return ((const int32_t *)buf)[i];
    case FA_DTYPE_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "test_nccl_dcp: out of host memory (%zu x %zu bytes)\n", n, size);
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* a reusable barrier that also agrees on a flag (threads mode) */

typedef struct hbarrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting, all_ok, acc;
    unsigned long gen;
} hbarrier;

static void hbarrier_init(hbarrier *b, int n)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->n = n;
    b->acc = 1;
}

/* Waits for every thread; returns 1 when every thread passed ok != 0. */
static int hbarrier_agree(hbarrier *b, int ok)
{
    int res;
    unsigned long gen;
    pthread_mutex_lock(&b->mu);
    gen = b->gen;
    b->acc = b->acc && ok;
    if (++b->waiting == b->n) {
        b->all_ok = b->acc;
        b->acc = 1;
        b->waiting = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->gen) pthread_cond_wait(&b->cv, &b->mu);
    }
    res = b->all_ok;   /* not overwritten before every waiter read it: that needs all n again */
    pthread_mutex_unlock(&b->mu);
    return res;
}

/* ---------------------------------------------------------------------------------------- */
/* a rank */

typedef struct rank_ctx {
    int N, rank, device;
    fa_comm *comm;
    cudaStream_t stream;
    fa_backend *be;
    hbarrier *bar;          /* threads mode; NULL in procs mode (agreement through NCCL) */
    int32_t *dev_flags;     /* [N] device, procs-mode agreement */
    result *shared;         /* threads mode: [N] results of the current case */
} rank_ctx;

static const char *be_err(const fa_backend *be)
{
    return be && be->ops.last_error ? be->ops.last_error(be->ctx) : "";
}

#define CHECK_FA(r, expr, what) \
    (((expr) == FA_OK) ? 1 : (res_fail((r), "%s: %s", (what), fa_last_error()), 0))
#define CHECK_BE(r, be, expr, what) (((expr) == FA_OK) ? 1 : (res_fail((r), "%s: %s", (what), be_err(be)), 0))

/* All ranks agree that every one of them is ok (and wait for each other). */
static int agree(rank_ctx *e, result *r, int ok)
{
    int32_t mine = ok ? 1 : 0, all[MAX_WORLD];
    int i, res = 1;
    fa_status s;
    if (e->N == 1) return ok;
    if (e->bar) return hbarrier_agree(e->bar, ok);
    s = e->be->ops.copy(e->be->ctx, e->dev_flags + e->rank, &mine, sizeof mine, FA_COPY_HOST_TO_DEVICE);
    if (s == FA_OK)
        s = e->comm->all_gather(e->comm->ctx, e->dev_flags + e->rank, e->dev_flags, 1, FA_DTYPE_I32);
    if (s == FA_OK)
        s = e->be->ops.copy(e->be->ctx, all, e->dev_flags, sizeof(int32_t) * (size_t)e->N,
                            FA_COPY_DEVICE_TO_HOST);
    if (s == FA_OK) s = e->be->ops.synchronize(e->be->ctx);
    if (s != FA_OK) {
        res_fail(r, "agreement between ranks failed: %s / %s", be_err(e->be),
                 e->comm->last_error(e->comm->ctx));
        return 0;
    }
    for (i = 0; i < e->N; ++i) res = res && all[i] == 1;
    return res;
}

/* ---------------------------------------------------------------------------------------- */
/* DCP cases */

typedef struct case_desc {
    char name[128];
    int index, interleave, mixed, sinks, hkv;
    fa_cache_dtype cache;
    fa_kv_layout layout;
} case_desc;

typedef struct step_data {
    int B, T;
    int req[MAXB];                 /* global request of each of the step's requests */
    int32_t qsl[MAXB + 1], seq[MAXB];
    int32_t *req_of_token, *pos;   /* [T]: step-local request, absolute position */
    uint16_t *q, *k, *v;           /* bf16 [T, Hq_full, D], [T, Hkv, D], [T, Hkv, D] */
} step_data;

typedef struct case_data {
    int nreq, maxlen, hq_full, hkv;
    step_data st[2];
    float *sinks;                  /* [hq_full] */
} case_data;

/* step 0 prefills every request's context; step 1 is the case's step */
static const int dec_ctx[] = {300, 1000, 17, 5, 64}, dec_q[] = {1, 1, 1, 1, 1};
static const int mix_ctx[] = {300, 100, 0, 1000, 5, 33}, mix_q[] = {1, 37, 50, 1, 1, 16};

static void gen_case(const case_desc *cd, int N, case_data *cdata)
{
    const int *ctx = cd->mixed ? mix_ctx : dec_ctx, *ql = cd->mixed ? mix_q : dec_q;
    int nreq = cd->mixed ? (int)(sizeof mix_ctx / sizeof *mix_ctx) : (int)(sizeof dec_ctx / sizeof *dec_ctx);
    rng r;
    int s, b, i;
    size_t n;
    memset(cdata, 0, sizeof *cdata);
    r.s = opt.seed * 1000003u + (uint64_t)cd->index * 7919u + 17u;
    cdata->nreq = nreq;
    cdata->hq_full = N * H_LOC;
    cdata->hkv = cd->hkv;
    for (b = 0; b < nreq; ++b)
        if (ctx[b] + ql[b] > cdata->maxlen) cdata->maxlen = ctx[b] + ql[b];
    for (s = 0; s < 2; ++s) {
        step_data *st = &cdata->st[s];
        st->qsl[0] = 0;
        for (b = 0; b < nreq; ++b) {
            int q = s == 0 ? ctx[b] : ql[b];
            if (q == 0) continue;
            st->req[st->B] = b;
            st->seq[st->B] = s == 0 ? ctx[b] : ctx[b] + ql[b];
            st->qsl[st->B + 1] = st->qsl[st->B] + q;
            st->B++;
        }
        st->T = st->qsl[st->B];
        st->req_of_token = (int32_t *)xcalloc((size_t)st->T, sizeof(int32_t));
        st->pos = (int32_t *)xcalloc((size_t)st->T, sizeof(int32_t));
        for (b = 0; b < st->B; ++b)
            for (i = st->qsl[b]; i < st->qsl[b + 1]; ++i) {
                st->req_of_token[i] = b;
                st->pos[i] = st->seq[b] - (st->qsl[b + 1] - st->qsl[b]) + (i - st->qsl[b]);
            }
        n = (size_t)st->T * (size_t)cdata->hq_full * HEAD;
        st->q = (uint16_t *)xcalloc(n, 2);
        for (i = 0; i < (int)n; ++i) st->q[i] = bf16_random(&r);
        n = (size_t)st->T * (size_t)cd->hkv * HEAD;
        st->k = (uint16_t *)xcalloc(n, 2);
        st->v = (uint16_t *)xcalloc(n, 2);
        for (i = 0; i < (int)n; ++i) {
            st->k[i] = bf16_random(&r);
            st->v[i] = bf16_random(&r);
        }
    }
    cdata->sinks = (float *)xcalloc((size_t)cdata->hq_full, sizeof(float));
    for (i = 0; i < cdata->hq_full; ++i) cdata->sinks[i] = rng_uniform(&r, -1.f, 7.f);
}

static void free_case(case_data *cdata)
{
    int s;
    for (s = 0; s < 2; ++s) {
        free(cdata->st[s].req_of_token);
        free(cdata->st[s].pos);
        free(cdata->st[s].q);
        free(cdata->st[s].k);
        free(cdata->st[s].v);
    }
    free(cdata->sinks);
}

/* Device state of one model run (the reference or a DCP rank). */
typedef struct model_run {
    int world, rank, hloc, cols, num_blocks;
    fa_builder *b;
    fa_layer layer;
    fa_tensor cache;
    void *cache_mem;
    float *sinks;
    void *q[2], *k[2], *v[2], *out[2];
    int64_t *slots[2];
    int32_t *bt[2];
} model_run;

static void dev_free(const fa_backend *be, void *p)
{
    if (p) be->ops.free(be->ctx, p);
}

static void run_free(const fa_backend *be, model_run *m)
{
    int s;
    for (s = 0; s < 2; ++s) {
        dev_free(be, m->q[s]);
        dev_free(be, m->k[s]);
        dev_free(be, m->v[s]);
        dev_free(be, m->out[s]);
        dev_free(be, m->slots[s]);
        dev_free(be, m->bt[s]);
    }
    dev_free(be, m->sinks);
    dev_free(be, m->cache_mem);
    fa_builder_destroy(m->b);
    memset(m, 0, sizeof *m);
}

static int dev_upload(result *r, const fa_backend *be, void **dst, const void *src, size_t bytes,
                      const char *what)
{
    if (!CHECK_BE(r, be, be->ops.alloc(be->ctx, bytes, dst), what)) return 0;
    if (src) return CHECK_BE(r, be, be->ops.copy(be->ctx, *dst, src, bytes, FA_COPY_HOST_TO_DEVICE), what);
    return CHECK_BE(r, be, be->ops.fill(be->ctx, *dst, bytes, 0xFF, bytes, 1), what);   /* poison */
}

/* Allocates and uploads everything of one run: builder, layer, poisoned cache, the two steps'
   inputs (rank's query heads), slot mappings and block tables. */
static int run_setup(const rank_ctx *e, const case_desc *cd, const case_data *cdata, int world, int rank,
                     const fa_comm *comm, model_run *m, result *r)
{
    const fa_backend *be = e->be;
    const int hq_full = cdata->hq_full, hkv = cdata->hkv, hloc = H_LOC, qrank = e->rank; /* its own heads */
    const int interleave = world > 1 ? cd->interleave : 1;
    const fa_dtype cache_dt = fa_cache_storage_dtype(cd->cache, FA_DTYPE_BF16);
    const size_t ces = dt_size(cache_dt);
    fa_config cfg;
    fa_layer_desc ld;
    int64_t shape[5], strides[5];
    int32_t *table, *perm;
    int s, b, i, j;
    rng pr;
    memset(m, 0, sizeof *m);
    m->world = world;
    m->rank = rank;
    m->hloc = hloc;

    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = hloc;
    cfg.model.num_heads_kv = hkv;
    cfg.model.head_size = HEAD;
    cfg.model.dtype = FA_DTYPE_BF16;
    cfg.cache.block_size = BS;
    cfg.cache.cache_dtype = cd->cache;
    cfg.cache.layout = cd->layout;
    cfg.parallel.dcp_world_size = world;
    cfg.parallel.dcp_rank = rank;
    cfg.parallel.cp_kv_cache_interleave_size = interleave;
    cfg.scheduler.max_num_seqs = MAX_SEQS;
    cfg.scheduler.max_num_batched_tokens = MAX_TOKENS;
    if (!CHECK_FA(r, fa_builder_create(be, &cfg, world > 1 ? comm : NULL, &m->b), "fa_builder_create"))
        return 0;

    memset(&ld, 0, sizeof ld);
    ld.num_heads_q = hloc;
    ld.num_heads_kv = hkv;
    ld.head_size = HEAD;
    ld.dtype = FA_DTYPE_BF16;
    ld.kv_cache_dtype = cd->cache;
    if (cache_dt != FA_DTYPE_BF16) {
        ld.k_scale = 0.02f;
        ld.v_scale = 0.015f;
    }
    ld.dcp_world_size = world;
    if (cd->sinks) {
        if (!dev_upload(r, be, (void **)&m->sinks, cdata->sinks + (size_t)qrank * hloc,
                        sizeof(float) * (size_t)hloc, "sinks"))
            return 0;
        ld.sinks = m->sinks;
        ld.num_sinks = hloc;
    }
    if (!CHECK_FA(r, fa_layer_init(&m->layer, &ld), "fa_layer_init")) return 0;

    /* the same block table on every rank of a world: each physical block holds BS local tokens
       of a virtual block of BS * world positions */
    m->cols = (cdata->maxlen + BS * world - 1) / (BS * world) + 1;
    m->num_blocks = cdata->nreq * m->cols + 3;
    perm = (int32_t *)xcalloc((size_t)m->num_blocks, sizeof(int32_t));
    table = (int32_t *)xcalloc((size_t)cdata->nreq * m->cols, sizeof(int32_t));
    pr.s = opt.seed * 31u + (uint64_t)world * 1009u + (uint64_t)cd->index;
    for (i = 0; i < m->num_blocks; ++i) perm[i] = i;
    for (i = m->num_blocks - 1; i > 0; --i) {
        int32_t t;
        j = (int)(rng_u64(&pr) % (uint64_t)(i + 1));
        t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (i = 0; i < cdata->nreq * m->cols; ++i) table[i] = perm[i];

    if (!CHECK_FA(r, fa_kv_cache_shape(m->num_blocks, BS, hkv, HEAD, shape), "fa_kv_cache_shape") ||
        !CHECK_FA(r, fa_kv_cache_strides(cd->layout, m->num_blocks, BS, hkv, HEAD, strides),
                  "fa_kv_cache_strides") ||
        !dev_upload(r, be, &m->cache_mem, NULL, (size_t)(2 * (int64_t)m->num_blocks * BS * hkv * HEAD) * ces,
                    "cache")) {
        free(perm);
        free(table);
        return 0;
    }
    m->cache = fa_tensor_make(m->cache_mem, cache_dt, 5, shape);
    for (i = 0; i < 5; ++i) m->cache.stride[i] = strides[i];

    for (s = 0; s < 2; ++s) {
        const step_data *st = &cdata->st[s];
        const size_t T = (size_t)st->T;
        uint16_t *qloc = (uint16_t *)xcalloc(T * (size_t)hloc * HEAD, 2);
        int64_t *slots = (int64_t *)xcalloc(T, sizeof(int64_t));
        int32_t *bt = (int32_t *)xcalloc((size_t)st->B * m->cols, sizeof(int32_t));
        int ok = 1;
        size_t t;
        for (t = 0; t < T; ++t)   /* this rank's query heads [qrank*hloc, (qrank+1)*hloc) */
            memcpy(qloc + t * (size_t)hloc * HEAD,
                   st->q + (t * (size_t)hq_full + (size_t)qrank * hloc) * HEAD, (size_t)hloc * HEAD * 2);
        for (b = 0; b < st->B; ++b)
            memcpy(bt + (size_t)b * m->cols, table + (size_t)st->req[b] * m->cols,
                   sizeof(int32_t) * (size_t)m->cols);
        ok = CHECK_FA(r,
                      fa_dcp_slot_mapping(bt, m->cols, m->cols, BS, st->req_of_token, st->pos, st->T, world,
                                          rank, interleave, slots),
                      "fa_dcp_slot_mapping");
        ok = ok && dev_upload(r, be, &m->q[s], qloc, T * (size_t)hloc * HEAD * 2, "q");
        ok = ok && dev_upload(r, be, &m->k[s], st->k, T * (size_t)hkv * HEAD * 2, "k");
        ok = ok && dev_upload(r, be, &m->v[s], st->v, T * (size_t)hkv * HEAD * 2, "v");
        ok = ok && dev_upload(r, be, &m->out[s], NULL, T * (size_t)hloc * HEAD * 2, "out");
        ok = ok && dev_upload(r, be, (void **)&m->slots[s], slots, T * sizeof(int64_t), "slot_mapping");
        ok = ok && dev_upload(r, be, (void **)&m->bt[s], bt, sizeof(int32_t) * (size_t)st->B * m->cols,
                              "block_table");
        free(qloc);
        free(slots);
        free(bt);
        if (!ok) {
            free(perm);
            free(table);
            return 0;
        }
    }
    free(perm);
    free(table);
    return CHECK_BE(r, be, be->ops.synchronize(be->ctx), "synchronize after the uploads");
}

/* Builds and runs both steps, then downloads the outputs ([T, hloc, D] bf16 each). */
static int run_steps(const rank_ctx *e, const case_data *cdata, model_run *m, uint16_t **outs, result *r)
{
    const fa_backend *be = e->be;
    int s;
    for (s = 0; s < 2; ++s) {
        const step_data *st = &cdata->st[s];
        fa_batch batch;
        fa_metadata md;
        fa_tensor q, k, v, out;
        int64_t qs[3], ks[3];
        char what[64];
        memset(&batch, 0, sizeof batch);
        batch.num_reqs = st->B;
        batch.num_actual_tokens = st->T;
        batch.query_start_loc = st->qsl;
        batch.seq_lens = st->seq;
        batch.block_table = m->bt[s];
        batch.block_table_stride = m->cols;
        batch.max_blocks = m->cols;
        batch.slot_mapping = m->slots[s];
        batch.causal = 1;
        snprintf(what, sizeof what, "fa_builder_build (step %d)", s);
        if (!CHECK_FA(r, fa_builder_build(m->b, &batch, 0, &md), what)) return 0;
        qs[0] = st->T;
        qs[1] = m->hloc;
        qs[2] = HEAD;
        ks[0] = st->T;
        ks[1] = cdata->hkv;
        ks[2] = HEAD;
        q = fa_tensor_make(m->q[s], FA_DTYPE_BF16, 3, qs);
        out = fa_tensor_make(m->out[s], FA_DTYPE_BF16, 3, qs);
        k = fa_tensor_make(m->k[s], FA_DTYPE_BF16, 3, ks);
        v = fa_tensor_make(m->v[s], FA_DTYPE_BF16, 3, ks);
        snprintf(what, sizeof what, "fa_forward (step %d, world %d)", s, m->world);
        if (!CHECK_FA(r, fa_forward(&m->layer, be, &q, &k, &v, &m->cache, &md, &out), what)) return 0;
    }
    if (!CHECK_BE(r, be, be->ops.synchronize(be->ctx), "synchronize after the forwards")) return 0;
    for (s = 0; s < 2; ++s) {
        size_t bytes = (size_t)cdata->st[s].T * (size_t)m->hloc * HEAD * 2;
        outs[s] = (uint16_t *)xcalloc(bytes, 1);
        if (!CHECK_BE(r, be, be->ops.copy(be->ctx, outs[s], m->out[s], bytes, FA_COPY_DEVICE_TO_HOST),
                      "download"))
            return 0;
    }
    return CHECK_BE(r, be, be->ops.synchronize(be->ctx), "synchronize after the download");
}

/* One model run. For world > 1 every rank calls it in step (it agrees with the others before
   and after the forwards, whatever failed), so no rank waits in a collective alone. */
static int run_model(rank_ctx *e, const case_desc *cd, const case_data *cdata, int world, int rank,
                     const fa_comm *comm, uint16_t **outs, int go, result *r)
{
    model_run m;
    int ok = go;
    memset(&m, 0, sizeof m);
    if (ok) ok = run_setup(e, cd, cdata, world, rank, comm, &m, r);
    if (world > 1) ok = agree(e, r, ok);
    if (ok) ok = run_steps(e, cdata, &m, outs, r);
    if (world > 1) ok = agree(e, r, ok);
    e->be->ops.synchronize(e->be->ctx);
    run_free(e->be, &m);
    return ok;
}

static void run_dcp_case(rank_ctx *e, const case_desc *cd, result *r)
{
    case_data cdata;
    uint16_t *ref[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
    const double tol = cd->cache == FA_CACHE_AUTO ? 2e-2 : 1.5e-1;
    const int N = e->N, H = H_LOC;
    double max_ref = 0.0;
    int ok, s;
    gen_case(cd, N, &cdata);
    /* reference: this rank's query heads against the whole cache on this GPU, plain path */
    ok = run_model(e, cd, &cdata, 1, 0, NULL, ref, 1, r);
    /* this rank of the DCP group */
    ok = run_model(e, cd, &cdata, N, e->rank, e->comm, got, ok, r) && ok;
    for (s = 0; s < 2 && ok; ++s) {
        const int T = cdata.st[s].T;
        int t, h, d, bad = 0;
        for (t = 0; t < T && bad < 3; ++t)
            for (h = 0; h < H && bad < 3; ++h)
                for (d = 0; d < HEAD && bad < 3; ++d) {
                    double want = fa_cpu_bf16_to_float(ref[s][((size_t)t * H + h) * HEAD + d]);
                    double have = fa_cpu_bf16_to_float(got[s][((size_t)t * H + h) * HEAD + d]);
                    double err = fabs(have - want);
                    if (!isfinite(want)) {
                        res_fail(
                            r,
                            "step %d token %d head %d dim %d: the single-GPU reference is %g (plain path, "
                            "not DCP)",
                            s, t, e->rank * H + h, d, want);
                        ++bad;
                        continue;
                    }
                    if (!isfinite(have) || err > tol) {
                        res_fail(r, "step %d token %d head %d dim %d: DCP %g vs single-GPU %g (tolerance %g)",
                                 s, t, e->rank * H + h, d, have, want, tol);
                        ++bad;
                        continue;
                    }
                    if (err > r->max_err) r->max_err = err;
                    if (fabs(want) > max_ref) max_ref = fabs(want);
                }
    }
    if (ok && !r->failed && max_ref < 1e-3)
        res_fail(r, "the reference output is all (near) zero (max |ref| %g): the check proves nothing",
                 max_ref);
    for (s = 0; s < 2; ++s) {
        free(ref[s]);
        free(got[s]);
    }
    free_case(&cdata);
}

static int make_cases(int N, case_desc *cases, int cap)
{
    int n = 0, I, mixed, sinks, fp8, gqa;
    for (I = 1; I <= 16; I += 15)
        for (mixed = 0; mixed < 2; ++mixed)
            for (sinks = 0; sinks < 2; ++sinks)
                for (fp8 = 0; fp8 < 2; ++fp8) {
                    case_desc *c = &cases[n];
                    if (n >= cap) return n;
                    memset(c, 0, sizeof *c);
                    c->index = n;
                    c->interleave = I;
                    c->mixed = mixed;
                    c->sinks = sinks;
                    c->hkv = 1;
                    c->cache = fp8 ? FA_CACHE_FP8_E4M3 : FA_CACHE_AUTO;
                    c->layout = fp8 ? FA_LAYOUT_HND : FA_LAYOUT_NHD;
                    snprintf(c->name, sizeof c->name, "dcp N=%d I=%d %s%s, %s cache (%s), Hq %d/rank, Hkv 1",
                             N, I, mixed ? "mixed prefill+decode" : "decode only", sinks ? ", sinks" : "",
                             fp8 ? "fp8_e4m3" : "bf16", fp8 ? "HND" : "NHD", H_LOC);
                    ++n;
                }
    /* GQA inside each rank's query-head group: 2 KV heads, each rank's 4 query heads in 2 groups */
    for (gqa = 0; gqa < 4 && n < cap; ++gqa) {
        case_desc *c = &cases[n];
        memset(c, 0, sizeof *c);
        c->index = n;
        c->interleave = gqa & 1 ? 16 : 1;
        c->mixed = gqa >> 1;
        c->sinks = gqa == 3;
        c->hkv = 2;
        c->cache = gqa == 2 ? FA_CACHE_FP8_E4M3 : FA_CACHE_AUTO;
        c->layout = FA_LAYOUT_NHD;
        snprintf(c->name, sizeof c->name, "dcp N=%d I=%d %s%s, %s cache (NHD), Hq %d/rank, Hkv 2", N,
                 c->interleave, c->mixed ? "mixed prefill+decode" : "decode only", c->sinks ? ", sinks" : "",
                 gqa == 2 ? "fp8_e4m3" : "bf16", H_LOC);
        ++n;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* collectives: all_gather and reduce_scatter against known patterns */

static double ag_val(fa_dtype t, int rank, size_t i)
{
    switch (t) {
    case FA_DTYPE_F32: return rank * 100000.0 + (double)i;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: return (double)((rank * 37 + (int)i) % 251 - 125);
    case FA_DTYPE_I32: return rank * 1000003.0 + (double)i * 7.0 - 5000.0;
    case FA_DTYPE_I64: return (double)(((int64_t)rank << 40) + (int64_t)i * 3 - 7);
    default: return (double)((rank * 31 + (int)i * 7) & 0xFF);
    }
}

static double rs_val(int rank, int chunk, size_t i)
{
    return (double)((rank + 1) * (chunk + 2) + (int)(i % 13));
}

static void check_collectives(rank_ctx *e, result *ag, result *rs)
{
    static const fa_dtype ag_types[] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16,
                                        FA_DTYPE_I32, FA_DTYPE_I64, FA_DTYPE_FP8_E4M3};
    static const fa_dtype rs_types[] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    const fa_backend *be = e->be;
    const fa_comm *cm = e->comm;
    const size_t cnt = 1031, N = (size_t)e->N, bytes = N * cnt * 8;
    unsigned char *hsend = (unsigned char *)xcalloc(bytes, 1), *hrecv = (unsigned char *)xcalloc(bytes, 1);
    unsigned char *want = (unsigned char *)xcalloc(bytes, 1);
    void *send = NULL, *recv = NULL;
    int ok = 1;
    size_t k, i, q;
    ok = CHECK_BE(ag, be, be->ops.alloc(be->ctx, bytes, &send), "alloc") &&
         CHECK_BE(ag, be, be->ops.alloc(be->ctx, bytes, &recv), "alloc");
    /* the ranks must stay in step: a failure stops the remaining collectives on every rank */
    ok = agree(e, ag, ok);
    for (k = 0; k < sizeof ag_types / sizeof *ag_types && ok; ++k) {
        const fa_dtype t = ag_types[k];
        const size_t es = dt_size(t);
        fa_status st;
        for (i = 0; i < cnt; ++i) put_val(hsend, i, t, ag_val(t, e->rank, i));
        for (q = 0; q < N; ++q)
            for (i = 0; i < cnt; ++i) put_val(want, q * cnt + i, t, ag_val(t, (int)q, i));
        st = be->ops.copy(be->ctx, send, hsend, cnt * es, FA_COPY_HOST_TO_DEVICE);
        if (st == FA_OK) st = be->ops.fill(be->ctx, recv, bytes, 0xFF, bytes, 1);
        if (st != FA_OK) {
            ok = 0;
            res_fail(ag, "upload: %s", be_err(be));
        }
        if (ok && (st = cm->all_gather(cm->ctx, send, recv, cnt, t)) != FA_OK) {
            ok = 0;
            res_fail(ag, "all_gather %s: %s", fa_dtype_name(t), cm->last_error(cm->ctx));
        }
        ok = ok && CHECK_BE(ag, be, be->ops.copy(be->ctx, hrecv, recv, N * cnt * es, FA_COPY_DEVICE_TO_HOST),
                            "download");
        ok = ok && CHECK_BE(ag, be, be->ops.synchronize(be->ctx), "synchronize");
        if (ok && memcmp(hrecv, want, N * cnt * es) != 0) {
            for (i = 0; i < N * cnt * es && hrecv[i] == want[i]; ++i) {}
            res_fail(ag, "all_gather %s: element %zu (rank %zu's %zu) is %g, expected %g", fa_dtype_name(t),
                     i / es, i / es / cnt, i / es % cnt, get_val(hrecv, i / es, t), get_val(want, i / es, t));
        }
        ok = agree(e, ag, ok);
    }
    if (ok) {   /* in place: send is this rank's chunk of recv */
        for (i = 0; i < cnt; ++i) put_val(hsend, i, FA_DTYPE_F32, ag_val(FA_DTYPE_F32, e->rank, i));
        for (q = 0; q < N; ++q)
            for (i = 0; i < cnt; ++i)
                put_val(want, q * cnt + i, FA_DTYPE_F32, ag_val(FA_DTYPE_F32, (int)q, i));
        ok = CHECK_BE(ag, be, be->ops.fill(be->ctx, recv, bytes, 0xFF, bytes, 1), "fill") &&
             CHECK_BE(ag, be,
                      be->ops.copy(be->ctx, (char *)recv + (size_t)e->rank * cnt * 4, hsend, cnt * 4,
                                   FA_COPY_HOST_TO_DEVICE),
                      "upload");
        if (ok && cm->all_gather(cm->ctx, (char *)recv + (size_t)e->rank * cnt * 4, recv, cnt,
                                 FA_DTYPE_F32) != FA_OK) {
            ok = 0;
            res_fail(ag, "all_gather in place: %s", cm->last_error(cm->ctx));
        }
        ok = ok && CHECK_BE(ag, be, be->ops.copy(be->ctx, hrecv, recv, N * cnt * 4, FA_COPY_DEVICE_TO_HOST),
                            "download");
        ok = ok && CHECK_BE(ag, be, be->ops.synchronize(be->ctx), "synchronize");
        if (ok && memcmp(hrecv, want, N * cnt * 4) != 0) res_fail(ag, "all_gather in place: wrong result");
        ok = agree(e, ag, ok);
    }
    if (ok && cm->all_gather(cm->ctx, NULL, NULL, 0, FA_DTYPE_F32) != FA_OK)
        res_fail(ag, "all_gather of 0 elements: %s", cm->last_error(cm->ctx));
    for (k = 0; k < sizeof rs_types / sizeof *rs_types && ok; ++k) {
        const fa_dtype t = rs_types[k];
        const size_t es = dt_size(t);
        fa_status st;
        for (q = 0; q < N; ++q)
            for (i = 0; i < cnt; ++i) put_val(hsend, q * cnt + i, t, rs_val(e->rank, (int)q, i));
        st = be->ops.copy(be->ctx, send, hsend, N * cnt * es, FA_COPY_HOST_TO_DEVICE);
        if (st == FA_OK) st = be->ops.fill(be->ctx, recv, bytes, 0xFF, bytes, 1);
        if (st != FA_OK) {
            ok = 0;
            res_fail(rs, "upload: %s", be_err(be));
        }
        if (ok && cm->reduce_scatter(cm->ctx, send, recv, cnt, t) != FA_OK) {
            ok = 0;
            res_fail(rs, "reduce_scatter %s: %s", fa_dtype_name(t), cm->last_error(cm->ctx));
        }
        ok = ok && CHECK_BE(rs, be, be->ops.copy(be->ctx, hrecv, recv, cnt * es, FA_COPY_DEVICE_TO_HOST),
                            "download");
        ok = ok && CHECK_BE(rs, be, be->ops.synchronize(be->ctx), "synchronize");
        for (i = 0; i < cnt && ok; ++i) {
            double sum = 0.0;
            for (q = 0; q < N; ++q) sum += rs_val((int)q, e->rank, i);
            if (get_val(hrecv, i, t) != sum) {
                res_fail(rs, "reduce_scatter %s: element %zu is %g, expected %g", fa_dtype_name(t), i,
                         get_val(hrecv, i, t), sum);
                break;
            }
        }
        ok = agree(e, rs, ok);
    }
    e->be->ops.synchronize(e->be->ctx);
    dev_free(be, send);
    dev_free(be, recv);
    free(hsend);
    free(hrecv);
    free(want);
}

/* ---------------------------------------------------------------------------------------- */
/* checks that need no GPU */

static void check_slot_mapping(void)
{
    /* SEMANTICS §7.1 example: N=2, I=2, bs=4, block row [7,3,9], positions 0..19 */
    static const int64_t want0[20] = {28, 29, -1, -1, 30, 31, -1, -1, 12, 13,
                                      -1, -1, 14, 15, -1, -1, 36, 37, -1, -1};
    static const int Ns[] = {2, 4}, Is[] = {1, 2, 16};
    const int32_t row[3] = {7, 3, 9};
    int32_t req[20], pos[20];
    int64_t slots[4][200];
    result r;
    int i, ni, ii, rank;
    memset(&r, 0, sizeof r);
    for (i = 0; i < 20; ++i) {
        req[i] = 0;
        pos[i] = i;
    }
    if (CHECK_FA(&r, fa_dcp_slot_mapping(row, 3, 3, 4, req, pos, 20, 2, 0, 2, slots[0]),
                 "fa_dcp_slot_mapping") &&
        CHECK_FA(&r, fa_dcp_slot_mapping(row, 3, 3, 4, req, pos, 20, 2, 1, 2, slots[1]),
                 "fa_dcp_slot_mapping"))
        for (i = 0; i < 20; ++i) {
            if (slots[0][i] != want0[i])
                res_fail(&r, "rank 0 position %d: slot %lld, expected %lld", i, (long long)slots[0][i],
                         (long long)want0[i]);
            if ((slots[1][i] >= 0) == (want0[i] >= 0) || (slots[1][i] >= 0 && slots[1][i] != want0[i ^ 2]))
                res_fail(&r, "rank 1 position %d: slot %lld", i, (long long)slots[1][i]);
        }
    /* every token on exactly one rank; a rank's slots are its local sequence in order, and
       their count below L is fa_dcp_local_seq_len(L) */
    for (ni = 0; ni < 2; ++ni)
        for (ii = 0; ii < 3; ++ii) {
            const int N = Ns[ni], I = Is[ii], bs = 16, len = 200, cols = (len + bs * N - 1) / (bs * N);
            int32_t table[16], rq[200], ps[200];
            for (i = 0; i < cols; ++i) table[i] = (cols - 1 - i) * 5 + 2;   /* scattered block ids */
            for (i = 0; i < len; ++i) {
                rq[i] = 0;
                ps[i] = i;
            }
            for (rank = 0; rank < N; ++rank)
                if (!CHECK_FA(&r,
                              fa_dcp_slot_mapping(table, cols, cols, bs, rq, ps, len, N, rank, I,
                                                  slots[rank]),
                              "fa_dcp_slot_mapping"))
                    break;
            for (i = 0; i < len && !r.failed; ++i) {
                int owners = 0, owner = -1;
                for (rank = 0; rank < N; ++rank)
                    if (slots[rank][i] >= 0) {
                        owners++;
                        owner = rank;
                    }
                if (owners != 1 || owner != (i / I) % N)
                    res_fail(&r, "N %d I %d position %d: %d owners (rank %d), expected rank %d", N, I, i,
                             owners, owner, (i / I) % N);
            }
            for (rank = 0; rank < N && !r.failed; ++rank) {
                int local = 0;
                for (i = 0; i < len && !r.failed; ++i) {
                    if (slots[rank][i] < 0) continue;
                    if (slots[rank][i] != (int64_t)table[local / bs] * bs + local % bs)
                        res_fail(&r, "N %d I %d rank %d position %d: slot %lld is not local token %d", N, I,
                                 rank, i, (long long)slots[rank][i], local);
                    ++local;
                    if (fa_dcp_local_seq_len(i + 1, N, rank, I) != local)
                        res_fail(&r, "N %d I %d rank %d: fa_dcp_local_seq_len(%d) = %d, counted %d", N, I,
                                 rank, i + 1, fa_dcp_local_seq_len(i + 1, N, rank, I), local);
                }
            }
        }
    report_line("", "slot mapping: SEMANTICS example, one owner per token, local order and lengths", &r);
}

static void check_config_errors(void)
{
    fa_config cfg, out;
    fa_layer_desc ld;
    fa_layer layer;
    const int32_t row[2] = {0, 1};
    const int32_t req[1] = {0}, pos[1] = {5};
    int64_t slot[1];
    static const float slopes[H_LOC] = {0.5f, 0.25f, 0.125f, 0.0625f};
    result r;

    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = H_LOC;
    cfg.model.num_heads_kv = 1;
    cfg.model.head_size = HEAD;
    cfg.cache.block_size = BS;
    cfg.parallel.dcp_world_size = 2;

    memset(&r, 0, sizeof r);
    cfg.parallel.cp_kv_cache_interleave_size = 3;
    expect(&r, fa_config_resolve(&cfg, &out), FA_ERR_INVALID_ARG,
           "fa_config_resolve (interleave 3, block 16)", fa_last_error(), "interleave");
    cfg.parallel.cp_kv_cache_interleave_size = 32;
    expect(&r, fa_config_resolve(&cfg, &out), FA_ERR_INVALID_ARG,
           "fa_config_resolve (interleave 32, block 16)", fa_last_error(), "interleave");
    expect(&r, fa_dcp_slot_mapping(row, 2, 2, BS, req, pos, 1, 2, 0, 3, slot), FA_ERR_INVALID_ARG,
           "fa_dcp_slot_mapping (interleave 3)", fa_last_error(), "interleave");
    cfg.parallel.cp_kv_cache_interleave_size = 16;
    expect(&r, fa_config_resolve(&cfg, &out), FA_OK, "fa_config_resolve (interleave 16, block 16)",
           fa_last_error(), NULL);
    report_line("", "bad config: interleave not dividing the block size", &r);

    memset(&r, 0, sizeof r);
    cfg.parallel.dcp_rank = 2;
    expect(&r, fa_config_resolve(&cfg, &out), FA_ERR_INVALID_ARG, "fa_config_resolve (dcp_rank 2, world 2)",
           fa_last_error(), "dcp_rank");
    cfg.parallel.dcp_rank = -1;
    expect(&r, fa_config_resolve(&cfg, &out), FA_ERR_INVALID_ARG, "fa_config_resolve (dcp_rank -1)",
           fa_last_error(), "dcp_rank");
    expect(&r, fa_dcp_slot_mapping(row, 2, 2, BS, req, pos, 1, 2, 2, 1, slot), FA_ERR_INVALID_ARG,
           "fa_dcp_slot_mapping (rank 2, world 2)", fa_last_error(), "rank");
    cfg.parallel.dcp_rank = 1;
    expect(&r, fa_config_resolve(&cfg, &out), FA_OK, "fa_config_resolve (dcp_rank 1)", fa_last_error(), NULL);
    report_line("", "bad config: dcp rank >= world size", &r);

    memset(&r, 0, sizeof r);
    memset(&ld, 0, sizeof ld);
    ld.num_heads_q = H_LOC;
    ld.num_heads_kv = 1;
    ld.head_size = HEAD;
    ld.dcp_world_size = 2;
    ld.sliding_window = 128;
    expect(&r, fa_layer_init(&layer, &ld), FA_ERR_UNSUPPORTED, "fa_layer_init (window 128, DCP 2)",
           fa_last_error(), "sliding_window");
    ld.sliding_window = 0;
    ld.alibi_slopes = slopes;   /* never dereferenced by fa_layer_init */
    ld.num_alibi_slopes = H_LOC;
    expect(&r, fa_layer_init(&layer, &ld), FA_ERR_UNSUPPORTED, "fa_layer_init (ALiBi, DCP 2)",
           fa_last_error(), "alibi");
    ld.dcp_world_size = 1;
    expect(&r, fa_layer_init(&layer, &ld), FA_OK, "fa_layer_init (ALiBi, no DCP)", fa_last_error(), NULL);
    ld.alibi_slopes = NULL;
    ld.num_alibi_slopes = 0;
    ld.dcp_world_size = 2;
    ld.attention_chunk_size = 64;
    expect(&r, fa_layer_init(&layer, &ld), FA_ERR_UNSUPPORTED, "fa_layer_init (chunked local, DCP 2)",
           fa_last_error(), "attention_chunk_size");
    report_line("",
                "bad config: window / ALiBi / chunked-local layer with DCP -> unsupported at fa_layer_init",
                &r);
}

typedef struct tcp_job {
    int port, peers, delay_ms;
    unsigned char id[FA_NCCL_UNIQUE_ID_BYTES];
    fa_status st;
    char err[512];
} tcp_job;

static void sleep_ms(int ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void *tcp_server(void *p)
{
    tcp_job *j = (tcp_job *)p;
    sleep_ms(j->delay_ms);   /* the peers start first: they must retry */
    j->st = fa_nccl_unique_id_send_tcp(j->port, j->peers, 10000, j->id);
    snprintf(j->err, sizeof j->err, "%s", fa_nccl_last_error());
    return NULL;
}

static void *tcp_client(void *p)
{
    tcp_job *j = (tcp_job *)p;
    j->st = fa_nccl_unique_id_recv_tcp(j->port, 10000, j->id);
    snprintf(j->err, sizeof j->err, "%s", fa_nccl_last_error());
    return NULL;
}

static void check_unique_id_handover(int port)
{
    unsigned char id[FA_NCCL_UNIQUE_ID_BYTES], back[FA_NCCL_UNIQUE_ID_BYTES];
    char path[256], tmp[300];
    tcp_job server, clients[2];
    pthread_t ts, tc[2];
    FILE *f;
    result r;
    int i;

    for (i = 0; i < FA_NCCL_UNIQUE_ID_BYTES; ++i) id[i] = (unsigned char)(i * 7 + 3);
    snprintf(path, sizeof path, "/tmp/fa_nccl_test_%ld.id", (long)getpid());
    unlink(path);

    memset(&r, 0, sizeof r);
    expect(&r, fa_nccl_unique_id_read(path, 150, back), FA_ERR_BACKEND, "read of a missing file",
           fa_nccl_last_error(), "timed out");
    if (expect(&r, fa_nccl_unique_id_write(path, id), FA_OK, "fa_nccl_unique_id_write", fa_nccl_last_error(),
               NULL) &&
        expect(&r, fa_nccl_unique_id_read(path, 1000, back), FA_OK, "fa_nccl_unique_id_read",
               fa_nccl_last_error(), NULL) &&
        memcmp(id, back, sizeof id) != 0)
        res_fail(&r, "the id read back differs from the one written");
    f = fopen(path, "wb");   /* a file that is not an id */
    if (f) {
        fwrite("short", 1, 5, f);
        fclose(f);
        expect(&r, fa_nccl_unique_id_read(path, 100, back), FA_ERR_BACKEND, "read of a 5-byte file",
               fa_nccl_last_error(), "bytes");
    }
    unlink(path);
    snprintf(tmp, sizeof tmp, "/nonexistent-dir-%ld/id", (long)getpid());
    expect(&r, fa_nccl_unique_id_write(tmp, id), FA_ERR_BACKEND, "write into a missing folder",
           fa_nccl_last_error(), "nonexistent");
    expect(&r, fa_nccl_unique_id_write(NULL, id), FA_ERR_INVALID_ARG, "write to a NULL path",
           fa_nccl_last_error(), "path");
    expect(&r, fa_nccl_unique_id_read(path, -1, back), FA_ERR_INVALID_ARG, "read with timeout -1",
           fa_nccl_last_error(), "timeout_ms -1");
    report_line("", "unique id through a file: atomic write, read, timeout, bad files and arguments", &r);

    memset(&r, 0, sizeof r);
    memset(&server, 0, sizeof server);
    server.port = port;
    server.peers = 2;
    server.delay_ms = 150;
    memcpy(server.id, id, sizeof id);
    for (i = 0; i < 2; ++i) {
        memset(&clients[i], 0, sizeof clients[i]);
        clients[i].port = port;
    }
    if (pthread_create(&tc[0], NULL, tcp_client, &clients[0]) == 0) {
        if (pthread_create(&tc[1], NULL, tcp_client, &clients[1]) == 0) {
            if (pthread_create(&ts, NULL, tcp_server, &server) == 0)
                pthread_join(ts, NULL);
            else
                res_fail(&r, "pthread_create failed");
            pthread_join(tc[1], NULL);
        } else {
            res_fail(&r, "pthread_create failed");
        }
        pthread_join(tc[0], NULL);
    } else {
        res_fail(&r, "pthread_create failed");
    }
    if (!r.failed) {
        expect(&r, server.st, FA_OK, "fa_nccl_unique_id_send_tcp", server.err, NULL);
        for (i = 0; i < 2; ++i)
            if (expect(&r, clients[i].st, FA_OK, "fa_nccl_unique_id_recv_tcp", clients[i].err, NULL) &&
                memcmp(clients[i].id, id, sizeof id) != 0)
                res_fail(&r, "peer %d received a different id", i);
    }
    expect(&r, fa_nccl_unique_id_recv_tcp(port + 1, 150, back), FA_ERR_BACKEND, "recv with nobody serving",
           fa_nccl_last_error(), "timed out");
    expect(&r, fa_nccl_unique_id_send_tcp(port + 2, 1, 150, id), FA_ERR_BACKEND, "send with no peer coming",
           fa_nccl_last_error(), "0 of 1");
    expect(&r, fa_nccl_unique_id_send_tcp(0, 1, 100, id), FA_ERR_INVALID_ARG, "send on port 0",
           fa_nccl_last_error(), "port 0");
    expect(&r, fa_nccl_unique_id_recv_tcp(70000, 100, back), FA_ERR_INVALID_ARG, "recv on port 70000",
           fa_nccl_last_error(), "port 70000");
    expect(&r, fa_nccl_unique_id_send_tcp(port, 1, 0, id), FA_ERR_INVALID_ARG, "send with timeout 0",
           fa_nccl_last_error(), "timeout_ms 0");
    report_line("", "unique id through loopback TCP: 2 peers (started first), timeouts, bad arguments", &r);
}

static void check_host(int port)
{
    set_current("host checks");
    check_slot_mapping();
    check_config_errors();
    check_unique_id_handover(port);
}

/* ---------------------------------------------------------------------------------------- */
/* checks that need a GPU, a backend and a comm (no collective is issued) */

static void check_comm_config_errors(const char *prefix, const fa_backend *be, const fa_comm *comm, int N)
{
    fa_builder *b = NULL;
    fa_config cfg;
    result r;

    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = H_LOC;
    cfg.model.num_heads_kv = 1;
    cfg.model.head_size = HEAD;
    cfg.cache.block_size = BS;

    memset(&r, 0, sizeof r);
    cfg.parallel.dcp_world_size = N * 2;   /* the comm has N ranks */
    cfg.parallel.dcp_rank = comm->rank;
    if (expect(&r, fa_builder_create(be, &cfg, comm, &b), FA_ERR_INVALID_ARG,
               "fa_builder_create (config world 2N)", fa_last_error(), "world_size"))
        b = NULL;
    if (N > 1) {
        cfg.parallel.dcp_world_size = N;
        cfg.parallel.dcp_rank = (comm->rank + 1) % N;
        if (expect(&r, fa_builder_create(be, &cfg, comm, &b), FA_ERR_INVALID_ARG,
                   "fa_builder_create (config rank differs from the comm's)", fa_last_error(), "rank"))
            b = NULL;
        cfg.parallel.dcp_rank = comm->rank;
        if (expect(&r, fa_builder_create(be, &cfg, NULL, &b), FA_ERR_INVALID_ARG,
                   "fa_builder_create (no comm, DCP)", fa_last_error(), "comm"))
            b = NULL;
    }
    fa_builder_destroy(b);
    report_line(prefix, "bad config: comm world size / rank differ from the config", &r);
}

static void check_nccl_errors(const char *prefix, fa_comm *comm, int N, int local_group)
{
    unsigned char id[FA_NCCL_UNIQUE_ID_BYTES];
    fa_comm *c = NULL, fake;
    int devs[2] = {0, 0}, bad_dev[1] = {99}, count = 0;
    float dummy[8];
    result r;

    memset(id, 1, sizeof id);
    memset(&r, 0, sizeof r);
    cudaGetDeviceCount(&count);
    expect(&r, fa_nccl_comm_create(2, 2, id, 0, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comm_create (rank 2 of 2)", fa_nccl_last_error(), "rank 2");
    expect(&r, fa_nccl_comm_create(0, 0, id, 0, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comm_create (world_size 0)", fa_nccl_last_error(), "world_size 0");
    expect(&r, fa_nccl_comm_create(2, 0, NULL, 0, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comm_create (NULL id)", fa_nccl_last_error(), "unique_id");
    expect(&r, fa_nccl_comm_create(2, 0, id, count + 3, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comm_create (device past the count)", fa_nccl_last_error(), "device");
    expect(&r, fa_nccl_comm_create(2, 0, id, 0, NULL, NULL), FA_ERR_INVALID_ARG,
           "fa_nccl_comm_create (NULL out)", fa_nccl_last_error(), "out");
    expect(&r, fa_nccl_comms_create_local(2, devs, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comms_create_local (device 0 twice)", fa_nccl_last_error(), "repeats");
    expect(&r, fa_nccl_comms_create_local(1, bad_dev, NULL, &c), FA_ERR_INVALID_ARG,
           "fa_nccl_comms_create_local (device 99)", fa_nccl_last_error(), "devices[0] 99");
    memset(&fake, 0, sizeof fake);
    expect(&r, fa_nccl_comm_destroy(&fake), FA_ERR_INVALID_ARG, "fa_nccl_comm_destroy (not an NCCL comm)",
           fa_nccl_last_error(), "was not made");
    if (N > 1 && local_group)   /* comm is &comms[0] of a local group */
        expect(&r, fa_nccl_comm_destroy(comm + 1), FA_ERR_INVALID_ARG, "fa_nccl_comm_destroy (&comms[1])",
               fa_nccl_last_error(), "pass the array");
    if (fa_nccl_comm_device(comm) != comm->rank)
        res_fail(&r, "fa_nccl_comm_device = %d, expected %d", fa_nccl_comm_device(comm), comm->rank);
    if (fa_nccl_comm_device(&fake) != -1 || fa_nccl_comm_stream(&fake) != NULL)
        res_fail(&r, "fa_nccl_comm_device / _stream of a foreign comm are not -1 / NULL");
    expect(&r, comm->reduce_scatter(comm->ctx, dummy, dummy, 2, FA_DTYPE_I32), FA_ERR_UNSUPPORTED,
           "reduce_scatter i32", comm->last_error(comm->ctx), "dtype");
    expect(&r, comm->all_gather(comm->ctx, NULL, dummy, 2, FA_DTYPE_F32), FA_ERR_INVALID_ARG,
           "all_gather with NULL send", comm->last_error(comm->ctx), "send is NULL");
    expect(&r, comm->all_gather(comm->ctx, dummy, dummy, 2, (fa_dtype)99), FA_ERR_UNSUPPORTED,
           "all_gather dtype 99", comm->last_error(comm->ctx), "dtype 99");
    report_line(prefix, "bad arguments: NCCL comm creation, destruction and collectives", &r);
}

/* ---------------------------------------------------------------------------------------- */
/* threads mode */

typedef struct rank_thread {
    rank_ctx e;
    const case_desc *cases;
    int ncases;
} rank_thread;

/* One line per case: rank 0 combines every rank's result. */
static void report_threads(rank_ctx *e, const char *name, const result *mine)
{
    e->shared[e->rank] = *mine;
    hbarrier_agree(e->bar, 1);
    if (e->rank == 0) {
        result all;
        int q;
        memset(&all, 0, sizeof all);
        for (q = 0; q < e->N; ++q) {
            const result *o = &e->shared[q];
            if (o->max_err > all.max_err) all.max_err = o->max_err;
            if (o->failed) res_fail(&all, "rank %d: %s", q, o->msg);
        }
        report_line("", name, &all);
    }
    hbarrier_agree(e->bar, 1);
}

static void *rank_main(void *p)
{
    rank_thread *rt = (rank_thread *)p;
    rank_ctx *e = &rt->e;
    result r, r2;
    int c;
    for (c = 0; c < rt->ncases; ++c) {
        if (e->rank == 0) set_current(rt->cases[c].name);
        memset(&r, 0, sizeof r);
        run_dcp_case(e, &rt->cases[c], &r);
        report_threads(e, rt->cases[c].name, &r);
    }
    if (e->rank == 0) set_current("collectives");
    memset(&r, 0, sizeof r);
    memset(&r2, 0, sizeof r2);
    check_collectives(e, &r, &r2);
    report_threads(e, "collectives: all_gather f32/f16/bf16/i32/i64/fp8, in place, 0 elements", &r);
    report_threads(e, "collectives: reduce_scatter (sum) f32/f16/bf16", &r2);
    return NULL;
}

static int filtered(const case_desc *all, int n, case_desc *out)
{
    int i, m = 0;
    for (i = 0; i < n; ++i)
        if (!opt.filter || strstr(all[i].name, opt.filter)) out[m++] = all[i];
    return m;
}

static int main_threads(int port)
{
    const int N = opt.world;
    cudaStream_t streams[MAX_WORLD];
    fa_backend *be[MAX_WORLD];
    int devs[MAX_WORLD], count = 0, i, ncases;
    fa_comm *comms = NULL;
    case_desc all[32], cases[32];
    rank_thread rt[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    result shared[MAX_WORLD], r;
    hbarrier bar;
    cudaError_t ce;
    fa_status st;

    check_host(port);
    set_current("GPU setup");
    memset(&r, 0, sizeof r);
    if (opt.cpu) {   /* CPU reference backend + in-process fake comm */
        for (i = 0; i < N; ++i) {
            streams[i] = NULL;
            be[i] = NULL;
            if (fa_cpu_backend_create(&be[i]) != FA_OK) res_fail(&r, "fa_cpu_backend_create failed");
        }
        if (!r.failed && fa_fake_comm_group_create(N, &comms) != FA_OK)
            res_fail(&r, "fa_fake_comm_group_create failed");
        report_line("", "setup: CPU backend, fake comm, a thread per rank", &r);
    } else {
        ce = cudaGetDeviceCount(&count);
        if (ce != cudaSuccess || count < N) {
            res_fail(&r, "%d rank(s) need %d GPU(s); cudaGetDeviceCount: %d (%s)", N, N, count,
                     ce == cudaSuccess ? "ok" : cudaGetErrorString(ce));
            report_line("", "setup: GPUs", &r);
            return summary();
        }
        for (i = 0; i < N; ++i) {
            devs[i] = i;
            streams[i] = NULL;
            be[i] = NULL;
            if ((ce = cudaSetDevice(i)) != cudaSuccess ||
                (ce = cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking)) != cudaSuccess)
                res_fail(&r, "stream on device %d: %s", i, cudaGetErrorString(ce));
            else if (fa_cuda_backend_create(i, streams[i], &be[i]) != FA_OK)
                res_fail(&r, "fa_cuda_backend_create(%d): %s", i, fa_cuda_create_error());
        }
        if (!r.failed) {
            st = fa_nccl_comms_create_local(N, devs, (void *const *)streams, &comms);
            if (st != FA_OK) res_fail(&r, "fa_nccl_comms_create_local(%d): %s", N, fa_nccl_last_error());
        }
        for (i = 0; i < N && comms && !r.failed; ++i)
            if (comms[i].world_size != N || comms[i].rank != i || fa_nccl_comm_device(&comms[i]) != i ||
                fa_nccl_comm_stream(&comms[i]) != (void *)streams[i] ||
                comms[i].api_version != FA_BACKEND_API_VERSION)
                res_fail(&r, "comms[%d]: world %d rank %d device %d stream %p", i, comms[i].world_size,
                         comms[i].rank, fa_nccl_comm_device(&comms[i]), fa_nccl_comm_stream(&comms[i]));
        report_line("", "setup: one process, one thread per rank (fa_nccl_comms_create_local)", &r);
    }
    if (!r.failed) {
        ncases = make_cases(N, all, 32);
        ncases = filtered(all, ncases, cases);
        hbarrier_init(&bar, N);
        for (i = 0; i < N; ++i) {
            memset(&rt[i], 0, sizeof rt[i]);
            rt[i].e.N = N;
            rt[i].e.rank = i;
            rt[i].e.device = i;
            rt[i].e.comm = &comms[i];
            rt[i].e.stream = streams[i];
            rt[i].e.be = be[i];
            rt[i].e.bar = &bar;
            rt[i].e.shared = shared;
            rt[i].cases = cases;
            rt[i].ncases = ncases;
        }
        for (i = 0; i < N; ++i)
            if (pthread_create(&th[i], NULL, rank_main, &rt[i]) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                exit(2);   /* the started ranks would wait for this one forever */
            }
        for (i = 0; i < N; ++i) pthread_join(th[i], NULL);
        set_current("error checks");
        check_comm_config_errors("", be[0], &comms[0], N);
        if (!opt.cpu) check_nccl_errors("", &comms[0], N, 1);
        memset(&r, 0, sizeof r);
        set_current("comm destroy");
        if (opt.cpu) {
            fa_fake_comm_group_destroy(comms);
        } else {
            if (fa_nccl_comm_destroy(comms) != FA_OK) res_fail(&r, "%s", fa_nccl_last_error());
            report_line("", "teardown: fa_nccl_comm_destroy of the local group", &r);
        }
    }
    for (i = 0; i < N; ++i) {
        if (opt.cpu) {
            fa_cpu_backend_destroy(be[i]);
            continue;
        }
        fa_cuda_backend_destroy(be[i]);
        if (streams[i]) cudaStreamDestroy(streams[i]);
    }
    return summary();
}

/* ---------------------------------------------------------------------------------------- */
/* procs mode */

static void report_proc(rank_ctx *e, const char *name, const result *r)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "[rank %d] ", e->rank);
    report_line(prefix, name, r);
}

static int child_main(int rank, const char *id_path, int port)
{
    const int N = opt.world;
    unsigned char id[FA_NCCL_UNIQUE_ID_BYTES];
    cudaStream_t stream = NULL;
    fa_backend *be = NULL;
    fa_comm *comm = NULL, *comm2 = NULL;
    case_desc all[32], cases[32];
    rank_ctx e;
    result r, r2;
    char prefix[32];
    int ncases, c;
    cudaError_t ce;

    snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    if (rank == 0) {
        if (fa_nccl_unique_id_create(id) != FA_OK || fa_nccl_unique_id_write(id_path, id) != FA_OK)
            res_fail(&r, "unique id: %s", fa_nccl_last_error());
    } else if (fa_nccl_unique_id_read(id_path, 120000, id) != FA_OK) {
        res_fail(&r, "unique id: %s", fa_nccl_last_error());
    }
    if (!r.failed && ((ce = cudaSetDevice(rank)) != cudaSuccess ||
                      (ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess))
        res_fail(&r, "stream on device %d: %s", rank, cudaGetErrorString(ce));
    if (!r.failed && fa_cuda_backend_create(rank, stream, &be) != FA_OK)
        res_fail(&r, "fa_cuda_backend_create(%d): %s", rank, fa_cuda_create_error());
    if (!r.failed && fa_nccl_comm_create(N, rank, id, rank, stream, &comm) != FA_OK)
        res_fail(&r, "fa_nccl_comm_create: %s", fa_nccl_last_error());
    if (!r.failed && (comm->world_size != N || comm->rank != rank || fa_nccl_comm_device(comm) != rank))
        res_fail(&r, "comm: world %d rank %d device %d", comm->world_size, comm->rank,
                 fa_nccl_comm_device(comm));
    e.N = N;
    e.rank = rank;
    e.device = rank;
    e.comm = comm;
    e.stream = stream;
    e.be = be;
    if (!r.failed && be->ops.alloc(be->ctx, sizeof(int32_t) * MAX_WORLD, (void **)&e.dev_flags) != FA_OK)
        res_fail(&r, "alloc: %s", be_err(be));
    if (rank == 0) printf("[rank 0] NCCL %d\n", fa_nccl_version());
    report_line(prefix, "setup: one process per rank, id through a file (fa_nccl_comm_create)", &r);
    if (r.failed) return 1;   /* the peers' comm creation then fails or the watchdog ends them */

    ncases = filtered(all, make_cases(N, all, 32), cases);
    for (c = 0; c < ncases; ++c) {
        set_current(cases[c].name);
        memset(&r, 0, sizeof r);
        run_dcp_case(&e, &cases[c], &r);
        report_proc(&e, cases[c].name, &r);
    }
    set_current("collectives");
    memset(&r, 0, sizeof r);
    memset(&r2, 0, sizeof r2);
    check_collectives(&e, &r, &r2);
    report_proc(&e, "collectives: all_gather f32/f16/bf16/i32/i64/fp8, in place, 0 elements", &r);
    report_proc(&e, "collectives: reduce_scatter (sum) f32/f16/bf16", &r2);

    /* a second comm from an id handed over through loopback TCP */
    set_current("second comm over TCP");
    memset(&r, 0, sizeof r);
    if (rank == 0) {
        if (fa_nccl_unique_id_create(id) != FA_OK ||
            fa_nccl_unique_id_send_tcp(port, N - 1, 120000, id) != FA_OK)
            res_fail(&r, "tcp id: %s", fa_nccl_last_error());
    } else if (fa_nccl_unique_id_recv_tcp(port, 120000, id) != FA_OK) {
        res_fail(&r, "tcp id: %s", fa_nccl_last_error());
    }
    if (!r.failed && fa_nccl_comm_create(N, rank, id, rank, stream, &comm2) != FA_OK)
        res_fail(&r, "fa_nccl_comm_create (second): %s", fa_nccl_last_error());
    if (!r.failed) {
        rank_ctx e2 = e;
        result ra, rb;
        memset(&ra, 0, sizeof ra);
        memset(&rb, 0, sizeof rb);
        e2.comm = comm2;
        check_collectives(&e2, &ra, &rb);
        if (ra.failed) res_fail(&r, "%s", ra.msg);
        if (rb.failed) res_fail(&r, "%s", rb.msg);
        if (fa_nccl_comm_destroy(comm2) != FA_OK) res_fail(&r, "destroy: %s", fa_nccl_last_error());
    }
    report_proc(&e, "second comm, id through loopback TCP: collectives, destroy", &r);

    if (rank == 0) {
        set_current("error checks");
        check_comm_config_errors(prefix, be, comm, N);
        check_nccl_errors(prefix, comm, N, 0);
    }
    set_current("comm destroy");
    memset(&r, 0, sizeof r);
    be->ops.free(be->ctx, e.dev_flags);
    if (fa_nccl_comm_destroy(comm) != FA_OK) res_fail(&r, "%s", fa_nccl_last_error());
    report_proc(&e, "teardown: fa_nccl_comm_destroy", &r);
    fa_cuda_backend_destroy(be);
    cudaStreamDestroy(stream);
    return g_failed ? 1 : 0;
}

static int main_procs(int port)
{
    const int N = opt.world;
    char id_path[256];
    pid_t pids[MAX_WORLD];
    int fds[MAX_WORLD], done[MAX_WORLD], i, left;
    double waited = 0.0;

    check_host(port + 10);
    snprintf(id_path, sizeof id_path, "/tmp/fa_nccl_dcp_%ld.id", (long)getpid());
    unlink(id_path);
    fflush(stdout);
    fflush(stderr);
    for (i = 0; i < N; ++i) {
        int p[2];
        pids[i] = -1;
        fds[i] = -1;
        done[i] = 0;
        if (pipe(p) != 0) {
            fprintf(stderr, "pipe failed: %s\n", strerror(errno));
            continue;
        }
        pids[i] = fork();
        if (pids[i] == 0) {   /* child: rank i (no CUDA was touched before the fork) */
            int rc;
            char msg[64];
            close(p[0]);
            g_passed = g_failed = 0;
            alarm((unsigned)opt.timeout_s);
            rc = child_main(i, id_path, port);
            snprintf(msg, sizeof msg, "%d %d\n", g_passed, g_failed);
            if (write(p[1], msg, strlen(msg)) < 0) rc = 1;
            close(p[1]);
            fflush(stdout);
            _exit(rc);
        }
        close(p[1]);
        fds[i] = p[0];
        if (pids[i] < 0) {
            fprintf(stderr, "fork failed: %s\n", strerror(errno));
            close(p[0]);
            fds[i] = -1;
        }
    }
    /* wait for the children, killing (only) them once past the deadline */
    left = N;
    while (left > 0) {
        for (i = 0; i < N; ++i) {
            int status = 0;
            if (done[i]) continue;
            if (pids[i] <= 0) {
                done[i] = 1;
                --left;
                g_failed++;
                printf("FAIL [rank %d] could not be started\n", i);
                continue;
            }
            if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                char buf[64];
                ssize_t n = read(fds[i], buf, sizeof buf - 1);
                int pa = 0, fa = 0;
                done[i] = 1;
                --left;
                if (n > 0) {
                    buf[n] = '\0';
                    if (sscanf(buf, "%d %d", &pa, &fa) != 2) pa = fa = 0;
                }
                g_passed += pa;
                g_failed += fa;
                if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && fa == 0)) {
                    g_failed++;
                    printf("FAIL [rank %d] ended with %s %d\n", i,
                           WIFSIGNALED(status) ? "signal" : "exit status",
                           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                }
                close(fds[i]);
            }
        }
        if (left == 0) break;
        sleep_ms(100);
        waited += 0.1;
        if (waited > opt.timeout_s + 30) {
            for (i = 0; i < N; ++i)
                if (!done[i] && pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    done[i] = 1;
                    --left;
                    g_failed++;
                    printf("FAIL [rank %d] killed after %d s\n", i, opt.timeout_s + 30);
                    close(fds[i]);
                }
        }
    }
    unlink(id_path);
    return summary();
}

/* ---------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int i, port;
    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* no NVLink multicast, whatever the environment said */
    setvbuf(stdout, NULL, _IOLBF, 0);
    opt.world = 2;
    opt.seed = 1234;
    opt.timeout_s = 540;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--world") && i + 1 < argc)
            opt.world = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--procs"))
            opt.procs = 1;
        else if (!strcmp(argv[i], "--host-only"))
            opt.host_only = 1;
        else if (!strcmp(argv[i], "--cpu"))
            opt.cpu = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            opt.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            opt.timeout_s = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr,
                    "usage: %s [--world N] [--procs] [--host-only] [--cpu] [--seed S] [--timeout S] "
                    "[FILTER]\n",
                    argv[0]);
            return 2;
        } else
            opt.filter = argv[i];
    }
    if (opt.world < 1 || opt.world > MAX_WORLD || opt.timeout_s < 10) {
        fprintf(stderr, "--world must be in [1, %d], --timeout >= 10\n", MAX_WORLD);
        return 2;
    }
    port = 20000 + (int)(getpid() % 20000);
    if (opt.cpu && opt.procs) {
        fprintf(stderr, "--cpu and --procs do not go together (the fake comm lives in one process)\n");
        return 2;
    }
    printf("test_nccl_dcp: %s, world %d, seed %llu, NCCL_NVLS_ENABLE=%s\n",
           opt.host_only ? "host checks only"
           : opt.procs   ? "one process per rank"
           : opt.cpu     ? "CPU backend and fake comm, one thread per rank"
                         : "one thread per rank",
           opt.world, (unsigned long long)opt.seed, getenv("NCCL_NVLS_ENABLE"));
    if (opt.host_only) {
        check_host(port);
        return summary();
    }
    signal(SIGALRM, on_alarm);
    if (opt.procs) return main_procs(port);   /* the parent never touches CUDA or NCCL (fork safety) */
    alarm((unsigned)opt.timeout_s);
    if (!opt.cpu) printf("NCCL %d\n", fa_nccl_version());
    return main_threads(port);
}
