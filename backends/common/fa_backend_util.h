/* fa_backend_util.h - helpers every flashattn backend repeats: dtype size and name, one error
   helper, and the structural checks of the op argument structs (fa_cache_write_args,
   fa_attn_args, fa_merge_args, fa_dcp_correct_args).

   C99, every function `static inline`; valid in C (.c) and C++/CUDA (.cu) files. Include it
   after flashattn.h. Not installed: backends compile it in.

   A structural check is what any backend must refuse whatever its kernels are: NULL pointers a
   non-empty call needs, sizes out of range, negative strides, dtype combinations that mean
   nothing. What one backend's kernels cannot do (alignment, tile shared memory, pruned head
   dims, a block-size multiple other than 1) stays in that backend, after these checks.

   Errors: each check writes "<op>: <message naming the field and its value>" into the
   caller's buffer (fa_bu_err) and returns the status (FA_ERR_INVALID_ARG unless noted);
   FA_OK writes nothing.
*/
#ifndef FA_BACKEND_UTIL_H
#define FA_BACKEND_UTIL_H

#include "flashattn.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_BU_HD __host__ __device__ /* also callable from kernels */
#else
#define FA_BU_HD
#endif

/* The mask rule (SEMANTICS §3.2), one spelling for every backend: key j of a sequence of lk
   keys may be attended by the query row whose diagonal key is diag_key (bottom-right
   alignment: row i of lq queries sits at key i + lk - lq) when j is in [0, lk) and its offset
   d = j - diag_key is in [-wl, wr]; a bound of -1 is unbounded, a causal call passes wr = 0. A
   new mask variant changes this rule and the planner's key spans (fa__window_keys). The macro
   is the rule in the caller's integer type (kernels keep int32 keys in their inner loops); the
   function is it in int64. */
#define FA_BU_KEY_ALLOWED(j, diag_key, lk, wl, wr) \
    ((j) >= 0 && (j) < (lk) && ((wl) < 0 || (j) - (diag_key) >= -(wl)) && \
     ((wr) < 0 || (j) - (diag_key) <= (wr)))
FA_BU_HD static inline int fa_bu_key_allowed(int64_t j, int64_t diag_key, int64_t lk, int32_t wl, int32_t wr)
{
    return FA_BU_KEY_ALLOWED(j, diag_key, lk, (int64_t)wl, (int64_t)wr);
}

/* Head sizes every op accepts: multiples of FA_BU_HEAD_SIZE_MULTIPLE in
   [FA_BU_HEAD_SIZE_MIN, FA_BU_HEAD_SIZE_MAX] (a backend may compile fewer widths). */
#define FA_BU_HEAD_SIZE_MULTIPLE FA_HEAD_SIZE_MULTIPLE /* flashattn.h's, one source */
#define FA_BU_HEAD_SIZE_MIN FA_HEAD_SIZE_MIN
#define FA_BU_HEAD_SIZE_MAX FA_HEAD_SIZE_MAX
/* Heads of one call: [1, FA_BU_MAX_HEADS] (a CUDA grid dimension). */
#define FA_BU_MAX_HEADS 65535

#if defined(__GNUC__) || defined(__clang__)
#define FA_BU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else  /* !__GNUC__ && !__clang__ */
#define FA_BU_PRINTF(f, a)
#endif /* __GNUC__ || __clang__ */

/* Bytes of one element; 0 for a value that is no fa_dtype. */
static inline size_t fa_bu_dtype_size(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32:
    case FA_DTYPE_I32: return 4;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: return 1;
    case FA_DTYPE_I64: return 8;
    default: return 0;
    }
}

/* Name of a dtype ("bf16", "fp8_e4m3", ...); an unknown value is written into buf as
   "dtype 9" (buf holds FA_BU_NAME_BUF bytes) and buf is returned. */
#define FA_BU_NAME_BUF 24
static inline const char *fa_bu_dtype_name(fa_dtype t, char buf[FA_BU_NAME_BUF])
{
    switch (t) {
    case FA_DTYPE_BF16: return "bf16";
    case FA_DTYPE_F16: return "f16";
    case FA_DTYPE_F32: return "f32";
    case FA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case FA_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case FA_DTYPE_I32: return "i32";
    case FA_DTYPE_I64: return "i64";
    default: snprintf(buf, FA_BU_NAME_BUF, "dtype %d", (int)t); return buf;
    }
}

