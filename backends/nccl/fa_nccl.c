/* fa_nccl.c - the NCCL comm of flashattn (C99 + POSIX). See fa_nccl.h.

   Layout: one fa__nccl_group per create call holds `count` comms of this process (1 for
   fa_nccl_comm_create, world_size for fa_nccl_comms_create_local): an array of fa_comm (what
   the caller gets) and a parallel array of contexts (comm[i].ctx = &ctxs[i]). */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "fa_nccl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#if defined(__GNUC__) || defined(__clang__)
#define FA__NCCL_TLS __thread
#define FA__NCCL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FA__NCCL_TLS /* no thread-local storage: the message is shared between threads */
#define FA__NCCL_PRINTF(f, a)
#endif

/* C99 static assertion: the public id size is NCCL's. */
typedef char fa__nccl_id_size_check[sizeof(ncclUniqueId) == FA_NCCL_UNIQUE_ID_BYTES ? 1 : -1];

#define FA__NCCL_MAGIC 0x4E43434Cu        /* "NCCL": a live group */
#define FA__NCCL_TCP_TAG "FA-NCCL1"       /* 8 bytes before the id on the TCP hand-over */
#define FA__NCCL_TCP_TAG_LEN 8
#define FA__NCCL_PATH_MAX 4096

/* ---------------------------------------------------------------------------------------- */
/* errors */

static FA__NCCL_TLS char fa__nccl_err[512];

static void fa__nccl_clear(void) { fa__nccl_err[0] = '\0'; }

FA__NCCL_PRINTF(2, 3)
static fa_status fa__nccl_fail(fa_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fa__nccl_err, sizeof fa__nccl_err, fmt, ap);
    va_end(ap);
    return s;
}

const char *fa_nccl_last_error(void) { return fa__nccl_err; }

int fa_nccl_version(void)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return 0;
    return v;
}

/* NVLink SHARP (multicast objects) stays off unless the process chose otherwise. */
static void fa__nccl_env_guard(void)
{
    if (getenv("NCCL_NVLS_ENABLE") == NULL) setenv("NCCL_NVLS_ENABLE", "0", 0);
}

static const char *fa__nccl_dtype_name(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return "f32";
    case FA_DTYPE_F16: return "f16";
    case FA_DTYPE_BF16: return "bf16";
    case FA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case FA_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case FA_DTYPE_I32: return "i32";
    case FA_DTYPE_I64: return "i64";
    default: return "unknown";
    }
}

/* ---------------------------------------------------------------------------------------- */
/* device scope: make `device` current, restore the previous one afterwards */

static cudaError_t fa__nccl_enter(int device, int *prev)
{
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    *prev = -1;
    if (e != cudaSuccess) {
        cudaGetLastError();
        /* no current device yet on this thread: just set ours */
        e = cudaSetDevice(device);
        if (e != cudaSuccess) cudaGetLastError();
        return e;
    }
    if (cur != device) {
        e = cudaSetDevice(device);
        if (e == cudaSuccess)
            *prev = cur;
        else
            cudaGetLastError();
    }
    return e;
}

static void fa__nccl_leave(int prev)
{
    if (prev >= 0 && cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
}

/* FA_OK when device is in [0, device count); names `what` otherwise. */
static fa_status fa__nccl_check_device(const char *fn, const char *what, int device)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: cudaGetDeviceCount failed: %s", fn, cudaGetErrorString(e));
    }
    if (device < 0 || device >= count)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: %s %d is outside [0, %d) (CUDA device count)", fn, what,
                             device, count);
    return FA_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* comm objects */

typedef struct fa__nccl_group fa__nccl_group;

typedef struct fa__nccl_ctx {
    fa__nccl_group *group;
    ncclComm_t comm;
    cudaStream_t stream;              /* not owned */
    int device, rank, world_size;
    char err[512];                    /* this comm's last failure */
} fa__nccl_ctx;

struct fa__nccl_group {
    uint32_t magic;                   /* FA__NCCL_MAGIC while alive */
    int count;                        /* comms of this process in the group */
    fa_comm *comms;                   /* [count] */
    fa__nccl_ctx *ctxs;               /* [count] */
};

