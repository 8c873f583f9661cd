/* fuzz_splits: fa_num_splits_heuristic, fa_plan_splits. */
#include "fuzz_common.h"
#include "fa_cpu.h"

static const fa_backend *cpu_be(void)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    return be;
}

#define MAXR 64

static void fz_heuristic(fz_reader *r)
{
    int64_t mb = fz_bool(r) ? fz_range(r, 0, 300) : fz_i64(r);
    int32_t sms = fz_small_or_any(r, 1, 200), nnb = fz_small_or_any(r, 0, 300),
            ms = fz_small_or_any(r, 0, 130), res, lim;
    fz_set_marker_error();
    res = fa_num_splits_heuristic(mb, sms, nnb, ms);
    FZ_CHECK(fz_marker_intact());
    FZ_CHECK(res >= 1);
    if (sms <= 0 || ms <= 1 || nnb <= 4 || (double)mb >= 0.8 * sms) {
        FZ_CHECK(res == 1);
    } else {
        lim = ms < 128 ? ms : 128;
        lim = sms < lim ? sms : lim;
        lim = nnb < lim ? nnb : lim;
        FZ_CHECK(res <= lim);
    }
}

static void fz_plan(fz_reader *r)
{
    int32_t cu[MAXR + 1], lens[MAXR], n_arr = fz_range(r, 0, MAXR), i, plen_alloc, plen, *plan;
    fa_split_params p;
    fa_backend_caps caps;
    int nulls = fz_u8(r), ok_ref;
    fz_buf pb;
    fa_status s;
    memset(&p, 0, sizeof p);
    p.num_reqs = fz_bool(r) ? n_arr : fz_i32(r);
    if (p.num_reqs > n_arr) p.num_reqs = n_arr;
    p.num_heads_kv = fz_small_or_any(r, 1, 8);
    if (fz_bool(r)) {
        int64_t hq = (int64_t)p.num_heads_kv * fz_range(r, 1, 8);
        p.num_heads_q = hq > INT32_MAX || hq < INT32_MIN ? p.num_heads_kv : (int32_t)hq;
    } else {
        p.num_heads_q = fz_i32(r);
    }
    p.head_size = fz_bool(r) ? 8 * fz_range(r, 1, 32) : fz_i32(r);
    p.causal = fz_bool(r);
    p.window.left = fz_bool(r) ? -1 : fz_small_or_any(r, -2, 4096);
    p.window.right = fz_bool(r) ? -1 : fz_small_or_any(r, -2, 4096);
    p.num_sms = fz_small_or_any(r, 1, 200);
    p.max_num_splits = fz_small_or_any(r, 1, 130);
    p.batch_invariant = fz_u8(r) == 1;
    p.kv_bytes = fz_small_or_any(r, 0, 9);
    caps = cpu_be()->caps;
    if ((fz_u8(r) & 3) == 0) { /* another backend's kernels */
        caps.num_dims = fz_small_or_any(r, 0, FA_MAX_KERNEL_DIMS);
        if (caps.num_dims < 0 || caps.num_dims > FA_MAX_KERNEL_DIMS) caps.num_dims = FA_MAX_KERNEL_DIMS;
        for (i = 0; i < FA_MAX_KERNEL_DIMS; ++i) {
            caps.dims[i].head_dim = 32 * (i + 1);
            caps.dims[i].prefill_tile_m = fz_small_or_any(r, 1, 256);
            caps.dims[i].prefill_tile_n = fz_small_or_any(r, 1, 256);
            caps.dims[i].decode_tile_n = fz_small_or_any(r, 1, 128);
            caps.dims[i].decode_ctas_per_sm = fz_small_or_any(r, 0, 16);
            caps.dims[i].decode_step_us = fz_float(r);
        }
        caps.decode_max_rows = fz_small_or_any(r, 0, 64);
        caps.max_splits = fz_small_or_any(r, 0, 256);
        caps.sm_bytes_per_us = fz_float(r);
        caps.cta_us = fz_float(r);
        caps.combine_us = fz_float(r);
        caps.combine_us_per_split = fz_float(r);
    }
    p.caps = fz_u8(r) == 5 ? NULL : &caps;
    cu[0] = fz_bool(r) ? 0 : fz_i32(r);
    for (i = 0; i < n_arr; ++i) {
        int32_t q = (fz_u8(r) & 3) ? fz_range(r, 0, 2) : fz_small_or_any(r, 0, 600);
        int64_t nx = (int64_t)cu[i] + q;
        cu[i + 1] = (fz_u8(r) == 9 || nx > INT32_MAX) ? fz_i32(r) : (int32_t)nx;
        lens[i] = fz_small_or_any(r, 0, 70000);
    }
    plen_alloc = fz_range(r, 0, MAXR + 4);
    plen = fz_bool(r) ? plen_alloc : fz_i32(r);
    if (plen > plen_alloc) plen = plen_alloc; /* longer than the array would be a caller bug */
    p.cu_seqlens_q = nulls == 3 ? NULL : cu;
    p.seqused_k = nulls == 4 ? NULL : lens;
    ok_ref = nulls != 1 && p.caps != NULL && nulls != 2 && p.num_reqs >= 0 && plen >= 1 + p.num_reqs &&
             p.num_heads_q > 0 && p.num_heads_kv > 0 && p.num_heads_q % p.num_heads_kv == 0 &&
             p.head_size >= 8 && p.head_size <= 256 && p.head_size % 8 == 0 &&
             (p.num_reqs == 0 || (nulls != 3 && nulls != 4)) && p.max_num_splits >= 1 && p.num_sms >= 1 &&
             p.kv_bytes >= 0 && p.kv_bytes <= 8;
    for (i = 0; ok_ref && i < p.num_reqs; ++i)
        if ((int64_t)cu[i + 1] - cu[i] < 0 || (int64_t)cu[i + 1] - cu[i] > INT32_MAX || lens[i] < 0)
            ok_ref = 0;
    plan = (int32_t *)fz_buf_new(&pb, sizeof(int32_t) * (size_t)plen_alloc);
    s = fa_plan_splits(nulls == 1 ? NULL : &p, nulls == 2 ? NULL : plan, plen);
    fz_check_status(s, "fa_plan_splits", NULL);
    FZ_CHECK(fz_buf_guards_ok(&pb));
    if (s == FA_OK)
        FZ_CHECK(ok_ref);
    else if (ok_ref)
        FZ_CHECK(s == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "caps") != NULL);
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&pb));
        if (s == FA_ERR_WORKSPACE) FZ_CHECK(plen < 1 + p.num_reqs);
    } else {
        int32_t ccap = caps.max_splits > 0 ? caps.max_splits : 1;
        int32_t cap = p.batch_invariant ? 1 : (p.max_num_splits < ccap ? p.max_num_splits : ccap);
#ifdef FZ_DEBUG
        fprintf(stderr, "plan0 %d cap %d max_num_splits %d caps.max_splits %d bi %d n %d\n", plan[0], cap,
                p.max_num_splits, caps.max_splits, p.batch_invariant, p.num_reqs);
#endif
        FZ_CHECK(plan[0] >= 1 && plan[0] <= cap);
        for (i = 0; i < p.num_reqs; ++i) FZ_CHECK(plan[1 + i] >= 1 && plan[1 + i] <= plan[0]);
        for (i = 1 + p.num_reqs; i < plen; ++i) FZ_CHECK(plan[i] == 0);
        for (i = plen; i < plen_alloc; ++i) FZ_CHECK(plan[i] == (int32_t)0xCDCDCDCD);
    }
    fz_buf_free(&pb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fz_init(&r, data, size);
    if (fz_u8(&r) & 1)
        fz_plan(&r);
    else
        fz_heuristic(&r);
    return 0;
}
