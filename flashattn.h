/* flashattn.h - v0.1.0 - paged attention for LLM inference, host side (MIT licence, see the end)

   What it is
     The host half of a paged-attention library for C and C++ inference engines: attention
     metadata from a scheduler's batch, the cascade heuristic, sliding-window configuration,
     chunked-local-attention virtual batches, decode-context-parallel (DCP) sharding, the
     split-KV plan, and the forward dispatch. Device work goes through a backend vtable
     (fa_backend) implemented by a separately compiled backend: CUDA, HIP, or the plain-C
     reference backend in backends/cpu.

   Usage
     In exactly ONE C or C++ file:
         #define FLASHATTN_IMPLEMENTATION
         #include "flashattn.h"
     Everywhere else include it plainly. Link one backend (libflashattn_cpu, libflashattn_cuda).

   Configuration macros (define before the implementing include)
     FLASHATTN_STATIC       every public function becomes `static` (private to one file)
     FA_ASSERT(x)           internal-invariant check (default: assert.h's assert)

   Numeric conventions (stated once)
     - LSE is natural-log, float32, laid out [num_heads, num_tokens] (head stride given).
     - logits: scale -> softcap -> ALiBi -> mask -> softmax (with sink). ALiBi adds
       -slope*|i + Lk - Lq - j| for causal and non-causal calls alike.
     - a sink logit is neither scaled nor soft-capped, has no value row, joins the running max.
     - an empty query row (no allowed key) gives output 0 and LSE -inf (the sink logit if any).
     - fp8 caches store saturate(x / scale) and read x8 * scale.
     - windows are (left, right) in keys, -1 = unbounded; causal forces right = 0;
       alignment is bottom-right (the last query row sees the last key).

   Table of contents (search for the markers)
     // >>basics     version, status codes, errors, enums
     // >>tensor     tensor views
     // >>config     configuration structs (zero means default)
     // >>caps       capability queries, KV-cache shape and stride order
     // >>plan       pure planning: cascade, windows, block-table slicing, local, dcp, splits
     // >>backend    backend and comm vtables, op argument structs
     // >>metadata   batch description (builder input) and metadata (builder output)
     // >>builder    the metadata builder
     // >>layer      per-layer parameters
     // >>forward    forward dispatch
     // >>impl       implementation (FLASHATTN_IMPLEMENTATION)

   History
     0.1.0  first release: planning, builder, forward, CPU reference backend.
*/
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef FLASHATTN_STATIC
#define FLASHATTN_API static
#else
#define FLASHATTN_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
// >>basics

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0
#define FLASHATTN_VERSION_STRING "0.1.0"

/* Version of the backend/comm vtable ABI. A backend built for another version is refused. */
#define FA_BACKEND_API_VERSION 1

typedef enum fa_status {
    FA_OK = 0,
    FA_ERR_INVALID_ARG = 1,   /* bad user input: the message names the argument and value */
    FA_ERR_UNSUPPORTED = 2,   /* valid but not supported (by this build, backend or device) */
    FA_ERR_WORKSPACE = 3,     /* a caller-provided or builder workspace is too small */
    FA_ERR_BACKEND = 4,       /* the backend failed (e.g. a CUDA error); message carries it */
    FA_ERR_OUT_OF_MEMORY = 5  /* allocation failed (only at creation time) */
} fa_status;

/* Short constant description of a status code ("invalid argument", ...). */
FLASHATTN_API const char *fa_status_string(fa_status s);

/* Detail message of the last failing call on this thread (names argument and value).
   Empty string when the last call succeeded or nothing failed yet. */
FLASHATTN_API const char *fa_last_error(void);

typedef enum fa_dtype {
    FA_DTYPE_F32 = 0,
    FA_DTYPE_F16 = 1,
    FA_DTYPE_BF16 = 2,
    FA_DTYPE_FP8_E4M3 = 3,    /* OCP float8_e4m3fn, max 448 */
    FA_DTYPE_FP8_E5M2 = 4,    /* OCP float8_e5m2, max 57344 */
    FA_DTYPE_I32 = 5,
    FA_DTYPE_I64 = 6,
    FA_DTYPE_COUNT_ = 7
} fa_dtype;

/* Size in bytes of one element (0 for an unknown dtype). */
FLASHATTN_API size_t fa_dtype_size(fa_dtype t);
FLASHATTN_API const char *fa_dtype_name(fa_dtype t);

