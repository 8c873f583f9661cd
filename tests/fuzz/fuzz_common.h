/* fuzz_common.h - shared helpers of the flashattn libFuzzer targets (tests/fuzz/fuzz_*.c).

   - fz_reader: turns the fuzz input into arguments. Every integer read first takes a selector
     byte, so extreme values (0, +-1, INT32_MIN/MAX, 2^31-1, near-max, powers of two, multiples
     of 16, raw bytes) are reachable from a few bytes. An exhausted input reads as zeros.
   - fz_buf: an output buffer with guard bytes (canaries) on both sides and a snapshot, so a
     target can check "no write outside the buffer" after every call and "nothing written" when
     the call returns an error.
   - FZ_CHECK: aborts with __builtin_trap() so libFuzzer (or the plain replay driver) reports it.
   - fz_check_status: the error contract: a status in range, a non-empty fa_last_error() naming
     the function on error, an empty one on FA_OK.

   FA_FUZZ_SKIP_KNOWN (default 1): inputs of classes with a known, reported bug that the lead is
   fixing in flashattn.h are skipped (each skip says which bug). Build with
   -DFA_FUZZ_SKIP_KNOWN=0 to fuzz them anyway. */
#ifndef FA_FUZZ_COMMON_H
#define FA_FUZZ_COMMON_H

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

#ifndef FA_FUZZ_SKIP_KNOWN
#define FA_FUZZ_SKIP_KNOWN 1
#endif

#define FZ_CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz: invariant failed: %s (%s:%d)\n  fa_last_error: \"%s\"\n", #cond, \
                    __FILE__, __LINE__, fa_last_error()); \
            fflush(stderr); \
            __builtin_trap(); \
        } \
    } while (0)

/* ---------------------------------------------------------------------------------------- */
/* input reader */

typedef struct fz_reader {
    const uint8_t *p;
    size_t n, i;
} fz_reader;

static inline void fz_init(fz_reader *r, const uint8_t *data, size_t size)
{
    r->p = data;
    r->n = size;
    r->i = 0;
}

