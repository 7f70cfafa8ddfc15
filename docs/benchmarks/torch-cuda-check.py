"""The torch.distributed backend on CUDA tensors, as far as one GPU allows.

Run under torchrun on the GPU machine (torch 2.x, one GPU per rank):

    DETCOLL_LIB=bin/libdetcoll.so PYTHONPATH=python \
        torchrun --nproc-per-node 1 docs/benchmarks/torch-cuda-check.py [BACKEND]

BACKEND is "detcoll" (default) or torch's per-device form, e.g.
"cpu:gloo,cuda:detcoll". Every result is compared bit for bit (int views)
with what the contract gives; at W = 1 a sum is its input. Prints one line per
check and "N passed, M failed" last.
"""
import os
import sys

import torch
import torch.distributed as dist

import detcoll.torch  # noqa: F401  registers "detcoll"

backend = sys.argv[1] if len(sys.argv) > 1 else "detcoll"
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_process_group(backend)
dev = torch.device("cuda")
passed = failed = 0


def bits(t):
    t = t.contiguous()
    return t.view({torch.bfloat16: torch.int16, torch.float16: torch.int16,
                   torch.float32: torch.int32, torch.float64: torch.int64}.get(t.dtype, t.dtype))


def check(name, got, want):
    global passed, failed
    ok = got.device.type == "cuda" and torch.equal(bits(got).cpu(), bits(want).cpu())
    passed, failed = passed + ok, failed + (not ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name} ({got.dtype}, {got.numel()} elements on {got.device})", flush=True)


gen = torch.Generator().manual_seed(1234)
for dt in (torch.bfloat16, torch.float16, torch.float32):
    for n in (1, 1000, 1 << 20):
        x = (torch.randn(n, generator=gen) * 100).to(dt).to(dev)
        y = x.clone()
        dist.all_reduce(y)  # W = 1: the tree over one input is the input
        check(f"all_reduce SUM n={n}", y, x * world if world == 1 else y)
        z = x.clone()
        w = dist.all_reduce(z, async_op=True)
        w.wait()
        check(f"all_reduce SUM async n={n}", z, y)
        a = x.clone()
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        check(f"all_reduce AVG n={n}", a, x if world == 1 else a)
        out = torch.empty(world * n, dtype=dt, device=dev)
        dist.all_gather_into_tensor(out, x)
        check(f"all_gather_into_tensor n={n}", out[rank * n:(rank + 1) * n], x)
        rs = torch.empty(n, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(rs, torch.cat([x] * world))
        check(f"reduce_scatter_tensor n={n}", rs, x if world == 1 else rs)
        b = x.clone()
        dist.broadcast(b, src=0)
        check(f"broadcast n={n}", b, x if rank == 0 else b)
torch.cuda.synchronize()
dist.barrier()
dist.destroy_process_group()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
