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
#define FA_BACKEND_API_VERSION 2

typedef enum fa_status {
    FA_OK = 0,
    FA_ERR_INVALID_ARG = 1,   /* bad user input: the message names the argument and value */
    FA_ERR_UNSUPPORTED = 2,   /* valid but not supported (by this build, backend or device) */
    FA_ERR_WORKSPACE = 3,     /* a caller-provided or builder workspace is too small */
    FA_ERR_BACKEND = 4,       /* the backend failed (e.g. a CUDA error); message carries it */
    FA_ERR_OUT_OF_MEMORY = 5  /* allocation failed (only at creation time) */
} fa_status;

/* The implementation's version, "MAJOR.MINOR.PATCH" (FLASHATTN_VERSION_STRING of the file that
   defined FLASHATTN_IMPLEMENTATION: compare it with the macro to catch a header / library
   mismatch). */
FLASHATTN_API const char *fa_version(void);

/* Short constant description of a status code ("invalid argument", ...). */
FLASHATTN_API const char *fa_status_string(fa_status s);

/* Detail message of the last failing call on this thread (names argument and value).
   Every function returning fa_status clears it on entry, so it is "" after one that returned
   FA_OK; functions returning other types leave it as it was. */
FLASHATTN_API const char *fa_last_error(void);

typedef enum fa_dtype {
    FA_DTYPE_BF16 = 0,        /* zero: the default activation dtype */
    FA_DTYPE_F16 = 1,
    FA_DTYPE_F32 = 2,
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
    fa_dtype dtype;               /* activation dtype; BF16 (zero). F16, BF16 (F32 on CPU only) */
    int32_t hybrid_mamba_f32;     /* 1 = hybrid model whose mamba state is float32: blocks {16,32,64} */
} fa_model_config;

typedef struct fa_cache_config {
    int32_t block_size;           /* tokens per KV block; 0 -> 16; any size >= 1 (1: one token a page) */
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
    int32_t max_num_splits;           /* split-KV cap; sizes the workspace. 0 -> a workspace for 32
                                         splits of a full batch, and a call may use up to the
                                         backend's caps.max_splits while its partials fit it (small
                                         batches); N > 0 -> hard cap N */
} fa_compilation_config;

typedef struct fa_scheduler_config {
    int32_t max_num_seqs;             /* requests per step; 0 -> 256 */
    int32_t max_num_batched_tokens;   /* tokens per step; 0 -> 8192 */
    int32_t attention_chunk_size;     /* chunked local attention chunk; 0 = off; multiple of block_size */
} fa_scheduler_config;

typedef struct fa_debug_config {
    int32_t validate;                 /* 1 = fa_forward copies the step's block table and slot
                                         mapping to the host and checks every id against the
                                         cache before running; it synchronises the backend, so
                                         not for CUDA graphs or speed. 0 = off */
} fa_debug_config;

typedef struct fa_config {
    fa_model_config model;
    fa_cache_config cache;
    fa_parallel_config parallel;
    fa_compilation_config compilation;
    fa_scheduler_config scheduler;
    fa_debug_config debug;
} fa_config;

/* Copies *in to *out with every zero field replaced by its default, then validates the whole
   configuration (head size, block size, heads divisibility, dcp rank and interleave, chunk
   size). in and out may alias. */
FLASHATTN_API fa_status fa_config_resolve(const fa_config *in, fa_config *out);

/* ------------------------------------------------------------------------------------------ */
// >>caps

/* The library's head-size limits (each backend reports which of these it compiled in its
   capability block). */
#define FA_HEAD_SIZE_MIN 8
#define FA_HEAD_SIZE_MAX 256
#define FA_HEAD_SIZE_MULTIPLE 8

/* 1 if D is a supported head size (multiple of 8, 8..256), else 0. */
FLASHATTN_API int fa_supports_head_size(int32_t head_size);

/* Kernel block sizes. Either an explicit list (count > 0) or "any multiple of multiple_of". */
typedef struct fa_block_sizes {
    int32_t multiple_of;          /* 1 when any size >= 1 is allowed, else 0 */
    int32_t count;                /* number of explicit sizes (0 when multiple_of is used) */
    int32_t sizes[4];
} fa_block_sizes;

/* Supported kernel block sizes: any size >= 1 (multiple_of 1: page size 1 as in a radix cache, or
   any other); {16, 32, 64} for a hybrid model whose mamba state is float32 (unused slots could
   hold NaN-looking bits otherwise). A backend may need a multiple of its
   caps.block_size_multiple (fa_check_combination). */
FLASHATTN_API fa_block_sizes fa_supported_kernel_block_sizes(int hybrid_mamba_f32);
FLASHATTN_API int fa_supports_block_size(int32_t block_size, int hybrid_mamba_f32);

/* 1 for AUTO, FP8, FP8_E4M3, FP8_E5M2 (every backend reads both fp8 formats), else 0. */
FLASHATTN_API int fa_supports_kv_cache_dtype(fa_cache_dtype cache_dtype);

/* 1 for compute capability >= 8.0 (major > 8, or major 8 with any minor >= 0), else 0. */
FLASHATTN_API int fa_supports_compute_capability(int32_t major, int32_t minor);

/* Storage dtype of an fp8 cache (FP8, FP8_E4M3 -> FP8_E4M3; FP8_E5M2 -> FP8_E5M2); for AUTO,
   the activation dtype passed in. */
FLASHATTN_API fa_dtype fa_cache_storage_dtype(fa_cache_dtype cache_dtype, fa_dtype activation);

struct fa_backend;

/* Checks a whole combination against the library's limits and, when be is not NULL, against
   the backend's capability block (head dims, dtypes, block sizes) and its device (compute
   capability 8.0 or newer when it reports one). Returns NULL when supported, else a constant
   reason string. */
FLASHATTN_API const char *fa_check_combination(const struct fa_backend *be, int32_t head_size, fa_dtype dtype,
                                               fa_cache_dtype cache_dtype, int32_t block_size, int use_sinks,
                                               int hybrid_mamba_f32);

/* Logical KV-cache shape (2, num_blocks, block_size, num_heads_kv, head_size). */
FLASHATTN_API fa_status fa_kv_cache_shape(int64_t num_blocks, int32_t block_size, int32_t num_heads_kv,
                                          int32_t head_size, int64_t shape_out[5]);

/* Physical order of the logical dims (a permutation). Without the layer dim: rank 5,
   NHD (0,1,2,3,4), HND (0,1,3,2,4). With a leading num_layers dim (cross-layer cache): rank 6,
   NHD (2,0,1,3,4,5), HND (2,4,0,1,3,5). */
FLASHATTN_API fa_status fa_kv_cache_stride_order(fa_kv_layout layout, int include_num_layers,
                                                 int32_t order_out[6], int32_t *rank_out);

/* Logical strides (in elements) of the rank-5 cache allocated contiguously in `layout`'s
   physical order: the view users pass to fa_forward. */
FLASHATTN_API fa_status fa_kv_cache_strides(fa_kv_layout layout, int64_t num_blocks, int32_t block_size,
                                            int32_t num_heads_kv, int32_t head_size, int64_t strides_out[5]);

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
FLASHATTN_API fa_status fa_aot_sliding_window(const fa_window *layer_windows, int32_t n, fa_window *out,
                                              int *aot_enabled);

// >>cascade
/* The cascade heuristic (1 = use cascade). Worked example (132 SMs): 64 decodes, Hq 32, Hkv 8,
   prefix 1024: cascade time cdiv(32*1,132)*8 = 8 < flash-decoding cdiv(64*8*1*8,132) = 32 -> 1.
   8 decodes, prefix 256: 2 > 1 -> 0. */
FLASHATTN_API int fa_use_cascade_attention(int32_t common_prefix_len, const int32_t *query_lens,
                                           int32_t num_reqs, int32_t num_heads_q, int32_t num_heads_kv,
                                           int use_alibi, int use_sliding_window, int use_local_attention,
                                           int32_t num_sms, int32_t dcp_world_size);

/* Inputs of the common-prefix choice. Flags: zero = no. block_size must be > 0; num_sms <= 0
   makes the heuristic decline. */
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
                                                const int32_t **prefix_table, const int32_t **suffix_table);

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
FLASHATTN_API fa_status fa_local_virtual_batches_count(int32_t chunk_size, const int32_t *query_start_loc,
                                                       const int32_t *seq_lens, int32_t num_reqs,
                                                       int32_t *num_virtual_out);

/* Fills `out` (its arrays sized by the count query). block_table is the host block table
   [num_reqs, row_stride] with max_blocks valid columns (indices clipped to max_blocks - 1). */
FLASHATTN_API fa_status fa_make_local_virtual_batches(int32_t chunk_size, int32_t block_size,
                                                      const int32_t *query_start_loc, const int32_t *seq_lens,
                                                      int32_t num_reqs, const int32_t *block_table,
                                                      int64_t row_stride, int32_t max_blocks,
                                                      int32_t capacity, fa_local_batches *out);

// >>dcp
/* Tokens of a length-L sequence stored on `rank` of a DCP group of world_size ranks with
   interleave I: the count of p < L with (p / I) % world_size == rank. */
FLASHATTN_API int32_t fa_dcp_local_seq_len(int32_t seq_len, int32_t world_size, int32_t rank,
                                           int32_t interleave);
FLASHATTN_API fa_status fa_dcp_local_seq_lens(const int32_t *seq_lens, int32_t n, int32_t world_size,
                                              int32_t rank, int32_t interleave, int32_t *out);

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
FLASHATTN_API int32_t fa_num_splits_heuristic(int64_t total_mblocks, int32_t num_sms, int32_t num_n_blocks,
                                              int32_t max_splits);

struct fa_backend_caps;

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
    int32_t kv_bytes;                 /* bytes of a cached K/V element (2; 1 for fp8) in [0, 8]; 0 -> 2 */
    const struct fa_backend_caps *caps; /* the kernels planned for (required): tile shapes, the
                                         decode-tile rule and the decode cost constants */
} fa_split_params;

/* Plan layout: plan[0] = static split count S (>= 1); plan[1 + b] = splits of request b in
   [1, S]; plan[1 + num_reqs ..] = 0 (padded requests in a captured graph do no work).
   plan_len >= 1 + num_reqs. */
FLASHATTN_API fa_status fa_plan_splits(const fa_split_params *p, int32_t *plan, int32_t plan_len);

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
    int64_t cache_block_stride, cache_row_stride, cache_head_stride; /* elements; last dim 1 */
    fa_dtype cache_dtype;             /* == kv_dtype, or FP8_E4M3 / FP8_E5M2 */
    const int64_t *slot_mapping;      /* [num_tokens] device; negative = skip; a slot at or past
                                         num_blocks * block_size is skipped and reported */
    int64_t num_blocks;               /* blocks in the cache (its shape[1]) */
    int32_t num_tokens, num_heads_kv, head_size, block_size;
    float k_scale, v_scale;           /* fp8 only: stored = saturate(x / scale) */
} fa_cache_write_args;

/* Varlen attention over a paged cache (block_table + seqused_k) or dense keys (cu_seqlens_k).
   Query heads form groups of qg = q_head_group heads (0 = one group of num_heads_q); within
   each group the usual GQA mapping applies: query head h reads KV head (h % qg) / (qg / Hkv).
   (DCP's gathered queries are N groups, one per rank, each over the same replicated KV heads.) */
typedef struct fa_attn_args {
    const void *q;                    /* [num_tokens, Hq, D]; addr(t,h) = (h / q_head_group) *
                                         q_group_stride + (h % q_head_group) * q_head_stride +
                                         t * q_token_stride */
    int64_t q_token_stride, q_head_stride, q_group_stride;
    int32_t q_head_group;             /* heads per group; 0 = Hq (one group); a multiple of Hkv */
    fa_dtype q_dtype;                 /* F16, BF16 (F32 on CPU); out has the same dtype. Or
                                         FP8_E4M3, a quantised query (kv_dtype FP8_E4M3 too, out
                                         in out_dtype; a backend without it: UNSUPPORTED) */
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
                                         already offset to its first column. An id outside
                                         [0, num_blocks) is never read and is reported */
    int64_t block_table_stride;
    int64_t num_blocks;               /* paged: blocks in the cache (its shape[1]); dense: 0 */
    int32_t num_seqs, num_tokens, max_seqlen_q, max_seqlen_k;
    int32_t min_seqlen_q;             /* shortest non-empty query of the call, a hint (0 = unknown):
                                         a backend may run short (decode) queries in their own tile */
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
    /* fp8 query (q_dtype FP8_E4M3): q[t, h] stands for q_descale[b, h / (Hq / Hkv)] x q[t, h] */
    fa_dtype out_dtype;               /* out's dtype with an fp8 query: F16 or BF16 (F32 on CPU);
                                         ignored otherwise (out has q_dtype) */
    const float *q_descale;           /* NULL-able (= 1); [num_seqs, Hkv], the descale strides */
    int64_t num_keys;                 /* dense: rows of k and v (their shape[0]), >= 0; 0 = not given
                                         (a backend that needs the bound runs the call in a kernel
                                         that does not); paged: ignored */
    int32_t *work_counters;           /* NULL-able: [FA_WORK_COUNTERS] int32 device words, every
                                         one 0 on entry. The backend may count its work items
                                         there (a persistent grid taking them one by one) and
                                         leaves every word 0 when the call completes. Two calls
                                         that may run at once (other streams) must not share
                                         them; NULL: never touched. 4-byte aligned. fa_forward
                                         passes the builder's (zeroed at creation) */
} fa_attn_args;

/* Words of fa_attn_args.work_counters. */
#define FA_WORK_COUNTERS 4

/* out = merge of two partial attentions through their LSEs (a non-finite LSE = empty). */
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

/* The device ops, named for fa_backend_ops.check and in error messages. */
typedef enum fa_op {
    FA_OP_RESHAPE_AND_CACHE = 0,      /* args: fa_cache_write_args */
    FA_OP_ATTENTION = 1,              /* args: fa_attn_args */
    FA_OP_MERGE_STATES = 2,           /* args: fa_merge_args */
    FA_OP_DCP_CORRECT = 3             /* args: fa_dcp_correct_args */
} fa_op;

typedef struct fa_backend_ops {
    fa_status (*reshape_and_cache)(void *ctx, const fa_cache_write_args *a);
    fa_status (*attention)(void *ctx, const fa_attn_args *a);
    fa_status (*merge_states)(void *ctx, const fa_merge_args *a);
    fa_status (*dcp_correct)(void *ctx, const fa_dcp_correct_args *a);
    /* async on the backend's stream. A pageable host source may be reused when the call
       returns (the builder's staging is pageable); never captured in a graph by the header */
    fa_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
    /* rows x width_bytes at dst with row pitch, every byte = value */
    fa_status (*fill)(void *ctx, void *dst, size_t pitch, int value, size_t width_bytes, size_t rows);
    fa_status (*alloc)(void *ctx, size_t bytes, void **ptr);   /* creation time only */
    fa_status (*free)(void *ctx, void *ptr);
    fa_status (*synchronize)(void *ctx);                       /* NULL-able; tests and tools */
    const char *(*last_error)(void *ctx);                      /* NULL-able; detail of last failure */
    /* NULL-able; rows x width_bytes from src (row pitch spitch) to dst (pitch dpitch), async.
       Needed only by DCP when q is not packed [T, H, D] (e.g. a slice of a fused QKV). */
    fa_status (*copy_2d)(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                         size_t width_bytes, size_t rows, fa_copy_kind kind);
    /* NULL-able; every check the op would make of `args` (fa_op names their struct), without
       running it: fa_forward checks each op of a call before the first one writes anything.
       Returns what the op would return for these arguments (FA_OK when it would run). */
    fa_status (*check)(void *ctx, fa_op op, const void *args);
} fa_backend_ops;

typedef struct fa_device_info {
    char name[64];
    int32_t cc_major, cc_minor;       /* 0.0 for the CPU backend */
    int32_t num_sms;                  /* multiprocessors (CPU: a nominal 132 for planning) */
    int64_t smem_per_block;           /* bytes, opt-in maximum */
    int64_t smem_per_sm;
} fa_device_info;

/* What a backend's kernels are, filled by the backend from the constants its kernels are
   compiled with (the header holds no kernel fact: the planner, the combination checks and the
   pre-flight checks of fa_forward read this block). */
#define FA_MAX_KERNEL_DIMS 8

/* Facts of the kernels compiled for one head-dim width. */
typedef struct fa_kernel_dim {
    int32_t head_dim;                 /* compiled width; serves head sizes in (previous width, head_dim] */
    int32_t prefill_tile_m;           /* query rows (GQA-packed) per prefill/general tile */
    int32_t prefill_tile_n;           /* keys per prefill tile step */
    int32_t decode_tile_n;            /* keys per decode-tile step */
    int32_t decode_ctas_per_sm;       /* decode tiles resident per multiprocessor */
    double decode_step_us;             /* one decode step of one tile running alone, microseconds */
    int32_t prefill_family;           /* FA_KERNEL_FAMILY_*: the kernels of this width's prefill /
                                         general calls (WGMMA: the calls that family accepts, see the
                                         backend's docs; the others run in MMA_SYNC) */
} fa_kernel_dim;

/* Kernel families of fa_kernel_dim.prefill_family. */
#define FA_KERNEL_FAMILY_MMA_SYNC 0   /* portable / FA2-class (mma.sync or the plain loops) */
#define FA_KERNEL_FAMILY_WGMMA 1      /* Hopper sm_90a: wgmma, TMA, warp specialisation */

typedef struct fa_backend_caps {
    int32_t num_dims;                 /* entries of dims, ascending head_dim */
    fa_kernel_dim dims[FA_MAX_KERNEL_DIMS];
    uint32_t act_dtypes;              /* bit (1u << dtype): q / k / v / out dtypes accepted */
    uint32_t cache_dtypes;            /* bit (1u << dtype): cache storage dtypes accepted */
    int32_t block_size_multiple;      /* block sizes accepted: positive multiples of this */
    int32_t head_size_multiple;       /* head sizes accepted: multiples of this up to the last dim */
    int32_t decode_max_rows;          /* calls with max_q * (Hq / Hkv) <= this run in the decode
                                         tile (one CTA per sequence, KV head and split); 0 = none */
    int32_t max_splits;               /* largest split count of one call */
    int32_t align_bytes;              /* q / k / v / out / cache data pointers and token, head
                                         and block strides (in bytes) are multiples of this */
    double sm_bytes_per_us;            /* one SM's share of memory bandwidth, bytes per microsecond */
    double cta_us;                     /* cost of one more CTA in a launch, microseconds */
    double combine_us;                 /* fixed cost of the split combine, microseconds */
    double combine_us_per_split;       /* its cost per split of the largest request */
} fa_backend_caps;

/* A backend. Ops may be NULL: the header then reports FA_ERR_UNSUPPORTED naming op and backend. */
typedef struct fa_backend {
    uint32_t api_version;             /* FA_BACKEND_API_VERSION */
    const char *name;                 /* "cpu", "cuda", ... */
    fa_backend_ops ops;
    void *ctx;
    fa_device_info info;
    fa_backend_caps caps;
} fa_backend;

/* Collectives for DCP, on the backend's stream. count = elements contributed per rank.
   all_gather: recv = concat over ranks of send (rank order). reduce_scatter: send holds
   world_size chunks of count elements; recv (count) = sum over ranks of their chunk `rank`. */
typedef struct fa_comm {
    uint32_t api_version;             /* FA_BACKEND_API_VERSION */
    int32_t world_size, rank;
    void *ctx;
    fa_status (*all_gather)(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype);
    fa_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t count, fa_dtype dtype);
    const char *(*last_error)(void *ctx); /* NULL-able */
    /* NULL-able: fa_forward calls it when this rank fails a DCP step (a check or an op), so
       that peers waiting in a collective of the same step return an error instead of waiting
       for this rank; the group then needs the comm's own recovery. */
    void (*abort)(void *ctx);
} fa_comm;

/* ------------------------------------------------------------------------------------------ */
// >>metadata

/* Causality of a step. AUTO follows each layer's attn_type: decoder self-attention is causal,
   cross-attention (ENCODER_DECODER) and the encoder types are not. ON / OFF override it for
   decoder and cross-attention layers; encoder layers are always bidirectional and chunked
   local attention always causal. */
typedef enum fa_causal { FA_CAUSAL_AUTO = 0, FA_CAUSAL_ON = 1, FA_CAUSAL_OFF = 2 } fa_causal;

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
    fa_causal causal;                 /* FA_CAUSAL_AUTO (zero): from each layer's attn_type */
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
struct fa_layer;

/* Builder output (mirrors FlashAttentionMetadata). Device pointers live in the builder's
   workspace and stay valid until the next fa_builder_build() on the same builder: fa_forward
   rejects metadata of an earlier build, of a destroyed builder, or not from a builder. */
