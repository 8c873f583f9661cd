/* bench_gpu.c - GPU benchmark of flashattn's CUDA backend, every row against the ceilings of the
   same run (docs/PERF.md's method).

   What it measures (each row: name, shape, median time, GB/s of the bytes that must move,
   TFLOP/s, fraction of the measured copy bandwidth, fraction of the measured GEMM rate):
     ceiling        device-to-device cudaMemcpyAsync of 1 GiB (read + write bytes / time);
                    cublasGemmEx 8192^3 bf16 in, fp32 compute, bf16 out (n/a without cuBLAS)
     decode         q_len 1 through fa_forward with a real builder (split plan from the planner),
                    cache write excluded (k = v = NULL): batch {1,8,64,256} x context {1k,8k,32k}
                    x Hq/Hkv {32/8, 32/32, 64/8} x head size {64,128,256}, block 16, bf16 and
                    fp8 e4m3 caches; rows whose K/V exceed --max-gb are skipped
     decode-split   32/8 head-128 bf16 rows again with fixed splits {1,2,4,...,128} through the
                    backend's attention op (hand-made plan, own workspace); then a
                    `split-choice` row: the planner's choice against the best fixed split
     prefill-dense  causal varlen, 16k tokens as 1x16384, 4x4096, 16x1024, 32/8, bf16, head
                    size {64,128,256}: attention op with cu_seqlens_k = cu_seqlens_q, causal = 1
     prefill-dense ... q=fp8  the dense rows with an e4m3 query, K and V (bf16 out): head 128,
                    and heads 64 / 256 when --dim names them
     prefill-paged ... q=fp8  the same keys in --block pages (the attention op with a block
                    table over shuffled blocks; --quick: 1x16384)
     prefill-paged  the same through fa_forward (decoder prefill over a block-16 cache)
     prefill-paged ... kv=fp8  the paged rows over an e4m3 cache (bf16 query; --quick: 1x16384
                    at head 128)
     prefill-paged-nc  the same with the step's causal mask off (FA_CAUSAL_OFF; FLOPs of every
                    query x every key; --quick: 1x16384 and 4x4096 at head 128)
     mixed          64 decodes at 8k context + one chunked-prefill chunk of 2048 tokens whose
                    sequence is 8192 long (6144 cached + 2048 new), fa_forward, 32/8, head 128
     verify         speculative-decoding verify steps: B sequences of Lq draft tokens at the end
                    of a ctx-token sequence, 64x8 and 64x16 at 8k, 16x64 at 8k, 4x8 at 32k,
                    fa_forward, 32/8, head 128 (--quick: the first two)
     cascade        shared prefix P {1k,16k} x {64,256} decodes (and 1k x {8,16}, where the
                    heuristic declines), each with 512 own tokens:
                    fa_forward with common_prefix_len = P (cascade) and 0 (cascade-plain);
                    speedup, and whether fa_builder_cascade_prefix_len picks cascade
     cache          reshape_and_cache, 4k and 16k tokens, Hkv 8, head 128, bf16 in, bf16 / fp8 cache
     merge          merge_states, 4k and 16k tokens x 32 heads x 128, bf16
     dcp            dcp_correct in place, 4k and 16k tokens x 32 heads x 128, bf16, W = 2 ranks
                    (rank 0), with lse_out
   Every fa_forward / attention call is attention only: no cache write.

   Bytes that must move (each input read once, each output written once):
     attention  K and V rows of every sequence (2 * tokens_in_cache * Hkv * D * bytes_per_elem;
                a shared cascade prefix counted once) + q + out (bf16); block tables, sequence
                lengths and split partials are not counted
     cache      key + value read (bf16) + slot_mapping (8 B / token) + key + value written
     merge      two partial outputs (bf16) + two LSEs (f32) read + one output written
     dcp        the output (bf16) read and written + W LSEs (f32) read + lse_out written
   FLOPs: 4 * sum over sequences of Lq * Lk_avg * Hq * D, Lk_avg = context + (Lq + 1) / 2 (causal;
   decode and prefill-paged-nc: Lk_avg = seq_len).

   Timing (PERF.md method 3): CUDA events around each repetition, warm-up first, the median of
   >= 20 repetitions (default 30). Inputs are ROTATED, not flushed: each row allocates n copies
   of its whole working set (cache region, block tables, q, out) with n * working set >= 512 MB
   (--rot-mb), more than 8x the 60 MB L2; one repetition runs the n copies back to back
   (time / n is reported). Every repetition is one replay of a CUDA graph captured on the
   backend's stream (all rows: decode, merge and cache writes included), so launch gaps don't
   dominate; if capture fails the row is timed with plain launches and says so. Random data
   (normal bf16, fp8 e4m3 of normal / scale, uniform f32 LSEs), never zeros: a fixed random
   pattern of PAT_N elements is tiled over each buffer, so the host can rebuild any input.

   Correctness: each row runs once more on rotation copy 0 with its output poisoned (0xFF, NaN)
   and checks that every output element is finite; attention rows then compare a sample (the
   last rows of the last sequence, the query heads of one KV head) with the CPU reference backend
   (fa_cpu) run on a reduced copy of the same inputs (dense, that KV head only): relative L2
   error and max abs error are printed, FAIL above 2e-2. reshape_and_cache: 64 sampled slots
   compared bit-exactly with the CPU conversion; merge_states: the first 256 tokens against the
   CPU backend's merge; dcp_correct: copy 0's output refilled with its pattern, corrected once,
   the first 256 tokens against the CPU backend's dcp_correct.

   Usage: bench_gpu [options]      (see usage() or --help; --list shows the rows without a GPU)
   Output: a line per row as it completes, the summary table last; --csv PATH writes every row.
   Exit status: 0 when every checked row passed, 1 if a check failed, 2 on a setup error.

   Link: libflashattn.a, libflashattn_cuda.a, libflashattn_cpu.a, cudart, (cublas with
   -DFA_HAVE_CUBLAS), stdc++, m. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "flashattn.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#ifdef FA_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include "fa_cpu.h"
#include "fa_cuda.h"

/* ---------------------------------------------------------------------------------------- */
/* options */

enum {
    C_DECODE = 1,
    C_SPLITS = 2,
    C_PREFILL = 4,
    C_MIXED = 8,
    C_CASCADE = 16,
    C_CACHE = 32,
    C_MERGE = 64,
    C_DCP = 128,
    C_VERIFY = 256,
    C_ALL = 511
};

#define MAX_LIST 16
#define MAX_FILTERS 16

typedef struct ilist {
    int n;
    int v[MAX_LIST];
} ilist;

static struct {
    int quick, list, no_check, no_graph, full_graph, no_ceilings, sweep_all, device;
    unsigned cats;
    int reps, warmup;
    double max_gb, rot_mb;
    int max_copies;
    int max_splits;                     /* compilation.max_num_splits of the builders (0 = default) */
    const char *csv;
    int nfilters;
    const char *filters[MAX_FILTERS];
    ilist batch, ctx, dim, kv;          /* decode grid filters (empty = all) */
    int nheads, heads_q[MAX_LIST], heads_kv[MAX_LIST];
    int block;                          /* paged block size of the decode / prefill-paged /
                                           mixed worlds (0 = 16); rows name it when not 16 */
    int blocks_in_order;                /* block tables hand out physical blocks in order, not
                                           as a random permutation; rows say " inorder" */
    int family;                         /* fa_cuda_family of the backend (--family) */
    int persist;                        /* --persist MODE: fa_cuda_backend_set_persistent(MODE), -1 unset */
    int gqa_pack;                       /* --gqa-pack MODE: fa_cuda_backend_set_gqa_pack(MODE), -1 unset */
    uint64_t seed;
} O;

/* " bs=N" for a row name when the paged block size is not the default 16, " inorder" with
   --blocks-in-order, else "". */
static const char *block_tag(void)
{
    static char tag[48];
    tag[0] = 0;
    if (O.block > 0 && O.block != 16) snprintf(tag, sizeof tag, " bs=%d", O.block);
    if (O.blocks_in_order) strcat(tag, " inorder");
    return tag;
}

/* ---------------------------------------------------------------------------------------- */
/* state */

static cudaStream_t g_stream;
static fa_backend *g_be, *g_cpu;
static double g_copy_gbs, g_gemm_tfs;  /* ceilings (0 = not measured) */
static char g_err[1024];               /* reason of the last failure */
static int g_dead;                     /* a sticky CUDA error: no further GPU work */
static int g_noncausal;                /* the paged world being built is bidirectional (the
                                          prefill-paged-nc rows): step causal OFF, full FLOPs,
                                          the reference non-causal */
static FILE *g_csv;
static uint64_t g_rng;
static double g_t0;

#define KSCALE_FP8 0.03125f            /* fp8 cache scale: stored = x / scale, |x/scale| < 448 */
#define ROW_BUDGET_MS 1500.0           /* repetitions are cut (never below 20) past this */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) /* [0, 1) */
{
    return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}

