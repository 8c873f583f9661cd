/* bench_ops.c - the memory-bound ops of the CUDA backend (reshape_and_cache bf16 and fp8,
   merge_states, dcp_correct) at 16k tokens, as a fraction of a device-to-device copy measured
   the same way in the same run. Prints `# perf` lines, then the harness's `N passed, M failed`
   (a case fails only when an op or a CUDA call fails). Uses the GPU test harness
   (tests/gpu/gpu_test_util.h: --seed etc.). */
#include "gpu_test_util.h"

#include <cuda_runtime_api.h>

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    gt_fail("%s: %s", what, cudaGetErrorString(e));
    return 0;
}

/* timings (informational: printed as `# perf` lines, never a failure by themselves). PERF.md:
   each op captured 20 times in a CUDA graph over 3 rotating buffer sets (each larger than the
   L2), median of 11 graph launches, bytes = every input read once + every output written once,
   reported as a fraction of a device-to-device copy measured the same way in the same run. */

enum { PERF_SETS = 3, PERF_CALLS = 20, PERF_REPS = 11 };

typedef struct perf_op {
    const char *name;
    fa_backend *be;
    int kind;                         /* 0 cache write, 1 merge, 2 dcp, 3 copy */
    fa_cache_write_args ca[PERF_SETS];
    fa_merge_args ma[PERF_SETS];
    fa_dcp_correct_args da[PERF_SETS];
    void *dst[PERF_SETS], *src[PERF_SETS];
    size_t copy_bytes;
} perf_op;

