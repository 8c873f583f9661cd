/* fuzz_window: fa_sliding_window_config, fa_aot_sliding_window. */
#include "fuzz_common.h"

static void fz_config(fz_reader *r)
{
    int32_t W = fz_i32(r), type = fz_bool(r) ? fz_range(r, 0, 3) : fz_i32(r);
    fa_window w;
    fz_set_marker_error();
    w = fa_sliding_window_config(W, (fa_attn_type)type);
    FZ_CHECK(fz_marker_intact());
    if (W <= 0) {
        FZ_CHECK(w.left == -1 && w.right == -1);
    } else {
        FZ_CHECK(w.left == W - 1);
        FZ_CHECK(w.right == (type == FA_ATTN_ENCODER_ONLY ? W - 1 : 0));
    }
}

static void fz_aot(fz_reader *r)
{
    fa_window arr[32], *out;
    int32_t n_arr = fz_range(r, 0, 32), n, i;
    int *en, nulls = fz_u8(r), all_same = 1;
    fz_buf ob, eb, ab;
    fa_status s;
    fa_window *in;
    n = fz_bool(r) ? n_arr : fz_i32(r);
    if (n > n_arr) n = n_arr;
    for (i = 0; i < n_arr; ++i) {
        if (i > 0 && (fz_u8(r) & 3)) {
            arr[i] = arr[i - 1];
            continue;
        }
        arr[i].left = fz_i32(r);
        arr[i].right = fz_i32(r);
    }
    in = (fa_window *)fz_buf_new(&ab, sizeof(fa_window) * (size_t)n_arr);
    memcpy(in, arr, sizeof(fa_window) * (size_t)n_arr);
    fz_buf_snap(&ab);
    out = (fa_window *)fz_buf_new(&ob, sizeof *out);
    en = (int *)fz_buf_new(&eb, sizeof *en);
    s = fa_aot_sliding_window(nulls == 1 ? NULL : in, n, nulls == 2 ? NULL : out, nulls == 3 ? NULL : en);
    fz_check_status(s, "fa_aot_sliding_window", NULL);
    FZ_CHECK(fz_buf_guards_ok(&ob) && fz_buf_guards_ok(&eb) && fz_buf_guards_ok(&ab));
    FZ_CHECK(fz_buf_unchanged(&ab)); /* the input is const */
    if (s != FA_OK) {
        FZ_CHECK(fz_buf_unchanged(&ob) && fz_buf_unchanged(&eb));
    } else {
        FZ_CHECK(n >= 0 && nulls != 2 && nulls != 3 && (n == 0 || nulls != 1));
        for (i = 1; i < n; ++i)
            if (arr[i].left != arr[0].left || arr[i].right != arr[0].right) all_same = 0;
        FZ_CHECK(*en == all_same);
        if (all_same && n > 0)
            FZ_CHECK(out->left == arr[0].left && out->right == arr[0].right);
        else
            FZ_CHECK(out->left == -1 && out->right == -1);
    }
    fz_buf_free(&ob);
    fz_buf_free(&eb);
    fz_buf_free(&ab);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fz_init(&r, data, size);
    if (fz_u8(&r) & 1)
        fz_aot(&r);
    else
        fz_config(&r);
    return 0;
}
