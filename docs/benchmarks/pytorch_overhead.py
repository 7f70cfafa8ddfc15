"""Per-call overhead of the "detcoll" torch.distributed backend over the C call
it makes, on host memory (CPU tensors).

    torchrun --nproc_per_node W docs/benchmarks/pytorch_overhead.py [--iters N] [--samples S] [--numel N]

Rank 0 prints, per variant, the median, 10th and 90th percentile and
minimum of the mean time per call over blocks of 100 calls, the variants'
blocks interleaved (S x N/100 blocks each):

  c_call        detcollHostAllReduce through ctypes on the tensor's pointer
                (the baseline: what the backend cannot avoid)
  c_call_gap    the C call after 8 us of Python busy-waiting (no backend):
                the cost of a gap between calls, for comparison
  pg_wait       pg.allreduce([t]).wait() on the ProcessGroupDetcoll object
                (not a torch wrapper, so it gets a Work, a queue entry and
                wakes the worker, which races the caller's wait())
  dist_sync     torch.distributed.all_reduce(t), blocking: torch's Python
                wrapper, then the backend's blocking path (the C call made
                inside allreduce(), no Work made; docs/pytorch.md)
  dist_async    all_reduce(t, async_op=True) x N, then wait() on all (the
                worker thread runs them: the overlap path)
  gloo_sync     torch.distributed.all_reduce(t) on a Gloo group, for scale

overhead = pg_wait - c_call and dist_sync - c_call. Every variant runs the
same number of calls in the same order on every rank.
"""

import argparse
import ctypes
import statistics
import time

import torch
import torch.distributed as dist

import detcoll.torch  # noqa: F401
from detcoll import _dtypes as D
from detcoll import _lib


def interleaved(variants, iters, samples, block=100):
    """Per variant, samples of the mean time per call (us). Variants run in
    alternating blocks of `block` calls, so that a machine whose load
    changes (shared CI hosts) loads them alike; a sample is the mean over
    one block, and `samples` x (iters / block) blocks are taken."""
    for _, fn, scale in variants:
        fn()  # warm
    out = {name: [] for name, _, _ in variants}
    dist.barrier()
    for _ in range(samples * max(1, iters // block)):
        for name, fn, scale in variants:
            n = max(1, block // scale)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out[name].append((time.perf_counter() - t0) / (n * scale) * 1e6)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--numel", type=int, default=1)
    a = ap.parse_args()
    dist.init_process_group("detcoll")
    rank, w = dist.get_rank(), dist.get_world_size()
    pg = dist.distributed_c10d._get_default_group()
    gloo = dist.new_group(list(range(w)), backend="gloo")
    t = torch.ones(a.numel)
    lib = _lib.lib()
    h = pg.comm._h
    ptr = t.data_ptr()

    def c_call():
        rc = lib.detcollHostAllReduce(ptr, ptr, a.numel, D.FLOAT32, h)
        if rc:
            raise RuntimeError(rc)

    def c_call_gap():
        # the C call after 8 us of Python-side busy work: what a caller that
        # does anything between calls pays (the Go runtime's threads park in
        # the gaps and must be woken), without the backend
        end = time.perf_counter() + 8e-6
        while time.perf_counter() < end:
            pass
        c_call()

    def pg_wait():
        pg.allreduce([t]).wait()

    def dist_sync():
        dist.all_reduce(t)

    def dist_async():
        works = [dist.all_reduce(t, async_op=True) for _ in range(100)]
        for x in works:
            x.wait()

    def gloo_sync():
        dist.all_reduce(t, group=gloo)

    variants = [("c_call", c_call, 1), ("c_call_gap", c_call_gap, 1), ("pg_wait", pg_wait, 1), ("dist_sync", dist_sync, 1),
                ("dist_async", dist_async, 100), ("gloo_sync", gloo_sync, 1)]
    res = interleaved(variants, a.iters, a.samples)
    if rank == 0:
        print(f"W={w} numel={a.numel} fp32 blocks of 100 calls x {len(res['c_call'])} torch {torch.__version__}")
        print(f"{'variant':12s} {'median us':>10s} {'p10':>8s} {'p90':>8s} {'min':>8s}")
        for name, v in res.items():
            q = statistics.quantiles(v, n=10)
            print(f"{name:12s} {statistics.median(v):10.2f} {q[0]:8.2f} {q[-1]:8.2f} {min(v):8.2f}")
        for name in ("c_call_gap", "pg_wait", "dist_sync", "dist_async"):
            d = [x - y for x, y in zip(res[name], res["c_call"])]  # adjacent blocks
            q = statistics.quantiles(d, n=10)
            print(f"overhead {name} - c_call (adjacent blocks): median {statistics.median(d):.2f} us, p10 {q[0]:.2f}, p90 {q[-1]:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
