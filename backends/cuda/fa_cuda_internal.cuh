// Internal interface between the CUDA backend's files. Not installed; CUDA/HIP only.
#pragma once
#include "flashattn.h"
#include "vendor.cuh"   // CUDA / HIP name mapping (cudaStream_t, cudaError_t, ...)
#include "fa_backend_util.h"   // backends/common: dtype names, fa_bu_fail, structural checks

// ---- device error word ------------------------------------------------------------------------
// Kernels that meet a bad index (a slot past the cache, a block id outside [0, num_blocks)) skip
// it and record the FIRST one here. The word lives in mapped pinned host memory (one per
// backend, a fixed pointer: graph captures keep it), so the host reads it without a sync: every
// later op call and synchronize look at it (volatile), report it as FA_ERR_INVALID_ARG and
// clear it. flag: 0 = empty, 1 = a kernel claimed it (atomicCAS) and is writing the fields,
// 2 = the fields are written (the host reports only 2).
enum { FA_DEVERR_NONE = 0, FA_DEVERR_CACHE_SLOT = 1, FA_DEVERR_BLOCK_ID = 2 };

struct FaDevErr {
    int32_t flag;
    int32_t op;        // FA_DEVERR_*
    int64_t index; // cache slot: the token t of slot_mapping[t]; block id: the sequence (block-table row)
    int64_t value; // the bad slot / block id
    int64_t limit; // num_blocks
    int64_t aux; // cache slot: block_size; block id: the block-table column
};

#if defined(__CUDACC__) || defined(__HIPCC__)
// Records a bad index once (the first caller wins); no-op when w is NULL. Inline: the body of
// fa_dev_err_report below and of the attention kernel's out-of-line report_bad_block_id.
static __device__ __forceinline__ void fa_dev_err_record(FaDevErr *w, int op, int64_t index, int64_t value,
                                                         int64_t limit, int64_t aux) {
    if (w == nullptr) return;
    if (*reinterpret_cast<volatile int32_t *>(&w->flag) != 0) return; // already taken
    if (atomicCAS(&w->flag, 0, 1) != 0) return;
    w->op = op;
    w->index = index;
    w->value = value;
    w->limit = limit;
    w->aux = aux;
    __threadfence_system();
    atomicExch(&w->flag, 2);
}

// The same out of line: what the other kernels call on their bad paths.
static __device__ __noinline__ void fa_dev_err_report(FaDevErr *w, int op, int64_t index, int64_t value,
                                                      int64_t limit, int64_t aux) {
    fa_dev_err_record(w, op, index, value, limit, aux);
}
#endif // __CUDACC__ || __HIPCC__

// What every kernel-launching op needs besides its arguments.
struct FaLaunch {
    cudaStream_t stream;
    const fa_device_info *info;
    FaDevErr *err_word; // device address of the backend's error word
    int sm90;           // 1: the prefill calls the sm_90a family accepts run there (built, device 9.x,
                        // family auto); 2: every call it accepts (family wgmma); 0: none
    void *tmap_encode;  // cuTensorMapEncodeTiled (resolved at create when sm90 can be 1)
    int persist; // fa_cuda_backend_set_persistent: the wgmma family's persistent grid (fa_cuda_persist)
    int gqa_pack; // fa_cuda_backend_set_gqa_pack: the wgmma family's GQA packing (fa_cuda_gqa_pack)
};

// Paged / dense varlen attention incl. split-KV and its combine (backends/cuda/attention/).
// *_check runs every argument check of the op without launching (the op runs it first, so the
// two cannot disagree). On failure the message (naming the value, or the CUDA error string)
// goes into err.
fa_status fa_cuda__attention_check(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size);
fa_status fa_cuda__attention(const fa_attn_args *a, const FaLaunch *L, char *err, size_t err_size);
// The sm_90a family (attention/sm90/sm90_attention.cu; built when gpu_arch has sm_90a, then
// FA_CUDA_HAVE_SM90 is 1): which calls it takes (*why: the first unmet condition), its launch
// (skip_rows: sequences with Lq * G <= skip_rows are left to the decode tile; num_sms: the
// persistent grid's CTAs, 0 for one CTA an item; pack: GQA packing where the group allows) and
// the driver
// entry point its tensor maps need (NULL when the driver has none).
bool fa_sm90__accepts(const fa_attn_args *a, const char **why);
fa_status fa_sm90__launch(const fa_attn_args *a, void *encode_fn, int skip_rows, int num_sms, bool pack,
                          FaDevErr *err_word, cudaStream_t stream, const fa_bu_err *e);
