/* The metadata builder: configuration defaults, workspace sizing, and the metadata that build()
   uploads for plain, cascade, DCP and chunked-local batches (SEMANTICS §5, §6, §7.2, §8, §9.1).
   A host-memory counting backend lets the test read the "device" arrays and count allocations. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---------------------------------------------------------------------------------------- */
/* counting backend (host memory) */

typedef struct counters {
    int alloc, free, copy, copy_d2h, fill, sync, attn, cache, merge, dcp;
    size_t alloc_bytes;
} counters;
static counters CNT;

static fa_status cb_cache(void *c, const fa_cache_write_args *a)
{
    (void)c;
    (void)a;
    CNT.cache++;
    return FA_OK;
}
static fa_status cb_attn(void *c, const fa_attn_args *a)
{
    (void)c;
    (void)a;
    CNT.attn++;
    return FA_OK;
}
static fa_status cb_merge(void *c, const fa_merge_args *a)
{
    (void)c;
    (void)a;
    CNT.merge++;
    return FA_OK;
}
static fa_status cb_dcp(void *c, const fa_dcp_correct_args *a)
{
    (void)c;
    (void)a;
    CNT.dcp++;
    return FA_OK;
}
static fa_status cb_copy(void *c, void *d, const void *s, size_t n, fa_copy_kind k)
{
    (void)c;
    CNT.copy++;
    if (k == FA_COPY_DEVICE_TO_HOST) CNT.copy_d2h++;
    if (n) memmove(d, s, n);
    return FA_OK;
}
static fa_status cb_fill(void *c, void *d, size_t pitch, int v, size_t w, size_t rows)
{
    (void)c;
    CNT.fill++;
    for (size_t r = 0; r < rows; ++r) memset((char *)d + r * pitch, v, w);
    return FA_OK;
}
static fa_status cb_alloc(void *c, size_t n, void **p)
{
    (void)c;
    CNT.alloc++;
    CNT.alloc_bytes += n;
    *p = malloc(n ? n : 1);
    if (*p)
        memset(*p, 0x5c,
               n < (1u << 20) ? n : (1u << 20)); /* not zero: the builder must write what it relies on */
    return *p ? FA_OK : FA_ERR_OUT_OF_MEMORY;
}
static fa_status cb_free(void *c, void *p)
{
    (void)c;
    CNT.free++;
    free(p);
    return FA_OK;
}
static fa_status cb_sync(void *c)
{
    (void)c;
    CNT.sync++;
    return FA_OK;
}

static fa_backend BE;

static void setup(void)
{
    memset(&CNT, 0, sizeof CNT);
    memset(&BE, 0, sizeof BE);
    BE.api_version = FA_BACKEND_API_VERSION;
    BE.caps = *test_caps();
    BE.name = "counter";
    BE.ops.reshape_and_cache = cb_cache;
    BE.ops.attention = cb_attn;
    BE.ops.merge_states = cb_merge;
    BE.ops.dcp_correct = cb_dcp;
    BE.ops.copy = cb_copy;
    BE.ops.fill = cb_fill;
    BE.ops.alloc = cb_alloc;
    BE.ops.free = cb_free;
    BE.ops.synchronize = cb_sync;
    snprintf(BE.info.name, sizeof BE.info.name, "counter");
    BE.info.num_sms = 132;
}

static fa_config base_cfg(void)
{
    return test_cfg(16, 4, 128, FA_DTYPE_F16, 0, 0, 2048); /* 2048 tokens: small workspaces */
}

/* ---------------------------------------------------------------------------------------- */
/* a random batch with a shared prefix of `shared` block columns */

enum { MAXR = 64, BTS = 80 };
typedef struct rbatch {
    int32_t n, qsl[MAXR + 1], seq[MAXR], bt[MAXR * BTS];
    int64_t slots[8192];
    fa_batch b;
} rbatch;

static void make_rbatch(rbatch *r, int32_t n, int32_t bs, int32_t max_ctx, int32_t max_q, int32_t min_ctx,
                        int32_t shared)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->qsl[0] = 0;
    for (int32_t i = 0; i < n; ++i) {
        int32_t q = rng_int(0, 2) ? 1 : rng_int(1, max_q);
        int32_t ctx = rng_int(min_ctx, max_ctx);
        r->qsl[i + 1] = r->qsl[i] + q;
        r->seq[i] = ctx + q;
    }
    for (int32_t i = 0; i < n; ++i)
        for (int32_t c = 0; c < BTS; ++c) r->bt[i * BTS + c] = (c < shared) ? c : 1000 + i * BTS + c;
    int32_t t = 0;
    for (int32_t i = 0; i < n; ++i)
        for (int32_t p = r->seq[i] - (r->qsl[i + 1] - r->qsl[i]); p < r->seq[i]; ++p, ++t)
            r->slots[t] = (int64_t)r->bt[i * BTS + p / bs] * bs + p % bs;
    memset(&r->b, 0, sizeof r->b);
    r->b.num_reqs = n;
    r->b.num_actual_tokens = r->qsl[n];
    r->b.query_start_loc = r->qsl;
    r->b.seq_lens = r->seq;
    r->b.block_table = r->bt;
    r->b.block_table_stride = BTS;
    r->b.max_blocks = BTS;
    r->b.block_table_host = r->bt;
    r->b.slot_mapping = r->slots;
    r->b.causal = 1;
}

