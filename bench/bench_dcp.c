/* bench_dcp.c - a decode step with decode context parallelism (DCP) over NCCL on N GPUs (default
   2) against the same step on 1 GPU.

   Usage: bench_dcp [--reqs 8] [--ctx 131072] [--world 2] [--interleave 1] [--iters 50]
                    [--warmup 10]

   The step: `reqs` requests decoding one token each after `ctx` tokens of context. The model,
   as a whole: Hq 32 query heads, Hkv 8 KV heads, head size 128, bf16, KV block 16.
     1 GPU : the whole model: 32 query heads against all of every sequence's KV.
     N GPUs: rank r holds 32/N query heads and all 8 KV heads, but only 1/N of every
             sequence's tokens (token p on rank (p / I) % N); each step all-gathers q, attends
             the 32 gathered heads over its shard, all-gathers the LSEs and reduce-scatters the
             partial outputs (flashattn.h fa_forward's DCP path). Each rank's heads map onto the
             replicated KV heads with a rank's GQA mapping (docs/dcp.md): 4 query heads per KV
             head as on 1 GPU, over 1/N of the tokens.

   Timing: CUDA events on each rank's stream around one fa_forward, after `warmup` untimed
   steps; the ranks start each step together (a host barrier); a step's time is the slowest
   rank's; the median of `iters` steps is reported. The communication share is measured two
   ways: (1) the three collectives of a step alone, with the same sizes, timed the same way;
   (2) the step with the comm replaced by a no-op comm (same kernels, no exchange):
   share = 1 - t(no-op) / t(DCP).

   NCCL_NVLS_ENABLE is set to 0 before anything else (NVLink multicast stays off).
*/
#include <cuda_runtime_api.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_cpu.h"
#include "fa_cuda.h"
#include "fa_nccl.h"
#include "flashattn.h"

enum { HQ = 32, HKV = 8, HEAD = 128, BS = 16, MAX_WORLD = 8 };

static struct {
    int reqs, ctx, world, interleave, iters, warmup;
} opt;

#define DIE(...) \
    do { \
        fprintf(stderr, "bench_dcp: " __VA_ARGS__); \
        fprintf(stderr, "\n"); \
        exit(1); \
    } while (0)

#define CK_FA(expr, what) \
    do { \
        if ((expr) != FA_OK) DIE("%s failed: %s", (what), fa_last_error()); \
    } while (0)
#define CK_CUDA(expr, what) \
    do { \
        cudaError_t e_ = (expr); \
        if (e_ != cudaSuccess) DIE("%s failed: %s", (what), cudaGetErrorString(e_)); \
    } while (0)

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(const float *v, int n)
{
    float *c = (float *)malloc(sizeof(float) * (size_t)n), m;
    if (!c) DIE("out of host memory");
    memcpy(c, v, sizeof(float) * (size_t)n);
    qsort(c, (size_t)n, sizeof(float), cmp_float);
    m = n % 2 ? c[n / 2] : 0.5f * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* a reusable host barrier */
typedef struct barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting;
    unsigned long gen;
} barrier;

