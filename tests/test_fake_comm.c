/* test_fake_comm.c - the fake comm never hangs (backends/cpu/fa_fake_comm.h).

   A DCP group of N ranks on threads, each with its own CPU backend and builder, runs one
   fa_forward. When one rank fails (a validation in fa_forward, an op mid-forward, a bad
   collective) the others must return an error, not wait forever: through fa_fake_comm_abort
   (called by the failing rank), through the group's abort after a failed collective, or, as the
   last resort, through the group's timeout. Afterwards fa_fake_comm_group_reset (or a new group)
   makes the group usable again.

   Every test carries a Criterion timeout: a hang fails the test instead of the suite. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flashattn.h"
#include "test_support.h"

#include "backends/cpu/fa_cpu.h"
#include "backends/cpu/fa_fake_comm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------------ */
/* one DCP step: 2 requests of new tokens only (no context), H local heads, 1 KV head, f32 */

enum { DS_H = 2, DS_D = 32, DS_BS = 16, DS_NREQ = 2, DS_T = 5, DS_NB = 8, DS_MAXB = 2 };

typedef enum rank_fault {
    RF_NONE = 0,
    RF_BAD_Q_DTYPE,      /* fa_forward rejects q before any collective */
    RF_ATTENTION_OP,     /* the CPU backend's attention op fails (fault hook) mid-forward */
    RF_ABSENT            /* the rank never calls fa_forward (a crashed or stuck process) */
} rank_fault;

typedef struct ds_rank {
    fa_comm *comm;
    rank_fault fault;
    int abort_on_error;  /* the failing path calls fa_fake_comm_abort */
    float q[DS_T * DS_H * DS_D], k[DS_T * DS_D], v[DS_T * DS_D], out[DS_T * DS_H * DS_D];
    float cache[2 * DS_NB * DS_BS * DS_D];
    fa_status st;
    char err[512];
    double seconds;
} ds_rank;

static const int32_t ds_qsl[DS_NREQ + 1] = {0, 3, 5};
static const int32_t ds_seq[DS_NREQ] = {3, 2};
static const int32_t ds_bt[DS_NREQ * DS_MAXB] = {0, 1, 2, 3};

static void *ds_rank_main(void *p)
{
    ds_rank *a = (ds_rank *)p;
    const int32_t N = a->comm->world_size, r = a->comm->rank;
    fa_backend *be = NULL;
    fa_builder *b = NULL;
    fa_config c = test_cfg(DS_H, 1, DS_D, FA_DTYPE_F32, DS_BS, 8, 64);
    fa_layer_desc d = test_desc(DS_H, 1, DS_D, FA_DTYPE_F32);
    fa_layer L;
    fa_batch batch;
    fa_metadata md;
    fa_tensor q, k, v, o, kc;
    int64_t slots[DS_T], sh[3];
    double t0 = now_s();
    int i;

    a->st = fa_cpu_backend_create(&be);
    if (a->st != FA_OK) goto done;
    c.parallel.dcp_world_size = N;
    c.parallel.dcp_rank = r;
    a->st = fa_builder_create(be, &c, a->comm, &b);
    if (a->st != FA_OK) goto done;
    d.dcp_world_size = N;
    a->st = fa_layer_init(&L, &d);
    if (a->st != FA_OK) goto done;
    for (i = 0; i < DS_T; ++i) slots[i] = -1;   /* no cache writes: no context either */
    memset(&batch, 0, sizeof batch);
    batch.num_reqs = DS_NREQ;
    batch.num_actual_tokens = DS_T;
    batch.query_start_loc = ds_qsl;
    batch.seq_lens = ds_seq;
    batch.block_table = ds_bt;
    batch.block_table_stride = DS_MAXB;
    batch.block_table_host = ds_bt;
    batch.slot_mapping = slots;
    batch.causal = 1;
    a->st = fa_builder_build(b, &batch, 0, &md);
    if (a->st != FA_OK) goto done;
    sh[0] = DS_T;
    sh[1] = DS_H;
    sh[2] = DS_D;
    q = fa_tensor_make(a->q, FA_DTYPE_F32, 3, sh);
    o = fa_tensor_make(a->out, FA_DTYPE_F32, 3, sh);
    sh[1] = 1;
    k = fa_tensor_make(a->k, FA_DTYPE_F32, 3, sh);
    v = fa_tensor_make(a->v, FA_DTYPE_F32, 3, sh);
    memset(&kc, 0, sizeof kc);
    kc.data = a->cache;
    kc.dtype = FA_DTYPE_F32;
    kc.rank = 5;
    a->st = fa_kv_cache_shape(DS_NB, DS_BS, 1, DS_D, kc.shape);
    if (a->st == FA_OK) a->st = fa_kv_cache_strides(FA_LAYOUT_NHD, DS_NB, DS_BS, 1, DS_D, kc.stride);
    if (a->st != FA_OK) goto done;
    if (a->fault == RF_ABSENT) goto done;
    if (a->fault == RF_BAD_Q_DTYPE) q.dtype = FA_DTYPE_BF16;
    if (a->fault == RF_ATTENTION_OP) {
        fa_cpu_backend_options opt;
        memset(&opt, 0, sizeof opt);
        opt.fail_op = FA_OP_ATTENTION;
        opt.fail_op_at = 1;   /* the context part, after the first all_gather */
        a->st = fa_cpu_backend_set_options(be, &opt);
        if (a->st != FA_OK) goto done;
    }
    a->st = fa_forward(&L, be, &q, &k, &v, &kc, &md, &o);
done:
    snprintf(a->err, sizeof a->err, "%s", fa_last_error());
    if (a->st != FA_OK && a->abort_on_error)
        fa_fake_comm_abort(a->comm);   /* what a serving engine's failing rank does */
    a->seconds = now_s() - t0;
    if (b) fa_builder_destroy(b);
    if (be) fa_cpu_backend_destroy(be);
    return NULL;
}

