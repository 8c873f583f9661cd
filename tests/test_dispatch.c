/* Forward dispatch: a recording stub backend (and comm) logs every vtable call with a copy of its
   argument struct; each forward path is checked for the order and the arguments of its calls
   (SEMANTICS §5, §6.1, §7.3, §8, §11). The stub's "device" memory is host memory, so device
   arrays of the metadata are read directly. Attention and merge write nothing. */
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
/* the recording backend */

enum {
    OP_CACHE,
    OP_ATTN,
    OP_MERGE,
    OP_DCP,
    OP_COPY,
    OP_FILL,
    OP_ALLOC,
    OP_FREE,
    OP_SYNC,
    OP_AG,
    OP_RS,
    OP_COPY2D,
    OP_N
};
static const char *op_names[OP_N] = {
    "reshape_and_cache", "attention",  "merge_states",   "dcp_correct", "copy", "fill", "alloc", "free",
    "synchronize",       "all_gather", "reduce_scatter", "copy_2d"};
enum { MAXS = 64, MAXREC = 256 };

typedef struct rec {
    int op;
    fa_cache_write_args cw;
    fa_attn_args at;
    fa_merge_args mg;
    fa_dcp_correct_args dc;
    struct {
        void *dst;
        const void *src;
        size_t bytes;
        int kind;
    } cp;
    struct {
        void *dst;
        size_t dpitch;
        const void *src;
        size_t spitch, width, rows;
        int kind;
    } c2;
    struct {
        void *dst;
        size_t pitch;
        int value;
        size_t width, rows;
    } fl;
    struct {
        const void *send;
        void *recv;
        size_t count;
        fa_dtype dtype;
    } cm;
    /* snapshots of the small device arrays at call time */
    int32_t cuq[MAXS + 1], sk[MAXS], cuk[MAXS + 1];
    int has_cuq, has_sk, has_cuk;
    int32_t wc[FA_WORK_COUNTERS]; /* the work counters' words on entry (when given) */
} rec;

typedef struct rlog {
    rec r[MAXREC];
    int n;
    int counts[OP_N];
    int world, rank;
} rlog;

static rlog LOG;

static rec *push(int op)
{
    LOG.counts[op]++;
    cr_assert_lt(LOG.n, MAXREC, "too many calls recorded");
    rec *r = &LOG.r[LOG.n++];
    memset(r, 0, sizeof *r);
    r->op = op;
    return r;
}

static fa_status rb_cache(void *c, const fa_cache_write_args *a)
{
    (void)c;
    push(OP_CACHE)->cw = *a;
    return FA_OK;
}
static fa_status rb_attn(void *c, const fa_attn_args *a)
{
    (void)c;
    rec *r = push(OP_ATTN);
    r->at = *a;
    if (a->num_seqs >= 0 && a->num_seqs <= MAXS) {
        if (a->cu_seqlens_q) {
            memcpy(r->cuq, a->cu_seqlens_q, sizeof(int32_t) * (a->num_seqs + 1));
            r->has_cuq = 1;
        }
        if (a->seqused_k) {
            memcpy(r->sk, a->seqused_k, sizeof(int32_t) * a->num_seqs);
            r->has_sk = 1;
        }
        if (a->cu_seqlens_k) {
            memcpy(r->cuk, a->cu_seqlens_k, sizeof(int32_t) * (a->num_seqs + 1));
            r->has_cuk = 1;
        }
    }
    if (a->work_counters) memcpy(r->wc, a->work_counters, sizeof r->wc);
    return FA_OK;
}
static fa_status rb_merge(void *c, const fa_merge_args *a)
{
    (void)c;
    push(OP_MERGE)->mg = *a;
    return FA_OK;
}
static fa_status rb_dcp(void *c, const fa_dcp_correct_args *a)
{
    (void)c;
    push(OP_DCP)->dc = *a;
    return FA_OK;
}
static fa_status rb_copy(void *c, void *dst, const void *src, size_t n, fa_copy_kind k)
{
    (void)c;
    rec *r = push(OP_COPY);
    r->cp.dst = dst;
    r->cp.src = src;
    r->cp.bytes = n;
    r->cp.kind = (int)k;
    if (n) memmove(dst, src, n);
    return FA_OK;
}
static fa_status rb_copy2d(void *c, void *dst, size_t dpitch, const void *src, size_t spitch, size_t w,
                           size_t rows, fa_copy_kind k)
{
    (void)c;
    rec *r = push(OP_COPY2D);
    r->c2.dst = dst;
    r->c2.dpitch = dpitch;
    r->c2.src = src;
    r->c2.spitch = spitch;
    r->c2.width = w;
    r->c2.rows = rows;
    r->c2.kind = (int)k;
    for (size_t i = 0; i < rows; ++i) memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, w);
    return FA_OK;
}
static fa_status rb_fill(void *c, void *dst, size_t pitch, int value, size_t w, size_t rows)
{
    (void)c;
    rec *r = push(OP_FILL);
    r->fl.dst = dst;
    r->fl.pitch = pitch;
    r->fl.value = value;
    r->fl.width = w;
    r->fl.rows = rows;
    for (size_t i = 0; i < rows; ++i) memset((char *)dst + i * pitch, value, w);
    return FA_OK;
}
static fa_status rb_alloc(void *c, size_t n, void **p)
{
    (void)c;
    LOG.counts[OP_ALLOC]++;
    *p = calloc(1, n ? n : 1);
    return *p ? FA_OK : FA_ERR_OUT_OF_MEMORY;
}
static fa_status rb_free(void *c, void *p)
{
    (void)c;
    LOG.counts[OP_FREE]++;
    free(p);
    return FA_OK;
}
static fa_status rb_sync(void *c)
{
    (void)c;
    LOG.counts[OP_SYNC]++;
    return FA_OK;
}

static fa_status rc_ag(void *c, const void *send, void *recv, size_t count, fa_dtype t)
{
    (void)c;
    rec *r = push(OP_AG);
    r->cm.send = send;
    r->cm.recv = recv;
    r->cm.count = count;
    r->cm.dtype = t;
    size_t es = fa_dtype_size(t);
    for (int s = 0; s < LOG.world; ++s) memcpy((char *)recv + (size_t)s * count * es, send, count * es);
    return FA_OK;
}
static fa_status rc_rs(void *c, const void *send, void *recv, size_t count, fa_dtype t)
{
    (void)c;
    rec *r = push(OP_RS);
    r->cm.send = send;
    r->cm.recv = recv;
    r->cm.count = count;
    r->cm.dtype = t;
    size_t es = fa_dtype_size(t);
    memcpy(recv, (const char *)send + (size_t)LOG.rank * count * es, count * es);
    return FA_OK;
}

static fa_backend BE;
static fa_comm COMM;

static void setup_backend(void)
{
    memset(&LOG, 0, sizeof LOG);
    LOG.world = 1;
    memset(&BE, 0, sizeof BE);
    BE.api_version = FA_BACKEND_API_VERSION;
    BE.caps = *test_caps();
    BE.name = "recorder";
    BE.ops.reshape_and_cache = rb_cache;
    BE.ops.attention = rb_attn;
    BE.ops.merge_states = rb_merge;
    BE.ops.dcp_correct = rb_dcp;
    BE.ops.copy = rb_copy;
    BE.ops.copy_2d = rb_copy2d;
    BE.ops.fill = rb_fill;
    BE.ops.alloc = rb_alloc;
    BE.ops.free = rb_free;
    BE.ops.synchronize = rb_sync;
    snprintf(BE.info.name, sizeof BE.info.name, "recorder");
    BE.info.num_sms = 132;
}