static void barrier_wait(barrier *b)
{
    unsigned long gen;
    pthread_mutex_lock(&b->mu);
    gen = b->gen;
    if (++b->waiting == b->n) {
        b->waiting = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->gen) pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

static fa_status noop_collective(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype)
{
    (void)ctx;
    (void)send;
    (void)recv;
    (void)count;
    (void)dtype;
    return FA_OK;
}

/* Fills n bytes of device memory with finite random bf16 values in [-1, 1). */
static void fill_random_bf16(cudaStream_t stream, void *dst, size_t bytes, uint64_t seed)
{
    const size_t chunk = (size_t)32 << 20;
    uint16_t *h = (uint16_t *)malloc(chunk);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i, off;
    if (!h) DIE("out of host memory");
    for (i = 0; i < chunk / 2; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        h[i] = fa_cpu_float_to_bf16((float)((double)(s >> 11) * (2.0 / 9007199254740992.0) - 1.0));
    }
    for (off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        CK_CUDA(cudaMemcpyAsync((char *)dst + off, h, n, cudaMemcpyHostToDevice, stream), "cache fill");
    }
    CK_CUDA(cudaStreamSynchronize(stream), "cache fill");
    free(h);
}

/* One rank's (or the single GPU's) decode step: device buffers, builders and metadata. */
typedef struct rank_job {
    int N, rank, device, hloc, cols;
    int64_t num_blocks;
    cudaStream_t stream;
    fa_backend *be;
    fa_comm *comm, noop;
    barrier *bar;
    void *cache, *q, *k, *v, *out;
    int64_t *slots;
    int32_t *bt;
    fa_builder *b, *b_noop;
    fa_metadata md, md_noop;
    fa_layer layer;
    fa_tensor tq, tk, tv, tout, tcache;
    /* collectives alone, same sizes as in the step */
    void *ag_q, *ag_lse, *rs_out;
    float *t_step, *t_noop, *t_coll;   /* [iters] */
    int finite;
} rank_job;

static void job_setup(rank_job *j)
{
    const int T = opt.reqs, N = j->N, I = N > 1 ? opt.interleave : 1;
    const int64_t seq = (int64_t)opt.ctx + 1;
    fa_config cfg;
    fa_layer_desc ld;
    fa_batch batch;
    int64_t shape[5], qs[3], ks[3];
    int32_t *bt, *req, *pos, *qsl, *seqs;
    int64_t *slots;
    size_t cache_bytes;
    int i, c;

    CK_CUDA(cudaSetDevice(j->device), "cudaSetDevice");
    j->hloc = HQ / N;
    j->cols = (int)((seq + (int64_t)BS * N - 1) / ((int64_t)BS * N));
    j->num_blocks = (int64_t)opt.reqs * j->cols;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = j->hloc;
    cfg.model.num_heads_kv = HKV;
    cfg.model.head_size = HEAD;
    cfg.model.dtype = FA_DTYPE_BF16;
    cfg.cache.block_size = BS;
    cfg.parallel.dcp_world_size = N;
    cfg.parallel.dcp_rank = j->rank;
    cfg.parallel.cp_kv_cache_interleave_size = I;
    cfg.scheduler.max_num_seqs = opt.reqs;
    cfg.scheduler.max_num_batched_tokens = opt.reqs;
    CK_FA(fa_builder_create(j->be, &cfg, N > 1 ? j->comm : NULL, &j->b), "fa_builder_create");
    if (N > 1) {
        memset(&j->noop, 0, sizeof j->noop);
        j->noop.api_version = FA_BACKEND_API_VERSION;
        j->noop.world_size = N;
        j->noop.rank = j->rank;
        j->noop.all_gather = noop_collective;
        j->noop.reduce_scatter = noop_collective;
        CK_FA(fa_builder_create(j->be, &cfg, &j->noop, &j->b_noop), "fa_builder_create (no-op comm)");
    }
    memset(&ld, 0, sizeof ld);
    ld.num_heads_q = j->hloc;
    ld.num_heads_kv = HKV;
    ld.head_size = HEAD;
    ld.dtype = FA_DTYPE_BF16;
    ld.dcp_world_size = N;
    CK_FA(fa_layer_init(&j->layer, &ld), "fa_layer_init");

    CK_FA(fa_kv_cache_shape(j->num_blocks, BS, HKV, HEAD, shape), "fa_kv_cache_shape");
    cache_bytes = (size_t)(2 * j->num_blocks * BS * HKV * HEAD) * 2;
    CK_CUDA(cudaMalloc(&j->cache, cache_bytes), "cudaMalloc (KV cache)");
    fill_random_bf16(j->stream, j->cache, cache_bytes, 11);   /* the same data on every rank */
    j->tcache = fa_tensor_make(j->cache, FA_DTYPE_BF16, 5, shape);

    qs[0] = T;
    qs[1] = j->hloc;
    qs[2] = HEAD;
    ks[0] = T;
    ks[1] = HKV;
    ks[2] = HEAD;
    CK_CUDA(cudaMalloc(&j->q, (size_t)T * j->hloc * HEAD * 2), "cudaMalloc");
    CK_CUDA(cudaMalloc(&j->out, (size_t)T * j->hloc * HEAD * 2), "cudaMalloc");
    CK_CUDA(cudaMalloc(&j->k, (size_t)T * HKV * HEAD * 2), "cudaMalloc");
    CK_CUDA(cudaMalloc(&j->v, (size_t)T * HKV * HEAD * 2), "cudaMalloc");
    fill_random_bf16(j->stream, j->q, (size_t)T * j->hloc * HEAD * 2, 100 + (uint64_t)j->rank);
    fill_random_bf16(j->stream, j->k, (size_t)T * HKV * HEAD * 2, 200);
    fill_random_bf16(j->stream, j->v, (size_t)T * HKV * HEAD * 2, 300);
    j->tq = fa_tensor_make(j->q, FA_DTYPE_BF16, 3, qs);
    j->tout = fa_tensor_make(j->out, FA_DTYPE_BF16, 3, qs);
    j->tk = fa_tensor_make(j->k, FA_DTYPE_BF16, 3, ks);
    j->tv = fa_tensor_make(j->v, FA_DTYPE_BF16, 3, ks);

    /* block table (contiguous ids per request), slot mapping of the new tokens */
    bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)j->num_blocks);
    req = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    qsl = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T + 1));
    seqs = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
    slots = (int64_t *)malloc(sizeof(int64_t) * (size_t)T);
    if (!bt || !req || !pos || !qsl || !seqs || !slots) DIE("out of host memory");
    for (i = 0; i < opt.reqs; ++i)
        for (c = 0; c < j->cols; ++c) bt[(int64_t)i * j->cols + c] = (int32_t)((int64_t)i * j->cols + c);
    qsl[0] = 0;
    for (i = 0; i < T; ++i) {
        req[i] = i;
        pos[i] = opt.ctx;
        qsl[i + 1] = i + 1;
        seqs[i] = (int32_t)seq;
    }
    CK_FA(fa_dcp_slot_mapping(bt, j->cols, j->cols, BS, req, pos, T, N, j->rank, I, slots),
          "fa_dcp_slot_mapping");
    CK_CUDA(cudaMalloc((void **)&j->bt, sizeof(int32_t) * (size_t)j->num_blocks), "cudaMalloc");
    CK_CUDA(cudaMalloc((void **)&j->slots, sizeof(int64_t) * (size_t)T), "cudaMalloc");
    CK_CUDA(cudaMemcpy(j->bt, bt, sizeof(int32_t) * (size_t)j->num_blocks, cudaMemcpyHostToDevice), "upload");
    CK_CUDA(cudaMemcpy(j->slots, slots, sizeof(int64_t) * (size_t)T, cudaMemcpyHostToDevice), "upload");

    memset(&batch, 0, sizeof batch);
    batch.num_reqs = T;
    batch.query_start_loc = qsl;
    batch.seq_lens = seqs;
    batch.block_table = j->bt;
    batch.block_table_stride = j->cols;
    batch.max_blocks = j->cols;
    batch.slot_mapping = j->slots;
    batch.causal = 1;
    /* the metadata stays valid: each builder builds once, forwards replay the same step */
    CK_FA(fa_builder_build(j->b, &batch, 0, &j->md), "fa_builder_build");
    if (j->b_noop)
        CK_FA(fa_builder_build(j->b_noop, &batch, 0, &j->md_noop), "fa_builder_build (no-op comm)");

    if (N > 1) {   /* the step's exchanges: q [T,H,D] bf16, LSE [N*H,T] f32, out N x [H,T,D] bf16 */
        CK_CUDA(cudaMalloc(&j->ag_q, (size_t)N * T * j->hloc * HEAD * 2), "cudaMalloc");
        CK_CUDA(cudaMalloc(&j->ag_lse, (size_t)N * N * j->hloc * T * 4), "cudaMalloc");
        CK_CUDA(cudaMalloc(&j->rs_out, (size_t)N * j->hloc * T * HEAD * 2), "cudaMalloc");
        CK_CUDA(cudaMemsetAsync(j->ag_q, 0, (size_t)N * T * j->hloc * HEAD * 2, j->stream), "memset");
        CK_CUDA(cudaMemsetAsync(j->ag_lse, 0, (size_t)N * N * j->hloc * T * 4, j->stream), "memset");
        CK_CUDA(cudaMemsetAsync(j->rs_out, 0, (size_t)N * j->hloc * T * HEAD * 2, j->stream), "memset");
    }
    CK_CUDA(cudaStreamSynchronize(j->stream), "setup");
    free(bt);
    free(req);
    free(pos);
    free(qsl);
    free(seqs);
    free(slots);
}

