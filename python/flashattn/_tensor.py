"""Tensor interop: NumPy arrays (__array_interface__), GPU arrays (__cuda_array_interface__:
PyTorch, CuPy, Numba) and anything with __dlpack__ (PyTorch CPU/GPU, CuPy, JAX, NumPy >= 1.22)
become fa_tensor views. The view does not copy: the Tensor keeps the object (and a DLPack
capsule) alive, and the object's memory must stay where it is while flashattn uses it.
"""
import ctypes

from . import _structs as S
from ._errors import Error

# numpy-style type strings (without byte order) -> fa_dtype. u1 (uint8) is the storage of an
# fp8 cache: forward() and reshape_and_cache() read it as the layer's fp8 format.
_TYPESTR = {
    "f2": S.DType.F16,
    "f4": S.DType.F32,
    "i4": S.DType.I32,
    "i8": S.DType.I64,
    "u1": S.DType.FP8_E4M3,
}
# element types NumPy has no type string for (ml_dtypes' dtypes show as <V2 / <V1), by name
_DTYPE_NAMES = {
    "bfloat16": S.DType.BF16,
    "float8_e4m3fn": S.DType.FP8_E4M3,
    "float8_e5m2": S.DType.FP8_E5M2,
}
_RAW_NAMES = ("u1",)
# DLPack (dlpack.h DLDataTypeCode, bits) -> fa_dtype
_DL_DTYPES = {
    (2, 16): S.DType.F16,
    (2, 32): S.DType.F32,
    (4, 16): S.DType.BF16,
    (0, 32): S.DType.I32,
    (0, 64): S.DType.I64,
    (1, 8): S.DType.FP8_E4M3,      # uint8: raw fp8 storage
    (10, 8): S.DType.FP8_E4M3,     # kDLFloat8_e4m3fn
    (12, 8): S.DType.FP8_E5M2,     # kDLFloat8_e5m2
}

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Tensor:
    """A strided view for flashattn: .ct is the fa_tensor; .device is "cpu" or "cuda:N";
    .raw_u8 says the elements are uint8 (fp8 storage whose format the layer decides)."""

    __slots__ = ("ct", "device", "raw_u8", "_keep", "name")

    def __init__(self, ct, device, raw_u8, keep, name):
        self.ct = ct
        self.device = device
        self.raw_u8 = raw_u8
        self._keep = keep
        self.name = name

    @property
    def dtype(self):
        return S.DType(self.ct.dtype)

    @property
    def shape(self):
        return tuple(self.ct.shape[i] for i in range(self.ct.rank))

    @property
    def strides(self):
        """Strides in elements."""
        return tuple(self.ct.stride[i] for i in range(self.ct.rank))

    @property
    def data_ptr(self):
        return self.ct.data or 0

    @property
    def is_cuda(self):
        return self.device.startswith("cuda")

    def with_dtype(self, dtype):
        t = Tensor(S.fa_tensor(), self.device, False, self._keep, self.name)
        ctypes.pointer(t.ct)[0] = self.ct
        t.ct.dtype = int(dtype)
        return t

    def __repr__(self):
        return "Tensor(%s, %s, shape=%s, strides=%s, %s)" % (
            self.name, self.dtype.name, self.shape, self.strides, self.device)


def _bad(name, what):
    return Error(S.Status.ERR_INVALID_ARG, "%s: %s" % (name, what))


def _dtype_from_typestr(typestr, obj, name):
    dt = getattr(obj, "dtype", None)
    dtname = str(getattr(dt, "name", dt)).replace("torch.", "") if dt is not None else ""
    if dtname in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtname], False
    if typestr[0] == ">":
        raise _bad(name, "big-endian data (%s) is not supported" % typestr)
    code = typestr[1:]
    if code in _TYPESTR:
        return _TYPESTR[code], code in _RAW_NAMES
    if code in ("i2", "u2"):  # f16 / bf16 bits, with an explicit dtype (as_tensor(dtype=))
        return S.DType.BF16, False
    raise _bad(name, "element type %s (%s) is not f16, bf16, f32, i32, i64 or uint8"
               % (typestr, dtname or "?"))


