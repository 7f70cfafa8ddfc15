#!/usr/bin/env python3
"""detcoll from PyTorch on GPUs: correctness against the host oracle, timing
against torch.distributed (NCCL), and the Python per-call cost.

Run as every rank of a job by a launcher, from the repository root, with
PYTHONPATH=python and DETCOLL_LIB=bin/libdetcoll.so (pytorch-h200x2-run.sh
does all of this):

    torchrun --standalone --nproc-per-node 2 docs/benchmarks/pytorch_check.py --out DIR
    bin/detcoll launch --standalone --nproc-per-node 2 -- python docs/benchmarks/pytorch_check.py --out DIR

Each rank:
  1. joins detcoll (detcoll.init()) and torch.distributed
     (init_process_group("nccl")), and records the store port rule: under
     torchrun detcoll's store is MASTER_ADDR:(MASTER_PORT+1), served by rank
     0; under detcoll launch DETCOLL_STORE_ADDR is the launcher's store and
     MASTER_PORT a different port for torch;
  2. correctness: bf16 all_reduce, all_gather, reduce_scatter of counts 1,
     7, 1000003 and 16 Mi elements (plus a few fp16/fp32/fp64/int32 cases,
     an in-place case of each op and a call on a side stream), every call
     twice; writes its inputs and outputs to DIR/dumps; rank 0 then checks
     every rank's output bit for bit against `bin/detcoll reduce` (the host
     oracle; inputs concatenated rank-major) for the reductions and against
     the concatenated inputs for all_gather, and that the two calls agree;
  3. the per-call host cost of enqueueing a 4 KiB all_reduce (wall time,
     no synchronisation inside a batch; see measure_overhead);
  4. timing: detcoll (from Python) against torch.distributed (NCCL) at 4 KiB,
     1 MiB, 16 MiB and 256 MiB of bf16 per rank (each rank's input):
     warm-up 10, 5 samples of 50 back-to-back calls timed with CUDA events on
     the current stream; each sample is the slowest rank's mean (a MAX over
     ranks through torch.distributed), the table gives the median;
and rank 0 writes DIR/results.json and DIR/results.md (after every phase,
and timing row, so a later failure or timeout keeps the earlier results).

Other modes, with no launcher and no GPU:
    python3 pytorch_check.py --self-test           # the helpers (standard library only)
    python3 pytorch_check.py --summarize DIR...    # the summary table of finished runs
    ... --cpu                                      # the same check on CPU tensors (detcoll's
                                                   # host calls, gloo, wall-clock timing): a dry
                                                   # run of this script without a GPU

Every step catches its own failure, records it and goes on, so that one
failure does not hide the other results. A collective that fails on one rank
only can still leave its peer waiting: --watchdog prints every thread's stack
before the launcher's timeout ends the run.
"""

import argparse
import ctypes
import faulthandler
import hashlib
import json
import math
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

SCHEMA = "detcoll.pytorch-check.v1"
ROOT = Path(__file__).resolve().parents[2]
OPS = ("all_reduce", "all_gather", "reduce_scatter")
ESIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "int32": 4}
CHECK_COUNTS = (1, 7, 1000003, 16 << 20)
TIME_SIZES = (4 << 10, 1 << 20, 16 << 20, 256 << 20)
OVERHEAD_BYTES = 4 << 10


# ---- helpers without torch (covered by --self-test) ------------------------


def compare(got, want, esize):
    """Compares two byte strings element by element: a dict with equal, the
    number of differing elements (capped scan), the first one, and sizes."""
    r = {"equal": got == want, "got_bytes": len(got), "want_bytes": len(want)}
    if r["equal"]:
        return r
    if len(got) != len(want):
        r["error"] = f"size {len(got)} bytes, want {len(want)}"
        return r
    n, first, chunk = 0, None, 1 << 16
    scanned_all = True
    for off in range(0, len(got), chunk):
        a, b = got[off:off + chunk], want[off:off + chunk]
        if a == b:
            continue
        for i in range(0, len(a), esize):
            if a[i:i + esize] != b[i:i + esize]:
                n += 1
                if first is None:
                    first = (off + i) // esize
        if n > 100000:
            scanned_all = False
            break
    r["diff_elements"] = n if scanned_all else f">{n}"
    r["first_diff_element"] = first
    if first is not None:
        i = first * esize
        r["first_diff"] = {"got": got[i:i + esize].hex(), "want": want[i:i + esize].hex()}
    return r


def expected_outputs(op, ins, reduce_fn):
    """Every rank's expected output of op, from every rank's input bytes
    (ins[r]). reduce_fn(rank-major bytes) is the host oracle's sum."""
    w = len(ins)
    if op == "all_gather":
        return [b"".join(ins)] * w
    s = reduce_fn(b"".join(ins))
    if op == "all_reduce":
        return [s] * w
    if op == "reduce_scatter":
        if len(s) % w:
            raise ValueError(f"reduce_scatter: the sum has {len(s)} bytes, not a multiple of {w} ranks")
        blk = len(s) // w
        return [s[r * blk:(r + 1) * blk] for r in range(w)]
    raise ValueError(f"unknown op {op}")


def run_oracle(detcoll_bin, dtype, world, data, workdir, accumulate=None):
    """The host oracle: `detcoll reduce` of world rank buffers, rank-major."""
    fd, tin = tempfile.mkstemp(prefix="ranks-", suffix=".bin", dir=workdir)
    tout = tin[:-len(".bin")] + ".sum.bin"
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        cmd = [str(detcoll_bin), "reduce", "--dtype", dtype, "--world-size", str(world), "--in", tin, "--out", tout]
        if accumulate:
            cmd += ["--accumulate", accumulate]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
        with open(tout, "rb") as f:
            return f.read()
    finally:
        for p in (tin, tout):
            try:
                os.unlink(p)
            except OSError:
                pass


def median(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else None


def fmt_us(x):
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}"


