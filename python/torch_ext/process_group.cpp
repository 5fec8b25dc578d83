/*
 * process_group.cpp: the C++ half of torch.distributed's backend "cohort" (the module cohort.torch._c10d; the Python
 * half is python/cohort/torch/_backend.py, which works without this one and falls back to itself where it is absent).
 *
 * Why C++ at all: a blocking dist.all_reduce of 4 KiB on the Python backend spent about 15 us of a 20 us call (one
 * rank) in Python between torch's front end and the C library: the argument checks, the ctypes call, the Work. Here
 * the same call runs from torch's front end straight into C: ProcessGroupCohortBase::allreduce, bound as the Python
 * method `allreduce`, checks the one tensor, sees that its caller waits at once (see blocking_caller) and that no
 * Python-held operation is queued before it, drops the GIL and calls cohort_allreduce() (after cohort_tag_next_call()
 * with the shape of a tensor of several dimensions) through the function pointers the Python half hands over (no link
 * against libcohort: the Python package finds the library once, for both). Every other case goes to the Python method
 * `_allreduce_py`, unchanged.
 *
 * torch's own trampoline (c10d::PyProcessGroup) looks a Python override up as a c10d::ProcessGroup, and instances
 * of a Python subclass of this class are registered as ProcessGroupCohortBase: the C++ callers of the methods that
 * torch routes through C++ (DDP's reducer, torch's op dispatcher: allreduce, broadcast, allgather, reduce_scatter,
 * barrier, send, recv) are forwarded here instead, by the same names.
 *
 * Written against torch 1.13's c10d API (ProcessGroup implements the operations; torch 2 moved them to
 * c10d::Backend): CMake builds it only against a torch 1.13 (python/CMakeLists.txt), and the Python half refuses it
 * under another torch than the one it was built for.
 */
#include <Python.h>
#include <frameobject.h>

#include <torch/csrc/distributed/c10d/PyProcessGroup.hpp>
#include <torch/version.h>

#include <cstdint>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

/* cohort_allreduce(comm, send, recv, count, dtype, op), include/cohort/cohort.h. */
using allreduce_fn = int (*)(void *, const void *, void *, size_t, int, int);
/* cohort_tag_next_call(tag), include/cohort/cohort.h. */
using tag_fn = void (*)(uint64_t);

/* The tensor's shape for the ranks to compare with the rest of the call (FNV-1a over the dims, one step a dim; 0 for
 * at most one dim, whose count is its shape): the Python half's _shape_tag, which must give the same number, since
 * one rank's call may come this way and another's through Python. */
uint64_t shape_tag(const at::Tensor &t) {
  if (t.dim() <= 1) return 0;
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (int64_t d : t.sizes())
    h = (h ^ static_cast<uint64_t>(d)) * UINT64_C(0x100000001b3);
  return h ? h : 1;
}

/* cohort_dtype's codes (include/cohort/cohort.h; python/cohort/_lib.py): -1 where the Python half decides. */
int dtype_code(at::ScalarType t) {
  switch (t) {
  case at::kFloat:
    return 0;
  case at::kDouble:
    return 1;
  case at::kHalf:
    return 2;
  case at::kBFloat16:
    return 3;
  case at::kInt:
    return 4;
  case at::kLong:
    return 5;
  case at::kByte:
    return 6;
  case at::kChar:
    return 7;
  case at::kShort:
    return 8;
  case at::kBool:
    return 9;
  default:
    return -1;
  }
}

/* cohort_op's codes: -1 where the Python half decides (PREMUL_SUM: it refuses it with its own message). */
int op_code(c10d::ReduceOp::RedOpType op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return 0;
  case c10d::ReduceOp::AVG:
    return 1;
  case c10d::ReduceOp::MIN:
    return 2;
  case c10d::ReduceOp::MAX:
    return 3;
  case c10d::ReduceOp::PRODUCT:
    return 4;
  case c10d::ReduceOp::BAND:
    return 5;
  case c10d::ReduceOp::BOR:
    return 6;
  case c10d::ReduceOp::BXOR:
    return 7;
  default:
    return -1;
  }
}

/* What the Python half hands over once (set_python_state): the code objects of torch's Python functions whose
 * frames read `if async_op: return work else: work.wait()`, and the thread-local whose `depth` is above zero inside
 * a cohort future's callbacks. */
std::vector<PyObject *> blocking_codes;
PyObject *callback_tls = nullptr;

/* True when the Python frame that called us is one of torch's front-end functions called with async_op=False: it
 * waits for the Work as soon as it has it, so the operation may run on this thread (the same test as the Python
 * half's _blocking). */
bool blocking_caller() {
  PyFrameObject *frame = PyEval_GetFrame(); /* borrowed: the frame running the call to this C++ method */
  if (!frame) return false;
  PyCodeObject *code = PyFrame_GetCode(frame);
  bool known = false;
  for (PyObject *c : blocking_codes)
    known = known || c == reinterpret_cast<PyObject *>(code);
  Py_DECREF(code);
  if (!known) return false;
  PyObject *locals = PyObject_GetAttrString(reinterpret_cast<PyObject *>(frame), "f_locals");
  if (!locals) {
    PyErr_Clear();
    return false;
  }
  PyObject *async_op = PyMapping_Check(locals) ? PyMapping_GetItemString(locals, "async_op") : nullptr;
  if (!async_op) PyErr_Clear();
  bool blocking = async_op == Py_False;
  Py_XDECREF(async_op);
  Py_DECREF(locals);
  return blocking;
}