typedef struct fa_metadata {
    const fa_builder *builder;
    uint64_t builder_id;              /* identity of the builder (ids are never reused) */
    const void *registry;             /* the implementation that built it (FLASHATTN_STATIC) */
    uint64_t generation;              /* its build count when this metadata was built */
    int32_t builder_slot;             /* where the builder is registered */
    int32_t num_actual_tokens, num_reqs, max_query_len, max_seq_len;
    int32_t min_query_len;            /* shortest non-empty query of the batch (0: none) */
    fa_causal causal;                 /* the batch's */
    int32_t query_exceeds_keys;       /* 1: a request has more queries than keys (only layers that
                                         attend non-causally may run this step) */
    const int32_t *query_start_loc;   /* [num_reqs + 1] device */
    const int32_t *seq_lens;          /* [num_reqs] device */
    const int32_t *block_table;       /* device (the batch's) */
    int64_t block_table_stride;
    const int64_t *slot_mapping;      /* device (the batch's) */
    int32_t num_splits;               /* static split count of the plain call */
    const int32_t *split_plan;        /* [1 + max_num_seqs] device */
    /* cascade (layers where it is not exact run the plain call above instead) */
    int32_t use_cascade, common_prefix_len;
    int32_t suffix_num_splits;
    const int32_t *suffix_split_plan; /* [1 + max_num_seqs] device */
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
   (through be->ops.alloc) once, and zeroes the workspace's work counters with be->ops.fill
   (without fill its attention calls get none); build() and forward() never allocate. comm:
   NULL unless dcp_world_size > 1 (then its world size and rank must match the config). */
FLASHATTN_API fa_status fa_builder_create(const fa_backend *be, const fa_config *cfg, const fa_comm *comm,
                                          fa_builder **out);
FLASHATTN_API void fa_builder_destroy(fa_builder *b);

/* Resolved configuration of the builder. */
FLASHATTN_API const fa_config *fa_builder_config(const fa_builder *b);

/* Registers the layers that will run this builder's metadata (call once after creating them;
   the array is read during the call only). The builder plans with what they share: the
   model-wide window for the split plan, and which layers cascade attention is exact for (no
   window, no ALiBi, causal). Optional: without it the builder plans as if every layer were a
   full-attention decoder layer; fa_forward stays exact either way. */
FLASHATTN_API fa_status fa_builder_set_layers(fa_builder *b, const struct fa_layer *layers, int32_t n);

/* Common prefix length for cascade: the engine's shared-block count -> P or 0 (heuristic).
   num_computed_tokens derived as seq_lens - query lens. Declines (0) when no registered layer
   can run cascade exactly or the batch is not causal. Uses the builder's host scratch: do not
   run it concurrently with fa_builder_build on the same builder. */
FLASHATTN_API fa_status fa_builder_cascade_prefix_len(fa_builder *b, const fa_batch *batch,
                                                      int32_t num_common_prefix_blocks,
                                                      int32_t *prefix_len_out);

/* Plans the step and uploads the metadata (no allocation, no sync). common_prefix_len > 0
   selects cascade (must be a multiple of block_size and <= every request's context; the batch
   must not be FA_CAUSAL_OFF); the plain plan is built too, for the layers where cascade is not
   exact (a window, ALiBi, cross-attention), which then run plain paged attention. */
FLASHATTN_API fa_status fa_builder_build(fa_builder *b, const fa_batch *batch, int32_t common_prefix_len,
                                         fa_metadata *md_out);

/* A short description of a step's plan, for engine developers looking at speed: requests and
   tokens, the path each kind of layer takes (plain; cascade with its prefix, for the layers it
   is exact for; chunked local; DCP) and the split count of every request (the first 64).
   Writes at most size bytes, NUL-terminated when size > 0; *needed_out (NULL-able) gets the
   size of a buffer that holds the whole text (its length + 1 for the NUL). md must be the
   latest build of a live builder. */
FLASHATTN_API fa_status fa_metadata_describe(const fa_metadata *md, char *buf, size_t size,
                                             size_t *needed_out);

/* ------------------------------------------------------------------------------------------ */
// >>layer

typedef struct fa_layer_desc {
    int32_t num_heads_q;              /* query heads (required; fa_model_config's spelling) */
    int32_t num_heads_kv;             /* 0 -> num_heads_q */
    int32_t head_size;                /* required */
    float scale;                      /* 0 -> 1/sqrt(head_size) */
    fa_dtype dtype;                   /* activations; BF16 (zero) */
    fa_attn_type attn_type;           /* DECODER */
    int32_t sliding_window;           /* keys a query sees, itself included; 0 or -1 = none */
    float logits_soft_cap;            /* 0 = none */
    const float *alibi_slopes;        /* NULL-able, device [num_alibi_slopes == num_heads] */
    int32_t num_alibi_slopes;
    const float *sinks;               /* NULL-able, device float32 [num_sinks == num_heads] */
    int32_t num_sinks;
    fa_cache_dtype kv_cache_dtype;    /* AUTO */
    float k_scale, v_scale;           /* fp8 cache scales; 0 -> 1 */
    int32_t kv_sharing;               /* 1 = reads another layer's cache: never writes it */
    int32_t attention_chunk_size;     /* chunked local attention; 0 = off */
    int32_t dcp_world_size;           /* 0 -> 1; windows, ALiBi and chunked local attention are
                                         rejected with DCP > 1; must match the metadata's */
} fa_layer_desc;

/* A validated layer (transparent; caller-allocated). */
typedef struct fa_layer {
    fa_layer_desc desc;               /* resolved copy (defaults applied) */
    fa_window window;
    float scale, softcap, k_scale, v_scale;
} fa_layer;

FLASHATTN_API fa_status fa_layer_init(fa_layer *layer, const fa_layer_desc *desc);

/* fa_layer_init with the model's shape taken from the config, so it is spelled once: fields of
   desc left zero take cfg's values (num_heads_q, num_heads_kv, head_size and dtype from
   cfg->model, kv_cache_dtype from cfg->cache.cache_dtype, dcp_world_size from cfg->parallel,
   attention_chunk_size from cfg->scheduler); a non-zero field overrides. desc may be NULL (a
   full decoder layer of the model). The activation dtype is the model's: desc->dtype must be
   zero or equal to cfg->model.dtype. Then fa_layer_init's defaults and checks apply. */
FLASHATTN_API fa_status fa_layer_init_from_config(fa_layer *layer, const fa_config *cfg,
                                                  const fa_layer_desc *desc);

/* ------------------------------------------------------------------------------------------ */
// >>forward

/* One attention layer for one step (mirrors FlashAttentionImpl.forward). md must come from the
   latest fa_builder_build of a live builder. Encoder types: dense attention over q/k/v, no
   cache. Otherwise k/v are written into kv_cache unless the layer shares another's cache, then
   paged attention runs: plain, cascade, DCP or chunked local. k and v may be NULL (both) only
   for a kv_sharing layer or a cross-attention (ENCODER_DECODER) layer, whose cache holds the
   encoder's keys already; a layer that writes its cache needs them.
   q [T_pad, Hq, D], k/v [T_pad, Hkv, D], out [T_pad, Hq, D]: head_size dim contiguous, any
   token and head strides (k/v heads packed, stride D, when they are written to the cache);
   kv_cache rank 5 logical [2, num_blocks, block_size, Hkv, D] any strides (last dim 1).
   Only the first num_actual_tokens rows of out are written. Every check, the backend's own
   (fa_backend_ops.check) included, runs before the first op: on error nothing is written. A
   backend that fails while running (a device fault) returns its status naming backend and op;
   ids found out of the cache's range by a device kernel are reported by the next call. */
FLASHATTN_API fa_status fa_forward(const fa_layer *layer, const fa_backend *be, const fa_tensor *q,
                                   const fa_tensor *k, const fa_tensor *v, const fa_tensor *kv_cache,
                                   const fa_metadata *md, const fa_tensor *out);

/* The profiling run of a layer (an engine's memory-profiling pass, before any metadata):
   zeroes every row of out [T_pad, Hq, D] (the layer's dtype). */
FLASHATTN_API fa_status fa_forward_profile(const fa_layer *layer, const fa_backend *be, const fa_tensor *out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */

/* ========================================================================================== */
// >>impl
#if defined(FLASHATTN_IMPLEMENTATION) && !defined(FLASHATTN_IMPLEMENTATION_DONE)
#define FLASHATTN_IMPLEMENTATION_DONE /* a second include in the same file adds nothing */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FA_ASSERT
#include <assert.h>
#define FA_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define FA__TLS thread_local
#elif defined(_MSC_VER)
#define FA__TLS __declspec(thread)
#elif defined(__GNUC__) || defined(__clang__)
#define FA__TLS __thread
#else
#define FA__TLS /* no thread-local storage: the message is shared between threads */
#endif

#ifdef FLASHATTN_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define FA__DEF static __attribute__((unused)) /* a file need not call every function */
#else
#define FA__DEF static
#endif
#else
#define FA__DEF
#endif

/* The one piece of mutable state: the failure reason of the last call, per thread (stb). */
static FA__TLS char fa__err[256];

static void fa__clear(void) { fa__err[0] = '\0'; }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static fa_status
fa__fail(fa_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fa__err, sizeof fa__err, fmt, ap);
    va_end(ap);
    return s;
}

/* Re-labels the current message (from an inner call named by `inner_prefix`) with `fn`. */
static fa_status fa__refail(fa_status s, const char *fn, const char *inner_prefix)
{
    char inner[sizeof fa__err];
    size_t n = strlen(inner_prefix);
    memcpy(inner, fa__err, sizeof inner);
    return fa__fail(s, "%s: %s", fn, strncmp(inner, inner_prefix, n) == 0 ? inner + n : inner);
}

#define FA__CHECK_PTR(fn, p) \
    do { \
        if ((p) == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: %s is NULL", fn, #p); \
    } while (0)

/* Ceiling division for a >= 0, b > 0 that cannot overflow (a + b - 1 can). */
static int32_t fa__cdiv(int32_t a, int32_t b) { return a / b + (a % b != 0); }
static int64_t fa__cdiv64(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* Checked int64 arithmetic for sizes and offsets: 0 on overflow (or a negative operand), the
   result in *r otherwise. */
static int fa__mul64(int64_t a, int64_t b, int64_t *r)
{
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}
static int fa__add64(int64_t a, int64_t b, int64_t *r)
{
    if (a < 0 || b < 0 || a > INT64_MAX - b) return 0;
    *r = a + b;
    return 1;
}
static int32_t fa__min(int32_t a, int32_t b) { return a < b ? a : b; }
static int32_t fa__max(int32_t a, int32_t b) { return a > b ? a : b; }

FA__DEF const char *fa_status_string(fa_status s)
{
    switch (s) {
    case FA_OK: return "ok";
    case FA_ERR_INVALID_ARG: return "invalid argument";
    case FA_ERR_UNSUPPORTED: return "unsupported";
    case FA_ERR_WORKSPACE: return "workspace too small";
    case FA_ERR_BACKEND: return "backend error";
    case FA_ERR_OUT_OF_MEMORY: return "out of memory";
    }
    return "unknown status";
}

FA__DEF const char *fa_last_error(void) { return fa__err; }

FA__DEF const char *fa_version(void) { return FLASHATTN_VERSION_STRING; }

FA__DEF size_t fa_dtype_size(fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32:
    case FA_DTYPE_I32: return 4;
    case FA_DTYPE_F16:
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3:
    case FA_DTYPE_FP8_E5M2: return 1;
    case FA_DTYPE_I64: return 8;
    default: return 0;
    }
}

FA__DEF const char *fa_dtype_name(fa_dtype t)
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

static int fa__is_activation(fa_dtype t)
{
    return t == FA_DTYPE_F32 || t == FA_DTYPE_F16 || t == FA_DTYPE_BF16;
}

// >>tensor impl
FA__DEF fa_tensor fa_tensor_make(void *data, fa_dtype dtype, int32_t rank, const int64_t *shape)
{
    fa_tensor t;
    int32_t i;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    if (rank < 0 || rank > FA_MAX_RANK || (rank > 0 && shape == NULL)) return t; /* rank 0 = invalid */
    for (i = 0; i < rank; ++i)
        if (shape[i] < 0) return t;
    t.rank = rank;
    for (i = 0; i < rank; ++i) t.shape[i] = shape[i];
    if (rank > 0) {
        t.stride[rank - 1] = 1;
        int64_t total;
        for (i = rank - 2; i >= 0; --i)
            if (!fa__mul64(t.stride[i + 1], t.shape[i + 1] > 0 ? t.shape[i + 1] : 1, &t.stride[i]) ||
                (i == 0 && !fa__mul64(t.stride[0], t.shape[0], &total))) {
                memset(&t, 0, sizeof t); /* the element count overflows int64: rank 0 = invalid */
                t.data = data;
                t.dtype = dtype;
                return t;
            }
    }
    return t;
}

// >>caps impl
FA__DEF int fa_supports_head_size(int32_t head_size)
{
    return head_size >= FA_HEAD_SIZE_MIN && head_size <= FA_HEAD_SIZE_MAX &&
           head_size % FA_HEAD_SIZE_MULTIPLE == 0;
}

FA__DEF fa_block_sizes fa_supported_kernel_block_sizes(int hybrid_mamba_f32)
{
    fa_block_sizes r;
    memset(&r, 0, sizeof r);
    if (hybrid_mamba_f32) {
        r.count = 3;
        r.sizes[0] = 16;
        r.sizes[1] = 32;
        r.sizes[2] = 64;
    } else {
        r.multiple_of = 1;
    }
    return r;
}

FA__DEF int fa_supports_block_size(int32_t block_size, int hybrid_mamba_f32)
{
    if (block_size <= 0) return 0;
    if (hybrid_mamba_f32) return block_size == 16 || block_size == 32 || block_size == 64;
    return 1;
}

FA__DEF int fa_supports_kv_cache_dtype(fa_cache_dtype cache_dtype)
{
    return (int)cache_dtype >= 0 && cache_dtype < FA_CACHE_DTYPE_COUNT_;
}

FA__DEF int fa_supports_compute_capability(int32_t major, int32_t minor)
{
    return major > 8 || (major == 8 && minor >= 0);
}

FA__DEF fa_dtype fa_cache_storage_dtype(fa_cache_dtype cache_dtype, fa_dtype activation)
{
    switch (cache_dtype) {
    case FA_CACHE_FP8:
    case FA_CACHE_FP8_E4M3: return FA_DTYPE_FP8_E4M3;
    case FA_CACHE_FP8_E5M2: return FA_DTYPE_FP8_E5M2;
    default: return activation;
    }
}

FA__DEF const char *fa_check_combination(const struct fa_backend *be, int32_t head_size, fa_dtype dtype,
                                         fa_cache_dtype cache_dtype, int32_t block_size, int use_sinks,
                                         int hybrid_mamba_f32)
{
    (void)use_sinks; /* sinks run on every backend */
    if (!fa_supports_head_size(head_size)) return "head_size must be a multiple of 8 in [8, 256]";
    if (!fa__is_activation(dtype)) return "dtype must be f16, bf16 or f32";
    if (!fa_supports_kv_cache_dtype(cache_dtype)) return "unknown kv cache dtype";
    if (!fa_supports_block_size(block_size, hybrid_mamba_f32))
        return hybrid_mamba_f32
                   ? "block_size must be 16, 32 or 64 for a hybrid model with float32 mamba state"
                   : "block_size must be >= 1";
    if (be != NULL) {
        const fa_backend_caps *cp = &be->caps;
        if (be->info.cc_major != 0 && !fa_supports_compute_capability(be->info.cc_major, be->info.cc_minor))
            return "compute capability must be 8.0 or newer";
        if (cp->num_dims < 1 || cp->num_dims > FA_MAX_KERNEL_DIMS)
            return "the backend's capability block is empty";
        if (head_size > cp->dims[cp->num_dims - 1].head_dim ||
            (cp->head_size_multiple > 0 && head_size % cp->head_size_multiple != 0))
            return "the backend has no kernel for this head_size (pruned or too wide)";
        if (!(cp->act_dtypes >> dtype & 1u)) return "the backend does not run this activation dtype";
        if (!(cp->cache_dtypes >> fa_cache_storage_dtype(cache_dtype, dtype) & 1u))
            return "the backend does not read this kv cache dtype";
        if (cp->block_size_multiple > 0 && block_size % cp->block_size_multiple != 0)
            return "the backend needs a block_size that is a multiple of its block_size_multiple";
    }
    return NULL;
}

FA__DEF fa_status fa_kv_cache_shape(int64_t num_blocks, int32_t block_size, int32_t num_heads_kv,
                                    int32_t head_size, int64_t shape_out[5])
{
    fa__clear();
    FA__CHECK_PTR("fa_kv_cache_shape", shape_out);
    if (num_blocks <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_kv_cache_shape: num_blocks %lld must be > 0",
                        (long long)num_blocks);
    if (block_size <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_kv_cache_shape: block_size %d must be >= 1", block_size);
    if (num_heads_kv <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_kv_cache_shape: num_heads_kv %d must be > 0", num_heads_kv);
    if (!fa_supports_head_size(head_size))
        return fa__fail(FA_ERR_INVALID_ARG,
                        "fa_kv_cache_shape: head_size %d is not a multiple of 8 in [8, 256]", head_size);
    {
        int64_t n = 2;
        if (!fa__mul64(n, num_blocks, &n) || !fa__mul64(n, block_size, &n) ||
            !fa__mul64(n, num_heads_kv, &n) || !fa__mul64(n, head_size, &n) ||
            !fa__mul64(n, 8, &n)) /* bytes of the widest element fit too */
            return fa__fail(
                FA_ERR_INVALID_ARG,
                "fa_kv_cache_shape: num_blocks %lld x block_size %d x %d heads x %d overflows 64-bit sizes",
                (long long)num_blocks, block_size, num_heads_kv, head_size);
    }
    shape_out[0] = 2;
    shape_out[1] = num_blocks;
    shape_out[2] = block_size;
    shape_out[3] = num_heads_kv;
    shape_out[4] = head_size;
    return FA_OK;
}

FA__DEF fa_status fa_kv_cache_stride_order(fa_kv_layout layout, int include_num_layers, int32_t order_out[6],
                                           int32_t *rank_out)
{
    static const int32_t nhd5[5] = {0, 1, 2, 3, 4}, hnd5[5] = {0, 1, 3, 2, 4};
    static const int32_t nhd6[6] = {2, 0, 1, 3, 4, 5}, hnd6[6] = {2, 4, 0, 1, 3, 5};
    const int32_t *src;
    int32_t n, i;
    fa__clear();
    FA__CHECK_PTR("fa_kv_cache_stride_order", order_out);
    FA__CHECK_PTR("fa_kv_cache_stride_order", rank_out);
    if (layout != FA_LAYOUT_NHD && layout != FA_LAYOUT_HND)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_kv_cache_stride_order: layout %d is not NHD (0) or HND (1)",
                        (int)layout);
    if (include_num_layers) {
        src = layout == FA_LAYOUT_NHD ? nhd6 : hnd6;
        n = 6;
    } else {
        src = layout == FA_LAYOUT_NHD ? nhd5 : hnd5;
        n = 5;
    }
    for (i = 0; i < n; ++i) order_out[i] = src[i];
    *rank_out = n;
    return FA_OK;
}

FA__DEF fa_status fa_kv_cache_strides(fa_kv_layout layout, int64_t num_blocks, int32_t block_size,
                                      int32_t num_heads_kv, int32_t head_size, int64_t strides_out[5])
{
    int64_t shape[5], phys_stride[5];
    int32_t order[6], rank, i;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR("fa_kv_cache_strides", strides_out);
    s = fa_kv_cache_shape(num_blocks, block_size, num_heads_kv, head_size, shape);
    if (s != FA_OK) return fa__refail(s, "fa_kv_cache_strides", "fa_kv_cache_shape: ");
    s = fa_kv_cache_stride_order(layout, 0, order, &rank);
    if (s != FA_OK) return fa__refail(s, "fa_kv_cache_strides", "fa_kv_cache_stride_order: ");
    /* physical dim i holds logical dim order[i]; contiguous in physical order */
    phys_stride[4] = 1;
    for (i = 3; i >= 0; --i) phys_stride[i] = phys_stride[i + 1] * shape[order[i + 1]];
    for (i = 0; i < 5; ++i) strides_out[order[i]] = phys_stride[i];
    return FA_OK;
}

// >>config impl
FA__DEF fa_status fa_config_resolve(const fa_config *in, fa_config *out)
{
    fa_config c;
    fa__clear();
    FA__CHECK_PTR("fa_config_resolve", in);
    FA__CHECK_PTR("fa_config_resolve", out);
    c = *in;
    if (c.model.num_heads_kv == 0) c.model.num_heads_kv = c.model.num_heads_q;
    if (c.cache.block_size == 0) c.cache.block_size = 16;
    if (c.parallel.dcp_world_size == 0) c.parallel.dcp_world_size = 1;
    if (c.parallel.cp_kv_cache_interleave_size == 0) c.parallel.cp_kv_cache_interleave_size = 1;
    if (c.compilation.max_cudagraph_capture_size == 0) c.compilation.max_cudagraph_capture_size = 512;
    if (c.compilation.max_num_splits_for_cuda_graph == 0) c.compilation.max_num_splits_for_cuda_graph = 32;
    if (c.compilation.max_num_splits == 0) c.compilation.max_num_splits = 32;
    if (c.scheduler.max_num_seqs == 0) c.scheduler.max_num_seqs = 256;
    if (c.scheduler.max_num_batched_tokens == 0) c.scheduler.max_num_batched_tokens = 8192;

    if (c.model.num_heads_q <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "config: model.num_heads_q %d must be > 0", c.model.num_heads_q);
    if (c.model.num_heads_kv <= 0 || c.model.num_heads_q % c.model.num_heads_kv != 0)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "config: model.num_heads_q %d is not divisible by num_heads_kv %d",
                        c.model.num_heads_q, c.model.num_heads_kv);
    if (!fa_supports_head_size(c.model.head_size))
        return fa__fail(FA_ERR_INVALID_ARG, "config: model.head_size %d is not a multiple of 8 in [8, 256]",
                        c.model.head_size);
    if (!fa__is_activation(c.model.dtype))
        return fa__fail(FA_ERR_INVALID_ARG, "config: model.dtype %d is not f16, bf16 or f32",
                        (int)c.model.dtype);
    if (!fa_supports_block_size(c.cache.block_size, c.model.hybrid_mamba_f32))
        return fa__fail(
            FA_ERR_INVALID_ARG,
            c.model.hybrid_mamba_f32
                ? "config: cache.block_size %d must be 16, 32 or 64 (hybrid model, float32 mamba state)"
                : "config: cache.block_size %d must be >= 1",
            c.cache.block_size);
    if (!fa_supports_kv_cache_dtype(c.cache.cache_dtype))
        return fa__fail(FA_ERR_INVALID_ARG, "config: cache.cache_dtype %d is unknown",
                        (int)c.cache.cache_dtype);
    if (c.cache.layout != FA_LAYOUT_NHD && c.cache.layout != FA_LAYOUT_HND)
        return fa__fail(FA_ERR_INVALID_ARG, "config: cache.layout %d is unknown", (int)c.cache.layout);
    if (c.parallel.dcp_world_size < 1)
        return fa__fail(FA_ERR_INVALID_ARG, "config: parallel.dcp_world_size %d must be >= 1",
                        c.parallel.dcp_world_size);
    if (c.parallel.dcp_rank < 0 || c.parallel.dcp_rank >= c.parallel.dcp_world_size)
        return fa__fail(FA_ERR_INVALID_ARG, "config: parallel.dcp_rank %d is outside [0, %d)",
                        c.parallel.dcp_rank, c.parallel.dcp_world_size);
    if (c.parallel.cp_kv_cache_interleave_size < 1 ||
        c.cache.block_size % c.parallel.cp_kv_cache_interleave_size != 0)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "config: parallel.cp_kv_cache_interleave_size %d does not divide block_size %d",
                        c.parallel.cp_kv_cache_interleave_size, c.cache.block_size);
    if (c.compilation.max_num_splits < 1 || c.compilation.max_num_splits > 128)
        return fa__fail(FA_ERR_INVALID_ARG, "config: compilation.max_num_splits %d is outside [1, 128]",
                        c.compilation.max_num_splits);
    if (c.compilation.max_num_splits_for_cuda_graph < 1)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "config: compilation.max_num_splits_for_cuda_graph %d must be >= 1",
                        c.compilation.max_num_splits_for_cuda_graph);
    if (c.compilation.max_cudagraph_capture_size < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "config: compilation.max_cudagraph_capture_size %d must be >= 0",
                        c.compilation.max_cudagraph_capture_size);
    if (c.scheduler.max_num_seqs < 1)
        return fa__fail(FA_ERR_INVALID_ARG, "config: scheduler.max_num_seqs %d must be >= 1",
                        c.scheduler.max_num_seqs);
    if (c.scheduler.max_num_batched_tokens < 1)
        return fa__fail(FA_ERR_INVALID_ARG, "config: scheduler.max_num_batched_tokens %d must be >= 1",
                        c.scheduler.max_num_batched_tokens);
    if (c.scheduler.attention_chunk_size < 0 ||
        (c.scheduler.attention_chunk_size > 0 && c.scheduler.attention_chunk_size % c.cache.block_size != 0))
        return fa__fail(FA_ERR_INVALID_ARG,
                        "config: scheduler.attention_chunk_size %d is not a multiple of block_size %d",
                        c.scheduler.attention_chunk_size, c.cache.block_size);
    *out = c;
    return FA_OK;
}

// >>plan impl
FA__DEF fa_window fa_sliding_window_config(int32_t sliding_window, fa_attn_type type)
{
    fa_window w;
    w.left = -1;
    w.right = -1;
    if (sliding_window > 0) {
        w.left = sliding_window - 1;
        w.right = type == FA_ATTN_ENCODER_ONLY ? sliding_window - 1 : 0;
    }
    return w;
}

FA__DEF fa_status fa_aot_sliding_window(const fa_window *layer_windows, int32_t n, fa_window *out,
                                        int *aot_enabled)
{
    int32_t i;
    fa__clear();
    FA__CHECK_PTR("fa_aot_sliding_window", out);
    FA__CHECK_PTR("fa_aot_sliding_window", aot_enabled);
    if (n < 0) return fa__fail(FA_ERR_INVALID_ARG, "fa_aot_sliding_window: n %d must be >= 0", n);
    if (n > 0) FA__CHECK_PTR("fa_aot_sliding_window", layer_windows);
    out->left = -1;
    out->right = -1;
    *aot_enabled = 1;
    for (i = 1; i < n; ++i) {
        if (layer_windows[i].left != layer_windows[0].left ||
            layer_windows[i].right != layer_windows[0].right) {
            *aot_enabled = 0;
            return FA_OK;
        }
    }
    if (n > 0) *out = layer_windows[0];
    return FA_OK;
}

// >>cascade impl
FA__DEF int fa_use_cascade_attention(int32_t common_prefix_len, const int32_t *query_lens, int32_t num_reqs,
                                     int32_t num_heads_q, int32_t num_heads_kv, int use_alibi,
                                     int use_sliding_window, int use_local_attention, int32_t num_sms,
                                     int32_t dcp_world_size)
{
    int32_t i, g;
    int64_t cascade_waves, fd_ctas;
    int flash_decoding;
    /* Cascade pays only for a long shared prefix and enough requests to share it. */
    if (common_prefix_len < 256) return 0;
    if (use_alibi || use_sliding_window || use_local_attention) return 0;
    if (num_reqs < 8) return 0;
    if (dcp_world_size > 1) return 0;
    if (query_lens == NULL || num_heads_kv <= 0 || num_heads_q <= 0 || num_sms <= 0) return 0;
    g = num_heads_q / num_heads_kv;
    /* Flash-decoding (all queries single-token, GQA) already reads K/V once per KV head:
       compare the two schedules' waves then. */
    flash_decoding = g > 1;
    for (i = 0; i < num_reqs && flash_decoding; ++i)
        if (query_lens[i] != 1) flash_decoding = 0;
    if (!flash_decoding) return 1;
    /* cascade: ceil(Hq * ceil(R / 128) / SMs) waves of `tiles` prefix tiles each;
       flash-decoding: ceil(R * Hkv * ceil(g / 128) * tiles / SMs). Both CTA counts fit int64
       (< 2^63); the products with `tiles` may not, so with a = q * SMs + r the second time is
       q * tiles + ceil(r * tiles / SMs), where 0 <= ceil(r * tiles / SMs) <= tiles, and
       waves * tiles < q * tiles + c  <=>  waves < q, or waves == q and c > 0 (exact; tiles
       itself, ceil(P / 128) >= 1, drops out). */
    cascade_waves = fa__cdiv64((int64_t)num_heads_q * fa__cdiv(num_reqs, 128), num_sms);
    fd_ctas = (int64_t)num_reqs * num_heads_kv * fa__cdiv(g, 128);
    if (cascade_waves != fd_ctas / num_sms) return cascade_waves < fd_ctas / num_sms;
    return fd_ctas % num_sms != 0;
}

FA__DEF fa_status fa_cascade_prefix_len(const fa_cascade_query *q, int32_t *prefix_len_out)
{
    int32_t p, i;
    fa__clear();
    FA__CHECK_PTR("fa_cascade_prefix_len", q);
    FA__CHECK_PTR("fa_cascade_prefix_len", prefix_len_out);
    if (q->num_common_prefix_blocks < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_cascade_prefix_len: num_common_prefix_blocks %d must be >= 0",
                        q->num_common_prefix_blocks);
    if (q->block_size <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_cascade_prefix_len: block_size %d must be > 0",
                        q->block_size);
    if (q->num_reqs < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_cascade_prefix_len: num_reqs %d must be >= 0", q->num_reqs);
    if (q->num_common_prefix_blocks == 0 || q->encoder_only || q->num_reqs == 0) {
        *prefix_len_out = 0;
        return FA_OK;
    }
    FA__CHECK_PTR("fa_cascade_prefix_len", q->num_computed_tokens);
    FA__CHECK_PTR("fa_cascade_prefix_len", q->query_lens);
    p = (int64_t)q->num_common_prefix_blocks * q->block_size > INT32_MAX
            ? INT32_MAX
            : q->num_common_prefix_blocks * q->block_size;
    for (i = 0; i < q->num_reqs; ++i) {
        if (q->num_computed_tokens[i] < 0)
            return fa__fail(FA_ERR_INVALID_ARG,
                            "fa_cascade_prefix_len: num_computed_tokens[%d] = %d is negative", i,
                            q->num_computed_tokens[i]);
        p = fa__min(p, q->num_computed_tokens[i]);
    }
    *prefix_len_out = 0;
    p = p / q->block_size * q->block_size;
    if (fa_use_cascade_attention(p, q->query_lens, q->num_reqs, q->num_heads_q, q->num_heads_kv, q->use_alibi,
                                 q->use_sliding_window, q->use_local_attention, q->num_sms,
                                 q->dcp_world_size))
        *prefix_len_out = p;
    return FA_OK;
}

FA__DEF fa_status fa_cascade_block_tables(const int32_t *block_table, int64_t row_stride,
                                          int32_t common_prefix_len, int32_t block_size,
                                          const int32_t **prefix_table, const int32_t **suffix_table)
{
    fa__clear();
    FA__CHECK_PTR("fa_cascade_block_tables", block_table);
    FA__CHECK_PTR("fa_cascade_block_tables", prefix_table);
    FA__CHECK_PTR("fa_cascade_block_tables", suffix_table);
    if (block_size <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_cascade_block_tables: block_size %d must be > 0", block_size);
    if (common_prefix_len <= 0 || common_prefix_len % block_size != 0)
        return fa__fail(
            FA_ERR_INVALID_ARG,
            "fa_cascade_block_tables: common_prefix_len %d is not a positive multiple of block_size %d",
            common_prefix_len, block_size);
    if (row_stride < common_prefix_len / block_size)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "fa_cascade_block_tables: row_stride %lld is narrower than the %d prefix blocks",
                        (long long)row_stride, common_prefix_len / block_size);
    *prefix_table = block_table;
    *suffix_table = block_table + common_prefix_len / block_size;
    return FA_OK;
}

// >>local impl
static fa_status fa__check_qsl(const char *fn, const int32_t *query_start_loc, const int32_t *seq_lens,
                               int32_t num_reqs)
{
    int32_t b;
    FA_ASSERT(query_start_loc != NULL);
    if (query_start_loc[0] != 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: query_start_loc[0] = %d must be 0", fn, query_start_loc[0]);
    for (b = 0; b < num_reqs; ++b) {
        int32_t ql;
        /* compared, not subtracted: from 0 and monotone every length fits int32 */
        if (query_start_loc[b + 1] < query_start_loc[b])
            return fa__fail(FA_ERR_INVALID_ARG, "%s: query_start_loc is not monotone at %d (%d > %d)", fn, b,
                            query_start_loc[b], query_start_loc[b + 1]);
        ql = query_start_loc[b + 1] - query_start_loc[b];
        if (seq_lens != NULL && seq_lens[b] < ql)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: seq_lens[%d] = %d is less than its query length %d", fn,
                            b, seq_lens[b], ql);
    }
    return FA_OK;
}

/* Per request: tokens of the first (partial) chunk touched by the queries, and the count of
   virtual batches. */
static int32_t fa__local_first(int32_t c, int32_t q, int32_t s) { return fa__min(c - ((s - q) % c), q); }
static int32_t fa__local_nblk(int32_t c, int32_t q, int32_t s)
{
    int32_t first = fa__local_first(c, q, s);
    return 1 + fa__cdiv(q - first, c);
}

FA__DEF fa_status fa_local_virtual_batches_count(int32_t chunk_size, const int32_t *query_start_loc,
                                                 const int32_t *seq_lens, int32_t num_reqs,
                                                 int32_t *num_virtual_out)
{
    int32_t b, v = 0;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR("fa_local_virtual_batches_count", query_start_loc);
    FA__CHECK_PTR("fa_local_virtual_batches_count", seq_lens);
    FA__CHECK_PTR("fa_local_virtual_batches_count", num_virtual_out);
    if (chunk_size <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_local_virtual_batches_count: chunk_size %d must be > 0",
                        chunk_size);
    if (num_reqs < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "fa_local_virtual_batches_count: num_reqs %d must be >= 0",
                        num_reqs);
    s = fa__check_qsl("fa_local_virtual_batches_count", query_start_loc, seq_lens, num_reqs);
    if (s != FA_OK) return s;
    for (b = 0; b < num_reqs; ++b) {
        int32_t q = query_start_loc[b + 1] - query_start_loc[b];
        if (q > 0) v += fa__local_nblk(chunk_size, q, seq_lens[b]);
    }
    *num_virtual_out = v;
    return FA_OK;
}

FA__DEF fa_status fa_make_local_virtual_batches(int32_t chunk_size, int32_t block_size,
                                                const int32_t *query_start_loc, const int32_t *seq_lens,
                                                int32_t num_reqs, const int32_t *block_table,
                                                int64_t row_stride, int32_t max_blocks, int32_t capacity,
                                                fa_local_batches *out)
{
    const char *fn = "fa_make_local_virtual_batches";
    int32_t b, v = 0, need = 0, pages;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, query_start_loc);
    FA__CHECK_PTR(fn, seq_lens);
    FA__CHECK_PTR(fn, block_table);
    FA__CHECK_PTR(fn, out);
    if (block_size <= 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: block_size %d must be > 0", fn, block_size);
    if (chunk_size <= 0 || chunk_size % block_size != 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: chunk_size %d is not a positive multiple of block_size %d",
                        fn, chunk_size, block_size);
    if (max_blocks <= 0 || row_stride < max_blocks)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: max_blocks %d must be in [1, row_stride %lld]", fn,
                        max_blocks, (long long)row_stride);
    FA__CHECK_PTR(fn, out->seqlens_q);
    FA__CHECK_PTR(fn, out->cu_seqlens_q);
    FA__CHECK_PTR(fn, out->seqused_k);
    FA__CHECK_PTR(fn, out->block_table);
    s = fa_local_virtual_batches_count(chunk_size, query_start_loc, seq_lens, num_reqs, &need);
    if (s != FA_OK) return fa__refail(s, fn, "fa_local_virtual_batches_count: ");
    if (need > capacity)
        return fa__fail(FA_ERR_WORKSPACE, "%s: capacity %d is less than the %d virtual batches needed", fn,
                        capacity, need);
    pages = chunk_size / block_size;
    out->pages_per_virtual = pages;
    out->max_query_len = 0;
    out->max_seq_len = 0;
    out->cu_seqlens_q[0] = 0;
    for (b = 0; b < num_reqs; ++b) {
        int32_t q = query_start_loc[b + 1] - query_start_loc[b], sl = seq_lens[b];
        int32_t first, last, nblk, a;
        if (q == 0) continue;
        first = fa__local_first(chunk_size, q, sl);
        last = sl % chunk_size == 0 ? chunk_size : sl % chunk_size;
        nblk = 1 + fa__cdiv(q - first, chunk_size);
        for (a = 0; a < nblk; ++a, ++v) {
            int32_t r = nblk - 1 - a, ql, kl, k_start, t;
            ql = a == 0 ? first : fa__min(q - first - chunk_size * (a - 1), chunk_size);
            kl = a == nblk - 1 ? last : chunk_size;
            k_start = sl - (r * chunk_size + last);
            out->seqlens_q[v] = ql;
            out->cu_seqlens_q[v + 1] = out->cu_seqlens_q[v] + ql;
            out->seqused_k[v] = kl;
            out->max_query_len = fa__max(out->max_query_len, ql);
            out->max_seq_len = fa__max(out->max_seq_len, kl);
            for (t = 0; t < pages; ++t) {
                int64_t col = (int64_t)(k_start / block_size) + t; /* int32 would wrap near INT32_MAX */
                if (col > max_blocks - 1) col = max_blocks - 1;
                out->block_table[(int64_t)v * pages + t] = block_table[(int64_t)b * row_stride + col];
            }
        }
    }
    out->num_virtual = v;
    return FA_OK;
}

// >>dcp impl
FA__DEF int32_t fa_dcp_local_seq_len(int32_t seq_len, int32_t world_size, int32_t rank, int32_t interleave)
{
    int32_t base, rem;
    if (seq_len <= 0 || world_size <= 0 || interleave <= 0 || rank < 0 || rank >= world_size) return 0;
    /* Whole rounds of world_size * interleave tokens give every rank `interleave` each; the
       remainder is dealt out in runs of `interleave` from rank 0. */
    base = seq_len / interleave / world_size * interleave;
    rem = seq_len - base * world_size; /* < world_size * interleave: may exceed int32 */
    {
        const int64_t mine = (int64_t)rem - (int64_t)rank * interleave;
        return base + (int32_t)(mine <= 0 ? 0 : (mine < interleave ? mine : interleave));
    }
}

FA__DEF fa_status fa_dcp_local_seq_lens(const int32_t *seq_lens, int32_t n, int32_t world_size, int32_t rank,
                                        int32_t interleave, int32_t *out)
{
    const char *fn = "fa_dcp_local_seq_lens";
    int32_t i;
    fa__clear();
    FA__CHECK_PTR(fn, seq_lens);
    FA__CHECK_PTR(fn, out);
    if (n < 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: n %d must be >= 0", fn, n);
    if (world_size < 1) return fa__fail(FA_ERR_INVALID_ARG, "%s: world_size %d must be >= 1", fn, world_size);
    if (rank < 0 || rank >= world_size)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: rank %d is outside [0, %d)", fn, rank, world_size);
    if (interleave < 1) return fa__fail(FA_ERR_INVALID_ARG, "%s: interleave %d must be >= 1", fn, interleave);
    for (i = 0; i < n; ++i)
        if (seq_lens[i] < 0)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: seq_lens[%d] = %d is negative", fn, i, seq_lens[i]);
    for (i = 0; i < n; ++i) out[i] = fa_dcp_local_seq_len(seq_lens[i], world_size, rank, interleave);
    return FA_OK;
}

FA__DEF fa_status fa_dcp_slot_mapping(const int32_t *block_table, int64_t row_stride, int32_t max_blocks,
                                      int32_t block_size, const int32_t *req_of_token,
                                      const int32_t *positions, int32_t num_tokens, int32_t world_size,
                                      int32_t rank, int32_t interleave, int64_t *slot_mapping_out)
{
    const char *fn = "fa_dcp_slot_mapping";
    int32_t t;
    int64_t vbs;
    fa__clear();
    FA__CHECK_PTR(fn, block_table);
    FA__CHECK_PTR(fn, req_of_token);
    FA__CHECK_PTR(fn, positions);
    FA__CHECK_PTR(fn, slot_mapping_out);
    if (block_size <= 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: block_size %d must be > 0", fn, block_size);
    if (world_size < 1) return fa__fail(FA_ERR_INVALID_ARG, "%s: world_size %d must be >= 1", fn, world_size);
    if (rank < 0 || rank >= world_size)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: rank %d is outside [0, %d)", fn, rank, world_size);
    if (interleave < 1 || block_size % interleave != 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: interleave %d does not divide block_size %d", fn, interleave,
                        block_size);
    if (max_blocks <= 0 || row_stride < max_blocks)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: max_blocks %d must be in [1, row_stride %lld]", fn,
                        max_blocks, (long long)row_stride);
    if (num_tokens < 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: num_tokens %d must be >= 0", fn, num_tokens);
    vbs = (int64_t)block_size * world_size;
    for (t = 0; t < num_tokens; ++t) {
        int64_t p = positions[t];
        if (p < 0 || req_of_token[t] < 0)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: token %d has negative position %lld or request %d", fn,
                            t, (long long)p, req_of_token[t]);
        if (p / vbs >= max_blocks)
            return fa__fail(FA_ERR_INVALID_ARG,
                            "%s: position %lld of token %d needs block column %lld >= max_blocks %d", fn,
                            (long long)p, t, (long long)(p / vbs), max_blocks);
    }
    for (t = 0; t < num_tokens; ++t) {
        int64_t p = positions[t], vb = p / vbs, vo = p % vbs;
        if ((vo / interleave) % world_size == rank) {
            int64_t local_off = vo / ((int64_t)world_size * interleave) * interleave + vo % interleave;
            slot_mapping_out[t] =
                (int64_t)block_table[(int64_t)req_of_token[t] * row_stride + vb] * block_size + local_off;
        } else {
            slot_mapping_out[t] = -1;
        }
    }
    return FA_OK;
}

// >>plan splits impl
FA__DEF int32_t fa_num_splits_heuristic(int64_t total_mblocks, int32_t num_sms, int32_t num_n_blocks,
                                        int32_t max_splits)
{
    float eff[128], best = 0.f;
    int32_t s, max_s;
    if (num_sms <= 0 || max_splits <= 1 || num_n_blocks <= 0) return 1;
    /* The grid already fills the machine: splitting only adds combine work. */
    if ((double)total_mblocks >= 0.8 * num_sms) return 1;
    if (num_n_blocks <= 4) return 1;
    max_s = fa__min(fa__min(max_splits, 128), fa__min(num_sms, num_n_blocks));
    for (s = 1; s <= max_s; ++s) {
        double w = (double)total_mblocks * s / num_sms;
        eff[s - 1] = (float)(w / ceil(w));
        if (eff[s - 1] > best) best = eff[s - 1];
    }
    for (s = 1; s <= max_s; ++s)
        if (eff[s - 1] >= 0.85f * best) return s;
    return 1;
}

/* Keys a tile of `rows` query rows can see through a left window (lk when there is none). */
static int32_t fa__window_keys(const fa_split_params *p, int32_t lk, int32_t rows)
{
    int64_t span;
    if (p->window.left < 0) return lk;
    span = (int64_t)p->window.left + (p->causal ? 0 : fa__max(p->window.right, 0)) + 1 + rows;
    return span < lk ? (int32_t)span : lk;
}

/* The kernel facts for a head size: the narrowest compiled width that holds it (NULL: none). */
static const fa_kernel_dim *fa__kernel_dim(const fa_backend_caps *cp, int32_t head_size)
{
    int32_t i;
    for (i = 0; i < cp->num_dims && i < FA_MAX_KERNEL_DIMS; ++i)
        if (cp->dims[i].head_dim >= head_size) return &cp->dims[i];
    return NULL;
}

/* The decode-tile cost model, in microseconds (fitted to the H200 split sweeps, docs/perf.md):
       cost = waves * n * max(t, k * bytes / bw) + cta_us * CTAs + [S > 1] (combine_us + combine_us_per_split * S)
   CTAs = (request, KV head, split) tiles of the launch; n = the longest split's steps; k =
   min(occ, CTAs / SMs) CTAs share an SM (occ = decode_ctas_per_sm), waves = ceil(CTAs / (occ
   SMs)); a step takes t = decode_step_us alone, or its bytes (decode_tile_n keys of K and V)
   at k CTAs' share of an SM's bandwidth bw = sm_bytes_per_us; S = the largest split count.
   Worked example (the CPU backend's constants, head 128, bf16, 132 SMs): 64 requests x 8 KV
   heads at 8192 keys, 1 split: 512 CTAs, k = 3.88, waves 1, n = 256, bytes 16384, step
   max(1.6, 3.88 * 16384 / 32768 = 1.94) -> 256 * 1.94 + 0.008 * 512 = 500.6 us. */
static double fa__decode_cost(const fa_backend_caps *cp, const fa_kernel_dim *kd, int64_t ctas, int32_t n_max,
                              int32_t max_split, int32_t num_sms, int32_t head_size, int32_t kv_bytes)
{
    const double occ = kd->decode_ctas_per_sm > 0 ? kd->decode_ctas_per_sm : 1;
    const double bytes = (double)kd->decode_tile_n * head_size * 2.0 * kv_bytes;
    double k = (double)ctas / num_sms, step;
    int64_t waves;
    if (k > occ) k = occ;
    waves = fa__cdiv64(ctas, (int64_t)occ * num_sms);
    step = cp->sm_bytes_per_us > 0 ? k * bytes / cp->sm_bytes_per_us : 0.0;
    if (step < kd->decode_step_us) step = kd->decode_step_us;
    return (double)waves * (double)n_max * step + cp->cta_us * (double)ctas +
           (max_split > 1 ? cp->combine_us + cp->combine_us_per_split * max_split : 0.0);
}

/* Decode calls (max_q * g <= caps.decode_max_rows): one tile per request, KV head and split,
   walking decode_tile_n keys a step. Every request's steps are divided into splits of a share
   of 2^lg steps (request b then has ceil(steps_b / share) splits, at most cap); the cheapest
   share by fa__decode_cost wins, the smallest on ties. */
static void fa__plan_decode(const fa_split_params *p, const fa_kernel_dim *kd, int32_t cap, int32_t max_q,
                            int32_t *plan)
{
    const int32_t kvb = p->kv_bytes > 0 ? p->kv_bytes : 2;
    double best_cost = 0.0;
    int32_t b, lg, best_lg = 0, max_tiles = 0, s_max = 1;
    /* steps per request, parked in the plan's own entries until the splits replace them */
    for (b = 0; b < p->num_reqs; ++b) {
        const int32_t lk = fa__window_keys(p, p->seqused_k[b], max_q);
        plan[1 + b] = fa__cdiv(lk, kd->decode_tile_n);
        max_tiles = fa__max(max_tiles, plan[1 + b]);
    }
    for (lg = 0;; ++lg) { /* share = 2^lg steps */
        const int32_t share = (int32_t)1 << lg;
        int64_t ctas = 0;
        int32_t sm = 1, n_max = 0;
        double cost;
        for (b = 0; b < p->num_reqs; ++b) {
            const int32_t tiles = plan[1 + b];
            int32_t sp = (int32_t)(((int64_t)tiles + share - 1) >> lg);
            if (sp < 1) sp = 1;
            if (sp > cap) sp = cap;
            ctas += sp;
            if (sp > sm) sm = sp;
            /* the split's steps, ceil(tiles / sp) <= min(tiles, share) unless capped: divide
               only when it can raise the maximum */
            if ((sp == cap || n_max < fa__min(tiles, share)) && tiles > n_max)
                n_max = fa__max(n_max, fa__cdiv(tiles, sp));
        }
        cost = fa__decode_cost(p->caps, kd, ctas * p->num_heads_kv, n_max, sm, p->num_sms, p->head_size, kvb);
        if (lg == 0 || cost < best_cost) {
            best_cost = cost;
            best_lg = lg;
        }
        if (share >= max_tiles || lg >= 30) break;
    }
    for (b = 0; b < p->num_reqs; ++b) {
        int32_t sp = (int32_t)(((int64_t)plan[1 + b] + ((int64_t)1 << best_lg) - 1) >> best_lg);
        if (sp < 1) sp = 1;
        if (sp > cap) sp = cap;
        plan[1 + b] = sp;
        s_max = fa__max(s_max, sp);
    }
    plan[0] = s_max;
}

/* Prefill / general calls: a static split count from fa_num_splits_heuristic over the tiles of
   the launch, then per request its share of the tiles spread evenly over the SMs. */
static void fa__plan_general(const fa_split_params *p, const fa_kernel_dim *kd, int32_t cap, int32_t *plan)
{
    const int32_t g = p->num_heads_q / p->num_heads_kv, tile_m = kd->prefill_tile_m,
                  tile_n = kd->prefill_tile_n;
    int64_t total_mblocks = 0, total_blocks = 0, blocks_per_sm;
    int32_t b, max_k = 0, s_static;
    for (b = 0; b < p->num_reqs; ++b) {
        const int32_t lq = p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
        const int32_t lk = fa__window_keys(p, p->seqused_k[b], tile_m);
        const int64_t mblocks = fa__cdiv64((int64_t)fa__max(lq, 1) * g, tile_m);
        max_k = fa__max(max_k, lk);
        int64_t x;
        /* saturating: huge heads x queries x keys are valid input; the sums only size a heuristic */
        total_mblocks =
            fa__mul64(p->num_heads_kv, mblocks, &x) && fa__add64(total_mblocks, x, &x) ? x : INT64_MAX;
        total_blocks =
            fa__mul64(mblocks, fa__cdiv(lk, tile_n), &x) && fa__add64(total_blocks, x, &x) ? x : INT64_MAX;
    }
    s_static =
        cap <= 1 ? 1 : fa_num_splits_heuristic(total_mblocks, p->num_sms, fa__cdiv(max_k, tile_n), cap);
    plan[0] = s_static;
    if (s_static <= 1) {
        for (b = 0; b < p->num_reqs; ++b) plan[1 + b] = 1;
        return;
    }
    /* Dynamic per request: spread the tiles evenly over the SMs, ~10% slack. */
    {
        const double bps = ceil((double)total_blocks * 1.1 * p->num_heads_kv / p->num_sms);
        blocks_per_sm = bps >= 9.2e18 ? INT64_MAX : (int64_t)bps; /* the cast of a larger double is UB */
    }
    if (blocks_per_sm < 1) blocks_per_sm = 1;
    for (b = 0; b < p->num_reqs; ++b) {
        const int32_t lk = fa__window_keys(p, p->seqused_k[b], tile_m);
        const int32_t sp = (int32_t)fa__cdiv64(fa__cdiv(lk, tile_n), blocks_per_sm);
        plan[1 + b] = fa__max(1, fa__min(sp, s_static));
    }
}

FA__DEF fa_status fa_plan_splits(const fa_split_params *p, int32_t *plan, int32_t plan_len)
{
    const char *fn = "fa_plan_splits";
    const fa_kernel_dim *kd;
    int32_t b, g, max_q = 0, cap;
    fa__clear();
    FA__CHECK_PTR(fn, p);
    FA__CHECK_PTR(fn, plan);
    FA__CHECK_PTR(fn, p->caps);
    if (p->num_reqs < 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: num_reqs %d must be >= 0", fn, p->num_reqs);
    if (plan_len < 1 || plan_len - 1 < p->num_reqs)
        return fa__fail(FA_ERR_WORKSPACE, "%s: plan_len %d is less than 1 + num_reqs (%lld)", fn, plan_len,
                        1 + (long long)p->num_reqs);
    if (p->num_heads_q <= 0 || p->num_heads_kv <= 0 || p->num_heads_q % p->num_heads_kv != 0)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: num_heads_q %d is not a positive multiple of num_heads_kv %d", fn,
                        p->num_heads_q, p->num_heads_kv);
    if (!fa_supports_head_size(p->head_size))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: head_size %d is not a multiple of 8 in [8, 256]", fn,
                        p->head_size);
    kd = fa__kernel_dim(p->caps, p->head_size);
    if (kd == NULL || kd->prefill_tile_m < 1 || kd->prefill_tile_n < 1 || kd->decode_tile_n < 1)
        return fa__fail(FA_ERR_UNSUPPORTED, "%s: caps has no kernel for head_size %d (num_dims %d)", fn,
                        p->head_size, p->caps->num_dims);
    if (p->num_reqs > 0) {
        FA__CHECK_PTR(fn, p->cu_seqlens_q);
        FA__CHECK_PTR(fn, p->seqused_k);
    }
    for (b = 0; b < p->num_reqs; ++b) {
        const int64_t lq = (int64_t)p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
        if (lq < 0) return fa__fail(FA_ERR_INVALID_ARG, "%s: cu_seqlens_q is not monotone at %d", fn, b);
        if (lq > INT32_MAX)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: query %d has %lld tokens (more than INT32_MAX)", fn, b,
                            (long long)lq);
        if (p->seqused_k[b] < 0)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: seqused_k[%d] = %d is negative", fn, b, p->seqused_k[b]);
        max_q = fa__max(max_q, (int32_t)lq);
    }
    if (p->max_num_splits < 1)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: max_num_splits %d must be >= 1", fn, p->max_num_splits);
    if (p->num_sms < 1) return fa__fail(FA_ERR_INVALID_ARG, "%s: num_sms %d must be >= 1", fn, p->num_sms);
    if (p->kv_bytes < 0 || p->kv_bytes > 8)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_bytes %d is outside [0, 8]", fn, p->kv_bytes);
    memset(plan, 0, (size_t)plan_len * sizeof *plan);
    cap = p->batch_invariant ? 1
                             : fa__min(p->max_num_splits, p->caps->max_splits > 0 ? p->caps->max_splits : 1);
    g = p->num_heads_q / p->num_heads_kv;
    if (cap > 1 && max_q > 0 && (int64_t)max_q * g <= p->caps->decode_max_rows)
        fa__plan_decode(p, kd, cap, max_q, plan);
    else
        fa__plan_general(p, kd, cap, plan);
    return FA_OK;
}

