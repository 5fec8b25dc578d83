"""DistributedDataParallel for a module on a CUDA device: gradient buckets in device memory (docs/gpu.md).

The buckets are flat tensors on the module's device and every parameter's .grad is a view into one of them (torch's
gradient_as_bucket_view=True). Buckets follow the reverse order of the parameters (the order backward produces them),
the first at most 1 MiB so that its allreduce starts early. When autograd has accumulated the last gradient of a
bucket, a hook starts the bucket's average over the ranks with cohort_iallreduce_stream on torch's current stream:
the library reads the bucket after the work already queued there (the gradients just computed) and reduces it on its
device path (cuda-ipc, nccl or staged) on its progress thread while backward computes the earlier layers. An autograd
callback at the end of backward waits for every bucket; the averages are then in place for the optimizer.
"""
import ctypes
import hashlib
import weakref

import torch

import cohort as _core
from cohort import _lib
from cohort._lib import lib as _c

_DTYPES = {torch.float32: _lib.F32, torch.float64: _lib.F64, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}
_FIRST_BUCKET_BYTES = 1 << 20


class _Bucket:
    __slots__ = ("flat", "members", "pending", "work", "code")

    def __init__(self, flat, members, code):
        self.flat, self.members, self.code = flat, members, code
        self.pending = len(members)
        self.work = None