def fmt_bytes(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def bf16_bits(x):
    """The bfloat16 bits of a float that bf16 represents exactly."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    if b & 0xFFFF:
        raise ValueError(f"{x} is not exactly a bfloat16")
    return b >> 16


def launcher_info(env):
    """Which launcher started this rank and where detcoll's store is, by the
    port rule (launch package doc)."""
    info = {k: env.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                    "DETCOLL_RANK", "DETCOLL_STORE_ADDR", "DETCOLL_STORE_PORT", "TORCHELASTIC_RUN_ID")}
    if env.get("DETCOLL_RANK") or env.get("DETCOLL_WORLD_SIZE"):
        info["launcher"] = "detcoll"
        info["detcoll_store"] = env.get("DETCOLL_STORE_ADDR")
        info["rule"] = "DETCOLL_STORE_ADDR (the launcher's store); MASTER_PORT is torch's"
    elif env.get("RANK") or env.get("WORLD_SIZE"):
        info["launcher"] = "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "torch-env"
        if env.get("DETCOLL_STORE_ADDR"):
            info["detcoll_store"], info["rule"] = env["DETCOLL_STORE_ADDR"], "DETCOLL_STORE_ADDR"
        elif env.get("DETCOLL_STORE_PORT"):
            info["detcoll_store"] = f"{env.get('MASTER_ADDR')}:{env['DETCOLL_STORE_PORT']}"
            info["rule"] = "MASTER_ADDR:DETCOLL_STORE_PORT"
        elif env.get("MASTER_PORT", "").isdigit():
            info["detcoll_store"] = f"{env.get('MASTER_ADDR')}:{int(env['MASTER_PORT']) + 1}"
            info["rule"] = "MASTER_ADDR:(MASTER_PORT+1), served by rank 0"
    else:
        info["launcher"] = "none"
    sp = (info.get("detcoll_store") or "").rpartition(":")[2]
    info["ports_differ"] = bool(sp.isdigit() and env.get("MASTER_PORT", "").isdigit() and int(sp) != int(env["MASTER_PORT"]))
    return info


def port_open(hostport, timeout=2.0):
    host, _, port = (hostport or "").rpartition(":")
    if not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def error_text(e):
    s = f"{type(e).__name__}: {e}"
    return s if len(s) < 2000 else s[:2000] + " …"


# ---- the rank --------------------------------------------------------------


class Ctx:
    """One rank: torch, detcoll, the device, the results."""

    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.dumps = self.out / "dumps"
        self.t0 = time.time()
        self.res = {"schema": SCHEMA, "tag": args.tag, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "mode": "cpu" if args.cpu else "cuda", "steps": [], "checks": [], "api_checks": [],
                    "timing": {"rows": []}, "overhead": {}}
        self.torch = self.dist = self.detcoll = None
        self.R, self.W = int(os.environ.get("RANK", os.environ.get("DETCOLL_RANK", "0"))), None
        self.dist_ok = False
        self.detcoll_ok = False

    def log(self, *a):
        print(f"[pytorch_check rank {self.R} +{time.time() - self.t0:6.1f}s]", *a, flush=True)

    def step(self, name, fn):
        """Runs fn, records success or the error; returns fn's value or None."""
        t = time.time()
        try:
            v = fn()
            self.res["steps"].append({"name": name, "ok": True, "seconds": round(time.time() - t, 3)})
            self.log(f"{name}: ok ({time.time() - t:.2f} s)")
            return v
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the run goes on
            self.res["steps"].append({"name": name, "ok": False, "error": error_text(e), "seconds": round(time.time() - t, 3)})
            self.log(f"{name}: FAILED: {error_text(e)}")
            traceback.print_exc()
            return None

    # -- device helpers

    def sync(self):
        if not self.args.cpu:
            self.torch.cuda.synchronize()

    def barrier(self):
        """All ranks here (torch.distributed, else detcoll's host all_reduce)."""
        if self.dist_ok:
            t = self.torch.ones(1, device=self.device)
            self.dist.all_reduce(t)
            self.sync()
        elif self.detcoll_ok:
            import array
            self.detcoll.all_reduce(array.array("f", [1.0]))

    def max_over_ranks(self, values):
        """Element-wise MAX over ranks of a list of floats."""
        if self.W == 1:
            return list(values)
        if self.dist_ok:
            t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
            return t.cpu().tolist()
        if self.detcoll_ok:
            import array
            g = self.detcoll.all_gather(array.array("d", values))
            n = len(values)
            return [max(g[r * n + i] for r in range(self.W)) for i in range(n)]
        raise RuntimeError("neither torch.distributed nor detcoll is up: cannot take the slowest rank")

    def timer(self):
        if self.args.cpu:
            self.sync()
            return ("wall", time.perf_counter())
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return ("event", e)

    def elapsed_us(self, start):
        kind, s = start
        if kind == "wall":
            self.sync()
            return (time.perf_counter() - s) * 1e6
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        e.synchronize()
        return s.elapsed_time(e) * 1000.0

    def write_results(self):
        if self.R != 0:
            return
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        tmp = self.out / "results.json.tmp"
        with open(tmp, "w") as f:
            json.dump(self.res, f, indent=1, default=str)
        os.replace(tmp, self.out / "results.json")
        with open(self.out / "results.md", "w") as f:
            f.write(render_markdown(self.res))


def tdtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64,
            "int32": torch.int32}[name]


def bits_view(torch, t):
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def bits_equal(torch, a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits_view(torch, a), bits_view(torch, b)))


def tensor_bytes(t):
    c = t.detach().contiguous().cpu()
    n = c.numel() * c.element_size()
    return ctypes.string_at(c.data_ptr(), n) if n else b""


def make_input(ctx, dtype, n, seed):
    """Deterministic inputs of rank R: normal values over a range of
    magnitudes, and at fixed positions inf, -0, subnormals, NaN (with a
    payload in bf16) and inf + -inf across ranks."""
    torch, R = ctx.torch, ctx.R
    g = torch.Generator(device=ctx.device)
    g.manual_seed(seed * 1009 + R)
    if dtype == "int32":
        return torch.randint(-(1 << 31), (1 << 31) - 1, (n,), generator=g, device=ctx.device, dtype=torch.int32)
    base = torch.float64 if dtype == "fp64" else torch.float32
    x = torch.randn(n, generator=g, device=ctx.device, dtype=base)
    e = torch.randint(-12, 13, (n,), generator=g, device=ctx.device).to(base)
    x = (x * torch.exp2(e)).to(tdtype(torch, dtype))
    tiny = {"bf16": 2.0 ** -130, "fp16": 2.0 ** -20, "fp32": 2.0 ** -130, "fp64": 2.0 ** -1040}[dtype]
    x[3::1013] = math.inf if R == 0 else 1.0
    x[5::1013] = -0.0
    x[7::1013] = tiny
    x[13::1013] = math.inf if R % 2 == 0 else -math.inf
    if R % 2 == 1:
        if dtype == "bf16":
            bits_view(torch, x)[11::1013] = 0x7FC1  # a NaN with a payload
        else:
            x[11::1013] = math.nan
    return x


