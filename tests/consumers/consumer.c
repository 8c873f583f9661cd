/* consumer.c - the program every consumer route of tests/consumers builds against an installed
   (or subproject) flashattn: the CPU backend, a builder, one forward, every status checked.

   One request prefills 3 tokens (causal) into a paged bf16 cache; the first token sees only
   itself, so its output must equal its own value row. Prints "consumer ok" and exits 0 on
   success. Uses only the installed headers and libraries (no FLASHATTN_IMPLEMENTATION here:
   the library libflashattn holds the header's implementation). */
#include <flashattn.h>
#include <fa_cpu.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 3, HQ = 4, HKV = 2, D = 64, BS = 16, NB = 4 };

#define CHECK(call) \
    do { \
        fa_status s_ = (call); \
        if (s_ != FA_OK) { \
            fprintf(stderr, "consumer: %s -> %s: %s\n", #call, fa_status_string(s_), fa_last_error()); \
            return 1; \
        } \
    } while (0)

int main(void)
{
    static uint16_t q[T * HQ * D], k[T * HKV * D], v[T * HKV * D], out[T * HQ * D];
    static uint16_t cache[2 * NB * BS * HKV * D];
    int32_t qsl[2] = {0, T}, seq_lens[1] = {T}, block_table[NB] = {2, 0, 1, 3};
    int64_t slots[T], qs[3] = {T, HQ, D}, ks[3] = {T, HKV, D}, shape[5], strides[5];
    fa_backend *be = NULL;
    fa_builder *b = NULL;
    fa_layer layer;
    fa_layer_desc desc;
    fa_config cfg;
    fa_batch batch;
    fa_metadata md;
    fa_tensor tq, tk, tv, tc, to;
    double worst = 0;
    int i, h, d;

    for (i = 0; i < T * HQ * D; ++i) q[i] = fa_cpu_float_to_bf16((float)((i * 37) % 101) / 101.f - 0.5f);
    for (i = 0; i < T * HKV * D; ++i) {
        k[i] = fa_cpu_float_to_bf16((float)((i * 53) % 97) / 97.f - 0.5f);
        v[i] = fa_cpu_float_to_bf16((float)((i * 71) % 89) / 89.f - 0.5f);
    }
    for (i = 0; i < T; ++i) slots[i] = (int64_t)block_table[i / BS] * BS + i % BS;

    CHECK(fa_cpu_backend_create(&be));
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = HQ;
    cfg.model.num_heads_kv = HKV;
    cfg.model.head_size = D;
    cfg.cache.block_size = BS;
    cfg.scheduler.max_num_seqs = 4;
    cfg.scheduler.max_num_batched_tokens = 64;
    CHECK(fa_builder_create(be, &cfg, NULL, &b));
    memset(&desc, 0, sizeof desc);
    desc.num_heads_q = HQ;
    desc.num_heads_kv = HKV;
    desc.head_size = D;
    CHECK(fa_layer_init(&layer, &desc));
    CHECK(fa_builder_set_layers(b, &layer, 1));

    memset(&batch, 0, sizeof batch);
    batch.num_reqs = 1;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq_lens;
    batch.block_table = block_table;   /* the CPU backend's device memory is host memory */
    batch.block_table_stride = NB;
    batch.slot_mapping = slots;
    CHECK(fa_builder_build(b, &batch, 0, &md));

    CHECK(fa_kv_cache_shape(NB, BS, HKV, D, shape));
    CHECK(fa_kv_cache_strides(FA_LAYOUT_NHD, NB, BS, HKV, D, strides));
    tc = fa_tensor_make(cache, FA_DTYPE_BF16, 5, shape);
    memcpy(tc.stride, strides, sizeof strides);
    tq = fa_tensor_make(q, FA_DTYPE_BF16, 3, qs);
    tk = fa_tensor_make(k, FA_DTYPE_BF16, 3, ks);
    tv = fa_tensor_make(v, FA_DTYPE_BF16, 3, ks);
    to = fa_tensor_make(out, FA_DTYPE_BF16, 3, qs);
    CHECK(fa_forward(&layer, be, &tq, &tk, &tv, &tc, &md, &to));

    /* token 0 attends to key 0 only: out[0, h] == v[0, h / (HQ / HKV)] */
    for (h = 0; h < HQ; ++h)
        for (d = 0; d < D; ++d) {
            double o = fa_cpu_bf16_to_float(out[h * D + d]);
            double e = fa_cpu_bf16_to_float(v[(h / (HQ / HKV)) * D + d]);
            double diff = fabs(o - e);
            if (!(diff <= worst)) worst = diff == diff ? diff : INFINITY;
        }
    fa_builder_destroy(b);
    fa_cpu_backend_destroy(be);
    if (!(worst <= 1e-2)) {
        fprintf(stderr, "consumer: token 0's output differs from its value row by %g\n", worst);
        return 1;
    }
    printf("consumer ok: flashattn %s, backend cpu, one forward of %d tokens (max |diff| %g)\n",
           FLASHATTN_VERSION_STRING, T, worst);
    return 0;
}
