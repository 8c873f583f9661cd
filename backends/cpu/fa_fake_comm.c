/* fa_fake_comm.c - in-process fake of the comm vtable. See fa_fake_comm.h. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200112L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L
#endif

#include "fa_fake_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the group's waits time out on CLOCK_MONOTONIC where the condition variable can use it */
#if defined(_POSIX_CLOCK_SELECTION) && _POSIX_CLOCK_SELECTION > 0 && defined(CLOCK_MONOTONIC)
#define FA__FAKE_MONOTONIC 1
#else
#define FA__FAKE_MONOTONIC 0
#endif

#include "fa_backend_util.h" /* backends/common: fa_bu_dtype_size, fa_bu_fail */
#include "fa_cpu.h"

enum { FA__FAKE_ALL_GATHER = 1, FA__FAKE_REDUCE_SCATTER = 2 };

/* What one rank brought to the current collective. */
typedef struct fa__fake_slot {
    int op;
    const void *send;
    void *recv;
    size_t count;
    fa_dtype dtype;
} fa__fake_slot;

struct fa__fake_group;

typedef struct fa__fake_rank {
    struct fa__fake_group *group;
    int32_t rank;
    char err[320];
} fa__fake_rank;

/* The group: one mutex guards everything below it. Collectives meet twice (a reusable barrier
   with a generation count). The first meeting can be left early: when the group is aborted
   (fa_fake_comm_abort, a failed collective, or a rank that timed out waiting), every waiting
   rank returns, and every later collective fails at once, until fa_fake_comm_group_reset. */
typedef struct fa__fake_group {
    int32_t world_size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t waiting;             /* ranks at the current meeting */
    unsigned long generation;    /* meetings completed */
    unsigned char *present;      /* [world_size] 1: the rank is at the current first meeting */
    int aborted;
    char abort_reason[256];      /* what aborted the group */
    int64_t timeout_ms;          /* <= 0: wait forever */
    fa__fake_slot *slots;        /* [world_size] */
    fa__fake_rank *ranks;        /* [world_size] */
} fa__fake_group;

static float fa__fake_load(const void *base, size_t i, fa_dtype t)
{
    if (t == FA_DTYPE_F32) return ((const float *)base)[i];
    if (t == FA_DTYPE_F16) return fa_cpu_half_to_float(((const uint16_t *)base)[i]);
    return fa_cpu_bf16_to_float(((const uint16_t *)base)[i]);
}

static void fa__fake_store(void *base, size_t i, fa_dtype t, float v)
{
    if (t == FA_DTYPE_F32)
        ((float *)base)[i] = v;
    else if (t == FA_DTYPE_F16)
        ((uint16_t *)base)[i] = fa_cpu_float_to_half(v);
    else
        ((uint16_t *)base)[i] = fa_cpu_float_to_bf16(v);
}

/* Where rank r's failure of collective `name` writes: its own buffer, through
   fa_backend_util.h's fa_bu_fail ("<name>: <message>"). */
static fa_bu_err fa__fake_err(fa__fake_rank *r, const char *name)
{
    return fa_bu_err_make(r->err, sizeof r->err, name);
}

/* Marks the group aborted (g->mu held) and wakes every waiting rank. */
static void fa__fake_abort_locked(fa__fake_group *g, const char *reason)
{
    if (!g->aborted) {
        g->aborted = 1;
        snprintf(g->abort_reason, sizeof g->abort_reason, "%s", reason);
    }
    pthread_cond_broadcast(&g->cv);
}

