"""gloo_bench: torch.distributed over Gloo, timed like `detcoll bench`, for
docs/benchmarks/peers/run.sh. Start W copies with
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (run.sh does; torchrun
1.13 fails on this Python at start-up, in its redirect parsing):

    RANK=r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
        /usr/bin/python3 gloo_bench.py --name gloo --iters 10 --samples 3 4096 65536

Sizes are detcoll's input_bytes per rank (all_reduce: the tensor each rank
sends; all_gather: the block each rank sends, it receives W of them;
reduce_scatter: the W blocks each rank sends). A sample is the mean of
--iters calls after a barrier, the slowest rank's (MAX over ranks). Rank 0
prints one JSON line per (op, dtype, size), the same shape as mpi_bench:
    {"name", "op", "dtype", "world_size", "bytes", "samples_us"}
An operation Gloo does not support prints {"...", "skipped": "reason"}
(torch 1.13's Gloo has no reduce_scatter and no bf16 at all; later torch
is asked for both unless --unsupported names them).
"""
import argparse
import json
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--name", default="gloo")
p.add_argument("--iters", type=int, default=10)
p.add_argument("--samples", type=int, default=3)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter")
p.add_argument("--dtypes", default="fp32,bf16")
p.add_argument("--unsupported", default="", help="ops or dtypes to skip (comma-separated)")
p.add_argument("sizes", type=int, nargs="+")
a = p.parse_args()
unsupported = set(filter(None, a.unsupported.split(",")))
legacy = int(torch.__version__.split(".")[0]) < 2

dist.init_process_group("gloo")
rank, w = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}


def emit(d):
    if rank == 0:
        print(json.dumps(d), flush=True)


for dn in a.dtypes.split(","):
    dt = dtypes[dn]
    esz = torch.tensor([], dtype=dt).element_size()
    for op in a.ops.split(","):
        for req in a.sizes:
            n = max(req // esz, 1)
            if op == "reduce_scatter":
                n = max(n // w * w, w)
            x = (1 + (torch.arange(n) + rank) % 8 / 8).to(dt)
            if op == "all_reduce":
                fn = lambda: dist.all_reduce(x)
            elif op == "all_gather":
                outs = [torch.empty_like(x) for _ in range(w)]
                fn = lambda: dist.all_gather(outs, x)
            else:
                ins = list(x.chunk(w))
                out = torch.empty_like(ins[0])
                fn = lambda: dist.reduce_scatter(out, ins)
            row = {"name": a.name, "op": op, "dtype": dn, "world_size": w, "bytes": n * esz}
            # What torch 1.13's Gloo refuses (the errors it raised when tried;
            # a failed call leaves the group unusable, so they are not retried).
            # Later torch is asked for everything: --unsupported names what a
            # probe found missing there.
            if op in unsupported or dn in unsupported:
                row["skipped"] = f"not supported by torch {torch.__version__}'s Gloo (--unsupported)"
            elif legacy and op == "reduce_scatter":
                row["skipped"] = "RuntimeError: ProcessGroupGloo does not support reduce_scatter"
            elif legacy and dn == "bf16":
                row["skipped"] = "RuntimeError: Invalid scalar type (torch 1.13's Gloo has no bfloat16 collectives)"
            if "skipped" in row:
                emit(row)
                continue
            samples = []
            for s in range(-1, a.samples):
                k = a.warmup if s < 0 else a.iters
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                t = torch.tensor([(time.perf_counter() - t0) / k * 1e6], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                if s >= 0:
                    samples.append(round(t.item(), 3))
            row["samples_us"] = samples
            emit(row)
dist.destroy_process_group()
