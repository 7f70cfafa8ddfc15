"""The seed's collective benchmark, run the way PyTorch users run things:

    torchrun --nproc-per-node 8 -m detcoll.torch.bench --dtype bf16 \\
        --operations all_reduce all_gather reduce_scatter \\
        --size-bytes 4096 65536 1048576 16777216 \\
        --warmup 20 --iterations 100 --samples 10 --output r.json

(torch 1.13's torchrun spells it --nproc_per_node.) It compares detcoll
with the torch.distributed backend already in use: NCCL (RCCL on ROCm) for
CUDA tensors, Gloo for CPU tensors, and writes a ``detcoll.bench.v1``
report (docs/contract.md, bench/report.go): the same fields as
``detcoll bench`` — slowest-rank median/min/max per sample, ratio to
native, input and bus bandwidth, memory, repeated-run bitwise stability,
bits against the host oracle, max |detcoll − native|.

detcoll runs through the ``"detcoll"`` torch.distributed backend when
``import detcoll.torch`` registers it (``--detcoll backend``), else through
a ``detcoll.Comm`` made from a unique id passed over the native group
(``--detcoll comm``). Timings are per iteration, each sample the mean over
--iterations calls of the slowest rank (its mean, all-reduced with MAX over
the native group). all_reduce is in place in torch's API: each iteration of
both sides copies the input into the work buffer first (so every
iteration sums the same values), and that copy is in both timings.

Memory (the C API reports no allocator statistics, so these are process
figures): on CUDA, workspace_bytes is the device memory still in use after
the row that was not before it (cudaMemGetInfo: detcoll's retained
workspace and anything else the row left) and peak_allocated_bytes the
peak of torch's caching allocator during the row over its start; on CPU,
the resident set after minus before (workspace) and the growth of the peak
resident set (peak). Both sides are measured the same way.
"""

import argparse
import datetime
import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import detcoll

from . import functional as F
from .parallel import tree_sum

OPS = ("all_reduce", "all_gather", "reduce_scatter")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
            "float64": "fp64", "double": "fp64"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m detcoll.torch.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32 or fp64 (default bf16)")
    p.add_argument("--operations", nargs="+", default=list(OPS), help="all_reduce all_gather reduce_scatter")
    p.add_argument("--size-bytes", nargs="+", type=int, default=[4096, 65536, 1048576, 16777216],
                   help="per-rank input sizes (rounded to whole elements; reduce_scatter to a multiple of W)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: CUDA when torch sees a GPU, else CPU")
    p.add_argument("--native-backend", default=None,
                   help="the torch.distributed backend to compare with (default: nccl on CUDA, gloo on CPU)")
    p.add_argument("--detcoll", choices=("auto", "backend", "comm"), default="auto",
                   help="how to reach detcoll: the registered torch backend, or a detcoll.Comm (auto: backend if registered)")
    p.add_argument("--no-oracle", action="store_true", help="skip the host-oracle bit check (saves time at large sizes)")
    p.add_argument("--output", default=None, help="write the JSON report here (rank 0)")
    a = p.parse_args(argv)
    a.dtype = _ALIASES.get(a.dtype.lower(), a.dtype.lower())
    if a.dtype not in DTYPES:
        p.error(f"--dtype {a.dtype!r}: want bf16, fp16, fp32 or fp64")
    ops = []
    for o in a.operations:
        k = o.lower().replace("-", "_")
        k = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter"}.get(k, k)
        if k not in OPS:
            p.error(f"--operations {o!r}: want all_reduce, all_gather, reduce_scatter")
        ops.append(k)
    a.operations = ops
    if a.iterations < 1 or a.samples < 1 or a.warmup < 0 or any(s <= 0 for s in a.size_bytes):
        p.error("--iterations and --samples must be >= 1, --warmup >= 0, sizes > 0")
    return a


