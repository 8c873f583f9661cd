"""ctypes mirrors of flashattn.h's public structs and enums.

Every layout here must equal the C one field for field: tests/test_layout.py compiles a C
program that prints sizeof / offsetof of each struct and field listed in MIRRORED and compares
them with these classes. C enums are `int` on the supported ABIs (x86-64 and AArch64 Linux),
so an enum field is c_int.
"""
import ctypes
import enum

c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_float = ctypes.c_float
c_double = ctypes.c_double
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_size_t = ctypes.c_size_t
c_enum = ctypes.c_int

MAX_RANK = 6                  # FA_MAX_RANK
MAX_KERNEL_DIMS = 8           # FA_MAX_KERNEL_DIMS
BACKEND_API_VERSION = 2       # FA_BACKEND_API_VERSION
HEAD_SIZE_MIN = 8
HEAD_SIZE_MAX = 256
HEAD_SIZE_MULTIPLE = 8
KERNEL_FAMILY_MMA_SYNC = 0    # FA_KERNEL_FAMILY_MMA_SYNC
KERNEL_FAMILY_WGMMA = 1       # FA_KERNEL_FAMILY_WGMMA
WORK_COUNTERS = 4             # FA_WORK_COUNTERS: int32 words of fa_attn_args.work_counters


# --- enums (fa_status, fa_dtype, ...) ---------------------------------------------------------

class Status(enum.IntEnum):
    OK = 0
    ERR_INVALID_ARG = 1
    ERR_UNSUPPORTED = 2
    ERR_WORKSPACE = 3
    ERR_BACKEND = 4
    ERR_OUT_OF_MEMORY = 5


class DType(enum.IntEnum):
    BF16 = 0
    F16 = 1
    F32 = 2
    FP8_E4M3 = 3
    FP8_E5M2 = 4
    I32 = 5
    I64 = 6


class CacheDType(enum.IntEnum):
    AUTO = 0
    FP8 = 1
    FP8_E4M3 = 2
    FP8_E5M2 = 3


class KVLayout(enum.IntEnum):
    NHD = 0
    HND = 1


class AttnType(enum.IntEnum):
    DECODER = 0
    ENCODER = 1
    ENCODER_ONLY = 2
    ENCODER_DECODER = 3


class Causal(enum.IntEnum):
    AUTO = 0
    ON = 1
    OFF = 2


class CopyKind(enum.IntEnum):
    HOST_TO_DEVICE = 0
    DEVICE_TO_HOST = 1
    DEVICE_TO_DEVICE = 2


class Op(enum.IntEnum):
    RESHAPE_AND_CACHE = 0
    ATTENTION = 1
    MERGE_STATES = 2
    DCP_CORRECT = 3


# --- >>tensor ---------------------------------------------------------------------------------

class fa_tensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("dtype", c_enum),
        ("rank", c_int32),
        ("shape", c_int64 * MAX_RANK),
        ("stride", c_int64 * MAX_RANK),
    ]


# --- >>config ---------------------------------------------------------------------------------

class fa_model_config(ctypes.Structure):
    _fields_ = [
        ("num_heads_q", c_int32),
        ("num_heads_kv", c_int32),
        ("head_size", c_int32),
        ("dtype", c_enum),
        ("hybrid_mamba_f32", c_int32),
    ]


class fa_cache_config(ctypes.Structure):
    _fields_ = [
        ("block_size", c_int32),
        ("cache_dtype", c_enum),
        ("layout", c_enum),
    ]


class fa_parallel_config(ctypes.Structure):
    _fields_ = [
        ("dcp_world_size", c_int32),
        ("dcp_rank", c_int32),
        ("cp_kv_cache_interleave_size", c_int32),
    ]


class fa_compilation_config(ctypes.Structure):
    _fields_ = [
        ("full_cuda_graph", c_int32),
        ("max_cudagraph_capture_size", c_int32),
        ("max_num_splits_for_cuda_graph", c_int32),
        ("batch_invariant", c_int32),
        ("max_num_splits", c_int32),
    ]


