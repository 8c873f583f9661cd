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

#ifndef FA_CUDA_HAVE_ATTENTION
#define FA_CUDA_HAVE_ATTENTION 1
#endif  // FA_CUDA_HAVE_ATTENTION
#ifndef FA_CUDA_HAVE_SM90
#define FA_CUDA_HAVE_SM90 0
#endif  // FA_CUDA_HAVE_SM90

namespace {

struct Ctx {
    fa_backend be;              // first: the handle given out is &ctx->be
    int device;
    cudaStream_t stream;        // not owned
    FaDevErr *err_host;         // the device error word (mapped pinned host memory)
    FaDevErr *err_dev;          // its device address
    char err[512];              // message of the last failure
    int family;                 // fa_cuda_family
    int persist;                // fa_cuda_backend_set_persistent (an fa_cuda_persist)
    int gqa_pack;               // fa_cuda_backend_set_gqa_pack (an fa_cuda_gqa_pack)
    bool sm90_ok; // the sm_90a family is built, the device is 9.x, the driver encodes tensor maps
    void *tmap_encode; // cuTensorMapEncodeTiled
};

thread_local char g_create_err[256];

// "<op>: <message>" into the context's buffer (the op name starts fmt).
__attribute__((format(printf, 3, 4))) fa_status fail(Ctx *c, fa_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

#define create_fail(st, ...) fa_bu_fail(&g_create_e, (st), __VA_ARGS__)
thread_local fa_bu_err g_create_e = {g_create_err, sizeof g_create_err, "fa_cuda_backend_create"};

// A bad index an earlier kernel recorded in the error word: reported by the next op call (or
// synchronize) as FA_ERR_INVALID_ARG, then cleared. Flag 1 (a kernel is still writing the
// fields) is left for the next call.
fa_status take_device_error(Ctx *c) {
    volatile FaDevErr *w = c->err_host;
    if (w == nullptr || w->flag != 2) return FA_OK;
    const int op = w->op;
    const long long index = (long long)w->index, value = (long long)w->value;
    const long long limit = (long long)w->limit, aux = (long long)w->aux;
    if (op == FA_DEVERR_CACHE_SLOT)
        fail(c, FA_ERR_INVALID_ARG,
             "cuda reshape_and_cache: slot_mapping[%lld] = %lld is outside the cache (%lld blocks x %lld); "
             "the token was not written",
             index, value, limit, aux);
    else if (op == FA_DEVERR_BLOCK_ID)
        fail(c, FA_ERR_INVALID_ARG,
             "cuda attention: block_table id %lld (row %lld, column %lld) is outside [0, %lld); "
             "its keys were not read and the row's output is undefined (finite)",
             value, index, aux, limit);
    else
        fail(c, FA_ERR_INVALID_ARG, "cuda: a kernel reported error %d (index %lld, value %lld, limit %lld)",
             op, index, value, limit);
    w->op = 0;
    w->index = w->value = w->limit = w->aux = 0;
    __sync_synchronize();
    w->flag = 0;
    return FA_ERR_INVALID_ARG;
}

#define FA__TAKE_DEVICE_ERROR(c) \
    do { \
        const fa_status dev_st_ = take_device_error(c); \
        if (dev_st_ != FA_OK) return dev_st_; \
    } while (0)

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
#define FA__ENTER(c, op) \
    FA__TAKE_DEVICE_ERROR(c); \
    DeviceGuard guard_((c)->device); \
    if (guard_.status != cudaSuccess) { \
        cudaGetLastError(); \
        return fail((c), FA_ERR_BACKEND, "%s: cannot make device %d current: %s", (op), (c)->device, \
                    cudaGetErrorString(guard_.status)); \
    } \
    cudaGetLastError();

// Whether calls the sm_90a family accepts run there (built, 9.x device, family auto).
bool wgmma_on(const Ctx *c) { return c->sm90_ok && c->family != FA_CUDA_FAMILY_MMA_SYNC; }

FaLaunch launch_of(Ctx *c) {
    FaLaunch L;
    L.stream = c->stream;
    L.info = &c->be.info;
    L.err_word = c->err_dev;
    L.sm90 = wgmma_on(c) ? (c->family == FA_CUDA_FAMILY_WGMMA ? 2 : 1) : 0;
    L.tmap_encode = c->tmap_encode;
    L.persist = c->persist;
    L.gqa_pack = c->gqa_pack;
    return L;
}

// The families' part of the capability block: the widths whose prefill calls may run in the
// wgmma family (when it is in use: heads 64, 128 and 256).
void set_family_caps(Ctx *c) {
    fa_backend_caps *caps = &c->be.caps;
    for (int i = 0; i < caps->num_dims; ++i) {
#if FA_CUDA_HAVE_SM90
        const bool served = wgmma_on(c) && fa_sm90__serves_head(caps->dims[i].head_dim);
#else
        const bool served = false; // no sm_90a family in this build
#endif
        caps->dims[i].prefill_family = served ? FA_KERNEL_FAMILY_WGMMA : FA_KERNEL_FAMILY_MMA_SYNC;
    }
}

fa_status op_reshape_and_cache(void *ctx, const fa_cache_write_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "reshape_and_cache");
    const FaLaunch L = launch_of(c);
    return fa_cuda__reshape_and_cache(a, &L, c->err, sizeof c->err);
}

fa_status op_attention(void *ctx, const fa_attn_args *a) {
    Ctx *c = ctx_of(ctx);
#if FA_CUDA_HAVE_ATTENTION
    FA__ENTER(c, "attention");
    const FaLaunch L = launch_of(c);
    return fa_cuda__attention(a, &L, c->err, sizeof c->err);
#else // !FA_CUDA_HAVE_ATTENTION
    (void)a;
    FA__TAKE_DEVICE_ERROR(c);
    return fail(c, FA_ERR_UNSUPPORTED,
                "attention: this build of the CUDA backend has no attention "
                "kernels (backends/cuda/attention was not built)");
#endif // FA_CUDA_HAVE_ATTENTION
}

fa_status op_merge_states(void *ctx, const fa_merge_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "merge_states");
    const FaLaunch L = launch_of(c);
    return fa_cuda__merge_states(a, &L, c->err, sizeof c->err);
}

