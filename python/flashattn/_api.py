"""The Pythonic layer: Backend, config(), Builder, Batch, Metadata, Layer, forward and the ops."""
import ctypes
import math
import weakref

from . import _lib
from . import _structs as S
from ._errors import Error
from ._tensor import Tensor, as_tensor, host_ints

P = ctypes.POINTER


# --- basics -----------------------------------------------------------------------------------

def version():
    """fa_version(): the library's "MAJOR.MINOR.PATCH"."""
    return _lib._core().fa_version().decode()


def last_error():
    """fa_last_error(): this thread's last failure detail ("" if none)."""
    s = _lib._core().fa_last_error()
    return s.decode() if s else ""


def status_string(status):
    s = _lib._core().fa_status_string(int(status))
    return s.decode() if s else ""


def check(status):
    """Raises Error for a non-OK fa_status, with fa_last_error()'s message."""
    if status != 0:
        raise Error(status, last_error() or status_string(status))


def _invalid(msg):
    return Error(S.Status.ERR_INVALID_ARG, msg)


def dtype_size(dtype):
    return int(_lib._core().fa_dtype_size(int(dtype)))


def dtype_name(dtype):
    return _lib._core().fa_dtype_name(int(dtype)).decode()


# --- caps and helpers -------------------------------------------------------------------------

def supports_head_size(head_size):
    return bool(_lib._core().fa_supports_head_size(int(head_size)))


def supported_kernel_block_sizes(hybrid_mamba_f32=False):
    """{"multiple_of": 16, "sizes": []} or {"multiple_of": 0, "sizes": [16, 32, 64]}."""
    b = _lib._core().fa_supported_kernel_block_sizes(int(bool(hybrid_mamba_f32)))
    return {"multiple_of": b.multiple_of, "sizes": [b.sizes[i] for i in range(b.count)]}


def supports_block_size(block_size, hybrid_mamba_f32=False):
    return bool(_lib._core().fa_supports_block_size(int(block_size), int(bool(hybrid_mamba_f32))))


def supports_kv_cache_dtype(cache_dtype):
    return bool(_lib._core().fa_supports_kv_cache_dtype(int(cache_dtype)))


def supports_compute_capability(major, minor):
    return bool(_lib._core().fa_supports_compute_capability(int(major), int(minor)))


def cache_storage_dtype(cache_dtype, activation=S.DType.BF16):
    return S.DType(_lib._core().fa_cache_storage_dtype(int(cache_dtype), int(activation)))


def check_combination(backend, head_size, dtype, cache_dtype=S.CacheDType.AUTO, block_size=16,
                      use_sinks=False, hybrid_mamba_f32=False):
    """None when supported, else fa_check_combination's reason string. backend may be None."""
    r = _lib._core().fa_check_combination(backend._ptr if backend is not None else None,
                                          int(head_size), int(dtype), int(cache_dtype),
                                          int(block_size), int(bool(use_sinks)),
                                          int(bool(hybrid_mamba_f32)))
    return r.decode() if r else None


def kv_cache_shape(num_blocks, block_size, num_heads_kv, head_size):
    """The logical cache shape (2, num_blocks, block_size, num_heads_kv, head_size)."""
    out = (ctypes.c_int64 * 5)()
    check(_lib._core().fa_kv_cache_shape(int(num_blocks), int(block_size), int(num_heads_kv),
                                         int(head_size), out))
    return tuple(out)


def kv_cache_stride_order(layout=S.KVLayout.NHD, include_num_layers=False):
    order = (ctypes.c_int32 * 6)()
    rank = ctypes.c_int32()
    check(_lib._core().fa_kv_cache_stride_order(int(layout), int(bool(include_num_layers)), order,
                                                ctypes.byref(rank)))
    return tuple(order[i] for i in range(rank.value))


def kv_cache_strides(layout, num_blocks, block_size, num_heads_kv, head_size):
    """Logical strides (elements) of the rank-5 cache stored contiguously in `layout`'s order."""
    out = (ctypes.c_int64 * 5)()
    check(_lib._core().fa_kv_cache_strides(int(layout), int(num_blocks), int(block_size),
                                           int(num_heads_kv), int(head_size), out))
    return tuple(out)


def sliding_window_config(sliding_window, attn_type=S.AttnType.DECODER):
    w = _lib._core().fa_sliding_window_config(int(sliding_window), int(attn_type))
    return (w.left, w.right)


def aot_sliding_window(layer_windows):
    """(enabled, (left, right)) for a list of (left, right) layer windows."""
    n = len(layer_windows)
    arr = (S.fa_window * max(n, 1))(*[S.fa_window(int(a), int(b)) for a, b in layer_windows])
    out = S.fa_window()
    en = ctypes.c_int()
    check(_lib._core().fa_aot_sliding_window(arr if n else None, n, ctypes.byref(out),
                                             ctypes.byref(en)))
    return bool(en.value), (out.left, out.right)


def use_cascade_attention(common_prefix_len, query_lens, num_heads_q, num_heads_kv, num_sms,
                          use_alibi=False, use_sliding_window=False, use_local_attention=False,
                          dcp_world_size=1):
    ql, n, _keep = host_ints(query_lens, "query_lens")
    return bool(_lib._core().fa_use_cascade_attention(
        int(common_prefix_len), ql, n, int(num_heads_q), int(num_heads_kv), int(bool(use_alibi)),
        int(bool(use_sliding_window)), int(bool(use_local_attention)), int(num_sms),
        int(dcp_world_size)))


def cascade_prefix_len(num_common_prefix_blocks, block_size, num_computed_tokens, query_lens,
                       num_heads_q, num_heads_kv, num_sms, dcp_world_size=1, use_alibi=False,
                       use_sliding_window=False, use_local_attention=False, encoder_only=False):
    """fa_cascade_prefix_len: the common prefix length for cascade attention (0 = don't)."""
    nc, n1, k1 = host_ints(num_computed_tokens, "num_computed_tokens")
    ql, n2, k2 = host_ints(query_lens, "query_lens")
    if n1 != n2:
        raise _invalid("cascade_prefix_len: num_computed_tokens has %d entries, query_lens %d"
                       % (n1, n2))
    q = S.fa_cascade_query(int(num_common_prefix_blocks), int(block_size), nc, ql, n1,
                           int(num_heads_q), int(num_heads_kv), int(num_sms), int(dcp_world_size),
                           int(bool(use_alibi)), int(bool(use_sliding_window)),
                           int(bool(use_local_attention)), int(bool(encoder_only)))
    out = ctypes.c_int32()
    check(_lib._core().fa_cascade_prefix_len(ctypes.byref(q), ctypes.byref(out)))
    return out.value