/* 1 for the float dtypes activations come in (f32, f16, bf16). */
static inline int fa_bu_is_act_dtype(fa_dtype t)
{
    return t == FA_DTYPE_F32 || t == FA_DTYPE_F16 || t == FA_DTYPE_BF16;
}

static inline int fa_bu_is_fp8(fa_dtype t) { return t == FA_DTYPE_FP8_E4M3 || t == FA_DTYPE_FP8_E5M2; }

/* Where a failure's message goes: buf[size] gets "<op>: <message>". */
typedef struct fa_bu_err {
    char *buf;                        /* NULL-able: then only the status is returned */
    size_t size;
    const char *op;                   /* "reshape_and_cache", "cuda attention", ... */
} fa_bu_err;

static inline fa_bu_err fa_bu_err_make(char *buf, size_t size, const char *op)
{
    fa_bu_err e;
    e.buf = buf;
    e.size = size;
    e.op = op;
    return e;
}

/* Formats "<op>: <fmt ...>" into e's buffer and returns st. */
FA_BU_PRINTF(3, 4)
static inline fa_status fa_bu_fail(const fa_bu_err *e, fa_status st, const char *fmt, ...)
{
    if (e != NULL && e->buf != NULL && e->size > 0) {
        int n = e->op != NULL ? snprintf(e->buf, e->size, "%s: ", e->op) : 0;
        if (n < 0) n = 0;
        if ((size_t)n < e->size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->buf + n, e->size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return st;
}

/* ---- field checks (each names the field) ------------------------------------------------ */

static inline fa_status fa_bu_check_ptr(const fa_bu_err *e, const void *p, const char *name)
{
    return p != NULL ? FA_OK : fa_bu_fail(e, FA_ERR_INVALID_ARG, "%s is NULL", name);
}

static inline fa_status fa_bu_check_stride(const fa_bu_err *e, int64_t v, const char *name)
{
    return v >= 0 ? FA_OK : fa_bu_fail(e, FA_ERR_INVALID_ARG, "%s %lld is negative", name, (long long)v);
}

static inline fa_status fa_bu_check_head_size(const fa_bu_err *e, int32_t head_size)
{
    if (head_size % FA_BU_HEAD_SIZE_MULTIPLE != 0 || head_size < FA_BU_HEAD_SIZE_MIN ||
        head_size > FA_BU_HEAD_SIZE_MAX)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "head_size %d is not a multiple of %d in [%d, %d]",
                          (int)head_size, FA_BU_HEAD_SIZE_MULTIPLE, FA_BU_HEAD_SIZE_MIN, FA_BU_HEAD_SIZE_MAX);
    return FA_OK;
}

static inline fa_status fa_bu_check_heads(const fa_bu_err *e, int32_t n, const char *name)
{
    if (n < 1 || n > FA_BU_MAX_HEADS)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "%s %d is outside [1, %d]", name, (int)n, FA_BU_MAX_HEADS);
    return FA_OK;
}

/* positive and finite (!(x > 0) also catches NaN; x - x != 0 catches +inf) */
static inline fa_status fa_bu_check_scale(const fa_bu_err *e, float x, const char *name)
{
    if (!(x > 0.0f) || x - x != 0.0f)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "%s %g must be positive and finite", name, (double)x);
    return FA_OK;
}

#define FA_BU_TRY(expr) \
    do { \
        fa_status fa_bu_st_ = (expr); \
        if (fa_bu_st_ != FA_OK) return fa_bu_st_; \
    } while (0)

/* ---- op argument structs ------------------------------------------------------------------ */

/* reshape_and_cache. kv_dtype: f32 / f16 / bf16; cache_dtype: kv_dtype (a plain copy) or an
   fp8 format (FA_ERR_UNSUPPORTED otherwise) with positive finite k/v scales; num_blocks > 0;
   pointers and token strides (>= Hkv * D) only when num_tokens > 0. */
