"""Horovod's elastic API (`hvd.elastic`) on cohortrun's restarts.

Horovod keeps its workers alive when the job's hosts change and re-forms their ring in place; cohortrun instead
stops every worker and starts a new generation of them (`--max-restarts K` after a failure, `--nnodes MIN:MAX` when
a node leaves or joins; docs/cohortrun.md), as torchrun does. So that a new generation goes on from where the last
one was, `State.commit()` also writes the state to disk on rank 0 (atomically: a temporary file, fsync, rename), and
`run()` loads the last commit on rank 0 when a generation starts, before `sync()` broadcasts it. Global rank 0 is
always on node 0 (cohortrun keeps it there), whose disk outlives every generation, so no shared filesystem is
needed. The file lives in COHORT_ELASTIC_DIR, else in a directory of the system's temporary directory named after
the job (its store and secret, the same in every generation and different for another job); a run that returns
normally removes it.

What differs from Horovod: the work since the last commit is done again after a membership change as well as after
a failure (Horovod keeps it after a host is added), so `HostsUpdatedInterrupt` exists for scripts that catch it but
cohort never raises it; and a `HorovodInternalError` inside `run()` restores the last commit and re-initializes, as in
Horovod, but after a lost worker cohortrun stops the survivors anyway and the next generation resumes from disk.
"""
import copy
import functools
import hashlib
import io
import os
import tempfile

import torch

import cohort as _core
import cohort.torch as _hvd

