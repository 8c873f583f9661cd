/* test_gpu_ops.c - the CUDA backend's memory-bound ops against the CPU reference backend:
   reshape_and_cache (exact bytes), merge_states and dcp_correct (f32 1e-5, f16 1e-3,
   bf16 1e-2), copy / fill / alloc, device info, argument validation (same status as the CPU,
   a message naming the argument), and the ops captured in a CUDA graph. Their timings are
   bench/bench_ops.c.

   Every case: fresh random inputs (never zeros), outputs poisoned (0xFF) on both backends,
   every status checked, whole output buffers compared (so padding and skipped slots must stay
   poisoned on the GPU exactly as on the CPU). Usage: see gpu_test_util.h. */
#include "gpu_test_util.h"

#include <cuda_runtime_api.h>   /* the graph-capture case only */

/* ------------------------------------------------------------------------------------------ */
/* reshape_and_cache */

typedef struct cache_case {
    fa_kv_layout layout;
    fa_dtype kv, cache;           /* cache == kv: AUTO */
    int32_t T, H, D, bs, NB;
    int64_t token_pad;            /* key/value token stride = H*D + token_pad */
    int key_offset;               /* elements added to the key/value base pointers */
    int cache_offset;             /* elements added to the cache base pointers */
    float k_scale, v_scale;
    int specials;                 /* saturating, subnormal, tie and infinite inputs */
    int neg_pct;                  /* percent of negative slots */
} cache_case;

static const char *layout_name(fa_kv_layout l) { return l == FA_LAYOUT_HND ? "HND" : "NHD"; }

static void cache_strides(fa_kv_layout layout, int32_t bs, int32_t H, int32_t D, int64_t *blk, int64_t *page,
                          int64_t *head)
{
    *blk = (int64_t)bs * H * D;
    if (layout == FA_LAYOUT_NHD) {
        *page = (int64_t)H * D;
        *head = D;
    } else {
        *page = D;
        *head = (int64_t)bs * D;
    }
}

/* Random activations in [-4, 4); with specials, some elements become values that saturate,
   fall in the fp8 subnormal range, sit exactly halfway between two fp8 values (with a
   power-of-two scale the quotient is exact: ties to even), or are infinite. */
static void fill_kv(void *buf, int64_t n, fa_dtype t, fa_dtype cache, float scale, int specials)
{
    int64_t i;
    gt_fill_uniform(buf, n, t, -4.0f, 4.0f);
    if (!specials || (cache != FA_DTYPE_FP8_E4M3 && cache != FA_DTYPE_FP8_E5M2)) return;
    for (i = 0; i < n; ++i) {
        int64_t r = gt_randint(16);
        float sgn = gt_randint(2) ? -1.0f : 1.0f;
        float fmax = cache == FA_DTYPE_FP8_E4M3 ? 448.0f : 57344.0f;
        if (r == 0) {                                   /* saturates */
            gt_store(buf, i, t, sgn * fmax * gt_uniform(1.05f, 1.5f) * scale);
        } else if (r == 1) {                            /* fp8 subnormal range */
            gt_store(buf, i, t, sgn * gt_uniform(0.001f, 0.015f) * scale);
        } else if (r == 2) {                            /* halfway between two fp8 values */
            uint8_t code = (uint8_t)gt_randint(cache == FA_DTYPE_FP8_E4M3 ? 0x7E : 0x7B);
            float a = fa_cpu_fp8_to_float(code, cache), b = fa_cpu_fp8_to_float(code + 1, cache);
            gt_store(buf, i, t, sgn * 0.5f * (a + b) * scale);
        } else if (r == 3 && gt_randint(8) == 0) {      /* infinite: clamps to +-max */
            gt_store(buf, i, t, sgn * INFINITY);
        }
    }
}

/* T distinct slots in [0, NB*bs), about neg_pct percent of them negative. */
static void make_slots(int64_t *slots, int32_t T, int64_t num_slots, int neg_pct)
{
    int32_t i;
    for (i = 0; i < T; ++i) {
        int32_t j, dup;
        do {
            slots[i] = gt_randint(num_slots);
            dup = 0;
            for (j = 0; j < i; ++j) dup |= slots[j] == slots[i];
        } while (dup);
    }
    for (i = 0; i < T; ++i)
        if (gt_randint(100) < neg_pct) slots[i] = gt_randint(4) == 0 ? -1 - gt_randint(1000) : -1;
}

static void run_cache_case(const cache_case *c)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    size_t in_es = gt_dtype_size(c->kv), out_es = gt_dtype_size(c->cache);
    int64_t kts = (int64_t)c->H * c->D + c->token_pad;
    int64_t in_elems = c->key_offset + (int64_t)c->T * kts;
    int64_t blk, page, head, cache_elems;
    size_t in_bytes, cache_bytes;
    void *hk, *hv, *ck, *cv, *gk_host, *gv_host;
    void *dk = NULL, *dv = NULL, *dkc = NULL, *dvc = NULL, *dslots = NULL;
    int64_t *slots;
    fa_cache_write_args a;

    if (!gt_case("cache %s %s->%s T=%d H=%d D=%d bs=%d pad=%lld off=%d/%d%s%s", layout_name(c->layout),
                 gt_dtype_name(c->kv), c->cache == c->kv ? "auto" : gt_dtype_name(c->cache), c->T, c->H, c->D,
                 c->bs, (long long)c->token_pad, c->key_offset, c->cache_offset,
                 c->specials ? " specials" : "", c->neg_pct ? " neg-slots" : ""))
        return;
    cache_strides(c->layout, c->bs, c->H, c->D, &blk, &page, &head);
    cache_elems = c->cache_offset + (int64_t)c->NB * blk;
    in_bytes = (size_t)in_elems * in_es;
    cache_bytes = (size_t)cache_elems * out_es;

    hk = gt_xmalloc(in_bytes);
    hv = gt_xmalloc(in_bytes);
    fill_kv(hk, in_elems, c->kv, c->cache, c->k_scale, c->specials);
    fill_kv(hv, in_elems, c->kv, c->cache, c->v_scale, c->specials);
    ck = gt_xmalloc(cache_bytes);
    cv = gt_xmalloc(cache_bytes);
    gk_host = gt_xmalloc(cache_bytes);
    gv_host = gt_xmalloc(cache_bytes);
    gt_poison(ck, cache_bytes);
    gt_poison(cv, cache_bytes);
    slots = (int64_t *)gt_xmalloc(sizeof(int64_t) * (size_t)(c->T ? c->T : 1));
    make_slots(slots, c->T, (int64_t)c->NB * c->bs, c->neg_pct);

    memset(&a, 0, sizeof a);
    a.key = (const char *)hk + (size_t)c->key_offset * in_es;
    a.value = (const char *)hv + (size_t)c->key_offset * in_es;
    a.key_token_stride = a.value_token_stride = kts;
    a.kv_dtype = c->kv;
    a.key_cache = (char *)ck + (size_t)c->cache_offset * out_es;
    a.value_cache = (char *)cv + (size_t)c->cache_offset * out_es;
    a.cache_block_stride = blk;
    a.cache_row_stride = page;
    a.cache_head_stride = head;
    a.cache_dtype = c->cache;
    a.slot_mapping = slots;
    a.num_tokens = c->T;
    a.num_heads_kv = c->H;
    a.head_size = c->D;
    a.block_size = c->bs;
    a.num_blocks = c->NB;
    a.k_scale = c->k_scale;
    a.v_scale = c->v_scale;
    if (!gt_check(cpu->ops.reshape_and_cache(cpu->ctx, &a), cpu, "reshape_and_cache")) goto done;

    /* the GPU caches start from the same poison, set with the fill op */
    dk = gt_dup(hk, in_bytes);
    dv = gt_dup(hv, in_bytes);
    dslots = gt_dup(slots, sizeof(int64_t) * (size_t)(c->T ? c->T : 1));
    dkc = gt_dmalloc(cache_bytes);
    dvc = gt_dmalloc(cache_bytes);
    if (!dk || !dv || !dslots || !dkc || !dvc) goto done;
    if (!gt_check(gpu->ops.fill(gpu->ctx, dkc, cache_bytes, GT_POISON, cache_bytes, 1), gpu, "fill") ||
        !gt_check(gpu->ops.fill(gpu->ctx, dvc, cache_bytes, GT_POISON, cache_bytes, 1), gpu, "fill"))
        goto done;
    a.key = (const char *)dk + (size_t)c->key_offset * in_es;
    a.value = (const char *)dv + (size_t)c->key_offset * in_es;
    a.key_cache = (char *)dkc + (size_t)c->cache_offset * out_es;
    a.value_cache = (char *)dvc + (size_t)c->cache_offset * out_es;
    a.slot_mapping = (const int64_t *)dslots;
    if (!gt_check(gpu->ops.reshape_and_cache(gpu->ctx, &a), gpu, "reshape_and_cache")) goto done;
    if (!gt_d2h(gk_host, dkc, cache_bytes) || !gt_d2h(gv_host, dvc, cache_bytes)) goto done;
    gt_compare_bytes("key_cache", gk_host, ck, cache_bytes);
    gt_compare_bytes("value_cache", gv_host, cv, cache_bytes);
