"""Single-process tests of the detcoll Python package (standard library
only; no launcher, no torch). Run with

    DETCOLL_LIB=bin/libdetcoll.so PYTHONPATH=python python3 -m unittest discover -s python/tests

capi/capi_test.go runs them too, with a freshly built library. A fake
`torch` module stands in for PyTorch so that the tensor paths (CPU tensors
through the Host calls, CUDA tensors through the device calls, which return
detcollUnsupported without a device backend) run here; the real thing runs
on the GPU machine.
"""

import array
import ctypes
import os
import struct
import subprocess
import sys
import types
import unittest

# The fake CUDA tensors below carry made-up device pointers: keep the
# library's CUDA backend out (it would use them on a GPU machine), so that
# device calls are detcollUnsupported everywhere. The library reads this when
# it is loaded, after this line.
os.environ["DETCOLL_CUDA_LIB"] = "/nonexistent/detcoll-test/libcuda.so.1"

import detcoll  # noqa: E402
from detcoll import _dtypes, _errors  # noqa: E402


class FakeDevice:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, FakeDevice) and (self.type, self.index) == (other.type, other.index)

    def __repr__(self):
        return f"{self.type}:{self.index}" if self.index is not None else self.type


def make_fake_torch():
    """A module with just enough of torch: contiguous 1-d/2-d tensors in a
    ctypes buffer."""
    torch = types.ModuleType("torch")
    torch.calls = []

    class dtype:
        def __init__(self, name, size, code):
            self.name, self.itemsize, self.code = name, size, code

        def __repr__(self):
            return "torch." + self.name

    for name, size, code in (("bfloat16", 2, "H"), ("float16", 2, "H"), ("float32", 4, "f"), ("float64", 8, "d"),
                             ("int8", 1, "b"), ("uint8", 1, "B"), ("int32", 4, "i"), ("int64", 8, "q"),
                             ("complex64", 8, "Q")):
        setattr(torch, name, dtype(name, size, code))

    class Tensor:
        def __init__(self, shape, dt, device="cpu", contiguous=True, data=None):
            self.shape, self.dtype = tuple(shape), dt
            self.device = device if isinstance(device, FakeDevice) else FakeDevice(*str(device).split(":")) if ":" in str(device) else FakeDevice(str(device))
            if self.device.index is not None:
                self.device.index = int(self.device.index)
            self._contig = contiguous
            n = self.numel()
            self.buf = (ctypes.c_char * max(1, n * dt.itemsize))()
            if data is not None:
                ctypes.memmove(self.buf, data, len(data))

        def numel(self):
            n = 1
            for s in self.shape:
                n *= s
            return n

        def is_contiguous(self):
            return self._contig

        @property
        def is_cuda(self):
            return self.device.type == "cuda"

        def get_device(self):
            return self.device.index if self.device.type == "cuda" else -1

        def data_ptr(self):
            if self.device.type == "cuda":
                return 0xDEAD0000  # a "device" pointer: never dereferenced on the host
            return ctypes.addressof(self.buf) if self.numel() else 0

        def bytes(self):
            return bytes(self.buf)[: self.numel() * self.dtype.itemsize]

    torch.Tensor = Tensor

    def empty(shape, dtype, device):
        torch.calls.append(("empty", tuple(shape)))
        return Tensor(shape, dtype, device)

    torch.empty = empty

    class Stream:
        cuda_stream = 0x5151

    class DeviceCtx:
        def __init__(self, dev):
            self.dev = dev

        def __enter__(self):
            torch.calls.append(("device", self.dev))

        def __exit__(self, *a):
            return False

    torch.cuda = types.SimpleNamespace(current_stream=lambda dev: Stream(), device=DeviceCtx)
    return torch


