"""Shared by the torchrun checks of detcoll.torch.functional / parallel / bench
(run by internal/torchref's Go test under torchrun; see docs/pytorch-layers.md).

Groups: with DETCOLL_TORCH_GROUPS=backend (the default once the "detcoll"
torch.distributed backend is registered by `import detcoll.torch`) the
groups are dist.new_group(..., backend="detcoll"); with =comm (the default
without it) they are detcoll.Comm sub-communicators made from unique ids
passed over the Gloo world group. Either way the sums are detcoll's tree.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import detcoll

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "int32": torch.int32}
_INT = {2: torch.int16, 4: torch.int32, 1: torch.uint8, 8: torch.int64}


def init():
    """Joins the torchrun job with Gloo; returns (rank, world size)."""
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def backend_registered():
    try:
        import detcoll.torch  # noqa: F401  (registers the backend, once it exists)
    except ImportError:
        return False
    return hasattr(dist.Backend, "DETCOLL")


def group_mode():
    mode = os.environ.get("DETCOLL_TORCH_GROUPS") or ("backend" if backend_registered() else "comm")
    if mode not in ("backend", "comm"):
        raise ValueError(f"DETCOLL_TORCH_GROUPS={mode!r} (want backend or comm)")
    return mode


def consecutive_groups(size):
    """The group of `size` consecutive world ranks this rank belongs to
    (every rank must call it with the same size, in the same order)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % size == 0, (world, size)
    if group_mode() == "backend":
        mine = None
        for g0 in range(0, world, size):
            g = dist.new_group(list(range(g0, g0 + size)), backend="detcoll")
            if g0 <= rank < g0 + size:
                mine = g
        return mine
    leader = rank - rank % size
    uid = detcoll.get_unique_id() if rank == leader else None
    uids = [None] * world
    dist.all_gather_object(uids, uid)
    return detcoll.Comm.from_unique_id(uids[leader], size, rank - leader)


def bits(t):
    """The raw bits of t as an integer tensor of the same element size."""
    t = t.detach().contiguous()
    return t.view(_INT[t.element_size()])


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def diff(a, b):
    """A short description of where a and b differ (raw bits)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    ne = (bits(a) != bits(b)).nonzero()
    if ne.numel() == 0:
        return ""
    i = tuple(ne[0].tolist())
    return (f"{ne.shape[0]} of {a.numel()} elements differ; first at {i}: "
            f"{a[i].item()!r} ({int(bits(a)[i]):#x}) vs {b[i].item()!r} ({int(bits(b)[i]):#x})")


class Failures:
    def __init__(self, rank):
        self.rank, self.msgs, self.checks = rank, [], 0

    def bits(self, what, got, want):
        self.checks += 1
        d = diff(got, want)
        if d:
            self.msgs.append(f"rank {self.rank}: {what}: {d}")

    def true(self, what, ok, detail=""):
        self.checks += 1
        if not ok:
            self.msgs.append(f"rank {self.rank}: {what} {detail}")

    def finish(self, name):
        """Every rank reports; all ranks fail if any did."""
        flags = [None] * dist.get_world_size()
        dist.all_gather_object(flags, self.msgs)
        bad = [m for ms in flags for m in ms]
        if bad:
            if self.rank == 0:
                print(f"{name}: FAIL\n  " + "\n  ".join(bad[:40]), flush=True)
            sys.exit(1)
        print(f"{name}: rank {self.rank}: OK ({self.checks} checks)", flush=True)


def load_manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)["cases"]


def load(d, t):
    with open(os.path.join(d, t["file"]), "rb") as f:
        raw = bytearray(f.read())
    x = torch.frombuffer(raw, dtype=DTYPES[t["dtype"]]).clone()
    return x.view(t["rows"], t["cols"]) if t["dtype"] != "int32" else x