def check_cases(quick):
    """(name, op, dtype, count, variant) of the correctness phase."""
    cases = []
    counts = (1, 7, 1000003) if quick else CHECK_COUNTS
    for count in counts:
        for op in OPS:
            cases.append((f"{op}-bf16-n{count}", op, "bf16", count, ""))
    for dt in ("fp16", "fp32", "fp64"):
        for count in (7, 1000003):
            cases.append((f"all_reduce-{dt}-n{count}", "all_reduce", dt, count, ""))
    cases.append(("reduce_scatter-fp32-n1000003", "reduce_scatter", "fp32", 1000003, ""))
    cases.append(("all_gather-int32-n1000003", "all_gather", "int32", 1000003, ""))
    for op in OPS:
        cases.append((f"{op}-bf16-n1000003-inplace", op, "bf16", 1000003, "inplace"))
    cases.append(("all_reduce-bf16-n1000003-side-stream", "all_reduce", "bf16", 1000003, "stream"))
    return cases


def run_case(ctx, name, op, dtype, count, variant, seed):
    """This rank's part of one case: the calls, the per-rank checks, the
    dumps. Returns the per-rank status."""
    torch, dc, W, R = ctx.torch, ctx.detcoll, ctx.W, ctx.R
    st = {"name": name, "rank": R}
    n_in = count * W if op == "reduce_scatter" else count
    n_out = count * W if op == "all_gather" else count
    td = tdtype(torch, dtype)

    def fresh(n):
        return torch.empty(n, dtype=td, device=ctx.device)

    t = time.time()
    try:
        x = make_input(ctx, dtype, n_in, seed)
        keep = x.clone()
        side = None
        if variant == "stream" and not ctx.args.cpu:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            st["stream"] = side.cuda_stream
        if variant == "inplace":
            # in place: all_reduce on the input itself, all_gather with the
            # input as this rank's block of the output
            if op == "all_reduce":
                out = x.clone()
                r = dc.all_reduce(out)
                st["returned_input"] = r is out
            elif op == "all_gather":
                out = fresh(n_out)
                blk = out.narrow(0, R * count, count)
                blk.copy_(x)
                r = dc.all_gather(blk, out=out)
                st["returned_out"] = r is out
            else:
                # reduce_scatter has no in-place form (send and recv must not
                # overlap): check that an overlapping out is refused instead
                out = dc.reduce_scatter(x)
                try:
                    dc.reduce_scatter(x, out=x.narrow(0, 0, count))
                    st["overlap_refused"] = False
                except Exception as e:  # noqa: BLE001
                    st["overlap_refused"] = type(e).__name__
            out2 = dc.all_reduce(x, out=fresh(n_out)) if op == "all_reduce" else \
                dc.all_gather(x, out=fresh(n_out)) if op == "all_gather" else dc.reduce_scatter(x, out=fresh(n_out))
        elif side is not None:
            with torch.cuda.stream(side):
                out = dc.all_reduce(x, out=fresh(n_out))
                out2 = dc.all_reduce(x, out=fresh(n_out))
            torch.cuda.current_stream().wait_stream(side)
        elif op == "all_reduce":
            out = fresh(n_out)
            r = dc.all_reduce(x, out=out)
            st["returned_out"] = r is out
            out2 = dc.all_reduce(x, out=fresh(n_out))
        elif op == "all_gather":
            out = dc.all_gather(x)  # allocated by detcoll (torch.empty on x's device)
            out2 = dc.all_gather(x, out=fresh(n_out))
        else:
            out = dc.reduce_scatter(x)  # allocated
            out2 = dc.reduce_scatter(x, out=fresh(n_out))
        ctx.sync()
        st["call_seconds"] = round(time.time() - t, 3)
        st["out_shape_ok"] = tuple(out.shape) == (n_out,) and out.dtype == td and out.device == x.device
        st["repeat_stable"] = bits_equal(torch, out.reshape(-1), out2.reshape(-1))
        st["input_untouched"] = bits_equal(torch, x, keep)
        ctx.dumps.mkdir(parents=True, exist_ok=True)
        for ext, tt in (("in", keep), ("out", out)):
            with open(ctx.dumps / f"{name}.r{R}.{ext}", "wb") as f:
                f.write(tensor_bytes(tt))
    except Exception as e:  # noqa: BLE001
        st["error"] = error_text(e)
        ctx.log(f"case {name}: FAILED: {st['error']}")
        traceback.print_exc()
        try:
            ctx.sync()
        except Exception as e2:  # noqa: BLE001
            st["sync_error"] = error_text(e2)
    with open(ctx.dumps / f"{name}.r{R}.json", "w") as f:
        json.dump(st, f)
    return st


def correctness(ctx):
    cases = check_cases(ctx.args.quick)
    ctx.dumps.mkdir(parents=True, exist_ok=True)
    for i, (name, op, dtype, count, variant) in enumerate(cases):
        run_case(ctx, name, op, dtype, count, variant, seed=i + 1)
    ctx.barrier()
    if ctx.R == 0:
        ctx.res["checks"] = verify_dumps(ctx, cases)
        ok = sum(1 for c in ctx.res["checks"] if c["ok"])
        ctx.log(f"correctness: {ok}/{len(cases)} cases pass")
    ctx.barrier()