static double rng_normal(void)
{
    double u1 = ((double)(rng_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = rng_uniform();
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void shuffle_i32(int32_t *a, int64_t n)
{
    int64_t i;
    for (i = n - 1; i > 0; --i) {
        int64_t j = (int64_t)(rng_u64() % (uint64_t)(i + 1));
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void seterr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

/* 0 when a backend op returned FA_OK; else -1 with its message in g_err. */
static int op_status(fa_status st, const char *op)
{
    if (st == FA_OK) return 0;
    seterr("%s op: %s", op, g_be->ops.last_error ? g_be->ops.last_error(g_be->ctx) : fa_status_string(st));
    return -1;
}

/* A sticky error (illegal address, launch failure...) poisons the context for good. */
static void note_cuda_error(cudaError_t e)
{
    if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorIllegalInstruction ||
        e == cudaErrorMisalignedAddress || e == cudaErrorInvalidAddressSpace || e == cudaErrorInvalidPc ||
        e == cudaErrorHardwareStackError || e == cudaErrorAssert || e == cudaErrorUnknown ||
        e == cudaErrorLaunchTimeout || e == cudaErrorECCUncorrectable)
        g_dead = 1;
}

#define CU(call) cu_check((call), #call, __LINE__)
static int cu_check(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess) return 0;
    seterr("%s (bench_gpu.c:%d): %s", what, line, cudaGetErrorString(e));
    note_cuda_error(e);
    cudaGetLastError();
    return -1;
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e;
    if (bytes == 0) bytes = 256;
    e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        seterr("out of device memory: cudaMalloc of %.2f GB failed (%s)", (double)bytes / 1e9,
               cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void dfree(void *p)
{
    if (p) {
        cudaError_t e = cudaFree(p);
        if (e != cudaSuccess) {
            note_cuda_error(e);
            cudaGetLastError();
        }
    }
}

static int h2d(void *dst, const void *src, size_t bytes)
{
    if (CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream))) return -1;
    return CU(cudaStreamSynchronize(g_stream));
}

static int d2h(void *dst, const void *src, size_t bytes)
{
    if (CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream))) return -1;
    return CU(cudaStreamSynchronize(g_stream));
}

static int dpoison(void *dst, size_t bytes)
{
    if (CU(cudaMemsetAsync(dst, 0xFF, bytes, g_stream))) return -1;
    return 0;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_gpu: host malloc of %zu bytes failed\n", bytes);
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* random patterns: element e of any buffer filled with kind k holds pat[k][e % PAT_N] */

enum { PAT_BF16 = 0, PAT_FP8 = 1, PAT_F32 = 2, PAT_KINDS = 3 };
#define PAT_N 8388593 /* a prime: K, V and copies of one buffer do not line up with the period */
static const size_t pat_es[PAT_KINDS] = {2, 1, 4};
static void *pat_host[PAT_KINDS], *pat_dev[PAT_KINDS];

static int pat_init(void)
{
    int64_t i;
    uint16_t *b = (uint16_t *)xmalloc(sizeof(uint16_t) * PAT_N);
    uint8_t *f8 = (uint8_t *)xmalloc(PAT_N);
    float *f = (float *)xmalloc(sizeof(float) * PAT_N);
    for (i = 0; i < PAT_N; ++i) {
        b[i] = fa_cpu_float_to_bf16((float)rng_normal());
        f8[i] = fa_cpu_float_to_fp8((float)rng_normal() / KSCALE_FP8, FA_DTYPE_FP8_E4M3);
        f[i] = (float)(rng_uniform() * 8.0 - 4.0);
    }
    pat_host[PAT_BF16] = b;
    pat_host[PAT_FP8] = f8;
    pat_host[PAT_F32] = f;
    for (i = 0; i < PAT_KINDS; ++i) {
        pat_dev[i] = dalloc(pat_es[i] * PAT_N);
        if (!pat_dev[i] || h2d(pat_dev[i], pat_host[i], pat_es[i] * PAT_N)) return -1;
    }
    return 0;
}

static uint16_t pat_bf16(int64_t e) { return ((const uint16_t *)pat_host[PAT_BF16])[e % PAT_N]; }
static uint8_t pat_fp8(int64_t e) { return ((const uint8_t *)pat_host[PAT_FP8])[e % PAT_N]; }
static float pat_f32(int64_t e) { return ((const float *)pat_host[PAT_F32])[e % PAT_N]; }

/* Fills [dst, dst + bytes) with the pattern (bytes a multiple of the element size): one copy of
   the pattern, then doubling copies inside dst (every copied length is a multiple of the period). */
static int fill_pattern(void *dst, size_t bytes, int kind)
{
    size_t period = pat_es[kind] * PAT_N, filled;
    filled = bytes < period ? bytes : period;
    if (CU(cudaMemcpyAsync(dst, pat_dev[kind], filled, cudaMemcpyDeviceToDevice, g_stream))) return -1;
    while (filled < bytes) {
        size_t n = bytes - filled < filled ? bytes - filled : filled;
        if (CU(cudaMemcpyAsync((char *)dst + filled, dst, n, cudaMemcpyDeviceToDevice, g_stream))) return -1;
        filled += n;
    }
    return CU(cudaStreamSynchronize(g_stream));
}

/* The cache arena: one large allocation, filled with one pattern kind, reused by every paged row
   (attention only: the benchmarks never write into it). */
static void *g_arena;
static size_t g_arena_bytes;
static int g_arena_kind = -1;

static void arena_release(void)
{
    dfree(g_arena);
    g_arena = NULL;
    g_arena_bytes = 0;
    g_arena_kind = -1;
}

static void *arena_get(size_t need, int kind)
{
    if (g_arena == NULL) {
        size_t freeb = 0, total = 0, want, reserve = (size_t)12 << 30;
        if (CU(cudaMemGetInfo(&freeb, &total))) return NULL;
        want = (size_t)(O.max_gb * 1e9) + ((size_t)1 << 30);
        if (freeb < reserve + ((size_t)1 << 30)) {
            seterr("only %.1f GB of device memory free", (double)freeb / 1e9);
            return NULL;
        }
        if (want > freeb - reserve) want = freeb - reserve;
        while (want >= ((size_t)1 << 30)) {
            g_arena = dalloc(want);
            if (g_arena) break;
            want -= want / 8;
        }
        if (!g_arena) return NULL;
        g_arena_bytes = want;
        g_arena_kind = -1;
        printf("# cache arena: %.1f GB (of %.1f GB free)\n", (double)want / 1e9, (double)freeb / 1e9);
    }
    if (need > g_arena_bytes) {
        seterr("needs %.1f GB of cache, the arena holds %.1f GB", (double)need / 1e9,
               (double)g_arena_bytes / 1e9);
        return NULL;
    }
    if (g_arena_kind != kind) {
        if (fill_pattern(g_arena, g_arena_bytes - g_arena_bytes % 64, kind)) return NULL;
        g_arena_kind = kind;
    }
    return g_arena;
}

/* Copies of a working set of ws bytes (cache part cache_ws) so that a pass moves >= --rot-mb. */
static int rot_copies(double ws, double cache_ws)
{
    double rot = O.rot_mb * 1e6;
    int n = ws >= rot ? 1 : (int)ceil(rot / ws);
    if (n > O.max_copies) n = O.max_copies;
    if (cache_ws > 0 && g_arena_bytes > 0 && n * cache_ws > (double)g_arena_bytes)
        n = (int)((double)g_arena_bytes / cache_ws);
    return n < 1 ? 1 : n;
}

/* ---------------------------------------------------------------------------------------- */
/* rows */

typedef struct row {
    char cat[24];
    char name[160];
    int batch, ctx, hq, hkv, d;
    char kv[8];
    int splits;                /* planner's / fixed split count, 0 = n/a */
    int copies;
    double us;                 /* median time per call; < 0 = not timed */
    double bytes, flops;
    int checked, check_ok;     /* checked: 1 = compared / scanned */
    double rel_err, max_abs;
    char check[96];
    char note[320];
    char extra[200];
} row;

static row *g_rows;
static int g_nrows, g_cap_rows;

static void row_init(row *r, const char *cat)
{
    memset(r, 0, sizeof *r);
    snprintf(r->cat, sizeof r->cat, "%s", cat);
    r->us = -1.0;
    r->rel_err = -1.0;
    r->max_abs = -1.0;
}

/* the row's shape columns: batch, context, heads, head size, cache dtype name */
static void row_shape(row *r, int batch, int ctx, int hq, int hkv, int d, const char *kv)
{
    r->batch = batch;
    r->ctx = ctx;
    r->hq = hq;
    r->hkv = hkv;
    r->d = d;
    snprintf(r->kv, sizeof r->kv, "%s", kv);
}

static double row_gbs(const row *r)
{
    return r->us > 0 && r->bytes > 0 ? r->bytes / (r->us * 1e-6) / 1e9 : 0.0;
}
static double row_tfs(const row *r)
{
    return r->us > 0 && r->flops > 0 ? r->flops / (r->us * 1e-6) / 1e12 : 0.0;
}
static double row_fcopy(const row *r) { return g_copy_gbs > 0 ? row_gbs(r) / g_copy_gbs : 0.0; }
static double row_fgemm(const row *r) { return g_gemm_tfs > 0 ? row_tfs(r) / g_gemm_tfs : 0.0; }

static int in_ilist(const ilist *l, int v)
{
    int i;
    if (l->n == 0) return 1;
    for (i = 0; i < l->n; ++i)
        if (l->v[i] == v) return 1;
    return 0;
}

/* 1 if the row is to run (its category is selected, a --filter matches); in --list mode prints. */
static int row_selected(const row *r, unsigned cat)
{
    int i, ok;
    if (!(O.cats & cat)) return 0;
    ok = O.nfilters == 0;
    for (i = 0; i < O.nfilters && !ok; ++i)
        if (strstr(r->name, O.filters[i])) ok = 1;
    if (!ok) return 0;
    if (O.list) {
        printf("%s\n", r->name);
        return 0;
    }
    return 1;
}

static void fmt_num(char *buf, size_t n, double v, const char *fmt)
{
    if (v > 0)
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "-");
}

static void print_header(void)
{
    printf("%-60s %10s %9s %8s %6s %6s %3s  %s\n", "row", "time_us", "GB/s", "TFLOP/s", "copy", "gemm", "spl",
           "check / note");
}

static void csv_field(FILE *f, const char *s)
{
    const char *p;
    int quote = strpbrk(s, ",\"\n") != NULL;
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (p = s; *p; ++p) {
        if (*p == '"') fputc('"', f);
        fputc(*p == '\n' ? ' ' : *p, f);
    }
    fputc('"', f);
}

static void emit_row(const row *r)
{
    char t[32], g[32], tf[32], fc[32], fg[32], sp[16];
    fmt_num(t, sizeof t, r->us, r->us < 100 ? "%.2f" : "%.1f");
    fmt_num(g, sizeof g, row_gbs(r), "%.0f");
    fmt_num(tf, sizeof tf, row_tfs(r), row_tfs(r) < 10 ? "%.2f" : "%.0f");
    fmt_num(fc, sizeof fc, r->us > 0 && r->bytes > 0 ? row_fcopy(r) : 0, "%.3f");
    fmt_num(fg, sizeof fg, r->us > 0 && r->flops > 0 ? row_fgemm(r) : 0, "%.3f");
    if (r->splits > 0)
        snprintf(sp, sizeof sp, "%d", r->splits);
    else
        snprintf(sp, sizeof sp, "-");
    printf("%-60s %10s %9s %8s %6s %6s %3s  %s%s%s%s%s\n", r->name, t, g, tf, fc, fg, sp, r->check,
           r->check[0] && r->note[0] ? "; " : "", r->note, r->extra[0] ? "  " : "", r->extra);
    fflush(stdout);
    if (g_csv) {
        fprintf(g_csv, "%s,", r->cat);
        csv_field(g_csv, r->name);
        fprintf(g_csv, ",%d,%d,%d,%d,%d,%s,%d,%d,", r->batch, r->ctx, r->hq, r->hkv, r->d, r->kv, r->splits,
                r->copies);
        if (r->us > 0)
            fprintf(g_csv, "%.3f,%.6g,%.6g,%.3f,%.4f,%.4f,%.4f,", r->us, r->bytes, r->flops, row_gbs(r),
                    row_tfs(r), g_copy_gbs > 0 && r->bytes > 0 ? row_fcopy(r) : 0.0,
                    g_gemm_tfs > 0 && r->flops > 0 ? row_fgemm(r) : 0.0);
        else
            fprintf(g_csv, ",%.6g,%.6g,,,,,", r->bytes, r->flops);
        csv_field(g_csv, r->checked ? (r->check_ok ? "ok" : "FAIL") : "");
        fputc(',', g_csv);
        if (r->rel_err >= 0) fprintf(g_csv, "%.3g", r->rel_err);
        fputc(',', g_csv);
        if (r->max_abs >= 0) fprintf(g_csv, "%.3g", r->max_abs);
        fputc(',', g_csv);
        csv_field(g_csv, r->note);
        fputc(',', g_csv);
        csv_field(g_csv, r->extra);
        fputc('\n', g_csv);
        fflush(g_csv);
    }
    if (g_nrows == g_cap_rows) {
        g_cap_rows = g_cap_rows ? 2 * g_cap_rows : 256;
        g_rows = (row *)realloc(g_rows, sizeof(row) * (size_t)g_cap_rows);
        if (!g_rows) {
            fprintf(stderr, "bench_gpu: out of host memory\n");
            exit(2);
        }
    }
    g_rows[g_nrows++] = *r;
}

/* A row that could not run: note says why. */
static void emit_na(row *r, const char *why)
{
    snprintf(r->note, sizeof r->note, "n/a: %.300s", why);
    r->us = -1.0;
    emit_row(r);
}

/* ---------------------------------------------------------------------------------------- */
/* timing: CUDA events around each pass (n rotated copies), graph replay, median */

#define EV_MAX 256
static cudaEvent_t g_ev[2 * EV_MAX + 2];

typedef int (*launch_fn)(void *ctx, int copy); /* 0 = ok, else g_err says why */

typedef struct tres {
    double us;                 /* median per call */
    double us_min, us_max;
    int reps, graph;
    char note[200];
} tres;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static int run_pass(launch_fn fn, void *ctx, int n, cudaGraphExec_t ge)
{
    int i;
    if (ge) return CU(cudaGraphLaunch(ge, g_stream));
    for (i = 0; i < n; ++i)
        if (fn(ctx, i)) return -1;
    return 0;
}

static int capture(launch_fn fn, void *ctx, int n, cudaGraph_t *g, cudaGraphExec_t *ge)
{
    int i, bad = 0;
    cudaError_t e;
    char why[1024];
    *g = NULL;
    *ge = NULL;
    if (CU(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed))) return -1;
    for (i = 0; i < n && !bad; ++i)
        if (fn(ctx, i)) bad = 1;
    snprintf(why, sizeof why, "%s", g_err);
    e = cudaStreamEndCapture(g_stream, g);
    if (bad || e != cudaSuccess || *g == NULL) {
        if (!bad) snprintf(why, sizeof why, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
        cudaGetLastError();
        if (*g) cudaGraphDestroy(*g);
        *g = NULL;
        seterr("%s", why);
        return -1;
    }
    e = cudaGraphInstantiateWithFlags(ge, *g, 0);
    if (e != cudaSuccess) {
        seterr("cudaGraphInstantiateWithFlags: %s", cudaGetErrorString(e));
        cudaGetLastError();
        cudaGraphDestroy(*g);
        *g = NULL;
        *ge = NULL;
        return -1;
    }
    return 0;
}

static int time_it(launch_fn fn, void *ctx, int n, tres *r)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    float ms[EV_MAX], warm_ms = 0.f;
    int i, reps, rc = -1;
    memset(r, 0, sizeof *r);
    /* eager pass first: module load, kernel attributes, first touch of every page */
    for (i = 0; i < n; ++i)
        if (fn(ctx, i)) return -1;
    if (CU(cudaStreamSynchronize(g_stream))) return -1;
    if (!O.no_graph) {
        if (capture(fn, ctx, n, &g, &ge) == 0) {
            r->graph = 1;
        } else {
            if (g_dead) return -1;
            snprintf(r->note, sizeof r->note, "graph capture failed (%.120s): plain launches", g_err);
            if (CU(cudaStreamSynchronize(g_stream))) return -1;
        }
    }
    /* warm-up, timed as a whole to size the repetitions */
    if (CU(cudaEventRecord(g_ev[2 * EV_MAX], g_stream))) goto done;
    for (i = 0; i < (O.warmup > 0 ? O.warmup : 1); ++i)
        if (run_pass(fn, ctx, n, ge)) goto done;
    if (CU(cudaEventRecord(g_ev[2 * EV_MAX + 1], g_stream))) goto done;
    if (CU(cudaEventSynchronize(g_ev[2 * EV_MAX + 1]))) goto done;
    if (CU(cudaEventElapsedTime(&warm_ms, g_ev[2 * EV_MAX], g_ev[2 * EV_MAX + 1]))) goto done;
    warm_ms /= (float)(O.warmup > 0 ? O.warmup : 1);
    reps = O.reps;
    if (warm_ms > 0 && reps * warm_ms > ROW_BUDGET_MS) reps = (int)(ROW_BUDGET_MS / warm_ms);
    if (reps < 20) reps = 20;
    if (reps > EV_MAX) reps = EV_MAX;
    for (i = 0; i < reps; ++i) {
        if (CU(cudaEventRecord(g_ev[2 * i], g_stream))) goto done;
        if (run_pass(fn, ctx, n, ge)) goto done;
        if (CU(cudaEventRecord(g_ev[2 * i + 1], g_stream))) goto done;
    }
    if (CU(cudaStreamSynchronize(g_stream))) goto done;
    for (i = 0; i < reps; ++i) {
        if (CU(cudaEventElapsedTime(&ms[i], g_ev[2 * i], g_ev[2 * i + 1]))) goto done;
        ms[i] /= (float)n;
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    r->reps = reps;
    r->us = (reps % 2 ? (double)ms[reps / 2] : 0.5 * ((double)ms[reps / 2 - 1] + (double)ms[reps / 2])) * 1e3;
    r->us_min = (double)ms[0] * 1e3;
    r->us_max = (double)ms[reps - 1] * 1e3;
    rc = 0;
done:
    if (rc != 0) {
        cudaError_t e = cudaStreamSynchronize(g_stream);
        note_cuda_error(e);
        cudaGetLastError();
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    return rc;
}

/* Times and fills the row's time and note (n/a with the reason on failure; the caller emits
   the row either way); 0 on success. */
static int time_row(row *r, launch_fn fn, void *ctx, int n)
{
    tres t;
    r->copies = n;
    if (time_it(fn, ctx, n, &t)) {
        snprintf(r->note, sizeof r->note, "n/a: %.300s", g_err);
        r->us = -1.0;
        return -1;
    }
    r->us = t.us;
    if (t.note[0]) snprintf(r->note, sizeof r->note, "%s", t.note);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* correctness: poison, one eager run on copy 0, scan, compare with the CPU reference */

static int bf16_finite(uint16_t x) { return (x & 0x7F80u) != 0x7F80u; }

/* A reference sample: query rows [row0, row0 + m) of the GPU output (token-major
   [T, hq, D]), heads [h0, h0 + G), against ref [m][G][D] bf16. */
typedef struct ref_sample {
    int m, G, D, hq, h0;
    int64_t row0;
    uint16_t *ref;
} ref_sample;

static void ref_free(ref_sample *s)
{
    free(s->ref);
    s->ref = NULL;
}

/* CPU reference: dense causal attention of m query rows (bottom-right aligned) over Lk keys of
   one KV head; q [m][G][D] bf16, k / v [Lk][D] of kvdt, out [m][G][D] bf16. */
static int cpu_ref(const void *q, fa_dtype qdt, const void *k, const void *v, fa_dtype kvdt, int m, int G,
                   int D, int Lk, float scale, float ks, float vs, uint16_t *out)
{
    fa_attn_args a;
    int32_t cuq[2], cuk[2];
    fa_status st;
    cuq[0] = 0;
    cuq[1] = m;
    cuk[0] = 0;
    cuk[1] = Lk;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.q_token_stride = (int64_t)G * D;
    a.q_head_stride = D;
    a.q_dtype = qdt;
    a.out_dtype = FA_DTYPE_BF16; /* (an fp8 query's output) */
    a.k = k;
    a.v = v;
    a.k_row_stride = D;
    a.k_head_stride = D;
    a.v_row_stride = D;
    a.v_head_stride = D;
    a.kv_dtype = kvdt;
    a.out = out;
    a.out_token_stride = (int64_t)G * D;
    a.out_head_stride = D;
    a.cu_seqlens_q = cuq;
    a.cu_seqlens_k = cuk;
    a.num_keys = Lk;
    a.num_seqs = 1;
    a.num_tokens = m;
    a.max_seqlen_q = m;
    a.max_seqlen_k = Lk;
    a.num_heads_q = G;
    a.num_heads_kv = 1;
    a.head_size = D;
    a.softmax_scale = scale;
    a.causal = !g_noncausal;
    a.window_left = -1;
    a.window_right = -1;
    a.k_scale = ks;
    a.v_scale = vs;
    a.num_splits = 1;
    st = g_cpu->ops.attention(g_cpu->ctx, &a);
    if (st != FA_OK) {
        seterr("CPU reference attention: %s",
               g_cpu->ops.last_error ? g_cpu->ops.last_error(g_cpu->ctx) : "?");
        return -1;
    }
    return 0;
}

/* Runs copy 0 once with its output poisoned, reads the output back ([out_elems] bf16), scans it
   and compares the samples. Fills the row's check fields. */
static void check_attention(row *r, launch_fn fn, void *ctx, void *out0, int64_t out_elems, ref_sample *s,
                            int ns)
{
    uint16_t *host;
    int64_t i, bad = 0;
    double num = 0, den = 0, mx = 0;
    int k;
    if (O.no_check) return;
    host = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)out_elems);
    if (dpoison(out0, sizeof(uint16_t) * (size_t)out_elems) || fn(ctx, 0) ||
        CU(cudaStreamSynchronize(g_stream)) || d2h(host, out0, sizeof(uint16_t) * (size_t)out_elems)) {
        r->checked = 1;
        r->check_ok = 0;
        snprintf(r->check, sizeof r->check, "FAIL check run: %.70s", g_err);
        free(host);
        return;
    }
    for (i = 0; i < out_elems; ++i)
        if (!bf16_finite(host[i])) bad++;
    for (k = 0; k < ns; ++k) {
        int t, g, d;
        if (!s[k].ref) continue;
        for (t = 0; t < s[k].m; ++t)
            for (g = 0; g < s[k].G; ++g)
                for (d = 0; d < s[k].D; ++d) {
                    double want = fa_cpu_bf16_to_float(s[k].ref[((int64_t)t * s[k].G + g) * s[k].D + d]);
                    double got =
                        fa_cpu_bf16_to_float(host[((s[k].row0 + t) * s[k].hq + s[k].h0 + g) * s[k].D + d]);
                    double e = fabs(got - want);
                    if (!(e == e)) e = INFINITY;
                    num += (got - want) * (got - want);
                    den += want * want;
                    if (e > mx) mx = e;
                }
    }
    r->checked = 1;
    r->max_abs = mx;
    r->rel_err = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    if (!(r->rel_err == r->rel_err)) r->rel_err = INFINITY;
    r->check_ok = bad == 0 && r->rel_err <= 2e-2;
    if (bad)
        snprintf(r->check, sizeof r->check, "FAIL %lld of %lld outputs not finite", (long long)bad,
                 (long long)out_elems);
    else if (ns > 0)
        snprintf(r->check, sizeof r->check, "%s rel %.1e max %.1e", r->check_ok ? "ok" : "FAIL", r->rel_err,
                 mx);
    else
        snprintf(r->check, sizeof r->check, "ok finite");
    free(host);
}

/* ---------------------------------------------------------------------------------------- */
/* paged worlds: a batch of requests over a block-16 cache in the arena, n rotated copies */

typedef struct pworld {
    int nreq, T, hq, hkv, D, fp8, bs, P, ncopies, max_nb;
    int32_t *qsl, *seq;             /* host [nreq + 1], [nreq] */
    int64_t blocks_per_copy, NB;
    size_t es;
    int32_t *bt_host, *bt_dev;      /* [ncopies][nreq][max_nb] */
    void *q_all, *out_all;          /* [ncopies][T][hq][D] bf16 */
    fa_tensor cache;
    fa_builder *b;
    fa_layer layer;
    fa_batch batch;
    fa_metadata *md;                /* [ncopies] */
    fa_tensor *qt, *ot;             /* [ncopies] */
    double bytes, flops;
    double cache_bytes_per_copy;
} pworld;

static void pworld_free(pworld *w)
{
    if (w->b) fa_builder_destroy(w->b);
    dfree(w->bt_dev);
    dfree(w->q_all);
    dfree(w->out_all);
    free(w->qsl);
    free(w->seq);
    free(w->bt_host);
    free(w->md);
    free(w->qt);
    free(w->ot);
    memset(w, 0, sizeof *w);
}

/* Bytes and FLOPs of a batch (P tokens of shared prefix counted once). */
static void batch_counts(int nreq, const int32_t *qlen, const int32_t *seq, int P, int hq, int hkv, int D,
                         size_t es, double *bytes, double *flops)
{
    int i;
    double kv_tokens = P, T = 0, fl = 0;
    for (i = 0; i < nreq; ++i) {
        double lq = qlen[i], lk = seq[i];
        kv_tokens += lk - P;
        T += lq;
        fl += 4.0 * lq * (g_noncausal ? lk : (lk - lq) + (lq + 1.0) / 2.0) * hq * D;
    }
    *bytes = 2.0 * kv_tokens * hkv * D * (double)es + 2.0 * T * hq * D * 2.0;
    *flops = fl;
}

/* Sets up the world (w zeroed by the caller). qlen / seq: host arrays of nreq; P: shared prefix
   tokens (multiple of 16, every request's block-table row starts with the same P/16 blocks). */
static int pworld_setup(pworld *w, int nreq, const int32_t *qlen, const int32_t *seq, int P, int hq, int hkv,
                        int D, int fp8)
{
    fa_config cfg;
    fa_layer_desc ld;
    int64_t shape[5], strides[5], c, i, j, k;
    int32_t *perm;
    int nsh;
    double ws;
    fa_status st;
    memset(w, 0, sizeof *w);
    w->nreq = nreq;
    w->hq = hq;
    w->hkv = hkv;
    w->D = D;
    w->fp8 = fp8;
    w->bs = O.block > 0 ? O.block : 16;
    w->P = P;
    w->es = fp8 ? 1 : 2;
    w->qsl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)(nreq + 1));
    w->seq = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nreq);
    w->qsl[0] = 0;
    nsh = P / w->bs;
    w->blocks_per_copy = nsh;
    for (i = 0; i < nreq; ++i) {
        int nb = (seq[i] + w->bs - 1) / w->bs;
        w->qsl[i + 1] = w->qsl[i] + qlen[i];
        w->seq[i] = seq[i];
        if (nb > w->max_nb) w->max_nb = nb;
        w->blocks_per_copy += nb - nsh;
    }
    w->T = w->qsl[nreq];
    batch_counts(nreq, qlen, seq, P, hq, hkv, D, w->es, &w->bytes, &w->flops);
    w->cache_bytes_per_copy = 2.0 * (double)w->blocks_per_copy * w->bs * hkv * D * (double)w->es;
    if (w->cache_bytes_per_copy > O.max_gb * 1e9) {
        seterr("skip: K/V cache %.1f GB > --max-gb %.0f", w->cache_bytes_per_copy / 1e9, O.max_gb);
        return -1;
    }
    /* the arena first (its size bounds the copies) */
    if (!arena_get((size_t)w->cache_bytes_per_copy, fp8 ? PAT_FP8 : PAT_BF16)) return -1;
    ws = w->bytes;
    w->ncopies = rot_copies(ws, w->cache_bytes_per_copy);
    w->NB = w->blocks_per_copy * w->ncopies;
    /* block tables: a random permutation of every physical block (--blocks-in-order: in order) */
    perm = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)w->NB);
    for (i = 0; i < w->NB; ++i) perm[i] = (int32_t)i;
    if (!O.blocks_in_order) shuffle_i32(perm, w->NB);
    w->bt_host = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)w->ncopies * nreq * w->max_nb);
    k = 0;
    for (c = 0; c < w->ncopies; ++c) {
        int64_t shared0 = k;
        k += nsh;
        for (i = 0; i < nreq; ++i) {
            int32_t *rowp = w->bt_host + (c * nreq + i) * w->max_nb;
            int nb = (seq[i] + w->bs - 1) / w->bs;
            for (j = 0; j < w->max_nb; ++j) {
                if (j < nsh)
                    rowp[j] = perm[shared0 + j];
                else if (j < nb)
                    rowp[j] = perm[k++];
                else
                    rowp[j] = 0;   /* never read */
            }
        }
    }
    free(perm);
    w->bt_dev = (int32_t *)dalloc(sizeof(int32_t) * (size_t)w->ncopies * nreq * w->max_nb);
    if (!w->bt_dev || h2d(w->bt_dev, w->bt_host, sizeof(int32_t) * (size_t)w->ncopies * nreq * w->max_nb))
        return -1;
    /* q and out */
    {
        size_t qb = sizeof(uint16_t) * (size_t)w->ncopies * w->T * hq * D;
        w->q_all = dalloc(qb);
        w->out_all = dalloc(qb);
        if (!w->q_all || !w->out_all) return -1;
        if (fill_pattern(w->q_all, qb, PAT_BF16) || dpoison(w->out_all, qb)) return -1;
    }
    /* the cache view over the arena */
    if (fa_kv_cache_shape(w->NB, w->bs, hkv, D, shape) != FA_OK ||
        fa_kv_cache_strides(FA_LAYOUT_NHD, w->NB, w->bs, hkv, D, strides) != FA_OK) {
        seterr("cache shape: %s", fa_last_error());
        return -1;
    }
    w->cache = fa_tensor_make(g_arena, fp8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16, 5, shape);
    memcpy(w->cache.stride, strides, sizeof strides);
    /* builder and layer */
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_heads_q = hq;
    cfg.model.num_heads_kv = hkv;
    cfg.model.head_size = D;
    cfg.model.dtype = FA_DTYPE_BF16;
    cfg.cache.block_size = w->bs;
    cfg.cache.cache_dtype = fp8 ? FA_CACHE_FP8_E4M3 : FA_CACHE_AUTO;
    cfg.cache.layout = FA_LAYOUT_NHD;
    /* a serving engine's builder: the library's defaults (256 sequences, 8192 tokens a step),
       raised when the batch needs more; they size the split workspace, and with it how far a
       call with few rows may split (max_num_splits left 0) */
    cfg.scheduler.max_num_seqs = nreq > 256 ? nreq : 256;
    cfg.scheduler.max_num_batched_tokens = w->T > 8192 ? w->T : 8192;
    cfg.compilation.full_cuda_graph = O.full_graph;
    cfg.compilation.max_num_splits = O.max_splits;
    st = fa_builder_create(g_be, &cfg, NULL, &w->b);
    if (st != FA_OK) {
        w->b = NULL;
        seterr("fa_builder_create: %s", fa_last_error());
        return -1;
    }
    memset(&ld, 0, sizeof ld);
    ld.num_heads_q = hq;
    ld.num_heads_kv = hkv;
    ld.head_size = D;
    ld.dtype = FA_DTYPE_BF16;
    ld.kv_cache_dtype = fp8 ? FA_CACHE_FP8_E4M3 : FA_CACHE_AUTO;
    ld.k_scale = fp8 ? KSCALE_FP8 : 1.f;
    ld.v_scale = fp8 ? KSCALE_FP8 : 1.f;
    ld.kv_sharing = 1;   /* the timed forwards read the cache filled here and write no new k/v */
    if (fa_layer_init(&w->layer, &ld) != FA_OK) {
        seterr("fa_layer_init: %s", fa_last_error());
        return -1;
    }
    memset(&w->batch, 0, sizeof w->batch);
    w->batch.num_reqs = nreq;
    w->batch.query_start_loc = w->qsl;
    w->batch.seq_lens = w->seq;
    w->batch.block_table = w->bt_dev;
    w->batch.block_table_stride = w->max_nb;
    w->batch.max_blocks = w->max_nb;
    w->batch.causal = g_noncausal ? FA_CAUSAL_OFF : FA_CAUSAL_ON;
    w->md = (fa_metadata *)xmalloc(sizeof(fa_metadata) * (size_t)w->ncopies);
    w->qt = (fa_tensor *)xmalloc(sizeof(fa_tensor) * (size_t)w->ncopies);
    w->ot = (fa_tensor *)xmalloc(sizeof(fa_tensor) * (size_t)w->ncopies);
    for (c = 0; c < w->ncopies; ++c) {
        int64_t qs[3];
        size_t off = sizeof(uint16_t) * (size_t)c * w->T * hq * D;
        qs[0] = w->T;
        qs[1] = hq;
        qs[2] = D;
        w->qt[c] = fa_tensor_make((char *)w->q_all + off, FA_DTYPE_BF16, 3, qs);
        w->ot[c] = fa_tensor_make((char *)w->out_all + off, FA_DTYPE_BF16, 3, qs);
    }
    return 0;
}