typedef enum fa_cache_dtype {
    FA_CACHE_AUTO = 0,        /* cache holds the activation dtype */
    FA_CACHE_FP8 = 1,         /* alias of FP8_E4M3 */
    FA_CACHE_FP8_E4M3 = 2,
    FA_CACHE_FP8_E5M2 = 3,
    FA_CACHE_DTYPE_COUNT_ = 4
} fa_cache_dtype;

typedef enum fa_kv_layout {
    FA_LAYOUT_NHD = 0,        /* memory (2, num_blocks, block_size, Hkv, D) */
    FA_LAYOUT_HND = 1         /* memory (2, num_blocks, Hkv, block_size, D) */
} fa_kv_layout;

typedef enum fa_attn_type {
    FA_ATTN_DECODER = 0,
    FA_ATTN_ENCODER = 1,          /* bidirectional, no cache, window (W-1, 0) */
    FA_ATTN_ENCODER_ONLY = 2,     /* bidirectional, no cache, window (W-1, W-1) */
    FA_ATTN_ENCODER_DECODER = 3   /* cross-attention: paged, k/v written once */
} fa_attn_type;

/* ------------------------------------------------------------------------------------------ */
// >>tensor

#define FA_MAX_RANK 6

/* A non-owning strided view. Strides are in elements. */
typedef struct fa_tensor {
    void *data;
    fa_dtype dtype;
    int32_t rank;
    int64_t shape[FA_MAX_RANK];
    int64_t stride[FA_MAX_RANK];
} fa_tensor;

/* Contiguous (row-major) view of the given shape. */
FLASHATTN_API fa_tensor fa_tensor_make(void *data, fa_dtype dtype, int32_t rank, const int64_t *shape);

/* ------------------------------------------------------------------------------------------ */
// >>config
/* Every field: zero means its default, given in the comment. Defaults are applied by
   fa_config_resolve() in one place. */

typedef struct fa_model_config {
    int32_t num_heads_q;          /* query heads on this rank (required) */
    int32_t num_heads_kv;         /* KV heads on this rank; 0 = num_heads_q */
    int32_t head_size;            /* required; multiple of 8, <= 256 */
    fa_dtype dtype;               /* activation dtype; 0 (F32) -> BF16. F16, BF16 (F32 on CPU only) */
    int32_t hybrid_mamba_f32;     /* 1 = hybrid model whose mamba state is float32: blocks {16,32,64} */
} fa_model_config;

typedef struct fa_cache_config {
    int32_t block_size;           /* tokens per KV block; 0 -> 16; multiple of 16 */
    fa_cache_dtype cache_dtype;   /* AUTO */
    fa_kv_layout layout;          /* NHD */
} fa_cache_config;

typedef struct fa_parallel_config {
    int32_t dcp_world_size;       /* decode-context-parallel ranks; 0 -> 1 */
    int32_t dcp_rank;             /* this rank, in [0, dcp_world_size) */
    int32_t cp_kv_cache_interleave_size; /* tokens per rank before moving on; 0 -> 1; divides block_size */
} fa_parallel_config;

typedef struct fa_compilation_config {
    int32_t full_cuda_graph;          /* 1 = forward will be captured in full CUDA graphs */
    int32_t max_cudagraph_capture_size; /* tokens; 0 -> 512 */
    int32_t max_num_splits_for_cuda_graph; /* split cap in full-graph mode; 0 -> 32 */
    int32_t batch_invariant;          /* 1 = num_splits forced to 1 (same bits whatever the batch) */
    int32_t max_num_splits;           /* hard cap on split-KV; 0 -> 32; sizes the workspace */
} fa_compilation_config;

typedef struct fa_scheduler_config {
    int32_t max_num_seqs;             /* requests per step; 0 -> 256 */
    int32_t max_num_batched_tokens;   /* tokens per step; 0 -> 8192 */
    int32_t attention_chunk_size;     /* chunked local attention chunk; 0 = off; multiple of block_size */
} fa_scheduler_config;

typedef struct fa_config {
    fa_model_config model;
    fa_cache_config cache;
    fa_parallel_config parallel;
    fa_compilation_config compilation;
    fa_scheduler_config scheduler;
} fa_config;

/* Copies *in to *out with every zero field replaced by its default, then validates the whole
   configuration (head size, block size, heads divisibility, dcp rank and interleave, chunk
   size). in and out may alias. */
FLASHATTN_API fa_status fa_config_resolve(const fa_config *in, fa_config *out);

