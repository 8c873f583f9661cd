/* fuzz_local: fa_local_virtual_batches_count, fa_make_local_virtual_batches. */
#include "fuzz_common.h"

#define MAXR 16
#define MAXRS 8

/* virtual batches of one request: chunks touched by positions [s - q, s) */
static int64_t ref_nblk(int32_t c, int32_t q, int32_t s)
{
    if (q <= 0) return 0;
    return ((int64_t)s - 1) / c - ((int64_t)s - q) / c + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    int32_t qsl[MAXR + 1], seq[MAXR], table[MAXR * MAXRS];
    int32_t n_arr, n, chunk, bs, rs, mb, cap_alloc, cap, i, count_a = -7, pages = 0;
    int64_t stride, need_ref = 0;
    int nulls, ok_ref;
    fa_status s;
    fz_buf cb, ob, qb, cub, kb, tb;
    int32_t *cnt;
    fa_local_batches *out;
    fz_init(&r, data, size);
    n_arr = fz_range(&r, 0, MAXR);
    n = fz_bool(&r) ? n_arr : fz_i32(&r);
    if (n > n_arr) n = n_arr;
    bs = fz_bool(&r) ? 16 * fz_range(&r, 1, 4) : fz_small_or_any(&r, 1, 64);
    if (fz_bool(&r)) {
        int64_t c = (int64_t)bs * fz_range(&r, 1, 4);
        chunk = c > INT32_MAX || c < INT32_MIN ? bs : (int32_t)c;
    } else {
        chunk = fz_small_or_any(&r, 1, 256);
    }
    rs = fz_range(&r, 1, MAXRS);
    stride = fz_bool(&r) ? rs : fz_i64(&r);
    if (stride > rs) stride = rs; /* wider than the table would be a caller bug */
    mb = fz_bool(&r) ? fz_range(&r, 1, rs) : fz_i32(&r);
    nulls = fz_u8(&r);
    qsl[0] = fz_u8(&r) == 9 ? fz_i32(&r) : 0;
    for (i = 0; i < n_arr; ++i) {
        int32_t q = fz_bool(&r) ? fz_range(&r, 0, 40) : fz_i32(&r);
        int64_t nx = (int64_t)qsl[i] + q;
        qsl[i + 1] = (fz_u8(&r) == 9 || nx > INT32_MAX || nx < INT32_MIN) ? fz_i32(&r) : (int32_t)nx;
        if (fz_bool(&r)) {
            int64_t sl = (int64_t)fz_range(&r, 0, 300) + (q > 0 ? q : 0);
            seq[i] = sl > INT32_MAX ? INT32_MAX : (int32_t)sl;
        } else {
            seq[i] = fz_i32(&r);
        }
    }
    for (i = 0; i < n_arr * rs; ++i) table[i] = i; /* entry = row * stride + col */
    /* the reference: is the count query valid, and its V */
    ok_ref = nulls != 1 && nulls != 2 && chunk > 0 && n >= 0 && qsl[0] == 0;
    for (i = 0; ok_ref && i < n; ++i) {
        int64_t q = (int64_t)qsl[i + 1] - qsl[i];
        if (q < 0 || seq[i] < q)
            ok_ref = 0;
        else
            need_ref += ref_nblk(chunk, (int32_t)q, seq[i]);
    }
    cnt = (int32_t *)fz_buf_new(&cb, sizeof(int32_t));
    s = fa_local_virtual_batches_count(chunk, nulls == 1 ? NULL : qsl, nulls == 2 ? NULL : seq, n,
                                       nulls == 3 ? NULL : cnt);
    fz_check_status(s, "fa_local_virtual_batches_count", NULL);
    FZ_CHECK(fz_buf_guards_ok(&cb));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&cb));
        FZ_CHECK(!ok_ref || nulls == 3);
    } else {
        FZ_CHECK(ok_ref && nulls != 3);
        FZ_CHECK((int64_t)*cnt == need_ref);
        count_a = *cnt;
    }
    fz_buf_free(&cb);

    /* the fill */
    cap_alloc = fz_range(&r, 0, 64);
    cap = fz_bool(&r) ? cap_alloc : fz_i32(&r);
    if (cap > cap_alloc) cap = cap_alloc; /* more than the arrays hold would be a caller bug */
    if (bs > 0 && chunk > 0 && chunk % bs == 0) pages = chunk / bs;
    if ((int64_t)cap_alloc * (pages ? pages : 1) > (1 << 16)) return 0; /* keep the arrays small */
    out = (fa_local_batches *)fz_buf_new(&ob, sizeof *out);
    out->seqlens_q = (int32_t *)fz_buf_new(&qb, sizeof(int32_t) * (size_t)cap_alloc);
    out->cu_seqlens_q = (int32_t *)fz_buf_new(&cub, sizeof(int32_t) * ((size_t)cap_alloc + 1));
    out->seqused_k = (int32_t *)fz_buf_new(&kb, sizeof(int32_t) * (size_t)cap_alloc);
    out->block_table =
        (int32_t *)fz_buf_new(&tb, sizeof(int32_t) * (size_t)cap_alloc * (size_t)(pages ? pages : 1));
    switch (fz_u8(&r) % 16) { /* a NULL output array */
    case 1: out->seqlens_q = NULL; break;
    case 2: out->cu_seqlens_q = NULL; break;
    case 3: out->seqused_k = NULL; break;
    case 4: out->block_table = NULL; break;
    default: break;
    }
    fz_buf_snap(&ob);
    s = fa_make_local_virtual_batches(chunk, bs, nulls == 1 ? NULL : qsl, nulls == 2 ? NULL : seq, n,
                                      nulls == 4 ? NULL : table, stride, mb, cap, nulls == 5 ? NULL : out);
    fz_check_status(s, "fa_make_local_virtual_batches", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob) && fz_buf_guards_ok(&qb) && fz_buf_guards_ok(&cub) &&
             fz_buf_guards_ok(&kb) && fz_buf_guards_ok(&tb));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob) && fz_buf_unchanged(&qb) && fz_buf_unchanged(&cub) &&
                 fz_buf_unchanged(&kb) && fz_buf_unchanged(&tb));
        if (s == FA_ERR_WORKSPACE) FZ_CHECK(ok_ref && need_ref > cap);
    } else {
        int32_t V = out->num_virtual, v, t, maxq = 0, maxk = 0, b = 0, done = 0;
#ifdef FZ_DEBUG
        fprintf(stderr, "chunk %d bs %d n %d count %d V %d need %lld cap %d\n", chunk, bs, n, count_a, V,
                (long long)need_ref, cap);
        for (i = 0; i < n; ++i) fprintf(stderr, "  qsl %d..%d seq %d\n", qsl[i], qsl[i + 1], seq[i]);
#endif
        FZ_CHECK(ok_ref && pages > 0 && mb >= 1 && mb <= stride && nulls != 4 && nulls != 5);
        FZ_CHECK((nulls == 3 || count_a == V) && (int64_t)V == need_ref && V <= cap);
        FZ_CHECK(out->pages_per_virtual == pages);
        FZ_CHECK(out->cu_seqlens_q[0] == 0 && out->cu_seqlens_q[V] == qsl[n]);
        for (v = 0; v < V; ++v) {
            int32_t ql = out->seqlens_q[v], kl = out->seqused_k[v];
            FZ_CHECK(ql >= 1 && ql <= chunk && kl >= 1 && kl <= chunk && ql <= kl);
            FZ_CHECK(out->cu_seqlens_q[v + 1] - out->cu_seqlens_q[v] == ql);
            maxq = ql > maxq ? ql : maxq;
            maxk = kl > maxk ? kl : maxk;
            /* the request this virtual batch belongs to: the one whose queries cover it */
            while (b < n && (qsl[b + 1] - qsl[b] == 0 || done >= qsl[b + 1] - qsl[b])) {
                ++b;
                done = 0;
            }
            FZ_CHECK(b < n);
            done += ql;
            for (t = 0; t < pages; ++t) {
                int32_t e = out->block_table[(int64_t)v * pages + t];
                FZ_CHECK(e / stride == b && e % stride < mb); /* from its own row, a valid column */
            }
        }
        FZ_CHECK(out->max_query_len == maxq && out->max_seq_len == maxk);
        for (v = V; v < cap_alloc; ++v) FZ_CHECK(out->seqlens_q[v] == (int32_t)0xCDCDCDCD);
    }
    fz_buf_free(&ob);
    fz_buf_free(&qb);
    fz_buf_free(&cub);
    fz_buf_free(&kb);
    fz_buf_free(&tb);
    return 0;
}
