/* fuzz_dcp: fa_dcp_local_seq_len, fa_dcp_local_seq_lens, fa_dcp_slot_mapping. */
#include "fuzz_common.h"

/* count of p < L with (p / I) % N == r, in int64 */
static int64_t ref_local(int32_t L, int32_t N, int32_t r, int32_t I)
{
    int64_t round, full, rem, extra;
    if (L <= 0 || N <= 0 || I <= 0 || r < 0 || r >= N) return 0;
    round = (int64_t)N * I;
    full = L / round;
    rem = L - full * round;
    extra = rem - (int64_t)r * I;
    if (extra < 0) extra = 0;
    if (extra > I) extra = I;
    return full * I + extra;
}

static void fz_local_one(fz_reader *r)
{
    int32_t L = fz_i32(r), N = fz_small_or_any(r, 1, 8), rk = fz_small_or_any(r, 0, 7),
            I = fz_small_or_any(r, 1, 64);
    int32_t got, k;
    int64_t sum = 0;
    fz_set_marker_error();
    got = fa_dcp_local_seq_len(L, N, rk, I);
    FZ_CHECK(fz_marker_intact());
    FZ_CHECK((int64_t)got == ref_local(L, N, rk, I));
    FZ_CHECK(got >= 0 && (L <= 0 || got <= L));
    if (L > 0 && N > 0 && N <= 64 && I > 0) { /* the ranks share the sequence exactly */
        for (k = 0; k < N; ++k) {
            sum += fa_dcp_local_seq_len(L, N, k, I);
        }
        FZ_CHECK(sum == L);
    }
}

static void fz_local_many(fz_reader *r)
{
    int32_t arr[32], n_arr = fz_range(r, 0, 32), n, N, rk, I, i, *out;
    int nulls = fz_u8(r);
    fz_buf ob;
    fa_status s;
    n = fz_bool(r) ? n_arr : fz_i32(r);
    if (n > n_arr) n = n_arr;
    N = fz_small_or_any(r, 1, 8);
    rk = fz_small_or_any(r, 0, 7);
    I = fz_small_or_any(r, 1, 64);
    for (i = 0; i < n_arr; ++i) arr[i] = fz_small_or_any(r, 0, 5000);
    out = (int32_t *)fz_buf_new(&ob, sizeof(int32_t) * (size_t)n_arr);
    s = fa_dcp_local_seq_lens(nulls == 1 ? NULL : arr, n, N, rk, I, nulls == 2 ? NULL : out);
    fz_check_status(s, "fa_dcp_local_seq_lens", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob));
    } else {
        FZ_CHECK(n >= 0 && N >= 1 && rk >= 0 && rk < N && I >= 1);
        for (i = 0; i < n; ++i) FZ_CHECK(arr[i] >= 0 && (int64_t)out[i] == ref_local(arr[i], N, rk, I));
        for (i = n > 0 ? n : 0; i < n_arr; ++i) FZ_CHECK(out[i] == (int32_t)0xCDCDCDCD);
    }
    fz_buf_free(&ob);
}

static void fz_slots(fz_reader *r)
{
    enum { MAXT = 48 };
    int32_t rows = fz_range(r, 1, 4), rs = fz_range(r, 1, 8), table[4 * 8];
    int32_t req[MAXT], pos[MAXT], n_arr = fz_range(r, 0, MAXT), nt, mb, bs, N, rk, I, i;
    int64_t stride, *out;
    int nulls = fz_u8(r);
    fz_buf ob;
    fa_status s;
    stride = fz_bool(r) ? rs : fz_i64(r);
    if (stride > rs) stride = rs; /* a wider stride than the table would be a caller bug */
    mb = fz_bool(r) ? fz_range(r, 1, rs) : fz_i32(r);
    bs = fz_bool(r) ? 16 * fz_range(r, 1, 4) : fz_i32(r);
    N = fz_small_or_any(r, 1, 8);
    rk = fz_small_or_any(r, 0, 7);
    I = fz_bool(r) ? (1 << fz_range(r, 0, 4)) : fz_i32(r);
    nt = fz_bool(r) ? n_arr : fz_i32(r);
    if (nt > n_arr) nt = n_arr;
    for (i = 0; i < rows * rs; ++i) table[i] = fz_bool(r) ? fz_range(r, 0, 1000) : fz_i32(r);
    for (i = 0; i < n_arr; ++i) {
        req[i] = fz_u8(r) == 255 ? -1 : fz_range(r, 0, rows - 1); /* rows are not checked: stay in them */
        pos[i] = fz_bool(r) ? fz_range(r, 0, 1024) : fz_i32(r);
    }
    out = (int64_t *)fz_buf_new(&ob, sizeof(int64_t) * (size_t)n_arr);
    s = fa_dcp_slot_mapping(nulls == 1 ? NULL : table, stride, mb, bs, nulls == 2 ? NULL : req,
                            nulls == 3 ? NULL : pos, nt, N, rk, I, nulls == 4 ? NULL : out);
    fz_check_status(s, "fa_dcp_slot_mapping", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob));
    } else {
        int64_t vbs = (int64_t)bs * N;
        FZ_CHECK(bs > 0 && N >= 1 && rk >= 0 && rk < N && I >= 1 && bs % I == 0 && mb >= 1 && mb <= stride &&
                 nt >= 0);
        for (i = 0; i < nt; ++i) {
            int64_t p = pos[i], vb = p / vbs, vo = p % vbs;
            FZ_CHECK(p >= 0 && req[i] >= 0 && vb < mb);
            if ((vo / I) % N == rk) {
                int64_t local = vo / ((int64_t)N * I) * I + vo % I;
                FZ_CHECK(local >= 0 && local < bs);
                FZ_CHECK(out[i] == (int64_t)table[(int64_t)req[i] * stride + vb] * bs + local);
            } else {
                FZ_CHECK(out[i] == -1);
            }
        }
        for (i = nt; i < n_arr; ++i) FZ_CHECK(out[i] == (int64_t)0xCDCDCDCDCDCDCDCDull);
    }
    fz_buf_free(&ob);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fz_init(&r, data, size);
    switch (fz_u8(&r) % 3) {
    case 0: fz_local_one(&r); break;
    case 1: fz_local_many(&r); break;
    default: fz_slots(&r); break;
    }
    return 0;
}
