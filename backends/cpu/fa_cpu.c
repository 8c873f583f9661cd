/* fa_cpu.c - the CPU reference backend of flashattn. See fa_cpu.h.

   Semantics: docs SEMANTICS.md (the decision table first, then sections 2.2 cache write,
   3.2 attention, 4 merge, 7.3 DCP correction, 9.4 split combine). Everything is plain loops;
   attention sums are accumulated in double and rounded once to the output dtype.

   Contents
     // >>convert    fp8 / f16 / bf16 encode and decode (one generic RNE encoder)
     // >>ctx        backend context, error messages, element load / store
     // >>cache      reshape_and_cache
     // >>attention  attention (paged and dense, split-KV with real partials and a combine)
     // >>merge      merge_states, dcp_correct
     // >>memory     copy, copy_2d, fill, alloc, free, synchronize
     // >>create     the vtable and the constructor
*/
#include "fa_cpu.h"

#include "fa_backend_util.h" /* backends/common: dtype size / name, fa_bu_fail, struct checks */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
// >>convert

/* A small binary floating-point format: 1 sign bit, ebits exponent bits, mbits mantissa bits. */
typedef struct fa__cpu_fmt {
    int ebits, mbits;
    int bias;
    int emin;           /* unbiased exponent of the smallest normal number */
    int emax;           /* unbiased exponent of the largest finite number */
    int max_mant;       /* largest mantissa field at emax */
    int ieee_special;   /* 1: all-ones exponent = inf (mantissa 0) / NaN; 0: only all-ones = NaN */
    int saturate;       /* 1: overflow and inf clamp to +-max finite; 0: overflow to +-inf */
    unsigned nan_code;  /* positive quiet NaN */
    unsigned inf_code;  /* positive infinity (unused when saturating) */
} fa__cpu_fmt;

static const fa__cpu_fmt fa__cpu_e4m3 = {4, 3, 7, -6, 8, 6, 0, 1, 0x7Fu, 0x7Fu};
static const fa__cpu_fmt fa__cpu_e5m2 = {5, 2, 15, -14, 15, 3, 1, 1, 0x7Fu, 0x7Cu};
static const fa__cpu_fmt fa__cpu_f16 = {5, 10, 15, -14, 15, 1023, 1, 0, 0x7E00u, 0x7C00u};
static const fa__cpu_fmt fa__cpu_bf16 = {8, 7, 127, -126, 127, 127, 1, 0, 0x7FC0u, 0x7F80u};

/* Round a non-negative double to the nearest integer, ties to even. */
static double fa__cpu_rne(double y)
{
    double fl = floor(y);
    double frac = y - fl;   /* exact */
    if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
    return fl;
}

/* x -> code of `f`, rounding once to nearest even. */
static unsigned fa__cpu_encode(double x, const fa__cpu_fmt *f)
{
    unsigned sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0u;
    unsigned max_code = ((unsigned)(f->emax + f->bias) << f->mbits) | (unsigned)f->max_mant;
    double a = fabs(x), r, one = ldexp(1.0, f->mbits);
    int e;

    if (isnan(x)) return sign | f->nan_code;
    if (isinf(a)) return sign | (f->saturate ? max_code : f->inf_code);
    if (a == 0.0) return sign;
    (void)frexp(a, &e);   /* a = m * 2^e, m in [0.5, 1): unbiased exponent e - 1 */
    e -= 1;
    if (e < f->emin) e = f->emin;      /* subnormal range: fixed quantum 2^(emin - mbits) */
    r = fa__cpu_rne(ldexp(a, f->mbits - e));   /* the mantissa with its implicit bit */
    if (r >= 2.0 * one) { /* rounded up to the next binade */
        r *= 0.5;
        e += 1;
    }
    if (r < one)          /* subnormal (or zero): exponent field 0 */
        return sign | (unsigned)r;
    if (e > f->emax || (e == f->emax && (int)(r - one) > f->max_mant))
        return sign | (f->saturate ? max_code : f->inf_code);
    return sign | ((unsigned)(e + f->bias) << f->mbits) | (unsigned)(r - one);
}

static double fa__cpu_decode(unsigned code, const fa__cpu_fmt *f)
{
    unsigned mmask = (1u << f->mbits) - 1u, emask = (1u << f->ebits) - 1u;
    unsigned mant = code & mmask, ef = (code >> f->mbits) & emask;
    int neg = (code >> (f->ebits + f->mbits)) & 1u;
    double v;

    if (ef == emask && (f->ieee_special || mant == mmask)) {
        if (f->ieee_special && mant == 0)
            v = INFINITY;
        else
            return NAN;
    } else if (ef == 0) {
        v = ldexp((double)mant, f->emin - f->mbits);
    } else {
        v = ldexp((double)((1u << f->mbits) + mant), (int)ef - f->bias - f->mbits);
    }
    return neg ? -v : v;
}

uint8_t fa_cpu_float_to_fp8(float x, fa_dtype fmt)
{
    if (fmt == FA_DTYPE_FP8_E4M3) return (uint8_t)fa__cpu_encode((double)x, &fa__cpu_e4m3);
    if (fmt == FA_DTYPE_FP8_E5M2) return (uint8_t)fa__cpu_encode((double)x, &fa__cpu_e5m2);
    return 0;
}

float fa_cpu_fp8_to_float(uint8_t v, fa_dtype fmt)
{
    if (fmt == FA_DTYPE_FP8_E4M3) return (float)fa__cpu_decode(v, &fa__cpu_e4m3);
    if (fmt == FA_DTYPE_FP8_E5M2) return (float)fa__cpu_decode(v, &fa__cpu_e5m2);
    return NAN;
}

uint16_t fa_cpu_float_to_half(float x) { return (uint16_t)fa__cpu_encode((double)x, &fa__cpu_f16); }
float fa_cpu_half_to_float(uint16_t h) { return (float)fa__cpu_decode(h, &fa__cpu_f16); }
uint16_t fa_cpu_float_to_bf16(float x) { return (uint16_t)fa__cpu_encode((double)x, &fa__cpu_bf16); }

float fa_cpu_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------------------------------ */
// >>ctx

/* Thread-local storage for the error message (the pattern of flashattn.h's FA__TLS). */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define FA__CPU_TLS thread_local
#elif defined(_MSC_VER)
#define FA__CPU_TLS __declspec(thread)
#elif defined(__GNUC__) || defined(__clang__)
#define FA__CPU_TLS __thread
#else
#define FA__CPU_TLS /* no thread-local storage: the message is shared between threads */
#endif

/* counter += 1, returning the new value; atomic where the compiler offers it (ops may run on
   several threads at once, and the fault hooks count their calls) */
static int64_t fa__cpu_inc(int64_t *counter)
{
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
#else
    return ++*counter;   /* not atomic: concurrent calls may count one call twice */
#endif
}

static void fa__cpu_store_counter(int64_t *counter, int64_t v)
{
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(counter, v, __ATOMIC_RELAXED);
#else
    *counter = v;
#endif
}

/* Fault-injection state (fa_cpu_backend_options): the armed call numbers and the counts. */
typedef struct fa__cpu_faults {
    int64_t alloc_at, copy_at, op_at;
    fa_op op;
    int64_t allocs, copies, op_calls;
} fa__cpu_faults;

typedef struct fa__cpu_ctx {
    int64_t id;                /* unique per backend made in this process (error ownership) */
    fa__cpu_faults faults;
    float half_table[65536];   /* f16 code -> float */
    float e4m3_table[256];
    float e5m2_table[256];
} fa__cpu_ctx;

typedef struct fa__cpu_backend {
    fa_backend be;             /* first member: the fa_backend pointer is the allocation */
    fa__cpu_ctx ctx;
} fa__cpu_backend;

/* The last failure message of the calling thread, with the id of the backend that failed. Per
   thread: ops of one backend may fail on several threads at once, each thread reads its own. */
static FA__CPU_TLS char fa__cpu_err[512];
static FA__CPU_TLS int64_t fa__cpu_err_owner;   /* 0: no message */
static int64_t fa__cpu_next_id;

/* Where a failure of `op` ("cpu attention", ...) writes: the calling thread's buffer, through
   fa_backend_util.h's fa_bu_fail ("<op>: <message>"). */
