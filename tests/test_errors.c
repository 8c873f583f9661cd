/* Bad input for every public function: an error status, a message naming the argument and its
   value (fa_last_error), nothing written to outputs, no crash. Uses a host-memory stub backend
   (no device work), so it tests the header alone. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---------------------------------------------------------------------------------------- */
/* checking helpers */

#define E_INV (1u << FA_ERR_INVALID_ARG)
#define E_UNS (1u << FA_ERR_UNSUPPORTED)
#define E_WS (1u << FA_ERR_WORKSPACE)

/* names: '|'-separated alternatives of the argument's name (one must occur in the message);
   values: '|'-separated alternatives of the value's text (NULL: not checked). */
static int contains_one(const char *msg, const char *alts)
{
    char buf[256];
    const char *s = alts;
    while (*s) {
        const char *e = strchr(s, '|');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (n && strstr(msg, buf)) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

static void check_err(fa_status st, unsigned mask, const char *names, const char *values, const char *expr,
                      int line)
{
    const char *msg = fa_last_error();
    cr_assert_neq(st, FA_OK, "line %d: %s unexpectedly succeeded", line, expr);
    cr_assert(mask & (1u << st), "line %d: %s -> %d (%s), expected another error class; msg: %s", line, expr,
              (int)st, fa_status_string(st), msg);
    cr_assert(msg != NULL && msg[0] != 0, "line %d: %s failed with an empty fa_last_error()", line, expr);
    if (names)
        cr_assert(contains_one(msg, names), "line %d: %s: message \"%s\" does not name the argument (%s)",
                  line, expr, msg, names);
    if (values)
        cr_assert(contains_one(msg, values), "line %d: %s: message \"%s\" does not give the value (%s)", line,
                  expr, msg, values);
}
#define EXPECT_ERR(expr, mask, names, values) check_err((expr), (mask), (names), (values), #expr, __LINE__)

#define ASSERT_UNCHANGED(ptr, snap, n, what) \
    cr_assert(memcmp((ptr), (snap), (n)) == 0, "%s was written by a failing call", what)

/* ---------------------------------------------------------------------------------------- */
/* a host-memory stub backend that counts calls and writes nothing but what copy/fill must */

typedef struct stub_ctx {
    int calls[16];
    int total;
} stub_ctx;
enum { OP_CACHE, OP_ATTN, OP_MERGE, OP_DCP, OP_COPY, OP_FILL, OP_ALLOC, OP_FREE, OP_SYNC };

static fa_status st_cache(void *c, const fa_cache_write_args *a)
{
    (void)a;
    ((stub_ctx *)c)->calls[OP_CACHE]++;
    ((stub_ctx *)c)->total++;
    return FA_OK;
}
static fa_status st_attn(void *c, const fa_attn_args *a)
{
    (void)a;
    ((stub_ctx *)c)->calls[OP_ATTN]++;
    ((stub_ctx *)c)->total++;
    return FA_OK;
}
static fa_status st_merge(void *c, const fa_merge_args *a)
{
    (void)a;
    ((stub_ctx *)c)->calls[OP_MERGE]++;
    ((stub_ctx *)c)->total++;
    return FA_OK;
}
static fa_status st_dcp(void *c, const fa_dcp_correct_args *a)
{
    (void)a;
    ((stub_ctx *)c)->calls[OP_DCP]++;
    ((stub_ctx *)c)->total++;
    return FA_OK;
}
static fa_status st_copy(void *c, void *dst, const void *src, size_t n, fa_copy_kind k)
{
    (void)k;
    ((stub_ctx *)c)->calls[OP_COPY]++;
    ((stub_ctx *)c)->total++;
    if (n) memmove(dst, src, n);
    return FA_OK;
}
static fa_status st_fill(void *c, void *dst, size_t pitch, int value, size_t w, size_t rows)
{
    ((stub_ctx *)c)->calls[OP_FILL]++;
    ((stub_ctx *)c)->total++;
    for (size_t r = 0; r < rows; ++r) memset((char *)dst + r * pitch, value, w);
    return FA_OK;
}
static fa_status st_alloc(void *c, size_t n, void **p)
{
    ((stub_ctx *)c)->calls[OP_ALLOC]++;
    *p = calloc(1, n ? n : 1);
    return *p ? FA_OK : FA_ERR_OUT_OF_MEMORY;
}
static fa_status st_free(void *c, void *p)
{
    ((stub_ctx *)c)->calls[OP_FREE]++;
    free(p);
    return FA_OK;
}
static fa_status st_sync(void *c)
{
    (void)c;
    return FA_OK;
}

static stub_ctx g_ctx;
static fa_backend g_be;

static void make_stub(fa_backend *be, stub_ctx *ctx, const char *name)
{
    memset(be, 0, sizeof *be);
    memset(ctx, 0, sizeof *ctx);
    be->api_version = FA_BACKEND_API_VERSION;
    be->caps = *test_caps();
    be->name = name;
    be->ctx = ctx;
    be->ops.reshape_and_cache = st_cache;
    be->ops.attention = st_attn;
    be->ops.merge_states = st_merge;
    be->ops.dcp_correct = st_dcp;
    be->ops.copy = st_copy;
    be->ops.fill = st_fill;
    be->ops.alloc = st_alloc;
    be->ops.free = st_free;
    be->ops.synchronize = st_sync;
    snprintf(be->info.name, sizeof be->info.name, "%s", name);
    be->info.num_sms = 132;
}

/* ---------------------------------------------------------------------------------------- */
/* a valid scenario: Hq 8, Hkv 2, D 64, bs 16, F16; 3 requests q = [1,5,2] (T = 8, T_pad 10),
   seq_lens [40,37,30] (contexts [39,32,28]) */

enum { HQ = 8, HKV = 2, D = 64, BS = 16, NB = 32, TPAD = 10, T = 8, NREQ = 3, BTS = 8 };

static fa_config base_cfg(void) { return test_cfg(HQ, HKV, D, FA_DTYPE_F16, BS, 16, 256); }

static fa_layer_desc base_desc(void) { return test_desc(HQ, HKV, D, FA_DTYPE_F16); }

static int32_t g_qsl[NREQ + 1] = {0, 1, 6, 8};
static int32_t g_seq[NREQ] = {40, 37, 30};
static int32_t g_bt[NREQ * BTS];
static int64_t g_slots[TPAD];
static uint16_t g_q[TPAD * HQ * D], g_k[TPAD * HKV * D], g_v[TPAD * HKV * D], g_out[TPAD * HQ * D];
static uint16_t g_cache[2 * NB * BS * HKV * D];

static fa_batch base_batch(void)
{
    for (int r = 0; r < NREQ; ++r)
        for (int c = 0; c < BTS; ++c) g_bt[r * BTS + c] = (r * BTS + c) % NB;
    /* shared prefix block: column 0 equal for all rows */
    for (int r = 0; r < NREQ; ++r) g_bt[r * BTS] = 5;
    int t = 0;
    for (int r = 0; r < NREQ; ++r)
        for (int i = 0; i < g_qsl[r + 1] - g_qsl[r]; ++i, ++t) {
            int p = g_seq[r] - (g_qsl[r + 1] - g_qsl[r]) + i;
            g_slots[t] = (int64_t)g_bt[r * BTS + p / BS] * BS + p % BS;
        }
    for (; t < TPAD; ++t) g_slots[t] = -1;
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = NREQ;
    b.num_actual_tokens = T;
    b.query_start_loc = g_qsl;
    b.seq_lens = g_seq;
    b.block_table = g_bt;
    b.block_table_stride = BTS;
    b.max_blocks = BTS;
    b.block_table_host = g_bt;
    b.slot_mapping = g_slots;
    b.causal = 1;
    return b;
}

static fa_tensor t3(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return fa_tensor_make(data, dt, 3, s);
}
static fa_tensor cache_tensor(void)
{
    int64_t s[5] = {2, NB, BS, HKV, D};
    return fa_tensor_make(g_cache, FA_DTYPE_F16, 5, s);
}

typedef struct scen {
    fa_builder *b;
    fa_layer layer;
    fa_metadata md;
    fa_tensor q, k, v, cache, out;
} scen;

static void scen_setup(scen *s, const fa_config *cfg, const fa_layer_desc *desc, int32_t prefix)
{
    make_stub(&g_be, &g_ctx, "errstub");
    memset(s, 0, sizeof *s);
    fa_config c = cfg ? *cfg : base_cfg();
    ASSERT_OK(fa_builder_create(&g_be, &c, NULL, &s->b));
    fa_layer_desc d = desc ? *desc : base_desc();
    ASSERT_OK(fa_layer_init(&s->layer, &d));
    fa_batch bt = base_batch();
    ASSERT_OK(fa_builder_build(s->b, &bt, prefix, &s->md));
    s->q = t3(g_q, FA_DTYPE_F16, TPAD, HQ, D);
    s->k = t3(g_k, FA_DTYPE_F16, TPAD, HKV, D);
    s->v = t3(g_v, FA_DTYPE_F16, TPAD, HKV, D);
    s->cache = cache_tensor();
    s->out = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D);
    for (size_t i = 0; i < sizeof g_out / 2; ++i) g_out[i] = 0x3c01;
    for (size_t i = 0; i < sizeof g_cache / 2; ++i) g_cache[i] = (uint16_t)(0x3000 + (i & 0xff));
}

static uint16_t snap_out[TPAD * HQ * D];
static uint16_t snap_cache[2 * NB * BS * HKV * D];

/* forward must fail, name the argument, touch neither out nor the cache and call no op */
static void forward_fails(scen *s, const fa_layer *layer, const fa_backend *be, const fa_tensor *q,
                          const fa_tensor *k, const fa_tensor *v, const fa_tensor *cache,
                          const fa_metadata *md, const fa_tensor *out, unsigned mask, const char *names,
                          const char *values, int line)
{
    (void)s;
    memcpy(snap_out, g_out, sizeof g_out);
    memcpy(snap_cache, g_cache, sizeof g_cache);
    int before = g_ctx.total;
    fa_status st = fa_forward(layer, be, q, k, v, cache, md, out);
    check_err(st, mask, names, values, "fa_forward", line);
    ASSERT_UNCHANGED(g_out, snap_out, sizeof g_out, "out");
    ASSERT_UNCHANGED(g_cache, snap_cache, sizeof g_cache, "kv_cache");
    cr_assert_eq(g_ctx.total, before, "line %d: backend ops were called (%d) before the error", line,
                 g_ctx.total - before);
}
#define FORWARD_FAILS(s, layer, be, q, k, v, c, md, out, mask, names, values) \
    forward_fails((s), (layer), (be), (q), (k), (v), (c), (md), (out), (mask), (names), (values), __LINE__)

/* ---------------------------------------------------------------------------------------- */
/* basics */

Test(basics, status_strings)
{
    const fa_status all[] = {FA_OK,          FA_ERR_INVALID_ARG,  FA_ERR_UNSUPPORTED, FA_ERR_WORKSPACE,
                             FA_ERR_BACKEND, FA_ERR_OUT_OF_MEMORY};
    for (size_t i = 0; i < 6; ++i) {
        const char *s = fa_status_string(all[i]);
        cr_assert(s && s[0], "status %d has no description", (int)all[i]);
        for (size_t j = 0; j < i; ++j)
            cr_assert_str_neq(s, fa_status_string(all[j]), "statuses %d and %d share a description",
                              (int)all[i], (int)all[j]);
    }
    const char *u = fa_status_string((fa_status)77);
    cr_assert(u && u[0], "unknown status gives a string");
    u = fa_status_string((fa_status)-1);
    cr_assert(u != NULL);
}

Test(basics, last_error_cleared_by_success)
{
    cr_assert_str_eq(fa_last_error(), "", "nothing failed yet");
    int64_t s[5];
    EXPECT_ERR(fa_kv_cache_shape(10, -24, 8, 128, s), E_INV | E_UNS, "block_size", "-24");
    ASSERT_OK(fa_kv_cache_shape(10, 16, 8, 128, s));
    cr_assert_str_eq(fa_last_error(), "", "after a success: \"%s\"", fa_last_error());
    fa_config in = base_cfg(), out;
    in.model.head_size = 100;
    EXPECT_ERR(fa_config_resolve(&in, &out), E_INV | E_UNS, "head_size", "100");
    in.model.head_size = 128;
    ASSERT_OK(fa_config_resolve(&in, &out));
    cr_assert_str_eq(fa_last_error(), "");
}

static void *other_thread(void *arg)
{
    (void)arg;
    const char *m = fa_last_error();
    return (void *)(uintptr_t)(m && m[0] == 0);
}

Test(basics, last_error_is_per_thread)
{
    int64_t s[5];
    EXPECT_ERR(fa_kv_cache_shape(10, -24, 8, 128, s), E_INV | E_UNS, "block_size", "-24");
    pthread_t th;
    void *res = NULL;
    cr_assert_eq(pthread_create(&th, NULL, other_thread, NULL), 0);
    pthread_join(th, &res);
    cr_assert(res != NULL, "another thread sees this thread's error");
    cr_assert(strstr(fa_last_error(), "24"), "this thread's message survives");
}

Test(basics, dtype_and_tensor_bad_input)
{
    cr_assert_eq(fa_dtype_size((fa_dtype)99), 0);
    cr_assert_eq(fa_dtype_size((fa_dtype)-1), 0);
    cr_assert_not_null(fa_dtype_name((fa_dtype)99));
    cr_assert_not_null(fa_dtype_name((fa_dtype)-1));
    int64_t shape[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    fa_tensor t = fa_tensor_make(NULL, FA_DTYPE_F16, 7, shape); /* rank > FA_MAX_RANK: no overflow */
    cr_assert_leq(t.rank, FA_MAX_RANK);
    t = fa_tensor_make(NULL, FA_DTYPE_F16, -1, shape);
    cr_assert_leq(t.rank, FA_MAX_RANK);
    t = fa_tensor_make(NULL, FA_DTYPE_F16, 2, NULL);
    cr_assert_leq(t.rank, FA_MAX_RANK);
}

/* ---------------------------------------------------------------------------------------- */
/* config */

static void resolve_fails(fa_config in, unsigned mask, const char *names, const char *values, int line)
{
    fa_config out;
    memset(&out, 0xAB, sizeof out);
    fa_config snap = out;
    fa_status st = fa_config_resolve(&in, &out);
    check_err(st, mask, names, values, "fa_config_resolve", line);
    cr_assert(memcmp(&out, &snap, sizeof out) == 0, "line %d: config written on error", line);
}
#define RESOLVE_FAILS(in, mask, names, values) resolve_fails((in), (mask), (names), (values), __LINE__)

Test(config, resolve_bad_values)
{
    fa_config c;
    c = base_cfg();
    c.model.head_size = 100;
    RESOLVE_FAILS(c, E_INV | E_UNS, "head_size", "100");
    c = base_cfg();
    c.model.head_size = 264;
    RESOLVE_FAILS(c, E_INV | E_UNS, "head_size", "264");
    c = base_cfg();
    c.model.head_size = 0;
    RESOLVE_FAILS(c, E_INV, "head_size", "0");
    c = base_cfg();
    c.cache.block_size = -24;
    RESOLVE_FAILS(c, E_INV | E_UNS, "block_size", "-24");
    c = base_cfg();
    c.cache.block_size = -16;
    RESOLVE_FAILS(c, E_INV | E_UNS, "block_size", "-16");
    c = base_cfg();
    c.model.hybrid_mamba_f32 = 1;
    c.cache.block_size = 48;
    RESOLVE_FAILS(c, E_INV | E_UNS, "block_size", "48");
    c = base_cfg();
    c.model.num_heads_q = 28;
    c.model.num_heads_kv = 12;
    RESOLVE_FAILS(c, E_INV | E_UNS, "num_heads", "28|12");
    c = base_cfg();
    c.model.num_heads_q = 0;
    RESOLVE_FAILS(c, E_INV, "num_heads_q", "0");
    c = base_cfg();
    c.model.num_heads_q = -4;
    RESOLVE_FAILS(c, E_INV, "num_heads_q", "-4");
    c = base_cfg();
    c.model.num_heads_kv = -2;
    RESOLVE_FAILS(c, E_INV, "num_heads_kv", "-2");
    c = base_cfg();
    c.model.dtype = FA_DTYPE_I32;
    RESOLVE_FAILS(c, E_INV | E_UNS, "dtype", "i32|I32|int32|5");
    c = base_cfg();
    c.model.dtype = (fa_dtype)99;
    RESOLVE_FAILS(c, E_INV | E_UNS, "dtype", "99");
    c = base_cfg();
    c.cache.cache_dtype = (fa_cache_dtype)9;
    RESOLVE_FAILS(c, E_INV | E_UNS, "cache_dtype", "9");
    c = base_cfg();
    c.cache.layout = (fa_kv_layout)7;
    RESOLVE_FAILS(c, E_INV | E_UNS, "layout", "7");
    c = base_cfg();
    c.parallel.dcp_world_size = 4;
    c.parallel.dcp_rank = 7;
    RESOLVE_FAILS(c, E_INV, "dcp_rank", "7");
    c = base_cfg();
    c.parallel.dcp_world_size = 4;
    c.parallel.dcp_rank = -1;
    RESOLVE_FAILS(c, E_INV, "dcp_rank", "-1");
    c = base_cfg();
    c.parallel.dcp_world_size = -2;
    RESOLVE_FAILS(c, E_INV, "dcp_world_size", "-2");
    c = base_cfg();
    c.parallel.dcp_world_size = 2;
    c.parallel.cp_kv_cache_interleave_size = 12;
    RESOLVE_FAILS(c, E_INV | E_UNS, "interleave", "12");
    c = base_cfg();
    c.parallel.dcp_world_size = 2;
    c.parallel.cp_kv_cache_interleave_size = 32;
    RESOLVE_FAILS(c, E_INV | E_UNS, "interleave", "32"); /* I <= bs */
    c = base_cfg();
    c.scheduler.attention_chunk_size = 40;
    RESOLVE_FAILS(c, E_INV | E_UNS, "chunk", "40");
    c = base_cfg();
    c.scheduler.attention_chunk_size = -32;
    RESOLVE_FAILS(c, E_INV, "chunk", "-32");
    c = base_cfg();
    c.scheduler.max_num_seqs = -1;
    RESOLVE_FAILS(c, E_INV, "max_num_seqs", "-1");
    c = base_cfg();
    c.scheduler.max_num_batched_tokens = -5;
    RESOLVE_FAILS(c, E_INV, "max_num_batched_tokens", "-5");
    c = base_cfg();
    c.compilation.max_num_splits = -3;
    RESOLVE_FAILS(c, E_INV, "max_num_splits", "-3");
}

Test(config, resolve_null)
{
    fa_config c = base_cfg(), out;
    EXPECT_ERR(fa_config_resolve(NULL, &out), E_INV, NULL, NULL);
    EXPECT_ERR(fa_config_resolve(&c, NULL), E_INV, NULL, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* caps */

Test(caps, shape_stride_bad_input)
{
    int64_t s[5] = {9, 9, 9, 9, 9}, keep[5] = {9, 9, 9, 9, 9};
    EXPECT_ERR(fa_kv_cache_shape(10, -24, 8, 128, s), E_INV | E_UNS, "block_size", "-24");
    EXPECT_ERR(fa_kv_cache_shape(-3, 16, 8, 128, s), E_INV, "num_blocks", "-3");
    EXPECT_ERR(fa_kv_cache_shape(10, 16, 0, 128, s), E_INV, "num_heads_kv", "0");
    EXPECT_ERR(fa_kv_cache_shape(10, 16, 8, 128, NULL), E_INV, "shape_out|shape", NULL);
    ASSERT_UNCHANGED(s, keep, sizeof s, "shape_out");

    int32_t o[6] = {7, 7, 7, 7, 7, 7}, okeep[6] = {7, 7, 7, 7, 7, 7}, r = 42;
    EXPECT_ERR(fa_kv_cache_stride_order((fa_kv_layout)7, 0, o, &r), E_INV | E_UNS, "layout", "7");
    EXPECT_ERR(fa_kv_cache_stride_order(FA_LAYOUT_NHD, 0, NULL, &r), E_INV, "order_out|order", NULL);
    EXPECT_ERR(fa_kv_cache_stride_order(FA_LAYOUT_NHD, 0, o, NULL), E_INV, "rank_out|rank", NULL);
    ASSERT_UNCHANGED(o, okeep, sizeof o, "order_out");
    cr_assert_eq(r, 42);

    EXPECT_ERR(fa_kv_cache_strides((fa_kv_layout)5, 10, 16, 8, 128, s), E_INV | E_UNS, "layout", "5");
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_HND, 10, 0, 8, 128, s), E_INV | E_UNS, "block_size", "0");
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_HND, -1, 16, 8, 128, s), E_INV, "num_blocks", "-1");
    EXPECT_ERR(fa_kv_cache_strides(FA_LAYOUT_HND, 10, 16, 8, 128, NULL), E_INV, "strides_out|strides", NULL);
    ASSERT_UNCHANGED(s, keep, sizeof s, "strides_out");
}

