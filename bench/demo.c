/* demo.c - flashattn's main job: serving steps of a small model through the public API.

   Eight requests share a 256-token system prompt (its KV blocks are shared, as a prefix cache
   would), then prefill their own prompts in chunks under a token budget, then decode. Every
   step runs three layers:
     layer 0  full attention, bf16 cache     (cascade when the heuristic says it pays)
     layer 1  sliding window of 128 tokens   (its own cache group: never cascade)
     layer 2  full attention, fp8 e4m3 cache (cascade like layer 0)
   on the default backend (CUDA when built and a GPU is present, else the CPU reference), and
   checks each layer's output:
     - on a GPU: against the CPU reference backend running plain (non-cascade) attention on the
       same inputs;
     - on the CPU backend: against naive_attention below, an independent double-precision
       attention written out in plain loops (its own copy of the paged cache, written by slot;
       causal; the windowed layer's window; softmax with scale 1/sqrt(D)), so the CPU backend is
       not checked against itself.
   Prints what ran and how long each part took. Exit status 0 when every output matched within
   tolerance. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fa_build_config.h"
#include "fa_cpu.h"
#if FA_HAVE_CUDA
#include "fa_cuda.h"
#endif

enum {
    NREQ = 8,
    HQ = 8,
    HKV = 2,
    D = 64,
    BS = 16,
    SHARED = 256,
    BUDGET = 512,
    DECODE_STEPS = 6,
    NLAYERS = 3,
    WINDOW = 128,
    MAX_LEN = 512,
    BLOCKS_PER_REQ = MAX_LEN / BS
};

#define CHECK(call) \
    do { \
        fa_status s_ = (call); \
        if (s_ != FA_OK) { \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, fa_status_string(s_), \
                    fa_last_error()); \
            exit(1); \
        } \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.f;
}

/* One backend's world: its caches (one per layer), the block table, and step buffers. */
typedef struct world {
    fa_backend *be;
    fa_builder *full, *swa;          /* two cache groups */
    void *cache[NLAYERS];
    fa_tensor cache_t[NLAYERS];
    int32_t *block_table;            /* device */
    int64_t *slots;                  /* device */
    void *q, *k, *v, *out;           /* device, [BUDGET, H, D] bf16 */
} world;

static void *dev_alloc(fa_backend *be, size_t bytes)
{
    void *p = NULL;
    CHECK(be->ops.alloc(be->ctx, bytes, &p));
    return p;
}

static void world_init(world *w, fa_backend *be, const int32_t *bt_host, int64_t num_blocks)
{
    fa_config cfg;
    int64_t strides[5], shape[5];
    int l;
    memset(w, 0, sizeof *w);
    w->be = be;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = HQ;
    cfg.model.num_heads_kv = HKV;
    cfg.model.head_size = D;
    cfg.cache.block_size = BS;
    cfg.scheduler.max_num_seqs = NREQ;
    cfg.scheduler.max_num_batched_tokens = BUDGET;
    CHECK(fa_builder_create(be, &cfg, NULL, &w->full));
    CHECK(fa_builder_create(be, &cfg, NULL, &w->swa));
    CHECK(fa_kv_cache_shape(num_blocks, BS, HKV, D, shape));
    CHECK(fa_kv_cache_strides(FA_LAYOUT_NHD, num_blocks, BS, HKV, D, strides));
    for (l = 0; l < NLAYERS; ++l) {
        fa_dtype dt = l == 2 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16;
        size_t bytes = (size_t)(2 * num_blocks * BS * HKV * D) * fa_dtype_size(dt);
        w->cache[l] = dev_alloc(be, bytes);
        CHECK(be->ops.fill(be->ctx, w->cache[l], bytes, 0x7f, bytes, 1)); /* NaN-ish bytes in unused slots */
        w->cache_t[l] = fa_tensor_make(w->cache[l], dt, 5, shape);
        memcpy(w->cache_t[l].stride, strides, sizeof strides);
    }
    w->block_table = (int32_t *)dev_alloc(be, sizeof(int32_t) * NREQ * BLOCKS_PER_REQ);
    CHECK(be->ops.copy(be->ctx, w->block_table, bt_host, sizeof(int32_t) * NREQ * BLOCKS_PER_REQ,
                       FA_COPY_HOST_TO_DEVICE));
    w->slots = (int64_t *)dev_alloc(be, sizeof(int64_t) * BUDGET);
    w->q = dev_alloc(be, (size_t)BUDGET * HQ * D * 2);
    w->k = dev_alloc(be, (size_t)BUDGET * HKV * D * 2);
    w->v = dev_alloc(be, (size_t)BUDGET * HKV * D * 2);
    w->out = dev_alloc(be, (size_t)BUDGET * HQ * D * 2);
}