done:
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dslots);
    gt_dfree(dkc);
    gt_dfree(dvc);
    free(hk);
    free(hv);
    free(ck);
    free(cv);
    free(gk_host);
    free(gv_host);
    free(slots);
    gt_case_end();
}

static void test_cache_write(void)
{
    static const fa_dtype kvs[3] = {FA_DTYPE_BF16, FA_DTYPE_F16, FA_DTYPE_F32};
    static const fa_dtype fp8s[2] = {FA_DTYPE_FP8_E4M3, FA_DTYPE_FP8_E5M2};
    int l, k, f;
    cache_case c;

    /* AUTO caches: every input dtype, both layouts, packed and padded token rows */
    for (l = 0; l < 2; ++l) {
        for (k = 0; k < 3; ++k) {
            memset(&c, 0, sizeof c);
            c.layout = (fa_kv_layout)l;
            c.kv = c.cache = kvs[k];
            c.T = 37;
            c.H = 8;
            c.D = 128;
            c.bs = k == 1 ? 1 : l == 1 && k == 2 ? 3 : 16; /* any block size: page size 1, 3 */
            c.NB = c.bs == 16 ? 64 : 1024 / c.bs;
            c.token_pad = k == 0 ? 0 : 2 * 8 * 128;   /* vLLM's fused-QKV slice: stride 3*H*D */
            c.neg_pct = 20;
            run_cache_case(&c);
        }
    }
    /* fp8 caches: every input dtype and both formats, both layouts, specials */
    for (f = 0; f < 2; ++f) {
        for (k = 0; k < 3; ++k) {
            for (l = 0; l < 2; ++l) {
                memset(&c, 0, sizeof c);
                c.layout = (fa_kv_layout)l;
                c.kv = kvs[k];
                c.cache = fp8s[f];
                c.T = 41;
                c.H = 4;
                c.D = l ? 64 : 128;
                c.bs = 16;
                c.NB = 40;
                c.token_pad = l ? 24 : 0;
                c.k_scale = k == 1 ? 0.5f : 4.0f / 64.0f * 1.3f;
                c.v_scale = k == 1 ? 0.25f : 0.0371f;
                c.specials = 1;
                c.neg_pct = 15;
                run_cache_case(&c);
            }
        }
    }
    /* head sizes that are not multiples of 16 / tiny / the largest, odd block sizes */
    {
        static const int32_t Ds[4] = {8, 40, 80, 256};
        static const int32_t bss[4] = {1, 8, 48, 32};
        int i;
        for (i = 0; i < 4; ++i) {
            memset(&c, 0, sizeof c);
            c.layout = (fa_kv_layout)(i & 1);
            c.kv = i < 2 ? FA_DTYPE_F32 : FA_DTYPE_BF16;
            c.cache = i == 2 ? FA_DTYPE_FP8_E4M3 : c.kv;
            c.T = 29;
            c.H = i == 0 ? 1 : 3;
            c.D = Ds[i];
            c.bs = bss[i];
            c.NB = 50;
            c.token_pad = 8;
            c.k_scale = 0.11f;
            c.v_scale = 0.07f;
            c.neg_pct = 10;
            run_cache_case(&c);
        }
    }
    /* misaligned pointers and strides: the element-by-element path */
    for (k = 0; k < 3; ++k) {
        memset(&c, 0, sizeof c);
        c.layout = (fa_kv_layout)(k & 1);
        c.kv = kvs[k];
        c.cache = k == 2 ? FA_DTYPE_FP8_E5M2 : c.kv;
        c.T = 23;
        c.H = 2;
        c.D = 64;
        c.bs = 16;
        c.NB = 8;
        c.token_pad = k == 0 ? 1 : 0;      /* odd token stride */
        c.key_offset = k == 1 ? 1 : 0;     /* base pointer off by one element */
        c.cache_offset = k == 2 ? 3 : 0;   /* fp8 cache off by three bytes */
        c.k_scale = 0.2f;
        c.v_scale = 0.3f;
        c.neg_pct = 10;
        run_cache_case(&c);
    }
    /* more tokens: many blocks of the grid */
    memset(&c, 0, sizeof c);
    c.layout = FA_LAYOUT_NHD;
    c.kv = FA_DTYPE_BF16;
    c.cache = FA_DTYPE_FP8_E4M3;
    c.T = 3000;
    c.H = 8;
    c.D = 128;
    c.bs = 16;
    c.NB = 256;
    c.k_scale = 0.05f;
    c.v_scale = 0.06f;
    c.neg_pct = 5;
    run_cache_case(&c);
    /* the kernel's edges: token rows of more than one block (cpr > 256), a row of one chunk
       a head and 33 heads (groups of 2 tokens, odd counts), one token, scales that are no
       power of two with inputs exactly at fp8 rounding boundaries (x / scale a tie: the
       division fallback of the fp8 vector path), subnormal and huge scales (1 / scale
       overflows / is subnormal) */
    {
        static const struct {
            fa_kv_layout layout;
            fa_dtype kv, cache;
            int32_t T, H, D, bs, NB;
            float ks, vs;
        } e[6] = {
            {FA_LAYOUT_NHD, FA_DTYPE_BF16, FA_DTYPE_FP8_E4M3, 45, 16, 256, 16, 8, 0.75f, 1.5f},
            {FA_LAYOUT_HND, FA_DTYPE_F16, FA_DTYPE_FP8_E5M2, 1, 3, 24, 16, 4, 0.75f, 3.0f},
            {FA_LAYOUT_NHD, FA_DTYPE_F32, FA_DTYPE_FP8_E4M3, 31, 2, 64, 8, 16, 3.0f, 0.375f},
            {FA_LAYOUT_NHD, FA_DTYPE_BF16, FA_DTYPE_BF16, 33, 33, 8, 16, 8, 1.0f, 1.0f},
            {FA_LAYOUT_HND, FA_DTYPE_BF16, FA_DTYPE_FP8_E4M3, 40, 4, 64, 16, 8, 1e-39f, 3e38f},
            {FA_LAYOUT_NHD, FA_DTYPE_F16, FA_DTYPE_FP8_E4M3, 257, 1, 8, 5, 64, 0.1f, 7.0f},
        };
        int i;
        for (i = 0; i < 6; ++i) {
            memset(&c, 0, sizeof c);
            c.layout = e[i].layout;
            c.kv = e[i].kv;
            c.cache = e[i].cache;
            c.T = e[i].T;
            c.H = e[i].H;
            c.D = e[i].D;
            c.bs = e[i].bs;
            c.NB = e[i].NB;
            c.k_scale = e[i].ks;
            c.v_scale = e[i].vs;
            c.specials = c.cache != c.kv && i != 4;
            c.neg_pct = 10;
            run_cache_case(&c);
        }
    }
    /* no tokens: OK and nothing written */
    memset(&c, 0, sizeof c);
    c.kv = c.cache = FA_DTYPE_F16;
    c.T = 0;
    c.H = 2;
    c.D = 32;
    c.bs = 16;
    c.NB = 2;
    run_cache_case(&c);
}

/* A cache of more than 2^31 elements, written at large block ids. The CPU reference runs on a
   compact cache holding only the touched blocks (block b -> its index in the touched list);
   each touched GPU block, and an untouched neighbour (still poison), is compared. */
