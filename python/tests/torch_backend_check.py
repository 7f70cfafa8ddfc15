"""Checks of the torch.distributed backend "detcoll", run on every rank under
torchrun (internal/pytorchtest drives it at W = 1, 2, 3, 4):

    torchrun --nproc_per_node 3 python/tests/torch_backend_check.py [suite]

suites (a comma list, faults last): main (default: every collective, ReduceOp, dtype, async, groups,
threads, bad input), faults (mismatch, hung and dead peers), ddp (prints a
digest of the trained weights for cross-run comparison), premul (PREMUL_SUM
only: the factor read from torch's ReduceOp, and the data path).

Every expected value is computed independently on each rank with plain torch
ops over every rank's input (each rank can make any rank's input from its
seed), reduced over the fixed tree ((r0+r1)+(r2+r3))..., and compared raw
(tensor.view(int) bits, never a tolerance). A failed check raises, so the
rank exits non-zero; rank 0 prints "ok <suite>" at the end.
"""

import datetime
import hashlib
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import detcoll
import detcoll.torch  # noqa: F401 - registers "detcoll"

RANK = int(os.environ.get("RANK", "0"))
W = int(os.environ.get("WORLD_SIZE", "1"))
ALL_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
CHECKS = [0]


def log(*a):
    if RANK == 0:
        print(*a, flush=True)


def bits(t):
    """The raw bits of t as an integer tensor of the same element size."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_floating_point():
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def same_bits(got, want, what):
    CHECKS[0] += 1
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"rank {RANK} {what}: got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}")
    if not torch.equal(bits(got), bits(want)):
        g, w_ = bits(got), bits(want)
        i = int((g != w_).nonzero()[0])
        raise AssertionError(f"rank {RANK} {what}: element {i}: got {got.reshape(-1)[i]!r} (bits {int(g[i])}), want {want.reshape(-1)[i]!r} (bits {int(w_[i])})")


def expect_raise(exc, fn, what, contains=None):
    CHECKS[0] += 1
    try:
        fn()
    except exc as e:
        alts = (contains,) if isinstance(contains, str) else contains
        if alts and not any(a in str(e) for a in alts):
            raise AssertionError(f"rank {RANK} {what}: {type(e).__name__} does not say {contains!r}: {e}")
        return e
    raise AssertionError(f"rank {RANK} {what}: no {exc.__name__} raised")


def make(rank, n, dtype, seed, shape=None):
    """Rank rank's input: n elements of dtype, reproducible from (seed, rank)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.bool:
        t = torch.rand(n, generator=g) < 0.5
    elif dtype.is_floating_point:
        t = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
        if n > 2:
            t[0] = -0.0 if rank % 2 else 0.0  # signed zeros travel
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -100), min(info.max, 100)
        t = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(dtype)
    return t.reshape(shape) if shape is not None else t


