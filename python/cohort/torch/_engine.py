"""The C DDP engine (include/cohort/ddp.h) under PyTorch's autograd: DistributedOptimizer and DistributedDataParallel.

Both give the engine the parameters' memory and point every parameter's .grad at its slice of the engine's bucket
memory (torch's gradient_as_bucket_view=True; in the node's shared arena when the transport is shm). A hook on each
parameter's gradient accumulator calls cohort_ddp_mark_ready once autograd has accumulated that gradient, so the
engine starts each bucket's allreduce while backward still computes the earlier layers (when it overlaps: see
cohort_ddp_options.overlap). DistributedDataParallel finishes the reduction in an autograd callback at the end of
backward, as torch's DDP does; DistributedOptimizer finishes it in step() or synchronize(), as Horovod does.

When a gradient is not already in the bucket (optimizer.zero_grad(set_to_none=True), the default of torch 2.x,
makes autograd allocate a fresh one), the hook copies it in and rebinds .grad to the bucket view.

After the first synchronized step the engine rebuilds its buckets in the order gradients really arrived: the views
move, and .grad is rebound to the new ones (the values are carried over by the engine).
"""
import contextlib
import ctypes
import gc
import warnings
import weakref

import numpy as np
import torch

import cohort as _core
from cohort import _lib
from cohort._lib import lib as _c
from cohort.torch import _named
from cohort.torch._tensors import _TORCH_DTYPES, Compression


# Engines are made with uneven_inputs (see _Engine); bench/torch_join_cost.py turns it off to measure its cost.
_UNEVEN_INPUTS = True


def _queue_callback(fn):
    torch.autograd.Variable._execution_engine.queue_callback(fn)


def _float_view(ptr, numel, shape):
    if numel == 0 or not ptr:
        return torch.zeros(shape, dtype=torch.float32)
    arr = np.ctypeslib.as_array((ctypes.c_float * numel).from_address(ptr))
    return torch.from_numpy(arr).view(shape)


def _ddp_tensor(name, t, what):
    if t.device.type != "cpu":
        raise ValueError(f"{what}: '{name}' is on {t.device}; the engine works on CPU tensors (reduce CUDA "
                         f"gradients with allreduce/grouped_allreduce)")
    if not t.is_contiguous():
        raise ValueError(f"{what}: '{name}' is not contiguous; the engine needs the memory of the tensor itself")
    if t.dtype not in _TORCH_DTYPES:
        raise TypeError(f"{what}: '{name}' has unsupported dtype {t.dtype}")
    d = _lib.DdpTensor()
    enc = name.encode()
    d.name = enc
    d.value = t.data_ptr()
    d.count = t.numel()
    d.dtype = _TORCH_DTYPES[t.dtype]
    shape = list(t.shape)
    if len(shape) > 4:  # the engine compares at most 4 dimensions: fold the rest into the last
        shape = shape[:3] + [int(np.prod(shape[3:]))]
    d.ndim = len(shape)
    for k, s in enumerate(shape):
        d.shape[k] = s
    return d, enc


