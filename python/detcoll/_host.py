"""Host buffers: anything exposing the buffer protocol."""

import array
import ctypes
import sys

from . import _dtypes as D

_BYTE_FORMATS = frozenset("Bbc")
_INT_FORMATS = frozenset("bBhHiIlLqQnN?c")
_FLOAT_FORMATS = {"e": D.FLOAT16, "f": D.FLOAT32, "d": D.FLOAT64}
# formats a memoryview can be cast to (for returning typed outputs)
_CASTABLE = frozenset("bBhHiIlLqQfd")


def _format(mv):
    """The single-character native little-endian format of mv."""
    fmt = mv.format
    if fmt[:1] in ("@", "="):
        fmt = fmt[1:]
    elif fmt[:1] == "<" and sys.byteorder == "little":
        fmt = fmt[1:]
    elif fmt[:1] in (">", "!") and sys.byteorder == "little":
        raise TypeError(f"buffer format {mv.format!r} is big-endian; detcoll moves little-endian elements")
    if len(fmt) != 1:
        raise TypeError(f"buffer format {mv.format!r} is not a single scalar type")
    return fmt


def is_numpy(obj):
    return type(obj).__module__ == "numpy" and hasattr(obj, "__array_interface__")


class Buffer:
    """A host buffer checked for a collective: its memoryview, dtype code
    and element count."""

    def __init__(self, obj, what):
        self.obj = obj
        self.what = what
        try:
            self.mv = memoryview(obj)
        except TypeError:
            raise TypeError(
                f"{what} ({type(obj).__name__}) is neither a torch tensor nor a buffer "
                "(memoryview, bytearray, array.array, numpy array...)"
            ) from None
        if not self.mv.c_contiguous:
            raise ValueError(f"{what} is not C-contiguous")
        self.fmt = _format(self.mv)
        self.nbytes = self.mv.nbytes
        self.readonly = self.mv.readonly

    def resolve(self, dtype, reduce):
        """Picks the detcollDataType_t: dtype if given (checked against the
        buffer's format), else the format's own float type; bytes and 16-bit
        integers are ambiguous for a reduction. Sets self.dtype, self.count."""
        fmt, what = self.fmt, self.what
        if dtype is not None:
            c = D.code(dtype)
            sz = D.size(c)
            if fmt in _FLOAT_FORMATS and _FLOAT_FORMATS[fmt] != c:
                raise TypeError(f"{what} holds {D.name(_FLOAT_FORMATS[fmt])} (format {fmt!r}) but dtype={D.name(c)!r}")
            if fmt not in _BYTE_FORMATS and fmt not in _FLOAT_FORMATS:
                if fmt not in _INT_FORMATS:
                    raise TypeError(f"{what} has format {fmt!r}, which cannot hold {D.name(c)}")
                if self.mv.itemsize != sz:
                    raise TypeError(
                        f"{what} has {self.mv.itemsize}-byte elements (format {fmt!r}) but dtype={D.name(c)!r} has {sz}"
                    )
        elif fmt in _FLOAT_FORMATS:
            c = _FLOAT_FORMATS[fmt]
        elif not reduce:
            c = D.UINT8  # AllGather moves bytes
        elif fmt in "hH":
            raise TypeError(
                f"{what} holds 16-bit integers (format {fmt!r}): pass dtype='bf16' or dtype='fp16' to say which"
            )
        elif fmt in _BYTE_FORMATS:
            raise TypeError(f"{what} holds bytes: pass dtype= (bf16, fp16, fp32 or fp64)")
        else:
            raise TypeError(f"{what} holds integers (format {fmt!r}); detcoll reduces only bf16, fp16, fp32 and fp64")
        if reduce and c not in D.REDUCIBLE:
            raise TypeError(f"detcoll reduces only bf16, fp16, fp32 and fp64, not {D.name(c)}")
        sz = D.size(c)
        if self.nbytes % sz:
            raise ValueError(f"{what} has {self.nbytes} bytes, not a whole number of {D.name(c)} elements")
        self.dtype, self.count = c, self.nbytes // sz
        return c

    def pointer(self, writable):
        """(address, keepalive) of the buffer's first byte, for one call. A
        read-only input is copied first; a read-only output is an error."""
        if self.nbytes == 0:
            return None, None
        if self.readonly:
            if writable:
                raise TypeError(f"{self.what} is read-only")
            keep = (ctypes.c_char * self.nbytes).from_buffer(bytearray(self.mv))
        else:
            keep = (ctypes.c_char * self.nbytes).from_buffer(self.mv)
        return ctypes.addressof(keep), keep


def alloc_like(buf, nbytes, first_dim_scale):
    """A new zeroed buffer of nbytes shaped like buf.obj: numpy arrays stay
    numpy (first dimension scaled by first_dim_scale, a Fraction-like
    (num, den)), array.array keeps its typecode, anything else becomes a
    flat memoryview of a bytearray with buf's format when castable."""
    obj = buf.obj
    num, den = first_dim_scale
    if is_numpy(obj):
        np = sys.modules["numpy"]
        shape = tuple(obj.shape)
        if len(shape) >= 1 and (shape[0] * num) % den == 0:
            shape = (shape[0] * num // den,) + shape[1:]
        else:
            shape = (nbytes // obj.itemsize,)
        return np.zeros(shape, dtype=obj.dtype)
    if isinstance(obj, array.array):
        return array.array(obj.typecode, bytes(nbytes))
    if isinstance(obj, bytearray):
        return bytearray(nbytes)
    out = memoryview(bytearray(nbytes))
    if buf.fmt in _CASTABLE and buf.fmt not in "Bc":
        out = out.cast(buf.fmt)
    return out