def tree(vals, f):
    """The fixed tree: adjacent pairs, lower rank left, odd last carried."""
    vals = list(vals)
    while len(vals) > 1:
        nxt = [f(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


def oracle(op, inputs, w):
    """The expected reduction of inputs (rank order) for op, with torch ops."""
    dt = inputs[0].dtype
    if dt == torch.bool:
        f = {"SUM": torch.logical_or, "MAX": torch.logical_or, "BOR": torch.logical_or, "PRODUCT": torch.logical_and,
             "MIN": torch.logical_and, "BAND": torch.logical_and, "BXOR": torch.logical_xor}[op]
        return tree(inputs, f)
    f = {"SUM": torch.add, "AVG": torch.add, "PRODUCT": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum,
         "BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
    out = tree([i.clone() for i in inputs], f)
    if op == "AVG":
        out = out.div_(w)
    if out is inputs[0]:
        out = out.clone()
    return out


def valid(op, dt):
    if dt in FLOATS:
        return op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
    return op != "AVG"


def RO(op):
    return getattr(dist.ReduceOp, op)


# ---- main suite --------------------------------------------------------------


def check_allreduce(group=None, ranks=None):
    ranks = ranks if ranks is not None else list(range(W))
    w, me = len(ranks), ranks.index(RANK)
    seed = 1
    for dt in FLOATS + INTS + [torch.bool]:
        for op in ALL_OPS:
            if not valid(op, dt):
                continue
            for n in (0, 1, 7, 1000):
                seed += 1
                inputs = [make(r, n, dt, seed) for r in ranks]
                t = inputs[me].clone()
                dist.all_reduce(t, op=RO(op), group=group)
                same_bits(t, oracle(op, inputs, w), f"all_reduce {op} {dt} n={n} group={ranks}")
    # a non-contiguous tensor is reduced in place through a copy
    inputs = [make(r, 24, torch.float32, 99, (4, 6)) for r in ranks]
    t = inputs[me].clone().t()  # (6, 4), not contiguous
    assert not t.is_contiguous()
    dist.all_reduce(t, group=group)
    same_bits(t, oracle("SUM", [i.t() for i in inputs], w), "all_reduce non-contiguous")
    # a canonical NaN for MAX when any input is NaN
    x = torch.tensor([1.0, 2.0, 3.0])
    if me == w - 1:
        x[1] = float("nan")
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=group)
    same_bits(x[1:2].view(torch.int32), torch.tensor([0x7FC00000], dtype=torch.int32), "MAX NaN is canonical")


def check_bad_input():
    t = torch.ones(4)
    if not premul_readable():
        expect_raise(NotImplementedError, lambda: dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM on this torch", "PREMUL_SUM")
    expect_raise(TypeError, lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.AVG), "AVG of int", "AVG")
    expect_raise(TypeError, lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND), "BAND of float", "BAND")
    pg = dist.distributed_c10d._get_default_group()
    expect_raise(TypeError, lambda: pg.allreduce([torch.ones(4, dtype=torch.complex64)]), "complex", "complex64")
    # torch itself reduces complex SUM as the real view: exact bits too
    inputs = [make(r, 8, torch.float32, 150) for r in range(W)]
    c = torch.view_as_complex(inputs[RANK].clone().reshape(4, 2))
    dist.all_reduce(c)
    same_bits(torch.view_as_real(c).reshape(-1), oracle("SUM", inputs, W), "complex SUM")
    expect_raise(NotImplementedError, lambda: dist.recv(torch.ones(1)), "recv from any source", "any source")
    if W > 1:
        # torch >= 2 refuses a send to self itself, before the backend sees it.
        expect_raise(ValueError, lambda: dist.send(torch.ones(1), dst=RANK), "send to self", ("peer", "destination rank should not be the same"))
    expect_raise(ValueError, lambda: dist.broadcast(torch.ones(1), src=W), "broadcast from a rank out of range")
    # the group is still usable after argument errors
    x = torch.ones(3)
    dist.all_reduce(x)
    same_bits(x, torch.full((3,), float(W)), "all_reduce after argument errors")


def premul_readable():
    """Whether this torch exposes a PREMUL_SUM ReduceOp's factor to Python
    (torch >= 2: ReduceOp.__getstate__() == (PREMUL_SUM, factor))."""
    try:
        st = dist._make_nccl_premul_sum(2.0).__getstate__()
    except Exception:  # noqa: BLE001
        return False
    return isinstance(st, tuple) and len(st) == 2 and st[1] is not None


class FakePremul:
    """A PREMUL_SUM ReduceOp as torch >= 2 exposes it, for torch versions
    that do not (1.13): passed to the group's methods directly, it runs the
    backend's PREMUL_SUM data path."""

    def __init__(self, factor):
        self.op = dist.ReduceOp.RedOpType.PREMUL_SUM
        self.factor = factor

    def __getstate__(self):
        return (self.op, self.factor)


class Opts:
    def __init__(self, op, root=0):
        self.reduceOp, self.rootRank, self.rootTensor = op, root, 0


def premul_oracle(inputs, factor, w):
    """sum over the fixed tree of round_dtype(x * round_dtype(factor)); the
    product is formed in float64 (exact for bf16/fp16/fp32) and rounded once."""
    dt = inputs[0].dtype
    f = float(torch.as_tensor(factor, dtype=torch.float64).reshape(()).to(dt).double())
    return oracle("SUM", [(i.double() * f).to(dt) for i in inputs], w)


def check_premul_factor():
    """The backend reads a PREMUL_SUM factor (float and tensor) where torch
    exposes it: on torch >= 2 it must; on older torch dist.* refuses it."""
    from detcoll.torch.backend import _premul_factor

    major = int(torch.__version__.split(".")[0])
    CHECKS[0] += 1
    if major >= 2:
        f = _premul_factor(dist._make_nccl_premul_sum(0.37), "check")
        assert f == 0.37, f"rank {RANK}: PREMUL_SUM factor read as {f!r}, want 0.37"
        ft = _premul_factor(dist._make_nccl_premul_sum(torch.tensor([1.5])), "check")
        CHECKS[0] += 1
        assert isinstance(ft, torch.Tensor) and float(ft) == 1.5, f"rank {RANK}: PREMUL_SUM tensor factor read as {ft!r}"
    else:
        expect_raise(NotImplementedError, lambda: _premul_factor(dist._make_nccl_premul_sum(0.37), "check"), "PREMUL_SUM factor on torch 1.x", "PREMUL_SUM")


def suite_premul():
    check_premul_factor()
    check_premul()


def check_premul():
    """PREMUL_SUM: each rank's input times the factor (rounded to the dtype),
    elementwise, then the deterministic SUM. Through dist.* where torch
    exposes the factor (>= 2); through the group's methods with a ReduceOp
    that exposes it otherwise (the NotImplementedError of dist.* on 1.13 is
    checked in check_bad_input)."""
    pg = dist.distributed_c10d._get_default_group()
    real = premul_readable()
    for dt in FLOATS:
        for factor in (0.37, torch.tensor([1.7], dtype=torch.float64)):
            seed = 700 + FLOATS.index(dt)
            n = 9
            inputs = [make(r, n, dt, seed) for r in range(W)]
            want = premul_oracle(inputs, factor, W)
            t = inputs[RANK].clone()
            if real:
                dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
            else:
                pg.allreduce([t], Opts(FakePremul(factor))).wait()
            same_bits(t, want, f"all_reduce PREMUL_SUM {dt} factor={factor}")
            # reduce-scatter: block RANK of the scaled sum; the input is left as it was
            big = [make(r, W * 3, dt, seed + 50) for r in range(W)]
            want = premul_oracle([b[RANK * 3 : (RANK + 1) * 3] for b in big], factor, W)
            inp, out = big[RANK].clone(), torch.empty(3, dtype=dt)
            if real:
                (getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base)(out, inp, op=dist._make_nccl_premul_sum(factor))
            else:
                pg._reduce_scatter_base(out, inp, Opts(FakePremul(factor))).wait()
            same_bits(out, want, f"reduce_scatter_tensor PREMUL_SUM {dt}")
            same_bits(inp, big[RANK], f"reduce_scatter_tensor PREMUL_SUM {dt} leaves the input")
            out2 = torch.empty(3, dtype=dt)
            pg.reduce_scatter([out2], [list(big[RANK].clone().split(3))], Opts(FakePremul(factor))).wait()
            same_bits(out2, want, f"reduce_scatter list PREMUL_SUM {dt}")
            # reduce to the last rank; coalesced
            t = inputs[RANK].clone()
            pg.reduce([t], Opts(FakePremul(factor), root=W - 1)).wait()
            if RANK == W - 1:
                same_bits(t, premul_oracle(inputs, factor, W), f"reduce PREMUL_SUM {dt}")
            else:
                same_bits(t, inputs[RANK], f"reduce PREMUL_SUM {dt}: a non-root tensor is unchanged")
            a, b = inputs[RANK][:4].clone(), inputs[RANK][4:].clone()
            pg.allreduce_coalesced([a, b], Opts(FakePremul(factor))).wait()
            same_bits(torch.cat([a, b]), premul_oracle(inputs, factor, W), f"allreduce_coalesced PREMUL_SUM {dt}")
    expect_raise(TypeError, lambda: pg.allreduce([torch.ones(4, dtype=torch.int32)], Opts(FakePremul(2.0))), "PREMUL_SUM of int", "PREMUL_SUM")
    # a ReduceOp whose factor cannot be read is refused, naming the op
    expect_raise(NotImplementedError, lambda: pg.allreduce([torch.ones(4)], Opts(FakePremul(None))), "PREMUL_SUM without a factor", "PREMUL_SUM")
    log(f"PREMUL_SUM through {'dist.* (factor readable on torch ' + torch.__version__ + ')' if real else 'the group methods (torch ' + torch.__version__ + ' does not expose the factor)'}")


def check_allgather():
    for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.int16):
        for n in (0, 1, 5):
            inputs = [make(r, n, dt, 300 + n) for r in range(W)]
            outs = [torch.empty(n, dtype=dt) for _ in range(W)]
            dist.all_gather(outs, inputs[RANK])
            for r in range(W):
                same_bits(outs[r], inputs[r], f"all_gather list {dt} n={n} block {r}")
            out = torch.empty(W * n, dtype=dt)
            fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
            fn(out, inputs[RANK])
            same_bits(out, torch.cat(inputs), f"all_gather_into_tensor {dt} n={n}")
    # the input may be this rank's block of the output (in place)
    inputs = [make(r, 6, torch.float32, 310) for r in range(W)]
    out = torch.zeros(W * 6)
    out[RANK * 6 : (RANK + 1) * 6] = inputs[RANK]
    fn(out, out[RANK * 6 : (RANK + 1) * 6])
    same_bits(out, torch.cat(inputs), "all_gather_into_tensor in place")
    # non-contiguous input and outputs
    inputs = [make(r, 12, torch.float64, 320, (3, 4)) for r in range(W)]
    outs = [torch.empty(4, 3, dtype=torch.float64).t() for _ in range(W)]
    dist.all_gather(outs, inputs[RANK].t().contiguous().t())
    for r in range(W):
        same_bits(outs[r], inputs[r], f"all_gather non-contiguous block {r}")