def verify_dumps(ctx, cases):
    """Rank 0: every rank's output against the host oracle (reductions) or
    the concatenated inputs (all_gather), bit for bit."""
    W = ctx.W
    acc = os.environ.get("DETCOLL_ACCUMULATE") or None
    out = []
    for name, op, dtype, count, variant in cases:
        c = {"name": name, "op": op, "dtype": dtype, "count": count, "variant": variant}
        try:
            sts = []
            for r in range(W):
                p = ctx.dumps / f"{name}.r{r}.json"
                sts.append(json.loads(p.read_text()) if p.exists() else {"error": "no status file"})
            c["ranks"] = sts
            errs = [f"rank {r}: {s['error']}" for r, s in enumerate(sts) if s.get("error")]
            if errs:
                raise RuntimeError("; ".join(errs))
            ins = [(ctx.dumps / f"{name}.r{r}.in").read_bytes() for r in range(W)]
            outs = [(ctx.dumps / f"{name}.r{r}.out").read_bytes() for r in range(W)]
            want = expected_outputs(op, ins, lambda data: run_oracle(ctx.args.detcoll_bin, dtype, W, data, ctx.dumps, acc))
            cmp = [compare(outs[r], want[r], ESIZE[dtype]) for r in range(W)]
            c["oracle_equal"] = all(x["equal"] for x in cmp)
            if not c["oracle_equal"]:
                c["oracle_diff"] = [x for x in cmp if not x["equal"]][:2]
            if op != "reduce_scatter":
                c["ranks_identical"] = all(o == outs[0] for o in outs)
            c["repeat_stable"] = all(s.get("repeat_stable") for s in sts)
            c["input_untouched"] = all(s.get("input_untouched") for s in sts)
            c["out_shape_ok"] = all(s.get("out_shape_ok") for s in sts)
            extra = [k for k in ("returned_out", "returned_input") if any(k in s for s in sts)]
            c["returned_ok"] = all(s.get(k, True) for s in sts for k in extra)
            if variant == "inplace" and op == "reduce_scatter":
                c["overlap_refused"] = all(s.get("overlap_refused") not in (None, False) for s in sts)
            c["ok"] = bool(c["oracle_equal"] and c.get("ranks_identical", True) and c["repeat_stable"] and c["input_untouched"]
                           and c["out_shape_ok"] and c["returned_ok"] and c.get("overlap_refused", True))
            files = sorted(ctx.dumps.glob(f"{name}.r*.in")) + sorted(ctx.dumps.glob(f"{name}.r*.out"))
            c["sha256"] = {f.name: sha256_file(f) for f in files}
            c["bytes"] = {f.name: f.stat().st_size for f in files}
        except Exception as e:  # noqa: BLE001
            c["ok"] = False
            c["error"] = error_text(e)
        ctx.log(f"check {name}: {'ok' if c['ok'] else 'FAIL ' + str(c.get('error') or {k: c.get(k) for k in ('oracle_equal', 'ranks_identical', 'repeat_stable', 'input_untouched', 'out_shape_ok', 'returned_ok', 'overlap_refused')})}")
        out.append(c)
    # Keep small dumps only (the hashes stay in the results).
    if not ctx.args.keep_dumps:
        for f in ctx.dumps.iterdir():
            if f.suffix in (".in", ".out") and f.stat().st_size > ctx.args.keep_max_bytes:
                f.unlink()
    return out


def api_checks(ctx):
    """Argument validation that must raise before reaching the library
    (so it cannot desynchronise the ranks)."""
    torch, dc = ctx.torch, ctx.detcoll
    dev = ctx.device
    bf = torch.bfloat16
    x = torch.zeros(8, dtype=bf, device=dev)
    other = torch.device("cpu") if not ctx.args.cpu else None
    cases = [
        ("non-contiguous input", ValueError, lambda: dc.all_reduce(torch.zeros(8, 2, dtype=bf, device=dev)[:, 0])),
        ("out of another dtype", TypeError, lambda: dc.all_reduce(x, out=torch.zeros(8, dtype=torch.float16, device=dev))),
        ("out with the wrong element count", ValueError, lambda: dc.all_gather(x, out=torch.zeros(8 * ctx.W + 1, dtype=bf, device=dev))),
        ("integer all_reduce", TypeError, lambda: dc.all_reduce(torch.zeros(8, dtype=torch.int32, device=dev))),
        ("dtype= disagreeing with the tensor", TypeError, lambda: dc.all_reduce(x, dtype="fp32")),
    ]
    if ctx.W > 1:
        cases.append(("reduce_scatter of a count not divisible by the ranks", ValueError,
                      lambda: dc.reduce_scatter(torch.zeros(ctx.W * 3 + 1, dtype=bf, device=dev))))
    if other is not None:
        cases.append(("out on another device", ValueError, lambda: dc.all_reduce(x, out=torch.zeros(8, dtype=bf, device=other))))
    out = []
    for what, exc, fn in cases:
        try:
            fn()
            out.append({"what": what, "ok": False, "error": f"no {exc.__name__} raised"})
        except exc as e:
            out.append({"what": what, "ok": True, "raised": f"{type(e).__name__}: {e}"})
        except Exception as e:  # noqa: BLE001
            out.append({"what": what, "ok": False, "error": f"raised {error_text(e)}, want {exc.__name__}"})
    if not ctx.args.cpu:
        # The stream the wrapper passes is torch's current stream.
        from detcoll import _torch as T
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            got, guard = T.current_stream(x)
        out.append({"what": "stream passed = torch.cuda.current_stream(device).cuda_stream",
                    "ok": got == s.cuda_stream, "got": got, "want": s.cuda_stream, "device_switch": guard is not None})
    ctx.res["api_checks"] = out
    bad = [c for c in out if not c["ok"]]
    ctx.log(f"api checks: {len(out) - len(bad)}/{len(out)} ok" + (f"; failed: {bad}" if bad else ""))


def time_fn(ctx, fn, warmup, iters, samples):
    for _ in range(warmup):
        fn()
    ctx.sync()
    res = []
    for _ in range(samples):
        ctx.barrier()  # every sample starts on all ranks together
        t = ctx.timer()
        for _ in range(iters):
            fn()
        res.append(ctx.elapsed_us(t) / iters)
    return res


