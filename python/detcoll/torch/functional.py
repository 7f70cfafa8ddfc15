"""Autograd collectives for tensor-, sequence- and context-parallel code.

Two families, both over a *group*: a ``torch.distributed`` process group
(``None`` is the default group; with ``backend="detcoll"`` the sums are
detcoll's fixed tree) or a ``detcoll.Comm`` (the ctypes communicator of the
``detcoll`` package: deterministic sums without a torch process group).

Generic collectives (``torch.distributed.nn.functional`` semantics: every
rank's loss counts, so the backward of a sum is a sum)::

    all_reduce(x)          forward: sum over ranks        backward: all_reduce(grad)
    all_gather(x, dim)     forward: concat in rank order  backward: reduce_scatter(grad, dim)
    reduce_scatter(x, dim) forward: my block of the sum   backward: all_gather(grad, dim)

Megatron-LM's region functions (the loss is replicated over the TP group:
each rank's copy of a replicated activation gets the same gradient, so only
one copy counts)::

    copy_to_tensor_parallel_region(x)           fwd identity           bwd all_reduce
    reduce_from_tensor_parallel_region(x)       fwd all_reduce         bwd identity
    scatter_to_tensor_parallel_region(x)        fwd my last-dim block  bwd all_gather (last dim)
    gather_from_tensor_parallel_region(x)       fwd all_gather (last)  bwd my last-dim block
    scatter_to_sequence_parallel_region(x)      fwd my dim-0 block     bwd all_gather (dim 0)
    gather_from_sequence_parallel_region(x)     fwd all_gather (dim 0) bwd reduce_scatter (dim 0)
    reduce_scatter_to_sequence_parallel_region  fwd reduce_scatter     bwd all_gather (dim 0)

and two multi-lane variants used by the FFN: ``copy_to_tensor_parallel_region_lanes``
and ``gather_from_sequence_parallel_region_lanes`` return n uses of one
input; the backward reduces each lane's gradient with its own tree (one
collective over the lanes side by side) and only then adds the lanes, in
lane order, in the dtype. Autograd would otherwise add the lanes before the
collective, which rounds differently (and differs from Go's ``parallel``).

Bits: with a detcoll group every sum is the canonical tree over the group's
ranks (docs/contract.md), so forward values and gradients are the same bits
on every rank and every run; AllGather, the splits and identity move data
only. With Gloo or NCCL groups the functions work but the sums are theirs.
Inputs are made contiguous. Gloo (torch 1.13) has no reduce_scatter and no
all_gather_into_tensor: the list form of all_gather is used, and
reduce_scatter falls back to all_reduce plus a slice.
"""

import torch
import torch.distributed as dist

import detcoll as _detcoll

__all__ = [
    "all_reduce", "all_gather", "reduce_scatter",
    "copy_to_tensor_parallel_region", "reduce_from_tensor_parallel_region",
    "scatter_to_tensor_parallel_region", "gather_from_tensor_parallel_region",
    "scatter_to_sequence_parallel_region", "gather_from_sequence_parallel_region",
    "reduce_scatter_to_sequence_parallel_region",
    "copy_to_tensor_parallel_region_lanes", "gather_from_sequence_parallel_region_lanes",
    "group_size", "group_rank",
    "raw_all_reduce", "raw_all_gather", "raw_reduce_scatter",
]


# ---- the group adapter -------------------------------------------------------

def _is_comm(group):
    return isinstance(group, _detcoll.Comm)


def group_size(group=None):
    """The number of ranks of group (a process group, a detcoll.Comm or None)."""
    if _is_comm(group):
        return group.size
    return dist.get_world_size(group)


def group_rank(group=None):
    """This process's rank in group."""
    if _is_comm(group):
        return group.rank
    return dist.get_rank(group)


def _is_gloo(group):
    try:
        return dist.get_backend(group) == "gloo"
    except Exception:
        return False


def raw_all_reduce(x, group=None):
    """Sum of x over the group (a new contiguous tensor; no autograd)."""
    y = x.contiguous().clone() if x.is_contiguous() else x.contiguous()
    if group_size(group) == 1:
        return y
    if _is_comm(group):
        group.all_reduce(y)
    else:
        dist.all_reduce(y, group=group)
    return y