void *fa_sm90__encode_fn(void);
// Whether this build's sm_90a family serves head size d (fa_kernel_dim.prefill_family).
bool fa_sm90__serves_head(int d);
// The attention part of the capability block: compiled widths with their tile facts
// (decode_ctas_per_sm from the occupancy calculator on the current device; combine_us from the
// device's compute capability major, cc_major: the combine's dependent launch from 9 on).
void fa_cuda__attention_caps(fa_backend_caps *caps, int cc_major);

// Memory-bound kernels (cache_kernels.cu, merge_kernels.cu); same contract.
fa_status fa_cuda__reshape_and_cache_check(const fa_cache_write_args *a, char *err, size_t err_size);
fa_status fa_cuda__reshape_and_cache(const fa_cache_write_args *a, const FaLaunch *L, char *err,
                                     size_t err_size);
fa_status fa_cuda__merge_states_check(const fa_merge_args *a, char *err, size_t err_size);
fa_status fa_cuda__merge_states(const fa_merge_args *a, const FaLaunch *L, char *err, size_t err_size);
fa_status fa_cuda__dcp_correct_check(const fa_dcp_correct_args *a, char *err, size_t err_size);
fa_status fa_cuda__dcp_correct(const fa_dcp_correct_args *a, const FaLaunch *L, char *err, size_t err_size);

// Thread layout of the memory-bound row kernels (reshape_and_cache, merge_states, dcp_correct):
// a token's row is [heads x chunks] 16-byte-ish chunks; a block covers whole rows of consecutive
// tokens (or one 256-chunk part of a longer row), so that a block reads and writes contiguous
// memory and the heads of a row are moved together.
struct FaRowMap {
    int32_t cph; // chunks per head
    int32_t cpr; // chunks per token row (heads * cph)
    int32_t rows; // tokens per block (1 when a row spans several blocks)
};

// Grid, block and map for num_tokens rows of heads * cph chunks, at most `threads` per block.
static inline FaRowMap fa_row_map(int32_t num_tokens, int32_t heads, int32_t cph, int32_t threads, dim3 *grid,
                                  dim3 *block) {
    FaRowMap m;
    m.cph = cph;
    m.cpr = heads * cph;
    if (m.cpr <= threads) {
        m.rows = threads / m.cpr;
        *block = dim3((unsigned)(m.rows * m.cpr));
        *grid = dim3((unsigned)((num_tokens + m.rows - 1) / m.rows), 1);
    } else {
        m.rows = 1;
        *block = dim3((unsigned)threads);
        *grid = dim3((unsigned)num_tokens, (unsigned)((m.cpr + threads - 1) / threads));
    }
    return m;
}

// This thread's token, head and chunk; false when it has none.
__device__ __forceinline__ bool fa_row_pos(const FaRowMap &m, int64_t *t, int *h, int *c) {
    uint32_t r = 0, k = threadIdx.x;
    if (m.rows > 1) {
        r = threadIdx.x / (uint32_t)m.cpr;
        k = threadIdx.x - r * (uint32_t)m.cpr;
    } else {
        k += blockIdx.y * blockDim.x;
        if (k >= (uint32_t)m.cpr) return false;
    }
    *t = (int64_t)blockIdx.x * m.rows + r;
    *h = (int)(k / (uint32_t)m.cph);
    *c = (int)(k - (uint32_t)*h * (uint32_t)m.cph);
    return true;
}