class SingleRank(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.comm = detcoll.init()

    def test_world_of_one(self):
        self.assertEqual((self.comm.rank, self.comm.size), (0, 1))
        self.assertIs(detcoll.init(), self.comm)  # idempotent
        self.assertEqual(detcoll.get_world_size(), 1)
        self.assertEqual(detcoll.version()[:2], (0, 1))
        self.assertTrue(os.path.exists(detcoll.library_path()))

    def test_host_identity(self):
        x = array.array("f", [1.5, -0.0, 3.25])
        y = detcoll.all_reduce(x, out=array.array("f", [0.0] * 3))
        self.assertEqual(bytes(y), bytes(x))
        self.assertEqual(bytes(detcoll.all_gather(x)), bytes(x))
        self.assertEqual(bytes(detcoll.reduce_scatter(x)), bytes(x))
        b = bytearray(struct.pack("<3H", 0x3F80, 0x8000, 0x4000))
        self.assertEqual(detcoll.all_reduce(bytearray(b), dtype="bf16"), b)
        m = memoryview(bytearray(struct.pack("<2d", 1.0, 2.0))).cast("d")
        out = detcoll.all_gather(m)
        self.assertEqual(out.format, "d")
        self.assertEqual(out.tolist(), [1.0, 2.0])
        self.assertEqual(detcoll.all_gather(bytearray(b"abc")), bytearray(b"abc"))
        self.assertEqual(len(detcoll.all_reduce(bytearray(), dtype="fp32")), 0)

    def test_host_argument_errors(self):
        f = array.array("f", [1, 2])
        with self.assertRaises(ValueError):
            detcoll.all_reduce(memoryview(bytearray(16)).cast("f")[::2])
        with self.assertRaisesRegex(TypeError, "bf16.*fp16"):
            detcoll.all_reduce(array.array("H", [1]))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(array.array("q", [1]))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(f, dtype="fp16")
        with self.assertRaises(TypeError):
            detcoll.all_reduce(array.array("I", [1, 2]), dtype="fp64")  # element size
        with self.assertRaises(TypeError):
            detcoll.all_reduce(bytes(8), dtype="fp32")  # read-only in place
        with self.assertRaises(TypeError):
            detcoll.all_reduce(f, out=bytes(8))  # read-only out
        with self.assertRaises(ValueError):
            detcoll.all_reduce(f, out=bytearray(4))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(object())
        with self.assertRaises(TypeError):
            detcoll.all_reduce(f, dtype="complex")
        with self.assertRaises(ValueError):
            detcoll.all_reduce(f, dtype=99)
        with self.assertRaises(ValueError):
            detcoll.all_reduce(bytearray(3), dtype="bf16")
        self.assertEqual(detcoll.all_gather(array.array("i", [7])).tolist(), [7])  # bytes moved

    def test_unique_id(self):
        uid = detcoll.get_unique_id()
        self.assertEqual(len(uid), 128)
        self.assertEqual(uid[:4], b"DCID")
        self.assertNotEqual(uid, detcoll.get_unique_id())
        with detcoll.Comm.from_unique_id(uid, 1, 0) as c:
            self.assertEqual((c.rank, c.size), (0, 1))
            x = array.array("d", [2.5])
            self.assertEqual(c.all_reduce(x).tolist(), [2.5])
        with self.assertRaises(detcoll.ClosedError) as cm:
            c.all_reduce(x)
        self.assertEqual(cm.exception.code, 10)
        self.assertIn("destroy", cm.exception.function + str(cm.exception).lower())
        with self.assertRaises(detcoll.ClosedError):
            c.destroy()
        # A used id cannot make a second rank 0.
        with self.assertRaises(detcoll.InvalidUsageError):
            detcoll.Comm.from_unique_id(uid, 1, 0)
        with self.assertRaises(detcoll.InvalidArgumentError):
            detcoll.Comm.from_unique_id(b"\0" * 128, 1, 0)
        with self.assertRaises(detcoll.InvalidArgumentError):
            detcoll.Comm.from_unique_id(uid, 2, 2)
        with self.assertRaises(ValueError):
            detcoll.Comm.from_unique_id(uid[:100], 1, 0)

    def test_abort(self):
        c = detcoll.Comm.from_unique_id(detcoll.get_unique_id(), 1, 0)
        c.abort()
        with self.assertRaises(detcoll.ClosedError):
            c.all_gather(bytearray(1))
        self.assertIn("destroyed", repr(c))

    def test_exceptions(self):
        for code, exc, base in ((1, detcoll.DeviceError, None), (2, detcoll.DetcollSystemError, None),
                                (3, detcoll.InternalError, None), (4, detcoll.InvalidArgumentError, ValueError),
                                (5, detcoll.InvalidUsageError, None), (6, detcoll.RemoteError, None),
                                (8, detcoll.MismatchError, None), (9, detcoll.DetcollTimeoutError, TimeoutError),
                                (10, detcoll.ClosedError, None), (11, detcoll.UnsupportedError, NotImplementedError)):
            e = _errors.error_for(code, "m", "f")
            self.assertIs(type(e), exc)
            self.assertIsInstance(e, detcoll.DetcollError)
            if base:
                self.assertIsInstance(e, base)
            self.assertEqual((e.code, e.function, str(e)), (code, "f", "m"))
        self.assertIs(type(_errors.error_for(77, "m")), detcoll.DetcollError)
        lib = detcoll._lib.lib()
        for code in range(12):
            self.assertTrue(lib.detcollGetErrorString(code))

    def test_dtype_names(self):
        self.assertEqual(_dtypes.code("bf16"), 9)
        self.assertEqual(_dtypes.code("torch.float16"), 6)
        self.assertEqual(_dtypes.code("Float32"), 7)
        self.assertEqual(_dtypes.code(8), 8)
        with self.assertRaises(TypeError):
            _dtypes.code(True)


class FakeTorch(unittest.TestCase):
    def setUp(self):
        self.assertNotIn("torch", sys.modules)
        self.torch = sys.modules["torch"] = make_fake_torch()
        self.comm = detcoll.init()

    def tearDown(self):
        del sys.modules["torch"]

    def test_cpu_tensors_use_host_calls(self):
        torch = self.torch
        data = struct.pack("<4f", 1, 2, 3, 4)
        t = torch.Tensor((2, 2), torch.float32, data=data)
        self.assertIs(detcoll.all_reduce(t), t)
        self.assertEqual(t.bytes(), data)
        g = detcoll.all_gather(t)
        self.assertEqual((g.shape, g.bytes()), ((2, 2), data))
        r = detcoll.reduce_scatter(t)
        self.assertEqual(r.bytes(), data)
        out = torch.Tensor((4,), torch.float32)
        detcoll.all_reduce(t, out=out)
        self.assertEqual(out.bytes(), data)
        b = torch.Tensor((3,), torch.bfloat16, data=struct.pack("<3H", 0x3F80, 0, 0x8000))
        self.assertEqual(detcoll.all_reduce(b).bytes(), struct.pack("<3H", 0x3F80, 0, 0x8000))

    def test_tensor_errors(self):
        torch = self.torch
        t = torch.Tensor((4,), torch.float32)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            detcoll.all_reduce(torch.Tensor((4,), torch.float32, contiguous=False))
        with self.assertRaisesRegex(ValueError, "device"):
            detcoll.all_reduce(torch.Tensor((4,), torch.float32, device="mps"))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(torch.Tensor((4,), torch.int32))
        with self.assertRaises(TypeError):
            detcoll.all_gather(torch.Tensor((4,), torch.complex64))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(t, out=torch.Tensor((4,), torch.float64))
        with self.assertRaises(ValueError):
            detcoll.all_reduce(t, out=torch.Tensor((3,), torch.float32))
        with self.assertRaises(ValueError):
            detcoll.all_reduce(t, out=torch.Tensor((4,), torch.float32, device="cuda:0"))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(t, out=bytearray(16))
        with self.assertRaises(TypeError):
            detcoll.all_reduce(array.array("f", [1]), out=t)
        with self.assertRaises(TypeError):
            detcoll.all_reduce(t, dtype="bf16")
        # int8 moves through AllGather.
        i = torch.Tensor((3,), torch.int8, data=b"\x01\x02\x03")
        self.assertEqual(detcoll.all_gather(i).bytes(), b"\x01\x02\x03")

    def test_cuda_tensors_reach_the_device_calls(self):
        torch = self.torch
        t = torch.Tensor((8,), torch.bfloat16, device="cuda:1")
        for fn in (detcoll.all_reduce, detcoll.all_gather, detcoll.reduce_scatter):
            with self.assertRaises(detcoll.UnsupportedError) as cm:
                fn(t)
            self.assertIn("device backend", str(cm.exception))
            self.assertRegex(cm.exception.function, r"^detcoll(AllReduce|AllGather|ReduceScatter)$")
        self.assertIn(("device", FakeDevice("cuda", 1)), torch.calls)
        self.assertIn(("empty", (8,)), torch.calls)  # all_gather's output, world of one

    def test_cuda_stream_fast_path(self):
        # With torch's raw getters the stream comes without building a
        # torch.cuda.Stream, and the device is switched only when the
        # tensor's is not current.
        from detcoll import _torch as T

        torch = self.torch
        torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda i: 0x7000 + i, _cuda_getDevice=lambda: 1)
        stream, guard = T.current_stream(torch.Tensor((8,), torch.bfloat16, device="cuda:1"))
        self.assertEqual((stream, guard), (0x7001, None))
        stream, guard = T.current_stream(torch.Tensor((8,), torch.bfloat16, device="cuda:0"))
        self.assertEqual(stream, 0x7000)
        self.assertIsNotNone(guard)
        t = torch.Tensor((8,), torch.bfloat16, device="cuda:1")
        with self.assertRaises(detcoll.UnsupportedError):
            detcoll.all_reduce(t)
        self.assertNotIn(("device", FakeDevice("cuda", 1)), torch.calls)
        # (Without them, torch.cuda.current_stream and a device switch:
        # test_cuda_tensors_reach_the_device_calls.)


