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