FA__NCCL_PRINTF(3, 4)
static fa_status fa__nccl_ctx_fail(fa__nccl_ctx *c, fa_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return s;
}

/* NCCL type and element multiplier of a dtype; 0 if the collective does not take it. The
   byte-typed types (integers, fp8) can only be gathered, not summed. */
static int fa__nccl_type(fa_dtype dt, int reduce, ncclDataType_t *nt, size_t *mult)
{
    *mult = 1;
    switch (dt) {
    case FA_DTYPE_F32: *nt = ncclFloat32; return 1;
    case FA_DTYPE_F16: *nt = ncclFloat16; return 1;
    case FA_DTYPE_BF16: *nt = ncclBfloat16; return 1;
    case FA_DTYPE_I32:
        *nt = ncclUint8;
        *mult = 4;
        return !reduce;
    case FA_DTYPE_I64:
        *nt = ncclUint8;
        *mult = 8;
        return !reduce;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: *nt = ncclUint8; return !reduce;
    default: return 0;
    }
}

/* Shared checks of both collectives; FA_OK and *elems (NCCL elements per rank) when the call
   may go ahead, *elems = 0 for a no-op. */
static fa_status fa__nccl_prepare(fa__nccl_ctx *c, const char *op, int reduce, const void *send, void *recv,
                                  size_t count, fa_dtype dtype, ncclDataType_t *nt, size_t *elems)
{
    size_t mult = 1;
    *elems = 0;
    if (!fa__nccl_type(dtype, reduce, nt, &mult))
        return fa__nccl_ctx_fail(c, FA_ERR_UNSUPPORTED, "%s: dtype %d (%s) is not %s", op, (int)dtype,
                                 fa__nccl_dtype_name(dtype),
                                 reduce ? "f32, f16 or bf16"
                                        : "f32, f16, bf16, i32, i64, fp8_e4m3 or fp8_e5m2");
    if (count == 0) return FA_OK;
    if (send == NULL || recv == NULL)
        return fa__nccl_ctx_fail(c, FA_ERR_INVALID_ARG, "%s: %s is NULL (count %zu, rank %d)", op,
                                 send == NULL ? "send" : "recv", count, c->rank);
    if (count > (size_t)-1 / mult / (size_t)c->world_size / 8u)
        return fa__nccl_ctx_fail(c, FA_ERR_INVALID_ARG, "%s: count %zu x world_size %d overflows size_t", op,
                                 count, c->world_size);
    *elems = count * mult;
    return FA_OK;
}

