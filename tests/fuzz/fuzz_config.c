/* fuzz_config: fa_config_resolve, fa_builder_workspace_size. */
#include "fuzz_common.h"

__extension__ typedef unsigned __int128 fz_u128;

static int32_t field(fz_reader *r, int32_t lo, int32_t hi)
{
    switch (fz_u8(r) % 4) {
    case 0: return 0; /* the default */
    case 1: return fz_i32(r);
    default: return fz_range(r, lo, hi);
    }
}

static void read_config(fz_reader *r, fa_config *c)
{
    memset(c, 0, sizeof *c);
    c->model.num_heads_q = field(r, 1, 64);
    c->model.num_heads_kv = field(r, 1, 16);
    c->model.head_size = fz_bool(r) ? 8 * fz_range(r, 1, 32) : field(r, 0, 300);
    c->model.dtype = (fa_dtype)field(r, 0, 6);
    c->model.hybrid_mamba_f32 = field(r, 0, 1);
    c->cache.block_size = fz_bool(r) ? 16 * fz_range(r, 1, 8) : field(r, 0, 300);
    c->cache.cache_dtype = (fa_cache_dtype)field(r, 0, 4);
    c->cache.layout = (fa_kv_layout)field(r, 0, 2);
    c->parallel.dcp_world_size = field(r, 1, 8);
    c->parallel.dcp_rank = field(r, 0, 8);
    c->parallel.cp_kv_cache_interleave_size = field(r, 1, 32);
    c->compilation.full_cuda_graph = field(r, 0, 1);
    c->compilation.max_cudagraph_capture_size = field(r, 0, 1024);
    c->compilation.max_num_splits_for_cuda_graph = field(r, 0, 64);
    c->compilation.batch_invariant = field(r, 0, 1);
    c->compilation.max_num_splits = field(r, 0, 130);
    c->scheduler.max_num_seqs = field(r, 0, 1024);
    c->scheduler.max_num_batched_tokens = field(r, 0, 65536);
    c->scheduler.attention_chunk_size = field(r, 0, 1024);
}

static int valid_resolved(const fa_config *c)
{
    const fa_model_config *m = &c->model;
    int bs_ok = c->cache.block_size > 0 &&
                (m->hybrid_mamba_f32
                     ? (c->cache.block_size == 16 || c->cache.block_size == 32 || c->cache.block_size == 64)
                     : 1);
    return m->num_heads_q > 0 && m->num_heads_kv > 0 && m->num_heads_q % m->num_heads_kv == 0 &&
           m->head_size >= 8 && m->head_size <= 256 && m->head_size % 8 == 0 &&
           (m->dtype == FA_DTYPE_F16 || m->dtype == FA_DTYPE_BF16 || m->dtype == FA_DTYPE_F32) && bs_ok &&
           (int)c->cache.cache_dtype >= 0 && (int)c->cache.cache_dtype <= 3 &&
           (c->cache.layout == FA_LAYOUT_NHD || c->cache.layout == FA_LAYOUT_HND) &&
           c->parallel.dcp_world_size >= 1 && c->parallel.dcp_rank >= 0 &&
           c->parallel.dcp_rank < c->parallel.dcp_world_size &&
           c->parallel.cp_kv_cache_interleave_size >= 1 &&
           c->cache.block_size % c->parallel.cp_kv_cache_interleave_size == 0 &&
           c->compilation.max_num_splits >= 1 && c->compilation.max_num_splits <= 128 &&
           c->compilation.max_num_splits_for_cuda_graph >= 1 &&
           c->compilation.max_cudagraph_capture_size >= 0 && c->scheduler.max_num_seqs >= 1 &&
           c->scheduler.max_num_batched_tokens >= 1 && c->scheduler.attention_chunk_size >= 0 &&
           c->scheduler.attention_chunk_size % c->cache.block_size == 0;
}

