/* fuzz_kvcache: fa_kv_cache_shape, fa_kv_cache_stride_order, fa_kv_cache_strides, fa_tensor_make. */
#include "fuzz_common.h"

__extension__ typedef __int128 fz_i128;

static int ref_shape_ok(int64_t nb, int32_t bs, int32_t h, int32_t d)
{
    /* and the cache's bytes at 8 bytes an element fit int64 */
    if (!(nb > 0 && bs > 0 && h > 0 && d >= 8 && d <= 256 && d % 8 == 0)) return 0;
    if (16.0 * (double)nb * bs * h * d > 1e20) return 0;
    return (fz_i128)16 * nb * bs * h * d <= (fz_i128)INT64_MAX;
}

static void fz_shape(fz_reader *r)
{
    int64_t nb = fz_i64(r), *out;
    int32_t bs = fz_i32(r), h = fz_i32(r), d = fz_i32(r);
    int null_out = fz_u8(r) == 1;
    fz_buf ob;
    fa_status s;
    out = (int64_t *)fz_buf_new(&ob, 5 * sizeof(int64_t));
    s = fa_kv_cache_shape(nb, bs, h, d, null_out ? NULL : out);
    fz_check_status(s, "fa_kv_cache_shape", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob));
    FZ_CHECK((s == FA_OK) == (!null_out && ref_shape_ok(nb, bs, h, d)));
    if (s != FA_OK)
        FZ_CHECK(fz_buf_unchanged(&ob));
    else
        FZ_CHECK(out[0] == 2 && out[1] == nb && out[2] == bs && out[3] == h && out[4] == d);
    fz_buf_free(&ob);
}

static void fz_order(fz_reader *r)
{
    int32_t layout = fz_bool(r) ? fz_range(r, -1, 2) : fz_i32(r), *order, *rank, i, j;
    int incl = (int)fz_i32(r), nulls = fz_u8(r);
    fz_buf ob, rb;
    fa_status s;
    order = (int32_t *)fz_buf_new(&ob, 6 * sizeof(int32_t));
    rank = (int32_t *)fz_buf_new(&rb, sizeof(int32_t));
    s = fa_kv_cache_stride_order((fa_kv_layout)layout, incl, nulls == 1 ? NULL : order,
                                 nulls == 2 ? NULL : rank);
    fz_check_status(s, "fa_kv_cache_stride_order", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob) && fz_buf_guards_ok(&rb));
    FZ_CHECK((s == FA_OK) == (nulls != 1 && nulls != 2 && (layout == 0 || layout == 1)));
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob) && fz_buf_unchanged(&rb));
    } else {
        FZ_CHECK(*rank == (incl ? 6 : 5));
        for (i = 0; i < *rank; ++i) { /* a permutation */
            FZ_CHECK(order[i] >= 0 && order[i] < *rank);
            for (j = 0; j < i; ++j) FZ_CHECK(order[i] != order[j]);
        }
        if (*rank == 5) { /* the slot after the order is not written */
            uint8_t tail[4];
            memset(tail, FZ_FILL_BYTE, 4);
            FZ_CHECK(memcmp(&order[5], tail, 4) == 0);
        }
    }
    fz_buf_free(&ob);
    fz_buf_free(&rb);
}

