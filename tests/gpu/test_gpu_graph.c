/* test_gpu_graph.c - full CUDA graphs end to end (issue 14; docs/graphs.md is the recipe).

   One CUDA backend on a non-default stream, one builder with compilation.full_cuda_graph = 1,
   three layers (plain; sliding window 64; softcap 30 + sinks), each with its own cache. Two
   identical sets of caches: set A is written by the graphs, set B by the eager runs.
   For three capture sizes (16 tokens, uniform decode, 16 requests; 64 and 256 tokens, mixed
   decode + prefill chunk, 8 requests) the program builds a representative batch (long keys,
   so the plan splits and the static split count is the cap where the
   workspace holds T_pad rows of partials), warms up, captures fa_forward
   for the three layers in one graph and instantiates it. Then for 24 steps of random real
   batches per graph it builds OUTSIDE the graph (same device buffers: block table, slot
   mapping, q/k/v), poisons the outputs, replays the graph, then runs the same three
   fa_forward eagerly on set B with the same metadata, and requires every output byte of the
   replay to equal the eager run. Two steps per graph are also compared with the CPU reference
   backend (set B's caches copied to the host before the step).
   Padding: fa_builder_build requires query_start_loc[num_reqs] == the step's tokens and the
   graph baked num_reqs and the token count at capture, so every step is padded to exactly
   (T_pad, R_pad): the padding tokens belong to a dummy request (slot -1, keys = its queries,
   block table row of scratch block 0), the remaining padded requests have zero-length
   queries and seq_len 0 (uniform decode pads with 1-token dummies instead, to keep
   max_query_len 1, which picks the decode kernel at capture).
   TAP: `ok N - name` a case, the plan `1..N`, then `N passed, M failed`. Exit 0 iff M == 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fa_cpu.h"
#include "fa_cuda.h"
#include "flashattn.h"
#include "gpu_family.h"

#define HQ 8
#define HKV 2
#define D 128
#define BS 16
#define NPOOL 16          /* sequences in the pool */
#define MAXB 128          /* blocks per sequence (2048 tokens) */
#define MAXLEN (MAXB * BS)
#define NBLOCKS (1 + NPOOL * MAXB) /* block 0: scratch for padding requests */
#define TMAX 256
#define RMAX 16
#define NLAYERS 3
#define STEPS 24

static int n_case, n_pass, n_fail;