/* Sets up N ranks on comms with the same inputs (rank-dependent queries). */
static void ds_setup(ds_rank *ranks, fa_comm *comms, int N)
{
    int r, i;
    for (r = 0; r < N; ++r) {
        ds_rank *a = &ranks[r];
        memset(a, 0, sizeof *a);
        a->comm = &comms[r];
        for (i = 0; i < DS_T * DS_H * DS_D; ++i) a->q[i] = (float)((i * 7 + r * 3) % 19) / 19.0f - 0.5f;
        for (i = 0; i < DS_T * DS_D; ++i) {
            a->k[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
            a->v[i] = (float)((i * 3) % 17) / 17.0f;
        }
        for (i = 0; i < DS_T * DS_H * DS_D; ++i) a->out[i] = -9.0f;
    }
}

static void ds_run(ds_rank *ranks, int N)
{
    void *args[8];
    int r;
    for (r = 0; r < N; ++r) args[r] = &ranks[r];
    cr_assert_eq(fa_fake_comm_run(N, ds_rank_main, args), FA_OK);
}

/* a clean step on a fresh group: every rank OK; its outputs (for comparison) */
static void ds_clean(int N, ds_rank *ranks)
{
    fa_comm *comms = NULL;
    int r;
    cr_assert_eq(fa_fake_comm_group_create(N, &comms), FA_OK);
    ds_setup(ranks, comms, N);
    ds_run(ranks, N);
    for (r = 0; r < N; ++r) cr_assert_eq(ranks[r].st, FA_OK, "clean step, rank %d: %s", r, ranks[r].err);
    fa_fake_comm_group_destroy(comms);
}

/* ------------------------------------------------------------------------------------------ */

/* One rank fails fa_forward's validation; fa_forward aborts the group through fa_comm.abort
   (and, with `explicit`, the rank calls fa_fake_comm_abort too, as an engine may): every other
   rank, waiting in the first all_gather, returns FA_ERR_BACKEND naming the collective and the
   aborting rank, long before the (here one minute) timeout. */
static void validation_abort_case(int N, int bad, int explicit_abort)
{
    static ds_rank ranks[8];
    fa_comm *comms = NULL;
    double t0;
    int r;
    cr_assert_eq(fa_fake_comm_group_create(N, &comms), FA_OK);
    cr_assert_eq(fa_fake_comm_group_set_timeout(comms, 60000), FA_OK);
    ds_setup(ranks, comms, N);
    for (r = 0; r < N; ++r) ranks[r].abort_on_error = explicit_abort;
    ranks[bad].fault = RF_BAD_Q_DTYPE;
    t0 = now_s();
    ds_run(ranks, N);
    cr_expect_lt(now_s() - t0, 10.0, "the group took %.1f s", now_s() - t0);
    cr_expect_eq(ranks[bad].st, FA_ERR_INVALID_ARG, "rank %d: %s", bad, ranks[bad].err);
    for (r = 0; r < N; ++r) {
        char want[64];
        if (r == bad) continue;
        snprintf(want, sizeof want, "peer rank %d aborted", bad);
        cr_expect_eq(ranks[r].st, FA_ERR_BACKEND, "rank %d: status %d: %s", r, (int)ranks[r].st,
                     ranks[r].err);
        cr_expect(strstr(ranks[r].err, "all_gather") != NULL, "rank %d: %s", r, ranks[r].err);
        cr_expect(strstr(ranks[r].err, want) != NULL, "rank %d: '%s' lacks '%s'", r, ranks[r].err, want);
    }
    cr_expect_eq(fa_fake_comm_aborted(&comms[0]), 1);
    fa_fake_comm_group_destroy(comms);
}

Test(comm_abort, validation_failure_2_ranks, .timeout = 60) { validation_abort_case(2, 1, 0); }
Test(comm_abort, validation_failure_4_ranks, .timeout = 60) { validation_abort_case(4, 2, 0); }
Test(comm_abort, validation_failure_explicit_abort, .timeout = 60) { validation_abort_case(3, 0, 1); }

/* A rank never arrives (no fa_forward, no abort): the others give up after the group's timeout,
   naming the collective and the rank that did not arrive. */
Test(comm_abort, timeout_names_collective_and_missing_rank, .timeout = 60)
{
    static ds_rank ranks[3];
    fa_comm *comms = NULL;
    double t0, dt;
    int r;
    cr_assert_eq(fa_fake_comm_group_create(3, &comms), FA_OK);
    cr_assert_eq(fa_fake_comm_group_set_timeout(comms, 300), FA_OK);
    ds_setup(ranks, comms, 3);
    ranks[2].fault = RF_ABSENT;
    t0 = now_s();
    ds_run(ranks, 3);
    dt = now_s() - t0;
    cr_expect(dt >= 0.25 && dt < 10.0, "the group took %.2f s (timeout 0.3 s)", dt);
    for (r = 0; r < 2; ++r) {
        cr_expect_eq(ranks[r].st, FA_ERR_BACKEND, "rank %d: status %d: %s", r, (int)ranks[r].st,
                     ranks[r].err);
        cr_expect(strstr(ranks[r].err, "comm op 'all_gather' failed") != NULL, "rank %d: %s", r,
                  ranks[r].err);
        cr_expect(strstr(ranks[r].err, "timed out after 300 ms") != NULL, "rank %d: %s", r, ranks[r].err);
        cr_expect(strstr(ranks[r].err, "rank(s) 2 did not arrive") != NULL, "rank %d: %s", r, ranks[r].err);
    }
    cr_expect_eq(fa_fake_comm_aborted(&comms[1]), 1);
    fa_fake_comm_group_destroy(comms);
}

/* An op fails mid-forward on one rank (after the first collective): the others, waiting in the
   next one, return; the failing rank's error names backend and op. */
Test(comm_abort, op_failure_mid_forward, .timeout = 60)
{
    static ds_rank ranks[2];
    fa_comm *comms = NULL;
    cr_assert_eq(fa_fake_comm_group_create(2, &comms), FA_OK);
    cr_assert_eq(fa_fake_comm_group_set_timeout(comms, 60000), FA_OK);
    ds_setup(ranks, comms, 2);
    ranks[0].fault = RF_ATTENTION_OP;   /* fa_forward aborts the group itself (fa_comm.abort) */
    ds_run(ranks, 2);
    cr_expect_eq(ranks[0].st, FA_ERR_BACKEND, "%s", ranks[0].err);
    cr_expect(strstr(ranks[0].err, "backend 'cpu' op 'attention' failed") != NULL, "%s", ranks[0].err);
    cr_expect_eq(ranks[1].st, FA_ERR_BACKEND, "%s", ranks[1].err);
    cr_expect(strstr(ranks[1].err, "peer rank 0 aborted") != NULL, "%s", ranks[1].err);
    cr_expect(ranks[1].seconds < 10.0, "rank 1 took %.1f s", ranks[1].seconds);
    fa_fake_comm_group_destroy(comms);
}

/* After a failed step: reset, and the same group runs a clean step with the results of a fresh
   group; a new group works as well. */
Test(comm_abort, reset_makes_group_usable, .timeout = 60)
{
    static ds_rank ranks[2], ref[2];
    fa_comm *comms = NULL;
    int r, i;
    ds_clean(2, ref);
    cr_assert_eq(fa_fake_comm_group_create(2, &comms), FA_OK);
    ds_setup(ranks, comms, 2);
    ranks[0].abort_on_error = ranks[1].abort_on_error = 1;
    ranks[1].fault = RF_BAD_Q_DTYPE;
    ds_run(ranks, 2);
    cr_expect_neq(ranks[0].st, FA_OK);
    cr_expect_neq(ranks[1].st, FA_OK);
    cr_expect_eq(fa_fake_comm_aborted(&comms[0]), 1);
    /* still aborted: a clean step fails at once */
    ds_setup(ranks, comms, 2);
    ds_run(ranks, 2);
    cr_expect_eq(ranks[0].st, FA_ERR_BACKEND, "%s", ranks[0].err);
    cr_expect(strstr(ranks[0].err, "aborted") != NULL, "%s", ranks[0].err);
    /* reset: usable again */
    cr_assert_eq(fa_fake_comm_group_reset(comms), FA_OK);
    cr_expect_eq(fa_fake_comm_aborted(&comms[0]), 0);
    ds_setup(ranks, comms, 2);
    ds_run(ranks, 2);
    for (r = 0; r < 2; ++r) {
        cr_assert_eq(ranks[r].st, FA_OK, "after reset, rank %d: %s", r, ranks[r].err);
        for (i = 0; i < DS_T * DS_H * DS_D; ++i)
            cr_assert_eq(ranks[r].out[i], ref[r].out[i], "rank %d out[%d]: %g, fresh group %g", r, i,
                         (double)ranks[r].out[i], (double)ref[r].out[i]);
    }
    fa_fake_comm_group_destroy(comms);
    ds_clean(2, ranks);   /* a new group */
}

/* ------------------------------------------------------------------------------------------ */
/* the comm alone */

typedef struct cjob {
    fa_comm *comm;
    int mode;            /* 0: all_gather; 1: abort after a pause; 2: mismatched count, then one more */
    fa_status st, st2;
    char err[320], err2[320];
} cjob;

static void *cjob_main(void *p)
{
    cjob *j = (cjob *)p;
    float send[4] = {1, 2, 3, 4}, recv[4 * 8];
    const fa_comm *c = j->comm;
    if (j->mode == 1) {
        usleep(50 * 1000);
        j->st = fa_fake_comm_abort(c);
        return NULL;
    }
    j->st = c->all_gather(c->ctx, send, recv, j->mode == 2 ? (size_t)(1 + c->rank) : 4, FA_DTYPE_F32);
    snprintf(j->err, sizeof j->err, "%s", c->last_error(c->ctx));
    if (j->mode == 2) {
        j->st2 = c->all_gather(c->ctx, send, recv, 4, FA_DTYPE_F32);
        snprintf(j->err2, sizeof j->err2, "%s", c->last_error(c->ctx));
    }
    return NULL;
}

static void cjob_run(fa_comm *comms, cjob *jobs, int N)
{
    void *args[8];
    int r;
    for (r = 0; r < N; ++r) {
        jobs[r].comm = &comms[r];
        args[r] = &jobs[r];
    }
    cr_assert_eq(fa_fake_comm_run(N, cjob_main, args), FA_OK);
}

/* A rank aborts while its peer waits in a collective: the peer returns at once. */
Test(comm_abort, abort_wakes_waiting_rank, .timeout = 60)
{
    fa_comm *comms = NULL;
    cjob jobs[2];
    double t0;
    memset(jobs, 0, sizeof jobs);
    cr_assert_eq(fa_fake_comm_group_create(2, &comms), FA_OK);
    cr_assert_eq(fa_fake_comm_group_set_timeout(comms, 0), FA_OK);   /* wait forever */
    jobs[1].mode = 1;
    t0 = now_s();
    cjob_run(comms, jobs, 2);
    cr_expect_lt(now_s() - t0, 10.0);
    cr_expect_eq(jobs[1].st, FA_OK);
    cr_expect_eq(jobs[0].st, FA_ERR_BACKEND);
    cr_expect_str_eq(jobs[0].err, "all_gather: rank 0: peer rank 1 aborted (fa_fake_comm_abort)");
    fa_fake_comm_group_destroy(comms);
}

/* A collective that fails (mismatched counts) fails on every rank and aborts the group: the next
   collective fails at once instead of meeting ranks that may have given up. Reset clears it. */
Test(comm_abort, failed_collective_aborts_group, .timeout = 60)
{
    fa_comm *comms = NULL;
    cjob jobs[3];
    int r;
    memset(jobs, 0, sizeof jobs);
    cr_assert_eq(fa_fake_comm_group_create(3, &comms), FA_OK);
    for (r = 0; r < 3; ++r) jobs[r].mode = 2;
    cjob_run(comms, jobs, 3);
    for (r = 0; r < 3; ++r) {
        cr_expect_eq(jobs[r].st, FA_ERR_INVALID_ARG, "rank %d: %s", r, jobs[r].err);
        cr_expect(strstr(jobs[r].err, "count") != NULL, "rank %d: %s", r, jobs[r].err);
        cr_expect_eq(jobs[r].st2, FA_ERR_BACKEND, "rank %d: %s", r, jobs[r].err2);
        cr_expect(strstr(jobs[r].err2, "aborted (its all_gather failed)") != NULL, "rank %d: %s", r,
                  jobs[r].err2);
    }
    cr_assert_eq(fa_fake_comm_group_reset(comms), FA_OK);
    memset(jobs, 0, sizeof jobs);
    cjob_run(comms, jobs, 3);
    for (r = 0; r < 3; ++r) cr_expect_eq(jobs[r].st, FA_OK, "rank %d after reset: %s", r, jobs[r].err);
    fa_fake_comm_group_destroy(comms);
}

/* Two ranks time out together: both return, both name the missing rank. */
Test(comm_abort, timeout_direct, .timeout = 60)
{
    fa_comm *comms = NULL;
    cjob jobs[2];
    float s[4] = {0, 0, 0, 0}, rv[12];
    int r;
    memset(jobs, 0, sizeof jobs);
    cr_assert_eq(fa_fake_comm_group_create(3, &comms), FA_OK);
    cr_assert_eq(fa_fake_comm_group_set_timeout(comms, 200), FA_OK);
    cjob_run(comms, jobs, 2);   /* ranks 0 and 1 only: rank 2 never comes */
    for (r = 0; r < 2; ++r) {
        cr_expect_eq(jobs[r].st, FA_ERR_BACKEND, "rank %d: %s", r, jobs[r].err);
        cr_expect(strstr(jobs[r].err, "all_gather") == jobs[r].err, "rank %d: %s", r, jobs[r].err);
        cr_expect(strstr(jobs[r].err, "rank(s) 2 did not arrive") != NULL, "rank %d: %s", r, jobs[r].err);
    }
    /* rank 2 arriving late fails at once too */
    cr_expect_eq(comms[2].all_gather(comms[2].ctx, s, rv, 4, FA_DTYPE_F32), FA_ERR_BACKEND);
    cr_expect(strstr(comms[2].last_error(comms[2].ctx), "timed out") != NULL, "%s",
              comms[2].last_error(comms[2].ctx));
    fa_fake_comm_group_destroy(comms);
}

Test(comm_abort, bad_arguments)
{
    fa_comm *comms = NULL, other = make_comm(2, 0);
    float s[2] = {1, 2}, rv[2];
    cr_expect_eq(fa_fake_comm_abort(NULL), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_abort(&other), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_group_reset(NULL), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_group_reset(&other), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_group_set_timeout(NULL, 5), FA_ERR_INVALID_ARG);
    cr_expect_eq(fa_fake_comm_aborted(NULL), 0);
    cr_expect_eq(fa_fake_comm_aborted(&other), 0);
    /* a group of one never waits; abort and reset work on it too */
    cr_assert_eq(fa_fake_comm_group_create(1, &comms), FA_OK);
    cr_expect_eq(comms[0].all_gather(comms[0].ctx, s, rv, 2, FA_DTYPE_F32), FA_OK);
    cr_expect_eq(fa_fake_comm_abort(&comms[0]), FA_OK);
    cr_expect_eq(comms[0].all_gather(comms[0].ctx, s, rv, 2, FA_DTYPE_F32), FA_ERR_BACKEND);
    cr_expect(strstr(comms[0].last_error(comms[0].ctx), "peer rank 0 aborted") != NULL, "%s",
              comms[0].last_error(comms[0].ctx));
    cr_expect_eq(fa_fake_comm_group_reset(comms), FA_OK);
    cr_expect_eq(comms[0].all_gather(comms[0].ctx, s, rv, 2, FA_DTYPE_F32), FA_OK);
    cr_expect_eq(rv[1], 2.0f);
    fa_fake_comm_group_destroy(comms);
}