static void check_plan(const int32_t *plan, int32_t n, int32_t S, int32_t len, const char *what)
{
    cr_assert_eq(plan[0], S, "%s: plan[0] = %d, num_splits %d", what, plan[0], S);
    for (int32_t i = 0; i < n; ++i)
        cr_assert(plan[1 + i] >= 1 && plan[1 + i] <= S, "%s: plan[1+%d] = %d not in [1, %d]", what, i,
                  plan[1 + i], S);
    for (int32_t i = 1 + n; i < len; ++i)
        cr_assert_eq(plan[i], 0, "%s: tail plan[%d] = %d (not zeroed)", what, i, plan[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* configuration */

Test(config, resolve_defaults)
{
    fa_config in, out;
    memset(&in, 0, sizeof in);
    in.model.num_heads_q = 8;
    in.model.head_size = 128;
    memset(&out, 0x33, sizeof out);
    ASSERT_OK(fa_config_resolve(&in, &out));
    cr_assert_eq(out.model.num_heads_q, 8);
    cr_assert_eq(out.model.num_heads_kv, 8, "num_heads_kv defaults to num_heads_q");
    cr_assert_eq(out.model.head_size, 128);
    cr_assert_eq(out.model.dtype, FA_DTYPE_BF16, "activation dtype defaults to bf16");
    cr_assert_eq(out.model.hybrid_mamba_f32, 0);
    cr_assert_eq(out.cache.block_size, 16);
    cr_assert_eq(out.cache.cache_dtype, FA_CACHE_AUTO);
    cr_assert_eq(out.cache.layout, FA_LAYOUT_NHD);
    cr_assert_eq(out.parallel.dcp_world_size, 1);
    cr_assert_eq(out.parallel.dcp_rank, 0);
    cr_assert_eq(out.parallel.cp_kv_cache_interleave_size, 1);
    cr_assert_eq(out.compilation.full_cuda_graph, 0);
    cr_assert_eq(out.compilation.max_cudagraph_capture_size, 512);
    cr_assert_eq(out.compilation.max_num_splits_for_cuda_graph, 32);
    cr_assert_eq(out.compilation.batch_invariant, 0);
    cr_assert_eq(out.compilation.max_num_splits, 32);
    cr_assert_eq(out.scheduler.max_num_seqs, 256);
    cr_assert_eq(out.scheduler.max_num_batched_tokens, 8192);
    cr_assert_eq(out.scheduler.attention_chunk_size, 0);
}

Test(config, resolve_keeps_values_and_aliases)
{
    fa_config c;
    memset(&c, 0, sizeof c);
    c.model.num_heads_q = 32;
    c.model.num_heads_kv = 8;
    c.model.head_size = 64;
    c.model.dtype = FA_DTYPE_F16;
    c.model.hybrid_mamba_f32 = 1;
    c.cache.block_size = 64;
    c.cache.cache_dtype = FA_CACHE_FP8_E5M2;
    c.cache.layout = FA_LAYOUT_HND;
    c.parallel.dcp_world_size = 4;
    c.parallel.dcp_rank = 3;
    c.parallel.cp_kv_cache_interleave_size = 16;
    c.compilation.full_cuda_graph = 1;
    c.compilation.max_cudagraph_capture_size = 256;
    c.compilation.max_num_splits_for_cuda_graph = 8;
    c.compilation.batch_invariant = 1;
    c.compilation.max_num_splits = 16;
    c.scheduler.max_num_seqs = 100;
    c.scheduler.max_num_batched_tokens = 1000;
    c.scheduler.attention_chunk_size = 128;
    fa_config keep = c;
    ASSERT_OK(fa_config_resolve(&c, &c)); /* in and out alias */
    cr_assert(memcmp(&c, &keep, sizeof c) == 0, "non-zero fields changed by resolve");
}

/* ---------------------------------------------------------------------------------------- */
/* workspace */

static size_t ws(const fa_config *c)
{
    size_t b = 0;
    ASSERT_OK(fa_builder_workspace_size(c, &b));
    return b;
}

Test(workspace, monotone_in_limits)
{
    fa_config c = base_cfg();
    const int32_t seqs[4] = {16, 64, 256, 1024};
    const int32_t toks[4] = {256, 2048, 8192, 65536};
    const int32_t spl[4] = {1, 8, 32, 128};
    size_t prev = 0;
    for (int i = 0; i < 4; ++i) {
        c = base_cfg();
        c.scheduler.max_num_seqs = seqs[i];
        size_t w = ws(&c);
        cr_assert_geq(w, prev, "max_num_seqs %d: %zu < %zu", seqs[i], w, prev);
        if (i)
            cr_assert_gt(w, prev, "max_num_seqs %d -> %d does not grow the workspace", seqs[i - 1], seqs[i]);
        prev = w;
    }
    prev = 0;
    for (int i = 0; i < 4; ++i) {
        c = base_cfg();
        c.scheduler.max_num_batched_tokens = toks[i];
        size_t w = ws(&c);
        cr_assert_geq(w, prev, "max_num_batched_tokens %d", toks[i]);
        if (i)
            cr_assert_gt(w, prev, "max_num_batched_tokens %d -> %d does not grow the workspace", toks[i - 1],
                         toks[i]);
        prev = w;
    }
    prev = 0;
    for (int i = 0; i < 4; ++i) {
        c = base_cfg();
        c.compilation.max_num_splits = spl[i];
        size_t w = ws(&c);
        cr_assert_geq(w, prev, "max_num_splits %d", spl[i]);
        prev = w;
    }
    /* more heads / larger heads / DCP / chunked local never shrink it */
    fa_config a = base_cfg(), b = base_cfg();
    b.model.num_heads_q = 64;
    cr_assert_geq(ws(&b), ws(&a));
    b = base_cfg();
    b.model.head_size = 256;
    cr_assert_geq(ws(&b), ws(&a));
    b = base_cfg();
    b.parallel.dcp_world_size = 4;
    b.parallel.dcp_rank = 1;
    cr_assert_geq(ws(&b), ws(&a));
    b = base_cfg();
    b.scheduler.attention_chunk_size = 64;
    cr_assert_geq(ws(&b), ws(&a));
}

Test(workspace, create_allocates_the_reported_size, .init = setup)
{
    fa_config c = base_cfg();
    c.scheduler.max_num_seqs = 32;
    c.scheduler.max_num_batched_tokens = 1024;
    size_t w = ws(&c);
    fa_builder *b;
    ASSERT_OK(fa_builder_create(&BE, &c, NULL, &b));
    cr_assert_geq(CNT.alloc, 1);
    cr_assert_eq(CNT.alloc_bytes, w, "allocated %zu bytes, fa_builder_workspace_size says %zu",
                 CNT.alloc_bytes, w);
    const fa_config *rc = fa_builder_config(b);
    cr_assert_not_null(rc);
    cr_assert_eq(rc->cache.block_size, 16, "resolved config: defaults applied");
    cr_assert_eq(rc->scheduler.max_num_seqs, 32);
    cr_assert_eq(rc->compilation.max_num_splits, 32);
    fa_builder_destroy(b);
    cr_assert_eq(CNT.free, CNT.alloc, "destroy frees what create allocated");
}

/* The work counters (fa_attn_args.work_counters): FA_WORK_COUNTERS int32 words, the
   workspace's last region (256-byte aligned, its 16 bytes not rounded up), zeroed at creation
   with one fill of the backend (cb_alloc leaves 0x5c bytes); with or without splits, DCP or
   chunked-local attention. */
static void check_work_counters(const fa_config *c, const char *what)
{
    fa_config rc;
    fa__layout L;
    fa_builder *b = NULL;
    ASSERT_OK(fa_config_resolve(c, &rc));
    ASSERT_OK(fa__compute_layout("test", &rc, &L));
    const int fills = CNT.fill;
    ASSERT_OK(fa_builder_create(&BE, c, NULL, &b));
    cr_assert_eq(CNT.fill, fills + 1, "%s: one fill at creation (the counters), got %d", what,
                 CNT.fill - fills);
    cr_assert_not_null(b->work_counters, "%s: no work counters", what);
    cr_assert_eq((char *)b->work_counters, (char *)b->dev_ws + L.ws_work_counters, "%s", what);
    cr_assert_eq(L.ws_work_counters % 256, 0, "%s: region alignment (offset %zu)", what, L.ws_work_counters);
    cr_assert_eq(b->ws_bytes, L.ws_work_counters + FA_WORK_COUNTERS * sizeof(int32_t),
                 "%s: the counters are the workspace's last %zu bytes (%zu of %zu)", what,
                 FA_WORK_COUNTERS * sizeof(int32_t), L.ws_work_counters, b->ws_bytes);
    /* every other region ends at or before them */
    const size_t starts[] = {L.ws_ints,        L.ws_split_out,   L.ws_split_lse,     L.ws_prefix_out,
                             L.ws_suffix_out,  L.ws_prefix_lse,  L.ws_suffix_lse,    L.ws_dcp_q_all,
                             L.ws_dcp_ctx_out, L.ws_dcp_rs_out,  L.ws_dcp_qpart_out, L.ws_dcp_ctx_lse,
                             L.ws_dcp_lse_all, L.ws_dcp_lse_glob};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; ++i)
        cr_assert_lt(starts[i], L.ws_work_counters, "%s: region %zu starts at %zu, past the counters", what,
                     i, starts[i]);
    for (int i = 0; i < FA_WORK_COUNTERS; ++i)
        cr_assert_eq(b->work_counters[i], 0, "%s: work_counters[%d] = %#x after create", what, i,
                     (unsigned)b->work_counters[i]);
    fa_builder_destroy(b);
    cr_assert_eq(CNT.free, CNT.alloc, "%s: destroy frees what create allocated", what);
}

Test(workspace, work_counters_region, .init = setup)
{
    fa_config c = base_cfg();
    check_work_counters(&c, "splits");
    c.compilation.batch_invariant = 1; /* one split: no partials, the counters all the same */
    check_work_counters(&c, "no splits");
    c = base_cfg();
    c.scheduler.attention_chunk_size = 64;
    check_work_counters(&c, "chunked local");
    c = base_cfg();
    c.scheduler.max_num_batched_tokens = 1000; /* odd sizes: the regions before are still rounded */
    c.scheduler.max_num_seqs = 7;
    check_work_counters(&c, "odd limits");
}

/* the counters grow the workspace by exactly FA_WORK_COUNTERS int32 (16 bytes): the size is
   the end of the last other region plus 16 */
Test(workspace, work_counters_add_16_bytes)
{
    const int32_t toks[3] = {256, 1000, 2048};
    const int32_t spl[3] = {1, 8, 32};
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
            fa_config c = base_cfg(), rc;
            fa__layout L;
            c.scheduler.max_num_batched_tokens = toks[i];
            c.compilation.max_num_splits = spl[j];
            ASSERT_OK(fa_config_resolve(&c, &rc));
            ASSERT_OK(fa__compute_layout("test", &rc, &L));
            size_t w = ws(&c);
            cr_assert_eq(w, L.ws_bytes);
            cr_assert_eq(w % 256, 16, "tokens %d splits %d: %zu bytes, not 256 x n + 16", toks[i], spl[j], w);
            cr_assert_eq(FA_WORK_COUNTERS * sizeof(int32_t), 16);
        }
}

Test(workspace, work_counters_absent_without_fill, .init = setup)
{
    fa_config c = base_cfg();
    fa_builder *b = NULL;
    size_t w = ws(&c);
    BE.ops.fill = NULL; /* a backend without fill: its calls get NULL (fa_attn_args) */
    ASSERT_OK(fa_builder_create(&BE, &c, NULL, &b));
    cr_assert_null(b->work_counters);
    cr_assert_eq(CNT.alloc_bytes, w, "the same workspace (the region is unused)");
    fa_builder_destroy(b);
    cr_assert_eq(CNT.free, CNT.alloc);
}

static fa_status cb_fill_fails(void *c, void *d, size_t pitch, int v, size_t w, size_t rows)
{
    (void)c;
    (void)d;
    (void)pitch;
    (void)v;
    (void)w;
    (void)rows;
    CNT.fill++;
    return FA_ERR_BACKEND;
}

Test(workspace, work_counters_fill_failure, .init = setup)
{
    fa_config c = base_cfg();
    fa_builder *b = (fa_builder *)&c; /* must stay untouched */
    BE.ops.fill = cb_fill_fails;
    cr_assert_eq(fa_builder_create(&BE, &c, NULL, &b), FA_ERR_BACKEND);
    cr_assert(strstr(fa_last_error(), "fill") != NULL, "message \"%s\" does not name the op",
              fa_last_error());
    cr_assert_eq(CNT.fill, 1);
    cr_assert_eq(b, (fa_builder *)&c, "out written by a failing create");
    cr_assert_eq(CNT.free, CNT.alloc, "the workspace is freed");
}

/* two builders: two sets of counters (their calls may run at once on other streams) */
Test(workspace, work_counters_per_builder, .init = setup)
{
    fa_config c = base_cfg();
    fa_builder *b1 = NULL, *b2 = NULL;
    ASSERT_OK(fa_builder_create(&BE, &c, NULL, &b1));
    ASSERT_OK(fa_builder_create(&BE, &c, NULL, &b2));
    cr_assert_not_null(b1->work_counters);
    cr_assert_not_null(b2->work_counters);
    cr_assert(b1->work_counters + FA_WORK_COUNTERS <= b2->work_counters ||
                  b2->work_counters + FA_WORK_COUNTERS <= b1->work_counters,
              "the builders share counters (%p, %p)", (void *)b1->work_counters, (void *)b2->work_counters);
    fa_builder_destroy(b1);
    fa_builder_destroy(b2);
}

/* ---------------------------------------------------------------------------------------- */
/* build: plain */

static fa_builder *make_builder(const fa_config *c, const fa_comm *comm)
{
    fa_builder *b = NULL;
    ASSERT_OK(fa_builder_create(&BE, c, comm, &b));
    return b;
}

Test(build, plain_batch, .init = setup)
{
    rng_seed(0xB111);
    fa_config c = base_cfg();
    c.scheduler.max_num_seqs = 64;
    fa_builder *b = make_builder(&c, NULL);
    static rbatch r;
    for (int it = 0; it < 20; ++it) {
        make_rbatch(&r, rng_int(1, 40), 16, 1000, 40, 0, 0);
        fa_metadata md;
        memset(&md, 0x77, sizeof md);
        ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
        int32_t maxq = 0, maxs = 0, minq = 0;
        for (int i = 0; i < r.n; ++i) {
            const int32_t ql = r.qsl[i + 1] - r.qsl[i];
            if (ql > 0 && (minq == 0 || ql < minq)) minq = ql;
            if (r.qsl[i + 1] - r.qsl[i] > maxq) maxq = r.qsl[i + 1] - r.qsl[i];
            if (r.seq[i] > maxs) maxs = r.seq[i];
        }
        cr_assert_eq(md.builder, b);
        cr_assert_eq(md.num_reqs, r.n);
        cr_assert_eq(md.num_actual_tokens, r.qsl[r.n]);
        cr_assert_eq(md.max_query_len, maxq);
        cr_assert_eq(md.min_query_len, minq, "min_query_len %d, expected %d", md.min_query_len, minq);
        cr_assert_eq(md.max_seq_len, maxs);
        cr_assert_eq(md.causal, 1);
        for (int i = 0; i <= r.n; ++i)
            cr_assert_eq(md.query_start_loc[i], r.qsl[i], "query_start_loc[%d]", i);
        for (int i = 0; i < r.n; ++i) cr_assert_eq(md.seq_lens[i], r.seq[i], "seq_lens[%d]", i);
        cr_assert_eq(md.block_table, r.bt, "the batch's block table");
        cr_assert_eq(md.block_table_stride, BTS);
        cr_assert_eq(md.slot_mapping, r.slots, "the batch's slot mapping");
        cr_assert_eq(md.use_cascade, 0);
        cr_assert_eq(md.has_local, 0);
        cr_assert_eq(md.dcp_world_size, 1);
        cr_assert_geq(md.num_splits, 1);
        cr_assert_leq(md.num_splits, 128);
        /* max_num_splits left 0: the partials of the call fit the workspace (32 full batches) */
        cr_assert_leq((int64_t)md.num_splits * r.qsl[r.n], 32 * (int64_t)c.scheduler.max_num_seqs,
                      "%d splits x %d tokens", md.num_splits, r.qsl[r.n]);
        check_plan(md.split_plan, r.n, md.num_splits, 1 + 64, "plain");
    }
    /* num_actual_tokens 0 means query_start_loc[num_reqs] */
    make_rbatch(&r, 5, 16, 100, 4, 0, 0);
    r.b.num_actual_tokens = 0;
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    cr_assert_eq(md.num_actual_tokens, r.qsl[5]);
    /* causal 0 is carried */
    r.b.causal = 0;
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    cr_assert_eq(md.causal, 0);
    fa_builder_destroy(b);
}

Test(build, splits_follow_the_batch, .init = setup)
{
    /* one long decode splits; 64 decodes do not (SEMANTICS §9.3 worked example's shape) */
    fa_config c = base_cfg();
    c.model.num_heads_q = 32;
    c.model.num_heads_kv = 8;
    c.scheduler.max_num_seqs = 64;
    fa_builder *b = make_builder(&c, NULL);
    static rbatch r;
    rng_seed(1);
    make_rbatch(&r, 1, 16, 0, 1, 0, 0);
    r.seq[0] = 1000; /* overwritten below with a long context */
    r.qsl[1] = 1;
    r.seq[0] = 8192;
    r.b.max_blocks = BTS;
    static int32_t bt_long[1 * 600];
    for (int i = 0; i < 600; ++i) bt_long[i] = i;
    r.b.block_table = r.b.block_table_host = bt_long;
    r.b.block_table_stride = 600;
    r.b.max_blocks = 600;
    r.slots[0] = 8191;
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    cr_assert_gt(md.num_splits, 1, "one 8192-token decode: %d splits", md.num_splits);
    cr_assert_gt(md.split_plan[1], 1);
    /* 64 such decodes: every request 1 split */
    static int32_t qsl[65], seq[64], bt64[64 * 600];
    static int64_t sl[64];
    for (int i = 0; i <= 64; ++i) qsl[i] = i;
    for (int i = 0; i < 64; ++i) {
        seq[i] = 8192;
        sl[i] = (int64_t)i * 600 * 16 + 8191;
    }
    for (int i = 0; i < 64 * 600; ++i) bt64[i] = i;
    fa_batch bb = r.b;
    bb.num_reqs = 64;
    bb.num_actual_tokens = 64;
    bb.query_start_loc = qsl;
    bb.seq_lens = seq;
    bb.block_table = bb.block_table_host = bt64;
    bb.slot_mapping = sl;
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    /* decode rule: equal requests get equal splits, within [1, the cap] */
    for (int i = 0; i < 64; ++i) {
        cr_assert(md.split_plan[1 + i] >= 1 && md.split_plan[1 + i] <= md.num_splits,
                  "batch 64: request %d has %d splits (S %d)", i, md.split_plan[1 + i], md.num_splits);
        cr_assert_eq(md.split_plan[1 + i], md.split_plan[1], "batch 64: request %d differs", i);
    }
    fa_builder_destroy(b);
}

/* max_num_splits left 0 is elastic: one 32k decode may split past 32 (its partials are one row
   per split, the workspace holds 32 x max_num_seqs rows); an explicit value stays a hard cap; a
   workspace of 32 rows caps it at 32 again. */
Test(build, elastic_split_cap, .init = setup)
{
    static int32_t qsl[2] = {0, 1}, seq[1] = {32768}, bt[2048];
    static int64_t sl[1] = {32767};
    for (int i = 0; i < 2048; ++i) bt[i] = i;
    fa_batch bb;
    memset(&bb, 0, sizeof bb);
    bb.num_reqs = 1;
    bb.num_actual_tokens = 1;
    bb.query_start_loc = qsl;
    bb.seq_lens = seq;
    bb.block_table = bt;
    bb.block_table_host = bt;
    bb.block_table_stride = 2048;
    bb.max_blocks = 2048;
    bb.slot_mapping = sl;
    bb.causal = 1;
    const int32_t set[3] = {0, 32, 0}, seqs[3] = {64, 64, 1}, want[3] = {64, 32, 32};
    for (int k = 0; k < 3; ++k) {
        fa_config c = base_cfg();
        c.model.num_heads_q = 32;
        c.model.num_heads_kv = 8;
        c.model.head_size = 128;
        c.scheduler.max_num_seqs = seqs[k];
        c.compilation.max_num_splits = set[k];
        fa_builder *b = make_builder(&c, NULL);
        fa_metadata md;
        ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
        cr_assert_eq(md.num_splits, want[k], "max_num_splits %d, max_num_seqs %d: %d splits, expected %d",
                     set[k], seqs[k], md.num_splits, want[k]);
        cr_assert_eq(md.split_plan[1], want[k]);
        fa_builder_destroy(b);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* build: cascade */

Test(build, cascade_arrays, .init = setup)
{
    rng_seed(0xCA5C);
    fa_config c = base_cfg();
    c.scheduler.max_num_seqs = 64;
    fa_builder *b = make_builder(&c, NULL);
    static rbatch r;
    for (int it = 0; it < 10; ++it) {
        make_rbatch(&r, rng_int(8, 40), 16, 900, 30, 300, 18);
        int32_t P = 16 * rng_int(1, 18);
        fa_metadata md;
        ASSERT_OK(fa_builder_build(b, &r.b, P, &md));
        int32_t T = r.qsl[r.n];
        cr_assert_eq(md.use_cascade, 1);
        cr_assert_eq(md.common_prefix_len, P);
        cr_assert_eq(md.cu_prefix_query_lens[0], 0);
        cr_assert_eq(md.cu_prefix_query_lens[1], T, "cu_prefix_query_lens = {0, T}");
        cr_assert_eq(md.prefix_kv_lens[0], P);
        for (int i = 0; i < r.n; ++i)
            cr_assert_eq(md.suffix_kv_lens[i], r.seq[i] - P, "suffix_kv_lens[%d] = %d, expected %d", i,
                         md.suffix_kv_lens[i], r.seq[i] - P);
        for (int i = 0; i < r.n; ++i) cr_assert_eq(md.seq_lens[i], r.seq[i]);
        cr_assert_geq(md.prefix_num_splits, 1);
        cr_assert_eq(md.prefix_split_plan[0], md.prefix_num_splits);
        cr_assert(md.prefix_split_plan[1] >= 1 && md.prefix_split_plan[1] <= md.prefix_num_splits);
        check_plan(md.split_plan, r.n, md.num_splits, 1 + 64, "cascade suffix");
        /* then a plain build on the same builder: cascade off again */
        ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
        cr_assert_eq(md.use_cascade, 0);
        cr_assert_eq(md.common_prefix_len, 0);
    }
    fa_builder_destroy(b);
}

Test(build, cascade_prefix_len_from_builder, .init = setup)
{
    fa_config c = base_cfg();
    c.model.num_heads_q = 16;
    c.model.num_heads_kv = 16; /* MHA: the heuristic says yes for >= 8 requests, P >= 256 */
    c.model.head_size = 32;
    c.scheduler.max_num_batched_tokens = 256;
    fa_builder *b = make_builder(&c, NULL);
    int32_t qsl[11], seq[10], bt[10 * 100];
    int64_t sl[10];
    for (int i = 0; i <= 10; ++i) qsl[i] = i;
    for (int i = 0; i < 10; ++i) {
        seq[i] = 1000 + 37 * i;
        sl[i] = 0;
    }
    seq[4] = 701; /* context 700 -> P = min(64 blocks * 16, 700) = 700 -> 688 */
    for (int i = 0; i < 1000; ++i) bt[i] = i % 100;
    fa_batch bb;
    memset(&bb, 0, sizeof bb);
    bb.num_reqs = 10;
    bb.query_start_loc = qsl;
    bb.seq_lens = seq;
    bb.block_table = bt;
    bb.block_table_host = bt;
    bb.block_table_stride = 100;
    bb.slot_mapping = sl;
    bb.causal = 1;
    int32_t p = -1;
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
    cr_assert_eq(p, 688, "P = %d, expected min(1024, 700) rounded down to 688", p);
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 20, &p));
    cr_assert_eq(p, 320);
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 15, &p));
    cr_assert_eq(p, 0, "240 < 256");
    /* the registered layers decide: cascade needs one layer it is exact for */
    {
        static const float slopes[16] = {0.5f};
        fa_layer_desc d = test_desc(16, 16, 32, c.model.dtype);
        fa_layer lay[3];
        d.alibi_slopes = slopes;
        d.num_alibi_slopes = 16;
        ASSERT_OK(fa_layer_init(&lay[0], &d));
        d = test_desc(16, 16, 32, c.model.dtype);
        d.sliding_window = 128;
        ASSERT_OK(fa_layer_init(&lay[1], &d));
        ASSERT_OK(fa_builder_set_layers(b, lay, 1));
        ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
        cr_assert_eq(p, 0, "alibi");
        ASSERT_OK(fa_builder_set_layers(b, lay + 1, 1));
        ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
        cr_assert_eq(p, 0, "sliding window");
        d = test_desc(16, 16, 32, c.model.dtype);
        ASSERT_OK(fa_layer_init(&lay[2], &d));
        ASSERT_OK(fa_builder_set_layers(b, lay, 3));
        ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
        cr_assert_eq(
            p, 688, "one full-attention layer among windowed and ALiBi ones: cascade (the others run plain)");
        bb.causal = FA_CAUSAL_OFF;
        ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
        cr_assert_eq(p, 0, "a non-causal batch never cascades");
        bb.causal = FA_CAUSAL_ON;
    }
    bb.num_reqs = 7;
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
    cr_assert_eq(p, 0, "7 requests");
    fa_builder_destroy(b);
    /* a chunked-local builder never picks cascade; nor does a DCP one */
    bb.num_reqs = 10;
    c.scheduler.attention_chunk_size = 64;
    b = make_builder(&c, NULL);
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
    cr_assert_eq(p, 0, "local attention");
    fa_builder_destroy(b);
    c.scheduler.attention_chunk_size = 0;
    c.parallel.dcp_world_size = 2;
    fa_comm cm = make_comm(2, 0);
    b = make_builder(&c, &cm);
    ASSERT_OK(fa_builder_cascade_prefix_len(b, &bb, 64, &p));
    cr_assert_eq(p, 0, "DCP");
    fa_builder_destroy(b);
}

