"""Finding and loading libdetcoll.so, and the C prototypes (ctypes)."""

import ctypes
import ctypes.util
import os
import pathlib
import sys
import threading

from ._errors import LibraryNotFoundError

ENV_LIB = "DETCOLL_LIB"
UNIQUE_ID_BYTES = 128

_NAMES = ["libdetcoll.so"] + (["libdetcoll.dylib"] if sys.platform == "darwin" else [])


STORE_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
STORE_GET = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_size_t),
)
STORE_ADD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))
STORE_DEL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))


class Store(ctypes.Structure):
    """detcollStore: a caller's key-value store as callbacks."""

    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("set", STORE_SET),
        ("get", STORE_GET),
        ("add", STORE_ADD),
        ("delete", STORE_DEL),
    ]


class UniqueId(ctypes.Structure):
    """detcollUniqueId: 128 opaque bytes."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


def candidates():
    """The paths tried, in order: $DETCOLL_LIB alone when it is set; else
    next to this package, the repository's bin/, ./bin, then the dynamic
    loader's search path."""
    env = os.environ.get(ENV_LIB, "").strip()
    if env:
        return [env]
    here = pathlib.Path(__file__).resolve().parent
    out = []
    for d in (here, here.parent.parent / "bin", pathlib.Path.cwd() / "bin"):
        out += [str(d / n) for n in _NAMES]
    found = ctypes.util.find_library("detcoll")
    out += [found] if found else []
    return out


_lock = threading.Lock()
_lib = None
_path = None


def _declare(lib):
    c_int, c_void_p, c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    P = ctypes.POINTER
    protos = {
        "detcollGetVersion": [P(c_int)],
        "detcollGetUniqueId": [P(UniqueId)],
        "detcollCommInitRank": [P(c_void_p), c_int, UniqueId, c_int],
        "detcollCommInitFromEnv": [P(c_void_p)],
        "detcollCommCount": [c_void_p, P(c_int)],
        "detcollCommUserRank": [c_void_p, P(c_int)],
        "detcollAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
        "detcollAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
        "detcollReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
        "detcollHostAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_void_p],
        "detcollHostAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p],
        "detcollHostReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_void_p],
        "detcollCommInitStore": [P(c_void_p), c_int, c_int, P(Store), ctypes.c_char_p, ctypes.c_int64],
        "detcollHostBroadcast": [c_void_p, c_size_t, c_int, c_int, c_void_p],
        "detcollHostScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
        "detcollHostGather": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
        "detcollHostAllToAllv": [c_void_p, P(c_size_t), P(c_size_t), c_void_p, P(c_size_t), P(c_size_t), c_int, c_void_p],
        "detcollHostSend": [c_void_p, c_size_t, c_int, c_int, c_int, c_void_p],
        "detcollHostRecv": [c_void_p, c_size_t, c_int, c_int, c_int, c_void_p],
        "detcollBarrier": [c_void_p],
        "detcollCommDestroy": [c_void_p],
        "detcollCommAbort": [c_void_p],
    }
    for name, args in protos.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = c_int
    lib.detcollGetErrorString.argtypes = [c_int]
    lib.detcollGetErrorString.restype = ctypes.c_char_p
    lib.detcollGetLastError.argtypes = [c_void_p]
    lib.detcollGetLastError.restype = ctypes.c_char_p


def lib():
    """The loaded library (loaded on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path}: no such file")
                continue
            try:
                handle = ctypes.CDLL(path)
                _declare(handle)
            except (OSError, AttributeError) as e:
                tried.append(f"{path}: {e}")
                continue
            _lib, _path = handle, path
            return _lib
        raise LibraryNotFoundError(
            "cannot load libdetcoll.so (build it with `go build -buildmode=c-shared "
            "-o bin/libdetcoll.so ./capi`, or set DETCOLL_LIB); tried:\n  " + "\n  ".join(tried)
        )


def path():
    """The path of the loaded library (loading it if needed)."""
    lib()
    return _path