fa_status op_dcp_correct(void *ctx, const fa_dcp_correct_args *a) {
    Ctx *c = ctx_of(ctx);
    FA__ENTER(c, "dcp_correct");
    const FaLaunch L = launch_of(c);
    return fa_cuda__dcp_correct(a, &L, c->err, sizeof c->err);
}

// Every check the op would make, without launching (the ops run the same functions first). A
// pending device error is reported here too: fa_forward checks before its first op.
fa_status op_check(void *ctx, fa_op op, const void *args) {
    Ctx *c = ctx_of(ctx);
    FA__TAKE_DEVICE_ERROR(c);
    switch (op) {
    case FA_OP_RESHAPE_AND_CACHE:
        return fa_cuda__reshape_and_cache_check(static_cast<const fa_cache_write_args *>(args), c->err,
                                                sizeof c->err);
    case FA_OP_ATTENTION:
#if FA_CUDA_HAVE_ATTENTION
    {
        const FaLaunch L = launch_of(c);
        return fa_cuda__attention_check(static_cast<const fa_attn_args *>(args), &L, c->err, sizeof c->err);
    }
#else // !FA_CUDA_HAVE_ATTENTION
        return fail(c, FA_ERR_UNSUPPORTED,
                    "attention: this build of the CUDA backend has no attention "
                    "kernels (backends/cuda/attention was not built)");
#endif // FA_CUDA_HAVE_ATTENTION
    case FA_OP_MERGE_STATES:
        return fa_cuda__merge_states_check(static_cast<const fa_merge_args *>(args), c->err, sizeof c->err);
    case FA_OP_DCP_CORRECT:
        return fa_cuda__dcp_correct_check(static_cast<const fa_dcp_correct_args *>(args), c->err,
                                          sizeof c->err);
    default: return fail(c, FA_ERR_INVALID_ARG, "check: op %d is not a fa_op", (int)op);
    }
}

fa_status op_copy(void *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind) {
    Ctx *c = ctx_of(ctx);
    FA__TAKE_DEVICE_ERROR(c);
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

fa_status op_copy_2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width_bytes,
                     size_t rows, fa_copy_kind kind) {
    Ctx *c = ctx_of(ctx);
    FA__TAKE_DEVICE_ERROR(c);
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
        return fail(c, FA_ERR_BACKEND, "copy_2d: cudaMemcpy2DAsync of %zu rows x %zu bytes failed: %s", rows,
                    width_bytes, cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_fill(void *ctx, void *dst, size_t pitch, int value, size_t width_bytes, size_t rows) {
    Ctx *c = ctx_of(ctx);
    FA__TAKE_DEVICE_ERROR(c);
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
        return fail(c, FA_ERR_BACKEND, "fill: memset of %zu rows x %zu bytes (pitch %zu) failed: %s", rows,
                    width_bytes, pitch, cudaGetErrorString(e));
    }
    return FA_OK;
}

fa_status op_alloc(void *ctx, size_t bytes, void **ptr) {
    Ctx *c = ctx_of(ctx);
    FA__TAKE_DEVICE_ERROR(c);
    if (!ptr) return fail(c, FA_ERR_INVALID_ARG, "alloc: ptr is NULL");
    *ptr = NULL;
    if (bytes == 0) return FA_OK;
    FA__ENTER(c, "alloc");
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); // an allocation failure must not stick to the next launch
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
    return take_device_error(c); // what the finished kernels recorded
}