static void run_cache_large(fa_kv_layout layout, fa_dtype kv, fa_dtype cache, int32_t H, int32_t D,
                            int32_t bs, int64_t NB, int32_t T)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    size_t in_es = gt_dtype_size(kv), out_es = gt_dtype_size(cache);
    int64_t blk, page, head, i, j, n_blocks = 0;
    int64_t in_elems = (int64_t)T * H * D;
    size_t in_bytes = (size_t)in_elems * in_es, cache_bytes, blk_bytes;
    int64_t *slots, *cslots, *blocks;
    void *hk, *hv, *ck, *cv, *tmp;
    void *dk = NULL, *dv = NULL, *dkc = NULL, *dvc = NULL, *dslots = NULL;
    fa_cache_write_args a;
    fa_status st;

    if (!gt_case("cache large %s %s->%s H=%d D=%d bs=%d num_blocks=%lld (%.2g elements)", layout_name(layout),
                 gt_dtype_name(kv), cache == kv ? "auto" : gt_dtype_name(cache), H, D, bs, (long long)NB,
                 (double)NB * bs * H * D))
        return;
    if (gt_heavy()) {
        gt_case_end();
        return;
    }
    cache_strides(layout, bs, H, D, &blk, &page, &head);
    cache_bytes = (size_t)(NB * blk) * out_es;
    blk_bytes = (size_t)blk * out_es;

    dkc = gt_dmalloc_status(cache_bytes, 1, &st);
    if (dkc) dvc = gt_dmalloc_status(cache_bytes, 1, &st);
    if (!dkc || !dvc) {
        if (st == FA_ERR_OUT_OF_MEMORY)
            gt_skip("not enough device memory for 2 x %.3g GB", (double)cache_bytes / 1e9);
        else
            gt_check(st, gpu, "alloc");
        goto done_early;
    }

    slots = (int64_t *)gt_xmalloc(sizeof(int64_t) * (size_t)T);
    cslots = (int64_t *)gt_xmalloc(sizeof(int64_t) * (size_t)T);
    blocks = (int64_t *)gt_xmalloc(sizeof(int64_t) * (size_t)T);
    for (i = 0; i < T; ++i) {   /* distinct slots: a third low, the rest at the top of the cache */
        int dup;
        do {
            int64_t b = i % 3 == 0 ? gt_randint(64) : NB - 1 - gt_randint(NB / 128);
            slots[i] = b * bs + gt_randint(bs);
            dup = 0;
            for (j = 0; j < i; ++j) dup |= slots[j] == slots[i];
        } while (dup);
        if (i % 7 == 3) slots[i] = -1;
    }
    for (i = 0; i < T; ++i) {   /* compact block ids for the CPU */
        int64_t b = slots[i] / bs;
        cslots[i] = -1;
        if (slots[i] < 0) continue;
        for (j = 0; j < n_blocks && blocks[j] != b; ++j);
        if (j == n_blocks) blocks[n_blocks++] = b;
        cslots[i] = j * bs + slots[i] % bs;
    }
    hk = gt_xmalloc(in_bytes);
    hv = gt_xmalloc(in_bytes);
    fill_kv(hk, in_elems, kv, cache, 0.05f, 1);
    fill_kv(hv, in_elems, kv, cache, 0.07f, 1);
    ck = gt_xmalloc((size_t)n_blocks * blk_bytes);
    cv = gt_xmalloc((size_t)n_blocks * blk_bytes);
    tmp = gt_xmalloc(blk_bytes);
    gt_poison(ck, (size_t)n_blocks * blk_bytes);
    gt_poison(cv, (size_t)n_blocks * blk_bytes);

    memset(&a, 0, sizeof a);
    a.key = hk;
    a.value = hv;
    a.key_token_stride = a.value_token_stride = (int64_t)H * D;
    a.kv_dtype = kv;
    a.key_cache = ck;
    a.value_cache = cv;
    a.cache_block_stride = blk;
    a.cache_row_stride = page;
    a.cache_head_stride = head;
    a.cache_dtype = cache;
    a.slot_mapping = cslots;
    a.num_tokens = T;
    a.num_heads_kv = H;
    a.head_size = D;
    a.block_size = bs;
    a.num_blocks = NB;
    a.k_scale = 0.05f;
    a.v_scale = 0.07f;
    if (!gt_check(cpu->ops.reshape_and_cache(cpu->ctx, &a), cpu, "reshape_and_cache")) goto done;

    dk = gt_dup(hk, in_bytes);
    dv = gt_dup(hv, in_bytes);
    dslots = gt_dup(slots, sizeof(int64_t) * (size_t)T);
    if (!dk || !dv || !dslots) goto done;
    if (!gt_check(gpu->ops.fill(gpu->ctx, dkc, cache_bytes, GT_POISON, cache_bytes, 1), gpu, "fill") ||
        !gt_check(gpu->ops.fill(gpu->ctx, dvc, cache_bytes, GT_POISON, cache_bytes, 1), gpu, "fill"))
        goto done;
    a.key = dk;
    a.value = dv;
    a.key_cache = dkc;
    a.value_cache = dvc;
    a.slot_mapping = (const int64_t *)dslots;
    if (!gt_check(gpu->ops.reshape_and_cache(gpu->ctx, &a), gpu, "reshape_and_cache")) goto done;
    for (j = 0; j < n_blocks; ++j) {
        char what[64];
        int64_t nb = blocks[j] + 1, k2;
        snprintf(what, sizeof what, "key_cache block %lld", (long long)blocks[j]);
        if (!gt_d2h(tmp, (char *)dkc + (size_t)blocks[j] * blk_bytes, blk_bytes) ||
            !gt_compare_bytes(what, tmp, (char *)ck + (size_t)j * blk_bytes, blk_bytes))
            break;
        snprintf(what, sizeof what, "value_cache block %lld", (long long)blocks[j]);
        if (!gt_d2h(tmp, (char *)dvc + (size_t)blocks[j] * blk_bytes, blk_bytes) ||
            !gt_compare_bytes(what, tmp, (char *)cv + (size_t)j * blk_bytes, blk_bytes))
            break;
        for (k2 = 0; k2 < n_blocks && blocks[k2] != nb; ++k2);
        if (nb < NB && k2 == n_blocks) {   /* an untouched neighbour stays poison */
            size_t b;
            if (!gt_d2h(tmp, (char *)dkc + (size_t)nb * blk_bytes, blk_bytes)) break;
            for (b = 0; b < blk_bytes && ((uint8_t *)tmp)[b] == GT_POISON; ++b);
            if (b != blk_bytes) {
                gt_fail("key_cache block %lld (untouched) was written at byte %zu", (long long)nb, b);
                break;
            }
        }
    }
done:
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dslots);
    free(hk);
    free(hv);
    free(ck);
    free(cv);
    free(tmp);
    free(slots);
    free(cslots);
    free(blocks);
done_early:
    gt_dfree(dkc);
    gt_dfree(dvc);
    gt_case_end();
}

static void test_cache_write_large(void)
{
    /* element offsets past 2^31 (and byte offsets past 2^32): 2.29e9 bf16 elements per cache */
    run_cache_large(FA_LAYOUT_HND, FA_DTYPE_BF16, FA_DTYPE_BF16, 8, 128, 16, 140000, 48);
    /* slots past 2^31 (the 64-bit division path): 2^27 + 2^21 blocks of 16 x 1 x 8 fp8
       (17.4 GB per cache); the top 1/128 of the blocks, where the written slots are, starts
       at slot 2.16e9 > 2^31 */
    run_cache_large(FA_LAYOUT_NHD, FA_DTYPE_F16, FA_DTYPE_FP8_E4M3, 1, 8, 16, (int64_t)(1 << 27) + (1 << 21),
                    48);
}

/* ------------------------------------------------------------------------------------------ */
/* merge_states */

typedef struct merge_case {
    fa_dtype dt;
    int32_t T, H, D;
    int suffix_heads_outer;       /* suffix laid out [H, T, D] */
    int64_t prefix_pad;           /* extra elements per prefix token row */
    int out_offset;               /* elements added to out (misaligned: element path) */
    int with_lse;
} merge_case;

static double tol_of(fa_dtype t) { return t == FA_DTYPE_F32 ? 1e-5 : t == FA_DTYPE_F16 ? 1e-3 : 1e-2; }