class fa_scheduler_config(ctypes.Structure):
    _fields_ = [
        ("max_num_seqs", c_int32),
        ("max_num_batched_tokens", c_int32),
        ("attention_chunk_size", c_int32),
    ]


class fa_debug_config(ctypes.Structure):
    _fields_ = [
        ("validate", c_int32),
    ]


class fa_config(ctypes.Structure):
    _fields_ = [
        ("model", fa_model_config),
        ("cache", fa_cache_config),
        ("parallel", fa_parallel_config),
        ("compilation", fa_compilation_config),
        ("scheduler", fa_scheduler_config),
        ("debug", fa_debug_config),
    ]


# --- >>caps / >>plan --------------------------------------------------------------------------

class fa_block_sizes(ctypes.Structure):
    _fields_ = [
        ("multiple_of", c_int32),
        ("count", c_int32),
        ("sizes", c_int32 * 4),
    ]


class fa_window(ctypes.Structure):
    _fields_ = [
        ("left", c_int32),
        ("right", c_int32),
    ]


class fa_cascade_query(ctypes.Structure):
    _fields_ = [
        ("num_common_prefix_blocks", c_int32),
        ("block_size", c_int32),
        ("num_computed_tokens", ctypes.POINTER(c_int32)),
        ("query_lens", ctypes.POINTER(c_int32)),
        ("num_reqs", c_int32),
        ("num_heads_q", c_int32),
        ("num_heads_kv", c_int32),
        ("num_sms", c_int32),
        ("dcp_world_size", c_int32),
        ("use_alibi", ctypes.c_int),
        ("use_sliding_window", ctypes.c_int),
        ("use_local_attention", ctypes.c_int),
        ("encoder_only", ctypes.c_int),
    ]


class fa_local_batches(ctypes.Structure):
    _fields_ = [
        ("num_virtual", c_int32),
        ("max_query_len", c_int32),
        ("max_seq_len", c_int32),
        ("pages_per_virtual", c_int32),
        ("seqlens_q", ctypes.POINTER(c_int32)),
        ("cu_seqlens_q", ctypes.POINTER(c_int32)),
        ("seqused_k", ctypes.POINTER(c_int32)),
        ("block_table", ctypes.POINTER(c_int32)),
    ]


class fa_kernel_dim(ctypes.Structure):
    _fields_ = [
        ("head_dim", c_int32),
        ("prefill_tile_m", c_int32),
        ("prefill_tile_n", c_int32),
        ("decode_tile_n", c_int32),
        ("decode_ctas_per_sm", c_int32),
        ("decode_step_us", c_double),
        ("prefill_family", c_int32),   # FA_KERNEL_FAMILY_*
    ]


class fa_backend_caps(ctypes.Structure):
    _fields_ = [
        ("num_dims", c_int32),
        ("dims", fa_kernel_dim * MAX_KERNEL_DIMS),
        ("act_dtypes", c_uint32),
        ("cache_dtypes", c_uint32),
        ("block_size_multiple", c_int32),
        ("head_size_multiple", c_int32),
        ("decode_max_rows", c_int32),
        ("max_splits", c_int32),
        ("align_bytes", c_int32),
        ("sm_bytes_per_us", c_double),
        ("cta_us", c_double),
        ("combine_us", c_double),
        ("combine_us_per_split", c_double),
    ]


class fa_split_params(ctypes.Structure):
    _fields_ = [
        ("num_reqs", c_int32),
        ("cu_seqlens_q", ctypes.POINTER(c_int32)),
        ("seqused_k", ctypes.POINTER(c_int32)),
        ("num_heads_q", c_int32),
        ("num_heads_kv", c_int32),
        ("head_size", c_int32),
        ("causal", c_int32),
        ("window", fa_window),
        ("num_sms", c_int32),
        ("max_num_splits", c_int32),
        ("batch_invariant", c_int32),
        ("kv_bytes", c_int32),
        ("caps", ctypes.POINTER(fa_backend_caps)),
    ]


