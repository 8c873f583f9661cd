// fa_cuda.cu - the CUDA backend's vtable: context, constructor, and the ops that are thin
// wrappers of the CUDA runtime (copy, fill, alloc, free, synchronize). The kernels live in
// cache_kernels.cu (reshape_and_cache), merge_kernels.cu (merge_states, dcp_correct) and
// attention/ (attention).
//
// Every op runs on the backend's device and stream, whatever device is current on the
// calling thread (a DeviceGuard switches and restores it). Only alloc, free and synchronize
// allocate or wait for the device; everything else is asynchronous and graph-capturable.
#include "fa_cuda.h"
#include "fa_cuda_internal.cuh"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The memory-bound kernels (cache_kernels.cu, merge_kernels.cu); same contract as
// fa_cuda__attention: validate, launch on `stream`, on failure write the message into err.
fa_status fa_cuda__reshape_and_cache(const fa_cache_write_args *a, cudaStream_t stream, char *err,
                                     size_t err_size);
fa_status fa_cuda__merge_states(const fa_merge_args *a, cudaStream_t stream, char *err,
                                size_t err_size);
fa_status fa_cuda__dcp_correct(const fa_dcp_correct_args *a, cudaStream_t stream, char *err,
                               size_t err_size);

#ifndef FA_CUDA_HAVE_ATTENTION
#define FA_CUDA_HAVE_ATTENTION 1
#endif  // FA_CUDA_HAVE_ATTENTION

namespace {

struct Ctx {
    fa_backend be;              // first: the handle given out is &ctx->be
    int device;
    cudaStream_t stream;        // not owned
    char err[512];              // message of the last failure
};

thread_local char g_create_err[256];

fa_status vfail(char *buf, size_t size, fa_status st, const char *fmt, va_list ap) {
    vsnprintf(buf, size, fmt, ap);
    return st;
}

__attribute__((format(printf, 3, 4))) fa_status fail(Ctx *c, fa_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c->err, sizeof c->err, st, fmt, ap);
    va_end(ap);
    return st;
}

__attribute__((format(printf, 2, 3))) fa_status create_fail(fa_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(g_create_err, sizeof g_create_err, "fa_cuda_backend_create: ");
    if (n < 0) n = 0;
    vfail(g_create_err + n, sizeof g_create_err - (size_t)n, st, fmt, ap);
    va_end(ap);
    return st;
}

// Makes `device` current for the scope; restores the previous device at the end.
struct DeviceGuard {
    int prev = -1;
    cudaError_t status = cudaSuccess;
    explicit DeviceGuard(int device) {
        int cur = -1;
        status = cudaGetDevice(&cur);
        if (status == cudaSuccess && cur != device) {
            status = cudaSetDevice(device);
            if (status == cudaSuccess) prev = cur;
        }
    }
    ~DeviceGuard() {
        if (prev >= 0) cudaSetDevice(prev);
    }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;
};

Ctx *ctx_of(void *ctx) { return static_cast<Ctx *>(ctx); }

// Makes the backend's device current for the rest of the op (restored when the op returns);
// returns FA_ERR_BACKEND from the op if that fails. Then clears a stale, non-sticky error of
// an earlier runtime call on this thread (the caller's), so that the launch check after the
// op's kernel reports the op's own failure only (a sticky error still shows there).
#define FA__ENTER(c, op)                                                                        \
    DeviceGuard guard_((c)->device);                                                           \
    if (guard_.status != cudaSuccess) {                                                        \
        cudaGetLastError();                                                                    \
        return fail((c), FA_ERR_BACKEND, "%s: cannot make device %d current: %s", (op),         \
                    (c)->device, cudaGetErrorString(guard_.status));                           \
    }                                                                                          \
    cudaGetLastError();

fa_status op_reshape_and_cache(void *ctx, const fa_cache_write_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "reshape_and_cache");
    return fa_cuda__reshape_and_cache(a, c->stream, c->err, sizeof c->err);
}