/* ---------------------------------------------------------------------------------------- */
/* build: DCP */

Test(build, dcp_arrays, .init = setup)
{
    rng_seed(0xDC9B);
    static rbatch r;
    const int32_t Ns[3] = {2, 4, 8}, Is[3] = {1, 4, 16};
    for (int ni = 0; ni < 3; ++ni)
        for (int ii = 0; ii < 3; ++ii) {
            int32_t N = Ns[ni], I = Is[ii];
            make_rbatch(&r, rng_int(1, 30), 16, 2000, 20, 0, 0);
            for (int32_t rank = 0; rank < N; ++rank) {
                fa_config c = base_cfg();
                c.model.num_heads_q = 4;
                c.model.num_heads_kv = 1;
                c.model.head_size = 32;
                c.scheduler.max_num_batched_tokens = 640;
                c.scheduler.max_num_seqs = 64;
                c.parallel.dcp_world_size = N;
                c.parallel.dcp_rank = rank;
                c.parallel.cp_kv_cache_interleave_size = I;
                fa_comm cm = make_comm(N, rank);
                fa_builder *b = make_builder(&c, &cm);
                fa_metadata md;
                ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
                cr_assert_eq(md.dcp_world_size, N);
                cr_assert_eq(md.dcp_rank, rank);
                cr_assert_eq(md.use_cascade, 0);
                int32_t maxs = 0;
                for (int i = 0; i < r.n; ++i) {
                    int32_t ctx = r.seq[i] - (r.qsl[i + 1] - r.qsl[i]);
                    int32_t want = 0;
                    for (int32_t p = 0; p < ctx; ++p) want += ((p / I) % N == rank);
                    cr_assert_eq(md.dcp_context_kv_lens[i], want,
                                 "N %d I %d rank %d req %d (ctx %d): %d, expected %d", N, I, rank, i, ctx,
                                 md.dcp_context_kv_lens[i], want);
                    if (r.seq[i] > maxs) maxs = r.seq[i];
                }
                int32_t wantmax = (maxs + N * I - 1) / (N * I) * I;
                cr_assert_eq(md.max_dcp_context_kv_len, wantmax,
                             "max_dcp_context_kv_len %d, expected ceil(%d/(%d*%d))*%d = %d",
                             md.max_dcp_context_kv_len, maxs, N, I, I, wantmax);
                for (int i = 0; i < r.n; ++i)
                    cr_assert_leq(md.dcp_context_kv_lens[i], md.max_dcp_context_kv_len);
                check_plan(md.split_plan, r.n, md.num_splits, 1 + 64, "dcp");
                fa_builder_destroy(b);
            }
        }
}