def check_reduce_scatter():
    for dt, ops in ((torch.float32, ("SUM", "AVG", "MAX")), (torch.bfloat16, ("SUM",)), (torch.int32, ("SUM", "BXOR", "MIN"))):
        for op in ops:
            n = 5
            inputs = [make(r, W * n, dt, 400) for r in range(W)]
            want = oracle(op, [i[RANK * n : (RANK + 1) * n] for i in inputs], W)
            out = torch.empty(n, dtype=dt)
            fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
            fn(out, inputs[RANK].clone(), op=RO(op))
            same_bits(out, want, f"reduce_scatter_tensor {op} {dt}")
            out2 = torch.empty(n, dtype=dt)
            dist.reduce_scatter(out2, list(inputs[RANK].clone().split(n)), op=RO(op))
            same_bits(out2, want, f"reduce_scatter list {op} {dt}")


def check_broadcast_scatter_gather_reduce():
    for root in range(W):
        for dt in (torch.float16, torch.int8, torch.bool):
            inputs = [make(r, 9, dt, 500 + root) for r in range(W)]
            t = inputs[RANK].clone()
            dist.broadcast(t, src=root)
            same_bits(t, inputs[root], f"broadcast root {root} {dt}")
        # scatter
        blocks = [make(r, 4, torch.float32, 510 + root) for r in range(W)]
        out = torch.empty(4)
        dist.scatter(out, blocks if RANK == root else None, src=root)
        same_bits(out, blocks[RANK], f"scatter root {root}")
        # gather
        inputs = [make(r, 3, torch.int64, 520 + root) for r in range(W)]
        outs = [torch.empty(3, dtype=torch.int64) for _ in range(W)] if RANK == root else None
        dist.gather(inputs[RANK], outs, dst=root)
        if RANK == root:
            for r in range(W):
                same_bits(outs[r], inputs[r], f"gather root {root} block {r}")
        # reduce: only the root's tensor changes
        for op in ("SUM", "MAX"):
            inputs = [make(r, 6, torch.float64, 530 + root) for r in range(W)]
            t = inputs[RANK].clone()
            dist.reduce(t, dst=root, op=RO(op))
            same_bits(t, oracle(op, inputs, W) if RANK == root else inputs[RANK], f"reduce {op} root {root}")