/* Plans the step (common_prefix_len cpl) and makes one metadata per copy (its own block table). */
static int pworld_build(pworld *w, int cpl)
{
    fa_metadata md;
    int c;
    if (fa_builder_build(w->b, &w->batch, cpl, &md) != FA_OK) {
        seterr("fa_builder_build: %s", fa_last_error());
        return -1;
    }
    for (c = 0; c < w->ncopies; ++c) {
        w->md[c] = md;
        w->md[c].block_table = w->bt_dev + (int64_t)c * w->nreq * w->max_nb;
    }
    return CU(cudaStreamSynchronize(g_stream));
}

static int launch_fwd(void *ctx, int c)
{
    pworld *w = (pworld *)ctx;
    fa_status st = fa_forward(&w->layer, g_be, &w->qt[c], NULL, NULL, &w->cache, &w->md[c], &w->ot[c]);
    if (st != FA_OK) {
        seterr("fa_forward: %s", fa_last_error());
        return -1;
    }
    return 0;
}

/* Reference for the last m query rows of request `req` (copy 0), KV head hk. */
static int pworld_ref(const pworld *w, int req, int m, int hk, ref_sample *s)
{
    int G = w->hq / w->hkv, D = w->D, Lk = w->seq[req], i, g, d, j;
    int64_t row0 = w->qsl[req + 1] - m, vofs = w->NB * w->bs * w->hkv * D;
    const int32_t *bt = w->bt_host + (int64_t)req * w->max_nb;
    uint16_t *q = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)m * G * D);
    void *k = xmalloc(w->es * (size_t)Lk * D), *v = xmalloc(w->es * (size_t)Lk * D);
    int rc;
    memset(s, 0, sizeof *s);
    for (i = 0; i < m; ++i)
        for (g = 0; g < G; ++g)
            for (d = 0; d < D; ++d)
                q[((int64_t)i * G + g) * D + d] = pat_bf16(((row0 + i) * w->hq + hk * G + g) * D + d);
    for (j = 0; j < Lk; ++j) {
        int64_t e = ((int64_t)bt[j / w->bs] * w->bs + j % w->bs) * w->hkv * D + (int64_t)hk * D;
        for (d = 0; d < D; ++d) {
            if (w->fp8) {
                ((uint8_t *)k)[(int64_t)j * D + d] = pat_fp8(e + d);
                ((uint8_t *)v)[(int64_t)j * D + d] = pat_fp8(vofs + e + d);
            } else {
                ((uint16_t *)k)[(int64_t)j * D + d] = pat_bf16(e + d);
                ((uint16_t *)v)[(int64_t)j * D + d] = pat_bf16(vofs + e + d);
            }
        }
    }
    s->m = m;
    s->G = G;
    s->D = D;
    s->hq = w->hq;
    s->h0 = hk * G;
    s->row0 = row0;
    s->ref = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)m * G * D);
    rc = cpu_ref(q, FA_DTYPE_BF16, k, v, w->fp8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16, m, G, D, Lk,
                 w->layer.scale, w->fp8 ? KSCALE_FP8 : 1.f, w->fp8 ? KSCALE_FP8 : 1.f, s->ref);
    if (rc) ref_free(s);
    free(q);
    free(k);
    free(v);
    return rc;
}

static void pworld_check(row *r, pworld *w, launch_fn fn, void *ctx, ref_sample *s, int ns)
{
    check_attention(r, fn, ctx, w->out_all, (int64_t)w->T * w->hq * w->D, s, ns);
}

/* ---------------------------------------------------------------------------------------- */
/* ceilings */

static void bench_copy(double *gbs_out, const char *label)
{
    row r;
    size_t bytes = (size_t)1 << 30;
    void *src, *dst;
    float ms[EV_MAX];
    int i, reps = 20;
    row_init(&r, "ceiling");
    snprintf(r.name, sizeof r.name, "ceiling copy d2d 1GiB%s", label);
    r.bytes = 2.0 * (double)bytes;
    src = dalloc(bytes);
    dst = dalloc(bytes);
    if (!src || !dst || fill_pattern(src, bytes, PAT_BF16) || fill_pattern(dst, bytes, PAT_BF16)) {
        emit_na(&r, g_err);
        goto out;
    }
    for (i = 0; i < 3; ++i)
        if (CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream))) break;
    for (i = 0; i < reps && !g_dead; ++i) {
        if (CU(cudaEventRecord(g_ev[2 * i], g_stream)) ||
            CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream)) ||
            CU(cudaEventRecord(g_ev[2 * i + 1], g_stream)))
            break;
    }
    if (i < reps || CU(cudaStreamSynchronize(g_stream))) {
        emit_na(&r, g_err);
        goto out;
    }
    for (i = 0; i < reps; ++i)
        if (CU(cudaEventElapsedTime(&ms[i], g_ev[2 * i], g_ev[2 * i + 1]))) break;
    if (i < reps) {
        emit_na(&r, g_err);
        goto out;
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    r.us = 0.5 * ((double)ms[reps / 2 - 1] + (double)ms[reps / 2]) * 1e3;
    r.copies = 1;
    *gbs_out = r.bytes / (r.us * 1e-6) / 1e9;
    snprintf(r.extra, sizeof r.extra, "min %.1f us, max %.1f us, %d reps", (double)ms[0] * 1e3,
             (double)ms[reps - 1] * 1e3, reps);
    emit_row(&r);
out:
    dfree(src);
    dfree(dst);
}