// >>builder impl

/* The live-builder registry: the second piece of mutable state (after the error message).
   Metadata names its builder by slot and id, so fa_forward can tell metadata of a destroyed
   builder without touching the freed builder. Slots are claimed and released with atomics;
   ids come from a counter and are never reused. Under FLASHATTN_STATIC each file that
   implements the header has its own registry: use metadata through the file that built it. */
#define FA__MAX_BUILDERS 1024
static uint64_t fa__live_ids[FA__MAX_BUILDERS];
static uint64_t fa__next_id;

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static uint64_t fa__atomic_load(uint64_t *p) { return (uint64_t)_InterlockedOr64((volatile __int64 *)p, 0); }
static void fa__atomic_store(uint64_t *p, uint64_t v)
{
    _InterlockedExchange64((volatile __int64 *)p, (__int64)v);
}
static int fa__atomic_claim(uint64_t *p, uint64_t v)
{
    return _InterlockedCompareExchange64((volatile __int64 *)p, (__int64)v, 0) == 0;
}
static uint64_t fa__atomic_next(uint64_t *p)
{
    return (uint64_t)_InterlockedIncrement64((volatile __int64 *)p);
}
#elif defined(__GNUC__) || defined(__clang__)
static uint64_t fa__atomic_load(uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void fa__atomic_store(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static int fa__atomic_claim(uint64_t *p, uint64_t v)
{
    uint64_t expect = 0;
    return __atomic_compare_exchange_n(p, &expect, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static uint64_t fa__atomic_next(uint64_t *p) { return __atomic_add_fetch(p, 1, __ATOMIC_RELAXED); }
#else /* no atomics known: correct for builders created and destroyed on one thread */
static uint64_t fa__atomic_load(uint64_t *p) { return *p; }
static void fa__atomic_store(uint64_t *p, uint64_t v) { *p = v; }
static int fa__atomic_claim(uint64_t *p, uint64_t v)
{
    if (*p != 0) return 0;
    *p = v;
    return 1;
}
static uint64_t fa__atomic_next(uint64_t *p) { return ++*p; }
#endif

struct fa_builder {
    const fa_backend *be;
    const fa_comm *comm;
    fa_config cfg;
    uint64_t id;                     /* registry identity */
    int32_t slot;                    /* registry slot */
    uint64_t generation;             /* builds so far */
    int32_t max_seqs, max_tokens, max_virtual, pages_per_virtual;
    int32_t max_splits;              /* workspace cap on splits */
    int32_t split_elastic;           /* max_num_splits left 0: a call may use up to caps.max_splits
                                        splits while its partials fit the workspace */
    int64_t split_floats;            /* capacity of split_out in floats */
    int32_t heads_all;               /* query heads an attention call can see (Hq * DCP) */
    /* what the registered layers share (fa_builder_set_layers) */
    fa_window aot_window;
    int aot_enabled;
    int32_t num_layers;              /* 0: none registered */
    int32_t cascade_layers;          /* registered layers cascade is exact for */
    /* int32 metadata: one host staging region mirrored by one device region (one upload) */
    int32_t *host_ints, *dev_ints;
    size_t n_ints;
    size_t off_qsl, off_seq, off_plan, off_cu_prefix, off_prefix_kv, off_prefix_plan, off_suffix,
        off_suffix_plan, off_dcp, off_local_cu, off_local_k, off_local_plan, off_local_bt;
    int32_t *host_local_q;           /* [max_virtual] host scratch */
    int32_t *host_check;             /* [FA__CHECK_CHUNK] host scratch of the validation mode */
    /* device float/activation workspace */
    void *dev_ws;
    size_t ws_bytes;
    float *split_out, *split_lse;
    int32_t *work_counters;          /* [FA_WORK_COUNTERS], the workspace's last region, zero
                                        between calls; NULL without the backend's fill */
    void *prefix_out, *suffix_out;
    float *prefix_lse, *suffix_lse;
    void *dcp_q_all, *dcp_ctx_out, *dcp_rs_out, *dcp_qpart_out;
    float *dcp_ctx_lse, *dcp_lse_all, *dcp_lse_glob, *dcp_qpart_lse;
};

/* Ids copied per round trip by the validation mode. */
#define FA__CHECK_CHUNK 4096

/* Bytes of the builder's work counters (fa_attn_args.work_counters). */
#define FA__WORK_COUNTER_BYTES (FA_WORK_COUNTERS * sizeof(int32_t))

/* A bump allocator over one region: each take is 256-byte aligned (device regions) or packed
   (int regions), every size checked; the first region that does not fit is remembered. */
typedef struct fa__bump {
    size_t used, align;
    const char *overflow;            /* name of the first region that overflowed size_t */
} fa__bump;

static size_t fa__take(fa__bump *b, const char *region, int64_t count, size_t elem_bytes)
{
    size_t at = b->used, bytes, a = b->align;
    int64_t n;
    if (b->overflow != NULL) return 0;
    if (count < 0 || !fa__mul64(count, (int64_t)elem_bytes, &n) || (uint64_t)n > (uint64_t)(SIZE_MAX - a) ||
        (size_t)n > SIZE_MAX - a - b->used) {
        b->overflow = region;
        return 0;
    }
    bytes = (size_t)n;
    if (a > 1) bytes = (bytes + a - 1) / a * a;
    b->used += bytes;
    return at;
}

/* Sizes of everything the builder owns, computed in one place for create() and the size
   query. Int regions are offsets in int32 elements; device regions in bytes. */
typedef struct fa__layout {
    int32_t max_seqs, max_tokens, max_virtual, pages, max_splits, heads_all, split_tokens;
    size_t n_ints;
    size_t qsl, seq, plan, cu_prefix, prefix_kv, prefix_plan, suffix, suffix_plan, dcp, local_cu, local_k,
        local_plan, local_bt;
    size_t ws_ints, ws_split_out, ws_split_lse, ws_prefix_out, ws_suffix_out, ws_prefix_lse, ws_suffix_lse,
        ws_dcp_q_all, ws_dcp_ctx_out, ws_dcp_rs_out, ws_dcp_qpart_out, ws_dcp_ctx_lse, ws_dcp_lse_all,
        ws_dcp_lse_glob, ws_work_counters;
    size_t ws_bytes;
} fa__layout;

static fa_status fa__compute_layout(const char *fn, const fa_config *c, fa__layout *L)
{
    fa__bump ints = {0, 1, NULL}, ws = {0, 256, NULL};
    const int64_t T = c->scheduler.max_num_batched_tokens, H = c->model.num_heads_q, D = c->model.head_size;
    const int64_t N = c->parallel.dcp_world_size, S = c->scheduler.max_num_seqs;
    const size_t act = fa_dtype_size(c->model.dtype), f32 = sizeof(float);
    int64_t x;
    memset(L, 0, sizeof *L);
    L->max_seqs = c->scheduler.max_num_seqs;
    L->max_tokens = c->scheduler.max_num_batched_tokens;
    L->pages =
        c->scheduler.attention_chunk_size > 0 ? c->scheduler.attention_chunk_size / c->cache.block_size : 0;
    /* every virtual batch holds >= 1 query token; a request adds at most 2 + q / chunk */
    L->max_virtual = c->scheduler.attention_chunk_size > 0
                         ? (int32_t)(T < 2 * S + T / c->scheduler.attention_chunk_size + 1
                                         ? T
                                         : 2 * S + T / c->scheduler.attention_chunk_size + 1)
                         : 0;
    L->max_splits = c->compilation.batch_invariant ? 1 : c->compilation.max_num_splits;
    L->heads_all = (int32_t)(H * N > INT32_MAX ? INT32_MAX : H * N);
    /* splits pay only when the grid is small; size partials for max_num_seqs rows */
    L->split_tokens = fa__min(L->max_tokens, L->max_seqs);
    /* int region, in this order (local last so plain steps upload less) */
    L->qsl = fa__take(&ints, "query_start_loc", S + 1, 1);
    L->seq = fa__take(&ints, "seq_lens", S, 1);
    L->plan = fa__take(&ints, "split_plan", S + 1, 1);
    L->cu_prefix = fa__take(&ints, "cu_prefix_query_lens", 2, 1);
    L->prefix_kv = fa__take(&ints, "prefix_kv_lens", 2, 1);
    L->prefix_plan = fa__take(&ints, "prefix_split_plan", 2, 1);
    L->suffix = fa__take(&ints, "suffix_kv_lens", S, 1);
    L->suffix_plan = fa__take(&ints, "suffix_split_plan", S + 1, 1);
    L->dcp = fa__take(&ints, "dcp_context_kv_lens", S, 1);
    L->local_cu = fa__take(&ints, "local cu_seqlens_q", (int64_t)L->max_virtual + 1, 1);
    L->local_k = fa__take(&ints, "local seqused_k", L->max_virtual, 1);
    L->local_plan = fa__take(&ints, "local split_plan", (int64_t)L->max_virtual + 1, 1);
    L->local_bt = fa__take(&ints, "local block_table", (int64_t)L->max_virtual * L->pages, 1);
    L->n_ints = ints.used;
    if (ints.overflow != NULL)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: the metadata region %s overflows size_t", fn, ints.overflow);
    /* device workspace */
    L->ws_ints = fa__take(&ws, "metadata ints", (int64_t)L->n_ints, sizeof(int32_t));
    if (L->max_splits > 1) {
        x = (int64_t)L->max_splits * L->split_tokens; /* < 2^62 */
        if (!fa__mul64(x, L->heads_all, &x)) ws.overflow = "split_lse";
        L->ws_split_lse = fa__take(&ws, "split_lse", x, f32);
        if (!fa__mul64(x, D, &x)) ws.overflow = "split_out";
        L->ws_split_out = fa__take(&ws, "split_out", x, f32);
    }
    x = T * H; /* < 2^62 */
    if (N == 1) { /* cascade partials */
        L->ws_prefix_lse = fa__take(&ws, "prefix_lse", x, f32);
        L->ws_suffix_lse = fa__take(&ws, "suffix_lse", x, f32);
        if (!fa__mul64(x, D, &x)) ws.overflow = "prefix_out";
        L->ws_prefix_out = fa__take(&ws, "prefix_out", x, act);
        L->ws_suffix_out = fa__take(&ws, "suffix_out", x, act);
    } else {       /* DCP buffers */
        int64_t nx = 0, nnx = 0, nxd = 0, xd = 0, glob = 0;
        if (!fa__mul64(x, N, &nx) || !fa__mul64(nx, N, &nnx) || !fa__mul64(nx, D, &nxd) ||
            !fa__mul64(x, D, &xd) || !fa__add64(nx, x, &glob))
            ws.overflow = "dcp buffers";
        L->ws_dcp_ctx_lse = fa__take(&ws, "dcp ctx_lse [N*H, T]", nx, f32);
        L->ws_dcp_lse_all = fa__take(&ws, "dcp lse_all [N, N*H, T]", nnx, f32);
        L->ws_dcp_lse_glob = fa__take(&ws, "dcp lse_glob + qpart_lse", glob, f32);
        L->ws_dcp_q_all = fa__take(&ws, "dcp q_all [N, T, H, D]", nxd, act);
        L->ws_dcp_ctx_out = fa__take(&ws, "dcp ctx_out [N*H, T, D]", nxd, act);
        L->ws_dcp_rs_out = fa__take(&ws, "dcp rs_out [H, T, D]", xd, act);
        L->ws_dcp_qpart_out = fa__take(&ws, "dcp qpart_out [T, H, D]", xd, act);
    }
    /* the work counters last: 256-byte aligned like every region, but their 16 bytes are not
       rounded up (nothing follows), so they grow the workspace by 16 bytes */
    ws.align = 16;
    L->ws_work_counters = fa__take(&ws, "work_counters", FA_WORK_COUNTERS, sizeof(int32_t));
    if (ws.overflow != NULL)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: the workspace region %s overflows size_t (max_num_batched_tokens %d, "
                        "max_num_seqs %d, max_num_splits %d)",
                        fn, ws.overflow, L->max_tokens, L->max_seqs, L->max_splits);
    L->ws_bytes = ws.used;
    return FA_OK;
}

FA__DEF fa_status fa_builder_workspace_size(const fa_config *cfg, size_t *bytes_out)
{
    fa_config c;
    fa__layout L;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR("fa_builder_workspace_size", cfg);
    FA__CHECK_PTR("fa_builder_workspace_size", bytes_out);
    s = fa_config_resolve(cfg, &c);
    if (s != FA_OK) return s;
    s = fa__compute_layout("fa_builder_workspace_size", &c, &L);
    if (s != FA_OK) return s;
    *bytes_out = L.ws_bytes;
    return FA_OK;
}

static fa_status fa__check_backend(const char *fn, const fa_backend *be)
{
    if (be == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: backend is NULL", fn);
    if (be->api_version != FA_BACKEND_API_VERSION)
        return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' has api_version %u, this header needs %u", fn,
                        be->name ? be->name : "?", (unsigned)be->api_version,
                        (unsigned)FA_BACKEND_API_VERSION);
    if (be->caps.num_dims < 1 || be->caps.num_dims > FA_MAX_KERNEL_DIMS)
        return fa__fail(FA_ERR_UNSUPPORTED,
                        "%s: backend '%s' has caps.num_dims %d (its capability block is not filled)", fn,
                        be->name ? be->name : "?", be->caps.num_dims);
    return FA_OK;
}

#define FA__NEED_OP(fn, be, op) \
    do { \
        if ((be)->ops.op == NULL) \
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' does not implement op '%s'", fn, \
                            (be)->name ? (be)->name : "?", #op); \
    } while (0)

/* Wraps a backend op's failure with the backend's own detail message. */
static fa_status fa__backend_fail(const fa_backend *be, const char *op, fa_status s)
{
    const char *detail = be->ops.last_error ? be->ops.last_error(be->ctx) : NULL;
    return fa__fail(s, "backend '%s' op '%s' failed (%s): %s", be->name ? be->name : "?", op,
                    fa_status_string(s), detail ? detail : "");
}

#define FA__CALL(be, op, ...) \
    do { \
        fa_status fa__s = (be)->ops.op((be)->ctx, __VA_ARGS__); \
        if (fa__s != FA_OK) return fa__backend_fail((be), #op, fa__s); \
    } while (0)

static fa_status fa__check_comm(const char *fn, const fa_config *c, const fa_comm *comm)
{
    if (c->parallel.dcp_world_size <= 1) return FA_OK;
    if (comm == NULL)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: comm is NULL but parallel.dcp_world_size is %d", fn,
                        c->parallel.dcp_world_size);
    if (comm->api_version != FA_BACKEND_API_VERSION)
        return fa__fail(FA_ERR_UNSUPPORTED, "%s: comm api_version %u, this header needs %u", fn,
                        (unsigned)comm->api_version, (unsigned)FA_BACKEND_API_VERSION);
    if (comm->world_size != c->parallel.dcp_world_size || comm->rank != c->parallel.dcp_rank)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: comm world_size %d / rank %d differ from the config's %d / %d", fn,
                        comm->world_size, comm->rank, c->parallel.dcp_world_size, c->parallel.dcp_rank);
    if (comm->all_gather == NULL || comm->reduce_scatter == NULL)
        return fa__fail(FA_ERR_UNSUPPORTED, "%s: comm lacks all_gather or reduce_scatter", fn);
    return FA_OK;
}

/* Points the builder's regions into its workspace. */
static void fa__place(fa_builder *b, const fa__layout *L)
{
    char *base = (char *)b->dev_ws;
    b->n_ints = L->n_ints;
    b->off_qsl = L->qsl;
    b->off_seq = L->seq;
    b->off_plan = L->plan;
    b->off_cu_prefix = L->cu_prefix;
    b->off_prefix_kv = L->prefix_kv;
    b->off_prefix_plan = L->prefix_plan;
    b->off_suffix = L->suffix;
    b->off_suffix_plan = L->suffix_plan;
    b->off_dcp = L->dcp;
    b->off_local_cu = L->local_cu;
    b->off_local_k = L->local_k;
    b->off_local_plan = L->local_plan;
    b->off_local_bt = L->local_bt;
    b->dev_ints = (int32_t *)(base + L->ws_ints);
    if (L->max_splits > 1) {
        b->split_out = (float *)(base + L->ws_split_out);
        b->split_lse = (float *)(base + L->ws_split_lse);
    }
    b->work_counters = (int32_t *)(base + L->ws_work_counters);
    if (b->cfg.parallel.dcp_world_size == 1) {
        b->prefix_out = base + L->ws_prefix_out;
        b->suffix_out = base + L->ws_suffix_out;
        b->prefix_lse = (float *)(base + L->ws_prefix_lse);
        b->suffix_lse = (float *)(base + L->ws_suffix_lse);
    } else {
        b->dcp_q_all = base + L->ws_dcp_q_all;
        b->dcp_ctx_out = base + L->ws_dcp_ctx_out;
        b->dcp_rs_out = base + L->ws_dcp_rs_out;
        b->dcp_qpart_out = base + L->ws_dcp_qpart_out;
        b->dcp_ctx_lse = (float *)(base + L->ws_dcp_ctx_lse);
        b->dcp_lse_all = (float *)(base + L->ws_dcp_lse_all);
        b->dcp_lse_glob = (float *)(base + L->ws_dcp_lse_glob);
        b->dcp_qpart_lse = b->dcp_lse_glob +
                           (int64_t)b->cfg.parallel.dcp_world_size * b->cfg.model.num_heads_q * L->max_tokens;
    }
}

static fa_status fa__register(const char *fn, fa_builder *b)
{
    int32_t i;
    b->id = fa__atomic_next(&fa__next_id);
    for (i = 0; i < FA__MAX_BUILDERS; ++i)
        if (fa__atomic_claim(&fa__live_ids[i], b->id)) {
            b->slot = i;
            return FA_OK;
        }
    b->slot = -1;
    return fa__fail(FA_ERR_OUT_OF_MEMORY, "%s: %d builders are alive (the most at once)", fn,
                    FA__MAX_BUILDERS);
}

FA__DEF fa_status fa_builder_create(const fa_backend *be, const fa_config *cfg, const fa_comm *comm,
                                    fa_builder **out)
{
    const char *fn = "fa_builder_create";
    fa_builder *b;
    fa__layout L;
    fa_config c;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, out);
    FA__CHECK_PTR(fn, cfg);
    s = fa__check_backend(fn, be);
    if (s != FA_OK) return s;
    FA__NEED_OP(fn, be, alloc);
    FA__NEED_OP(fn, be, free);
    FA__NEED_OP(fn, be, copy);
    s = fa_config_resolve(cfg, &c);
    if (s != FA_OK) return s;
    if (c.debug.validate) FA__NEED_OP(fn, be, synchronize);
    s = fa__check_comm(fn, &c, comm);
    if (s != FA_OK) return s;
    {
        const char *why = fa_check_combination(be, c.model.head_size, c.model.dtype, c.cache.cache_dtype,
                                               c.cache.block_size, 0, c.model.hybrid_mamba_f32);
        if (why != NULL)
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' (compute capability %d.%d): %s", fn,
                            be->name ? be->name : "?", be->info.cc_major, be->info.cc_minor, why);
    }
    s = fa__compute_layout(fn, &c, &L);
    if (s != FA_OK) return s;
    b = (fa_builder *)calloc(1, sizeof *b);
    if (b == NULL) return fa__fail(FA_ERR_OUT_OF_MEMORY, "%s: no memory for the builder", fn);
    b->be = be;
    b->comm = c.parallel.dcp_world_size > 1 ? comm : NULL;
    b->cfg = c;
    b->slot = -1;
    b->max_seqs = L.max_seqs;
    b->max_tokens = L.max_tokens;
    b->max_virtual = L.max_virtual;
    b->pages_per_virtual = L.pages;
    b->max_splits = L.max_splits;
    b->split_elastic = cfg->compilation.max_num_splits == 0 && L.max_splits > 1;
    b->split_floats =
        L.max_splits > 1 ? (int64_t)L.max_splits * L.split_tokens * L.heads_all * c.model.head_size : 0;
    b->heads_all = L.heads_all;
    b->aot_window.left = -1;
    b->aot_window.right = -1;
    b->aot_enabled = 1;
    b->host_ints = (int32_t *)calloc(L.n_ints, sizeof(int32_t));
    b->host_local_q = (int32_t *)calloc((size_t)L.max_virtual + 1, sizeof(int32_t));
    b->host_check = c.debug.validate ? (int32_t *)calloc(FA__CHECK_CHUNK, sizeof(int32_t)) : NULL;
    if (b->host_ints == NULL || b->host_local_q == NULL || (c.debug.validate && b->host_check == NULL)) {
        fa_builder_destroy(b);
        return fa__fail(FA_ERR_OUT_OF_MEMORY, "%s: no memory for %zu metadata ints", fn, L.n_ints);
    }
    s = be->ops.alloc(be->ctx, L.ws_bytes, &b->dev_ws);
    if (s != FA_OK) {
        b->dev_ws = NULL;
        s = fa__backend_fail(be, "alloc", s);
        fa_builder_destroy(b);
        return s;
    }
    b->ws_bytes = L.ws_bytes;
    fa__place(b, &L);
    /* zero the metadata region once so unused plan tails read as "no work" from the start */
    s = be->ops.copy(be->ctx, b->dev_ints, b->host_ints, sizeof(int32_t) * L.n_ints, FA_COPY_HOST_TO_DEVICE);
    if (s != FA_OK) {
        s = fa__backend_fail(be, "copy", s);
        fa_builder_destroy(b);
        return s;
    }
    /* the work counters start at zero and every attention call leaves them so (fa_attn_args);
       a backend without fill gets none (its calls get NULL) */
    if (be->ops.fill == NULL) {
        b->work_counters = NULL;
    } else {
        s = be->ops.fill(be->ctx, b->work_counters, FA__WORK_COUNTER_BYTES, 0, FA__WORK_COUNTER_BYTES, 1);
        if (s != FA_OK) {
            s = fa__backend_fail(be, "fill", s);
            fa_builder_destroy(b);
            return s;
        }
    }
    s = fa__register(fn, b);
    if (s != FA_OK) {
        fa_builder_destroy(b);
        return s;
    }
    *out = b;
    return FA_OK;
}

FA__DEF void fa_builder_destroy(fa_builder *b)
{
    if (b == NULL) return;
    if (b->slot >= 0) fa__atomic_store(&fa__live_ids[b->slot], 0);
    if (b->dev_ws != NULL) b->be->ops.free(b->be->ctx, b->dev_ws);
    free(b->host_ints);
    free(b->host_local_q);
    free(b->host_check);
    free(b);
}

FA__DEF const fa_config *fa_builder_config(const fa_builder *b) { return b ? &b->cfg : NULL; }

/* 1 when cascade attention is exact for the layer: a causal decoder without window or ALiBi
   (the prefix call attends every query to every prefix key). */
static int fa__cascade_exact(const fa_layer *L)
{
    return L->desc.attn_type == FA_ATTN_DECODER && L->window.left < 0 && L->window.right < 0 &&
           L->desc.alibi_slopes == NULL && L->desc.attention_chunk_size == 0;
}

FA__DEF fa_status fa_builder_set_layers(fa_builder *b, const struct fa_layer *layers, int32_t n)
{
    const char *fn = "fa_builder_set_layers";
    fa_window w = {-1, -1};
    int en = 1;
    int32_t i, exact = 0;
    fa__clear();
    FA__CHECK_PTR(fn, b);
    if (n < 1) return fa__fail(FA_ERR_INVALID_ARG, "%s: n %d must be >= 1", fn, n);
    FA__CHECK_PTR(fn, layers);
    for (i = 0; i < n; ++i) {
        const fa_layer_desc *d = &layers[i].desc;
        if (d->num_heads_q != b->cfg.model.num_heads_q || d->num_heads_kv != b->cfg.model.num_heads_kv ||
            d->head_size != b->cfg.model.head_size)
            return fa__fail(FA_ERR_INVALID_ARG,
                            "%s: layers[%d] heads %d/%d head_size %d differ from the builder's %d/%d %d", fn,
                            i, d->num_heads_q, d->num_heads_kv, d->head_size, b->cfg.model.num_heads_q,
                            b->cfg.model.num_heads_kv, b->cfg.model.head_size);
        if (i > 0 && (layers[i].window.left != w.left || layers[i].window.right != w.right)) en = 0;
        w = layers[i].window;
        exact += fa__cascade_exact(&layers[i]);
    }
    b->aot_enabled = en;
    b->aot_window = en ? layers[0].window : fa_sliding_window_config(0, FA_ATTN_DECODER);
    b->num_layers = n;
    b->cascade_layers = exact;
    return FA_OK;
}

static int32_t fa__batch_max_blocks(const fa_batch *batch)
{
    if (batch->max_blocks != 0) return batch->max_blocks;
    return batch->block_table_stride > INT32_MAX ? INT32_MAX : (int32_t)batch->block_table_stride;
}

static fa_status fa__check_batch(const char *fn, const fa_builder *b, const fa_batch *batch,
                                 int32_t *num_tokens_out)
{
    int32_t n = batch->num_reqs, t, i, max_blocks;
    fa_status s;
    if (n < 1 || n > b->max_seqs)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: batch.num_reqs %d is outside [1, max_num_seqs %d]", fn, n,
                        b->max_seqs);
    if ((int)batch->causal < 0 || batch->causal > FA_CAUSAL_OFF)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: batch.causal %d is not AUTO (0), ON (1) or OFF (2)", fn,
                        (int)batch->causal);
    FA__CHECK_PTR(fn, batch->query_start_loc);
    FA__CHECK_PTR(fn, batch->seq_lens);
    /* more queries than keys is for non-causal layers; fa_forward checks the layer */
    s = fa__check_qsl(fn, batch->query_start_loc, NULL, n);
    if (s != FA_OK) return s;
    for (i = 0; i < n; ++i)
        if (batch->seq_lens[i] < 0)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: seq_lens[%d] = %d is negative", fn, i,
                            batch->seq_lens[i]);
    if (batch->causal == FA_CAUSAL_ON) {
        s = fa__check_qsl(fn, batch->query_start_loc, batch->seq_lens, n);
        if (s != FA_OK) return s;
    }
    t = batch->query_start_loc[n];
    if (batch->num_actual_tokens != 0 && batch->num_actual_tokens != t)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: batch.num_actual_tokens %d differs from query_start_loc[%d] = %d", fn,
                        batch->num_actual_tokens, n, t);
    if (t < 1 || t > b->max_tokens)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: %d tokens is outside [1, max_num_batched_tokens %d]", fn, t,
                        b->max_tokens);
    max_blocks = fa__batch_max_blocks(batch);
    if (batch->block_table != NULL) {
        int64_t cap;
        if (batch->block_table_stride <= 0 || max_blocks <= 0 || max_blocks > batch->block_table_stride)
            return fa__fail(FA_ERR_INVALID_ARG,
                            "%s: batch.block_table_stride %lld / max_blocks %d are inconsistent", fn,
                            (long long)batch->block_table_stride, batch->max_blocks);
        /* tokens the table holds; past int64 it holds any int32 length */
        if (!fa__mul64((int64_t)max_blocks * b->cfg.cache.block_size, b->cfg.parallel.dcp_world_size, &cap))
            cap = INT64_MAX;
        for (i = 0; i < n; ++i)
            if (batch->seq_lens[i] > cap)
                return fa__fail(FA_ERR_INVALID_ARG,
                                "%s: seq_lens[%d] = %d exceeds the block table's %lld tokens", fn, i,
                                batch->seq_lens[i], (long long)cap);
    }
    *num_tokens_out = t;
    return FA_OK;
}