# --- >>backend: op argument structs -----------------------------------------------------------

class fa_cache_write_args(ctypes.Structure):
    _fields_ = [
        ("key", c_void_p),
        ("value", c_void_p),
        ("key_token_stride", c_int64),
        ("value_token_stride", c_int64),
        ("kv_dtype", c_enum),
        ("key_cache", c_void_p),
        ("value_cache", c_void_p),
        ("cache_block_stride", c_int64),
        ("cache_row_stride", c_int64),
        ("cache_head_stride", c_int64),
        ("cache_dtype", c_enum),
        ("slot_mapping", c_void_p),
        ("num_blocks", c_int64),
        ("num_tokens", c_int32),
        ("num_heads_kv", c_int32),
        ("head_size", c_int32),
        ("block_size", c_int32),
        ("k_scale", c_float),
        ("v_scale", c_float),
    ]


class fa_attn_args(ctypes.Structure):
    _fields_ = [
        ("q", c_void_p),
        ("q_token_stride", c_int64),
        ("q_head_stride", c_int64),
        ("q_group_stride", c_int64),
        ("q_head_group", c_int32),
        ("q_dtype", c_enum),
        ("k", c_void_p),
        ("v", c_void_p),
        ("k_block_stride", c_int64),
        ("k_row_stride", c_int64),
        ("k_head_stride", c_int64),
        ("v_block_stride", c_int64),
        ("v_row_stride", c_int64),
        ("v_head_stride", c_int64),
        ("kv_dtype", c_enum),
        ("out", c_void_p),
        ("out_token_stride", c_int64),
        ("out_head_stride", c_int64),
        ("lse", c_void_p),
        ("lse_head_stride", c_int64),
        ("cu_seqlens_q", c_void_p),
        ("seqused_k", c_void_p),
        ("cu_seqlens_k", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("num_blocks", c_int64),
        ("num_seqs", c_int32),
        ("num_tokens", c_int32),
        ("max_seqlen_q", c_int32),
        ("max_seqlen_k", c_int32),
        ("min_seqlen_q", c_int32),
        ("num_heads_q", c_int32),
        ("num_heads_kv", c_int32),
        ("head_size", c_int32),
        ("block_size", c_int32),
        ("softmax_scale", c_float),
        ("softcap", c_float),
        ("causal", c_int32),
        ("window_left", c_int32),
        ("window_right", c_int32),
        ("alibi_slopes", c_void_p),
        ("alibi_batch_stride", c_int64),
        ("sinks", c_void_p),
        ("k_descale", c_void_p),
        ("v_descale", c_void_p),
        ("descale_batch_stride", c_int64),
        ("descale_head_stride", c_int64),
        ("k_scale", c_float),
        ("v_scale", c_float),
        ("num_splits", c_int32),
        ("split_plan", c_void_p),
        ("split_out", c_void_p),
        ("split_lse", c_void_p),
        ("out_dtype", c_enum),
        ("q_descale", c_void_p),
        ("num_keys", c_int64),
        ("work_counters", c_void_p),
    ]


class fa_merge_args(ctypes.Structure):
    _fields_ = [
        ("out", c_void_p),
        ("out_token_stride", c_int64),
        ("out_head_stride", c_int64),
        ("out_lse", c_void_p),
        ("out_lse_head_stride", c_int64),
        ("prefix_out", c_void_p),
        ("prefix_token_stride", c_int64),
        ("prefix_head_stride", c_int64),
        ("prefix_lse", c_void_p),
        ("prefix_lse_head_stride", c_int64),
        ("suffix_out", c_void_p),
        ("suffix_token_stride", c_int64),
        ("suffix_head_stride", c_int64),
        ("suffix_lse", c_void_p),
        ("suffix_lse_head_stride", c_int64),
        ("dtype", c_enum),
        ("num_tokens", c_int32),
        ("num_heads", c_int32),
        ("head_size", c_int32),
    ]


class fa_dcp_correct_args(ctypes.Structure):
    _fields_ = [
        ("out", c_void_p),
        ("out_token_stride", c_int64),
        ("out_head_stride", c_int64),
        ("dtype", c_enum),
        ("lse_all", c_void_p),
        ("lse_out", c_void_p),
        ("world_size", c_int32),
        ("rank", c_int32),
        ("num_tokens", c_int32),
        ("num_heads", c_int32),
        ("head_size", c_int32),
    ]


# --- >>backend: the vtable --------------------------------------------------------------------

_st = c_enum  # fa_status as a return type
OP_RESHAPE_AND_CACHE = ctypes.CFUNCTYPE(_st, c_void_p, ctypes.POINTER(fa_cache_write_args))
OP_ATTENTION = ctypes.CFUNCTYPE(_st, c_void_p, ctypes.POINTER(fa_attn_args))
OP_MERGE_STATES = ctypes.CFUNCTYPE(_st, c_void_p, ctypes.POINTER(fa_merge_args))
OP_DCP_CORRECT = ctypes.CFUNCTYPE(_st, c_void_p, ctypes.POINTER(fa_dcp_correct_args))
OP_COPY = ctypes.CFUNCTYPE(_st, c_void_p, c_void_p, c_void_p, c_size_t, c_enum)
OP_FILL = ctypes.CFUNCTYPE(_st, c_void_p, c_void_p, c_size_t, ctypes.c_int, c_size_t, c_size_t)
OP_ALLOC = ctypes.CFUNCTYPE(_st, c_void_p, c_size_t, ctypes.POINTER(c_void_p))
OP_FREE = ctypes.CFUNCTYPE(_st, c_void_p, c_void_p)
OP_SYNCHRONIZE = ctypes.CFUNCTYPE(_st, c_void_p)
OP_LAST_ERROR = ctypes.CFUNCTYPE(c_char_p, c_void_p)
OP_COPY_2D = ctypes.CFUNCTYPE(_st, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_size_t,
                              c_size_t, c_enum)
OP_CHECK = ctypes.CFUNCTYPE(_st, c_void_p, c_enum, c_void_p)


class fa_backend_ops(ctypes.Structure):
    _fields_ = [
        ("reshape_and_cache", OP_RESHAPE_AND_CACHE),
        ("attention", OP_ATTENTION),
        ("merge_states", OP_MERGE_STATES),
        ("dcp_correct", OP_DCP_CORRECT),
        ("copy", OP_COPY),
        ("fill", OP_FILL),
        ("alloc", OP_ALLOC),
        ("free", OP_FREE),
        ("synchronize", OP_SYNCHRONIZE),
        ("last_error", OP_LAST_ERROR),
        ("copy_2d", OP_COPY_2D),
        ("check", OP_CHECK),
    ]


class fa_device_info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("cc_major", c_int32),
        ("cc_minor", c_int32),
        ("num_sms", c_int32),
        ("smem_per_block", c_int64),
        ("smem_per_sm", c_int64),
    ]