Test(caps, queries_reject_bad_values)
{
    cr_assert_eq(fa_supports_head_size(100), 0);
    cr_assert_eq(fa_supports_head_size(-8), 0);
    cr_assert_eq(fa_supports_block_size(0, 0), 0);
    cr_assert_eq(fa_supports_block_size(-16, 0), 0);
    cr_assert_eq(fa_supports_block_size(48, 1), 0);
    cr_assert_eq(fa_supports_kv_cache_dtype((fa_cache_dtype)9), 0);
    cr_assert_eq(fa_supports_compute_capability(7, 5), 0);
    cr_assert_eq(fa_supports_compute_capability(-1, 0), 0);
    fa_block_sizes b = fa_supported_kernel_block_sizes(5); /* any non-zero = hybrid */
    cr_assert(b.count <= 4);
    (void)fa_cache_storage_dtype((fa_cache_dtype)9, FA_DTYPE_BF16); /* no crash */
    cr_assert_not_null(fa_check_combination(NULL, 100, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0));
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 0, 0, 0));
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_BF16, (fa_cache_dtype)9, 16, 0, 0));
    cr_assert_not_null(fa_check_combination(NULL, 128, (fa_dtype)99, FA_CACHE_AUTO, 16, 0, 0));
    {   /* a device older than 8.0 */
        fa_backend old;
        memset(&old, 0, sizeof old);
        old.caps = *test_caps();
        old.info.cc_major = 7;
        cr_assert_not_null(fa_check_combination(&old, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0));
        old.info.cc_major = 214748365; /* major * 10 used to overflow */
        cr_assert_null(fa_check_combination(&old, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0));
        cr_assert_eq(fa_supports_compute_capability(214748365, 0), 1);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* plan */

Test(plan, windows_bad_input)
{
    fa_window w = fa_sliding_window_config(64, (fa_attn_type)9); /* no crash */
    (void)w;
    fa_window lw[2] = {{3, 0}, {3, 0}}, out = {11, 12};
    int en = 13;
    EXPECT_ERR(fa_aot_sliding_window(lw, -1, &out, &en), E_INV, "n", "-1");
    EXPECT_ERR(fa_aot_sliding_window(NULL, 2, &out, &en), E_INV, "layer_windows|windows", NULL);
    EXPECT_ERR(fa_aot_sliding_window(lw, 2, NULL, &en), E_INV, "out", NULL);
    EXPECT_ERR(fa_aot_sliding_window(lw, 2, &out, NULL), E_INV, "aot_enabled", NULL);
    cr_assert(out.left == 11 && out.right == 12 && en == 13, "outputs written on error");
}

Test(plan, cascade_heuristic_degenerate_inputs)
{
    int32_t ql[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* no crash (no division by zero) and no cascade */
    cr_assert_eq(fa_use_cascade_attention(1024, ql, 8, 32, 0, 0, 0, 0, 132, 1), 0, "num_heads_kv 0");
    cr_assert_eq(fa_use_cascade_attention(1024, ql, 8, 32, 8, 0, 0, 0, 0, 1), 0, "num_sms 0");
    cr_assert_eq(fa_use_cascade_attention(1024, NULL, 8, 32, 8, 0, 0, 0, 132, 1), 0, "query_lens NULL");
    cr_assert_eq(fa_use_cascade_attention(1024, ql, -8, 32, 8, 0, 0, 0, 132, 1), 0, "num_reqs -8");
    cr_assert_eq(fa_use_cascade_attention(1024, ql, 8, 30, 8, 0, 0, 0, 132, 1), 0,
                 "Hq not a multiple of Hkv");
}

static int32_t cq_comp[8] = {900, 901, 902, 903, 904, 905, 906, 907};
static int32_t cq_ql[8] = {1, 1, 1, 1, 1, 1, 1, 1};
static fa_cascade_query good_cq(void)
{
    fa_cascade_query q;
    memset(&q, 0, sizeof q);
    q.num_common_prefix_blocks = 32;
    q.block_size = 16;
    q.num_computed_tokens = cq_comp;
    q.query_lens = cq_ql;
    q.num_reqs = 8;
    q.num_heads_q = 16;
    q.num_heads_kv = 16;
    q.num_sms = 132;
    q.dcp_world_size = 1;
    return q;
}

Test(plan, cascade_prefix_len_bad_input)
{
    int32_t p = -77;
    fa_cascade_query q = good_cq();
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 512);
    p = -77;
    EXPECT_ERR(fa_cascade_prefix_len(NULL, &p), E_INV, NULL, NULL);
    q = good_cq();
    EXPECT_ERR(fa_cascade_prefix_len(&q, NULL), E_INV, "prefix_len_out|prefix_len", NULL);
    q = good_cq();
    q.block_size = 0;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV | E_UNS, "block_size", "0");
    q = good_cq();
    q.num_computed_tokens = NULL;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV, "num_computed_tokens", NULL);
    q = good_cq();
    q.query_lens = NULL;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV, "query_lens", NULL);
    q = good_cq();
    q.num_reqs = -2;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV, "num_reqs", "-2");
    q = good_cq();
    q.num_common_prefix_blocks = -3;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV, "num_common_prefix_blocks", "-3");
    int32_t neg[8] = {900, 901, -5, 903, 904, 905, 906, 907};
    q = good_cq();
    q.num_computed_tokens = neg;
    EXPECT_ERR(fa_cascade_prefix_len(&q, &p), E_INV, "num_computed_tokens", "-5");
    cr_assert_eq(p, -77, "prefix_len_out written on error");
}

