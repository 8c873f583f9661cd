/* test_gpu_checks.c - the CUDA backend's capability block, its ops.check pre-flight, and
   out-of-range cache slots and block ids.

   caps        be->caps against the tile facts of the kernel family the backend runs (the
               mma.sync kernels, docs/cuda.md; with FA_GPU_TEST_ATTENTION_PORTABLE the HIP
               builds' portable kernel, docs/hip.md), one attention call per width, and what
               the block promises about head sizes, block sizes, alignment and dtypes (check)
   check       ops.check(op, args) returns what the op returns, with the same message, for good
               and bad arguments of every kernel op
   bad slot    a slot past the cache: the cache and the canary bytes around it are untouched
               except the good tokens' rows; synchronize (or the next op call) returns
               FA_ERR_INVALID_ARG naming the slot; the call after that works; also under a
               CUDA graph
   bad block   a block id outside [0, num_blocks) (and a negative one) in one row of the table,
               prefill and decode tiles, with and without splits, bf16 and fp8 (E4M3 / E5M2)
               caches: the other rows keep their bits, that row is finite, the error names the
               id and the row, the next call works
   Usage: see gpu_test_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "gpu_test_util.h"

#include <cuda_runtime_api.h>   /* the graph case, the device's shared memory */
#include <time.h>

static int contains(const char *s, const char *needle) { return s && strstr(s, needle) != NULL; }

static const char *gpu_msg(void)
{
    fa_backend *be = gt_gpu();
    return be->ops.last_error ? be->ops.last_error(be->ctx) : "";
}