def check_alltoall():
    # equal splits
    n = 3
    inputs = [make(r, W * n, torch.float32, 600) for r in range(W)]
    out = torch.empty(W * n)
    dist.all_to_all_single(out, inputs[RANK])
    same_bits(out, torch.cat([inputs[p][RANK * n : (RANK + 1) * n] for p in range(W)]), "all_to_all_single equal")
    # uneven splits, rows of 2 elements: rank s sends (s + d) % 3 rows to rank d
    rows = lambda s, d: (s + d) % 3  # noqa: E731
    inputs = [make(r, 2 * sum(rows(r, d) for d in range(W)), torch.bfloat16, 610, (-1, 2)) for r in range(W)]
    out = torch.empty(sum(rows(s, RANK) for s in range(W)), 2, dtype=torch.bfloat16)
    dist.all_to_all_single(out, inputs[RANK], output_split_sizes=[rows(s, RANK) for s in range(W)],
                           input_split_sizes=[rows(RANK, d) for d in range(W)])
    want = []
    for s in range(W):
        off = sum(rows(s, d) for d in range(RANK))
        want.append(inputs[s][off : off + rows(s, RANK)])
    same_bits(out, torch.cat(want), "all_to_all_single uneven")
    # list form, int and bool
    for dt in (torch.int32, torch.bool):
        ins = [make(RANK * W + d, d + 1, dt, 620) for d in range(W)]
        outs = [torch.empty(RANK + 1, dtype=dt) for _ in range(W)]
        dist.all_to_all(outs, ins)
        for s in range(W):
            same_bits(outs[s], make(s * W + RANK, RANK + 1, dt, 620), f"all_to_all list {dt} from {s}")


