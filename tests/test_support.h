/* Scaffolding shared by the host unit tests: ASSERT_OK, the tests' random numbers, a model
   config and layer of a given shape, and a comm that does nothing (its all_gather /
   reduce_scatter return FA_OK and move no data; for builders that need a comm but never run a
   DCP forward). Include after flashattn.h (the including file defines
   FLASHATTN_IMPLEMENTATION itself). The test backends stay in their files: they differ. */
#ifndef FLASHATTN_TEST_SUPPORT_H
#define FLASHATTN_TEST_SUPPORT_H

#ifndef FLASHATTN_H
#error "include flashattn.h before test_support.h"
#endif

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#define ASSERT_OK(expr) \
    do { \
        fa_status st__ = (expr); \
        cr_assert_eq(st__, FA_OK, "%s -> %d (%s): %s", #expr, (int)st__, fa_status_string(st__), \
                     fa_last_error()); \
    } while (0)

/* splitmix64: the tests' random numbers (fixed seeds, the same sequence on every machine) */
static uint64_t rng_state;
static inline void rng_seed(uint64_t s) { rng_state = s; }
static inline uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform integer in [lo, hi] */
static inline int32_t rng_int(int32_t lo, int32_t hi)
{
    return lo + (int32_t)(rng_u64() % (uint64_t)(hi - lo + 1));
}

/* The CPU backend's capability block (what the planner tests plan for). */
fa_status fa_cpu_backend_create(fa_backend **out);
void fa_cpu_backend_destroy(fa_backend *be);
static inline const fa_backend_caps *test_caps(void)
{
    static fa_backend_caps caps;
    if (caps.num_dims == 0) {
        fa_backend *be = NULL;
        if (fa_cpu_backend_create(&be) == FA_OK) caps = be->caps;
        fa_cpu_backend_destroy(be);
    }
    return &caps;
}

/* The prefill tile (rows, keys) of the CPU backend's caps for a head size. */
static inline int32_t test_tile_m(int32_t d)
{
    const fa_backend_caps *c = test_caps();
    for (int32_t i = 0; i < c->num_dims; ++i)
        if (c->dims[i].head_dim >= d) return c->dims[i].prefill_tile_m;
    return 0;
}
static inline int32_t test_tile_n(int32_t d)
{
    const fa_backend_caps *c = test_caps();
    for (int32_t i = 0; i < c->num_dims; ++i)
        if (c->dims[i].head_dim >= d) return c->dims[i].prefill_tile_n;
    return 0;
}

/* A model config (heads, head size, dtype, block size; bs 0 = the default) with the scheduler's
   sizes; every other field zero (the defaults). */
static inline fa_config test_cfg(int32_t hq, int32_t hkv, int32_t d, fa_dtype dt, int32_t bs,
                                 int32_t max_seqs, int32_t max_tokens)
{
    fa_config c;
    memset(&c, 0, sizeof c);
    c.model.num_heads_q = hq;
    c.model.num_heads_kv = hkv;
    c.model.head_size = d;
    c.model.dtype = dt;
    c.cache.block_size = bs;
    c.scheduler.max_num_seqs = max_seqs;
    c.scheduler.max_num_batched_tokens = max_tokens;
    return c;
}

/* A layer of that shape; every other field zero (the defaults). */
static inline fa_layer_desc test_desc(int32_t hq, int32_t hkv, int32_t d, fa_dtype dt)
{
    fa_layer_desc l;
    memset(&l, 0, sizeof l);
    l.num_heads_q = hq;
    l.num_heads_kv = hkv;
    l.head_size = d;
    l.dtype = dt;
    return l;
}

/* static inline: no unused-function warning in a file that only wants ASSERT_OK */
static inline fa_status cm_ag(void *c, const void *s, void *r, size_t n, fa_dtype t)
{
    (void)c;
    (void)s;
    (void)r;
    (void)n;
    (void)t;
    return FA_OK;
}
static inline fa_status cm_rs(void *c, const void *s, void *r, size_t n, fa_dtype t)
{
    (void)c;
    (void)s;
    (void)r;
    (void)n;
    (void)t;
    return FA_OK;
}
static inline fa_comm make_comm(int32_t world, int32_t rank)
{
    fa_comm c;
    memset(&c, 0, sizeof c);
    c.api_version = FA_BACKEND_API_VERSION;
    c.world_size = world;
    c.rank = rank;
    c.all_gather = cm_ag;
    c.reduce_scatter = cm_rs;
    return c;
}

#endif