static fa_bu_err fa__cpu_err_for(const char *op)
{
    return fa_bu_err_make(fa__cpu_err, sizeof fa__cpu_err, op);
}

/* Marks the calling thread's message as backend c's; returns st. */
static fa_status fa__cpu_own(const fa__cpu_ctx *c, fa_status st)
{
    fa__cpu_err_owner = c->id;
    return st;
}

/* Fails with a message "<e's op>: <fmt ...>" owned by backend c. */
#define FA__CPU_FAIL(c, e, st, ...) fa__cpu_own((c), fa_bu_fail((e), (st), __VA_ARGS__))

/* Returns from the calling function when expr (an fa_bu_check_* of e) fails. */
#define FA__CPU_TRY(c, expr) \
    do { \
        fa_status fa__cpu_st_ = (expr); \
        if (fa__cpu_st_ != FA_OK) return fa__cpu_own((c), fa__cpu_st_); \
    } while (0)

/* "4 (fp8_e4m3)" for a dtype, "99" for a value that is none: messages give the enum's number
   and, where it has one, its name */
static const char *fa__cpu_dt(fa_dtype t, char buf[FA_BU_NAME_BUF + 16])
{
    char name[FA_BU_NAME_BUF];
    if (fa_bu_dtype_size(t) == 0)
        snprintf(buf, FA_BU_NAME_BUF + 16, "%d", (int)t);
    else
        snprintf(buf, FA_BU_NAME_BUF + 16, "%d (%s)", (int)t, fa_bu_dtype_name(t, name));
    return buf;
}

/* *acc += i * stride, or 0 (acc unchanged) when |acc| + |i * stride| would exceed INT64_MAX. */
static int fa__cpu_madd(int64_t *acc, int64_t i, int64_t stride)
{
    const uint64_t lim = (uint64_t)INT64_MAX;
    uint64_t ai = i < 0 ? 0u - (uint64_t)i : (uint64_t)i;
    uint64_t as = stride < 0 ? 0u - (uint64_t)stride : (uint64_t)stride;
    uint64_t aa = *acc < 0 ? 0u - (uint64_t)*acc : (uint64_t)*acc;
    if (ai != 0 && as > lim / ai) return 0;
    if (ai * as > lim - aa) return 0;
    *acc += i * stride;
    return 1;
}

/* 1 when every element offset of a view (indices [0, extent[k]) of stride[k] elements each) is
   an int64, in bytes too (es bytes an element); an empty view always is. */
static int fa__cpu_span_ok(int n, const int64_t *extent, const int64_t *stride, size_t es)
{
    int64_t acc = 0, bytes = 0;
    int k;
    for (k = 0; k < n; ++k)
        if (extent[k] <= 0) return 1;
    for (k = 0; k < n; ++k)
        if (!fa__cpu_madd(&acc, extent[k] - 1, stride[k])) return 0;
    return fa__cpu_madd(&bytes, acc, (int64_t)es);
}

/* Fault injection (fa_cpu_backend_options): counts a call of `op` when a failure of it is
   armed; 1 when this call is the one that fails. */
static int fa__cpu_fault_count(fa__cpu_ctx *c, fa_op op)
{
    if (c->faults.op_at <= 0 || c->faults.op != op) return 0;
    return fa__cpu_inc(&c->faults.op_calls) == c->faults.op_at;
}

static fa_status fa__cpu_injected(const fa__cpu_ctx *c, fa_op op)
{
    static const char *const names[4] = {"cpu reshape_and_cache", "cpu attention", "cpu merge_states",
                                         "cpu dcp_correct"};
    const fa_bu_err e = fa__cpu_err_for((int)op >= 0 && (int)op < 4 ? names[op] : "cpu ?");
    return FA__CPU_FAIL(c, &e, FA_ERR_BACKEND,
                        "injected failure at call %lld (fa_cpu_backend_options.fail_op_at)",
                        (long long)c->faults.op_at);
}

/* Element idx of an array of dtype t, widened to double (exact). */
static double fa__cpu_load(const fa__cpu_ctx *c, const void *base, int64_t idx, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return (double)((const float *)base)[idx];
    case FA_DTYPE_F16: return (double)c->half_table[((const uint16_t *)base)[idx]];
    case FA_DTYPE_BF16: return (double)fa_cpu_bf16_to_float(((const uint16_t *)base)[idx]);
    case FA_DTYPE_FP8_E4M3: return (double)c->e4m3_table[((const uint8_t *)base)[idx]];
    case FA_DTYPE_FP8_E5M2: return (double)c->e5m2_table[((const uint8_t *)base)[idx]];
    default: return NAN;   /* unreachable: dtypes are validated first */
    }
}

/* Stores v rounded once (to nearest even) to dtype t (F32, F16, BF16). */
static void fa__cpu_store(void *base, int64_t idx, fa_dtype t, double v)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)base)[idx] = (float)v; break;
    case FA_DTYPE_F16: ((uint16_t *)base)[idx] = (uint16_t)fa__cpu_encode(v, &fa__cpu_f16); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[idx] = (uint16_t)fa__cpu_encode(v, &fa__cpu_bf16); break;
    default: break;        /* unreachable: dtypes are validated first */
    }
}

/* The calling thread's last failure of this backend ("" when its last failure, if any, was
   another backend's). */
static const char *fa__cpu_last_error(void *ctx)
{
    const fa__cpu_ctx *c = (const fa__cpu_ctx *)ctx;
    return c && fa__cpu_err_owner == c->id ? fa__cpu_err : "";
}

/* ------------------------------------------------------------------------------------------ */
// >>cache

/* The checks of reshape_and_cache, every one of them (the op and ops.check both call this):
   FA_OK when the call would run. The dtypes first (messages with the enum's number), then the
   structural checks every backend makes (fa_bu_check_cache_write), then the CPU's own: every
   slot inside the cache and every offset an int64. Reads slot_mapping (host memory here). */
static fa_status fa__cpu_cache_validate(const fa__cpu_ctx *c, const fa_cache_write_args *a)
{
    const fa_bu_err e = fa__cpu_err_for("cpu reshape_and_cache");
    char d1[FA_BU_NAME_BUF + 16], d2[FA_BU_NAME_BUF + 16];
    int64_t t;
    size_t es;

    if (!a) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "args is NULL");
    if (!fa_bu_is_act_dtype(a->kv_dtype))
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "kv_dtype %s is not f32, f16 or bf16",
                            fa__cpu_dt(a->kv_dtype, d1));
    if (a->cache_dtype != a->kv_dtype && !fa_bu_is_fp8(a->cache_dtype))
        return FA__CPU_FAIL(c, &e, FA_ERR_UNSUPPORTED,
                            "cache_dtype %s is neither kv_dtype %s nor fp8_e4m3 / fp8_e5m2",
                            fa__cpu_dt(a->cache_dtype, d1), fa__cpu_dt(a->kv_dtype, d2));
    FA__CPU_TRY(c, fa_bu_check_cache_write(&e, a));
    if (a->num_tokens == 0) return FA_OK;
    es = fa_bu_dtype_size(a->kv_dtype);
    {
        const int64_t ext[2] = {a->num_tokens, (int64_t)a->num_heads_kv * a->head_size};
        const int64_t ks[2] = {a->key_token_stride, 1}, vs[2] = {a->value_token_stride, 1};
        const int k_ok = fa__cpu_span_ok(2, ext, ks, es);
        if (!k_ok || !fa__cpu_span_ok(2, ext, vs, es))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "num_tokens %d x %s %lld overflows int64 offsets",
                                (int)a->num_tokens, k_ok ? "value_token_stride" : "key_token_stride",
                                (long long)(k_ok ? a->value_token_stride : a->key_token_stride));
    }
    /* every slot before anything is written: inside the cache, and its offset an int64 */
    es = fa_bu_dtype_size(a->cache_dtype);
    for (t = 0; t < a->num_tokens; ++t) {
        const int64_t slot = a->slot_mapping[t];
        int64_t ext[4], str[4];
        if (slot < 0) continue;   /* padding, or a token another DCP rank stores */
        if (slot / a->block_size >= a->num_blocks)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "slot_mapping[%lld] = %lld is outside the cache (%lld blocks x %d "
                                "slots)",
                                (long long)t, (long long)slot, (long long)a->num_blocks, (int)a->block_size);
        ext[0] = slot / a->block_size + 1;
        str[0] = a->cache_block_stride;
        ext[1] = slot % a->block_size + 1;
        str[1] = a->cache_row_stride;
        ext[2] = a->num_heads_kv;
        str[2] = a->cache_head_stride;
        ext[3] = a->head_size;
        str[3] = 1;
        if (!fa__cpu_span_ok(4, ext, str, es))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "slot_mapping[%lld] = %lld: its cache offset (block %lld x "
                                "cache_block_stride %lld) overflows int64",
                                (long long)t, (long long)slot, (long long)(slot / a->block_size),
                                (long long)a->cache_block_stride);
    }
    return FA_OK;
}

