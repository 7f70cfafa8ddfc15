"""TP-invariant parallel layers: the PyTorch side of Go's ``parallel`` package.

Every layer here gives the same bits for TP = 1, 2, 4, 8 (and, with
``chunks=12``, 1, 3, 6, 12), with or without sequence parallelism, and the
same bits as Go's ``parallel`` package for the same inputs (tested bit for bit
against it). docs/pytorch-layers.md is the long version; docs/parallel.md
states the contract this module reproduces.

Canonical K chunks. Every GEMM ``C = A · B`` splits the shared dimension K
into L canonical chunks (``chunk_bounds``: contiguous, the first K mod L one
longer). For every output element and chunk c the partial is a float32
accumulator that starts at +0 and adds the float32 products in ascending k,
``acc = acc + float32(a_k * b_k)``, rounded once to the dtype; the L
partials are joined by the canonical pairwise tree ``((c0+c1)+(c2+c3))+...``
with the dtype's addition (float32 sum rounded to the dtype at every node:
detcoll's native accumulation). A row-parallel GEMM (K split over TP) needs
K divisible by L and L/TP a power of two: TP rank t holds chunks
[t·L/TP, (t+1)·L/TP), reduces them with the same tree locally, and
detcoll's AllReduce / ReduceScatter over the TP group continues the tree.

The GEMM is written as torch elementwise operations (one multiply, one add
per k, all chunks at once), not ``torch.matmul``: BLAS kernels change their
summation order with the shape, the thread count and the CPU, and fuse
multiply-adds. The elementwise kernels round every operation (an FMA with
multiplier 1 is exact), so the bits equal Go's on CPU and CUDA alike. It is
a reference, not fast: K/L steps of L·M·N elementwise work.

Activations use the fixed float32 formulas of Go's ``parallel``
(``exp32``, ``log32``, ``sigmoid32``), so their bits do not depend on libm.

Groups: a torch.distributed process group (``backend="detcoll"`` for
deterministic sums) or a ``detcoll.Comm``; see ``functional``.
"""

import math

import torch

from . import functional as F

__all__ = [
    "DEFAULT_CHUNKS", "chunk_bounds", "tp_chunks_ok", "tree_sum", "canonical_matmul",
    "exp32", "log32", "sigmoid32", "silu32", "swiglu", "linear",
    "ColumnParallelLinear", "RowParallelLinear", "ParallelSwiGLU",
    "zigzag_rows", "attention_core", "attention_core_backward",
    "context_parallel_attention", "ContextParallelAttention",
]

DEFAULT_CHUNKS = 8
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def chunk_bounds(k, l, c):
    """[lo, hi) of canonical chunk c when K = k splits into l chunks (Go's
    ChunkBounds = tree.Shard): contiguous, the first k mod l one longer."""
    q, rem = divmod(k, l)
    if c < rem:
        return c * (q + 1), (c + 1) * (q + 1)
    lo = rem * (q + 1) + (c - rem) * q
    return lo, lo + q


def tp_chunks_ok(l, tp):
    """Whether L canonical chunks give the same bits over tp ranks as over
    one: tp divides L and L/tp is a power of two (or tp is 1)."""
    if tp < 1 or l < 1 or l % tp:
        return False
    q = l // tp
    return tp == 1 or q & (q - 1) == 0


# ---- dtype arithmetic --------------------------------------------------------

_NAN = float("nan")


def _store(x32, dtype):
    """x (float32) rounded to dtype to nearest even, NaN written as the
    dtype's canonical quiet NaN (as Go's store)."""
    y = x32.to(dtype)
    nan = torch.isnan(y)
    if bool(nan.any()):
        y = torch.where(nan, torch.full_like(y, _NAN), y)
    return y


def _add(a, b):
    # One node of the tree: bf16/fp16 summed in float32 and rounded to the
    # dtype (exact, then one rounding); fp32/fp64 in their own precision.
    if a.dtype in (torch.bfloat16, torch.float16):
        return (a.float() + b.float()).to(a.dtype)
    return a + b