/* LSEs: normal * 3, with about 10% +inf, 10% -inf and 2% NaN (all empty). */
static void fill_lse(float *l, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; ++i) {
        int64_t r = gt_randint(50);
        l[i] = r < 5 ? INFINITY : r < 10 ? -INFINITY : r == 10 ? NAN : 3.0f * gt_normal();
    }
}

static void run_merge_case(const merge_case *c)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    const int32_t T = c->T, H = c->H, D = c->D;
    size_t es = gt_dtype_size(c->dt);
    int64_t p_ts = (int64_t)H * D + c->prefix_pad, p_hs = D;
    int64_t s_ts = c->suffix_heads_outer ? D : (int64_t)H * D;
    int64_t s_hs = c->suffix_heads_outer ? (int64_t)T * D : D;
    int64_t o_ts = (int64_t)H * D, o_hs = D;
    int64_t p_elems = (int64_t)T * p_ts, s_elems = (int64_t)T * H * D;
    int64_t o_elems = c->out_offset + (int64_t)T * H * D;
    int64_t pl_hs = T + 5, sl_hs = T, ol_hs = T + 2;
    int64_t t, h, d;
    void *hp, *hs, *co, *go;
    float *pl, *sl, *col, *gol;
    void *dp = NULL, *ds = NULL, *dout = NULL, *dpl = NULL, *dsl = NULL, *dol = NULL;
    fa_merge_args a;

    if (!gt_case("merge %s T=%d H=%d D=%d%s%s%s%s", gt_dtype_name(c->dt), T, H, D,
                 c->suffix_heads_outer ? " suffix[H,T,D]" : "", c->prefix_pad ? " prefix-pad" : "",
                 c->out_offset ? " misaligned" : "", c->with_lse ? " +lse" : ""))
        return;
    hp = gt_xmalloc((size_t)p_elems * es);
    hs = gt_xmalloc((size_t)s_elems * es);
    co = gt_xmalloc((size_t)o_elems * es);
    go = gt_xmalloc((size_t)o_elems * es);
    pl = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * pl_hs));
    sl = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * sl_hs));
    col = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * ol_hs));
    gol = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * ol_hs));
    gt_fill_uniform(hp, p_elems, c->dt, -1.0f, 1.0f);
    gt_fill_uniform(hs, s_elems, c->dt, -1.0f, 1.0f);
    fill_lse(pl, H * pl_hs);
    fill_lse(sl, H * sl_hs);
    for (t = 0; t < T; t += 11)   /* some rows with both sides empty */
        for (h = 0; h < H; ++h) {
            pl[h * pl_hs + t] = gt_randint(2) ? INFINITY : -INFINITY;
            sl[h * sl_hs + t] = -INFINITY;
        }
    for (t = 0; t < T; ++t)       /* an empty side's output is garbage: NaN */
        for (h = 0; h < H; ++h) {
            if (!isfinite(pl[h * pl_hs + t]))
                for (d = 0; d < D; ++d) gt_store(hp, t * p_ts + h * p_hs + d, c->dt, NAN);
            if (!isfinite(sl[h * sl_hs + t]))
                for (d = 0; d < D; ++d) gt_store(hs, t * s_ts + h * s_hs + d, c->dt, NAN);
        }
    gt_poison(co, (size_t)o_elems * es);
    gt_poison(col, sizeof(float) * (size_t)(H * ol_hs));

    memset(&a, 0, sizeof a);
    a.out = (char *)co + (size_t)c->out_offset * es;
    a.out_token_stride = o_ts;
    a.out_head_stride = o_hs;
    a.out_lse = c->with_lse ? col : NULL;
    a.out_lse_head_stride = ol_hs;
    a.prefix_out = hp;
    a.prefix_token_stride = p_ts;
    a.prefix_head_stride = p_hs;
    a.prefix_lse = pl;
    a.prefix_lse_head_stride = pl_hs;
    a.suffix_out = hs;
    a.suffix_token_stride = s_ts;
    a.suffix_head_stride = s_hs;
    a.suffix_lse = sl;
    a.suffix_lse_head_stride = sl_hs;
    a.dtype = c->dt;
    a.num_tokens = T;
    a.num_heads = H;
    a.head_size = D;
    if (!gt_check(cpu->ops.merge_states(cpu->ctx, &a), cpu, "merge_states")) goto done;

    gt_poison(go, (size_t)o_elems * es);
    gt_poison(gol, sizeof(float) * (size_t)(H * ol_hs));
    dp = gt_dup(hp, (size_t)p_elems * es);
    ds = gt_dup(hs, (size_t)s_elems * es);
    dout = gt_dup(go, (size_t)o_elems * es);
    dpl = gt_dup(pl, sizeof(float) * (size_t)(H * pl_hs));
    dsl = gt_dup(sl, sizeof(float) * (size_t)(H * sl_hs));
    dol = gt_dup(gol, sizeof(float) * (size_t)(H * ol_hs));
    if (!dp || !ds || !dout || !dpl || !dsl || !dol) goto done;
    a.out = (char *)dout + (size_t)c->out_offset * es;
    a.out_lse = c->with_lse ? (float *)dol : NULL;
    a.prefix_out = dp;
    a.prefix_lse = (const float *)dpl;
    a.suffix_out = ds;
    a.suffix_lse = (const float *)dsl;
    if (!gt_check(gpu->ops.merge_states(gpu->ctx, &a), gpu, "merge_states")) goto done;
    if (!gt_d2h(go, dout, (size_t)o_elems * es) || !gt_d2h(gol, dol, sizeof(float) * (size_t)(H * ol_hs)))
        goto done;
    gt_compare("out", go, co, o_elems, c->dt, tol_of(c->dt), tol_of(c->dt));
    gt_compare("out_lse", gol, col, H * ol_hs, FA_DTYPE_F32, 1e-5, 1e-5);
done:
    gt_dfree(dp);
    gt_dfree(ds);
    gt_dfree(dout);
    gt_dfree(dpl);
    gt_dfree(dsl);
    gt_dfree(dol);
    free(hp);
    free(hs);
    free(co);
    free(go);
    free(pl);
    free(sl);
    free(col);
    free(gol);
    gt_case_end();
}