/* ------------------------------------------------------------------------------------------ */
// >>caps

/* 1 if D is a supported head size (multiple of 8, 8..256), else 0. */
FLASHATTN_API int fa_supports_head_size(int32_t head_size);

/* Kernel block sizes. Either an explicit list (count > 0) or "any multiple of multiple_of". */
typedef struct fa_block_sizes {
    int32_t multiple_of;          /* 16 when any multiple is allowed, else 0 */
    int32_t count;                /* number of explicit sizes (0 when multiple_of is used) */
    int32_t sizes[4];
} fa_block_sizes;

/* Supported kernel block sizes: any multiple of 16; {16, 32, 64} for a hybrid model whose mamba
   state is float32 (unused slots could hold NaN-looking bits otherwise). */
FLASHATTN_API fa_block_sizes fa_supported_kernel_block_sizes(int hybrid_mamba_f32);
FLASHATTN_API int fa_supports_block_size(int32_t block_size, int hybrid_mamba_f32);

/* 1 for AUTO, FP8, FP8_E4M3, FP8_E5M2 (every backend reads both fp8 formats), else 0. */
FLASHATTN_API int fa_supports_kv_cache_dtype(fa_cache_dtype cache_dtype);

/* 1 for compute capability >= 8.0 (major*10+minor >= 80), else 0. */
FLASHATTN_API int fa_supports_compute_capability(int32_t major, int32_t minor);

/* Storage dtype of an fp8 cache (FP8, FP8_E4M3 -> FP8_E4M3; FP8_E5M2 -> FP8_E5M2); for AUTO,
   the activation dtype passed in. */
FLASHATTN_API fa_dtype fa_cache_storage_dtype(fa_cache_dtype cache_dtype, fa_dtype activation);

/* Checks a whole combination; returns NULL when supported, else a constant reason string.
   cc_major/minor of 0 skip the device check (CPU). */
FLASHATTN_API const char *fa_check_combination(int32_t head_size, fa_dtype dtype,
                                               fa_cache_dtype cache_dtype, int32_t block_size,
                                               int use_sinks, int hybrid_mamba_f32,
                                               int32_t cc_major, int32_t cc_minor);

/* Logical KV-cache shape (2, num_blocks, block_size, num_heads_kv, head_size). */
FLASHATTN_API fa_status fa_kv_cache_shape(int64_t num_blocks, int32_t block_size,
                                          int32_t num_heads_kv, int32_t head_size,
                                          int64_t shape_out[5]);

/* Physical order of the logical dims (a permutation). Without the layer dim: rank 5,
   NHD (0,1,2,3,4), HND (0,1,3,2,4). With a leading num_layers dim (cross-layer cache): rank 6,
   NHD (2,0,1,3,4,5), HND (2,4,0,1,3,5). */
FLASHATTN_API fa_status fa_kv_cache_stride_order(fa_kv_layout layout, int include_num_layers,
                                                 int32_t order_out[6], int32_t *rank_out);

/* Logical strides (in elements) of the rank-5 cache allocated contiguously in `layout`'s
   physical order: the view users pass to fa_forward. */
FLASHATTN_API fa_status fa_kv_cache_strides(fa_kv_layout layout, int64_t num_blocks,
                                            int32_t block_size, int32_t num_heads_kv,
                                            int32_t head_size, int64_t strides_out[5]);

/* ------------------------------------------------------------------------------------------ */
// >>plan  (pure: host arrays in, host arrays out; no allocation, no I/O)

typedef struct fa_window {
    int32_t left;                 /* keys to the left of the diagonal, -1 = unbounded */
    int32_t right;                /* keys to the right, -1 = unbounded */
} fa_window;

/* Window tuple of a layer: sliding_window W <= 0 -> (-1,-1); W with ENCODER_ONLY -> (W-1, W-1);
   any other type -> (W-1, 0). */
FLASHATTN_API fa_window fa_sliding_window_config(int32_t sliding_window, fa_attn_type type);

/* Model-wide window for ahead-of-time scheduling. One distinct window among the n layers ->
   *aot_enabled = 1 and *out = it; several -> *aot_enabled = 0 and *out = (-1,-1). */
FLASHATTN_API fa_status fa_aot_sliding_window(const fa_window *layer_windows, int32_t n,
                                              fa_window *out, int *aot_enabled);