/* Status of an enqueued collective: the call's result, then the comm's asynchronous state. */
static fa_status fa__nccl_result(fa__nccl_ctx *c, const char *op, ncclResult_t r, size_t count,
                                 fa_dtype dtype)
{
    ncclResult_t ar = ncclSuccess;
    if (r != ncclSuccess && r != ncclInProgress) {
        const char *detail = ncclGetLastError(c->comm);
        return fa__nccl_ctx_fail(c, FA_ERR_BACKEND,
                                 "%s of %zu x %s on rank %d of %d (device %d) failed: %s%s%s", op, count,
                                 fa__nccl_dtype_name(dtype), c->rank, c->world_size, c->device,
                                 ncclGetErrorString(r), detail && detail[0] ? ": " : "",
                                 detail ? detail : "");
    }
    if (ncclCommGetAsyncError(c->comm, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
        const char *detail = ncclGetLastError(c->comm);
        return fa__nccl_ctx_fail(c, FA_ERR_BACKEND,
                                 "%s on rank %d of %d (device %d): the communicator failed: %s%s%s", op,
                                 c->rank, c->world_size, c->device, ncclGetErrorString(ar),
                                 detail && detail[0] ? ": " : "", detail ? detail : "");
    }
    return FA_OK;
}

/* One collective on the comm's stream and device: all_gather (reduce = 0) or a summing
   reduce_scatter (reduce = 1). */
static fa_status fa__nccl_collective(void *ctx, int reduce, const void *send, void *recv, size_t count,
                                     fa_dtype dtype)
{
    fa__nccl_ctx *c = (fa__nccl_ctx *)ctx;
    const char *op = reduce ? "reduce_scatter" : "all_gather";
    ncclDataType_t nt = reduce ? ncclFloat32 : ncclUint8;
    size_t elems = 0;
    int prev = -1;
    cudaError_t ce;
    ncclResult_t r;
    fa_status s;
    if (c == NULL) return FA_ERR_INVALID_ARG;
    s = fa__nccl_prepare(c, op, reduce, send, recv, count, dtype, &nt, &elems);
    if (s != FA_OK || elems == 0) return s;
    ce = fa__nccl_enter(c->device, &prev);
    if (ce != cudaSuccess)
        return fa__nccl_ctx_fail(c, FA_ERR_BACKEND, "%s: cannot make device %d current: %s", op, c->device,
                                 cudaGetErrorString(ce));
    r = reduce ? ncclReduceScatter(send, recv, elems, nt, ncclSum, c->comm, c->stream)
               : ncclAllGather(send, recv, elems, nt, c->comm, c->stream);
    fa__nccl_leave(prev);
    return fa__nccl_result(c, op, r, count, dtype);
}

static fa_status fa__nccl_all_gather(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype)
{
    return fa__nccl_collective(ctx, 0, send, recv, count, dtype);
}

static fa_status fa__nccl_reduce_scatter(void *ctx, const void *send, void *recv, size_t count,
                                         fa_dtype dtype)
{
    return fa__nccl_collective(ctx, 1, send, recv, count, dtype);
}

static const char *fa__nccl_last_error_op(void *ctx) { return ctx ? ((const fa__nccl_ctx *)ctx)->err : ""; }

static void fa__nccl_group_free(fa__nccl_group *g)
{
    if (g == NULL) return;
    g->magic = 0;
    free(g->comms);
    free(g->ctxs);
    free(g);
}

static fa__nccl_group *fa__nccl_group_alloc(int count)
{
    fa__nccl_group *g = (fa__nccl_group *)calloc(1, sizeof *g);
    if (g == NULL) return NULL;
    g->comms = (fa_comm *)calloc((size_t)count, sizeof *g->comms);
    g->ctxs = (fa__nccl_ctx *)calloc((size_t)count, sizeof *g->ctxs);
    if (g->comms == NULL || g->ctxs == NULL) {
        fa__nccl_group_free(g);
        return NULL;
    }
    g->count = count;
    return g;
}

/* Fills entry i of a group around an initialised NCCL communicator. */
static void fa__nccl_group_set(fa__nccl_group *g, int i, ncclComm_t comm, int world_size, int rank,
                               int device, void *stream)
{
    fa__nccl_ctx *c = &g->ctxs[i];
    fa_comm *fc = &g->comms[i];
    c->group = g;
    c->comm = comm;
    c->stream = (cudaStream_t)stream;
    c->device = device;
    c->rank = rank;
    c->world_size = world_size;
    c->err[0] = '\0';
    fc->api_version = FA_BACKEND_API_VERSION;
    fc->world_size = world_size;
    fc->rank = rank;
    fc->ctx = c;
    fc->all_gather = fa__nccl_all_gather;
    fc->reduce_scatter = fa__nccl_reduce_scatter;
    fc->last_error = fa__nccl_last_error_op;
}

/* The context of an fa_comm made here, or NULL. */
static fa__nccl_ctx *fa__nccl_ctx_of(const fa_comm *comm)
{
    fa__nccl_ctx *c;
    if (comm == NULL || comm->all_gather != fa__nccl_all_gather || comm->ctx == NULL) return NULL;
    c = (fa__nccl_ctx *)comm->ctx;
    if (c->group == NULL || c->group->magic != FA__NCCL_MAGIC) return NULL;
    return c;
}

fa_status fa_nccl_comm_create(int world_size, int rank, const void *unique_id, int device, void *stream,
                              fa_comm **out)
{
    const char *fn = "fa_nccl_comm_create";
    fa__nccl_group *g;
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclResult_t r;
    cudaError_t ce;
    int prev = -1;
    fa_status s;
    fa__nccl_clear();
    if (out == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (world_size < 1)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: world_size %d must be >= 1", fn, world_size);
    if (rank < 0 || rank >= world_size)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: rank %d is outside [0, world_size %d)", fn, rank,
                             world_size);
    if (unique_id == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: unique_id is NULL", fn);
    s = fa__nccl_check_device(fn, "device", device);
    if (s != FA_OK) return s;
    g = fa__nccl_group_alloc(1);
    if (g == NULL) return fa__nccl_fail(FA_ERR_OUT_OF_MEMORY, "%s: no memory for the comm", fn);
    memcpy(&id, unique_id, sizeof id);
    fa__nccl_env_guard();
    ce = fa__nccl_enter(device, &prev);
    if (ce != cudaSuccess) {
        fa__nccl_group_free(g);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: cannot make device %d current: %s", fn, device,
                             cudaGetErrorString(ce));
    }
    r = ncclCommInitRank(&comm, world_size, id, rank);
    fa__nccl_leave(prev);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        fa__nccl_group_free(g);
        return fa__nccl_fail(FA_ERR_BACKEND,
                             "%s: ncclCommInitRank (world_size %d, rank %d, device %d) failed: %s%s%s", fn,
                             world_size, rank, device, ncclGetErrorString(r), detail && detail[0] ? ": " : "",
                             detail ? detail : "");
    }
    g->magic = FA__NCCL_MAGIC;
    fa__nccl_group_set(g, 0, comm, world_size, rank, device, stream);
    *out = &g->comms[0];
    return FA_OK;
}

