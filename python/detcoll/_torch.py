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


def check_tensor(t, what, device=None):
    if not t.is_contiguous():
        raise ValueError(f"{what} is not contiguous (call .contiguous())")
    device = t.device if device is None else device
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"{what} is on device {device}; detcoll takes CUDA (or ROCm) and CPU tensors")


def out_shape(t, num, den):
    """t's shape with its first dimension scaled by num/den (a flat shape
    when that does not divide; a 0-d tensor becomes 1-d)."""
    shape = tuple(t.shape)
    if len(shape) >= 1 and (shape[0] * num) % den == 0:
        return (shape[0] * num // den,) + shape[1:]
    return (t.numel() * num // den,)


def check_out(t, out, numel, device=None):
    """out must be a contiguous tensor of t's dtype on t's device holding
    numel elements (any shape: the collectives see flat buffers)."""
    torch = torch_module()
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out is a {type(out).__name__}, but the input is a torch tensor")
    if out.dtype != t.dtype:
        raise TypeError(f"out has dtype {out.dtype}, the input {t.dtype}")
    device = t.device if device is None else device
    odev = out.device
    if odev != device:
        raise ValueError(f"out is on {odev}, the input on {device}")
    check_tensor(out, "out", odev)
    if out.numel() != numel:
        raise ValueError(f"out has {out.numel()} elements, want {numel}")


_CUDA = (None, None, None)  # (the torch module, raw current-stream getter, current-device getter)


def _cuda_fns(torch):
    global _CUDA
    if _CUDA[0] is not torch:
        C = getattr(torch, "_C", None)
        _CUDA = (torch, getattr(C, "_cuda_getCurrentRawStream", None), getattr(C, "_cuda_getDevice", None))
    return _CUDA


def current_stream(t, device=None):
    """The current stream of the tensor's device, as an int (the cudaStream_t
    of torch.cuda.current_stream(device).cuda_stream; 0 is the legacy default
    stream), and a context manager that makes that device current for the
    call, or None when it is current already.

    The device is made current because the library's device backend runs on
    the calling thread and makes its GPU's context current there: with the
    tensor's device current, torch's notion of the current device is left as
    it was (the guard restores it afterwards)."""
    torch = torch_module()
    _, raw, cur = _cuda_fns(torch)
    dev = t.device if device is None else device
    idx = dev.index
    if raw is not None and idx is not None:
        stream = raw(idx)  # what current_stream(dev).cuda_stream returns, without building a Stream
    else:
        stream = torch.cuda.current_stream(dev).cuda_stream
    if cur is not None and idx is not None and cur() == idx:
        return stream, None
    return stream, torch.cuda.device(dev)


def cuda_stream(idx):
    """current_stream for a CUDA device index (t.get_device()): the current
    stream as an int and a device guard, or None when idx is current."""
    torch = torch_module()
    _, raw, cur = _cuda_fns(torch)
    if raw is not None:
        stream = raw(idx)
    else:
        stream = torch.cuda.current_stream(idx).cuda_stream
    if cur is not None and cur() == idx:
        return stream, None
    return stream, torch.cuda.device(idx)