// >>cascade
/* The cascade heuristic (1 = use cascade). Worked example (132 SMs): 64 decodes, Hq 32, Hkv 8,
   prefix 1024: cascade time cdiv(32*1,132)*8 = 8 < flash-decoding cdiv(64*8*1*8,132) = 32 -> 1.
   8 decodes, prefix 256: 2 > 1 -> 0. */
FLASHATTN_API int fa_use_cascade_attention(int32_t common_prefix_len, const int32_t *query_lens,
                                           int32_t num_reqs, int32_t num_heads_q,
                                           int32_t num_heads_kv, int use_alibi,
                                           int use_sliding_window, int use_local_attention,
                                           int32_t num_sms, int32_t dcp_world_size);

/* Inputs of the common-prefix choice; zero fields are "no" / defaults. */
typedef struct fa_cascade_query {
    int32_t num_common_prefix_blocks; /* blocks shared by every request's block-table row */
    int32_t block_size;
    const int32_t *num_computed_tokens; /* [num_reqs] host: tokens already in cache */
    const int32_t *query_lens;        /* [num_reqs] host */
    int32_t num_reqs;
    int32_t num_heads_q, num_heads_kv, num_sms, dcp_world_size;
    int use_alibi, use_sliding_window, use_local_attention, encoder_only;
} fa_cascade_query;

/* Common prefix length for cascade attention (0 = don't): blocks*bs clipped to the smallest
   num_computed_tokens, rounded down to a block, then the heuristic. */
FLASHATTN_API fa_status fa_cascade_prefix_len(const fa_cascade_query *q, int32_t *prefix_len_out);

/* Cascade block-table slicing: the prefix call uses row 0 of `block_table`; the suffix call
   uses the table offset by common_prefix_len / block_size columns with the same row stride. */
FLASHATTN_API fa_status fa_cascade_block_tables(const int32_t *block_table, int64_t row_stride,
                                                int32_t common_prefix_len, int32_t block_size,
                                                const int32_t **prefix_table,
                                                const int32_t **suffix_table);

// >>local
/* Chunked local attention: each request is cut into virtual requests, one per chunk touched
   by its queries. See SEMANTICS §8 for the worked example (C=4, bs=2). */
typedef struct fa_local_batches {
    int32_t num_virtual;              /* V */
    int32_t max_query_len, max_seq_len;
    int32_t pages_per_virtual;        /* chunk_size / block_size = columns of block_table */
    int32_t *seqlens_q;               /* [V] caller-provided */
    int32_t *cu_seqlens_q;            /* [V + 1] caller-provided */
    int32_t *seqused_k;               /* [V] caller-provided */
    int32_t *block_table;             /* [V, pages_per_virtual] caller-provided */
} fa_local_batches;

/* Number of virtual requests for the batch (size query for the arrays). */
FLASHATTN_API fa_status fa_local_virtual_batches_count(int32_t chunk_size,
                                                       const int32_t *query_start_loc,
                                                       const int32_t *seq_lens, int32_t num_reqs,
                                                       int32_t *num_virtual_out);

/* Fills `out` (its arrays sized by the count query). block_table is the host block table
   [num_reqs, row_stride] with max_blocks valid columns (indices clipped to max_blocks - 1). */
FLASHATTN_API fa_status fa_make_local_virtual_batches(int32_t chunk_size, int32_t block_size,
                                                      const int32_t *query_start_loc,
                                                      const int32_t *seq_lens, int32_t num_reqs,
                                                      const int32_t *block_table,
                                                      int64_t row_stride, int32_t max_blocks,
                                                      int32_t capacity, fa_local_batches *out);

// >>dcp
/* Tokens of a length-L sequence stored on `rank` of a DCP group of world_size ranks with
   interleave I: the count of p < L with (p / I) % world_size == rank. */
FLASHATTN_API int32_t fa_dcp_local_seq_len(int32_t seq_len, int32_t world_size, int32_t rank,
                                           int32_t interleave);
FLASHATTN_API fa_status fa_dcp_local_seq_lens(const int32_t *seq_lens, int32_t n,
                                              int32_t world_size, int32_t rank,
                                              int32_t interleave, int32_t *out);

/* Slot mapping of one DCP rank: token p of request b is stored on rank (p / I) % N at
   slot block_table[b, p / (bs*N)] * bs + local offset; -1 on other ranks. positions [num_tokens]
   are absolute token positions, req_of_token [num_tokens] their request. */