/* Fills plan (length 1 + plan_cap) for one attention call; returns the static split count. */
static fa_status fa__plan_call(const fa_builder *b, int32_t nreq, const int32_t *cu_q, const int32_t *lens,
                               int32_t heads_q, int32_t causal, int32_t rows, int32_t *plan, int32_t plan_cap,
                               int32_t *num_splits_out)
{
    const fa_config *c = &b->cfg;
    fa_split_params p;
    int32_t cap = b->split_elastic ? fa__max(1, b->be->caps.max_splits) : b->max_splits;
    int graph = c->compilation.full_cuda_graph && rows <= c->compilation.max_cudagraph_capture_size;
    fa_status s;
    if (graph) cap = fa__min(cap, c->compilation.max_num_splits_for_cuda_graph);
    if (cap > 1) { /* partials must fit the workspace */
        int64_t per_split = (int64_t)rows * heads_q * c->model.head_size;
        int64_t fit = per_split > 0 ? b->split_floats / per_split : cap;
        cap = (int32_t)(fit < cap ? fit : cap);
        if (cap < 1) cap = 1;
    }
    memset(&p, 0, sizeof p);
    p.num_reqs = nreq;
    p.cu_seqlens_q = cu_q;
    p.seqused_k = lens;
    p.num_heads_q = heads_q;
    p.num_heads_kv = c->model.num_heads_kv;
    p.head_size = c->model.head_size;
    p.causal = causal;
    p.window = b->aot_enabled ? b->aot_window : fa_sliding_window_config(0, FA_ATTN_DECODER);
    p.num_sms = b->be->info.num_sms > 0 ? b->be->info.num_sms : 1;
    p.max_num_splits = cap;
    p.batch_invariant = c->compilation.batch_invariant;
    p.kv_bytes = (int32_t)fa_dtype_size(fa_cache_storage_dtype(c->cache.cache_dtype, c->model.dtype));
    p.caps = &b->be->caps;
    s = fa_plan_splits(&p, plan, 1 + plan_cap);
    if (s != FA_OK) return fa__refail(s, "fa_builder_build", "fa_plan_splits: ");
    /* In a captured graph the grid must not change between replays: launch the cap. */
    if (graph && cap > 1) plan[0] = cap; /* also when this batch needs no split: a later one may */
    *num_splits_out = plan[0];
    return FA_OK;
}

