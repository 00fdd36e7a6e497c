"""DLPack tensors made by hand with ctypes, for the tests of what the bindings refuse: the
dtypes, devices and null data pointers NumPy cannot make. The structures are DLPack's
(dlpack.h: DLDevice, DLDataType, DLTensor, DLManagedTensor); capsule() wraps one in the
"dltensor" capsule a __dlpack__ returns. Nothing here frees what it points at: the callers keep
the structures alive."""
import ctypes


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]  # (a null deleter unless one is set)

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def capsule(managed):
    """The "dltensor" capsule of a DLManagedTensor (kept alive by the caller)."""
    return _capsule_new(ctypes.addressof(managed), b"dltensor", None)