static inline fa_status fa_bu_check_cache_write(const fa_bu_err *e, const fa_cache_write_args *a)
{
    char n1[FA_BU_NAME_BUF], n2[FA_BU_NAME_BUF];
    int64_t row;
    if (a == NULL) return fa_bu_fail(e, FA_ERR_INVALID_ARG, "args is NULL");
    if (a->num_tokens < 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_tokens %d is negative", (int)a->num_tokens);
    FA_BU_TRY(fa_bu_check_heads(e, a->num_heads_kv, "num_heads_kv"));
    FA_BU_TRY(fa_bu_check_head_size(e, a->head_size));
    if (a->block_size < 1)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "block_size %d must be >= 1", (int)a->block_size);
    if (a->num_blocks <= 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_blocks %lld must be > 0", (long long)a->num_blocks);
    if (!fa_bu_is_act_dtype(a->kv_dtype))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "kv_dtype %s is not f32, f16 or bf16",
                          fa_bu_dtype_name(a->kv_dtype, n1));
    if (a->cache_dtype != a->kv_dtype && !fa_bu_is_fp8(a->cache_dtype))
        return fa_bu_fail(e, FA_ERR_UNSUPPORTED,
                          "cache_dtype %s is neither kv_dtype %s nor fp8_e4m3 / fp8_e5m2",
                          fa_bu_dtype_name(a->cache_dtype, n1), fa_bu_dtype_name(a->kv_dtype, n2));
    if (fa_bu_is_fp8(a->cache_dtype)) {
        FA_BU_TRY(fa_bu_check_scale(e, a->k_scale, "k_scale"));
        FA_BU_TRY(fa_bu_check_scale(e, a->v_scale, "v_scale"));
    }
    FA_BU_TRY(fa_bu_check_stride(e, a->cache_block_stride, "cache_block_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->cache_row_stride, "cache_row_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->cache_head_stride, "cache_head_stride"));
    if (a->num_tokens == 0) return FA_OK;
    FA_BU_TRY(fa_bu_check_ptr(e, a->key, "key"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->value, "value"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->key_cache, "key_cache"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->value_cache, "value_cache"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->slot_mapping, "slot_mapping"));
    row = (int64_t)a->num_heads_kv * a->head_size;
    if (a->num_tokens > 1 && a->key_token_stride < row)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                          "key_token_stride %lld is smaller than num_heads_kv * head_size = %lld",
                          (long long)a->key_token_stride, (long long)row);
    if (a->num_tokens > 1 && a->value_token_stride < row)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                          "value_token_stride %lld is smaller than num_heads_kv * head_size = %lld",
                          (long long)a->value_token_stride, (long long)row);
    return FA_OK;
}

/* The dtypes of an attention call: q_dtype f32/f16/bf16 with kv_dtype == q_dtype or fp8, or
   q_dtype fp8_e4m3 (a quantised query) with kv_dtype fp8_e4m3 and out_dtype f32/f16/bf16. */
static inline fa_status fa_bu_check_attn_dtypes(const fa_bu_err *e, const fa_attn_args *a)
{
    char n1[FA_BU_NAME_BUF], n2[FA_BU_NAME_BUF];
    if (a->q_dtype == FA_DTYPE_FP8_E4M3) {
        if (a->kv_dtype != FA_DTYPE_FP8_E4M3)
            return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                              "q_dtype fp8_e4m3 needs kv_dtype fp8_e4m3 (kv_dtype is %s)",
                              fa_bu_dtype_name(a->kv_dtype, n1));
        if (!fa_bu_is_act_dtype(a->out_dtype))
            return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                              "out_dtype %s (q_dtype fp8_e4m3) is not f32, f16 or bf16",
                              fa_bu_dtype_name(a->out_dtype, n1));
        return FA_OK;
    }
    if (!fa_bu_is_act_dtype(a->q_dtype))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "q_dtype %s is not f32, f16, bf16 or fp8_e4m3",
                          fa_bu_dtype_name(a->q_dtype, n1));
    if (a->kv_dtype != a->q_dtype && !fa_bu_is_fp8(a->kv_dtype))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "kv_dtype %s is neither q_dtype %s nor fp8_e4m3 / fp8_e5m2",
                          fa_bu_dtype_name(a->kv_dtype, n1), fa_bu_dtype_name(a->q_dtype, n2));
    return FA_OK;
}

/* The call's scalars, the same on every backend: softmax_scale finite (any sign: 0 is uniform
   attention), softcap finite and >= 0 (0 = off), and with an fp8 cache whose descale pointer is
   NULL a positive finite k_scale / v_scale. */