class NoDefault(unittest.TestCase):
    def test_module_functions_need_init(self):
        detcoll.destroy()
        self.assertFalse(detcoll.is_initialized())
        with self.assertRaises(detcoll.InvalidUsageError):
            detcoll.all_reduce(array.array("f", [1]))
        with self.assertRaises(detcoll.InvalidUsageError):
            detcoll.get_rank()
        # A world of one can join again.
        c = detcoll.init()
        self.assertEqual(c.size, 1)
        self.assertEqual(detcoll.all_reduce(array.array("f", [2])).tolist(), [2.0])


class LibraryLookup(unittest.TestCase):
    def test_bad_override(self):
        env = dict(os.environ, DETCOLL_LIB="/nonexistent/libdetcoll.so")
        code = "import detcoll\ntry:\n    detcoll.version()\nexcept detcoll.LibraryNotFoundError as e:\n    print('LNF', isinstance(e, OSError), e)\n"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertIn("LNF True", out.stdout, out.stderr)
        self.assertIn("/nonexistent/libdetcoll.so", out.stdout)

    def test_candidates(self):
        old = os.environ.pop("DETCOLL_LIB", None)
        try:
            c = detcoll._lib.candidates()
            here = os.path.dirname(os.path.abspath(detcoll.__file__))
            self.assertEqual(c[0], os.path.join(here, "libdetcoll.so"))
            self.assertEqual(c[1], os.path.join(os.path.dirname(os.path.dirname(here)), "bin", "libdetcoll.so"))
        finally:
            if old is not None:
                os.environ["DETCOLL_LIB"] = old


if __name__ == "__main__":
    unittest.main()