static void job_free(rank_job *j)
{
    cudaSetDevice(j->device);
    cudaStreamSynchronize(j->stream);
    fa_builder_destroy(j->b);
    fa_builder_destroy(j->b_noop);
    cudaFree(j->cache);
    cudaFree(j->q);
    cudaFree(j->k);
    cudaFree(j->v);
    cudaFree(j->out);
    cudaFree(j->bt);
    cudaFree(j->slots);
    cudaFree(j->ag_q);
    cudaFree(j->ag_lse);
    cudaFree(j->rs_out);
}

enum { WHAT_STEP = 0, WHAT_NOOP = 1, WHAT_COLL = 2 };

static void job_once(rank_job *j, int what)
{
    if (what == WHAT_STEP) {
        CK_FA(fa_forward(&j->layer, j->be, &j->tq, &j->tk, &j->tv, &j->tcache, &j->md, &j->tout),
              "fa_forward");
    } else if (what == WHAT_NOOP) {
        CK_FA(fa_forward(&j->layer, j->be, &j->tq, &j->tk, &j->tv, &j->tcache, &j->md_noop, &j->tout),
              "fa_forward (no-op comm)");
    } else {
        const size_t T = (size_t)opt.reqs, H = (size_t)j->hloc, N = (size_t)j->N;
        fa_status s = j->comm->all_gather(j->comm->ctx, j->q, j->ag_q, T * H * HEAD, FA_DTYPE_BF16);
        if (s == FA_OK)   /* in place, as in the step: send is this rank's slot of recv */
            s = j->comm->all_gather(j->comm->ctx, (float *)j->ag_lse + (size_t)j->rank * N * H * T, j->ag_lse,
                                    N * H * T, FA_DTYPE_F32);
        if (s == FA_OK)
            s = j->comm->reduce_scatter(j->comm->ctx, j->rs_out, j->ag_q, H * T * HEAD, FA_DTYPE_BF16);
        if (s != FA_OK) DIE("collective failed: %s", j->comm->last_error(j->comm->ctx));
    }
}

