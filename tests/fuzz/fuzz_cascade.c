/* fuzz_cascade: fa_use_cascade_attention, fa_cascade_prefix_len, fa_cascade_block_tables. */
#include "fuzz_common.h"

#define MAXR 64

static void fz_use_cascade(fz_reader *r)
{
    int32_t ql[MAXR], n_arr = fz_range(r, 0, MAXR), i, P, nreq, hq, hkv, sms, dcp, res;
    int alibi, sw, local, null_q;
    P = fz_i32(r);
    nreq = fz_bool(r) ? n_arr : fz_i32(r);
    if (nreq > n_arr) nreq = n_arr; /* more requests than the array holds would be a caller bug */
    hq = fz_i32(r);
    hkv = fz_i32(r);
    sms = fz_i32(r);
    dcp = fz_i32(r);
    alibi = fz_u8(r) == 1;
    sw = fz_u8(r) == 1;
    local = fz_u8(r) == 1;
    null_q = fz_u8(r) == 1;
    for (i = 0; i < n_arr; ++i) ql[i] = (fz_u8(r) & 3) ? 1 : fz_i32(r);
    fz_set_marker_error();
    res = fa_use_cascade_attention(P, null_q ? NULL : ql, nreq, hq, hkv, alibi, sw, local, sms, dcp);
    FZ_CHECK(fz_marker_intact());
    FZ_CHECK(res == 0 || res == 1);
    if (P < 256 || alibi || sw || local || nreq < 8 || dcp > 1 || null_q || hq <= 0 || hkv <= 0 || sms <= 0)
        FZ_CHECK(res == 0);
    if (res == 0 && !(P < 256 || alibi || sw || local || nreq < 8 || dcp > 1 || null_q || hq <= 0 ||
                      hkv <= 0 || sms <= 0)) {
        /* declined only in the flash-decoding case: every query 1 and GQA */
        FZ_CHECK(hq / hkv > 1);
        for (i = 0; i < nreq; ++i) FZ_CHECK(ql[i] == 1);
    }
}

static void fz_prefix_len(fz_reader *r)
{
    int32_t comp[MAXR], ql[MAXR], n_arr = fz_range(r, 0, MAXR), i, *out, minc = INT32_MAX;
    fa_cascade_query q;
    fz_buf ob;
    fa_status s;
    int null_q = fz_u8(r) == 7, null_out = fz_u8(r) == 7;
    memset(&q, 0, sizeof q);
    q.num_common_prefix_blocks = fz_small_or_any(r, 0, 64);
    q.block_size = fz_bool(r) ? 16 * fz_range(r, 1, 8) : fz_i32(r);
    q.num_reqs = fz_bool(r) ? n_arr : fz_i32(r);
    if (q.num_reqs > n_arr) q.num_reqs = n_arr;
    q.num_heads_q = fz_small_or_any(r, 1, 64);
    q.num_heads_kv = fz_small_or_any(r, 1, 16);
    q.num_sms = fz_small_or_any(r, 0, 200);
    q.dcp_world_size = fz_small_or_any(r, 0, 2);
    q.use_alibi = fz_u8(r) == 1;
    q.use_sliding_window = fz_u8(r) == 1;
    q.use_local_attention = fz_u8(r) == 1;
    q.encoder_only = fz_u8(r) == 1;
    for (i = 0; i < n_arr; ++i) {
        comp[i] = fz_small_or_any(r, 0, 4096);
        ql[i] = (fz_u8(r) & 3) ? 1 : fz_small_or_any(r, 0, 64);
    }
    q.num_computed_tokens = fz_u8(r) == 3 ? NULL : comp;
    q.query_lens = fz_u8(r) == 3 ? NULL : ql;
    out = (int32_t *)fz_buf_new(&ob, sizeof(int32_t));
    s = fa_cascade_prefix_len(null_q ? NULL : &q, null_out ? NULL : out);
    fz_check_status(s, "fa_cascade_prefix_len", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob));
    } else {
        FZ_CHECK(!null_q && !null_out && q.block_size > 0 && q.num_common_prefix_blocks >= 0 &&
                 q.num_reqs >= 0);
        for (i = 0; i < q.num_reqs && q.num_computed_tokens; ++i) minc = comp[i] < minc ? comp[i] : minc;
        if (*out != 0) {
            FZ_CHECK(*out >= 256);
            FZ_CHECK(*out % q.block_size == 0);
            FZ_CHECK((int64_t)*out <= (int64_t)q.num_common_prefix_blocks * q.block_size);
            FZ_CHECK(*out <= minc);
            FZ_CHECK(!q.encoder_only && q.num_reqs > 0);
            FZ_CHECK(fa_use_cascade_attention(*out, q.query_lens, q.num_reqs, q.num_heads_q, q.num_heads_kv,
                                              q.use_alibi, q.use_sliding_window, q.use_local_attention,
                                              q.num_sms, q.dcp_world_size) == 1);
        }
    }
    fz_buf_free(&ob);
}

static void fz_block_tables(fz_reader *r)
{
    static int32_t table[4];
    int64_t stride = fz_i64(r);
    int32_t P = fz_i32(r), bs = fz_bool(r) ? 16 * fz_range(r, 1, 4) : fz_i32(r);
    int nulls = fz_u8(r);
    const int32_t **pp, **sp;
    fz_buf pb, sb;
    fa_status s;
    if (fz_bool(r)) {
        int32_t blocks = fz_range(r, 1, 8);
        if (bs > 0 && (int64_t)blocks * bs <= INT32_MAX) P = blocks * bs;
    }
    pp = (const int32_t **)fz_buf_new(&pb, sizeof *pp);
    sp = (const int32_t **)fz_buf_new(&sb, sizeof *sp);
    s = fa_cascade_block_tables(nulls == 1 ? NULL : table, stride, P, bs, nulls == 2 ? NULL : pp,
                                nulls == 3 ? NULL : sp);
    fz_check_status(s, "fa_cascade_block_tables", NULL);
    FZ_CHECK(fz_buf_guards_ok(&pb) && fz_buf_guards_ok(&sb));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&pb) && fz_buf_unchanged(&sb));
    } else {
        FZ_CHECK(nulls < 1 || nulls > 3);
        FZ_CHECK(bs > 0 && P > 0 && P % bs == 0 && stride >= P / bs);
        FZ_CHECK(*pp == table);
        FZ_CHECK((uintptr_t)*sp == (uintptr_t)table + (uintptr_t)(P / bs) * sizeof(int32_t));
    }
    fz_buf_free(&pb);
    fz_buf_free(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fz_init(&r, data, size);
    switch (fz_u8(&r) % 3) {
    case 0: fz_use_cascade(&r); break;
    case 1: fz_prefix_len(&r); break;
    default: fz_block_tables(&r); break;
    }
    return 0;
}