static void setup_comm(int32_t world, int32_t rank)
{
    memset(&COMM, 0, sizeof COMM);
    COMM.api_version = FA_BACKEND_API_VERSION;
    COMM.world_size = world;
    COMM.rank = rank;
    COMM.all_gather = rc_ag;
    COMM.reduce_scatter = rc_rs;
    LOG.world = world;
    LOG.rank = rank;
}

static void clear_log(void)
{
    LOG.n = 0;
    memset(LOG.counts, 0, sizeof LOG.counts);
}

/* indices of the compute calls (everything but copy/fill/alloc/free/sync) */
static int compute_calls(int *idx)
{
    int n = 0;
    for (int i = 0; i < LOG.n; ++i) {
        int op = LOG.r[i].op;
        if (op == OP_CACHE || op == OP_ATTN || op == OP_MERGE || op == OP_DCP || op == OP_AG || op == OP_RS ||
            op == OP_COPY2D)
            idx[n++] = i;
    }
    return n;
}

static void describe(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < LOG.n && o + 24 < n; ++i)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? " " : "", op_names[LOG.r[i].op]);
}

/* the compute calls must be exactly `ops` (n of them), in this order */
static void expect_sequence(const int *ops, int n, const char *what)
{
    int idx[MAXREC];
    int m = compute_calls(idx);
    char buf[2048];
    describe(buf, sizeof buf);
    cr_assert_eq(m, n, "%s: %d compute calls, expected %d; calls: %s", what, m, n, buf);
    for (int i = 0; i < n; ++i)
        cr_assert_eq(LOG.r[idx[i]].op, ops[i], "%s: call %d is %s, expected %s; calls: %s", what, i,
                     op_names[LOG.r[idx[i]].op], op_names[ops[i]], buf);
}

/* ---------------------------------------------------------------------------------------- */
/* the scenario: Hq 8, Hkv 2, D 64, bs 16, F16; 4 requests q = [1,3,1,7] (T 12, T_pad 16),
   seq_lens [50,67,33,90] (contexts [49,64,32,83]); block table 4 x stride 10, 8 valid columns,
   the first 2 columns shared (a 32-token common prefix) */

enum { HQ = 8, HKV = 2, D = 64, BS = 16, NB = 64, TPAD = 16, T = 12, NREQ = 4, BTS = 10, MAXB = 8 };

static int32_t qsl[NREQ + 1] = {0, 1, 4, 5, 12};
static int32_t seql[NREQ] = {50, 67, 33, 90};
static int32_t bt[NREQ * BTS];
static int64_t slots[TPAD];
static uint16_t qbuf[TPAD * HQ * D], kbuf[TPAD * HKV * D], vbuf[TPAD * HKV * D], obuf[TPAD * HQ * D];
static uint16_t cache[2 * NB * BS * HKV * D];
static float sinks[HQ] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};

static fa_batch make_batch(int causal)
{
    for (int r = 0; r < NREQ; ++r)
        for (int c = 0; c < BTS; ++c) bt[r * BTS + c] = (c < MAXB) ? 2 + r * MAXB + c : -1;
    for (int r = 0; r < NREQ; ++r) {
        bt[r * BTS + 0] = 0;
        bt[r * BTS + 1] = 1;
    }
    int t = 0;
    for (int r = 0; r < NREQ; ++r) {
        int ql = qsl[r + 1] - qsl[r];
        for (int i = 0; i < ql; ++i, ++t) {
            int p = seql[r] - ql + i;
            slots[t] = (int64_t)bt[r * BTS + p / BS] * BS + p % BS;
        }
    }
    for (; t < TPAD; ++t) slots[t] = -1;
    fa_batch b;
    memset(&b, 0, sizeof b);
    b.num_reqs = NREQ;
    b.num_actual_tokens = T;
    b.query_start_loc = qsl;
    b.seq_lens = seql;
    b.block_table = bt;
    b.block_table_stride = BTS;
    b.max_blocks = MAXB;
    b.block_table_host = bt;
    b.slot_mapping = slots;
    b.causal = causal;
    return b;
}

static fa_config make_cfg(void) { return test_cfg(HQ, HKV, D, FA_DTYPE_F16, BS, 32, 512); }

static fa_layer_desc make_desc(void) { return test_desc(HQ, HKV, D, FA_DTYPE_F16); }

static fa_tensor t3(void *p, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return fa_tensor_make(p, FA_DTYPE_F16, 3, s);
}

typedef struct ctx {
    fa_builder *b;
    fa_layer layer;
    fa_metadata md;
    fa_tensor q, k, v, kv, out;
    fa_batch batch;
} ctx;

static void prepare(ctx *c, const fa_config *cfg, const fa_layer_desc *d, int causal, int32_t prefix,
                    const fa_comm *comm, fa_kv_layout layout)
{
    memset(c, 0, sizeof *c);
    ASSERT_OK(fa_builder_create(&BE, cfg, comm, &c->b));
    ASSERT_OK(fa_layer_init(&c->layer, d));
    c->batch = make_batch(causal);
    ASSERT_OK(fa_builder_build(c->b, &c->batch, prefix, &c->md));
    c->q = t3(qbuf, TPAD, HQ, D);
    c->k = t3(kbuf, TPAD, HKV, D);
    c->v = t3(vbuf, TPAD, HKV, D);
    c->out = t3(obuf, TPAD, HQ, D);
    int64_t shape[5], strides[5];
    ASSERT_OK(fa_kv_cache_shape(NB, BS, HKV, D, shape));
    ASSERT_OK(fa_kv_cache_strides(layout, NB, BS, HKV, D, strides));
    c->kv.data = cache;
    c->kv.dtype = FA_DTYPE_F16;
    c->kv.rank = 5;
    for (int i = 0; i < 5; ++i) {
        c->kv.shape[i] = shape[i];
        c->kv.stride[i] = strides[i];
    }
    clear_log();
}

/* Every attention call recorded so far hands the backend the builder's work counters (NULL
   only when the backend has no fill), zero on entry; returns how many calls were checked. */
static int check_work_counters(const ctx *c)
{
    int n = 0;
    if (BE.ops.fill != NULL)
        cr_assert_not_null(c->b->work_counters, "a backend with fill: the builder's counters");
    for (int i = 0; i < LOG.n; ++i) {
        const rec *r = &LOG.r[i];
        if (r->op != OP_ATTN) continue;
        ++n;
        cr_assert_eq(r->at.work_counters, c->b->work_counters,
                     "attention call %d (num_seqs %d, num_splits %d): work_counters %p, the builder's %p", n,
                     r->at.num_seqs, r->at.num_splits, (void *)r->at.work_counters,
                     (void *)c->b->work_counters);
        for (int w = 0; w < FA_WORK_COUNTERS; ++w)
            cr_assert_eq(r->wc[w], 0, "attention call %d: work_counters[%d] = %d on entry", n, w, r->wc[w]);
    }
    return n;
}