def check_send_recv():
    if W == 1:
        return
    # a ring, even ranks send first (a Send may wait for its Recv)
    nxt, prv = (RANK + 1) % W, (RANK - 1) % W
    mine = make(RANK, 10, torch.float64, 700)
    got = torch.empty(10, dtype=torch.float64)
    if RANK % 2 == 0:
        dist.send(mine, nxt, tag=3)
        dist.recv(got, prv, tag=3)
    else:
        dist.recv(got, prv, tag=3)
        dist.send(mine, nxt, tag=3)
    if W % 2 == 0 or True:
        same_bits(got, make(prv, 10, torch.float64, 700), "send/recv ring")
    # isend / irecv
    if RANK == 0:
        reqs = [dist.isend(make(0, 4, torch.int16, 710 + p), p) for p in range(1, W)]
        for q in reqs:
            q.wait()
    else:
        t = torch.empty(4, dtype=torch.int16)
        dist.irecv(t, 0).wait()
        same_bits(t, make(0, 4, torch.int16, 710 + RANK), "isend/irecv")


def check_coalesced_barrier():
    ts = [make(RANK, n, torch.float32, 800 + n) for n in (3, 0, 5)]
    want = [oracle("SUM", [make(r, n, torch.float32, 800 + n) for r in range(W)], W) for n in (3, 0, 5)]
    dist.all_reduce_coalesced(ts)
    for t, w_ in zip(ts, want):
        same_bits(t, w_, "all_reduce_coalesced")
    dist.barrier()


