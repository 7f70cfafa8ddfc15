"""detcoll as a torch.distributed backend: ProcessGroupDetcoll.

``import detcoll.torch`` registers the backend "detcoll"; then

    torch.distributed.init_process_group("detcoll")

under torchrun or ``detcoll launch`` makes every collective of the default
group (and of new_group / new_subgroups groups) a detcoll one. See
docs/pytorch.md for the design and the semantics of every operation.

Bootstrap: the constructor gets torch's c10d Store (a PrefixStore per
group). The C library rendezvouses through it (detcollCommInitStore with
ctypes callbacks over store.set/get/add): every rank publishes the address
of its TCP listener there and the ranks connect a mesh. No port besides
those listeners, no MASTER_PORT+1.

Arithmetic: SUM (and AVG = SUM, then one division by the group size in the
dtype) of bf16/fp16/fp32/fp64 is detcoll's fixed tree. Every other
(op, dtype) pair that is exact elementwise (integer and bool SUM, MAX, MIN,
PRODUCT, BAND/BOR/BXOR) moves the inputs with detcoll (all-gather or
all-to-all, no arithmetic) and applies the operation locally over the same
fixed tree, so every rank computes the same bits from the same inputs.

Execution: CPU work runs in call order on one worker thread per group; a
Work that is waited on before the worker picked it up runs on the waiting
thread instead (no thread hop for blocking calls). CUDA tensors of
AllReduce/AllGather/ReduceScatter are enqueued on the current stream by the
library's device calls; other CUDA operations stage through host memory.
"""

import collections
import ctypes
import datetime
import inspect
import os
import sys
import threading
import weakref

import torch
import torch.distributed as dist

from .. import _core, _errors, _lib
from .. import _dtypes as D

__all__ = ["ProcessGroupDetcoll", "BACKEND_NAME", "create_process_group", "SecondThreadError"]

BACKEND_NAME = "detcoll"

RedOpType = dist.ReduceOp.RedOpType if hasattr(dist.ReduceOp, "RedOpType") else dist.ReduceOp
_SUM = RedOpType.SUM


class SecondThreadError(_errors.InvalidUsageError):
    """A collective was issued on a group from a second thread while one
    issued from another thread had not completed: the ranks could match
    them in different orders and mix data, so it is refused."""


# ---- dtypes ----------------------------------------------------------------