fa_status fa_nccl_comms_create_local(int world_size, const int *devices, void *const *streams,
                                     fa_comm **comms_out)
{
    const char *fn = "fa_nccl_comms_create_local";
    fa__nccl_group *g;
    ncclComm_t *nc;
    ncclResult_t r;
    int i, j, prev = -1;
    fa_status s;
    fa__nccl_clear();
    if (comms_out == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: comms_out is NULL", fn);
    *comms_out = NULL;
    if (world_size < 1)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: world_size %d must be >= 1", fn, world_size);
    if (devices == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: devices is NULL", fn);
    for (i = 0; i < world_size; ++i) {
        char what[32];
        snprintf(what, sizeof what, "devices[%d]", i);
        s = fa__nccl_check_device(fn, what, devices[i]);
        if (s != FA_OK) return s;
        for (j = 0; j < i; ++j)
            if (devices[j] == devices[i])
                return fa__nccl_fail(FA_ERR_INVALID_ARG,
                                     "%s: devices[%d] = %d repeats devices[%d] (one rank per device)", fn, i,
                                     devices[i], j);
    }
    g = fa__nccl_group_alloc(world_size);
    nc = (ncclComm_t *)calloc((size_t)world_size, sizeof *nc);
    if (g == NULL || nc == NULL) {
        fa__nccl_group_free(g);
        free(nc);
        return fa__nccl_fail(FA_ERR_OUT_OF_MEMORY, "%s: no memory for %d comms", fn, world_size);
    }
    fa__nccl_env_guard();
    if (cudaGetDevice(&prev) != cudaSuccess) {
        cudaGetLastError();
        prev = -1;
    }
    r = ncclCommInitAll(nc, world_size, devices);
    fa__nccl_leave(prev);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        fa__nccl_group_free(g);
        free(nc);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: ncclCommInitAll (%d devices) failed: %s%s%s", fn,
                             world_size, ncclGetErrorString(r), detail && detail[0] ? ": " : "",
                             detail ? detail : "");
    }
    g->magic = FA__NCCL_MAGIC;
    for (i = 0; i < world_size; ++i)
        fa__nccl_group_set(g, i, nc[i], world_size, i, devices[i], streams ? streams[i] : NULL);
    free(nc);
    *comms_out = g->comms;
    return FA_OK;
}

