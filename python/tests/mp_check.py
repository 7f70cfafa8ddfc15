"""A rank of the Python multi-process test (capi/capi_test.go), run as
`detcoll launch --standalone --nproc-per-node 3 -- python3 mp_check.py OUTDIR`
with PYTHONPATH=python and DETCOLL_LIB set.

Host collectives on array.array, bytearray and memoryview inputs (NaN, inf,
-0 and subnormals included). Each case writes this rank's input and output
to OUTDIR/<case>.r<rank>.in and .out; rank 0 lists the cases in
OUTDIR/py.cases ("name op dtype count"), for the Go test to check against
reduce.Oracle. Then misuse, which must raise the documented exceptions, a
unique-id communicator, a count mismatch across ranks (MismatchError on
every rank) and use after destroy (ClosedError).
"""

import array
import os
import random
import struct
import sys

import detcoll

OUT = sys.argv[1]
comm = detcoll.init()
R, W = comm.rank, comm.size
assert detcoll.get_rank() == R and detcoll.get_world_size() == W
assert R == int(os.environ["DETCOLL_RANK"]), (R, os.environ["DETCOLL_RANK"])
cases = open(os.path.join(OUT, "py.cases"), "w") if R == 0 else None


def bits32(rng, i):
    special = i % 61
    if special == 0:
        return 0x7FA00001 | rng.getrandbits(1) << 31  # NaN with payload
    if special == 1:
        return 0xFF800000 if rng.getrandbits(1) else 0x7F800000
    if special == 2:
        return 0x80000000
    if special == 3:
        return rng.getrandbits(23)  # subnormal
    return rng.getrandbits(1) << 31 | (127 - 20 + rng.randrange(41)) << 23 | rng.getrandbits(23)


def bits64(rng, i):
    if i % 53 == 0:
        return 0x7FF8000000000001
    if i % 53 == 1:
        return 0x8000000000000000
    return rng.getrandbits(1) << 63 | (1023 - 30 + rng.randrange(61)) << 52 | rng.getrandbits(52)


def gen(kind, n, seed):
    """n elements of kind (fp32, bf16, fp16, fp64, u8) as bytes."""
    rng = random.Random(seed * 1009 + R)
    if kind == "fp32":
        return struct.pack(f"<{n}I", *(bits32(rng, i) for i in range(n)))
    if kind == "bf16":
        return struct.pack(f"<{n}H", *(bits32(rng, i) >> 16 for i in range(n)))
    if kind == "fp16":
        v = [rng.getrandbits(1) << 15 | (15 - 6 + rng.randrange(13)) << 10 | rng.getrandbits(10) for _ in range(n)]
        v[::47] = [0x7C00] * len(v[::47])
        return struct.pack(f"<{n}H", *v)
    if kind == "fp64":
        return struct.pack(f"<{n}Q", *(bits64(rng, i) for i in range(n)))
    return bytes(rng.getrandbits(8) for _ in range(n))


def save(name, op, kind, count, inp, out):
    for ext, data in (("in", inp), ("out", out)):
        with open(os.path.join(OUT, f"{name}.r{R}.{ext}"), "wb") as f:
            f.write(bytes(memoryview(data).cast("B")))
    if cases:
        cases.write(f"{name} {op} {kind} {count}\n")


# ---- host collectives ------------------------------------------------------

# fp32 in array.array('f'): out allocated (same typecode); in place.
x = array.array("f", gen("fp32", 1001, 1))
y = detcoll.all_reduce(x, out=array.array("f", bytes(4 * 1001)))
save("py_ar_fp32", "allreduce", "fp32", 1001, x, y)
x = array.array("f", gen("fp32", 20000, 2))
x0 = bytes(x)
r = detcoll.all_reduce(x)  # in place: returns x itself
assert r is x
save("py_ar_fp32_inplace", "allreduce", "fp32", 20000, x0, x)

# bf16 in a bytearray (dtype needed); uint16 array with dtype="bf16".
b = bytearray(gen("bf16", 3001, 3))
y = detcoll.all_reduce(b, out=bytearray(len(b)), dtype="bf16")
save("py_ar_bf16", "allreduce", "bf16", 3001, b, y)
h = array.array("H", gen("bf16", 40000, 4))
h0 = bytes(h)
detcoll.all_reduce(h, dtype="bf16")
save("py_ar_bf16_u16", "allreduce", "bf16", 40000, h0, h)

# fp16 (uint16 array), fp64 (memoryview cast 'd', read-only input copied).
h = array.array("H", gen("fp16", 999, 5))
y = detcoll.all_reduce(h, out=bytearray(2 * 999), dtype="fp16")
save("py_ar_fp16", "allreduce", "fp16", 999, h, y)
d = bytes(gen("fp64", 555, 6))
y = memoryview(bytearray(len(d))).cast("d")
detcoll.all_reduce(memoryview(d).cast("d"), out=y)
save("py_ar_fp64", "allreduce", "fp64", 555, d, y)

# AllGather: typed (allocated array), bytes, in place into a memoryview.
x = array.array("f", gen("fp32", 777, 7))
y = detcoll.all_gather(x)
assert isinstance(y, array.array) and y.typecode == "f" and len(y) == W * 777
save("py_ag_fp32", "allgather", "fp32", 777, x, y)
b = bytearray(gen("u8", 1000, 8))
y = detcoll.all_gather(b)
assert isinstance(y, bytearray) and len(y) == W * 1000
save("py_ag_u8", "allgather", "u8", 1000, b, y)
n = 321
out = bytearray(W * n * 2)
mine = memoryview(out)[R * n * 2:(R + 1) * n * 2]
mine[:] = gen("bf16", n, 9)
inp = bytes(mine)
detcoll.all_gather(mine, out=out, dtype="bf16")
save("py_ag_bf16_inplace", "allgather", "bf16", n, inp, out)