Test(plan, cascade_block_tables_bad_input)
{
    int32_t bt[40] = {0};
    const int32_t *sent = (const int32_t *)(uintptr_t)0x40, *pre = sent, *suf = sent;
    EXPECT_ERR(fa_cascade_block_tables(bt, 10, 40, 16, &pre, &suf), E_INV, "common_prefix_len", "40");
    EXPECT_ERR(fa_cascade_block_tables(bt, 10, -16, 16, &pre, &suf), E_INV, "common_prefix_len", "-16");
    EXPECT_ERR(fa_cascade_block_tables(bt, 10, 32, 0, &pre, &suf), E_INV, "block_size", "0");
    EXPECT_ERR(fa_cascade_block_tables(NULL, 10, 32, 16, &pre, &suf), E_INV, "block_table", NULL);
    EXPECT_ERR(fa_cascade_block_tables(bt, 1, 32, 16, &pre, &suf), E_INV, "row_stride|common_prefix_len",
               NULL);
    EXPECT_ERR(fa_cascade_block_tables(bt, 10, 32, 16, NULL, &suf), E_INV, "prefix_table", NULL);
    EXPECT_ERR(fa_cascade_block_tables(bt, 10, 32, 16, &pre, NULL), E_INV, "suffix_table", NULL);
    cr_assert(pre == sent && suf == sent, "outputs written on error");
}

