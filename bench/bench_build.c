/* bench_build.c - host cost of fa_builder_build() for 256 requests.

   Times build() (planning + the one metadata upload, on the CPU backend whose copy is a
   memcpy) for batches of 256 requests: all decodes, decodes + chunked prefills, cascade, and
   chunked local attention. Prints the median and p90 over 2000 runs, in microseconds.
   Usage: bench_build [iterations] */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fa_cpu.h"

#define NREQ 256
#define MAX_BLOCKS 1024

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(fa_status s, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", what, fa_status_string(s), fa_last_error());
    exit(1);
}

static void bench(const char *name, fa_builder *b, const fa_batch *batch, int32_t prefix, int iters)
{
    double *t = (double *)malloc(sizeof(double) * (size_t)iters);
    fa_metadata md;
    int i;
    fa_status s;
    for (i = 0; i < 50; ++i)
        if ((s = fa_builder_build(b, batch, prefix, &md)) != FA_OK) die(s, name);
    for (i = 0; i < iters; ++i) {
        double t0 = now_ns();
        fa_builder_build(b, batch, prefix, &md);
        t[i] = now_ns() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    printf("%-44s median %7.2f us   p90 %7.2f us   (splits %d, cascade %d, local %d)\n", name,
           t[iters / 2] / 1e3, t[iters * 9 / 10] / 1e3, md.num_splits, md.use_cascade, md.has_local);
    free(t);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    fa_backend *cpu;
    fa_builder *b, *bl;
    fa_config cfg;
    static int32_t bt[NREQ * MAX_BLOCKS];
    int32_t qsl[NREQ + 1], seq[NREQ];
    int64_t *slots;
    fa_batch batch;
    int i;
    fa_status s;
    if (iters < 10) iters = 10;
    if ((s = fa_cpu_backend_create(&cpu)) != FA_OK) die(s, "cpu backend");
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = 32;
    cfg.model.num_heads_kv = 8;
    cfg.model.head_size = 128;
    cfg.scheduler.max_num_seqs = NREQ;
    cfg.scheduler.max_num_batched_tokens = 8192;
    if ((s = fa_builder_create(cpu, &cfg, NULL, &b)) != FA_OK) die(s, "builder");
    cfg.scheduler.attention_chunk_size = 8192;
    if ((s = fa_builder_create(cpu, &cfg, NULL, &bl)) != FA_OK) die(s, "local builder");
    for (i = 0; i < NREQ * MAX_BLOCKS; ++i) bt[i] = i % 100000;
    slots = (int64_t *)calloc(8192, sizeof(int64_t));
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = NREQ;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.block_table = bt;
    batch.block_table_stride = MAX_BLOCKS;
    batch.block_table_host = bt;
    batch.slot_mapping = slots;
    batch.causal = 1;

    printf("fa_builder_build(), %d requests, Hq/Hkv 32/8, head 128, block 16, %d runs each\n", NREQ, iters);
    for (i = 0; i <= NREQ; ++i) qsl[i] = i;
    for (i = 0; i < NREQ; ++i) seq[i] = 1000 + 59 * i;
    bench("256 decodes, context 1k-16k", b, &batch, 0, iters);
    bench("256 decodes, cascade over 512 shared tokens", b, &batch, 512, iters);
    bench("256 decodes, chunked local attention 8k", bl, &batch, 0, iters);
    qsl[0] = 0;
    for (i = 0; i < NREQ; ++i) qsl[i + 1] = qsl[i] + (i % 16 == 0 ? 400 : 1);
    for (i = 0; i < NREQ; ++i) seq[i] = 2000 + 37 * i;
    bench("240 decodes + 16 chunked prefills of 400", b, &batch, 0, iters);
    for (i = 0; i <= 4; ++i) qsl[i] = i;
    batch.num_reqs = 4;
    bench("4 decodes, long context (split-KV planned)", b, &batch, 0, iters);
    fa_builder_destroy(b);
    fa_builder_destroy(bl);
    fa_cpu_backend_destroy(cpu);
    free(slots);
    return 0;
}
