/* fuzz_caps: fa_supports_*, fa_supported_kernel_block_sizes, fa_cache_storage_dtype,
   fa_check_combination, fa_dtype_size / fa_dtype_name, fa_status_string. */
#include "fuzz_common.h"
#include "fa_cpu.h"

static fa_backend *cpu_be(void)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    return be;
}

static int ref_head(int32_t d) { return d >= 8 && d <= 256 && d % 8 == 0; }
static int ref_block(int32_t b, int hyb) { return b > 0 && (hyb ? (b == 16 || b == 32 || b == 64) : 1); }
static int ref_act(int32_t t) { return t == FA_DTYPE_F16 || t == FA_DTYPE_BF16 || t == FA_DTYPE_F32; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    int32_t hs, dt, cd, bs, maj, min, st;
    int sinks, hyb, i;
    const char *why;
    fa_block_sizes sizes;
    int ref_ok;
    fz_init(&r, data, size);
    hs = fz_i32(&r);
    dt = fz_bool(&r) ? fz_range(&r, -1, 7) : fz_i32(&r);
    cd = fz_bool(&r) ? fz_range(&r, -1, 4) : fz_i32(&r);
    bs = fz_i32(&r);
    sinks = (int)fz_i32(&r);
    hyb = (int)fz_i32(&r);
    maj = fz_bool(&r) ? fz_range(&r, 0, 12) : fz_i32(&r);
    min = fz_bool(&r) ? fz_range(&r, 0, 9) : fz_i32(&r);
    st = fz_i32(&r);
    fz_set_marker_error();
    FZ_CHECK(fa_supports_head_size(hs) == ref_head(hs));
    FZ_CHECK(fa_supports_block_size(bs, hyb) == ref_block(bs, hyb));
    FZ_CHECK(fa_supports_kv_cache_dtype((fa_cache_dtype)cd) == (cd >= 0 && cd <= 3));
    FZ_CHECK(fa_supports_compute_capability(maj, min) == (maj > 8 || (maj == 8 && min >= 0)));
    sizes = fa_supported_kernel_block_sizes(hyb);
    if (hyb) {
        FZ_CHECK(sizes.multiple_of == 0 && sizes.count == 3);
        for (i = 0; i < sizes.count; ++i) FZ_CHECK(ref_block(sizes.sizes[i], hyb));
    } else {
        FZ_CHECK(sizes.multiple_of == 1 && sizes.count == 0);
    }
    {
        fa_dtype sd = fa_cache_storage_dtype((fa_cache_dtype)cd, (fa_dtype)dt);
        if (cd == 1 || cd == 2)
            FZ_CHECK(sd == FA_DTYPE_FP8_E4M3);
        else if (cd == 3)
            FZ_CHECK(sd == FA_DTYPE_FP8_E5M2);
        else
            FZ_CHECK((int32_t)sd == dt);
    }
    {
        size_t es = fa_dtype_size((fa_dtype)dt);
        const char *nm = fa_dtype_name((fa_dtype)dt);
        FZ_CHECK(nm != NULL && nm[0] != '\0');
        FZ_CHECK((dt >= 0 && dt < FA_DTYPE_COUNT_) ? (es == 1 || es == 2 || es == 4 || es == 8) : es == 0);
        FZ_CHECK((strcmp(nm, "unknown") == 0) == !(dt >= 0 && dt < FA_DTYPE_COUNT_));
    }
    {
        const char *ss = fa_status_string((fa_status)st);
        FZ_CHECK(ss != NULL && ss[0] != '\0');
        FZ_CHECK((strcmp(ss, "unknown status") == 0) == !(st >= 0 && st <= 5));
    }
    why = fa_check_combination(NULL, hs, (fa_dtype)dt, (fa_cache_dtype)cd, bs, sinks, hyb);
    ref_ok = ref_head(hs) && ref_act(dt) && cd >= 0 && cd <= 3 && ref_block(bs, hyb);
    FZ_CHECK((why == NULL) == ref_ok);
    if (why != NULL) FZ_CHECK(why[0] != '\0');
    /* a backend only narrows what the library supports */
    why = fa_check_combination(cpu_be(), hs, (fa_dtype)dt, (fa_cache_dtype)cd, bs, sinks, hyb);
    if (why == NULL)
        FZ_CHECK(ref_ok);
    else
        FZ_CHECK(why[0] != '\0');
    FZ_CHECK(strcmp(fa_version(), FLASHATTN_VERSION_STRING) == 0);
    FZ_CHECK(fz_marker_intact());
    return 0;
}
