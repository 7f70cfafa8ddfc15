"""torchrun check of detcoll.torch.functional: forward values and gradients
of every autograd collective and region function, compared bit for bit with
a single-process reference that every rank computes from every rank's
inputs (seeded by rank) with detcoll's tree (parallel.tree_sum: the
canonical pairwise tree over the group's ranks, every node rounded to the
dtype, as docs/contract.md promises).

    torchrun --nproc_per_node W python/tests/torch_functional_check.py

(python/tests/torch_checks.py runs it together with torch_parallel_check.)
"""

import torch

import torch_testutil as U
from detcoll.torch import functional as F
from detcoll.torch.parallel import tree_sum

def inputs(seed, w, shape, dtype):
    """Every group rank's tensor for seed: [w] tensors."""
    out = []
    for r in range(w):
        gen = torch.Generator().manual_seed(seed * 1000 + r)
        out.append(torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype))
    return out


def check_group(fail, g, size, r, dtypes):
    tag = f"group{size}"
    for dt in dtypes:
        shape = (4 * size, 2 * size)
        rows, cols = shape
        what = lambda name: f"{tag} {dt} {name}"  # noqa: E731
        xs = inputs(1, size, shape, dt)
        total = tree_sum(xs)

        def run(fn, x, c):
            xi = x.clone().requires_grad_(True)
            y = fn(xi)
            y.backward(c)
            return y, xi.grad

        # all_reduce: y = Σ x; the gradient of Σ_r <c_r, y> wrt x_r is Σ c.
        cs = inputs(2, size, shape, dt)
        y, gx = run(lambda x: F.all_reduce(x, g), xs[r], cs[r])
        fail.bits(what("all_reduce y"), y, total)
        fail.bits(what("all_reduce dx"), gx, tree_sum(cs))
        # all_gather (dim 0 and 1): backward = my block of Σ c.
        for dim in (0, 1):
            big = (rows * size, cols) if dim == 0 else (rows, cols * size)
            cg = inputs(4 + dim, size, big, dt)
            y, gx = run(lambda x: F.all_gather(x, g, dim), xs[r], cg[r])
            fail.bits(what(f"all_gather dim{dim} y"), y, torch.cat(xs, dim=dim))
            fail.bits(what(f"all_gather dim{dim} dx"), gx, tree_sum(cg).chunk(size, dim=dim)[r])
        # reduce_scatter (dim 0 and 1): my block of Σ x; backward all_gather of c.
        for dim in (0, 1):
            small = (rows // size, cols) if dim == 0 else (rows, cols // size)
            cb = inputs(6 + dim, size, small, dt)
            y, gx = run(lambda x: F.reduce_scatter(x, g, dim), xs[r], cb[r])
            fail.bits(what(f"reduce_scatter dim{dim} y"), y, total.chunk(size, dim=dim)[r])
            fail.bits(what(f"reduce_scatter dim{dim} dx"), gx, torch.cat(cb, dim=dim))

        # Megatron regions: replicated tensors (x or the gradient) are the
        # same on every rank, so they come from "rank 0" of inputs().
        y, gx = run(lambda x: F.copy_to_tensor_parallel_region(x, g), xs[0], cs[r])
        fail.bits(what("copy_to y"), y, xs[0])
        fail.bits(what("copy_to dx"), gx, tree_sum(cs))
        y, gx = run(lambda x: F.reduce_from_tensor_parallel_region(x, g), xs[r], cs[0])
        fail.bits(what("reduce_from y"), y, total)
        fail.bits(what("reduce_from dx"), gx, cs[0])
        cl = inputs(8, size, (rows, cols // size), dt)
        y, gx = run(lambda x: F.scatter_to_tensor_parallel_region(x, g), xs[0], cl[r])
        fail.bits(what("scatter_to y"), y, xs[0].chunk(size, dim=-1)[r])
        fail.bits(what("scatter_to dx"), gx, torch.cat(cl, dim=-1))
        cw = inputs(9, size, (rows, cols * size), dt)
        y, gx = run(lambda x: F.gather_from_tensor_parallel_region(x, g), xs[r], cw[0])
        fail.bits(what("gather_from y"), y, torch.cat(xs, dim=-1))
        fail.bits(what("gather_from dx"), gx, cw[0].chunk(size, dim=-1)[r])
        c0 = inputs(10, size, (rows // size, cols), dt)
        y, gx = run(lambda x: F.scatter_to_sequence_parallel_region(x, g), xs[0], c0[r])
        fail.bits(what("scatter_to_sp y"), y, xs[0].chunk(size)[r])
        fail.bits(what("scatter_to_sp dx"), gx, torch.cat(c0))
        cgs = inputs(11, size, (rows * size, cols), dt)
        y, gx = run(lambda x: F.gather_from_sequence_parallel_region(x, g), xs[r], cgs[r])
        fail.bits(what("gather_from_sp y"), y, torch.cat(xs))
        fail.bits(what("gather_from_sp dx"), gx, tree_sum(cgs).chunk(size)[r])
        y, gx = run(lambda x: F.gather_from_sequence_parallel_region(x, g, tensor_parallel_output_grad=False), xs[r], cgs[0])
        fail.bits(what("gather_from_sp(no reduce) dx"), gx, cgs[0].chunk(size)[r])
        y, gx = run(lambda x: F.reduce_scatter_to_sequence_parallel_region(x, g), xs[r], c0[r])
        fail.bits(what("reduce_scatter_to_sp y"), y, total.chunk(size)[r])
        fail.bits(what("reduce_scatter_to_sp dx"), gx, torch.cat(c0))

        # Lanes: each lane's gradient reduced by its own tree, then lane 0 + lane 1.
        def add(a, b):
            return (a.float() + b.float()).to(dt) if dt == torch.bfloat16 else a + b

        c2 = inputs(3, size, shape, dt)
        xi = xs[0].clone().requires_grad_(True)
        a, b = F.copy_to_tensor_parallel_region_lanes(xi, 2, g)
        fail.bits(what("copy_to_lanes y"), b, xs[0])
        torch.autograd.backward([a, b], [cs[r], c2[r]])
        fail.bits(what("copy_to_lanes dx"), xi.grad, add(tree_sum(cs), tree_sum(c2)))
        xi = xs[r].clone().requires_grad_(True)
        a, b = F.gather_from_sequence_parallel_region_lanes(xi, 2, g)
        fail.bits(what("gather_sp_lanes y"), b, torch.cat(xs))
        d1, d2 = inputs(12, size, (rows * size, cols), dt), inputs(13, size, (rows * size, cols), dt)
        torch.autograd.backward([a, b], [d1[r], d2[r]])
        fail.bits(what("gather_sp_lanes dx"), xi.grad, add(tree_sum(d1).chunk(size)[r], tree_sum(d2).chunk(size)[r]))

    # Integers move through the data-movement functions.
    xi = torch.arange(6, dtype=torch.int64) + 100 * r
    fail.bits(f"{tag} all_gather int64", F.all_gather(xi, g), torch.cat([torch.arange(6, dtype=torch.int64) + 100 * q for q in range(size)]))
    # Non-contiguous input.
    xt = xs[r].t()
    fail.bits(f"{tag} all_reduce non-contiguous", F.all_reduce(xt, g), tree_sum([x.t() for x in xs]))


def run(fail, rank, world):
    # The whole world (W = 1, 2, 4); subgroups are exercised by
    # torch_parallel_check. fp64 takes the fp32 code path: W <= 2 only.
    dtypes = (torch.bfloat16, torch.float32) + ((torch.float64,) if world <= 2 else ())
    check_group(fail, U.consecutive_groups(world), world, rank % world, dtypes)


if __name__ == "__main__":
    rank, world = U.init()
    fail = U.Failures(rank)
    run(fail, rank, world)
    fail.finish(f"torch_functional_check W={world} groups={U.group_mode()}")