static fa_status fa__cpu_reshape_and_cache(void *ctx, const fa_cache_write_args *a)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const int armed = fa__cpu_fault_count(c, FA_OP_RESHAPE_AND_CACHE);
    fa_status st = fa__cpu_cache_validate(c, a);
    int64_t t;
    int32_t h, d;
    int fp8;

    if (st != FA_OK) return st;
    if (armed) return fa__cpu_injected(c, FA_OP_RESHAPE_AND_CACHE);
    fp8 = fa_bu_is_fp8(a->cache_dtype);
    for (t = 0; t < a->num_tokens; ++t) {
        int64_t slot = a->slot_mapping[t], blk, off;
        if (slot < 0) continue;   /* padding, or a token another DCP rank stores */
        blk = slot / a->block_size;
        off = slot % a->block_size;
        for (h = 0; h < a->num_heads_kv; ++h) {
            int64_t dst =
                blk * a->cache_block_stride + off * a->cache_row_stride + (int64_t)h * a->cache_head_stride;
            int64_t ks = t * a->key_token_stride + (int64_t)h * a->head_size;
            int64_t vs = t * a->value_token_stride + (int64_t)h * a->head_size;
            for (d = 0; d < a->head_size; ++d) {
                if (!fp8) {   /* same dtype: a plain copy of the bits */
                    size_t es = fa_bu_dtype_size(a->kv_dtype);
                    memcpy((char *)a->key_cache + (size_t)(dst + d) * es,
                           (const char *)a->key + (size_t)(ks + d) * es, es);
                    memcpy((char *)a->value_cache + (size_t)(dst + d) * es,
                           (const char *)a->value + (size_t)(vs + d) * es, es);
                } else {      /* saturate(x / scale), the division in fp32 */
                    float kx = (float)fa__cpu_load(c, a->key, ks + d, a->kv_dtype) / a->k_scale;
                    float vx = (float)fa__cpu_load(c, a->value, vs + d, a->kv_dtype) / a->v_scale;
                    ((uint8_t *)a->key_cache)[dst + d] = fa_cpu_float_to_fp8(kx, a->cache_dtype);
                    ((uint8_t *)a->value_cache)[dst + d] = fa_cpu_float_to_fp8(vx, a->cache_dtype);
                }
            }
        }
    }
    return FA_OK;
}

/* ------------------------------------------------------------------------------------------ */
// >>attention

/* One sequence of an attention call. */
typedef struct fa__cpu_seq {
    int32_t b;
    int64_t t0;        /* global row of its first query */
    int64_t lq, lk;
} fa__cpu_seq;

/* The mask rule of SEMANTICS section 3.2, shared by the backends (causal folded into wr). */
static int fa__cpu_allowed(int64_t i, int64_t j, int64_t lq, int64_t lk, int32_t wl, int32_t wr)
{
    return fa_bu_key_allowed(j, i + lk - lq, lk, wl, wr);
}

/* Element offset of (key j of sequence b, kv head g, d = 0) in K (is_v = 0) or V (is_v = 1). */
static int64_t fa__cpu_kv_offset(const fa_attn_args *a, int32_t b, int64_t j, int32_t g, int is_v)
{
    int64_t row_stride = is_v ? a->v_row_stride : a->k_row_stride;
    int64_t head_stride = is_v ? a->v_head_stride : a->k_head_stride;
    if (a->cu_seqlens_k) {   /* dense: token cu_seqlens_k[b] + j */
        return ((int64_t)a->cu_seqlens_k[b] + j) * row_stride + (int64_t)g * head_stride;
    } else {                 /* paged: block_table[b, j / bs], row j % bs */
        int64_t blk = a->block_table[(int64_t)b * a->block_table_stride + j / a->block_size];
        int64_t block_stride = is_v ? a->v_block_stride : a->k_block_stride;
        return blk * block_stride + (j % a->block_size) * row_stride + (int64_t)g * head_stride;
    }
}

/* out's dtype: out_dtype with an fp8 query, else the query's. */
static fa_dtype fa__cpu_out_dtype(const fa_attn_args *a)
{
    return a->q_dtype == FA_DTYPE_FP8_E4M3 ? a->out_dtype : a->q_dtype;
}

/* The factor of query head h of sequence b: q_descale[b, its KV head] for an fp8 query (1 when
   the pointer is NULL), else 1. */
static double fa__cpu_q_descale(const fa_attn_args *a, int32_t b, int32_t h)
{
    int32_t qg, g;
    if (a->q_dtype != FA_DTYPE_FP8_E4M3 || a->q_descale == NULL) return 1.0;
    qg = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    g = (h % qg) / (qg / a->num_heads_kv);
    return (double)a->q_descale[(int64_t)b * a->descale_batch_stride + (int64_t)g * a->descale_head_stride];
}

/* Query row i (global row s->t0 + i), head h, over the keys [j0, j1) of sequence s, with the
   sink or not: writes the normalised partial output into acc[D] and returns its LSE (natural
   log). No allowed key and no sink: acc = 0, LSE = -inf. q[D] is the query row; logit is
   scratch of at least j1 - j0 doubles. Keys that are not allowed are never read. */
static double fa__cpu_row(const fa__cpu_ctx *c, const fa_attn_args *a, const fa__cpu_seq *s, int64_t i,
                          int32_t h, int64_t j0, int64_t j1, int with_sink, const double *q, double *logit,
                          double *acc)
{
    const int32_t D = a->head_size;
    /* query heads form groups of q_head_group heads, each mapped onto all KV heads */
    const int32_t qg = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    const int32_t g = (h % qg) / (qg / a->num_heads_kv);
    const int32_t wl = a->window_left, wr = a->causal ? 0 : a->window_right;
    const int fp8 = fa_bu_is_fp8(a->kv_dtype);
    double kscale = 1.0, vscale = 1.0, slope = 0.0, m = -INFINITY, den = 0.0, z = 0.0;
    int64_t j;
    int32_t d;

    if (fp8) {
        int64_t di = (int64_t)s->b * a->descale_batch_stride + (int64_t)g * a->descale_head_stride;
        kscale = a->k_descale ? (double)a->k_descale[di] : (double)a->k_scale;
        vscale = a->v_descale ? (double)a->v_descale[di] : (double)a->v_scale;
    }
    if (a->alibi_slopes) slope = (double)a->alibi_slopes[(int64_t)s->b * a->alibi_batch_stride + h];

    /* pass 1: logits of the allowed keys and their maximum */
    for (j = j0; j < j1; ++j) {
        int64_t ko;
        double dot = 0.0, x;
        if (!fa__cpu_allowed(i, j, s->lq, s->lk, wl, wr)) continue;
        ko = fa__cpu_kv_offset(a, s->b, j, g, 0);
        for (d = 0; d < D; ++d) dot += q[d] * (fa__cpu_load(c, a->k, ko + d, a->kv_dtype) * kscale);
        x = (double)a->softmax_scale * dot;                                  /* scale */
        if (a->softcap > 0.0f) x = (double)a->softcap * tanh(x / (double)a->softcap);          /* softcap */
        x -= slope * fabs((double)(i + s->lk - s->lq - j));                  /* ALiBi */
        logit[j - j0] = x;
        if (x > m) m = x;
    }
    if (with_sink) {   /* the sink logit: not scaled, not capped, joins the max */
        z = (double)a->sinks[h];
        if (z > m) m = z;
    }
    for (d = 0; d < D; ++d) acc[d] = 0.0;
    if (m == -INFINITY) return -INFINITY;   /* empty row */

    /* pass 2: softmax weights and the weighted sum of V */
    for (j = j0; j < j1; ++j) {
        int64_t vo;
        double p;
        if (!fa__cpu_allowed(i, j, s->lq, s->lk, wl, wr)) continue;
        p = exp(logit[j - j0] - m);
        den += p;
        vo = fa__cpu_kv_offset(a, s->b, j, g, 1);
        for (d = 0; d < D; ++d) acc[d] += p * (fa__cpu_load(c, a->v, vo + d, a->kv_dtype) * vscale);
    }
    if (with_sink) den += exp(z - m);   /* counted once, no value row */
    for (d = 0; d < D; ++d) acc[d] /= den;
    return m + log(den);
}