/* Waits (up to 5 s) until an op call reports the pending device error: returns its status. */
static fa_status poll_next_call(void)
{
    fa_backend *be = gt_gpu();
    struct timespec ts = {0, 200000};
    int i;
    for (i = 0; i < 25000; ++i) {
        fa_status st = be->ops.fill(be->ctx, NULL, 0, 0, 0, 0);   /* empty: only the error word */
        if (st != FA_OK) return st;
        nanosleep(&ts, NULL);
    }
    return FA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* caps */

/* The tile facts of the kernel family the backend runs, written out here (not read from the
   backend) so that a capability block that lies fails. FA_GPU_TEST_ATTENTION_PORTABLE (set by
   the HIP builds: backends/hip/meson.build, backends/hip/run_hip_on_nvidia.sh): the portable
   kernel of attention_portable.cuh; else the mma.sync kernels of attention_tiles.h. */
typedef struct {
    int m, n, dn;   /* prefill rows x keys, decode keys */
    double step;    /* decode_step_us */
} expect_dim;

#if defined(FA_GPU_TEST_ATTENTION_PORTABLE) && FA_GPU_TEST_ATTENTION_PORTABLE
#define EXPECT_FAMILY "portable (attention_portable.cuh)"
/* widths 64 / 128 / 256, every one compiled; one tile of 32 rows x 64 / 32 / 16 keys serves
   prefill and decode; step 6.4 us x D / 128 x keys / 32 = 6.4 us at all three */
enum { EXPECT_DECODE_ROWS = 32, EXPECT_ALL_WIDTHS = 1, EXPECT_COMBINE_PDL = 0 };
static int expect_width(int D) { return D == 64 || D == 128 || D == 256; }
static expect_dim expect_for(int D)
{
    expect_dim e;
    e.m = 32;
    e.n = e.dn = D <= 64 ? 64 : (D <= 128 ? 32 : 16);
    e.step = 6.4 * D / 128.0 * e.n / 32.0;
    return e;
}
#else
#define EXPECT_FAMILY "mma.sync (attention_tiles.h)"
/* the kernels (attention_tiles.h): prefill 4 warps x 2 fragments (128 rows) x 64 keys up to
   head 128, else 4 x 1 (64 rows) x 32 keys; decode: widths 64, 128 and 256 in the multi-warp tile
   (4 warps x 32 / 16 / 16 keys a step, 1.0 / 1.0 / 1.4 us; 256 only where a CTA may take 192 KiB of shared
   memory), the others in the packed tile (16 rows x 64 keys up to head 64, else 32; step times
   1.6 us x 0.8 / 1.0 / 1.3); -Dhead_dims may leave widths out */
enum { EXPECT_DECODE_ROWS = 16, EXPECT_ALL_WIDTHS = 0, EXPECT_COMBINE_PDL = 1 };
static int expect_width(int D) { return D == 32 || D == 64 || D == 96 || D == 128 || D == 192 || D == 256; }
/* the 16-bit head-256 multi-warp tile's shared memory (4 warps x 3 stages x 16 keys of K and V) */
static int mw256_fits(void)
{
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return optin >= 4 * 3 * 2 * 16 * 256 * 2;
}

static expect_dim expect_for(int D)
{
    expect_dim e;
    e.m = D <= 128 ? 128 : 64;
    e.n = D <= 128 ? 64 : 32;
    e.dn = D <= 64 ? 64 : 32;
    e.step = (double)(1.6f * (D <= 64 ? 0.8f : (D <= 128 ? 1.0f : 1.3f)));
    if (D == 64 || D == 128 || (D == 256 && mw256_fits())) {
        e.dn = D == 64 ? 128 : 64;
        e.step = D == 256 ? (double)1.4f : (D == 64 ? (double)1.3f : 1.0);
    }
    return e;
}
#endif

/* One decode-shaped call (1 token, 5 keys, one 16-key block) at head size D, on buffers sized
   for D <= 256 + 8 and 32-key blocks. */
static void caps_args(fa_attn_args *a, void *dq, void *dkv, void *dout, void *dmeta, int D)
{
    const int bs = 16;
    memset(a, 0, sizeof *a);
    a->q = dq;
    a->out = dout;
    a->k = dkv;
    a->v = (char *)dkv + (size_t)2 * bs * 272 * 2;
    a->q_token_stride = a->out_token_stride = D;
    a->q_head_stride = a->out_head_stride = D;
    a->k_block_stride = a->v_block_stride = (int64_t)bs * D;
    a->k_row_stride = a->v_row_stride = D;
    a->k_head_stride = a->v_head_stride = D;
    a->q_dtype = a->kv_dtype = FA_DTYPE_BF16;
    a->cu_seqlens_q = (int32_t *)dmeta;
    a->seqused_k = (int32_t *)dmeta + 2;
    a->block_table = (int32_t *)dmeta + 3;
    a->num_blocks = 1;
    a->block_size = bs;
    a->block_table_stride = 1;
    a->num_seqs = 1;
    a->num_tokens = 1;
    a->max_seqlen_q = 1;
    a->max_seqlen_k = 5;
    a->num_heads_q = 1;
    a->num_heads_kv = 1;
    a->head_size = D;
    a->softmax_scale = 0.1f;
    a->window_left = a->window_right = -1;
    a->num_splits = 1;
}

/* ops.check on a: `ok` says whether it must pass; a failure must name `needle`. */
static void caps_probe(const char *what, const fa_attn_args *a, int ok, const char *needle)
{
    fa_backend *gpu = gt_gpu();
    const fa_status st = gpu->ops.check(gpu->ctx, FA_OP_ATTENTION, a);
    if (ok && st != FA_OK)
        gt_fail("caps say %s is accepted: check returned %d (%s)", what, (int)st, gpu_msg());
    if (!ok && st == FA_OK) gt_fail("caps say %s is refused: check accepted it", what);
    if (!ok && st != FA_OK && needle && !contains(gpu_msg(), needle))
        gt_fail("%s refused, but the message does not name %s: %s", what, needle, gpu_msg());
}

static void test_caps(void)
{
    fa_backend *gpu = gt_gpu();
    const fa_backend_caps *c = &gpu->caps;
    int i;
    if (!gt_case("caps: compiled widths and their tile facts")) return;
    printf("# caps: expected family %s\n", EXPECT_FAMILY);
    printf("# caps: %d widths, act 0x%x, cache 0x%x, block x%d, head x%d, decode rows %d, splits %d, "
           "align %d, %.0f B/us/SM, cta %.3f us, combine %.1f + %.2f/split us\n",
           (int)c->num_dims, (unsigned)c->act_dtypes, (unsigned)c->cache_dtypes, (int)c->block_size_multiple,
           (int)c->head_size_multiple, (int)c->decode_max_rows, (int)c->max_splits, (int)c->align_bytes,
           (double)c->sm_bytes_per_us, (double)c->cta_us, (double)c->combine_us,
           (double)c->combine_us_per_split);
    if (c->num_dims < 1 || c->num_dims > FA_MAX_KERNEL_DIMS) {
        gt_fail("num_dims %d outside [1, %d]", (int)c->num_dims, FA_MAX_KERNEL_DIMS);
        gt_case_end();
        return;
    }
    if (EXPECT_ALL_WIDTHS && c->num_dims != 3)
        gt_fail("num_dims %d, the kernel has 3 widths", (int)c->num_dims);
    for (i = 0; i < c->num_dims; ++i) {
        const fa_kernel_dim *k = &c->dims[i];
        const int D = k->head_dim;
        expect_dim x;
        printf("# caps dim %d: prefill %d x %d, decode %d keys, %d decode CTAs/SM, step %.2f us\n", D,
               (int)k->prefill_tile_m, (int)k->prefill_tile_n, (int)k->decode_tile_n,
               (int)k->decode_ctas_per_sm, (double)k->decode_step_us);
        if (!expect_width(D)) {
            gt_fail("dims[%d].head_dim %d is not a compiled width", i, D);
            continue;
        }
        x = expect_for(D);
        if (i > 0 && D <= c->dims[i - 1].head_dim) gt_fail("dims not ascending at %d", i);
        if (k->prefill_tile_m != x.m || k->prefill_tile_n != x.n || k->decode_tile_n != x.dn)
            gt_fail("dim %d: tiles %d x %d / %d, kernels have %d x %d / %d", D, (int)k->prefill_tile_m,
                    (int)k->prefill_tile_n, (int)k->decode_tile_n, x.m, x.n, x.dn);
        if (k->decode_ctas_per_sm < 1 || k->decode_ctas_per_sm > 32)
            gt_fail("dim %d: decode_ctas_per_sm %d", D, (int)k->decode_ctas_per_sm);
        if (fabs((double)k->decode_step_us - x.step) > 1e-5)
            gt_fail("dim %d: decode_step_us %g, expected %g", D, (double)k->decode_step_us, x.step);
    }
    if (c->act_dtypes != ((1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16)))
        gt_fail("act_dtypes 0x%x", (unsigned)c->act_dtypes);
    if (c->cache_dtypes != ((1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_FP8_E4M3) |
                            (1u << FA_DTYPE_FP8_E5M2)))
        gt_fail("cache_dtypes 0x%x", (unsigned)c->cache_dtypes);
    /* block sizes: multiples of 16, or any (1); the probes below hold the backend to the value */
    if ((c->block_size_multiple != 16 && c->block_size_multiple != 1) || c->head_size_multiple != 8 ||
        c->decode_max_rows != EXPECT_DECODE_ROWS || c->max_splits != 128 || c->align_bytes != 16)
        gt_fail("block x%d head x%d decode rows %d (kernels: %d) splits %d align %d",
                (int)c->block_size_multiple, (int)c->head_size_multiple, (int)c->decode_max_rows,
                EXPECT_DECODE_ROWS, (int)c->max_splits, (int)c->align_bytes);
    if (c->sm_bytes_per_us <= 0 || c->cta_us <= 0 || c->combine_us <= 0 || c->combine_us_per_split <= 0)
        gt_fail("cost constants not positive");
    /* the split combine's fixed cost follows its launch: a programmatic dependent on 9.x and up
       (the mma.sync backend; the portable one launches it plainly) */
    {
        const double want = EXPECT_COMBINE_PDL && gpu->info.cc_major >= 9 ? 4.0 : 6.0;
        if (fabs((double)c->combine_us - want) > 1e-6)
            gt_fail("combine_us %g on a %d.%d device, expected %g", (double)c->combine_us,
                    (int)gpu->info.cc_major, (int)gpu->info.cc_minor, want);
    }

    {
        void *dq = gt_dmalloc(1024), *dkv = gt_dmalloc((size_t)4 * 16 * 272 * 2), *dout = gt_dmalloc(1024);
        int32_t meta[4] = {0, 1, 5, 0};   /* cu_q [0, 1], seqused 5, block table {0} */
        void *dmeta = gt_dup(meta, sizeof meta);
        int widths[] = {32, 64, 96, 128, 192, 256}, w;
        if (dq && dkv && dout && dmeta &&
            gt_check(gpu->ops.fill(gpu->ctx, dkv, 0, 0x3c, (size_t)4 * 16 * 272 * 2, 1), gpu, "fill") &&
            gt_check(gpu->ops.fill(gpu->ctx, dq, 0, 0x3c, 1024, 1), gpu, "fill")) {
            const int D0 = c->dims[0].head_dim, Dl = c->dims[c->num_dims - 1].head_dim;
            const int hm = c->head_size_multiple > 0 ? c->head_size_multiple : 8;
            const int bm = c->block_size_multiple > 0 ? c->block_size_multiple : 16;
            const int al = c->align_bytes > 1 ? c->align_bytes : 16;
            fa_attn_args a;
            /* one call per width (head_size = the width): runs when a compiled width serves it */
            for (w = 0; w < 6; ++w) {
                int compiled = 0;
                fa_status st, st_check;
                /* served by the smallest compiled width >= it (padded), else unsupported */
                for (i = 0; i < c->num_dims; ++i) compiled |= c->dims[i].head_dim >= widths[w];
                caps_args(&a, dq, dkv, dout, dmeta, widths[w]);
                st_check = gpu->ops.check(gpu->ctx, FA_OP_ATTENTION, &a);
                st = gpu->ops.attention(gpu->ctx, &a);
                if (st != st_check) gt_fail("width %d: check %d, op %d", widths[w], (int)st_check, (int)st);
                if (compiled && st != FA_OK)
                    gt_fail("width %d (compiled): %d %s", widths[w], (int)st, gpu_msg());
                if (!compiled && (st != FA_ERR_UNSUPPORTED || !contains(gpu_msg(), "head_size")))
                    gt_fail("width %d (past the last width %d): %d %s", widths[w], Dl, (int)st, gpu_msg());
            }
            gt_sync();
            /* what the block promises about the arguments, through ops.check (no launch): the
               smallest and largest head sizes, one past the last width, block sizes, alignment,
               an activation dtype outside act_dtypes */
            caps_args(&a, dq, dkv, dout, dmeta, hm);
            caps_probe("head_size = head_size_multiple", &a, 1, NULL);
            caps_args(&a, dq, dkv, dout, dmeta, Dl);
            caps_probe("head_size = the last width", &a, 1, NULL);
            caps_args(&a, dq, dkv, dout, dmeta, Dl + hm);
            caps_probe("head_size = the last width + head_size_multiple", &a, 0, "head_size");
            caps_args(&a, dq, dkv, dout, dmeta, D0);
            a.block_size = (24 + bm - 1) / bm * bm; /* >= 16 keys: the 5 keys fit one block */
            a.k_block_stride = a.v_block_stride = (int64_t)a.block_size * D0;
            caps_probe("block_size = the first multiple of block_size_multiple >= 24", &a, 1, NULL);
            if (bm > 1) {
                a.block_size = bm + bm / 2;
                a.k_block_stride = a.v_block_stride = (int64_t)a.block_size * D0;
                caps_probe("block_size = 1.5 x block_size_multiple", &a, 0, "block_size");
            }
            caps_args(&a, dq, dkv, dout, dmeta, D0);
            a.q = (char *)dq + al;
            caps_probe("q at align_bytes", &a, 1, NULL);
            a.q = (char *)dq + al / 2;
            caps_probe("q at align_bytes / 2", &a, 0, NULL);
            caps_args(&a, dq, dkv, dout, dmeta, D0);
            a.q_dtype = a.kv_dtype = FA_DTYPE_F32;
            if (!(c->act_dtypes & (1u << FA_DTYPE_F32))) caps_probe("f32 activations", &a, 0, NULL);
        }
        gt_dfree(dq);
        gt_dfree(dkv);
        gt_dfree(dout);
        gt_dfree(dmeta);
    }
    gt_case_end();
}

/* ------------------------------------------------------------------------------------------ */
/* check == op */

static char g_msg_check[512], g_msg_op[512];

/* Runs check, then the op; both must give the same status and (on failure) the same message. */
static void agree(const char *what, fa_op op, const void *args, fa_status want)
{
    fa_backend *gpu = gt_gpu();
    fa_status sc, so;
    sc = gpu->ops.check(gpu->ctx, op, args);
    snprintf(g_msg_check, sizeof g_msg_check, "%s", gpu_msg());
    switch (op) {
    case FA_OP_RESHAPE_AND_CACHE:
        so = gpu->ops.reshape_and_cache(gpu->ctx, (const fa_cache_write_args *)args);
        break;
    case FA_OP_ATTENTION: so = gpu->ops.attention(gpu->ctx, (const fa_attn_args *)args); break;
    case FA_OP_MERGE_STATES: so = gpu->ops.merge_states(gpu->ctx, (const fa_merge_args *)args); break;
    default: so = gpu->ops.dcp_correct(gpu->ctx, (const fa_dcp_correct_args *)args); break;
    }
    snprintf(g_msg_op, sizeof g_msg_op, "%s", gpu_msg());
    if (sc != so)
        gt_fail("%s: check returned %d (%s), the op %d (%s)", what, (int)sc, g_msg_check, (int)so, g_msg_op);
    else if (so != want)
        gt_fail("%s: returned %d (%s), expected %d", what, (int)so, g_msg_op, (int)want);
    else if (so != FA_OK && strcmp(g_msg_check, g_msg_op) != 0)
        gt_fail("%s: check says \"%s\", the op \"%s\"", what, g_msg_check, g_msg_op);
}

static void test_check_agrees(void)
{
    fa_backend *gpu = gt_gpu();
    const int T = 4, H = 2, D = 64, bs = 16, NB = 2;
    void *buf = NULL;
    int64_t slots[4] = {0, 5, 17, -1};
    int32_t meta[9] = {0, 2, 4, 30, 20, 0, 1, 1, 0}; /* cu_q {0,2,4}, seqused {30,20}, table {0,1},{1,0} */
    void *dslots = NULL, *dmeta = NULL;
    if (!gt_case("check agrees with the op: reshape_and_cache, attention, merge_states, dcp_correct, good "
                 "and bad"))
        return;
    buf = gt_dmalloc(1 << 20);
    dslots = gt_dup(slots, sizeof slots);
    dmeta = gt_dup(meta, sizeof meta);
    if (!buf || !dslots || !dmeta) goto done;
    if (!gt_check(gpu->ops.fill(gpu->ctx, buf, 0, 0x3c, 1 << 20, 1), gpu, "fill")) goto done;
    {
        fa_cache_write_args ok, a;
        memset(&ok, 0, sizeof ok);
        ok.key = ok.value = buf;
        ok.key_token_stride = ok.value_token_stride = H * D;
        ok.kv_dtype = FA_DTYPE_BF16;
        ok.key_cache = (char *)buf + 65536;
        ok.value_cache = (char *)buf + 131072;
        ok.cache_block_stride = bs * H * D;
        ok.cache_row_stride = H * D;
        ok.cache_head_stride = D;
        ok.cache_dtype = FA_DTYPE_BF16;
        ok.slot_mapping = (const int64_t *)dslots;
        ok.num_tokens = T;
        ok.num_heads_kv = H;
        ok.head_size = D;
        ok.block_size = bs;
        ok.num_blocks = NB;
        ok.k_scale = ok.v_scale = 1.0f;
        agree("cache ok", FA_OP_RESHAPE_AND_CACHE, &ok, FA_OK);
#define BAD_CACHE(stmt, want) \
    do { \
        a = ok; \
        stmt; \
        agree("cache " #stmt, FA_OP_RESHAPE_AND_CACHE, &a, want); \
    } while (0)
        BAD_CACHE(a.head_size = 100, FA_ERR_INVALID_ARG);
        BAD_CACHE(a.num_blocks = 0, FA_ERR_INVALID_ARG);
        BAD_CACHE(a.num_heads_kv = 0, FA_ERR_INVALID_ARG);
        BAD_CACHE(a.kv_dtype = FA_DTYPE_FP8_E4M3, FA_ERR_INVALID_ARG);
        BAD_CACHE(a.cache_dtype = FA_DTYPE_F16, FA_ERR_UNSUPPORTED);
        BAD_CACHE(a.slot_mapping = NULL, FA_ERR_INVALID_ARG);
        BAD_CACHE((a.cache_dtype = FA_DTYPE_FP8_E5M2, a.v_scale = -1.0f), FA_ERR_INVALID_ARG);
        BAD_CACHE(a.cache_head_stride = -1, FA_ERR_INVALID_ARG);
        BAD_CACHE(a.key_token_stride = 3, FA_ERR_INVALID_ARG);
        BAD_CACHE((a.num_tokens = 0, a.key = NULL), FA_OK);
    }
    {
        fa_attn_args ok, a;
        memset(&ok, 0, sizeof ok);
        ok.q = buf;
        ok.out = (char *)buf + 200000;
        ok.k = (char *)buf + 300000;
        ok.v = (char *)buf + 400000;
        ok.q_token_stride = ok.out_token_stride = 4 * D;
        ok.q_head_stride = ok.out_head_stride = D;
        ok.k_block_stride = ok.v_block_stride = bs * H * D;
        ok.k_row_stride = ok.v_row_stride = H * D;
        ok.k_head_stride = ok.v_head_stride = D;
        ok.q_dtype = ok.kv_dtype = FA_DTYPE_BF16;
        ok.cu_seqlens_q = (int32_t *)dmeta;
        ok.seqused_k = (int32_t *)dmeta + 3;
        ok.block_table = (int32_t *)dmeta + 5;
        ok.block_table_stride = 2;
        ok.num_blocks = NB;
        ok.block_size = bs;
        ok.num_seqs = 2;
        ok.num_tokens = 4;
        ok.max_seqlen_q = 2;
        ok.max_seqlen_k = 30;
        ok.num_heads_q = 4;
        ok.num_heads_kv = H;
        ok.head_size = D;
        ok.softmax_scale = 0.125f;
        ok.causal = 1;
        ok.window_left = ok.window_right = -1;
        ok.num_splits = 1;
        agree("attention ok", FA_OP_ATTENTION, &ok, FA_OK);
#define BAD_ATTN(stmt, want) \
    do { \
        a = ok; \
        stmt; \
        agree("attention " #stmt, FA_OP_ATTENTION, &a, want); \
    } while (0)
        BAD_ATTN(a.head_size = 12, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.num_heads_q = 3, FA_ERR_INVALID_ARG);
        BAD_ATTN((a.q_dtype = a.kv_dtype = FA_DTYPE_F32), FA_ERR_UNSUPPORTED);
        BAD_ATTN(a.q_dtype = FA_DTYPE_F32, FA_ERR_INVALID_ARG); /* kv bf16 with q f32 */
        BAD_ATTN(a.kv_dtype = FA_DTYPE_F16, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.num_splits = 2, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.block_table = NULL, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.block_size = 0, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.block_size = -16, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.num_blocks = 0, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.k_row_stride = -128, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.q = (char *)buf + 2, FA_ERR_UNSUPPORTED); /* misaligned */
        BAD_ATTN(a.out_head_stride = D + 4, FA_ERR_UNSUPPORTED);
        BAD_ATTN(a.k = (char *)buf + 300008, FA_ERR_UNSUPPORTED);
        BAD_ATTN(a.num_splits = 70000, FA_ERR_INVALID_ARG); /* no workspace first */
        BAD_ATTN((a.num_splits = 70000, a.split_out = (float *)buf, a.split_lse = (float *)buf),
                 FA_ERR_UNSUPPORTED);
        BAD_ATTN(a.cu_seqlens_q = NULL, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.softmax_scale = NAN, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.softcap = -1.0f, FA_ERR_INVALID_ARG);
        BAD_ATTN(a.softcap = INFINITY, FA_ERR_INVALID_ARG);
        BAD_ATTN((a.kv_dtype = FA_DTYPE_FP8_E4M3, a.k_scale = 0.0f, a.v_scale = 1.0f), FA_ERR_INVALID_ARG);
        BAD_ATTN((a.seqused_k = NULL, a.cu_seqlens_k = (int32_t *)dmeta), FA_OK); /* dense */
        BAD_ATTN((a.num_tokens = 0, a.q = NULL), FA_OK);
    }
    {
        fa_merge_args ok, a;
        memset(&ok, 0, sizeof ok);
        ok.out = buf;
        ok.prefix_out = (char *)buf + 4096;
        ok.suffix_out = (char *)buf + 8192;
        ok.out_token_stride = ok.prefix_token_stride = ok.suffix_token_stride = H * D;
        ok.out_head_stride = ok.prefix_head_stride = ok.suffix_head_stride = D;
        ok.prefix_lse = (const float *)((char *)buf + 16384);
        ok.suffix_lse = (const float *)((char *)buf + 20480);
        ok.prefix_lse_head_stride = ok.suffix_lse_head_stride = T;
        ok.dtype = FA_DTYPE_BF16;
        ok.num_tokens = T;
        ok.num_heads = H;
        ok.head_size = D;
        agree("merge ok", FA_OP_MERGE_STATES, &ok, FA_OK);
#define BAD_MERGE(stmt, want) \
    do { \
        a = ok; \
        stmt; \
        agree("merge " #stmt, FA_OP_MERGE_STATES, &a, want); \
    } while (0)
        BAD_MERGE(a.dtype = FA_DTYPE_FP8_E4M3, FA_ERR_INVALID_ARG);
        BAD_MERGE(a.dtype = (fa_dtype)9, FA_ERR_INVALID_ARG);
        BAD_MERGE(a.head_size = 12, FA_ERR_INVALID_ARG);
        BAD_MERGE(a.suffix_lse = NULL, FA_ERR_INVALID_ARG);
        BAD_MERGE(a.prefix_head_stride = -1, FA_ERR_INVALID_ARG);
        if (!contains(gpu_msg(), "prefix_head_stride -1")) gt_fail("merge message: %s", gpu_msg());
    }
    {
        fa_dcp_correct_args ok, a;
        memset(&ok, 0, sizeof ok);
        ok.out = buf;
        ok.out_token_stride = H * D;
        ok.out_head_stride = D;
        ok.dtype = FA_DTYPE_F16;
        ok.lse_all = (const float *)((char *)buf + 16384);
        ok.world_size = 2;
        ok.rank = 1;
        ok.num_tokens = T;
        ok.num_heads = H;
        ok.head_size = D;
        agree("dcp ok", FA_OP_DCP_CORRECT, &ok, FA_OK);
#define BAD_DCP(stmt, want) \
    do { \
        a = ok; \
        stmt; \
        agree("dcp " #stmt, FA_OP_DCP_CORRECT, &a, want); \
    } while (0)
        BAD_DCP(a.rank = 2, FA_ERR_INVALID_ARG);
        BAD_DCP(a.world_size = 0, FA_ERR_INVALID_ARG);
        BAD_DCP(a.lse_all = NULL, FA_ERR_INVALID_ARG);
        BAD_DCP(a.dtype = FA_DTYPE_I32, FA_ERR_INVALID_ARG);
    }
    if (gpu->ops.check(gpu->ctx, (fa_op)99, buf) != FA_ERR_INVALID_ARG)
        gt_fail("check of op 99 did not fail");
    if (gpu->ops.check(gpu->ctx, FA_OP_ATTENTION, NULL) != FA_ERR_INVALID_ARG)
        gt_fail("check of NULL args did not fail");
    { /* the name of an unknown dtype is its number */
        fa_merge_args m;
        memset(&m, 0, sizeof m);
        m.dtype = (fa_dtype)9;
        m.num_heads = 1;
        m.head_size = 8;
        gpu->ops.check(gpu->ctx, FA_OP_MERGE_STATES, &m);
        if (!contains(gpu_msg(), "dtype 9")) gt_fail("unknown dtype message: %s", gpu_msg());
    }
    gt_sync();
done:
    gt_dfree(buf);
    gt_dfree(dslots);
    gt_dfree(dmeta);
    gt_case_end();
}

/* ------------------------------------------------------------------------------------------ */
/* bad cache slot */

#define CANARY 4096

static void test_bad_slot(int graph)
{
    fa_backend *gpu = gt_gpu();
    enum { T = 32, H = 2, D = 64, BS = 16, NB = 64 };
    const size_t row = (size_t)H * D * 2, cache_bytes = (size_t)NB * BS * row;
    const size_t total = CANARY + cache_bytes + CANARY + cache_bytes + CANARY;
    uint16_t *hk = NULL, *hv = NULL;
    unsigned char *img = NULL;
    int64_t slots[T];
    void *dbuf = NULL, *dk = NULL, *dv = NULL, *dslots = NULL;
    fa_cache_write_args a;
    fa_status st;
    cudaStream_t stream = NULL;
    fa_backend *saved = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int i;
    if (!gt_case("bad slot: slot_mapping[17] = 5000 past a 64 x 16 cache%s", graph ? " (CUDA graph)" : ""))
        return;
    if (graph) { /* a backend on a stream of its own, the op captured and replayed */
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
            gt_fail("stream");
            goto done;
        }
        saved = gt()->gpu;
        if (fa_cuda_backend_create(0, stream, &gt()->gpu) != FA_OK) {
            gt()->gpu = saved;
            saved = NULL;
            gt_fail("backend");
            goto done;
        }
        if (gt_apply_family(gt()->gpu) != 0) {
            gt_fail("family");
            goto done;
        }
        gpu = gt_gpu();
    }
    hk = (uint16_t *)gt_xmalloc((size_t)T * row);
    hv = (uint16_t *)gt_xmalloc((size_t)T * row);
    gt_fill_uniform(hk, (int64_t)T * H * D, FA_DTYPE_BF16, -2.0f, 2.0f);
    gt_fill_uniform(hv, (int64_t)T * H * D, FA_DTYPE_BF16, -2.0f, 2.0f);
    for (i = 0; i < T; ++i) slots[i] = (int64_t)(i * 37 % (NB * BS));
    slots[3] = -1; /* skipped, not reported */
    slots[17] = 5000; /* past NB * BS = 1024 */
    img = (unsigned char *)gt_xmalloc(total);
    dbuf = gt_dmalloc(total);
    dk = gt_dup(hk, (size_t)T * row);
    dv = gt_dup(hv, (size_t)T * row);
    dslots = gt_dup(slots, sizeof slots);
    if (!dbuf || !dk || !dv || !dslots) goto done;
    if (!gt_check(gpu->ops.fill(gpu->ctx, dbuf, 0, 0x5A, total, 1), gpu, "fill")) goto done;
    memset(&a, 0, sizeof a);
    a.key = dk;
    a.value = dv;
    a.key_token_stride = a.value_token_stride = H * D;
    a.kv_dtype = a.cache_dtype = FA_DTYPE_BF16;
    a.key_cache = (char *)dbuf + CANARY;
    a.value_cache = (char *)dbuf + CANARY + cache_bytes + CANARY;
    a.cache_block_stride = (int64_t)BS * H * D;
    a.cache_row_stride = H * D;
    a.cache_head_stride = D;
    a.slot_mapping = (const int64_t *)dslots;
    a.num_tokens = T;
    a.num_heads_kv = H;
    a.head_size = D;
    a.block_size = BS;
    a.num_blocks = NB;
    a.k_scale = a.v_scale = 1.0f;
    if (graph) {
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) {
            gt_fail("capture");
            goto done;
        }
        st = gpu->ops.reshape_and_cache(gpu->ctx, &a);
        if (cudaStreamEndCapture(stream, &g) != cudaSuccess ||
            !gt_check(st, gpu, "reshape_and_cache (captured)"))
            goto done;
        if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess || cudaGraphLaunch(ge, stream) != cudaSuccess) {
            gt_fail("graph instantiate / launch");
            goto done;
        }
    } else if (!gt_check(gpu->ops.reshape_and_cache(gpu->ctx, &a), gpu,
                         "reshape_and_cache (bad slot: runs)")) {
        goto done;
    }
    st = gpu->ops.synchronize(gpu->ctx);
    if (st != FA_ERR_INVALID_ARG ||
        !contains(gpu_msg(), "slot_mapping[17] = 5000 is outside the cache (64 blocks x 16)"))
        gt_fail("synchronize after the bad slot: %d \"%s\"", (int)st, gpu_msg());
    /* the cache: written rows = the good tokens', everything else (canaries too) 0x5A */
    if (!gt_d2h(img, dbuf, total)) goto done;
    {
        size_t off, bad = 0;
        unsigned char *want = (unsigned char *)gt_xmalloc(total);
        memset(want, 0x5A, total);
        for (i = 0; i < T; ++i) {
            if (slots[i] < 0 || slots[i] >= NB * BS) continue;
            memcpy(want + CANARY + (size_t)slots[i] * row, (const char *)hk + (size_t)i * row, row);
            memcpy(want + 2 * CANARY + cache_bytes + (size_t)slots[i] * row,
                   (const char *)hv + (size_t)i * row, row);
        }
        for (off = 0; off < total; ++off) bad += img[off] != want[off];
        if (bad) gt_fail("%zu bytes of the cache or its canaries differ from the expected image", bad);
        free(want);
    }
    /* the error was taken: the next call and synchronize work */
    if (graph) {
        if (cudaGraphLaunch(ge, stream) != cudaSuccess) gt_fail("graph relaunch");
        /* the replay reports again, through the next op call */
        st = poll_next_call();
        if (st != FA_ERR_INVALID_ARG || !contains(gpu_msg(), "slot_mapping[17]"))
            gt_fail("next call after the replay: %d \"%s\"", (int)st, gpu_msg());
    } else {
        st = gpu->ops.reshape_and_cache(gpu->ctx, &a); /* bad again: reported by a later call */
        if (!gt_check(st, gpu, "reshape_and_cache (second)")) goto done;
        st = poll_next_call();
        if (st != FA_ERR_INVALID_ARG || !contains(gpu_msg(), "slot_mapping[17]"))
            gt_fail("next call after the bad slot: %d \"%s\"", (int)st, gpu_msg());
    }
    slots[17] = 1000;
    if (!gt_h2d(dslots, slots, sizeof slots)) goto done;
    if (!gt_check(gpu->ops.reshape_and_cache(gpu->ctx, &a), gpu, "reshape_and_cache (good)") ||
        !gt_check(gpu->ops.synchronize(gpu->ctx), gpu, "synchronize (good)"))
        goto done;
done:
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    gt_dfree(dbuf);
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dslots);
    if (saved) {
        fa_cuda_backend_destroy(gt()->gpu);
        gt()->gpu = saved;
    }
    if (stream) cudaStreamDestroy(stream);
    free(hk);
    free(hv);
    free(img);
    gt_case_end();
}

/* ------------------------------------------------------------------------------------------ */
/* bad block id */

/* Block size bs: a cache of 1024 / bs blocks (bad_id < 0 or >= it); at bs 16, 64 blocks. A bad_id
   of GT_BAD_NB is num_blocks itself. kvdt: the cache's dtype (bf16, or fp8 E4M3 / E5M2 under the
   bf16 query with per-(sequence, head) descales: the wgmma family's fp8-cache kernels). */
#define GT_BAD_NB 0x7fffffff
static void test_bad_block_kv(int qlen, int splits, int32_t bad_id, int bs, fa_dtype kvdt)
{
    fa_backend *gpu = gt_gpu();
    enum { B = 4, HQ = 8, HKV = 2, D = 128, LK = 100, MAXCOLS = LK + 1 };
    const int BS = bs, NB = 1024 / bs, COLS = (LK + bs - 1) / bs + 1;
    const int T = B * qlen, S = splits;
    const size_t kv_bytes = (size_t)NB * BS * HKV * D * gt_dtype_size(kvdt), q_bytes = (size_t)T * HQ * D * 2;
    const int fp8 = kvdt != FA_DTYPE_BF16;
    uint16_t *hq = NULL, *clean = NULL, *got = NULL;
    void *hkv = NULL;
    float kd[B * HKV], vd[B * HKV];
    float *dkd = NULL, *dvd = NULL;
    int32_t cu[B + 1], seq[B], bt[B * MAXCOLS];
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dcu = NULL, *dseq = NULL, *dbt = NULL;
    float *dso = NULL, *dsl = NULL;
    fa_attn_args a;
    fa_status st;
    int i, b;
    char needle[96];
    if (bad_id == GT_BAD_NB) bad_id = NB;
    if (!gt_case("bad block id %d (row 3) in a %d-block %s cache of block size %d: q_len %d, splits %d",
                 (int)bad_id, NB, gt_dtype_name(kvdt), BS, qlen, splits))
        return;
    hq = (uint16_t *)gt_xmalloc(q_bytes);
    hkv = gt_xmalloc(kv_bytes);
    clean = (uint16_t *)gt_xmalloc(q_bytes);
    got = (uint16_t *)gt_xmalloc(q_bytes);
    gt_fill_uniform(hq, (int64_t)T * HQ * D, FA_DTYPE_BF16, -2.0f, 2.0f);
    for (b = 0; b <= B; ++b) cu[b] = b * qlen;
    for (b = 0; b < B; ++b) seq[b] = LK;
    for (i = 0; i < B * COLS; ++i) bt[i] = (i * 13 + 5) % NB; /* distinct: 13 is prime to NB */
    dq = gt_dup(hq, q_bytes);
    dk = gt_dmalloc(kv_bytes); /* exactly the cache: a read past it is a sanitizer finding */
    dv = gt_dmalloc(kv_bytes);
    dout = gt_dmalloc(q_bytes);
    dcu = gt_dup(cu, sizeof cu);
    dseq = gt_dup(seq, sizeof seq);
    dbt = gt_dup(bt, sizeof(int32_t) * (size_t)B * COLS);
    if (S > 1) {
        dso = (float *)gt_dmalloc(sizeof(float) * (size_t)S * T * HQ * D);
        dsl = (float *)gt_dmalloc(sizeof(float) * (size_t)S * HQ * T);
    }
    if (fp8) {
        for (i = 0; i < B * HKV; ++i) {
            kd[i] = 0.25f + 0.125f * (float)(i % 5);
            vd[i] = 0.5f + 0.0625f * (float)(i % 7);
        }
        dkd = (float *)gt_dup(kd, sizeof kd);
        dvd = (float *)gt_dup(vd, sizeof vd);
        if (!dkd || !dvd) goto done;
    }
    if (!dq || !dk || !dv || !dout || !dcu || !dseq || !dbt || (S > 1 && (!dso || !dsl))) goto done;
    gt_fill_uniform(hkv, (int64_t)NB * BS * HKV * D, kvdt, -2.0f, 2.0f);
    if (!gt_h2d(dk, hkv, kv_bytes)) goto done;
    gt_fill_uniform(hkv, (int64_t)NB * BS * HKV * D, kvdt, -1.0f, 1.0f);
    if (!gt_h2d(dv, hkv, kv_bytes)) goto done;
    memset(&a, 0, sizeof a);
    a.q = dq;
    a.out = dout;
    a.k = dk;
    a.v = dv;
    a.q_token_stride = a.out_token_stride = HQ * D;
    a.q_head_stride = a.out_head_stride = D;
    a.k_block_stride = a.v_block_stride = (int64_t)BS * HKV * D;
    a.k_row_stride = a.v_row_stride = HKV * D;
    a.k_head_stride = a.v_head_stride = D;
    a.q_dtype = FA_DTYPE_BF16;
    a.kv_dtype = kvdt;
    if (fp8) {
        a.k_descale = dkd;
        a.v_descale = dvd;
        a.descale_batch_stride = HKV;
        a.descale_head_stride = 1;
    }
    a.cu_seqlens_q = (int32_t *)dcu;
    a.seqused_k = (int32_t *)dseq;
    a.block_table = (int32_t *)dbt;
    a.block_table_stride = COLS;
    a.num_blocks = NB;
    a.block_size = BS;
    a.num_seqs = B;
    a.num_tokens = T;
    a.max_seqlen_q = qlen;
    a.max_seqlen_k = LK;
    a.min_seqlen_q = qlen;
    a.num_heads_q = HQ;
    a.num_heads_kv = HKV;
    a.head_size = D;
    a.softmax_scale = 1.0f / sqrtf((float)D);
    a.causal = 1;
    a.window_left = a.window_right = -1;
    a.num_splits = S;
    a.split_out = dso;
    a.split_lse = dsl;
    /* clean run */
    if (!gt_check(gpu->ops.fill(gpu->ctx, dout, 0, GT_POISON, q_bytes, 1), gpu, "fill") ||
        !gt_check(gpu->ops.attention(gpu->ctx, &a), gpu, "attention (clean)") ||
        !gt_d2h(clean, dout, q_bytes))
        goto done;
    /* row 3, column 2 -> the bad id */
    bt[3 * COLS + 2] = bad_id;
    if (!gt_h2d(dbt, bt, sizeof(int32_t) * (size_t)B * COLS)) goto done;
    if (!gt_check(gpu->ops.fill(gpu->ctx, dout, 0, GT_POISON, q_bytes, 1), gpu, "fill") ||
        !gt_check(gpu->ops.attention(gpu->ctx, &a), gpu, "attention (bad id: runs)"))
        goto done;
    st = gpu->ops.synchronize(gpu->ctx);
    snprintf(needle, sizeof needle, "block_table id %d (row 3, column 2) is outside [0, %d)", (int)bad_id,
             NB);
    if (st != FA_ERR_INVALID_ARG || !contains(gpu_msg(), needle))
        gt_fail("synchronize after the bad id: %d \"%s\" (want \"%s\")", (int)st, gpu_msg(), needle);
    if (!gt_d2h(got, dout, q_bytes)) goto done;
    {
        const size_t per_seq = (size_t)qlen * HQ * D;
        size_t diff = 0, nonfinite = 0, k;
        diff = memcmp(got, clean, 3 * per_seq * 2) != 0;
        for (k = 3 * per_seq; k < 4 * per_seq; ++k)
            nonfinite += !isfinite(gt_load(got, (int64_t)k, FA_DTYPE_BF16));
        if (diff) gt_fail("rows of sequences 0-2 changed bits");
        if (nonfinite) gt_fail("%zu non-finite outputs in sequence 3", nonfinite);
    }
    /* the next call works */
    bt[3 * COLS + 2] = ((3 * COLS + 2) * 13 + 5) % NB;
    if (!gt_h2d(dbt, bt, sizeof(int32_t) * (size_t)B * COLS) ||
        !gt_check(gpu->ops.attention(gpu->ctx, &a), gpu, "attention (good again)") ||
        !gt_d2h(got, dout, q_bytes))
        goto done;
    if (memcmp(got, clean, q_bytes) != 0)
        gt_fail("the good call after the bad one differs from the clean run");
done:
    gt_dfree(dq);
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dout);
    gt_dfree(dcu);
    gt_dfree(dseq);
    gt_dfree(dbt);
    gt_dfree(dso);
    gt_dfree(dsl);
    gt_dfree(dkd);
    gt_dfree(dvd);
    free(hq);
    free(hkv);
    free(clean);
    free(got);
    gt_case_end();
}