static inline fa_status fa_bu_check_attn_scalars(const fa_bu_err *e, const fa_attn_args *a)
{
    if (a->softmax_scale - a->softmax_scale != 0.0f)   /* NaN or +-inf */
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "softmax_scale %g is not finite", (double)a->softmax_scale);
    if (!(a->softcap >= 0.0f) || a->softcap - a->softcap != 0.0f)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "softcap %g is not finite and >= 0", (double)a->softcap);
    if (fa_bu_is_fp8(a->kv_dtype)) {
        if (a->k_descale == NULL)
            FA_BU_TRY(fa_bu_check_scale(e, a->k_scale, "k_scale (fp8 cache, no k_descale)"));
        if (a->v_descale == NULL)
            FA_BU_TRY(fa_bu_check_scale(e, a->v_scale, "v_scale (fp8 cache, no v_descale)"));
    }
    return FA_OK;
}

/* attention. Heads (Hq a multiple of Hkv; q_head_group 0 or a divisor of Hq that is a multiple
   of Hkv), head_size, the dtypes (fa_bu_check_attn_dtypes; a 16-bit or f32 query reads K/V in
   its dtype or fp8); exactly one of
   seqused_k (paged: block_table, block_size a positive multiple of block_size_multiple,
   num_blocks > 0) and cu_seqlens_k (dense: num_keys >= 0); strides >= 0;
   q/k/v/out/cu_seqlens_q when the call is not empty; split_out/split_lse when num_splits > 1;
   work_counters NULL or 4-byte aligned (never dereferenced here). */
static inline fa_status fa_bu_check_attention(const fa_bu_err *e, const fa_attn_args *a,
                                              int32_t block_size_multiple)
{
    const int paged = a != NULL && a->cu_seqlens_k == NULL;
    if (a == NULL) return fa_bu_fail(e, FA_ERR_INVALID_ARG, "args is NULL");
    if (block_size_multiple < 1) block_size_multiple = 1;
    if (a->num_seqs < 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_seqs %d is negative", (int)a->num_seqs);
    if (a->num_tokens < 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_tokens %d is negative", (int)a->num_tokens);
    FA_BU_TRY(fa_bu_check_heads(e, a->num_heads_q, "num_heads_q"));
    FA_BU_TRY(fa_bu_check_heads(e, a->num_heads_kv, "num_heads_kv"));
    if (a->num_heads_q % a->num_heads_kv != 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_heads_q %d is not a multiple of num_heads_kv %d",
                          (int)a->num_heads_q, (int)a->num_heads_kv);
    if (a->q_head_group < 0 || (a->q_head_group > 0 && (a->num_heads_q % a->q_head_group != 0 ||
                                                        a->q_head_group % a->num_heads_kv != 0)))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                          "q_head_group %d must divide num_heads_q %d and be a multiple of num_heads_kv %d",
                          (int)a->q_head_group, (int)a->num_heads_q, (int)a->num_heads_kv);
    FA_BU_TRY(fa_bu_check_head_size(e, a->head_size));
    FA_BU_TRY(fa_bu_check_attn_dtypes(e, a));
    FA_BU_TRY(fa_bu_check_attn_scalars(e, a));
    if (paged && a->seqused_k == NULL)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                          "seqused_k and cu_seqlens_k are both NULL (one is required)");
    if (!paged && a->seqused_k != NULL)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                          "seqused_k and cu_seqlens_k are both set (they are exclusive)");
    if (paged) {
        if (a->block_table == NULL)
            return fa_bu_fail(e, FA_ERR_INVALID_ARG,
                              "block_table is NULL (paged attention: seqused_k is set)");
        if (a->block_size <= 0 || a->block_size % block_size_multiple != 0)
            return fa_bu_fail(e, FA_ERR_INVALID_ARG, "block_size %d is not a positive multiple of %d",
                              (int)a->block_size, (int)block_size_multiple);
        if (a->num_blocks <= 0)
            return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_blocks %lld must be > 0 for a paged call",
                              (long long)a->num_blocks);
        FA_BU_TRY(fa_bu_check_stride(e, a->block_table_stride, "block_table_stride"));
        FA_BU_TRY(fa_bu_check_stride(e, a->k_block_stride, "k_block_stride"));
        FA_BU_TRY(fa_bu_check_stride(e, a->v_block_stride, "v_block_stride"));
    } else if (a->num_keys < 0) {
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_keys %lld is negative (dense: the rows of k and v)",
                          (long long)a->num_keys);
    }
    FA_BU_TRY(fa_bu_check_stride(e, a->q_token_stride, "q_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->q_head_stride, "q_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->q_group_stride, "q_group_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->out_token_stride, "out_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->out_head_stride, "out_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->k_row_stride, "k_row_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->k_head_stride, "k_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->v_row_stride, "v_row_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->v_head_stride, "v_head_stride"));
    if (a->lse != NULL) FA_BU_TRY(fa_bu_check_stride(e, a->lse_head_stride, "lse_head_stride"));
    if (a->num_splits > 1 && (a->split_out == NULL || a->split_lse == NULL))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_splits %d needs split_out and split_lse (%s is NULL)",
                          (int)a->num_splits, a->split_out == NULL ? "split_out" : "split_lse");
    if (((uintptr_t)a->work_counters & 3u) != 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "work_counters %p is not 4-byte aligned (int32)",
                          (void *)a->work_counters);
    if (a->num_tokens == 0 || a->num_seqs == 0) return FA_OK;
    FA_BU_TRY(fa_bu_check_ptr(e, a->q, "q"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->k, "k"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->v, "v"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->out, "out"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->cu_seqlens_q, "cu_seqlens_q"));
    return FA_OK;
}