/* Splits of sequence b: split_plan[1 + b] (or num_splits), at most 1 without split-KV. */
static int32_t fa__cpu_seq_splits(const fa_attn_args *a, int32_t b)
{
    int32_t n = a->split_plan ? a->split_plan[1 + b] : (a->num_splits > 1 ? a->num_splits : 1);
    if (a->num_splits <= 1 && n > 1) n = 1;
    return n;
}

/* The checks of attention, every one of them (the op and ops.check both call this): FA_OK when
   the call would run. The dtypes first (messages with the enum's number), then the structural
   checks every backend makes (fa_bu_check_attention; the CPU takes any positive block size),
   then the CPU's own: scales, the metadata (host memory here: cu_seqlens, seqused_k,
   split_plan, the block-table columns the call reads), every block id inside the cache and
   every offset an int64. */
/* fa__cpu_attention_validate, stage 1: dtypes, the structural checks, scalars. */
static fa_status fa__cpu_attn_check_scalars(const fa__cpu_ctx *c, const fa_bu_err *ep, const fa_attn_args *a)
{
    const fa_bu_err e = *ep;
    char d1[FA_BU_NAME_BUF + 16], d2[FA_BU_NAME_BUF + 16];
    /* the CPU's messages give the enum's number too: its own kv rule first */
    if (a->q_dtype != FA_DTYPE_FP8_E4M3 && fa_bu_is_act_dtype(a->q_dtype) && a->kv_dtype != a->q_dtype &&
        !fa_bu_is_fp8(a->kv_dtype))
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                            "kv_dtype %s is neither q_dtype %s nor fp8_e4m3 / fp8_e5m2",
                            fa__cpu_dt(a->kv_dtype, d1), fa__cpu_dt(a->q_dtype, d2));
    FA__CPU_TRY(c, fa_bu_check_attn_dtypes(&e, a));
    if (a->num_seqs != 0) {
        FA__CPU_TRY(c, fa_bu_check_attention(&e, a, 1));
    } else {   /* nothing to do, nothing read (paged or dense need not be said): the scalars */
        FA__CPU_TRY(c, fa_bu_check_heads(&e, a->num_heads_q, "num_heads_q"));
        FA__CPU_TRY(c, fa_bu_check_heads(&e, a->num_heads_kv, "num_heads_kv"));
        FA__CPU_TRY(c, fa_bu_check_head_size(&e, a->head_size));
        if (a->num_heads_q % a->num_heads_kv != 0)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "num_heads_q %d is not a multiple of num_heads_kv %d", (int)a->num_heads_q,
                                (int)a->num_heads_kv);
        if (a->num_tokens < 0)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "num_tokens %d is negative", (int)a->num_tokens);
    }
    /* the scalars (fa_bu_check_attention checked them when num_seqs != 0) */
    if (a->num_seqs == 0) FA__CPU_TRY(c, fa_bu_check_attn_scalars(&e, a));
    return FA_OK;
}

/* Stage 2: the host metadata (cu_seqlens, seqused_k, split_plan); the widest block-table row
   read in *max_cols. */
static fa_status fa__cpu_attn_check_metadata(const fa__cpu_ctx *c, const fa_bu_err *ep, const fa_attn_args *a,
                                             int64_t *max_cols_out)
{
    const fa_bu_err e = *ep;
    int64_t max_cols = 0;
    int32_t b;
    if (!a->q || !a->k || !a->v || !a->out || !a->cu_seqlens_q)   /* also with 0 tokens */
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "%s is NULL",
                            !a->q     ? "q"
                            : !a->k   ? "k"
                            : !a->v   ? "v"
                            : !a->out ? "out"
                                      : "cu_seqlens_q");

    /* the metadata lives in host memory here: check it before anything is written */
    if (a->cu_seqlens_q[0] < 0)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "cu_seqlens_q[0] = %d is negative",
                            (int)a->cu_seqlens_q[0]);
    if (a->cu_seqlens_q[a->num_seqs] > a->num_tokens)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "cu_seqlens_q[%d] = %d exceeds num_tokens %d",
                            (int)a->num_seqs, (int)a->cu_seqlens_q[a->num_seqs], (int)a->num_tokens);
    if (a->cu_seqlens_k && a->cu_seqlens_k[0] < 0)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "cu_seqlens_k[0] = %d is negative",
                            (int)a->cu_seqlens_k[0]);
    for (b = 0; b < a->num_seqs; ++b) {
        int32_t ns;
        if (a->cu_seqlens_q[b + 1] < a->cu_seqlens_q[b])
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "cu_seqlens_q decreases at %d (%d -> %d)", (int)b,
                                (int)a->cu_seqlens_q[b], (int)a->cu_seqlens_q[b + 1]);
        if (a->cu_seqlens_k && a->cu_seqlens_k[b + 1] < a->cu_seqlens_k[b])
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "cu_seqlens_k decreases at %d (%d -> %d)", (int)b,
                                (int)a->cu_seqlens_k[b], (int)a->cu_seqlens_k[b + 1]);
        if (a->seqused_k && a->seqused_k[b] < 0)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "seqused_k[%d] = %d is negative", (int)b,
                                (int)a->seqused_k[b]);
        ns = a->split_plan ? a->split_plan[1 + b] : 1;
        if (ns < 0 || (a->num_splits > 1 && ns > a->num_splits))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "split_plan[1 + %d] = %d is outside [0, num_splits %d]", (int)b, (int)ns,
                                (int)a->num_splits);
        if (a->seqused_k && a->cu_seqlens_q[b + 1] > a->cu_seqlens_q[b] && ns != 0) {
            const int64_t cols = ((int64_t)a->seqused_k[b] + a->block_size - 1) / a->block_size;
            if (cols > max_cols) max_cols = cols;
        }
    }
    *max_cols_out = max_cols;
    return FA_OK;
}

/* Stage 3: every q / out / lse / split_out offset the call can form fits in int64. */
static fa_status fa__cpu_attn_check_spans(const fa__cpu_ctx *c, const fa_bu_err *ep, const fa_attn_args *a)
{
    const fa_bu_err e = *ep;
    int32_t qg;
    qg = a->q_head_group > 0 ? a->q_head_group : a->num_heads_q;
    {
        const int64_t qe[4] = {a->num_heads_q / qg, qg, a->num_tokens, a->head_size};
        const int64_t qs[4] = {a->q_group_stride, a->q_head_stride, a->q_token_stride, 1};
        const int64_t oe[3] = {a->num_tokens, a->num_heads_q, a->head_size};
        const int64_t os[3] = {a->out_token_stride, a->out_head_stride, 1};
        const int64_t le[2] = {a->num_heads_q, a->num_tokens}, ls[2] = {a->lse_head_stride, 1};
        const size_t es = fa_bu_dtype_size(a->q_dtype), oes = fa_bu_dtype_size(fa__cpu_out_dtype(a));
        if (!fa__cpu_span_ok(4, qe, qs, es))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "q offsets overflow int64 (q_token_stride %lld, q_head_stride "
                                "%lld, q_group_stride %lld)",
                                (long long)a->q_token_stride, (long long)a->q_head_stride,
                                (long long)a->q_group_stride);
        if (!fa__cpu_span_ok(3, oe, os, oes))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "out offsets overflow int64 (out_token_stride %lld, "
                                "out_head_stride %lld)",
                                (long long)a->out_token_stride, (long long)a->out_head_stride);
        if (a->lse && !fa__cpu_span_ok(2, le, ls, sizeof(float)))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "lse offsets overflow int64 (lse_head_stride %lld)",
                                (long long)a->lse_head_stride);
    }
    if (a->num_splits > 1) {   /* split_out [S, T, Hq, D] packed */
        int64_t hd = 0, thd = 0;
        if (!fa__cpu_madd(&hd, a->num_heads_q, a->head_size) || !fa__cpu_madd(&thd, a->num_tokens, hd)) {
            thd = -1;
        } else {
            const int64_t se[4] = {a->num_splits, a->num_tokens, a->num_heads_q, a->head_size};
            const int64_t ss[4] = {thd, hd, a->head_size, 1};
            if (!fa__cpu_span_ok(4, se, ss, sizeof(float))) thd = -1;
        }
        if (thd < 0)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "split_out offsets overflow int64 (num_splits %d x num_tokens "
                                "%d x num_heads_q %d x head_size %d)",
                                (int)a->num_splits, (int)a->num_tokens, (int)a->num_heads_q,
                                (int)a->head_size);
    }
    return FA_OK;
}