class CudaEngine:
    """The buckets of one module's CUDA parameters, reduced over comm (the job's communicator, or a process set's)."""

    def __init__(self, comm, named_params, named_buffers, owner, bucket_bytes, broadcast_buffers, what):
        self._comm = comm
        self.what = what
        self._owner = weakref.ref(owner)
        self.params = [(n, p) for n, p in named_params if p.requires_grad]
        self.buffers = list(named_buffers)
        self.broadcast_buffers = broadcast_buffers
        devices = {p.device for _, p in self.params} | {b.device for _, b in self.buffers}
        if len(devices) != 1:
            raise ValueError(f"{what}: the module's tensors are on several devices ({sorted(map(str, devices))}); "
                             f"one device per rank")
        self.device = devices.pop()
        for name, p in self.params:
            if p.dtype not in _DTYPES:
                raise TypeError(f"{what}: parameter '{name}' has dtype {p.dtype}; the CUDA buckets take float32, "
                                f"float64, float16 and bfloat16")
        self._check_same_module()
        with torch.no_grad():
            for _, t in self.params + self.buffers:  # every rank starts from rank 0's state
                self._broadcast(t)
        self.buckets = []
        self.bucket_of = {}
        self.views = {}  # each parameter's .grad: its view into its bucket
        self._seen = set()  # the parameters that got a gradient since the last synchronized backward
        self._make_buckets(bucket_bytes)
        self.sync = True
        self.in_backward = False
        self._hooks, self._accs = [], []
        me = weakref.ref(self)
        for i, (_, p) in enumerate(self.params):
            def hook(*_args, i=i):
                e = me()
                if e is not None:
                    e._on_grad(i)
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self._hooks.append(p.register_post_accumulate_grad_hook(hook))
            else:
                with torch.enable_grad():
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc.register_hook(hook))
                self._accs.append(acc)

    def _check_same_module(self):
        """Every rank must wrap the same parameters (names, shapes, dtypes, in order): compared through a digest."""
        text = ";".join(f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in self.params + self.buffers)
        digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")
        import numpy as np
        lo = np.array([digest], dtype=np.int64)
        hi = lo.copy()
        _core._check(_c.cohort_allreduce(self._comm, lo.ctypes.data, lo.ctypes.data, 1, _lib.I64, _lib.MIN), self.what)
        _core._check(_c.cohort_allreduce(self._comm, hi.ctypes.data, hi.ctypes.data, 1, _lib.I64, _lib.MAX), self.what)
        if lo[0] != hi[0]:
            raise ValueError(f"{self.what}: the ranks wrap different modules (parameter names, shapes or dtypes "
                             f"differ); this rank has {len(self.params)} parameters and {len(self.buffers)} buffers")

    def _broadcast(self, t):
        flat = t.data if t.is_contiguous() else t.data.contiguous()
        code = _DTYPES.get(flat.dtype)
        count = flat.numel()
        if code is None:  # integer buffers (e.g. num_batches_tracked): as bytes
            code, count = _lib.U8, flat.numel() * flat.element_size()
        stream = ctypes.c_void_p(torch.cuda.current_stream(flat.device).cuda_stream)
        _core._check(_c.cohort_broadcast_stream(self._comm, flat.data_ptr(), count, code, 0, stream), self.what)
        if flat is not t.data:
            t.data.copy_(flat)

    def _make_buckets(self, bucket_bytes):
        order = list(range(len(self.params)))[::-1]  # backward produces the last layers' gradients first
        groups, cur, cur_bytes, cur_dtype = [], [], 0, None
        cap = _FIRST_BUCKET_BYTES
        for i in order:
            p = self.params[i][1]
            nbytes = p.numel() * p.element_size()
            if cur and (p.dtype != cur_dtype or cur_bytes + nbytes > cap):
                groups.append(cur)
                cur, cur_bytes, cap = [], 0, bucket_bytes
            cur.append(i)
            cur_bytes += nbytes
            cur_dtype = p.dtype
        if cur:
            groups.append(cur)
        with torch.no_grad():
            for members in groups:
                dtype = self.params[members[0]][1].dtype
                flat = torch.zeros(sum(self.params[i][1].numel() for i in members), dtype=dtype, device=self.device)
                off = 0
                b = _Bucket(flat, members, _DTYPES[dtype])
                for i in members:
                    p = self.params[i][1]
                    view = flat[off:off + p.numel()].view(p.shape)
                    if p.grad is not None:
                        view.copy_(p.grad)
                    p.grad = view
                    self.views[i] = view
                    off += p.numel()
                    self.bucket_of[i] = len(self.buckets)
                self.buckets.append(b)

    def _start(self, b):
        work = ctypes.c_void_p()
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        ptr = b.flat.data_ptr()
        _core._check(_c.cohort_iallreduce_stream(self._comm, ptr, ptr, b.flat.numel(), b.code, _lib.AVG, stream,
                                                 ctypes.byref(work)), self.what)
        b.work = work

    def _on_grad(self, i):
        if not self.in_backward:
            self.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ends)
        b = self.buckets[self.bucket_of[i]]
        p = self.params[i][1]
        flat_view_ptr = b.flat.data_ptr()
        g = p.grad
        if g is not None and not (flat_view_ptr <= g.data_ptr() < flat_view_ptr + b.flat.numel() * b.flat.element_size()):
            with torch.no_grad():  # autograd made a fresh gradient (set_to_none, or out of place): into the bucket
                view = self.views[i]
                view.copy_(g)
                p.grad = view
        self._seen.add(i)
        b.pending -= 1
        if b.pending == 0 and self.sync:
            self._start(b)

    def _backward_ends(self):
        self.in_backward = False
        first_error = None
        if self.sync:
            # A parameter that got no gradient here (unused on this rank) adds zero to the average, and its .grad is
            # the average afterwards, as for the others (torch DDP's find_unused_parameters, and the CPU engine). After
            # zero_grad(set_to_none=True), torch 2's default, its part of the bucket held the last step's average:
            # that was averaged in, and the rank kept .grad None while the others stepped the parameter.
            if len(self._seen) != len(self.params):
                with torch.no_grad():
                    for i, (_, p) in enumerate(self.params):
                        if i in self._seen:
                            continue
                        view = self.views[i]
                        if p.grad is None:
                            view.zero_()
                        elif p.grad.data_ptr() != view.data_ptr():
                            view.copy_(p.grad)
                        p.grad = view
            self._seen = set()
            for b in self.buckets:  # unused parameters: their buckets go now (the same buckets on every rank)
                if b.work is None:
                    self._start(b)
            for b in self.buckets:
                st = _c.cohort_work_wait(b.work)
                if st != _lib.OK and first_error is None:
                    first_error = _core._error(st, self.what)
                _c.cohort_work_free(b.work)
                b.work = None
        for b in self.buckets:
            b.pending = len(b.members)
        if first_error is not None:
            raise first_error

    def set_sync(self, sync):
        self.sync = bool(sync)

    def prepare(self):
        if self.broadcast_buffers:
            with torch.no_grad():
                for _, t in self.buffers:
                    self._broadcast(t)

    def close(self):
        for h in self._hooks:
            h.remove()
        self._hooks, self._accs = [], []
