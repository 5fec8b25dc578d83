"""torch's own distributed conformance suite on a backend: DistributedTest._DistTestBase of
torch/testing/_internal/distributed/distributed_test.py, the file torch ships for its backends, driven as PyTorch's
test/distributed/test_distributed_spawn.py drives it (that driver is not shipped: this is its equivalent).

    BACKEND=cohort WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python3 torch_dist_suite.py [unittest args, -k pattern]

Each test starts WORLD_SIZE processes (forked; see START below) that meet with init_method file:// (the suite's own choice), so the backend's
rendezvous through torch's store is what runs. For BACKEND=cohort the backend is registered by importing
cohort.torch, and "cohort" joins the suite's feature sets for what it implements: plugin (a third-party backend),
ddp and subgroup; not gpu or cuda (their tests want a GPU per rank; python.cuda_dist covers CUDA tensors). With
BACKEND=gloo nothing of cohort is imported: the same driver gives gloo's figures on the same machine. The 12 CPU all-to-all tests that the suite skips for
every backend but MPI run for cohort (UNSKIPPED_FOR_COHORT below).

One change to the suite itself, for every backend alike: its "DDP + ReplicatedTensor" mode is off. torch 1.13 as
Debian ships it on Python 3.11 fails 9 CPU DDP tests in that mode whatever the backend (it imports
torch.distributed._shard, which raises "mutable default ... TensorProperties" on Python 3.11).
"""
import os
import sys
import types

BACKEND = os.environ.setdefault("BACKEND", "cohort")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    sys.exit("torch_dist_suite.py: set TEMP_DIR to an empty directory (the suite keeps its barrier files there)")

# torch's test utilities write XML reports through xmlrunner when CI is set (Debian packages no xmlrunner) and change
# a few other habits for PyTorch's own CI: the suite runs here as it runs on a developer's machine, whatever CI says.
os.environ.pop("CI", None)
# torch's test utilities import expecttest, which Debian does not package: a stand-in (shim/expecttest.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim"))

import torch  # noqa: E402
try:  # torch 1.13's mode (torch 2 dropped it with the module)
    import torch.nn.parallel._replicated_tensor_ddp_utils as _replicated  # noqa: E402

    _replicated._set_ddp_with_replicated_tensor = lambda value: None
except ImportError:
    pass

import torch.testing._internal.common_distributed as _common  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402


# The suite's skips on GPUs and world sizes (skip_if_lt_x_gpu, skip_if_no_gpu, skip_if_small_worldsize,
# skip_if_odd_worldsize) are decided inside each spawned rank, which exits with a skip code: every one of those tests
# starts WORLD_SIZE Python processes to learn what the parent already knows (CUDA, the GPU count, WORLD_SIZE and
# BACKEND are the same there), about 3 s apiece, 150-odd tests per world size on a machine without GPUs. The same
# conditions and messages are decided here in the parent instead, before any process starts; which tests run and
# which skip, and why, is unchanged. Patched before distributed_test imports the names.
def _skip_unless(condition, key):
    import unittest

    skip = _common.TEST_SKIPS.get(key)
    return unittest.skipUnless(condition, skip.message if skip else key)


def _gpus():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _skip_if_lt_x_gpu(x):
    return _skip_unless(_gpus() >= x, f"multi-gpu-{x}")


def _skip_if_no_gpu(func):
    world_size = int(os.environ["WORLD_SIZE"])
    if not torch.cuda.is_available():
        return _skip_unless(False, "no_cuda")(func)
    return _skip_unless(_gpus() >= world_size, f"multi-gpu-{world_size}")(func)


def _skip_if_small_worldsize(func):
    return _skip_unless(BACKEND == "mpi" or int(os.environ["WORLD_SIZE"]) > 2, "small_worldsize")(func)


def _skip_if_odd_worldsize(func):
    return _skip_unless(BACKEND == "mpi" or int(os.environ["WORLD_SIZE"]) % 2 == 0, "odd_worldsize")(func)


_common.skip_if_lt_x_gpu = _skip_if_lt_x_gpu
_common.skip_if_no_gpu = _skip_if_no_gpu
_common.skip_if_small_worldsize = _skip_if_small_worldsize
_common.skip_if_odd_worldsize = _skip_if_odd_worldsize

if BACKEND == "cohort":
    import cohort.torch  # noqa: E402,F401 (registers the backend)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("cohort")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


# How each test starts its ranks. PyTorch's own drivers did it both ways: test_distributed_spawn.py spawns (a fresh
# interpreter per rank, which imports torch again: about 2 s of CPU per rank per test on these machines), and until
# torch 1.12 test_distributed_fork.py forked. The ranks run the same test code either way; forked, they start from
# this parent, which has imported torch (and cohort.torch) but has run no operation, started no thread and joined no
# group. On 2 cores the suite at world size 2 took 32 s forked against 315 s spawned, with the same 76 tests passed
# and 203 skipped. Forking is the default here where torch sees no GPU (a process that has touched CUDA must not
# fork); COHORT_TEST_SUITE_START=spawn runs it as test_distributed_spawn.py does, =fork forces the other.
START = os.environ.get("COHORT_TEST_SUITE_START") or ("spawn" if torch.cuda.is_available() else "fork")
if START not in ("fork", "spawn"):
    sys.exit(f"torch_dist_suite.py: COHORT_TEST_SUITE_START={START!r}: expected fork or spawn")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


# The suite skips these CPU tests on every backend but MPI ("Only MPI supports CPU all_to_all_single", "Only MPI
# supports all_to_all"): gloo lacks the operation, cohort has it. For cohort they run as written: the same test
# function without the skip mark the suite put on it when it was imported (its condition was BACKEND != "mpi").
UNSKIPPED_FOR_COHORT = [
    "test_all_to_all", "test_all_to_all_complex", "test_all_to_all_full_group", "test_all_to_all_group",
    "test_all_to_all_single_equal_split", "test_all_to_all_single_equal_split_complex",
    "test_all_to_all_single_equal_split_full_group", "test_all_to_all_single_equal_split_group",
    "test_all_to_all_single_unequal_split", "test_all_to_all_single_unequal_split_complex",
    "test_all_to_all_single_unequal_split_full_group", "test_all_to_all_single_unequal_split_group",
]


def _unskip(cls, name):
    fn = getattr(DistributedTest._DistTestBase, name, None)
    if fn is None and not torch.__version__.startswith("1.13"):
        return  # this torch's suite has no such test
    why = getattr(fn, "__unittest_skip_why__", "")
    if not why.startswith("Only MPI supports"):
        if not torch.__version__.startswith("1.13"):  # the list is torch 1.13's: another torch keeps its own marks
            print(f"torch_dist_suite.py: {name} stays as torch {torch.__version__} marks it ({why!r})", file=sys.stderr)
            return
        raise RuntimeError(f"torch_dist_suite.py: {name} is not skipped for MPI alone here ({why!r}): check the list")
    clone = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    clone.__dict__.update({k: v for k, v in fn.__dict__.items() if not k.startswith("__unittest_skip")})
    clone.__qualname__, clone.__doc__ = fn.__qualname__, fn.__doc__
    setattr(cls, name, clone)


if BACKEND == "cohort":
    for _name in UNSKIPPED_FOR_COHORT:
        _unskip(TestDistBackendWithSpawn, _name)


if __name__ == "__main__":
    run_tests()
