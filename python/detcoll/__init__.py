"""detcoll: deterministic collectives (AllReduce, AllGather, ReduceScatter)
whose results are the same bits on every rank, every run, every algorithm.

Pure Python over libdetcoll.so (ctypes, standard library only). See
python/README.md. The library is found through $DETCOLL_LIB, else next to
this package, else the repository's bin/, ./bin, and the loader's path.

    import detcoll
    detcoll.init()                     # detcoll launch, torchrun, Slurm, Open MPI
    detcoll.all_reduce(t)              # in place, same bits on every rank
    g = detcoll.all_gather(t)          # new tensor, world_size times larger
    s = detcoll.reduce_scatter(g)      # this rank's block of the sum

Tensors: contiguous torch tensors (CUDA: enqueued on the current stream;
CPU: host memory) of bf16, fp16, fp32 or fp64. Host buffers: anything with
the buffer protocol (memoryview, bytearray, array.array, numpy arrays);
pass dtype= when the format does not say (dtype="bf16" for uint16 data).
"""

from . import _dtypes as dtypes
from ._core import (
    Comm,
    default_comm,
    destroy,
    get_unique_id,
    init,
    is_initialized,
    version,
)
from ._errors import (
    ClosedError,
    DetcollError,
    DetcollSystemError,
    DetcollTimeoutError,
    DeviceError,
    InternalError,
    InvalidArgumentError,
    InvalidUsageError,
    LibraryNotFoundError,
    MismatchError,
    RemoteError,
    UnsupportedError,
)
from ._lib import path as library_path

__all__ = [
    "Comm", "init", "destroy", "is_initialized", "default_comm", "get_rank", "get_world_size",
    "all_reduce", "all_gather", "reduce_scatter", "get_unique_id", "version", "library_path", "dtypes",
    "DetcollError", "DeviceError", "DetcollSystemError", "InternalError", "InvalidArgumentError",
    "InvalidUsageError", "RemoteError", "MismatchError", "DetcollTimeoutError", "ClosedError",
    "UnsupportedError", "LibraryNotFoundError",
]


def _comm(comm):
    return comm if comm is not None else default_comm()


def get_rank(comm=None):
    """This process's rank in comm (default: init()'s)."""
    return _comm(comm).rank


def get_world_size(comm=None):
    """The number of ranks of comm (default: init()'s)."""
    return _comm(comm).size


def all_reduce(tensor, out=None, *, dtype=None, comm=None):
    """Deterministic sum over ranks; in place when out is None. See Comm.all_reduce."""
    return _comm(comm).all_reduce(tensor, out, dtype=dtype)


def all_gather(tensor, out=None, *, dtype=None, comm=None):
    """Every rank's tensor, in rank order. See Comm.all_gather."""
    return _comm(comm).all_gather(tensor, out, dtype=dtype)


def reduce_scatter(tensor, out=None, *, dtype=None, comm=None):
    """This rank's block of the deterministic sum. See Comm.reduce_scatter."""
    return _comm(comm).reduce_scatter(tensor, out, dtype=dtype)