static void test_merge(void)
{
    static const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    static const int32_t Ds[3] = {128, 40, 256};
    int k, v;
    for (k = 0; k < 3; ++k) {
        for (v = 0; v < 3; ++v) {
            merge_case c;
            memset(&c, 0, sizeof c);
            c.dt = dts[k];
            c.T = v == 2 ? 613 : 39;
            c.H = v == 2 ? 32 : 8;
            c.D = Ds[v];
            c.suffix_heads_outer = v == 1;
            c.prefix_pad = v == 0 ? 16 : 0;
            c.with_lse = v != 1;
            run_merge_case(&c);
        }
        {
            merge_case c;   /* misaligned out: the element path */
            memset(&c, 0, sizeof c);
            c.dt = dts[k];
            c.T = 17;
            c.H = 3;
            c.D = 64;
            c.out_offset = 1;
            c.with_lse = 1;
            run_merge_case(&c);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* dcp_correct */

typedef struct dcp_case {
    fa_dtype dt;
    int32_t W, rank, T, H, D;
    int64_t token_pad;
    int out_offset;
    int with_lse;
} dcp_case;

static void run_dcp_case(const dcp_case *c)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    const int32_t T = c->T, H = c->H, D = c->D, W = c->W;
    size_t es = gt_dtype_size(c->dt);
    int64_t o_ts = (int64_t)H * D + c->token_pad, o_elems = c->out_offset + (int64_t)T * o_ts;
    int64_t n_lse = (int64_t)W * H * T, t, h, d, s;
    void *co, *go;
    float *lse, *clo, *glo;
    void *dout = NULL, *dlse = NULL, *dlo = NULL;
    fa_dcp_correct_args a;

    if (!gt_case("dcp_correct %s W=%d rank=%d T=%d H=%d D=%d%s%s%s", gt_dtype_name(c->dt), W, c->rank, T, H,
                 D, c->token_pad ? " pad" : "", c->out_offset ? " misaligned" : "",
                 c->with_lse ? " +lse" : ""))
        return;
    co = gt_xmalloc((size_t)o_elems * es);
    go = gt_xmalloc((size_t)o_elems * es);
    lse = (float *)gt_xmalloc(sizeof(float) * (size_t)n_lse);
    clo = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * T));
    glo = (float *)gt_xmalloc(sizeof(float) * (size_t)(H * T));
    for (s = 0; s < n_lse; ++s) {
        int64_t r = gt_randint(40);
        lse[s] = r < 2 ? NAN : r < 4 ? INFINITY : r < 8 ? -INFINITY : 2.0f * gt_normal();
    }
    for (t = 0; t < T; t += 7)    /* columns where every rank is empty */
        for (h = 0; h < H; h += 2)
            for (s = 0; s < W; ++s) lse[(s * H + h) * T + t] = gt_randint(3) == 0 ? NAN : -INFINITY;
    gt_fill_uniform(co, o_elems, c->dt, -1.0f, 1.0f);
    for (t = 0; t < T; ++t)       /* this rank empty: its output is garbage (NaN) */
        for (h = 0; h < H; ++h)
            if (!isfinite(lse[((int64_t)c->rank * H + h) * T + t]))
                for (d = 0; d < D; ++d) gt_store(co, c->out_offset + t * o_ts + h * D + d, c->dt, NAN);
    memcpy(go, co, (size_t)o_elems * es);
    gt_poison(clo, sizeof(float) * (size_t)(H * T));
    gt_poison(glo, sizeof(float) * (size_t)(H * T));

    memset(&a, 0, sizeof a);
    a.out = (char *)co + (size_t)c->out_offset * es;
    a.out_token_stride = o_ts;
    a.out_head_stride = D;
    a.dtype = c->dt;
    a.lse_all = lse;
    a.lse_out = c->with_lse ? clo : NULL;
    a.world_size = W;
    a.rank = c->rank;
    a.num_tokens = T;
    a.num_heads = H;
    a.head_size = D;
    if (!gt_check(cpu->ops.dcp_correct(cpu->ctx, &a), cpu, "dcp_correct")) goto done;

    dout = gt_dup(go, (size_t)o_elems * es);
    dlse = gt_dup(lse, sizeof(float) * (size_t)n_lse);
    dlo = gt_dup(glo, sizeof(float) * (size_t)(H * T));
    if (!dout || !dlse || !dlo) goto done;
    a.out = (char *)dout + (size_t)c->out_offset * es;
    a.lse_all = (const float *)dlse;
    a.lse_out = c->with_lse ? (float *)dlo : NULL;
    if (!gt_check(gpu->ops.dcp_correct(gpu->ctx, &a), gpu, "dcp_correct")) goto done;
    if (!gt_d2h(go, dout, (size_t)o_elems * es) || !gt_d2h(glo, dlo, sizeof(float) * (size_t)(H * T)))
        goto done;
    gt_compare("out", go, co, o_elems, c->dt, tol_of(c->dt), tol_of(c->dt));
    gt_compare("lse_out", glo, clo, (int64_t)H * T, FA_DTYPE_F32, 1e-5, 1e-5);
done:
    gt_dfree(dout);
    gt_dfree(dlse);
    gt_dfree(dlo);
    free(co);
    free(go);
    free(lse);
    free(clo);
    free(glo);
    gt_case_end();
}