static void fz_strides(fz_reader *r)
{
    int32_t layout = fz_bool(r) ? fz_range(r, -1, 2) : fz_i32(r);
    int64_t nb = fz_bool(r) ? fz_range(r, 1, 4096) : fz_i64(r), *out;
    int32_t bs = fz_bool(r) ? 16 * fz_range(r, 1, 16) : fz_i32(r);
    int32_t h = fz_small_or_any(r, 1, 64), d = fz_bool(r) ? 8 * fz_range(r, 1, 32) : fz_i32(r);
    int null_out = fz_u8(r) == 1, ok;
    fz_buf ob;
    fa_status s;
    ok = !null_out && ref_shape_ok(nb, bs, h, d) && (layout == 0 || layout == 1);
    out = (int64_t *)fz_buf_new(&ob, 5 * sizeof(int64_t));
    s = fa_kv_cache_strides((fa_kv_layout)layout, nb, bs, h, d, null_out ? NULL : out);
    fz_check_status(s, "fa_kv_cache_strides", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob));
    if (ok && (fz_i128)2 * nb * bs * h * d > (fz_i128)INT64_MAX) {
        /* the cache does not fit int64 element offsets: must be refused */
        FZ_CHECK(s != FA_OK);
    } else {
        FZ_CHECK((s == FA_OK) == ok);
    }
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob));
    } else {
        FZ_CHECK(out[4] == 1);
        FZ_CHECK(out[0] == nb * bs * h * d);
        if (layout == FA_LAYOUT_NHD) {
            FZ_CHECK(out[3] == d && out[2] == (int64_t)h * d && out[1] == (int64_t)bs * h * d);
        } else {
            FZ_CHECK(out[2] == d && out[3] == (int64_t)bs * d && out[1] == (int64_t)bs * h * d);
        }
    }
    fz_buf_free(&ob);
}

static void fz_tensor(fz_reader *r)
{
    int32_t rank = fz_bool(r) ? fz_range(r, -1, 7) : fz_i32(r), dt = fz_i32(r), i;
    int64_t *shape, ref[FA_MAX_RANK];
    int null_shape = fz_u8(r) == 1, valid;
    void *dp = (void *)(uintptr_t)fz_raw(r, 8);
    fz_buf sb;
    fa_tensor t;
    fz_i128 acc = 1;
    shape = (int64_t *)fz_buf_new(&sb, FA_MAX_RANK * sizeof(int64_t));
    for (i = 0; i < FA_MAX_RANK; ++i) shape[i] = fz_bool(r) ? fz_range(r, 0, 64) : fz_i64(r);
    fz_buf_snap(&sb);
    valid = rank >= 0 && rank <= FA_MAX_RANK && (rank == 0 || !null_shape);
    for (i = 0; valid && i < rank; ++i)
        if (shape[i] < 0) valid = 0; /* a negative extent: invalid */
    if (valid && rank > 0) { /* contiguous strides (a 0 extent counts as 1); overflow: invalid */
        ref[rank - 1] = 1;
        for (i = rank - 2; i >= 0; --i) {
            acc *= shape[i + 1] > 0 ? shape[i + 1] : 1;
            if (acc > (fz_i128)INT64_MAX) {
                valid = 0;
                break;
            }
            ref[i] = (int64_t)acc;
        }
        /* and the whole element count fits */
        if (valid && rank >= 2 && (fz_i128)ref[0] * shape[0] > (fz_i128)INT64_MAX) valid = 0;
    }
    fz_set_marker_error();
    t = fa_tensor_make(dp, (fa_dtype)dt, rank, null_shape ? NULL : shape);
    FZ_CHECK(fz_marker_intact());
    FZ_CHECK(fz_buf_guards_ok(&sb) && fz_buf_unchanged(&sb));
    FZ_CHECK(t.data == dp && (int32_t)t.dtype == dt);
    if (!valid) {
        FZ_CHECK(t.rank == 0);
        for (i = 0; i < FA_MAX_RANK; ++i) FZ_CHECK(t.shape[i] == 0 && t.stride[i] == 0);
    } else {
        FZ_CHECK(t.rank == rank);
        for (i = 0; i < FA_MAX_RANK; ++i) {
            if (i < rank)
                FZ_CHECK(t.shape[i] == shape[i] && t.stride[i] == ref[i]);
            else
                FZ_CHECK(t.shape[i] == 0 && t.stride[i] == 0);
        }
    }
    fz_buf_free(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fz_init(&r, data, size);
    switch (fz_u8(&r) % 4) {
    case 0: fz_shape(&r); break;
    case 1: fz_order(&r); break;
    case 2: fz_strides(&r); break;
    default: fz_tensor(&r); break;
    }
    return 0;
}