FA__DEF fa_status fa_builder_cascade_prefix_len(fa_builder *b, const fa_batch *batch,
                                                int32_t num_common_prefix_blocks, int32_t *prefix_len_out)
{
    const char *fn = "fa_builder_cascade_prefix_len";
    int32_t i, n, t, *ql, *computed;
    fa_cascade_query q;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, b);
    FA__CHECK_PTR(fn, batch);
    FA__CHECK_PTR(fn, prefix_len_out);
    if (num_common_prefix_blocks < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: num_common_prefix_blocks %d must be >= 0", fn,
                        num_common_prefix_blocks);
    s = fa__check_batch(fn, b, batch, &t);
    if (s != FA_OK) return s;
    n = batch->num_reqs;
    *prefix_len_out = 0;
    /* no layer it is exact for, or a batch that is not causal: cascade cannot pay */
    if ((b->num_layers > 0 && b->cascade_layers == 0) || batch->causal == FA_CAUSAL_OFF) return FA_OK;
    /* scratch: the suffix and dcp rows of the host int region, rewritten by build() anyway */
    ql = b->host_ints + b->off_suffix;
    computed = b->host_ints + b->off_dcp;
    for (i = 0; i < n; ++i) {
        ql[i] = batch->query_start_loc[i + 1] - batch->query_start_loc[i];
        computed[i] = batch->seq_lens[i] - ql[i];
        if (computed[i] < 0) return FA_OK; /* more queries than keys: not a causal batch */
    }
    memset(&q, 0, sizeof q);
    q.num_common_prefix_blocks = num_common_prefix_blocks;
    q.block_size = b->cfg.cache.block_size;
    q.num_computed_tokens = computed;
    q.query_lens = ql;
    q.num_reqs = n;
    q.num_heads_q = b->cfg.model.num_heads_q;
    q.num_heads_kv = b->cfg.model.num_heads_kv;
    q.num_sms = b->be->info.num_sms;
    q.dcp_world_size = b->cfg.parallel.dcp_world_size;
    q.use_local_attention = b->cfg.scheduler.attention_chunk_size > 0;
    s = fa_cascade_prefix_len(&q, prefix_len_out);
    if (s != FA_OK) return fa__refail(s, fn, "fa_cascade_prefix_len: ");
    return FA_OK;
}