static void test_dcp_correct(void)
{
    static const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    static const int32_t Ws[4] = {1, 2, 4, 3};
    int k, w;
    for (k = 0; k < 3; ++k) {
        for (w = 0; w < 4; ++w) {
            dcp_case c;
            memset(&c, 0, sizeof c);
            c.dt = dts[k];
            c.W = Ws[w];
            c.rank = Ws[w] - 1 - (w & 1) * (Ws[w] > 1);
            c.T = w == 3 ? 257 : 33;
            c.H = 8;
            c.D = w == 2 ? 256 : 128;
            c.token_pad = w == 1 ? 64 : 0;
            c.out_offset = w == 3 && k != 0 ? 1 : 0;
            c.with_lse = w != 2;
            run_dcp_case(&c);
        }
    }
    /* the kernel's edges: more ranks than it loads up front (the rank among them), rows of
       1, 5, 9 and 64 chunks (teams of 1, 2, 4 and 16 lanes, lanes without a chunk), one
       token, token tiles past the first, odd head counts, the element path */
    {
        static const struct {
            fa_dtype dt;
            int32_t W, rank, T, H, D;
            int64_t pad;
            int off;
        } e[5] = {
            {FA_DTYPE_BF16, 6, 5, 300, 5, 40, 0, 0},   {FA_DTYPE_F32, 8, 2, 1, 37, 256, 0, 0},
            {FA_DTYPE_F16, 2, 0, 1000, 3, 8, 0, 0},    {FA_DTYPE_BF16, 5, 4, 77, 4, 72, 3, 1},
            {FA_DTYPE_BF16, 2, 1, 4099, 2, 128, 0, 0},
        };
        int i;
        for (i = 0; i < 5; ++i) {
            dcp_case c;
            memset(&c, 0, sizeof c);
            c.dt = e[i].dt;
            c.W = e[i].W;
            c.rank = e[i].rank;
            c.T = e[i].T;
            c.H = e[i].H;
            c.D = e[i].D;
            c.token_pad = e[i].pad;
            c.out_offset = e[i].off;
            c.with_lse = i != 2;
            run_dcp_case(&c);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* copy, fill, alloc, free */

static void test_copy_fill(void)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    static const size_t sizes[4] = {1, 3, 4096, 1000003};
    int i;
    for (i = 0; i < 4; ++i) {
        size_t n = sizes[i], k;
        uint8_t *src, *back;
        void *d1 = NULL, *d2 = NULL;
        if (!gt_case("copy H2D/D2D/D2H %zu bytes (odd offsets)", n)) continue;
        src = (uint8_t *)gt_xmalloc(n + 1);
        back = (uint8_t *)gt_xmalloc(n + 1);
        for (k = 0; k < n + 1; ++k) src[k] = (uint8_t)gt_u64();
        gt_poison(back, n + 1);
        d1 = gt_dmalloc(n + 1);
        d2 = gt_dmalloc(n + 1);
        if (d1 && d2 &&
            gt_check(gpu->ops.copy(gpu->ctx, (char *)d1 + 1, src + 1, n, FA_COPY_HOST_TO_DEVICE), gpu,
                     "copy H2D") &&
            gt_check(gpu->ops.copy(gpu->ctx, d2, (char *)d1 + 1, n, FA_COPY_DEVICE_TO_DEVICE), gpu,
                     "copy D2D") &&
            gt_check(gpu->ops.copy(gpu->ctx, back, d2, n, FA_COPY_DEVICE_TO_HOST), gpu, "copy D2H") &&
            gt_sync())
            gt_compare_bytes("round trip", back, src + 1, n);
        gt_check(gpu->ops.copy(gpu->ctx, NULL, NULL, 0, FA_COPY_DEVICE_TO_DEVICE), gpu, "copy 0 bytes");
        gt_dfree(d1);
        gt_dfree(d2);
        free(src);
        free(back);
        gt_case_end();
    }
    {
        static const size_t shapes[4][3] = {   /* pitch, width, rows */
                                            {1000, 333, 7},
                                            {64, 64, 5},
                                            {0, 4097, 1},
                                            {256, 1, 300}};
        int j;
        for (j = 0; j < 4; ++j) {
            size_t pitch = shapes[j][0], width = shapes[j][1], rows = shapes[j][2];
            size_t total = (rows > 1 ? pitch * (rows - 1) : 0) + width + 16, k;
            int value = j == 3 ? 0x15A : 0x3C + j;   /* only the low byte counts */
            uint8_t *ref, *got;
            void *d = NULL;
            if (!gt_case("fill pitch=%zu width=%zu rows=%zu value=0x%x", pitch, width, rows, value)) continue;
            ref = (uint8_t *)gt_xmalloc(total);
            got = (uint8_t *)gt_xmalloc(total);
            for (k = 0; k < total; ++k) ref[k] = (uint8_t)gt_u64();
            d = gt_dup(ref, total);
            if (d && gt_check(cpu->ops.fill(cpu->ctx, ref + 8, pitch, value, width, rows), cpu, "fill") &&
                gt_check(gpu->ops.fill(gpu->ctx, (char *)d + 8, pitch, value, width, rows), gpu, "fill") &&
                gt_check(gpu->ops.fill(gpu->ctx, d, pitch, 0, 0, rows), gpu, "fill 0 width") &&
                gt_d2h(got, d, total))
                gt_compare_bytes("filled buffer", got, ref, total);
            gt_dfree(d);
            free(ref);
            free(got);
            gt_case_end();
        }
    }
    if (gt_case("alloc 0 bytes, free NULL, alloc too much (not sticky)")) {
        void *p = (void *)&p;
        uint8_t x = 0x5A, y = 0;
        void *d;
        if (gt_check(gpu->ops.alloc(gpu->ctx, 0, &p), gpu, "alloc 0"))
            gt_check(gpu->ops.free(gpu->ctx, p), gpu, "free of a 0-byte allocation");
        gt_check(gpu->ops.free(gpu->ctx, NULL), gpu, "free NULL");
        p = (void *)&p;
        if (!gt_quick() && !gt_sanitized()) { /* compute-sanitizer reports the failing cudaMalloc */
            gt_expect_status(gpu->ops.alloc(gpu->ctx, (size_t)1 << 50, &p), FA_ERR_OUT_OF_MEMORY, gpu,
                             "alloc 2^50 bytes");
            if (p != NULL) gt_fail("a failed alloc left %p, expected NULL", p);
        }
        d = gt_dmalloc(1);   /* the failure must not stick to later calls */
        if (d && gt_h2d(d, &x, 1) && gt_d2h(&y, d, 1) && y != x)
            gt_fail("after a failed alloc: round trip gave 0x%02x", y);
        gt_dfree(d);
        gt_case_end();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* device info and argument validation */

static void test_info(void)
{
    const fa_backend *gpu = gt_gpu();
    if (gt_case("backend info")) {
        fa_backend *bad = (fa_backend *)&bad;
        if (gpu->api_version != FA_BACKEND_API_VERSION) gt_fail("api_version %u", (unsigned)gpu->api_version);
        if (!gpu->name || strcmp(gpu->name, "cuda") != 0)
            gt_fail("name %s", gpu->name ? gpu->name : "(null)");
        if (!gpu->info.name[0]) gt_fail("empty device name");
        if (gpu->info.cc_major * 10 + gpu->info.cc_minor < 80)
            gt_fail("cc %d.%d", (int)gpu->info.cc_major, (int)gpu->info.cc_minor);
        if (gpu->info.num_sms <= 0) gt_fail("num_sms %d", (int)gpu->info.num_sms);
        if (gpu->info.smem_per_block < 49152 || gpu->info.smem_per_sm < gpu->info.smem_per_block)
            gt_fail("smem_per_block %lld, smem_per_sm %lld", (long long)gpu->info.smem_per_block,
                    (long long)gpu->info.smem_per_sm);
        if (!gpu->ops.reshape_and_cache || !gpu->ops.attention || !gpu->ops.merge_states ||
            !gpu->ops.dcp_correct || !gpu->ops.copy || !gpu->ops.fill || !gpu->ops.alloc || !gpu->ops.free ||
            !gpu->ops.synchronize || !gpu->ops.last_error)
            gt_fail("an op is NULL");
        gt_expect_status(fa_cuda_backend_create(-1, NULL, &bad), FA_ERR_INVALID_ARG, NULL,
                         "fa_cuda_backend_create(-1)");
        if (bad != NULL) gt_fail("a failed create left *out non-NULL");
        if (!strstr(fa_cuda_create_error(), "device -1"))
            gt_fail("create error does not name the device: \"%s\"", fa_cuda_create_error());
        gt_expect_status(fa_cuda_backend_create(1 << 20, NULL, &bad), FA_ERR_INVALID_ARG, NULL,
                         "fa_cuda_backend_create(2^20)");
        gt_expect_status(fa_cuda_backend_create(0, NULL, NULL), FA_ERR_INVALID_ARG, NULL,
                         "fa_cuda_backend_create(out NULL)");
        gt_case_end();
    }
}

/* Runs an op with bad arguments on both backends: same status, and the GPU message contains
   `needle` (the argument and its value). */
static void expect_both(fa_status cpu_st, fa_status gpu_st, fa_status want, const char *needle,
                        const char *what)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    const char *msg = gpu->ops.last_error(gpu->ctx);
    gt_expect_status(cpu_st, want, cpu, what);
    gt_expect_status(gpu_st, want, gpu, what);
    if (want != FA_OK && needle && !strstr(msg, needle))
        gt_fail("%s: message \"%s\" does not contain \"%s\"", what, msg, needle);
}

static void test_validation(void)
{
    const fa_backend *cpu = gt_cpu(), *gpu = gt_gpu();
    if (gt_case("validation: reshape_and_cache")) {
        /* valid-looking host pointers: nothing is dereferenced before validation fails */
        static uint16_t key[16], cache[16];
        static int64_t slots[2];
        fa_cache_write_args ok, a;
        memset(&ok, 0, sizeof ok);
        ok.key = ok.value = key;
        ok.key_token_stride = ok.value_token_stride = 64;
        ok.kv_dtype = FA_DTYPE_BF16;
        ok.key_cache = ok.value_cache = cache;
        ok.cache_block_stride = 16 * 64;
        ok.cache_row_stride = 64;
        ok.cache_head_stride = 64;
        ok.cache_dtype = FA_DTYPE_BF16;
        ok.slot_mapping = slots;
        ok.num_tokens = 2;
        ok.num_heads_kv = 1;
        ok.head_size = 64;
        ok.block_size = 16;
        ok.num_blocks = 4;
        ok.k_scale = ok.v_scale = 1.0f;
#define FA__BAD(field_stmt, want, needle) \
    do { \
        a = ok; \
        field_stmt; \
        expect_both(cpu->ops.reshape_and_cache(cpu->ctx, &a), gpu->ops.reshape_and_cache(gpu->ctx, &a), \
                    want, needle, "reshape_and_cache(" #field_stmt ")"); \
    } while (0)
        FA__BAD(a.head_size = 100, FA_ERR_INVALID_ARG, "head_size 100");
        FA__BAD(a.head_size = 512, FA_ERR_INVALID_ARG, "head_size 512");
        FA__BAD(a.num_heads_kv = 0, FA_ERR_INVALID_ARG, "num_heads_kv 0");
        FA__BAD(a.block_size = 0, FA_ERR_INVALID_ARG, "block_size 0");
        FA__BAD(a.num_tokens = -1, FA_ERR_INVALID_ARG, "num_tokens -1");
        FA__BAD(a.kv_dtype = FA_DTYPE_FP8_E4M3, FA_ERR_INVALID_ARG, "kv_dtype");
        FA__BAD(a.cache_dtype = FA_DTYPE_F16, FA_ERR_UNSUPPORTED, "cache_dtype");
        FA__BAD(a.key = NULL, FA_ERR_INVALID_ARG, "key is NULL");
        FA__BAD(a.slot_mapping = NULL, FA_ERR_INVALID_ARG, "slot_mapping is NULL");
        FA__BAD((a.cache_dtype = FA_DTYPE_FP8_E4M3, a.k_scale = 0.0f), FA_ERR_INVALID_ARG, "k_scale");
        FA__BAD(a.key_token_stride = 63, FA_ERR_INVALID_ARG, "key_token_stride 63");
        FA__BAD((a.num_tokens = 0, a.key = NULL, a.key_cache = NULL), FA_OK, NULL);
#undef FA__BAD
        gt_case_end();
    }
    if (gt_case("validation: merge_states, dcp_correct")) {
        static float buf[64];
        fa_merge_args ok, a;
        fa_dcp_correct_args dok, d;
        memset(&ok, 0, sizeof ok);
        ok.out = ok.out_lse = buf;
        ok.prefix_out = ok.suffix_out = buf;
        ok.prefix_lse = ok.suffix_lse = buf;
        ok.dtype = FA_DTYPE_F32;
        ok.num_tokens = 1;
        ok.num_heads = 1;
        ok.head_size = 8;
#define FA__BAD(field_stmt, want, needle) \
    do { \
        a = ok; \
        field_stmt; \
        expect_both(cpu->ops.merge_states(cpu->ctx, &a), gpu->ops.merge_states(gpu->ctx, &a), want, needle, \
                    "merge_states(" #field_stmt ")"); \
    } while (0)
        FA__BAD(a.dtype = FA_DTYPE_FP8_E4M3, FA_ERR_INVALID_ARG, "dtype");
        FA__BAD(a.head_size = 12, FA_ERR_INVALID_ARG, "head_size 12");
        FA__BAD(a.num_heads = 0, FA_ERR_INVALID_ARG, "num_heads 0");
        FA__BAD(a.num_tokens = -3, FA_ERR_INVALID_ARG, "num_tokens -3");
        FA__BAD(a.out = NULL, FA_ERR_INVALID_ARG, "out is NULL");
        FA__BAD(a.suffix_lse = NULL, FA_ERR_INVALID_ARG, "suffix_lse is NULL");
        FA__BAD((a.num_tokens = 0, a.out = NULL), FA_OK, NULL);
#undef FA__BAD
        memset(&dok, 0, sizeof dok);
        dok.out = buf;
        dok.dtype = FA_DTYPE_BF16;
        dok.lse_all = buf;
        dok.world_size = 2;
        dok.rank = 1;
        dok.num_tokens = 1;
        dok.num_heads = 1;
        dok.head_size = 8;
#define FA__BAD(field_stmt, want, needle) \
    do { \
        d = dok; \
        field_stmt; \
        expect_both(cpu->ops.dcp_correct(cpu->ctx, &d), gpu->ops.dcp_correct(gpu->ctx, &d), want, needle, \
                    "dcp_correct(" #field_stmt ")"); \
    } while (0)
        FA__BAD(d.rank = 2, FA_ERR_INVALID_ARG, "rank 2");
        FA__BAD(d.world_size = 0, FA_ERR_INVALID_ARG, "world_size 0");
        FA__BAD(d.dtype = FA_DTYPE_I32, FA_ERR_INVALID_ARG, "dtype");
        FA__BAD(d.lse_all = NULL, FA_ERR_INVALID_ARG, "lse_all is NULL");
        FA__BAD(d.head_size = 7, FA_ERR_INVALID_ARG, "head_size 7");
#undef FA__BAD
        gt_case_end();
    }
    if (gt_case("validation: copy, fill, alloc")) {
        static uint8_t h[8];
        expect_both(cpu->ops.copy(cpu->ctx, h, h, 8, (fa_copy_kind)7),
                    gpu->ops.copy(gpu->ctx, h, h, 8, (fa_copy_kind)7), FA_ERR_INVALID_ARG, "kind 7",
                    "copy(kind 7)");
        expect_both(cpu->ops.copy(cpu->ctx, NULL, h, 8, FA_COPY_HOST_TO_DEVICE),
                    gpu->ops.copy(gpu->ctx, NULL, h, 8, FA_COPY_HOST_TO_DEVICE), FA_ERR_INVALID_ARG,
                    "dst is NULL", "copy(dst NULL)");
        expect_both(cpu->ops.fill(cpu->ctx, h, 2, 0, 4, 2), gpu->ops.fill(gpu->ctx, h, 2, 0, 4, 2),
                    FA_ERR_INVALID_ARG, "pitch 2", "fill(pitch < width)");
        expect_both(cpu->ops.alloc(cpu->ctx, 8, NULL), gpu->ops.alloc(gpu->ctx, 8, NULL), FA_ERR_INVALID_ARG,
                    "ptr is NULL", "alloc(ptr NULL)");
        gt_case_end();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the ops captured in a CUDA graph (no allocation or host synchronisation inside them) */

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    gt_fail("%s: %s", what, cudaGetErrorString(e));
    return 0;
}

static void test_graph_capture(void)
{
    enum { T = 45, H = 4, D = 128, BS = 16, NB = 16, W = 2 };
    const fa_backend *cpu = gt_cpu();
    fa_backend *gpu = NULL;
    cudaStream_t stream = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int64_t blk, page, head, cache_elems, slots[T], o_elems = (int64_t)T * H * D;
    size_t kv_bytes = sizeof(uint16_t) * (size_t)(T * H * D), cache_bytes;
    uint16_t *hk, *hv, *hp, *hs, *hmo, *gmo;
    uint8_t *ck, *cv, *gk, *gv;
    float *pl, *sl, *dcp_out, *dcp_gout, *lse_all, *lo, *glo, *mlo, *gmlo;
    void *dk = NULL, *dv = NULL, *dkc = NULL, *dvc = NULL, *dsl = NULL, *dp = NULL, *ds = NULL, *dpl = NULL,
         *dsll = NULL, *dmo = NULL, *dmlo = NULL, *ddo = NULL, *dla = NULL, *dlo = NULL, *dsrc = NULL;
    fa_cache_write_args ca;
    fa_merge_args ma;
    fa_dcp_correct_args da;
    int rep;

    if (!gt_case("graph capture: reshape_and_cache bf16->e4m3 HND, merge bf16, dcp_correct f32, "
                 "fill, copy D2D on a non-default stream"))
        return;
    cache_strides(FA_LAYOUT_HND, BS, H, D, &blk, &page, &head);
    cache_elems = NB * blk;
    cache_bytes = (size_t)cache_elems;
    hk = (uint16_t *)gt_xmalloc(kv_bytes);
    hv = (uint16_t *)gt_xmalloc(kv_bytes);
    hp = (uint16_t *)gt_xmalloc(kv_bytes);
    hs = (uint16_t *)gt_xmalloc(kv_bytes);
    hmo = (uint16_t *)gt_xmalloc(kv_bytes);
    gmo = (uint16_t *)gt_xmalloc(kv_bytes);
    ck = (uint8_t *)gt_xmalloc(cache_bytes);
    cv = (uint8_t *)gt_xmalloc(cache_bytes);
    gk = (uint8_t *)gt_xmalloc(cache_bytes);
    gv = (uint8_t *)gt_xmalloc(cache_bytes);
    pl = (float *)gt_xmalloc(sizeof(float) * H * T);
    sl = (float *)gt_xmalloc(sizeof(float) * H * T);
    mlo = (float *)gt_xmalloc(sizeof(float) * H * T);
    gmlo = (float *)gt_xmalloc(sizeof(float) * H * T);
    dcp_out = (float *)gt_xmalloc(sizeof(float) * (size_t)o_elems);
    dcp_gout = (float *)gt_xmalloc(sizeof(float) * (size_t)o_elems);
    lse_all = (float *)gt_xmalloc(sizeof(float) * W * H * T);
    lo = (float *)gt_xmalloc(sizeof(float) * H * T);
    glo = (float *)gt_xmalloc(sizeof(float) * H * T);
    gt_fill_uniform(hk, (int64_t)T * H * D, FA_DTYPE_BF16, -4.0f, 4.0f);
    gt_fill_uniform(hv, (int64_t)T * H * D, FA_DTYPE_BF16, -4.0f, 4.0f);
    gt_fill_uniform(hp, (int64_t)T * H * D, FA_DTYPE_BF16, -1.0f, 1.0f);
    gt_fill_uniform(hs, (int64_t)T * H * D, FA_DTYPE_BF16, -1.0f, 1.0f);
    gt_fill_uniform(dcp_out, o_elems, FA_DTYPE_F32, -1.0f, 1.0f);
    memcpy(dcp_gout, dcp_out, sizeof(float) * (size_t)o_elems);
    for (rep = 0; rep < H * T; ++rep) {
        pl[rep] = 2.0f * gt_normal();
        sl[rep] = 2.0f * gt_normal();
    }
    for (rep = 0; rep < W * H * T; ++rep) lse_all[rep] = 2.0f * gt_normal();
    make_slots(slots, T, (int64_t)NB * BS, 10);
    gt_poison(ck, cache_bytes);
    gt_poison(cv, cache_bytes);
    gt_poison(hmo, kv_bytes);
    gt_poison(mlo, sizeof(float) * H * T);
    gt_poison(lo, sizeof(float) * H * T);

    /* CPU reference: the same ops once (graph replays are idempotent) */
    memset(&ca, 0, sizeof ca);
    ca.key = hk;
    ca.value = hv;
    ca.key_token_stride = ca.value_token_stride = H * D;
    ca.kv_dtype = FA_DTYPE_BF16;
    ca.key_cache = ck;
    ca.value_cache = cv;
    ca.cache_block_stride = blk;
    ca.cache_row_stride = page;
    ca.cache_head_stride = head;
    ca.cache_dtype = FA_DTYPE_FP8_E4M3;
    ca.slot_mapping = slots;
    ca.num_tokens = T;
    ca.num_heads_kv = H;
    ca.head_size = D;
    ca.block_size = BS;
    ca.num_blocks = NB;
    ca.k_scale = 0.05f;
    ca.v_scale = 0.08f;
    memset(&ma, 0, sizeof ma);
    ma.out = hmo;
    ma.out_token_stride = H * D;
    ma.out_head_stride = D;
    ma.out_lse = mlo;
    ma.out_lse_head_stride = T;
    ma.prefix_out = hp;
    ma.prefix_token_stride = H * D;
    ma.prefix_head_stride = D;
    ma.prefix_lse = pl;
    ma.prefix_lse_head_stride = T;
    ma.suffix_out = hs;
    ma.suffix_token_stride = H * D;
    ma.suffix_head_stride = D;
    ma.suffix_lse = sl;
    ma.suffix_lse_head_stride = T;
    ma.dtype = FA_DTYPE_BF16;
    ma.num_tokens = T;
    ma.num_heads = H;
    ma.head_size = D;
    memset(&da, 0, sizeof da);
    da.out = dcp_out;
    da.out_token_stride = H * D;
    da.out_head_stride = D;
    da.dtype = FA_DTYPE_F32;
    da.lse_all = lse_all;
    da.lse_out = lo;
    da.world_size = W;
    da.rank = 1;
    da.num_tokens = T;
    da.num_heads = H;
    da.head_size = D;
    if (!gt_check(cpu->ops.reshape_and_cache(cpu->ctx, &ca), cpu, "reshape_and_cache") ||
        !gt_check(cpu->ops.merge_states(cpu->ctx, &ma), cpu, "merge_states") ||
        !gt_check(cpu->ops.dcp_correct(cpu->ctx, &da), cpu, "dcp_correct"))
        goto done;

    /* GPU: a backend on its own stream; inputs uploaded before the capture */
    if (!cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !gt_check(fa_cuda_backend_create(0, (void *)stream, &gpu), NULL, fa_cuda_create_error()))
        goto done;
    {
        fa_backend *saved = gt()->gpu;   /* the helpers allocate through gt_gpu() */
        gt()->gpu = gpu;
        dk = gt_dup(hk, kv_bytes);
        dv = gt_dup(hv, kv_bytes);
        dkc = gt_dmalloc(cache_bytes);
        dvc = gt_dmalloc(cache_bytes);
        dsl = gt_dup(slots, sizeof slots);
        dp = gt_dup(hp, kv_bytes);
        ds = gt_dup(hs, kv_bytes);
        dpl = gt_dup(pl, sizeof(float) * H * T);
        dsll = gt_dup(sl, sizeof(float) * H * T);
        dmo = gt_dmalloc(kv_bytes);
        dmlo = gt_dmalloc(sizeof(float) * H * T);
        dsrc = gt_dup(dcp_gout, sizeof(float) * (size_t)o_elems);
        ddo = gt_dmalloc(sizeof(float) * (size_t)o_elems);
        dla = gt_dup(lse_all, sizeof(float) * W * H * T);
        dlo = gt_dmalloc(sizeof(float) * H * T);
        gt_sync();
        gt()->gpu = saved;
    }
    if (!dk || !dv || !dkc || !dvc || !dsl || !dp || !ds || !dpl || !dsll || !dmo || !dmlo || !dsrc || !ddo ||
        !dla || !dlo)
        goto done;
    ca.key = dk;
    ca.value = dv;
    ca.key_cache = dkc;
    ca.value_cache = dvc;
    ca.slot_mapping = (const int64_t *)dsl;
    ma.out = dmo;
    ma.out_lse = (float *)dmlo;
    ma.prefix_out = dp;
    ma.suffix_out = ds;
    ma.prefix_lse = (const float *)dpl;
    ma.suffix_lse = (const float *)dsll;
    da.out = ddo;
    da.lse_all = (const float *)dla;
    da.lse_out = (float *)dlo;

    if (!cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture"))
        goto done;
    {
        int ok =
            gt_check(gpu->ops.fill(gpu->ctx, dkc, cache_bytes, GT_POISON, cache_bytes, 1), gpu, "fill") &&
            gt_check(gpu->ops.fill(gpu->ctx, dvc, 0, GT_POISON, cache_bytes, 1), gpu, "fill") &&
            gt_check(gpu->ops.fill(gpu->ctx, dmo, D * 2, GT_POISON, D * 2, (size_t)T * H), gpu, "fill 2D") &&
            gt_check(gpu->ops.reshape_and_cache(gpu->ctx, &ca), gpu, "reshape_and_cache") &&
            gt_check(gpu->ops.merge_states(gpu->ctx, &ma), gpu, "merge_states") &&
            gt_check(gpu->ops.copy(gpu->ctx, ddo, dsrc, sizeof(float) * (size_t)o_elems,
                                   FA_COPY_DEVICE_TO_DEVICE),
                     gpu, "copy D2D") &&
            gt_check(gpu->ops.dcp_correct(gpu->ctx, &da), gpu, "dcp_correct");
        cudaError_t e = cudaStreamEndCapture(stream, &graph);
        if (!ok || !cuda_ok(e, "cudaStreamEndCapture (an op broke the capture?)")) goto done;
    }
    if (!cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate")) goto done;
    for (rep = 0; rep < 2; ++rep)
        if (!cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch")) goto done;
    if (!gt_check(gpu->ops.synchronize(gpu->ctx), gpu, "synchronize")) goto done;
    {
        fa_backend *saved = gt()->gpu;
        gt()->gpu = gpu;
        if (gt_d2h(gk, dkc, cache_bytes) && gt_d2h(gv, dvc, cache_bytes) && gt_d2h(gmo, dmo, kv_bytes) &&
            gt_d2h(gmlo, dmlo, sizeof(float) * H * T) &&
            gt_d2h(dcp_gout, ddo, sizeof(float) * (size_t)o_elems) &&
            gt_d2h(glo, dlo, sizeof(float) * H * T)) {
            gt_compare_bytes("key_cache", gk, ck, cache_bytes);
            gt_compare_bytes("value_cache", gv, cv, cache_bytes);
            gt_compare("merge out", gmo, hmo, (int64_t)T * H * D, FA_DTYPE_BF16, 1e-2, 1e-2);
            gt_compare("merge out_lse", gmlo, mlo, (int64_t)H * T, FA_DTYPE_F32, 1e-5, 1e-5);
            gt_compare("dcp out", dcp_gout, dcp_out, o_elems, FA_DTYPE_F32, 1e-5, 1e-5);
            gt_compare("dcp lse_out", glo, lo, (int64_t)H * T, FA_DTYPE_F32, 1e-5, 1e-5);
        }
        gt()->gpu = saved;
    }
done:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (gpu) {
        fa_backend *saved = gt()->gpu;
        gt()->gpu = gpu;
        gt_dfree(dk);
        gt_dfree(dv);
        gt_dfree(dkc);
        gt_dfree(dvc);
        gt_dfree(dsl);
        gt_dfree(dp);
        gt_dfree(ds);
        gt_dfree(dpl);
        gt_dfree(dsll);
        gt_dfree(dmo);
        gt_dfree(dmlo);
        gt_dfree(dsrc);
        gt_dfree(ddo);
        gt_dfree(dla);
        gt_dfree(dlo);
        gt()->gpu = saved;
        fa_cuda_backend_destroy(gpu);
    }
    if (stream) cudaStreamDestroy(stream);
    free(hk);
    free(hv);
    free(hp);
    free(hs);
    free(hmo);
    free(gmo);
    free(ck);
    free(cv);
    free(gk);
    free(gv);
    free(pl);
    free(sl);
    free(mlo);
    free(gmlo);
    free(dcp_out);
    free(dcp_gout);
    free(lse_all);
    free(lo);
    free(glo);
    gt_case_end();
}


/* ------------------------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (gt_init(argc, argv) != 0) return gt_finish();
#ifndef GT_GPU_IS_CPU
    test_info();
#endif  /* GT_GPU_IS_CPU */
    test_validation();
    test_copy_fill();
    test_cache_write();
    test_merge();
    test_dcp_correct();
#ifndef GT_GPU_IS_CPU
    test_graph_capture();
#endif  /* GT_GPU_IS_CPU */
    test_cache_write_large();
    return gt_finish();
}
