"""Loading the shared libraries and declaring their functions.

lib<stem>.so is looked for in $FLASHATTN_LIB_DIR, then in the package folder (where a wheel
built with $FLASHATTN_LIB_DIR set carries it), then on the system (ctypes.util.find_library,
then the bare name for the dynamic loader's own search). The core library (libflashattn, the
header's implementation) is loaded first with RTLD_GLOBAL so that the backend libraries, which
need its symbols, resolve them against that copy.
"""
import ctypes
import ctypes.util
import os
import threading

from . import _structs as S

_libs = {}
_paths = {}
_lock = threading.RLock()


def _candidates(stem):
    name = "lib%s.so" % stem
    env = os.environ.get("FLASHATTN_LIB_DIR")
    if env:
        for d in env.split(os.pathsep):
            if d:
                yield os.path.join(d, name)
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    found = ctypes.util.find_library(stem)
    if found:
        yield found
    yield name


def load_library(stem="flashattn"):
    """Loads lib<stem>.so from $FLASHATTN_LIB_DIR, the package folder or the system (cached).
    Raises OSError naming every place tried."""
    with _lock:
        if stem in _libs:
            return _libs[stem]
        if stem != "flashattn":
            _core()
        errors = []
        for path in _candidates(stem):
            if os.sep in path and not os.path.exists(path):
                errors.append("%s: not found" % path)
                continue
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                errors.append("%s: %s" % (path, e))
                continue
            _declare(stem, lib)
            _libs[stem] = lib
            _paths[stem] = path
            return lib
        raise OSError("cannot load lib%s.so (set FLASHATTN_LIB_DIR to the folder holding it); "
                      "tried: %s" % (stem, "; ".join(errors)))


def library_path(stem="flashattn"):
    """Where lib<stem>.so was loaded from (loading it if needed)."""
    load_library(stem)
    return _paths[stem]


def _core():
    return load_library("flashattn")


def _cpu():
    return load_library("flashattn_cpu")


def _cuda():
    return load_library("flashattn_cuda")


def have_cuda():
    """True when libflashattn_cuda.so loads (it does not say a GPU is present)."""
    try:
        _cuda()
        return True
    except OSError:
        return False


def _fn(lib, name, restype, argtypes):
    f = getattr(lib, name, None)
    if f is None:
        return
    f.restype = restype
    f.argtypes = argtypes


P = ctypes.POINTER
st = ctypes.c_int  # fa_status
i32 = ctypes.c_int32
i64 = ctypes.c_int64
vp = ctypes.c_void_p
cp = ctypes.c_char_p
sz = ctypes.c_size_t
ci = ctypes.c_int
BACKEND_P = P(S.fa_backend)