__all__ = ["State", "ObjectState", "TorchState", "ElasticSampler", "run", "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod raises this when hosts were added or removed. cohortrun restarts the workers instead (module doc)."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


_MAGIC = b"cohort-elastic-commit\n"


def _read_commit(path):
    """A commit written by State._persist, its checksum verified."""
    with open(path, "rb") as f:
        data = f.read()
    head, digest, payload = data[:len(_MAGIC)], data[len(_MAGIC):len(_MAGIC) + 32], data[len(_MAGIC) + 32:]
    if head != _MAGIC or len(digest) != 32 or hashlib.sha256(payload).digest() != digest:
        raise RuntimeError(f"cohort.torch.elastic: the last commit {path} is damaged ({len(data)} bytes, checksum "
                           f"does not match): remove it to start over, or restore it from a copy")
    try:
        return torch.load(io.BytesIO(payload), weights_only=False)
    except TypeError:  # a torch without weights_only
        return torch.load(io.BytesIO(payload))


def _state_dir():
    d = os.environ.get("COHORT_ELASTIC_DIR")
    if d:
        return d
    # The same in every generation of one job, different for another: cohortrun's store and the job's secret.
    job = "|".join(os.environ.get(k, "") for k in ("COHORT_STORE_ADDR", "COHORT_STORE_PORT", "MASTER_ADDR",
                                                    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "COHORT_SECRET"))
    return os.path.join(tempfile.gettempdir(), "cohort-elastic-" + hashlib.sha256(job.encode()).hexdigest()[:16])


class State:
    """What a training function needs to go on after a reset: commit() saves it, restore() goes back to the last
    commit, sync() makes every rank's the same as rank 0's. Subclasses say what the state is (save/load/broadcast)."""

    def __init__(self, name="state"):
        self._reset_callbacks = []
        self._path = os.path.join(_state_dir(), f"{name}.pt")

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after each reset, when the world may have another size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def on_hosts_updated(self, timestamp=None, update_res=None):
        pass

    def check_host_updates(self):
        """Horovod raises HostsUpdatedInterrupt here when hosts changed; under cohortrun a change restarts the
        workers, so there is never anything to raise."""

    def commit(self):
        """Saves the state (in memory on every rank, and on rank 0's disk for the next generation)."""
        self.save()
        if _hvd.rank() == 0:
            self._persist()
        self.check_host_updates()

    def _persist(self):
        buf = io.BytesIO()
        torch.save(self._snapshot(), buf)
        payload = buf.getvalue()
        os.makedirs(os.path.dirname(self._path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self._path), prefix=".commit-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)  # checked by _read_commit
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _resume(self):
        """Rank 0, at a generation's start: the last commit of an earlier generation, if any. True if loaded."""
        if _hvd.rank() != 0 or not os.path.exists(self._path):
            return False
        self._load_snapshot(_read_commit(self._path))
        self.restore()
        return True

    def _forget(self):
        if _hvd.rank() == 0 and os.path.exists(self._path):
            os.unlink(self._path)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def _snapshot(self):
        raise NotImplementedError

    def _load_snapshot(self, snap):
        raise NotImplementedError


class ObjectState(State):
    """Plain attributes (numbers, lists, dicts): ObjectState(epoch=0, batch=0); state.epoch is the value."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._bcast_object = bcast_object or _core.broadcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, v)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0)
            self._set_attrs()

    def _snapshot(self):
        return {"objects": self._saved_state}

    def _load_snapshot(self, snap):
        self._saved_state = snap["objects"]


class TorchState(ObjectState):
    """A model, an optimizer and plain attributes: TorchState(model, optimizer, epoch=0, batch=0). commit() copies the
    model's and the optimizer's state_dict; sync() broadcasts them from rank 0 (broadcast_parameters,
    broadcast_optimizer_state) with the attributes."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model, self.optimizer = model, optimizer
        self._saved_model = self._saved_optimizer = None
        super().__init__(**kwargs)
        self._save_tensors()

    def _save_tensors(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())

    def save(self):
        self._save_tensors()
        super().save()

    def restore(self):
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self.model is not None:
            _hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            _hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()
        self._save_tensors()  # every rank's last commit is now rank 0's

    def _snapshot(self):
        snap = super()._snapshot()
        snap["model"], snap["optimizer"] = self._saved_model, self._saved_optimizer
        return snap

    def _load_snapshot(self, snap):
        super()._load_snapshot(snap)
        self._saved_model, self._saved_optimizer = snap.get("model"), snap.get("optimizer")


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: the indices of an epoch (shuffled by seed and epoch, the same on every rank) that
    were not yet processed, split among the ranks of the current world. record_batch()/record_indices() mark what
    this rank processed; state_dict()/load_state_dict() carry it in a State (all ranks' together: sync it)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        self.record_indices(self.indices[start:start + batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        # Every rank's processed indices, so that the next world leaves them all out.
        mine = sorted(self.processed_indices)
        every = _core.allgather_object(mine) if _hvd.is_initialized() and _hvd.size() > 1 else [mine]
        return {"epoch": self.epoch, "processed_indices": sorted({i for part in every for i in part})}

    def reset(self):
        self.num_replicas = _hvd.size() if _hvd.is_initialized() else 1
        self.rank = _hvd.rank() if _hvd.is_initialized() else 0
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()
        else:
            order = list(range(len(self.dataset)))
        remaining = [i for i in order if i not in self.processed_indices]
        self.num_samples = -(-len(remaining) // self.num_replicas)  # ceil: pad by repeating, as DistributedSampler
        padded = remaining + remaining[:self.num_samples * self.num_replicas - len(remaining)]
        self.indices = padded[self.rank::self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def run(func):
    """Decorator for the training function, func(state, *args, **kwargs). At each start, rank 0 takes the last
    commit of an earlier generation (cohortrun restarted the workers) and sync() gives it to every rank; a
    HorovodInternalError restores the last commit, re-initializes and calls func again; a normal return removes the
    commit from disk and returns func's value."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        resumed = state._resume()
        if resumed:
            print(f"cohort.torch.elastic: rank 0 resumes from the last commit ({state._path}), generation "
                  f"{os.environ.get('COHORT_RESTART_COUNT', '?')}", flush=True)
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                result = func(state, *args, **kwargs)
                state._forget()
                return result
            except _core.HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _hvd.shutdown()
            _hvd.init()
            state.on_reset()

    return wrapper