FLASHATTN_API fa_status fa_dcp_slot_mapping(const int32_t *block_table, int64_t row_stride,
                                            int32_t max_blocks, int32_t block_size,
                                            const int32_t *req_of_token, const int32_t *positions,
                                            int32_t num_tokens, int32_t world_size, int32_t rank,
                                            int32_t interleave, int64_t *slot_mapping_out);

// >>plan splits
/* Split-KV heuristic: the smallest split count whose SM efficiency is within 85% of the best,
   1 when the grid already fills 80% of the SMs or keys span <= 4 tiles. */
FLASHATTN_API int32_t fa_num_splits_heuristic(int64_t total_mblocks, int32_t num_sms,
                                              int32_t num_n_blocks, int32_t max_splits);

typedef struct fa_split_params {
    int32_t num_reqs;
    const int32_t *cu_seqlens_q;      /* [num_reqs + 1] host */
    const int32_t *seqused_k;         /* [num_reqs] host: key length per request */
    int32_t num_heads_q, num_heads_kv, head_size;
    int32_t causal;
    fa_window window;
    int32_t num_sms;
    int32_t max_num_splits;           /* cap (>= 1); full-graph cap or workspace cap */
    int32_t batch_invariant;          /* 1 -> every request 1 split */
} fa_split_params;

/* Plan layout: plan[0] = static split count S (>= 1); plan[1 + b] = splits of request b in
   [1, S]; plan[1 + num_reqs ..] = 0 (padded requests in a captured graph do no work).
   plan_len >= 1 + num_reqs. */
FLASHATTN_API fa_status fa_plan_splits(const fa_split_params *p, int32_t *plan, int32_t plan_len);

/* Tile sizes the planner assumes (rows of queries x keys per tile). */
#define FA_TILE_M 64
#define FA_TILE_N(head_size) ((head_size) <= 128 ? 128 : 64)

/* ------------------------------------------------------------------------------------------ */
// >>backend

/* KV-cache write. For t < num_tokens with slot s = slot_mapping[t] >= 0:
   cache[s / block_size, s % block_size, h, d] = Q(key[t, h, d]) (and value). */
typedef struct fa_cache_write_args {
    const void *key;                  /* [num_tokens, Hkv, D] (heads packed), key_token_stride */
    const void *value;                /* [num_tokens, Hkv, D], value_token_stride */
    int64_t key_token_stride, value_token_stride; /* elements */
    fa_dtype kv_dtype;                /* F32, F16, BF16 */
    void *key_cache;                  /* logical [num_blocks, block_size, Hkv, D] */
    void *value_cache;                /* same strides as key_cache */
    int64_t cache_block_stride, cache_page_stride, cache_head_stride; /* elements; last dim 1 */
    fa_dtype cache_dtype;             /* == kv_dtype, or FP8_E4M3 / FP8_E5M2 */
    const int64_t *slot_mapping;      /* [num_tokens] device; negative = skip */
    int32_t num_tokens, num_heads_kv, head_size, block_size;
    float k_scale, v_scale;           /* fp8 only: stored = saturate(x / scale) */
} fa_cache_write_args;

/* Varlen attention over a paged cache (block_table + seqused_k) or dense keys (cu_seqlens_k).
   Query head h reads KV head h / (num_heads_q / num_heads_kv). */