def _declare(stem, lib):
    if stem == "flashattn":
        for name, res, args in [
            ("fa_version", cp, []),
            ("fa_status_string", cp, [ci]),
            ("fa_last_error", cp, []),
            ("fa_dtype_size", sz, [ci]),
            ("fa_dtype_name", cp, [ci]),
            ("fa_tensor_make", S.fa_tensor, [vp, ci, i32, P(i64)]),
            ("fa_config_resolve", st, [P(S.fa_config), P(S.fa_config)]),
            ("fa_supports_head_size", ci, [i32]),
            ("fa_supported_kernel_block_sizes", S.fa_block_sizes, [ci]),
            ("fa_supports_block_size", ci, [i32, ci]),
            ("fa_supports_kv_cache_dtype", ci, [ci]),
            ("fa_supports_compute_capability", ci, [i32, i32]),
            ("fa_cache_storage_dtype", ci, [ci, ci]),
            ("fa_check_combination", cp, [BACKEND_P, i32, ci, ci, i32, ci, ci]),
            ("fa_kv_cache_shape", st, [i64, i32, i32, i32, P(i64)]),
            ("fa_kv_cache_stride_order", st, [ci, ci, P(i32), P(i32)]),
            ("fa_kv_cache_strides", st, [ci, i64, i32, i32, i32, P(i64)]),
            ("fa_sliding_window_config", S.fa_window, [i32, ci]),
            ("fa_aot_sliding_window", st, [P(S.fa_window), i32, P(S.fa_window), P(ci)]),
            ("fa_use_cascade_attention", ci, [i32, P(i32), i32, i32, i32, ci, ci, ci, i32, i32]),
            ("fa_cascade_prefix_len", st, [P(S.fa_cascade_query), P(i32)]),
            ("fa_local_virtual_batches_count", st, [i32, P(i32), P(i32), i32, P(i32)]),
            ("fa_make_local_virtual_batches", st, [i32, i32, P(i32), P(i32), i32, P(i32), i64, i32,
                                                   i32, P(S.fa_local_batches)]),
            ("fa_dcp_local_seq_len", i32, [i32, i32, i32, i32]),
            ("fa_dcp_local_seq_lens", st, [P(i32), i32, i32, i32, i32, P(i32)]),
            ("fa_dcp_slot_mapping", st, [P(i32), i64, i32, i32, P(i32), P(i32), i32, i32, i32, i32,
                                         P(i64)]),
            ("fa_num_splits_heuristic", i32, [i64, i32, i32, i32]),
            ("fa_plan_splits", st, [P(S.fa_split_params), P(i32), i32]),
            ("fa_builder_workspace_size", st, [P(S.fa_config), P(sz)]),
            ("fa_builder_create", st, [BACKEND_P, P(S.fa_config), P(S.fa_comm), P(vp)]),
            ("fa_builder_destroy", None, [vp]),
            ("fa_builder_config", P(S.fa_config), [vp]),
            ("fa_builder_set_layers", st, [vp, P(S.fa_layer), i32]),
            ("fa_builder_cascade_prefix_len", st, [vp, P(S.fa_batch), i32, P(i32)]),
            ("fa_builder_build", st, [vp, P(S.fa_batch), i32, P(S.fa_metadata)]),
            ("fa_metadata_describe", st, [P(S.fa_metadata), ctypes.c_char_p, sz, P(sz)]),
            ("fa_layer_init", st, [P(S.fa_layer), P(S.fa_layer_desc)]),
            ("fa_layer_init_from_config", st, [P(S.fa_layer), P(S.fa_config),
                                               P(S.fa_layer_desc)]),
            ("fa_forward", st, [P(S.fa_layer), BACKEND_P, P(S.fa_tensor), P(S.fa_tensor),
                                P(S.fa_tensor), P(S.fa_tensor), P(S.fa_metadata), P(S.fa_tensor)]),
            ("fa_forward_profile", st, [P(S.fa_layer), BACKEND_P, P(S.fa_tensor)]),
        ]:
            _fn(lib, name, res, args)
    elif stem == "flashattn_cpu":
        for name, res, args in [
            ("fa_cpu_backend_create", st, [P(BACKEND_P)]),
            ("fa_cpu_backend_create_ex", st, [P(S.fa_cpu_backend_options), P(BACKEND_P)]),
            ("fa_cpu_backend_set_options", st, [BACKEND_P, P(S.fa_cpu_backend_options)]),
            ("fa_cpu_backend_destroy", None, [BACKEND_P]),
            ("fa_cpu_float_to_fp8", ctypes.c_uint8, [ctypes.c_float, ci]),
            ("fa_cpu_fp8_to_float", ctypes.c_float, [ctypes.c_uint8, ci]),
            ("fa_cpu_float_to_half", ctypes.c_uint16, [ctypes.c_float]),
            ("fa_cpu_half_to_float", ctypes.c_float, [ctypes.c_uint16]),
            ("fa_cpu_float_to_bf16", ctypes.c_uint16, [ctypes.c_float]),
            ("fa_cpu_bf16_to_float", ctypes.c_float, [ctypes.c_uint16]),
            ("fa_fake_comm_group_create", st, [i32, P(P(S.fa_comm))]),
            ("fa_fake_comm_group_destroy", None, [P(S.fa_comm)]),
            ("fa_fake_comm_abort", st, [P(S.fa_comm)]),
            ("fa_fake_comm_aborted", ci, [P(S.fa_comm)]),
            ("fa_fake_comm_group_reset", st, [P(S.fa_comm)]),
            ("fa_fake_comm_group_set_timeout", st, [P(S.fa_comm), i64]),
        ]:
            _fn(lib, name, res, args)
    elif stem == "flashattn_cuda":
        for name, res, args in [
            ("fa_cuda_backend_create", st, [ci, vp, P(BACKEND_P)]),
            ("fa_cuda_backend_destroy", None, [BACKEND_P]),
            ("fa_cuda_create_error", cp, []),
        ]:
            _fn(lib, name, res, args)