static int perf_call(perf_op *op, int i)
{
    fa_backend *be = op->be;
    switch (op->kind) {
    case 0: return gt_check(be->ops.reshape_and_cache(be->ctx, &op->ca[i]), be, "reshape_and_cache");
    case 1: return gt_check(be->ops.merge_states(be->ctx, &op->ma[i]), be, "merge_states");
    case 2: return gt_check(be->ops.dcp_correct(be->ctx, &op->da[i]), be, "dcp_correct");
    default:
        return gt_check(be->ops.copy(be->ctx, op->dst[i], op->src[i], op->copy_bytes,
                                     FA_COPY_DEVICE_TO_DEVICE),
                        be, "copy");
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median time of one call in microseconds, or -1 on failure. */
static double perf_time(cudaStream_t stream, perf_op *op)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[PERF_REPS];
    double us = -1.0;
    int i, ok = 1;
    if (!cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture"))
        return -1.0;
    for (i = 0; i < PERF_CALLS && ok; ++i) ok = perf_call(op, i % PERF_SETS);
    if (!cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture") || !ok) goto done;
    if (!cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate") ||
        !cuda_ok(cudaEventCreate(&e0), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&e1), "cudaEventCreate"))
        goto done;
    for (i = 0; i < 2; ++i)   /* warm-up */
        if (!cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch")) goto done;
    for (i = 0; i < PERF_REPS; ++i) {
        if (!cuda_ok(cudaEventRecord(e0, stream), "cudaEventRecord") ||
            !cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch") ||
            !cuda_ok(cudaEventRecord(e1, stream), "cudaEventRecord") ||
            !cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize") ||
            !cuda_ok(cudaEventElapsedTime(&ms[i], e0, e1), "cudaEventElapsedTime"))
            goto done;
    }
    qsort(ms, PERF_REPS, sizeof ms[0], cmp_float);
    us = 1e3 * (double)ms[PERF_REPS / 2] / PERF_CALLS;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return us;
}

static void test_perf(void)
{
    enum { T = 16384, HKV = 8, HQ = 32, D = 128, BS = 16, W = 2 };
    cudaStream_t stream = NULL;
    fa_backend *be = NULL, *saved = gt()->gpu;
    void *bufs[64];
    int nbufs = 0, i, k;
    perf_op *op = NULL;
    double copy_us, copy_tbs;
    const size_t kv_bytes = (size_t)T * HKV * D * 2, q_bytes = (size_t)T * HQ * D * 2;
    const size_t copy_bytes = (size_t)256 << 20;
    int64_t *perm = NULL;
    void *rnd = NULL;

    if (!gt_case("perf: cache write, merge, dcp_correct at %d tokens vs a device copy", T)) return;
    if (gt_heavy()) {
        gt_case_end();
        return;
    }
    op = (perf_op *)calloc(1, sizeof *op);
    perm = (int64_t *)gt_xmalloc(sizeof(int64_t) * T);
    rnd = gt_xmalloc(q_bytes);
    if (!op || !cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !gt_check(fa_cuda_backend_create(0, (void *)stream, &be), NULL, fa_cuda_create_error()))
        goto done;
    gt()->gpu = be;
#define PERF_ALLOC(var, bytes, host) \
    do { \
        var = (host) ? gt_dup((host), (bytes)) : gt_dmalloc(bytes); \
        if (!(var)) goto done; \
        bufs[nbufs++] = (var); \
    } while (0)
    gt_fill_uniform(rnd, (int64_t)T * HQ * D, FA_DTYPE_BF16, -1.0f, 1.0f);
    for (i = 0; i < T; ++i) perm[i] = i;
    for (i = T - 1; i > 0; --i) {   /* every slot of the cache written once, in random order */
        int64_t j = gt_randint(i + 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }

    /* the copy ceiling */
    op->be = be;
    op->kind = 3;
    op->copy_bytes = copy_bytes;
    for (k = 0; k < PERF_SETS; ++k) {
        PERF_ALLOC(op->src[k], copy_bytes, NULL);
        PERF_ALLOC(op->dst[k], copy_bytes, NULL);
    }
    copy_us = perf_time(stream, op);
    if (copy_us <= 0) goto done;
    copy_tbs = 2.0 * (double)copy_bytes / (copy_us * 1e-6) / 1e12;
    printf("# perf copy D2D %zu MB: %.1f us, %.2f TB/s (read + write)\n", copy_bytes >> 20, copy_us,
           copy_tbs);
    for (k = 0; k < nbufs; ++k) gt_dfree(bufs[k]);
    nbufs = 0;

    /* reshape_and_cache, bf16 -> auto and bf16 -> e4m3, NHD */
    for (i = 0; i < 2; ++i) {
        fa_dtype cd = i == 0 ? FA_DTYPE_BF16 : FA_DTYPE_FP8_E4M3;
        size_t cache_bytes = kv_bytes / (i == 0 ? 1 : 2);
        double us, bytes = 2.0 * (double)kv_bytes + 2.0 * (double)cache_bytes + 8.0 * T;
        void *dslots;
        memset(op, 0, sizeof *op);
        op->be = be;
        op->kind = 0;
        PERF_ALLOC(dslots, sizeof(int64_t) * T, perm);
        for (k = 0; k < PERF_SETS; ++k) {
            fa_cache_write_args *a = &op->ca[k];
            void *kk, *vv, *kc, *vc;
            PERF_ALLOC(kk, kv_bytes, rnd);
            PERF_ALLOC(vv, kv_bytes, rnd);
            PERF_ALLOC(kc, cache_bytes, NULL);
            PERF_ALLOC(vc, cache_bytes, NULL);
            a->key = kk;
            a->value = vv;
            a->key_token_stride = a->value_token_stride = HKV * D;
            a->kv_dtype = FA_DTYPE_BF16;
            a->key_cache = kc;
            a->value_cache = vc;
            a->cache_block_stride = BS * HKV * D;
            a->cache_row_stride = HKV * D;
            a->cache_head_stride = D;
            a->cache_dtype = cd;
            a->slot_mapping = (const int64_t *)dslots;
            a->num_tokens = T;
            a->num_heads_kv = HKV;
            a->head_size = D;
            a->block_size = BS;
            a->num_blocks = (T + BS - 1) / BS;
            a->k_scale = 0.05f;
            a->v_scale = 0.05f;
        }
        us = perf_time(stream, op);
        if (us <= 0) goto done;
        printf("# perf reshape_and_cache bf16->%s T=%d Hkv=%d D=%d NHD: %.1f us, %.2f TB/s = %.2f of copy\n",
               i == 0 ? "auto" : "e4m3", T, HKV, D, us, bytes / (us * 1e-6) / 1e12,
               bytes / (us * 1e-6) / 1e12 / copy_tbs);
        for (k = 0; k < nbufs; ++k) gt_dfree(bufs[k]);
        nbufs = 0;
    }

    /* merge_states bf16, with out_lse */
    {
        double us, bytes = 3.0 * (double)q_bytes + 3.0 * 4.0 * T * HQ;
        memset(op, 0, sizeof *op);
        op->be = be;
        op->kind = 1;
        for (k = 0; k < PERF_SETS; ++k) {
            fa_merge_args *a = &op->ma[k];
            void *o, *p, *sx, *pl, *sl, *ol;
            PERF_ALLOC(o, q_bytes, NULL);
            PERF_ALLOC(p, q_bytes, rnd);
            PERF_ALLOC(sx, q_bytes, rnd);
            PERF_ALLOC(pl, sizeof(float) * T * HQ, NULL);
            PERF_ALLOC(sl, sizeof(float) * T * HQ, NULL);
            PERF_ALLOC(ol, sizeof(float) * T * HQ, NULL);
            /* LSEs: any finite bits will do for timing; bf16 pairs read as f32 are finite */
            if (!gt_check(be->ops.copy(be->ctx, pl, rnd, sizeof(float) * T * HQ, FA_COPY_HOST_TO_DEVICE), be,
                          "copy") ||
                !gt_check(be->ops.copy(be->ctx, sl, rnd, sizeof(float) * T * HQ, FA_COPY_HOST_TO_DEVICE), be,
                          "copy"))
                goto done;
            a->out = o;
            a->out_token_stride = HQ * D;
            a->out_head_stride = D;
            a->out_lse = (float *)ol;
            a->out_lse_head_stride = T;
            a->prefix_out = p;
            a->prefix_token_stride = HQ * D;
            a->prefix_head_stride = D;
            a->prefix_lse = (const float *)pl;
            a->prefix_lse_head_stride = T;
            a->suffix_out = sx;
            a->suffix_token_stride = HQ * D;
            a->suffix_head_stride = D;
            a->suffix_lse = (const float *)sl;
            a->suffix_lse_head_stride = T;
            a->dtype = FA_DTYPE_BF16;
            a->num_tokens = T;
            a->num_heads = HQ;
            a->head_size = D;
        }
        gt_sync();
        us = perf_time(stream, op);
        if (us <= 0) goto done;
        printf("# perf merge_states bf16 T=%d H=%d D=%d +lse: %.1f us, %.2f TB/s = %.2f of copy\n", T, HQ, D,
               us, bytes / (us * 1e-6) / 1e12, bytes / (us * 1e-6) / 1e12 / copy_tbs);
        for (k = 0; k < nbufs; ++k) gt_dfree(bufs[k]);
        nbufs = 0;
    }

    /* dcp_correct bf16, W = 2, with lse_out */
    {
        double us, bytes = 2.0 * (double)q_bytes + (W + 1) * 4.0 * T * HQ;
        memset(op, 0, sizeof *op);
        op->be = be;
        op->kind = 2;
        for (k = 0; k < PERF_SETS; ++k) {
            fa_dcp_correct_args *a = &op->da[k];
            void *o, *la, *lo;
            PERF_ALLOC(o, q_bytes, rnd);
            PERF_ALLOC(la, sizeof(float) * W * T * HQ, NULL);
            PERF_ALLOC(lo, sizeof(float) * T * HQ, NULL);
            if (!gt_check(be->ops.copy(be->ctx, la, rnd, sizeof(float) * T * HQ, FA_COPY_HOST_TO_DEVICE), be,
                          "copy") ||
                !gt_check(be->ops.copy(be->ctx, (float *)la + T * HQ, rnd, sizeof(float) * T * HQ,
                                       FA_COPY_HOST_TO_DEVICE),
                          be, "copy"))
                goto done;
            a->out = o;
            a->out_token_stride = HQ * D;
            a->out_head_stride = D;
            a->dtype = FA_DTYPE_BF16;
            a->lse_all = (const float *)la;
            a->lse_out = (float *)lo;
            a->world_size = W;
            a->rank = 1;
            a->num_tokens = T;
            a->num_heads = HQ;
            a->head_size = D;
        }
        gt_sync();
        us = perf_time(stream, op);
        if (us <= 0) goto done;
        printf("# perf dcp_correct bf16 W=%d T=%d H=%d D=%d +lse: %.1f us, %.2f TB/s = %.2f of copy\n", W, T,
               HQ, D, us, bytes / (us * 1e-6) / 1e12, bytes / (us * 1e-6) / 1e12 / copy_tbs);
    }
#undef PERF_ALLOC
done:
    for (k = 0; k < nbufs; ++k) gt_dfree(bufs[k]);
    gt()->gpu = saved;
    if (be) fa_cuda_backend_destroy(be);
    if (stream) cudaStreamDestroy(stream);
    free(op);
    free(perm);
    free(rnd);
    gt_case_end();
}

int main(int argc, char **argv)
{
    if (gt_init(argc, argv) != 0) return gt_finish();
    test_perf();
    return gt_finish();
}