def raw_all_gather(x, group=None, dim=0):
    """Every rank's x concatenated along dim, in rank order (no autograd)."""
    w = group_size(group)
    x = x.contiguous()
    if w == 1:
        return x.clone()
    shape = list(x.shape)
    if _is_comm(group):
        flat = group.all_gather(x.reshape(-1))
    elif _is_gloo(group):
        parts = [torch.empty_like(x) for _ in range(w)]
        dist.all_gather(parts, x, group=group)
        flat = torch.cat([p.reshape(-1) for p in parts])
    else:
        flat = torch.empty(w * x.numel(), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(flat, x.reshape(-1), group=group)
    stacked = flat.view([w] + shape)
    if dim % max(x.dim(), 1) == 0 and x.dim() > 0:
        return stacked.reshape([w * shape[0]] + shape[1:])
    return torch.cat(stacked.unbind(0), dim=dim)


def raw_reduce_scatter(x, group=None, dim=0):
    """This rank's block (along dim) of the sum of x over the group (no autograd)."""
    w = group_size(group)
    if x.shape[dim] % w:
        raise ValueError(f"reduce_scatter: dimension {dim} of size {x.shape[dim]} does not divide over {w} ranks")
    if w == 1:
        return x.contiguous().clone()
    # Rank blocks contiguous and in rank order: [w, *block shape].
    blocks = torch.stack(x.chunk(w, dim=dim)) if dim % x.dim() != 0 else x.contiguous().view([w, -1])
    block_shape = list(x.shape)
    block_shape[dim] //= w
    src = blocks.contiguous().view(-1)
    if _is_comm(group):
        out = group.reduce_scatter(src)
    elif _is_gloo(group):
        # Gloo (torch 1.13) has no reduce_scatter: the sum and a slice.
        dist.all_reduce(src, group=group)
        out = src.view(w, -1)[group_rank(group)].clone()
    else:
        out = torch.empty(src.numel() // w, dtype=x.dtype, device=x.device)
        dist.reduce_scatter_tensor(out, src, group=group)
    return out.view(block_shape)


def _split(x, group, dim):
    w = group_size(group)
    if x.shape[dim] % w:
        raise ValueError(f"split: dimension {dim} of size {x.shape[dim]} does not divide over {w} ranks")
    return x.chunk(w, dim=dim)[group_rank(group)].contiguous()


# ---- generic autograd collectives -------------------------------------------

class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return raw_all_reduce(x, group)

    @staticmethod
    def backward(ctx, g):
        return raw_all_reduce(g, ctx.group), None


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim):
        ctx.group, ctx.dim = group, dim
        return raw_all_gather(x, group, dim)

    @staticmethod
    def backward(ctx, g):
        return raw_reduce_scatter(g, ctx.group, ctx.dim), None, None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim):
        ctx.group, ctx.dim = group, dim
        return raw_reduce_scatter(x, group, dim)

    @staticmethod
    def backward(ctx, g):
        return raw_all_gather(g, ctx.group, ctx.dim), None, None


def all_reduce(x, group=None):
    """Sum over the group. Backward: the sum of every rank's gradient (each
    rank's loss counts, as torch.distributed.nn.functional.all_reduce)."""
    return _AllReduce.apply(x, group)


def all_gather(x, group=None, dim=0):
    """Every rank's x concatenated along dim in rank order. Backward: this
    rank's block of the sum of every rank's gradient (reduce_scatter)."""
    return _AllGather.apply(x, group, dim)


def reduce_scatter(x, group=None, dim=0):
    """This rank's block along dim of the sum over the group. Backward:
    all_gather of the gradient."""
    return _ReduceScatter.apply(x, group, dim)


# ---- Megatron region functions ----------------------------------------------

class _CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return raw_all_reduce(g, ctx.group), None


class _ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return raw_all_reduce(x, group)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _ScatterTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim):
        ctx.group, ctx.dim = group, dim
        return _split(x, group, dim)

    @staticmethod
    def backward(ctx, g):
        return raw_all_gather(g, ctx.group, ctx.dim), None, None


class _GatherFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim):
        ctx.group, ctx.dim = group, dim
        return raw_all_gather(x, group, dim)

    @staticmethod
    def backward(ctx, g):
        return _split(g, ctx.group, ctx.dim), None, None


class _GatherFromSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, grad_reduce):
        ctx.group, ctx.grad_reduce = group, grad_reduce
        return raw_all_gather(x, group, 0)

    @staticmethod
    def backward(ctx, g):
        if ctx.grad_reduce:
            return raw_reduce_scatter(g, ctx.group, 0), None, None
        return _split(g, ctx.group, 0), None, None