def check_async():
    inputs = [[make(r, 2000, torch.float32, 900 + k) for r in range(W)] for k in range(4)]
    ts = [inputs[k][RANK].clone() for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    busy = torch.randn(200, 200) @ torch.randn(200, 200)  # the caller keeps computing
    fut = works[3].get_future()
    for k, w_ in enumerate(works):
        w_.wait()
        assert w_.is_completed()
        same_bits(ts[k], oracle("SUM", inputs[k], W), f"async all_reduce {k}")
    same_bits(fut.wait()[0], ts[3], "get_future value")
    # a future's then() runs once the collective is done
    t = inputs[0][RANK].clone()
    f2 = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    same_bits(f2.wait(), oracle("SUM", inputs[0], W) * 2, "future.then")
    del busy
    # A then() callback (run on the group's worker thread) that issues a
    # blocking collective while another is queued behind the one it follows:
    # the worker runs the queued one, then the callback's, in call order (it
    # deadlocked when the worker waited for another thread to run them). A
    # gate in the queue holds the worker until both are queued.
    pg = dist.distributed_c10d._get_default_group()
    gate = threading.Event()
    pg._queue.submit(lambda: gate.wait(60) and [], True)
    ta, tb = inputs[2][RANK].clone(), inputs[3][RANK].clone()
    seen = []

    def cb(f):
        y = inputs[0][RANK].clone()
        dist.all_reduce(y)
        seen.append(y)
        return True

    fa = dist.all_reduce(ta, async_op=True).get_future().then(cb)
    wb = dist.all_reduce(tb, async_op=True)
    gate.set()
    ok = []
    th = threading.Thread(target=lambda: ok.append(fa.wait()), daemon=True)
    th.start()
    th.join(60)
    CHECKS[0] += 1
    if ok != [True]:
        raise AssertionError(f"rank {RANK}: a then() callback's blocking all_reduce behind a queued one did not complete in 60 s")
    wb.wait()
    same_bits(seen[0], oracle("SUM", inputs[0], W), "blocking all_reduce in a then() callback")
    same_bits(tb, oracle("SUM", inputs[3], W), "the all_reduce queued ahead of the callback's")
    same_bits(ta, oracle("SUM", inputs[2], W), "the all_reduce whose future ran the callback")
    # a Work waited on long after completion
    t = inputs[1][RANK].clone()
    w_ = dist.all_reduce(t, async_op=True)
    time.sleep(0.05)
    w_.wait()
    same_bits(t, oracle("SUM", inputs[1], W), "late wait")


def check_groups():
    # every rank calls new_group; members get a detcoll communicator of their own
    evens = [r for r in range(W) if r % 2 == 0]
    g = dist.new_group(evens, backend="detcoll")
    if RANK in evens:
        check_allreduce_small(g, evens)
    odds = [r for r in range(W) if r % 2 == 1]
    if odds:
        g2 = dist.new_group(odds, backend="detcoll")
        if RANK in odds:
            check_allreduce_small(g2, odds)
    if W >= 2 and W % 2 == 0:
        pairs = [[r, r + 1] for r in range(0, W, 2)]
        if torch.cuda.is_available():
            sub, _ = dist.new_subgroups_by_enumeration(pairs, backend="detcoll")
        else:
            # torch 1.13's new_subgroups* refuse to run without CUDA; this is
            # what they do: every rank creates every subgroup, in order.
            subs = [dist.new_group(p, backend="detcoll") for p in pairs]
            sub = subs[RANK // 2]
        ranks = [RANK - RANK % 2, RANK - RANK % 2 + 1]
        check_allreduce_small(sub, ranks)
    # a full-world group gives the same bits as the default group; rank 0
    # joins late, so the others poll the store for its address many times
    # (a c10d TCPStore client whose wait() timed out would be out of step
    # with its server afterwards, breaking torch's own store barrier too)
    if RANK == 0:
        time.sleep(0.7)
    g3 = dist.new_group(list(range(W)), backend="detcoll")
    dist.barrier(group=g3)
    inputs = [make(r, 100, torch.bfloat16, 1000) for r in range(W)]
    a, b = inputs[RANK].clone(), inputs[RANK].clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=g3)
    same_bits(a, b, "world group = default group")


def check_allreduce_small(group, ranks):
    w, me = len(ranks), ranks.index(RANK)
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        inputs = [make(r, 33, dt, 1100) for r in ranks]
        t = inputs[me].clone()
        dist.all_reduce(t, group=group)
        same_bits(t, oracle("SUM", inputs, w), f"group {ranks} all_reduce {dt}")
    outs = [torch.empty(2) for _ in ranks]
    dist.all_gather(outs, torch.full((2,), float(RANK)), group=group)
    for i, r in enumerate(ranks):
        same_bits(outs[i], torch.full((2,), float(r)), f"group {ranks} all_gather")
    t = torch.full((3,), float(RANK))
    dist.broadcast(t, src=ranks[-1], group=group)
    same_bits(t, torch.full((3,), float(ranks[-1])), f"group {ranks} broadcast from global rank {ranks[-1]}")


def check_threads():
    """A collective from a second thread while one from the first is
    pending is refused (SecondThreadError), never mixed."""
    if W == 1:
        return
    store = dist.distributed_c10d._get_default_store()
    n = 1 << 14
    inputs = [make(r, n, torch.float32, 1200) for r in range(W)]
    t = inputs[RANK].clone()
    if RANK == W - 1:
        # hold back until every other rank has tried its second thread
        store.wait([f"threads/{r}" for r in range(W - 1)], datetime.timedelta(seconds=60))
    w_ = dist.all_reduce(t, async_op=True)
    if RANK < W - 1:
        errs = []

        def second():
            try:
                dist.all_reduce(torch.ones(4))
            except detcoll.torch.SecondThreadError as e:
                errs.append(e)

        th = threading.Thread(target=second)
        th.start()
        th.join()
        CHECKS[0] += 1
        if not errs:
            raise AssertionError(f"rank {RANK}: a collective from a second thread while one was pending was not refused")
        store.set(f"threads/{RANK}", "1")
    w_.wait()
    same_bits(t, oracle("SUM", inputs, W), "the first thread's all_reduce is intact")
    # once nothing is pending, another thread may issue collectives
    out = []
    th = threading.Thread(target=lambda: out.append(dist.all_reduce(torch.ones(2)) or True))
    th.start()
    th.join()
    CHECKS[0] += 1
    assert out == [True], f"rank {RANK}: a collective from another thread after completion failed"


def check_threads_blocking():
    """A second thread's collective is refused while the first thread is
    inside a blocking dist.all_reduce (the inline path, which queues no
    operation): the last rank holds back so that the others block."""
    if W == 1:
        return
    store = dist.distributed_c10d._get_default_store()
    pg = dist.distributed_c10d._get_default_group()
    inputs = [make(r, 64, torch.float32, 1300) for r in range(W)]
    t = inputs[RANK].clone()
    errs = []
    if RANK == W - 1:
        store.wait([f"threadsb/{r}" for r in range(W - 1)], datetime.timedelta(seconds=60))
    else:

        def second():
            deadline = time.monotonic() + 60
            while not pg._queue._q:  # until the first thread is inside its all_reduce
                if time.monotonic() > deadline:
                    errs.append(None)
                    break
                time.sleep(0.001)
            try:
                dist.all_reduce(torch.ones(4))
            except detcoll.torch.SecondThreadError as e:
                errs.append(e)
            store.set(f"threadsb/{RANK}", "1")

        th = threading.Thread(target=second)
        th.start()
    dist.all_reduce(t)
    if RANK < W - 1:
        th.join()
        CHECKS[0] += 1
        if not errs or errs[0] is None:
            raise AssertionError(f"rank {RANK}: a collective from a second thread during a blocking all_reduce was not refused: {errs}")
    same_bits(t, oracle("SUM", inputs, W), "the blocking all_reduce is intact after a second thread's refusal")


def check_store_adapter():
    """The store callbacks never leave torch's store client out of step: a
    poll for a missing key (answered "not yet") followed by other requests
    on the same client must give the right answers. (A c10d TCPStore client
    whose wait() timed out reads the late reply as the answer to its next
    request.)"""
    import ctypes

    from detcoll.torch.backend import _StoreAdapter

    store = dist.distributed_c10d._get_default_store()
    ad = _StoreAdapter(store)
    buf = ctypes.create_string_buffer(64)
    n = (ctypes.c_size_t * 1)()
    for _ in range(3):
        rc = ad._get(None, f"adapter/missing/{RANK}".encode(), 50, buf, 64, n)
        CHECKS[0] += 1
        assert rc == 1, f"rank {RANK}: a missing key gave {rc}, not 1"
    # the key appears later (a server answers a timed-out wait then)
    store.set(f"adapter/missing/{RANK}", b"late")
    time.sleep(0.05)
    key = f"adapter/count/{RANK}"
    CHECKS[0] += 1
    assert store.add(key, 5) == 5 and store.add(key, 2) == 7, f"rank {RANK}: the store client is out of step after polls"
    store.set(f"adapter/v/{RANK}", b"\x00\x01xyz")
    rc = ad._get(None, f"adapter/v/{RANK}".encode(), 50, buf, 64, n)
    CHECKS[0] += 1
    assert rc == 0 and n[0] == 5 and buf.raw[:5] == b"\x00\x01xyz", f"rank {RANK}: get gave {rc} {n[0]} {buf.raw[:5]!r}"


def suite_main():
    check_store_adapter()
    check_bad_input()
    check_allreduce()
    check_allgather()
    check_reduce_scatter()
    check_broadcast_scatter_gather_reduce()
    check_alltoall()
    check_send_recv()
    check_coalesced_barrier()
    check_async()
    check_threads()
    check_threads_blocking()
    check_premul_factor()
    check_premul()
    check_groups()


# ---- faults --------------------------------------------------------------------


def suite_faults():
    if W == 1:
        return
    # Mismatched collectives: every rank of the group raises.
    g = dist.new_group(list(range(W)), backend="detcoll", timeout=datetime.timedelta(seconds=20))
    n = 4 if RANK == 0 else 5
    e = expect_raise(detcoll.DetcollError, lambda: dist.all_reduce(torch.ones(n), group=g), "mismatched counts")
    if not isinstance(e, (detcoll.MismatchError, detcoll.RemoteError)):
        raise AssertionError(f"rank {RANK}: mismatch raised {type(e).__name__}: {e}")
    print(f"rank {RANK}: mismatched counts raised {type(e).__name__}", flush=True)
    g = dist.new_group(list(range(W)), backend="detcoll", timeout=datetime.timedelta(seconds=20))
    dt = torch.float32 if RANK == 0 else torch.float64
    expect_raise(detcoll.DetcollError, lambda: dist.all_reduce(torch.ones(4, dtype=dt), group=g), "mismatched dtypes")
    g = dist.new_group(list(range(W)), backend="detcoll", timeout=datetime.timedelta(seconds=20))
    expect_raise(
        detcoll.DetcollError,
        lambda: dist.all_reduce(torch.ones(4), group=g) if RANK == 0 else dist.broadcast(torch.ones(4), src=0, group=g),
        "mismatched operations",
    )
    # A hung peer: the others raise a timeout within the group's timeout.
    g = dist.new_group(list(range(W)), backend="detcoll", timeout=datetime.timedelta(seconds=2))
    store = dist.distributed_c10d._get_default_store()
    if RANK == W - 1:
        store.wait([f"hung/{r}" for r in range(W - 1)], datetime.timedelta(seconds=60))
    else:
        t0 = time.monotonic()
        e = expect_raise(detcoll.DetcollError, lambda: dist.all_reduce(torch.ones(4), group=g), "hung peer")
        took = time.monotonic() - t0
        if not isinstance(e, detcoll.DetcollTimeoutError) and not isinstance(e, detcoll.RemoteError):
            raise AssertionError(f"rank {RANK}: hung peer raised {type(e).__name__}: {e}")
        if took > 10:
            raise AssertionError(f"rank {RANK}: hung peer took {took:.1f}s to raise (timeout 2s)")
        store.set(f"hung/{RANK}", "1")
    # A dead peer: the last rank exits (status 0, so torchrun lets the
    # others run); the others raise well within the timeout.
    g = dist.new_group(list(range(W)), backend="detcoll", timeout=datetime.timedelta(seconds=30))
    dist.barrier(group=g)
    if RANK == W - 1:
        sys.stdout.flush()
        os._exit(0)
    t0 = time.monotonic()
    e = expect_raise(detcoll.DetcollError, lambda: dist.all_reduce(torch.ones(1 << 10), group=g), "dead peer")
    took = time.monotonic() - t0
    if took > 30:
        raise AssertionError(f"rank {RANK}: dead peer took {took:.1f}s to raise")
    log(f"dead peer: rank 0 raised {type(e).__name__} after {took:.2f}s")


# ---- DDP ---------------------------------------------------------------------------


def train_ddp(group, bucket_cap_mb, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 1)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(4242 + RANK)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 1, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def suite_ddp():
    ref = None
    for cap in (25, 0.5, 0.1, 0.001):  # one bucket ... one bucket per parameter
        w_ = train_ddp(None, cap)
        if ref is None:
            ref = w_
        else:
            same_bits(w_, ref, f"DDP weights with bucket_cap_mb={cap} vs 25")
    everyone = [torch.empty_like(ref) for _ in range(W)]
    dist.all_gather(everyone, ref)
    for r in range(W):
        same_bits(everyone[r], ref, f"DDP weights of rank {r}")
    gloo = dist.new_group(list(range(W)), backend="gloo")
    wg = train_ddp(gloo, 25)
    # For the record (not asserted): whether Gloo's weights depend on the buckets.
    gl = [bits(train_ddp(gloo, cap)) for cap in (0.5, 0.1, 0.001)]
    log("gloo bucket layouts give identical weights:", [torch.equal(bits(wg), g) for g in gl])
    diff = (wg.double() - ref.double()).abs().max().item()
    CHECKS[0] += 1
    if diff > 1e-5:
        raise AssertionError(f"DDP weights differ from Gloo's by {diff}")
    log(f"ddp digest {hashlib.sha256(bits(ref).numpy().tobytes()).hexdigest()} max|detcoll-gloo| {diff:.3g}")


def main():
    suites = (sys.argv[1] if len(sys.argv) > 1 else "main").split(",")
    timeout = datetime.timedelta(seconds=float(os.environ.get("DETCOLL_CHECK_TIMEOUT", "60")))
    dist.init_process_group("detcoll", timeout=timeout)
    assert dist.get_backend() == "detcoll", dist.get_backend()
    assert dist.get_world_size() == W and dist.get_rank() == RANK
    fns = {"main": suite_main, "faults": suite_faults, "ddp": suite_ddp, "premul": suite_premul}
    if "faults" in suites[:-1] or any(s not in fns for s in suites):
        raise SystemExit(f"suites: a comma list of {sorted(fns)}, faults last")
    for suite in suites:
        t0, CHECKS[0] = time.monotonic(), 0
        fns[suite]()
        log(f"ok {suite} W={W} checks={CHECKS[0]} in {time.monotonic() - t0:.1f}s")
    sys.stdout.flush()
    if "faults" in suites:
        os._exit(0)  # the broken groups' communicators are not destroyed politely
    dist.destroy_process_group()
    # A normal interpreter exit: the groups' worker threads are joined at
    # shutdown, before finalization (the W=4 SIGABRT at exit, docs/pytorch.md).


if __name__ == "__main__":
    main()