def num_splits_heuristic(total_mblocks, num_sms, num_n_blocks, max_splits):
    return int(_lib._core().fa_num_splits_heuristic(int(total_mblocks), int(num_sms),
                                                    int(num_n_blocks), int(max_splits)))


def plan_splits(backend, cu_seqlens_q, seqused_k, num_heads_q, num_heads_kv, head_size,
                causal=True, window=(-1, -1), max_num_splits=32, batch_invariant=False,
                kv_bytes=2, num_sms=None):
    """fa_plan_splits for the backend's capability block: [S, splits of request 0, ...]."""
    cq, n1, k1 = host_ints(cu_seqlens_q, "cu_seqlens_q")
    sk, n2, k2 = host_ints(seqused_k, "seqused_k")
    if n1 != n2 + 1:
        raise _invalid("plan_splits: cu_seqlens_q has %d entries, seqused_k %d (want n + 1, n)"
                       % (n1, n2))
    caps = backend._ptr.contents.caps
    p = S.fa_split_params(n2, cq, sk, int(num_heads_q), int(num_heads_kv), int(head_size),
                          int(bool(causal)), S.fa_window(*window),
                          int(num_sms if num_sms is not None else backend.info["num_sms"]),
                          int(max_num_splits), int(bool(batch_invariant)), int(kv_bytes),
                          ctypes.pointer(caps))
    plan = (ctypes.c_int32 * (1 + n2))()
    check(_lib._core().fa_plan_splits(ctypes.byref(p), plan, 1 + n2))
    return list(plan)


def dcp_local_seq_len(seq_len, world_size, rank, interleave=1):
    return int(_lib._core().fa_dcp_local_seq_len(int(seq_len), int(world_size), int(rank),
                                                 int(interleave)))


def dcp_local_seq_lens(seq_lens, world_size, rank, interleave=1):
    sl, n, _k = host_ints(seq_lens, "seq_lens")
    out = (ctypes.c_int32 * max(n, 1))()
    check(_lib._core().fa_dcp_local_seq_lens(sl, n, int(world_size), int(rank), int(interleave),
                                             out))
    return list(out)[:n]


def dcp_slot_mapping(block_table, block_size, req_of_token, positions, world_size, rank,
                     interleave=1, max_blocks=None):
    """fa_dcp_slot_mapping over a host block table (a list of equal rows or a 2-D array)."""
    bt, stride, nrows, _k = _host_table(block_table, "block_table")
    rq, n1, k1 = host_ints(req_of_token, "req_of_token")
    ps, n2, k2 = host_ints(positions, "positions")
    if n1 != n2:
        raise _invalid("dcp_slot_mapping: req_of_token has %d entries, positions %d" % (n1, n2))
    out = (ctypes.c_int64 * max(n1, 1))()
    check(_lib._core().fa_dcp_slot_mapping(
        bt, stride, int(max_blocks if max_blocks is not None else stride), int(block_size), rq, ps,
        n1, int(world_size), int(rank), int(interleave), out))
    return list(out)[:n1]