Test(plan, local_count_bad_input)
{
    const int32_t qsl[4] = {0, 4, 14, 19}, seq[3] = {6, 17, 9};
    int32_t v = -9;
    EXPECT_ERR(fa_local_virtual_batches_count(0, qsl, seq, 3, &v), E_INV, "chunk_size", "0");
    EXPECT_ERR(fa_local_virtual_batches_count(-4, qsl, seq, 3, &v), E_INV, "chunk_size", "-4");
    const int32_t bad_qsl[4] = {0, 4, 2, 19};
    EXPECT_ERR(fa_local_virtual_batches_count(4, bad_qsl, seq, 3, &v), E_INV, "query_start_loc", NULL);
    const int32_t bad_qsl0[4] = {1, 4, 14, 19};
    EXPECT_ERR(fa_local_virtual_batches_count(4, bad_qsl0, seq, 3, &v), E_INV, "query_start_loc", "1");
    const int32_t short_seq[3] = {6, 7, 9}; /* 7 < query length 10 */
    EXPECT_ERR(fa_local_virtual_batches_count(4, qsl, short_seq, 3, &v), E_INV, "seq_lens", "7");
    EXPECT_ERR(fa_local_virtual_batches_count(4, NULL, seq, 3, &v), E_INV, "query_start_loc", NULL);
    EXPECT_ERR(fa_local_virtual_batches_count(4, qsl, NULL, 3, &v), E_INV, "seq_lens", NULL);
    EXPECT_ERR(fa_local_virtual_batches_count(4, qsl, seq, -1, &v), E_INV, "num_reqs", "-1");
    EXPECT_ERR(fa_local_virtual_batches_count(4, qsl, seq, 3, NULL), E_INV, "num_virtual_out|num_virtual",
               NULL);
    cr_assert_eq(v, -9, "num_virtual_out written on error");
}

Test(plan, local_make_bad_input)
{
    const int32_t qsl[4] = {0, 4, 14, 19}, seq[3] = {6, 17, 9};
    int32_t bt[30];
    for (int i = 0; i < 30; ++i) bt[i] = i;
    int32_t sq[8], cu[9], sk[8], btl[16];
    int32_t ksq[8], kcu[9], ksk[8], kbtl[16];
    memset(sq, 0x11, sizeof sq);
    memset(cu, 0x11, sizeof cu);
    memset(sk, 0x11, sizeof sk);
    memset(btl, 0x11, sizeof btl);
    memcpy(ksq, sq, sizeof sq);
    memcpy(kcu, cu, sizeof cu);
    memcpy(ksk, sk, sizeof sk);
    memcpy(kbtl, btl, sizeof btl);
    fa_local_batches lb;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = sq;
    lb.cu_seqlens_q = cu;
    lb.seqused_k = sk;
    lb.block_table = btl;
    lb.num_virtual = -5;
    EXPECT_ERR(fa_make_local_virtual_batches(6, 4, qsl, seq, 3, bt, 10, 10, 8, &lb), E_INV | E_UNS,
               "chunk_size", "6");
    EXPECT_ERR(fa_make_local_virtual_batches(4, 0, qsl, seq, 3, bt, 10, 10, 8, &lb), E_INV, "block_size",
               "0");
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 10, 10, 7, &lb), E_WS | E_INV, "capacity",
               "7");
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 10, 0, 8, &lb), E_INV, "max_blocks", "0");
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 5, 10, 8, &lb), E_INV,
               "row_stride|max_blocks", "5|10");
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, NULL, 10, 10, 8, &lb), E_INV, "block_table",
               NULL);
    const int32_t short_seq[3] = {6, 7, 9};
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, short_seq, 3, bt, 10, 10, 8, &lb), E_INV, "seq_lens",
               "7");
    const int32_t bad_qsl[4] = {0, 4, 2, 19};
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, bad_qsl, seq, 3, bt, 10, 10, 8, &lb), E_INV,
               "query_start_loc", NULL);
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 10, 10, 8, NULL), E_INV, "out", NULL);
    fa_local_batches nul = lb;
    nul.cu_seqlens_q = NULL;
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 10, 10, 8, &nul), E_INV, "cu_seqlens_q",
               NULL);
    nul = lb;
    nul.block_table = NULL;
    EXPECT_ERR(fa_make_local_virtual_batches(4, 2, qsl, seq, 3, bt, 10, 10, 8, &nul), E_INV, "block_table",
               NULL);
    ASSERT_UNCHANGED(sq, ksq, sizeof sq, "seqlens_q");
    ASSERT_UNCHANGED(cu, kcu, sizeof cu, "cu_seqlens_q");
    ASSERT_UNCHANGED(sk, ksk, sizeof sk, "seqused_k");
    ASSERT_UNCHANGED(btl, kbtl, sizeof btl, "block_table");
    cr_assert_eq(lb.num_virtual, -5, "num_virtual written on error");
}

Test(plan, dcp_bad_input)
{
    /* the int-returning form: no crash (no division by zero) */
    (void)fa_dcp_local_seq_len(10, 0, 0, 1);
    (void)fa_dcp_local_seq_len(10, 2, 0, 0);
    (void)fa_dcp_local_seq_len(10, 2, 5, 1);
    (void)fa_dcp_local_seq_len(-10, 2, 0, 1);
    int32_t lens[3] = {10, 20, 30}, out[3] = {-1, -1, -1}, keep[3] = {-1, -1, -1};
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, 3, 0, 0, 1, out), E_INV, "world_size", "0");
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, 3, 2, 3, 1, out), E_INV, "rank", "3");
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, 3, 2, -1, 1, out), E_INV, "rank", "-1");
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, 3, 2, 0, 0, out), E_INV, "interleave", "0");
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, -3, 2, 0, 1, out), E_INV, "n", "-3");
    EXPECT_ERR(fa_dcp_local_seq_lens(NULL, 3, 2, 0, 1, out), E_INV, "seq_lens", NULL);
    EXPECT_ERR(fa_dcp_local_seq_lens(lens, 3, 2, 0, 1, NULL), E_INV, "out", NULL);
    int32_t neg[3] = {10, -5, 30};
    EXPECT_ERR(fa_dcp_local_seq_lens(neg, 3, 2, 0, 1, out), E_INV, "seq_lens", "-5");
    ASSERT_UNCHANGED(out, keep, sizeof out, "out");

    const int32_t row[3] = {7, 3, 9};
    int32_t req[4] = {0, 0, 0, 0}, pos[4] = {0, 1, 2, 3};
    int64_t sm[4] = {5, 5, 5, 5}, skeep[4] = {5, 5, 5, 5};
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, pos, 4, 2, 0, 3, sm), E_INV | E_UNS, "interleave",
               "3");
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, pos, 4, 2, 0, 32, sm), E_INV | E_UNS, "interleave",
               "32");
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, pos, 4, 2, 2, 1, sm), E_INV, "rank", "2");
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, pos, 4, 0, 0, 1, sm), E_INV, "world_size", "0");
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 0, req, pos, 4, 2, 0, 1, sm), E_INV, "block_size", "0");
    EXPECT_ERR(fa_dcp_slot_mapping(NULL, 3, 3, 16, req, pos, 4, 2, 0, 1, sm), E_INV, "block_table", NULL);
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, NULL, pos, 4, 2, 0, 1, sm), E_INV, "req_of_token", NULL);
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, NULL, 4, 2, 0, 1, sm), E_INV, "positions", NULL);
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, pos, 4, 2, 0, 1, NULL), E_INV, "slot_mapping", NULL);
    int32_t far[4] = {0, 1, 96, 3}; /* 96 / (16*2) = column 3 >= max_blocks 3 */
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, far, 4, 2, 0, 1, sm), E_INV, "position", "96");
    int32_t negp[4] = {0, -2, 2, 3};
    EXPECT_ERR(fa_dcp_slot_mapping(row, 3, 3, 16, req, negp, 4, 2, 0, 1, sm), E_INV, "position", "-2");
    ASSERT_UNCHANGED(sm, skeep, sizeof sm, "slot_mapping_out");
}