def timing(ctx):
    torch, dist, dc, W = ctx.torch, ctx.dist, ctx.detcoll, ctx.W
    a = ctx.args
    sizes = (4 << 10, 1 << 20) if a.quick else TIME_SIZES
    cfg = {"dtype": "bf16", "sizes_bytes_per_rank": list(sizes), "warmup": a.warmup, "iterations": a.iterations,
           "samples": a.samples, "size": "bytes of each rank's input (all_gather output and reduce_scatter input "
                                         "are per rank as in detcoll bench)",
           "timer": "CUDA events on the current stream" if not a.cpu else "wall clock",
           "statistic": "median over samples of the slowest rank's mean per call (MAX over ranks)"}
    ctx.res["timing"]["config"] = cfg
    rows = ctx.res["timing"]["rows"]
    for size in sizes:  # every op at a size before the next size: a timeout keeps the small sizes
        for op in OPS:
            n = size // 2
            x = torch.randn(n, device=ctx.device).to(torch.bfloat16)
            if op == "all_reduce":
                o = x
                impls = (("torch", lambda: dist.all_reduce(x)), ("detcoll", lambda: dc.all_reduce(x)))
            elif op == "all_gather":
                o = torch.empty(n * W, dtype=torch.bfloat16, device=ctx.device)
                impls = (("torch", lambda: dist.all_gather_into_tensor(o, x)), ("detcoll", lambda: dc.all_gather(x, out=o)))
            else:
                o = torch.empty(n // W, dtype=torch.bfloat16, device=ctx.device)
                impls = (("torch", lambda: dist.reduce_scatter_tensor(o, x)), ("detcoll", lambda: dc.reduce_scatter(x, out=o)))
            for impl, fn in impls:
                row = {"op": op, "bytes": size, "impl": impl}
                err = None
                ok = (impl == "torch" and ctx.dist_ok) or (impl == "detcoll" and ctx.detcoll_ok)
                times = [0.0] * a.samples
                if not ok:
                    err = f"{impl} is not initialised"
                else:
                    try:
                        times = time_fn(ctx, fn, a.warmup, a.iterations, a.samples)
                    except Exception as e:  # noqa: BLE001
                        err = error_text(e)
                        try:
                            ctx.sync()
                        except Exception:  # noqa: BLE001
                            pass
                # Every rank takes part in the MAX, failed or not.
                try:
                    m = ctx.max_over_ranks([1.0 if err else 0.0] + times)
                    if m[0] > 0 and not err:
                        err = "failed on another rank"
                    row["samples_us"] = [round(v, 3) for v in m[1:]]
                    row["median_us"] = None if err else median(m[1:])
                except Exception as e:  # noqa: BLE001
                    err = err or f"slowest-rank exchange: {error_text(e)}"
                if err:
                    row["error"] = err
                    row["median_us"] = None
                rows.append(row)
                ctx.log(f"timing {op} {fmt_bytes(size)} {impl}: " + (f"{fmt_us(row['median_us'])} µs" if not err else f"FAILED: {err}"))
                ctx.write_results()
            x = o = impls = None  # free before the next size


def measure_overhead(ctx):
    """Host wall time per call of enqueueing a 4 KiB bf16 all_reduce,
    N calls in batches of B with no synchronisation inside a batch (the
    device is synchronised, untimed, between batches so that the queue never
    fills and the host never waits for the GPU). Each figure is the slowest
    rank's. Variants:
      python_noop        a Python function call (the loop's floor)
      ctypes_noop        detcollCommCount through ctypes (ctypes + cgo + a handle lookup)
      c_api_all_reduce   detcollAllReduce through ctypes with precomputed arguments:
                         the library's own path (C API, Go, devcomm, NCCL and CUDA enqueue)
      detcoll_all_reduce detcoll.all_reduce(x): the Python package
      torch_all_reduce   torch.distributed.all_reduce(x) (NCCL), for reference
    python_overhead = detcoll_all_reduce - c_api_all_reduce is the Python
    package's own cost per call (checks, dtype map, current stream); the
    goal is under 5 µs."""
    torch, dist, dc = ctx.torch, ctx.dist, ctx.detcoll
    a = ctx.args
    n = OVERHEAD_BYTES // 2
    x = torch.randn(n, device=ctx.device).to(torch.bfloat16)
    p = x.data_ptr()
    cnt = ctypes.c_int()
    cnt_ref = ctypes.byref(cnt)
    stream = None if a.cpu else (torch.cuda.current_stream().cuda_stream or None)
    lib = h = None
    lib_err = "detcoll is not initialised"
    if ctx.detcoll_ok:
        try:
            from detcoll import _lib
            lib, h = _lib.lib(), dc.default_comm().handle
        except Exception as e:  # noqa: BLE001
            lib_err = error_text(e)
    cfn = count_fn = None
    if lib is not None:
        cfn = lib.detcollHostAllReduce if a.cpu else lib.detcollAllReduce
        count_fn = lib.detcollCommCount

    def c_call():
        if a.cpu:
            return cfn(p, p, n, 9, h)
        return cfn(p, p, n, 9, h, stream)

    def noop(v):
        return v
    variants = [
        ("python_noop", lambda: noop(x)),
        ("ctypes_noop", lambda: count_fn(h, cnt_ref)),
        ("c_api_all_reduce", c_call),
        ("detcoll_all_reduce", lambda: dc.all_reduce(x)),
        ("torch_all_reduce", lambda: dist.all_reduce(x)),
    ]
    N, B = a.overhead_calls, a.overhead_batch
    res = {"bytes": OVERHEAD_BYTES, "calls": N, "batch": B, "stream": stream,
           "what": measure_overhead.__doc__.strip().replace("\n    ", "\n")}
    for name, fn in variants:
        err = None
        per_call = 0.0
        if name == "torch_all_reduce" and not ctx.dist_ok:
            err = "torch.distributed is not initialised"
        elif name not in ("python_noop", "torch_all_reduce") and lib is None:
            err = lib_err
        else:
            try:
                if name == "c_api_all_reduce":
                    rc = c_call()
                    if rc != 0:
                        raise RuntimeError(f"detcollAllReduce returned {rc}: {lib.detcollGetLastError(None)}")
                for _ in range(B):  # warm-up batch
                    fn()
                ctx.sync()
                total = 0
                done = 0
                while done < N:
                    k = min(B, N - done)
                    ctx.barrier()
                    t0 = time.perf_counter_ns()
                    for _ in range(k):
                        fn()
                    total += time.perf_counter_ns() - t0
                    done += k
                    ctx.sync()
                per_call = total / N / 1000.0
                if name == "c_api_all_reduce":
                    rc = c_call()
                    ctx.sync()
                    if rc != 0:
                        raise RuntimeError(f"detcollAllReduce returned {rc}")
            except Exception as e:  # noqa: BLE001
                err = error_text(e)
                try:
                    ctx.sync()
                except Exception:  # noqa: BLE001
                    pass
        try:
            m = ctx.max_over_ranks([1.0 if err else 0.0, per_call])
            if m[0] > 0 and not err:
                err = "failed on another rank"
            res[name + "_us"] = None if err else round(m[1], 3)
        except Exception as e:  # noqa: BLE001
            err = err or error_text(e)
            res[name + "_us"] = None
        if err:
            res[name + "_error"] = err
        ctx.log(f"overhead {name}: " + (f"{res[name + '_us']} µs/call" if not err else f"FAILED: {err}"))
    d, c = res.get("detcoll_all_reduce_us"), res.get("c_api_all_reduce_us")
    if d is not None and c is not None:
        res["python_overhead_us"] = round(d - c, 3)
        res["goal_us"] = 5.0
        res["goal_met"] = d - c < 5.0
    ctx.res["overhead"] = res
    ctx.write_results()


def environment(ctx):
    torch = ctx.torch
    info = {"host": socket.gethostname(), "python": sys.version.split()[0], "torch": torch.__version__,
            "platform": platform.platform(), "detcoll_lib": None, "world_size": ctx.W}
    try:
        from detcoll import _lib
        info["detcoll_lib"] = _lib.path()
        info["detcoll_version"] = ".".join(map(str, ctx.detcoll.version()))
    except Exception as e:  # noqa: BLE001
        info["detcoll_lib_error"] = error_text(e)
    if not ctx.args.cpu:
        info["cuda"] = torch.version.cuda
        info["gpu"] = torch.cuda.get_device_name(ctx.device)
        info["device"] = str(ctx.device)
        try:
            info["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as e:  # noqa: BLE001
            info["torch_nccl"] = error_text(e)
    info["NCCL_NVLS_ENABLE"] = os.environ.get("NCCL_NVLS_ENABLE")
    ctx.res["environment"] = info


def mapped_libraries(names=("libnccl", "libcuda.so", "libnvrtc", "libdetcoll")):
    """The shared libraries of this process whose file names contain one of
    names (from /proc/self/maps): which NCCL is actually loaded."""
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and any(n in parts[-1] for n in names):
                    found.add(parts[-1])
    except OSError:
        return None
    return sorted(found)


def rank_main(args):
    ctx = Ctx(args)
    ctx.out.mkdir(parents=True, exist_ok=True)
    faulthandler.enable()
    if args.watchdog > 0:
        faulthandler.dump_traceback_later(args.watchdog, exit=False)
    ctx.res["launch"] = launcher_info(os.environ)
    ctx.log("launcher:", json.dumps(ctx.res["launch"]))

    import torch
    import torch.distributed as dist
    ctx.torch, ctx.dist = torch, dist
    if args.cpu:
        ctx.device = torch.device("cpu")
    else:
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("DETCOLL_LOCAL_RANK", "0")))
        try:
            torch.cuda.set_device(local)
        except Exception as e:  # noqa: BLE001
            ctx.log(f"cannot use GPU {local} (LOCAL_RANK): {error_text(e)}; --cpu runs without a GPU")
            return 2
        ctx.device = torch.device("cuda", local)

    def init_detcoll():
        import detcoll
        ctx.detcoll = detcoll
        c = detcoll.init()
        ctx.R, ctx.W = c.rank, c.size
        ctx.detcoll_ok = True
        return c

    def init_torch():
        dist.init_process_group("gloo" if args.cpu else "nccl")
        if ctx.W is None:
            ctx.R, ctx.W = dist.get_rank(), dist.get_world_size()
        elif (dist.get_rank(), dist.get_world_size()) != (ctx.R, ctx.W):
            raise RuntimeError(f"torch.distributed says rank {dist.get_rank()} of {dist.get_world_size()}, detcoll {ctx.R} of {ctx.W}")
        ctx.dist_ok = True

    ctx.step("detcoll.init", init_detcoll)
    ctx.step("torch.distributed.init_process_group", init_torch)
    if ctx.W is None:
        ctx.W = int(os.environ.get("WORLD_SIZE", "1"))
    launch = ctx.res["launch"]
    if ctx.R == 0 and launch.get("detcoll_store") and launch.get("launcher") != "detcoll":
        # rank 0 serves detcoll's store under torchrun: it must listen there
        launch["detcoll_store_listening"] = port_open(launch["detcoll_store"])
    ctx.step("environment", lambda: environment(ctx))
    ctx.write_results()

    if ctx.detcoll_ok:  # (barriers fall back to detcoll's host calls without torch.distributed)
        ctx.step("api checks", lambda: api_checks(ctx))
        ctx.step("correctness", lambda: correctness(ctx))
        ctx.res.setdefault("environment", {})["mapped_libraries"] = mapped_libraries()
        ctx.write_results()
    else:
        ctx.log("skipping the API checks and correctness: detcoll is not up")
    ctx.step("overhead", lambda: measure_overhead(ctx))
    ctx.step("timing", lambda: timing(ctx))
    ctx.step("barrier", ctx.barrier)
    ctx.write_results()
    faulthandler.cancel_dump_traceback_later()
    if ctx.R == 0:
        print(render_markdown(ctx.res), flush=True)
    ok = all(s["ok"] for s in ctx.res["steps"])
    if ctx.R == 0:
        ok = ok and bool(ctx.res["checks"]) and all(c["ok"] for c in ctx.res["checks"])
    for name, fn in (("detcoll.destroy", lambda: ctx.detcoll and ctx.detcoll.destroy()),
                     ("torch.distributed.destroy_process_group", lambda: ctx.dist_ok and dist.destroy_process_group())):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            ctx.log(f"{name}: {error_text(e)}")
    return 0 if ok else 1


