/* fuzz_forward_dcp: fa_forward under decode-context parallelism on the CPU backend, N = 2 or 3
   ranks on threads (fa_fake_comm_run) over the fake comm. Each rank has its builder, its share of
   the KV cache (fa_dcp_slot_mapping) and its out; sometimes one rank gets a defect (a broken view,
   a block id out of range) so that it fails while its peers are in or near a collective.
   Checks: every rank returns, promptly (no hang: a failing rank aborts the group); guards; q/k/v
   never written; a rank whose own checks fail writes nothing; when every rank succeeds, every
   out row < T is finite (finite inputs, moderate scales) and the ranks agree on out (each holds
   the attention of the same queries over the whole context). */
#include <time.h>

#include "fuzz_common.h"
#include "fa_cpu.h"
#include "fa_fake_comm.h"

#define MAXN 3
#define MAXR 3
#define MAXT 12
#define NB 4

static fa_backend *cpu_be(void)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    return be;
}

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void put(void *base, int64_t i, fa_dtype t, float x)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)base)[i] = x; break;
    case FA_DTYPE_F16: ((uint16_t *)base)[i] = fa_cpu_float_to_half(x); break;
    default: ((uint16_t *)base)[i] = fa_cpu_float_to_bf16(x); break;
    }
}

static float get(const void *base, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return ((const float *)base)[i];
    case FA_DTYPE_F16: return fa_cpu_half_to_float(((const uint16_t *)base)[i]);
    default: return fa_cpu_bf16_to_float(((const uint16_t *)base)[i]);
    }
}

typedef struct rank_job {
    const fa_layer *layer;
    fa_tensor q, k, v, cache, out;
    const fa_metadata *md;
    fa_status s;
    char msg[256];
    double seconds;
} rank_job;

