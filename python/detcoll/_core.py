"""Communicators and collectives."""

import atexit
import ctypes
import threading

from . import _dtypes as D
from . import _host, _lib, _torch
from ._errors import InvalidUsageError, error_for

_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER = "all_reduce", "all_gather", "reduce_scatter"
_C_NAMES = {
    _ALL_REDUCE: ("detcollAllReduce", "detcollHostAllReduce"),
    _ALL_GATHER: ("detcollAllGather", "detcollHostAllGather"),
    _REDUCE_SCATTER: ("detcollReduceScatter", "detcollHostReduceScatter"),
}


def _check(rc, function):
    """Raises the exception for a failed call (the calling thread's message)."""
    if rc != 0:
        msg = _lib.lib().detcollGetLastError(None)
        msg = msg.decode("utf-8", "replace") if msg else function
        raise error_for(rc, msg, function)


class Comm:
    """A detcoll communicator: one rank's handle on a group.

    Make one with init() (from the launcher's environment) or
    Comm.from_unique_id(). Collectives are matched across ranks by call
    order: every rank issues the same ones, with the same sizes and dtypes,
    in the same order. Use from one thread at a time (abort() excepted).
    """

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)
        lib = _lib.lib()
        n = ctypes.c_int()
        _check(lib.detcollCommCount(self._h, ctypes.byref(n)), "detcollCommCount")
        self._size = n.value
        _check(lib.detcollCommUserRank(self._h, ctypes.byref(n)), "detcollCommUserRank")
        self._rank = n.value
        self._dead = False

    @classmethod
    def from_env(cls):
        """A new communicator over the whole job (detcollCommInitFromEnv)."""
        h = ctypes.c_void_p()
        _check(_lib.lib().detcollCommInitFromEnv(ctypes.byref(h)), "detcollCommInitFromEnv")
        return cls(h.value)

    @classmethod
    def from_unique_id(cls, unique_id, nranks, rank):
        """Rank `rank` of nranks joining the communicator of unique_id
        (bytes from get_unique_id(), passed to every rank by any means)."""
        uid = bytes(unique_id)
        if len(uid) != _lib.UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id has {_lib.UNIQUE_ID_BYTES} bytes, not {len(uid)}")
        cid = _lib.UniqueId()
        ctypes.memmove(ctypes.addressof(cid), uid, len(uid))
        h = ctypes.c_void_p()
        _check(_lib.lib().detcollCommInitRank(ctypes.byref(h), int(nranks), cid, int(rank)), "detcollCommInitRank")
        return cls(h.value)

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def handle(self):
        """The detcollComm_t, as an int (for C extensions)."""
        return self._h.value

    def destroy(self):
        """Destroys the communicator (detcollCommDestroy)."""
        self._dead = True
        _check(_lib.lib().detcollCommDestroy(self._h), "detcollCommDestroy")

    def abort(self):
        """Destroys it without waiting for peers; a collective blocked in
        another thread raises ClosedError (detcollCommAbort)."""
        self._dead = True
        _check(_lib.lib().detcollCommAbort(self._h), "detcollCommAbort")

    def last_error(self):
        """The last failure recorded on this communicator (by any thread)."""
        msg = _lib.lib().detcollGetLastError(self._h)
        return msg.decode("utf-8", "replace") if msg else ""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._dead:
            self.abort() if exc_type is not None else self.destroy()
        return False

    def __repr__(self):
        state = "destroyed" if self._dead else f"rank {self._rank} of {self._size}"
        return f"<detcoll.Comm {state}>"

    # ---- collectives ------------------------------------------------------

    def all_reduce(self, tensor, out=None, *, dtype=None):
        """Sums tensor over ranks with detcoll's fixed tree; every rank gets
        the same bits. In place when out is None (returns tensor); else into
        out (same element count) and returns out."""
        return self._collective(_ALL_REDUCE, tensor, out, dtype)

    def all_gather(self, tensor, out=None, *, dtype=None):
        """Concatenates every rank's tensor in rank order into out (size
        times as many elements; allocated when None) and returns out."""
        return self._collective(_ALL_GATHER, tensor, out, dtype)

    def reduce_scatter(self, tensor, out=None, *, dtype=None):
        """Sums tensor (size*n elements) over ranks and gives rank r block r
        (n elements) in out (allocated when None); returns out."""
        return self._collective(_REDUCE_SCATTER, tensor, out, dtype)

    def _collective(self, op, x, out, dtype):
        if _torch.is_tensor(x):
            return self._tensor_collective(op, x, out, dtype)
        if _torch.is_tensor(out):
            raise TypeError("out is a torch tensor, but the input is not")
        return self._host_collective(op, x, out, dtype)

    def _scale(self, op):
        # (num, den): output elements = input elements * num / den
        if op == _ALL_REDUCE:
            return 1, 1
        if op == _ALL_GATHER:
            return self._size, 1
        return 1, self._size

    def _host_collective(self, op, x, out, dtype):
        reduce = op != _ALL_GATHER
        src = _host.Buffer(x, "input")
        code = src.resolve(dtype, reduce)
        num, den = self._scale(op)
        if src.count * num % den:
            raise ValueError(f"reduce_scatter: {src.count} elements do not divide into {self._size} ranks")
        out_count = src.count * num // den
        out_bytes = out_count * D.size(code)
        if out is None and op == _ALL_REDUCE:
            if src.readonly:
                raise TypeError("all_reduce in place needs a writable buffer (or pass out=)")
            result, dst = x, src
        else:
            result = out if out is not None else _host.alloc_like(src, out_bytes, (num, den))
            dst = _host.Buffer(result, "out")
            # An AllGather of untyped bytes only needs the size to match.
            if reduce or dtype is not None or src.fmt in "efd":
                dst.resolve(code, reduce)
            if dst.nbytes != out_bytes:
                raise ValueError(f"out has {dst.nbytes} bytes, want {out_bytes} ({out_count} {D.name(code)} elements)")
        sp, keep_s = src.pointer(writable=False)
        dp, keep_d = (sp, keep_s) if dst is src else dst.pointer(writable=True)
        count = out_count if op == _REDUCE_SCATTER else src.count
        name = _C_NAMES[op][1]
        rc = getattr(_lib.lib(), name)(sp, dp, count, code, self._h)
        del keep_s, keep_d
        _check(rc, name)
        return result

    def _tensor_collective(self, op, t, out, dtype):
        # The per-call cost matters for small CUDA tensors (the call only
        # enqueues): every check here is a cheap attribute read.
        T = _torch
        code = T.dtype_code(t)
        if dtype is not None and D.code(dtype) != code:
            raise TypeError(f"dtype={dtype!r} but the tensor is {t.dtype}")
        if op != _ALL_GATHER and code not in D.REDUCIBLE:
            raise TypeError(f"detcoll reduces only bf16, fp16, fp32 and fp64 tensors, not {t.dtype}")
        if t.is_cuda:
            # The hot path of small CUDA calls: is_cuda and get_device() are
            # plain attribute reads, where t.device builds an object.
            if not t.is_contiguous():
                raise ValueError("tensor is not contiguous (call .contiguous())")
            if out is None and op == _ALL_REDUCE:
                n = t.numel()
                stream, guard = T.cuda_stream(t.get_device())
                fn = self._fn(op, 0)
                ptr = t.data_ptr() or None
                if guard is None:
                    rc = fn(ptr, ptr, n, code, self._h, stream or None)
                else:
                    with guard:
                        rc = fn(ptr, ptr, n, code, self._h, stream or None)
                if rc:
                    _check(rc, _C_NAMES[op][0])
                return t
        device = t.device
        T.check_tensor(t, "tensor", device)
        num, den = self._scale(op)
        n = t.numel()
        if n * num % den:
            raise ValueError(f"reduce_scatter: {n} elements do not divide into {self._size} ranks")
        if out is None:
            if op == _ALL_REDUCE:
                out = t
            else:
                out = T.torch_module().empty(T.out_shape(t, num, den), dtype=t.dtype, device=device)
        else:
            T.check_out(t, out, n * num // den, device)
        count = n * num // den if op == _REDUCE_SCATTER else n
        lib = _lib.lib()
        if device.type == "cuda":
            # Enqueued on the device's current stream, like NCCL; returns
            # before the data moves.
            name = _C_NAMES[op][0]
            stream, guard = T.current_stream(t, device)
            if guard is None:
                rc = getattr(lib, name)(t.data_ptr() or None, out.data_ptr() or None, count, code, self._h, stream or None)
            else:
                with guard:
                    rc = getattr(lib, name)(t.data_ptr() or None, out.data_ptr() or None, count, code, self._h, stream or None)
        else:
            name = _C_NAMES[op][1]
            rc = getattr(lib, name)(t.data_ptr() or None, out.data_ptr() or None, count, code, self._h)
        _check(rc, name)
        return out

    def _fn(self, op, host):
        # The library's function for op (host=0: device call, 1: host call),
        # looked up once per process.
        f = _FNS.get((op, host))
        if f is None:
            f = _FNS[(op, host)] = getattr(_lib.lib(), _C_NAMES[op][host])
        return f


_FNS = {}


# ---- the default communicator ----------------------------------------------

_default = None
_default_lock = threading.Lock()


def init():
    """Joins the job described by the environment (detcoll launch, torchrun,
    Slurm or Open MPI; a world of one rank without any) and makes the result
    the default communicator of the module-level functions. Returns it; a
    second call returns the same communicator."""
    global _default
    with _default_lock:
        if _default is None or _default._dead:
            _default = Comm.from_env()
        return _default


def is_initialized():
    return _default is not None and not _default._dead


def default_comm():
    """The communicator init() made; InvalidUsageError before init()."""
    c = _default
    if c is None:
        raise InvalidUsageError("detcoll.init() has not been called (or pass comm=)", code=5)
    return c


def destroy():
    """Destroys the default communicator (a no-op if there is none)."""
    global _default
    with _default_lock:
        c, _default = _default, None
    if c is not None and not c._dead:
        c.destroy()


@atexit.register
def _at_exit():
    try:
        destroy()
    except Exception:
        pass


def get_unique_id():
    """A new unique id (128 bytes) for Comm.from_unique_id. This process
    serves the rendezvous store for it: keep it alive until every rank has
    joined."""
    uid = _lib.UniqueId()
    _check(_lib.lib().detcollGetUniqueId(ctypes.byref(uid)), "detcollGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), _lib.UNIQUE_ID_BYTES)


def version():
    """The library's version as (major, minor, patch)."""
    v = ctypes.c_int()
    _check(_lib.lib().detcollGetVersion(ctypes.byref(v)), "detcollGetVersion")
    return (v.value // 10000, v.value // 100 % 100, v.value % 100)