/* ---------------------------------------------------------------------------------------- */
/* build: chunked local (§8) */

Test(build, local_arrays, .init = setup)
{
    rng_seed(0x10CA);
    static rbatch r;
    const int32_t Cs[3] = {16, 32, 64};
    for (int it = 0; it < 30; ++it) {
        int32_t C = Cs[it % 3];
        fa_config c = base_cfg();
        c.model.num_heads_q = 4;
        c.model.num_heads_kv = 1;
        c.model.head_size = 32;
        c.scheduler.max_num_seqs = 64;
        c.scheduler.attention_chunk_size = C;
        fa_builder *b = make_builder(&c, NULL);
        make_rbatch(&r, rng_int(1, 30), 16, 400, 100, 0, 0);
        /* max_blocks: just what the longest request needs (clipping of chunk pages) */
        int32_t need = 1;
        for (int i = 0; i < r.n; ++i)
            if ((r.seq[i] + 15) / 16 > need) need = (r.seq[i] + 15) / 16;
        r.b.max_blocks = need;
        fa_metadata md;
        ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
        cr_assert_eq(md.has_local, 1);
        int32_t V = 0;
        ASSERT_OK(fa_local_virtual_batches_count(C, r.qsl, r.seq, r.n, &V));
        cr_assert_eq(md.local.num_virtual, V);
        int32_t ppv = C / 16;
        cr_assert_eq(md.local.block_table_stride, ppv, "local table stride C/bs");
        cr_assert_eq(md.local.cu_seqlens_q[0], 0);
        cr_assert_eq(md.local.cu_seqlens_q[V], r.qsl[r.n]);
        /* every query token: its virtual batch has its chunk's pages and the right key count */
        int32_t v = 0, maxq = 0, maxk = 0;
        for (int32_t i = 0; i < V; ++i) {
            int32_t q = md.local.cu_seqlens_q[i + 1] - md.local.cu_seqlens_q[i];
            cr_assert_geq(q, 1);
            if (q > maxq) maxq = q;
            if (md.local.seqused_k[i] > maxk) maxk = md.local.seqused_k[i];
        }
        cr_assert_eq(md.local.max_query_len, maxq);
        cr_assert_eq(md.local.max_seq_len, maxk);
        for (int32_t bq = 0; bq < r.n; ++bq) {
            int32_t ql = r.qsl[bq + 1] - r.qsl[bq];
            for (int32_t i = 0; i < ql; ++i) {
                int32_t g = r.qsl[bq] + i, p = r.seq[bq] - ql + i, cs = C * (p / C);
                while (md.local.cu_seqlens_q[v + 1] <= g) ++v;
                for (int32_t t = 0; t < ppv; ++t) {
                    int32_t col = cs / 16 + t;
                    if (col > need - 1) col = need - 1;
                    cr_assert_eq(md.local.block_table[v * ppv + t], r.bt[bq * BTS + col],
                                 "C %d req %d pos %d page %d", C, bq, p, t);
                }
                int32_t il = g - md.local.cu_seqlens_q[v];
                int32_t qv = md.local.cu_seqlens_q[v + 1] - md.local.cu_seqlens_q[v];
                cr_assert_eq(il + md.local.seqused_k[v] - qv + 1, p - cs + 1, "C %d req %d pos %d: key count",
                             C, bq, p);
            }
        }
        cr_assert_geq(md.local.num_splits, 1);
        check_plan(md.local.split_plan, V, md.local.num_splits, 1 + V, "local");
        /* the plain view is there too (for layers without a chunk size) */
        for (int i = 0; i < r.n; ++i) cr_assert_eq(md.seq_lens[i], r.seq[i]);
        fa_builder_destroy(b);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* full CUDA graph, batch invariance, AOT window */

Test(build, full_graph_caps_and_zeroes_the_tail, .init = setup)
{
    fa_config c = base_cfg();
    c.model.num_heads_q = 32;
    c.model.num_heads_kv = 8;
    c.scheduler.max_num_seqs = 64;
    c.compilation.full_cuda_graph = 1;
    c.compilation.max_num_splits_for_cuda_graph = 4;
    fa_builder *b = make_builder(&c, NULL);
    static int32_t qsl[65], seq[64], bt[64 * 600];
    static int64_t sl[64];
    for (int i = 0; i <= 64; ++i) qsl[i] = i;
    for (int i = 0; i < 64; ++i) {
        seq[i] = 5000 + 40 * i;
        sl[i] = 7;
    }
    for (int i = 0; i < 64 * 600; ++i) bt[i] = i;
    fa_batch bb;
    memset(&bb, 0, sizeof bb);
    bb.query_start_loc = qsl;
    bb.seq_lens = seq;
    bb.block_table = bt;
    bb.block_table_host = bt;
    bb.block_table_stride = 600;
    bb.slot_mapping = sl;
    bb.causal = 1;
    fa_metadata md;
    /* a long single decode: splits, capped at 4 */
    bb.num_reqs = 1;
    seq[0] = 9000;
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    cr_assert_leq(md.num_splits, 4, "full graph: %d splits > cap 4", md.num_splits);
    for (int i = 0; i < 1; ++i) cr_assert_leq(md.split_plan[1 + i], 4);
    /* 40 requests, then 3: entries [1 + 3, 1 + max_num_seqs) must be 0 again */
    bb.num_reqs = 40;
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    for (int i = 0; i < 40; ++i) cr_assert_geq(md.split_plan[1 + i], 1);
    bb.num_reqs = 3;
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    check_plan(md.split_plan, 3, md.num_splits, 1 + 64, "full graph, 3 after 40");
    /* a batch that needs no split still launches the cap: a graph captured from it must serve
       later steps that split (it used to launch 1 and such replays lost their splits) */
    for (int i = 0; i < 40; ++i) seq[i] = 20;
    bb.num_reqs = 40;
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    cr_assert_eq(md.num_splits, 4, "captured grid: %d splits, the cap is 4", md.num_splits);
    for (int i = 0; i < 40; ++i) cr_assert_eq(md.split_plan[1 + i], 1, "request %d: one split of work", i);
    fa_builder_destroy(b);
}

Test(build, batch_invariant_means_one_split, .init = setup)
{
    rng_seed(0xB1);
    fa_config c = base_cfg();
    c.scheduler.max_num_seqs = 64;
    c.compilation.batch_invariant = 1;
    fa_builder *b = make_builder(&c, NULL);
    static rbatch r;
    make_rbatch(&r, 12, 16, 1200, 3, 300, 18);
    /* a long single request would split without batch invariance */
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    cr_assert_eq(md.num_splits, 1);
    for (int i = 0; i < r.n; ++i) cr_assert_eq(md.split_plan[1 + i], 1);
    ASSERT_OK(fa_builder_build(b, &r.b, 256, &md));
    cr_assert_eq(md.num_splits, 1, "cascade suffix");
    cr_assert_eq(md.prefix_num_splits, 1, "cascade prefix");
    fa_builder_destroy(b);
    c.scheduler.attention_chunk_size = 64;
    b = make_builder(&c, NULL);
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    cr_assert_eq(md.local.num_splits, 1, "local");
    fa_builder_destroy(b);
    /* without batch invariance the same single long request does split (so the test can fail) */
    c = base_cfg();
    b = make_builder(&c, NULL);
    rbatch *one = &r;
    one->b.num_reqs = 1;
    one->qsl[1] = 1;
    one->seq[0] = 1200;
    one->b.num_actual_tokens = 1;
    ASSERT_OK(fa_builder_build(b, &one->b, 0, &md));
    cr_assert_gt(md.num_splits, 1, "control: a 1200-token decode splits without batch invariance");
    fa_builder_destroy(b);
    c.compilation.batch_invariant = 1;
    b = make_builder(&c, NULL);
    ASSERT_OK(fa_builder_build(b, &one->b, 0, &md));
    cr_assert_eq(md.num_splits, 1);
    fa_builder_destroy(b);
}

Test(build, aot_window_limits_splits, .init = setup)
{
    /* one 9000-token decode: splits with no window; with every layer at window (127, 0) the keys
       a tile can see are few, so no split; with two distinct windows AOT is off (planned as none) */
    fa_config c = base_cfg();
    static int32_t bt[600];
    for (int i = 0; i < 600; ++i) bt[i] = i;
    int32_t qsl[2] = {0, 1}, seq[1] = {9000};
    int64_t sl[1] = {8999};
    fa_batch bb;
    memset(&bb, 0, sizeof bb);
    bb.num_reqs = 1;
    bb.query_start_loc = qsl;
    bb.seq_lens = seq;
    bb.block_table = bt;
    bb.block_table_host = bt;
    bb.block_table_stride = 600;
    bb.slot_mapping = sl;
    bb.causal = 1;
    fa_metadata md;
    fa_builder *b = make_builder(&c, NULL);
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    int32_t none = md.num_splits;
    cr_assert_gt(none, 1);
    fa_layer one[3], two[2];
    fa_layer_desc d = test_desc(c.model.num_heads_q, c.model.num_heads_kv, c.model.head_size, c.model.dtype);
    d.sliding_window = 128; /* window (127, 0) */
    for (int i = 0; i < 3; ++i) ASSERT_OK(fa_layer_init(&one[i], &d));
    ASSERT_OK(fa_builder_set_layers(b, one, 3));
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    cr_assert_lt(md.num_splits, none, "window (127,0) on every layer: %d splits, none: %d", md.num_splits,
                 none);
    two[0] = one[0];
    d.sliding_window = 0;
    ASSERT_OK(fa_layer_init(&two[1], &d));
    ASSERT_OK(fa_builder_set_layers(b, two, 2));
    ASSERT_OK(fa_builder_build(b, &bb, 0, &md));
    cr_assert_eq(md.num_splits, none, "two distinct windows: AOT off, planned without a window");
    fa_builder_destroy(b);
}

/* ---------------------------------------------------------------------------------------- */
/* no allocation, no sync, no device-to-host copy in build() / forward() */

Test(build, no_alloc_no_sync_after_create, .init = setup)
{
    rng_seed(0xA110C);
    fa_config c = base_cfg();
    c.scheduler.max_num_seqs = 64;
    c.scheduler.attention_chunk_size = 64;
    fa_builder *b = make_builder(&c, NULL);
    int allocs = CNT.alloc;
    static rbatch r;
    static uint16_t q[2048 * 16 * 128 / 16], kk[2048 * 4 * 128 / 16], vv[2048 * 4 * 128 / 16],
        o[2048 * 16 * 128 / 16];
    static uint16_t cache[2 * 2048 * 16 * 4 * 128 / 64];
    fa_layer_desc d;
    memset(&d, 0, sizeof d);
    d.num_heads_q = 16;
    d.num_heads_kv = 4;
    d.head_size = 128;
    d.dtype = FA_DTYPE_F16;
    fa_layer plain, local;
    ASSERT_OK(fa_layer_init(&plain, &d));
    d.attention_chunk_size = 64;
    ASSERT_OK(fa_layer_init(&local, &d));
    for (int it = 0; it < 8; ++it) {
        make_rbatch(&r, rng_int(8, 12), 16, 900, 3, 300, 18);
        fa_metadata md;
        ASSERT_OK(fa_builder_build(b, &r.b, (it & 1) ? 256 : 0, &md));
        int32_t T = r.qsl[r.n];
        int64_t qs[3] = {T, 16, 128}, ks[3] = {T, 4, 128}, cs[5] = {2, 64, 16, 4, 128};
        fa_tensor tq = fa_tensor_make(q, FA_DTYPE_F16, 3, qs), to = fa_tensor_make(o, FA_DTYPE_F16, 3, qs);
        fa_tensor tk = fa_tensor_make(kk, FA_DTYPE_F16, 3, ks), tv = fa_tensor_make(vv, FA_DTYPE_F16, 3, ks);
        fa_tensor tc = fa_tensor_make(cache, FA_DTYPE_F16, 5, cs);
        ASSERT_OK(fa_forward(&plain, &BE, &tq, &tk, &tv, &tc, &md, &to));
        ASSERT_OK(fa_forward(&local, &BE, &tq, &tk, &tv, &tc, &md, &to));
    }
    cr_assert_eq(CNT.alloc, allocs, "build/forward allocated %d times", CNT.alloc - allocs);
    cr_assert_eq(CNT.sync, 0, "build/forward synchronised %d times", CNT.sync);
    cr_assert_eq(CNT.copy_d2h, 0, "build/forward copied device-to-host %d times", CNT.copy_d2h);
    cr_assert_gt(CNT.attn, 0);
    fa_builder_destroy(b);
}

/* ---------------------------------------------------------------------------------------- */
/* build: lengths of a non-causal (cross-attention) batch */

Test(build, noncausal_batch_may_have_more_queries_than_keys, .init = setup)
{
    fa_config c = base_cfg();
    fa_builder *b = make_builder(&c, NULL);
    int32_t qsl[3] = {0, 40, 41}, seq[2] = {16, 16}, bt[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    fa_batch batch;
    fa_metadata md;
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = 2;
    batch.query_start_loc = qsl;
    batch.seq_lens = seq;
    batch.block_table = bt;
    batch.block_table_stride = 4;
    batch.causal = 0;                 /* 40 decoder queries over a 16-token encoder output */
    ASSERT_OK(fa_builder_build(b, &batch, 0, &md));
    cr_assert_eq(md.max_query_len, 40);
    cr_assert_eq(md.max_seq_len, 16);
    batch.causal = 1;                 /* the same lengths in a causal batch are an error */
    cr_assert_eq(fa_builder_build(b, &batch, 0, &md), FA_ERR_INVALID_ARG);
    cr_assert(strstr(fa_last_error(), "seq_lens[0] = 16") != NULL, "%s", fa_last_error());
    seq[0] = -1;                      /* negative lengths are an error either way */
    batch.causal = 0;
    cr_assert_eq(fa_builder_build(b, &batch, 0, &md), FA_ERR_INVALID_ARG);
    cr_assert(strstr(fa_last_error(), "seq_lens[0] = -1") != NULL, "%s", fa_last_error());
    fa_builder_destroy(b);
}

/* fa_metadata_describe: the plan of a step in words; truncation; stale metadata refused. */
Test(build, metadata_describe, .init = setup)
{
    rng_seed(0xDE5C);
    fa_config c = base_cfg();
    fa_builder *b = make_builder(&c, NULL);
    static rbatch r;
    make_rbatch(&r, 5, 16, 1000, 40, 0, 0);
    fa_metadata md, md2;
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md));
    char text[2048], small[24];
    size_t need = 0;
    ASSERT_OK(fa_metadata_describe(&md, text, sizeof text, &need));
    cr_assert_eq(need, strlen(text) + 1, "needed %zu for \"%s\"", need, text);
    char want[64];
    snprintf(want, sizeof want, "%d requests, %d tokens", r.n, r.qsl[r.n]);
    cr_assert(strstr(text, want) != NULL, "%s", text);
    cr_assert(strstr(text, "plain: ") != NULL && strstr(text, "per request [") != NULL, "%s", text);
    cr_assert(strstr(text, "cascade") == NULL, "no cascade step: %s", text);
    /* truncated: NUL-terminated, the length still counted */
    size_t need2 = 0;
    ASSERT_OK(fa_metadata_describe(&md, small, sizeof small, &need2));
    cr_assert_eq(need2, need);
    cr_assert_eq(strlen(small), sizeof small - 1);
    cr_assert(strncmp(small, text, sizeof small - 1) == 0);
    ASSERT_OK(fa_metadata_describe(&md, NULL, 0, &need2));
    cr_assert_eq(need2, need, "a size query");
    cr_assert_eq(fa_metadata_describe(&md, NULL, 5, NULL), FA_ERR_INVALID_ARG);
    cr_assert_eq(fa_metadata_describe(NULL, text, sizeof text, NULL), FA_ERR_INVALID_ARG);
    /* an earlier build's metadata is refused, as fa_forward refuses it */
    ASSERT_OK(fa_builder_build(b, &r.b, 0, &md2));
    cr_assert_eq(fa_metadata_describe(&md, text, sizeof text, NULL), FA_ERR_INVALID_ARG);
    cr_assert(strstr(fa_last_error(), "build 1") != NULL, "%s", fa_last_error());
    ASSERT_OK(fa_metadata_describe(&md2, text, sizeof text, NULL));
    fa_builder_destroy(b);
}

/* The version: the header's macros agree, and the implementation reports the same string. */
Test(build, version_query)
{
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", FLASHATTN_VERSION_MAJOR, FLASHATTN_VERSION_MINOR,
             FLASHATTN_VERSION_PATCH);
    cr_assert_str_eq(v, FLASHATTN_VERSION_STRING);
    cr_assert_str_eq(fa_version(), FLASHATTN_VERSION_STRING);
}

/* sliding_window -1, the engines' usual "none", is accepted as no window; -2 is not. */
Test(build, sliding_window_minus_one_is_none)
{
    fa_layer_desc d = test_desc(8, 2, 64, FA_DTYPE_F32);
    fa_layer L;
    d.sliding_window = -1;
    ASSERT_OK(fa_layer_init(&L, &d));
    cr_assert_eq(L.window.left, -1);
    cr_assert_eq(L.window.right, -1);
    cr_assert_eq(L.desc.sliding_window, 0);
    d.sliding_window = -2;
    cr_assert_eq(fa_layer_init(&L, &d), FA_ERR_INVALID_ARG);
    cr_assert(strstr(fa_last_error(), "sliding_window -2") != NULL, "%s", fa_last_error());
}