static void bench_gemm(void)
{
    row r;
    row_init(&r, "ceiling");
    snprintf(r.name, sizeof r.name, "ceiling gemm bf16 8192^3 (cublasGemmEx, fp32 compute)");
    r.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
#ifdef FA_HAVE_CUBLAS
    {
        const int N = 8192;
        size_t bytes = sizeof(uint16_t) * (size_t)N * N;
        void *A = dalloc(bytes), *B = dalloc(bytes), *C = dalloc(bytes);
        cublasHandle_t h = NULL;
        cublasStatus_t cs;
        float alpha = 1.f, beta = 0.f, ms[EV_MAX];
        int i, reps = 20, ok = 1;
        if (!A || !B || !C || fill_pattern(A, bytes, PAT_BF16) || fill_pattern(B, bytes, PAT_BF16) ||
            fill_pattern(C, bytes, PAT_BF16)) {
            emit_na(&r, g_err);
            goto gout;
        }
        cs = cublasCreate(&h);
        if (cs != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, g_stream) != CUBLAS_STATUS_SUCCESS) {
            char why[64];
            snprintf(why, sizeof why, "cublasCreate / SetStream failed (status %d)", (int)cs);
            emit_na(&r, why);
            goto gout;
        }
        for (i = 0; i < 5 + reps && ok; ++i) {
            if (i >= 5 && CU(cudaEventRecord(g_ev[2 * (i - 5)], g_stream))) ok = 0;
            cs = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, A, CUDA_R_16BF, N, B, CUDA_R_16BF,
                              N, &beta, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (cs != CUBLAS_STATUS_SUCCESS) {
                seterr("cublasGemmEx failed (status %d)", (int)cs);
                ok = 0;
            }
            if (ok && i >= 5 && CU(cudaEventRecord(g_ev[2 * (i - 5) + 1], g_stream))) ok = 0;
        }
        if (!ok || CU(cudaStreamSynchronize(g_stream))) {
            emit_na(&r, g_err);
            goto gout;
        }
        for (i = 0; i < reps; ++i)
            if (CU(cudaEventElapsedTime(&ms[i], g_ev[2 * i], g_ev[2 * i + 1]))) break;
        if (i < reps) {
            emit_na(&r, g_err);
            goto gout;
        }
        qsort(ms, (size_t)reps, sizeof(float), cmp_float);
        r.us = 0.5 * ((double)ms[reps / 2 - 1] + (double)ms[reps / 2]) * 1e3;
        r.copies = 1;
        g_gemm_tfs = r.flops / (r.us * 1e-6) / 1e12;
        snprintf(r.extra, sizeof r.extra,
                 "min %.1f us, max %.1f us, %d reps back to back (burst, not sustained)", (double)ms[0] * 1e3,
                 (double)ms[reps - 1] * 1e3, reps);
        emit_row(&r);
    gout:
        if (h) cublasDestroy(h);
        dfree(A);
        dfree(B);
        dfree(C);
    }
#else
    emit_na(&r, "built without cuBLAS (FA_HAVE_CUBLAS undefined): GEMM fractions are n/a");
#endif
}

/* ---------------------------------------------------------------------------------------- */
/* decode (+ fixed-split sweep) */

typedef struct split_ctx {
    fa_attn_args *a;    /* [ncopies] */
} split_ctx;

static int launch_attn(void *ctx, int c)
{
    split_ctx *s = (split_ctx *)ctx;
    return op_status(g_be->ops.attention(g_be->ctx, &s->a[c]), "attention");
}

/* The attention args fa_forward would pass for plain paged attention of copy c of w. */
static void pworld_attn_args(const pworld *w, int c, fa_attn_args *a)
{
    size_t es = w->es;
    memset(a, 0, sizeof *a);
    a->q = w->qt[c].data;
    a->q_token_stride = (int64_t)w->hq * w->D;
    a->q_head_stride = w->D;
    a->q_dtype = FA_DTYPE_BF16;
    a->k = w->cache.data;
    a->v = (const char *)w->cache.data + (size_t)w->cache.stride[0] * es;
    a->k_block_stride = a->v_block_stride = w->cache.stride[1];
    a->k_row_stride = a->v_row_stride = w->cache.stride[2];
    a->k_head_stride = a->v_head_stride = w->cache.stride[3];
    a->kv_dtype = w->cache.dtype;
    a->out = w->ot[c].data;
    a->out_token_stride = (int64_t)w->hq * w->D;
    a->out_head_stride = w->D;
    a->cu_seqlens_q = w->md[c].query_start_loc;
    a->seqused_k = w->md[c].seq_lens;
    a->block_table = w->md[c].block_table;
    a->block_table_stride = w->max_nb;
    a->num_blocks = w->cache.shape[1];
    a->num_seqs = w->nreq;
    a->num_tokens = w->T;
    a->max_seqlen_q = w->md[c].max_query_len;
    a->max_seqlen_k = w->md[c].max_seq_len;
    a->num_heads_q = w->hq;
    a->num_heads_kv = w->hkv;
    a->head_size = w->D;
    a->block_size = w->bs;
    a->softmax_scale = w->layer.scale;
    a->causal = 1;
    a->window_left = -1;
    a->window_right = -1;
    a->k_scale = w->fp8 ? KSCALE_FP8 : 1.f;
    a->v_scale = w->fp8 ? KSCALE_FP8 : 1.f;
    a->num_splits = 1;
}

static const int k_splits[] = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128};
#define K_NSPLITS ((int)(sizeof k_splits / sizeof k_splits[0]))
#define K_SPLITS_MAX 128

static void split_sweep(pworld *w, const row *planner, ref_sample *ref)
{
    const int ns = K_NSPLITS;
    split_ctx sc;
    int32_t *plan_host = NULL, *plan_dev = NULL;
    float *sout = NULL, *slse = NULL;
    int i, c, best_s = 0, any = 0;
    double best_us = 0;
    row rows_sel[K_NSPLITS];
    int sel[K_NSPLITS];
    memset(&sc, 0, sizeof sc);
    for (i = 0; i < ns; ++i) {
        row_init(&rows_sel[i], "decode-split");
        snprintf(rows_sel[i].name, sizeof rows_sel[i].name,
                 "decode-split b=%d ctx=%d h=%d/%d d=%d kv=%s s=%d", w->nreq, w->seq[0], w->hq, w->hkv, w->D,
                 w->fp8 ? "fp8" : "bf16", k_splits[i]);
        sel[i] = row_selected(&rows_sel[i], C_SPLITS);
        any |= sel[i];
    }
    if (!any) return;
    sc.a = (fa_attn_args *)xmalloc(sizeof(fa_attn_args) * (size_t)w->ncopies);
    plan_host = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)(w->nreq + 1));
    plan_dev = (int32_t *)dalloc(sizeof(int32_t) * (size_t)(w->nreq + 1));
    sout = (float *)dalloc(sizeof(float) * (size_t)K_SPLITS_MAX * w->T * w->hq * w->D);
    slse = (float *)dalloc(sizeof(float) * (size_t)K_SPLITS_MAX * w->hq * w->T);
    for (i = 0; i < ns; ++i) {
        row *r = &rows_sel[i];
        int s = k_splits[i], k;
        if (!sel[i]) continue;
        row_shape(r, w->nreq, w->seq[0], w->hq, w->hkv, w->D, w->fp8 ? "fp8" : "bf16");
        r->splits = s;
        r->bytes = w->bytes;
        r->flops = w->flops;
        if (g_dead) {
            emit_na(r, "CUDA context lost earlier");
            continue;
        }
        if (!plan_dev || !sout || !slse) {
            emit_na(r, g_err);
            continue;
        }
        plan_host[0] = s;
        for (k = 0; k < w->nreq; ++k) plan_host[1 + k] = s;
        if (h2d(plan_dev, plan_host, sizeof(int32_t) * (size_t)(w->nreq + 1))) {
            emit_na(r, g_err);
            continue;
        }
        for (c = 0; c < w->ncopies; ++c) {
            pworld_attn_args(w, c, &sc.a[c]);
            sc.a[c].num_splits = s;
            if (s > 1) {
                sc.a[c].split_plan = plan_dev;
                sc.a[c].split_out = sout;
                sc.a[c].split_lse = slse;
            }
        }
        if (time_row(r, launch_attn, &sc, w->ncopies)) {
            emit_row(r);
            continue;
        }
        pworld_check(r, w, launch_attn, &sc, ref, ref && ref->ref ? 1 : 0);
        emit_row(r);
        if (best_s == 0 || r->us < best_us) {
            best_s = s;
            best_us = r->us;
        }
    }
    if (best_s > 0 && planner && planner->us > 0) {
        row r;
        row_init(&r, "split-choice");
        snprintf(r.name, sizeof r.name, "split-choice b=%d ctx=%d h=%d/%d d=%d kv=%s", w->nreq, w->seq[0],
                 w->hq, w->hkv, w->D, w->fp8 ? "fp8" : "bf16");
        row_shape(&r, w->nreq, w->seq[0], w->hq, w->hkv, w->D, w->fp8 ? "fp8" : "bf16");
        r.splits = planner->splits;
        r.us = planner->us;
        r.bytes = planner->bytes;
        r.flops = planner->flops;
        r.copies = planner->copies;
        snprintf(r.extra, sizeof r.extra, "planner s=%d %.1f us; best fixed s=%d %.1f us; planner/best %.3f",
                 planner->splits, planner->us, best_s, best_us, planner->us / best_us);
        emit_row(&r);
    }
    free(sc.a);
    free(plan_host);
    dfree(plan_dev);
    dfree(sout);
    dfree(slse);
}

static void bench_decode(int B, int ctx, int hq, int hkv, int D, int fp8, int sweep)
{
    row r;
    pworld w;
    ref_sample ref;
    int32_t *ql, *sl;
    int i;
    unsigned want = C_DECODE | (sweep ? C_SPLITS : 0);
    row_init(&r, "decode");
    snprintf(r.name, sizeof r.name, "decode b=%d ctx=%d h=%d/%d d=%d kv=%s%s", B, ctx, hq, hkv, D,
             fp8 ? "fp8" : "bf16", block_tag());
    row_shape(&r, B, ctx, hq, hkv, D, fp8 ? "fp8" : "bf16");
    memset(&ref, 0, sizeof ref);
    if (!(O.cats & want)) return;
    if (O.list) {
        if (O.cats & C_DECODE) row_selected(&r, C_DECODE);
        if (sweep && (O.cats & C_SPLITS)) {
            for (i = 0; i < K_NSPLITS; ++i) {
                row t;
                row_init(&t, "decode-split");
                snprintf(t.name, sizeof t.name, "decode-split b=%d ctx=%d h=%d/%d d=%d kv=%s s=%d", B, ctx,
                         hq, hkv, D, fp8 ? "fp8" : "bf16", k_splits[i]);
                row_selected(&t, C_SPLITS);
            }
        }
        return;
    }
    {   /* is any row of this shape selected? (the sweep's names extend the planner's) */
        int run_planner = row_selected(&r, C_DECODE), run_sweep = 0;
        if (sweep && (O.cats & C_SPLITS)) {
            for (i = 0; i < K_NSPLITS && !run_sweep; ++i) {
                row t;
                row_init(&t, "decode-split");
                snprintf(t.name, sizeof t.name, "decode-split b=%d ctx=%d h=%d/%d d=%d kv=%s s=%d", B, ctx,
                         hq, hkv, D, fp8 ? "fp8" : "bf16", k_splits[i]);
                run_sweep = row_selected(&t, C_SPLITS);
            }
        }
        if (!run_planner && !run_sweep) return;
        if (!run_planner) r.cat[0] = '\0';   /* timed for the split-choice row, not emitted */
    }
    ql = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B);
    sl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B);
    for (i = 0; i < B; ++i) {
        ql[i] = 1;
        sl[i] = ctx;
    }
    batch_counts(B, ql, sl, 0, hq, hkv, D, fp8 ? 1 : 2, &r.bytes, &r.flops);
    if (g_dead) {
        if (r.cat[0]) emit_na(&r, "CUDA context lost earlier");
        goto out;
    }
    if (pworld_setup(&w, B, ql, sl, 0, hq, hkv, D, fp8) || pworld_build(&w, 0)) {
        if (r.cat[0]) emit_na(&r, g_err);
        pworld_free(&w);
        goto out;
    }
    r.splits = w.md[0].num_splits;
    if (!O.no_check && pworld_ref(&w, B - 1, 1, (B + ctx / 16 + D) % hkv, &ref)) {
        snprintf(r.check, sizeof r.check, "ref n/a: %.60s", g_err);
    }
    if (time_row(&r, launch_fwd, &w, w.ncopies) == 0)
        pworld_check(&r, &w, launch_fwd, &w, &ref, ref.ref ? 1 : 0);
    if (r.cat[0]) emit_row(&r);
    if (sweep && !g_dead) split_sweep(&w, &r, &ref);
    ref_free(&ref);
    pworld_free(&w);
out:
    free(ql);
    free(sl);
}

/* ---------------------------------------------------------------------------------------- */
/* prefill: dense (attention op, cu_seqlens_k = cu_seqlens_q) and paged (fa_forward) */

typedef struct dense_world {
    int nseq, L, T, hq, hkv, D, ncopies;
    int64_t kv_rows;                 /* key rows of a copy: T dense, nseq * nb * bs paged */
    void *q_all, *out_all, *kv_all;  /* q/out [n][T][hq][D]; kv [2][n][kv_rows][hkv][D] */
    int32_t *cu_dev;
    int32_t *bt_dev, *su_dev;        /* paged: block table [nseq][nb], seqused_k [nseq] */
    int32_t *ctr; /* fa_attn_args.work_counters (zero; every call leaves them so) */
    fa_attn_args *a;
} dense_world;

/* q8: an fp8 (e4m3) query with e4m3 K/V and a bf16 output (rows "... q=fp8", kv "fp8").
   paged: the same keys in pages of --block rows (block_table over a random permutation of the
   blocks, --blocks-in-order: in order), through the attention op (rows "prefill-paged ...
   q=fp8": fa_forward has no fp8 query). */