Test(plan, splits_bad_input)
{
    /* the int-returning heuristic: no crash, a count >= 1 */
    cr_assert_geq(fa_num_splits_heuristic(10, 0, 64, 32), 1);
    cr_assert_geq(fa_num_splits_heuristic(10, 132, 64, 0), 1);
    cr_assert_geq(fa_num_splits_heuristic(0, 132, 0, 32), 1);
    cr_assert_geq(fa_num_splits_heuristic(-5, 132, -1, -1), 1);

    int32_t cu[4] = {0, 1, 2, 3}, sk[3] = {500, 600, 700};
    fa_split_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 3;
    p.cu_seqlens_q = cu;
    p.seqused_k = sk;
    p.num_heads_q = 8;
    p.num_heads_kv = 2;
    p.head_size = 128;
    p.causal = 1;
    p.window.left = -1;
    p.window.right = -1;
    p.num_sms = 132;
    p.max_num_splits = 16;
    p.caps = test_caps();
    int32_t plan[8] = {9, 9, 9, 9, 9, 9, 9, 9}, keep[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    EXPECT_ERR(fa_plan_splits(&p, plan, 3), E_WS | E_INV, "plan_len", "3");
    fa_split_params b = p;
    b.max_num_splits = 0;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "max_num_splits", "0");
    b = p;
    b.kv_bytes = -1;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "kv_bytes", "-1");
    b = p;
    b.kv_bytes = 9;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "kv_bytes", "9");
    b = p;
    b.cu_seqlens_q = NULL;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "cu_seqlens_q", NULL);
    b = p;
    b.seqused_k = NULL;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "seqused_k", NULL);
    b = p;
    b.num_heads_kv = 0;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "num_heads_kv", "0");
    b = p;
    b.num_heads_kv = 3;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV | E_UNS, "num_heads", "8|3");
    b = p;
    b.num_reqs = -1;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "num_reqs", "-1");
    b = p;
    b.num_sms = 0;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "num_sms", "0");
    b = p;
    b.head_size = 100;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV | E_UNS, "head_size", "100");
    int32_t badcu[4] = {0, 2, 1, 3};
    b = p;
    b.cu_seqlens_q = badcu;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "cu_seqlens_q", NULL);
    int32_t negk[3] = {500, -7, 700};
    b = p;
    b.seqused_k = negk;
    EXPECT_ERR(fa_plan_splits(&b, plan, 8), E_INV, "seqused_k", "-7");
    ASSERT_UNCHANGED(plan, keep, sizeof plan, "plan");
}

/* ---------------------------------------------------------------------------------------- */
/* builder */

Test(builder, workspace_size_bad_input)
{
    size_t bytes = 12345;
    EXPECT_ERR(fa_builder_workspace_size(NULL, &bytes), E_INV, "cfg", NULL);
    fa_config c = base_cfg();
    EXPECT_ERR(fa_builder_workspace_size(&c, NULL), E_INV, "bytes_out|bytes", NULL);
    c.model.head_size = 100;
    EXPECT_ERR(fa_builder_workspace_size(&c, &bytes), E_INV | E_UNS, "head_size", "100");
    cr_assert_eq(bytes, 12345, "bytes_out written on error");
}

static void create_fails(const fa_backend *be, const fa_config *cfg, const fa_comm *comm, unsigned mask,
                         const char *names, const char *values, int line)
{
    fa_builder *sent = (fa_builder *)(uintptr_t)0x77, *b = sent;
    fa_status st = fa_builder_create(be, cfg, comm, &b);
    check_err(st, mask, names, values, "fa_builder_create", line);
    cr_assert_eq(b, sent, "line %d: builder pointer written on error", line);
}
#define CREATE_FAILS(be, cfg, comm, mask, names, values) \
    create_fails((be), (cfg), (comm), (mask), (names), (values), __LINE__)

Test(builder, create_bad_input)
{
    stub_ctx ctx;
    fa_backend be;
    make_stub(&be, &ctx, "errstub");
    fa_config c = base_cfg();
    CREATE_FAILS(NULL, &c, NULL, E_INV, "be|backend", NULL);
    CREATE_FAILS(&be, NULL, NULL, E_INV, "cfg", NULL);
    fa_builder *b;
    EXPECT_ERR(fa_builder_create(&be, &c, NULL, NULL), E_INV, "out", NULL);
    fa_config bad = c;
    bad.model.head_size = 100;
    CREATE_FAILS(&be, &bad, NULL, E_INV | E_UNS, "head_size", "100");
    bad = c;
    bad.cache.block_size = -24;
    CREATE_FAILS(&be, &bad, NULL, E_INV | E_UNS, "block_size", "-24");
    /* backend ABI mismatch */
    fa_backend old = be;
    old.api_version = 77;
    CREATE_FAILS(&old, &c, NULL, E_INV | E_UNS, "api_version", "77");
    /* NULL alloc op: unsupported, naming op and backend */
    fa_backend noalloc = be;
    noalloc.name = "noallocbe";
    noalloc.ops.alloc = NULL;
    CREATE_FAILS(&noalloc, &c, NULL, E_UNS, "alloc", "noallocbe");
    /* DCP: comm required and consistent */
    fa_config d = c;
    d.parallel.dcp_world_size = 2;
    d.parallel.dcp_rank = 1;
    CREATE_FAILS(&be, &d, NULL, E_INV, "comm", NULL);
    fa_comm cm = make_comm(4, 1);
    CREATE_FAILS(&be, &d, &cm, E_INV, "world_size", "4");
    cm = make_comm(2, 0);
    CREATE_FAILS(&be, &d, &cm, E_INV, "rank", "0|1");
    cm = make_comm(2, 1);
    cm.api_version = 9;
    CREATE_FAILS(&be, &d, &cm, E_INV | E_UNS, "api_version", "9");
    cm = make_comm(2, 1);
    cm.all_gather = NULL;
    CREATE_FAILS(&be, &d, &cm, E_UNS | E_INV, "all_gather", NULL);
    cm = make_comm(2, 1);
    ASSERT_OK(fa_builder_create(&be, &d, &cm, &b));
    fa_builder_destroy(b);
    fa_builder_destroy(NULL); /* no crash */
}

Test(builder, set_layer_windows_bad_input)
{
    stub_ctx ctx;
    fa_backend be;
    make_stub(&be, &ctx, "errstub");
    fa_config c = base_cfg();
    fa_builder *b;
    ASSERT_OK(fa_builder_create(&be, &c, NULL, &b));
    fa_layer w[2];
    fa_layer_desc d = test_desc(c.model.num_heads_q, c.model.num_heads_kv, c.model.head_size, c.model.dtype);
    d.sliding_window = 4;
    ASSERT_OK(fa_layer_init(&w[0], &d));
    ASSERT_OK(fa_layer_init(&w[1], &d));
    EXPECT_ERR(fa_builder_set_layers(NULL, w, 2), E_INV, "b|builder", NULL);
    EXPECT_ERR(fa_builder_set_layers(b, NULL, 2), E_INV, "layers", NULL);
    EXPECT_ERR(fa_builder_set_layers(b, w, -2), E_INV, "n", "-2");
    EXPECT_ERR(fa_builder_set_layers(b, w, 0), E_INV, "n", "0");
    d.num_heads_q *= 2;
    ASSERT_OK(fa_layer_init(&w[1], &d));
    EXPECT_ERR(fa_builder_set_layers(b, w, 2), E_INV, "layers[1]", NULL);
    d.num_heads_q /= 2;
    ASSERT_OK(fa_layer_init(&w[1], &d));
    ASSERT_OK(fa_builder_set_layers(b, w, 2));
    cr_assert_null(fa_builder_config(NULL));
    fa_builder_destroy(b);
}

static void build_fails(fa_builder *b, const fa_batch *batch, int32_t prefix, unsigned mask,
                        const char *names, const char *values, int line)
{
    fa_metadata md;
    memset(&md, 0x5A, sizeof md);
    fa_metadata snap = md;
    int before = g_ctx.calls[OP_ALLOC];
    fa_status st = fa_builder_build(b, batch, prefix, &md);
    check_err(st, mask, names, values, "fa_builder_build", line);
    cr_assert(memcmp(&md, &snap, sizeof md) == 0, "line %d: metadata written on error", line);
    cr_assert_eq(g_ctx.calls[OP_ALLOC], before);
}
#define BUILD_FAILS(b, batch, prefix, mask, names, values) \
    build_fails((b), (batch), (prefix), (mask), (names), (values), __LINE__)