static void tap(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void tap(int ok, const char *fmt, ...)
{
    va_list ap;
    ++n_case;
    if (ok)
        ++n_pass;
    else
        ++n_fail;
    printf("%s %d - ", ok ? "ok" : "not ok", n_case);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

#define CK(call) \
    do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) { \
            printf("#   %s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return -1; \
        } \
    } while (0)
#define OK(call) \
    do { \
        fa_status s_ = (call); \
        if (s_ != FA_OK) { \
            printf("#   %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, fa_status_string(s_), \
                   fa_last_error()); \
            return -1; \
        } \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static int32_t irand(int32_t lo, int32_t hi) /* [lo, hi] */
{
    return lo + (int32_t)(urand() % (uint32_t)(hi - lo + 1));
}
static float frand(void) { return (float)(urand() >> 8) * (2.f / 16777216.f) - 1.f; }

/* ---- the scene ---------------------------------------------------------------------------- */
typedef struct step {
    int32_t nreq, t, t_real, r_real;
    int32_t qsl[RMAX + 1], seq[RMAX];
    int32_t bt[RMAX * MAXB];
    int64_t slots[TMAX];
} step;

static cudaStream_t stream;
static fa_backend *gpu;
static fa_builder *bld;
static fa_layer layers[NLAYERS];
static void *cacheA[NLAYERS], *cacheB[NLAYERS];
static size_t cache_bytes;
static int64_t cache_shape[5];
static void *dq, *dk, *dv, *outA[NLAYERS], *outB[NLAYERS];
static int32_t *dbt;
static int64_t *dslots;
static float *dsinks;
static float hsinks[HQ];
static uint16_t *hq, *hk, *hv; /* bf16 host [TMAX, H, D] */
static uint16_t *hcache;       /* initial cache contents */

static size_t q_bytes(int32_t t) { return (size_t)t * HQ * D * 2; }
static size_t kv_bytes(int32_t t) { return (size_t)t * HKV * D * 2; }

/* Fills the block table row of request b from pool sequence p (or scratch when p < 0) and
   the slots of its new tokens (positions seq - q .. seq - 1); padding tokens get -1. */
static void step_request(step *s, int32_t b, int32_t p, int32_t q, int32_t seq)
{
    int32_t j;
    s->seq[b] = seq;
    s->qsl[b + 1] = s->qsl[b] + q;
    for (j = 0; j < MAXB; ++j) s->bt[b * MAXB + j] = p < 0 ? 0 : 1 + p * MAXB + j;
    for (j = 0; j < q; ++j) {
        int32_t pos = seq - q + j;
        s->slots[s->qsl[b] + j] = p < 0 ? -1 : (int64_t)s->bt[b * MAXB + pos / BS] * BS + pos % BS;
    }
}

static void pool_perm(int32_t *perm)
{
    int32_t i;
    for (i = 0; i < NPOOL; ++i) perm[i] = i;
    for (i = NPOOL - 1; i > 0; --i) {
        int32_t j = irand(0, i), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
}

/* Uniform decode: R_pad = T_pad requests of one token; real ones first, 1-token dummies after.
   rep = 1: the capture batch (every request real with long keys). */
static void make_decode(step *s, int32_t T, int rep)
{
    int32_t perm[NPOOL], b;
    memset(s, 0, sizeof *s);
    pool_perm(perm);
    s->nreq = T;
    s->r_real = rep ? T : irand(1, T);
    for (b = 0; b < T; ++b) {
        if (b < s->r_real) {
            int32_t seq = rep ? MAXLEN - irand(0, 8) : (irand(0, 3) == 0 ? irand(1, 40) : irand(1, MAXLEN));
            step_request(s, b, perm[b], 1, seq);
        } else {
            step_request(s, b, -1, 1, 1);
        }
    }
    s->t = T;
    s->t_real = s->r_real;
}

/* Mixed: R_pad = 8; r_real - 1 decodes and one prefill chunk (> 4 tokens so max_query_len *
   4 query heads per KV head > the decode tile's 16 rows), then the dummy holding the padding
   tokens, then zero-length requests. */
static void make_mixed(step *s, int32_t T, int rep)
{
    int32_t perm[NPOOL], b, ndec, chunk, ctx;
    memset(s, 0, sizeof *s);
    pool_perm(perm);
    s->nreq = 8;
    ndec = rep ? 6 : irand(1, 6);
    chunk = rep ? T - ndec : irand(5, T - ndec);
    for (b = 0; b < ndec; ++b) {
        int32_t seq = rep ? MAXLEN - irand(0, 8) : irand(1, MAXLEN);
        step_request(s, b, perm[b], 1, seq);
    }
    ctx = rep ? MAXLEN - chunk : (irand(0, 2) == 0 ? 0 : irand(0, MAXLEN - chunk));
    step_request(s, ndec, perm[ndec], chunk, ctx + chunk);
    s->r_real = ndec + 1;
    s->t_real = s->qsl[ndec + 1];
    /* the dummy: the rest of T (possibly 0 tokens) */
    step_request(s, ndec + 1, -1, T - s->t_real, T - s->t_real);
    for (b = ndec + 2; b < s->nreq; ++b) step_request(s, b, -1, 0, 0);
    s->t = T;
}

static fa_batch step_batch(const step *s)
{
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = s->nreq;
    b.query_start_loc = s->qsl;
    b.seq_lens = s->seq;
    b.block_table = dbt;
    b.block_table_stride = MAXB;
    b.max_blocks = MAXB;
    b.block_table_host = s->bt;
    b.slot_mapping = dslots;
    return b;
}

/* Uploads the step's block table, slots and q/k/v into the fixed device buffers (async, on the
   backend's stream) and builds. Outside any capture. */
static int step_build(const step *s, fa_metadata *md)
{
    fa_batch b = step_batch(s);
    int32_t i;
    for (i = 0; i < s->t * HQ * D; ++i) hq[i] = fa_cpu_float_to_bf16(frand());
    for (i = 0; i < s->t * HKV * D; ++i) {
        hk[i] = fa_cpu_float_to_bf16(frand());
        hv[i] = fa_cpu_float_to_bf16(frand());
    }
    /* pageable sources: cudaMemcpyAsync returns once the source is staged */
    CK(cudaMemcpyAsync(dbt, s->bt, sizeof(int32_t) * (size_t)s->nreq * MAXB, cudaMemcpyHostToDevice, stream));
    CK(cudaMemcpyAsync(dslots, s->slots, sizeof(int64_t) * (size_t)s->t, cudaMemcpyHostToDevice, stream));
    CK(cudaMemcpyAsync(dq, hq, q_bytes(s->t), cudaMemcpyHostToDevice, stream));
    CK(cudaMemcpyAsync(dk, hk, kv_bytes(s->t), cudaMemcpyHostToDevice, stream));
    CK(cudaMemcpyAsync(dv, hv, kv_bytes(s->t), cudaMemcpyHostToDevice, stream));
    OK(fa_builder_build(bld, &b, 0, md));
    return 0;
}

static fa_tensor rows_tensor(void *p, int32_t t, int32_t h)
{
    int64_t shape[3] = {t, h, D};
    return fa_tensor_make(p, FA_DTYPE_BF16, 3, shape);
}

static fa_tensor cache_tensor(void *p) { return fa_tensor_make(p, FA_DTYPE_BF16, 5, cache_shape); }

/* The three layers' forward on cache set `caches` into `outs` (eager, or under capture). */
static int forward_all(const fa_metadata *md, int32_t t, void **caches, void **outs)
{
    fa_tensor q = rows_tensor(dq, t, HQ), k = rows_tensor(dk, t, HKV), v = rows_tensor(dv, t, HKV);
    int l;
    for (l = 0; l < NLAYERS; ++l) {
        fa_tensor c = cache_tensor(caches[l]), o = rows_tensor(outs[l], t, HQ);
        OK(fa_forward(&layers[l], gpu, &q, &k, &v, &c, md, &o));
    }
    return 0;
}

static int poison_outs(void **outs, int32_t t)
{
    int l;
    for (l = 0; l < NLAYERS; ++l) CK(cudaMemsetAsync(outs[l], 0xFF, q_bytes(t), stream));
    return 0;
}

/* ---- CPU reference ------------------------------------------------------------------------ */
static fa_backend *cpu;
static fa_builder *cpu_bld;
static void *ccache[NLAYERS];
static float *csinks;

static int cpu_setup(const fa_config *cfg_gpu)
{
    fa_config c = *cfg_gpu;
    int l;
    c.compilation.full_cuda_graph = 0;
    OK(fa_cpu_backend_create(&cpu));
    OK(fa_builder_create(cpu, &c, NULL, &cpu_bld));
    for (l = 0; l < NLAYERS; ++l) {
        ccache[l] = malloc(cache_bytes);
        if (!ccache[l]) return -1;
    }
    csinks = (float *)malloc(sizeof hsinks);
    if (!csinks) return -1;
    memcpy(csinks, hsinks, sizeof hsinks);
    return 0;
}

/* Runs the step on the CPU from the host snapshot of set B's caches (taken before the step)
   and compares the real rows of every layer with the eager GPU output. */
static int cpu_compare(const step *s, uint16_t **gpu_out, const char *name)
{
    fa_layer cl[NLAYERS];
    fa_batch b = step_batch(s);
    fa_metadata md;
    uint16_t *cout = (uint16_t *)malloc(q_bytes(s->t));
    int l, worst_l = -1;
    double worst = 0;
    int64_t i, bad = 0;
    if (!cout) return -1;
    b.block_table = s->bt;
    b.slot_mapping = s->slots;
    OK(fa_builder_build(cpu_bld, &b, 0, &md));
    for (l = 0; l < NLAYERS; ++l) {
        fa_tensor q = rows_tensor(hq, s->t, HQ), k = rows_tensor(hk, s->t, HKV),
                  v = rows_tensor(hv, s->t, HKV);
        fa_tensor c = cache_tensor(ccache[l]), o = rows_tensor(cout, s->t, HQ);
        cl[l] = layers[l];
        if (cl[l].desc.sinks) cl[l].desc.sinks = csinks;
        memset(cout, 0xFF, q_bytes(s->t));
        OK(fa_forward(&cl[l], cpu, &q, &k, &v, &c, &md, &o));
        for (i = 0; i < (int64_t)s->t_real * HQ * D; ++i) {
            float g = fa_cpu_bf16_to_float(gpu_out[l][i]), r = fa_cpu_bf16_to_float(cout[i]);
            double err = fabs((double)g - r);
            if (!(err <= 2e-2 + 2e-2 * fabs(r))) {
                if (bad++ < 3)
                    printf("#   %s layer %d: element %lld: gpu %g, cpu %g\n", name, l, (long long)i, g, r);
            }
            if (err > worst || err != err) {
                worst = err;
                worst_l = l;
            }
        }
    }
    free(cout);
    tap(bad == 0,
        "%s: eager GPU within tolerance of the CPU reference (%lld bad, worst |err| %.3g in layer %d)", name,
        (long long)bad, worst, worst_l);
    return 0;
}

/* ---- one capture size --------------------------------------------------------------------- */
static int run_size(int32_t T, int decode, uint16_t **hA, uint16_t **hB)
{
    step s;
    fa_metadata md;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int32_t cap_splits, cap_max_q, cap_min_q, cap_reqs;
    int st, l, cap_ok;
    char name[160];
    cudaError_t e;
    const char *kind = decode ? "uniform decode" : "mixed";

    /* the representative batch: long keys, so the plan splits (static count = the cap) */
    if (decode)
        make_decode(&s, T, 1);
    else
        make_mixed(&s, T, 1);
    for (l = 0; l < s.t; ++l) s.slots[l] = -1; /* capture/warm-up writes no cache */
    if (step_build(&s, &md) != 0) {
        tap(0, "T_pad %d (%s): capture batch build", T, kind);
        return -1;
    }
    cap_splits = md.num_splits;
    cap_max_q = md.max_query_len;
    cap_min_q = md.min_query_len;
    cap_reqs = md.num_reqs;
    {
        /* the cap, unless the partials of T_pad rows do not fit the workspace (sized for
           max_num_seqs rows x max_num_splits): then the largest count that fits, the same for
           every build at this T_pad (checked per step below) */
        int32_t cap = fa_builder_config(bld)->compilation.max_num_splits_for_cuda_graph;
        int want_cap = T <= RMAX; /* uniform decode: T_pad rows fit */
        tap(cap_splits >= 1 && cap_splits <= cap && (!want_cap || cap_splits == cap),
            "T_pad %d (%s): capture batch's static split count %d is %s %d", T, kind, cap_splits,
            want_cap ? "the cap" : "within the cap", cap);
    }
    /* warm-up (first launches set kernel attributes), then capture */
    if (forward_all(&md, T, cacheA, outA) != 0) {
        tap(0, "T_pad %d (%s): warm-up", T, kind);
        return -1;
    }
    CK(cudaStreamSynchronize(stream));
    cap_ok = 0;
    e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
        int r = forward_all(&md, T, cacheA, outA);
        e = cudaStreamEndCapture(stream, &graph);
        if (r == 0 && e == cudaSuccess) {
            e = cudaGraphInstantiate(&exec, graph, 0);
            if (e == cudaSuccess) cap_ok = 1;
        }
        if (e != cudaSuccess) printf("#   capture: %s\n", cudaGetErrorString(e));
    } else {
        printf("#   cudaStreamBeginCapture: %s\n", cudaGetErrorString(e));
    }
    cudaGetLastError();
    tap(cap_ok, "T_pad %d (%s): fa_forward x %d layers captured (global capture mode) and instantiated", T,
        kind, NLAYERS);
    if (!cap_ok) {
        if (graph) cudaGraphDestroy(graph);
        return -1;
    }
    {
        size_t nodes = 0;
        CK(cudaGraphGetNodes(graph, NULL, &nodes));
        printf(
            "#   T_pad %d: graph of %zu nodes, %d requests, max_query_len %d, min_query_len %d, %d splits\n",
            T, nodes, cap_reqs, cap_max_q, cap_min_q, cap_splits);
    }

    for (st = 0; st < STEPS; ++st) {
        int cpu_step = st == 3 || st == STEPS - 2;
        int32_t eager_splits;
        if (decode)
            make_decode(&s, T, 0);
        else
            make_mixed(&s, T, 0);
        snprintf(name, sizeof name, "T_pad %d (%s) step %d: %d real requests, %d real tokens", T, kind, st,
                 s.r_real, s.t_real);
        if (cpu_step) { /* set B before the step, for the CPU reference */
            CK(cudaStreamSynchronize(stream));
            for (l = 0; l < NLAYERS; ++l)
                CK(cudaMemcpy(ccache[l], cacheB[l], cache_bytes, cudaMemcpyDeviceToHost));
        }
        if (step_build(&s, &md) != 0) {
            tap(0, "%s: build", name);
            continue;
        }
        eager_splits = md.num_splits;
        if (md.max_query_len * (HQ / HKV) <= 16 ? cap_max_q * (HQ / HKV) > 16 : cap_max_q * (HQ / HKV) <= 16)
            printf("#   %s: kernel choice differs from the capture's (max_query_len %d vs %d)\n", name,
                   md.max_query_len, cap_max_q);
        if (poison_outs(outA, T) != 0 || poison_outs(outB, T) != 0) return -1;
        CK(cudaGraphLaunch(exec, stream));
        if (forward_all(&md, T, cacheB, outB) != 0) {
            tap(0, "%s: eager forward", name);
            continue;
        }
        CK(cudaStreamSynchronize(stream));
        {
            fa_status fs = gpu->ops.synchronize(gpu->ctx); /* reports a recorded bad index */
            if (fs != FA_OK) printf("#   backend synchronize: %s\n", fa_last_error());
        }
        {
            int same = 1, nan_rows = 0;
            for (l = 0; l < NLAYERS; ++l) {
                int64_t i;
                CK(cudaMemcpy(hA[l], outA[l], q_bytes(T), cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hB[l], outB[l], q_bytes(T), cudaMemcpyDeviceToHost));
                if (memcmp(hA[l], hB[l], q_bytes(T)) != 0) {
                    for (i = 0; i < (int64_t)T * HQ * D; ++i)
                        if (hA[l][i] != hB[l][i]) break;
                    if (same)
                        printf("#   layer %d: first differing element %lld (row %lld): graph 0x%04x eager "
                               "0x%04x\n",
                               l, (long long)i, (long long)(i / (HQ * D)), hA[l][i], hB[l][i]);
                    same = 0;
                }
                for (i = 0; i < (int64_t)s.t_real * HQ * D; ++i)
                    if ((hB[l][i] & 0x7fff) > 0x7f80) {
                        ++nan_rows;
                        break;
                    } /* NaN: poison survived */
            }
            tap(same && nan_rows == 0 && eager_splits == cap_splits,
                "%s: graph replay == eager, bit for bit, 3 layers (splits: eager %d, graph %d)%s", name,
                eager_splits, cap_splits, nan_rows ? " [NaN in eager output]" : "");
        }
        if (cpu_step && cpu_compare(&s, hB, name) != 0) tap(0, "%s: CPU reference run", name);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return 0;
}

static int run(void)
{
    fa_config cfg;
    fa_layer_desc ld;
    int64_t strides[5];
    uint16_t *hA[NLAYERS], *hB[NLAYERS];
    int l;
    size_t i;
    int32_t sizes[3] = {16, 64, 256};
    int decode[3] = {1, 0, 0};

    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (fa_cuda_backend_create(0, (void *)stream, &gpu) != FA_OK) {
        printf("#   fa_cuda_backend_create: %s\n", fa_cuda_create_error());
        return -1;
    }
    if (gt_apply_family(gpu) != 0) return -1;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = HQ;
    cfg.model.num_heads_kv = HKV;
    cfg.model.head_size = D;
    cfg.cache.block_size = BS;
    cfg.compilation.full_cuda_graph = 1;
    cfg.compilation.max_cudagraph_capture_size = TMAX;
    cfg.compilation.max_num_splits_for_cuda_graph = 8;
    cfg.scheduler.max_num_seqs = RMAX;
    cfg.scheduler.max_num_batched_tokens = TMAX;
    OK(fa_builder_create(gpu, &cfg, NULL, &bld));

    for (i = 0; i < HQ; ++i) hsinks[i] = frand() * 2.f;
    CK(cudaMalloc((void **)&dsinks, sizeof hsinks));
    CK(cudaMemcpy(dsinks, hsinks, sizeof hsinks, cudaMemcpyHostToDevice));
    for (l = 0; l < NLAYERS; ++l) {
        memset(&ld, 0, sizeof ld);
        ld.num_heads_q = HQ;
        ld.num_heads_kv = HKV;
        ld.head_size = D;
        if (l == 1) ld.sliding_window = 64;
        if (l == 2) {
            ld.logits_soft_cap = 30.f;
            ld.sinks = dsinks;
            ld.num_sinks = HQ;
        }
        OK(fa_layer_init(&layers[l], &ld));
    }
    OK(fa_builder_set_layers(bld, layers, NLAYERS));

    OK(fa_kv_cache_shape(NBLOCKS, BS, HKV, D, cache_shape));
    OK(fa_kv_cache_strides(FA_LAYOUT_NHD, NBLOCKS, BS, HKV, D, strides));
    cache_bytes = (size_t)2 * NBLOCKS * BS * HKV * D * 2;
    hcache = (uint16_t *)malloc(cache_bytes);
    hq = (uint16_t *)malloc(q_bytes(TMAX));
    hk = (uint16_t *)malloc(kv_bytes(TMAX));
    hv = (uint16_t *)malloc(kv_bytes(TMAX));
    if (!hcache || !hq || !hk || !hv) return -1;
    for (i = 0; i < cache_bytes / 2; ++i) hcache[i] = fa_cpu_float_to_bf16(frand());
    for (l = 0; l < NLAYERS; ++l) {
        CK(cudaMalloc(&cacheA[l], cache_bytes));
        CK(cudaMalloc(&cacheB[l], cache_bytes));
        CK(cudaMemcpy(cacheA[l], hcache, cache_bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(cacheB[l], hcache, cache_bytes, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&outA[l], q_bytes(TMAX)));
        CK(cudaMalloc(&outB[l], q_bytes(TMAX)));
        hA[l] = (uint16_t *)malloc(q_bytes(TMAX));
        hB[l] = (uint16_t *)malloc(q_bytes(TMAX));
        if (!hA[l] || !hB[l]) return -1;
    }
    CK(cudaMalloc(&dq, q_bytes(TMAX)));
    CK(cudaMalloc(&dk, kv_bytes(TMAX)));
    CK(cudaMalloc(&dv, kv_bytes(TMAX)));
    CK(cudaMalloc((void **)&dbt, sizeof(int32_t) * RMAX * MAXB));
    CK(cudaMalloc((void **)&dslots, sizeof(int64_t) * TMAX));
    if (cpu_setup(&cfg) != 0) {
        tap(0, "CPU reference backend");
        return -1;
    }

    for (l = 0; l < 3; ++l) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (run_size(sizes[l], decode[l], hA, hB) != 0) tap(0, "T_pad %d: aborted (see above)", sizes[l]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("#   T_pad %d: %.2f s\n", sizes[l],
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    }
    /* the caches of the two sets saw the same writes */
    {
        uint16_t *a = (uint16_t *)malloc(cache_bytes), *b = (uint16_t *)malloc(cache_bytes);
        int same = a && b;
        CK(cudaStreamSynchronize(stream));
        for (l = 0; same && l < NLAYERS; ++l) {
            CK(cudaMemcpy(a, cacheA[l], cache_bytes, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(b, cacheB[l], cache_bytes, cudaMemcpyDeviceToHost));
            if (memcmp(a, b, cache_bytes) != 0) same = 0;
        }
        tap(same, "caches written by the graphs == caches written eagerly, bit for bit");
        free(a);
        free(b);
    }
    for (l = 0; l < NLAYERS; ++l) {
        cudaFree(cacheA[l]);
        cudaFree(cacheB[l]);
        cudaFree(outA[l]);
        cudaFree(outB[l]);
        free(hA[l]);
        free(hB[l]);
        free(ccache[l]);
    }
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dbt);
    cudaFree(dslots);
    cudaFree(dsinks);
    fa_builder_destroy(bld);
    fa_builder_destroy(cpu_bld);
    fa_cuda_backend_destroy(gpu);
    fa_cpu_backend_destroy(cpu);
    cudaStreamDestroy(stream);
    free(hcache);
    free(hq);
    free(hk);
    free(hv);
    free(csinks);
    return 0;
}

int main(void)
{
    struct timespec t0, t1;
    int dev = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) {
        printf("1..0 # SKIP no CUDA device\n0 passed, 0 failed\n");
        return 0;
    }
    if (run() != 0) tap(0, "setup or teardown (see above)");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# %.2f s in all\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    printf("1..%d\n%d passed, %d failed\n", n_case, n_pass, n_fail);
    return n_fail == 0 ? 0 : 1;
}