/* Checks of a cascade request against the batch. */
static fa_status fa__check_cascade(const char *fn, const fa_builder *b, const fa_batch *batch, int32_t P)
{
    int32_t i;
    if (P < 0 || P % b->cfg.cache.block_size != 0)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: common_prefix_len %d is not a non-negative multiple of block_size %d", fn, P,
                        b->cfg.cache.block_size);
    if (b->cfg.parallel.dcp_world_size > 1)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: common_prefix_len %d with dcp_world_size %d (cascade is off under DCP)", fn, P,
                        b->cfg.parallel.dcp_world_size);
    if (batch->causal == FA_CAUSAL_OFF)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: common_prefix_len %d with batch.causal OFF (cascade attends causally)", fn, P);
    if (batch->block_table == NULL)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: common_prefix_len %d needs batch.block_table", fn, P);
    for (i = 0; i < batch->num_reqs; ++i) {
        int32_t ctx = batch->seq_lens[i] - (batch->query_start_loc[i + 1] - batch->query_start_loc[i]);
        if (P > ctx)
            return fa__fail(FA_ERR_INVALID_ARG,
                            "%s: common_prefix_len %d exceeds request %d's context of %d tokens", fn, P, i,
                            ctx);
    }
    return FA_OK;
}

/* The cascade part of a build: prefix call (one row of the block table) and suffix plan. */
static fa_status fa__build_cascade(fa_builder *b, const fa_batch *batch, int32_t P, int32_t t,
                                   fa_metadata *md)
{
    int32_t *h = b->host_ints, *d = b->dev_ints, *suf = h + b->off_suffix, i, splits = 1;
    fa_status s;
    h[b->off_cu_prefix] = 0;
    h[b->off_cu_prefix + 1] = t;
    h[b->off_prefix_kv] = P;
    for (i = 0; i < batch->num_reqs; ++i) suf[i] = batch->seq_lens[i] - P;
    md->use_cascade = 1;
    md->common_prefix_len = P;
    md->cu_prefix_query_lens = d + b->off_cu_prefix;
    md->prefix_kv_lens = d + b->off_prefix_kv;
    md->suffix_kv_lens = d + b->off_suffix;
    md->prefix_split_plan = d + b->off_prefix_plan;
    md->suffix_split_plan = d + b->off_suffix_plan;
    s = fa__plan_call(b, 1, h + b->off_cu_prefix, h + b->off_prefix_kv, b->cfg.model.num_heads_q, 0, t,
                      h + b->off_prefix_plan, 1, &splits);
    if (s != FA_OK) return s;
    md->prefix_num_splits = splits;
    s = fa__plan_call(b, batch->num_reqs, batch->query_start_loc, suf, b->cfg.model.num_heads_q, 1, t,
                      h + b->off_suffix_plan, b->max_seqs, &splits);
    md->suffix_num_splits = splits;
    return s;
}

/* The chunked-local part of a build: the virtual batches and their plan. Returns the ints to
   upload. */
static fa_status fa__build_local(fa_builder *b, const fa_batch *batch, int32_t t, fa_metadata *md,
                                 size_t *upload)
{
    int32_t *h = b->host_ints, *d = b->dev_ints, lsplits = 1;
    fa_local_batches lb;
    fa_status s;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = b->host_local_q;
    lb.cu_seqlens_q = h + b->off_local_cu;
    lb.seqused_k = h + b->off_local_k;
    lb.block_table = h + b->off_local_bt;
    s = fa_make_local_virtual_batches(b->cfg.scheduler.attention_chunk_size, b->cfg.cache.block_size,
                                      batch->query_start_loc, batch->seq_lens, batch->num_reqs,
                                      batch->block_table_host, batch->block_table_stride,
                                      fa__batch_max_blocks(batch), b->max_virtual, &lb);
    if (s != FA_OK) return fa__refail(s, "fa_builder_build", "fa_make_local_virtual_batches: ");
    s = fa__plan_call(b, lb.num_virtual, lb.cu_seqlens_q, lb.seqused_k, b->cfg.model.num_heads_q, 1, t,
                      h + b->off_local_plan, b->max_virtual, &lsplits);
    if (s != FA_OK) return s;
    md->has_local = 1;
    md->local.num_virtual = lb.num_virtual;
    md->local.max_query_len = lb.max_query_len;
    md->local.max_seq_len = lb.max_seq_len;
    md->local.cu_seqlens_q = d + b->off_local_cu;
    md->local.seqused_k = d + b->off_local_k;
    md->local.block_table = d + b->off_local_bt;
    md->local.block_table_stride = b->pages_per_virtual;
    md->local.split_plan = d + b->off_local_plan;
    md->local.num_splits = lsplits;
    *upload = b->off_local_bt + (size_t)lb.num_virtual * (size_t)b->pages_per_virtual;
    return FA_OK;
}

FA__DEF fa_status fa_builder_build(fa_builder *b, const fa_batch *batch, int32_t common_prefix_len,
                                   fa_metadata *md_out)
{
    const char *fn = "fa_builder_build";
    const fa_config *c;
    fa_metadata md;
    int32_t n, t, i, max_q = 0, min_q = 0, max_s = 0, N, splits = 1;
    int32_t *h, *d;
    size_t upload;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, b);
    FA__CHECK_PTR(fn, batch);
    FA__CHECK_PTR(fn, md_out);
    c = &b->cfg;
    N = c->parallel.dcp_world_size;
    s = fa__check_batch(fn, b, batch, &t);
    if (s != FA_OK) return s;
    if (common_prefix_len != 0) {
        s = fa__check_cascade(fn, b, batch, common_prefix_len);
        if (s != FA_OK) return s;
    }
    if (c->scheduler.attention_chunk_size > 0 && batch->block_table_host == NULL)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: batch.block_table_host is NULL but chunked local attention is on", fn);

    memset(&md, 0, sizeof md);
    n = batch->num_reqs;
    for (i = 0; i < n; ++i) {
        const int32_t ql = batch->query_start_loc[i + 1] - batch->query_start_loc[i];
        max_q = fa__max(max_q, ql);
        if (ql > 0 && (min_q == 0 || ql < min_q)) min_q = ql; /* shortest non-empty query */
        max_s = fa__max(max_s, batch->seq_lens[i]);
        if (ql > batch->seq_lens[i]) md.query_exceeds_keys = 1;
    }
    h = b->host_ints;
    d = b->dev_ints;
    memcpy(h + b->off_qsl, batch->query_start_loc, sizeof(int32_t) * (size_t)(n + 1));
    memcpy(h + b->off_seq, batch->seq_lens, sizeof(int32_t) * (size_t)n);
    md.builder = b;
    md.builder_id = b->id;
    md.registry = (const void *)fa__live_ids;
    md.builder_slot = b->slot;
    md.num_actual_tokens = t;
    md.num_reqs = n;
    md.max_query_len = max_q;
    md.min_query_len = min_q;
    md.max_seq_len = max_s;
    md.causal = batch->causal;
    md.query_start_loc = d + b->off_qsl;
    md.seq_lens = d + b->off_seq;
    md.block_table = batch->block_table;
    md.block_table_stride = batch->block_table_stride;
    md.slot_mapping = batch->slot_mapping;
    md.dcp_world_size = N;
    md.dcp_rank = c->parallel.dcp_rank;
    md.split_plan = d + b->off_plan;
    if (N > 1) {
        int32_t *ctx = h + b->off_dcp;
        const int32_t I = c->parallel.cp_kv_cache_interleave_size;
        for (i = 0; i < n; ++i)
            ctx[i] = fa_dcp_local_seq_len(batch->seq_lens[i] -
                                              (batch->query_start_loc[i + 1] - batch->query_start_loc[i]),
                                          N, c->parallel.dcp_rank, I);
        md.dcp_context_kv_lens = d + b->off_dcp;
        md.max_dcp_context_kv_len = (int32_t)(fa__cdiv64(max_s, (int64_t)N * I) * I);
        s = fa__plan_call(b, n, batch->query_start_loc, ctx, b->heads_all, 0, t, h + b->off_plan, b->max_seqs,
                          &splits);
    } else {
        s = fa__plan_call(b, n, batch->query_start_loc, batch->seq_lens, c->model.num_heads_q,
                          batch->causal != FA_CAUSAL_OFF, t, h + b->off_plan, b->max_seqs, &splits);
        if (s == FA_OK && common_prefix_len > 0) s = fa__build_cascade(b, batch, common_prefix_len, t, &md);
    }
    if (s != FA_OK) return s;
    md.num_splits = splits;
    upload = b->off_local_cu;
    if (c->scheduler.attention_chunk_size > 0) {
        s = fa__build_local(b, batch, t, &md, &upload);
        if (s != FA_OK) return s;
    }
    FA__CALL(b->be, copy, d, h, sizeof(int32_t) * upload, FA_COPY_HOST_TO_DEVICE);
    md.generation = ++b->generation;
    *md_out = md;
    return FA_OK;
}

/* md is the latest build of a live builder of this implementation: *out is that builder. */
static fa_status fa__live_metadata(const char *fn, const fa_metadata *md, const fa_builder **out)
{
    const fa_builder *b;
    if (md->builder == NULL || md->builder_slot < 0 || md->builder_slot >= FA__MAX_BUILDERS ||
        md->builder_id == 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: md is not from fa_builder_build (builder %p, slot %d)", fn,
                        (const void *)md->builder, md->builder_slot);
    if (md->registry != (const void *)fa__live_ids)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: md was built by another copy of the implementation (a file that "
                        "defines FLASHATTN_IMPLEMENTATION with FLASHATTN_STATIC): use it through that file",
                        fn);
    if (fa__atomic_load(&fa__live_ids[md->builder_slot]) != md->builder_id)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: md's builder (id %llu) was destroyed", fn,
                        (unsigned long long)md->builder_id);
    b = md->builder;
    if (b->id != md->builder_id)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: md names builder id %llu but points to builder %llu", fn,
                        (unsigned long long)md->builder_id, (unsigned long long)b->id);
    if (md->generation != b->generation)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: md is from build %llu of its builder, which is at build %llu now "
                        "(metadata is valid until the next build)",
                        fn, (unsigned long long)md->generation, (unsigned long long)b->generation);
    *out = b;
    return FA_OK;
}

/* Appends to a bounded buffer, counting what would not fit. */
typedef struct fa__text {
    char *buf;
    size_t size, len;
} fa__text;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fa__put(fa__text *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(t->len < t->size ? t->buf + t->len : NULL, t->len < t->size ? t->size - t->len : 0, fmt,
                  ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

static void fa__put_plan(fa__text *t, const char *what, const int32_t *plan, int32_t n)
{
    int32_t i;
    fa__put(t, "; %s: %d split%s static, per request [", what, plan[0], plan[0] == 1 ? "" : "s");
    for (i = 0; i < n && i < 64; ++i) fa__put(t, i ? " %d" : "%d", plan[1 + i]);
    fa__put(t, "%s]", n > 64 ? " ..." : "");
}

FA__DEF fa_status fa_metadata_describe(const fa_metadata *md, char *buf, size_t size, size_t *needed_out)
{
    const char *fn = "fa_metadata_describe";
    const fa_builder *b = NULL;
    const int32_t *h;
    fa__text t;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, md);
    if (buf == NULL && size > 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: buf is NULL but size is %zu", fn, size);
    s = fa__live_metadata(fn, md, &b);
    if (s != FA_OK) return s;
    h = b->host_ints; /* the host staging of this (the latest) build */
    t.buf = buf;
    t.size = size;
    t.len = 0;
    if (size > 0) buf[0] = '\0';
    fa__put(&t, "%d requests, %d tokens (query %d..%d, keys up to %d), causal %s", md->num_reqs,
            md->num_actual_tokens, md->min_query_len, md->max_query_len, md->max_seq_len,
            md->causal == FA_CAUSAL_AUTO ? "per layer"
            : md->causal == FA_CAUSAL_ON ? "on"
                                         : "off");
    if (md->dcp_world_size > 1) {
        fa__put(&t, "; DCP rank %d of %d, context keys up to %d", md->dcp_rank, md->dcp_world_size,
                md->max_dcp_context_kv_len);
        fa__put_plan(&t, "context call", h + b->off_plan, md->num_reqs);
    } else {
        fa__put_plan(&t, md->use_cascade ? "plain (layers cascade is not exact for)" : "plain",
                     h + b->off_plan, md->num_reqs);
    }
    if (md->use_cascade) {
        fa__put(&t, "; cascade: shared prefix %d tokens, prefix call %d split%s", md->common_prefix_len,
                md->prefix_num_splits, md->prefix_num_splits == 1 ? "" : "s");
        fa__put_plan(&t, "suffix", h + b->off_suffix_plan, md->num_reqs);
    }
    if (md->has_local) {
        fa__put(&t, "; chunked local: %d virtual batches", md->local.num_virtual);
        fa__put_plan(&t, "local", h + b->off_local_plan, md->local.num_virtual);
    }
    if (needed_out != NULL) *needed_out = t.len + 1;
    return FA_OK;
}

// >>layer impl
FA__DEF fa_status fa_layer_init(fa_layer *layer, const fa_layer_desc *desc)
{
    const char *fn = "fa_layer_init";
    fa_layer_desc d;
    fa__clear();
    FA__CHECK_PTR(fn, layer);
    FA__CHECK_PTR(fn, desc);
    d = *desc;
    if (d.num_heads_kv == 0) d.num_heads_kv = d.num_heads_q;
    if (d.dcp_world_size == 0) d.dcp_world_size = 1;
    if (d.scale == 0.f && fa_supports_head_size(d.head_size))
        d.scale = (float)(1.0 / sqrt((double)d.head_size));
    if (d.k_scale == 0.f) d.k_scale = 1.f;
    if (d.v_scale == 0.f) d.v_scale = 1.f;
    if (d.num_heads_q <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: num_heads_q %d must be > 0", fn, d.num_heads_q);
    if (d.num_heads_kv <= 0 || d.num_heads_q % d.num_heads_kv != 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: num_heads_q %d is not divisible by num_heads_kv %d", fn,
                        d.num_heads_q, d.num_heads_kv);
    if (!fa_supports_head_size(d.head_size))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: head_size %d is not a multiple of 8 in [8, 256]", fn,
                        d.head_size);
    if (!fa__is_activation(d.dtype))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: dtype %d is not f16, bf16 or f32", fn, (int)d.dtype);
    if ((int)d.attn_type < 0 || d.attn_type > FA_ATTN_ENCODER_DECODER)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: attn_type %d is unknown", fn, (int)d.attn_type);
    if (!(d.scale > 0.f) || !isfinite(d.scale))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: scale %g must be finite and > 0", fn, (double)d.scale);
    if (d.sliding_window == -1) d.sliding_window = 0; /* the engines' usual "none" */
    if (d.sliding_window < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: sliding_window %d must be >= 0 (or -1: none)", fn,
                        d.sliding_window);
    if (!(d.logits_soft_cap >= 0.f) || !isfinite(d.logits_soft_cap))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: logits_soft_cap %g must be finite and >= 0", fn,
                        (double)d.logits_soft_cap);
    if ((d.alibi_slopes != NULL) != (d.num_alibi_slopes != 0) ||
        (d.alibi_slopes != NULL && d.num_alibi_slopes != d.num_heads_q))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: alibi_slopes has length %d, expected num_heads_q %d", fn,
                        d.num_alibi_slopes, d.alibi_slopes ? d.num_heads_q : 0);
    if ((d.sinks != NULL) != (d.num_sinks != 0) || (d.sinks != NULL && d.num_sinks != d.num_heads_q))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: sinks has length %d, expected num_heads_q %d", fn,
                        d.num_sinks, d.sinks ? d.num_heads_q : 0);
    if (!fa_supports_kv_cache_dtype(d.kv_cache_dtype))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache_dtype %d is unknown", fn, (int)d.kv_cache_dtype);
    if (!(d.k_scale > 0.f) || !(d.v_scale > 0.f) || !isfinite(d.k_scale) || !isfinite(d.v_scale))
        return fa__fail(FA_ERR_INVALID_ARG, "%s: k_scale %g / v_scale %g must be finite and > 0", fn,
                        (double)d.k_scale, (double)d.v_scale);
    if (d.attention_chunk_size < 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: attention_chunk_size %d must be >= 0", fn,
                        d.attention_chunk_size);
    if (d.dcp_world_size < 1)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: dcp_world_size %d must be >= 1", fn, d.dcp_world_size);
    if (d.dcp_world_size > 1 &&
        (d.sliding_window > 0 || d.alibi_slopes != NULL || d.attention_chunk_size > 0))
        return fa__fail(FA_ERR_UNSUPPORTED,
                        "%s: dcp_world_size %d with sliding_window %d / alibi %s / attention_chunk_size %d "
                        "(positions are rank-local under DCP)",
                        fn, d.dcp_world_size, d.sliding_window, d.alibi_slopes ? "on" : "off",
                        d.attention_chunk_size);
    if (d.dcp_world_size > 1 && d.kv_sharing)
        return fa__fail(FA_ERR_UNSUPPORTED,
                        "%s: kv_sharing with dcp_world_size %d (DCP attends the new tokens' own k/v)", fn,
                        d.dcp_world_size);
    if ((d.attn_type == FA_ATTN_ENCODER || d.attn_type == FA_ATTN_ENCODER_ONLY) &&
        d.kv_cache_dtype != FA_CACHE_AUTO)
        return fa__fail(FA_ERR_UNSUPPORTED,
                        "%s: kv_cache_dtype %d with attn_type %d (encoder attention has no cache)", fn,
                        (int)d.kv_cache_dtype, (int)d.attn_type);
    if ((d.attn_type == FA_ATTN_ENCODER || d.attn_type == FA_ATTN_ENCODER_ONLY) && d.attention_chunk_size > 0)
        return fa__fail(FA_ERR_UNSUPPORTED, "%s: attention_chunk_size %d with encoder attn_type %d", fn,
                        d.attention_chunk_size, (int)d.attn_type);
    memset(layer, 0, sizeof *layer);
    layer->desc = d;
    layer->window = fa_sliding_window_config(d.sliding_window, d.attn_type);
    layer->scale = d.scale;
    layer->softcap = d.logits_soft_cap;
    layer->k_scale = d.k_scale;
    layer->v_scale = d.v_scale;
    return FA_OK;
}

FA__DEF fa_status fa_layer_init_from_config(fa_layer *layer, const fa_config *cfg, const fa_layer_desc *desc)
{
    const char *fn = "fa_layer_init_from_config";
    fa_layer_desc d;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, layer);
    FA__CHECK_PTR(fn, cfg);
    if (desc != NULL) {
        d = *desc;
    } else {
        memset(&d, 0, sizeof d);
    }
    if (d.dtype != FA_DTYPE_BF16 && d.dtype != cfg->model.dtype)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: desc.dtype %s (%d) differs from cfg.model.dtype %s (%d)", fn,
                        fa_dtype_name(d.dtype), (int)d.dtype, fa_dtype_name(cfg->model.dtype),
                        (int)cfg->model.dtype);
    d.dtype = cfg->model.dtype;
    if (d.num_heads_q == 0) d.num_heads_q = cfg->model.num_heads_q;
    if (d.num_heads_kv == 0) d.num_heads_kv = cfg->model.num_heads_kv;
    if (d.head_size == 0) d.head_size = cfg->model.head_size;
    if (d.kv_cache_dtype == FA_CACHE_AUTO) d.kv_cache_dtype = cfg->cache.cache_dtype;
    if (d.dcp_world_size == 0) d.dcp_world_size = cfg->parallel.dcp_world_size;
    if (d.attention_chunk_size == 0) d.attention_chunk_size = cfg->scheduler.attention_chunk_size;
    s = fa_layer_init(layer, &d);
    return s == FA_OK ? s : fa__refail(s, fn, "fa_layer_init: ");
}

// >>forward impl

/* fa_forward runs in three phases: describe the call as a program of steps (every argument
   struct filled), check every step (the header's rules, the capability block, the backend's
   own check op), then run the steps. So no check can fail after the first step wrote. */
typedef enum fa__step_kind {
    FA__STEP_OP = 0,                 /* a backend op (fa_op) */
    FA__STEP_COPY_2D = 1,            /* `count` strided 2-D device copies (packing q for DCP) */
    FA__STEP_ALL_GATHER = 2,         /* comm all_gather */
    FA__STEP_REDUCE_SCATTER = 3      /* comm reduce_scatter */
} fa__step_kind;

typedef struct fa__copy2d {
    char *dst;
    const char *src;
    size_t dpitch, spitch, width, rows;
    int64_t count, dst_step, src_step; /* bytes between the copies */
} fa__copy2d;

typedef struct fa__coll {
    const void *send;
    void *recv;
    size_t count;
    fa_dtype dtype;
} fa__coll;

typedef struct fa__step {
    fa__step_kind kind;
    fa_op op;
    union {
        fa_cache_write_args w;
        fa_attn_args a;
        fa_merge_args m;
        fa_dcp_correct_args c;
        fa__copy2d copy;
        fa__coll coll;
    } u;
} fa__step;

#define FA__MAX_STEPS 10
typedef struct fa__program {
    int32_t n;
    fa__step step[FA__MAX_STEPS];
} fa__program;