# ---- reports ---------------------------------------------------------------


def check_summary(res):
    cs = res.get("checks") or []
    return sum(1 for c in cs if c.get("ok")), len(cs)


def render_markdown(res):
    L = [f"# detcoll from PyTorch — {res.get('tag')} ({res.get('started_at')})", ""]
    env = res.get("environment", {})
    la = res.get("launch", {})
    L.append(f"launcher {la.get('launcher')}, world size {env.get('world_size')}, {env.get('gpu', res.get('mode'))}, "
             f"torch {env.get('torch')}, CUDA {env.get('cuda')}, torch's NCCL {env.get('torch_nccl')}; "
             f"detcoll store {la.get('detcoll_store')} ({la.get('rule')}), MASTER_PORT {la.get('MASTER_PORT')}, "
             f"ports differ: {la.get('ports_differ')}, listening: {la.get('detcoll_store_listening', '—')}")
    if env.get("mapped_libraries"):
        L.append(f"libraries mapped: {', '.join(env['mapped_libraries'])}")
    L.append("")
    L.append("| step | ok | s | error |")
    L.append("|---|---|---|---|")
    for s in res.get("steps", []):
        L.append(f"| {s['name']} | {'yes' if s['ok'] else 'NO'} | {s.get('seconds')} | {(s.get('error') or '')[:200]} |")
    ok, n = check_summary(res)
    L += ["", f"## Correctness: {ok}/{n} cases bit-exact, stable, identical on all ranks", ""]
    L.append("| case | ok | oracle | ranks identical | repeat | input kept | error |")
    L.append("|---|---|---|---|---|---|---|")
    for c in res.get("checks", []):
        L.append(f"| {c['name']} | {'yes' if c.get('ok') else 'NO'} | {c.get('oracle_equal')} | {c.get('ranks_identical', '—')} "
                 f"| {c.get('repeat_stable')} | {c.get('input_untouched')} | {(c.get('error') or '')[:200]} |")
    api = res.get("api_checks") or []
    if api:
        L.append("")
        L.append(f"API checks: {sum(1 for c in api if c['ok'])}/{len(api)} ok" +
                 "".join(f"; FAILED {c['what']}: {c.get('error')}" for c in api if not c["ok"]))
    rows = res.get("timing", {}).get("rows", [])
    if rows:
        cfg = res["timing"].get("config", {})
        L += ["", f"## Timing (µs per call; {cfg.get('statistic')}; {cfg.get('timer')}; warm-up {cfg.get('warmup')}, "
                  f"{cfg.get('iterations')} iterations × {cfg.get('samples')} samples; bf16, bytes per rank)", ""]
        L.append("| op | bytes per rank | torch.distributed (NCCL) | detcoll | detcoll / torch |")
        L.append("|---|---|---|---|---|")
        for (op, size), r in timing_pairs(rows).items():
            t, d = r.get("torch"), r.get("detcoll")
            ratio = f"{d / t:.2f}" if t and d else "—"
            L.append(f"| {op} | {fmt_bytes(size)} | {fmt_us(t)} | {fmt_us(d)} | {ratio} |")
        errs = [r for r in rows if r.get("error")]
        if errs:
            L.append("")
            L += [f"- failed: {r['op']} {fmt_bytes(r['bytes'])} {r['impl']}: {r['error'][:300]}" for r in errs]
    ov = res.get("overhead") or {}
    if ov:
        L += ["", "## Per-call host cost (µs, slowest rank; 4 KiB bf16 all_reduce enqueue)", ""]
        for k in ("python_noop", "ctypes_noop", "c_api_all_reduce", "detcoll_all_reduce", "torch_all_reduce"):
            L.append(f"- {k}: {ov.get(k + '_us')}" + (f" ({ov[k + '_error']})" if ov.get(k + "_error") else ""))
        L.append(f"- python_overhead (detcoll_all_reduce − c_api_all_reduce): {ov.get('python_overhead_us')} "
                 f"(goal < 5 µs: {'met' if ov.get('goal_met') else 'NOT met' if 'goal_met' in ov else '—'})")
        if ov.get("what"):
            L += ["", "```", ov["what"], "```"]
    return "\n".join(L) + "\n"