fa_status op_attention(void *ctx, const fa_attn_args *a) {
    Ctx *c = ctx_of(ctx);
#if FA_CUDA_HAVE_ATTENTION
    FA__ENTER(c, "attention");
    return fa_cuda__attention(a, c->stream, &c->be.info, c->err, sizeof c->err);
#else   // !FA_CUDA_HAVE_ATTENTION
    (void)a;
    return fail(c, FA_ERR_UNSUPPORTED, "attention: this build of the CUDA backend has no attention "
                                       "kernels (backends/cuda/attention was not built)");
#endif  // FA_CUDA_HAVE_ATTENTION
}

fa_status op_merge_states(void *ctx, const fa_merge_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "merge_states");
    return fa_cuda__merge_states(a, c->stream, c->err, sizeof c->err);
}

fa_status op_dcp_correct(void *ctx, const fa_dcp_correct_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "dcp_correct");
    return fa_cuda__dcp_correct(a, c->stream, c->err, sizeof c->err);
}

fa_status op_copy(void *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind) {
    Ctx *c = ctx_of(ctx);
    cudaMemcpyKind k;
    switch (kind) {
    case FA_COPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
    case FA_COPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
    case FA_COPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
    default: return fail(c, FA_ERR_INVALID_ARG, "copy: kind %d is not a fa_copy_kind", (int)kind);
    }
    if (bytes == 0) return FA_OK;
    if (!dst) return fail(c, FA_ERR_INVALID_ARG, "copy: dst is NULL (%zu bytes)", bytes);
    if (!src) return fail(c, FA_ERR_INVALID_ARG, "copy: src is NULL (%zu bytes)", bytes);
    FA__ENTER(c, "copy");
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(c, FA_ERR_BACKEND, "copy: cudaMemcpyAsync of %zu bytes failed: %s", bytes,
                    cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_copy_2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                     size_t width_bytes, size_t rows, fa_copy_kind kind) {
    Ctx *c = ctx_of(ctx);
    cudaMemcpyKind k;
    switch (kind) {
    case FA_COPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
    case FA_COPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
    case FA_COPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
    default: return fail(c, FA_ERR_INVALID_ARG, "copy_2d: kind %d is not a fa_copy_kind", (int)kind);
    }
    if (width_bytes == 0 || rows == 0) return FA_OK;
    if (!dst) return fail(c, FA_ERR_INVALID_ARG, "copy_2d: dst is NULL");
    if (!src) return fail(c, FA_ERR_INVALID_ARG, "copy_2d: src is NULL");
    if (dpitch < width_bytes || spitch < width_bytes)
        return fail(c, FA_ERR_INVALID_ARG, "copy_2d: %s %zu is smaller than width_bytes %zu",
                    dpitch < width_bytes ? "dpitch" : "spitch", dpitch < width_bytes ? dpitch : spitch,
                    width_bytes);
    FA__ENTER(c, "copy_2d");
    const cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width_bytes, rows, k, c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(c, FA_ERR_BACKEND, "copy_2d: cudaMemcpy2DAsync of %zu rows x %zu bytes failed: %s",
                    rows, width_bytes, cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_fill(void *ctx, void *dst, size_t pitch, int value, size_t width_bytes, size_t rows) {
    Ctx *c = ctx_of(ctx);
    if (width_bytes == 0 || rows == 0) return FA_OK;
    if (!dst) return fail(c, FA_ERR_INVALID_ARG, "fill: dst is NULL");
    if (rows > 1 && pitch < width_bytes)
        return fail(c, FA_ERR_INVALID_ARG, "fill: pitch %zu is smaller than width_bytes %zu", pitch,
                    width_bytes);
    FA__ENTER(c, "fill");
    const cudaError_t e = rows == 1 ? cudaMemsetAsync(dst, value, width_bytes, c->stream)
                                    : cudaMemset2DAsync(dst, pitch, value, width_bytes, rows, c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(c, FA_ERR_BACKEND, "fill: memset of %zu rows x %zu bytes (pitch %zu) failed: %s",
                    rows, width_bytes, pitch, cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_alloc(void *ctx, size_t bytes, void **ptr) {
    Ctx *c = ctx_of(ctx);
    if (!ptr) return fail(c, FA_ERR_INVALID_ARG, "alloc: ptr is NULL");
    *ptr = NULL;
    if (bytes == 0) return FA_OK;
    FA__ENTER(c, "alloc");
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();     // an allocation failure must not stick to the next launch
        return fail(c, e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND,
                    "alloc: cudaMalloc of %zu bytes on device %d failed: %s", bytes, c->device,
                    cudaGetErrorString(e));
    }
    *ptr = p;
    return FA_OK;
}

fa_status op_free(void *ctx, void *ptr) {
    Ctx *c = ctx_of(ctx);
    if (!ptr) return FA_OK;
    FA__ENTER(c, "free");
    const cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(c, FA_ERR_BACKEND, "free: cudaFree(%p) failed: %s", ptr, cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_synchronize(void *ctx) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "synchronize");
    const cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(c, FA_ERR_BACKEND, "synchronize: %s", cudaGetErrorString(e));
    }
    return FA_OK;
}

const char *op_last_error(void *ctx) { return ctx_of(ctx)->err; }

}  // namespace

extern "C" const char *fa_cuda_create_error(void) { return g_create_err; }

extern "C" fa_status fa_cuda_backend_create(int device, void *stream, fa_backend **out) {
    g_create_err[0] = '\0';
    if (!out) return create_fail(FA_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return create_fail(FA_ERR_BACKEND, "cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
    }
    if (device < 0 || device >= count)
        return create_fail(FA_ERR_INVALID_ARG, "device %d is outside [0, %d)", device, count);

    DeviceGuard guard(device);
    if (guard.status != cudaSuccess) {
        cudaGetLastError();
        return create_fail(FA_ERR_BACKEND, "cannot make device %d current: %s", device,
                           cudaGetErrorString(guard.status));
    }
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    int major = 0, minor = 0, sms = 0, smem_block = 0, smem_sm = 0;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
            cudaSuccess ||
        (e = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device)) !=
            cudaSuccess) {
        cudaGetLastError();
        return create_fail(FA_ERR_BACKEND, "reading the properties of device %d failed: %s", device,
                           cudaGetErrorString(e));
    }
    if (major * 10 + minor < 80)
        return create_fail(FA_ERR_UNSUPPORTED,
                           "device %d (%s) has compute capability %d.%d; the CUDA backend needs >= 8.0",
                           device, prop.name, major, minor);

    Ctx *c = static_cast<Ctx *>(calloc(1, sizeof(Ctx)));
    if (!c) return create_fail(FA_ERR_OUT_OF_MEMORY, "malloc of %zu bytes failed", sizeof(Ctx));
    c->device = device;
    c->stream = static_cast<cudaStream_t>(stream);
    fa_backend *be = &c->be;
    be->api_version = FA_BACKEND_API_VERSION;
    be->name = "cuda";
    be->ctx = c;
    be->ops.reshape_and_cache = op_reshape_and_cache;
    be->ops.attention = op_attention;
    be->ops.merge_states = op_merge_states;
    be->ops.dcp_correct = op_dcp_correct;
    be->ops.copy = op_copy;
    be->ops.fill = op_fill;
    be->ops.copy_2d = op_copy_2d;
    be->ops.alloc = op_alloc;
    be->ops.free = op_free;
    be->ops.synchronize = op_synchronize;
    be->ops.last_error = op_last_error;
    size_t name_len = strnlen(prop.name, sizeof prop.name);
    if (name_len > sizeof be->info.name - 1) name_len = sizeof be->info.name - 1;
    memcpy(be->info.name, prop.name, name_len);
    be->info.name[name_len] = '\0';
    be->info.cc_major = major;
    be->info.cc_minor = minor;
    be->info.num_sms = sms;
    be->info.smem_per_block = smem_block;
    be->info.smem_per_sm = smem_sm;
    *out = be;
    return FA_OK;
}

extern "C" void fa_cuda_backend_destroy(fa_backend *be) {
    if (!be) return;
    free(be->ctx);   // the context holds the fa_backend itself
}