/* Stage 4: the keys: dense offsets, or every block id read (in the cache) and its offsets. */
static fa_status fa__cpu_attn_check_kv(const fa__cpu_ctx *c, const fa_bu_err *ep, const fa_attn_args *a,
                                       int64_t max_cols)
{
    const fa_bu_err e = *ep;
    int64_t max_id = -1;
    int32_t b;
    if (a->cu_seqlens_k) {     /* dense: keys [0, cu_seqlens_k[num_seqs]) */
        const int64_t ke[3] = {a->cu_seqlens_k[a->num_seqs], a->num_heads_kv, a->head_size};
        const int64_t ks[3] = {a->k_row_stride, a->k_head_stride, 1};
        const int64_t vs[3] = {a->v_row_stride, a->v_head_stride, 1};
        const size_t es = fa_bu_dtype_size(a->kv_dtype);
        if (!fa__cpu_span_ok(3, ke, ks, es) || !fa__cpu_span_ok(3, ke, vs, es))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "%lld dense keys overflow int64 offsets (k_row_stride %lld, "
                                "v_row_stride %lld)",
                                (long long)ke[0], (long long)a->k_row_stride, (long long)a->v_row_stride);
        return FA_OK;
    }
    {   /* paged: the block-table columns read, then every block id they hold */
        const int64_t be[2] = {a->num_seqs, max_cols}, bs[2] = {a->block_table_stride, 1};
        if (!fa__cpu_span_ok(2, be, bs, sizeof(int32_t)))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "block_table offsets overflow int64 (block_table_stride %lld, "
                                "%lld columns)",
                                (long long)a->block_table_stride, (long long)max_cols);
    }
    for (b = 0; b < a->num_seqs; ++b) {
        int64_t j, cols;
        if (a->cu_seqlens_q[b + 1] <= a->cu_seqlens_q[b] || fa__cpu_seq_splits(a, b) == 0)
            continue;   /* no query, or no work planned: nothing read */
        cols = ((int64_t)a->seqused_k[b] + a->block_size - 1) / a->block_size;
        for (j = 0; j < cols; ++j) {
            const int32_t id = a->block_table[(int64_t)b * a->block_table_stride + j];
            if (id < 0 || id >= a->num_blocks)   /* num_blocks > 0: fa_bu_check_attention */
                return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                    "block_table[%d, %lld] = %d is outside the cache [0, %lld "
                                    "blocks)",
                                    (int)b, (long long)j, (int)id, (long long)a->num_blocks);
            if (id > max_id) max_id = id;
        }
    }
    {
        const int64_t ke[4] = {max_id + 1, a->block_size, a->num_heads_kv, a->head_size};
        const int64_t ks[4] = {a->k_block_stride, a->k_row_stride, a->k_head_stride, 1};
        const int64_t vs[4] = {a->v_block_stride, a->v_row_stride, a->v_head_stride, 1};
        const size_t es = fa_bu_dtype_size(a->kv_dtype);
        if (!fa__cpu_span_ok(4, ke, ks, es) || !fa__cpu_span_ok(4, ke, vs, es))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "block id %lld overflows int64 cache offsets (k_block_stride "
                                "%lld, v_block_stride %lld)",
                                (long long)max_id, (long long)a->k_block_stride,
                                (long long)a->v_block_stride);
    }
    return FA_OK;
}

static fa_status fa__cpu_attention_validate(const fa__cpu_ctx *c, const fa_attn_args *a)
{
    const fa_bu_err e = fa__cpu_err_for("cpu attention");
    int64_t max_cols = 0;
    if (!a) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "args is NULL");
    FA__CPU_TRY(c, fa__cpu_attn_check_scalars(c, &e, a));
    if (a->num_seqs == 0) return FA_OK;
    FA__CPU_TRY(c, fa__cpu_attn_check_metadata(c, &e, a, &max_cols));
    FA__CPU_TRY(c, fa__cpu_attn_check_spans(c, &e, a));
    return fa__cpu_attn_check_kv(c, &e, a, max_cols);
}

static fa_status fa__cpu_attention(void *ctx, const fa_attn_args *a)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const int armed = fa__cpu_fault_count(c, FA_OP_ATTENTION);
    fa_status st = fa__cpu_attention_validate(c, a);
    const int32_t D = a ? a->head_size : 0, Hq = a ? a->num_heads_q : 0;
    int64_t max_lk = 1, T;
    int32_t b, h, d, qg;
    double *q, *acc, *logit;
    fa_dtype odt;

    if (st != FA_OK) return st;
    odt = fa__cpu_out_dtype(a);
    if (armed) return fa__cpu_injected(c, FA_OP_ATTENTION);
    if (a->num_seqs == 0) return FA_OK;
    T = a->num_tokens;
    qg = a->q_head_group > 0 ? a->q_head_group : Hq;
    for (b = 0; b < a->num_seqs; ++b) {
        int64_t lk = a->seqused_k ? a->seqused_k[b] : a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
        if (lk > max_lk) max_lk = lk;
    }
    q = (double *)malloc(sizeof(double) * (size_t)(2 * D + max_lk));
    if (!q) {
        const fa_bu_err e = fa__cpu_err_for("cpu attention");
        return FA__CPU_FAIL(c, &e, FA_ERR_BACKEND, "out of host memory for %lld keys", (long long)max_lk);
    }
    acc = q + D;
    logit = acc + D;

    for (b = 0; b < a->num_seqs; ++b) {
        fa__cpu_seq s;
        int32_t ns = fa__cpu_seq_splits(a, b), sp;
        int64_t i, kps = 0;
        s.b = b;
        s.t0 = a->cu_seqlens_q[b];
        s.lq = (int64_t)a->cu_seqlens_q[b + 1] - a->cu_seqlens_q[b];
        s.lk = a->seqused_k ? a->seqused_k[b] : a->cu_seqlens_k[b + 1] - a->cu_seqlens_k[b];
        if (ns == 0) continue;   /* no work planned for this sequence: its rows stay untouched */
        if (a->num_splits > 1) {   /* keys per split: whole blocks */
            int64_t unit = a->block_size > 0 ? a->block_size : 1;
            int64_t nblk = (s.lk + unit - 1) / unit;
            kps = ((nblk + ns - 1) / ns) * unit;
        }
        for (i = 0; i < s.lq; ++i) {
            const int64_t t = s.t0 + i;
            for (h = 0; h < Hq; ++h) {
                const int64_t qo = (int64_t)(h / qg) * a->q_group_stride +
                                   (int64_t)(h % qg) * a->q_head_stride + t * a->q_token_stride;
                const int64_t oo = t * a->out_token_stride + (int64_t)h * a->out_head_stride;
                const double qdesc = fa__cpu_q_descale(a, b, h);
                double lse;
                for (d = 0; d < D; ++d) q[d] = fa__cpu_load(c, a->q, qo + d, a->q_dtype) * qdesc;
                if (a->num_splits <= 1) {
                    lse = fa__cpu_row(c, a, &s, i, h, 0, s.lk, a->sinks != NULL, q, logit, acc);
                } else {
                    /* real partials into the workspace, then their combine (SEMANTICS section 9.4) */
                    double M = -INFINITY, sum = 0.0;
                    for (sp = 0; sp < ns; ++sp) {
                        int64_t j0 = sp * kps, j1 = j0 + kps;
                        float *so = a->split_out + (((int64_t)sp * T + t) * Hq + h) * D;
                        double l;
                        if (j0 > s.lk) j0 = s.lk;
                        if (j1 > s.lk) j1 = s.lk;
                        l = fa__cpu_row(c, a, &s, i, h, j0, j1, sp == 0 && a->sinks != NULL, q, logit, acc);
                        for (d = 0; d < D; ++d) so[d] = (float)acc[d];
                        a->split_lse[((int64_t)sp * Hq + h) * T + t] = (float)l;
                    }
                    for (sp = 0; sp < ns; ++sp) {
                        double l = (double)a->split_lse[((int64_t)sp * Hq + h) * T + t];
                        if (l > M && isfinite(l)) M = l;
                    }
                    if (M == -INFINITY) M = 0.0; /* every split empty */
                    for (sp = 0; sp < ns; ++sp) {
                        double l = (double)a->split_lse[((int64_t)sp * Hq + h) * T + t];
                        if (isfinite(l)) sum += exp(l - M);
                    }
                    lse = M + log(sum); /* -inf when every split is empty */
                    for (d = 0; d < D; ++d) acc[d] = 0.0;
                    if (lse != -INFINITY) {
                        for (sp = 0; sp < ns; ++sp) {
                            double l = (double)a->split_lse[((int64_t)sp * Hq + h) * T + t];
                            const float *so = a->split_out + (((int64_t)sp * T + t) * Hq + h) * D;
                            double w;
                            if (!isfinite(l)) continue; /* an empty split adds nothing */
                            w = exp(l - lse);
                            for (d = 0; d < D; ++d) acc[d] += w * (double)so[d];
                        }
                    }
                }
                for (d = 0; d < D; ++d) fa__cpu_store(a->out, oo + d, odt, acc[d]);
                if (a->lse) a->lse[(int64_t)h * a->lse_head_stride + t] = (float)lse;
            }
        }
    }
    free(q);
    return FA_OK;
}

