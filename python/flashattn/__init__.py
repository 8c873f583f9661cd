"""flashattn: a ctypes binding of the flashattn paged-attention library.

    import numpy as np, flashattn as fa
    be = fa.Backend.cpu()                      # or fa.Backend.cuda(0, torch.cuda.current_stream())
    b = fa.Builder(be, num_heads_q=8, num_heads_kv=2, head_size=64, dtype=fa.DType.F32)
    layer = fa.Layer(num_heads_q=8, num_heads_kv=2, head_size=64, dtype=fa.DType.F32)
    md = b.build(query_start_loc=[0, 5], seq_lens=[5], block_table=[[0]], slot_mapping=range(5))
    fa.forward(layer, be, q, k, v, kv_cache, md, out)

The shared libraries (libflashattn.so, libflashattn_cpu.so, libflashattn_cuda.so) are loaded
from $FLASHATTN_LIB_DIR, the package folder, or the system. Every failure raises flashattn.Error
with the status and the library's message (fa_last_error()). docs/python.md has the whole API.
"""
from ._errors import Error
from ._lib import have_cuda, library_path, load_library
from ._structs import (AttnType, CacheDType, Causal, CopyKind, DType, KVLayout, Op, Status,
                       BACKEND_API_VERSION, HEAD_SIZE_MAX, HEAD_SIZE_MIN, HEAD_SIZE_MULTIPLE,
                       MAX_RANK)
from ._tensor import Tensor, as_tensor
from ._api import (Backend, Batch, Builder, FakeCommGroup, Layer, Metadata, aot_sliding_window,
                   attention, bf16_to_float, builder_workspace_size, cache_storage_dtype,
                   cascade_prefix_len, check, check_combination, config, config_dict,
                   config_resolve, dcp_correct, dcp_local_seq_len, dcp_local_seq_lens,
                   dcp_slot_mapping, describe, dtype_name, dtype_size, float_to_bf16,
                   float_to_fp8, float_to_half, forward, forward_profile, fp8_to_float,
                   half_to_float, kv_cache_shape, kv_cache_stride_order, kv_cache_strides,
                   last_error, local_virtual_batches, merge_states, num_splits_heuristic,
                   plan_splits, reshape_and_cache, sliding_window_config, status_string,
                   supported_kernel_block_sizes, supports_block_size, supports_compute_capability,
                   supports_head_size, supports_kv_cache_dtype, use_cascade_attention, version)
from . import _structs as structs

__version__ = "0.1.0"  # equals fa_version(); checked by tests/test_basic.py

__all__ = [n for n in dir() if not n.startswith("_")]