def local_virtual_batches(chunk_size, block_size, query_start_loc, seq_lens, block_table,
                          max_blocks=None):
    """fa_make_local_virtual_batches (chunked local attention) as a dict of lists."""
    qsl, n1, k1 = host_ints(query_start_loc, "query_start_loc")
    sl, n, k2 = host_ints(seq_lens, "seq_lens")
    if n1 != n + 1:
        raise _invalid("local_virtual_batches: query_start_loc has %d entries for %d requests"
                       % (n1, n))
    bt, stride, _rows, k3 = _host_table(block_table, "block_table")
    count = ctypes.c_int32()
    lib = _lib._core()
    check(lib.fa_local_virtual_batches_count(int(chunk_size), qsl, sl, n, ctypes.byref(count)))
    v = max(count.value, 1)
    pages = max(int(chunk_size) // max(int(block_size), 1), 1)
    arrs = [(ctypes.c_int32 * v)(), (ctypes.c_int32 * (v + 1))(), (ctypes.c_int32 * v)(),
            (ctypes.c_int32 * (v * pages))()]
    out = S.fa_local_batches()
    out.seqlens_q, out.cu_seqlens_q, out.seqused_k, out.block_table = [
        ctypes.cast(a, P(ctypes.c_int32)) for a in arrs]
    check(lib.fa_make_local_virtual_batches(
        int(chunk_size), int(block_size), qsl, sl, n, bt, stride,
        int(max_blocks if max_blocks is not None else stride), count.value, ctypes.byref(out)))
    nv = out.num_virtual
    return {"num_virtual": nv, "max_query_len": out.max_query_len,
            "max_seq_len": out.max_seq_len, "pages_per_virtual": out.pages_per_virtual,
            "seqlens_q": list(arrs[0])[:nv], "cu_seqlens_q": list(arrs[1])[:nv + 1],
            "seqused_k": list(arrs[2])[:nv],
            "block_table": list(arrs[3])[:nv * out.pages_per_virtual]}


def _host_table(table, name):
    """A host 2-D int32 table: (pointer, row stride, rows, keep-alive)."""
    iface = getattr(table, "__array_interface__", None)
    if iface is not None and len(iface["shape"]) == 2:
        t = as_tensor(table, name)
        if t.dtype == S.DType.I32 and t.strides[1] == 1:
            return (ctypes.cast(t.data_ptr, P(ctypes.c_int32)), t.strides[0], t.shape[0], t)
        table = table.tolist()
    if hasattr(table, "tolist"):
        table = table.tolist()
    rows = [list(r) for r in table]
    width = len(rows[0]) if rows else 0
    if any(len(r) != width for r in rows):
        raise _invalid("%s: rows of different lengths" % name)
    ptr, _n, keep = host_ints([x for r in rows for x in r], name)
    return ptr, width, len(rows), keep


# --- config -----------------------------------------------------------------------------------

_CONFIG_FIELDS = {}
for _sub, _cls in S.fa_config._fields_:
    for _f in _cls._fields_:
        _CONFIG_FIELDS[_f[0]] = _sub


def config(**fields):
    """An fa_config from flat field names (zero / absent = the default): num_heads_q,
    num_heads_kv, head_size, dtype, hybrid_mamba_f32, block_size, cache_dtype, layout,
    dcp_world_size, dcp_rank, cp_kv_cache_interleave_size, full_cuda_graph,
    max_cudagraph_capture_size, max_num_splits_for_cuda_graph, batch_invariant, max_num_splits,
    max_num_seqs, max_num_batched_tokens, attention_chunk_size, validate."""
    cfg = S.fa_config()
    for k, v in fields.items():
        sub = _CONFIG_FIELDS.get(k)
        if sub is None:
            raise _invalid("config: unknown field %r (known: %s)"
                           % (k, ", ".join(sorted(_CONFIG_FIELDS))))
        setattr(getattr(cfg, sub), k, int(v))
    return cfg


def config_dict(cfg):
    """The flat dict of an fa_config (the inverse of config())."""
    return {k: getattr(getattr(cfg, sub), k) for k, sub in _CONFIG_FIELDS.items()}


def _as_config(cfg):
    if cfg is None:
        raise _invalid("config is None")
    if isinstance(cfg, S.fa_config):
        return cfg
    if isinstance(cfg, dict):
        return config(**cfg)
    raise _invalid("config: %s is neither an fa_config nor a dict" % type(cfg).__name__)


def config_resolve(cfg):
    """fa_config_resolve: the config with defaults applied, validated (raises Error)."""
    c = _as_config(cfg)
    out = S.fa_config()
    check(_lib._core().fa_config_resolve(ctypes.byref(c), ctypes.byref(out)))
    return out


def builder_workspace_size(cfg):
    c = _as_config(cfg)
    n = ctypes.c_size_t()
    check(_lib._core().fa_builder_workspace_size(ctypes.byref(c), ctypes.byref(n)))
    return n.value


# --- backend ----------------------------------------------------------------------------------

def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h or None
    raise _invalid("stream: %r is not a stream handle (int, torch.cuda.Stream or a cupy stream)"
                   % (stream,))


class _Closing:
    """close() on leaving a with-block and when collected (errors at collection are dropped)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Backend(_Closing):
    """A flashattn backend (fa_backend *). Make one with Backend.cpu() or Backend.cuda()."""

    def __init__(self, ptr, kind, destroy, device=-1, keep=None):
        self._ptr = ptr
        self._destroy = destroy
        self.kind = kind          # "cpu" or "cuda"
        self.device = device      # CUDA device ordinal (-1 for the CPU)
        self._keep = keep
        self._builders = weakref.WeakSet()

    @classmethod
    def cpu(cls, fail_alloc_at=0, fail_copy_at=0, fail_op=S.Op.RESHAPE_AND_CACHE, fail_op_at=0):
        """The CPU reference backend (host memory). The fail_* arguments are its test hooks
        (fa_cpu_backend_options): the Nth alloc / copy / call of fail_op fails once."""
        lib = _lib._cpu()
        ptr = _lib.BACKEND_P()
        opts = S.fa_cpu_backend_options(int(fail_alloc_at), int(fail_copy_at), int(fail_op),
                                        int(fail_op_at))
        st = lib.fa_cpu_backend_create_ex(ctypes.byref(opts), ctypes.byref(ptr))
        if st != 0:
            raise Error(st, "fa_cpu_backend_create failed (%s)" % status_string(st))
        return cls(ptr, "cpu", lib.fa_cpu_backend_destroy)

    @classmethod
    def cuda(cls, device=0, stream=None):
        """The CUDA backend on `device`, its ops on `stream` (a cudaStream_t as an int, a
        torch.cuda.Stream or a cupy stream; None = the legacy default stream). Raises OSError
        when libflashattn_cuda.so is not found, Error when the device cannot be used."""
        lib = _lib._cuda()
        ptr = _lib.BACKEND_P()
        st = lib.fa_cuda_backend_create(int(device), _stream_handle(stream), ctypes.byref(ptr))
        if st != 0:
            msg = lib.fa_cuda_create_error()
            raise Error(st, (msg.decode() if msg else "") or status_string(st))
        return cls(ptr, "cuda", lib.fa_cuda_backend_destroy, int(device), keep=stream)

    @property
    def _be(self):
        if not self._ptr:
            raise _invalid("backend: used after close()")
        return self._ptr.contents

    @property
    def name(self):
        return self._be.name.decode()

    @property
    def api_version(self):
        return self._be.api_version

    @property
    def info(self):
        i = self._be.info
        return {"name": i.name.decode(errors="replace"), "cc_major": i.cc_major,
                "cc_minor": i.cc_minor, "num_sms": i.num_sms, "smem_per_block": i.smem_per_block,
                "smem_per_sm": i.smem_per_sm}

    @property
    def caps(self):
        """A copy of the capability block (fa_backend_caps)."""
        c = S.fa_backend_caps()
        ctypes.pointer(c)[0] = self._be.caps
        return c

    def tensor_device(self):
        return "cpu" if self.kind == "cpu" else "cuda:%d" % self.device

    def synchronize(self):
        fn = self._be.ops.synchronize
        if fn:
            self._op_status("synchronize", fn(self._be.ctx))

    def set_cpu_options(self, fail_alloc_at=0, fail_copy_at=0, fail_op=S.Op.RESHAPE_AND_CACHE,
                        fail_op_at=0):
        """Re-arms the CPU backend's test hooks (fa_cpu_backend_set_options)."""
        opts = S.fa_cpu_backend_options(int(fail_alloc_at), int(fail_copy_at), int(fail_op),
                                        int(fail_op_at))
        check(_lib._cpu().fa_cpu_backend_set_options(self._ptr, ctypes.byref(opts)))

    def _op_status(self, op, st):
        if st != 0:
            detail = ""
            le = self._be.ops.last_error
            if le:
                d = le(self._be.ctx)
                detail = d.decode() if d else ""
            raise Error(st, "backend '%s' op '%s' failed (%s): %s"
                        % (self.name, op, status_string(st), detail))

    def _run_op(self, op, args):
        fn = getattr(self._be.ops, op)
        if not fn:
            raise Error(S.Status.ERR_UNSUPPORTED, "backend '%s' does not implement op '%s'"
                        % (self.name, op))
        self._op_status(op, fn(self._be.ctx, ctypes.byref(args)))

    def check_op(self, op, args):
        """ops.check(ctx, op, args): the op's checks without running it (raises Error)."""
        fn = self._be.ops.check
        if fn:
            st = fn(self._be.ctx, int(op), ctypes.cast(ctypes.byref(args), ctypes.c_void_p))
            self._op_status("check " + S.Op(op).name.lower(), st)

    def close(self):
        """Destroys the backend, after the builders still open on it."""
        if getattr(self, "_ptr", None):
            for b in list(self._builders):
                b.close()
            self._destroy(self._ptr)
            self._ptr = _lib.BACKEND_P()

    def __repr__(self):
        return "Backend(%s)" % (self.name if self._ptr else "closed")

    # the ops, as methods too
    def reshape_and_cache(self, *a, **kw):
        return reshape_and_cache(self, *a, **kw)

    def attention(self, *a, **kw):
        return attention(self, *a, **kw)

    def merge_states(self, *a, **kw):
        return merge_states(self, *a, **kw)

    def dcp_correct(self, *a, **kw):
        return dcp_correct(self, *a, **kw)


def _on_backend(backend, t, name):
    """t (a Tensor or None) must live where the backend runs."""
    if t is None:
        return
    want = backend.tensor_device()
    if backend.kind == "cpu" and t.device != "cpu":
        raise _invalid("%s: is on %s, but the backend '%s' reads host memory" % (name, t.device,
                                                                                backend.name))
    if backend.kind == "cuda" and t.device != want:
        raise _invalid("%s: is on %s, but the backend '%s' runs on %s"
                       % (name, t.device, backend.name, want))


def _device_ints(backend, obj, name, dtype, rank=1):
    """An int32 / int64 array the backend's ops read ("device" memory: host for the CPU
    backend). Returns (pointer, shape, strides, keep-alive)."""
    if obj is None:
        return None, (), (), None
    if isinstance(obj, range):
        obj = list(obj)
    if isinstance(obj, (list, tuple)):
        if backend.kind != "cpu":
            raise _invalid("%s: is a host list, but the backend '%s' reads device memory: pass a "
                           "device tensor" % (name, backend.name))
        if rank == 2:
            ptr, stride, rows, keep = _host_table(obj, name)
            return ctypes.cast(ptr, ctypes.c_void_p).value, (rows, stride), (stride, 1), keep
        ctype = ctypes.c_int32 if dtype == S.DType.I32 else ctypes.c_int64
        ptr, n, keep = host_ints(obj, name, ctype)
        return ctypes.cast(ptr, ctypes.c_void_p).value, (n,), (1,), keep
    t = as_tensor(obj, name)
    _on_backend(backend, t, name)
    if t.dtype != dtype or t.raw_u8:
        if backend.kind == "cpu" and hasattr(obj, "tolist"):
            return _device_ints(backend, obj.tolist(), name, dtype, rank)
        raise _invalid("%s: dtype %s, want %s" % (name, t.dtype.name.lower(), dtype.name.lower()))
    if len(t.shape) != rank:
        raise _invalid("%s: rank %d, want %d" % (name, len(t.shape), rank))
    if t.strides[-1] != 1 and t.shape[-1] > 1:
        raise _invalid("%s: last stride %d, want 1 (contiguous rows)" % (name, t.strides[-1]))
    return t.data_ptr, t.shape, t.strides, t


# --- DCP comms -------------------------------------------------------------------------------

class FakeCommGroup(_Closing):
    """The CPU backend's in-process DCP group (fa_fake_comm): world_size comms whose collectives
    meet between threads of this process. Give comm(r) to rank r's Builder and drive each rank's
    fa_forward from its own thread (ctypes releases the GIL during the call, so the ranks meet).
    A rank that waits timeout_ms for its peers fails, and so does the group."""

    def __init__(self, world_size, timeout_ms=None):
        self._lib = _lib._cpu()
        self._comms = P(S.fa_comm)()
        check(self._lib.fa_fake_comm_group_create(int(world_size), ctypes.byref(self._comms)))
        self.world_size = int(world_size)
        if timeout_ms is not None:
            check(self._lib.fa_fake_comm_group_set_timeout(self._comms, int(timeout_ms)))

    def comm(self, rank):
        """The fa_comm * of rank `rank`."""
        if not self._comms:
            raise _invalid("FakeCommGroup: used after close()")
        if not 0 <= rank < self.world_size:
            raise _invalid("FakeCommGroup.comm: rank %d is outside [0, %d)" % (rank,
                                                                              self.world_size))
        p = ctypes.pointer(self._comms[rank])
        p._group = self  # a builder holding the pointer keeps the group alive
        return p

    @property
    def aborted(self):
        return bool(self._lib.fa_fake_comm_aborted(self._comms))

    def reset(self):
        check(self._lib.fa_fake_comm_group_reset(self._comms))

    def close(self):
        if getattr(self, "_comms", None):
            self._lib.fa_fake_comm_group_destroy(self._comms)
            self._comms = P(S.fa_comm)()



# --- batch, builder, metadata -----------------------------------------------------------------

class Batch:
    """One scheduler step (fa_batch). query_start_loc and seq_lens are host int32 arrays (lists,
    NumPy arrays); block_table [num_reqs, max_blocks] int32 and slot_mapping [T] int64 are read
    by the backend (device tensors, or host arrays / lists for the CPU backend);
    block_table_host is the host mirror needed for chunked local attention."""

    def __init__(self, backend, query_start_loc, seq_lens, block_table=None, slot_mapping=None,
                 block_table_host=None, max_blocks=0, causal=S.Causal.AUTO, num_actual_tokens=0,
                 block_table_stride=None):
        b = S.fa_batch()
        keep = []
        qsl, nq, k = host_ints(query_start_loc, "query_start_loc")
        keep.append(k)
        sl, ns, k = host_ints(seq_lens, "seq_lens")
        keep.append(k)
        if nq != ns + 1:
            raise _invalid("batch: query_start_loc has %d entries for %d requests (seq_lens); "
                           "want num_reqs + 1" % (nq, ns))
        b.num_reqs = ns
        b.num_actual_tokens = int(num_actual_tokens)
        b.query_start_loc = ctypes.cast(qsl, ctypes.c_void_p)
        b.seq_lens = ctypes.cast(sl, ctypes.c_void_p)
        if block_table is not None:
            ptr, shape, strides, k = _device_ints(backend, block_table, "block_table",
                                                  S.DType.I32, rank=2)
            keep.append(k)
            b.block_table = ptr
            b.block_table_stride = int(block_table_stride if block_table_stride is not None
                                       else strides[0])
            b.max_blocks = int(max_blocks or shape[1])
        if block_table_host is not None:
            ptr, stride, _rows, k = _host_table(block_table_host, "block_table_host")
            keep.append(k)
            b.block_table_host = ctypes.cast(ptr, ctypes.c_void_p)
            if block_table is None:
                b.block_table_stride = stride
        if slot_mapping is not None:
            ptr, _shape, _st, k = _device_ints(backend, slot_mapping, "slot_mapping", S.DType.I64)
            keep.append(k)
            b.slot_mapping = ptr
        b.causal = int(causal)
        self.ct = b
        self.backend = backend
        self._keep = keep

    @property
    def num_reqs(self):
        return self.ct.num_reqs


class Metadata:
    """A build's fa_metadata; valid until the next build() of its builder. Keeps the batch's
    arrays alive (the metadata points at its block table and slot mapping)."""

    def __init__(self, builder, md, batch):
        self.ct = md
        self.builder = builder
        self._batch = batch

    def __getattr__(self, name):
        if name.startswith("_") or name in ("ct", "builder"):
            raise AttributeError(name)
        if name in dict(S.fa_metadata._fields_):
            return getattr(self.ct, name)
        raise AttributeError(name)

    def describe(self):
        """fa_metadata_describe: the plan of this step, as text."""
        lib = _lib._core()
        need = ctypes.c_size_t()
        check(lib.fa_metadata_describe(ctypes.byref(self.ct), None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(max(need.value, 1))
        check(lib.fa_metadata_describe(ctypes.byref(self.ct), buf, len(buf), None))
        return buf.value.decode()

    def __repr__(self):
        return "Metadata(num_reqs=%d, tokens=%d, generation=%d)" % (
            self.ct.num_reqs, self.ct.num_actual_tokens, self.ct.generation)


class Builder(_Closing):
    """fa_builder: one per KV-cache group. config: an fa_config, a dict of config() fields, or
    config() fields as keywords. comm: this rank's fa_comm (FakeCommGroup.comm(rank)) when
    dcp_world_size > 1, else None."""

    def __init__(self, backend, cfg=None, comm=None, **fields):
        if cfg is None:
            cfg = config(**fields)
        elif fields:
            raise _invalid("Builder: pass a config or its fields as keywords, not both")
        c = _as_config(cfg)
        if not isinstance(backend, Backend):
            raise _invalid("Builder: backend is %s, not a Backend" % type(backend).__name__)
        self._h = ctypes.c_void_p()
        self.backend = backend
        self._comm = comm
        if comm is not None and not isinstance(comm, P(S.fa_comm)):
            raise _invalid("Builder: comm is %s, not an fa_comm pointer (FakeCommGroup.comm(r))"
                           % type(comm).__name__)
        check(_lib._core().fa_builder_create(backend._ptr, ctypes.byref(c), comm,
                                             ctypes.byref(self._h)))
        backend._builders.add(self)
        self._layers = None

    @property
    def handle(self):
        if not self._h:
            raise _invalid("builder: used after close()")
        return self._h

    @property
    def config(self):
        """The resolved configuration as a flat dict."""
        return config_dict(_lib._core().fa_builder_config(self.handle).contents)

    def layer(self, **fields):
        """Layer.from_config(this builder's config, **fields)."""
        return Layer.from_config(self, **fields)

    def set_layers(self, layers):
        """fa_builder_set_layers: the layers that will run this builder's metadata."""
        layers = list(layers)
        arr = (S.fa_layer * max(len(layers), 1))()
        for i, l in enumerate(layers):
            if not isinstance(l, Layer):
                raise _invalid("set_layers: layers[%d] is %s, not a Layer" % (i, type(l).__name__))
            arr[i] = l.ct
        check(_lib._core().fa_builder_set_layers(self.handle, arr if layers else None,
                                                 len(layers)))
        self._layers = layers

    def _batch(self, batch, kw):
        if batch is None:
            return Batch(self.backend, **kw)
        if kw:
            raise _invalid("pass a Batch or its fields as keywords, not both")
        if not isinstance(batch, Batch):
            raise _invalid("batch: %s is not a Batch" % type(batch).__name__)
        return batch

    def cascade_prefix_len(self, num_common_prefix_blocks, batch=None, **kw):
        """fa_builder_cascade_prefix_len: the prefix length that cascade would use, or 0."""
        b = self._batch(batch, kw)
        out = ctypes.c_int32()
        check(_lib._core().fa_builder_cascade_prefix_len(self.handle, ctypes.byref(b.ct),
                                                         int(num_common_prefix_blocks),
                                                         ctypes.byref(out)))
        return out.value

    def build(self, batch=None, common_prefix_len=0, **kw):
        """fa_builder_build: plans the step -> Metadata (valid until the next build)."""
        b = self._batch(batch, kw)
        md = S.fa_metadata()
        check(_lib._core().fa_builder_build(self.handle, ctypes.byref(b.ct), int(common_prefix_len),
                                            ctypes.byref(md)))
        return Metadata(self, md, b)

    def close(self):
        if getattr(self, "_h", None):
            _lib._core().fa_builder_destroy(self._h)
            self._h = ctypes.c_void_p()



def describe(md):
    return md.describe()


# --- layer ------------------------------------------------------------------------------------

def _float_array(obj, name):
    """A float32 array a layer points at (ALiBi slopes, sinks): (address, count, keep-alive,
    device)."""
    if obj is None:
        return None, 0, None, None
    if isinstance(obj, (list, tuple)):
        arr = (ctypes.c_float * len(obj))(*[float(x) for x in obj])
        return ctypes.addressof(arr), len(obj), arr, "cpu"
    t = as_tensor(obj, name)
    if t.dtype != S.DType.F32 or len(t.shape) != 1 or (t.shape[0] > 1 and t.strides[0] != 1):
        raise _invalid("%s: want a contiguous 1-D float32 array, got %s %s" % (
            name, t.dtype.name.lower(), t.shape))
    return t.data_ptr, t.shape[0], t, t.device


_LAYER_FIELDS = [f[0] for f in S.fa_layer_desc._fields_]


class Layer:
    """A validated attention layer (fa_layer_init). Fields are fa_layer_desc's (zero = default);
    alibi_slopes and sinks are float32 arrays [num_heads_q] where the backend reads them
    (device tensors, or host arrays / lists for the CPU backend). Layer.from_config (or
    Builder.layer) takes the model's shape from a config instead."""

    def __init__(self, num_heads_q, head_size, num_heads_kv=0, scale=0.0, dtype=S.DType.BF16,
                 attn_type=S.AttnType.DECODER, sliding_window=0, logits_soft_cap=0.0,
                 alibi_slopes=None, sinks=None, kv_cache_dtype=S.CacheDType.AUTO, k_scale=0.0,
                 v_scale=0.0, kv_sharing=False, attention_chunk_size=0, dcp_world_size=0):
        d = self._desc(num_heads_q=num_heads_q, head_size=head_size, num_heads_kv=num_heads_kv,
                       scale=scale, dtype=dtype, attn_type=attn_type,
                       sliding_window=sliding_window, logits_soft_cap=logits_soft_cap,
                       alibi_slopes=alibi_slopes, sinks=sinks, kv_cache_dtype=kv_cache_dtype,
                       k_scale=k_scale, v_scale=v_scale, kv_sharing=kv_sharing,
                       attention_chunk_size=attention_chunk_size, dcp_world_size=dcp_world_size)
        self.ct = S.fa_layer()
        check(_lib._core().fa_layer_init(ctypes.byref(self.ct), ctypes.byref(d)))

    @classmethod
    def from_config(cls, cfg, **fields):
        """fa_layer_init_from_config: the layer's heads, head size, dtype, cache dtype, DCP size
        and chunk size from cfg (an fa_config, a dict of config() fields, or a Builder: its
        resolved config); the keyword fields (fa_layer_desc's) override or add to them."""
        if isinstance(cfg, Builder):
            cfg = _lib._core().fa_builder_config(cfg.handle).contents
        c = _as_config(cfg)
        fn = getattr(_lib._core(), "fa_layer_init_from_config", None)
        if fn is None:
            raise Error(S.Status.ERR_UNSUPPORTED, "Layer.from_config: this libflashattn has no "
                        "fa_layer_init_from_config")
        self = cls.__new__(cls)
        d = self._desc(**fields)
        self.ct = S.fa_layer()
        check(fn(ctypes.byref(self.ct), ctypes.byref(c), ctypes.byref(d)))
        return self

    def _desc(self, alibi_slopes=None, sinks=None, **fields):
        d = S.fa_layer_desc()
        for k, v in fields.items():
            if k not in _LAYER_FIELDS or k in ("alibi_slopes", "sinks", "num_alibi_slopes",
                                               "num_sinks"):
                raise _invalid("Layer: unknown field %r" % k)
            setattr(d, k, float(v) if isinstance(getattr(d, k), float) else int(v))
        a_ptr, a_n, a_keep, a_dev = _float_array(alibi_slopes, "alibi_slopes")
        s_ptr, s_n, s_keep, s_dev = _float_array(sinks, "sinks")
        d.alibi_slopes, d.num_alibi_slopes = a_ptr, a_n
        d.sinks, d.num_sinks = s_ptr, s_n
        self._keep = (a_keep, s_keep)
        self._devices = {"alibi_slopes": a_dev, "sinks": s_dev}
        return d

    @property
    def desc(self):
        """The resolved fa_layer_desc as a dict (defaults applied)."""
        return {f: getattr(self.ct.desc, f) for f in _LAYER_FIELDS
                if f not in ("alibi_slopes", "sinks")}

    @property
    def window(self):
        return (self.ct.window.left, self.ct.window.right)

    @property
    def scale(self):
        return self.ct.scale

    @property
    def dtype(self):
        return S.DType(self.ct.desc.dtype)

    @property
    def cache_dtype(self):
        """The storage dtype of this layer's cache."""
        return cache_storage_dtype(self.ct.desc.kv_cache_dtype, self.ct.desc.dtype)

    def _check_backend(self, backend):
        want = backend.tensor_device()
        for name, dev in self._devices.items():
            if dev is not None and dev != want:
                raise _invalid("layer %s: are on %s, but the backend '%s' reads %s"
                               % (name, dev, backend.name, want))


# --- forward ----------------------------------------------------------------------------------

def _tensor(backend, obj, name, dtype=None):
    t = as_tensor(obj, name)
    if t is not None:
        _on_backend(backend, t, name)
        if dtype is not None and t.raw_u8:
            t = t.with_dtype(dtype)
    return t


def _ptr(t):
    return ctypes.byref(t.ct) if t is not None else None


def _check_forward_args(layer, backend, md):
    if not isinstance(layer, Layer):
        raise _invalid("layer: %s is not a Layer" % type(layer).__name__)
    if not isinstance(backend, Backend):
        raise _invalid("backend: %s is not a Backend" % type(backend).__name__)
    if md is not None and not isinstance(md, Metadata):
        raise _invalid("md: %s is not a Metadata" % type(md).__name__)
    layer._check_backend(backend)


def forward(layer, backend, q, k, v, kv_cache, md, out):
    """fa_forward: one attention layer for one step. q/out [T_pad, Hq, D], k/v [T_pad, Hkv, D]
    (None for both on a kv_sharing or cross-attention decode step), kv_cache
    [2, num_blocks, block_size, Hkv, D] (uint8 storage for an fp8 cache is read as the layer's
    format), md from the latest build() of its builder. Writes the first T rows of out."""
    _check_forward_args(layer, backend, md)
    if md is None:
        raise _invalid("forward: md is None (the profiling run is forward_profile)")
    tq = _tensor(backend, q, "q")
    tk = _tensor(backend, k, "k")
    tv = _tensor(backend, v, "v")
    tc = _tensor(backend, kv_cache, "kv_cache", layer.cache_dtype)
    to = _tensor(backend, out, "out")
    check(_lib._core().fa_forward(ctypes.byref(layer.ct), backend._ptr, _ptr(tq), _ptr(tk),
                                  _ptr(tv), _ptr(tc), ctypes.byref(md.ct), _ptr(to)))


def forward_profile(layer, backend, out):
    """fa_forward_profile: the profiling run; zeroes every row of out [T_pad, Hq, D]."""
    _check_forward_args(layer, backend, None)
    to = _tensor(backend, out, "out")
    check(_lib._core().fa_forward_profile(ctypes.byref(layer.ct), backend._ptr, _ptr(to)))


# --- the ops ----------------------------------------------------------------------------------

def _need(t, name, rank):
    if t is None:
        raise _invalid("%s is None" % name)
    if len(t.shape) != rank:
        raise _invalid("%s: rank %d, want %d %s" % (name, len(t.shape), rank, {
            3: "[tokens, heads, head_size]", 2: "[heads, tokens]",
            5: "[2, num_blocks, block_size, num_heads_kv, head_size]",
            4: "[num_blocks, block_size, num_heads_kv, head_size]"}.get(rank, "")))
    return t


def _contiguous(t):
    want = 1
    for d, st in zip(reversed(t.shape), reversed(t.strides)):
        if d > 1 and st != want:
            return False
        want *= d
    return True


def _need_lse(t, name, heads, tokens, must=True):
    if t is None:
        if must:
            raise _invalid("%s is None" % name)
        return None, 0
    _need(t, name, 2)
    if t.dtype != S.DType.F32:
        raise _invalid("%s: dtype %s, want f32" % (name, t.dtype.name.lower()))
    if t.shape[0] < heads or t.shape[1] < tokens or (t.strides[1] != 1 and t.shape[1] > 1):
        raise _invalid("%s: shape %s strides %s, want [>= %d heads, >= %d tokens] with stride 1 "
                       "over tokens" % (name, t.shape, t.strides, heads, tokens))
    return t.data_ptr, t.strides[0]


def reshape_and_cache(backend, key, value, kv_cache, slot_mapping, k_scale=1.0, v_scale=1.0,
                      num_tokens=None):
    """The KV-cache write (ops.reshape_and_cache): for t < num_tokens with s = slot_mapping[t]
    >= 0, kv_cache[0][s // bs, s % bs] = key[t] and kv_cache[1][...] = value[t]. key/value
    [T, Hkv, D] with heads packed; kv_cache [2, num_blocks, block_size, Hkv, D] (uint8 =
    E4M3 storage unless given as a Tensor of another fp8 dtype); slot_mapping int64 [T]."""
    tk = _need(_tensor(backend, key, "key"), "key", 3)
    tv = _need(_tensor(backend, value, "value"), "value", 3)
    tc = _need(_tensor(backend, kv_cache, "kv_cache"), "kv_cache", 5)
    t = int(num_tokens if num_tokens is not None else tk.shape[0])
    sm, sm_shape, _st, keep = _device_ints(backend, slot_mapping, "slot_mapping", S.DType.I64)
    if sm is None or sm_shape[0] < t:
        raise _invalid("slot_mapping: %s entries for %d tokens" % (sm_shape[0] if sm else 0, t))
    for nm, x in (("key", tk), ("value", tv)):
        if x.shape[0] < t or x.strides[2] != 1 or (x.shape[1] > 1 and x.strides[1] != x.shape[2]):
            raise _invalid("%s: shape %s strides %s: want [>= %d, Hkv, D] with heads packed "
                           "(head stride D, last stride 1)" % (nm, x.shape, x.strides, t))
    a = S.fa_cache_write_args()
    a.key, a.value = tk.data_ptr, tv.data_ptr
    a.key_token_stride, a.value_token_stride = tk.strides[0], tv.strides[0]
    a.kv_dtype = tk.ct.dtype
    esize = dtype_size(tc.dtype)
    a.key_cache = tc.data_ptr
    a.value_cache = tc.data_ptr + tc.strides[0] * esize if tc.data_ptr else None
    a.cache_block_stride, a.cache_row_stride, a.cache_head_stride = tc.strides[1:4]
    a.cache_dtype = tc.ct.dtype
    a.slot_mapping = sm
    a.num_blocks = tc.shape[1]
    a.num_tokens, a.num_heads_kv, a.head_size = t, tk.shape[1], tk.shape[2]
    a.block_size = tc.shape[2]
    a.k_scale, a.v_scale = float(k_scale), float(v_scale)
    backend._run_op("reshape_and_cache", a)


def merge_states(backend, out, prefix_out, prefix_lse, suffix_out, suffix_lse, out_lse=None):
    """ops.merge_states: out [T, H, D] = the LSE-weighted merge of two partial attentions
    (prefix_out / suffix_out [T, H, D], their LSEs float32 [H, T]); out_lse [H, T] optional."""
    to = _need(_tensor(backend, out, "out"), "out", 3)
    tp = _need(_tensor(backend, prefix_out, "prefix_out"), "prefix_out", 3)
    ts = _need(_tensor(backend, suffix_out, "suffix_out"), "suffix_out", 3)
    n, h, d = to.shape
    a = S.fa_merge_args()
    a.out, a.out_token_stride, a.out_head_stride = to.data_ptr, to.strides[0], to.strides[1]
    a.out_lse, a.out_lse_head_stride = _need_lse(_tensor(backend, out_lse, "out_lse"), "out_lse",
                                                 h, n, must=False)
    a.prefix_out, a.prefix_token_stride, a.prefix_head_stride = tp.data_ptr, *tp.strides[:2]
    a.prefix_lse, a.prefix_lse_head_stride = _need_lse(
        _tensor(backend, prefix_lse, "prefix_lse"), "prefix_lse", h, n)
    a.suffix_out, a.suffix_token_stride, a.suffix_head_stride = ts.data_ptr, *ts.strides[:2]
    a.suffix_lse, a.suffix_lse_head_stride = _need_lse(
        _tensor(backend, suffix_lse, "suffix_lse"), "suffix_lse", h, n)
    a.dtype = to.ct.dtype
    a.num_tokens, a.num_heads, a.head_size = n, h, d
    for nm, x in (("prefix_out", tp), ("suffix_out", ts)):
        if x.shape[0] < n or x.shape[1:] != (h, d) or x.dtype != to.dtype:
            raise _invalid("%s: %s %s, want %s [>= %d, %d, %d] like out" % (
                nm, x.dtype.name.lower(), x.shape, to.dtype.name.lower(), n, h, d))
    backend._run_op("merge_states", a)


def dcp_correct(backend, out, lse_all, rank, lse_out=None):
    """ops.dcp_correct (in place): out [T, H, D] *= exp(lse_all[rank] - L) with L the LSE over
    the world_size ranks of lse_all [world_size, H, T] (contiguous float32)."""
    to = _need(_tensor(backend, out, "out"), "out", 3)
    tl = _need(_tensor(backend, lse_all, "lse_all"), "lse_all", 3)
    n, h, d = to.shape
    if tl.dtype != S.DType.F32 or tl.shape[1:] != (h, n):
        raise _invalid("lse_all: %s %s, want f32 [world_size, %d, %d]" % (
            tl.dtype.name.lower(), tl.shape, h, n))
    a = S.fa_dcp_correct_args()
    a.out, a.out_token_stride, a.out_head_stride = to.data_ptr, to.strides[0], to.strides[1]
    a.dtype = to.ct.dtype
    a.lse_all = tl.data_ptr
    lo = _tensor(backend, lse_out, "lse_out")
    if lo is not None:
        _need_lse(lo, "lse_out", h, n)
    a.lse_out = lo.data_ptr if lo is not None else None
    a.world_size, a.rank, a.num_tokens, a.num_heads, a.head_size = tl.shape[0], int(rank), n, h, d
    backend._run_op("dcp_correct", a)


def attention(backend, q, k, v, out, cu_seqlens_q, max_seqlen_q, max_seqlen_k, seqused_k=None,
              block_table=None, cu_seqlens_k=None, causal=False, window=(-1, -1),
              softmax_scale=None, softcap=0.0, alibi_slopes=None, sinks=None, lse=None,
              k_scale=1.0, v_scale=1.0, min_seqlen_q=0, num_tokens=None, num_splits=1,
              split_plan=None, split_out=None, split_lse=None, q_descale=None):
    """ops.attention: varlen attention of q [T, Hq, D] over a paged cache (k / v
    [num_blocks, block_size, Hkv, D] with seqused_k [B] and block_table [B, *]) or dense keys
    (k / v [total_k, Hkv, D] with cu_seqlens_k [B + 1]); out [T, Hq, D]; lse float32 [Hq, T]
    optional. cu_seqlens_q [B + 1]. The int arrays are where the backend reads them. Split-KV:
    num_splits S > 1 with split_plan (int32 [1 + B], fa_plan_splits' layout; None = S for all)
    and the float32 workspaces split_out [S, T, Hq, D] and split_lse [S, Hq, T]. An fp8 query
    (q as uint8 / float8_e4m3fn, with an E4M3 cache; backends that take it) writes out in out's
    dtype, scaled by q_descale (float32 [B, Hkv], None = 1)."""
    tq = _need(_tensor(backend, q, "q"), "q", 3)
    to = _need(_tensor(backend, out, "out"), "out", 3)
    paged = block_table is not None
    tk = _tensor(backend, k, "k")
    tv = _tensor(backend, v, "v")
    _need(tk, "k", 4 if paged else 3)
    _need(tv, "v", 4 if paged else 3)
    if tv.dtype != tk.dtype:
        raise _invalid("v: dtype %s, k's is %s" % (tv.dtype.name.lower(), tk.dtype.name.lower()))
    keep = []
    cq, cq_shape, _s, kk = _device_ints(backend, cu_seqlens_q, "cu_seqlens_q", S.DType.I32)
    keep.append(kk)
    nseq = cq_shape[0] - 1 if cq is not None else 0
    a = S.fa_attn_args()
    t = int(num_tokens if num_tokens is not None else tq.shape[0])
    hq, d = tq.shape[1], tq.shape[2]
    a.q, a.q_token_stride, a.q_head_stride = tq.data_ptr, tq.strides[0], tq.strides[1]
    a.q_group_stride, a.q_head_group = 0, 0
    a.q_dtype = tq.ct.dtype
    a.k, a.v = tk.data_ptr, tv.data_ptr
    if paged:
        a.k_block_stride, a.k_row_stride, a.k_head_stride = tk.strides[:3]
        a.v_block_stride, a.v_row_stride, a.v_head_stride = tv.strides[:3]
        hkv, block_size, num_blocks = tk.shape[2], tk.shape[1], tk.shape[0]
    else:
        a.k_row_stride, a.k_head_stride = tk.strides[:2]
        a.v_row_stride, a.v_head_stride = tv.strides[:2]
        hkv, block_size, num_blocks = tk.shape[1], 0, 0
    a.kv_dtype = tk.ct.dtype
    a.out, a.out_token_stride, a.out_head_stride = to.data_ptr, to.strides[0], to.strides[1]
    a.lse, a.lse_head_stride = _need_lse(_tensor(backend, lse, "lse"), "lse", hq, t, must=False)
    a.cu_seqlens_q = cq
    if paged:
        sk, sk_shape, _s, kk = _device_ints(backend, seqused_k, "seqused_k", S.DType.I32)
        keep.append(kk)
        bt, _bshape, bstrides, kk = _device_ints(backend, block_table, "block_table", S.DType.I32,
                                                 rank=2)
        keep.append(kk)
        a.seqused_k, a.block_table, a.block_table_stride = sk, bt, bstrides[0]
    else:
        ck, _cs, _s, kk = _device_ints(backend, cu_seqlens_k, "cu_seqlens_k", S.DType.I32)
        keep.append(kk)
        a.cu_seqlens_k = ck
        a.num_keys = tk.shape[0]  # the rows of k and v
    a.num_blocks = num_blocks
    a.num_seqs, a.num_tokens = nseq, t
    a.max_seqlen_q, a.max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
    a.min_seqlen_q = int(min_seqlen_q)
    a.num_heads_q, a.num_heads_kv, a.head_size, a.block_size = hq, hkv, d, block_size
    a.softmax_scale = float(softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d))
    a.softcap = float(softcap)
    a.causal = int(bool(causal))
    a.window_left, a.window_right = int(window[0]), int(window[1])
    for nm, arr in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        ptr, cnt, kk, dev = _float_array(arr, nm)
        keep.append(kk)
        if ptr is not None:
            if dev != backend.tensor_device():
                raise _invalid("%s: on %s, the backend reads %s"
                               % (nm, dev, backend.tensor_device()))
            if cnt != hq:
                raise _invalid("%s: %d values for %d query heads" % (nm, cnt, hq))
        setattr(a, nm, ptr)
    a.k_scale, a.v_scale = float(k_scale), float(v_scale)
    a.out_dtype = to.ct.dtype  # read only with an fp8 query (out has q's dtype otherwise)
    if q_descale is not None:
        qd = _tensor(backend, q_descale, "q_descale")
        if (qd.dtype != S.DType.F32 or len(qd.shape) != 2 or qd.shape[1] != hkv
                or qd.shape[0] < nseq):
            raise _invalid("q_descale: want float32 [num_seqs %d, Hkv %d], got %s %s"
                           % (nseq, hkv, qd.dtype.name.lower(), list(qd.shape)))
        a.q_descale = qd.data_ptr
        a.descale_batch_stride, a.descale_head_stride = qd.strides
        keep.append(qd)
    a.num_splits = int(num_splits)
    if num_splits > 1:
        sp, sp_shape, _s, kk = _device_ints(backend, split_plan, "split_plan", S.DType.I32)
        keep.append(kk)
        if sp is not None and sp_shape[0] < 1 + nseq:
            raise _invalid("split_plan: %d entries for %d sequences (want 1 + num_seqs)"
                           % (sp_shape[0], nseq))
        so = _tensor(backend, split_out, "split_out")
        sl = _tensor(backend, split_lse, "split_lse")
        for nm, x, shape in (("split_out", so, (num_splits, t, hq, d)),
                             ("split_lse", sl, (num_splits, hq, t))):
            if x is None or x.dtype != S.DType.F32 or x.shape != shape or not _contiguous(x):
                raise _invalid("%s: want a contiguous float32 workspace %s for num_splits %d, "
                               "got %s" % (nm, list(shape), num_splits,
                                           "None" if x is None else "%s %s" % (
                                               x.dtype.name.lower(), list(x.shape))))
        a.split_plan, a.split_out, a.split_lse = sp, so.data_ptr, sl.data_ptr
    backend._run_op("attention", a)


# --- CPU backend conversions (exact software conversions, for tests) ----------------------------

def float_to_fp8(x, fmt=S.DType.FP8_E4M3):
    return int(_lib._cpu().fa_cpu_float_to_fp8(float(x), int(fmt)))


def fp8_to_float(v, fmt=S.DType.FP8_E4M3):
    return float(_lib._cpu().fa_cpu_fp8_to_float(int(v), int(fmt)))


def float_to_bf16(x):
    return int(_lib._cpu().fa_cpu_float_to_bf16(float(x)))


def bf16_to_float(v):
    return float(_lib._cpu().fa_cpu_bf16_to_float(int(v)))


def float_to_half(x):
    return int(_lib._cpu().fa_cpu_float_to_half(float(x)))


def half_to_float(v):
    return float(_lib._cpu().fa_cpu_half_to_float(int(v)))