class _Engine:
    """One cohort_ddp over a list of (name, parameter) and (name, buffer) on comm (the job's communicator, or a process
    set's: DistributedDataParallel's process_group); owner gets the backward callbacks."""

    def __init__(self, comm, named_params, named_buffers, owner, bucket_bytes=0, find_unused=False,
                 broadcast_buffers=True, compression=_lib.COMPRESS_NONE, op=_lib.AVG, what="DistributedDataParallel"):
        self._comm = comm
        self.ddp = None
        self._owner = weakref.ref(owner)
        self.params = []
        seen = set()
        for name, p in named_params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"{what}: '{name}' is a {type(p).__name__}, not a tensor")
            if not p.requires_grad or id(p) in seen:
                continue
            if p.dtype != torch.float32:
                raise TypeError(f"{what}: parameter '{name}' is {p.dtype}; the engine averages float32 gradients "
                                f"(keep float32 master weights)")
            seen.add(id(p))
            self.params.append((name, p))
        self.buffers = [(n, b) for n, b in named_buffers if b is not None]
        self.broadcast_buffers = bool(broadcast_buffers)
        if op not in (_lib.AVG, _lib.SUM):
            raise ValueError(f"{what}: op must be Average or Sum")
        names = [n for n, _ in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{what}: parameter names must be unique")
        keep = []
        ptab = (_lib.DdpTensor * max(len(self.params), 1))()
        for i, (n, p) in enumerate(self.params):
            ptab[i], enc = _ddp_tensor(n, p.data, what)
            keep.append(enc)
        btab = (_lib.DdpTensor * max(len(self.buffers), 1))()
        for i, (n, b) in enumerate(self.buffers):
            btab[i], enc = _ddp_tensor(n, b, what)
            keep.append(enc)
        self._buffer_ptrs = [b.data_ptr() for _, b in self.buffers]
        opts = _lib.DdpOptions()
        _c.cohort_ddp_options_init(ctypes.byref(opts))
        opts.bucket_bytes = int(bucket_bytes)
        opts.broadcast_buffers = 1 if broadcast_buffers else 0
        opts.find_unused_params = 1 if find_unused else 0
        opts.compression = compression
        # Uneven inputs are always on, so that any rank may join (hvd.join(), DistributedDataParallel.join())
        # without warning the others: Horovod's join() is called by a rank whose data ended, unannounced, so the
        # mode cannot be switched on collectively beforehand. The cost is one 4-byte allreduce at the start of every
        # synchronized step (measured in docs/torch.md) and the bucket order of creation (no rebuild after the
        # first step: a joined rank shadows the steps with the buckets as they are).
        opts.uneven_inputs = 1 if _UNEVEN_INPUTS else 0
        ddp = ctypes.c_void_p()
        _core._check(_c.cohort_ddp_create(comm, ptab, len(self.params), btab, len(self.buffers), ctypes.byref(opts),
                                          ctypes.byref(ddp)), what)
        self.ddp = ddp
        self.what = what
        self.op = op
        self.size = _c.cohort_size(comm)
        # DistributedDataParallel.join(divide_by_initial_world_size=True): the sum over the ranks still training
        # divided by the whole world (the C engine divides by the ranks still training).
        self.divide_by_initial = False
        _core._engines.add(self)
        self._hook = None
        if op == _lib.SUM:
            self._set_sum_hook()
        self.views = [None] * len(self.params)
        self._bind()
        self.rebound = False
        self.in_backward = False
        self.step_open = False
        self.sync = True
        self._seen = set()
        self._sparse = set()  # parameters whose gradient came sparse this step
        self._hooks = []
        self._accs = []
        me = weakref.ref(self)
        for i, (_, p) in enumerate(self.params):
            def hook(*_args, i=i):
                e = me()
                if e is not None:
                    e._on_grad(i)
            def sparse_seen(g, i=i):
                # The incoming gradient, before autograd adds it to .grad (the dense bucket view): whether it came
                # sparse (nn.Embedding(sparse=True)) is known only here. One cheap call per parameter and backward.
                e = me()
                if e is not None and g.is_sparse:
                    e._sparse.add(i)
            self._hooks.append(p.register_hook(sparse_seen))
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self._hooks.append(p.register_post_accumulate_grad_hook(hook))
            else:
                with torch.enable_grad():
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc.register_hook(hook))
                self._accs.append(acc)  # the accumulator lives only as long as someone holds it

    def _set_sum_hook(self):
        comm = self._comm

        def launch(user, comm_ptr, bucket, work):
            b = bucket.contents
            ptr = ctypes.cast(b.data, ctypes.c_void_p)
            return _c.cohort_iallreduce(comm, ptr, ptr, b.count, _lib.F32, _lib.SUM, work)

        hook = _lib.DdpCommHook()
        hook.launch = _lib.HOOK_LAUNCH(launch)
        hook.complete = _lib.HOOK_COMPLETE()
        hook.user = None
        self._hook = hook  # the C side holds these function pointers: keep them alive
        _core._check(_c.cohort_ddp_set_comm_hook(self.ddp, ctypes.byref(hook)), "op=Sum")

    def _bind(self):
        """Points every parameter's .grad at its bucket view (again after a rebuild moved them)."""
        for i, (_, p) in enumerate(self.params):
            ptr = _c.cohort_ddp_grad(self.ddp, i) or 0
            v = self.views[i]
            if v is None or (p.numel() > 0 and v.data_ptr() != ptr):
                self.views[i] = _float_view(ptr, p.numel(), p.shape)
                p.grad = self.views[i]

    # ---- the step ----

    def check(self, status, what):
        if status != _lib.OK:
            raise _core._error(status, what)

    def prepare(self):
        if self.ddp is None:
            raise RuntimeError("cohort: the engine has been closed (cohort.shutdown() was called)")
        if self._buffer_ptrs and [b.data_ptr() for _, b in self.buffers] != self._buffer_ptrs:
            raise RuntimeError("cohort DistributedDataParallel: a module buffer was replaced by a new tensor; "
                               "update buffers in place (the engine broadcasts the memory it was given)")
        self.check(_c.cohort_ddp_prepare(self.ddp), "cohort_ddp_prepare")
        self.step_open = True
        self._seen = set()

    def set_sync(self, sync):
        self.sync = bool(sync)
        if self.ddp is not None:
            _c.cohort_ddp_set_sync(self.ddp, 1 if sync else 0)

    def finish(self):
        st = _c.cohort_ddp_finish(self.ddp)
        self.step_open = False
        self.check(st, "cohort_ddp_finish")
        if self.sync:
            if not self.rebound:  # the rebuild after the first synchronized step moved the buckets
                self.rebound = True
                self._bind()
            self._rescale_uneven()
            # Parameters that got no gradient here (find_unused_parameters) still get the average.
            if len(self._seen) != len(self.params):
                for i, (_, p) in enumerate(self.params):
                    if i not in self._seen and (p.grad is None or p.grad.is_sparse or
                                                p.grad.data_ptr() != self.views[i].data_ptr()):
                        p.grad = self.views[i]
            for i in self._sparse:  # averaged dense, handed back sparse (see _on_grad)
                self.params[i][1].grad = self.views[i].to_sparse()
            self._sparse = set()  # (kept across the accumulating passes before a synchronized one)

    def _rescale_uneven(self):
        """After a step in which some ranks had joined: the C engine averaged over the ranks still training; a sum
        (op=Sum) or torch's divide_by_initial_world_size=True wants active/size of that."""
        if self.size <= 1 or not (self.op == _lib.SUM or self.divide_by_initial):
            return
        active = _c.cohort_ddp_active_ranks(self.ddp)
        if 0 < active < self.size:
            with torch.no_grad():
                for v in self.views:
                    if v is not None:
                        v.mul_(active / self.size)

    def join(self, what):
        """This rank's data has ended: shadows the other ranks' steps (zero gradients) until every rank has
        joined, then takes the parameters and buffers of the rank that trained the most steps. Returns it."""
        if self.ddp is None:
            raise RuntimeError(f"{what}: the engine has been closed")
        if self.step_open or self.in_backward:
            raise RuntimeError(f"{what}: called inside a step (after forward or backward and before the gradients "
                               f"were averaged): finish the step first")
        src = _c.cohort_ddp_join(self.ddp)
        if src < 0:
            # The engine has failed: finish only returns the status it keeps (and sets the message again).
            st = _c.cohort_ddp_finish(self.ddp)
            raise _core._error(st if st != _lib.OK else _lib.ERR_INTERNAL,
                               f"{what}: while this rank had joined (it shadows only the steps of "
                               f"{self.what}; a plain collective that another rank makes meanwhile is refused)")
        return src  # the C engine zeroed the gradients; the .grad views stay bound

    def _on_grad(self, i):
        if self.ddp is None:
            return
        if not self.in_backward:
            self.in_backward = True
            owner = self._owner()
            try:
                if owner is not None:
                    owner._backward_begins()
                if not self.step_open:
                    self.prepare()
            except BaseException:
                self.in_backward = False
                raise
            _c.cohort_ddp_span_begin(self.ddp, _lib.SPAN_BACKWARD)  # the timeline (COHORT_TIMELINE)
            _queue_callback(self._backward_ends)
        p = self.params[i][1]
        v = self.views[i]
        g = p.grad
        if g is not None and g.is_sparse:
            # A sparse gradient (nn.Embedding(sparse=True)) travels dense in its bucket, as Horovod's
            # sparse_as_dense; finish() hands it back sparse, which optimizers such as SparseAdam require.
            with torch.no_grad():
                v.copy_(g.to_dense())
            p.grad = v
            self._sparse.add(i)
        elif g is not None and g.data_ptr() != v.data_ptr():
            with torch.no_grad():
                v.copy_(g)
            p.grad = v
        self._seen.add(i)
        self.check(_c.cohort_ddp_mark_ready(self.ddp, i), f"gradient of '{self.params[i][0]}'")

    def _backward_ends(self):
        self.in_backward = False
        if self.ddp is not None:
            _c.cohort_ddp_span_end(self.ddp, _lib.SPAN_BACKWARD)
        owner = self._owner()
        if owner is not None:
            owner._backward_ends()

    def metric(self, name, value):
        """A value of this step for the engine's metrics (COHORT_METRICS; rank 0's go in the file)."""
        if self.ddp is not None:
            _c.cohort_ddp_metric(self.ddp, str(name).encode(), float(value))

    def span(self, kind):
        """A context manager: a span of the training loop in the timeline (forward or optimizer)."""
        engine = self

        class _Span:
            def __enter__(self):
                if engine.ddp is not None:
                    _c.cohort_ddp_span_begin(engine.ddp, kind)

            def __exit__(self, *exc):
                if engine.ddp is not None:
                    _c.cohort_ddp_span_end(engine.ddp, kind)
        return _Span()

    def stats(self):
        s = _lib.DdpStats()
        _c.cohort_ddp_get_stats(self.ddp, ctypes.byref(s))
        return {k: getattr(s, k) for k, _ in s._fields_}

    def close(self):
        """Gives every parameter its own copy of its gradient and destroys the engine (before the communicator)."""
        if self.ddp is None:
            return
        for h in self._hooks:
            h.remove()
        self._hooks, self._accs = [], []
        for i, (_, p) in enumerate(self.params):
            if (p.grad is not None and not p.grad.is_sparse and self.views[i] is not None
                    and p.grad.data_ptr() == self.views[i].data_ptr()):
                p.grad = self.views[i].clone()
        self.views = [None] * len(self.params)
        _c.cohort_ddp_destroy(self.ddp)
        self.ddp = None
        _core._engines.discard(self)

    def __del__(self):
        try:
            if _core.is_initialized():
                self.close()
        except Exception:
            pass


# ---- DistributedDataParallel ----


class DistributedDataParallel(torch.nn.Module):
    """torch.nn.parallel.DistributedDataParallel on cohort's engine (CPU parameters, float32).

    Construction broadcasts rank 0's parameters and buffers (after checking every rank has the same names and
    shapes). Each forward with grad enabled starts a step (broadcasting rank 0's buffers when broadcast_buffers);
    backward reduces the gradients in buckets of bucket_cap_mb, and when backward() returns every .grad holds the
    average over the ranks. Gradients live in the engine's buckets (gradient_as_bucket_view=True).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=True, static_graph=False, compression=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"DistributedDataParallel: expected a torch.nn.Module, got {type(module).__name__}")
        on_cuda = any(p.is_cuda for p in module.parameters())
        if device_ids and not on_cuda and any(str(d) != "cpu" for d in device_ids):
            raise ValueError("DistributedDataParallel: device_ids name a GPU but the module's parameters are on the "
                             "CPU; move the module first (module.to(device))")
        if bucket_cap_mb is None or bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        code = compression.ddp_code if compression is not None else _lib.COMPRESS_NONE
        # process_group (new_group, or a ProcessSet): the engine averages over those ranks, on their communicator.
        self.process_group = process_group
        comm = _core._comm_of(process_group, "DistributedDataParallel")
        self.joined_from = None  # after join(): the rank whose parameters and buffers every rank took
        self._throw_on_early = False  # inside join(throw_on_early_termination=True)
        self._cuda = on_cuda
        if on_cuda:  # buckets in device memory (_cuda_engine.py)
            from cohort.torch._cuda_engine import CudaEngine
            if compression is not None and compression.ddp_code != _lib.COMPRESS_NONE:
                raise ValueError("DistributedDataParallel: compression is not available for CUDA modules yet")
            self._engine = CudaEngine(comm, list(module.named_parameters()), list(module.named_buffers()), self,
                                      int(bucket_cap_mb * 1024 * 1024), broadcast_buffers, "DistributedDataParallel")
            return
        self._engine = _Engine(comm, list(module.named_parameters()), list(module.named_buffers()), self,
                               bucket_bytes=int(bucket_cap_mb * 1024 * 1024), find_unused=find_unused_parameters,
                               broadcast_buffers=broadcast_buffers, compression=code)

    def forward(self, *inputs, **kwargs):
        if self._cuda:
            if torch.is_grad_enabled():
                self._engine.prepare()
            return self.module(*inputs, **kwargs)
        if torch.is_grad_enabled() and not self._engine.step_open:
            self._engine.prepare()
            if self._throw_on_early and _c.cohort_ddp_active_ranks(self._engine.ddp) < self._engine.size:
                self._engine.step_open = False  # nothing was marked ready: the next prepare may start afresh
                raise RuntimeError(_EARLY_TERMINATION)
        with self._engine.span(_lib.SPAN_FORWARD):
            return self.module(*inputs, **kwargs)

    def metric(self, name, value):
        """Adds name=value (the loss, the learning rate, img/s) to this step's line of the engine's metrics
        (COHORT_METRICS=path: one JSON line per step with every rank's times; docs/training.md, "Metrics"). Call it
        before backward() ends the step; rank 0's values are written."""
        if self._cuda:
            return
        self._engine.metric(name, value)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate into .grad; the first one after the block averages the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        self._engine.set_sync(False)
        try:
            yield
        finally:
            self.require_backward_grad_sync = old
            self._engine.set_sync(old)

    def _backward_begins(self):
        pass

    def _backward_ends(self):
        self._engine.finish()

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """torch's DistributedDataParallel.join(): ranks may run out of batches at different steps inside.

        A rank whose loop ends shadows the other ranks' steps (with zero gradients) until every rank's loop has
        ended; then every rank takes the parameters and buffers of the rank that trained the most steps.
        divide_by_initial_world_size=True: the gradients are the sum over the ranks still training divided by the
        whole world (torch's default); False: divided by the ranks still training. throw_on_early_termination=True:
        as soon as one rank's loop ends, every rank raises RuntimeError (in its next forward, or at the end of the
        block), as torch does.
        """
        if not enable:
            yield
            return
        if self._cuda:
            raise NotImplementedError("DistributedDataParallel.join: not available for CUDA modules yet (uneven "
                                      "inputs run on the CPU engine)")
        engine = self._engine
        engine.divide_by_initial = bool(divide_by_initial_world_size)
        self._throw_on_early = bool(throw_on_early_termination)
        try:
            yield
            if self._throw_on_early:
                self._exhausted()
            else:
                self.joined_from = _join(engine, "DistributedDataParallel.join")
        finally:
            engine.divide_by_initial = False
            self._throw_on_early = False

    def _exhausted(self):
        """throw_on_early_termination: this rank's data ended. It takes part in the others' next step as far as
        they go before they raise (the count of the ranks still training, adding 0, and the buffer broadcasts
        that cohort_ddp_prepare makes after it), then raises too. When every rank's data ended at the same step
        the count is 0 and nobody raises."""
        engine = self._engine
        if engine.size == 1:
            return
        if engine.step_open or engine.in_backward:
            raise RuntimeError("DistributedDataParallel.join: the loop ended inside a step (after forward and "
                               "before backward)")
        comm = engine._comm
        count = np.zeros(1, dtype=np.int32)
        _core._check(_c.cohort_allreduce(comm, count.ctypes.data, count.ctypes.data, 1, _lib.I32, _lib.SUM),
                     "DistributedDataParallel.join: counting the ranks still training")
        if count[0] == 0:
            return
        if engine.broadcast_buffers:
            for name, b in engine.buffers:
                _core._check(_c.cohort_broadcast(comm, b.data_ptr(), b.numel() * b.element_size(), _lib.U8, 0),
                             f"DistributedDataParallel.join: broadcasting buffer '{name}'")
        raise RuntimeError(_EARLY_TERMINATION)

    def ddp_stats(self):
        """The engine's statistics (cohort_ddp_stats): steps, compute_s, comm_s, exposed_comm_s, ..."""
        if not hasattr(self._engine, "stats"):
            raise NotImplementedError("DistributedDataParallel.ddp_stats(): not available for a module on CUDA yet "
                                      "(the C engine's statistics cover CPU modules; docs/gpu.md)")
        return self._engine.stats()

    def close(self):
        self._engine.close()


# ---- join ----

_EARLY_TERMINATION = ("DistributedDataParallel.join(throw_on_early_termination=True): at least one rank exhausted "
                      "its inputs; raised on every rank")



def _join(engine, what):
    """Joins engine (or, with None, the one live engine of this process). With several live engines a joined rank
    could not know in which order the others step them: the job is aborted (so that no rank waits), and a
    ValueError raised."""
    if engine is None and any(e.ddp is not None for e in list(_core._engines)):
        gc.collect()  # optimizers the script dropped may linger in reference cycles: they are no engines of its
    live = [e for e in list(_core._engines) if e.ddp is not None]
    if engine is None and len(live) == 1:
        engine = live[0]
    others = [e for e in live if e is not engine]
    if others:
        names = ", ".join(sorted(e.what for e in live))
        msg = (f"{what}: {len(live)} DistributedOptimizer/DistributedDataParallel engines are alive ({names}); "
               f"join supports one (drop the others first: del them, or let them go out of scope)")
        _c.cohort_comm_abort(_core._get_comm(), msg.encode())
        raise ValueError(msg)
    if engine is None:
        # No engine to shadow: the collectives' join (cohort_join). Until every rank has joined, this rank adds zeros
        # to the others' allreduces and reduce-scatters (Horovod's join), and their other calls raise naming it;
        # returns the rank that joined last (ties: the highest), the same on every rank.
        # The named calls run on a communicator of their own (_named.py): the runner joins that one meanwhile.
        m = _named.matcher(None, what)
        named = m.join(what) if m is not None else None
        last = ctypes.c_int(-1)
        st = _c.cohort_join(_core._get_comm(), ctypes.byref(last))
        if named is not None and named.wait_turn() == "failed" and st == _lib.OK:
            raise named.error
        _core._check(st, what)
        # join() returns the rank that joined last: the main join counts the calls without a name each rank joined
        # (fewest: last; ties: the highest); where named calls ran while a rank had joined, those counts miss them,
        # and rank 0's coordinator, which received the joins, names the one that came last.
        return named.inner if named is not None and named.inner >= 0 else last.value
    if getattr(engine._owner(), "_pending", False):  # a DistributedOptimizer between backward() and step()
        raise RuntimeError(f"{what}: backward() ran but step() (or synchronize()) did not: finish the step first")
    return engine.join(what)


def join(device=-1):
    """Horovod's hvd.join(): this rank's data has ended. With a DistributedOptimizer (or DistributedDataParallel)
    alive, it keeps taking part in the other ranks' steps with zero gradients, the others averaging over the ranks
    still training, until every rank has called join(); then every rank takes the parameters and buffers of the rank
    that trained the most steps. Without one, it takes part in the others' allreduces and reduce-scatters with zeros
    (an average still divides by the whole world, as in Horovod), and their other collectives raise MismatchError
    naming the joined ranks. join() returns the rank that joined last (ties: the highest), the same on every rank.
    device is ignored (CPU)."""
    return _join(None, "join")


# ---- DistributedOptimizer ----


def _checked_names(param_groups, named_parameters, backward_passes_per_step):
    """The (name, parameter) pairs of an optimizer's parameters that both DistributedOptimizers work on, checked before
    anything collective (Horovod refuses these before init() is even needed); default names param.GROUP.INDEX."""
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError(f"DistributedOptimizer: backward_passes_per_step must be an int >= 1, got "
                         f"{backward_passes_per_step!r}")
    all_params = [p for g in param_groups for p in g["params"]]
    if named_parameters is not None:
        named = list(named_parameters)
        if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
            raise ValueError("DistributedOptimizer: named_parameters must be (name, parameter) pairs, as "
                             "model.named_parameters() gives")
        ids = {id(p) for _, p in named}
        missing = [p for p in all_params if id(p) not in ids]
        if missing:
            raise ValueError(f"DistributedOptimizer: named_parameters lacks {len(missing)} of the optimizer's "
                             f"parameters")
        mine = {id(p) for p in all_params}
        named = [(n, p) for n, p in named if id(p) in mine]
        seen = set()
        for n, _ in named:  # before anything collective: Horovod refuses these before init() is even needed
            if n in seen:
                raise ValueError(f"DistributedOptimizer: parameter names must be unique: '{n}' appears more than "
                                 f"once in named_parameters")
            seen.add(n)
    else:
        named = [(f"param.{i}.{j}", p) for i, g in enumerate(param_groups) for j, p in enumerate(g["params"])]
    return named


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op, process_set=None):
        super(self.__class__, self).__init__(params)
        compression = compression or Compression.none
        if op not in (_lib.AVG, _lib.SUM):
            raise ValueError("DistributedOptimizer: op must be Average or Sum (Adasum is not supported)")
        if op == _lib.SUM and compression.ddp_code != _lib.COMPRESS_NONE:
            raise ValueError("DistributedOptimizer: compression is implemented for op=Average only")
        named = _checked_names(self.param_groups, named_parameters, backward_passes_per_step)
        # Horovod's map from each parameter to its name (the names every rank must agree on).
        self._parameter_names = {p: n for n, p in named}
        self.backward_passes_per_step = backward_passes_per_step
        self._passes = 0
        self._pending = False
        self._should_synchronize = True
        self._synchronized = False
        self.process_set = process_set
        # A rank outside process_set averages nothing: it steps on its own gradients, as in Horovod.
        self._engine = None
        if process_set is None or process_set.included():
            self._engine = _Engine(_core._comm_of(process_set, "DistributedOptimizer"), named, [], self,
                                   find_unused=True, broadcast_buffers=False, compression=compression.ddp_code,
                                   op=op, what="DistributedOptimizer")

    def _backward_begins(self):
        if self._pending:
            raise RuntimeError("DistributedOptimizer: gradients were computed more than backward_passes_per_step "
                               "times before step() or synchronize(); raise backward_passes_per_step to "
                               "accumulate")
        self._passes += 1
        self._engine.set_sync(self._passes % self.backward_passes_per_step == 0)

    def _backward_ends(self):
        if self._engine.sync:
            self._pending = True
        else:
            self._engine.finish()  # accumulating: nothing to wait for

    def synchronize(self):
        """Waits for the averaged gradients (for clipping before step(); then step() inside skip_synchronize())."""
        if self._pending:
            self._pending = False
            self._engine.finish()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                              "your code.")  # Horovod's words: scripts and its tests look for them
            self.synchronize()
        self._synchronized = False
        if self._engine is None:
            return super(self.__class__, self).step(closure)
        with self._engine.span(_lib.SPAN_OPTIMIZER):
            return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._pending:
            raise AssertionError("DistributedOptimizer: zero_grad() was called after backward() but before step() "
                                 "or synchronize(): the gradients are still being averaged")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def ddp_stats(self):
        if self._engine is None:
            raise RuntimeError("DistributedOptimizer: this rank is not in the optimizer's process set: it averages "
                               "nothing and has no engine statistics")
        return self._engine.stats()


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Horovod's optimizer for op=Adasum: each rank steps the wrapped optimizer on its own gradients, and the ranks
    combine the resulting changes of the parameters (the deltas), each parameter's with its own Adasum coefficients;
    every rank then takes its parameters from the start of the step plus the combined delta. The gradients are never
    averaged: Adasum sums orthogonal updates and averages parallel ones (_adasum.py). The deltas are combined in
    step() (Horovod starts each as its gradient is ready); the result is the same."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step):
        super(self.__class__, self).__init__(params)
        named = _checked_names(self.param_groups, named_parameters, backward_passes_per_step)
        self._parameter_names = {p: n for n, p in named}
        self._compression = compression or Compression.none
        self.backward_passes_per_step = backward_passes_per_step
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._passes = {p: 0 for p in self._params}
        self._hooks = [p.register_hook(self._make_hook(p)) for p in self._params]
        self._comm = _core._comm_of(None, "DistributedOptimizer")
        from cohort.torch import _adasum
        _adasum.check(self._comm, self._params, "DistributedOptimizer(op=Adasum)")

    def _make_hook(self, p):
        def hook(grad):
            if self._passes[p] >= self.backward_passes_per_step:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                     "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            self._passes[p] += 1
            return grad
        return hook

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes

    def synchronize(self):
        pass  # the deltas are combined in step()

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")

    def step(self, closure=None):
        from cohort.torch import _adasum_start
        loss = closure() if closure is not None else None
        with torch.no_grad():
            start = [p.detach().clone() for p in self._params]
            super(self.__class__, self).step()
            deltas = [p.detach() - s for p, s in zip(self._params, start)]
            combined = _adasum_start(self._comm, deltas, [torch.empty_like(d) for d in deltas], 1.0, 1.0,
                                     self._compression, "DistributedOptimizer(op=Adasum)")
            for p, s, d in zip(self._params, start, combined):
                p.copy_(s + d)
        for p in self._passes:
            self._passes[p] = 0
        return loss


