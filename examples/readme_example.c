/* examples/readme_example.c - the README's usage example, compiled and run by the test suite
   on the CPU backend (the README's block is the part between the markers, checked verbatim by
   tests/check_readme.py). Two layers like a Gemma-style model (one full, one sliding window)
   share one builder; steps over 10 requests that share a 512-token prompt (nine decodes and a
   16-token chunk of a prefill), so cascade
   pays for the full layer while the windowed layer runs plain from the same metadata. The
   outputs are then compared with a step built without cascade. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include "fa_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                             \
    do {                                                                                        \
        if ((call) != FA_OK) {                                                                  \
            fprintf(stderr, "readme_example: %s failed: %s\n", #call, fa_last_error());        \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

/* the README creates the CUDA backend; here it is the CPU one */
#define fa_cuda_backend_create(device, stream, out) ((void)(device), (void)(stream), fa_cpu_backend_create(out))

enum { T = 25, NREQ = 10, BS = 16, SHARED = 32, OWN = 10, BLOCKS = SHARED + NREQ * OWN, HQ = 32, HKV = 8, D = 128, NL = 2 };

static uint16_t bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static uint64_t rng = 12345;
static float unif(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
}
static void fill_random(uint16_t *x, size_t n)
{
    for (size_t i = 0; i < n; ++i) x[i] = bf16(unif());
}