static void world_free(world *w)
{
    int l;
    fa_backend *be = w->be;
    for (l = 0; l < NLAYERS; ++l) be->ops.free(be->ctx, w->cache[l]);
    be->ops.free(be->ctx, w->block_table);
    be->ops.free(be->ctx, w->slots);
    be->ops.free(be->ctx, w->q);
    be->ops.free(be->ctx, w->k);
    be->ops.free(be->ctx, w->v);
    be->ops.free(be->ctx, w->out);
    fa_builder_destroy(w->full);
    fa_builder_destroy(w->swa);
}

/* ---- the independent reference (CPU-only runs) -------------------------------------------
   A host copy of each layer's paged cache as floats, [2][num_blocks * BS][HKV][D] (K then V,
   indexed by slot), written the way the semantics define the cache write: bf16 stored as is,
   fp8 stored as saturate_rne(x / scale) and read back as x8 * scale (the conversion functions
   are the CPU backend's, tested on their own by tests/test_fp8.c; the attention is all here). */
static void naive_cache_write(float *mirror, int64_t num_slots, int l, const fa_layer_desc *d, int32_t t,
                              const int64_t *slots, const uint16_t *k, const uint16_t *v)
{
    int32_t i, e;
    for (i = 0; i < t; ++i) {
        float *kd = mirror + ((size_t)slots[i] * HKV * D),
              *vd = mirror + ((size_t)(num_slots + slots[i]) * HKV * D);
        for (e = 0; e < HKV * D; ++e) {
            float kf = fa_cpu_bf16_to_float(k[(size_t)i * HKV * D + e]);
            float vf = fa_cpu_bf16_to_float(v[(size_t)i * HKV * D + e]);
            if (l == 2) {
                kf = fa_cpu_fp8_to_float(fa_cpu_float_to_fp8(kf / d->k_scale, FA_DTYPE_FP8_E4M3),
                                         FA_DTYPE_FP8_E4M3) *
                     d->k_scale;
                vf = fa_cpu_fp8_to_float(fa_cpu_float_to_fp8(vf / d->v_scale, FA_DTYPE_FP8_E4M3),
                                         FA_DTYPE_FP8_E4M3) *
                     d->v_scale;
            }
            kd[e] = kf;
            vd[e] = vf;
        }
    }
}

/* out[t][h][d] (double) = softmax_j(scale * q[t][h] . K[j][h / (HQ / HKV)]) . V[j], over the keys j
   of token t's request that it may see: causal (bottom-right: query i of a request with Lq new
   tokens and Lk keys sits at position i + Lk - Lq), and for a window W only j > pos - W. */