class fa_backend(ctypes.Structure):
    _fields_ = [
        ("api_version", c_uint32),
        ("name", c_char_p),
        ("ops", fa_backend_ops),
        ("ctx", c_void_p),
        ("info", fa_device_info),
        ("caps", fa_backend_caps),
    ]


COMM_COLLECTIVE = ctypes.CFUNCTYPE(_st, c_void_p, c_void_p, c_void_p, c_size_t, c_enum)
COMM_LAST_ERROR = ctypes.CFUNCTYPE(c_char_p, c_void_p)
COMM_ABORT = ctypes.CFUNCTYPE(None, c_void_p)


class fa_comm(ctypes.Structure):
    _fields_ = [
        ("api_version", c_uint32),
        ("world_size", c_int32),
        ("rank", c_int32),
        ("ctx", c_void_p),
        ("all_gather", COMM_COLLECTIVE),
        ("reduce_scatter", COMM_COLLECTIVE),
        ("last_error", COMM_LAST_ERROR),
        ("abort", COMM_ABORT),
    ]


# --- >>metadata -------------------------------------------------------------------------------

class fa_batch(ctypes.Structure):
    _fields_ = [
        ("num_reqs", c_int32),
        ("num_actual_tokens", c_int32),
        ("query_start_loc", c_void_p),
        ("seq_lens", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("max_blocks", c_int32),
        ("block_table_host", c_void_p),
        ("slot_mapping", c_void_p),
        ("causal", c_enum),
    ]


class fa_local_metadata(ctypes.Structure):
    _fields_ = [
        ("num_virtual", c_int32),
        ("max_query_len", c_int32),
        ("max_seq_len", c_int32),
        ("cu_seqlens_q", c_void_p),
        ("seqused_k", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("split_plan", c_void_p),
        ("num_splits", c_int32),
    ]


class fa_metadata(ctypes.Structure):
    _fields_ = [
        ("builder", c_void_p),
        ("builder_id", c_uint64),
        ("registry", c_void_p),
        ("generation", c_uint64),
        ("builder_slot", c_int32),
        ("num_actual_tokens", c_int32),
        ("num_reqs", c_int32),
        ("max_query_len", c_int32),
        ("max_seq_len", c_int32),
        ("min_query_len", c_int32),
        ("causal", c_enum),
        ("query_exceeds_keys", c_int32),
        ("query_start_loc", c_void_p),
        ("seq_lens", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("slot_mapping", c_void_p),
        ("num_splits", c_int32),
        ("split_plan", c_void_p),
        ("use_cascade", c_int32),
        ("common_prefix_len", c_int32),
        ("suffix_num_splits", c_int32),
        ("suffix_split_plan", c_void_p),
        ("cu_prefix_query_lens", c_void_p),
        ("prefix_kv_lens", c_void_p),
        ("suffix_kv_lens", c_void_p),
        ("prefix_num_splits", c_int32),
        ("prefix_split_plan", c_void_p),
        ("has_local", c_int32),
        ("local", fa_local_metadata),
        ("dcp_world_size", c_int32),
        ("dcp_rank", c_int32),
        ("dcp_context_kv_lens", c_void_p),
        ("max_dcp_context_kv_len", c_int32),
    ]


# --- >>layer ----------------------------------------------------------------------------------

class fa_layer_desc(ctypes.Structure):
    _fields_ = [
        ("num_heads_q", c_int32),
        ("num_heads_kv", c_int32),
        ("head_size", c_int32),
        ("scale", c_float),
        ("dtype", c_enum),
        ("attn_type", c_enum),
        ("sliding_window", c_int32),
        ("logits_soft_cap", c_float),
        ("alibi_slopes", c_void_p),
        ("num_alibi_slopes", c_int32),
        ("sinks", c_void_p),
        ("num_sinks", c_int32),
        ("kv_cache_dtype", c_enum),
        ("k_scale", c_float),
        ("v_scale", c_float),
        ("kv_sharing", c_int32),
        ("attention_chunk_size", c_int32),
        ("dcp_world_size", c_int32),
    ]


class fa_layer(ctypes.Structure):
    _fields_ = [
        ("desc", fa_layer_desc),
        ("window", fa_window),
        ("scale", c_float),
        ("softcap", c_float),
        ("k_scale", c_float),
        ("v_scale", c_float),
    ]


# --- backends/cpu/fa_cpu.h --------------------------------------------------------------------

class fa_cpu_backend_options(ctypes.Structure):
    _fields_ = [
        ("fail_alloc_at", c_int64),
        ("fail_copy_at", c_int64),
        ("fail_op", c_enum),
        ("fail_op_at", c_int64),
    ]


# (C name, ctypes class, header that declares it): what the layout test compares.
MIRRORED = [
    ("fa_tensor", fa_tensor, "flashattn.h"),
    ("fa_model_config", fa_model_config, "flashattn.h"),
    ("fa_cache_config", fa_cache_config, "flashattn.h"),
    ("fa_parallel_config", fa_parallel_config, "flashattn.h"),
    ("fa_compilation_config", fa_compilation_config, "flashattn.h"),
    ("fa_scheduler_config", fa_scheduler_config, "flashattn.h"),
    ("fa_debug_config", fa_debug_config, "flashattn.h"),
    ("fa_config", fa_config, "flashattn.h"),
    ("fa_block_sizes", fa_block_sizes, "flashattn.h"),
    ("fa_window", fa_window, "flashattn.h"),
    ("fa_cascade_query", fa_cascade_query, "flashattn.h"),
    ("fa_local_batches", fa_local_batches, "flashattn.h"),
    ("fa_kernel_dim", fa_kernel_dim, "flashattn.h"),
    ("fa_backend_caps", fa_backend_caps, "flashattn.h"),
    ("fa_split_params", fa_split_params, "flashattn.h"),
    ("fa_cache_write_args", fa_cache_write_args, "flashattn.h"),
    ("fa_attn_args", fa_attn_args, "flashattn.h"),
    ("fa_merge_args", fa_merge_args, "flashattn.h"),
    ("fa_dcp_correct_args", fa_dcp_correct_args, "flashattn.h"),
    ("fa_backend_ops", fa_backend_ops, "flashattn.h"),
    ("fa_device_info", fa_device_info, "flashattn.h"),
    ("fa_backend", fa_backend, "flashattn.h"),
    ("fa_comm", fa_comm, "flashattn.h"),
    ("fa_batch", fa_batch, "flashattn.h"),
    ("fa_local_metadata", fa_local_metadata, "flashattn.h"),
    ("fa_metadata", fa_metadata, "flashattn.h"),
    ("fa_layer_desc", fa_layer_desc, "flashattn.h"),
    ("fa_layer", fa_layer, "flashattn.h"),
    ("fa_cpu_backend_options", fa_cpu_backend_options, "fa_cpu.h"),
]

# (C enum constant, Python value): what the layout test compares as well.
ENUM_VALUES = (
    [("FA_" + m.name, int(m)) for m in Status]
    + [("FA_DTYPE_" + m.name, int(m)) for m in DType]
    + [("FA_CACHE_" + m.name, int(m)) for m in CacheDType]
    + [("FA_LAYOUT_" + m.name, int(m)) for m in KVLayout]
    + [("FA_ATTN_" + m.name, int(m)) for m in AttnType]
    + [("FA_CAUSAL_" + m.name, int(m)) for m in Causal]
    + [("FA_COPY_" + m.name, int(m)) for m in CopyKind]
    + [("FA_OP_" + m.name, int(m)) for m in Op]
    + [("FA_MAX_RANK", MAX_RANK), ("FA_MAX_KERNEL_DIMS", MAX_KERNEL_DIMS),
       ("FA_BACKEND_API_VERSION", BACKEND_API_VERSION), ("FA_HEAD_SIZE_MIN", HEAD_SIZE_MIN),
       ("FA_HEAD_SIZE_MAX", HEAD_SIZE_MAX), ("FA_HEAD_SIZE_MULTIPLE", HEAD_SIZE_MULTIPLE),
       ("FA_KERNEL_FAMILY_MMA_SYNC", KERNEL_FAMILY_MMA_SYNC), ("FA_KERNEL_FAMILY_WGMMA", KERNEL_FAMILY_WGMMA),
       ("FA_WORK_COUNTERS", WORK_COUNTERS)]
)