_FLOAT = {
    torch.bfloat16: D.BFLOAT16,
    torch.float16: D.FLOAT16,
    torch.float32: D.FLOAT32,
    torch.float64: D.FLOAT64,
}
_INT = frozenset([torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
_CANONICAL_NAN = {
    torch.bfloat16: 0x7FC0,
    torch.float16: 0x7E00,
    torch.float32: 0x7FC00000,
    torch.float64: 0x7FF8000000000000,
}
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def _op_name(op):
    return getattr(op, "name", str(op))


def _red_op(opts_op):
    """The RedOpType of a ReduceOp (torch 1.13 wraps it; older torch passes the enum)."""
    return getattr(opts_op, "op", opts_op)


def _opt_op(opts):
    """The RedOpType of an options object (SUM without one)."""
    if opts is None:
        return RedOpType.SUM
    return _red_op(getattr(opts, "reduceOp", opts))


def _premul_factor(opts, what):
    """The factor of a PREMUL_SUM ReduceOp in opts: a float or a one-element
    tensor. torch >= 2 exposes it through the ReduceOp's pickling state
    (__getstate__() == (PREMUL_SUM, factor)); torch 1.13 keeps it in C++
    only, and the op is refused there, naming it."""
    rop = getattr(opts, "reduceOp", opts)
    st = None
    try:
        st = rop.__getstate__()
    except Exception:  # noqa: BLE001 - "no state" is the answer here
        st = None
    if isinstance(st, tuple) and len(st) == 2:
        f = st[1]
        if isinstance(f, torch.Tensor) and f.numel() == 1:
            return f
        if isinstance(f, (float, int)) and not isinstance(f, bool):
            return float(f)
    raise NotImplementedError(
        f"detcoll {what}: ReduceOp.PREMUL_SUM needs its factor, which torch {torch.__version__} does not expose "
        "to Python (torch >= 2 does); scale the input, then use SUM"
    )


def _premul_scale(factor, dtype, device=None):
    """The factor as a 0-dim tensor of dtype (rounded to it once, as NCCL's
    T(factor) is), on device."""
    if isinstance(factor, torch.Tensor):
        return factor.detach().reshape(()).to(device=device or "cpu", dtype=dtype)
    return torch.tensor(factor, dtype=dtype, device=device or "cpu")


# ---- the C calls -----------------------------------------------------------


def _check(rc, function, comm=None):
    if rc != 0:
        lib = _lib.lib()
        msg = lib.detcollGetLastError(None)
        msg = msg.decode("utf-8", "replace") if msg else function
        raise _errors.error_for(rc, msg, function)


def _ptr(t):
    return t.data_ptr() or None


_ABSENT = b"\x00detcoll:absent\x00"


class _StoreAdapter:
    """The detcollStore callbacks over a c10d Store. Calls are serialised
    (c10d stores are not documented as thread-safe) and every exception is
    turned into a failure code: nothing may raise through ctypes."""

    def __init__(self, store):
        self._store = store
        self._lock = threading.Lock()
        self.error = None
        self.struct = _lib.Store(
            None,
            _lib.STORE_SET(self._set),
            _lib.STORE_GET(self._get),
            _lib.STORE_ADD(self._add),
            _lib.STORE_DEL(self._del),
        )

    def _set(self, ctx, key, value, n):
        try:
            with self._lock:
                self._store.set(key.decode(), ctypes.string_at(value, n) if n else b"")
            return 0
        except BaseException as e:  # noqa: B902 - must not raise into C
            self.error = e
            return 2

    def _get(self, ctx, key, timeout_ms, buf, cap, out_len):
        # Never a blocking wait that can time out: a c10d TCPStore client
        # whose wait() timed out is out of step with its server for good
        # (torch 1.13: the late reply is read as the answer to the next
        # request), and torch's own barrier shares the client. compare_set
        # with an expected value no real one has is a non-blocking get: it
        # returns that value when the key is missing, the key's value
        # otherwise, and changes nothing. The library backs off between
        # polls.
        try:
            k = key.decode()
            with self._lock:
                cas = getattr(self._store, "compare_set", None)
                if cas is not None:
                    v = cas(k, _ABSENT, _ABSENT)
                    if v == _ABSENT:
                        return 1
                else:  # older torch: a bounded blocking wait
                    try:
                        self._store.wait([k], datetime.timedelta(milliseconds=max(1, timeout_ms)))
                    except RuntimeError:
                        return 1
                    v = self._store.get(k)
            out_len[0] = len(v)
            if v and cap:
                ctypes.memmove(buf, v, min(len(v), cap))
            return 0
        except BaseException as e:  # noqa: B902
            self.error = e
            return 2

    def _add(self, ctx, key, delta, result):
        try:
            with self._lock:
                result[0] = self._store.add(key.decode(), int(delta))
            return 0
        except BaseException as e:  # noqa: B902
            self.error = e
            return 2

    def _del(self, ctx, key, existed):
        try:
            with self._lock:
                existed[0] = 1 if self._store.delete_key(key.decode()) else 0
            return 0
        except BaseException as e:  # noqa: B902
            self.error = e
            return 2


def _comm_from_store(store, rank, size, timeout):
    """A detcoll Comm of this rank of size, met through the c10d store.

    The key prefix is "detcoll/<n>", n counting the communicators this rank
    made in this store (every rank makes the same sequence), so a store that
    outlives a group (torchrun's agent store) never serves stale addresses.
    """
    adapter = _StoreAdapter(store)
    gen = store.add(f"detcoll/gen/{rank}", 1)
    prefix = f"detcoll/{gen}".encode()
    ms = 0
    if timeout is not None:
        ms = max(1, int(timeout.total_seconds() * 1000))
    h = ctypes.c_void_p()
    rc = _lib.lib().detcollCommInitStore(ctypes.byref(h), int(size), int(rank), ctypes.byref(adapter.struct), prefix, ms)
    if rc != 0:
        msg = _lib.lib().detcollGetLastError(None)
        msg = msg.decode("utf-8", "replace") if msg else "detcollCommInitStore"
        if adapter.error is not None:
            msg += f" (store callback: {adapter.error!r})"
        raise _errors.error_for(rc, msg, "detcollCommInitStore")
    comm = _core.Comm(h.value)
    comm._store_adapter = adapter  # the callbacks must outlive the communicator
    return comm


# ---- work ------------------------------------------------------------------

_PENDING, _RUNNING, _DONE = 0, 1, 2


class _Op:
    """One queued operation: fn() runs it and returns the result tensors."""

    __slots__ = ("fn", "state", "result", "exc", "fut", "__weakref__")

    def __init__(self, fn):
        self.fn = fn
        self.state = _PENDING
        self.result = None
        self.exc = None
        self.fut = None


_INLINE = _Op(None)  # the queue's head while an operation runs inline (_Queue.inline)
_INLINE.state = _RUNNING
_BUSY = object()  # _Queue.inline ran nothing
get_ident = threading.get_ident


class _Queue:
    """The group's operations in call order, run by one worker thread, or
    by the thread that waits for one before the worker took it (then no
    thread hop: a blocking call costs what the C call costs, plus this).

    The worker is woken only when an operation becomes the head of the queue
    unclaimed; waiters only when one they may wait for completes."""

    def __init__(self, name):
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the worker waits here
        self._done = threading.Condition(self._lock)  # wait() waits here
        self._waiters = 0
        self._q = collections.deque()
        self._owner = None  # thread id of the submitter of the queued ops
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, wake=True):
        op = _Op(fn)
        me = get_ident()
        with self._lock:
            if self._closed:
                raise _errors.ClosedError("detcoll process group destroyed", code=_errors.CLOSED, function="submit")
            q = self._q
            if q and self._owner != me and me != self._thread.ident:
                raise SecondThreadError(
                    "detcoll: a collective was issued on this process group from a second thread while one issued "
                    "from another thread has not completed; the ranks could match them in different orders and "
                    "mix data. Issue a group's collectives from one thread (or wait for the other's first).",
                    code=_errors.INVALID_USAGE,
                    function="submit",
                )
            q.append(op)
            if len(q) == 1:
                self._owner = me
                if wake:
                    self._work.notify()
            elif q[0].state == _PENDING:
                self._work.notify()  # the head was not waited for after all
        return op

    def _run(self, op):
        try:
            op.result = op.fn()
        except BaseException as e:  # noqa: B902 - delivered to wait()
            op.exc = e
        op.fn = None
        with self._lock:
            q = self._q
            q.popleft()
            op.state = _DONE
            fut = op.fut
            if self._waiters:
                self._done.notify_all()
            if q and q[0].state == _PENDING:
                self._work.notify()
        if fut is not None:
            _complete(fut, op)

    def _loop(self):
        while True:
            with self._lock:
                while not (self._q and self._q[0].state == _PENDING):
                    if self._closed and not self._q:
                        return
                    # closed with a head running elsewhere: look again soon
                    self._work.wait(0.05 if self._closed else None)
                op = self._q[0]
                op.state = _RUNNING
            self._run(op)
            # Drop the op (and so its tensors) now. Held here until the next
            # op, it was freed when close() woke this thread at interpreter
            # exit: a tensor's dealloc releases the GIL, and a thread that
            # takes it back once finalization has begun is ended by
            # pthread_exit, whose unwinding through torch's noexcept C++
            # frames is std::terminate (the W=4 SIGABRT, docs/pytorch.md).
            op = None

    def inline(self, fn):
        """Runs fn now on the calling thread if nothing is queued, and
        returns its result (its exception propagates); returns _BUSY, having
        run nothing, when operations are queued or the queue is closed (the
        caller then submits, in call order).

        The blocking path: torch's wrappers with async_op=False would wait at
        once, so no _Op, no Work and no wake-up are made for them. While fn
        runs the queue holds the _INLINE marker, so a second thread's
        collective is still refused (submit) and the worker stays asleep."""
        me = get_ident()
        with self._lock:
            if self._q or self._closed:
                return _BUSY
            self._q.append(_INLINE)
            self._owner = me
        try:
            return fn()
        finally:
            self._pop_inline()

    def _pop_inline(self):
        with self._lock:
            q = self._q
            q.popleft()  # _INLINE
            if self._waiters:
                self._done.notify_all()
            if q and q[0].state == _PENDING:
                self._work.notify()  # queued behind it by a callback on the worker

    def _wait_on_worker(self, op):
        """wait() on the worker thread itself (a future's then() callback
        that issues a blocking collective, or waits for one, while others
        are queued): nothing else runs the queue while the worker is here,
        so it runs the operations ahead of op, in order, then op. (Waiting
        for another thread to run them deadlocked.)"""
        while True:
            with self._lock:
                if op.state == _DONE:
                    return
                head = self._q[0]
                if head.state != _PENDING:  # run inline by a waiting thread
                    self._waiters += 1
                    try:
                        self._done.wait()
                    finally:
                        self._waiters -= 1
                    continue
                head.state = _RUNNING
            self._run(head)
            head = None

    def wait(self, op):
        if get_ident() == self._thread.ident:
            return self._wait_on_worker(op)
        with self._lock:
            if op.state == _DONE:
                return
            if op.state != _PENDING or self._q[0] is not op:
                self._waiters += 1
                try:
                    while op.state != _DONE:
                        self._done.wait()
                finally:
                    self._waiters -= 1
                return
            op.state = _RUNNING  # the head, unclaimed: run it here
        self._run(op)

    def drain(self):
        """Waits until every queued operation has completed (before work
        that does not go through the queue: CUDA enqueues, staged copies,
        so that every rank issues its collectives in call order)."""
        while True:
            with self._lock:
                if not self._q:
                    return
                last = self._q[-1]
                if last is _INLINE:  # no state to wait for: wait until it is popped
                    self._waiters += 1
                    try:
                        while self._q and self._q[-1] is _INLINE:
                            self._done.wait()
                    finally:
                        self._waiters -= 1
                    continue
            self.wait(last)

    def future(self, op):
        with self._lock:
            if op.fut is not None:
                return op.fut
            op.fut = torch.futures.Future()
            if op.state != _DONE:
                return op.fut  # completed by _run
        _complete(op.fut, op)
        return op.fut

    def close(self):
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._done.notify_all()

    def join(self, timeout):
        """Waits (up to timeout seconds) for the worker thread to end after
        close(). Called at group shutdown, and so before the interpreter
        finalizes at exit (weakref.finalize runs as an atexit hook): the
        worker's last Python code (dropping references, tensor deallocs
        that release the GIL) must not race with finalization. Returns
        whether it ended; a no-op on the worker itself."""
        if threading.current_thread() is self._thread:
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()


_C10D_FILE = dist.distributed_c10d.__file__


def _caller(depth):
    """(wake the worker?, keep the Work alive?) for an operation requested
    by the caller `depth` frames up (0 being _caller's caller).

    torch.distributed's Python wrappers hold the Work themselves, and with
    async_op=False wait at once: the operation then runs inline on the
    calling thread, and waking the worker would only make the two threads
    trade the GIL around the C call. Any other caller (C++: DDP's reducer,
    _verify_params_across_processes; user code calling the group directly)
    wakes the worker, and its Work is kept alive until first used (_Live)."""
    try:
        f = sys._getframe(depth + 1)
    except ValueError:
        return True, True
    if f.f_code.co_filename != _C10D_FILE:
        return True, True
    return bool(f.f_locals.get("async_op", True)), False


def _complete(fut, op):
    if fut.done():
        return
    if op.exc is not None:
        fut.set_exception(op.exc)
    else:
        fut.set_result(op.result)


_WorkBase = getattr(dist, "Work", None) or torch._C._distributed_c10d.Work


class _Live:
    """Keeps Work objects alive until C++ has used them.

    torch 1.13's Work trampoline finds the Python wait()/get_future() only
    while the Python object lives; a Work handed to a C++ caller (DDP's
    reducer, _verify_params_across_processes) and dropped by Python would
    fall back to c10d's base Work::wait, which never returns. So every Work
    is held here until its first wait() or get_future(); at most LIMIT are
    held (the oldest completed ones are let go beyond that)."""

    LIMIT = 4096

    def __init__(self):
        self._d = collections.OrderedDict()
        self._lock = threading.Lock()  # C++ callers may wait from their own threads

    def add(self, w):
        with self._lock:
            self._d[id(w)] = w
            if len(self._d) > self.LIMIT:
                for k in [k for k, v in self._d.items() if v.is_completed()][: len(self._d) - self.LIMIT]:
                    self._d.pop(k, None)

    def release(self, w):
        with self._lock:
            self._d.pop(id(w), None)


class Work(_WorkBase):
    """An operation of ProcessGroupDetcoll (what async_op=True returns)."""

    def __init__(self, queue, op, live):
        super().__init__()
        self._queue = queue
        self._op = op
        self._live = live
        if live is not None:
            live.add(self)

    def wait(self, timeout=None):
        if self._live is not None:
            self._live.release(self)
        self._queue.wait(self._op)
        if self._op.exc is not None:
            raise self._op.exc
        return True

    def is_completed(self):
        return self._op.state == _DONE

    def is_success(self):
        return self._op.state == _DONE and self._op.exc is None

    def exception(self):
        return self._op.exc

    def result(self):
        self.wait()
        return self._op.result

    def synchronize(self):
        self.wait()

    def get_future(self):
        if self._live is not None:
            self._live.release(self)
        return self._queue.future(self._op)


class _DoneWork(Work):
    """A Work whose operation already ran (CUDA enqueue, zero-size calls)."""

    def __init__(self, result, event=None, device=None, live=None):
        _WorkBase.__init__(self)
        self._result = result
        self._event = event
        self._device = device
        self._live = live
        if live is not None:
            live.add(self)

    def wait(self, timeout=None):
        if self._live is not None:
            self._live.release(self)
        if self._event is not None:
            # NCCL semantics: the current stream waits for the collective.
            torch.cuda.current_stream(self._device).wait_event(self._event)
        return True

    def is_completed(self):
        return self._event is None or self._event.query()

    def is_success(self):
        return self.is_completed()

    def exception(self):
        return None

    def result(self):
        return self._result

    def synchronize(self):
        if self._event is not None:
            self._event.synchronize()

    def get_future(self):
        if self._live is not None:
            self._live.release(self)
        if self._device is not None:
            fut = torch.futures.Future(devices=[self._device])
        else:
            fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class _Completed(_WorkBase):
    """What a blocking call from torch's wrappers gets when it ran inline
    (_Queue.inline): the operation has completed (an error was raised by the
    call itself), and the wrapper only calls wait() on it and drops it. One
    shared instance, so the blocking path makes no Work."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def synchronize(self):
        pass

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


_COMPLETED = _Completed()

# dist.all_reduce's own code object and its default op: the blocking
# allreduce fast path recognises its caller by them (one frame look-up).
_ALL_REDUCE_CODE = getattr(inspect.unwrap(dist.distributed_c10d.all_reduce), "__code__", None)
_SUM_OBJ = dist.ReduceOp.SUM


# ---- the process group -------------------------------------------------------


def _flat(t):
    """A contiguous tensor with t's elements, and whether it is a copy."""
    if t.is_contiguous():
        return t, False
    return t.contiguous(), True


_JOIN_TIMEOUT_S = 10.0  # group shutdown waits this long for the worker thread


class ProcessGroupDetcoll(dist.ProcessGroup):
    """A torch.distributed process group whose collectives are detcoll's.

    Made by torch through the registered creator (init_process_group,
    new_group); see docs/pytorch.md for every operation's semantics.
    """

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._rank, self._size = int(rank), int(size)
        self._timeout = timeout
        self._comm = _comm_from_store(store, self._rank, self._size, timeout)
        self._h = self._comm._h
        self._lib = _lib.lib()
        self._host_all_reduce = self._lib.detcollHostAllReduce
        self._queue = _Queue(f"detcoll-pg-{rank}of{size}")
        self._live = _Live()
        self._finalizer = weakref.finalize(self, ProcessGroupDetcoll._shutdown, self._queue, self._comm)

    @staticmethod
    def _shutdown(queue, comm):
        queue.close()
        try:
            if not comm._dead:
                comm.abort()  # also ends a collective the worker may be blocked in
        except Exception:
            pass
        queue.join(_JOIN_TIMEOUT_S)

    def shutdown(self):
        """Destroys the communicator (the group is unusable afterwards)."""
        self._finalizer()

    # torch names
    def getBackendName(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    @property
    def comm(self):
        """The detcoll.Comm under this group."""
        return self._comm

    # ---- plumbing -----------------------------------------------------------

    def _submit(self, fn, tensors):
        """Queues fn (CPU work) and returns its Work."""
        return self._new_work(fn, 2)

    def _new_work(self, fn, depth):
        wake, keep = _caller(depth + 1)
        if not wake:
            # torch's wrapper with async_op=False: it would wait at once, so
            # run it here when nothing is queued (no Work, no _Op).
            if self._queue.inline(fn) is not _BUSY:
                return _COMPLETED
        return Work(self._queue, self._queue.submit(fn, wake), self._live if keep else None)

    def _call(self, name, *args):
        rc = getattr(self._lib, name)(*args)
        if rc != 0:
            _check(rc, name)

    @staticmethod
    def _cuda(tensors):
        return any(t.is_cuda for t in tensors)

    def _staged(self, tensors, fn):
        """CUDA tensors for an operation without a device call: copy to host,
        run fn on the host copies (blocking), copy back. (Not exercised in CI:
        no GPU there.)"""
        self._queue.drain()
        host = [t.detach().to("cpu") for t in tensors]
        result = fn(host)
        for t, h in zip(tensors, host):
            t.copy_(h)
        return _DoneWork(result if result is not None else tensors, live=self._live)

    # ---- reductions ---------------------------------------------------------

    def _tree(self, blocks, op, dtype):
        """Reduces blocks (a list of W tensors, rank order) with op over the
        fixed tree: adjacent pairs, lower rank on the left, an odd last value
        carried up."""
        name = _op_name(op)
        if dtype == torch.bool:
            f = {
                "SUM": torch.logical_or,
                "MAX": torch.logical_or,
                "BOR": torch.logical_or,
                "PRODUCT": torch.logical_and,
                "MIN": torch.logical_and,
                "BAND": torch.logical_and,
                "BXOR": torch.logical_xor,
            }.get(name)
        else:
            f = {
                "SUM": torch.add,
                "PRODUCT": torch.mul,
                "MAX": torch.maximum,
                "MIN": torch.minimum,
                "BAND": torch.bitwise_and,
                "BOR": torch.bitwise_or,
                "BXOR": torch.bitwise_xor,
            }.get(name)
        vals = list(blocks)
        while len(vals) > 1:
            nxt = [f(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
            if len(vals) % 2:
                nxt.append(vals[-1])
            vals = nxt
        out = vals[0]
        if dtype in _CANONICAL_NAN:
            # detcoll's NaN rule: any NaN result is the canonical quiet NaN
            # (out is a temporary: the tree's or a view of the gathered data).
            nan = torch.isnan(out)
            if bool(nan.any()):
                out.view(_BITS[dtype])[nan] = _signed(_CANONICAL_NAN[dtype], dtype)
        return out

    def _check_op(self, op, dtype, what):
        """Returns how (op, dtype) is reduced: "native" (detcoll's tree sum),
        "avg" (native, then divide), "premul" (each input times the factor in
        its dtype, then native), "elementwise", or raises naming it."""
        name = _op_name(op)
        if dtype in _FLOAT:
            if name == "SUM":
                return "native"
            if name == "AVG":
                return "avg"
            if name == "PREMUL_SUM":
                return "premul"
            if name in ("MAX", "MIN", "PRODUCT"):
                return "elementwise"
            raise TypeError(f"detcoll {what}: ReduceOp.{name} is not defined for {dtype} (bitwise ops take integer or bool tensors)")
        if dtype in _INT or dtype == torch.bool:
            if name == "PREMUL_SUM":
                raise TypeError(f"detcoll {what}: ReduceOp.PREMUL_SUM is not exact for {dtype}; it takes float tensors")
            if name == "AVG":
                raise TypeError(f"detcoll {what}: ReduceOp.AVG is not exact for {dtype}; use SUM and divide")
            if name in ("SUM", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"):
                return "elementwise"
            raise TypeError(f"detcoll {what}: ReduceOp.{name} is not supported for {dtype}")
        raise TypeError(f"detcoll {what}: dtype {dtype} is not supported (bf16, fp16, fp32, fp64, int8/16/32/64, uint8, bool)")

    def _allreduce_flat(self, flat, op, how, scale=None):
        """Allreduces a contiguous CPU tensor in place (scale: PREMUL_SUM's
        factor as a 0-dim tensor of flat's dtype)."""
        n = flat.numel()
        if how == "premul":
            flat.mul_(scale)  # elementwise, rounded once per element
            how = "native"
        if how in ("native", "avg"):
            self._call("detcollHostAllReduce", _ptr(flat), _ptr(flat), n, _FLOAT[flat.dtype], self._h)
            if how == "avg":
                flat.div_(self._size)
            return
        gathered = torch.empty((self._size,) + (n,), dtype=flat.dtype)
        self._gather_bytes(flat, gathered)
        flat.copy_(self._tree(list(gathered.unbind(0)), op, flat.dtype))

    def _gather_bytes(self, flat, out):
        """All-gathers a contiguous tensor's bytes into out (W times as many)."""
        nb = flat.numel() * flat.element_size()
        self._call("detcollHostAllGather", _ptr(flat), _ptr(out), nb, D.UINT8, self._h)

    def _sum_fn(self, t, code, tensors):
        """The queued form of the hot path: one C call on t's memory."""
        call, h, n, p = self._host_all_reduce, self._h, t.numel(), t.data_ptr() or None

        def run():
            rc = call(p, p, n, code, h)
            if rc:
                _check(rc, "detcollHostAllReduce")
            return tensors

        return run

    def allreduce(self, tensors, opts=None):
        if len(tensors) == 1:
            # The hot paths (DDP buckets, small calls): one contiguous CPU
            # float tensor, SUM.
            t = tensors[0]
            code = _FLOAT.get(t.dtype)
            if code is not None and not t.is_cuda and t.is_contiguous():
                # dist.all_reduce(t) with the default op, recognised by the
                # caller's code object (its `op` local is what it put in
                # opts; reading the options object costs more): blocking, the
                # C call is made now, on this thread, and no Work is made
                # (docs/pytorch.md, "Execution"); async, it is queued without
                # looking at the caller again.
                f = sys._getframe(1)
                if f.f_code is _ALL_REDUCE_CODE:
                    loc = f.f_locals
                    if loc.get("op") is _SUM_OBJ:
                        q = self._queue
                        if loc.get("async_op", True):
                            return Work(q, q.submit(self._sum_fn(t, code, tensors), True), None)
                        me = get_ident()
                        with q._lock:
                            free = not q._q and not q._closed
                            if free:
                                q._q.append(_INLINE)
                                q._owner = me
                        if free:
                            p = t.data_ptr() or None
                            try:
                                rc = self._host_all_reduce(p, p, t.numel(), code, self._h)
                            finally:
                                q._pop_inline()
                            if rc:
                                _check(rc, "detcollHostAllReduce")
                            return _COMPLETED
                        return Work(q, q.submit(self._sum_fn(t, code, tensors), False), None)
        op = _opt_op(opts)
        if len(tensors) == 1:
            t = tensors[0]
            code = _FLOAT.get(t.dtype)
            if code is not None and op == _SUM and not t.is_cuda and t.is_contiguous():
                return self._new_work(self._sum_fn(t, code, tensors), 1)
        tensors = list(tensors)
        hows = [self._check_op(op, t.dtype, "allreduce") for t in tensors]
        factor = _premul_factor(opts, "allreduce") if "premul" in hows else None
        if self._cuda(tensors):
            return self._cuda_allreduce(tensors, op, hows, factor, opts)

        def run():
            for t, how in zip(tensors, hows):
                flat, copied = _flat(t)
                self._allreduce_flat(flat, op, how, _premul_scale(factor, t.dtype) if factor is not None else None)
                if copied:
                    t.copy_(flat)
            return tensors

        return self._submit(run, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _opt_op(opts)
        tensors = list(tensors)
        if not tensors:
            return _DoneWork([], live=self._live)
        dt = tensors[0].dtype
        if any(t.dtype != dt for t in tensors):
            raise TypeError("detcoll allreduce_coalesced: every tensor must have the same dtype")
        how = self._check_op(op, dt, "allreduce_coalesced")
        scale = _premul_scale(_premul_factor(opts, "allreduce_coalesced"), dt) if how == "premul" else None
        if self._cuda(tensors):
            return self._staged(tensors, lambda host: self.allreduce_coalesced(host, opts).wait())

        def run():
            # One buffer: the tree is per element, so the bits equal those of
            # one allreduce per tensor.
            flat = torch.cat([t.reshape(-1) for t in tensors])
            self._allreduce_flat(flat, op, how, scale)
            off = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[off : off + n].view_as(t))
                off += n
            return tensors

        return self._submit(run, tensors)

    def reduce(self, tensors, opts=None):
        op = _opt_op(opts)
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "reduce")
        tensors = list(tensors)
        hows = [self._check_op(op, t.dtype, "reduce") for t in tensors]
        factor = _premul_factor(opts, "reduce") if "premul" in hows else None
        if self._cuda(tensors):
            return self._staged(tensors, lambda host: self.reduce(host, opts).wait())

        def run():
            for t, how in zip(tensors, hows):
                tmp = t.contiguous().clone() if self._rank != root else None
                flat, copied = (tmp, False) if tmp is not None else _flat(t)
                self._allreduce_flat(flat, op, how, _premul_scale(factor, t.dtype) if factor is not None else None)
                if self._rank == root and copied:
                    t.copy_(flat)
            return tensors

        return self._submit(run, tensors)

    # ---- gathers --------------------------------------------------------------

    def _allgather_into(self, inp, out_flat):
        """inp (contiguous) of every rank into out_flat (contiguous, W*numel)."""
        nb = inp.numel() * inp.element_size()
        self._call("detcollHostAllGather", _ptr(inp), _ptr(out_flat), nb, D.UINT8, self._h)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise ValueError("detcoll allgather takes one input tensor and one output list per process")
        inp, outs = input_tensors[0], list(output_tensors[0])
        if len(outs) != self._size:
            raise ValueError(f"detcoll allgather: {len(outs)} output tensors, want the group size {self._size}")
        for o in outs:
            if o.numel() != inp.numel() or o.dtype != inp.dtype:
                raise ValueError(f"detcoll allgather: outputs must match the input ({inp.numel()} {inp.dtype})")
        if self._cuda([inp] + outs):
            return self._staged(outs, lambda host: self.allgather([host], [inp.cpu()], opts).wait())

        def run():
            src = inp.contiguous()
            buf = torch.empty((self._size, inp.numel()), dtype=inp.dtype)
            self._allgather_into(src, buf)
            for o, b in zip(outs, buf.unbind(0)):
                o.copy_(b.view_as(o))
            return [outs]

        return self._submit(run, outs + [inp])

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != self._size * input.numel() or output.dtype != input.dtype:
            raise ValueError(
                f"detcoll _allgather_base: output has {output.numel()} {output.dtype}, want {self._size} x {input.numel()} {input.dtype}"
            )
        if output.is_cuda or input.is_cuda:
            return self._cuda_native("detcollAllGather", output, input, input.numel())

        def run():
            src = input.contiguous()
            out, copied = _flat(output)
            n = src.numel()
            if n and out.data_ptr() <= src.data_ptr() < out.data_ptr() + out.numel() * out.element_size():
                block = out.view(-1)[self._rank * n : (self._rank + 1) * n]
                if block.data_ptr() != src.data_ptr():
                    src = src.clone()  # overlaps, but not as this rank's block
            self._allgather_into(src, out)
            if copied:
                output.copy_(out)
            return [output]

        return self._submit(run, [output, input])

    all_gather_into_tensor = _allgather_base

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        works = [self.allgather([o], [i], opts) for o, i in zip(output_lists, input_list)]
        last = works[-1] if works else _DoneWork([], live=self._live)
        return last

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "gather")
        if len(input_tensors) != 1:
            raise ValueError("detcoll gather takes one input tensor per process")
        inp = input_tensors[0]
        outs = list(output_tensors[0]) if (self._rank == root and output_tensors) else []
        if self._rank == root and len(outs) != self._size:
            raise ValueError(f"detcoll gather: the root needs {self._size} output tensors, got {len(outs)}")
        if self._cuda([inp] + outs):
            return self._staged(outs or [inp], lambda host: self.gather([host] if outs else [], [inp.cpu()], opts).wait())

        def run():
            src = inp.contiguous()
            nb = src.numel() * src.element_size()
            buf = torch.empty((self._size, src.numel()), dtype=src.dtype) if self._rank == root else None
            self._call("detcollHostGather", _ptr(src), _ptr(buf) if buf is not None else None, nb, D.UINT8, root, self._h)
            if buf is not None:
                for o, b in zip(outs, buf.unbind(0)):
                    o.copy_(b.view_as(o))
            return [outs] if outs else []

        return self._submit(run, outs + [inp])

    # ---- reduce-scatter ----------------------------------------------------------

    def _reduce_scatter_flat(self, src, out, op, how, scale=None):
        """src (contiguous, W*n) -> out (contiguous, n): this rank's block.
        (PREMUL_SUM: src is scaled into a new tensor; the caller's input is
        left as it was.)"""
        n = out.numel()
        if how == "premul":
            src = src.mul(scale)
            how = "native"
        if how in ("native", "avg"):
            self._call("detcollHostReduceScatter", _ptr(src), _ptr(out), n, _FLOAT[src.dtype], self._h)
            if how == "avg":
                out.div_(self._size)
            return
        # Block p of every rank goes to rank p (all-to-all), then the fixed tree.
        recv = torch.empty((self._size, n), dtype=src.dtype)
        self._alltoall_equal(src, recv, n * src.element_size())
        out.copy_(self._tree(list(recv.unbind(0)), op, src.dtype).view_as(out))

    def _alltoall_equal(self, src, dst, block_bytes):
        w = self._size
        counts = (ctypes.c_size_t * w)(*([block_bytes] * w))
        displs = (ctypes.c_size_t * w)(*[p * block_bytes for p in range(w)])
        self._call("detcollHostAllToAllv", _ptr(src), counts, displs, _ptr(dst), counts, displs, D.UINT8, self._h)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _opt_op(opts)
        if len(output_tensors) != 1 or len(input_tensors) != 1:
            raise ValueError("detcoll reduce_scatter takes one output tensor and one input list per process")
        out, ins = output_tensors[0], list(input_tensors[0])
        if len(ins) != self._size:
            raise ValueError(f"detcoll reduce_scatter: {len(ins)} input tensors, want the group size {self._size}")
        for i in ins:
            if i.numel() != out.numel() or i.dtype != out.dtype:
                raise ValueError(f"detcoll reduce_scatter: inputs must match the output ({out.numel()} {out.dtype})")
        how = self._check_op(op, out.dtype, "reduce_scatter")
        scale = _premul_scale(_premul_factor(opts, "reduce_scatter"), out.dtype) if how == "premul" else None
        if self._cuda([out] + ins):
            return self._staged([out], lambda host: self.reduce_scatter(host, [[i.cpu() for i in ins]], opts).wait())

        def run():
            src = torch.cat([i.reshape(-1) for i in ins])
            dst, copied = _flat(out)
            self._reduce_scatter_flat(src, dst, op, how, scale)
            if copied:
                out.copy_(dst)
            return [out]

        return self._submit(run, [out] + ins)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _opt_op(opts)
        if input.numel() != self._size * output.numel() or input.dtype != output.dtype:
            raise ValueError(
                f"detcoll _reduce_scatter_base: input has {input.numel()} {input.dtype}, want {self._size} x {output.numel()} {output.dtype}"
            )
        how = self._check_op(op, output.dtype, "reduce_scatter_tensor")
        factor = _premul_factor(opts, "reduce_scatter_tensor") if how == "premul" else None
        if output.is_cuda or input.is_cuda:
            if how == "premul" and input.is_cuda:
                # scaled into a new tensor on the current stream, then the device sum
                input = input.contiguous().mul(_premul_scale(factor, input.dtype, input.device))
                how = "native"
            if how in ("native", "avg"):
                return self._cuda_native("detcollReduceScatter", output, input, output.numel(), avg=how == "avg")
            return self._staged([output], lambda host: self._reduce_scatter_base(host[0], input.cpu(), opts).wait())

        scale = _premul_scale(factor, output.dtype) if factor is not None else None

        def run():
            src = input.contiguous()
            dst, copied = _flat(output)
            self._reduce_scatter_flat(src, dst, op, how, scale)
            if copied:
                output.copy_(dst)
            return [output]

        return self._submit(run, [output, input])

    reduce_scatter_tensor = _reduce_scatter_base

    # ---- broadcast, scatter, barrier ---------------------------------------------

    def _check_root(self, root, what):
        if not 0 <= root < self._size:
            raise ValueError(f"detcoll {what}: root {root} is not a rank of this group of {self._size}")

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "broadcast")
        tensors = list(tensors)
        if self._cuda(tensors):
            return self._staged(tensors, lambda host: self.broadcast(host, opts).wait())

        def run():
            for t in tensors:
                flat, copied = _flat(t)
                nb = flat.numel() * flat.element_size()
                self._call("detcollHostBroadcast", _ptr(flat), nb, D.UINT8, root, self._h)
                if copied:
                    t.copy_(flat)
            return tensors

        return self._submit(run, tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "scatter")
        if len(output_tensors) != 1:
            raise ValueError("detcoll scatter takes one output tensor per process")
        out = output_tensors[0]
        ins = list(input_tensors[0]) if (self._rank == root and input_tensors) else []
        if self._rank == root:
            if len(ins) != self._size:
                raise ValueError(f"detcoll scatter: the root needs {self._size} input tensors, got {len(ins)}")
            for i in ins:
                if i.numel() != out.numel() or i.dtype != out.dtype:
                    raise ValueError(f"detcoll scatter: inputs must match the output ({out.numel()} {out.dtype})")
        if self._cuda([out] + ins):
            return self._staged([out], lambda host: self.scatter(host, [[i.cpu() for i in ins]] if ins else [], opts).wait())

        def run():
            src = torch.cat([i.reshape(-1) for i in ins]) if ins else None
            dst, copied = _flat(out)
            nb = dst.numel() * dst.element_size()
            self._call("detcollHostScatter", _ptr(src) if src is not None else None, _ptr(dst), nb, D.UINT8, root, self._h)
            if copied:
                out.copy_(dst)
            return [out]

        return self._submit(run, [out] + ins)

    def barrier(self, opts=None):
        def run():
            self._call("detcollBarrier", self._h)
            return []

        return self._submit(run, [])

    # ---- all-to-all ----------------------------------------------------------------

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        w = self._size
        if output.dtype != input.dtype:
            raise TypeError(f"detcoll alltoall_base: output is {output.dtype}, input {input.dtype}")

        def splits(t, sizes, what):
            rows = t.shape[0] if t.dim() > 0 else t.numel()
            row = t.numel() // rows if rows else 0
            if not sizes:
                if rows % w:
                    raise ValueError(f"detcoll alltoall_base: {what} has {rows} rows, which do not split evenly over {w} ranks")
                sizes = [rows // w] * w
            if len(sizes) != w or sum(sizes) != rows:
                raise ValueError(f"detcoll alltoall_base: {what} split sizes {list(sizes)} do not cover its {rows} rows in {w} parts")
            es = t.element_size() * row
            counts = [s * es for s in sizes]
            displs = [sum(counts[:p]) for p in range(w)]
            return counts, displs

        sc, sd = splits(input, list(input_split_sizes), "input")
        rc, rd = splits(output, list(output_split_sizes), "output")
        if output.is_cuda or input.is_cuda:
            return self._staged([output], lambda host: self.alltoall_base(host[0], input.cpu(), output_split_sizes, input_split_sizes, opts).wait())

        def run():
            src = input.contiguous()
            dst, copied = _flat(output)
            arr = ctypes.c_size_t * w
            self._call("detcollHostAllToAllv", _ptr(src), arr(*sc), arr(*sd), _ptr(dst), arr(*rc), arr(*rd), D.UINT8, self._h)
            if copied:
                output.copy_(dst)
            return [output]

        return self._submit(run, [output, input])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        w = self._size
        outs, ins = list(output_tensors), list(input_tensors)
        if len(outs) != w or len(ins) != w:
            raise ValueError(f"detcoll alltoall: {len(ins)} inputs and {len(outs)} outputs, want {w} of each")
        dt = ins[0].dtype
        if any(t.dtype != dt for t in outs + ins):
            raise TypeError("detcoll alltoall: every tensor must have the same dtype")
        if self._cuda(outs + ins):
            return self._staged(outs, lambda host: self.alltoall(host, [i.cpu() for i in ins], opts).wait())

        def run():
            es = ins[0].element_size()
            src = torch.cat([i.reshape(-1) for i in ins])
            dst = torch.empty(sum(o.numel() for o in outs), dtype=dt)
            sc = [i.numel() * es for i in ins]
            rc = [o.numel() * es for o in outs]
            arr = ctypes.c_size_t * w
            sd = arr(*[sum(sc[:p]) for p in range(w)])
            rd = arr(*[sum(rc[:p]) for p in range(w)])
            self._call("detcollHostAllToAllv", _ptr(src), arr(*sc), sd, _ptr(dst), arr(*rc), rd, D.UINT8, self._h)
            off = 0
            for o in outs:
                n = o.numel()
                o.copy_(dst[off : off + n].view_as(o))
                off += n
            return outs

        return self._submit(run, outs + ins)

    # ---- point to point ----------------------------------------------------------

    def send(self, tensors, dst, tag=0):
        self._check_peer(dst, "send")
        tensors = list(tensors)
        if self._cuda(tensors):
            return self._staged(tensors, lambda host: self.send(host, dst, tag).wait())

        def run():
            for t in tensors:
                src = t.contiguous()
                nb = src.numel() * src.element_size()
                self._call("detcollHostSend", _ptr(src), nb, D.UINT8, dst, int(tag), self._h)
            return tensors

        return self._submit(run, tensors)

    def recv(self, tensors, src, tag=0):
        self._check_peer(src, "recv")
        tensors = list(tensors)
        if self._cuda(tensors):
            return self._staged(tensors, lambda host: self.recv(host, src, tag).wait())

        def run():
            for t in tensors:
                dst, copied = _flat(t)
                nb = dst.numel() * dst.element_size()
                self._call("detcollHostRecv", _ptr(dst), nb, D.UINT8, src, int(tag), self._h)
                if copied:
                    t.copy_(dst)
            return tensors

        w = self._submit(run, tensors)
        w._source = src
        return w

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("detcoll: recv from any source is not supported (messages are matched per pair, in order); pass src=")

    def _check_peer(self, peer, what):
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"detcoll {what}: peer {peer} is not another rank of this group of {self._size} (this is rank {self._rank})")

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)

    # ---- CUDA ------------------------------------------------------------------
    # Enqueued on the current stream by the library's device calls, like NCCL;
    # Work.wait() makes the current stream wait for an event recorded after
    # the call. This needs a GPU and cannot run in CI.

    def _cuda_allreduce(self, tensors, op, hows, factor=None, opts=None):
        opts = opts if opts is not None else _opts(op)
        if any(h not in ("native", "avg", "premul") for h in hows):
            return self._staged(tensors, lambda host: self.allreduce(host, opts).wait())
        for t, how in zip(tensors, hows):
            if not t.is_contiguous():
                return self._staged(tensors, lambda host: self.allreduce(host, opts).wait())
        for t, how in zip(tensors, hows):
            if how == "premul":
                t.mul_(_premul_scale(factor, t.dtype, t.device))  # on the current stream, before the sum
            self._device_call("detcollAllReduce", _ptr(t), _ptr(t), t.numel(), _FLOAT[t.dtype], t)
            if how == "avg":
                t.div_(self._size)
        return self._cuda_done(tensors, tensors[0].device)

    def _cuda_native(self, name, output, input, count, avg=False):
        if not (output.is_cuda and input.is_cuda and output.is_contiguous() and input.is_contiguous()):
            raise ValueError(f"detcoll {name}: CUDA tensors must be contiguous and both on the GPU")
        dt = _FLOAT.get(input.dtype, D.UINT8)
        if dt == D.UINT8:
            if name != "detcollAllGather":
                raise TypeError(f"detcoll {name}: dtype {input.dtype} is not reducible on the GPU")
            count = input.numel() * input.element_size()
        self._device_call(name, _ptr(input), _ptr(output), count, dt, input)
        if avg:
            output.div_(self._size)
        return self._cuda_done([output], output.device)

    def _device_call(self, name, send, recv, count, dt, t):
        self._queue.drain()  # queued host work first: call order across ranks
        with torch.cuda.device(t.device):
            stream = torch.cuda.current_stream(t.device).cuda_stream
            self._call(name, send, recv, count, dt, self._h, stream or None)

    def _cuda_done(self, result, device):
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(device))
        return _DoneWork(result, event=ev, device=device, live=self._live)


def _signed(v, dtype):
    bits = {torch.bfloat16: 16, torch.float16: 16, torch.float32: 32, torch.float64: 64}[dtype]
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _opts(op):
    o = dist.AllreduceOptions()
    o.reduceOp = dist.ReduceOp(op) if not isinstance(op, dist.ReduceOp) else op
    return o


def create_process_group(store, rank, size, timeout):
    """The creator torch calls (Backend.register_backend)."""
    return ProcessGroupDetcoll(store, rank, size, timeout)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    reg = dist.Backend.register_backend
    params = reg.__code__.co_varnames[: reg.__code__.co_argcount]
    if "devices" in params:
        # torch >= 2.1: one backend per device type ("cpu:gloo,cuda:detcoll"
        # or "cpu:detcoll,cuda:detcoll"). Not testable on torch 1.13.
        reg(BACKEND_NAME, create_process_group, devices=["cpu", "cuda"])
    else:
        reg(BACKEND_NAME, create_process_group)


_register()