static void naive_attention(const float *mirror, int64_t num_slots, int32_t window, int32_t n,
                            const int32_t *qsl, const int32_t *seq_lens, const int32_t *bt, const uint16_t *q,
                            double *out)
{
    static double p[MAX_LEN];
    const double scale = 1.0 / sqrt((double)D);
    int32_t b, i, j, h, d;
    for (b = 0; b < n; ++b) {
        int32_t lq = qsl[b + 1] - qsl[b], lk = seq_lens[b];
        for (i = 0; i < lq; ++i) {
            int32_t tok = qsl[b] + i, pos = i + lk - lq, lo = 0;
            if (window > 0 && pos - (window - 1) > lo) lo = pos - (window - 1);
            for (h = 0; h < HQ; ++h) {
                int32_t kvh = h / (HQ / HKV);
                double mx = -INFINITY, sum = 0;
                double *o = out + ((size_t)tok * HQ + h) * D;
                for (j = lo; j <= pos; ++j) {
                    int64_t slot = (int64_t)bt[b * BLOCKS_PER_REQ + j / BS] * BS + j % BS;
                    const float *kr = mirror + ((size_t)slot * HKV + kvh) * D;
                    double s = 0;
                    for (d = 0; d < D; ++d)
                        s += (double)fa_cpu_bf16_to_float(q[((size_t)tok * HQ + h) * D + d]) * kr[d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (d = 0; d < D; ++d) o[d] = 0;
                for (j = lo; j <= pos; ++j) {
                    int64_t slot = (int64_t)bt[b * BLOCKS_PER_REQ + j / BS] * BS + j % BS;
                    const float *vr = mirror + ((size_t)(num_slots + slot) * HKV + kvh) * D;
                    double w = exp(p[j] - mx);
                    sum += w;
                    for (d = 0; d < D; ++d) o[d] += w * vr[d];
                }
                for (d = 0; d < D; ++d) o[d] /= sum;
            }
        }
    }
}

/* Runs one layer for one step; returns the microseconds the forward took (synchronised). */
static double run_layer(world *w, const fa_layer *layer, int l, const fa_metadata *md, int32_t t,
                        const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *out_host)
{
    fa_backend *be = w->be;
    int64_t qs[3] = {t, HQ, D}, ks[3] = {t, HKV, D};
    fa_tensor tq = fa_tensor_make(w->q, FA_DTYPE_BF16, 3, qs),
              tk = fa_tensor_make(w->k, FA_DTYPE_BF16, 3, ks);
    fa_tensor tv = fa_tensor_make(w->v, FA_DTYPE_BF16, 3, ks),
              to = fa_tensor_make(w->out, FA_DTYPE_BF16, 3, qs);
    double t0, t1;
    CHECK(be->ops.copy(be->ctx, w->q, q, (size_t)t * HQ * D * 2, FA_COPY_HOST_TO_DEVICE));
    CHECK(be->ops.copy(be->ctx, w->k, k, (size_t)t * HKV * D * 2, FA_COPY_HOST_TO_DEVICE));
    CHECK(be->ops.copy(be->ctx, w->v, v, (size_t)t * HKV * D * 2, FA_COPY_HOST_TO_DEVICE));
    if (be->ops.synchronize) CHECK(be->ops.synchronize(be->ctx));
    t0 = now_us();
    CHECK(fa_forward(layer, be, &tq, &tk, &tv, &w->cache_t[l], md, &to));
    if (be->ops.synchronize) CHECK(be->ops.synchronize(be->ctx));
    t1 = now_us();
    CHECK(be->ops.copy(be->ctx, out_host, w->out, (size_t)t * HQ * D * 2, FA_COPY_DEVICE_TO_HOST));
    if (be->ops.synchronize) CHECK(be->ops.synchronize(be->ctx));
    return t1 - t0;
}


#if FA_HAVE_CUDA
/* ---- --graph: eager vs full-CUDA-graph replay of decode steps (docs/graphs.md) ------------ */
#include <cuda_runtime_api.h>
#define G_HQ 8
#define G_HKV 2
#define G_D 128
#define G_BS 16
#define G_R 32 /* decode requests = T_pad */
#define G_MAXB 128 /* 2048 tokens per request */
#define G_LAYERS 3
#define G_STEPS 50
#define GCK(call) \
    do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) { \
            printf("graph: %s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1; \
        } \
    } while (0)
#define GOK(call) \
    do { \
        fa_status s_ = (call); \
        if (s_ != FA_OK) { \
            printf("graph: %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, fa_status_string(s_), \
                   fa_last_error()); \
            return 1; \
        } \
    } while (0)

static int graph_mode(void)
{
    cudaStream_t st;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    fa_backend *be = NULL;
    fa_builder *b = NULL;
    fa_config cfg;
    fa_layer layers[G_LAYERS];
    fa_layer_desc ld;
    fa_metadata md;
    fa_batch batch;
    fa_tensor tq, tk, tv, tc[G_LAYERS], to[G_LAYERS], to_e[G_LAYERS];
    int64_t cshape[5], sq[3] = {G_R, G_HQ, G_D}, skv[3] = {G_R, G_HKV, G_D};
    const int64_t nblocks = 1 + (int64_t)G_R * G_MAXB;
    const size_t cbytes = (size_t)2 * nblocks * G_BS * G_HKV * G_D * 2, qb = (size_t)G_R * G_HQ * G_D * 2,
                 kvb = (size_t)G_R * G_HKV * G_D * 2;
    void *cache[G_LAYERS], *cache_e[G_LAYERS], *out[G_LAYERS], *out_e[G_LAYERS], *dq, *dk, *dv;
    int32_t *dbt, qsl[G_R + 1], seq[G_R], *bt = (int32_t *)malloc(sizeof(int32_t) * G_R * G_MAXB);
    int64_t *dslots, slots[G_R];
    uint16_t *h = (uint16_t *)malloc(cbytes), *ha = (uint16_t *)malloc(qb), *hb = (uint16_t *)malloc(qb);
    double t_eager = 0, t_graph = 0, t0;
    int i, j, l, step, mismatches = 0, cap_splits = 0;
    if (!bt || !h || !ha || !hb) return 1;
    GCK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (fa_cuda_backend_create(0, (void *)st, &be) != FA_OK) {
        printf("graph: no usable GPU (%s)\n", fa_cuda_create_error());
        return 1;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = G_HQ;
    cfg.model.num_heads_kv = G_HKV;
    cfg.model.head_size = G_D;
    cfg.cache.block_size = G_BS;
    cfg.compilation.full_cuda_graph = 1;
    cfg.compilation.max_cudagraph_capture_size = G_R;
    cfg.compilation.max_num_splits_for_cuda_graph = 8;
    cfg.scheduler.max_num_seqs = G_R;
    cfg.scheduler.max_num_batched_tokens = G_R;
    GOK(fa_builder_create(be, &cfg, NULL, &b));
    for (l = 0; l < G_LAYERS; ++l) {
        memset(&ld, 0, sizeof ld);
        ld.num_heads_q = G_HQ;
        ld.num_heads_kv = G_HKV;
        ld.head_size = G_D;
        if (l == 1) ld.sliding_window = 256;
        GOK(fa_layer_init(&layers[l], &ld));
    }
    GOK(fa_builder_set_layers(b, layers, G_LAYERS));
    GOK(fa_kv_cache_shape(nblocks, G_BS, G_HKV, G_D, cshape));
    for (i = 0; i < (int)(cbytes / 2); ++i) h[i] = fa_cpu_float_to_bf16(frand());
    for (l = 0; l < G_LAYERS; ++l) {
        GCK(cudaMalloc(&cache[l], cbytes));
        GCK(cudaMalloc(&cache_e[l], cbytes));
        GCK(cudaMalloc(&out[l], qb));
        GCK(cudaMalloc(&out_e[l], qb));
        GCK(cudaMemcpy(cache[l], h, cbytes, cudaMemcpyHostToDevice));
        GCK(cudaMemcpy(cache_e[l], h, cbytes, cudaMemcpyHostToDevice));
        tc[l] = fa_tensor_make(cache[l], FA_DTYPE_BF16, 5, cshape);
        to[l] = fa_tensor_make(out[l], FA_DTYPE_BF16, 3, sq);
        to_e[l] = fa_tensor_make(out_e[l], FA_DTYPE_BF16, 3, sq);
    }
    GCK(cudaMalloc(&dq, qb));
    GCK(cudaMalloc(&dk, kvb));
    GCK(cudaMalloc(&dv, kvb));
    GCK(cudaMalloc((void **)&dbt, sizeof(int32_t) * G_R * G_MAXB));
    GCK(cudaMalloc((void **)&dslots, sizeof(int64_t) * G_R));
    tq = fa_tensor_make(dq, FA_DTYPE_BF16, 3, sq);
    tk = fa_tensor_make(dk, FA_DTYPE_BF16, 3, skv);
    tv = fa_tensor_make(dv, FA_DTYPE_BF16, 3, skv);
    for (i = 0; i < G_R; ++i)
        for (j = 0; j < G_MAXB; ++j) bt[i * G_MAXB + j] = 1 + i * G_MAXB + j;
    GCK(cudaMemcpy(dbt, bt, sizeof(int32_t) * G_R * G_MAXB, cudaMemcpyHostToDevice));
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = G_R;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.block_table = dbt;
    batch.block_table_stride = G_MAXB;
    batch.block_table_host = bt;
    batch.slot_mapping = dslots;
    for (step = -1; step < G_STEPS; ++step) { /* step -1: capture (long keys: the plan splits) */
        for (i = 0; i < G_R; ++i) {
            qsl[i] = i;
            seq[i] = step < 0 ? G_MAXB * G_BS : 1 + (int32_t)((frand() + 1.f) * 0.5f * (G_MAXB * G_BS - 1));
            if (seq[i] > G_MAXB * G_BS) seq[i] = G_MAXB * G_BS;
            slots[i] =
                step < 0 ? -1 : (int64_t)bt[i * G_MAXB + (seq[i] - 1) / G_BS] * G_BS + (seq[i] - 1) % G_BS;
        }
        qsl[G_R] = G_R;
        for (i = 0; i < G_R * G_HQ * G_D; ++i) ha[i] = fa_cpu_float_to_bf16(frand());
        GCK(cudaMemcpyAsync(dq, ha, qb, cudaMemcpyHostToDevice, st));
        GCK(cudaMemcpyAsync(dk, ha, kvb, cudaMemcpyHostToDevice, st));
        GCK(cudaMemcpyAsync(dv, ha + G_R * G_HKV * G_D, kvb, cudaMemcpyHostToDevice, st));
        GCK(cudaMemcpyAsync(dslots, slots, sizeof slots, cudaMemcpyHostToDevice, st));
        GOK(fa_builder_build(b, &batch, 0, &md)); /* outside the graph, every step */
        if (step < 0) {
            cap_splits = md.num_splits;
            for (l = 0; l < G_LAYERS; ++l)
                GOK(fa_forward(&layers[l], be, &tq, &tk, &tv, &tc[l], &md, &to[l]));
            GCK(cudaStreamSynchronize(st));
            GCK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (l = 0; l < G_LAYERS; ++l)
                GOK(fa_forward(&layers[l], be, &tq, &tk, &tv, &tc[l], &md, &to[l]));
            GCK(cudaStreamEndCapture(st, &graph));
            GCK(cudaGraphInstantiate(&exec, graph, 0));
            GCK(cudaGraphLaunch(exec, st)); /* first replay uploads the graph */
            GCK(cudaStreamSynchronize(st));
            continue;
        }
        for (l = 0; l < G_LAYERS; ++l) {
            GCK(cudaMemsetAsync(out[l], 0xFF, qb, st));
            GCK(cudaMemsetAsync(out_e[l], 0xFF, qb, st));
        }
        GCK(cudaStreamSynchronize(st));
        t0 = now_us();
        GCK(cudaGraphLaunch(exec, st));
        GCK(cudaStreamSynchronize(st));
        t_graph += now_us() - t0;
        t0 = now_us();
        for (l = 0; l < G_LAYERS; ++l) {
            fa_tensor c = fa_tensor_make(cache_e[l], FA_DTYPE_BF16, 5, cshape);
            GOK(fa_forward(&layers[l], be, &tq, &tk, &tv, &c, &md, &to_e[l]));
        }
        GCK(cudaStreamSynchronize(st));
        t_eager += now_us() - t0;
        for (l = 0; l < G_LAYERS; ++l) {
            GCK(cudaMemcpy(ha, out[l], qb, cudaMemcpyDeviceToHost));
            GCK(cudaMemcpy(hb, out_e[l], qb, cudaMemcpyDeviceToHost));
            if (memcmp(ha, hb, qb) != 0) ++mismatches;
        }
    }
    printf("graph: %d decode requests, %d layers, static splits %d: eager %.1f us/step, graph replay %.1f "
           "us/step "
           "(launch + sync, builds excluded); replay == eager: %s (%d layer outputs differ)\n",
           G_R, G_LAYERS, cap_splits, t_eager / G_STEPS, t_graph / G_STEPS, mismatches ? "NO" : "yes",
           mismatches);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (l = 0; l < G_LAYERS; ++l) {
        cudaFree(cache[l]);
        cudaFree(cache_e[l]);
        cudaFree(out[l]);
        cudaFree(out_e[l]);
    }
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dbt);
    cudaFree(dslots);
    fa_builder_destroy(b);
    fa_cuda_backend_destroy(be);
    cudaStreamDestroy(st);
    free(bt);
    free(h);
    free(ha);
    free(hb);
    return mismatches ? 1 : 0;
}
#endif

int main(int argc, char **argv)
{
    fa_backend *cpu = NULL, *dev = NULL;
    world W, R; /* W: default backend, R: CPU reference */
    fa_layer layers[NLAYERS];
    fa_layer_desc descs[NLAYERS];
    float *mirror[NLAYERS] = {NULL, NULL, NULL}; /* naive reference's caches (CPU-only runs) */
    double *out_naive = NULL;
    int naive;
    /* max abs error allowed per layer. GPU vs CPU backend: the GPU's float accumulation and fp8
       reads. CPU backend vs the naive reference: the same inputs and the same fp8 cache values,
       so only the output's rounding to bf16 (half an ulp, 2^-9 at |out| < 1) and summation order */
    double tol[NLAYERS] = {2e-2, 2e-2, 1.5e-1};
    int32_t bt[NREQ * BLOCKS_PER_REQ], prompt_len[NREQ], computed[NREQ], seq_lens[NREQ], qsl[NREQ + 1];
    int64_t num_blocks;
    int32_t perm[512];
    uint16_t *q, *k, *v, *out_dev, *out_ref;
    int64_t slots[BUDGET];
    int i, j, l, step, failures = 0, cascade_steps = 0, total_steps = 0;
    double t_build = 0, t_fwd[NLAYERS] = {0, 0, 0}, t_ref = 0, worst[NLAYERS] = {0, 0, 0};
    const char *dev_name = "cpu";

    if (argc > 1 && strcmp(argv[1], "--graph") == 0) {
#if FA_HAVE_CUDA
        setvbuf(stdout, NULL, _IOLBF, 0);
        return graph_mode();
#else
        printf("--graph needs the CUDA backend (built without it)\n");
        return 1;
#endif
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines in order with errors, also into a pipe or file */
    CHECK(fa_cpu_backend_create(&cpu));
#if FA_HAVE_CUDA
    if (fa_cuda_backend_create(0, NULL, &dev) != FA_OK) {
        printf("CUDA backend built, but no usable GPU (%s): running on the CPU backend\n",
               fa_cuda_create_error());
        dev = NULL;
    }
#endif
    if (dev == NULL) dev = cpu;
    dev_name = dev->name;
    naive = dev == cpu; /* the CPU backend is checked against naive_attention, not against itself */
    if (naive) tol[0] = tol[1] = tol[2] = 4e-3;
    printf("flashattn %s demo: backend '%s' (%s, %d SMs); reference: %s\n", FLASHATTN_VERSION_STRING,
           dev_name, dev->info.name, dev->info.num_sms,
           naive ? "naive double-precision attention (plain loops in demo.c)" : "the CPU reference backend");
    printf(
        "model: %d query heads, %d kv heads, head size %d, block %d; %d requests sharing a %d-token prompt\n",
        HQ, HKV, D, BS, NREQ, SHARED);

    /* physical blocks: the shared prompt's blocks once, then every request's own, shuffled */
    num_blocks = SHARED / BS + (int64_t)NREQ * (BLOCKS_PER_REQ - SHARED / BS) + 7;
    for (i = 0; i < num_blocks; ++i) perm[i] = (int32_t)i;
    for (i = (int)num_blocks - 1; i > 0; --i) {
        j = (int)((uint32_t)(frand() * 1e6f + 1e6f) % (uint32_t)(i + 1));
        {
            int32_t x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
    }
    for (i = 0; i < NREQ; ++i)
        for (j = 0; j < BLOCKS_PER_REQ; ++j)
            bt[i * BLOCKS_PER_REQ + j] =
                j < SHARED / BS ? perm[j]
                                : perm[SHARED / BS + i * (BLOCKS_PER_REQ - SHARED / BS) + j - SHARED / BS];
    world_init(&W, dev, bt, num_blocks);
    if (!naive) world_init(&R, cpu, bt, num_blocks);

    for (l = 0; l < NLAYERS; ++l) {
        fa_layer_desc d;
        memset(&d, 0, sizeof d);
        d.num_heads_q = HQ;
        d.num_heads_kv = HKV;
        d.head_size = D;
        d.sliding_window = l == 1 ? WINDOW : 0;
        d.kv_cache_dtype = l == 2 ? FA_CACHE_FP8_E4M3 : FA_CACHE_AUTO;
        d.k_scale = l == 2 ? 0.05f : 0.f;
        d.v_scale = l == 2 ? 0.05f : 0.f;
        CHECK(fa_layer_init(&layers[l], &d));
        descs[l] = d;
        if (naive) {
            mirror[l] = (float *)calloc((size_t)2 * num_blocks * BS * HKV * D, sizeof(float));
            if (!mirror[l]) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
        }
    }
    if (naive) {
        out_naive = (double *)malloc(sizeof(double) * BUDGET * HQ * D);
        if (!out_naive) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
    }
    for (i = 0; i < NREQ; ++i) {
        prompt_len[i] = SHARED + 40 + 13 * i;
        computed[i] = 0;
    }
    q = (uint16_t *)malloc((size_t)BUDGET * HQ * D * 2);
    k = (uint16_t *)malloc((size_t)BUDGET * HKV * D * 2);
    v = (uint16_t *)malloc((size_t)BUDGET * HKV * D * 2);
    out_dev = (uint16_t *)malloc((size_t)BUDGET * HQ * D * 2);
    out_ref = (uint16_t *)malloc((size_t)BUDGET * HQ * D * 2);

    for (step = 0;; ++step) {
        /* schedule: request 0 prefills the shared prompt alone; afterwards the prompt is cached
           for everyone (prefix hit), prompts are prefilled in chunks under the budget, finished
           prompts decode one token per step. */
        int32_t n = 0, t = 0, budget = BUDGET, prefix = 0, decoding = 0, swa_prefix = 0;
        fa_batch batch;
        fa_metadata md_full, md_swa, md_ref;
        double b0;
        int any_prefill = 0;
        if (step > 0)
            for (i = 1; i < NREQ; ++i)
                if (computed[i] < SHARED) computed[i] = SHARED;
        qsl[0] = 0;
        for (i = 0; i < NREQ && budget > 0; ++i) {
            int32_t want;
            if (step == 0 && i > 0) break;
            if (computed[i] < prompt_len[i]) {
                want = prompt_len[i] - computed[i];
                if (step == 0) want = SHARED;
                any_prefill = 1;
            } else {
                want = 1;
                decoding++;
            }
            if (want > budget) want = budget;
            seq_lens[n] = computed[i] + want;
            for (j = 0; j < want; ++j) {
                int32_t pos = computed[i] + j;
                slots[t + j] = (int64_t)bt[i * BLOCKS_PER_REQ + pos / BS] * BS + pos % BS;
            }
            t += want;
            budget -= want;
            qsl[++n] = t;
        }
        if (!any_prefill && step > 0 && decoding == NREQ) {
            static int decode_done = 0;
            if (decode_done++ >= DECODE_STEPS) break;
        }
        for (i = 0; i < t * HQ * D; ++i) q[i] = fa_cpu_float_to_bf16(frand());
        for (i = 0; i < t * HKV * D; ++i) {
            k[i] = fa_cpu_float_to_bf16(frand());
            v[i] = fa_cpu_float_to_bf16(frand());
        }
        memset(&batch, 0, sizeof batch);
        batch.num_reqs = n;
        batch.query_start_loc = qsl;
        batch.seq_lens = seq_lens;
        batch.block_table = W.block_table;
        batch.block_table_stride = BLOCKS_PER_REQ;
        batch.block_table_host = bt;
        batch.slot_mapping = W.slots;
        batch.causal = 1;
        CHECK(dev->ops.copy(dev->ctx, W.slots, slots, sizeof(int64_t) * (size_t)t, FA_COPY_HOST_TO_DEVICE));
        b0 = now_us();
        CHECK(fa_builder_cascade_prefix_len(W.full, &batch, SHARED / BS, &prefix));
        CHECK(fa_builder_build(W.full, &batch, prefix, &md_full));
        CHECK(fa_builder_build(W.swa, &batch, swa_prefix, &md_swa));
        t_build += now_us() - b0;
        cascade_steps += prefix > 0;
        total_steps++;
        printf("step %2d: %d requests, %3d tokens (%d decodes)%s\n", step, n, t, decoding,
               prefix > 0 ? ", cascade over the shared prompt"
                          : (n >= 8 ? ", cascade declined (plain is faster)" : ""));
        if (!naive)
            CHECK(
                cpu->ops.copy(cpu->ctx, R.slots, slots, sizeof(int64_t) * (size_t)t, FA_COPY_HOST_TO_DEVICE));
        for (l = 0; l < NLAYERS; ++l) {
            fa_builder *rb = l == 1 ? R.swa : R.full;
            fa_batch rbatch = batch;
            double e = 0, t0;
            t_fwd[l] += run_layer(&W, &layers[l], l, l == 1 ? &md_swa : &md_full, t, q, k, v, out_dev);
            t0 = now_us();
            if (naive) {
                /* reference: naive double-precision attention over its own copy of the cache */
                naive_cache_write(mirror[l], num_blocks * BS, l, &descs[l], t, slots, k, v);
                naive_attention(mirror[l], num_blocks * BS, l == 1 ? WINDOW : 0, n, qsl, seq_lens, bt, q,
                                out_naive);
            } else {
                /* reference: the CPU backend with its own caches, plain attention (no cascade) */
                rbatch.block_table = R.block_table;
                rbatch.slot_mapping = R.slots;
                CHECK(fa_builder_build(rb, &rbatch, 0, &md_ref));
                run_layer(&R, &layers[l], l, &md_ref, t, q, k, v, out_ref);
            }
            t_ref += now_us() - t0;
            for (i = 0; i < t * HQ * D; ++i) {
                double a = fa_cpu_bf16_to_float(out_dev[i]);
                double r = naive ? out_naive[i] : fa_cpu_bf16_to_float(out_ref[i]);
                double diff = fabs(a - r);
                if (!(diff <= e)) e = diff != diff ? INFINITY : diff;
            }
            if (e > worst[l]) worst[l] = e;
            if (!(e <= tol[l])) {
                printf("  layer %d: max abs error %.3g vs the %s reference: FAILED\n", l, e,
                       naive ? "naive" : "CPU");
                failures++;
            }
        }
        for (i = 0; i < n; ++i) {
            int32_t req = i;
            computed[req] = seq_lens[i];
        }
    }
    printf("\nran %d steps (%d with cascade) on '%s'\n", total_steps, cascade_steps, dev_name);
    printf("  metadata build      %9.1f us total (%.1f us/step, both groups)\n", t_build,
           t_build / total_steps);
    printf("  layer 0 full bf16   %9.1f us total\n", t_fwd[0]);
    printf("  layer 1 window %3d  %9.1f us total\n", WINDOW, t_fwd[1]);
    printf("  layer 2 full fp8    %9.1f us total\n", t_fwd[2]);
    printf("  %s %9.1f us total\n", naive ? "naive reference   " : "cpu reference     ", t_ref);
    printf(
        "  max abs error vs reference: layer0 %.3g, layer1 %.3g, layer2 %.3g (tolerance %.3g, %.3g, %.3g)\n",
        worst[0], worst[1], worst[2], tol[0], tol[1], tol[2]);
    printf("%s\n", failures ? "DEMO FAILED"
                   : naive
                       ? "demo ok: every output of the CPU backend matched the independent naive reference"
                       : "demo ok: every output matched the CPU reference");
    free(q);
    free(k);
    free(v);
    free(out_dev);
    free(out_ref);
    free(out_naive);
    for (l = 0; l < NLAYERS; ++l) free(mirror[l]);
    if (!naive) world_free(&R);
    world_free(&W);
#if FA_HAVE_CUDA
    if (dev != cpu) fa_cuda_backend_destroy(dev);
#endif
    fa_cpu_backend_destroy(cpu);
    return failures ? 1 : 0;
}