typedef struct fa_attn_args {
    const void *q;                    /* [num_tokens, Hq, D]; addr(t,h) = (h / q_head_group) *
                                         q_group_stride + (h % q_head_group) * q_head_stride +
                                         t * q_token_stride */
    int64_t q_token_stride, q_head_stride, q_group_stride;
    int32_t q_head_group;             /* heads per group; 0 = Hq (one group) */
    fa_dtype q_dtype;                 /* F16, BF16 (F32 on CPU); out has the same dtype */
    const void *k, *v;                /* paged: logical [num_blocks, block_size, Hkv, D];
                                         dense: [total_k, Hkv, D] */
    int64_t k_block_stride, k_row_stride, k_head_stride; /* row = slot in block / token */
    int64_t v_block_stride, v_row_stride, v_head_stride;
    fa_dtype kv_dtype;                /* == q_dtype, or FP8_E4M3 / FP8_E5M2 */
    void *out;                        /* [num_tokens, Hq, D] */
    int64_t out_token_stride, out_head_stride;
    float *lse;                       /* NULL-able; [Hq, num_tokens]: lse[h*lse_head_stride + t] */
    int64_t lse_head_stride;
    const int32_t *cu_seqlens_q;      /* [num_seqs + 1] device */
    const int32_t *seqused_k;         /* [num_seqs] device; paged path (NULL for dense) */
    const int32_t *cu_seqlens_k;      /* [num_seqs + 1] device; dense path (NULL for paged) */
    const int32_t *block_table;       /* [num_seqs, *] device, row stride block_table_stride;
                                         already offset to its first column */
    int64_t block_table_stride;
    int32_t num_seqs, num_tokens, max_seqlen_q, max_seqlen_k;
    int32_t num_heads_q, num_heads_kv, head_size, block_size;
    float softmax_scale;
    float softcap;                    /* 0 = off */
    int32_t causal;
    int32_t window_left, window_right; /* -1 = unbounded; causal forces right = 0 */
    const float *alibi_slopes;        /* NULL-able; [Hq] or [num_seqs, Hq] with batch stride */
    int64_t alibi_batch_stride;       /* 0 = one row for all sequences */
    const float *sinks;               /* NULL-able; [Hq] float32 logits */
    const float *k_descale, *v_descale; /* NULL-able; [num_seqs, Hkv] with the strides below */
    int64_t descale_batch_stride, descale_head_stride;
    float k_scale, v_scale;           /* used when the descale pointers are NULL (fp8 only) */
    /* split-KV (num_splits <= 1: no split) */
    int32_t num_splits;               /* static S; per-sequence counts in split_plan */
    const int32_t *split_plan;        /* [1 + num_seqs] device, fa_plan_splits layout; NULL = S for all */
    float *split_out;                 /* [S, num_tokens, Hq, D] float32 workspace */
    float *split_lse;                 /* [S, Hq, num_tokens] float32 workspace */
} fa_attn_args;

/* out = merge of two partial attentions through their LSEs (±inf LSE = empty). */
typedef struct fa_merge_args {
    void *out;                        /* [num_tokens, H, D] */
    int64_t out_token_stride, out_head_stride;
    float *out_lse;                   /* NULL-able; [H, num_tokens], out_lse_head_stride */
    int64_t out_lse_head_stride;
    const void *prefix_out;           /* [num_tokens, H, D] */
    int64_t prefix_token_stride, prefix_head_stride;
    const float *prefix_lse;          /* [H, num_tokens] */
    int64_t prefix_lse_head_stride;
    const void *suffix_out;
    int64_t suffix_token_stride, suffix_head_stride;
    const float *suffix_lse;
    int64_t suffix_lse_head_stride;
    fa_dtype dtype;                   /* of out, prefix_out, suffix_out */
    int32_t num_tokens, num_heads, head_size;
} fa_merge_args;

/* DCP correction, in place: out[t, h] *= exp(lse_all[rank, h, t] - L[h, t]) with
   L = M + ln sum_s exp(lse_all[s, h, t] - M) over ranks (NaN/+inf -> -inf; M = 0 if all empty). */
typedef struct fa_dcp_correct_args {
    void *out;                        /* [num_tokens, H, D] partial output of this rank */
    int64_t out_token_stride, out_head_stride;
    fa_dtype dtype;
    const float *lse_all;             /* [world_size, H, num_tokens] contiguous */
    float *lse_out;                   /* NULL-able; [H, num_tokens] contiguous: the global L */
    int32_t world_size, rank, num_tokens, num_heads, head_size;
} fa_dcp_correct_args;

typedef enum fa_copy_kind {
    FA_COPY_HOST_TO_DEVICE = 0,
    FA_COPY_DEVICE_TO_HOST = 1,
    FA_COPY_DEVICE_TO_DEVICE = 2
} fa_copy_kind;

typedef struct fa_backend_ops {
    fa_status (*reshape_and_cache)(void *ctx, const fa_cache_write_args *a);
    fa_status (*attention)(void *ctx, const fa_attn_args *a);
    fa_status (*merge_states)(void *ctx, const fa_merge_args *a);
    fa_status (*dcp_correct)(void *ctx, const fa_dcp_correct_args *a);
    /* async on the backend's stream; a host source may be reused when the call returns */
    fa_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
    /* rows x width_bytes at dst with row pitch, every byte = value */
    fa_status (*fill)(void *ctx, void *dst, size_t pitch, int value, size_t width_bytes,
                      size_t rows);
    fa_status (*alloc)(void *ctx, size_t bytes, void **ptr);   /* creation time only */
    fa_status (*free)(void *ctx, void *ptr);
    fa_status (*synchronize)(void *ctx);                       /* NULL-able; tests and tools */
    const char *(*last_error)(void *ctx);                      /* NULL-able; detail of last failure */
} fa_backend_ops;