fa_status fa_nccl_comm_destroy(fa_comm *comm)
{
    const char *fn = "fa_nccl_comm_destroy";
    fa__nccl_ctx *c;
    fa__nccl_group *g;
    ncclResult_t group_r = ncclSuccess, *fin;
    fa_status status = FA_OK;
    int i, prev = -1;
    fa__nccl_clear();
    if (comm == NULL) return FA_OK;
    c = fa__nccl_ctx_of(comm);
    if (c == NULL)
        return fa__nccl_fail(FA_ERR_INVALID_ARG,
                             "%s: comm %p was not made by fa_nccl_comm_create or "
                             "fa_nccl_comms_create_local (or was destroyed already)",
                             fn, (void *)comm);
    g = c->group;
    if (comm != &g->comms[0])
        return fa__nccl_fail(FA_ERR_INVALID_ARG,
                             "%s: comm %p is rank %d of a local group: pass the array "
                             "(&comms[0]) to destroy all its ranks at once",
                             fn, (void *)comm, c->rank);
    fin = (ncclResult_t *)calloc((size_t)g->count, sizeof *fin);
    if (cudaGetDevice(&prev) != cudaSuccess) {
        cudaGetLastError();
        prev = -1;
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    /* Flush first. Several comms of this thread finalize together (one group), else the first
       would wait for the others forever. */
    if (fin != NULL) {
        if (g->count > 1) group_r = ncclGroupStart();
        for (i = 0; i < g->count && group_r == ncclSuccess; ++i) {
            if (cudaSetDevice(g->ctxs[i].device) != cudaSuccess) cudaGetLastError();
            fin[i] = ncclCommFinalize(g->ctxs[i].comm);
        }
        if (g->count > 1 && group_r == ncclSuccess) group_r = ncclGroupEnd();
    }
#endif
    for (i = 0; i < g->count; ++i) {
        ncclResult_t r;
        int failed = fin == NULL || group_r != ncclSuccess || fin[i] != ncclSuccess;
        if (cudaSetDevice(g->ctxs[i].device) != cudaSuccess) cudaGetLastError();
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
        failed = 0;
#endif
        r = failed ? ncclCommAbort(g->ctxs[i].comm) : ncclCommDestroy(g->ctxs[i].comm);
        if ((failed || r != ncclSuccess) && status == FA_OK) {
            ncclResult_t why = r;
            if (failed) why = fin == NULL ? ncclSystemError : group_r != ncclSuccess ? group_r : fin[i];
            status = fa__nccl_fail(FA_ERR_BACKEND, "%s: rank %d (device %d): %s failed (%s), the comm was %s",
                                   fn, g->ctxs[i].rank, g->ctxs[i].device,
                                   failed ? "ncclCommFinalize" : "ncclCommDestroy", ncclGetErrorString(why),
                                   failed ? "aborted" : "not freed cleanly");
        }
    }
    fa__nccl_leave(prev);
    if (prev < 0) cudaGetLastError();
    free(fin);
    fa__nccl_group_free(g);
    return status;
}

int fa_nccl_comm_device(const fa_comm *comm)
{
    const fa__nccl_ctx *c = fa__nccl_ctx_of(comm);
    return c ? c->device : -1;
}

void *fa_nccl_comm_stream(const fa_comm *comm)
{
    const fa__nccl_ctx *c = fa__nccl_ctx_of(comm);
    return c ? (void *)c->stream : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* unique id */

fa_status fa_nccl_unique_id_create(void *id_out)
{
    const char *fn = "fa_nccl_unique_id_create";
    ncclUniqueId id;
    ncclResult_t r;
    fa__nccl_clear();
    if (id_out == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: id_out is NULL", fn);
    fa__nccl_env_guard();
    r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: ncclGetUniqueId failed: %s%s%s", fn, ncclGetErrorString(r),
                             detail && detail[0] ? ": " : "", detail ? detail : "");
    }
    memcpy(id_out, &id, sizeof id);
    return FA_OK;
}

static double fa__nccl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void fa__nccl_sleep_ms(int ms)
{
    struct timespec ts;
    if (ms <= 0) return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Milliseconds left until deadline, clamped to [0, INT_MAX-ish]. */
static int fa__nccl_left_ms(double deadline)
{
    double left = deadline - fa__nccl_now_ms();
    if (left <= 0.0) return 0;
    if (left > 2e9) return 2000000000;
    return (int)left + 1;
}

static int fa__nccl_write_all(int fd, const void *buf, size_t n)
{
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until n bytes or end of file; returns the count read, -1 on error. */
static ssize_t fa__nccl_read_all(int fd, void *buf, size_t n)
{
    char *p = (char *)buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static fa_status fa__nccl_check_path(const char *fn, const char *path)
{
    if (path == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (path[0] == '\0') return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: path is empty", fn);
    if (strlen(path) + 8 >= FA__NCCL_PATH_MAX)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: path of %zu characters is too long (max %d)", fn,
                             strlen(path), FA__NCCL_PATH_MAX - 8);
    return FA_OK;
}

fa_status fa_nccl_unique_id_write(const char *path, const void *id)
{
    const char *fn = "fa_nccl_unique_id_write";
    char tmp[FA__NCCL_PATH_MAX];
    int fd, err;
    fa_status s;
    fa__nccl_clear();
    s = fa__nccl_check_path(fn, path);
    if (s != FA_OK) return s;
    if (id == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: id is NULL", fn);
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0)
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: cannot create a temporary file next to '%s': %s", fn, path,
                             strerror(errno));
    if (fa__nccl_write_all(fd, id, FA_NCCL_UNIQUE_ID_BYTES) != 0 || fsync(fd) != 0) {
        err = errno;
        close(fd);
        unlink(tmp);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: writing '%s' failed: %s", fn, tmp, strerror(err));
    }
    if (close(fd) != 0) {
        err = errno;
        unlink(tmp);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: closing '%s' failed: %s", fn, tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: renaming '%s' to '%s' failed: %s", fn, tmp, path,
                             strerror(err));
    }
    return FA_OK;
}

fa_status fa_nccl_unique_id_read(const char *path, int timeout_ms, void *id_out)
{
    const char *fn = "fa_nccl_unique_id_read";
    unsigned char buf[FA_NCCL_UNIQUE_ID_BYTES + 1];
    double deadline;
    ssize_t n;
    int fd, err;
    fa_status s;
    fa__nccl_clear();
    s = fa__nccl_check_path(fn, path);
    if (s != FA_OK) return s;
    if (id_out == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: id_out is NULL", fn);
    if (timeout_ms < 0)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: timeout_ms %d must be >= 0", fn, timeout_ms);
    deadline = fa__nccl_now_ms() + timeout_ms;
    for (;;) {
        int left;
        fd = open(path, O_RDONLY);
        if (fd >= 0) break;
        if (errno != ENOENT && errno != EINTR)
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: cannot open '%s': %s", fn, path, strerror(errno));
        left = fa__nccl_left_ms(deadline);
        if (left <= 0)
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: timed out after %d ms waiting for '%s'", fn, timeout_ms,
                                 path);
        fa__nccl_sleep_ms(left < 10 ? left : 10);
    }
    n = fa__nccl_read_all(fd, buf, sizeof buf);
    err = errno;
    close(fd);
    if (n < 0) return fa__nccl_fail(FA_ERR_BACKEND, "%s: reading '%s' failed: %s", fn, path, strerror(err));
    if (n != FA_NCCL_UNIQUE_ID_BYTES)
        return fa__nccl_fail(FA_ERR_BACKEND,
                             "%s: '%s' holds %s%zd bytes, expected %d (not an id written by "
                             "fa_nccl_unique_id_write?)",
                             fn, path, n > FA_NCCL_UNIQUE_ID_BYTES ? "more than " : "",
                             n > FA_NCCL_UNIQUE_ID_BYTES ? (ssize_t)FA_NCCL_UNIQUE_ID_BYTES : n,
                             FA_NCCL_UNIQUE_ID_BYTES);
    memcpy(id_out, buf, FA_NCCL_UNIQUE_ID_BYTES);
    return FA_OK;
}

static void fa__nccl_loopback(struct sockaddr_in *a, int port)
{
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static int fa__nccl_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0) return -1;
    return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

/* Sends all of buf on a non-blocking socket before the deadline; 0 on success. */
static int fa__nccl_send_all(int fd, const unsigned char *buf, size_t n, double deadline)
{
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
        if (w >= 0) {
            sent += (size_t)w;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            struct pollfd p;
            int left = fa__nccl_left_ms(deadline), pr;
            if (left <= 0) return -1;
            p.fd = fd;
            p.events = POLLOUT;
            p.revents = 0;
            pr = poll(&p, 1, left);
            if (pr < 0 && errno != EINTR) return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

fa_status fa_nccl_unique_id_send_tcp(int port, int num_peers, int timeout_ms, const void *id)
{
    const char *fn = "fa_nccl_unique_id_send_tcp";
    unsigned char msg[FA__NCCL_TCP_TAG_LEN + FA_NCCL_UNIQUE_ID_BYTES];
    struct sockaddr_in addr;
    double deadline;
    int ls, one = 1, served = 0, err;
    fa__nccl_clear();
    if (port < 1 || port > 65535)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: port %d is outside [1, 65535]", fn, port);
    if (num_peers < 0)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: num_peers %d must be >= 0", fn, num_peers);
    if (timeout_ms <= 0)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: timeout_ms %d must be > 0", fn, timeout_ms);
    if (id == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: id is NULL", fn);
    if (num_peers == 0) return FA_OK;
    memcpy(msg, FA__NCCL_TCP_TAG, FA__NCCL_TCP_TAG_LEN);
    memcpy(msg + FA__NCCL_TCP_TAG_LEN, id, FA_NCCL_UNIQUE_ID_BYTES);
    deadline = fa__nccl_now_ms() + timeout_ms;
    ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) return fa__nccl_fail(FA_ERR_BACKEND, "%s: socket() failed: %s", fn, strerror(errno));
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    fa__nccl_loopback(&addr, port);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(ls, num_peers < 64 ? num_peers : 64) != 0 || fa__nccl_set_nonblock(ls, 1) != 0) {
        err = errno;
        close(ls);
        return fa__nccl_fail(FA_ERR_BACKEND, "%s: cannot listen on 127.0.0.1:%d: %s", fn, port,
                             strerror(err));
    }
    while (served < num_peers) {
        struct pollfd p;
        int left = fa__nccl_left_ms(deadline), pr, cs;
        if (left <= 0) {
            close(ls);
            return fa__nccl_fail(FA_ERR_BACKEND,
                                 "%s: timed out after %d ms on 127.0.0.1:%d with %d of %d peers served", fn,
                                 timeout_ms, port, served, num_peers);
        }
        p.fd = ls;
        p.events = POLLIN;
        p.revents = 0;
        pr = poll(&p, 1, left);
        if (pr < 0 && errno != EINTR) {
            err = errno;
            close(ls);
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: poll() on 127.0.0.1:%d failed: %s", fn, port,
                                 strerror(err));
        }
        if (pr <= 0) continue;
        cs = accept(ls, NULL, NULL);
        if (cs < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) continue;
            err = errno;
            close(ls);
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: accept() on 127.0.0.1:%d failed: %s", fn, port,
                                 strerror(err));
        }
        /* a peer that vanishes before taking the id is not counted; the others still are */
        if (fa__nccl_set_nonblock(cs, 1) == 0 && fa__nccl_send_all(cs, msg, sizeof msg, deadline) == 0)
            ++served;
        close(cs);
    }
    close(ls);
    return FA_OK;
}

