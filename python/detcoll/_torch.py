"""PyTorch tensors. torch is never imported here: a tensor can only be
passed once the caller has imported torch, so sys.modules has it."""

import sys

from . import _dtypes as D

_TORCH_CODES = (None, None)  # (the torch module, its dtype -> code map)


def torch_module():
    return sys.modules.get("torch")


def is_tensor(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_code(t):
    global _TORCH_CODES
    torch = torch_module()
    if _TORCH_CODES[0] is not torch:
        codes = {
            torch.bfloat16: D.BFLOAT16,
            torch.float16: D.FLOAT16,
            torch.float32: D.FLOAT32,
            torch.float64: D.FLOAT64,
            torch.int8: D.INT8,
            torch.uint8: D.UINT8,
            torch.int32: D.INT32,
            torch.int64: D.INT64,
        }
        for name, c in (("float8_e4m3fn", D.FLOAT8E4M3), ("float8_e5m2", D.FLOAT8E5M2)):
            if hasattr(torch, name):
                codes[getattr(torch, name)] = c
        _TORCH_CODES = (torch, codes)
    c = _TORCH_CODES[1].get(t.dtype)
    if c is None:
        raise TypeError(f"tensor dtype {t.dtype} is not supported (bf16, fp16, fp32, fp64; AllGather also int8/uint8/int32/int64)")
    return c


def check_tensor(t, what):
    if not t.is_contiguous():
        raise ValueError(f"{what} is not contiguous (call .contiguous())")
    if t.device.type not in ("cuda", "cpu"):
        raise ValueError(f"{what} is on device {t.device}; detcoll takes CUDA (or ROCm) and CPU tensors")


def out_shape(t, num, den):
    """t's shape with its first dimension scaled by num/den (a flat shape
    when that does not divide; a 0-d tensor becomes 1-d)."""
    shape = tuple(t.shape)
    if len(shape) >= 1 and (shape[0] * num) % den == 0:
        return (shape[0] * num // den,) + shape[1:]
    return (t.numel() * num // den,)


def check_out(t, out, numel):
    torch = torch_module()
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out is a {type(out).__name__}, but the input is a torch tensor")
    if out.dtype != t.dtype:
        raise TypeError(f"out has dtype {out.dtype}, the input {t.dtype}")
    if out.device != t.device:
        raise ValueError(f"out is on {out.device}, the input on {t.device}")
    check_tensor(out, "out")
    if out.numel() != numel:
        raise ValueError(f"out has {out.numel()} elements, want {numel}")


def current_stream(t):
    """The tensor's device's current stream (cudaStream_t as an int) and a
    context manager making that device current."""
    torch = torch_module()
    return torch.cuda.current_stream(t.device).cuda_stream, torch.cuda.device(t.device)