/* a lower bound of the workspace, exact arithmetic: the activation partials */
static fz_u128 ws_lower_bound(const fa_config *c)
{
    fz_u128 T = (fz_u128)c->scheduler.max_num_batched_tokens, H = (fz_u128)c->model.num_heads_q;
    fz_u128 D = (fz_u128)c->model.head_size, N = (fz_u128)c->parallel.dcp_world_size;
    fz_u128 act = fa_dtype_size(c->model.dtype),
            S = c->compilation.batch_invariant ? 1 : c->compilation.max_num_splits;
    fz_u128 R = (fz_u128)c->scheduler.max_num_seqs, ST = T < R ? T : R, lb;
    lb = N == 1 ? 2 * act * T * H * D + 8 * T * H
                : act * (N * T * H * D + N * H * T * D + 2 * H * T * D) + 4 * N * N * H * T;
    (void)S;
    (void)ST; /* the split partials' sizing is the planner's business: not in the bound */
    return lb;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fa_config in, *out, before;
    fz_buf ob, wb;
    fa_status s, s2;
    size_t *bytes;
    int alias, nulls;
    fz_init(&r, data, size);
    read_config(&r, &in);
    alias = fz_u8(&r) == 1;
    nulls = fz_u8(&r);
    before = in;
    out = (fa_config *)fz_buf_new(&ob, sizeof *out);
    if (alias) {
        *out = in;
        fz_buf_snap(&ob);
    }
    s = fa_config_resolve(nulls == 1 ? NULL : (alias ? out : &in), nulls == 2 ? NULL : out);
    fz_check_status(s, "config: ", "fa_config_resolve");
    FZ_CHECK(fz_buf_guards_ok(&ob));
    FZ_CHECK(memcmp(&in, &before, sizeof in) == 0);
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob));
    } else {
        FZ_CHECK(nulls != 1 && nulls != 2);
        FZ_CHECK(valid_resolved(out));
        /* defaults applied to zero fields only; the others copied */
#define SAME_OR_DEFAULT(f, d) FZ_CHECK(in.f == 0 ? out->f == (d) : out->f == in.f)
        SAME_OR_DEFAULT(model.num_heads_q, 0);
        SAME_OR_DEFAULT(model.num_heads_kv, in.model.num_heads_q);
        SAME_OR_DEFAULT(model.head_size, 0);
        SAME_OR_DEFAULT(cache.block_size, 16);
        SAME_OR_DEFAULT(parallel.dcp_world_size, 1);
        SAME_OR_DEFAULT(parallel.dcp_rank, 0);
        SAME_OR_DEFAULT(parallel.cp_kv_cache_interleave_size, 1);
        SAME_OR_DEFAULT(compilation.max_cudagraph_capture_size, 512);
        SAME_OR_DEFAULT(compilation.max_num_splits_for_cuda_graph, 32);
        SAME_OR_DEFAULT(compilation.max_num_splits, 32);
        SAME_OR_DEFAULT(scheduler.max_num_seqs, 256);
        SAME_OR_DEFAULT(scheduler.max_num_batched_tokens, 8192);
        SAME_OR_DEFAULT(scheduler.attention_chunk_size, 0);
#undef SAME_OR_DEFAULT
        FZ_CHECK(out->model.dtype == in.model.dtype && out->cache.cache_dtype == in.cache.cache_dtype &&
                 out->cache.layout == in.cache.layout);
    }
    /* workspace size: the same verdict as resolve, and a size that holds the partials */
    bytes = (size_t *)fz_buf_new(&wb, sizeof *bytes);
    {
        fa_config rc;
        fa_status rs = fa_config_resolve(&in, &rc);
        s2 = fa_builder_workspace_size(nulls == 3 ? NULL : &in, nulls == 4 ? NULL : bytes);
        fz_check_status(s2, "fa_builder_workspace_size", "config: ");
        FZ_CHECK(fz_buf_guards_ok(&wb));
        if (nulls != 3 && nulls != 4) {
            /* refusing is right only for a workspace that does not fit size_t */
            if (rs == FA_OK && s2 != FA_OK)
                FZ_CHECK(ws_lower_bound(&rc) > ((fz_u128)1 << 32) && strstr(fa_last_error(), "overflow"));
            else
                FZ_CHECK(s2 == rs);
        }
        if (s2 != FA_OK) {
            FZ_CHECK(fz_buf_unchanged(&wb));
        } else {
            fz_u128 lb = ws_lower_bound(&rc);
            FZ_CHECK(lb <= (fz_u128)SIZE_MAX); /* it must refuse a workspace it cannot size */
#ifdef FZ_DEBUG
            fprintf(stderr, "bytes %zu lb %.0f N %d T %d H %d D %d S %d R %d\n", *bytes, (double)lb,
                    rc.parallel.dcp_world_size, rc.scheduler.max_num_batched_tokens, rc.model.num_heads_q,
                    rc.model.head_size, rc.compilation.max_num_splits, rc.scheduler.max_num_seqs);
#endif
            /* 256-byte regions, then the work counters' FA_WORK_COUNTERS int32 (not rounded up) */
            FZ_CHECK(*bytes % 256 == FA_WORK_COUNTERS * sizeof(int32_t) && (fz_u128)*bytes >= lb &&
                     *bytes >= 256);
        }
    }
    fz_buf_free(&ob);
    fz_buf_free(&wb);
    return 0;
}