static void bench_prefill_dense(int nseq, int L, int D, int q8, int paged)
{
    const int hq = 32, hkv = 8;
    const int bs = paged ? (O.block > 0 ? O.block : 16) : L, nb = (L + bs - 1) / bs;
    row r;
    dense_world w;
    split_ctx sc;
    ref_sample ref;
    int32_t *cu = NULL, *ql = NULL, *sl = NULL, *perm = NULL;
    int i, c;
    memset(&w, 0, sizeof w);
    memset(&ref, 0, sizeof ref);
    row_init(&r, paged ? "prefill-paged" : "prefill-dense");
    snprintf(r.name, sizeof r.name, "%s %dx%d h=%d/%d d=%d%s%s", paged ? "prefill-paged" : "prefill-dense",
             nseq, L, hq, hkv, D, paged ? block_tag() : "", q8 ? " q=fp8" : "");
    row_shape(&r, nseq, L, hq, hkv, D, q8 ? "fp8" : "bf16");
    if (!row_selected(&r, C_PREFILL)) return;
    if (g_dead) {
        emit_na(&r, "CUDA context lost earlier");
        return;
    }
    ql = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    sl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    cu = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)(nseq + 1));
    cu[0] = 0;
    for (i = 0; i < nseq; ++i) {
        ql[i] = sl[i] = L;
        cu[i + 1] = cu[i] + L;
    }
    batch_counts(nseq, ql, sl, 0, hq, hkv, D, q8 ? 1 : 2, &r.bytes, &r.flops);
    w.nseq = nseq;
    w.L = L;
    w.T = nseq * L;
    w.hq = hq;
    w.hkv = hkv;
    w.D = D;
    w.kv_rows = paged ? (int64_t)nseq * nb * bs : w.T;
    w.ncopies = rot_copies(r.bytes, 0);
    perm = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq * nb);
    for (i = 0; i < nseq * nb; ++i) perm[i] = i;
    if (paged && !O.blocks_in_order) shuffle_i32(perm, (int64_t)nseq * nb);
    const size_t es = q8 ? 1 : 2; /* q, k, v element bytes (out: bf16) */
    {
        size_t qb = es * (size_t)w.ncopies * w.T * hq * D,
               ob = sizeof(uint16_t) * (size_t)w.ncopies * w.T * hq * D;
        size_t kvb = es * (size_t)2 * w.ncopies * (size_t)w.kv_rows * hkv * D;
        const int pat = q8 ? PAT_FP8 : PAT_BF16;
        w.q_all = dalloc(qb);
        w.out_all = w.q_all ? dalloc(ob) : NULL;
        w.kv_all = w.out_all ? dalloc(kvb) : NULL;
        static const int32_t zero_ctr[FA_WORK_COUNTERS] = {0};
        w.cu_dev = w.kv_all ? (int32_t *)dalloc(sizeof(int32_t) * (size_t)(nseq + 1)) : NULL;
        w.ctr = w.cu_dev ? (int32_t *)dalloc(sizeof zero_ctr) : NULL;
        if (w.ctr && paged) {
            w.bt_dev = (int32_t *)dalloc(sizeof(int32_t) * (size_t)nseq * nb);
            w.su_dev = w.bt_dev ? (int32_t *)dalloc(sizeof(int32_t) * (size_t)nseq) : NULL;
        }
        if (!w.ctr || (paged && !w.su_dev) || fill_pattern(w.q_all, qb, pat) ||
            fill_pattern(w.kv_all, kvb, pat) || dpoison(w.out_all, ob) ||
            h2d(w.cu_dev, cu, sizeof(int32_t) * (size_t)(nseq + 1)) ||
            h2d(w.ctr, zero_ctr, sizeof zero_ctr) ||
            (paged && (h2d(w.bt_dev, perm, sizeof(int32_t) * (size_t)nseq * nb) ||
                       h2d(w.su_dev, sl, sizeof(int32_t) * (size_t)nseq)))) {
            emit_na(&r, g_err);
            goto out;
        }
    }
    w.a = (fa_attn_args *)xmalloc(sizeof(fa_attn_args) * (size_t)w.ncopies);
    for (c = 0; c < w.ncopies; ++c) {
        fa_attn_args *a = &w.a[c];
        size_t qo = es * (size_t)c * w.T * hq * D, oo = sizeof(uint16_t) * (size_t)c * w.T * hq * D;
        memset(a, 0, sizeof *a);
        a->q = (char *)w.q_all + qo;
        a->q_token_stride = (int64_t)hq * D;
        a->q_head_stride = D;
        a->q_dtype = q8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16;
        a->out_dtype = FA_DTYPE_BF16;
        a->k = (char *)w.kv_all + es * (size_t)c * w.kv_rows * hkv * D;
        a->v = (char *)w.kv_all + es * ((size_t)w.ncopies + c) * w.kv_rows * hkv * D;
        a->k_row_stride = a->v_row_stride = (int64_t)hkv * D;
        a->k_head_stride = a->v_head_stride = D;
        a->kv_dtype = q8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16;
        a->out = (char *)w.out_all + oo;
        a->out_token_stride = (int64_t)hq * D;
        a->out_head_stride = D;
        a->cu_seqlens_q = w.cu_dev;
        if (paged) {
            a->seqused_k = w.su_dev;
            a->block_table = w.bt_dev;
            a->block_table_stride = nb;
            a->num_blocks = (int64_t)nseq * nb;
            a->block_size = bs;
            a->k_block_stride = a->v_block_stride = (int64_t)bs * hkv * D;
        } else {
            a->cu_seqlens_k = w.cu_dev;
            a->num_keys = w.T;
        }
        a->num_seqs = nseq;
        a->num_tokens = w.T;
        a->max_seqlen_q = L;
        a->max_seqlen_k = L;
        a->num_heads_q = hq;
        a->num_heads_kv = hkv;
        a->head_size = D;
        a->softmax_scale = (float)(1.0 / sqrt((double)D));
        a->causal = 1;
        a->window_left = -1;
        a->window_right = -1;
        a->k_scale = a->v_scale = 1.f;
        a->num_splits = 1;
        a->work_counters = w.ctr;
    }
    sc.a = w.a;
    /* reference: the last 4 rows of the last sequence, KV head 3 */
    if (!O.no_check) {
        const int m = 4, hk = 3 % hkv, G = hq / hkv;
        int64_t tok0 = (int64_t)(nseq - 1) * L, row0 = tok0 + L - m,
                vofs = (int64_t)w.ncopies * w.kv_rows * hkv * D;
        void *q = xmalloc(es * (size_t)m * G * D), *k = xmalloc(es * (size_t)L * D),
             *v = xmalloc(es * (size_t)L * D);
        const fa_dtype dt = q8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16;
        int g, d, j;
        for (i = 0; i < m; ++i)
            for (g = 0; g < G; ++g)
                for (d = 0; d < D; ++d) {
                    const int64_t x = ((int64_t)i * G + g) * D + d,
                                  e = ((row0 + i) * hq + hk * G + g) * D + d;
                    if (q8)
                        ((uint8_t *)q)[x] = pat_fp8(e);
                    else
                        ((uint16_t *)q)[x] = pat_bf16(e);
                }
        for (j = 0; j < L; ++j)
            for (d = 0; d < D; ++d) {
                /* key j of the last sequence: its row in the dense keys, or in its page */
                const int64_t kr = paged ? (int64_t)perm[(nseq - 1) * nb + j / bs] * bs + j % bs : tok0 + j;
                int64_t e = (kr * hkv + hk) * D + d, x = (int64_t)j * D + d;
                if (q8) {
                    ((uint8_t *)k)[x] = pat_fp8(e);
                    ((uint8_t *)v)[x] = pat_fp8(vofs + e);
                } else {
                    ((uint16_t *)k)[x] = pat_bf16(e);
                    ((uint16_t *)v)[x] = pat_bf16(vofs + e);
                }
            }
        ref.m = m;
        ref.G = G;
        ref.D = D;
        ref.hq = hq;
        ref.h0 = hk * G;
        ref.row0 = row0;
        ref.ref = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)m * G * D);
        if (cpu_ref(q, dt, k, v, dt, m, G, D, L, w.a[0].softmax_scale, 1.f, 1.f, ref.ref)) {
            ref_free(&ref);
            snprintf(r.check, sizeof r.check, "ref n/a: %.60s", g_err);
        }
        free(q);
        free(k);
        free(v);
    }
    if (time_row(&r, launch_attn, &sc, w.ncopies) == 0)
        check_attention(&r, launch_attn, &sc, w.out_all, (int64_t)w.T * hq * D, &ref, ref.ref ? 1 : 0);
    emit_row(&r);
out:
    ref_free(&ref);
    free(w.a);
    dfree(w.q_all);
    dfree(w.out_all);
    dfree(w.kv_all);
    dfree(w.cu_dev);
    dfree(w.ctr);
    dfree(w.bt_dev);
    dfree(w.su_dev);
    free(perm);
    free(cu);
    free(ql);
    free(sl);
}

/* Generic fa_forward row over a paged world: decode-free shapes (prefill-paged, mixed). */
static void bench_paged_rows(row *r, int nreq, const int32_t *ql, const int32_t *sl, int hq, int hkv, int D,
                             int fp8, const int *check_reqs, const int *check_m, int nchecks)
{
    pworld w;
    ref_sample ref[4];
    int i, nref = 0;
    memset(ref, 0, sizeof ref);
    batch_counts(nreq, ql, sl, 0, hq, hkv, D, fp8 ? 1 : 2, &r->bytes, &r->flops);
    if (g_dead) {
        emit_na(r, "CUDA context lost earlier");
        return;
    }
    if (pworld_setup(&w, nreq, ql, sl, 0, hq, hkv, D, fp8) || pworld_build(&w, 0)) {
        emit_na(r, g_err);
        pworld_free(&w);
        return;
    }
    r->splits = w.md[0].num_splits;
    for (i = 0; i < nchecks && i < 4 && !O.no_check; ++i) {
        if (pworld_ref(&w, check_reqs[i], check_m[i], (i + 3) % hkv, &ref[nref]) == 0)
            nref++;
        else
            snprintf(r->check, sizeof r->check, "ref n/a: %.60s", g_err);
    }
    if (time_row(r, launch_fwd, &w, w.ncopies) == 0) pworld_check(r, &w, launch_fwd, &w, ref, nref);
    emit_row(r);
    for (i = 0; i < 4; ++i) ref_free(&ref[i]);
    pworld_free(&w);
}

/* fp8: an e4m3 cache (rows named "kv=fp8"), the bf16 query. nc: the step's causal mask off
   (FA_CAUSAL_OFF: every query sees every key; rows named "prefill-paged-nc"). */
static void bench_prefill_paged(int nseq, int L, int D, int fp8, int nc)
{
    const int hq = 32, hkv = 8;
    const char *cat = nc ? "prefill-paged-nc" : "prefill-paged";
    row r;
    int32_t *ql, *sl;
    int i, creq[1], cm[1];
    row_init(&r, cat);
    snprintf(r.name, sizeof r.name, "%s %dx%d h=%d/%d d=%d%s%s", cat, nseq, L, hq, hkv, D, block_tag(),
             fp8 ? " kv=fp8" : "");
    row_shape(&r, nseq, L, hq, hkv, D, fp8 ? "fp8" : "bf16");
    if (!row_selected(&r, C_PREFILL)) return;
    ql = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    sl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    for (i = 0; i < nseq; ++i) ql[i] = sl[i] = L;
    creq[0] = nseq - 1;
    cm[0] = 4;
    g_noncausal = nc;
    bench_paged_rows(&r, nseq, ql, sl, hq, hkv, D, fp8, creq, cm, 1);
    g_noncausal = 0;
    free(ql);
    free(sl);
}

/* A speculative-decoding verify step: nseq sequences of Lq draft tokens each at the end of a
   ctx-token sequence (ctx - Lq cached + Lq new), fa_forward, 32/8 heads (Lq x 4 rows a KV head:
   past the decode tile's 16 from Lq = 5), head 128, bf16. */
static void bench_verify(int nseq, int Lq, int ctx)
{
    const int hq = 32, hkv = 8, D = 128;
    row r;
    int32_t *ql, *sl;
    int i, creq[1], cm[1];
    row_init(&r, "verify");
    snprintf(r.name, sizeof r.name, "verify %dx%d ctx=%d h=%d/%d d=%d%s", nseq, Lq, ctx, hq, hkv, D,
             block_tag());
    row_shape(&r, nseq, ctx, hq, hkv, D, "bf16");
    if (!row_selected(&r, C_VERIFY)) return;
    ql = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    sl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)nseq);
    for (i = 0; i < nseq; ++i) {
        ql[i] = Lq;
        sl[i] = ctx;
    }
    creq[0] = nseq - 1;
    cm[0] = Lq < 4 ? Lq : 4;
    snprintf(r.extra, sizeof r.extra, "%d draft tokens a sequence on %d cached; attention only", Lq,
             ctx - Lq);
    bench_paged_rows(&r, nseq, ql, sl, hq, hkv, D, 0, creq, cm, 1);
    free(ql);
    free(sl);
}

static void bench_mixed(void)
{
    const int hq = 32, hkv = 8, D = 128, ndec = 64, ctx = 8192, chunk = 2048;
    row r;
    int32_t ql[65], sl[65];
    int i, creq[2], cm[2];
    row_init(&r, "mixed");
    snprintf(r.name, sizeof r.name, "mixed %dx1+1x%d ctx=%d h=%d/%d d=%d", ndec, chunk, ctx, hq, hkv, D);
    row_shape(&r, ndec, ctx, hq, hkv, D, "bf16");
    if (!row_selected(&r, C_MIXED)) return;
    for (i = 0; i < ndec; ++i) {
        ql[i] = 1;
        sl[i] = ctx;
    }
    ql[ndec] = chunk;
    sl[ndec] = ctx;   /* 6144 tokens already cached + the 2048-token chunk */
    creq[0] = ndec - 1;
    cm[0] = 1;
    creq[1] = ndec;
    cm[1] = 4;
    snprintf(r.extra, sizeof r.extra, "64 decodes (seq 8192) + chunk of 2048 on 6144 cached; attention only");
    bench_paged_rows(&r, ndec + 1, ql, sl, hq, hkv, D, 0, creq, cm, 2);
}

/* ---------------------------------------------------------------------------------------- */
/* cascade vs plain */

static void bench_cascade(int P, int B)
{
    const int hq = 32, hkv = 8, D = 128, own = 512;
    row rc, rp;
    pworld w;
    ref_sample ref;
    int32_t *ql, *sl, plen = -1;
    int i, sel_c, sel_p;
    row_init(&rc, "cascade");
    row_init(&rp, "cascade-plain");
    snprintf(rc.name, sizeof rc.name, "cascade P=%d b=%d own=%d h=%d/%d d=%d", P, B, own, hq, hkv, D);
    snprintf(rp.name, sizeof rp.name, "cascade-plain P=%d b=%d own=%d h=%d/%d d=%d", P, B, own, hq, hkv, D);
    sel_c = row_selected(&rc, C_CASCADE);
    sel_p = row_selected(&rp, C_CASCADE);
    if (!sel_c && !sel_p) return;
    memset(&ref, 0, sizeof ref);
    ql = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B);
    sl = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B);
    for (i = 0; i < B; ++i) {
        ql[i] = 1;
        sl[i] = P + own;
    }
    row_shape(&rc, B, P, hq, hkv, D, "bf16");
    row_shape(&rp, B, P, hq, hkv, D, "bf16");
    batch_counts(B, ql, sl, P, hq, hkv, D, 2, &rc.bytes, &rc.flops);
    rp.bytes = rc.bytes;
    rp.flops = rc.flops;
    if (g_dead) {
        if (sel_c) emit_na(&rc, "CUDA context lost earlier");
        if (sel_p) emit_na(&rp, "CUDA context lost earlier");
        goto out;
    }
    if (pworld_setup(&w, B, ql, sl, P, hq, hkv, D, 0)) {
        if (sel_c) emit_na(&rc, g_err);
        if (sel_p) emit_na(&rp, g_err);
        pworld_free(&w);
        goto out;
    }
    if (fa_builder_cascade_prefix_len(w.b, &w.batch, P / w.bs, &plen) != FA_OK) plen = -1;
    if (!O.no_check && pworld_ref(&w, B - 1, 1, 5 % hkv, &ref))
        snprintf(rc.check, sizeof rc.check, "ref n/a: %.60s", g_err);
    if (pworld_build(&w, P) == 0) {
        rc.splits = w.md[0].num_splits;
        if (time_row(&rc, launch_fwd, &w, w.ncopies) == 0)
            pworld_check(&rc, &w, launch_fwd, &w, &ref, ref.ref ? 1 : 0);
    } else {
        snprintf(rc.note, sizeof rc.note, "n/a: %.300s", g_err);
    }
    if (g_dead) {
        snprintf(rp.note, sizeof rp.note, "n/a: CUDA context lost");
    } else if (pworld_build(&w, 0) == 0) {
        rp.splits = w.md[0].num_splits;
        if (time_row(&rp, launch_fwd, &w, w.ncopies) == 0)
            pworld_check(&rp, &w, launch_fwd, &w, &ref, ref.ref ? 1 : 0);
    } else {
        snprintf(rp.note, sizeof rp.note, "n/a: %.300s", g_err);
    }
    snprintf(rc.extra, sizeof rc.extra, "heuristic %s cascade (prefix_len %d)",
             plen == P ? "picks" : "rejects", (int)plen);
    if (rc.us > 0 && rp.us > 0)
        snprintf(rc.extra + strlen(rc.extra), sizeof rc.extra - strlen(rc.extra),
                 "; speedup %.2fx over plain", rp.us / rc.us);
    snprintf(rp.extra, sizeof rp.extra,
             "bytes count the shared prefix once (plain re-reads it, partly from L2)");
    if (sel_c) emit_row(&rc);
    if (sel_p) emit_row(&rp);
    ref_free(&ref);
    pworld_free(&w);