Test(builder, build_bad_input)
{
    make_stub(&g_be, &g_ctx, "errstub");
    fa_config c = base_cfg();
    fa_builder *b;
    ASSERT_OK(fa_builder_create(&g_be, &c, NULL, &b));
    fa_batch ok = base_batch(), x;
    fa_metadata md;
    ASSERT_OK(fa_builder_build(b, &ok, 0, &md));
    ASSERT_OK(fa_builder_build(b, &ok, 16, &md)); /* cascade: 16 <= min context 28 */
    EXPECT_ERR(fa_builder_build(NULL, &ok, 0, &md), E_INV, "b|builder", NULL);
    BUILD_FAILS(b, NULL, 0, E_INV, "batch", NULL);
    EXPECT_ERR(fa_builder_build(b, &ok, 0, NULL), E_INV, "md_out|md", NULL);

    /* limits */
    static int32_t qsl17[18], seq17[17], bt17[17 * BTS];
    static int64_t sm17[17];
    for (int i = 0; i <= 17; ++i) qsl17[i] = i;
    for (int i = 0; i < 17; ++i) {
        seq17[i] = 20;
        sm17[i] = i;
    }
    for (int i = 0; i < 17 * BTS; ++i) bt17[i] = i % NB;
    x = ok;
    x.num_reqs = 17;
    x.num_actual_tokens = 17;
    x.query_start_loc = qsl17;
    x.seq_lens = seq17;
    x.block_table = bt17;
    x.block_table_host = bt17;
    x.slot_mapping = sm17;
    BUILD_FAILS(b, &x, 0, E_INV | E_WS, "num_reqs|max_num_seqs", "17");
    static int32_t qbig[2] = {0, 300}, sbig[1] = {300}, btbig[32];
    static int64_t smbig[300];
    for (int i = 0; i < 32; ++i) btbig[i] = i;
    for (int i = 0; i < 300; ++i) smbig[i] = i;
    x = ok;
    x.num_reqs = 1;
    x.num_actual_tokens = 300;
    x.query_start_loc = qbig;
    x.seq_lens = sbig;
    x.block_table = btbig;
    x.block_table_host = btbig;
    x.block_table_stride = 32;
    x.max_blocks = 32;
    x.slot_mapping = smbig;
    BUILD_FAILS(b, &x, 0, E_INV | E_WS, "tokens", "300");

    /* inconsistent lengths */
    int32_t qnm[4] = {0, 5, 3, 8};
    x = ok;
    x.query_start_loc = qnm;
    BUILD_FAILS(b, &x, 0, E_INV, "query_start_loc", NULL);
    int32_t q0[4] = {2, 3, 6, 8};
    x = ok;
    x.query_start_loc = q0;
    BUILD_FAILS(b, &x, 0, E_INV, "query_start_loc", "2");
    int32_t sshort[3] = {40, 3, 30}; /* 3 < query length 5 */
    x = ok;
    x.seq_lens = sshort;
    BUILD_FAILS(b, &x, 0, E_INV, "seq_lens", "3");
    int32_t sneg[3] = {40, -4, 30};
    x = ok;
    x.seq_lens = sneg;
    BUILD_FAILS(b, &x, 0, E_INV, "seq_lens", "-4");
    int32_t slong[3] = {40, 37, 200}; /* 200 tokens need 13 blocks > max_blocks 8 */
    x = ok;
    x.seq_lens = slong;
    BUILD_FAILS(b, &x, 0, E_INV, "seq_lens|max_blocks|block_table", "200|13|8");
    x = ok;
    x.num_reqs = -1;
    BUILD_FAILS(b, &x, 0, E_INV, "num_reqs", "-1");
    x = ok;
    x.num_actual_tokens = 9; /* > query_start_loc[num_reqs] = 8 */
    BUILD_FAILS(b, &x, 0, E_INV, "num_actual_tokens", "9");
    x = ok;
    x.query_start_loc = NULL;
    BUILD_FAILS(b, &x, 0, E_INV, "query_start_loc", NULL);
    x = ok;
    x.seq_lens = NULL;
    BUILD_FAILS(b, &x, 0, E_INV, "seq_lens", NULL);
    x = ok;
    x.block_table = NULL;
    {
        /* encoder batches have no block table, so build may accept it; a paged forward must not */
        fa_metadata md2;
        if (fa_builder_build(b, &x, 0, &md2) == FA_OK) {
            fa_layer_desc d = base_desc();
            fa_layer l;
            d.kv_sharing = 1; /* no new k/v: the block table is the first thing missing */
            ASSERT_OK(fa_layer_init(&l, &d));
            fa_tensor q = t3(g_q, FA_DTYPE_F16, TPAD, HQ, D), o = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D);
            fa_tensor kc = cache_tensor();
            g_ctx.total = 0;
            EXPECT_ERR(fa_forward(&l, &g_be, &q, NULL, NULL, &kc, &md2, &o), E_INV, "block_table", NULL);
            cr_assert_eq(g_ctx.calls[OP_ATTN], 0, "paged attention launched with a NULL block table");
        } else {
            cr_assert(strstr(fa_last_error(), "block_table"), "%s", fa_last_error());
        }
    }
    x = ok;
    x.block_table_stride = 4;
    x.max_blocks = 8;
    BUILD_FAILS(b, &x, 0, E_INV, "block_table_stride|max_blocks", "4|8");
    x = ok;
    x.slot_mapping = NULL;
    {
        /* encoder batches have no slot mapping, so build may accept it; a cache write must not */
        fa_metadata md2;
        if (fa_builder_build(b, &x, 0, &md2) == FA_OK) {
            fa_layer_desc d = base_desc();
            fa_layer l;
            ASSERT_OK(fa_layer_init(&l, &d));
            fa_tensor q = t3(g_q, FA_DTYPE_F16, TPAD, HQ, D), o = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D);
            fa_tensor k = t3(g_k, FA_DTYPE_F16, TPAD, HKV, D), v = t3(g_v, FA_DTYPE_F16, TPAD, HKV, D);
            fa_tensor kc = cache_tensor();
            EXPECT_ERR(fa_forward(&l, &g_be, &q, &k, &v, &kc, &md2, &o), E_INV, "slot_mapping", NULL);
            cr_assert_eq(g_ctx.calls[OP_CACHE], 0, "cache write launched with a NULL slot mapping");
        } else {
            cr_assert(strstr(fa_last_error(), "slot_mapping"), "%s", fa_last_error());
        }
    }

    /* cascade prefix */
    BUILD_FAILS(b, &ok, 24, E_INV, "common_prefix_len", "24");
    BUILD_FAILS(b, &ok, 32, E_INV, "common_prefix_len", "32"); /* > context 28 of request 2 */
    BUILD_FAILS(b, &ok, -16, E_INV, "common_prefix_len", "-16");
    fa_builder_destroy(b);
}

Test(builder, build_mode_specific_errors)
{
    make_stub(&g_be, &g_ctx, "errstub");
    /* chunked local needs the host block table */
    fa_config c = base_cfg();
    c.scheduler.attention_chunk_size = 32;
    fa_builder *b;
    ASSERT_OK(fa_builder_create(&g_be, &c, NULL, &b));
    fa_batch x = base_batch();
    x.block_table_host = NULL;
    BUILD_FAILS(b, &x, 0, E_INV, "block_table_host", NULL);
    fa_builder_destroy(b);
    /* DCP: no cascade */
    c = base_cfg();
    c.parallel.dcp_world_size = 2;
    fa_comm cm = make_comm(2, 0);
    ASSERT_OK(fa_builder_create(&g_be, &c, &cm, &b));
    x = base_batch();
    BUILD_FAILS(b, &x, 16, E_INV | E_UNS, "common_prefix_len|cascade|dcp", NULL);
    fa_builder_destroy(b);
}

Test(builder, cascade_prefix_len_bad_input)
{
    make_stub(&g_be, &g_ctx, "errstub");
    fa_config c = base_cfg();
    fa_builder *b;
    ASSERT_OK(fa_builder_create(&g_be, &c, NULL, &b));
    fa_batch ok = base_batch();
    int32_t p = -5;
    EXPECT_ERR(fa_builder_cascade_prefix_len(NULL, &ok, 2, &p), E_INV, "b|builder", NULL);
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, NULL, 2, &p), E_INV, "batch", NULL);
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, &ok, 2, NULL), E_INV, "prefix_len_out|prefix_len", NULL);
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, &ok, -2, &p), E_INV, "num_common_prefix_blocks", "-2");
    fa_batch x = ok;
    int32_t sshort[3] = {40, 3, 30};
    x.seq_lens = sshort;
    EXPECT_ERR(fa_builder_cascade_prefix_len(b, &x, 2, &p), E_INV, "seq_lens", "3");
    cr_assert_eq(p, -5, "prefix_len_out written on error");
    fa_builder_destroy(b);
}

/* ---------------------------------------------------------------------------------------- */
/* layer */

static void layer_fails(fa_layer_desc d, unsigned mask, const char *names, const char *values, int line)
{
    fa_layer l;
    memset(&l, 0xA5, sizeof l);
    fa_layer snap = l;
    fa_status st = fa_layer_init(&l, &d);
    check_err(st, mask, names, values, "fa_layer_init", line);
    cr_assert(memcmp(&l, &snap, sizeof l) == 0, "line %d: layer written on error", line);
}
#define LAYER_FAILS(d, mask, names, values) layer_fails((d), (mask), (names), (values), __LINE__)

