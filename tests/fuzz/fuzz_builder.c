/* fuzz_builder: fa_builder_create (CPU backend), fa_builder_set_layers, fa_builder_build,
   fa_builder_cascade_prefix_len, with small shapes. */
#include "fuzz_common.h"
#include "fa_cpu.h"

#define MAXR 8
#define MAXRS 8

static fa_backend *cpu_be(void)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    return be;
}

static fa_status dummy_gather(void *ctx, const void *s, void *r, size_t n, fa_dtype t)
{
    (void)ctx;
    (void)s;
    (void)r;
    (void)n;
    (void)t;
    FZ_CHECK(!"a builder call ran a collective");
    return FA_ERR_BACKEND;
}

/* Snapshot of what a metadata exposes (device = host on the CPU backend). */
typedef struct md_snap {
    int32_t n, v;
    int32_t qsl[MAXR + 1], seq[MAXR], plan[MAXR + 1], suffix[MAXR], sufplan[MAXR + 1], dcp[MAXR];
    int32_t pre[4];
    int32_t lcu[64], lk[64], lplan[64];
} md_snap;

static void snap_md(const fa_metadata *md, int32_t max_seqs, md_snap *s)
{
    int32_t n = md->num_reqs, i;
    memset(s, 0, sizeof *s);
    s->n = n;
    for (i = 0; i <= n; ++i) s->qsl[i] = md->query_start_loc[i];
    for (i = 0; i < n; ++i) s->seq[i] = md->seq_lens[i];
    for (i = 0; i <= max_seqs && i <= MAXR; ++i) s->plan[i] = md->split_plan[i];
    if (md->use_cascade) {
        for (i = 0; i < n; ++i) s->suffix[i] = md->suffix_kv_lens[i];
        for (i = 0; i <= max_seqs && i <= MAXR && md->suffix_split_plan; ++i)
            s->sufplan[i] = md->suffix_split_plan[i];
        s->pre[0] = md->cu_prefix_query_lens[0];
        s->pre[1] = md->cu_prefix_query_lens[1];
        s->pre[2] = md->prefix_kv_lens[0];
    }
    if (md->dcp_world_size > 1)
        for (i = 0; i < n; ++i) s->dcp[i] = md->dcp_context_kv_lens[i];
    if (md->has_local) {
        s->v = md->local.num_virtual < 63 ? md->local.num_virtual : 63;
        for (i = 0; i <= s->v; ++i) s->lcu[i] = md->local.cu_seqlens_q[i];
        for (i = 0; i < s->v; ++i) s->lk[i] = md->local.seqused_k[i];
    }
}

/* fa_metadata_describe into a guarded buffer of a fuzzed size; expect_ok: 1 must succeed, 0 must
   fail (stale or destroyed metadata), -1 either. */