# ReduceScatter: array in, array out; bytearray in, memoryview out.
x = array.array("f", gen("fp32", W * 1000, 10))
y = detcoll.reduce_scatter(x)
assert isinstance(y, array.array) and len(y) == 1000
save("py_rs_fp32", "reducescatter", "fp32", 1000, x, y)
b = bytearray(gen("bf16", W * 2048, 11))
y = memoryview(bytearray(2 * 2048)).cast("H")
detcoll.reduce_scatter(b, out=y, dtype="bf16")
save("py_rs_bf16", "reducescatter", "bf16", 2048, b, y)

# ---- misuse: Python-side checks (nothing reaches the ranks) --------------------


def expect(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError(f"{fn.__name__}{args}{kw}: no {exc.__name__}")


f4 = array.array("f", [1, 2, 3, 4])
expect(ValueError, detcoll.all_reduce, memoryview(bytearray(32)).cast("f")[::2])  # not contiguous
expect(TypeError, detcoll.all_reduce, f4, dtype="bf16")  # format says fp32
expect(TypeError, detcoll.all_reduce, array.array("H", [1, 2]))  # bf16 or fp16?
expect(TypeError, detcoll.all_reduce, bytearray(8))  # bytes: which float?
expect(TypeError, detcoll.all_reduce, array.array("i", [1, 2]))  # integers
expect(TypeError, detcoll.all_reduce, f4, dtype="int32")
expect(TypeError, detcoll.all_reduce, f4, dtype="float128")
expect(TypeError, detcoll.all_reduce, [1.0, 2.0])  # not a buffer
expect(TypeError, detcoll.all_reduce, b"\0" * 8, dtype="fp32")  # read-only, in place
expect(ValueError, detcoll.all_reduce, f4, out=array.array("f", [0] * 3))
expect(TypeError, detcoll.all_reduce, f4, out=array.array("d", [0] * 4))
expect(ValueError, detcoll.all_gather, f4, out=array.array("f", [0] * 4))
expect(ValueError, detcoll.reduce_scatter, array.array("f", [0] * (W + 1)))
expect(ValueError, detcoll.all_reduce, bytearray(5), dtype="fp32")  # not whole elements
# A read-only input with out= is fine (copied).
y = detcoll.all_reduce(struct.pack("<4f", 1, 2, 3, 4), out=bytearray(16), dtype="fp32")
assert struct.unpack("<4f", y) == tuple(float(W * v) for v in (1, 2, 3, 4)), struct.unpack("<4f", y)

# The library's own errors map to the hierarchy.
e = expect(detcoll.InvalidArgumentError, detcoll.Comm.from_unique_id, b"\x55" * 128, W, R)
assert isinstance(e, ValueError) and e.code == 4 and "unique id" in str(e), e
expect(detcoll.InvalidArgumentError, detcoll.Comm.from_unique_id, b"\x55" * 128, 0, 0)
expect(ValueError, detcoll.Comm.from_unique_id, b"short", W, R)

# ---- a unique-id communicator: rank 0's id reaches the others over comm ----
uid = bytearray(detcoll.get_unique_id() if R == 0 else bytes(128))
ids = detcoll.all_gather(uid)
c2 = detcoll.Comm.from_unique_id(bytes(ids[:128]), W, W - 1 - R)  # reversed ranks
assert (c2.rank, c2.size) == (W - 1 - R, W), c2
x = array.array("f", gen("fp32", 2000, 12))
y = c2.all_reduce(x, out=array.array("f", bytes(len(x) * 4)))
R_save = R
R = c2.rank  # files are named by the rank in c2
save("py_uid_ar_fp32", "allreduce", "fp32", 2000, x, y)
R = R_save
with c2:
    pass  # destroyed on exit
expect(detcoll.ClosedError, c2.all_reduce, f4)
# ---- a second communicator from the environment (same store, new keys) ----
c3 = detcoll.Comm.from_env()
assert (c3.rank, c3.size) == (R, W)
x = array.array("d", gen("fp64", 700, 13))
y = c3.all_reduce(x, out=bytearray(len(x) * 8))
save("py_env2_ar_fp64", "allreduce", "fp64", 700, x, y)
c3.destroy()
if cases:
    cases.close()

# ---- a count mismatch across ranks: every rank gets MismatchError ---------
# (Counts no rank has used before: a rank whose call matches one it has
# already validated skips the comparison, notices the mismatch later, and
# its peers may then see RemoteError instead; see include/detcoll.h.)
e = expect(detcoll.MismatchError, detcoll.all_reduce, array.array("f", [1.0] * (13 + R)))
assert e.code == 8 and "mismatch" in str(e), e
assert "mismatch" in comm.last_error(), comm.last_error()
expect(detcoll.MismatchError, detcoll.all_reduce, f4)  # poisoned
detcoll.destroy()
assert not detcoll.is_initialized()
expect(detcoll.ClosedError, comm.all_reduce, f4)
expect(detcoll.InvalidUsageError, detcoll.all_reduce, f4)  # no default communicator
print(f"mp_check: rank {R} of {W} OK")