def tree_sum(parts):
    """The canonical pairwise tree over parts (equal-shape tensors of one
    floating dtype, fp64 included): adjacent pairs, left first, an odd last value carried up; every
    node rounded to the dtype. NaN results are canonical."""
    vals = list(parts)
    if not vals:
        raise ValueError("tree_sum of nothing")
    while len(vals) > 1:
        nxt = [_add(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    out = vals[0]
    nan = torch.isnan(out)
    if bool(nan.any()):
        out = torch.where(nan, torch.full_like(out, _NAN), out)
    return out


def _chunk_partials(af, bt, l):
    """Per-chunk partials, float32, [l, M, N]: af [M, K], bt [N, K] float32."""
    m, k = af.shape
    n = bt.shape[0]
    kc = -(-k // l) if k else 0
    dev = af.device
    if kc == 0:
        return torch.zeros(l, m, n, dtype=torch.float32, device=dev)
    # idx[c, s]: the k of step s of chunk c, or k (a zero column) past its end.
    idx = torch.full((l, kc), k, dtype=torch.long)
    for c in range(l):
        lo, hi = chunk_bounds(k, l, c)
        idx[c, : hi - lo] = torch.arange(lo, hi)
    idx = idx.to(dev)
    zero_a = torch.zeros(m, 1, dtype=torch.float32, device=dev)
    zero_b = torch.zeros(n, 1, dtype=torch.float32, device=dev)
    # [l, kc, M] and [l, kc, N]: operand columns of every chunk, step by step.
    ac = torch.cat([af, zero_a], 1)[:, idx].permute(1, 2, 0).contiguous()
    bc = torch.cat([bt, zero_b], 1)[:, idx].permute(1, 2, 0).contiguous()
    acc = torch.zeros(l, m, n, dtype=torch.float32, device=dev)  # +0
    prod = torch.empty_like(acc)
    for s in range(kc):
        # One rounded product, one rounded addition per element (two
        # kernels: nothing fuses them into an FMA); the padding adds
        # +0 * +0 = +0, which leaves the accumulator's bits unchanged (it
        # starts at +0 and is never -0).
        torch.mul(ac[:, s, :, None], bc[:, s, None, :], out=prod)
        acc.add_(prod)
    return acc


def canonical_matmul(a, b, chunks=DEFAULT_CHUNKS, *, trans_a=False, trans_b=False):
    """op(A) · op(B) with K split into `chunks` canonical chunks, each a
    float32 accumulation in ascending k rounded to the dtype, joined by the
    canonical tree in the dtype (Go's parallel.MatMul, the same bits).

    a and b: 2-D tensors of one dtype (bf16, fp16, fp32); the result has it.
    """
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"canonical_matmul of {a.dim()}-D and {b.dim()}-D tensors (want 2-D)")
    if a.dtype != b.dtype or a.dtype not in _DTYPES:
        raise TypeError(f"canonical_matmul of {a.dtype} and {b.dtype} (want one of bf16, fp16, fp32)")
    if chunks < 1:
        raise ValueError(f"canonical_matmul with {chunks} chunks")
    af = (a.t() if trans_a else a).float()
    bt = (b if trans_b else b.t()).float()
    if af.shape[1] != bt.shape[1]:
        raise ValueError(f"canonical_matmul of {tuple(af.shape)} by {tuple(bt.t().shape)}")
    parts = _chunk_partials(af.contiguous(), bt.contiguous(), chunks)
    return tree_sum([_store(parts[c], a.dtype) for c in range(chunks)])


# ---- fixed float32 formulas (Go's Exp32, Log32, Sigmoid32) --------------------

def _f32(v):
    return torch.tensor(v, dtype=torch.float32).item()


def _pow2(k):
    # 2**k as float32 for -126 <= k <= 127 (k an int32 tensor), from the bits.
    return ((k + 127) << 23).view(torch.float32)


_EXP_HI, _EXP_LO = _f32(88.72283905206835), _f32(-103.97207708)


def exp32(x):
    """e**x in float32 with Go's fixed formula (parallel.Exp32): Cody-Waite
    reduction by ln 2, the Cephes polynomial, every operation rounded."""
    x = x.float()
    dev = x.device

    def c(v):  # a Go float32 constant: v rounded to float32, as a 0-d tensor
        return torch.tensor(v, dtype=torch.float32, device=dev)

    z = torch.floor(c(1.44269504088896341) * x + c(0.5))
    n = z.to(torch.int32)
    r = x - z * c(0.693359375)
    r = r - z * c(-2.12194440e-4)
    rr = r * r
    p = c(1.9875691500e-4).expand_as(x)
    for k in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + c(k)
    p = (p * rr + r) + c(1.0)
    big = n > 127
    p = torch.where(big, p * c(2.0), p)
    n = torch.where(big, n - 1, n)
    small = n < -126
    n_ok = torch.clamp(n, -126, 127)
    normal = p * _pow2(n_ok)
    sub = (p * _pow2(torch.clamp(n + 64, -126, 127))) * _pow2(torch.full_like(n, -64))
    out = torch.where(small, sub, normal)
    out = torch.where(x < _EXP_LO, torch.zeros_like(out), out)
    out = torch.where(x > _EXP_HI, torch.full_like(out, math.inf), out)
    return torch.where(torch.isnan(x), x, out)


_SQRTH = _f32(0.707106781186547524)


def log32(x):
    """Natural logarithm in float32 with Go's fixed formula (parallel.Log32):
    the Cephes reduction and polynomial, every operation rounded."""
    x = x.float()
    dev = x.device

    def c(v):
        return torch.tensor(v, dtype=torch.float32, device=dev)

    subn = x < 2.0 ** -126
    xs = torch.where(subn, x * c(2.0 ** 23), x)
    e = torch.where(subn, torch.full(x.shape, -23, dtype=torch.int32, device=dev), torch.zeros(x.shape, dtype=torch.int32, device=dev))
    b = xs.view(torch.int32)
    e = e + ((b >> 23) & 0xFF) - 126
    fm = ((b & (0x807FFFFF - (1 << 32))) | (126 << 23)).view(torch.float32)
    lo = fm < _SQRTH
    e = torch.where(lo, e - 1, e)
    fr = torch.where(lo, (fm + fm) - c(1.0), fm - c(1.0))
    z = fr * fr
    y = c(7.0376836292e-2).expand_as(fr)
    for k, sign in ((1.1514610310e-1, -1), (1.1676998740e-1, 1), (1.2420140846e-1, -1), (1.4249322787e-1, 1),
                    (1.6668057665e-1, -1), (2.0000714765e-1, 1), (2.4999993993e-1, -1), (3.3333331174e-1, 1)):
        y = y * fr - c(k) if sign < 0 else y * fr + c(k)
    y = (y * fr) * z
    fe = e.float()
    y = y + c(-2.12194440e-4) * fe
    y = y - c(0.5) * z
    r = fr + y
    out = r + c(0.693359375) * fe
    out = torch.where(x == 0, torch.full_like(out, -math.inf), out)
    out = torch.where(torch.isinf(x) & (x > 0), x, out)
    return torch.where(torch.isnan(x) | (x < 0), torch.full_like(out, _NAN), out)


def sigmoid32(x):
    """1 / (1 + exp32(-x)), float32, each operation rounded."""
    one = torch.ones((), dtype=torch.float32, device=x.device)
    return torch.div(one, one + exp32(-x.float()))


def silu32(x):
    """x * sigmoid32(x), float32."""
    x = x.float()
    return x * sigmoid32(x)


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, u):
        ctx.save_for_backward(g, u)
        return _store(silu32(g) * u.float(), g.dtype)

    @staticmethod
    def backward(ctx, da):
        g, u = ctx.saved_tensors
        g32, u32, da32 = g.float(), u.float(), da.float()
        s = sigmoid32(g32)
        one = torch.ones((), dtype=torch.float32, device=g.device)
        du = da32 * (g32 * s)
        dg = (da32 * u32) * (s * (one + g32 * (one - s)))
        return _store(dg, g.dtype), _store(du, u.dtype)


def swiglu(g, u):
    """round(silu(g) * u) with Go's formulas; backward
    du = round(da·(g·s)), dg = round((da·u)·(s·(1 + g·(1 − s)))), s = sigmoid32(g)."""
    return _SwiGLU.apply(g, u)


# ---- the linear function ----------------------------------------------------

class _Linear(torch.autograd.Function):
    # y = x · Wᵀ (W: [out, in], torch's layout). Chunk counts: forward over
    # K = in, input gradient over K = out, weight gradient over K = tokens.
    @staticmethod
    def forward(ctx, x, w, l_fwd, l_dx, l_dw):
        ctx.save_for_backward(x, w)
        ctx.l = (l_dx, l_dw)
        shape = x.shape
        y = canonical_matmul(x.reshape(-1, shape[-1]), w, l_fwd, trans_b=True)
        return y.view(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        l_dx, l_dw = ctx.l
        x2 = x.reshape(-1, x.shape[-1])
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = canonical_matmul(dy2, w, l_dx).view(x.shape)
        if ctx.needs_input_grad[1]:
            dw = canonical_matmul(dy2, x2, l_dw, trans_a=True)
        return dx, dw, None, None, None


def linear(x, weight, chunks=DEFAULT_CHUNKS, *, input_grad_chunks=None, weight_grad_chunks=None):
    """x · weightᵀ with canonical chunks (weight [out, in], torch's layout;
    x [..., in], leading dimensions are tokens). Backward: dx = dy · weight
    over K = out with input_grad_chunks (default chunks), dW = dyᵀ · x over
    K = tokens (in order) with weight_grad_chunks (default chunks)."""
    return _Linear.apply(x, weight, chunks, input_grad_chunks or chunks, weight_grad_chunks or chunks)


def _check_dtype(dtype):
    if dtype not in _DTYPES:
        raise TypeError(f"dtype {dtype} (want torch.bfloat16, torch.float16 or torch.float32)")


def _tp_check(name, features, chunks, tp):
    if not tp_chunks_ok(chunks, tp):
        raise ValueError(
            f"{name}: TP = {tp} cannot hold the {chunks} canonical K chunks in power-of-two blocks "
            f"(chunks/TP must be a power of two; chunks = 8 serves TP = 1, 2, 4, 8)")
    if features % chunks:
        raise ValueError(f"{name}: {features} features do not divide into {chunks} canonical chunks")


class ColumnParallelLinear(torch.nn.Module):
    """y = x · Wᵀ with W's rows (the output features) split over the TP group.

    This rank holds ``weight`` [out/TP, in], rows [t·out/TP, (t+1)·out/TP)
    of the full weight. Forward: x replicated on the TP ranks
    (copy_to_tensor_parallel_region), or with ``sequence_parallel`` this
    rank's block of the tokens, all-gathered (gather_from_sequence_parallel_region);
    the output holds this rank's out/TP features, or all of them with
    ``gather_output`` (sequence_parallel excludes gather_output).
    Backward: dx = dy · W over K = out is row-parallel: a local tree over
    this rank's chunks/TP chunks, then AllReduce (ReduceScatter under SP)
    continues the tree; dW over K = tokens, complete locally. out_features
    must divide by ``chunks``; chunks/TP must be a power of two.
    """

    def __init__(self, in_features, out_features, group=None, *, chunks=DEFAULT_CHUNKS, gather_output=False,
                 sequence_parallel=False, dtype=torch.float32, device=None, weight=None):
        super().__init__()
        _check_dtype(dtype)
        tp = F.group_size(group)
        _tp_check("ColumnParallelLinear", out_features, chunks, tp)
        if sequence_parallel and gather_output:
            raise ValueError("ColumnParallelLinear: sequence_parallel and gather_output exclude each other")
        self.group, self.chunks, self.tp = group, chunks, tp
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        if weight is None:
            weight = torch.empty(out_features // tp, in_features, dtype=dtype, device=device)
            torch.nn.init.normal_(weight, std=1 / math.sqrt(in_features))
        elif tuple(weight.shape) != (out_features // tp, in_features):
            raise ValueError(f"ColumnParallelLinear: weight shard {tuple(weight.shape)}, want {(out_features // tp, in_features)}")
        self.weight = torch.nn.Parameter(weight.detach().clone())

    @staticmethod
    def shard(full_weight, tp, t):
        """TP rank t's rows of a full [out, in] weight."""
        n = full_weight.shape[0] // tp
        return full_weight[t * n:(t + 1) * n].clone()

    def _local(self, x_in):
        return linear(x_in, self.weight, self.chunks, input_grad_chunks=self.chunks // self.tp,
                      weight_grad_chunks=self.chunks)

    def forward(self, x):
        if self.sequence_parallel:
            x_in = F.gather_from_sequence_parallel_region(x, self.group)
        else:
            x_in = F.copy_to_tensor_parallel_region(x, self.group)
        y = self._local(x_in)
        if self.gather_output:
            y = F.gather_from_tensor_parallel_region(y, self.group)
        return y


class RowParallelLinear(torch.nn.Module):
    """y = x · Wᵀ with W's columns (the input features, K) split over the TP group.

    This rank holds ``weight`` [out, in/TP], columns [t·in/TP, (t+1)·in/TP),
    exactly its chunks [t·L/TP, (t+1)·L/TP) of the L canonical K chunks.
    Forward: x is this rank's in/TP features (``input_is_parallel``, the
    default; else x is split here); the local tree over its chunks, then
    AllReduce over TP (or, with ``sequence_parallel``, ReduceScatter along
    the tokens) continues the canonical tree: the same bits for every TP
    with L/TP a power of two. Backward: dy replicated (all-gathered under
    SP); dx = dy · W over K = out, complete locally; dW over K = tokens.
    in_features must divide by ``chunks``.
    """

    def __init__(self, in_features, out_features, group=None, *, chunks=DEFAULT_CHUNKS, input_is_parallel=True,
                 sequence_parallel=False, dtype=torch.float32, device=None, weight=None):
        super().__init__()
        _check_dtype(dtype)
        tp = F.group_size(group)
        _tp_check("RowParallelLinear", in_features, chunks, tp)
        if sequence_parallel and not input_is_parallel:
            raise ValueError("RowParallelLinear: sequence_parallel needs input_is_parallel")
        self.group, self.chunks, self.tp = group, chunks, tp
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel
        if weight is None:
            weight = torch.empty(out_features, in_features // tp, dtype=dtype, device=device)
            torch.nn.init.normal_(weight, std=1 / math.sqrt(in_features))
        elif tuple(weight.shape) != (out_features, in_features // tp):
            raise ValueError(f"RowParallelLinear: weight shard {tuple(weight.shape)}, want {(out_features, in_features // tp)}")
        self.weight = torch.nn.Parameter(weight.detach().clone())

    @staticmethod
    def shard(full_weight, tp, t):
        """TP rank t's columns of a full [out, in] weight."""
        n = full_weight.shape[1] // tp
        return full_weight[:, t * n:(t + 1) * n].contiguous().clone()

    def _partial(self, x):
        return linear(x, self.weight, self.chunks // self.tp, input_grad_chunks=self.chunks,
                      weight_grad_chunks=self.chunks)

    def forward(self, x):
        if not self.input_is_parallel:
            x = F.scatter_to_tensor_parallel_region(x, self.group)
        y = self._partial(x)
        if self.sequence_parallel:
            return F.reduce_scatter_to_sequence_parallel_region(y, self.group)
        return F.reduce_from_tensor_parallel_region(y, self.group)


class ParallelSwiGLU(torch.nn.Module):
    """The gated SwiGLU FFN of Go's parallel.FFN (TP, optional SP; CP = 1):

        y = (silu(x · Gateᵀ) ⊙ (x · Upᵀ)) · Downᵀ

    Gate and Up [I, H] column-parallel, Down [H, I] row-parallel (torch's
    [out, in] layout: Go's Gate [H × I] is gate.weight transposed). Under
    SP x and y are this rank's contiguous block of the tokens: one
    all-gather before Gate/Up, a reduce-scatter after Down. Backward: the
    gate and up input-gradient lanes are reduced by their own trees (one
    collective over both) and added afterwards, dx = lane_gate + lane_up
    in the dtype, as in Go. Weight gradients over the tokens of this TP
    group (with CP > 1 they are not Go's full-sequence gradients).
    """

    def __init__(self, hidden, intermediate, group=None, *, chunks=DEFAULT_CHUNKS, sequence_parallel=False,
                 dtype=torch.float32, device=None, gate=None, up=None, down=None):
        super().__init__()
        kw = dict(chunks=chunks, dtype=dtype, device=device)
        self.gate = ColumnParallelLinear(hidden, intermediate, group, weight=gate, **kw)
        self.up = ColumnParallelLinear(hidden, intermediate, group, weight=up, **kw)
        self.down = RowParallelLinear(intermediate, hidden, group, sequence_parallel=sequence_parallel, weight=down, **kw)
        self.group, self.sequence_parallel = group, sequence_parallel

    def forward(self, x):
        if self.sequence_parallel:
            xg, xu = F.gather_from_sequence_parallel_region_lanes(x, 2, self.group)
        else:
            xg, xu = F.copy_to_tensor_parallel_region_lanes(x, 2, self.group)
        a = swiglu(self.gate._local(xg), self.up._local(xu))
        return self.down(a)


# ---- context-parallel attention (ag_rs) --------------------------------------

def zigzag_rows(cp, r, per):
    """Logical (sequence-order) indices of the `per` tokens CP rank r holds
    in the zigzag layout: chunks r and 2·CP−1−r of 2·CP equal chunks."""
    if cp == 1:
        return list(range(per))
    cs = per // 2
    return [r * cs + i for i in range(cs)] + [(2 * cp - 1 - r) * cs + i for i in range(cs)]


def _gathered_to_logical(cp, per):
    out = []
    for r in range(cp):
        out += zigzag_rows(cp, r, per)
    return out


def _scale(head_dim, scale):
    if scale:
        return _f32(scale)
    return _f32(1 / math.sqrt(head_dim))


def _split_heads(x, heads, hd):
    # [n, heads*hd] -> float32 [heads, n, hd]
    return x.float().view(x.shape[0], heads, hd).permute(1, 0, 2).contiguous()


def _scores(q, k, scale):
    # s[h, i, j] = float32(Σ_d q·k, ascending d, from +0) · scale
    hn, n, hd = q.shape
    acc = torch.zeros(hn, n, n, dtype=torch.float32, device=q.device)
    for d in range(hd):
        acc.add_(q[:, :, d, None] * k[:, None, :, d])
    return acc * torch.tensor(scale, dtype=torch.float32, device=q.device)


def attention_core(q, k, v, pos, heads, head_dim, scale=None):
    """Go's parallel.AttentionCore in torch, bit for bit: q, k, v [n, heads·head_dim]
    of one dtype in sequence order, pos [n] (query i sees key j when pos[j] ≤ pos[i]).
    Returns (out [n, heads·head_dim] in the dtype, lse [n, heads] fp32)."""
    n, dt, dev = q.shape[0], q.dtype, q.device
    sc = _scale(head_dim, scale)
    Q, K, V = (_split_heads(t, heads, head_dim) for t in (q, k, v))
    p64 = pos.to(torch.int64)
    mask = (p64[None, :] <= p64[:, None])[None]  # [1, i, j]
    s = _scores(Q, K, sc)
    m = torch.where(mask, s, torch.full_like(s, -math.inf)).amax(dim=2, keepdim=True)
    p = torch.where(mask, exp32(s - m), torch.zeros_like(s))
    zero = torch.zeros((), dtype=torch.float32, device=dev)
    l = torch.zeros(heads, n, 1, dtype=torch.float32, device=dev)
    o = torch.zeros(heads, n, head_dim, dtype=torch.float32, device=dev)
    for j in range(n):
        pj = p[:, :, j, None]
        l.add_(pj)
        o.add_(torch.where(mask[:, :, j, None], pj * V[:, None, j, :], zero))
    out = _store(o / l, dt).permute(1, 0, 2).reshape(n, heads * head_dim)
    lse = (m + log32(l))[:, :, 0].t().contiguous()
    return out, lse


def attention_core_backward(q, k, v, out, lse, dout, pos, heads, head_dim, scale=None):
    """Go's parallel.AttentionCoreBackward in torch, bit for bit: (dq, dk, dv)."""
    n, dt, dev = q.shape[0], q.dtype, q.device
    sc = _scale(head_dim, scale)
    Q, K, V, O, G = (_split_heads(t, heads, head_dim) for t in (q, k, v, out, dout))
    p64 = pos.to(torch.int64)
    mask = (p64[None, :] <= p64[:, None])[None]
    zero = torch.zeros((), dtype=torch.float32, device=dev)
    D = torch.zeros(heads, n, 1, dtype=torch.float32, device=dev)
    for d in range(head_dim):
        D.add_(G[:, :, d, None] * O[:, :, d, None])
    s = _scores(Q, K, sc)
    L = lse.float().t()[:, :, None]  # [heads, n, 1]
    p = exp32(s - L)
    dp = torch.zeros(heads, n, n, dtype=torch.float32, device=dev)
    for d in range(head_dim):
        dp.add_(G[:, :, d, None] * V[:, None, :, d])
    ds = p * (dp - D)
    ds = torch.where(mask, ds, zero)
    p = torch.where(mask, p, zero)
    dq = torch.zeros(heads, n, head_dim, dtype=torch.float32, device=dev)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(dq)
    for j in range(n):  # dQ_i: ascending j
        dq.add_(torch.where(mask[:, :, j, None], ds[:, :, j, None] * K[:, None, j, :], zero))
    for i in range(n):  # dK_j, dV_j: ascending i
        mi = mask[:, i, :, None]
        dk.add_(torch.where(mi, ds[:, i, :, None] * Q[:, None, i, :], zero))
        dv.add_(torch.where(mi, p[:, i, :, None] * G[:, None, i, :], zero))
    scl = torch.tensor(sc, dtype=torch.float32, device=dev)

    def back(x, scaled):
        x = x * scl if scaled else x
        return _store(x, dt).permute(1, 0, 2).reshape(n, heads * head_dim)

    return back(dq, True), back(dk, True), back(dv, False)


def _agree(group, op, fields, local, device=None):
    """Collective argument check (as Go's parallel): every rank all-gathers
    (rejected, fields...); if a rank rejected its arguments or the ranks
    disagree, every rank raises ValueError before any data moves, instead
    of the others waiting in a collective for the timeout."""
    if F.group_size(group) == 1:
        if local:
            raise ValueError(f"{op}: {local}")
        return
    names = list(fields)
    mine = torch.tensor([1 if local else 0] + [int(fields[n]) for n in names], dtype=torch.int64, device=device)
    allv = F.raw_all_gather(mine, group, 0).view(F.group_size(group), -1).tolist()
    if local:
        raise ValueError(f"{op}: {local}")
    bad = [r for r, v in enumerate(allv) if v[0]]
    if bad:
        raise ValueError(f"{op}: group rank {bad[0]} rejected its arguments")
    if any(v != allv[0] for v in allv):
        desc = " ".join("[rank %d: %s]" % (r, ", ".join(f"{n}={x}" for n, x in zip(names, v[1:]))) for r, v in enumerate(allv))
        raise ValueError(f"{op}: the ranks of the group disagree: {desc}; every CP rank holds the same number of tokens")


def _neg_zero(shape, dtype, device):
    return torch.full(shape, -0.0, dtype=dtype, device=device)


def _deliver_root(group, per_rank, dtype):
    """Rank r gets per_rank[r] of the CP root (group rank 0): a −0-padded
    reduce-scatter (the root's rows, every other rank −0): −0 is the additive
    identity of IEEE addition, so each element's tree returns the root's bits,
    a −0 included. per_rank: [W, ...] on the root, its shape elsewhere."""
    if F.group_rank(group) != 0:
        per_rank = _neg_zero(per_rank.shape, dtype, per_rank.device)
    w = per_rank.shape[0]
    flat = F.raw_reduce_scatter(per_rank.contiguous().view(-1), group, 0)
    return flat.view(per_rank.shape[1:]) if w else flat


class _CPAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pos, group, heads, head_dim, scale):
        w, rank = F.group_size(group), F.group_rank(group)
        tokens = q.shape[0] if q.dim() else 0
        width = q.shape[1] if q.dim() == 2 else -1
        dt, dev = q.dtype, q.device
        local = None
        if q.dim() != 2 or width != heads * head_dim or k.shape != q.shape or v.shape != q.shape or k.dtype != dt or v.dtype != dt:
            local = f"q, k, v must be one dtype and [tokens, {heads}*{head_dim}]"
        elif dt not in _DTYPES:
            local = f"dtype {dt} (want bf16, fp16 or fp32)"
        elif tuple(pos.shape) != (tokens,):
            local = f"{pos.numel()} position ids for {tokens} tokens"
        elif w > 1 and tokens % 2:
            local = f"CP rank {rank} holds {tokens} tokens; the zigzag layout needs an even number"
        _agree(group, "context_parallel_attention", {"tokens": tokens, "width": width, "heads": heads,
               "head_dim": head_dim, "dtype": _DTYPES.index(dt) if dt in _DTYPES else -1}, local, dev)
        pos32 = pos.to(torch.int32).contiguous()
        if w > 1:
            # One rank-ordered all-gather of Q, K, V and the positions, as bytes.
            mine = torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in (q, k, v)] + [pos32.view(torch.uint8)])
            allb = F.raw_all_gather(mine, group, 0).view(w, -1)
            nb = tokens * width * q.element_size()
            perm = torch.tensor(_gathered_to_logical(w, tokens), device=dev)
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.numel(), device=dev)

            def lane(i, dtype, cols):
                raw = allb[:, i * nb:(i + 1) * nb] if i < 3 else allb[:, 3 * nb:]
                t = raw.contiguous().view(-1).view(dtype).view(w * tokens, cols) if cols else raw.contiguous().view(-1).view(dtype)
                return t[inv]  # logical row perm[g] = gathered row g

            Q, K, V = lane(0, dt, width), lane(1, dt, width), lane(2, dt, width)
            P = lane(3, torch.int32, 0)
        else:
            Q, K, V, P = q, k, v, pos32
        O, L = attention_core(Q, K, V, P, heads, head_dim, scale)
        ctx.save_for_backward(Q, K, V, P, O, L)
        ctx.meta = (group, heads, head_dim, scale, tokens)
        if w == 1:
            ctx.mark_non_differentiable(L)
            return O, L
        rows = [torch.tensor(zigzag_rows(w, r, tokens), device=dev) for r in range(w)]
        out = _deliver_root(group, torch.stack([O[rr] for rr in rows]), dt)
        lse = _deliver_root(group, torch.stack([L[rr] for rr in rows]), torch.float32)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        Q, K, V, P, O, L = ctx.saved_tensors
        group, heads, head_dim, scale, tokens = ctx.meta
        w = F.group_size(group)
        dO = dout.contiguous()
        if w > 1:
            g = F.raw_all_gather(dO, group, 0)
            perm = torch.tensor(_gathered_to_logical(w, tokens), device=dO.device)
            dO = torch.empty_like(g)
            dO[perm] = g
        dq, dk, dv = attention_core_backward(Q, K, V, O, L, dO, P, heads, head_dim, scale)
        if w == 1:
            return dq, dk, dv, None, None, None, None, None
        rows = [torch.tensor(zigzag_rows(w, r, tokens), device=dO.device) for r in range(w)]
        # [W, 3, tokens, width]: one reduce-scatter for the three lanes.
        lanes = torch.stack([torch.stack([x[rr] for x in (dq, dk, dv)]) for rr in rows])
        got = _deliver_root(group, lanes, dq.dtype)
        return got[0], got[1], got[2], None, None, None, None, None


def context_parallel_attention(q, k, v, pos, group=None, *, heads, head_dim, scale=None):
    """Causal attention over a context-parallel group, the seed's ag_rs
    communication as Go's parallel.Attention (host path):

    q, k, v [tokens, heads·head_dim] and pos [tokens] are this CP rank's
    tokens in the zigzag layout (chunks r and 2·CP−1−r of 2·CP). Forward: one
    rank-ordered all-gather of Q, K, V and the positions, reorder to sequence
    order, the same attention_core on every rank, and the root's (CP rank
    0) output and log-sum-exp delivered to every rank's shard. Backward:
    all-gather of dout, attention_core_backward, one reduce-scatter of dQ,
    dK, dV in which the root contributes its gradients and every other rank
    −0, so −0s survive (the seed's +0 padding turns them into +0).
    Returns (out, lse); lse is fp32 and not differentiable.
    """
    return _CPAttention.apply(q, k, v, pos, group, int(heads), int(head_dim), scale)


class ContextParallelAttention(torch.nn.Module):
    """Module form of context_parallel_attention."""

    def __init__(self, heads, head_dim, group=None, *, scale=None):
        super().__init__()
        self.heads, self.head_dim, self.group, self.scale = heads, head_dim, group, scale

    def forward(self, q, k, v, pos):
        return context_parallel_attention(q, k, v, pos, self.group, heads=self.heads, head_dim=self.head_dim, scale=self.scale)