/* ------------------------------------------------------------------------------------------ */
// >>merge

/* The checks of merge_states (the op and ops.check both call this): the dtype, the structural
   checks every backend makes (fa_bu_check_merge), every offset an int64. */
static fa_status fa__cpu_merge_validate(const fa__cpu_ctx *c, const fa_merge_args *a)
{
    const fa_bu_err e = fa__cpu_err_for("cpu merge_states");
    char d1[FA_BU_NAME_BUF + 16];

    if (!a) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "args is NULL");
    if (!fa_bu_is_act_dtype(a->dtype))
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "dtype %s is not f32, f16 or bf16",
                            fa__cpu_dt(a->dtype, d1));
    FA__CPU_TRY(c, fa_bu_check_merge(&e, a));
    if (a->num_tokens == 0) return FA_OK;
    {
        const int64_t ext[3] = {a->num_tokens, a->num_heads, a->head_size};
        const int64_t os[3] = {a->out_token_stride, a->out_head_stride, 1};
        const int64_t ps[3] = {a->prefix_token_stride, a->prefix_head_stride, 1};
        const int64_t ss[3] = {a->suffix_token_stride, a->suffix_head_stride, 1};
        const int64_t le[2] = {a->num_heads, a->num_tokens};
        const int64_t pl[2] = {a->prefix_lse_head_stride, 1}, sl[2] = {a->suffix_lse_head_stride, 1};
        const int64_t ol[2] = {a->out_lse_head_stride, 1};
        const size_t es = fa_bu_dtype_size(a->dtype);
        const char *bad = !fa__cpu_span_ok(3, ext, os, es)                           ? "out"
                          : !fa__cpu_span_ok(3, ext, ps, es)                         ? "prefix_out"
                          : !fa__cpu_span_ok(3, ext, ss, es)                         ? "suffix_out"
                          : !fa__cpu_span_ok(2, le, pl, sizeof(float))               ? "prefix_lse"
                          : !fa__cpu_span_ok(2, le, sl, sizeof(float))               ? "suffix_lse"
                          : a->out_lse && !fa__cpu_span_ok(2, le, ol, sizeof(float)) ? "out_lse"
                                                                                     : NULL;
        if (bad)
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "%s offsets overflow int64 (num_tokens %d, num_heads %d)", bad,
                                (int)a->num_tokens, (int)a->num_heads);
    }
    return FA_OK;
}

static fa_status fa__cpu_merge_states(void *ctx, const fa_merge_args *a)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const int armed = fa__cpu_fault_count(c, FA_OP_MERGE_STATES);
    fa_status st = fa__cpu_merge_validate(c, a);
    int32_t t, h, d;

    if (st != FA_OK) return st;
    if (armed) return fa__cpu_injected(c, FA_OP_MERGE_STATES);
    for (t = 0; t < a->num_tokens; ++t) {
        for (h = 0; h < a->num_heads; ++h) {
            float p = a->prefix_lse[(int64_t)h * a->prefix_lse_head_stride + t];
            float s = a->suffix_lse[(int64_t)h * a->suffix_lse_head_stride + t];
            int64_t oo = (int64_t)t * a->out_token_stride + (int64_t)h * a->out_head_stride;
            int64_t po = (int64_t)t * a->prefix_token_stride + (int64_t)h * a->prefix_head_stride;
            int64_t so = (int64_t)t * a->suffix_token_stride + (int64_t)h * a->suffix_head_stride;
            float M, wp, ws, sum, lse;
            if (!isfinite(p)) p = -INFINITY; /* +-inf (and NaN) = empty */
            if (!isfinite(s)) s = -INFINITY;
            M = p > s ? p : s;
            if (M == -INFINITY) { /* both empty */
                for (d = 0; d < a->head_size; ++d) fa__cpu_store(a->out, oo + d, a->dtype, 0.0);
                lse = -INFINITY;
            } else {
                wp = p == -INFINITY ? 0.0f : expf(p - M);
                ws = s == -INFINITY ? 0.0f : expf(s - M);
                sum = wp + ws;
                wp /= sum; /* the scales first, then the products */
                ws /= sum;
                for (d = 0; d < a->head_size; ++d) {
                    float v = 0.0f; /* an empty side is skipped, never multiplied by 0 */
                    if (p != -INFINITY) v += (float)fa__cpu_load(c, a->prefix_out, po + d, a->dtype) * wp;
                    if (s != -INFINITY) v += (float)fa__cpu_load(c, a->suffix_out, so + d, a->dtype) * ws;
                    fa__cpu_store(a->out, oo + d, a->dtype, (double)v);
                }
                lse = logf(sum) + M;
            }
            if (a->out_lse) a->out_lse[(int64_t)h * a->out_lse_head_stride + t] = lse;
        }
    }
    return FA_OK;
}

/* The checks of dcp_correct (the op and ops.check both call this): the dtype, the structural
   checks every backend makes (fa_bu_check_dcp_correct), every offset an int64. */
static fa_status fa__cpu_dcp_validate(const fa__cpu_ctx *c, const fa_dcp_correct_args *a)
{
    const fa_bu_err e = fa__cpu_err_for("cpu dcp_correct");
    char d1[FA_BU_NAME_BUF + 16];

    if (!a) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "args is NULL");
    if (!fa_bu_is_act_dtype(a->dtype))
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "dtype %s is not f32, f16 or bf16",
                            fa__cpu_dt(a->dtype, d1));
    FA__CPU_TRY(c, fa_bu_check_dcp_correct(&e, a));
    if (a->num_tokens == 0) return FA_OK;
    { /* lse_all [world_size, num_heads, num_tokens] packed; out [T, H, D] strided */
        const int64_t ext[3] = {a->num_tokens, a->num_heads, a->head_size};
        const int64_t os[3] = {a->out_token_stride, a->out_head_stride, 1};
        const int64_t le[3] = {a->world_size, a->num_heads, a->num_tokens};
        int64_t ls[3] = {0, 0, 1};
        const int lse_ok = fa__cpu_madd(&ls[0], a->num_heads, a->num_tokens) &&
                           (ls[1] = a->num_tokens, fa__cpu_span_ok(3, le, ls, sizeof(float)));
        if (!lse_ok || !fa__cpu_span_ok(3, ext, os, fa_bu_dtype_size(a->dtype)))
            return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG,
                                "%s offsets overflow int64 (world_size %d, num_tokens %d, "
                                "num_heads %d)",
                                lse_ok ? "out" : "lse_all", (int)a->world_size, (int)a->num_tokens,
                                (int)a->num_heads);
    }
    return FA_OK;
}