static void *run_rank(void *arg)
{
    rank_job *j = (rank_job *)arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    j->s = fa_forward(j->layer, cpu_be(), &j->q, &j->k, &j->v, &j->cache, j->md, &j->out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* the message is thread-local: copy it here */
    snprintf(j->msg, sizeof j->msg, "%s", fa_last_error());
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    int32_t N, Hq, Hkv, D, bs = 16, I, n, i, t, rk, qsl[MAXR + 1], seq[MAXR], table[MAXR * NB * MAXN];
    int32_t req_of[MAXT], pos[MAXT], T, bad_rank, bad_kind;
    int64_t slots[MAXN][MAXT];
    fa_dtype dt;
    fa_comm *comms = NULL;
    fa_builder *b[MAXN] = {0};
    fa_metadata md[MAXN];
    fa_layer layer;
    fa_layer_desc d;
    fa_config cfg;
    fz_buf qb, kb, vb, cb[MAXN], ob[MAXN];
    rank_job job[MAXN];
    void *args[MAXN];
    int64_t qshape[3], kshape[3], cshape[5], nq, nk, nc;
    uint32_t seed;
    size_t es;
    int ok = 1, moderate;
    fz_init(&r, data, size);
    seed = (uint32_t)fz_raw(&r, 4);
    N = fz_range(&r, 2, MAXN);
    Hkv = fz_range(&r, 1, 2);
    Hq = Hkv * fz_range(&r, 1, 2);
    D = 8 * fz_range(&r, 1, 4);
    dt = (fa_dtype)fz_range(&r, 0, 2);
    I = 1 << fz_range(&r, 0, 4);
    bad_rank = fz_range(&r, 0, 2 * N); /* >= N: nobody */
    bad_kind = fz_range(&r, 0, 3);
    memset(&d, 0, sizeof d);
    d.num_heads_q = Hq;
    d.num_heads_kv = Hkv;
    d.head_size = D;
    d.dtype = dt;
    d.dcp_world_size = N;
    d.logits_soft_cap = fz_bool(&r) ? 0.0f : fz_float(&r);
    d.scale = fz_bool(&r) ? 0.0f : fz_float(&r);
    if (fa_layer_init(&layer, &d) != FA_OK) return 0;
    moderate = layer.scale < 64.0f;

    /* the batch: every rank sees the same requests and new tokens */
    n = fz_range(&r, 1, MAXR);
    qsl[0] = 0;
    for (i = 0; i < n; ++i) {
        int32_t ql = (fz_u8(&r) & 1) ? 1 : fz_range(&r, 0, 4), ctx = fz_range(&r, 0, NB * bs * N - 4);
        if (qsl[i] + ql > MAXT) ql = MAXT - qsl[i];
        qsl[i + 1] = qsl[i] + ql;
        seq[i] = ctx + ql;
        for (t = qsl[i]; t < qsl[i + 1]; ++t) {
            req_of[t] = i;
            pos[t] = seq[i] - (qsl[i + 1] - t);
        }
    }
    T = qsl[n];
    if (T < 1) return 0;
    for (i = 0; i < n * NB; ++i) table[i] = fz_range(&r, 0, NB - 1);

    es = fa_dtype_size(dt);
    nq = (int64_t)MAXT * Hq * D;
    nk = (int64_t)MAXT * Hkv * D;
    nc = (int64_t)2 * NB * bs * Hkv * D;
    {
        void *p;
        p = fz_buf_new(&qb, (size_t)nq * es);
        for (i = 0; i < nq; ++i) put(p, i, dt, ((float)(rng_next(&seed) % 4001) - 2000.0f) / 1000.0f);
        p = fz_buf_new(&kb, (size_t)nk * es);
        for (i = 0; i < nk; ++i) put(p, i, dt, ((float)(rng_next(&seed) % 4001) - 2000.0f) / 1000.0f);
        p = fz_buf_new(&vb, (size_t)nk * es);
        for (i = 0; i < nk; ++i) put(p, i, dt, ((float)(rng_next(&seed) % 4001) - 2000.0f) / 1000.0f);
        fz_buf_snap(&qb);
        fz_buf_snap(&kb);
        fz_buf_snap(&vb);
    }
    FZ_CHECK(fa_fake_comm_group_create(N, &comms) == FA_OK);
    FZ_CHECK(fa_fake_comm_group_set_timeout(comms, 5000) == FA_OK);
    for (rk = 0; rk < N; ++rk) {
        fa_batch batch;
        void *p;
        memset(&cfg, 0, sizeof cfg);
        cfg.model.num_heads_q = Hq;
        cfg.model.num_heads_kv = Hkv;
        cfg.model.head_size = D;
        cfg.model.dtype = dt;
        cfg.cache.block_size = bs;
        cfg.parallel.dcp_world_size = N;
        cfg.parallel.dcp_rank = rk;
        cfg.parallel.cp_kv_cache_interleave_size = I;
        cfg.compilation.max_num_splits = 4;
        cfg.scheduler.max_num_seqs = MAXR;
        cfg.scheduler.max_num_batched_tokens = MAXT;
        FZ_CHECK(fa_builder_create(cpu_be(), &cfg, &comms[rk], &b[rk]) == FA_OK);
        FZ_CHECK(fa_dcp_slot_mapping(table, NB, NB, bs, req_of, pos, T, N, rk, I, slots[rk]) == FA_OK);
        memset(&batch, 0, sizeof batch);
        batch.num_reqs = n;
        batch.query_start_loc = qsl;
        batch.seq_lens = seq;
        batch.block_table = table;
        batch.block_table_stride = NB;
        batch.slot_mapping = slots[rk];
        if (rk == bad_rank && bad_kind == 3) { /* this rank's table has an id out of range */
            static int32_t bad_table[MAXR * NB];
            memcpy(bad_table, table, sizeof(int32_t) * (size_t)(n * NB));
            bad_table[0] = NB + fz_range(&r, 0, 3);
            batch.block_table = bad_table;
        }
        FZ_CHECK(fa_builder_build(b[rk], &batch, 0, &md[rk]) == FA_OK);
        p = fz_buf_new(&cb[rk], (size_t)nc * es);
        for (i = 0; i < nc; ++i) put(p, i, dt, ((float)(rng_next(&seed) % 4001) - 2000.0f) / 1000.0f);
        fz_buf_new(&ob[rk], (size_t)nq * es);
        fz_buf_snap(&cb[rk]);
        fz_buf_snap(&ob[rk]);
        qshape[0] = MAXT;
        qshape[1] = Hq;
        qshape[2] = D;
        kshape[0] = MAXT;
        kshape[1] = Hkv;
        kshape[2] = D;
        cshape[0] = 2;
        cshape[1] = NB;
        cshape[2] = bs;
        cshape[3] = Hkv;
        cshape[4] = D;
        job[rk].layer = &layer;
        job[rk].md = &md[rk];
        job[rk].q = fa_tensor_make(fz_buf_data(&qb), dt, 3, qshape);
        job[rk].k = fa_tensor_make(fz_buf_data(&kb), dt, 3, kshape);
        job[rk].v = fa_tensor_make(fz_buf_data(&vb), dt, 3, kshape);
        job[rk].cache = fa_tensor_make(fz_buf_data(&cb[rk]), dt, 5, cshape);
        job[rk].out = fa_tensor_make(fz_buf_data(&ob[rk]), dt, 3, qshape);
        if (rk == bad_rank && bad_kind == 0) job[rk].q.stride[0] = 0;   /* q not packed: a bad pitch */
        if (rk == bad_rank && bad_kind == 1) job[rk].out.dtype = FA_DTYPE_I32;
        if (rk == bad_rank && bad_kind == 2) job[rk].k.stride[1] = 2 * D; /* k heads not packed */
        args[rk] = &job[rk];
    }
    FZ_CHECK(fa_fake_comm_run(N, run_rank, args) == FA_OK);
    for (rk = 0; rk < N; ++rk) {
        rank_job *j = &job[rk];
        FZ_CHECK(j->seconds < 3.0); /* a failing rank must not leave its peers waiting */
        FZ_CHECK(fz_buf_guards_ok(&cb[rk]) && fz_buf_guards_ok(&ob[rk]));
        FZ_CHECK((int)j->s >= FA_OK && (int)j->s <= FA_ERR_OUT_OF_MEMORY);
        if (j->s != FA_OK) {
            ok = 0;
            FZ_CHECK(j->msg[0] != '\0');
            FZ_CHECK(strstr(j->msg, "fa_forward") != NULL || strstr(j->msg, "comm op") != NULL ||
                     strstr(j->msg, "backend 'cpu' op") != NULL);
            /* a rank that fails its own checks writes nothing */
            if (rk == bad_rank) FZ_CHECK(fz_buf_unchanged(&cb[rk]) && fz_buf_unchanged(&ob[rk]));
        } else {
            FZ_CHECK(j->msg[0] == '\0');
        }
    }
    FZ_CHECK(fz_buf_guards_ok(&qb) && fz_buf_guards_ok(&kb) && fz_buf_guards_ok(&vb));
    FZ_CHECK(fz_buf_unchanged(&qb) && fz_buf_unchanged(&kb) && fz_buf_unchanged(&vb));
#ifdef FZ_DEBUG
    for (rk = 0; rk < N; ++rk)
        fprintf(stderr, "N %d bad %d/%d rank %d: %d %.3fs %s\n", N, bad_rank, bad_kind, rk, (int)job[rk].s,
                job[rk].seconds, job[rk].msg);
#endif
    if (bad_rank >= N) FZ_CHECK(ok); /* nothing wrong: every rank succeeds */
    if (ok) {
        const void *o0 = fz_buf_data(&ob[0]);
        int64_t e, row = (int64_t)Hq * D;
        for (e = 0; e < (int64_t)T * row; ++e) {
            float x0 = get(o0, e, dt);
            if (moderate) FZ_CHECK(isfinite(x0));
            for (rk = 1; rk < N; ++rk) { /* the ranks agree (rounding aside) */
                float x = get(fz_buf_data(&ob[rk]), e, dt);
                FZ_CHECK(fabsf(x - x0) <= 0.05f * (1.0f + fabsf(x0)) || !moderate);
            }
        }
    }
    for (rk = 0; rk < N; ++rk) {
        fa_builder_destroy(b[rk]);
        fz_buf_free(&cb[rk]);
        fz_buf_free(&ob[rk]);
    }
    fa_fake_comm_group_destroy(comms);
    fz_buf_free(&qb);
    fz_buf_free(&kb);
    fz_buf_free(&vb);
    return 0;
}