Test(layer, init_bad_input)
{
    static float sinks[HQ] = {0.5f, -1, 2, 0, 1, 1, 1, 1},
                 slopes[HQ] = {.5f, .25f, .125f, .0625f, .03f, .01f, .005f, .001f};
    fa_layer_desc d;
    fa_layer l;
    d = base_desc();
    ASSERT_OK(fa_layer_init(&l, &d));
    EXPECT_ERR(fa_layer_init(NULL, &d), E_INV, "layer", NULL);
    EXPECT_ERR(fa_layer_init(&l, NULL), E_INV, "desc", NULL);
    d = base_desc();
    d.head_size = 100;
    LAYER_FAILS(d, E_INV | E_UNS, "head_size", "100");
    d = base_desc();
    d.head_size = 0;
    LAYER_FAILS(d, E_INV, "head_size", "0");
    d = base_desc();
    d.num_heads_q = 0;
    LAYER_FAILS(d, E_INV, "num_heads", "0");
    d = base_desc();
    d.num_heads_q = 12;
    d.num_heads_kv = 5;
    LAYER_FAILS(d, E_INV | E_UNS, "num_heads_kv|num_heads", "5|12");
    d = base_desc();
    d.num_heads_kv = -2;
    LAYER_FAILS(d, E_INV, "num_heads_kv", "-2");
    d = base_desc();
    d.sinks = sinks;
    d.num_sinks = 5;
    LAYER_FAILS(d, E_INV, "sinks", "5");
    d = base_desc();
    d.sinks = sinks;
    d.num_sinks = 0;
    LAYER_FAILS(d, E_INV, "sinks", "0");
    d = base_desc();
    d.alibi_slopes = slopes;
    d.num_alibi_slopes = 3;
    LAYER_FAILS(d, E_INV, "alibi", "3");
    d = base_desc();
    d.kv_cache_dtype = (fa_cache_dtype)9;
    LAYER_FAILS(d, E_INV | E_UNS, "kv_cache_dtype", "9");
    d = base_desc();
    d.attn_type = (fa_attn_type)9;
    LAYER_FAILS(d, E_INV | E_UNS, "attn_type", "9");
    d = base_desc();
    d.dtype = FA_DTYPE_I64;
    LAYER_FAILS(d, E_INV | E_UNS, "dtype", NULL);
    d = base_desc();
    d.dtype = (fa_dtype)42;
    LAYER_FAILS(d, E_INV | E_UNS, "dtype", "42");
    /* window / ALiBi with DCP > 1 are rejected at layer creation (decision table) */
    d = base_desc();
    d.sliding_window = 128;
    d.dcp_world_size = 2;
    LAYER_FAILS(d, E_INV | E_UNS, "sliding_window|window", "128|2");
    d = base_desc();
    d.alibi_slopes = slopes;
    d.num_alibi_slopes = HQ;
    d.dcp_world_size = 2;
    LAYER_FAILS(d, E_INV | E_UNS, "alibi", NULL);
    d = base_desc();
    d.dcp_world_size = -1;
    LAYER_FAILS(d, E_INV, "dcp_world_size", "-1");
    /* quantized cache with encoder attention: unsupported (SEMANTICS §11) */
    d = base_desc();
    d.attn_type = FA_ATTN_ENCODER;
    d.kv_cache_dtype = FA_CACHE_FP8;
    LAYER_FAILS(d, E_UNS | E_INV, "kv_cache_dtype|encoder|fp8|quantiz", NULL);
    d = base_desc();
    d.attention_chunk_size = -16;
    LAYER_FAILS(d, E_INV, "attention_chunk_size|chunk", "-16");
    d = base_desc();
    d.k_scale = -1.0f;
    d.kv_cache_dtype = FA_CACHE_FP8;
    LAYER_FAILS(d, E_INV, "k_scale", "-1");
}

/* a config holding the test model's shape (HQ / HKV heads of D, f16), nothing else */
static fa_config model_cfg(void)
{
    fa_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = HQ;
    cfg.model.num_heads_kv = HKV;
    cfg.model.head_size = D;
    cfg.model.dtype = FA_DTYPE_F16;
    return cfg;
}

/* fa_layer_init_from_config: zero fields of desc take the config's model shape, non-zero ones
   override; the result equals fa_layer_init with every value spelled out */
Test(layer, init_from_config)
{
    fa_config cfg = model_cfg();
    fa_layer_desc d;
    fa_layer a, b;
    cfg.cache.cache_dtype = FA_CACHE_FP8_E4M3;
    cfg.scheduler.attention_chunk_size = 64;
    memset(&a, 0x5a, sizeof a);
    memset(&b, 0x5a, sizeof b);
    ASSERT_OK(fa_layer_init_from_config(&a, &cfg, NULL));
    d = base_desc();
    d.kv_cache_dtype = FA_CACHE_FP8_E4M3;
    d.attention_chunk_size = 64;
    ASSERT_OK(fa_layer_init(&b, &d));
    cr_assert(memcmp(&a, &b, sizeof a) == 0, "from_config(NULL desc) != fa_layer_init of the same values");
    cr_assert_eq(a.desc.num_heads_q, HQ);
    cr_assert_eq(a.desc.num_heads_kv, HKV);
    cr_assert_eq(a.desc.head_size, D);
    cr_assert_eq(a.desc.dtype, FA_DTYPE_F16);
    /* overrides: a windowed layer with its own KV heads, no chunking is not expressible by zero,
       so the chunk stays the config's; its cache dtype given explicitly */
    memset(&d, 0, sizeof d);
    d.sliding_window = 4096;
    d.num_heads_kv = 1;
    d.kv_cache_dtype = FA_CACHE_FP8_E5M2;
    d.dtype = FA_DTYPE_F16; /* equal to the model's: accepted */
    ASSERT_OK(fa_layer_init_from_config(&a, &cfg, &d));
    cr_assert_eq(a.desc.sliding_window, 4096);
    cr_assert_eq(a.desc.num_heads_kv, 1);
    cr_assert_eq(a.desc.num_heads_q, HQ);
    cr_assert_eq(a.desc.kv_cache_dtype, FA_CACHE_FP8_E5M2);
    cr_assert_eq(a.desc.attention_chunk_size, 64);
    cr_assert_eq(a.window.left, 4095);
}

/* an error of fa_layer_init_from_config names the function first, then the argument and value */
#define FROMCFG_FAILS(expr, mask, names, values) \
    do { \
        EXPECT_ERR(expr, mask, names, values); \
        cr_assert(strncmp(fa_last_error(), "fa_layer_init_from_config: ", 27) == 0, "message: %s", \
                  fa_last_error()); \
    } while (0)

Test(layer, init_from_config_bad_input)
{
    fa_config cfg = model_cfg();
    fa_layer_desc d;
    fa_layer l, snap;
    memset(&l, 0x5a, sizeof l);
    snap = l;
    FROMCFG_FAILS(fa_layer_init_from_config(NULL, &cfg, NULL), E_INV, "layer", NULL);
    FROMCFG_FAILS(fa_layer_init_from_config(&l, NULL, NULL), E_INV, "cfg", NULL);
    memset(&d, 0, sizeof d);
    d.dtype = FA_DTYPE_F32; /* another activation dtype than the model's */
    FROMCFG_FAILS(fa_layer_init_from_config(&l, &cfg, &d), E_INV, "desc.dtype", "f32");
    cr_assert(strstr(fa_last_error(), "cfg.model.dtype f16") != NULL, "%s", fa_last_error());
    cfg.model.head_size = 100; /* the config's value is checked like a spelled-out one */
    FROMCFG_FAILS(fa_layer_init_from_config(&l, &cfg, NULL), E_INV | E_UNS, "head_size", "100");
    cfg.model.head_size = D;
    cfg.model.num_heads_q = 0; /* a config without the model shape and a desc without it */
    FROMCFG_FAILS(fa_layer_init_from_config(&l, &cfg, NULL), E_INV, "num_heads_q", "0");
    cr_assert(memcmp(&l, &snap, sizeof l) == 0, "layer written on error");
}

/* ---------------------------------------------------------------------------------------- */
/* forward */

Test(forward, baseline_ok)
{
    scen s;
    scen_setup(&s, NULL, NULL, 0);
    ASSERT_OK(fa_forward(&s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out));
    cr_assert_str_eq(fa_last_error(), "");
    cr_assert_eq(g_ctx.calls[OP_ATTN], 1);
    fa_builder_destroy(s.b);
}

