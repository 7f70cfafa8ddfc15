"""torchrun check of detcoll.torch.parallel against Go's parallel package.

    torchrun --nproc_per_node W python/tests/torch_parallel_check.py REFDIR

(python/tests/torch_checks.py runs it together with torch_functional_check.)

REFDIR is written by internal/torchref (Go). For every TP (and CP) size in
1, 2, 4 that divides W, the world splits into groups of consecutive ranks;
each group runs the layers on its shards and every rank compares the raw
bits of its shards of the outputs and gradients with Go's single-rank
reference: the TP/CP sizes are then bit-identical to each other and to Go.
"""

import sys

import torch

import torch_testutil as U
from detcoll.torch import parallel as P

REF = None
fail = None


def tensors(c):
    assert REF is not None
    return {k: U.load(REF, t) for k, t in c["tensors"].items()}


def leaf(x):
    return x.clone().requires_grad_(True)


def check_free(c):
    T = tensors(c)
    if c["kind"] == "matmul":
        fail.bits(f"{c['name']} y", P.canonical_matmul(T["a"], T["b"], c["chunks"]), T["y"])
    elif c["kind"] == "formulas":
        # Go's reference went through Matrix.Set, which writes NaN as the
        # canonical quiet NaN; the formulas return float32 as computed.
        x = T["x"]
        canon = lambda t: torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)  # noqa: E731
        fail.bits("exp32", canon(P.exp32(x)), T["exp"])
        fail.bits("log32", canon(P.log32(x)), T["log"])
        fail.bits("sigmoid32", canon(P.sigmoid32(x)), T["sigmoid"])


def check_linear(c, g, tp, t):
    T = tensors(c)
    x, wt, dy, y, dx, dw = T["x"], T["w"], T["dy"], T["y"], T["dx"], T["dw"]
    W, dW = wt.t().contiguous(), dw.t().contiguous()  # torch's [out, in]
    out, inn, tokens = W.shape[0], W.shape[1], x.shape[0]
    L = c["chunks"]
    oc, ic, tb = out // tp, inn // tp, tokens // tp
    osl, isl, tsl = slice(t * oc, (t + 1) * oc), slice(t * ic, (t + 1) * ic), slice(t * tb, (t + 1) * tb)
    name = f"{c['name']} tp{tp}"
    for sp in (False, True) if tokens % tp == 0 else (False,):
        for gather in ((False, True) if not sp else (False,)):
            m = P.ColumnParallelLinear(inn, out, g, chunks=L, dtype=x.dtype, sequence_parallel=sp, gather_output=gather,
                                       weight=P.ColumnParallelLinear.shard(W, tp, t))
            xi = leaf(x[tsl] if sp else x)
            yo = m(xi)
            what = f"{name} column sp={sp} gather={gather}"
            fail.bits(what + " y", yo, y if gather else y[:, osl])
            yo.backward(dy if gather else dy[:, osl].contiguous())
            fail.bits(what + " dx", xi.grad, dx[tsl] if sp else dx)
            fail.bits(what + " dW", m.weight.grad, dW[osl])
        for parallel_in in ((True, False) if not sp else (True,)):
            m = P.RowParallelLinear(inn, out, g, chunks=L, dtype=x.dtype, sequence_parallel=sp, input_is_parallel=parallel_in,
                                    weight=P.RowParallelLinear.shard(W, tp, t))
            xi = leaf(x[:, isl].contiguous() if parallel_in else x)
            yo = m(xi)
            what = f"{name} row sp={sp} input_is_parallel={parallel_in}"
            fail.bits(what + " y", yo, y[tsl] if sp else y)
            yo.backward((dy[tsl] if sp else dy).contiguous())
            fail.bits(what + " dx", xi.grad, dx[:, isl] if parallel_in else dx)
            fail.bits(what + " dW", m.weight.grad, dW[:, isl])


def check_ffn(c, g, tp, t):
    T = tensors(c)
    x, dy = T["x"], T["dy"]
    gate, up, down = T["gate"].t().contiguous(), T["up"].t().contiguous(), T["down"].t().contiguous()
    inter, hidden, tokens = gate.shape[0], gate.shape[1], x.shape[0]
    ic, tb = inter // tp, tokens // tp
    isl, tsl = slice(t * ic, (t + 1) * ic), slice(t * tb, (t + 1) * tb)
    for sp in (False, True) if tokens % tp == 0 else (False,):
        m = P.ParallelSwiGLU(hidden, inter, g, chunks=c["chunks"], sequence_parallel=sp, dtype=x.dtype,
                             gate=gate[isl], up=up[isl], down=down[:, isl].contiguous())
        xi = leaf(x[tsl] if sp else x)
        yo = m(xi)
        what = f"{c['name']} tp{tp} sp={sp}"
        fail.bits(what + " y", yo, T["y"][tsl] if sp else T["y"])
        yo.backward((dy[tsl] if sp else dy).contiguous())
        fail.bits(what + " dx", xi.grad, T["dx"][tsl] if sp else T["dx"])
        fail.bits(what + " dGate", m.gate.weight.grad, T["dgate"].t()[isl])
        fail.bits(what + " dUp", m.up.weight.grad, T["dup"].t()[isl])
        fail.bits(what + " dDown", m.down.weight.grad, T["ddown"].t()[:, isl])