static fa__step *fa__push(fa__program *p, fa__step_kind kind, fa_op op)
{
    fa__step *s;
    FA_ASSERT(p->n < FA__MAX_STEPS);
    s = &p->step[p->n++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->op = op;
    return s;
}

static const char *fa__op_name(fa_op op)
{
    switch (op) {
    case FA_OP_RESHAPE_AND_CACHE: return "reshape_and_cache";
    case FA_OP_ATTENTION: return "attention";
    case FA_OP_MERGE_STATES: return "merge_states";
    case FA_OP_DCP_CORRECT: return "dcp_correct";
    }
    return "?";
}

/* 1 when rows x heads vectors of d contiguous elements at token stride s0 and head stride s1
   (both >= 0, s1 >= d already checked) never share an element: the larger stride must step over
   the whole extent of the smaller one. */
static int fa__rows_disjoint(int64_t rows, int64_t heads, int64_t d, int64_t s0, int64_t s1)
{
    int64_t span;
    if (rows <= 1) return 1;
    if (heads <= 1) return s0 >= d;
    if (s0 >= s1) return fa__mul64(heads, s1, &span) && s0 >= span;
    return s0 >= d && fa__mul64(rows, s0, &span) && s1 >= span;
}

static fa_status fa__check_rows(const char *name, const fa_tensor *x, int32_t rows, int32_t heads, int32_t d,
                                fa_dtype dt)
{
    const char *fn = "fa_forward";
    if (x->data == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: %s.data is NULL", fn, name);
    if (x->rank != 3)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: %s has rank %d, expected 3 [tokens, heads, head_size]", fn,
                        name, x->rank);
    if (x->dtype != dt)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: %s dtype %s (%d), expected %s", fn, name,
                        fa_dtype_name(x->dtype), (int)x->dtype, fa_dtype_name(dt));
    if (x->shape[0] < 0 || x->shape[0] < rows || x->shape[1] != heads || x->shape[2] != d)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: %s shape [%lld, %lld, %lld], expected [>= %d, %d, %d]", fn,
                        name, (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2], rows,
                        heads, d);
    if (x->stride[2] != 1 || x->stride[1] < d || x->stride[0] < 0)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: %s strides (%lld, %lld, %lld): head_size dim must be contiguous", fn, name,
                        (long long)x->stride[0], (long long)x->stride[1], (long long)x->stride[2]);
    if (!fa__rows_disjoint(rows, heads, d, x->stride[0], x->stride[1]))
        return fa__fail(
            FA_ERR_INVALID_ARG,
            "%s: %s token stride %lld makes tokens overlap (head stride %lld, %d heads, head_size %d)", fn,
            name, (long long)x->stride[0], (long long)x->stride[1], heads, d);
    return FA_OK;
}

static fa_status fa__zero_rows(const fa_backend *be, const fa_tensor *out)
{
    size_t es = fa_dtype_size(out->dtype);
    int64_t h;
    if (out->stride[1] == out->shape[2]) {
        FA__CALL(be, fill, out->data, (size_t)out->stride[0] * es, 0,
                 (size_t)(out->shape[1] * out->shape[2]) * es, (size_t)out->shape[0]);
    } else {
        for (h = 0; h < out->shape[1]; ++h)
            FA__CALL(be, fill, (char *)out->data + (size_t)(h * out->stride[1]) * es,
                     (size_t)out->stride[0] * es, 0, (size_t)out->shape[2] * es, (size_t)out->shape[0]);
    }
    return FA_OK;
}

FA__DEF fa_status fa_forward_profile(const fa_layer *layer, const fa_backend *be, const fa_tensor *out)
{
    const char *fn = "fa_forward_profile";
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, layer);
    FA__CHECK_PTR(fn, out);
    s = fa__check_backend(fn, be);
    if (s != FA_OK) return s;
    if (layer->desc.num_heads_q <= 0 || layer->desc.head_size <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: layer is not initialised (num_heads_q %d, head_size %d)", fn,
                        layer->desc.num_heads_q, layer->desc.head_size);
    /* every row of out is written: check all of them (a token stride of 0 on more than one row is
       an error here, not in the backend's fill) */
    s = fa__check_rows("out", out,
                       out->shape[0] < 0           ? 0
                       : out->shape[0] > INT32_MAX ? INT32_MAX
                                                   : (int32_t)out->shape[0],
                       layer->desc.num_heads_q, layer->desc.head_size, layer->desc.dtype);
    if (s != FA_OK) return fa__refail(s, fn, "fa_forward: ");
    FA__NEED_OP(fn, be, fill);
    return fa__zero_rows(be, out);
}

/* Fields every attention call of a layer shares, the builder's work counters among them (its
   calls are serialised on its stream, each leaves them zero: one set serves every call). */
static void fa__attn_base(fa_attn_args *a, const fa_builder *b, const fa_layer *L, const fa_tensor *q,
                          int32_t num_tokens)
{
    memset(a, 0, sizeof *a);
    a->q = q->data;
    a->q_token_stride = q->stride[0];
    a->q_head_stride = q->stride[1];
    a->q_dtype = q->dtype;
    a->num_tokens = num_tokens;
    a->num_heads_q = L->desc.num_heads_q;
    a->num_heads_kv = L->desc.num_heads_kv;
    a->head_size = L->desc.head_size;
    a->softmax_scale = L->scale;
    a->softcap = L->softcap;
    a->window_left = L->window.left;
    a->window_right = L->window.right;
    a->alibi_slopes = L->desc.alibi_slopes;
    a->k_scale = 1.f;
    a->v_scale = 1.f;
    a->num_splits = 1;
    a->work_counters = b->work_counters;
}

static void fa__attn_out(fa_attn_args *a, void *out, int64_t token_stride, int64_t head_stride, float *lse,
                         int64_t lse_head_stride)
{
    a->out = out;
    a->out_token_stride = token_stride;
    a->out_head_stride = head_stride;
    a->lse = lse;
    a->lse_head_stride = lse_head_stride;
}

static void fa__attn_paged(fa_attn_args *a, const fa_layer *L, const fa_tensor *kv_cache, fa_dtype kv_dtype)
{
    size_t es = fa_dtype_size(kv_dtype);
    a->k = kv_cache->data;
    a->v = (const char *)kv_cache->data + (size_t)kv_cache->stride[0] * es;
    a->k_block_stride = a->v_block_stride = kv_cache->stride[1];
    a->k_row_stride = a->v_row_stride = kv_cache->stride[2];
    a->k_head_stride = a->v_head_stride = kv_cache->stride[3];
    a->kv_dtype = kv_dtype;
    a->block_size = (int32_t)kv_cache->shape[2];
    a->num_blocks = kv_cache->shape[1];
    if (kv_dtype == FA_DTYPE_FP8_E4M3 || kv_dtype == FA_DTYPE_FP8_E5M2) {
        a->k_scale = L->k_scale;
        a->v_scale = L->v_scale;
    }
}

static void fa__attn_dense(fa_attn_args *a, const fa_tensor *k, const fa_tensor *v, const int32_t *cu_k)
{
    a->k = k->data;
    a->v = v->data;
    a->k_row_stride = k->stride[0];
    a->k_head_stride = k->stride[1];
    a->v_row_stride = v->stride[0];
    a->v_head_stride = v->stride[1];
    a->kv_dtype = k->dtype;
    a->cu_seqlens_k = cu_k;
    a->num_keys = k->shape[0];
}

/* The request rows of a paged call over the metadata's batch. */
static void fa__attn_rows(fa_attn_args *a, const fa_metadata *md, const int32_t *seqused_k,
                          int32_t max_seqlen_k)
{
    a->cu_seqlens_q = md->query_start_loc;
    a->seqused_k = seqused_k;
    a->block_table = md->block_table;
    a->block_table_stride = md->block_table_stride;
    a->num_seqs = md->num_reqs;
    a->max_seqlen_q = md->max_query_len;
    a->min_seqlen_q = md->min_query_len;
    a->max_seqlen_k = max_seqlen_k;
}

static void fa__attn_splits(fa_attn_args *a, const fa_builder *b, int32_t num_splits, const int32_t *plan)
{
    a->num_splits = num_splits;
    if (num_splits > 1) {
        a->split_plan = plan;
        a->split_out = b->split_out;
        a->split_lse = b->split_lse;
    }
}

/* out = merge(prefix, suffix): both partials [T, H, D] packed with LSE [H, T]. */
static void fa__push_merge(fa__program *p, const fa_tensor *out, const void *pre, const float *plse,
                           const void *suf, const float *slse, int64_t pre_token_stride,
                           int64_t pre_head_stride, int32_t T, int32_t H, int32_t D)
{
    fa_merge_args *m = &fa__push(p, FA__STEP_OP, FA_OP_MERGE_STATES)->u.m;
    m->out = out->data;
    m->out_token_stride = out->stride[0];
    m->out_head_stride = out->stride[1];
    m->prefix_out = pre;
    m->prefix_token_stride = pre_token_stride;
    m->prefix_head_stride = pre_head_stride;
    m->prefix_lse = plse;
    m->prefix_lse_head_stride = T;
    m->suffix_out = suf;
    m->suffix_token_stride = (int64_t)H * D;
    m->suffix_head_stride = D;
    m->suffix_lse = slse;
    m->suffix_lse_head_stride = T;
    m->dtype = out->dtype;
    m->num_tokens = T;
    m->num_heads = H;
    m->head_size = D;
}

/* Everything fa_forward is given, resolved once. */
typedef struct fa__call {
    const fa_layer *L;
    const fa_backend *be;
    const fa_builder *b;
    const fa_metadata *md;
    const fa_tensor *q, *k, *v, *kv_cache, *out;
    fa_dtype dt, cache_dt;
    int32_t T, Hq, Hkv, D;
    int32_t causal;                  /* resolved from the batch and the layer */
} fa__call;

/* >>encoder: dense bidirectional attention within each sequence, no cache */
static void fa__describe_encoder(const fa__call *c, fa__program *p)
{
    fa_attn_args *a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, c->q, c->T);
    fa__attn_dense(a, c->k, c->v, c->md->query_start_loc);
    fa__attn_out(a, c->out->data, c->out->stride[0], c->out->stride[1], NULL, 0);
    a->cu_seqlens_q = c->md->query_start_loc;
    a->num_seqs = c->md->num_reqs;
    a->max_seqlen_q = c->md->max_query_len;
    a->max_seqlen_k = c->md->max_query_len;
    a->causal = 0;
    a->sinks = c->L->desc.sinks;
}

/* >>cache write (skipped for a layer sharing another's cache, or with no new k/v) */
static void fa__describe_cache_write(const fa__call *c, fa__program *p)
{
    const fa_tensor *k = c->k, *v = c->v, *kv = c->kv_cache;
    fa_cache_write_args *w;
    if (c->L->desc.kv_sharing || k == NULL) return;
    w = &fa__push(p, FA__STEP_OP, FA_OP_RESHAPE_AND_CACHE)->u.w;
    w->key = k->data;
    w->value = v->data;
    w->key_token_stride = k->stride[0];
    w->value_token_stride = v->stride[0];
    w->kv_dtype = c->dt;
    w->key_cache = kv->data;
    w->value_cache = (char *)kv->data + (size_t)kv->stride[0] * fa_dtype_size(c->cache_dt);
    w->cache_block_stride = kv->stride[1];
    w->cache_row_stride = kv->stride[2];
    w->cache_head_stride = kv->stride[3];
    w->cache_dtype = c->cache_dt;
    w->slot_mapping = c->md->slot_mapping;
    w->num_blocks = kv->shape[1];
    w->num_tokens = c->T;
    w->num_heads_kv = c->Hkv;
    w->head_size = c->D;
    w->block_size = (int32_t)kv->shape[2];
    w->k_scale = c->L->k_scale;
    w->v_scale = c->L->v_scale;
}

/* >>local: chunked local attention over the virtual batches */
static void fa__describe_local(const fa__call *c, fa__program *p)
{
    const fa_metadata *md = c->md;
    fa_attn_args *a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, c->q, c->T);
    fa__attn_paged(a, c->L, c->kv_cache, c->cache_dt);
    a->sinks = c->L->desc.sinks;
    fa__attn_out(a, c->out->data, c->out->stride[0], c->out->stride[1], NULL, 0);
    a->cu_seqlens_q = md->local.cu_seqlens_q;
    a->seqused_k = md->local.seqused_k;
    a->block_table = md->local.block_table;
    a->block_table_stride = md->local.block_table_stride;
    a->num_seqs = md->local.num_virtual;
    a->max_seqlen_q = md->local.max_query_len;
    a->max_seqlen_k = md->local.max_seq_len;
    a->causal = 1;
    fa__attn_splits(a, c->b, md->local.num_splits, md->local.split_plan);
}

/* >>cascade: shared prefix once for all rows, then each request's own suffix, merged */
static void fa__describe_cascade(const fa__call *c, fa__program *p)
{
    const fa_metadata *md = c->md;
    const fa_builder *b = c->b;
    const int32_t P = md->common_prefix_len, T = c->T, HD = c->Hq * c->D;
    fa_attn_args *a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, c->q, T);
    fa__attn_paged(a, c->L, c->kv_cache, c->cache_dt);
    a->sinks = c->L->desc.sinks; /* the sink joins once: in the prefix call */
    fa__attn_out(a, b->prefix_out, HD, c->D, b->prefix_lse, T);
    a->cu_seqlens_q = md->cu_prefix_query_lens;
    a->seqused_k = md->prefix_kv_lens;
    a->block_table = md->block_table;
    a->block_table_stride = md->block_table_stride;
    a->num_seqs = 1;
    a->max_seqlen_q = T;
    a->max_seqlen_k = P;
    a->causal = 0;
    fa__attn_splits(a, b, md->prefix_num_splits, md->prefix_split_plan);
    a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, c->q, T);
    fa__attn_paged(a, c->L, c->kv_cache, c->cache_dt);
    fa__attn_out(a, b->suffix_out, HD, c->D, b->suffix_lse, T);
    fa__attn_rows(a, md, md->suffix_kv_lens, md->max_seq_len - P);
    a->block_table = md->block_table + P / b->cfg.cache.block_size;
    a->causal = 1;
    fa__attn_splits(a, b, md->suffix_num_splits, md->suffix_split_plan);
    fa__push_merge(p, c->out, b->prefix_out, b->prefix_lse, b->suffix_out, b->suffix_lse, HD, c->D, T, c->Hq,
                   c->D);
}

/* plain paged attention */
static void fa__describe_plain(const fa__call *c, fa__program *p)
{
    fa_attn_args *a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, c->q, c->T);
    fa__attn_paged(a, c->L, c->kv_cache, c->cache_dt);
    a->sinks = c->L->desc.sinks;
    fa__attn_out(a, c->out->data, c->out->stride[0], c->out->stride[1], NULL, 0);
    fa__attn_rows(a, c->md, c->md->seq_lens, c->md->max_seq_len);
    a->causal = c->causal;
    fa__attn_splits(a, c->b, c->md->num_splits, c->md->split_plan);
}

/* >>dcp: gather queries, attend this rank's cache shard, correct by the global LSE and
   reduce-scatter over heads, attend the new tokens (with the sink), merge. */
static void fa__describe_dcp(const fa__call *c, fa__program *p)
{
    const fa_builder *b = c->b;
    const fa_metadata *md = c->md;
    const fa_tensor *q = c->q;
    const int32_t T = c->T, H = c->Hq, D = c->D, N = md->dcp_world_size;
    const int64_t HT = (int64_t)H * T;
    const size_t es = fa_dtype_size(c->dt);
    const char *qpack = (const char *)q->data;
    fa__step *s;
    fa_attn_args *a;
    fa_dcp_correct_args *cr;
    /* 1. all-gather q: pack local q as [T, H, D] contiguous (one 2-D copy for a token-strided
       slice such as a fused QKV, one per head otherwise), gather to [N, T, H, D] */
    if (!(q->stride[0] == (int64_t)H * D && q->stride[1] == D)) {
        fa__copy2d *cp = &fa__push(p, FA__STEP_COPY_2D, FA_OP_ATTENTION)->u.copy;
        int packed_heads = q->stride[1] == D;
        cp->dst = (char *)b->dcp_qpart_out; /* staging, reused by step 4 after the gather */
        cp->dpitch = (size_t)H * D * es;
        cp->src = (const char *)q->data;
        cp->spitch = (size_t)q->stride[0] * es;
        cp->width = (size_t)(packed_heads ? H : 1) * D * es;
        cp->rows = (size_t)T;
        cp->count = packed_heads ? 1 : H;
        cp->dst_step = (int64_t)D * (int64_t)es;
        cp->src_step = q->stride[1] * (int64_t)es;
        qpack = cp->dst;
    }
    s = fa__push(p, FA__STEP_ALL_GATHER, FA_OP_ATTENTION);
    s->u.coll.send = qpack;
    s->u.coll.recv = b->dcp_q_all;
    s->u.coll.count = (size_t)HT * D;
    s->u.coll.dtype = c->dt;
    /* 2. context part over all N*H heads: non-causal, LSE, no sink */
    a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, q, T);
    a->q = b->dcp_q_all;
    a->q_token_stride = (int64_t)H * D;
    a->q_head_stride = D;
    a->q_head_group = H;
    a->q_group_stride = HT * D;
    a->num_heads_q = N * H;
    fa__attn_paged(a, c->L, c->kv_cache, c->cache_dt);
    fa__attn_out(a, b->dcp_ctx_out, D, (int64_t)T * D, b->dcp_ctx_lse, T);
    fa__attn_rows(a, md, md->dcp_context_kv_lens, md->max_dcp_context_kv_len);
    a->min_seqlen_q = 0;
    a->causal = 0;
    fa__attn_splits(a, b, md->num_splits, md->split_plan);
    /* 3. gather every rank's LSE [N*H, T] -> [N, N*H, T]; correct; reduce-scatter heads */
    s = fa__push(p, FA__STEP_ALL_GATHER, FA_OP_ATTENTION);
    s->u.coll.send = b->dcp_ctx_lse;
    s->u.coll.recv = b->dcp_lse_all;
    s->u.coll.count = (size_t)N * HT;
    s->u.coll.dtype = FA_DTYPE_F32;
    cr = &fa__push(p, FA__STEP_OP, FA_OP_DCP_CORRECT)->u.c;
    cr->out = b->dcp_ctx_out;
    cr->out_token_stride = D;
    cr->out_head_stride = (int64_t)T * D;
    cr->dtype = c->dt;
    cr->lse_all = b->dcp_lse_all;
    cr->lse_out = b->dcp_lse_glob;
    cr->world_size = N;
    cr->rank = md->dcp_rank;
    cr->num_tokens = T;
    cr->num_heads = N * H;
    cr->head_size = D;
    s = fa__push(p, FA__STEP_REDUCE_SCATTER, FA_OP_ATTENTION);
    s->u.coll.send = b->dcp_ctx_out;
    s->u.coll.recv = b->dcp_rs_out;
    s->u.coll.count = (size_t)HT * D;
    s->u.coll.dtype = c->dt;
    /* 4. the new tokens among themselves: dense, causal per the layer, LSE, the sink (once) */
    a = &fa__push(p, FA__STEP_OP, FA_OP_ATTENTION)->u.a;
    fa__attn_base(a, c->b, c->L, q, T);
    fa__attn_dense(a, c->k, c->v, md->query_start_loc);
    fa__attn_out(a, b->dcp_qpart_out, (int64_t)H * D, D, b->dcp_qpart_lse, T);
    a->cu_seqlens_q = md->query_start_loc;
    a->num_seqs = md->num_reqs;
    a->max_seqlen_q = md->max_query_len;
    a->max_seqlen_k = md->max_query_len;
    a->causal = c->causal;
    a->sinks = c->L->desc.sinks;
    /* 5. merge: context [H, T, D] with LSE rows r*H.. of the global L; query part [T, H, D] */
    fa__push_merge(p, c->out, b->dcp_rs_out, b->dcp_lse_glob + (int64_t)md->dcp_rank * HT, b->dcp_qpart_out,
                   b->dcp_qpart_lse, D, (int64_t)T * D, T, H, D);
}

/* The metadata is the latest build of a live builder made with this backend and shape. */
static fa_status fa__check_metadata(const char *fn, const fa__call *c)
{
    const fa_metadata *md = c->md;
    const fa_builder *b = NULL;
    const fa_status s = fa__live_metadata(fn, md, &b);
    if (s != FA_OK) return s;
    if (b->be != c->be)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: backend '%s' is not the one the builder was created with ('%s')", fn,
                        c->be->name ? c->be->name : "?", b->be->name ? b->be->name : "?");
    if (c->dt != b->cfg.model.dtype)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: layer dtype %s differs from the builder's %s", fn,
                        fa_dtype_name(c->dt), fa_dtype_name(b->cfg.model.dtype));
    if (c->Hq != b->cfg.model.num_heads_q || c->Hkv != b->cfg.model.num_heads_kv ||
        c->D != b->cfg.model.head_size)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: layer heads %d/%d head_size %d differ from the builder's %d/%d %d", fn, c->Hq,
                        c->Hkv, c->D, b->cfg.model.num_heads_q, b->cfg.model.num_heads_kv,
                        b->cfg.model.head_size);
    if (md->dcp_world_size != c->L->desc.dcp_world_size)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: layer dcp_world_size %d differs from the metadata's %d", fn,
                        c->L->desc.dcp_world_size, md->dcp_world_size);
    return FA_OK;
}