Test(forward, tensor_mismatches)
{
    scen s;
    scen_setup(&s, NULL, NULL, 0);
    fa_tensor x;
    /* q head size != layer's */
    x = t3(g_q, FA_DTYPE_F16, TPAD, HQ * 2, D / 2);
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q|head_size", "32");
    /* q heads != layer's */
    x = t3(g_q, FA_DTYPE_F16, TPAD, HQ / 2, D);
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q|num_heads", "4");
    /* q dtype != layer dtype */
    x = s.q;
    x.dtype = FA_DTYPE_BF16;
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV | E_UNS, "q|dtype",
                  NULL);
    /* out dtype != q dtype */
    x = s.out;
    x.dtype = FA_DTYPE_BF16;
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &x, E_INV | E_UNS, "out",
                  "dtype|bf16|BF16");
    /* out shape */
    x = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D / 2);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &x, E_INV, "out", "32");
    /* fewer rows than num_actual_tokens */
    x = t3(g_q, FA_DTYPE_F16, T - 1, HQ, D);
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q", "7");
    x = t3(g_out, FA_DTYPE_F16, T - 1, HQ, D);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &x, E_INV, "out", "7");
    /* q rank */
    int64_t sh2[2] = {TPAD, HQ * D};
    x = fa_tensor_make(g_q, FA_DTYPE_F16, 2, sh2);
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q", "rank|2");
    /* q last dim not contiguous */
    x = s.q;
    x.stride[2] = 2;
    x.shape[2] = D / 2; /* keeps the buffer in range */
    FORWARD_FAILS(&s, &s.layer, &g_be, &x, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q", NULL);
    /* k heads / head size */
    x = t3(g_k, FA_DTYPE_F16, TPAD, HKV * 2, D / 2);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &x, &s.v, &s.cache, &s.md, &s.out, E_INV, "k|key", NULL);
    x = t3(g_v, FA_DTYPE_F16, TPAD, 1, D);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &x, &s.cache, &s.md, &s.out, E_INV, "v|value", NULL);
    /* k dtype */
    x = s.k;
    x.dtype = FA_DTYPE_BF16;
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &x, &s.v, &s.cache, &s.md, &s.out, E_INV | E_UNS, "k|key", NULL);
    /* cache: last dim not contiguous */
    x = s.cache;
    x.stride[4] = 2;
    x.shape[1] = NB / 2;
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &x, &s.md, &s.out, E_INV, "kv_cache",
                  "stride|contig");
    /* cache: rank 4 */
    int64_t sh4[4] = {2, NB, BS, HKV * D};
    x = fa_tensor_make(g_cache, FA_DTYPE_F16, 4, sh4);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &x, &s.md, &s.out, E_INV, "kv_cache", "rank|4");
    /* cache: block size dim != the builder's */
    int64_t shb[5] = {2, NB * 2, BS / 2, HKV, D};
    x = fa_tensor_make(g_cache, FA_DTYPE_F16, 5, shb);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &x, &s.md, &s.out, E_INV, "kv_cache|block_size",
                  "8");
    /* cache: heads / head size */
    int64_t shh[5] = {2, NB, BS, HKV * 2, D / 2};
    x = fa_tensor_make(g_cache, FA_DTYPE_F16, 5, shh);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &x, &s.md, &s.out, E_INV, "kv_cache", NULL);
    /* cache dtype: AUTO layer needs the activation dtype */
    x = s.cache;
    x.dtype = FA_DTYPE_BF16;
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &x, &s.md, &s.out, E_INV | E_UNS, "kv_cache", NULL);
    /* only one of k / v */
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, NULL, &s.cache, &s.md, &s.out, E_INV, "v|value|k", NULL);
    fa_builder_destroy(s.b);
}

Test(forward, null_arguments)
{
    scen s;
    scen_setup(&s, NULL, NULL, 0);
    FORWARD_FAILS(&s, &s.layer, NULL, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "be|backend", NULL);
    FORWARD_FAILS(&s, &s.layer, &g_be, NULL, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "q", NULL);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, NULL, E_INV, "out", NULL);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, NULL, &s.md, &s.out, E_INV, "kv_cache", NULL);
    /* the header's name of the first argument is `layer` */
    FORWARD_FAILS(&s, NULL, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "layer", NULL);
    fa_builder_destroy(s.b);
}

Test(forward, layer_and_metadata_mismatches)
{
    scen s;
    scen_setup(&s, NULL, NULL, 0);
    /* a layer whose heads differ from the builder's */
    fa_layer_desc d = base_desc();
    d.num_heads_q = HQ * 2;
    fa_layer other;
    ASSERT_OK(fa_layer_init(&other, &d));
    fa_tensor q2 = t3(g_q, FA_DTYPE_F16, TPAD / 2, HQ * 2, D);
    fa_tensor o2 = t3(g_out, FA_DTYPE_F16, TPAD / 2, HQ * 2, D);
    FORWARD_FAILS(&s, &other, &g_be, &q2, &s.k, &s.v, &s.cache, &s.md, &o2, E_INV, "heads", "16|8");
    /* backend API version */
    fa_backend old = g_be;
    old.api_version = 77;
    FORWARD_FAILS(&s, &s.layer, &old, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV | E_UNS, "api_version",
                  "77");
    fa_builder_destroy(s.b);
}

Test(forward, cascade_with_window_or_alibi)
{
    scen s;
    scen_setup(&s, NULL, NULL, 16);
    cr_assert_eq(s.md.use_cascade, 1);
    static float slopes[HQ] = {.5f, .25f, .125f, .0625f, .03f, .01f, .005f, .001f};
    fa_layer_desc d = base_desc();
    d.sliding_window = 64;
    fa_layer wl;
    ASSERT_OK(fa_layer_init(&wl, &d));
    /* a cascade step runs the plain plan for the layers cascade is not exact for (it used to
       fail with "cascade ... is not exact", the README example's trap) */
    g_ctx.total = 0;
    memset(g_ctx.calls, 0, sizeof g_ctx.calls);
    ASSERT_OK(fa_forward(&wl, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out));
    cr_assert_eq(g_ctx.calls[OP_ATTN], 1, "windowed layer: one plain attention call, not prefix + suffix");
    cr_assert_eq(g_ctx.calls[OP_MERGE], 0, "windowed layer: no merge");
    d = base_desc();
    d.alibi_slopes = slopes;
    d.num_alibi_slopes = HQ;
    fa_layer al;
    ASSERT_OK(fa_layer_init(&al, &d));
    memset(g_ctx.calls, 0, sizeof g_ctx.calls);
    ASSERT_OK(fa_forward(&al, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out));
    cr_assert_eq(g_ctx.calls[OP_ATTN], 1, "ALiBi layer: one plain attention call");
    cr_assert_eq(g_ctx.calls[OP_MERGE], 0, "ALiBi layer: no merge");
    memset(g_ctx.calls, 0, sizeof g_ctx.calls);
    ASSERT_OK(fa_forward(&s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out));
    cr_assert_eq(g_ctx.calls[OP_ATTN], 2, "full-attention layer: prefix + suffix");
    cr_assert_eq(g_ctx.calls[OP_MERGE], 1, "full-attention layer: merged");
    fa_builder_destroy(s.b);
}

/* a backend with one op NULL: the builder is created with that very backend; create, build or
   forward must fail with FA_ERR_UNSUPPORTED naming the op and the backend */
static void holey_case(int op, const char *opname, int32_t prefix, int profiling, int line)
{
    stub_ctx ctx;
    fa_backend be;
    make_stub(&be, &ctx, "holeybe");
    switch (op) {
    case OP_CACHE: be.ops.reshape_and_cache = NULL; break;
    case OP_ATTN: be.ops.attention = NULL; break;
    case OP_MERGE: be.ops.merge_states = NULL; break;
    case OP_FILL: be.ops.fill = NULL; break;
    case OP_COPY: be.ops.copy = NULL; break;
    }
    fa_config c = base_cfg();
    fa_builder *b = NULL;
    fa_status st = fa_builder_create(&be, &c, NULL, &b);
    if (st == FA_OK) {
        fa_batch bt = base_batch();
        fa_metadata md;
        st = fa_builder_build(b, &bt, prefix, &md);
        if (st == FA_OK) {
            fa_layer_desc d = base_desc();
            fa_layer l;
            ASSERT_OK(fa_layer_init(&l, &d));
            fa_tensor q = t3(g_q, FA_DTYPE_F16, TPAD, HQ, D), k = t3(g_k, FA_DTYPE_F16, TPAD, HKV, D);
            fa_tensor v = t3(g_v, FA_DTYPE_F16, TPAD, HKV, D), o = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D);
            fa_tensor kc = cache_tensor();
            ctx.total = 0;
            st = profiling ? fa_forward_profile(&l, &be, &o) : fa_forward(&l, &be, &q, &k, &v, &kc, &md, &o);
            if (st != FA_OK)
                cr_assert_eq(ctx.total, 0, "line %d: ops ran before the missing %s was reported", line,
                             opname);
        }
        fa_builder_destroy(b);
    }
    check_err(st, E_UNS, opname, "holeybe", opname, line);
}

Test(forward, null_ops_are_unsupported)
{
    holey_case(OP_ATTN, "attention", 0, 0, __LINE__);
    holey_case(OP_CACHE, "reshape_and_cache", 0, 0, __LINE__);
    holey_case(OP_FILL, "fill", 0, 1, __LINE__);
    holey_case(OP_MERGE, "merge_states", 16, 0, __LINE__);
    holey_case(OP_COPY, "copy", 0, 0, __LINE__);
}

Test(forward, dcp_layer_vs_builder)
{
    /* a DCP metadata used with a layer declaring dcp_world_size 1, and vice versa */
    make_stub(&g_be, &g_ctx, "errstub");
    fa_config c = base_cfg();
    c.parallel.dcp_world_size = 2;
    fa_comm cm = make_comm(2, 0);
    scen s;
    memset(&s, 0, sizeof s);
    ASSERT_OK(fa_builder_create(&g_be, &c, &cm, &s.b));
    fa_layer_desc d = base_desc();
    ASSERT_OK(fa_layer_init(&s.layer, &d));
    fa_batch bt = base_batch();
    ASSERT_OK(fa_builder_build(s.b, &bt, 0, &s.md));
    s.q = t3(g_q, FA_DTYPE_F16, TPAD, HQ, D);
    s.k = t3(g_k, FA_DTYPE_F16, TPAD, HKV, D);
    s.v = t3(g_v, FA_DTYPE_F16, TPAD, HKV, D);
    s.cache = cache_tensor();
    s.out = t3(g_out, FA_DTYPE_F16, TPAD, HQ, D);
    FORWARD_FAILS(&s, &s.layer, &g_be, &s.q, &s.k, &s.v, &s.cache, &s.md, &s.out, E_INV, "dcp_world_size|dcp",
                  "1|2");
    fa_builder_destroy(s.b);
}