def check_attn(c, g, cp, r):
    T = tensors(c)
    s = T["q"].shape[0]
    if s % cp or (cp > 1 and (s // cp) % 2):
        return  # the sequence does not split into 2*CP zigzag chunks
    rows = torch.tensor(P.zigzag_rows(cp, r, s // cp))
    q, k, v = (leaf(T[n][rows]) for n in ("q", "k", "v"))
    out, lse = P.context_parallel_attention(q, k, v, T["pos"][rows], g, heads=c["heads"], head_dim=c["head_dim"])
    what = f"{c['name']} cp{cp}"
    fail.bits(what + " out", out, T["out"][rows])
    fail.bits(what + " lse", lse, T["lse"][rows])
    out.backward(T["dout"][rows].contiguous())
    for n in ("q", "k", "v"):
        fail.bits(f"{what} d{n.upper()}", {"q": q, "k": k, "v": v}[n].grad, T["d" + n][rows])
    nz = c.get("neg_zero", {})
    if nz.get("out"):
        sign = -0.0
        got = int((U.bits(out) == U.bits(torch.tensor([sign], dtype=out.dtype))).sum())
        want = int((U.bits(T["out"][rows]) == U.bits(torch.tensor([sign], dtype=out.dtype))).sum())
        fail.true(what + " keeps every -0 of out", got == want, f"({got} of {want})")


def raises(what, exc, fn, needle=""):
    try:
        fn()
    except exc as e:
        fail.true(what + f" raises {exc.__name__} naming {needle!r}", needle in str(e), f"(got {e})")
        return
    except Exception as e:  # noqa: BLE001
        fail.true(what, False, f"raised {type(e).__name__}: {e}, want {exc.__name__}")
        return
    fail.true(what, False, f"did not raise {exc.__name__}")


def check_errors(g, size, r):
    """Bad arguments: a Python exception naming the problem, on every rank;
    the group stays usable."""
    tag = f"errors tp{size}"
    raises(tag + " out % chunks", ValueError, lambda: P.ColumnParallelLinear(64, 30, g), "30 features")
    # TP = 2, 4 with 12 chunks (12/TP not a power of two); TP = 1: 48 % 5.
    raises(tag + " chunks/TP", ValueError, lambda: P.RowParallelLinear(48, 8, g, chunks=5 if size == 1 else 12),
           "features" if size == 1 else "power of two")
    raises(tag + " fp64", TypeError, lambda: P.ColumnParallelLinear(8, 8, g, dtype=torch.float64), "float64")
    raises(tag + " sp+gather", ValueError, lambda: P.ColumnParallelLinear(8, 8, g, sequence_parallel=True, gather_output=True),
           "exclude")
    raises(tag + " matmul dtypes", TypeError, lambda: P.canonical_matmul(torch.ones(2, 2), torch.ones(2, 2).bfloat16()), "bfloat16")
    q = torch.zeros(4, 8)
    pos = torch.arange(4)
    if size > 1:
        # One rank rejects (odd token count) or the ranks disagree: every
        # rank raises before data moves.
        n = 3 if r == 0 else 4
        raises(tag + " attention odd tokens on rank 0", ValueError,
               lambda: P.context_parallel_attention(q[:n], q[:n], q[:n], pos[:n], g, heads=2, head_dim=4),
               "even number" if r == 0 else "group rank 0 rejected")
        n = 6 if r == 0 else 4
        q6, p6 = torch.zeros(6, 8), torch.arange(6)
        raises(tag + " attention token counts differ", ValueError,
               lambda: P.context_parallel_attention(q6[:n], q6[:n], q6[:n], p6[:n], g, heads=2, head_dim=4), "disagree")
    raises(tag + " attention short positions", ValueError,
           lambda: P.context_parallel_attention(q, q, q, pos[:3], g, heads=2, head_dim=4), "position ids")
    out, _ = P.context_parallel_attention(q, q, q, pos, g, heads=2, head_dim=4)
    fail.true(tag + " group usable after the errors", out.shape == (4, 8))


def run(failures, rank, world, ref):
    global REF, fail
    REF, fail = ref, failures
    cases = U.load_manifest(REF)
    sizes = [s for s in (1, 2, 4, 8) if world % s == 0]
    for c in cases:
        check_free(c)
    for size in sizes:
        g = U.consecutive_groups(size)
        r = rank % size
        check_errors(g, size, r)
        for c in cases:
            if c["kind"] == "linear":
                check_linear(c, g, size, r)
            elif c["kind"] == "ffn":
                check_ffn(c, g, size, r)
            elif c["kind"] == "attn":
                check_attn(c, g, size, r)
    return sizes


if __name__ == "__main__":
    rank, world = U.init()
    f = U.Failures(rank)
    sizes = run(f, rank, world, sys.argv[1])
    f.finish(f"torch_parallel_check W={world} sizes={sizes} groups={U.group_mode()}")