def _from_interface(obj, iface, name, device):
    shape = tuple(int(x) for x in iface["shape"])
    typestr = iface["typestr"]
    dtype, raw = _dtype_from_typestr(typestr, obj, name)
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    if iface.get("mask") is not None:
        raise _bad(name, "masked arrays are not supported")
    ptr = iface["data"][0] if iface.get("data") is not None else 0
    strides_b = iface.get("strides")
    if strides_b is None:
        strides = []
        acc = 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= max(d, 1)
        strides = tuple(reversed(strides))
    else:
        strides = []
        for sb in strides_b:
            if itemsize == 0 or sb % itemsize:
                raise _bad(name, "stride of %d bytes is not a whole number of elements" % sb)
            strides.append(sb // itemsize)
        strides = tuple(strides)
    return _make(ptr, dtype, shape, strides, device, raw, (obj,), name)


def _from_dlpack(obj, name):
    try:
        capsule = obj.__dlpack__()
    except TypeError:
        capsule = obj.__dlpack__(stream=None)
    if not _capsule_valid(capsule, b"dltensor"):
        raise _bad(name, "__dlpack__ did not return a 'dltensor' capsule")
    mt = _DLManagedTensor.from_address(_capsule_get(capsule, b"dltensor"))
    t = mt.dl_tensor
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _DL_DTYPES:
        raise _bad(name, "DLPack dtype (code %d, bits %d, lanes %d) is not f16, bf16, f32, i32, "
                   "i64, uint8 or fp8" % (t.dtype.code, t.dtype.bits, t.dtype.lanes))
    dev = t.device.device_type
    if dev in (_KDL_CPU, _KDL_CUDA_HOST):
        device = "cpu"
    elif dev in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        device = "cuda:%d" % t.device.device_id
    else:
        raise _bad(name, "DLPack device type %d is neither CPU nor CUDA" % dev)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        acc, st = 1, []
        for d in reversed(shape):
            st.append(acc)
            acc *= max(d, 1)
        strides = tuple(reversed(st))
    ptr = (t.data or 0) + t.byte_offset
    # the capsule stays unconsumed and referenced: its destructor calls the producer's deleter
    # once this Tensor is gone
    return _make(ptr, _DL_DTYPES[key], shape, strides, device, key == (1, 8), (obj, capsule), name)


def _make(ptr, dtype, shape, strides, device, raw, keep, name):
    if len(shape) > S.MAX_RANK:
        raise _bad(name, "rank %d is more than %d" % (len(shape), S.MAX_RANK))
    ct = S.fa_tensor()
    ct.data = ptr or None
    ct.dtype = int(dtype)
    ct.rank = len(shape)
    for i, (d, s) in enumerate(zip(shape, strides)):
        ct.shape[i] = d
        ct.stride[i] = s
    return Tensor(ct, device, raw, keep, name)


def _torch_device(obj):
    dev = getattr(obj, "device", None)
    if dev is None:
        return None
    return str(dev)


def as_tensor(obj, name="tensor", dtype=None):
    """An fa_tensor view of obj: a Tensor (returned as is), a NumPy array, a CUDA array
    (PyTorch, CuPy) or any DLPack producer. dtype (a DType) reinterprets the elements when they
    have the same size (uint16 bits as BF16, uint8 as FP8_E5M2)."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        t = obj
    elif dtype is None and _typestr(obj)[1:] in ("i2", "u2"):
        raise _bad(name, "16-bit integer elements: say what they hold with "
                   "as_tensor(x, dtype=DType.BF16 or DType.F16)")
    elif hasattr(obj, "__array_interface__") and not hasattr(obj, "__cuda_array_interface__"):
        t = _from_interface(obj, obj.__array_interface__, name, "cpu")
    elif _has_cuda_interface(obj):
        try:
            iface = obj.__cuda_array_interface__
        except Exception:  # torch bf16 / fp8: no type string (KeyError); DLPack has one
            iface = None
        if iface is not None:
            dev = _torch_device(obj)
            if dev is None or not dev.startswith("cuda"):
                dev = "cuda:%d" % _cupy_device(obj)
            elif dev == "cuda":
                dev = "cuda:0"
            t = _from_interface(obj, iface, name, dev)
        elif hasattr(obj, "__dlpack__"):
            t = _from_dlpack(obj, name)
        else:
            raise _bad(name, "its __cuda_array_interface__ failed and it has no __dlpack__")
    elif hasattr(obj, "__dlpack__"):
        t = _from_dlpack(obj, name)
    else:
        raise _bad(name, "%s is not an array (no __array_interface__, __cuda_array_interface__ "
                   "or __dlpack__)" % type(obj).__name__)
    if t.name != name:
        t = Tensor(t.ct, t.device, t.raw_u8, t._keep, name)
    if dtype is not None:
        dtype = S.DType(dtype)
        have = S.DType(t.ct.dtype)
        lib_size = {S.DType.BF16: 2, S.DType.F16: 2, S.DType.F32: 4, S.DType.FP8_E4M3: 1,
                    S.DType.FP8_E5M2: 1, S.DType.I32: 4, S.DType.I64: 8}
        src_size = _element_size(obj, have)
        if src_size != lib_size[dtype]:
            raise _bad(name, "cannot view %d-byte elements as %s" % (src_size, dtype.name))
        t = t.with_dtype(dtype)
    return t


def _typestr(obj):
    """The NumPy array interface's type string of obj ("" without one)."""
    iface = getattr(obj, "__array_interface__", None)
    return str(iface.get("typestr", "")) if isinstance(iface, dict) else ""


def _element_size(obj, have):
    dt = getattr(obj, "dtype", None)
    size = getattr(dt, "itemsize", None)
    if isinstance(size, int):
        return size
    return {S.DType.BF16: 2, S.DType.F16: 2, S.DType.F32: 4, S.DType.FP8_E4M3: 1,
            S.DType.FP8_E5M2: 1, S.DType.I32: 4, S.DType.I64: 8}[have]


def _has_cuda_interface(obj):
    try:
        return hasattr(type(obj), "__cuda_array_interface__") and (
            getattr(obj, "is_cuda", True) is not False)
    except Exception:
        return False


def _cupy_device(obj):
    dev = getattr(obj, "device", None)
    return int(getattr(dev, "id", 0) or 0)


# --- host integer arrays (query_start_loc, seq_lens, host block tables) ----------------------

def host_ints(obj, name, ctype=ctypes.c_int32, min_len=None):
    """A host int32 / int64 array for obj (a list, a NumPy or torch CPU array): (pointer, length,
    keep-alive). A C-contiguous array of the right type is used in place, anything else copied."""
    if obj is None:
        return None, 0, None
    want = "i%d" % ctypes.sizeof(ctype)
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None and not hasattr(obj, "__cuda_array_interface__"):
        ts = iface["typestr"]
        contiguous = iface.get("strides") is None or (
            len(iface["shape"]) == 1 and iface["strides"][0] == ctypes.sizeof(ctype))
        if ts[1:] == want and ts[0] in "<|=" and contiguous:
            n = 1
            for d in iface["shape"]:
                n *= int(d)
            return ctypes.cast(iface["data"][0] or 0, ctypes.POINTER(ctype)), n, obj
    if hasattr(obj, "__cuda_array_interface__") and getattr(obj, "is_cuda", True):
        raise _bad(name, "is a GPU array; this argument is host memory")
    if hasattr(obj, "tolist"):
        obj = obj.tolist()
    vals = _flatten(obj)
    try:
        arr = (ctype * len(vals))(*[int(v) for v in vals])
    except (TypeError, ValueError, OverflowError) as e:
        raise _bad(name, "is not a sequence of integers (%s)" % e)
    return ctypes.cast(arr, ctypes.POINTER(ctype)), len(vals), arr


def _flatten(obj):
    out = []
    if isinstance(obj, (list, tuple)):
        for x in obj:
            if isinstance(x, (list, tuple)):
                out.extend(_flatten(x))
            else:
                out.append(x)
        return out
    try:
        return list(obj)
    except TypeError:
        raise _bad("value", "%r is not a sequence" % (obj,))