static inline uint8_t fz_u8(fz_reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static inline uint64_t fz_raw(fz_reader *r, int bytes)
{
    uint64_t v = 0;
    int k;
    for (k = 0; k < bytes; ++k) v |= (uint64_t)fz_u8(r) << (8 * k);
    return v;
}

static inline int fz_bool(fz_reader *r) { return fz_u8(r) & 1; }

/* An int32 from a selector byte; every extreme is one or two bytes away. */
static inline int32_t fz_i32(fz_reader *r)
{
    uint8_t sel = fz_u8(r);
    uint8_t b;
    switch (sel % 16) {
    case 0: return 0;
    case 1: return 1;
    case 2: return -1;
    case 3: return INT32_MAX;
    case 4: return INT32_MIN;
    case 5: return INT32_MAX - (int32_t)fz_u8(r);
    case 6: return INT32_MIN + (int32_t)fz_u8(r);
    case 7: return (int32_t)(uint32_t)fz_raw(r, 4);
    case 8: b = fz_u8(r); return (int32_t)((uint32_t)1 << (b % 31));
    case 9: return 16 * (int32_t)fz_u8(r);
    case 10: return -(int32_t)fz_u8(r);
    case 11: return (int32_t)(uint16_t)fz_raw(r, 2);
    case 12: b = fz_u8(r); return (int32_t)((uint32_t)1 << (b % 31)) - 1;
    default: return (int32_t)fz_u8(r); /* small, the common case */
    }
}

/* An int64 from a selector byte (adds the 2^31 / 2^32 / INT64 edges). */
static inline int64_t fz_i64(fz_reader *r)
{
    uint8_t sel = fz_u8(r);
    uint8_t b;
    switch (sel % 16) {
    case 0: return 0;
    case 1: return 1;
    case 2: return -1;
    case 3: return INT64_MAX;
    case 4: return INT64_MIN;
    case 5: return (int64_t)INT32_MAX;
    case 6: return (int64_t)INT32_MAX + 1;
    case 7: return (int64_t)UINT32_MAX + (int64_t)fz_u8(r) - 128;
    case 8: b = fz_u8(r); return (int64_t)((uint64_t)1 << (b % 63));
    case 9: return (int64_t)fz_raw(r, 8);
    case 10: return INT64_MAX - (int64_t)fz_u8(r);
    case 11: return (int64_t)INT32_MIN - (int64_t)fz_u8(r);
    default: return (int64_t)fz_i32(r);
    }
}

/* A value in [lo, hi] (lo <= hi, small ranges). */
static inline int32_t fz_range(fz_reader *r, int32_t lo, int32_t hi)
{
    uint32_t span = (uint32_t)((int64_t)hi - lo + 1);
    return (int32_t)(lo + (int64_t)((uint32_t)fz_raw(r, 2) % span));
}

/* Mostly a small value in [lo, hi]; one time in 8 any int32 (extremes included). */
static inline int32_t fz_small_or_any(fz_reader *r, int32_t lo, int32_t hi)
{
    if ((fz_u8(r) & 7) == 0) return fz_i32(r);
    return fz_range(r, lo, hi);
}

/* A float: mostly moderate finite values, sometimes 0, negative, huge, inf or NaN. */
static inline float fz_float(fz_reader *r)
{
    uint8_t sel = fz_u8(r);
    switch (sel % 12) {
    case 0: return 0.0f;
    case 1: return -1.0f;
    case 2: return INFINITY;
    case 3: return NAN;
    case 4: return 3.0e38f;
    case 5: return 1.0e-40f;
    case 6: {
        uint32_t u = (uint32_t)fz_raw(r, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return (float)fz_u8(r) / 32.0f; /* [0, 8) */
    }
}

/* ---------------------------------------------------------------------------------------- */
/* guarded buffers */

#define FZ_GUARD 64
#define FZ_GUARD_BYTE 0xA5
#define FZ_FILL_BYTE 0xCD

typedef struct fz_buf {
    uint8_t *base;   /* guard | body | guard */
    uint8_t *snap;   /* copy of the body at fz_snap */
    size_t bytes;
} fz_buf;

/* The body is filled with FZ_FILL_BYTE (an int32 0xCDCDCDCD, a recognisable garbage). */
static inline void *fz_buf_new(fz_buf *b, size_t bytes)
{
    b->bytes = bytes;
    b->base = (uint8_t *)malloc(bytes + 2 * FZ_GUARD);
    b->snap = (uint8_t *)malloc(bytes ? bytes : 1);
    FZ_CHECK(b->base != NULL && b->snap != NULL);
    memset(b->base, FZ_GUARD_BYTE, FZ_GUARD);
    memset(b->base + FZ_GUARD, FZ_FILL_BYTE, bytes);
    memset(b->base + FZ_GUARD + bytes, FZ_GUARD_BYTE, FZ_GUARD);
    memcpy(b->snap, b->base + FZ_GUARD, bytes);
    return b->base + FZ_GUARD;
}

static inline void *fz_buf_data(const fz_buf *b) { return b->base + FZ_GUARD; }

static inline void fz_buf_snap(fz_buf *b) { memcpy(b->snap, b->base + FZ_GUARD, b->bytes); }

static inline int fz_buf_guards_ok(const fz_buf *b)
{
    size_t i;
    for (i = 0; i < FZ_GUARD; ++i)
        if (b->base[i] != FZ_GUARD_BYTE || b->base[FZ_GUARD + b->bytes + i] != FZ_GUARD_BYTE) return 0;
    return 1;
}

static inline int fz_buf_unchanged(const fz_buf *b)
{
    return memcmp(b->snap, b->base + FZ_GUARD, b->bytes) == 0;
}

static inline void fz_buf_free(fz_buf *b)
{
    free(b->base);
    free(b->snap);
    b->base = b->snap = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* the error contract */

/* 1 when msg contains one of the '|'-separated names of alt (NULL: none) */
static inline int fz_names_one_of(const char *msg, const char *alt)
{
    char name[128];
    while (alt != NULL && *alt) {
        const char *bar = strchr(alt, '|');
        size_t len = bar ? (size_t)(bar - alt) : strlen(alt);
        if (len > 0 && len < sizeof name) {
            memcpy(name, alt, len);
            name[len] = '\0';
            if (strstr(msg, name) != NULL) return 1;
        }
        alt = bar ? bar + 1 : NULL;
    }
    return 0;
}

/* status in range; on error a message that names fn (or one of alt, '|'-separated: documented inner names); on
   FA_OK an empty message (every fa_status function clears it on entry). */
static inline void fz_check_status(fa_status s, const char *fn, const char *alt)
{
    const char *msg = fa_last_error();
    FZ_CHECK(msg != NULL);
    FZ_CHECK((int)s >= FA_OK && (int)s <= FA_ERR_OUT_OF_MEMORY);
    if (s == FA_OK) {
        FZ_CHECK(msg[0] == '\0');
    } else {
        FZ_CHECK(msg[0] != '\0');
        FZ_CHECK(strstr(msg, fn) != NULL || fz_names_one_of(msg, alt));
        FZ_CHECK(strlen(msg) < 256);
    }
}

/* Puts a known message into fa_last_error (for checking that int/struct functions leave it). */
static inline void fz_set_marker_error(void)
{
    int64_t shape[5];
    (void)fa_kv_cache_shape(0, 16, 1, 8, shape);
}

static inline int fz_marker_intact(void)
{
    return strstr(fa_last_error(), "fa_kv_cache_shape: num_blocks 0") == fa_last_error();
}

/* query_start_loc differences wrap in int32 before the first failing check (known bug:
   fa__check_qsl int32 wrap). Walks like the library: stops at the first decrease. */
static inline int fz_qsl_wraps(const int32_t *qsl, int32_t n)
{
    int32_t b;
    if (qsl == NULL || n <= 0) return 0;
    for (b = 0; b < n; ++b) {
        int64_t d = (int64_t)qsl[b + 1] - qsl[b];
        if (d < INT32_MIN || d > INT32_MAX) return 1;
        if (d < 0) return 0;
    }
    return 0;
}

#endif /* FA_FUZZ_COMMON_H */