typedef struct fa_device_info {
    char name[64];
    int32_t cc_major, cc_minor;       /* 0.0 for the CPU backend */
    int32_t num_sms;                  /* multiprocessors (CPU: a nominal 132 for planning) */
    int64_t smem_per_block;           /* bytes, opt-in maximum */
    int64_t smem_per_sm;
} fa_device_info;

/* A backend. Ops may be NULL: the header then reports FA_ERR_UNSUPPORTED naming op and backend. */
typedef struct fa_backend {
    uint32_t api_version;             /* FA_BACKEND_API_VERSION */
    const char *name;                 /* "cpu", "cuda", ... */
    fa_backend_ops ops;
    void *ctx;
    fa_device_info info;
} fa_backend;

/* Collectives for DCP, on the backend's stream. count = elements contributed per rank.
   all_gather: recv = concat over ranks of send (rank order). reduce_scatter: send holds
   world_size chunks of count elements; recv (count) = sum over ranks of their chunk `rank`. */
typedef struct fa_comm {
    uint32_t api_version;             /* FA_BACKEND_API_VERSION */
    int32_t world_size, rank;
    void *ctx;
    fa_status (*all_gather)(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype);
    fa_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t count,
                                fa_dtype dtype);
    const char *(*last_error)(void *ctx); /* NULL-able */
} fa_comm;

/* ------------------------------------------------------------------------------------------ */
// >>metadata

/* One scheduler step, as the engine knows it (mirrors CommonAttentionMetadata). */
typedef struct fa_batch {
    int32_t num_reqs;
    int32_t num_actual_tokens;        /* 0 -> query_start_loc[num_reqs] */
    const int32_t *query_start_loc;   /* [num_reqs + 1] host */
    const int32_t *seq_lens;          /* [num_reqs] host: context + new tokens */
    const int32_t *block_table;       /* [num_reqs, block_table_stride] device */
    int64_t block_table_stride;       /* elements per row (>= max_blocks) */
    int32_t max_blocks;               /* valid columns per row; 0 -> block_table_stride */
    const int32_t *block_table_host;  /* NULL-able host mirror; required for chunked local */
    const int64_t *slot_mapping;      /* [>= num_actual_tokens] device; -1 = pad */
    int32_t causal;                   /* 1 for decoder self-attention */
} fa_batch;

/* Chunked-local view of the batch (device arrays in the builder's workspace). */
typedef struct fa_local_metadata {
    int32_t num_virtual, max_query_len, max_seq_len;
    const int32_t *cu_seqlens_q;      /* [V + 1] device */
    const int32_t *seqused_k;         /* [V] device */
    const int32_t *block_table;       /* [V, pages] device */
    int64_t block_table_stride;
    const int32_t *split_plan;        /* device */
    int32_t num_splits;
} fa_local_metadata;

typedef struct fa_builder fa_builder;

/* Builder output (mirrors FlashAttentionMetadata). Device pointers live in the builder's
   workspace and stay valid until the next fa_builder_build() on the same builder. */
typedef struct fa_metadata {
    const fa_builder *builder;
    int32_t num_actual_tokens, num_reqs, max_query_len, max_seq_len;
    int32_t causal;
    const int32_t *query_start_loc;   /* [num_reqs + 1] device */
    const int32_t *seq_lens;          /* [num_reqs] device */
    const int32_t *block_table;       /* device (the batch's) */
    int64_t block_table_stride;
    const int64_t *slot_mapping;      /* device (the batch's) */
    int32_t num_splits;               /* static split count of the main call */
    const int32_t *split_plan;        /* [1 + max_num_seqs] device */
    /* cascade */
    int32_t use_cascade, common_prefix_len;
    const int32_t *cu_prefix_query_lens; /* [2] device: {0, T} */
    const int32_t *prefix_kv_lens;    /* [1] device */
    const int32_t *suffix_kv_lens;    /* [num_reqs] device */
    int32_t prefix_num_splits;
    const int32_t *prefix_split_plan; /* device */
    /* chunked local attention */
    int32_t has_local;
    fa_local_metadata local;
    /* decode context parallel */
    int32_t dcp_world_size, dcp_rank;
    const int32_t *dcp_context_kv_lens; /* [num_reqs] device */
    int32_t max_dcp_context_kv_len;
} fa_metadata;

/* ------------------------------------------------------------------------------------------ */
// >>builder