static fa_status fa__cpu_dcp_correct(void *ctx, const fa_dcp_correct_args *a)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const int armed = fa__cpu_fault_count(c, FA_OP_DCP_CORRECT);
    fa_status st = fa__cpu_dcp_validate(c, a);
    int32_t t, h, d, r;

    if (st != FA_OK) return st;
    if (armed) return fa__cpu_injected(c, FA_OP_DCP_CORRECT);
    for (t = 0; t < a->num_tokens; ++t) {
        for (h = 0; h < a->num_heads; ++h) {
            const int64_t T = a->num_tokens, H = a->num_heads;
            int64_t oo = (int64_t)t * a->out_token_stride + (int64_t)h * a->out_head_stride;
            float M = -INFINITY, sum = 0.0f, L, e, f;
            for (r = 0; r < a->world_size; ++r) {
                float l = a->lse_all[((int64_t)r * H + h) * T + t];
                if (isnan(l) || l == INFINITY) l = -INFINITY;
                if (l > M) M = l;
            }
            if (M == -INFINITY) M = 0.0f; /* every rank empty */
            for (r = 0; r < a->world_size; ++r) {
                float l = a->lse_all[((int64_t)r * H + h) * T + t];
                if (isnan(l) || l == INFINITY) l = -INFINITY;
                sum += expf(l - M);
            }
            L = M + logf(sum); /* -inf when every rank is empty */
            e = a->lse_all[((int64_t)a->rank * H + h) * T + t] - L;
            if (isnan(e) || e == INFINITY) e = -INFINITY;
            f = expf(e);
            for (d = 0; d < a->head_size; ++d) {
                /* a weight of 0 writes 0: an empty rank's garbage never survives as NaN */
                float v = f == 0.0f ? 0.0f : (float)fa__cpu_load(c, a->out, oo + d, a->dtype) * f;
                fa__cpu_store(a->out, oo + d, a->dtype, (double)v);
            }
            if (a->lse_out) a->lse_out[(int64_t)h * T + t] = L;
        }
    }
    return FA_OK;
}

/* ------------------------------------------------------------------------------------------ */
// >>memory

/* Fault injection: counts a copy / copy_2d call when a copy failure is armed; 1 when this call
   is the one that fails. */
static int fa__cpu_copy_fault(fa__cpu_ctx *c)
{
    return c->faults.copy_at > 0 && fa__cpu_inc(&c->faults.copies) == c->faults.copy_at;
}

static fa_status fa__cpu_copy(void *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const fa_bu_err e = fa__cpu_err_for("cpu copy");
    const int armed = fa__cpu_copy_fault(c);
    if ((int)kind < (int)FA_COPY_HOST_TO_DEVICE || (int)kind > (int)FA_COPY_DEVICE_TO_DEVICE)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "kind %d is unknown", (int)kind);
    if (armed)
        return FA__CPU_FAIL(c, &e, FA_ERR_BACKEND,
                            "injected failure at call %lld "
                            "(fa_cpu_backend_options.fail_copy_at)",
                            (long long)c->faults.copy_at);
    if (bytes == 0) return FA_OK;
    if (!dst || !src)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "%s is NULL (%zu bytes)", !dst ? "dst" : "src", bytes);
    memmove(dst, src, bytes);
    return FA_OK;
}

static fa_status fa__cpu_copy_2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                                 size_t width_bytes, size_t rows, fa_copy_kind kind)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const fa_bu_err e = fa__cpu_err_for("cpu copy_2d");
    const int armed = fa__cpu_copy_fault(c);
    size_t r;
    if ((int)kind < (int)FA_COPY_HOST_TO_DEVICE || (int)kind > (int)FA_COPY_DEVICE_TO_DEVICE)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "kind %d is unknown", (int)kind);
    if (armed)
        return FA__CPU_FAIL(c, &e, FA_ERR_BACKEND,
                            "injected failure at call %lld "
                            "(fa_cpu_backend_options.fail_copy_at)",
                            (long long)c->faults.copy_at);
    if (width_bytes == 0 || rows == 0) return FA_OK;
    if (!dst || !src) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "%s is NULL", !dst ? "dst" : "src");
    if (rows > 1 && (dpitch < width_bytes || spitch < width_bytes))
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "%s %zu is smaller than width %zu",
                            dpitch < width_bytes ? "dpitch" : "spitch",
                            dpitch < width_bytes ? dpitch : spitch, width_bytes);
    for (r = 0; r < rows; ++r) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width_bytes);
    return FA_OK;
}

static fa_status fa__cpu_fill(void *ctx, void *dst, size_t pitch, int value, size_t width_bytes, size_t rows)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const fa_bu_err e = fa__cpu_err_for("cpu fill");
    size_t r;
    if (width_bytes == 0 || rows == 0) return FA_OK;
    if (!dst) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "dst is NULL");
    if (rows > 1 && pitch < width_bytes)
        return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "pitch %zu is smaller than width %zu", pitch,
                            width_bytes);
    for (r = 0; r < rows; ++r) memset((char *)dst + r * pitch, value, width_bytes);
    return FA_OK;
}

#define FA__CPU_ALIGN 256u