static void run_forward(ctx *c, const fa_tensor *k, const fa_tensor *v)
{
    ASSERT_OK(fa_forward(&c->layer, &BE, &c->q, k, v, &c->kv, &c->md, &c->out));
    cr_assert_eq(LOG.counts[OP_ALLOC], 0, "forward allocated");
    check_work_counters(c);
}

static rec *nth(int op, int k)
{
    for (int i = 0; i < LOG.n; ++i)
        if (LOG.r[i].op == op && k-- == 0) return &LOG.r[i];
    cr_assert_fail("no call %d of %s", k, op_names[op]);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* common argument checks */

static void check_cache_write(const ctx *c, const fa_cache_write_args *w)
{
    cr_assert_eq(w->key, kbuf);
    cr_assert_eq(w->value, vbuf);
    cr_assert_eq(w->key_token_stride, HKV * D);
    cr_assert_eq(w->value_token_stride, HKV * D);
    cr_assert_eq(w->kv_dtype, FA_DTYPE_F16);
    cr_assert_eq(w->key_cache, (void *)cache, "key cache is index 0 of the first dim");
    cr_assert_eq(w->value_cache, (void *)(cache + c->kv.stride[0]),
                 "value cache is index 1 of the first dim");
    cr_assert_eq(w->cache_block_stride, c->kv.stride[1]);
    cr_assert_eq(w->cache_row_stride, c->kv.stride[2]);
    cr_assert_eq(w->cache_head_stride, c->kv.stride[3]);
    cr_assert_eq(w->cache_dtype, FA_DTYPE_F16);
    cr_assert_eq(w->slot_mapping, slots, "the batch's slot mapping");
    cr_assert_eq(w->num_tokens, T, "num_tokens %d: the actual tokens, not T_pad", w->num_tokens);
    cr_assert_eq(w->num_heads_kv, HKV);
    cr_assert_eq(w->head_size, D);
    cr_assert_eq(w->block_size, BS);
    cr_assert_float_eq(w->k_scale, 1.0f, 0, "k_scale default 1");
    cr_assert_float_eq(w->v_scale, 1.0f, 0, "v_scale default 1");
}

static void check_paged_kv(const ctx *c, const fa_attn_args *a)
{
    cr_assert_eq(a->k, (const void *)cache);
    cr_assert_eq(a->v, (const void *)(cache + c->kv.stride[0]));
    cr_assert_eq(a->k_block_stride, c->kv.stride[1]);
    cr_assert_eq(a->k_row_stride, c->kv.stride[2]);
    cr_assert_eq(a->k_head_stride, c->kv.stride[3]);
    cr_assert_eq(a->v_block_stride, c->kv.stride[1]);
    cr_assert_eq(a->v_row_stride, c->kv.stride[2]);
    cr_assert_eq(a->v_head_stride, c->kv.stride[3]);
    cr_assert_eq(a->kv_dtype, FA_DTYPE_F16);
    cr_assert_eq(a->block_size, BS);
    cr_assert_null(a->cu_seqlens_k, "paged call has no cu_seqlens_k");
}

static void check_plain_q_out(const fa_attn_args *a)
{
    cr_assert_eq(a->q, (const void *)qbuf);
    cr_assert_eq(a->q_token_stride, HQ * D);
    cr_assert_eq(a->q_head_stride, D);
    cr_assert(a->q_head_group == 0 || a->q_head_group == HQ, "one group, got q_head_group %d",
              a->q_head_group);
    cr_assert_eq(a->q_dtype, FA_DTYPE_F16);
    cr_assert_eq(a->out, (void *)obuf);
    cr_assert_eq(a->out_token_stride, HQ * D);
    cr_assert_eq(a->out_head_stride, D);
    cr_assert_eq(a->num_heads_q, HQ);
    cr_assert_eq(a->num_heads_kv, HKV);
    cr_assert_eq(a->head_size, D);
}

/* split-KV: the metadata's plan (a NULL plan is allowed when there is no split) */
static void check_splits(const fa_attn_args *a, const int32_t *plan)
{
    cr_assert_geq(a->num_splits, 1);
    if (a->num_splits > 1) {
        cr_assert_eq(a->split_plan, plan, "split plan from the metadata");
        cr_assert(a->split_out && a->split_lse, "split workspaces");
    } else {
        cr_assert(a->split_plan == NULL || a->split_plan == plan);
    }
}

static void check_cuq(const rec *r, const int32_t *want, int n, const char *what)
{
    cr_assert(r->has_cuq, "%s: cu_seqlens_q missing", what);
    for (int i = 0; i <= n; ++i)
        cr_assert_eq(r->cuq[i], want[i], "%s: cu_seqlens_q[%d] = %d, expected %d", what, i, r->cuq[i],
                     want[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* plain decoder */

Test(dispatch, plain_decoder, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    d.sliding_window = 100;
    d.sinks = sinks;
    d.num_sinks = HQ;
    d.logits_soft_cap = 30.0f;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    run_forward(&c, &c.k, &c.v);
    const int ops[2] = {OP_CACHE, OP_ATTN};
    expect_sequence(ops, 2, "plain decoder");
    check_cache_write(&c, &nth(OP_CACHE, 0)->cw);
    rec *r = nth(OP_ATTN, 0);
    const fa_attn_args *a = &r->at;
    check_plain_q_out(a);
    check_paged_kv(&c, a);
    cr_assert_eq(a->cu_seqlens_q, c.md.query_start_loc);
    check_cuq(r, qsl, NREQ, "plain");
    cr_assert_eq(a->seqused_k, c.md.seq_lens, "seqused_k = device seq_lens");
    for (int i = 0; i < NREQ; ++i) cr_assert_eq(r->sk[i], seql[i]);
    cr_assert_eq(a->block_table, bt, "block table as given");
    cr_assert_eq(a->block_table_stride, BTS);
    cr_assert_eq(a->num_seqs, NREQ);
    cr_assert_eq(a->num_tokens, T);
    cr_assert_eq(a->max_seqlen_q, 7);
    cr_assert_eq(a->min_seqlen_q, 1, "min_seqlen_q hint = the shortest query (1), got %d", a->min_seqlen_q);
    cr_assert_eq(c.md.min_query_len, 1);
    cr_assert_eq(a->max_seqlen_k, 90);
    cr_assert_float_eq(a->softmax_scale, 0.125f, 1e-7, "1/sqrt(64)");
    cr_assert_float_eq(a->softcap, 30.0f, 0);
    cr_assert_eq(a->causal, 1);
    cr_assert(a->window_left == 99 && a->window_right == 0, "window (W-1, 0) = (99,0), got (%d,%d)",
              a->window_left, a->window_right);
    cr_assert_null(a->alibi_slopes);
    cr_assert_eq(a->sinks, sinks, "the layer's sinks");
    cr_assert_eq(a->num_splits, c.md.num_splits);
    check_splits(a, c.md.split_plan);
    fa_builder_destroy(c.b);
}

Test(dispatch, plain_decoder_hnd_and_scale, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    cfg.cache.layout = FA_LAYOUT_HND;
    fa_layer_desc d = make_desc();
    d.scale = 0.5f;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_HND);
    run_forward(&c, &c.k, &c.v);
    const int ops[2] = {OP_CACHE, OP_ATTN};
    expect_sequence(ops, 2, "plain decoder HND");
    check_cache_write(&c, &nth(OP_CACHE, 0)->cw);
    const fa_attn_args *a = &nth(OP_ATTN, 0)->at;
    check_paged_kv(&c, a);
    cr_assert_eq(a->k_row_stride, D, "HND: token stride D");
    cr_assert_eq(a->k_head_stride, BS * D, "HND: head stride bs*D");
    cr_assert_float_eq(a->softmax_scale, 0.5f, 0);
    cr_assert(a->window_left == -1 && (a->window_right == -1 || a->window_right == 0),
              "no window: (-1,-1) (right may be 0 under causal), got (%d,%d)", a->window_left,
              a->window_right);
    cr_assert_null(a->sinks);
    cr_assert_float_eq(a->softcap, 0.0f, 0);
    fa_builder_destroy(c.b);
}

Test(dispatch, kv_sharing_skips_write, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    d.kv_sharing = 1;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    run_forward(&c, &c.k, &c.v);
    const int ops[1] = {OP_ATTN};
    expect_sequence(ops, 1, "kv-sharing layer");
    fa_builder_destroy(c.b);
}

Test(dispatch, null_kv_skips_write, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    d.attn_type = FA_ATTN_ENCODER_DECODER;
    ctx c;
    prepare(&c, &cfg, &d, 0, 0, NULL, FA_LAYOUT_NHD);
    run_forward(&c, NULL, NULL);
    const int ops[1] = {OP_ATTN};
    expect_sequence(ops, 1, "k/v NULL");
    const fa_attn_args *a = &nth(OP_ATTN, 0)->at;
    cr_assert_eq(a->causal, 0, "cross attention: causal = metadata causal (0)");
    cr_assert_eq(a->seqused_k, c.md.seq_lens);
    /* a decoder layer with k/v NULL: an error before any op (it used to skip the write and
       attend without the new tokens) */
    fa_layer_desc d2 = make_desc();
    ASSERT_OK(fa_layer_init(&c.layer, &d2));
    clear_log();
    cr_assert_eq(fa_forward(&c.layer, &BE, &c.q, NULL, NULL, &c.kv, &c.md, &c.out), FA_ERR_INVALID_ARG);
    cr_assert_eq(LOG.n, 0, "decoder, k/v NULL: ops ran");
    fa_builder_destroy(c.b);
}

/* ---------------------------------------------------------------------------------------- */
/* cascade (§6.1) */

Test(dispatch, cascade, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    d.sinks = sinks;
    d.num_sinks = HQ;
    d.logits_soft_cap = 20.0f;
    ctx c;
    const int32_t P = 32;
    prepare(&c, &cfg, &d, 1, P, NULL, FA_LAYOUT_NHD);
    cr_assert_eq(c.md.use_cascade, 1);
    cr_assert_eq(c.md.common_prefix_len, P);
    run_forward(&c, &c.k, &c.v);
    int idx[MAXREC];
    int m = compute_calls(idx);
    char buf[1024];
    describe(buf, sizeof buf);
    cr_assert_eq(m, 4, "cascade: write, two attentions, merge; got: %s", buf);
    cr_assert_eq(LOG.r[idx[0]].op, OP_CACHE, "%s", buf);
    cr_assert_eq(LOG.r[idx[1]].op, OP_ATTN, "%s", buf);
    cr_assert_eq(LOG.r[idx[2]].op, OP_ATTN, "%s", buf);
    cr_assert_eq(LOG.r[idx[3]].op, OP_MERGE, "%s", buf);
    check_cache_write(&c, &LOG.r[idx[0]].cw);
    rec *rp = &LOG.r[idx[1]], *rs = &LOG.r[idx[2]];
    if (rp->at.num_seqs != 1) {
        rec *t = rp;
        rp = rs;
        rs = t;
    }
    const fa_attn_args *pa = &rp->at, *sa = &rs->at;
    /* prefix: all T rows as one sequence against the shared prefix, row 0, non-causal */
    cr_assert_eq(pa->num_seqs, 1, "prefix call has one sequence");
    const int32_t pcu[2] = {0, T};
    check_cuq(rp, pcu, 1, "prefix");
    cr_assert(rp->has_sk && rp->sk[0] == P, "prefix seqused_k = {P}, got %d", rp->sk[0]);
    cr_assert_eq(pa->block_table, bt, "prefix uses row 0");
    cr_assert_eq(pa->causal, 0, "prefix non-causal");
    cr_assert(pa->window_left == -1 && pa->window_right == -1, "prefix window (%d,%d)", pa->window_left,
              pa->window_right);
    cr_assert_not_null(pa->lse, "prefix returns LSE");
    cr_assert_eq(pa->sinks, sinks, "prefix carries the sink");
    cr_assert_eq(pa->max_seqlen_q, T);
    cr_assert_eq(pa->min_seqlen_q, 0, "prefix: no hint");
    cr_assert_eq(pa->max_seqlen_k, P);
    cr_assert_eq(pa->num_tokens, T);
    cr_assert_eq(pa->q, (const void *)qbuf);
    cr_assert_float_eq(pa->softcap, 20.0f, 0);
    check_paged_kv(&c, pa);
    /* suffix: per request, block table offset by P/bs columns, seq_lens - P, causal, no sink */
    cr_assert_eq(sa->num_seqs, NREQ);
    check_cuq(rs, qsl, NREQ, "suffix");
    cr_assert(rs->has_sk);
    for (int i = 0; i < NREQ; ++i)
        cr_assert_eq(rs->sk[i], seql[i] - P, "suffix seqused_k[%d] = %d, expected %d", i, rs->sk[i],
                     seql[i] - P);
    cr_assert_eq(sa->block_table, bt + P / BS, "suffix table offset by P/bs columns");
    cr_assert_eq(sa->block_table_stride, BTS, "suffix keeps the row stride");
    cr_assert_eq(sa->causal, 1);
    cr_assert_not_null(sa->lse, "suffix returns LSE");
    cr_assert_null(sa->sinks, "suffix has no sink");
    cr_assert_eq(sa->max_seqlen_k, 90 - P);
    cr_assert_eq(sa->max_seqlen_q, 7);
    cr_assert_eq(sa->min_seqlen_q, 1, "suffix: min_seqlen_q hint");
    cr_assert_eq(sa->q, (const void *)qbuf);
    cr_assert_float_eq(sa->softcap, 20.0f, 0);
    check_paged_kv(&c, sa);
    /* the two partials do not alias */
    cr_assert_neq(pa->out, sa->out);
    cr_assert_neq(pa->lse, sa->lse);
    /* merge of the two into out */
    const fa_merge_args *mg = &LOG.r[idx[3]].mg;
    cr_assert_eq(mg->out, (void *)obuf);
    cr_assert_eq(mg->out_token_stride, HQ * D);
    cr_assert_eq(mg->out_head_stride, D);
    cr_assert_eq(mg->prefix_out, pa->out);
    cr_assert_eq(mg->prefix_token_stride, pa->out_token_stride);
    cr_assert_eq(mg->prefix_head_stride, pa->out_head_stride);
    cr_assert_eq(mg->prefix_lse, pa->lse);
    cr_assert_eq(mg->prefix_lse_head_stride, pa->lse_head_stride);
    cr_assert_eq(mg->suffix_out, sa->out);
    cr_assert_eq(mg->suffix_token_stride, sa->out_token_stride);
    cr_assert_eq(mg->suffix_head_stride, sa->out_head_stride);
    cr_assert_eq(mg->suffix_lse, sa->lse);
    cr_assert_eq(mg->suffix_lse_head_stride, sa->lse_head_stride);
    cr_assert_eq(mg->dtype, FA_DTYPE_F16);
    cr_assert_eq(mg->num_tokens, T);
    cr_assert_eq(mg->num_heads, HQ);
    cr_assert_eq(mg->head_size, D);
    /* the metadata's cascade arrays */
    cr_assert_eq(c.md.cu_prefix_query_lens[0], 0);
    cr_assert_eq(c.md.cu_prefix_query_lens[1], T);
    cr_assert_eq(c.md.prefix_kv_lens[0], P);
    fa_builder_destroy(c.b);
}

/* ---------------------------------------------------------------------------------------- */
/* encoder paths (§11) */

static void encoder_case(fa_attn_type type, int32_t W, int32_t wl, int32_t wr)
{
    setup_backend();
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    d.attn_type = type;
    d.sliding_window = W;
    ctx c;
    /* encoder batches: no context (seq_len = query_len) */
    int32_t save[NREQ];
    memcpy(save, seql, sizeof save);
    for (int i = 0; i < NREQ; ++i) seql[i] = qsl[i + 1] - qsl[i];
    prepare(&c, &cfg, &d, 0, 0, NULL, FA_LAYOUT_NHD);
    run_forward(&c, &c.k, &c.v);
    const int ops[1] = {OP_ATTN};
    expect_sequence(ops, 1, "encoder");
    rec *r = nth(OP_ATTN, 0);
    const fa_attn_args *a = &r->at;
    check_plain_q_out(a);
    cr_assert_eq(a->k, (const void *)kbuf, "dense keys from k");
    cr_assert_eq(a->v, (const void *)vbuf, "dense values from v");
    cr_assert_eq(a->k_row_stride, HKV * D);
    cr_assert_eq(a->k_head_stride, D);
    cr_assert_eq(a->v_row_stride, HKV * D);
    cr_assert_eq(a->v_head_stride, D);
    cr_assert_null(a->seqused_k, "dense: no seqused_k");
    cr_assert(r->has_cuk, "dense: cu_seqlens_k given");
    cr_assert_eq(a->num_keys, TPAD, "dense: num_keys = rows of k (%lld)", (long long)a->num_keys);
    check_cuq(r, qsl, NREQ, "encoder");
    for (int i = 0; i <= NREQ; ++i) cr_assert_eq(r->cuk[i], qsl[i], "cu_seqlens_k == cu_seqlens_q");
    cr_assert_eq(a->causal, 0);
    cr_assert(a->window_left == wl && a->window_right == wr, "window (%d,%d), expected (%d,%d)",
              a->window_left, a->window_right, wl, wr);
    cr_assert_eq(a->num_seqs, NREQ);
    cr_assert_eq(a->num_tokens, T);
    cr_assert_eq(a->max_seqlen_q, 7);
    cr_assert_eq(a->max_seqlen_k, 7, "max_seqlen_k = max_query_len");
    memcpy(seql, save, sizeof save);
    fa_builder_destroy(c.b);
}

Test(dispatch, encoder) { encoder_case(FA_ATTN_ENCODER, 0, -1, -1); }
Test(dispatch, encoder_window) { encoder_case(FA_ATTN_ENCODER, 5, 4, 0); }
Test(dispatch, encoder_only) { encoder_case(FA_ATTN_ENCODER_ONLY, 0, -1, -1); }
Test(dispatch, encoder_only_window) { encoder_case(FA_ATTN_ENCODER_ONLY, 5, 4, 4); }

/* ---------------------------------------------------------------------------------------- */
/* chunked local (§8) */

Test(dispatch, chunked_local, .init = setup_backend)
{
    const int32_t C = 32;
    fa_config cfg = make_cfg();
    cfg.scheduler.attention_chunk_size = C;
    fa_layer_desc d = make_desc();
    d.attention_chunk_size = C;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    cr_assert_eq(c.md.has_local, 1);
    int32_t V = 0;
    ASSERT_OK(fa_local_virtual_batches_count(C, qsl, seql, NREQ, &V));
    cr_assert_eq(c.md.local.num_virtual, V);
    run_forward(&c, &c.k, &c.v);
    const int ops[2] = {OP_CACHE, OP_ATTN};
    expect_sequence(ops, 2, "chunked local");
    check_cache_write(&c, &nth(OP_CACHE, 0)->cw);
    rec *r = nth(OP_ATTN, 0);
    const fa_attn_args *a = &r->at;
    check_plain_q_out(a);
    check_paged_kv(&c, a);
    cr_assert_eq(a->num_seqs, V, "attention over the %d virtual batches, got %d", V, a->num_seqs);
    cr_assert_eq(a->cu_seqlens_q, c.md.local.cu_seqlens_q);
    cr_assert_eq(a->seqused_k, c.md.local.seqused_k);
    cr_assert_eq(a->block_table, c.md.local.block_table);
    cr_assert_eq(a->block_table_stride, C / BS, "local table stride = C/bs");
    cr_assert_eq(c.md.local.block_table_stride, C / BS);
    cr_assert_eq(a->causal, 1);
    cr_assert_eq(a->max_seqlen_q, c.md.local.max_query_len);
    cr_assert_eq(a->max_seqlen_k, c.md.local.max_seq_len);
    cr_assert_eq(a->num_splits, c.md.local.num_splits);
    check_splits(a, c.md.local.split_plan);
    cr_assert_eq(a->num_tokens, T);
    /* the values are those of the pure planner */
    int32_t sq[64], cu[65], sk[64], btl[64 * 2];
    fa_local_batches lb;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = sq;
    lb.cu_seqlens_q = cu;
    lb.seqused_k = sk;
    lb.block_table = btl;
    ASSERT_OK(fa_make_local_virtual_batches(C, BS, qsl, seql, NREQ, bt, BTS, MAXB, 64, &lb));
    for (int i = 0; i <= V; ++i) cr_assert_eq(r->cuq[i], cu[i], "local cu_seqlens_q[%d]", i);
    for (int i = 0; i < V; ++i) cr_assert_eq(r->sk[i], sk[i], "local seqused_k[%d]", i);
    for (int i = 0; i < V * (C / BS); ++i)
        cr_assert_eq(a->block_table[i], btl[i], "local block_table[%d]", i);
    cr_assert_eq(a->max_seqlen_q, lb.max_query_len);
    cr_assert_eq(a->max_seqlen_k, lb.max_seq_len);

    /* a layer without a chunk size on the same metadata: plain attention over the batch */
    fa_layer_desc d2 = make_desc();
    ASSERT_OK(fa_layer_init(&c.layer, &d2));
    clear_log();
    run_forward(&c, &c.k, &c.v);
    expect_sequence(ops, 2, "non-local layer, local metadata");
    a = &nth(OP_ATTN, 0)->at;
    cr_assert_eq(a->num_seqs, NREQ);
    cr_assert_eq(a->block_table, bt);
    cr_assert_eq(a->seqused_k, c.md.seq_lens);
    fa_builder_destroy(c.b);
}

/* ---------------------------------------------------------------------------------------- */
/* DCP (§7.3) */

typedef struct dcp_seen {
    int ctx_sinks, q_sinks;
    const float *ctx_sink_ptr;
} dcp_seen;

static void dcp_rank_case(int32_t N, int32_t r, const float *layer_sinks, dcp_seen *seen)
{
    setup_backend();
    setup_comm(N, r);
    fa_config cfg = make_cfg();
    cfg.parallel.dcp_world_size = N;
    cfg.parallel.dcp_rank = r;
    fa_layer_desc d = make_desc();
    d.dcp_world_size = N;
    d.sinks = layer_sinks;
    d.num_sinks = layer_sinks ? HQ : 0;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, &COMM, FA_LAYOUT_NHD);
    cr_assert_eq(c.md.dcp_world_size, N);
    cr_assert_eq(c.md.dcp_rank, r);
    run_forward(&c, &c.k, &c.v);
    char buf[2048];
    describe(buf, sizeof buf);
    int idx[MAXREC];
    int m = compute_calls(idx);
    cr_assert_eq(m, 8,
                 "DCP: write, all_gather q, context attention, all_gather lse, dcp_correct, "
                 "reduce_scatter, query attention, merge; got: %s",
                 buf);
    /* roles */
    int i_cache = -1, i_ag1 = -1, i_ag2 = -1, i_ctx = -1, i_q = -1, i_dc = -1, i_rs = -1, i_mg = -1;
    for (int i = 0; i < m; ++i) {
        rec *x = &LOG.r[idx[i]];
        switch (x->op) {
        case OP_CACHE: i_cache = idx[i]; break;
        case OP_AG:
            if (i_ag1 < 0)
                i_ag1 = idx[i];
            else
                i_ag2 = idx[i];
            break;
        case OP_ATTN:
            if (x->at.cu_seqlens_k)
                i_q = idx[i];
            else
                i_ctx = idx[i];
            break;
        case OP_DCP: i_dc = idx[i]; break;
        case OP_RS: i_rs = idx[i]; break;
        case OP_MERGE: i_mg = idx[i]; break;
        }
    }
    cr_assert(i_cache >= 0 && i_ag1 >= 0 && i_ag2 >= 0 && i_ctx >= 0 && i_q >= 0 && i_dc >= 0 && i_rs >= 0 &&
                  i_mg >= 0,
              "missing a role: %s", buf);
    cr_assert(i_cache < i_ctx && i_ag1 < i_ctx && i_ctx < i_ag2 && i_ag2 < i_dc && i_dc < i_rs &&
                  i_rs < i_mg && i_q < i_mg,
              "order: %s", buf);
    check_cache_write(&c, &LOG.r[i_cache].cw);
    /* all_gather of q */
    rec *ag1 = &LOG.r[i_ag1];
    cr_assert_eq(ag1->cm.send, (const void *)qbuf, "all_gather sends q");
    cr_assert_eq(ag1->cm.count, (size_t)T * HQ * D);
    cr_assert_eq(ag1->cm.dtype, FA_DTYPE_F16);
    /* context attention */
    rec *rc = &LOG.r[i_ctx];
    const fa_attn_args *ca = &rc->at;
    cr_assert_eq(ca->q, ag1->cm.recv, "context attention reads the gathered q");
    cr_assert_eq(ca->num_heads_q, N * HQ, "gathered heads %d", ca->num_heads_q);
    cr_assert_eq(ca->num_heads_kv, HKV);
    /* gathered q is [N][T][Hq][D]: rank s's heads are group s */
    cr_assert_eq(ca->q_head_group, HQ, "q_head_group %d", ca->q_head_group);
    cr_assert_eq(ca->q_group_stride, (int64_t)T * HQ * D, "q_group_stride %lld",
                 (long long)ca->q_group_stride);
    cr_assert_eq(ca->q_token_stride, HQ * D);
    cr_assert_eq(ca->q_head_stride, D);
    cr_assert_eq(ca->causal, 0, "context part non-causal");
    cr_assert_not_null(ca->lse);
    cr_assert_eq(ca->block_table, bt);
    cr_assert_eq(ca->num_seqs, NREQ);
    cr_assert_eq(ca->num_tokens, T);
    check_cuq(rc, qsl, NREQ, "dcp context");
    cr_assert_eq(ca->seqused_k, c.md.dcp_context_kv_lens);
    cr_assert(rc->has_sk);
    int32_t mx = 0;
    for (int i = 0; i < NREQ; ++i) {
        int32_t ctxlen = seql[i] - (qsl[i + 1] - qsl[i]);
        int32_t want = fa_dcp_local_seq_len(ctxlen, N, r, 1);
        cr_assert_eq(rc->sk[i], want, "rank %d: context kv len[%d] = %d, expected %d", r, i, rc->sk[i], want);
        if (seql[i] > mx) mx = seql[i];
    }
    cr_assert_eq(ca->max_seqlen_k, c.md.max_dcp_context_kv_len);
    cr_assert_eq(c.md.max_dcp_context_kv_len, (mx + N - 1) / N);
    check_paged_kv(&c, ca);
    /* all_gather of the LSEs */
    rec *ag2 = &LOG.r[i_ag2];
    cr_assert_eq(ag2->cm.send, (const void *)ca->lse, "all_gather sends the context LSE");
    cr_assert_eq(ca->lse_head_stride, T, "LSE [N*H, T] contiguous for the gather");
    cr_assert_eq(ag2->cm.count, (size_t)N * HQ * T);
    cr_assert_eq(ag2->cm.dtype, FA_DTYPE_F32);
    /* correction */
    const fa_dcp_correct_args *dc = &LOG.r[i_dc].dc;
    cr_assert_eq(dc->out, ca->out);
    cr_assert_eq(dc->out_token_stride, ca->out_token_stride);
    cr_assert_eq(dc->out_head_stride, ca->out_head_stride);
    cr_assert_eq(dc->lse_all, (const float *)ag2->cm.recv);
    cr_assert_eq(dc->world_size, N);
    cr_assert_eq(dc->rank, r);
    cr_assert_eq(dc->num_tokens, T);
    cr_assert_eq(dc->num_heads, N * HQ);
    cr_assert_eq(dc->head_size, D);
    cr_assert_eq(dc->dtype, FA_DTYPE_F16);
    /* reduce-scatter of the corrected partial output */
    rec *rs = &LOG.r[i_rs];
    cr_assert_eq(rs->cm.send, (const void *)ca->out);
    cr_assert_eq(rs->cm.count, (size_t)T * HQ * D);
    cr_assert_eq(rs->cm.dtype, FA_DTYPE_F16);
    /* chunk s of the send buffer holds the heads of rank s: out(t, s*H + h) is inside chunk s */
    for (int s = 0; s < N; ++s) {
        int64_t lo = (int64_t)s * T * HQ * D, hi = lo + (int64_t)T * HQ * D;
        int64_t a0 = (int64_t)0 * ca->out_token_stride + (int64_t)(s * HQ) * ca->out_head_stride;
        int64_t a1 = (int64_t)(T - 1) * ca->out_token_stride +
                     (int64_t)(s * HQ + HQ - 1) * ca->out_head_stride + D - 1;
        cr_assert(a0 >= lo && a0 < hi && a1 >= lo && a1 < hi,
                  "context out layout (token stride %lld, head stride %lld) does not put rank %d's heads in "
                  "chunk %d",
                  (long long)ca->out_token_stride, (long long)ca->out_head_stride, s, s);
    }
    /* query part: the new tokens among themselves, dense, causal, local heads */
    rec *rq = &LOG.r[i_q];
    const fa_attn_args *qa = &rq->at;
    cr_assert_eq(qa->q, (const void *)qbuf);
    cr_assert_eq(qa->num_heads_q, HQ);
    cr_assert_eq(qa->num_heads_kv, HKV);
    cr_assert(qa->q_head_group == 0 || qa->q_head_group == HQ);
    cr_assert_eq(qa->k, (const void *)kbuf);
    cr_assert_eq(qa->v, (const void *)vbuf);
    cr_assert_null(qa->seqused_k);
    check_cuq(rq, qsl, NREQ, "dcp query");
    for (int i = 0; i <= NREQ; ++i) cr_assert_eq(rq->cuk[i], qsl[i], "cu_seqlens_k = cu_seqlens_q");
    cr_assert_eq(qa->causal, 1);
    cr_assert_not_null(qa->lse);
    cr_assert_eq(qa->max_seqlen_k, 7);
    /* merge */
    const fa_merge_args *mg = &LOG.r[i_mg].mg;
    cr_assert_eq(mg->out, (void *)obuf);
    cr_assert_eq(mg->prefix_out, rs->cm.recv, "merge: context part = reduce-scattered output");
    cr_assert_eq(mg->suffix_out, qa->out);
    cr_assert_eq(mg->suffix_lse, qa->lse);
    cr_assert_eq(mg->suffix_lse_head_stride, qa->lse_head_stride);
    if (dc->lse_out) {
        cr_assert_eq(mg->prefix_lse, dc->lse_out + (int64_t)r * HQ * T,
                     "merge: context LSE = the global L of this rank's heads");
        cr_assert_eq(mg->prefix_lse_head_stride, T);
    }
    cr_assert_eq(mg->num_heads, HQ);
    cr_assert_eq(mg->num_tokens, T);
    if (seen) {
        seen->ctx_sinks += (ca->sinks != NULL);
        seen->ctx_sink_ptr = ca->sinks;
        seen->q_sinks += (qa->sinks != NULL);
        if (qa->sinks) cr_assert_eq(qa->sinks, layer_sinks, "query part uses this rank's sinks");
    }
    fa_builder_destroy(c.b);
}

Test(dispatch, dcp_two_ranks)
{
    dcp_rank_case(2, 0, NULL, NULL);
    dcp_rank_case(2, 1, NULL, NULL);
}

Test(dispatch, dcp_four_ranks)
{
    for (int r = 0; r < 4; ++r) dcp_rank_case(4, r, NULL, NULL);
}

/* flashattn includes sinks in the DCP path (decision table). Each global head's sink must be
   counted exactly once over the group: with a sink in every rank's context call it would be
   counted N times (and the layer's [Hq] sinks do not cover the N*Hq gathered heads). */
Test(dispatch, dcp_sinks_counted_once)
{
    static float rank_sinks[2][HQ];
    dcp_seen seen;
    memset(&seen, 0, sizeof seen);
    for (int r = 0; r < 2; ++r) {
        for (int h = 0; h < HQ; ++h) rank_sinks[r][h] = 0.1f * (float)(r * HQ + h) - 0.3f;
        dcp_rank_case(2, r, rank_sinks[r], &seen);
        if (seen.ctx_sink_ptr)
            cr_assert(seen.ctx_sink_ptr != rank_sinks[r],
                      "rank %d: the context call (N*Hq = %d gathered heads) reads the layer's %d sinks", r,
                      2 * HQ, HQ);
    }
    cr_assert(seen.ctx_sinks + seen.q_sinks > 0,
              "DCP dropped the sinks (decision table: flashattn keeps them)");
    cr_assert(seen.q_sinks == 2 ? seen.ctx_sinks == 0 : seen.ctx_sinks == 1,
              "sinks in %d context calls and %d query calls over 2 ranks: each head's sink must count once",
              seen.ctx_sinks, seen.q_sinks);
}

/* DCP with q as a token-strided view (a slice of a fused QKV buffer): q is packed with copy_2d
   into a contiguous [T, Hq, D] buffer, and that buffer is what the all_gather sends */
Test(dispatch, dcp_strided_q_is_packed, .init = setup_backend)
{
    static uint16_t fused[TPAD * (HQ + 2 * HKV) * D];
    setup_comm(2, 1);
    fa_config cfg = make_cfg();
    cfg.parallel.dcp_world_size = 2;
    cfg.parallel.dcp_rank = 1;
    fa_layer_desc d = make_desc();
    d.dcp_world_size = 2;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, &COMM, FA_LAYOUT_NHD);
    const int64_t W = (HQ + 2 * HKV) * D;
    c.q.data = fused;
    c.q.stride[0] = W;
    ASSERT_OK(fa_forward(&c.layer, &BE, &c.q, &c.k, &c.v, &c.kv, &c.md, &c.out));
    rec *cp = nth(OP_COPY2D, 0);
    rec *ag = nth(OP_AG, 0);
    cr_assert_eq(cp->c2.src, (const void *)fused);
    cr_assert_eq(cp->c2.spitch, (size_t)W * 2);
    cr_assert_eq(cp->c2.width, (size_t)HQ * D * 2);
    cr_assert_eq(cp->c2.dpitch, (size_t)HQ * D * 2, "packed rows");
    cr_assert_eq(cp->c2.rows, (size_t)T);
    cr_assert_eq(ag->cm.send, (const void *)cp->c2.dst, "all_gather sends the packed q");
    cr_assert(cp < ag, "pack before gather");
    fa_builder_destroy(c.b);
}

/* an fp8 layer: the cache write and the attention get the fp8 storage dtype and the scales */
Test(dispatch, fp8_layer_args, .init = setup_backend)
{
    static uint8_t cache8[2 * NB * BS * HKV * D];
    fa_config cfg = make_cfg();
    cfg.cache.cache_dtype = FA_CACHE_FP8_E5M2;
    fa_layer_desc d = make_desc();
    d.kv_cache_dtype = FA_CACHE_FP8_E5M2;
    d.k_scale = 0.25f;
    d.v_scale = 0.125f;
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    c.kv.data = cache8;
    c.kv.dtype = FA_DTYPE_FP8_E5M2;
    run_forward(&c, &c.k, &c.v);
    const fa_cache_write_args *w = &nth(OP_CACHE, 0)->cw;
    cr_assert_eq(w->cache_dtype, FA_DTYPE_FP8_E5M2);
    cr_assert_eq(w->kv_dtype, FA_DTYPE_F16);
    cr_assert_eq(w->key_cache, (void *)cache8);
    cr_assert_eq(w->value_cache, (void *)(cache8 + c.kv.stride[0]), "value cache offset in bytes of fp8");
    cr_assert_float_eq(w->k_scale, 0.25f, 0);
    cr_assert_float_eq(w->v_scale, 0.125f, 0);
    const fa_attn_args *a = &nth(OP_ATTN, 0)->at;
    cr_assert_eq(a->kv_dtype, FA_DTYPE_FP8_E5M2);
    cr_assert_eq(a->q_dtype, FA_DTYPE_F16);
    cr_assert_eq(a->v, (const void *)(cache8 + c.kv.stride[0]));
    cr_assert(a->k_descale == NULL ? a->k_scale == 0.25f : 1, "k scale %g", (double)a->k_scale);
    cr_assert(a->v_descale == NULL ? a->v_scale == 0.125f : 1, "v scale %g", (double)a->v_scale);
    fa_builder_destroy(c.b);
}

/* cascade: the prefix call uses the metadata's prefix split plan, the suffix call the main one */
Test(dispatch, cascade_split_plans, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    ctx c;
    prepare(&c, &cfg, &d, 1, 32, NULL, FA_LAYOUT_NHD);
    run_forward(&c, &c.k, &c.v);
    rec *r0 = nth(OP_ATTN, 0), *r1 = nth(OP_ATTN, 1);
    if (r0->at.num_seqs != 1) {
        rec *t = r0;
        r0 = r1;
        r1 = t;
    }
    cr_assert_eq(r0->at.num_splits, c.md.prefix_num_splits);
    check_splits(&r0->at, c.md.prefix_split_plan);
    cr_assert_eq(r1->at.num_splits, c.md.num_splits);
    check_splits(&r1->at, c.md.split_plan);
    fa_builder_destroy(c.b);
}

/* ---------------------------------------------------------------------------------------- */
/* work counters: every attention call of every path gets the builder's (fa_attn_args) */

/* one forward on a fresh builder; the attention calls checked (and how many split) */
static int wc_case(fa_config cfg, fa_layer_desc d, int causal, int32_t prefix, const fa_comm *comm,
                   int *splits)
{
    ctx c;
    prepare(&c, &cfg, &d, causal, prefix, comm, FA_LAYOUT_NHD);
    const int32_t *want = c.b->work_counters;
    if (BE.ops.fill != NULL) {
        cr_assert_not_null(want);
        cr_assert_eq((uintptr_t)want % 16, 0, "work counters %p: 16-byte aligned", (void *)want);
        cr_assert((const char *)want >= (const char *)c.b->dev_ws &&
                      (const char *)(want + FA_WORK_COUNTERS) <= (const char *)c.b->dev_ws + c.b->ws_bytes,
                  "work counters inside the builder's workspace");
    } else {
        cr_assert_null(want, "a backend without fill: no counters");
    }
    run_forward(&c, &c.k, &c.v);
    int n = 0;
    for (int i = 0; i < LOG.n; ++i)
        if (LOG.r[i].op == OP_ATTN) {
            cr_assert_eq(LOG.r[i].at.work_counters, want);
            *splits += LOG.r[i].at.num_splits > 1;
            ++n;
        }
    fa_builder_destroy(c.b);
    return n;
}

static void wc_every_path(int with_fill)
{
    int splits = 0, n;
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    setup_backend();
    if (!with_fill) BE.ops.fill = NULL;
    /* without and with full CUDA graphs (then every call launches the split cap: splits) */
    for (int graph = 0; graph < 2; ++graph) {
        fa_config gc = cfg, lc;
        fa_layer_desc ld = d;
        const int before = splits;
        gc.compilation.full_cuda_graph = graph;
        /* plain */
        n = wc_case(gc, d, 1, 0, NULL, &splits);
        cr_assert_eq(n, 1, "graph %d: plain: one attention call, got %d", graph, n);
        /* cascade: prefix and suffix */
        n = wc_case(gc, d, 1, 32, NULL, &splits);
        cr_assert_eq(n, 2, "graph %d: cascade: prefix + suffix, got %d", graph, n);
        /* chunked local */
        lc = gc;
        lc.scheduler.attention_chunk_size = 32;
        ld.attention_chunk_size = 32;
        n = wc_case(lc, ld, 1, 0, NULL, &splits);
        cr_assert_eq(n, 1, "graph %d: chunked local: one call, got %d", graph, n);
        if (graph) cr_assert_geq(splits - before, 4, "full graphs: %d split calls of 4", splits - before);
    }
    /* encoder (dense, no cache): the batch's keys are its queries */
    {
        int32_t save[NREQ];
        fa_layer_desc ed = d;
        ed.attn_type = FA_ATTN_ENCODER;
        memcpy(save, seql, sizeof save);
        for (int i = 0; i < NREQ; ++i) seql[i] = qsl[i + 1] - qsl[i];
        n = wc_case(cfg, ed, 0, 0, NULL, &splits);
        memcpy(seql, save, sizeof save);
        cr_assert_eq(n, 1, "encoder: one call, got %d", n);
    }
    /* DCP over 2 ranks: the context call and the new tokens' call */
    {
        fa_config dc = cfg;
        fa_layer_desc dd = d;
        setup_comm(2, 1);
        dc.parallel.dcp_world_size = 2;
        dc.parallel.dcp_rank = 1;
        dd.dcp_world_size = 2;
        n = wc_case(dc, dd, 1, 0, &COMM, &splits);
        cr_assert_eq(n, 2, "DCP: context + query part, got %d", n);
    }
    cr_assert_gt(splits, 0, "no attention call split the keys: the split path went unchecked");
}

Test(dispatch, work_counters_on_every_call) { wc_every_path(1); }

/* a backend without fill: the builder has no counters and every call gets NULL */
Test(dispatch, work_counters_null_without_fill) { wc_every_path(0); }

/* ---------------------------------------------------------------------------------------- */
/* profiling run */

Test(dispatch, profiling_run, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    ASSERT_OK(fa_forward_profile(&c.layer, &BE, &c.out));
    char buf[512];
    describe(buf, sizeof buf);
    cr_assert_eq(LOG.n, 1, "profiling: one fill and nothing else; got: %s", buf);
    cr_assert_eq(LOG.r[0].op, OP_FILL, "got: %s", buf);
    const rec *f = &LOG.r[0];
    cr_assert_eq(f->fl.dst, (void *)obuf);
    cr_assert_eq(f->fl.value, 0);
    size_t total = sizeof obuf;
    int whole =
        (f->fl.rows == 1 && f->fl.width == total) ||
        (f->fl.pitch == f->fl.width && f->fl.width * f->fl.rows == total) ||
        (f->fl.rows == TPAD && f->fl.width == (size_t)HQ * D * 2 && f->fl.pitch == (size_t)HQ * D * 2);
    cr_assert(whole, "fill covers the whole out [T_pad, Hq, D]: pitch %zu width %zu rows %zu", f->fl.pitch,
              f->fl.width, f->fl.rows);
    fa_builder_destroy(c.b);
}

Test(dispatch, no_alloc_in_build_and_forward, .init = setup_backend)
{
    fa_config cfg = make_cfg();
    fa_layer_desc d = make_desc();
    ctx c;
    prepare(&c, &cfg, &d, 1, 0, NULL, FA_LAYOUT_NHD);
    for (int i = 0; i < 3; ++i) {
        ASSERT_OK(fa_builder_build(c.b, &c.batch, i == 1 ? 32 : 0, &c.md));
        run_forward(&c, &c.k, &c.v);
    }
    cr_assert_eq(LOG.counts[OP_ALLOC], 0);
    cr_assert_eq(LOG.counts[OP_FREE], 0);
    fa_builder_destroy(c.b);
}