out:
    free(ql);
    free(sl);
}

/* ---------------------------------------------------------------------------------------- */
/* reshape_and_cache */

/* ctx: the [copies] argument array */
static int launch_cw(void *ctx, int c)
{
    return op_status(g_be->ops.reshape_and_cache(g_be->ctx, (fa_cache_write_args *)ctx + c),
                     "reshape_and_cache");
}

static void bench_cache(int T, int fp8)
{
    const int hkv = 8, D = 128, bs = 16;
    row r;
    fa_cache_write_args *args = NULL;
    int n, c, i;
    size_t es = fp8 ? 1 : 2, inb, cacheb;
    int64_t NB, per_copy_blocks = (T + bs - 1) / bs, rowel = (int64_t)hkv * D;
    void *kv_in = NULL, *cache = NULL;
    int64_t *slots_host = NULL, *slots_dev = NULL;
    int32_t *perm = NULL;
    row_init(&r, "cache");
    snprintf(r.name, sizeof r.name, "cache T=%d h=%d d=%d kv=%s", T, hkv, D, fp8 ? "fp8" : "bf16");
    r.batch = T;
    r.hkv = hkv;
    r.d = D;
    snprintf(r.kv, sizeof r.kv, "%s", fp8 ? "fp8" : "bf16");
    if (!row_selected(&r, C_CACHE)) return;
    r.bytes = 2.0 * T * rowel * 2.0 + 8.0 * T + 2.0 * T * rowel * (double)es;
    if (g_dead) {
        emit_na(&r, "CUDA context lost earlier");
        return;
    }
    n = rot_copies(r.bytes, 0);
    NB = per_copy_blocks * n;
    inb = sizeof(uint16_t) * (size_t)2 * n * T * rowel;
    cacheb = es * (size_t)2 * NB * bs * rowel;
    kv_in = dalloc(inb);
    cache = kv_in ? dalloc(cacheb) : NULL;
    slots_dev = cache ? (int64_t *)dalloc(sizeof(int64_t) * (size_t)n * T) : NULL;
    if (!slots_dev || fill_pattern(kv_in, inb, PAT_BF16) || dpoison(cache, cacheb)) {
        emit_na(&r, g_err);
        goto out;
    }
    perm = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)NB);
    for (i = 0; i < NB; ++i) perm[i] = i;
    shuffle_i32(perm, NB);
    slots_host = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)n * T);
    for (c = 0; c < n; ++c)
        for (i = 0; i < T; ++i)
            slots_host[(int64_t)c * T + i] =
                (int64_t)perm[(int64_t)c * per_copy_blocks + i / bs] * bs + i % bs;
    if (h2d(slots_dev, slots_host, sizeof(int64_t) * (size_t)n * T)) {
        emit_na(&r, g_err);
        goto out;
    }
    args = (fa_cache_write_args *)xmalloc(sizeof(fa_cache_write_args) * (size_t)n);
    for (c = 0; c < n; ++c) {
        fa_cache_write_args *a = &args[c];
        memset(a, 0, sizeof *a);
        a->key = (char *)kv_in + sizeof(uint16_t) * (size_t)c * T * rowel;
        a->value = (char *)kv_in + sizeof(uint16_t) * ((size_t)n + c) * T * rowel;
        a->key_token_stride = a->value_token_stride = rowel;
        a->kv_dtype = FA_DTYPE_BF16;
        a->key_cache = cache;
        a->value_cache = (char *)cache + es * (size_t)NB * bs * rowel;
        a->cache_block_stride = (int64_t)bs * rowel;
        a->cache_row_stride = rowel;
        a->cache_head_stride = D;
        a->cache_dtype = fp8 ? FA_DTYPE_FP8_E4M3 : FA_DTYPE_BF16;
        a->slot_mapping = slots_dev + (int64_t)c * T;
        a->num_tokens = T;
        a->num_heads_kv = hkv;
        a->head_size = D;
        a->block_size = bs;
        a->num_blocks = NB;
        a->k_scale = a->v_scale = fp8 ? KSCALE_FP8 : 1.f;
    }
    if (time_row(&r, launch_cw, args, n)) {
        emit_row(&r);
        goto out;
    }
    /* check: poison the cache, write copy 0 once, compare 64 sampled slots bit-exactly */
    if (!O.no_check) {
        uint8_t *got = (uint8_t *)xmalloc(es * (size_t)rowel * 2);
        int64_t mism = 0;
        double mx = 0;
        int k, ok = 1;
        if (dpoison(cache, cacheb) || launch_cw(args, 0) || CU(cudaStreamSynchronize(g_stream))) ok = 0;
        for (k = 0; k < 64 && ok; ++k) {
            int t = (int)(rng_u64() % (uint64_t)T), half;
            int64_t slot = slots_host[t];
            for (half = 0; half < 2 && ok; ++half) {
                size_t off = es * ((size_t)half * NB * bs * rowel + (size_t)slot * rowel);
                int64_t e;
                if (d2h(got, (char *)cache + off, es * (size_t)rowel)) {
                    ok = 0;
                    break;
                }
                for (e = 0; e < rowel; ++e) {
                    uint16_t x = pat_bf16(((int64_t)half * n * T + t) * rowel + e);
                    double xv = fa_cpu_bf16_to_float(x), gv, wv;
                    if (fp8) {
                        uint8_t want = fa_cpu_float_to_fp8((float)xv / KSCALE_FP8, FA_DTYPE_FP8_E4M3);
                        if (got[e] != want) mism++;
                        gv = fa_cpu_fp8_to_float(got[e], FA_DTYPE_FP8_E4M3) * KSCALE_FP8;
                        wv = fa_cpu_fp8_to_float(want, FA_DTYPE_FP8_E4M3) * KSCALE_FP8;
                    } else {
                        uint16_t g16;
                        memcpy(&g16, got + 2 * e, 2);
                        if (g16 != x) mism++;
                        gv = fa_cpu_bf16_to_float(g16);
                        wv = xv;
                    }
                    {
                        double err = fabs(gv - wv);
                        if (err != err) err = INFINITY;
                        if (err > mx) mx = err;
                    }
                }
            }
        }
        r.checked = 1;
        r.check_ok = ok && mism == 0;
        r.max_abs = mx;
        r.rel_err = -1;
        if (!ok)
            snprintf(r.check, sizeof r.check, "FAIL check run: %.60s", g_err);
        else
            snprintf(r.check, sizeof r.check, "%s %lld mismatches in 64 slots, max %.1e",
                     mism ? "FAIL" : "ok", (long long)mism, mx);
        free(got);
    }
    emit_row(&r);
out:
    free(args);
    free(perm);
    free(slots_host);
    dfree(kv_in);
    dfree(cache);
    dfree(slots_dev);
}

/* ---------------------------------------------------------------------------------------- */
/* merge_states */

/* ctx: the [copies] argument array */
static int launch_mg(void *ctx, int c)
{
    return op_status(g_be->ops.merge_states(g_be->ctx, (fa_merge_args *)ctx + c), "merge_states");
}

static void bench_merge(int T)
{
    const int H = 32, D = 128;
    row r;
    fa_merge_args *args = NULL;
    ref_sample ref;
    int n, c;
    int64_t tel = (int64_t)T * H * D;
    void *po = NULL, *out = NULL;
    float *lse = NULL;
    row_init(&r, "merge");
    snprintf(r.name, sizeof r.name, "merge T=%d h=%d d=%d", T, H, D);
    r.batch = T;
    r.hq = H;
    r.d = D;
    snprintf(r.kv, sizeof r.kv, "bf16");
    if (!row_selected(&r, C_MERGE)) return;
    memset(&ref, 0, sizeof ref);
    r.bytes = 2.0 * tel * 2 + 2.0 * T * H * 4 + 1.0 * tel * 2;
    if (g_dead) {
        emit_na(&r, "CUDA context lost earlier");
        return;
    }
    n = rot_copies(r.bytes, 0);
    po = dalloc(sizeof(uint16_t) * (size_t)2 * n * tel);
    lse = po ? (float *)dalloc(sizeof(float) * (size_t)2 * n * T * H) : NULL;
    out = lse ? dalloc(sizeof(uint16_t) * (size_t)n * tel) : NULL;
    if (!out || fill_pattern(po, sizeof(uint16_t) * (size_t)2 * n * tel, PAT_BF16) ||
        fill_pattern(lse, sizeof(float) * (size_t)2 * n * T * H, PAT_F32) ||
        dpoison(out, sizeof(uint16_t) * (size_t)n * tel)) {
        emit_na(&r, g_err);
        goto out;
    }
    args = (fa_merge_args *)xmalloc(sizeof(fa_merge_args) * (size_t)n);
    for (c = 0; c < n; ++c) {
        fa_merge_args *a = &args[c];
        memset(a, 0, sizeof *a);
        a->out = (char *)out + sizeof(uint16_t) * (size_t)c * tel;
        a->out_token_stride = (int64_t)H * D;
        a->out_head_stride = D;
        a->out_lse = NULL;
        a->prefix_out = (char *)po + sizeof(uint16_t) * (size_t)c * tel;
        a->prefix_token_stride = (int64_t)H * D;
        a->prefix_head_stride = D;
        a->prefix_lse = lse + (int64_t)c * T * H;
        a->prefix_lse_head_stride = T;
        a->suffix_out = (char *)po + sizeof(uint16_t) * ((size_t)n + c) * tel;
        a->suffix_token_stride = (int64_t)H * D;
        a->suffix_head_stride = D;
        a->suffix_lse = lse + ((int64_t)n + c) * T * H;
        a->suffix_lse_head_stride = T;
        a->dtype = FA_DTYPE_BF16;
        a->num_tokens = T;
        a->num_heads = H;
        a->head_size = D;
    }
    /* reference: the CPU backend's merge of the first 256 tokens of copy 0 */
    if (!O.no_check) {
        const int m = T < 256 ? T : 256;
        int64_t me = (int64_t)m * H * D, i;
        uint16_t *p = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)me);
        uint16_t *q = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)me);
        float *pl = (float *)xmalloc(sizeof(float) * (size_t)T * H);
        float *sl = (float *)xmalloc(sizeof(float) * (size_t)T * H);
        fa_merge_args a = args[0];
        for (i = 0; i < me; ++i) {
            p[i] = pat_bf16(i);
            q[i] = pat_bf16((int64_t)n * tel + i);
        }
        for (i = 0; i < (int64_t)T * H; ++i) {
            pl[i] = pat_f32(i);
            sl[i] = pat_f32((int64_t)n * T * H + i);
        }
        ref.m = m;
        ref.G = H;
        ref.D = D;
        ref.hq = H;
        ref.h0 = 0;
        ref.row0 = 0;
        ref.ref = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)me);
        a.out = ref.ref;
        a.prefix_out = p;
        a.suffix_out = q;
        a.prefix_lse = pl;
        a.suffix_lse = sl;
        a.num_tokens = m;
        if (g_cpu->ops.merge_states(g_cpu->ctx, &a) != FA_OK) {
            snprintf(r.check, sizeof r.check, "ref n/a: %.60s",
                     g_cpu->ops.last_error ? g_cpu->ops.last_error(g_cpu->ctx) : "?");
            ref_free(&ref);
        }
        free(p);
        free(q);
        free(pl);
        free(sl);
    }
    if (time_row(&r, launch_mg, args, n) == 0)
        check_attention(&r, launch_mg, args, out, tel, &ref, ref.ref ? 1 : 0);
    emit_row(&r);
out:
    ref_free(&ref);
    free(args);
    dfree(po);
    dfree(lse);
    dfree(out);
}

/* ---------------------------------------------------------------------------------------- */
/* dcp_correct */

/* ctx: the [copies] argument array */
static int launch_dc(void *ctx, int c)
{
    return op_status(g_be->ops.dcp_correct(g_be->ctx, (fa_dcp_correct_args *)ctx + c), "dcp_correct");
}

/* In place: the timed repetitions scale each copy's output again and again (by weights <= 1:
   it stays finite); the check refills copy 0 with its pattern first. */
static void bench_dcp(int T)
{
    const int H = 32, D = 128, W = 2;
    row r;
    fa_dcp_correct_args *args = NULL;
    int n, c;
    int64_t tel = (int64_t)T * H * D, tl = (int64_t)T * H;
    void *out = NULL;
    float *lse = NULL, *lo = NULL;
    row_init(&r, "dcp");
    snprintf(r.name, sizeof r.name, "dcp T=%d h=%d d=%d W=%d", T, H, D, W);
    r.batch = T;
    r.hq = H;
    r.d = D;
    snprintf(r.kv, sizeof r.kv, "bf16");
    if (!row_selected(&r, C_DCP)) return;
    r.bytes = 2.0 * tel * 2 + (W + 1.0) * tl * 4;
    if (g_dead) {
        emit_na(&r, "CUDA context lost earlier");
        return;
    }
    n = rot_copies(r.bytes, 0);
    out = dalloc(sizeof(uint16_t) * (size_t)n * tel);
    lse = out ? (float *)dalloc(sizeof(float) * (size_t)W * n * tl) : NULL;
    lo = lse ? (float *)dalloc(sizeof(float) * (size_t)n * tl) : NULL;
    if (!lo || fill_pattern(out, sizeof(uint16_t) * (size_t)n * tel, PAT_BF16) ||
        fill_pattern(lse, sizeof(float) * (size_t)W * n * tl, PAT_F32) ||
        dpoison(lo, sizeof(float) * (size_t)n * tl)) {
        emit_na(&r, g_err);
        goto out;
    }
    args = (fa_dcp_correct_args *)xmalloc(sizeof(fa_dcp_correct_args) * (size_t)n);
    for (c = 0; c < n; ++c) {
        fa_dcp_correct_args *a = &args[c];
        memset(a, 0, sizeof *a);
        a->out = (char *)out + sizeof(uint16_t) * (size_t)c * tel;
        a->out_token_stride = (int64_t)H * D;
        a->out_head_stride = D;
        a->dtype = FA_DTYPE_BF16;
        a->lse_all = lse + (int64_t)c * W * tl;
        a->lse_out = lo + (int64_t)c * tl;
        a->world_size = W;
        a->rank = 0;
        a->num_tokens = T;
        a->num_heads = H;
        a->head_size = D;
    }
    if (time_row(&r, launch_dc, args, n)) {
        emit_row(&r);
        goto out;
    }
    /* check: copy 0 refilled with its pattern, corrected once; every output finite, the first
       256 tokens (and their lse_out) against the CPU backend's dcp_correct of the same inputs */
    if (!O.no_check) {
        const int m = T < 256 ? T : 256;
        int64_t me = (int64_t)m * H * D, i, bad = 0;
        uint16_t *got = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)tel);
        uint16_t *want = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)me);
        float *hl = (float *)xmalloc(sizeof(float) * (size_t)W * tl);
        float *glo = (float *)xmalloc(sizeof(float) * (size_t)tl);
        float *wlo = (float *)xmalloc(sizeof(float) * (size_t)H * m);
        double num = 0, den = 0, mx = 0, lmx = 0;
        fa_dcp_correct_args a = args[0];
        int ok = !fill_pattern(out, sizeof(uint16_t) * (size_t)tel, PAT_BF16) && !launch_dc(args, 0) &&
                 !CU(cudaStreamSynchronize(g_stream)) && !d2h(got, out, sizeof(uint16_t) * (size_t)tel) &&
                 !d2h(glo, lo, sizeof(float) * (size_t)tl);
        if (ok) {
            int h, t;
            for (i = 0; i < me; ++i) want[i] = pat_bf16(i);
            /* the CPU's lse_all [W, H, m]: rows of the GPU's [W, H, T] cut to m tokens */
            for (i = 0; i < (int64_t)W * H; ++i)
                for (t = 0; t < m; ++t) hl[i * m + t] = pat_f32(i * T + t);
            a.out = want;
            a.lse_all = hl;
            a.lse_out = wlo;
            a.num_tokens = m;
            if (g_cpu->ops.dcp_correct(g_cpu->ctx, &a) != FA_OK) {
                ok = 0;
                seterr("CPU reference dcp_correct: %s",
                       g_cpu->ops.last_error ? g_cpu->ops.last_error(g_cpu->ctx) : "?");
            }
            for (i = 0; i < tel; ++i)
                if (!bf16_finite(got[i])) bad++;
            for (i = 0; ok && i < me; ++i) {
                double w = fa_cpu_bf16_to_float(want[i]), g = fa_cpu_bf16_to_float(got[i]), e = fabs(g - w);
                if (!(e == e)) e = INFINITY;
                num += (g - w) * (g - w);
                den += w * w;
                if (e > mx) mx = e;
            }
            for (h = 0; ok && h < H; ++h)
                for (t = 0; t < m; ++t) {
                    double e = fabs((double)glo[(int64_t)h * T + t] - (double)wlo[(int64_t)h * m + t]);
                    if (!(e == e)) e = INFINITY;
                    if (e > lmx) lmx = e;
                }
        }
        r.checked = 1;
        r.max_abs = mx;
        r.rel_err = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
        if (!(r.rel_err == r.rel_err)) r.rel_err = INFINITY;
        r.check_ok = ok && bad == 0 && r.rel_err <= 2e-2 && lmx <= 1e-4;
        if (!ok)
            snprintf(r.check, sizeof r.check, "FAIL check run: %.60s", g_err);
        else if (bad)
            snprintf(r.check, sizeof r.check, "FAIL %lld of %lld outputs not finite", (long long)bad,
                     (long long)tel);
        else
            snprintf(r.check, sizeof r.check, "%s rel %.1e max %.1e lse %.1e", r.check_ok ? "ok" : "FAIL",
                     r.rel_err, mx, lmx);
        free(got);
        free(want);
        free(hl);
        free(glo);
        free(wlo);
    }
    emit_row(&r);