def timing_pairs(rows):
    pairs = {}
    for r in rows:
        pairs.setdefault((r["op"], r["bytes"]), {})[r["impl"]] = r.get("median_us")
    return pairs


def go_bench_rows(path):
    """(op, bytes) -> (detcoll µs for the algorithm Auto picks with two
    ranks, native µs) from a detcoll.bench.v1 report."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for r in d.get("rows", []):
        size = r.get("input_bytes") or r.get("requested_size_bytes")
        alg = r.get("algorithm")
        # devcomm's Auto with two ranks: gather_tree below 64 MiB per rank
        want = "direct" if r.get("operation") == "all_gather" else ("gather_tree" if size < (64 << 20) else "a2a_tree")
        if alg == want:
            out[(r["operation"], size)] = ((r.get("deterministic") or {}).get("median_us"), (r.get("native") or {}).get("median_us"))
    return out


def summarize(dirs, go_bench=None, out_file=None):
    """The short summary of finished runs (printed last by the run script)."""
    runs = []
    for d in dirs:
        p = Path(d) / "results.json"
        try:
            runs.append((Path(d).name, json.loads(p.read_text())))
        except (OSError, ValueError) as e:
            runs.append((Path(d).name, {"error": f"no results ({type(e).__name__}: {e})"}))
    gb = go_bench_rows(go_bench) if go_bench else {}

    def r2(v):
        return "—" if v is None else f"{v:.2f}"
    L = ["== detcoll from PyTorch: summary (µs; timing = median of the slowest rank, bf16, bytes per rank)"]
    for name, res in runs:
        if "steps" not in res:
            L.append(f"{name:15s} {res.get('error')}")
            continue
        ok, n = check_summary(res)
        bad_steps = [s["name"] for s in res.get("steps", []) if not s.get("ok")]
        api = res.get("api_checks") or []
        ov = res.get("overhead") or {}
        la = res.get("launch", {})
        terr = sum(1 for r in res.get("timing", {}).get("rows", []) if r.get("error"))
        L.append(f"{name:15s} checks {ok}/{n} {'PASS' if n and ok == n else 'FAIL'}, api {sum(1 for c in api if c['ok'])}/{len(api)}; "
                 f"detcoll store {la.get('detcoll_store')}, MASTER_PORT {la.get('MASTER_PORT')}; "
                 f"failed steps: {', '.join(bad_steps) or 'none'}; timing rows failed: {terr}; {res.get('elapsed_s')} s")
        goal = "met" if ov.get("goal_met") else "NOT met" if "goal_met" in ov else "—"
        L.append(f"{'':15s} per call: python {r2(ov.get('detcoll_all_reduce_us'))}, C API {r2(ov.get('c_api_all_reduce_us'))}, "
                 f"python overhead {r2(ov.get('python_overhead_us'))} (goal < 5: {goal}), ctypes no-op {r2(ov.get('ctypes_noop_us'))}, "
                 f"torch.distributed {r2(ov.get('torch_all_reduce_us'))}")
    tabs = [(name, timing_pairs(res.get("timing", {}).get("rows", []))) for name, res in runs if "steps" in res]
    keys = set()
    for _, t in tabs:
        keys |= set(t)
    keys = sorted(keys, key=lambda k: (OPS.index(k[0]) if k[0] in OPS else 9, k[1]))
    if keys:
        h1 = f"{'':15s} {'':>8s}"
        h2 = f"{'op':15s} {'bytes':>8s}"
        for name, _ in tabs:
            h1 += f" | {name[:16]:^16s}"
            h2 += f" | {'torch':>7s} {'detcoll':>8s}"
        if gb:
            h1 += f" | {'Go bench':^16s}"
            h2 += f" | {'NCCL':>7s} {'detcoll':>8s}"
        L += [h1, h2]
        for op, size in keys:
            line = f"{op:15s} {fmt_bytes(size):>8s}"
            for _, t in tabs:
                r = t.get((op, size), {})
                line += f" | {fmt_us(r.get('torch')):>7s} {fmt_us(r.get('detcoll')):>8s}"
            if gb:
                d, nat = gb.get((op, size), (None, None))
                line += f" | {fmt_us(nat):>7s} {fmt_us(d):>8s}"
            L.append(line)
    text = "\n".join(L) + "\n"
    if out_file:
        Path(out_file).write_text(text)
    return text


# ---- self-test (standard library only) ----------------------------------------


def self_test(detcoll_bin):
    """The helpers on known answers; the oracle too when bin/detcoll exists."""
    fails = []

    def expect(what, cond):
        if not cond:
            fails.append(what)
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")

    a = struct.pack("<4H", 1, 2, 3, 4)
    expect("compare equal", compare(a, a, 2)["equal"])
    c = compare(a, struct.pack("<4H", 1, 2, 9, 4), 2)
    expect("compare finds the element", not c["equal"] and c["diff_elements"] == 1 and c["first_diff_element"] == 2)
    big = bytes(200000)
    c = compare(big, big[:150000] + b"\x01" + big[150001:], 2)
    expect("compare in a later chunk", c["diff_elements"] == 1 and c["first_diff_element"] == 75000)
    expect("compare sizes", "error" in compare(a, a[:6], 2))

    ins = [b"AAaa", b"BBbb"]
    fake_sum = lambda data: bytes(x ^ y for x, y in zip(data[:4], data[4:]))  # noqa: E731
    s = fake_sum(b"AAaaBBbb")
    expect("all_reduce expectation", expected_outputs("all_reduce", ins, fake_sum) == [s, s])
    expect("reduce_scatter expectation", expected_outputs("reduce_scatter", ins, fake_sum) == [s[:2], s[2:]])
    expect("all_gather expectation", expected_outputs("all_gather", ins, fake_sum) == [b"AAaaBBbb"] * 2)

    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
    li = launcher_info(env)
    expect("torchrun port rule", li["launcher"] == "torchrun" and li["detcoll_store"] == "127.0.0.1:29501" and li["ports_differ"])
    li = launcher_info(dict(env, DETCOLL_RANK="0", DETCOLL_WORLD_SIZE="2", DETCOLL_STORE_ADDR="127.0.0.1:41000"))
    expect("detcoll launch port rule", li["launcher"] == "detcoll" and li["detcoll_store"] == "127.0.0.1:41000" and li["ports_differ"])
    expect("median", median([3.0, 1.0, float("nan"), 2.0]) == 2.0 and median([]) is None)

    res = {"tag": "t", "steps": [{"name": "x", "ok": True, "seconds": 1}], "checks": [{"name": "c", "ok": True}],
           "timing": {"config": {}, "rows": [{"op": "all_reduce", "bytes": 4096, "impl": "torch", "median_us": 20.0},
                                             {"op": "all_reduce", "bytes": 4096, "impl": "detcoll", "median_us": 25.0}]},
           "overhead": {"detcoll_all_reduce_us": 9.0, "c_api_all_reduce_us": 7.0, "python_overhead_us": 2.0, "goal_met": True}}
    md = render_markdown(res)
    expect("markdown table", "| all_reduce | 4 KiB | 20.0 | 25.0 | 1.25 |" in md)
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "run"))
        with open(os.path.join(d, "run", "results.json"), "w") as f:
            json.dump(res, f)
        txt = summarize([os.path.join(d, "run"), os.path.join(d, "missing")])
        expect("summary", "checks 1/1 PASS" in txt and "no results" in txt and "25.0" in txt)

    if detcoll_bin and Path(detcoll_bin).exists():
        one, tiny = bf16_bits(1.0), bf16_bits(2.0 ** -8)
        with tempfile.TemporaryDirectory() as d:
            # 1 + 2^-8 + 2^-8 over three ranks: native rounds (1 + 2^-8) to 1
            # (a tie, to even) and again; f32 keeps 1 + 2^-7 (0x3f81).
            data = struct.pack("<3H", one, tiny, tiny)
            got = run_oracle(detcoll_bin, "bf16", 3, data, d)
            expect("oracle bf16 native, 3 ranks", got == struct.pack("<H", one))
            got = run_oracle(detcoll_bin, "bf16", 3, data, d, accumulate="f32")
            expect("oracle bf16 f32, 3 ranks", got == struct.pack("<H", 0x3F81))
            data = struct.pack("<4H", bf16_bits(1.5), bf16_bits(-2.0), bf16_bits(2.25), bf16_bits(0.5))
            got = run_oracle(detcoll_bin, "bf16", 2, data, d)
            expect("oracle bf16 two ranks", got == struct.pack("<2H", bf16_bits(3.75), bf16_bits(-1.5)))
            rs = expected_outputs("reduce_scatter", [data[:4], data[4:]], lambda x: run_oracle(detcoll_bin, "bf16", 2, x, d))
            expect("reduce_scatter blocks from the oracle", rs == [struct.pack("<H", bf16_bits(3.75)), struct.pack("<H", bf16_bits(-1.5))])
    else:
        print(f"  skip the oracle: {detcoll_bin} not found")
    print(f"self-test: {len(fails)} failed" + (f": {fails}" if fails else ""))
    return 1 if fails else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "out") + "/pytorch-check", help="results directory")
    p.add_argument("--tag", default=None, help="name of this run (default: the --out folder's name)")
    p.add_argument("--detcoll-bin", default=str(ROOT / "bin" / "detcoll"), help="the detcoll command (host oracle)")
    p.add_argument("--cpu", action="store_true", help="CPU tensors, gloo and wall-clock timing (a dry run without a GPU)")
    p.add_argument("--quick", action="store_true", help="smaller counts and sizes (for dry runs)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--overhead-calls", type=int, default=2000)
    p.add_argument("--overhead-batch", type=int, default=100)
    p.add_argument("--keep-dumps", action="store_true", help="keep every dump (default: delete those over --keep-max-bytes after checking)")
    p.add_argument("--keep-max-bytes", type=int, default=64 << 10)
    p.add_argument("--watchdog", type=float, default=0, help="print every thread's stack after this many seconds (0: never)")
    p.add_argument("--self-test", action="store_true", help="test the helpers and exit (no torch, no launcher)")
    p.add_argument("--summarize", nargs="+", metavar="DIR", help="print the summary of finished runs and exit")
    p.add_argument("--go-bench", help="with --summarize: a detcoll bench report to show beside")
    p.add_argument("--summary-file", help="with --summarize: also write the summary here")
    args = p.parse_args()
    if args.self_test:
        return self_test(args.detcoll_bin)
    if args.summarize:
        sys.stdout.write(summarize(args.summarize, args.go_bench, args.summary_file))
        return 0
    if args.tag is None:
        args.tag = Path(args.out).name
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