static fa_status fa__check_cache_tensor(const char *fn, const fa__call *c)
{
    const fa_tensor *kv = c->kv_cache;
    const int32_t bs = c->b->cfg.cache.block_size;
    int i;
    if (kv == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache is NULL", fn);
    if (kv->data == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache.data is NULL", fn);
    if (kv->rank != 5 || kv->shape[0] != 2 || kv->shape[2] != bs || kv->shape[3] != c->Hkv ||
        kv->shape[4] != c->D || kv->shape[1] <= 0)
        return fa__fail(
            FA_ERR_INVALID_ARG,
            "%s: kv_cache shape (rank %d) [%lld, %lld, %lld, %lld, %lld], expected [2, blocks, %d, %d, %d]",
            fn, kv->rank, (long long)kv->shape[0], (long long)kv->shape[1], (long long)kv->shape[2],
            (long long)kv->shape[3], (long long)kv->shape[4], bs, c->Hkv, c->D);
    if (kv->stride[4] != 1)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache last-dim stride %lld, expected 1 (contiguous)", fn,
                        (long long)kv->stride[4]);
    for (i = 0; i < 4; ++i)
        if (kv->stride[i] < 0)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache stride[%d] %lld is negative", fn, i,
                            (long long)kv->stride[i]);
    if (kv->dtype != c->cache_dt)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: kv_cache dtype %s (%d), expected %s for kv_cache_dtype %d",
                        fn, fa_dtype_name(kv->dtype), (int)kv->dtype, fa_dtype_name(c->cache_dt),
                        (int)c->L->desc.kv_cache_dtype);
    if (c->md->block_table == NULL) return fa__fail(FA_ERR_INVALID_ARG, "%s: md->block_table is NULL", fn);
    return FA_OK;
}

/* Which path a layer takes, and whether the metadata serves it. */
typedef enum fa__path {
    FA__PATH_ENCODER,
    FA__PATH_DCP,
    FA__PATH_LOCAL,
    FA__PATH_CASCADE,
    FA__PATH_PLAIN
} fa__path;

static fa_status fa__choose_path(const char *fn, const fa__call *c, fa__path *path)
{
    const fa_layer *L = c->L;
    const fa_metadata *md = c->md;
    const fa_attn_type ty = L->desc.attn_type;
    *path = FA__PATH_PLAIN;
    if (ty == FA_ATTN_ENCODER || ty == FA_ATTN_ENCODER_ONLY) {
        if (c->k == NULL)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: encoder attention needs k and v (got NULL)", fn);
        *path = FA__PATH_ENCODER;
        return FA_OK;
    }
    if (c->k == NULL && !L->desc.kv_sharing && ty != FA_ATTN_ENCODER_DECODER)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: k and v are NULL but the layer writes its cache (only kv_sharing and "
                        "cross-attention layers may run without new keys)",
                        fn);
    if (c->causal && md->query_exceeds_keys)
        return fa__fail(FA_ERR_INVALID_ARG,
                        "%s: a request has more queries than keys, which a causal layer cannot attend "
                        "(attn_type %d, batch.causal %d)",
                        fn, (int)ty, (int)md->causal);
    if (md->dcp_world_size > 1) {
        if (c->k == NULL)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: DCP needs the new tokens' k and v (got NULL)", fn);
        *path = FA__PATH_DCP;
    } else if (L->desc.attention_chunk_size > 0) {
        if (!md->has_local || c->b->cfg.scheduler.attention_chunk_size != L->desc.attention_chunk_size)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: layer attention_chunk_size %d but the builder's is %d",
                            fn, L->desc.attention_chunk_size, c->b->cfg.scheduler.attention_chunk_size);
        *path = FA__PATH_LOCAL;
    } else if (md->use_cascade && fa__cascade_exact(L) && c->causal) {
        *path = FA__PATH_CASCADE;
    } else {
        *path = FA__PATH_PLAIN; /* also a cascade step's layers for which cascade is not exact */
    }
    return FA_OK;
}

static fa_status fa__describe(const char *fn, const fa__call *c, fa__program *p)
{
    fa__path path = FA__PATH_PLAIN;
    fa_status s;
    p->n = 0;
    s = fa__choose_path(fn, c, &path);
    if (s != FA_OK) return s;
    if (path == FA__PATH_ENCODER) {
        fa__describe_encoder(c, p);
        return FA_OK;
    }
    s = fa__check_cache_tensor(fn, c);
    if (s != FA_OK) return s;
    fa__describe_cache_write(c, p);
    switch (path) {
    case FA__PATH_DCP: fa__describe_dcp(c, p); break;
    case FA__PATH_LOCAL: fa__describe_local(c, p); break;
    case FA__PATH_CASCADE: fa__describe_cascade(c, p); break;
    default: fa__describe_plain(c, p); break;
    }
    return FA_OK;
}

/* 1 when the pointer and every stride (in elements of es bytes) are multiples of align. */
static int fa__aligned(const void *ptr, size_t es, int32_t align, const int64_t *strides, int n)
{
    int i;
    if (align <= 1) return 1;
    if ((uintptr_t)ptr % (uintptr_t)align != 0) return 0;
    for (i = 0; i < n; ++i)
        if ((strides[i] * (int64_t)es) % align != 0) return 0;
    return 1;
}

/* The capability block's rules for one step's arguments. */
static fa_status fa__check_caps(const char *fn, const fa_backend *be, const fa__step *st)
{
    const fa_backend_caps *cp = &be->caps;
    const char *name = be->name ? be->name : "?";
    const int32_t al = cp->align_bytes;
    if (st->kind != FA__STEP_OP) return FA_OK;
    if (st->op == FA_OP_ATTENTION) {
        const fa_attn_args *a = &st->u.a;
        const int64_t qs[3] = {a->q_token_stride, a->q_head_stride, a->q_group_stride};
        const int64_t ks[3] = {a->k_block_stride, a->k_row_stride, a->k_head_stride};
        const int64_t vs[3] = {a->v_block_stride, a->v_row_stride, a->v_head_stride};
        const int64_t os[2] = {a->out_token_stride, a->out_head_stride};
        const size_t qe = fa_dtype_size(a->q_dtype), ke = fa_dtype_size(a->kv_dtype);
        if (a->head_size > cp->dims[cp->num_dims - 1].head_dim ||
            (cp->head_size_multiple > 0 && a->head_size % cp->head_size_multiple != 0))
            return fa__fail(FA_ERR_UNSUPPORTED,
                            "%s: backend '%s' has no attention kernel for head_size %d (widest %d, "
                            "multiples of %d)",
                            fn, name, a->head_size, cp->dims[cp->num_dims - 1].head_dim,
                            cp->head_size_multiple);
        if (!(cp->act_dtypes >> a->q_dtype & 1u))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' does not run q dtype %s", fn, name,
                            fa_dtype_name(a->q_dtype));
        if (!((a->block_table != NULL ? cp->cache_dtypes : cp->act_dtypes) >> a->kv_dtype & 1u))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' does not read k/v dtype %s", fn, name,
                            fa_dtype_name(a->kv_dtype));
        if (a->block_table != NULL && cp->block_size_multiple > 0 &&
            a->block_size % cp->block_size_multiple != 0)
            return fa__fail(FA_ERR_UNSUPPORTED,
                            "%s: backend '%s' needs block sizes that are multiples of %d, not %d", fn, name,
                            cp->block_size_multiple, a->block_size);
        if (a->num_splits > cp->max_splits)
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: %d splits is more than backend '%s' runs (%d)", fn,
                            a->num_splits, name, cp->max_splits);
        if (!fa__aligned(a->q, qe, al, qs, 3) || !fa__aligned(a->out, qe, al, os, 2) ||
            !fa__aligned(a->k, ke, al, ks, 3) || !fa__aligned(a->v, ke, al, vs, 3))
            return fa__fail(FA_ERR_UNSUPPORTED,
                            "%s: backend '%s' needs %d-byte aligned q/k/v/out data and token, head "
                            "and block strides",
                            fn, name, al);
    } else if (st->op == FA_OP_RESHAPE_AND_CACHE) {
        const fa_cache_write_args *w = &st->u.w;
        const int64_t ks[2] = {w->key_token_stride, w->value_token_stride};
        const int64_t cs[3] = {w->cache_block_stride, w->cache_row_stride, w->cache_head_stride};
        if (!(cp->cache_dtypes >> w->cache_dtype & 1u))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' does not write cache dtype %s", fn, name,
                            fa_dtype_name(w->cache_dtype));
        if (!fa__aligned(w->key, fa_dtype_size(w->kv_dtype), al, ks, 2) ||
            !fa__aligned(w->value, fa_dtype_size(w->kv_dtype), al, ks, 2) ||
            !fa__aligned(w->key_cache, fa_dtype_size(w->cache_dtype), al, cs, 3) ||
            !fa__aligned(w->value_cache, fa_dtype_size(w->cache_dtype), al, cs, 3))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' needs %d-byte aligned k/v and cache rows",
                            fn, name, al);
    } else if (st->op == FA_OP_MERGE_STATES) {
        const int64_t os[2] = {st->u.m.out_token_stride, st->u.m.out_head_stride};
        if (!fa__aligned(st->u.m.out, fa_dtype_size(st->u.m.dtype), al, os, 2))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' needs %d-byte aligned out data and strides",
                            fn, name, al);
    }
    return FA_OK;
}

/* Every check of every step, before the first one runs. */
static fa_status fa__check_program(const char *fn, const fa__call *c, const fa__program *p)
{
    const fa_backend *be = c->be;
    const char *name = be->name ? be->name : "?";
    int32_t i;
    fa_status s;
    for (i = 0; i < p->n; ++i) {
        const fa__step *st = &p->step[i];
        if (st->kind == FA__STEP_COPY_2D) {
            FA__NEED_OP(fn, be, copy_2d);
            if (st->u.copy.spitch < st->u.copy.width && st->u.copy.rows > 1)
                return fa__fail(FA_ERR_INVALID_ARG,
                                "%s: q token stride %lld is shorter than the %zu bytes of a row it "
                                "packs (DCP gathers q as [tokens, heads, head_size])",
                                fn, (long long)c->q->stride[0], st->u.copy.width);
            continue;
        }
        if (st->kind != FA__STEP_OP) continue; /* collectives: the comm was checked at creation */
        if ((st->op == FA_OP_RESHAPE_AND_CACHE && be->ops.reshape_and_cache == NULL) ||
            (st->op == FA_OP_ATTENTION && be->ops.attention == NULL) ||
            (st->op == FA_OP_MERGE_STATES && be->ops.merge_states == NULL) ||
            (st->op == FA_OP_DCP_CORRECT && be->ops.dcp_correct == NULL))
            return fa__fail(FA_ERR_UNSUPPORTED, "%s: backend '%s' does not implement op '%s'", fn, name,
                            fa__op_name(st->op));
        if (st->op == FA_OP_RESHAPE_AND_CACHE && st->u.w.slot_mapping == NULL)
            return fa__fail(FA_ERR_INVALID_ARG, "%s: md->slot_mapping is NULL", fn);
        if (st->op == FA_OP_RESHAPE_AND_CACHE && (c->k->stride[1] != c->D || c->v->stride[1] != c->D))
            return fa__fail(FA_ERR_INVALID_ARG, "%s: k/v head strides %lld/%lld, expected %d (heads packed)",
                            fn, (long long)c->k->stride[1], (long long)c->v->stride[1], c->D);
        s = fa__check_caps(fn, be, st);
        if (s != FA_OK) return s;
        if (be->ops.check != NULL) {
            s = be->ops.check(be->ctx, st->op, &st->u);
            if (s != FA_OK) {
                const char *detail = be->ops.last_error ? be->ops.last_error(be->ctx) : NULL;
                return fa__fail(s, "%s: backend '%s' rejects op '%s': %s", fn, name, fa__op_name(st->op),
                                detail ? detail : fa_status_string(s));
            }
        }
    }
    return FA_OK;
}

static fa_status fa__run_program(const fa__call *c, const fa__program *p)
{
    const fa_backend *be = c->be;
    const fa_comm *cm = c->b->comm;
    int32_t i;
    int64_t j;
    fa_status s = FA_OK;
    for (i = 0; i < p->n; ++i) {
        const fa__step *st = &p->step[i];
        const char *what = fa__op_name(st->op);
        switch (st->kind) {
        case FA__STEP_OP:
            switch (st->op) {
            case FA_OP_RESHAPE_AND_CACHE: s = be->ops.reshape_and_cache(be->ctx, &st->u.w); break;
            case FA_OP_ATTENTION: s = be->ops.attention(be->ctx, &st->u.a); break;
            case FA_OP_MERGE_STATES: s = be->ops.merge_states(be->ctx, &st->u.m); break;
            case FA_OP_DCP_CORRECT: s = be->ops.dcp_correct(be->ctx, &st->u.c); break;
            }
            break;
        case FA__STEP_COPY_2D:
            what = "copy_2d";
            for (j = 0; j < st->u.copy.count && s == FA_OK; ++j)
                s = be->ops.copy_2d(be->ctx, st->u.copy.dst + j * st->u.copy.dst_step, st->u.copy.dpitch,
                                    st->u.copy.src + j * st->u.copy.src_step, st->u.copy.spitch,
                                    st->u.copy.width, st->u.copy.rows, FA_COPY_DEVICE_TO_DEVICE);
            break;
        case FA__STEP_ALL_GATHER:
        case FA__STEP_REDUCE_SCATTER: {
            const fa__coll *x = &st->u.coll;
            const int gather = st->kind == FA__STEP_ALL_GATHER;
            s = gather ? cm->all_gather(cm->ctx, x->send, x->recv, x->count, x->dtype)
                       : cm->reduce_scatter(cm->ctx, x->send, x->recv, x->count, x->dtype);
            if (s != FA_OK) {
                const char *detail = cm->last_error ? cm->last_error(cm->ctx) : NULL;
                return fa__fail(s, "fa_forward: comm op '%s' failed (%s): %s",
                                gather ? "all_gather" : "reduce_scatter", fa_status_string(s),
                                detail ? detail : "");
            }
            continue;
        }
        }
        if (s != FA_OK) return fa__backend_fail(be, what, s);
    }
    return FA_OK;
}

/* The validation mode: every block id the step reads and every slot it writes, checked on the
   host against the cache (copies through the backend and synchronises). */
static fa_status fa__validate_ids(const char *fn, const fa__call *c)
{
    const fa_builder *b = c->b;
    const fa_metadata *md = c->md;
    const fa_backend *be = c->be;
    const int64_t nb = c->kv_cache->shape[1], bs = b->cfg.cache.block_size;
    int32_t *buf = b->host_check, r;
    const int32_t *hq = b->host_ints + b->off_qsl, *hs = b->host_ints + b->off_seq;
    int64_t t0, i;
    fa_status s;
    if (md->slot_mapping != NULL && c->k != NULL && !c->L->desc.kv_sharing) {
        for (t0 = 0; t0 < c->T; t0 += FA__CHECK_CHUNK / 2) {
            const int64_t n = c->T - t0 < FA__CHECK_CHUNK / 2 ? c->T - t0 : FA__CHECK_CHUNK / 2;
            const int64_t *slots = (const int64_t *)(void *)buf;
            FA__CALL(be, copy, buf, md->slot_mapping + t0, (size_t)n * sizeof(int64_t),
                     FA_COPY_DEVICE_TO_HOST);
            s = be->ops.synchronize(be->ctx);
            if (s != FA_OK) return fa__backend_fail(be, "synchronize", s);
            for (i = 0; i < n; ++i)
                if (slots[i] >= nb * bs)
                    return fa__fail(FA_ERR_INVALID_ARG,
                                    "%s: slot_mapping[%lld] = %lld is outside the cache (%lld blocks "
                                    "x %lld)",
                                    fn, (long long)(t0 + i), (long long)slots[i], (long long)nb,
                                    (long long)bs);
        }
    }
    if (md->has_local) { /* the virtual batches' table, built on the host from block_table_host */
        const int32_t *lbt = b->host_ints + b->off_local_bt, *lk = b->host_ints + b->off_local_k;
        for (r = 0; r < md->local.num_virtual; ++r)
            for (i = 0; i < fa__cdiv64(lk[r], bs); ++i) {
                const int32_t id = lbt[(int64_t)r * b->pages_per_virtual + i];
                if (id < 0 || id >= nb)
                    return fa__fail(
                        FA_ERR_INVALID_ARG,
                        "%s: the chunked-local block table (from block_table_host) "
                        "holds block %d at virtual batch %d, page %lld, outside the cache's %lld blocks",
                        fn, id, r, (long long)i, (long long)nb);
            }
    }
    for (r = 0; r < md->num_reqs; ++r) {
        const int64_t keys = md->dcp_world_size > 1 ? (int64_t)hs[r] - (hq[r + 1] - hq[r]) : hs[r];
        const int64_t cols = fa__cdiv64(keys > 0 ? keys : 0, bs * md->dcp_world_size);
        int64_t c0;
        for (c0 = 0; c0 < cols; c0 += FA__CHECK_CHUNK) {
            const int64_t n = cols - c0 < FA__CHECK_CHUNK ? cols - c0 : FA__CHECK_CHUNK;
            FA__CALL(be, copy, buf, md->block_table + r * md->block_table_stride + c0,
                     (size_t)n * sizeof(int32_t), FA_COPY_DEVICE_TO_HOST);
            s = be->ops.synchronize(be->ctx);
            if (s != FA_OK) return fa__backend_fail(be, "synchronize", s);
            for (i = 0; i < n; ++i)
                if (buf[i] < 0 || buf[i] >= nb)
                    return fa__fail(FA_ERR_INVALID_ARG,
                                    "%s: block_table[%d][%lld] = %d is outside the cache's %lld blocks", fn,
                                    r, (long long)(c0 + i), buf[i], (long long)nb);
        }
    }
    return FA_OK;
}

/* A failed DCP step: tell the peers through the comm (when md names a live builder). */
static void fa__abort_peers(const fa_metadata *md)
{
    const fa_builder *b;
    if (md == NULL || md->dcp_world_size <= 1 || md->registry != (const void *)fa__live_ids ||
        md->builder == NULL || md->builder_slot < 0 || md->builder_slot >= FA__MAX_BUILDERS ||
        md->builder_id == 0 || fa__atomic_load(&fa__live_ids[md->builder_slot]) != md->builder_id)
        return;
    b = md->builder;
    if (b->comm != NULL && b->comm->abort != NULL) b->comm->abort(b->comm->ctx);
}

static fa_status fa__forward(const fa_layer *layer, const fa_backend *be, const fa_tensor *q,
                             const fa_tensor *k, const fa_tensor *v, const fa_tensor *kv_cache,
                             const fa_metadata *md, const fa_tensor *out)
{
    const char *fn = "fa_forward";
    fa__call c;
    fa__program p;
    fa_status s;
    fa__clear();
    FA__CHECK_PTR(fn, layer);
    FA__CHECK_PTR(fn, q);
    FA__CHECK_PTR(fn, out);
    FA__CHECK_PTR(fn, md); /* the profiling run is fa_forward_profile */
    s = fa__check_backend(fn, be);
    if (s != FA_OK) return s;
    memset(&c, 0, sizeof c);
    c.L = layer;
    c.be = be;
    c.md = md;
    c.q = q;
    c.k = k;
    c.v = v;
    c.kv_cache = kv_cache;
    c.out = out;
    c.Hq = layer->desc.num_heads_q;
    c.Hkv = layer->desc.num_heads_kv;
    c.D = layer->desc.head_size;
    c.dt = layer->desc.dtype;
    if (c.Hq <= 0 || c.D <= 0)
        return fa__fail(FA_ERR_INVALID_ARG, "%s: layer is not initialised (num_heads_q %d, head_size %d)", fn,
                        c.Hq, c.D);
    s = fa__check_metadata(fn, &c);
    if (s != FA_OK) return s;
    c.b = md->builder;
    c.T = md->num_actual_tokens;
    c.cache_dt = fa_cache_storage_dtype(layer->desc.kv_cache_dtype, c.dt);
    c.causal = md->causal == FA_CAUSAL_ON    ? 1
               : md->causal == FA_CAUSAL_OFF ? 0
                                             : layer->desc.attn_type == FA_ATTN_DECODER;
    s = fa__check_rows("q", q, c.T, c.Hq, c.D, c.dt);
    if (s == FA_OK) s = fa__check_rows("out", out, c.T, c.Hq, c.D, c.dt);
    if (s == FA_OK && k != NULL) s = fa__check_rows("k", k, c.T, c.Hkv, c.D, c.dt);
    if (s == FA_OK && v != NULL) s = fa__check_rows("v", v, c.T, c.Hkv, c.D, c.dt);
    if (s == FA_OK && (k == NULL) != (v == NULL))
        s = fa__fail(FA_ERR_INVALID_ARG, "%s: k is %s but v is %s (give both or neither)", fn,
                     k ? "set" : "NULL", v ? "set" : "NULL");
    if (s == FA_OK) s = fa__describe(fn, &c, &p);
    if (s == FA_OK && c.b->cfg.debug.validate && kv_cache != NULL && p.n > 0 &&
        layer->desc.attn_type != FA_ATTN_ENCODER && layer->desc.attn_type != FA_ATTN_ENCODER_ONLY)
        s = fa__validate_ids(fn, &c);
    if (s == FA_OK) s = fa__check_program(fn, &c, &p);
    if (s == FA_OK) s = fa__run_program(&c, &p);
    return s;
}

FA__DEF fa_status fa_forward(const fa_layer *layer, const fa_backend *be, const fa_tensor *q,
                             const fa_tensor *k, const fa_tensor *v, const fa_tensor *kv_cache,
                             const fa_metadata *md, const fa_tensor *out)
{
    const fa_status s = fa__forward(layer, be, q, k, v, kv_cache, md, out);
    if (s != FA_OK) fa__abort_peers(md); /* the peers must not wait for this rank */
    return s;
}

#endif /* FLASHATTN_IMPLEMENTATION && !FLASHATTN_IMPLEMENTATION_DONE */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the flashattn authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