/* Bytes of device workspace a builder with this configuration allocates (size query). */
FLASHATTN_API fa_status fa_builder_workspace_size(const fa_config *cfg, size_t *bytes_out);

/* Creates a builder for one KV-cache group. Allocates its host state and its device workspace
   (through be->ops.alloc) once; build() and forward() never allocate. comm: NULL unless
   dcp_world_size > 1 (then its world size and rank must match the config). */
FLASHATTN_API fa_status fa_builder_create(const fa_backend *be, const fa_config *cfg,
                                          const fa_comm *comm, fa_builder **out);
FLASHATTN_API void fa_builder_destroy(fa_builder *b);

/* Resolved configuration of the builder. */
FLASHATTN_API const fa_config *fa_builder_config(const fa_builder *b);

/* Registers the layers' windows (for the model-wide AOT window); call once after creating the
   layers. Optional: without it every window is planned as (-1,-1). */
FLASHATTN_API fa_status fa_builder_set_layer_windows(fa_builder *b, const fa_window *windows,
                                                     int32_t n);

/* Common prefix length for cascade: the engine's shared-block count -> P or 0 (heuristic).
   num_computed_tokens derived as seq_lens - query lens. */
FLASHATTN_API fa_status fa_builder_cascade_prefix_len(const fa_builder *b, const fa_batch *batch,
                                                      int32_t num_common_prefix_blocks,
                                                      int use_alibi, int use_sliding_window,
                                                      int32_t *prefix_len_out);

/* Plans the step and uploads the metadata (no allocation, no sync). common_prefix_len > 0
   selects cascade (must be a multiple of block_size and <= every request's context). */
FLASHATTN_API fa_status fa_builder_build(fa_builder *b, const fa_batch *batch,
                                         int32_t common_prefix_len, fa_metadata *md_out);

/* ------------------------------------------------------------------------------------------ */
// >>layer

typedef struct fa_layer_desc {
    int32_t num_heads;                /* query heads (required) */
    int32_t num_kv_heads;             /* 0 -> num_heads */
    int32_t head_size;                /* required */
    float scale;                      /* 0 -> 1/sqrt(head_size) */
    fa_dtype dtype;                   /* activations; 0 (F32) -> BF16 */
    fa_attn_type attn_type;           /* DECODER */
    int32_t sliding_window;           /* 0 = none */
    float logits_soft_cap;            /* 0 = none */
    const float *alibi_slopes;        /* NULL-able, device [num_alibi_slopes == num_heads] */
    int32_t num_alibi_slopes;
    const float *sinks;               /* NULL-able, device float32 [num_sinks == num_heads] */
    int32_t num_sinks;
    fa_cache_dtype kv_cache_dtype;    /* AUTO */
    float k_scale, v_scale;           /* fp8 cache scales; 0 -> 1 */
    int32_t kv_sharing;               /* 1 = reads another layer's cache: never writes it */
    int32_t attention_chunk_size;     /* chunked local attention; 0 = off */
    int32_t dcp_world_size;           /* 0 -> 1; windows / ALiBi are rejected with DCP > 1 */
} fa_layer_desc;

/* A validated layer (transparent; caller-allocated). */
typedef struct fa_layer {
    fa_layer_desc desc;               /* resolved copy (defaults applied) */
    fa_window window;
    float scale, softcap, k_scale, v_scale;
} fa_layer;

FLASHATTN_API fa_status fa_layer_init(fa_layer *layer, const fa_layer_desc *desc);

/* ------------------------------------------------------------------------------------------ */
// >>forward

/* One attention layer for one step (mirrors FlashAttentionImpl.forward).
   md == NULL: profiling run, out is zeroed. Encoder types: dense attention over q/k/v, no cache.
   Otherwise k/v (NULL-able: no new tokens) are written into kv_cache unless the layer shares
   another's cache, then paged attention runs: plain, cascade, DCP or chunked local.
   q [T_pad, Hq, D], k/v [T_pad, Hkv, D] (last dim contiguous, heads packed),
   kv_cache rank 5 logical [2, num_blocks, block_size, Hkv, D] any strides (last dim 1),
   out [T_pad, Hq, D]. Only the first num_actual_tokens rows are touched. */
FLASHATTN_API fa_status fa_forward(const fa_layer *layer, const fa_backend *be,
                                   const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                   const fa_tensor *kv_cache, const fa_metadata *md,
                                   const fa_tensor *out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */
