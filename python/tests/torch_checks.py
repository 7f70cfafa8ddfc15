"""Both torchrun checks in one launch (internal/torchref's Go test):

    torchrun --nproc_per_node W python/tests/torch_checks.py REFDIR

torch_functional_check (autograd collectives vs the tree) and
torch_parallel_check (the layers vs Go's parallel, bit for bit).
"""

import sys

import torch_functional_check
import torch_parallel_check
import torch_testutil as U

rank, world = U.init()
fail = U.Failures(rank)
torch_functional_check.run(fail, rank, world)
sizes = torch_parallel_check.run(fail, rank, world, sys.argv[1])
fail.finish(f"torch_checks W={world} tp/cp sizes={sizes} groups={U.group_mode()}")