static void describe(fz_reader *r, const fa_metadata *md, int expect_ok)
{
    fz_buf tb, nb;
    size_t cap = (size_t)fz_range(r, 0, 300), *needed;
    int null_buf = cap == 0 && fz_bool(r), null_needed = fz_u8(r) == 1;
    char *text = (char *)fz_buf_new(&tb, cap);
    fa_status s;
    needed = (size_t *)fz_buf_new(&nb, sizeof *needed);
    s = fa_metadata_describe(md, null_buf ? NULL : text, cap, null_needed ? NULL : needed);
    fz_check_status(s, "fa_metadata_describe", NULL);
    FZ_CHECK(fz_buf_guards_ok(&tb) && fz_buf_guards_ok(&nb));
    if (expect_ok == 1) FZ_CHECK(s == FA_OK);
    if (expect_ok == 0) FZ_CHECK(s == FA_ERR_INVALID_ARG);
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&tb) && fz_buf_unchanged(&nb));
    } else {
        size_t len = cap > 0 ? strnlen(text, cap) : 0;
        if (cap > 0) FZ_CHECK(len < cap); /* NUL-terminated inside the buffer */
        if (!null_needed) {
            FZ_CHECK(*needed > 0); /* the buffer size for the whole text, NUL included */
            if (cap > 0) FZ_CHECK(len == (*needed - 1 < cap - 1 ? *needed - 1 : cap - 1));
        }
    }
    fz_buf_free(&tb);
    fz_buf_free(&nb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fa_config cfg;
    fa_comm comm;
    fa_builder **bp, *b = NULL;
    fz_buf bb;
    fa_status s;
    size_t ws = 0;
    int step, have_md = 0;
    fa_metadata last;
    const fa_config *rc;
    fz_init(&r, data, size);
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_kv = fz_small_or_any(&r, 1, 4);
    cfg.model.num_heads_q = cfg.model.num_heads_kv > 0 && cfg.model.num_heads_kv <= 4
                                ? cfg.model.num_heads_kv * fz_range(&r, 1, 4)
                                : fz_small_or_any(&r, 0, 8);
    cfg.model.head_size = fz_bool(&r) ? 8 * fz_range(&r, 1, 32) : fz_small_or_any(&r, 0, 300);
    cfg.model.dtype = (fa_dtype)fz_small_or_any(&r, 0, 2);
    cfg.cache.block_size = fz_bool(&r) ? 16 * fz_range(&r, 0, 4) : fz_small_or_any(&r, 0, 64);
    cfg.cache.cache_dtype = (fa_cache_dtype)fz_small_or_any(&r, 0, 3);
    cfg.parallel.dcp_world_size = (fz_u8(&r) & 3) ? 0 : fz_small_or_any(&r, 1, 4);
    cfg.parallel.dcp_rank = fz_small_or_any(&r, 0, 3);
    cfg.parallel.cp_kv_cache_interleave_size = fz_bool(&r) ? 0 : fz_small_or_any(&r, 1, 16);
    cfg.compilation.full_cuda_graph = fz_bool(&r);
    cfg.compilation.max_cudagraph_capture_size = fz_small_or_any(&r, 0, 64);
    cfg.compilation.max_num_splits_for_cuda_graph = fz_small_or_any(&r, 0, 8);
    cfg.compilation.batch_invariant = fz_u8(&r) == 1;
    cfg.compilation.max_num_splits = fz_small_or_any(&r, 0, 16);
    cfg.scheduler.max_num_seqs = fz_small_or_any(&r, 1, MAXR);
    cfg.scheduler.max_num_batched_tokens = fz_small_or_any(&r, 1, 128);
    cfg.scheduler.attention_chunk_size = fz_bool(&r) ? 0 : fz_small_or_any(&r, 0, 64);
    cfg.debug.validate = fz_u8(&r) == 1;
    /* keep the builder small: the size query first (it has its own target) */
    if (fa_builder_workspace_size(&cfg, &ws) == FA_OK && ws > ((size_t)2 << 20)) return 0;
    memset(&comm, 0, sizeof comm);
    comm.api_version = FA_BACKEND_API_VERSION;
    comm.world_size = fz_bool(&r) ? cfg.parallel.dcp_world_size : fz_small_or_any(&r, 0, 4);
    comm.rank = fz_bool(&r) ? cfg.parallel.dcp_rank : fz_small_or_any(&r, 0, 4);
    comm.all_gather = dummy_gather;
    comm.reduce_scatter = dummy_gather;
    bp = (fa_builder **)fz_buf_new(&bb, sizeof *bp);
    s = fa_builder_create(cpu_be(), &cfg, fz_u8(&r) == 1 ? NULL : &comm, bp);
    fz_check_status(s, "fa_builder_create", "config: ");
    FZ_CHECK(fz_buf_guards_ok(&bb));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&bb));
        fz_buf_free(&bb);
        return 0;
    }
    b = *bp;
    fz_buf_free(&bb);
    FZ_CHECK(b != NULL);
    rc = fa_builder_config(b);
    FZ_CHECK(rc != NULL && rc->model.num_heads_q == cfg.model.num_heads_q);

    if (fz_u8(&r) == 1) { /* register layers (a window, ALiBi, encoder types change the plans) */
        fa_layer layers[3];
        fa_layer_desc d;
        static float slopes[64];
        int32_t nl = fz_range(&r, 0, 3), i;
        for (i = 0; i < nl; ++i) {
            memset(&d, 0, sizeof d);
            d.num_heads_q = rc->model.num_heads_q;
            d.num_heads_kv = rc->model.num_heads_kv;
            d.head_size = rc->model.head_size;
            d.dtype = rc->model.dtype;
            d.attn_type = (fa_attn_type)fz_range(&r, 0, 3);
            d.sliding_window = fz_bool(&r) ? 0 : fz_small_or_any(&r, -1, 64);
            if (fz_u8(&r) == 1 && d.num_heads_q <= 64) {
                d.alibi_slopes = slopes;
                d.num_alibi_slopes = d.num_heads_q;
            }
            d.attention_chunk_size = rc->scheduler.attention_chunk_size;
            d.dcp_world_size = rc->parallel.dcp_world_size;
            if (fa_layer_init(&layers[i], &d) != FA_OK) {
                nl = i;
                break;
            }
        }
        s = fa_builder_set_layers(b, layers, nl);
        fz_check_status(s, "fa_builder_set_layers", NULL);
    }

    for (step = 0; step < 3 && r.i < r.n; ++step) {
        int32_t qsl[MAXR + 1], seq[MAXR], table[MAXR * MAXRS], n_arr, i, rs, P, pre_blocks, *pre;
        int64_t slots[256];
        fa_batch batch;
        fa_metadata *mdp;
        fz_buf mb, pb;
        md_snap before;
        memset(&batch, 0, sizeof batch);
        n_arr = fz_range(&r, 1, MAXR);
        batch.num_reqs = fz_bool(&r) ? n_arr : fz_small_or_any(&r, 0, MAXR);
        if (batch.num_reqs > n_arr) batch.num_reqs = n_arr; /* the arrays hold n_arr */
        qsl[0] = fz_u8(&r) == 7 ? fz_i32(&r) : 0;
        for (i = 0; i < n_arr; ++i) {
            int32_t q = (fz_u8(&r) & 1) ? fz_range(&r, 0, 2) : fz_small_or_any(&r, 0, 40);
            int64_t nx = (int64_t)qsl[i] + q, sl;
            qsl[i + 1] = nx > INT32_MAX || nx < INT32_MIN || fz_u8(&r) == 7 ? fz_i32(&r) : (int32_t)nx;
            sl = (int64_t)fz_small_or_any(&r, 0, 300) + (q > 0 ? q : 0);
            seq[i] = sl > INT32_MAX ? INT32_MAX : (int32_t)sl;
        }
        rs = fz_range(&r, 1, MAXRS);
        for (i = 0; i < n_arr * rs; ++i) table[i] = i;
        for (i = 0; i < 256; ++i) slots[i] = -1;
        batch.query_start_loc = fz_u8(&r) == 3 ? NULL : qsl;
        batch.seq_lens = fz_u8(&r) == 3 ? NULL : seq;
        batch.block_table = fz_u8(&r) == 3 ? NULL : table;
        batch.block_table_host = fz_u8(&r) == 3 ? NULL : table;
        batch.block_table_stride = fz_bool(&r) ? rs : fz_i64(&r);
        /* a wider stride than the table would be a caller bug when something reads the host mirror */
        if (batch.block_table_stride > rs && batch.block_table_host) batch.block_table_stride = rs;
        batch.max_blocks = fz_bool(&r) ? 0 : fz_small_or_any(&r, 0, rs);
        batch.slot_mapping = slots;
        batch.causal = (fa_causal)fz_small_or_any(&r, 0, 2);
        batch.num_actual_tokens = fz_bool(&r) ? 0 : fz_small_or_any(&r, 0, 200);
        if (fz_bool(&r)) {
            P = 0;
        } else if (fz_bool(&r)) {
            int64_t p64 = (int64_t)rc->cache.block_size * fz_range(&r, 0, 4);
            P = p64 > INT32_MAX ? rc->cache.block_size : (int32_t)p64;
        } else {
            P = fz_i32(&r);
        }

        /* the cascade query */
        pre_blocks = fz_small_or_any(&r, 0, 16);
        pre = (int32_t *)fz_buf_new(&pb, sizeof *pre);
        s = fa_builder_cascade_prefix_len(b, fz_u8(&r) == 5 ? NULL : &batch, pre_blocks, pre);
        fz_check_status(s, "fa_builder_cascade_prefix_len", NULL);
        FZ_CHECK(fz_buf_guards_ok(&pb));
        if (s != FA_OK) {
            FZ_CHECK(fz_buf_unchanged(&pb));
        } else if (*pre != 0) {
            FZ_CHECK(*pre > 0 && *pre % rc->cache.block_size == 0);
            FZ_CHECK((int64_t)*pre <= (int64_t)pre_blocks * rc->cache.block_size);
            for (i = 0; i < batch.num_reqs; ++i) FZ_CHECK(*pre <= seq[i] - (qsl[i + 1] - qsl[i]));
            if (fz_bool(&r)) P = *pre; /* build with what it chose */
        }
        fz_buf_free(&pb);

        if (have_md) snap_md(&last, rc->scheduler.max_num_seqs, &before);
        mdp = (fa_metadata *)fz_buf_new(&mb, sizeof *mdp);
        s = fa_builder_build(b, &batch, P, fz_u8(&r) == 5 ? NULL : mdp);
        /* a wrapper reports under its own name (api.md §2); op failures in the §2 op format */
        fz_check_status(s, "fa_builder_build", "backend 'cpu' op");
        FZ_CHECK(fz_buf_guards_ok(&mb));
        if (s != FA_OK) {
            FZ_CHECK(fz_buf_unchanged(&mb));
            if (have_md) { /* the previous metadata stays valid */
                md_snap after;
                snap_md(&last, rc->scheduler.max_num_seqs, &after);
                FZ_CHECK(memcmp(&before, &after, sizeof before) == 0);
                describe(&r, &last, 1); /* and still describable */
            }
        } else {
            const fa_metadata *md = mdp;
            int32_t n = batch.num_reqs, T = qsl[n], maxq = 0, maxs = 0, minq = 0;
            FZ_CHECK(md->builder == b && md->num_reqs == n && md->num_actual_tokens == T);
            FZ_CHECK(T >= 1 && T <= rc->scheduler.max_num_batched_tokens && n <= rc->scheduler.max_num_seqs);
            for (i = 0; i < n; ++i) {
                int32_t ql = qsl[i + 1] - qsl[i];
                FZ_CHECK(ql >= 0 && seq[i] >= 0);
                maxq = ql > maxq ? ql : maxq;
                maxs = seq[i] > maxs ? seq[i] : maxs;
                if (ql > 0 && (minq == 0 || ql < minq)) minq = ql;
            }
            FZ_CHECK(md->max_query_len == maxq && md->max_seq_len == maxs && md->min_query_len == minq);
            for (i = 0; i <= n; ++i) FZ_CHECK(md->query_start_loc[i] == qsl[i]);
            for (i = 0; i < n; ++i) FZ_CHECK(md->seq_lens[i] == seq[i]);
            FZ_CHECK(md->num_splits >= 1 && md->num_splits == md->split_plan[0]);
            for (i = 0; i < n; ++i)
                FZ_CHECK(md->split_plan[1 + i] >= 1 && md->split_plan[1 + i] <= md->split_plan[0]);
            for (i = n; i < rc->scheduler.max_num_seqs; ++i) FZ_CHECK(md->split_plan[1 + i] == 0);
            FZ_CHECK(md->use_cascade == (P > 0));
            if (P > 0) {
                FZ_CHECK(md->common_prefix_len == P && md->prefix_kv_lens[0] == P);
                FZ_CHECK(md->cu_prefix_query_lens[0] == 0 && md->cu_prefix_query_lens[1] == T);
                for (i = 0; i < n; ++i)
                    FZ_CHECK(md->suffix_kv_lens[i] == seq[i] - P && seq[i] - (qsl[i + 1] - qsl[i]) >= P);
                FZ_CHECK(md->prefix_num_splits >= 1);
            }
            if (rc->parallel.dcp_world_size > 1) {
                FZ_CHECK(P == 0 && md->dcp_world_size == rc->parallel.dcp_world_size);
                for (i = 0; i < n; ++i)
                    FZ_CHECK(md->dcp_context_kv_lens[i] ==
                             fa_dcp_local_seq_len(seq[i] - (qsl[i + 1] - qsl[i]), rc->parallel.dcp_world_size,
                                                  rc->parallel.dcp_rank,
                                                  rc->parallel.cp_kv_cache_interleave_size));
            }
            FZ_CHECK(md->has_local == (rc->scheduler.attention_chunk_size > 0));
            if (md->has_local) {
                int32_t V = -1;
                FZ_CHECK(fa_local_virtual_batches_count(rc->scheduler.attention_chunk_size, qsl, seq, n,
                                                        &V) == FA_OK);
                FZ_CHECK(md->local.num_virtual == V && md->local.cu_seqlens_q[0] == 0 &&
                         md->local.cu_seqlens_q[V] == T);
                FZ_CHECK(md->local.num_splits >= 1);
            }
#ifdef FZ_DEBUG
            fprintf(stderr, "build ok: n %d T %d P %d splits %d\n", n, T, P, md->num_splits);
#endif
            describe(&r, md, 1);
            if (have_md) describe(&r, &last, 0); /* the previous build's metadata is stale now */
            last = *md;
            have_md = 1;
        }
        fz_buf_free(&mb);
    }
    fa_builder_destroy(b);
    if (have_md) describe(&r, &last, 0); /* metadata of a destroyed builder is refused, not read */
    return 0;
}