const char *op_last_error(void *ctx) { return ctx_of(ctx)->err; }

} // namespace

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
    void *word = nullptr;
    if ((e = cudaHostAlloc(&word, sizeof(FaDevErr), cudaHostAllocMapped | cudaHostAllocPortable)) !=
            cudaSuccess ||
        (e = cudaHostGetDevicePointer(reinterpret_cast<void **>(&c->err_dev), word, 0)) != cudaSuccess) {
        cudaGetLastError();
        if (word) cudaFreeHost(word);
        free(c);
        return create_fail(FA_ERR_BACKEND, "cudaHostAlloc (mapped) of the %zu-byte error word failed: %s",
                           sizeof(FaDevErr), cudaGetErrorString(e));
    }
    memset(word, 0, sizeof(FaDevErr));
    c->err_host = static_cast<FaDevErr *>(word);
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
    be->ops.check = op_check;
    size_t name_len = strnlen(prop.name, sizeof prop.name);
    if (name_len > sizeof be->info.name - 1) name_len = sizeof be->info.name - 1;
    memcpy(be->info.name, prop.name, name_len);
    be->info.name[name_len] = '\0';
    be->info.cc_major = major;
    be->info.cc_minor = minor;
    be->info.num_sms = sms;
    be->info.smem_per_block = smem_block;
    be->info.smem_per_sm = smem_sm;
#if FA_CUDA_HAVE_ATTENTION
    fa_cuda__attention_caps(&be->caps, major); // the kernels' compiled tile facts (attention_tiles.h)
#if FA_CUDA_HAVE_SM90
    if (major == 9) {
        c->tmap_encode = fa_sm90__encode_fn();
        c->sm90_ok = c->tmap_encode != nullptr;
    }
#endif // FA_CUDA_HAVE_SM90
    c->family = FA_CUDA_FAMILY_AUTO;
    c->persist = FA_CUDA_PERSIST_AUTO;
    c->gqa_pack = FA_CUDA_GQA_PACK_AUTO;
    set_family_caps(c);
#else // !FA_CUDA_HAVE_ATTENTION
    be->caps.num_dims = 0;
    be->caps.act_dtypes = (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    be->caps.head_size_multiple = FA_BU_HEAD_SIZE_MULTIPLE;
    be->caps.align_bytes = 16;
#endif // FA_CUDA_HAVE_ATTENTION
    *out = be;
    return FA_OK;
}

// Whether be is a backend made by fa_cuda_backend_create (the setters' first check).
static bool is_cuda(const fa_backend *be) {
    return be != nullptr && be->name != nullptr && strcmp(be->name, "cuda") == 0 && be->ctx != nullptr;
}

extern "C" fa_status fa_cuda_backend_set_family(fa_backend *be, int family) {
    if (!is_cuda(be)) return FA_ERR_INVALID_ARG;
    Ctx *c = ctx_of(be->ctx);
    if (family != FA_CUDA_FAMILY_AUTO && family != FA_CUDA_FAMILY_MMA_SYNC && family != FA_CUDA_FAMILY_WGMMA)
        return fail(
            c, FA_ERR_INVALID_ARG,
            "fa_cuda_backend_set_family: family %d is not a fa_cuda_family (0 auto, 1 mma_sync, 2 wgmma)",
            family);
    if (family == FA_CUDA_FAMILY_WGMMA && !c->sm90_ok) {
        if (!FA_CUDA_HAVE_SM90)
            return fail(
                c, FA_ERR_UNSUPPORTED,
                "fa_cuda_backend_set_family: family 2 (wgmma) is not built (gpu_arch without sm_90a)");
        if (be->info.cc_major != 9)
            return fail(c, FA_ERR_UNSUPPORTED,
                        "fa_cuda_backend_set_family: family 2 (wgmma) needs a 9.x device, this one is %d.%d",
                        static_cast<int>(be->info.cc_major), static_cast<int>(be->info.cc_minor));
        return fail(c, FA_ERR_UNSUPPORTED,
                    "fa_cuda_backend_set_family: family 2 (wgmma): the driver has no cuTensorMapEncodeTiled");
    }
    c->family = family;
    set_family_caps(c);
    return FA_OK;
}

extern "C" fa_status fa_cuda_backend_set_persistent(fa_backend *be, int mode) {
    if (!is_cuda(be) ||
        (mode != FA_CUDA_PERSIST_OFF && mode != FA_CUDA_PERSIST_ON && mode != FA_CUDA_PERSIST_AUTO))
        return FA_ERR_INVALID_ARG;
    ctx_of(be->ctx)->persist = mode;
    return FA_OK;
}

extern "C" fa_status fa_cuda_backend_set_gqa_pack(fa_backend *be, int mode) {
    if (!is_cuda(be) ||
        (mode != FA_CUDA_GQA_PACK_OFF && mode != FA_CUDA_GQA_PACK_ON && mode != FA_CUDA_GQA_PACK_AUTO))
        return FA_ERR_INVALID_ARG;
    ctx_of(be->ctx)->gqa_pack = mode;
    return FA_OK;
}

extern "C" void fa_cuda_backend_destroy(fa_backend *be) {
    if (!be) return;
    Ctx *c = ctx_of(be->ctx);
    if (c->err_host) {
        DeviceGuard guard(c->device);
        cudaFreeHost(c->err_host);
        cudaGetLastError();
    }
    free(c); // the context holds the fa_backend itself
}
