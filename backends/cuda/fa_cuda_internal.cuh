// Internal interface between the CUDA backend's files. Not installed; CUDA/HIP only.
#pragma once
#include "flashattn.h"
#include "vendor.cuh"   // CUDA / HIP name mapping (cudaStream_t, cudaError_t, ...)

// Paged / dense varlen attention incl. split-KV and its combine (backends/cuda/attention/).
// Writes a message (naming the unsupported value, or the CUDA error string) into err on failure.
fa_status fa_cuda__attention(const fa_attn_args *a, cudaStream_t stream,
                             const fa_device_info *info, char *err, size_t err_size);

// Memory-bound kernels (cache_kernels.cu, merge_kernels.cu); same contract as fa_cuda__attention.
fa_status fa_cuda__reshape_and_cache(const fa_cache_write_args *a, cudaStream_t stream, char *err, size_t err_size);
fa_status fa_cuda__merge_states(const fa_merge_args *a, cudaStream_t stream, char *err, size_t err_size);
fa_status fa_cuda__dcp_correct(const fa_dcp_correct_args *a, cudaStream_t stream, char *err, size_t err_size);

// Thread layout of the memory-bound row kernels (reshape_and_cache, merge_states, dcp_correct):
// a token's row is [heads x chunks] 16-byte-ish chunks; a block covers whole rows of consecutive
// tokens (or one 256-chunk part of a longer row), so that a block reads and writes contiguous
// memory and the heads of a row are moved together.
struct FaRowMap {
    int32_t cph;      // chunks per head
    int32_t cpr;      // chunks per token row (heads * cph)
    int32_t rows;     // tokens per block (1 when a row spans several blocks)
};

// Grid, block and map for num_tokens rows of heads * cph chunks, at most `threads` per block.
static inline FaRowMap fa_row_map(int32_t num_tokens, int32_t heads, int32_t cph, int32_t threads,
                                  dim3 *grid, dim3 *block) {
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