out:
    free(args);
    dfree(out);
    dfree(lse);
    dfree(lo);
}

/* ---------------------------------------------------------------------------------------- */
/* summary */

static const row *find_row(const char *name)
{
    int i;
    for (i = 0; i < g_nrows; ++i)
        if (strcmp(g_rows[i].name, name) == 0) return &g_rows[i];
    return NULL;
}

static void summary_frac(const char *label, const char *name, double target)
{
    const row *r = find_row(name);
    if (!r) return;
    if (r->us <= 0) {
        printf("%-52s %10s %8s %8s %8s  %s\n", label, "n/a", "-", "-", "-", r->note);
        return;
    }
    if (target > 0)
        printf("%-52s %10.1f %8.3f %8.2f %8.2f  %s%s\n", label, r->us, row_fcopy(r), row_tfs(r), target,
               row_fcopy(r) >= target ? "meets" : "below", r->checked && !r->check_ok ? " CHECK FAILED" : "");
    else
        printf("%-52s %10.1f %8.3f %8.2f %8s  %s\n", label, r->us, row_fcopy(r), row_tfs(r), "-",
               r->checked && !r->check_ok ? "CHECK FAILED" : "");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summary(double wall_s)
{
    int i, checked = 0, failed = 0, timed = 0, na = 0, kvk;
    printf("\n==================================== summary ====================================\n");
    printf("device: %s (%d SMs, cc %d.%d); wall %.0f s\n", g_be ? g_be->info.name : "?",
           g_be ? g_be->info.num_sms : 0, g_be ? g_be->info.cc_major : 0, g_be ? g_be->info.cc_minor : 0,
           wall_s);
    if (g_copy_gbs > 0)
        printf("ceilings: copy %.0f GB/s (1 GiB d2d, read + write)", g_copy_gbs);
    else
        printf("ceilings: copy n/a (fractions of copy are 0)");
    if (g_gemm_tfs > 0)
        printf(", GEMM %.0f TFLOP/s (cublasGemmEx bf16 8192^3)\n", g_gemm_tfs);
    else
        printf(", GEMM n/a\n");
    printf("timing: CUDA events, median of >= 20 reps, CUDA-graph replay of n rotated copies (>= %.0f MB a "
           "rep)\n",
           O.rot_mb);
    printf("\n%-52s %10s %8s %8s %8s\n", "workload (32/8 heads, head 128 unless said)", "time_us", "copy",
           "TFLOP/s", "target");
    {   /* the decode targets (fraction of copy; fp8 on fp8 bytes) at heads 128, 64 and 256 */
        static const int dd[] = {128, 64, 256}, bb[] = {64, 256, 256, 1}, cc[] = {8192, 8192, 1024, 32768};
        static const double tb[] = {1.0, 1.0, 0.95, 0.85}, tf[] = {0.90, 0.90, 0.90, 0.80};
        int i, k, f;
        for (i = 0; i < 3; ++i)
            for (f = 0; f < 2; ++f)
                for (k = 0; k < 4; ++k) {
                    char label[96], name[128];
                    if (i > 0 && k == 1) continue; /* 256 x 8k: head 128 only */
                    snprintf(label, sizeof label, "decode b=%d ctx=%d%s %s", bb[k], cc[k],
                             dd[i] == 128 ? "" : (dd[i] == 64 ? " d=64" : " d=256"), f ? "fp8" : "bf16");
                    snprintf(name, sizeof name, "decode b=%d ctx=%d h=32/8 d=%d kv=%s", bb[k], cc[k], dd[i],
                             f ? "fp8" : "bf16");
                    summary_frac(label, name, f ? tf[k] : tb[k]);
                }
    }
    summary_frac("cache T=16384 bf16", "cache T=16384 h=8 d=128 kv=bf16", 0.92);
    summary_frac("cache T=16384 fp8", "cache T=16384 h=8 d=128 kv=fp8", 0.92);
    summary_frac("merge T=16384 (32 heads)", "merge T=16384 h=32 d=128", 0.92);
    summary_frac("dcp_correct T=16384 (32 heads, W=2)", "dcp T=16384 h=32 d=128 W=2", 0.92);
    summary_frac("mixed 64 decodes + 2048 chunk", "mixed 64x1+1x2048 ctx=8192 h=32/8 d=128", 0);
    /* decode grid statistics */
    for (kvk = 0; kvk < 2; ++kvk) {
        double fr[512];
        int nf = 0;
        const row *lo = NULL, *hi = NULL;
        for (i = 0; i < g_nrows && nf < 512; ++i) {
            const row *r = &g_rows[i];
            if (strcmp(r->cat, "decode") || r->us <= 0 || strcmp(r->kv, kvk ? "fp8" : "bf16")) continue;
            fr[nf++] = row_fcopy(r);
            if (!lo || row_fcopy(r) < row_fcopy(lo)) lo = r;
            if (!hi || row_fcopy(r) > row_fcopy(hi)) hi = r;
        }
        if (nf > 0) {
            qsort(fr, (size_t)nf, sizeof(double), cmp_double);
            printf("decode grid %-4s: %3d rows, fraction of copy median %.3f, min %.3f (%s), max %.3f (%s)\n",
                   kvk ? "fp8" : "bf16", nf, fr[nf / 2], row_fcopy(lo), lo->name + 7, row_fcopy(hi),
                   hi->name + 7);
        }
    }
    /* prefill */
    {
        static const char *shapes[] = {"1x16384", "4x4096", "16x1024"};
        static const int dims[] = {64, 128, 256};
        int s, d, any = 0;
        for (d = 0; d < 3; ++d)
            for (s = 0; s < 3; ++s) {
                char n1[96], n2[96], lab[64];
                const row *a, *b;
                snprintf(n1, sizeof n1, "prefill-dense %s h=32/8 d=%d", shapes[s], dims[d]);
                snprintf(n2, sizeof n2, "prefill-paged %s h=32/8 d=%d", shapes[s], dims[d]);
                a = find_row(n1);
                b = find_row(n2);
                if (!a && !b) continue;
                if (!any)
                    printf("\n%-30s %14s %14s %10s   (target: >= 300 TFLOP/s at head 128; paged >= 0.95x "
                           "dense)\n",
                           "prefill causal, 16k tokens", "dense TFLOP/s", "paged TFLOP/s", "paged/dense");
                any = 1;
                snprintf(lab, sizeof lab, "%s d=%d", shapes[s], dims[d]);
                printf("%-30s %14.1f %14.1f %10.3f\n", lab, a && a->us > 0 ? row_tfs(a) : 0.0,
                       b && b->us > 0 ? row_tfs(b) : 0.0,
                       a && b && a->us > 0 && b->us > 0 ? row_tfs(b) / row_tfs(a) : 0.0);
            }
    }
    /* cascade */
    {
        int any = 0;
        for (i = 0; i < g_nrows; ++i) {
            const row *r = &g_rows[i];
            char pn[200];
            const row *p;
            if (strcmp(r->cat, "cascade")) continue;
            if (!any)
                printf("\n%-44s %12s %12s %8s  (target: >= 3x at 256 x 16k)\n", "cascade", "cascade_us",
                       "plain_us", "speedup");
            any = 1;
            snprintf(pn, sizeof pn, "cascade-plain%s", r->name + 7);
            p = find_row(pn);
            printf("%-44s %12.1f %12.1f %8.2f  %s\n", r->name + 8, r->us, p && p->us > 0 ? p->us : 0.0,
                   p && p->us > 0 && r->us > 0 ? p->us / r->us : 0.0, r->extra);
        }
    }
    /* split choice */
    {
        int any = 0;
        for (i = 0; i < g_nrows; ++i) {
            const row *r = &g_rows[i];
            if (strcmp(r->cat, "split-choice")) continue;
            if (!any) printf("\nsplit-KV: planner vs best fixed split (32/8, head 128, bf16)\n");
            any = 1;
            printf("  %-40s %s\n", r->name + 13, r->extra);
        }
    }
    for (i = 0; i < g_nrows; ++i) {
        if (g_rows[i].us > 0)
            timed++;
        else
            na++;
        if (g_rows[i].checked) {
            checked++;
            if (!g_rows[i].check_ok) failed++;
        }
    }
    printf("\nrows: %d timed, %d n/a or skipped; checks: %d run, %d FAILED\n", timed, na, checked, failed);
    for (i = 0; i < g_nrows; ++i)
        if (g_rows[i].checked && !g_rows[i].check_ok)
            printf("  FAILED: %s: %s\n", g_rows[i].name, g_rows[i].check);
    if (g_dead) printf("NOTE: a sticky CUDA error stopped the run early (%s)\n", g_err);
}

/* ---------------------------------------------------------------------------------------- */
/* command line */

static void usage(void)
{
    printf(
        "usage: bench_gpu [options]\n"
        "  --quick            small subset (targets' shapes only): ~30 s\n"
        "  --only LIST        categories, comma-separated: "
        "decode,splits,prefill,mixed,verify,cascade,cache,\n"
        "                     merge,dcp\n"
        "                     (ceilings always run unless --no-ceilings)\n"
        "  --filter STR       run only rows whose name contains STR (repeatable: any matches)\n"
        "  --batch L --ctx L --dim L --kv L --heads L   decode grid filters, comma-separated\n"
        "                     (--dim 64 / 256 also adds the prefill-dense q=fp8 rows at that head)\n"
        "                     (--batch / --ctx may also name values outside the grid)\n"
        "                     (e.g. --batch 64,256 --ctx 8192 --dim 128 --kv bf16 --heads 32/8,64/8)\n"
        "  --csv PATH         write every row as CSV\n"
        "  --reps N           timed repetitions per row (default 30, min 20; long rows are cut to 20)\n"
        "  --warmup N         warm-up passes (default 3)\n"
        "  --max-gb G         skip rows whose K/V cache exceeds G GB (default 40)\n"
        "  --rot-mb M         rotate copies until a repetition moves >= M MB (default 512)\n"
        "  --max-copies N     at most N rotated copies (default 256)\n"
        "  --no-check         skip the correctness checks\n"
        "  --no-graph         time plain launches instead of CUDA-graph replays\n"
        "  --full-graph       builders with compilation.full_cuda_graph = 1 (split grid = cap)\n"
        "  --max-splits N     builders with compilation.max_num_splits = N (1..128; default: the library's)\n"
        "  --no-ceilings      skip the copy and GEMM ceilings (fractions then n/a)\n"
        "  --sweep-all        the splits rows on every selected decode shape (default: 32/8 head-128 bf16)\n"
        "  --device N         CUDA device (default 0)\n"
        "  --seed N           random seed (default 1234)\n"
        "  --block N          paged block size of the decode, prefill-paged and mixed rows (default 16;\n"
        "                     any N >= 1; rows name it when it is not 16)\n"
        "  --blocks-in-order  block tables take the physical blocks in order (default: a random\n"
        "                     permutation of the whole cache); rows say \"inorder\"\n"
        "  --family F         kernel families of the CUDA backend: auto (default: the wgmma family\n"
        "                     for the prefill calls it takes on sm_90), mma_sync (every call) or\n"
        "                     wgmma (every call the wgmma family takes, decode ones included)\n"
        "  --persist MODE     the wgmma family's persistent grid: on, off or auto (the backend's\n"
        "                     default: max_seqlen_q <= FA_CUDA_PERSIST_AUTO_ROWS;\n"
        "                     fa_cuda_backend_set_persistent; the grid takes work items from\n"
        "                     fa_forward's counters, and bench_gpu's dense rows give their own)\n"
        "  --gqa-pack MODE    the wgmma family's GQA packing: on, off or auto (the backend's default:\n"
        "                     max_seqlen_q <= FA_CUDA_GQA_PACK_AUTO_ROWS; fa_cuda_backend_set_gqa_pack)\n"
        "  --list             print the selected rows and exit (no GPU needed)\n");
}

static int parse_ilist(const char *s, ilist *l)
{
    char buf[256], *tok, *save = NULL;
    snprintf(buf, sizeof buf, "%s", s);
    l->n = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (l->n == MAX_LIST) return -1;
        if (strcmp(tok, "bf16") == 0)
            l->v[l->n++] = 0;
        else if (strcmp(tok, "fp8") == 0)
            l->v[l->n++] = 1;
        else {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end == 'k' || *end == 'K') {
                v *= 1024;
                end++;
            }
            if (*end) return -1;
            l->v[l->n++] = (int)v;
        }
    }
    return 0;
}

