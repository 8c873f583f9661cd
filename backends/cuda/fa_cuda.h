/* fa_cuda.h - the CUDA backend of flashattn (constructor; pulls in no CUDA header)

   Usage
       fa_backend *be;
       if (fa_cuda_backend_create(0, (void *)stream, &be) != FA_OK) { ... }
       ... fa_builder_create(be, ...), fa_forward(..., be, ...) ...
       fa_cuda_backend_destroy(be);

   Every op runs asynchronously on the stream given at creation (NULL = the legacy default
   stream) and on the device given at creation, whatever device is current on the calling
   thread (the current device is restored before an op returns). No op allocates or
   synchronises with the host except alloc, free and synchronize, so whole forward passes can
   be captured in a CUDA graph. A failing op returns FA_ERR_INVALID_ARG (the message names
   the argument and value), FA_ERR_UNSUPPORTED, or FA_ERR_BACKEND (the message carries
   cudaGetErrorString); ops.last_error returns the message of the backend's last failure.
   A cache slot past num_blocks * block_size or a block id outside [0, num_blocks) is never
   written or read; the kernel records the first one, and the backend's next op call (any op,
   check included) or synchronize returns FA_ERR_INVALID_ARG naming it (no sync is added: a call
   made while that kernel still runs reports it on a later call). ops.check runs an op's checks
   without launching; be->caps holds the compiled kernels' tile facts (docs/cuda.md).

   Thread safety: ops may be called from several threads only if the caller serialises them
   (the backend keeps one last-error buffer and uses one stream).

   Link: libflashattn_cuda.a, the CUDA runtime (-lcudart) and the C++ runtime (-lstdc++).
*/
#ifndef FA_CUDA_H
#define FA_CUDA_H

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif /* __cplusplus */

/* Creates a backend on CUDA device `device` whose ops run on `stream` (a cudaStream_t, or
   NULL for the legacy default stream; the backend does not own it). Fills be->info (name,
   compute capability, multiprocessor count, opt-in shared memory per block, shared memory
   per multiprocessor). Returns FA_ERR_INVALID_ARG for a NULL out or a device outside
   [0, device count), FA_ERR_UNSUPPORTED for compute capability < 8.0, FA_ERR_BACKEND when
   the CUDA runtime fails (no driver, no device), FA_ERR_OUT_OF_MEMORY if malloc fails.
   On failure *out is NULL and fa_cuda_create_error() says why. */
fa_status fa_cuda_backend_create(int device, void *stream, fa_backend **out);

/* Kernel families the attention op may use (fa_cuda_backend_set_family). */
typedef enum fa_cuda_family {
    FA_CUDA_FAMILY_AUTO = 0,     /* the fastest built family the call and the device allow: on
                                    sm_90 devices (with sm_90a in gpu_arch) the wgmma family for
                                    the prefill calls it accepts (docs/cuda.md), else mma.sync */
    FA_CUDA_FAMILY_MMA_SYNC = 1, /* the mma.sync (FA2-class) family for every call */
    FA_CUDA_FAMILY_WGMMA = 2     /* the wgmma family for every call it accepts, decode calls
                                    included (auto runs those in the decode tiles, which are
                                    faster: docs/perf.md); the others as under auto */
} fa_cuda_family;
/* Picks the kernel families of be's attention op (default FA_CUDA_FAMILY_AUTO) and updates
   be->caps (dims[].prefill_family). Not thread-safe against ops running on be. Returns
   FA_ERR_INVALID_ARG for a NULL or non-CUDA be or an unknown family, FA_ERR_UNSUPPORTED for
   FA_CUDA_FAMILY_WGMMA where the wgmma family is not built (gpu_arch without sm_90a) or the
   device is not 9.x (nothing changed then). */
fa_status fa_cuda_backend_set_family(fa_backend *be, int family);
/* When the wgmma family's plain 16-bit prefill kernels at heads 64 / 128 (TMA producer, no
   multicast pair) run as a persistent grid: one CTA an SM taking the work items longest first
   from fa_attn_args.work_counters, in the calls that give counters (fa_forward passes the
   builder's); otherwise one CTA an item. The results are the same bits either way. */
typedef enum fa_cuda_persist {
    FA_CUDA_PERSIST_OFF = 0,  /* one CTA an item in every call */
    FA_CUDA_PERSIST_ON = 1,   /* the persistent grid in every call it serves */
    FA_CUDA_PERSIST_AUTO = 2  /* (the default) the persistent grid in calls whose max_seqlen_q is
                                 at most FA_CUDA_PERSIST_AUTO_ROWS: short items, where it saves an
                                 item's start (measured 0.89-0.94 of the time at 16 x 1024 and
                                 0.94-1.07 at 4 x 4096, 1.03-1.05 at 1 x 16384: docs/perf.md) */
} fa_cuda_persist;
#define FA_CUDA_PERSIST_AUTO_ROWS 1024
/* Sets be's persistent-grid mode (an fa_cuda_persist). Not thread-safe against ops running on
   be. Returns FA_ERR_INVALID_ARG for a NULL or non-CUDA be or a mode outside the enum (nothing
   changed then). */
fa_status fa_cuda_backend_set_persistent(fa_backend *be, int mode);
/* When the wgmma family packs the query heads of a KV head into the rows of its row blocks (GQA
   packing: a row block's 128 rows are 128 / G tokens x the G query heads of one KV head, so that
   a short query, e.g. a speculative-decoding verify step, fills them and the KV head's K / V is
   streamed once a row block rather than once a query head). Only where G (Hq / Hkv, of a
   query-head group where the call has groups) is a power of two in [2, 64]. A row's result is the
   same bits either way, except in split-KV calls (a split's keys follow its row block's) and
   where a key masked for the row has a non-finite V. */
typedef enum fa_cuda_gqa_pack {
    FA_CUDA_GQA_PACK_OFF = 0, /* a row block is 128 tokens of one query head in every call */
    FA_CUDA_GQA_PACK_ON = 1,  /* packed in every call it serves */
    FA_CUDA_GQA_PACK_AUTO = 2 /* (the default) packed in calls whose max_seqlen_q is at most
                                 FA_CUDA_GQA_PACK_AUTO_ROWS: where a row block of one query head
                                 could not be full */
} fa_cuda_gqa_pack;
#define FA_CUDA_GQA_PACK_AUTO_ROWS 127
/* Sets be's GQA packing mode (an fa_cuda_gqa_pack). Not thread-safe against ops running on be.
   Returns FA_ERR_INVALID_ARG for a NULL or non-CUDA be or a mode outside the enum (nothing
   changed then). */
fa_status fa_cuda_backend_set_gqa_pack(fa_backend *be, int mode);
/* Destroys a backend made by fa_cuda_backend_create (NULL is a no-op). Does not free device
   memory obtained through ops.alloc, nor the stream. */
void fa_cuda_backend_destroy(fa_backend *be);

/* Detail of the last failed fa_cuda_backend_create on this thread ("" if none failed). */
const char *fa_cuda_create_error(void);

#ifdef __cplusplus
}
#endif /* __cplusplus */

#endif /* FA_CUDA_H */