fa_status fa_nccl_unique_id_recv_tcp(int port, int timeout_ms, void *id_out)
{
    const char *fn = "fa_nccl_unique_id_recv_tcp";
    unsigned char msg[FA__NCCL_TCP_TAG_LEN + FA_NCCL_UNIQUE_ID_BYTES];
    struct sockaddr_in addr;
    double deadline;
    size_t got = 0;
    int s = -1, err;
    fa__nccl_clear();
    if (port < 1 || port > 65535)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: port %d is outside [1, 65535]", fn, port);
    if (timeout_ms <= 0)
        return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: timeout_ms %d must be > 0", fn, timeout_ms);
    if (id_out == NULL) return fa__nccl_fail(FA_ERR_INVALID_ARG, "%s: id_out is NULL", fn);
    deadline = fa__nccl_now_ms() + timeout_ms;
    fa__nccl_loopback(&addr, port);
    /* connect, retrying while nobody listens yet (non-blocking, so every wait is bounded) */
    for (;;) {
        int left = fa__nccl_left_ms(deadline), rc;
        if (left <= 0)
            return fa__nccl_fail(FA_ERR_BACKEND,
                                 "%s: timed out after %d ms: nobody served an id on 127.0.0.1:%d", fn,
                                 timeout_ms, port);
        s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return fa__nccl_fail(FA_ERR_BACKEND, "%s: socket() failed: %s", fn, strerror(errno));
        if (fa__nccl_set_nonblock(s, 1) != 0) {
            err = errno;
            close(s);
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: fcntl() failed: %s", fn, strerror(err));
        }
        rc = connect(s, (struct sockaddr *)&addr, sizeof addr);
        if (rc != 0 && (errno == EINPROGRESS || errno == EINTR)) {
            struct pollfd p;
            int pr, soerr = 0;
            socklen_t len = sizeof soerr;
            p.fd = s;
            p.events = POLLOUT;
            p.revents = 0;
            pr = poll(&p, 1, left);
            if (pr > 0 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
                rc = 0;
            else
                errno = pr == 0 ? ETIMEDOUT : (soerr ? soerr : errno);
        }
        if (rc == 0) break;
        err = errno;
        close(s);
        s = -1;
        if (err != ECONNREFUSED && err != ETIMEDOUT && err != ECONNRESET && err != EAGAIN && err != EINTR &&
            err != ECONNABORTED)
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: cannot connect to 127.0.0.1:%d: %s", fn, port,
                                 strerror(err));
        left = fa__nccl_left_ms(deadline);
        fa__nccl_sleep_ms(left < 20 ? left : 20);
    }
    /* receive tag + id */
    while (got < sizeof msg) {
        struct pollfd p;
        int left = fa__nccl_left_ms(deadline), pr;
        ssize_t r;
        if (left <= 0) {
            close(s);
            return fa__nccl_fail(FA_ERR_BACKEND,
                                 "%s: timed out after %d ms reading the id from 127.0.0.1:%d (%zu of %zu "
                                 "bytes)",
                                 fn, timeout_ms, port, got, sizeof msg);
        }
        p.fd = s;
        p.events = POLLIN;
        p.revents = 0;
        pr = poll(&p, 1, left);
        if (pr < 0 && errno != EINTR) {
            err = errno;
            close(s);
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: poll() failed: %s", fn, strerror(err));
        }
        if (pr <= 0) continue;
        r = recv(s, msg + got, sizeof msg - got, 0);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            err = errno;
            close(s);
            return fa__nccl_fail(FA_ERR_BACKEND, "%s: recv() from 127.0.0.1:%d failed: %s", fn, port,
                                 strerror(err));
        }
        if (r == 0) {
            close(s);
            return fa__nccl_fail(FA_ERR_BACKEND,
                                 "%s: 127.0.0.1:%d closed the connection after %zu of %zu bytes", fn, port,
                                 got, sizeof msg);
        }
        got += (size_t)r;
    }
    close(s);
    if (memcmp(msg, FA__NCCL_TCP_TAG, FA__NCCL_TCP_TAG_LEN) != 0)
        return fa__nccl_fail(FA_ERR_BACKEND,
                             "%s: 127.0.0.1:%d sent something that is not a flashattn NCCL id", fn, port);
    memcpy(id_out, msg + FA__NCCL_TCP_TAG_LEN, FA_NCCL_UNIQUE_ID_BYTES);
    return FA_OK;
}