/* Runs warm-up then timed repetitions of one kind of step; times[it] in ms. */
static void job_time(rank_job *j, int what, float *times)
{
    cudaEvent_t a, b;
    int it;
    CK_CUDA(cudaSetDevice(j->device), "cudaSetDevice");
    CK_CUDA(cudaEventCreate(&a), "cudaEventCreate");
    CK_CUDA(cudaEventCreate(&b), "cudaEventCreate");
    for (it = 0; it < opt.warmup; ++it) {
        if (j->bar) barrier_wait(j->bar);
        job_once(j, what);
        CK_CUDA(cudaStreamSynchronize(j->stream), "warm-up");
    }
    for (it = 0; it < opt.iters; ++it) {
        if (j->bar) barrier_wait(j->bar);
        CK_CUDA(cudaEventRecord(a, j->stream), "cudaEventRecord");
        job_once(j, what);
        CK_CUDA(cudaEventRecord(b, j->stream), "cudaEventRecord");
        CK_CUDA(cudaEventSynchronize(b), "cudaEventSynchronize");
        CK_CUDA(cudaEventElapsedTime(&times[it], a, b), "cudaEventElapsedTime");
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
}

static int outputs_finite(rank_job *j)
{
    size_t n = (size_t)opt.reqs * j->hloc * HEAD, i;
    uint16_t *h = (uint16_t *)malloc(n * 2);
    int ok = 1;
    if (!h) DIE("out of host memory");
    CK_CUDA(cudaMemcpy(h, j->out, n * 2, cudaMemcpyDeviceToHost), "download");
    for (i = 0; i < n && ok; ++i) ok = isfinite(fa_cpu_bf16_to_float(h[i])) != 0;
    free(h);
    return ok;
}

static void *rank_main(void *p)
{
    rank_job *j = (rank_job *)p;
    job_setup(j);
    barrier_wait(j->bar);
    job_time(j, WHAT_STEP, j->t_step);
    j->finite = outputs_finite(j);
    job_time(j, WHAT_NOOP, j->t_noop);
    job_time(j, WHAT_COLL, j->t_coll);
    barrier_wait(j->bar);
    job_free(j);
    return NULL;
}

/* per-step time = the slowest rank's; median over the steps */
static float median_of_max(rank_job *jobs, int N, int what)
{
    float *m = (float *)calloc((size_t)opt.iters, sizeof(float)), r;
    int it, q;
    if (!m) DIE("out of host memory");
    for (it = 0; it < opt.iters; ++it)
        for (q = 0; q < N; ++q) {
            const float *t = what == WHAT_STEP   ? jobs[q].t_step
                             : what == WHAT_NOOP ? jobs[q].t_noop
                                                 : jobs[q].t_coll;
            if (t[it] > m[it]) m[it] = t[it];
        }
    r = median(m, opt.iters);
    free(m);
    return r;
}

int main(int argc, char **argv)
{
    rank_job single, jobs[MAX_WORLD];
    fa_comm *comms = NULL;
    cudaStream_t streams[MAX_WORLD];
    int devs[MAX_WORLD], count = 0, i, N;
    pthread_t th[MAX_WORLD];
    barrier bar;
    float t1, tN, tnoop, tcoll;
    double kv_gb;

    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* no NVLink multicast, whatever the environment said */
    opt.reqs = 8;
    opt.ctx = 131072;
    opt.world = 2;
    opt.interleave = 1;
    opt.iters = 50;
    opt.warmup = 10;
    for (i = 1; i < argc; ++i) {
        int *dst = NULL;
        if (!strcmp(argv[i], "--reqs"))
            dst = &opt.reqs;
        else if (!strcmp(argv[i], "--ctx"))
            dst = &opt.ctx;
        else if (!strcmp(argv[i], "--world"))
            dst = &opt.world;
        else if (!strcmp(argv[i], "--interleave"))
            dst = &opt.interleave;
        else if (!strcmp(argv[i], "--iters"))
            dst = &opt.iters;
        else if (!strcmp(argv[i], "--warmup"))
            dst = &opt.warmup;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr,
                    "usage: %s [--reqs 8] [--ctx 131072] [--world 2] [--interleave 1] [--iters 50] "
                    "[--warmup 10]\n",
                    argv[0]);
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    if (opt.reqs < 1 || opt.ctx < 1 || opt.world < 2 || opt.world > MAX_WORLD || HQ % opt.world != 0 ||
        opt.iters < 20 || opt.warmup < 1 || opt.interleave < 1 || BS % opt.interleave != 0) {
        fprintf(stderr,
                "bench_dcp: need reqs, ctx >= 1, world in [2, %d] dividing %d, iters >= 20, warmup >= 1, "
                "interleave dividing %d\n",
                MAX_WORLD, HQ, BS);
        return 2;
    }
    N = opt.world;
    CK_CUDA(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    kv_gb = 2.0 * opt.reqs * ((double)opt.ctx + 1) * HKV * HEAD * 2 / 1e9;
    printf(
        "bench_dcp: decode, %d requests x %d context, Hq %d / Hkv %d, head %d, bf16, block %d (KV %.2f GB); "
        "DCP %d: %d query heads and 1/%d of the KV per GPU, interleave %d; NCCL %d; median of %d after %d "
        "warm-up\n",
        opt.reqs, opt.ctx, HQ, HKV, HEAD, BS, kv_gb, N, HQ / N, N, opt.interleave, fa_nccl_version(),
        opt.iters, opt.warmup);

    /* 1 GPU: the whole model */
    memset(&single, 0, sizeof single);
    single.N = 1;
    single.device = 0;
    single.t_step = (float *)calloc((size_t)opt.iters, sizeof(float));
    CK_CUDA(cudaSetDevice(0), "cudaSetDevice");
    CK_CUDA(cudaStreamCreateWithFlags(&single.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (fa_cuda_backend_create(0, single.stream, &single.be) != FA_OK)
        DIE("fa_cuda_backend_create(0): %s", fa_cuda_create_error());
    job_setup(&single);
    job_time(&single, WHAT_STEP, single.t_step);
    single.finite = outputs_finite(&single);
    t1 = median(single.t_step, opt.iters);
    job_free(&single);
    fa_cuda_backend_destroy(single.be);
    cudaStreamDestroy(single.stream);
    printf("1 GPU : step %.3f ms%s\n", t1, single.finite ? "" : "  (WARNING: non-finite outputs)");
    if (count < N) {
        printf("%d GPUs: skipped, %d device(s) visible\n", N, count);
        return 0;
    }

    /* N GPUs: one thread per rank */
    memset(jobs, 0, sizeof jobs);
    memset(&bar, 0, sizeof bar);
    pthread_mutex_init(&bar.mu, NULL);
    pthread_cond_init(&bar.cv, NULL);
    bar.n = N;
    for (i = 0; i < N; ++i) {
        devs[i] = i;
        CK_CUDA(cudaSetDevice(i), "cudaSetDevice");
        CK_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), "cudaStreamCreate");
    }
    if (fa_nccl_comms_create_local(N, devs, (void *const *)streams, &comms) != FA_OK)
        DIE("fa_nccl_comms_create_local: %s", fa_nccl_last_error());
    for (i = 0; i < N; ++i) {
        rank_job *j = &jobs[i];
        j->N = N;
        j->rank = i;
        j->device = i;
        j->stream = streams[i];
        j->comm = &comms[i];
        j->bar = &bar;
        j->t_step = (float *)calloc((size_t)opt.iters, sizeof(float));
        j->t_noop = (float *)calloc((size_t)opt.iters, sizeof(float));
        j->t_coll = (float *)calloc((size_t)opt.iters, sizeof(float));
        if (!j->t_step || !j->t_noop || !j->t_coll) DIE("out of host memory");
        if (fa_cuda_backend_create(i, streams[i], &j->be) != FA_OK)
            DIE("fa_cuda_backend_create(%d): %s", i, fa_cuda_create_error());
    }
    for (i = 0; i < N; ++i)
        if (pthread_create(&th[i], NULL, rank_main, &jobs[i]) != 0) DIE("pthread_create failed");
    for (i = 0; i < N; ++i) pthread_join(th[i], NULL);
    tN = median_of_max(jobs, N, WHAT_STEP);
    tnoop = median_of_max(jobs, N, WHAT_NOOP);
    tcoll = median_of_max(jobs, N, WHAT_COLL);
    {
        const double T = opt.reqs, H = (double)HQ / N;
        const double q_b = T * H * HEAD * 2, lse_b = N * H * T * 4, rs_b = N * H * T * HEAD * 2;
        int finite = 1;
        for (i = 0; i < N; ++i) finite = finite && jobs[i].finite;
        printf("%d GPUs: step %.3f ms%s\n", N, tN, finite ? "" : "  (WARNING: non-finite outputs)");
        printf("speedup: %.2fx (%d GPUs vs 1)\n", t1 / tN, N);
        printf(
            "exchanged per step and rank: all_gather q %.1f KB, all_gather LSE %.1f KB, reduce_scatter out "
            "%.1f KB (sent)\n",
            q_b / 1024, lse_b / 1024, rs_b / 1024);
        printf(
            "comm: collectives alone %.3f ms = %.1f%% of the %d-GPU step; step with a no-op comm %.3f ms -> "
            "comm share %.1f%%\n",
            tcoll, 100.0 * tcoll / tN, N, tnoop, 100.0 * (1.0 - tnoop / tN));
    }
    if (fa_nccl_comm_destroy(comms) != FA_OK) fprintf(stderr, "bench_dcp: %s\n", fa_nccl_last_error());
    for (i = 0; i < N; ++i) {
        fa_cuda_backend_destroy(jobs[i].be);
        cudaStreamDestroy(streams[i]);
        free(jobs[i].t_step);
        free(jobs[i].t_noop);
        free(jobs[i].t_coll);
    }
    free(single.t_step);
    return 0;
}