/* An on / off / auto option (--persist, --gqa-pack) into *out as the setter's on / off / auto value. */
static int parse_mode(const char *opt, const char *v, int on, int off, int autov, int *out)
{
    if (!strcmp(v, "on"))
        *out = on;
    else if (!strcmp(v, "off"))
        *out = off;
    else if (!strcmp(v, "auto"))
        *out = autov;
    else {
        fprintf(stderr, "bench_gpu: %s %s: want on, off or auto\n", opt, v);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv)
{
    int i;
    memset(&O, 0, sizeof O);
    O.cats = C_ALL;
    O.reps = 30;
    O.warmup = 3;
    O.max_gb = 40.0;
    O.rot_mb = 512.0;
    O.max_copies = 256;
    O.seed = 1234;
    O.persist = -1;
    O.gqa_pack = -1;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV \
    do { \
        if (!v) { \
            fprintf(stderr, "bench_gpu: %s needs a value\n", a); \
            return -1; \
        } \
        ++i; \
    } while (0)
        if (!strcmp(a, "--quick"))
            O.quick = 1;
        else if (!strcmp(a, "--list"))
            O.list = 1;
        else if (!strcmp(a, "--no-check"))
            O.no_check = 1;
        else if (!strcmp(a, "--no-graph"))
            O.no_graph = 1;
        else if (!strcmp(a, "--full-graph"))
            O.full_graph = 1;
        else if (!strcmp(a, "--no-ceilings"))
            O.no_ceilings = 1;
        else if (!strcmp(a, "--sweep-all"))
            O.sweep_all = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        } else if (!strcmp(a, "--only")) {
            char buf[256], *tok, *save = NULL;
            NEEDV;
            O.cats = 0;
            snprintf(buf, sizeof buf, "%s", v);
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (!strcmp(tok, "decode"))
                    O.cats |= C_DECODE;
                else if (!strcmp(tok, "splits") || !strcmp(tok, "decode-split"))
                    O.cats |= C_SPLITS;
                else if (!strcmp(tok, "prefill"))
                    O.cats |= C_PREFILL;
                else if (!strcmp(tok, "mixed"))
                    O.cats |= C_MIXED;
                else if (!strcmp(tok, "cascade"))
                    O.cats |= C_CASCADE;
                else if (!strcmp(tok, "cache"))
                    O.cats |= C_CACHE;
                else if (!strcmp(tok, "merge"))
                    O.cats |= C_MERGE;
                else if (!strcmp(tok, "dcp"))
                    O.cats |= C_DCP;
                else if (!strcmp(tok, "verify"))
                    O.cats |= C_VERIFY;
                else if (!strcmp(tok, "ceiling") || !strcmp(tok, "ceilings"))
                    ;
                else {
                    fprintf(stderr, "bench_gpu: unknown category '%s' in --only\n", tok);
                    return -1;
                }
            }
        } else if (!strcmp(a, "--filter")) {
            NEEDV;
            if (O.nfilters == MAX_FILTERS) return -1;
            O.filters[O.nfilters++] = v;
        } else if (!strcmp(a, "--batch")) {
            NEEDV;
            if (parse_ilist(v, &O.batch)) return -1;
        } else if (!strcmp(a, "--ctx")) {
            NEEDV;
            if (parse_ilist(v, &O.ctx)) return -1;
        } else if (!strcmp(a, "--dim")) {
            NEEDV;
            if (parse_ilist(v, &O.dim)) return -1;
        } else if (!strcmp(a, "--kv")) {
            NEEDV;
            if (parse_ilist(v, &O.kv)) return -1;
        } else if (!strcmp(a, "--heads")) {
            char buf[256], *tok, *save = NULL;
            NEEDV;
            snprintf(buf, sizeof buf, "%s", v);
            O.nheads = 0;
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                int q, k;
                if (O.nheads == MAX_LIST || sscanf(tok, "%d/%d", &q, &k) != 2) {
                    fprintf(stderr, "bench_gpu: --heads wants Hq/Hkv pairs, e.g. 32/8,64/8\n");
                    return -1;
                }
                O.heads_q[O.nheads] = q;
                O.heads_kv[O.nheads++] = k;
            }
        } else if (!strcmp(a, "--blocks-in-order")) {
            O.blocks_in_order = 1;
        } else if (!strcmp(a, "--persist")) {
            NEEDV;
            if (parse_mode(a, v, FA_CUDA_PERSIST_ON, FA_CUDA_PERSIST_OFF, FA_CUDA_PERSIST_AUTO, &O.persist))
                return -1;
        } else if (!strcmp(a, "--gqa-pack")) {
            NEEDV;
            if (parse_mode(a, v, FA_CUDA_GQA_PACK_ON, FA_CUDA_GQA_PACK_OFF, FA_CUDA_GQA_PACK_AUTO,
                           &O.gqa_pack))
                return -1;
        } else if (!strcmp(a, "--family")) {
            NEEDV;
            if (!strcmp(v, "auto")) {
                O.family = FA_CUDA_FAMILY_AUTO;
            } else if (!strcmp(v, "mma_sync")) {
                O.family = FA_CUDA_FAMILY_MMA_SYNC;
            } else if (!strcmp(v, "wgmma")) {
                O.family = FA_CUDA_FAMILY_WGMMA;
            } else {
                fprintf(stderr, "bench_gpu: --family %s: want auto, mma_sync or wgmma\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--block")) {
            NEEDV;
            O.block = atoi(v);
            if (O.block < 1) {
                fprintf(stderr, "bench_gpu: --block %s: want a block size >= 1\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--csv")) {
            NEEDV;
            O.csv = v;
        } else if (!strcmp(a, "--reps")) {
            NEEDV;
            O.reps = atoi(v);
        } else if (!strcmp(a, "--warmup")) {
            NEEDV;
            O.warmup = atoi(v);
        } else if (!strcmp(a, "--max-gb")) {
            NEEDV;
            O.max_gb = atof(v);
        } else if (!strcmp(a, "--rot-mb")) {
            NEEDV;
            O.rot_mb = atof(v);
        } else if (!strcmp(a, "--max-splits")) {
            NEEDV;
            O.max_splits = atoi(v);
            if (O.max_splits < 1 || O.max_splits > 128) {
                fprintf(stderr, "bench_gpu: --max-splits %s: expected 1..128\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--max-copies")) {
            NEEDV;
            O.max_copies = atoi(v);
        } else if (!strcmp(a, "--device")) {
            NEEDV;
            O.device = atoi(v);
        } else if (!strcmp(a, "--seed")) {
            NEEDV;
            O.seed = (uint64_t)strtoull(v, NULL, 10);
        } else {
            fprintf(stderr, "bench_gpu: unknown argument '%s' (--help lists them)\n", a);
            return -1;
        }
#undef NEEDV
    }
    if (O.reps < 20) O.reps = 20;
    if (O.reps > EV_MAX) O.reps = EV_MAX;
    if (O.warmup < 1) O.warmup = 1;
    if (O.max_copies < 1) O.max_copies = 1;
    if (O.rot_mb < 0) O.rot_mb = 0;
    return 0;
}

static int heads_selected(int hq, int hkv)
{
    int i;
    if (O.nheads == 0) return 1;
    for (i = 0; i < O.nheads; ++i)
        if (O.heads_q[i] == hq && O.heads_kv[i] == hkv) return 1;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

static void run_all(void)
{
    static const int batches[] = {1, 8, 64, 256}, ctxs[] = {1024, 8192, 32768}, dims[] = {64, 128, 256};
    static const int heads[][2] = {{32, 8}, {32, 32}, {64, 8}};
    static const int pre[][2] = {{1, 16384}, {4, 4096}, {16, 1024}};
    int kv, h, d, b, c, s;
    /* --batch / --ctx select from the grid, or extend it (e.g. --ctx 128,512) */
    const int *bl = O.batch.n > 0 ? O.batch.v : batches, *cl = O.ctx.n > 0 ? O.ctx.v : ctxs;
    const int nb = O.batch.n > 0 ? O.batch.n : 4, nc = O.ctx.n > 0 ? O.ctx.n : 3;

    /* decode grid (+ split sweep on the 32/8 head-128 bf16 rows). A shape's bf16 and fp8 rows
       run back to back, so that the fp8 / bf16 time ratio compares the card in one state (its
       copy bandwidth drifts ~10 % over a run under the power cap). */
    for (h = 0; h < 3; ++h) {
        if (!heads_selected(heads[h][0], heads[h][1])) continue;
        for (d = 0; d < 3; ++d) {
            if (!in_ilist(&O.dim, dims[d])) continue;
            for (b = 0; b < nb; ++b) {
                for (c = 0; c < nc; ++c) {
                    if (O.quick) {
                        int tgt = (bl[b] == 64 && cl[c] == 8192) || (bl[b] == 256 && cl[c] == 1024) ||
                                  (bl[b] == 1 && cl[c] == 32768);
                        if (!tgt || !(heads[h][0] == 32 && heads[h][1] == 8)) continue; /* every head size */
                    }
                    for (kv = 0; kv < 2; ++kv) {
                        int sweep = O.sweep_all ||
                                    (kv == 0 && heads[h][0] == 32 && heads[h][1] == 8 && dims[d] == 128);
                        if (!in_ilist(&O.kv, kv)) continue;
                        bench_decode(bl[b], cl[c], heads[h][0], heads[h][1], dims[d], kv, sweep);
                    }
                }
            }
        }
    }
    /* prefill */
    for (d = 0; d < 3; ++d) {
        if (O.quick && dims[d] != 128) continue;
        for (s = 0; s < 3; ++s) {
            bench_prefill_dense(pre[s][0], pre[s][1], dims[d], 0, 0);
            /* fp8 query: at head 128, and at 64 / 256 where --dim names them; paged after the
               16-bit paged rows (--quick: 1x16384) */
            const int q8 = dims[d] == 128 || (O.dim.n > 0 && in_ilist(&O.dim, dims[d]));
            if (q8) bench_prefill_dense(pre[s][0], pre[s][1], dims[d], 1, 0);
            bench_prefill_paged(pre[s][0], pre[s][1], dims[d], 0, 0);
            if (!O.quick || s < 2) bench_prefill_paged(pre[s][0], pre[s][1], dims[d], 0, 1);
            if (!O.quick || s == 0) bench_prefill_paged(pre[s][0], pre[s][1], dims[d], 1, 0);
            if (q8 && (!O.quick || s == 0)) bench_prefill_dense(pre[s][0], pre[s][1], dims[d], 1, 1);
        }
    }
    bench_mixed();
    {
        /* speculative-decoding verify steps (--quick: the first two) */
        static const int vs[][3] = {{64, 8, 8192}, {64, 16, 8192}, {16, 64, 8192}, {4, 8, 32768}};
        int k;
        for (k = 0; k < (int)(sizeof vs / sizeof vs[0]); ++k)
            if (!O.quick || k < 2) bench_verify(vs[k][0], vs[k][1], vs[k][2]);
    }
    {
        /* the issue's grid {1k, 16k} x {64, 256}, plus few requests on a 1k prefix, where the
           heuristic declines cascade (quick: the target row and one declined row) */
        static const int cs[][2] = {{1024, 8},   {1024, 16},  {1024, 64},
                                    {1024, 256}, {16384, 64}, {16384, 256}};
        int k;
        for (k = 0; k < (int)(sizeof cs / sizeof cs[0]); ++k)
            if (!O.quick || (cs[k][0] == 16384 && cs[k][1] == 256) || (cs[k][0] == 1024 && cs[k][1] == 8))
                bench_cascade(cs[k][0], cs[k][1]);
    }
    /* the arena is not needed any more: give the memory back to the remaining rows */
    arena_release();
    {
        static const int Ts[] = {4096, 16384};
        int t;
        for (t = 0; t < 2; ++t) {
            if (O.quick && Ts[t] != 16384) continue;
            bench_cache(Ts[t], 0);
            bench_cache(Ts[t], 1);
        }
        for (t = 0; t < 2; ++t) {
            if (O.quick && Ts[t] != 16384) continue;
            bench_merge(Ts[t]);
        }
        for (t = 0; t < 2; ++t) {
            if (O.quick && Ts[t] != 16384) continue;
            bench_dcp(Ts[t]);
        }
    }
}

int main(int argc, char **argv)
{
    int i, failed = 0;
    double copy_end = 0;
    if (parse_args(argc, argv)) {
        usage();
        return 2;
    }
    g_rng = O.seed;
    if (O.list) {
        run_all();
        return 0;
    }
    g_t0 = now_s();
    if (O.csv) {
        g_csv = fopen(O.csv, "w");
        if (!g_csv) {
            fprintf(stderr, "bench_gpu: cannot open %s for writing\n", O.csv);
            return 2;
        }
        fprintf(g_csv, "category,name,batch,ctx,hq,hkv,d,kv,splits,copies,time_us,bytes,flops,gbps,tflops,"
                       "frac_copy,frac_gemm,check,rel_err,max_abs_err,note,extra\n");
    }
    if (CU(cudaSetDevice(O.device)) || CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking))) {
        fprintf(stderr, "bench_gpu: %s\n", g_err);
        return 2;
    }
    for (i = 0; i < 2 * EV_MAX + 2; ++i)
        if (CU(cudaEventCreate(&g_ev[i]))) {
            fprintf(stderr, "bench_gpu: %s\n", g_err);
            return 2;
        }
    if (fa_cuda_backend_create(O.device, (void *)g_stream, &g_be) != FA_OK) {
        fprintf(stderr, "bench_gpu: fa_cuda_backend_create: %s\n", fa_cuda_create_error());
        return 2;
    }
    if (fa_cuda_backend_set_family(g_be, O.family) != FA_OK) {
        fprintf(stderr, "bench_gpu: fa_cuda_backend_set_family(%d): %s\n", O.family,
                g_be->ops.last_error(g_be->ctx));
        return 2;
    }
    if (O.persist >= 0 && fa_cuda_backend_set_persistent(g_be, O.persist) != FA_OK) {
        fprintf(stderr, "bench_gpu: fa_cuda_backend_set_persistent(%d) failed\n", O.persist);
        return 1;
    }
    if (O.gqa_pack >= 0 && fa_cuda_backend_set_gqa_pack(g_be, O.gqa_pack) != FA_OK) {
        fprintf(stderr, "bench_gpu: fa_cuda_backend_set_gqa_pack(%d) failed\n", O.gqa_pack);
        return 1;
    }
    if (fa_cpu_backend_create(&g_cpu) != FA_OK) {
        fprintf(stderr, "bench_gpu: fa_cpu_backend_create: %s\n", fa_last_error());
        return 2;
    }
    if (pat_init()) {
        fprintf(stderr, "bench_gpu: pattern setup: %s\n", g_err);
        return 2;
    }
    printf("flashattn %s bench_gpu on %s (%d SMs, cc %d.%d)%s\n", FLASHATTN_VERSION_STRING, g_be->info.name,
           g_be->info.num_sms, g_be->info.cc_major, g_be->info.cc_minor, O.quick ? " --quick" : "");
    for (i = 0; i < g_be->caps.num_dims; ++i)
        printf("# head %d prefill: %s family\n", (int)g_be->caps.dims[i].head_dim,
               g_be->caps.dims[i].prefill_family == FA_KERNEL_FAMILY_WGMMA ? "wgmma (sm_90a)" : "mma.sync");
    printf("# timing: events, median of >= %d reps, warm-up %d, graph replay %s, rotation >= %.0f MB a rep "
           "(no L2 flush), random data; checks %s\n",
           O.reps, O.warmup, O.no_graph ? "off" : "on", O.rot_mb, O.no_check ? "off" : "on (CPU reference)");
    print_header();
    if (!O.no_ceilings) {
        bench_copy(&g_copy_gbs, "");
        bench_gemm();
    }
    run_all();
    arena_release();
    if (!O.no_ceilings && !g_dead) {
        bench_copy(&copy_end, " (end of run)");
        if (g_copy_gbs > 0 && copy_end > 0)
            printf("# copy drift over the run: %+.1f%%\n", 100.0 * (copy_end / g_copy_gbs - 1.0));
    }
    summary(now_s() - g_t0);
    for (i = 0; i < g_nrows; ++i)
        if (g_rows[i].checked && !g_rows[i].check_ok) failed = 1;
    if (g_csv) fclose(g_csv);
    fa_cpu_backend_destroy(g_cpu);
    fa_cuda_backend_destroy(g_be);
    return failed ? 1 : (g_dead ? 2 : 0);
}