int main(void)
{
    const int num_steps = 2, num_layers = NL;
    const void *stream = NULL;
    int32_t qsl[NREQ + 1], seq_lens[NREQ], bt_host[NREQ * (SHARED + OWN)];
    int64_t slots_host[T];
    const int32_t max_blocks = SHARED + OWN, num_shared_blocks = SHARED;
    const int n = NREQ;
    int64_t qs[3] = {T, HQ, D}, ks[3] = {T, HKV, D}, cs[5] = {2, BLOCKS, BS, HKV, D};
    fa_tensor q[NL], k[NL], v[NL], kv_cache[NL], out[NL];
    uint16_t *plain_out[NL];
    const int32_t *bt_dev = bt_host;     /* the CPU backend's "device" memory is host memory */
    const int64_t *slots_dev = slots_host;
    qsl[0] = 0;
    for (int r = 0; r < NREQ; ++r) {
        qsl[r + 1] = qsl[r] + (r == 0 ? 16 : 1); /* a 16-token chunk, then nine decodes */
        seq_lens[r] = SHARED * BS + 37 + 11 * r; /* the shared prompt, then its own tokens */
        for (int c = 0; c < SHARED + OWN; ++c) bt_host[r * (SHARED + OWN) + c] = c < SHARED ? c : SHARED + r * OWN + (c - SHARED);
        for (int t = qsl[r]; t < qsl[r + 1]; ++t) {
            const int pos = seq_lens[r] - (qsl[r + 1] - t);
            slots_host[t] = (int64_t)bt_host[r * (SHARED + OWN) + pos / BS] * BS + pos % BS;
        }
    }
    for (int l = 0; l < NL; ++l) {
        q[l] = fa_tensor_make(malloc(sizeof(uint16_t) * T * HQ * D), FA_DTYPE_BF16, 3, qs);
        k[l] = fa_tensor_make(malloc(sizeof(uint16_t) * T * HKV * D), FA_DTYPE_BF16, 3, ks);
        v[l] = fa_tensor_make(malloc(sizeof(uint16_t) * T * HKV * D), FA_DTYPE_BF16, 3, ks);
        out[l] = fa_tensor_make(malloc(sizeof(uint16_t) * T * HQ * D), FA_DTYPE_BF16, 3, qs);
        kv_cache[l] = fa_tensor_make(malloc(sizeof(uint16_t) * 2 * BLOCKS * BS * HKV * D), FA_DTYPE_BF16, 5, cs);
        plain_out[l] = (uint16_t *)malloc(sizeof(uint16_t) * T * HQ * D);
        if (!q[l].data || !k[l].data || !v[l].data || !out[l].data || !kv_cache[l].data || !plain_out[l]) return 1;
        fill_random((uint16_t *)q[l].data, (size_t)T * HQ * D);
        fill_random((uint16_t *)k[l].data, (size_t)T * HKV * D);
        fill_random((uint16_t *)v[l].data, (size_t)T * HKV * D);
        fill_random((uint16_t *)kv_cache[l].data, (size_t)2 * BLOCKS * BS * HKV * D);
    }

    /* ---- README begin ---- */
    fa_backend *be;  fa_builder *b;  fa_layer layers[2];  fa_metadata md;
    CHECK(fa_cuda_backend_create(0, stream, &be));
    fa_config cfg = {0};                            /* zero = default everywhere */
    cfg.model.num_heads_q = 32; cfg.model.num_heads_kv = 8; cfg.model.head_size = 128;
    cfg.scheduler.max_num_seqs = 256; cfg.scheduler.max_num_batched_tokens = 8192;
    CHECK(fa_builder_create(be, &cfg, NULL, &b));   /* allocates its workspace once */
    CHECK(fa_layer_init_from_config(&layers[0], &cfg, NULL));             /* full: the model's shape */
    CHECK(fa_layer_init_from_config(&layers[1], &cfg,
                                    &(fa_layer_desc){ .sliding_window = 4096 }));   /* windowed */
    CHECK(fa_builder_set_layers(b, layers, 2));     /* what the planner may assume */
    int32_t prefix = 0;                             /* 0 unless cascade pays for some layer */
    for (int step = 0; step < num_steps; ++step) {  /* one scheduler step */
        fa_batch batch = { .num_reqs = n, .query_start_loc = qsl, .seq_lens = seq_lens, /* host */
                           .block_table = bt_dev, .block_table_stride = max_blocks,
                           .slot_mapping = slots_dev };             /* causal: from each layer */
        CHECK(fa_builder_cascade_prefix_len(b, &batch, num_shared_blocks, &prefix));
        CHECK(fa_builder_build(b, &batch, prefix, &md));
        for (int l = 0; l < num_layers; ++l)        /* no allocation, no sync: graph-capturable */
            CHECK(fa_forward(&layers[l % 2], be, &q[l], &k[l], &v[l], &kv_cache[l], &md, &out[l]));
    }
    /* ---- README end ---- */

    if (prefix == 0) {
        fprintf(stderr, "readme_example: cascade was not chosen for a 512-token shared prompt\n");
        return 1;
    }
    {   /* the same step without cascade: every layer's output must match */
        fa_batch batch = { .num_reqs = n, .query_start_loc = qsl, .seq_lens = seq_lens,
                           .block_table = bt_dev, .block_table_stride = max_blocks, .slot_mapping = slots_dev };
        double worst = 0;
        for (int l = 0; l < num_layers; ++l) memcpy(plain_out[l], out[l].data, sizeof(uint16_t) * T * HQ * D);
        CHECK(fa_builder_build(b, &batch, 0, &md));
        for (int l = 0; l < num_layers; ++l) {
            const uint16_t *o = (const uint16_t *)out[l].data;
            CHECK(fa_forward(&layers[l % 2], be, &q[l], &k[l], &v[l], &kv_cache[l], &md, &out[l]));
            for (int i = 0; i < T * HQ * D; ++i) {
                const double a = from_bf16(o[i]), c = from_bf16(plain_out[l][i]);
                if (!isfinite(a) || fabs(a - c) > worst) worst = isfinite(a) ? fabs(a - c) : INFINITY;
            }
        }
        printf("readme_example: cascade prefix %d tokens; %d layers (full + window 4096); cascade vs plain: max |diff| %.3g\n",
               prefix, num_layers, worst);
        if (!(worst <= 1.6e-2)) return 1;
    }
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
    for (int l = 0; l < NL; ++l) {
        free(q[l].data); free(k[l].data); free(v[l].data); free(out[l].data); free(kv_cache[l].data);
        free(plain_out[l]);
    }
    (void)stream;
    return 0;
}