/* Inside one of a cohort future's callbacks (the Python half's _tls.depth > 0). */
bool inside_callback() {
  if (!callback_tls) return false;
  PyObject *depth = PyObject_GetAttrString(callback_tls, "depth");
  if (!depth) {
    PyErr_Clear();
    return false;
  }
  bool inside = PyLong_Check(depth) && PyLong_AsLong(depth) > 0;
  Py_DECREF(depth);
  return inside;
}

/* An operation that completed on the caller's thread before its Work was made. */
class DoneWork : public c10d::Work {
public:
  explicit DoneWork(std::vector<at::Tensor> result)
      : c10d::Work(-1, c10d::OpType::ALLREDUCE), result_(std::move(result)) {
    finish();
  }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(result_));
    return future;
  }

private:
  std::vector<at::Tensor> result_;
};

class ProcessGroupCohortBase : public c10d::PyProcessGroup {
public:
  using c10d::PyProcessGroup::PyProcessGroup;

  void *comm = nullptr;
  allreduce_fn allreduce_c = nullptr;
  tag_fn tag_c = nullptr;

  const std::string getBackendName() const override { return "cohort"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override {
    return forward("_allreduce_py", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override {
    return forward("broadcast", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override {
    return forward("allgather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override {
    return forward("reduce_scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override { return forward("barrier", opts); }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override {
    return forward("send", tensors, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override {
    return forward("recv", tensors, src, tag);
  }

  /* The Python method `allreduce`: see the header comment. */
  static py::object allreduce_entry(py::object self, std::vector<at::Tensor> &tensors,
                                    const c10d::AllreduceOptions &opts) {
    auto *pg = self.cast<ProcessGroupCohortBase *>();
    int dtype = -1, op = -1;
    if (pg->comm && pg->allreduce_c && tensors.size() == 1) {
      const at::Tensor &t = tensors[0];
      if (t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous()) dtype = dtype_code(t.scalar_type());
      op = op_code(opts.reduceOp.op_);
    }
    if (dtype >= 0 && op >= 0 && blocking_caller() && queue_empty(self) && !inside_callback()) {
      const at::Tensor &t = tensors[0];
      void *p = t.data_ptr();
      size_t n = static_cast<size_t>(t.numel());
      uint64_t tag = shape_tag(t);
      int status;
      {
        py::gil_scoped_release unlocked;
        if (tag && pg->tag_c) pg->tag_c(tag); /* on this thread, right before its call: tags are per thread */
        status = pg->allreduce_c(pg->comm, p, p, n, dtype, op);
      }
      if (status != 0) return self.attr("_fast_failed")(status, "all_reduce", t); /* raises cohort's error */
      return py::cast(c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<DoneWork>(tensors)));
    }
    return self.attr("_allreduce_py")(tensors, opts);
  }

private:
  /* Nothing held behind a Python async operation's callbacks, and the group open (the Python half's _issue). */
  static bool queue_empty(const py::object &self) {
    py::object barriers = self.attr("_barriers"), held = self.attr("_held"), closed = self.attr("_closed");
    return barriers.cast<long>() == 0 && py::len(held) == 0 && !closed.cast<bool>();
  }

  template <typename... Args> c10::intrusive_ptr<c10d::Work> forward(const char *name, Args &...args) {
    py::gil_scoped_acquire gil;
    py::function method = py::get_override(static_cast<const ProcessGroupCohortBase *>(this), name);
    TORCH_CHECK(method, "cohort backend: ", name, " is not implemented by this process group");
    return method(args...).template cast<c10::intrusive_ptr<c10d::Work>>();
  }
};

} // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "torch.distributed's backend \"cohort\": the C++ half (python/torch_ext/process_group.cpp)";
  m.attr("TORCH_VERSION") = TORCH_VERSION;
  py::module::import("torch._C._distributed_c10d");
  py::class_<ProcessGroupCohortBase, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupCohortBase>>(
      m, "ProcessGroupCohortBase")
      .def(py::init<int, int>())
      .def("_bind_comm",
           [](ProcessGroupCohortBase &pg, uintptr_t comm, uintptr_t allreduce, uintptr_t tag) {
             pg.comm = reinterpret_cast<void *>(comm);
             pg.allreduce_c = reinterpret_cast<allreduce_fn>(allreduce);
             pg.tag_c = reinterpret_cast<tag_fn>(tag);
           })
      .def("allreduce", &ProcessGroupCohortBase::allreduce_entry, py::arg("tensors"),
           py::arg("opts") = c10d::AllreduceOptions());
  m.def("set_python_state", [](py::list codes, py::object tls) {
    for (PyObject *c : blocking_codes)
      Py_DECREF(c);
    blocking_codes.clear();
    for (py::handle c : codes)
      blocking_codes.push_back(c.inc_ref().ptr());
    Py_XDECREF(callback_tls);
    callback_tls = tls.inc_ref().ptr();
  });
}