def DistributedOptimizer(optimizer, named_parameters=None, compression=None, backward_passes_per_step=1, op=None,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=None):
    """Horovod's DistributedOptimizer: wraps a torch optimizer so that backward averages the gradients over the
    ranks (in the engine's buckets, as they are produced) and step() waits for them first.

    Returns an instance of a subclass of optimizer's class over the same param_groups (its state starts empty, as
    in Horovod). Like Horovod: call broadcast_parameters and broadcast_optimizer_state after it.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"DistributedOptimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
    # sparse_as_dense: sparse gradients travel dense in the engine's buckets either way, and come back sparse.
    if gradient_predivide_factor != 1.0 or num_groups or groups:
        raise ValueError("DistributedOptimizer: gradient_predivide_factor, num_groups and groups are not supported")
    if process_set is _core.global_process_set:
        process_set = None
    if process_set is not None:
        if not isinstance(process_set, _core.ProcessSet):
            raise TypeError(f"DistributedOptimizer: process_set must be a ProcessSet (add_process_set), got "
                            f"{type(process_set).__name__}")
        if process_set.process_set_id is None:
            raise ValueError(f"DistributedOptimizer: {process_set} has not been added (add_process_set) or was "
                             f"removed")
    if op == _core.Adasum and type(op) is int and _core.size() > 1:
        if process_set is not None:
            raise _core.AdasumNotImplemented("DistributedOptimizer: op=Adasum over a process set (Horovod: 'Adasum "
                                             "does not support non-global process sets yet')")
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
    if op == _core.Adasum and type(op) is int:
        op = _lib.SUM  # one rank: Adasum of one delta is the delta itself, plain stepping (as in Horovod)
    op = _core._op(op)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op, process_set)
