"""torch's own distributed conformance suite on a backend: DistributedTest._DistTestBase of
torch/testing/_internal/distributed/distributed_test.py, the file torch ships for its backends, driven as PyTorch's
test/distributed/test_distributed_spawn.py drives it (that driver is not shipped: this is its equivalent).

    BACKEND=cohort WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python3 torch_dist_suite.py [unittest args, -k pattern]

Each test spawns WORLD_SIZE processes that meet with init_method file:// (the suite's own choice), so the backend's
rendezvous through torch's store is what runs. For BACKEND=cohort the backend is registered by importing
cohort.torch, and "cohort" joins the suite's feature sets for what it implements: plugin (a third-party backend),
ddp and subgroup; not gpu or cuda (the backend takes CPU tensors). With BACKEND=gloo nothing of cohort is imported:
the same driver gives gloo's figures on the same machine.

One change to the suite itself, for every backend alike: its "DDP + ReplicatedTensor" mode is off. torch 1.13 as
Debian ships it on Python 3.11 fails 9 CPU DDP tests in that mode whatever the backend (it imports
torch.distributed._shard, which raises "mutable default ... TensorProperties" on Python 3.11).
"""
import os
import sys

BACKEND = os.environ.setdefault("BACKEND", "cohort")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    sys.exit("torch_dist_suite.py: set TEMP_DIR to an empty directory (the suite keeps its barrier files there)")

# torch's test utilities import expecttest, which Debian does not package: a stand-in (shim/expecttest.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim"))

import torch.nn.parallel._replicated_tensor_ddp_utils as _replicated  # noqa: E402

_replicated._set_ddp_with_replicated_tensor = lambda value: None

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "cohort":
    import cohort.torch  # noqa: E402,F401 (registers the backend)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("cohort")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