def input_bytes(op, esize, w, requested):
    """Go's bench.InputBytes: whole elements, at least one; reduce_scatter a
    multiple of W elements, at least W."""
    n = requested // esize
    if op == "reduce_scatter":
        return max(n // w * w, w) * esize
    return max(n, 1) * esize


def bus_bytes(op, w, nbytes):
    """Go's bench.BusBytes (nccl-tests' conventions)."""
    if op == "all_reduce":
        return 2 * (w - 1) / w * nbytes
    if op == "all_gather":
        return (w - 1) * nbytes
    return (w - 1) / w * nbytes


def make_input(seed, rank, dtype, n, code):
    g = torch.Generator().manual_seed((seed * 1_000_003 + rank * 7919 + code) % (1 << 63))
    return torch.randn(n, generator=g, dtype=torch.float32).to(dtype)


class Side:
    """One way of running the three collectives."""

    def __init__(self, name, group, rank, w, cast=None):
        self.name, self.group, self.rank, self.w = name, group, rank, w
        self.cast = cast  # run in this dtype (widen, collective, round back)

    def run(self, op, inp, work, out):
        if self.cast is not None:
            # The native backend lacks the dtype (Gloo and bf16 on torch
            # 1.13): widen, run the collective in self.cast, round back.
            wi = inp.to(self.cast)
            ww = torch.empty_like(wi) if work is not None else None
            wo = torch.empty(out.numel(), dtype=self.cast, device=out.device) if out is not None else None
            r = self._run(op, wi, ww, wo)
            dst = work if op == "all_reduce" else out
            dst.copy_(r)
            return dst
        return self._run(op, inp, work, out)

    def _run(self, op, inp, work, out):
        g = self.group
        if op == "all_reduce":
            work.copy_(inp)
            if F._is_comm(g):
                g.all_reduce(work)
            else:
                dist.all_reduce(work, group=g)
            return work
        if op == "all_gather":
            if F._is_comm(g):
                g.all_gather(inp, out)
            elif F._is_gloo(g):
                dist.all_gather(list(out.chunk(self.w)), inp, group=g)
            else:
                dist.all_gather_into_tensor(out, inp, group=g)
            return out
        if F._is_comm(g):
            g.reduce_scatter(inp, out)
        elif F._is_gloo(g):
            # Gloo (torch 1.13) has no reduce_scatter: all_reduce of a copy
            # of the input, then this rank's block.
            work.copy_(inp)
            dist.all_reduce(work, group=g)
            out.copy_(work.view(self.w, -1)[self.rank])
        else:
            dist.reduce_scatter_tensor(out, inp, group=g)
        return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rss():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Memory:
    def __init__(self, device):
        self.device = device

    def start(self):
        _sync(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base_alloc = torch.cuda.memory_allocated(self.device)
            self.free0 = torch.cuda.mem_get_info(self.device)[0]
        else:
            self.rss0, self.peak0 = _rss(), _peak_rss()

    def stop(self):
        """(retained, peak) bytes."""
        _sync(self.device)
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) - self.base_alloc
            retained = self.free0 - torch.cuda.mem_get_info(self.device)[0]
            return max(retained, 0), max(peak, 0)
        return max(_rss() - self.rss0, 0), max(_peak_rss() - self.peak0, 0)


def _max_over_ranks(v, device, group):
    t = torch.tensor([float(v)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def _digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()


def _max_abs(a, b):
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    d = (a - b).abs()
    d = torch.where(torch.isnan(a) ^ torch.isnan(b), torch.full_like(d, float("inf")), d)
    d = torch.where(both_nan | (a == b), torch.zeros_like(d), d)  # equal infinities are no difference
    return float(d.max().item()) if d.numel() else 0.0


def _time(side, op, bufs, args, device, native_group):
    inp, work, out = bufs
    for _ in range(args.warmup):
        side.run(op, inp, work, out)
    _sync(device)
    samples = []
    for _ in range(args.samples):
        dist.barrier(group=native_group)
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            side.run(op, inp, work, out)
        _sync(device)
        mean_us = (time.perf_counter() - t0) / args.iterations * 1e6
        samples.append(_max_over_ranks(mean_us, device, native_group))
    return samples


def _timing(samples):
    s = sorted(samples)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"median_us": med, "min_us": s[0], "max_us": s[-1], "samples_us": samples}


def _oracle(op, args, dt, n_in, w, rank, code):
    xs = [make_input(args.seed, r, dt, n_in, code) for r in range(w)]
    if op == "all_gather":
        return torch.cat(xs)
    s = tree_sum(xs)
    return s if op == "all_reduce" else s.view(w, -1)[rank].clone()


def run_row(op, requested, args, dt, dsz, code, device, det, nat, native_group, w, rank):
    nbytes = input_bytes(op, dsz, w, requested)
    n_in = nbytes // dsz
    n_out = n_in * w if op == "all_gather" else (n_in // w if op == "reduce_scatter" else n_in)
    inp = make_input(args.seed, rank, dt, n_in, code).to(device)

    def buffers():
        work = torch.empty(n_in, dtype=dt, device=device) if op != "all_gather" else None
        out = torch.empty(n_out, dtype=dt, device=device) if op != "all_reduce" else None
        return inp, work, out

    mem = Memory(device)
    mem.start()
    dbufs = buffers()
    first = det.run(op, *dbufs).clone()
    dsamples = _time(det, op, dbufs, args, device, native_group)
    last = (dbufs[1] if op == "all_reduce" else dbufs[2]).clone()
    del dbufs
    ws, peak = mem.stop()

    mem.start()
    nbufs = buffers()
    native_out = nat.run(op, *nbufs).clone()
    nsamples = _time(nat, op, nbufs, args, device, native_group)
    del nbufs
    _, npeak = mem.stop()

    # Bits: this rank's first and last outputs, and (all_reduce, all_gather)
    # every rank's output the same.
    digests = [None] * w
    dist.all_gather_object(digests, (_digest(first), _digest(last)), group=native_group)
    repeat = all(a == b for a, b in digests)
    if op != "reduce_scatter":
        repeat = repeat and len({a for a, _ in digests}) == 1
    oracle_ok = True
    if not args.no_oracle:
        want = _oracle(op, args, dt, n_in, w, rank, code)
        oracle_ok = torch.equal(first.cpu().view(_INT[dsz]), want.view(_INT[dsz]))
    flags = [None] * w
    dist.all_gather_object(flags, (bool(oracle_ok), _max_abs(first, native_out), ws, peak, npeak), group=native_group)
    oracle_all = all(f[0] for f in flags) if not args.no_oracle else False
    dtim, ntim = _timing(dsamples), _timing(nsamples)
    dmed, nmed = dtim["median_us"], ntim["median_us"]
    bb = bus_bytes(op, w, nbytes)
    return {
        "operation": op, "dtype": args.dtype, "algorithm": "auto",
        "requested_size_bytes": requested, "input_bytes": nbytes,
        "deterministic": dtim, "native": ntim,
        "latency_ratio_vs_native": dmed / nmed if nmed > 0 else 0.0,
        "input_gbps": nbytes / (dmed * 1e-6) / 1e9 if dmed > 0 else 0.0,
        "native_input_gbps": nbytes / (nmed * 1e-6) / 1e9 if nmed > 0 else 0.0,
        "bus_gbps": bb / (dmed * 1e-6) / 1e9 if dmed > 0 else 0.0,
        "native_bus_gbps": bb / (nmed * 1e-6) / 1e9 if nmed > 0 else 0.0,
        "repeat_bitwise": bool(repeat),
        "oracle_bitwise": bool(oracle_all),
        "max_abs_vs_native": _json_float(max(f[1] for f in flags)),
        "workspace_bytes": int(max(f[2] for f in flags)),
        "peak_allocated_bytes": int(max(f[3] for f in flags)),
        "native_peak_allocated_bytes": int(max(f[4] for f in flags)),
    }


_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _json_float(v):
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return v


def _git_commit():
    c = os.environ.get("DETCOLL_GIT_COMMIT")
    if c:
        return c
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def _device_info(device):
    if device.type == "cuda":
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        nccl = ""
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        info = {"kind": kind, "names": names, "driver_version": "", "cuda_version": torch.version.cuda or "",
                "nccl_version": nccl}
        if kind == "rocm":
            info["hip_version"], info["ccl"] = torch.version.hip, "RCCL"
        return info
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"kind": "cpu", "names": [f"{model or 'cpu'}, {os.cpu_count()} logical cores, {sys.platform}"],
            "driver_version": "", "cuda_version": "", "nccl_version": ""}


def _native_cast(dt, device, group):
    """None when the native backend sums dt; else float32, what it is run in
    (Gloo on torch 1.13 has no bf16: "Invalid scalar type")."""
    try:
        dist.all_reduce(torch.zeros(2, dtype=dt, device=device), group=group)
        return None
    except RuntimeError:
        return torch.float32


def _detcoll_group(mode, native_group, device):
    registered = hasattr(dist.Backend, "DETCOLL")
    if mode == "auto":
        mode = "backend" if registered else "comm"
    if mode == "backend":
        if not registered:
            raise SystemExit("--detcoll backend: the \"detcoll\" torch.distributed backend is not registered "
                             "(import detcoll.torch registers it, once installed)")
        return dist.new_group(backend="detcoll"), "backend"
    rank, w = dist.get_rank(), dist.get_world_size()
    uid = [detcoll.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0, group=native_group)
    return detcoll.Comm.from_unique_id(uid[0], w, rank), "comm"


def main(argv=None):
    args = parse_args(argv)
    try:
        import detcoll.torch  # noqa: F401  registers the "detcoll" backend where it exists
    except ImportError:
        pass
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    native_backend = args.native_backend or ("nccl" if use_cuda else "gloo")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dist.init_process_group(native_backend)
    rank, w = dist.get_rank(), dist.get_world_size()
    native_group = dist.group.WORLD
    det_group, via = _detcoll_group(args.detcoll, native_group, device)
    dt = DTYPES[args.dtype]
    dsz = torch.empty(0, dtype=dt).element_size()
    code = {"bf16": 9, "fp16": 6, "fp32": 7, "fp64": 8}[args.dtype]
    det = Side("detcoll", det_group, rank, w)
    nat = Side(native_backend, native_group, rank, w, cast=_native_cast(dt, device, native_group))
    hosts = [None] * w
    dist.all_gather_object(hosts, socket.gethostname(), group=native_group)
    rows = []
    for op in args.operations:
        for size in args.size_bytes:
            row = run_row(op, size, args, dt, dsz, code, device, det, nat, native_group, w, rank)
            rows.append(row)
            if rank == 0:
                print(f"{op:>14} {args.dtype} {row['input_bytes']:>10} B  detcoll {row['deterministic']['median_us']:10.1f} us"
                      f"  {native_backend} {row['native']['median_us']:10.1f} us  ratio {row['latency_ratio_vs_native']:.2f}"
                      f"  repeat_bitwise={row['repeat_bitwise']} oracle_bitwise={row['oracle_bitwise']}"
                      f"  max_abs_vs_native={row['max_abs_vs_native']}", flush=True)
    v = detcoll.version()
    report = {
        "schema": "detcoll.bench.v1",
        "detcoll_version": f"{v[0]}.{v[1]}.{v[2]}",
        "git_commit": _git_commit(),
        "started_at": started,
        "world_size": w,
        "nodes": len(set(hosts)),
        "device": _device_info(device),
        "backend": device.type if device.type == "cpu" else _device_info(device)["kind"],
        "transport": f"torch.distributed:{'detcoll' if via == 'backend' else 'detcoll.Comm'}",
        "contract": {"version": "detcoll-tree-v1", "tree": "pairwise-adjacent-lower-left",
                     "accumulate": os.environ.get("DETCOLL_ACCUMULATE", "native") or "native"},
        "warmup": args.warmup, "iterations": args.iterations, "samples": args.samples,
        "graph": False, "seed": args.seed,
        "all_rank_repeat_bitwise": all(r["repeat_bitwise"] for r in rows),
        "rows": rows,
        "extra": {"harness": "detcoll.torch.bench", "torch_version": torch.__version__,
                  "native_backend": native_backend, "detcoll_via": via,
                  "oracle_checked": not args.no_oracle,
                  "native_dtype": str(nat.cast or dt).replace("torch.", ""),
                  "all_reduce_timing": "copy of the input into the work buffer, then the in-place all_reduce (both sides)",
                  "native_reduce_scatter": ("gloo has no reduce_scatter: all_reduce of a copy, then this rank's block"
                                            if native_backend == "gloo" else native_backend)},
    }
    if args.output and rank == 0:
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.output)
    dist.barrier(group=native_group)
    if F._is_comm(det_group):
        det_group.destroy()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