/* The deadline timeout_ms from now on the condition variable's clock. */
static void fa__fake_deadline(const fa__fake_group *g, struct timespec *ts)
{
    int64_t ns;
#if FA__FAKE_MONOTONIC
    clock_gettime(CLOCK_MONOTONIC, ts);
#else
    clock_gettime(CLOCK_REALTIME, ts);
#endif
    ts->tv_sec += (time_t)(g->timeout_ms / 1000);
    ns = (int64_t)ts->tv_nsec + (g->timeout_ms % 1000) * 1000000;
    ts->tv_sec += (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

/* The ranks not at the current first meeting, as "1, 3" (g->mu held). */
static void fa__fake_missing(const fa__fake_group *g, char *buf, size_t n)
{
    size_t len = 0;
    int32_t q;
    buf[0] = '\0';
    for (q = 0; q < g->world_size && len + 1 < n; ++q) {
        int w;
        if (g->present[q]) continue;
        w = snprintf(buf + len, n - len, "%s%d", len ? ", " : "", (int)q);
        if (w < 0) break;
        len += (size_t)w < n - len ? (size_t)w : n - len - 1;
    }
}

/* One meeting of every rank (g->mu held). abortable: the first meeting of a collective, which
   returns FA_ERR_BACKEND (message in me->err) when the group is or becomes aborted, or when
   the group's timeout passes first (that aborts the group). The second meeting is never left
   early: every rank has passed the first, so each is reading the send buffers and arrives. */
static fa_status fa__fake_meet(fa__fake_group *g, fa__fake_rank *me, const char *name, int abortable)
{
    const unsigned long gen = g->generation;
    const fa_bu_err e = fa__fake_err(me, name);
    struct timespec deadline;
    if (abortable) g->present[me->rank] = 1;
    if (++g->waiting == g->world_size) {
        g->waiting = 0;
        g->generation++;
        if (abortable) memset(g->present, 0, (size_t)g->world_size);
        pthread_cond_broadcast(&g->cv);
        return FA_OK;
    }
    if (abortable && g->timeout_ms > 0) fa__fake_deadline(g, &deadline);
    while (gen == g->generation) {
        if (abortable && g->aborted) {
            return fa_bu_fail(&e, FA_ERR_BACKEND, "rank %d: %s", (int)me->rank, g->abort_reason);
        }
        if (abortable && g->timeout_ms > 0) {
            int rc = pthread_cond_timedwait(&g->cv, &g->mu, &deadline);
            if (rc == ETIMEDOUT && gen == g->generation && !g->aborted) {
                char missing[160], reason[256];
                fa__fake_missing(g, missing, sizeof missing);
                snprintf(reason, sizeof reason,
                         "peer rank %d timed out after %lld ms in %s: rank(s) %s did not arrive",
                         (int)me->rank, (long long)g->timeout_ms, name, missing);
                fa__fake_abort_locked(g, reason);
                return fa_bu_fail(&e, FA_ERR_BACKEND,
                                  "rank %d timed out after %lld ms: rank(s) %s did not arrive", (int)me->rank,
                                  (long long)g->timeout_ms, missing);
            }
        } else {
            pthread_cond_wait(&g->cv, &g->mu);
        }
    }
    return FA_OK;
}

/* One collective: publish the arguments, meet, check that every rank agrees, move the data,
   meet again (so no rank reuses its send buffer while another still reads it). A bad call
   fails on every rank (each sees every rank's arguments) and aborts the group. */
static fa_status fa__fake_collective(void *ctx, int op, const void *send, void *recv, size_t count,
                                     fa_dtype dtype)
{
    fa__fake_rank *me = (fa__fake_rank *)ctx;
    fa__fake_group *g = me->group;
    const char *name = op == FA__FAKE_ALL_GATHER ? "all_gather" : "reduce_scatter";
    const fa_bu_err e = fa__fake_err(me, name);
    fa_status st = FA_OK;
    size_t es = fa_bu_dtype_size(dtype), i;
    int32_t q;

    pthread_mutex_lock(&g->mu);
    if (g->aborted) {
        st = fa_bu_fail(&e, FA_ERR_BACKEND, "rank %d: %s", (int)me->rank, g->abort_reason);
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    g->slots[me->rank].op = op;
    g->slots[me->rank].send = send;
    g->slots[me->rank].recv = recv;
    g->slots[me->rank].count = count;
    g->slots[me->rank].dtype = dtype;
    st = fa__fake_meet(g, me, name, 1);
    pthread_mutex_unlock(&g->mu);
    if (st != FA_OK) return st;

    /* every rank is here and the slots stay put until the second meeting */
    for (q = 0; q < g->world_size && st == FA_OK; ++q) {
        const fa__fake_slot *s = &g->slots[q];
        if (s->op != op || s->count != count || s->dtype != dtype)
            st = fa_bu_fail(&e, FA_ERR_INVALID_ARG,
                            "rank %d called %s with count %zu dtype %d, rank %d called %s with "
                            "count %zu dtype %d",
                            (int)me->rank, name, count, (int)dtype, (int)q,
                            s->op == FA__FAKE_ALL_GATHER ? "all_gather" : "reduce_scatter", s->count,
                            (int)s->dtype);
        else if (es == 0)
            st = fa_bu_fail(&e, FA_ERR_INVALID_ARG, "dtype %d is unknown", (int)dtype);
        else if (op == FA__FAKE_REDUCE_SCATTER && dtype != FA_DTYPE_F32 && dtype != FA_DTYPE_F16 &&
                 dtype != FA_DTYPE_BF16)
            st = fa_bu_fail(&e, FA_ERR_UNSUPPORTED, "dtype %d is not F32, F16 or BF16", (int)dtype);
        else if (count > 0 && (!s->send || !s->recv))
            st = fa_bu_fail(&e, FA_ERR_INVALID_ARG, "rank %d passed a NULL %s", (int)q,
                            !s->send ? "send" : "recv");
    }

    if (st == FA_OK && count > 0) {
        if (op == FA__FAKE_ALL_GATHER) {
            for (q = 0; q < g->world_size; ++q) {
                char *dst = (char *)recv + (size_t)q * count * es;
                if (dst != (const char *)g->slots[q].send)   /* in place: already there */
                    memcpy(dst, g->slots[q].send, count * es);
            }
        } else {
            for (i = 0; i < count; ++i) {
                float sum = 0.0f;
                for (q = 0; q < g->world_size; ++q)
                    sum += fa__fake_load(g->slots[q].send, (size_t)me->rank * count + i, dtype);
                fa__fake_store(recv, i, dtype, sum);
            }
        }
    }
    pthread_mutex_lock(&g->mu);
    if (st != FA_OK) {
        char reason[256];
        snprintf(reason, sizeof reason, "peer rank %d aborted (its %s failed)", (int)me->rank, name);
        fa__fake_abort_locked(g, reason);
    }
    (void)fa__fake_meet(g, me, name, 0);
    pthread_mutex_unlock(&g->mu);
    return st;
}

static fa_status fa__fake_all_gather(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype)
{
    return fa__fake_collective(ctx, FA__FAKE_ALL_GATHER, send, recv, count, dtype);
}

static fa_status fa__fake_reduce_scatter(void *ctx, const void *send, void *recv, size_t count,
                                         fa_dtype dtype)
{
    return fa__fake_collective(ctx, FA__FAKE_REDUCE_SCATTER, send, recv, count, dtype);
}

static const char *fa__fake_last_error(void *ctx) { return ((const fa__fake_rank *)ctx)->err; }

/* fa_comm.abort: this rank failed a step, the peers must not wait for it. */
static void fa__fake_abort_op(void *ctx)
{
    fa__fake_rank *r = (fa__fake_rank *)ctx;
    char reason[256];
    snprintf(reason, sizeof reason, "peer rank %d aborted (its fa_forward failed)", (int)r->rank);
    pthread_mutex_lock(&r->group->mu);
    fa__fake_abort_locked(r->group, reason);
    pthread_mutex_unlock(&r->group->mu);
}

/* The group of a comm made here (NULL for anything else). */
static fa__fake_group *fa__fake_group_of(const fa_comm *comm)
{
    if (!comm || !comm->ctx || comm->all_gather != fa__fake_all_gather) return NULL;
    return ((const fa__fake_rank *)comm->ctx)->group;
}

fa_status fa_fake_comm_group_create(int32_t world_size, fa_comm **comms_out)
{
    fa__fake_group *g;
    fa_comm *comms;
    pthread_condattr_t ca;
    int32_t r;

    if (!comms_out || world_size < 1) return FA_ERR_INVALID_ARG;
    *comms_out = NULL;
    g = (fa__fake_group *)calloc(1, sizeof *g);
    comms = (fa_comm *)calloc((size_t)world_size, sizeof *comms);
    if (g) {
        g->slots = (fa__fake_slot *)calloc((size_t)world_size, sizeof *g->slots);
        g->ranks = (fa__fake_rank *)calloc((size_t)world_size, sizeof *g->ranks);
        g->present = (unsigned char *)calloc((size_t)world_size, 1);
    }
    if (!g || !comms || !g->slots || !g->ranks || !g->present) {
        if (g) {
            free(g->slots);
            free(g->ranks);
            free(g->present);
        }
        free(g);
        free(comms);
        return FA_ERR_OUT_OF_MEMORY;
    }
    g->world_size = world_size;
    g->timeout_ms = FA_FAKE_COMM_DEFAULT_TIMEOUT_MS;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_init(&ca);
#if FA__FAKE_MONOTONIC
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
#endif
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    for (r = 0; r < world_size; ++r) {
        g->ranks[r].group = g;
        g->ranks[r].rank = r;
        comms[r].api_version = FA_BACKEND_API_VERSION;
        comms[r].world_size = world_size;
        comms[r].rank = r;
        comms[r].ctx = &g->ranks[r];
        comms[r].all_gather = fa__fake_all_gather;
        comms[r].reduce_scatter = fa__fake_reduce_scatter;
        comms[r].last_error = fa__fake_last_error;
        comms[r].abort = fa__fake_abort_op;
    }
    *comms_out = comms;
    return FA_OK;
}

void fa_fake_comm_group_destroy(fa_comm *comms)
{
    fa__fake_group *g;
    if (!comms) return;
    g = ((fa__fake_rank *)comms[0].ctx)->group;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->slots);
    free(g->ranks);
    free(g->present);
    free(g);
    free(comms);
}

fa_status fa_fake_comm_abort(const fa_comm *comm)
{
    fa__fake_group *g = fa__fake_group_of(comm);
    char reason[256];
    if (!g) return FA_ERR_INVALID_ARG;
    snprintf(reason, sizeof reason, "peer rank %d aborted (fa_fake_comm_abort)", (int)comm->rank);
    pthread_mutex_lock(&g->mu);
    fa__fake_abort_locked(g, reason);
    pthread_mutex_unlock(&g->mu);
    return FA_OK;
}

int fa_fake_comm_aborted(const fa_comm *comm)
{
    fa__fake_group *g = fa__fake_group_of(comm);
    int a;
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    a = g->aborted;
    pthread_mutex_unlock(&g->mu);
    return a;
}

fa_status fa_fake_comm_group_reset(fa_comm *comms)
{
    fa__fake_group *g = fa__fake_group_of(comms);
    int32_t r;
    if (!g) return FA_ERR_INVALID_ARG;
    pthread_mutex_lock(&g->mu);
    g->aborted = 0;
    g->abort_reason[0] = '\0';
    g->waiting = 0;
    g->generation++;
    memset(g->present, 0, (size_t)g->world_size);
    for (r = 0; r < g->world_size; ++r) g->ranks[r].err[0] = '\0';
    pthread_mutex_unlock(&g->mu);
    return FA_OK;
}

fa_status fa_fake_comm_group_set_timeout(fa_comm *comms, int64_t timeout_ms)
{
    fa__fake_group *g = fa__fake_group_of(comms);
    if (!g) return FA_ERR_INVALID_ARG;
    pthread_mutex_lock(&g->mu);
    g->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
    pthread_mutex_unlock(&g->mu);
    return FA_OK;
}

/* The start gate of fa_fake_comm_run: 0 = wait, 1 = go, 2 = abort. */
typedef struct fa__fake_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
} fa__fake_gate;

typedef struct fa__fake_thread {
    fa__fake_gate *gate;
    void *(*fn)(void *);
    void *arg;
} fa__fake_thread;

static void *fa__fake_trampoline(void *p)
{
    fa__fake_thread *t = (fa__fake_thread *)p;
    int state;
    pthread_mutex_lock(&t->gate->mu);
    while (t->gate->state == 0) pthread_cond_wait(&t->gate->cv, &t->gate->mu);
    state = t->gate->state;
    pthread_mutex_unlock(&t->gate->mu);
    if (state == 1) (void)t->fn(t->arg);
    return NULL;
}

fa_status fa_fake_comm_run(int32_t world_size, void *(*fn)(void *), void **args)
{
    fa__fake_gate gate;
    fa__fake_thread *th;
    pthread_t *ids;
    int32_t r, started = 0;

    if (world_size < 1 || !fn) return FA_ERR_INVALID_ARG;
    th = (fa__fake_thread *)calloc((size_t)world_size, sizeof *th);
    ids = (pthread_t *)calloc((size_t)world_size, sizeof *ids);
    if (!th || !ids) {
        free(th);
        free(ids);
        return FA_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&gate.mu, NULL);
    pthread_cond_init(&gate.cv, NULL);
    gate.state = 0;
    for (r = 0; r < world_size; ++r) {
        th[r].gate = &gate;
        th[r].fn = fn;
        th[r].arg = args ? args[r] : NULL;
        if (pthread_create(&ids[r], NULL, fa__fake_trampoline, &th[r]) != 0) break;
        started++;
    }
    pthread_mutex_lock(&gate.mu);
    gate.state = started == world_size ? 1 : 2;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (r = 0; r < started; ++r) pthread_join(ids[r], NULL);
    pthread_mutex_destroy(&gate.mu);
    pthread_cond_destroy(&gate.cv);
    free(th);
    free(ids);
    return started == world_size ? FA_OK : FA_ERR_BACKEND;
}