static void test_bad_block(int qlen, int splits, int32_t bad_id, int bs)
{
    test_bad_block_kv(qlen, splits, bad_id, bs, FA_DTYPE_BF16);
}

int main(int argc, char **argv)
{
    if (gt_init(argc, argv) != 0) return gt_finish();
    test_caps();
    test_check_agrees();
    test_bad_slot(0);
    test_bad_slot(1);
    test_bad_block(1, 1, 1000, 16); /* decode tile */
    test_bad_block(20, 1, 1000, 16); /* prefill tile */
    test_bad_block(1, 3, -5, 16); /* decode tile, splits, negative id */
    test_bad_block(20, 2, GT_BAD_NB, 16); /* prefill tile, splits, id == num_blocks */
    /* block sizes no TMA box serves (the wgmma family's cp.async producer) */
    test_bad_block(20, 1, 5000, 1);
    test_bad_block(20, 2, GT_BAD_NB, 3);
    test_bad_block(1, 1, -2, 1); /* decode tile, page size 1 */
    /* fp8 caches under a bf16 query (the wgmma family's raw fp8 boxes: a bad id loads zeros
       from past the tensor map, nothing read out of bounds) */
    test_bad_block_kv(20, 1, 1000, 16, FA_DTYPE_FP8_E4M3);
    test_bad_block_kv(20, 2, GT_BAD_NB, 16, FA_DTYPE_FP8_E5M2); /* splits, id == num_blocks */
    test_bad_block_kv(20, 1, -7, 32, FA_DTYPE_FP8_E4M3); /* block 32: four pages a 128-key tile */
    test_bad_block_kv(20, 1, 1000, 3, FA_DTYPE_FP8_E4M3); /* block 3: the KV8 cp.async copy */
    return gt_finish();
}
