"""detcoll for PyTorch.

``import detcoll.torch`` registers the torch.distributed backend "detcoll"
(see .backend and docs/pytorch.md):

    import torch.distributed as dist
    import detcoll.torch
    dist.init_process_group("detcoll")     # under torchrun or detcoll launch

Only the backend is imported here; detcoll.torch.functional, .parallel and
.bench are imported explicitly by who uses them.
"""

from .backend import BACKEND_NAME, ProcessGroupDetcoll, SecondThreadError, Work, create_process_group

__all__ = ["BACKEND_NAME", "ProcessGroupDetcoll", "SecondThreadError", "Work", "create_process_group"]