/* Zeroed, 256-byte aligned; the malloc'ed base is stored just before the returned pointer. */
static fa_status fa__cpu_alloc(void *ctx, size_t bytes, void **ptr)
{
    fa__cpu_ctx *c = (fa__cpu_ctx *)ctx;
    const fa_bu_err e = fa__cpu_err_for("cpu alloc");
    size_t extra = FA__CPU_ALIGN + sizeof(void *);
    unsigned char *base, *p;
    if (!ptr) return FA__CPU_FAIL(c, &e, FA_ERR_INVALID_ARG, "ptr is NULL");
    *ptr = NULL;
    if (c->faults.alloc_at > 0 && fa__cpu_inc(&c->faults.allocs) == c->faults.alloc_at)
        return FA__CPU_FAIL(c, &e, FA_ERR_OUT_OF_MEMORY,
                            "injected failure at call %lld "
                            "(fa_cpu_backend_options.fail_alloc_at; %zu bytes)",
                            (long long)c->faults.alloc_at, bytes);
    if (bytes > (size_t)-1 - extra)
        return FA__CPU_FAIL(c, &e, FA_ERR_OUT_OF_MEMORY, "%zu bytes is too large", bytes);
    base = (unsigned char *)calloc(1, bytes + extra);
    if (!base) return FA__CPU_FAIL(c, &e, FA_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", bytes);
    p = base + sizeof(void *);
    p += (FA__CPU_ALIGN - (size_t)((uintptr_t)p % FA__CPU_ALIGN)) % FA__CPU_ALIGN;
    memcpy(p - sizeof(void *), &base, sizeof(void *));
    *ptr = p;
    return FA_OK;
}

static fa_status fa__cpu_free(void *ctx, void *ptr)
{
    void *base;
    (void)ctx;
    if (!ptr) return FA_OK;
    memcpy(&base, (unsigned char *)ptr - sizeof(void *), sizeof(void *));
    free(base);
    return FA_OK;
}

static fa_status fa__cpu_synchronize(void *ctx)
{
    (void)ctx; /* every op has finished when it returns */
    return FA_OK;
}

/* ------------------------------------------------------------------------------------------ */
// >>create

/* ops.check: the checks the op would make of args, without running it. */
static fa_status fa__cpu_check(void *ctx, fa_op op, const void *args)
{
    const fa__cpu_ctx *c = (const fa__cpu_ctx *)ctx;
    const fa_bu_err e = fa__cpu_err_for("cpu check");
    switch (op) {
    case FA_OP_RESHAPE_AND_CACHE: return fa__cpu_cache_validate(c, (const fa_cache_write_args *)args);
    case FA_OP_ATTENTION: return fa__cpu_attention_validate(c, (const fa_attn_args *)args);
    case FA_OP_MERGE_STATES: return fa__cpu_merge_validate(c, (const fa_merge_args *)args);
    case FA_OP_DCP_CORRECT: return fa__cpu_dcp_validate(c, (const fa_dcp_correct_args *)args);
    }
    return FA__CPU_FAIL(c, &e, FA_ERR_UNSUPPORTED, "op %d is unknown", (int)op);
}

/* The capability block. The CPU itself runs any head size that is a multiple of 8 up to 256, any
   positive block size and needs no tiles: these numbers reproduce the planner of the CUDA
   kernels as calibrated on the H200 (docs/perf.md; the constants the planner in flashattn.h
   held before backend API v2), so a plan made for the CPU backend is the plan the CUDA backend
   gets and the planner tests hold on either backend. */
enum {
    FA__CPU_TILE_LARGE = 128, /* prefill tile rows / keys at head_dim <= 128 */
    FA__CPU_TILE_SMALL = 64, /* ... above 128 */
    FA__CPU_DECODE_TILE_N = 32, /* keys per decode-tile step */
    FA__CPU_DECODE_CTAS_SMALL_HEAD = 6, /* decode tiles per SM at head_dim <= 128 */
    FA__CPU_DECODE_CTAS_LARGE_HEAD = 3, /* ... above 128 (the tile's shared memory) */
    FA__CPU_BLOCK_SIZE_MULTIPLE = 1, /* any block size */
    FA__CPU_HEAD_SIZE_MULTIPLE = 8,
    FA__CPU_DECODE_MAX_ROWS = 16, /* max_q * (Hq / Hkv) <= 16: the packed decode tile */
    FA__CPU_MAX_SPLITS = 128,
    /* 1: no rule of its own beyond C's: the CPU reads and writes elements through pointers to
       their type, so data pointers need only the natural alignment of their dtype (which every
       pointer to such elements has) */
    FA__CPU_ALIGN_BYTES = 1
};
static const int32_t fa__cpu_dims[] = {32, 64, 96, 128, 192, 256};
#define FA__CPU_DECODE_STEP_US 1.6 /* one decode step at head_dim 128, microseconds */
#define FA__CPU_DECODE_STEP_SMALL 0.8 /* its factor at head_dim <= 64 */
#define FA__CPU_DECODE_STEP_LARGE 1.3 /* its factor above 128 */
#define FA__CPU_SM_BYTES_PER_US 32768.0 /* one SM's share of the H200's bandwidth, 32 KiB/us */
#define FA__CPU_CTA_US 0.008
#define FA__CPU_COMBINE_US 6.0
#define FA__CPU_COMBINE_US_PER_SPLIT 0.2

static void fa__cpu_fill_caps(fa_backend_caps *caps)
{
    int32_t i;
    memset(caps, 0, sizeof *caps);
    caps->num_dims = (int32_t)(sizeof fa__cpu_dims / sizeof fa__cpu_dims[0]);
    for (i = 0; i < caps->num_dims; ++i) {
        fa_kernel_dim *k = &caps->dims[i];
        const int32_t hd = fa__cpu_dims[i];
        k->head_dim = hd;
        k->prefill_tile_m = hd <= 128 ? FA__CPU_TILE_LARGE : FA__CPU_TILE_SMALL;
        k->prefill_tile_n = k->prefill_tile_m;
        k->decode_tile_n = FA__CPU_DECODE_TILE_N;
        k->decode_ctas_per_sm = hd <= 128 ? FA__CPU_DECODE_CTAS_SMALL_HEAD : FA__CPU_DECODE_CTAS_LARGE_HEAD;
        k->decode_step_us = FA__CPU_DECODE_STEP_US * (hd <= 64    ? FA__CPU_DECODE_STEP_SMALL
                                                      : hd <= 128 ? 1.0
                                                                  : FA__CPU_DECODE_STEP_LARGE);
    }
    caps->act_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16) | (1u << FA_DTYPE_F32);
    caps->cache_dtypes = caps->act_dtypes | (1u << FA_DTYPE_FP8_E4M3) | (1u << FA_DTYPE_FP8_E5M2);
    caps->block_size_multiple = FA__CPU_BLOCK_SIZE_MULTIPLE;
    caps->head_size_multiple = FA__CPU_HEAD_SIZE_MULTIPLE;
    caps->decode_max_rows = FA__CPU_DECODE_MAX_ROWS;
    caps->max_splits = FA__CPU_MAX_SPLITS;
    caps->align_bytes = FA__CPU_ALIGN_BYTES;
    caps->sm_bytes_per_us = FA__CPU_SM_BYTES_PER_US;
    caps->cta_us = FA__CPU_CTA_US;
    caps->combine_us = FA__CPU_COMBINE_US;
    caps->combine_us_per_split = FA__CPU_COMBINE_US_PER_SPLIT;
}

static void fa__cpu_arm(fa__cpu_ctx *c, const fa_cpu_backend_options *o)
{
    c->faults.alloc_at = o ? o->fail_alloc_at : 0;
    c->faults.copy_at = o ? o->fail_copy_at : 0;
    c->faults.op = o ? o->fail_op : FA_OP_RESHAPE_AND_CACHE;
    c->faults.op_at = o ? o->fail_op_at : 0;
    fa__cpu_store_counter(&c->faults.allocs, 0);
    fa__cpu_store_counter(&c->faults.copies, 0);
    fa__cpu_store_counter(&c->faults.op_calls, 0);
}

fa_status fa_cpu_backend_create_ex(const fa_cpu_backend_options *opts, fa_backend **out)
{
    fa__cpu_backend *cb;
    unsigned i;
    if (!out) return FA_ERR_INVALID_ARG;
    *out = NULL;
    cb = (fa__cpu_backend *)calloc(1, sizeof *cb);
    if (!cb) return FA_ERR_OUT_OF_MEMORY;
    cb->ctx.id = fa__cpu_inc(&fa__cpu_next_id);
    fa__cpu_arm(&cb->ctx, opts);
    for (i = 0; i < 65536u; ++i) cb->ctx.half_table[i] = (float)fa__cpu_decode(i, &fa__cpu_f16);
    for (i = 0; i < 256u; ++i) {
        cb->ctx.e4m3_table[i] = (float)fa__cpu_decode(i, &fa__cpu_e4m3);
        cb->ctx.e5m2_table[i] = (float)fa__cpu_decode(i, &fa__cpu_e5m2);
    }
    cb->be.api_version = FA_BACKEND_API_VERSION;
    cb->be.name = "cpu";
    cb->be.ops.reshape_and_cache = fa__cpu_reshape_and_cache;
    cb->be.ops.attention = fa__cpu_attention;
    cb->be.ops.merge_states = fa__cpu_merge_states;
    cb->be.ops.dcp_correct = fa__cpu_dcp_correct;
    cb->be.ops.copy = fa__cpu_copy;
    cb->be.ops.fill = fa__cpu_fill;
    cb->be.ops.alloc = fa__cpu_alloc;
    cb->be.ops.free = fa__cpu_free;
    cb->be.ops.synchronize = fa__cpu_synchronize;
    cb->be.ops.last_error = fa__cpu_last_error;
    cb->be.ops.copy_2d = fa__cpu_copy_2d;
    cb->be.ops.check = fa__cpu_check;
    cb->be.ctx = &cb->ctx;
    strcpy(cb->be.info.name, "cpu");
    cb->be.info.cc_major = 0;
    cb->be.info.cc_minor = 0;
    cb->be.info.num_sms = 132; /* nominal, for planning */
    cb->be.info.smem_per_block = 0;
    cb->be.info.smem_per_sm = 0;
    fa__cpu_fill_caps(&cb->be.caps);
    *out = &cb->be;
    return FA_OK;
}

fa_status fa_cpu_backend_create(fa_backend **out) { return fa_cpu_backend_create_ex(NULL, out); }

fa_status fa_cpu_backend_set_options(fa_backend *be, const fa_cpu_backend_options *opts)
{
    if (!be || !be->ctx || be->ops.alloc != fa__cpu_alloc) return FA_ERR_INVALID_ARG;
    fa__cpu_arm((fa__cpu_ctx *)be->ctx, opts);
    return FA_OK;
}

void fa_cpu_backend_destroy(fa_backend *be)
{
    if (be && fa__cpu_err_owner == ((const fa__cpu_ctx *)be->ctx)->id)
        fa__cpu_err_owner = 0; /* this thread's message of it goes with it */
    free(be); /* be is the first member of its fa__cpu_backend allocation */
}