class _ReduceScatterToSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return raw_reduce_scatter(x, group, 0)

    @staticmethod
    def backward(ctx, g):
        return raw_all_gather(g, ctx.group, 0), None


def copy_to_tensor_parallel_region(x, group=None):
    """Identity forward (x is replicated on the TP ranks); backward sums the
    gradient over the group (each rank computed a partial of it)."""
    return _CopyTo.apply(x, group)


def reduce_from_tensor_parallel_region(x, group=None):
    """Sum of the ranks' partials forward; identity backward (the result is
    replicated and so is its gradient)."""
    return _ReduceFrom.apply(x, group)


def scatter_to_tensor_parallel_region(x, group=None):
    """This rank's block of the last dimension forward; all-gather of the
    gradient along it backward."""
    return _ScatterTo.apply(x, group, -1)


def gather_from_tensor_parallel_region(x, group=None):
    """All-gather along the last dimension forward; this rank's block of the
    (replicated) gradient backward."""
    return _GatherFrom.apply(x, group, -1)


def scatter_to_sequence_parallel_region(x, group=None):
    """This rank's block of dimension 0 (the sequence) forward; all-gather
    backward."""
    return _ScatterTo.apply(x, group, 0)


def gather_from_sequence_parallel_region(x, group=None, tensor_parallel_output_grad=True):
    """All-gather along dimension 0 (the sequence) forward. Backward:
    reduce-scatter of the gradient (the gathered tensor feeds a
    tensor-parallel layer, so every rank holds a partial gradient), or this
    rank's block when tensor_parallel_output_grad is False."""
    return _GatherFromSP.apply(x, group, bool(tensor_parallel_output_grad))


def reduce_scatter_to_sequence_parallel_region(x, group=None):
    """Reduce-scatter along dimension 0 forward; all-gather backward."""
    return _ReduceScatterToSP.apply(x, group)


def _add_lanes(lanes):
    # Lane 0 + lane 1 + ..., left to right, each addition rounded once to
    # the dtype (float32 sum, then round: the collectives' native addition).
    out = lanes[0]
    for nxt in lanes[1:]:
        if out.dtype in (torch.bfloat16, torch.float16):
            out = (out.float() + nxt.float()).to(out.dtype)
        else:
            out = out + nxt
    return out


class _Lanes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, n, sequence):
        ctx.group, ctx.n, ctx.sequence = group, n, sequence
        y = raw_all_gather(x, group, 0) if sequence else x
        # n outputs that alias one tensor: n uses whose gradients arrive apart.
        outs = tuple(y.view_as(y) for _ in range(n))
        return outs

    @staticmethod
    def backward(ctx, *grads):
        grads = [g.contiguous() for g in grads]
        w = group_size(ctx.group)
        if ctx.sequence:
            # [w, lanes, block]: every rank's block of every lane, so one
            # reduce-scatter gives this rank its block of each lane.
            lanes = torch.stack([g.reshape(w, -1) for g in grads], dim=1)
            mine = raw_reduce_scatter(lanes.reshape(-1), ctx.group, 0).view(ctx.n, -1)
            shape = list(grads[0].shape)
            shape[0] //= w
            red = [mine[i].view(shape) for i in range(ctx.n)]
        else:
            both = raw_all_reduce(torch.stack(grads), ctx.group)
            red = list(both.unbind(0))
        return _add_lanes(red), None, None, None


def _lanes(x, n, group, sequence):
    if int(n) < 1:
        raise ValueError(f"{n} lanes (want at least 1)")
    return _Lanes.apply(x, group, int(n), sequence)


def copy_to_tensor_parallel_region_lanes(x, n, group=None):
    """n identity copies of x (one per column-parallel consumer). Backward:
    each copy's gradient summed over the group by its own tree (one
    all-reduce of the lanes side by side), then the lanes added in order."""
    return _lanes(x, n, group, False)


def gather_from_sequence_parallel_region_lanes(x, n, group=None):
    """n uses of all_gather(x, dim 0) (gathered once). Backward: each lane's
    gradient reduce-scattered by its own tree (one reduce-scatter of the
    lanes side by side), then the lanes added in order."""
    return _lanes(x, n, group, True)