/* Rows of merge_states / dcp_correct: dtype f32/f16/bf16, num_tokens >= 0, heads, head_size. */
static inline fa_status fa_bu_check_rows(const fa_bu_err *e, fa_dtype dtype, int32_t num_tokens,
                                         int32_t num_heads, int32_t head_size)
{
    char n1[FA_BU_NAME_BUF];
    if (!fa_bu_is_act_dtype(dtype))
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "dtype %s is not f32, f16 or bf16",
                          fa_bu_dtype_name(dtype, n1));
    if (num_tokens < 0)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "num_tokens %d is negative", (int)num_tokens);
    FA_BU_TRY(fa_bu_check_heads(e, num_heads, "num_heads"));
    return fa_bu_check_head_size(e, head_size);
}

static inline fa_status fa_bu_check_merge(const fa_bu_err *e, const fa_merge_args *a)
{
    if (a == NULL) return fa_bu_fail(e, FA_ERR_INVALID_ARG, "args is NULL");
    FA_BU_TRY(fa_bu_check_rows(e, a->dtype, a->num_tokens, a->num_heads, a->head_size));
    FA_BU_TRY(fa_bu_check_stride(e, a->out_token_stride, "out_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->out_head_stride, "out_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->prefix_token_stride, "prefix_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->prefix_head_stride, "prefix_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->suffix_token_stride, "suffix_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->suffix_head_stride, "suffix_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->prefix_lse_head_stride, "prefix_lse_head_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->suffix_lse_head_stride, "suffix_lse_head_stride"));
    if (a->out_lse != NULL) FA_BU_TRY(fa_bu_check_stride(e, a->out_lse_head_stride, "out_lse_head_stride"));
    if (a->num_tokens == 0) return FA_OK;
    FA_BU_TRY(fa_bu_check_ptr(e, a->out, "out"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->prefix_out, "prefix_out"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->suffix_out, "suffix_out"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->prefix_lse, "prefix_lse"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->suffix_lse, "suffix_lse"));
    return FA_OK;
}

static inline fa_status fa_bu_check_dcp_correct(const fa_bu_err *e, const fa_dcp_correct_args *a)
{
    if (a == NULL) return fa_bu_fail(e, FA_ERR_INVALID_ARG, "args is NULL");
    FA_BU_TRY(fa_bu_check_rows(e, a->dtype, a->num_tokens, a->num_heads, a->head_size));
    if (a->world_size < 1)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "world_size %d must be >= 1", (int)a->world_size);
    if (a->rank < 0 || a->rank >= a->world_size)
        return fa_bu_fail(e, FA_ERR_INVALID_ARG, "rank %d is outside [0, world_size %d)", (int)a->rank,
                          (int)a->world_size);
    FA_BU_TRY(fa_bu_check_stride(e, a->out_token_stride, "out_token_stride"));
    FA_BU_TRY(fa_bu_check_stride(e, a->out_head_stride, "out_head_stride"));
    if (a->num_tokens == 0) return FA_OK;
    FA_BU_TRY(fa_bu_check_ptr(e, a->out, "out"));
    FA_BU_TRY(fa_bu_check_ptr(e, a->lse_all, "lse_all"));
    return FA_OK;
}

#endif /* FA_BACKEND_UTIL_H */
