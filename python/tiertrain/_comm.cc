// tiertrain._comm: the collectives (comm/comm.h) for Python, in mpi4py's style: upper-case methods on buffers
// (numpy arrays or anything with the buffer protocol, and DLPack tensors on the CPU; with the nccl backend, DLPack
// tensors on the GPU, e.g. torch CUDA tensors), without copies. Arguments are converted with the GIL held; only the
// communication itself runs without it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "comm/comm.h"
#include "core/log.h"

namespace py = pybind11;
using tt::comm::Communicator;
using tt::comm::DType;
using tt::comm::Op;

namespace {

// Python exceptions by what went wrong (tiertrain.comm.CommError is the base of all).
PyObject* g_comm_error = nullptr;
PyObject* g_timeout_error = nullptr;
PyObject* g_mismatch_error = nullptr;
PyObject* g_aborted_error = nullptr;

[[noreturn]] void raise(const tt::Status& s) {
  PyObject* type = g_comm_error;
  switch (s.code()) {
    case tt::StatusCode::kDeadlineExceeded: type = g_timeout_error; break;
    case tt::StatusCode::kInvalidArgument: type = g_mismatch_error; break;
    case tt::StatusCode::kAborted: type = g_aborted_error; break;
    default: break;
  }
  PyErr_SetString(type, s.to_string().c_str());
  throw py::error_already_set();
}

void check(const tt::Status& s) {
  if (!s.is_ok()) raise(s);
}

// ---- DLPack (the CPU part of the protocol we need: https://dmlc.github.io/dlpack) ----------------------------------
struct DLDevice {
  int32_t device_type;  // 1: CPU, 2: CUDA, 13: CUDA managed
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// A contiguous host buffer, from the buffer protocol or DLPack, kept alive (and for DLPack released) by this object.
struct Buf {
  void* ptr = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kF32;
  bool in_place = false;
  // Buffer protocol: the exporter's view, held (and released) here. A raw Py_buffer, not py::buffer_info, which
  // copies shape, strides and format into allocations on every call; on the heap, because some exporters point
  // shape or strides into the view itself (bytearray, array.array), and a Buf moves.
  std::unique_ptr<Py_buffer> view;
  py::object capsule;                // DLPack
  DLManagedTensor* managed = nullptr;
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf(Buf&& o) noexcept { take(o); }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      drop();
      take(o);
    }
    return *this;
  }
  ~Buf() { drop(); }

 private:
  void take(Buf& o) noexcept {
    ptr = o.ptr;
    count = o.count;
    dtype = o.dtype;
    in_place = o.in_place;
    view = std::move(o.view);
    capsule = std::move(o.capsule);
    managed = o.managed;
    o.managed = nullptr;
  }
  void drop() noexcept {  // (with the GIL, as every Buf is made and dropped)
    if (managed && managed->deleter) managed->deleter(managed);
    managed = nullptr;
    if (view) PyBuffer_Release(view.get());
    view.reset();
  }
};

PyObject* g_in_place = nullptr;  // owned for the life of the process (no destructor after Python's end)

DType dtype_of_format(const char* format, size_t itemsize, const char* what) {
  const std::string_view fmt = format != nullptr ? format : "B";  // (no format: unsigned bytes)
  // Native byte order only ("<f" on this little-endian host, "=f", "@f" or "f"); ">f4" would be summed byte-swapped.
  if (!fmt.empty() && (fmt.front() == '>' || fmt.front() == '!'))
    throw py::type_error(std::string(what) + ": big-endian elements ('" + std::string(fmt) +
                         "'); convert with astype(native)");
  const char c = fmt.empty() ? '?' : fmt.back();
  if (c == 'f' && itemsize == 4) return DType::kF32;
  if (c == 'd' && itemsize == 8) return DType::kF64;
  if (c == 'e' && itemsize == 2) return DType::kF16;
  if ((c == 'i' || c == 'l' || c == 'q') && itemsize == 4) return DType::kI32;
  if ((c == 'i' || c == 'l' || c == 'q') && itemsize == 8) return DType::kI64;
  throw py::type_error(std::string(what) + ": element type '" + std::string(fmt) + "' (" + std::to_string(itemsize) +
                       " bytes) is not one of float32, float64, float16, int32, int64 (bfloat16: pass a DLPack "
                       "tensor)");
}

// writable: the receive side; gpu: the communicator takes GPU memory (nccl), and DLPack tensors on a CUDA device
// are accepted (their producer is asked to order its work before the legacy default stream, which the nccl
// backend's blocking calls follow). Raises TypeError/ValueError for what cannot be a buffer here.
Buf to_buf(const py::object& o, bool writable, const char* what, bool gpu = false) {
  Buf b;
  if (o.ptr() == g_in_place) {
    if (writable) throw py::type_error(std::string(what) + ": IN_PLACE goes in the send buffer's place, not here");
    b.in_place = true;
    return b;
  }
  // The buffer protocol first (a C slot): numpy's arrays have __dlpack__ too, and looking it up costs a bound method.
  if (!PyObject_CheckBuffer(o.ptr()) && py::hasattr(o, "__dlpack__")) {
    int device_type = 1;
    if (py::hasattr(o, "__dlpack_device__")) device_type = o.attr("__dlpack_device__")()[py::int_(0)].cast<int>();
    const bool cuda = device_type == 2 || device_type == 13;
    if (cuda && !gpu)
      throw py::value_error(std::string(what) + ": a CUDA tensor; this communicator's backend takes host memory "
                            "(start the job with TIERTRAIN_COMM_BACKEND=nccl for GPU tensors)");
    // stream=1: the producer orders its pending work on the tensor before CUDA's legacy default stream.
    py::object cap = cuda ? o.attr("__dlpack__")(py::arg("stream") = 1) : o.attr("__dlpack__")();
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (m == nullptr) throw py::error_already_set();
    PyCapsule_SetName(cap.ptr(), "used_dltensor");  // ours now: we call its deleter
    b.managed = m;
    b.capsule = cap;
    const DLTensor& t = m->dl_tensor;
    const bool on_gpu = t.device.device_type == 2 || t.device.device_type == 13;
    if (t.device.device_type != 1 && !(gpu && on_gpu))
      throw py::value_error(std::string(what) + ": a DLPack tensor on device type " +
                            std::to_string(t.device.device_type) +
                            (gpu ? "; the nccl backend takes CUDA tensors" : "; the host collectives take CPU tensors"));
    int64_t n = 1, expect = 1;
    bool contiguous = true;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.strides && t.shape[d] > 1 && t.strides[d] != expect) contiguous = false;
      expect *= t.shape[d];
    }
    for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
    if (!contiguous) throw py::value_error(std::string(what) + ": the DLPack tensor is not contiguous");
    if (t.dtype.lanes != 1) throw py::type_error(std::string(what) + ": vector dtypes are not supported");
    const int code = t.dtype.code, bits = t.dtype.bits;
    if (code == 2 && bits == 32) b.dtype = DType::kF32;
    else if (code == 2 && bits == 64) b.dtype = DType::kF64;
    else if (code == 2 && bits == 16) b.dtype = DType::kF16;
    else if (code == 4 && bits == 16) b.dtype = DType::kBF16;
    else if (code == 0 && bits == 32) b.dtype = DType::kI32;
    else if (code == 0 && bits == 64) b.dtype = DType::kI64;
    else throw py::type_error(std::string(what) + ": DLPack dtype code " + std::to_string(code) + " bits " +
                              std::to_string(bits) + " is not supported");
    b.ptr = static_cast<char*>(t.data) + t.byte_offset;
    b.count = static_cast<size_t>(n);
    return b;
  }
  if (!PyObject_CheckBuffer(o.ptr()))
    throw py::type_error(std::string(what) + ": expected a numpy array, a buffer or a DLPack tensor, got " +
                         std::string(py::str(o.get_type())));
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(o.ptr(), view.get(), PyBUF_STRIDES | PyBUF_FORMAT) != 0) throw py::error_already_set();
  b.view = std::move(view);  // released by b from here on, whatever is raised below
  const Py_buffer& v = *b.view;
  if (writable && v.readonly) throw py::value_error(std::string(what) + ": the receive buffer is read-only");
  // C-contiguous only: the collectives see flat memory.
  Py_ssize_t expect = v.itemsize, n = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] > 1 && v.strides != nullptr && v.strides[d] != expect)  // (no strides: C-contiguous)
      throw py::value_error(std::string(what) + ": the buffer is not C-contiguous (use numpy.ascontiguousarray)");
    expect *= v.shape[d];
    n *= v.shape[d];
  }
  b.dtype = dtype_of_format(v.format, static_cast<size_t>(v.itemsize), what);
  b.ptr = v.buf;
  b.count = static_cast<size_t>(n);
  return b;
}

class PyComm {
 public:
  // An argument error on this rank (raised before the collective) also tells the peers, which would otherwise wait
  // for this rank until the deadline: the communicator is given up on (Communicator::abandon).
  template <typename F>
  void guarded(const char* what, F&& f) {
    try {
      f();
    } catch (py::error_already_set& e) {
      if (!e.matches(g_comm_error)) c_->abandon(std::string(what) + ": " + e.what());
      throw;
    } catch (const std::exception& e) {
      c_->abandon(std::string(what) + ": " + e.what());
      throw;
    }
  }

  explicit PyComm(std::unique_ptr<Communicator> c) : c_(std::move(c)), gpu_(std::string(c_->backend()) == "nccl") {}
  // The buffers of this communicator's calls (GPU tensors for nccl).
  Buf to_buf(const py::object& o, bool writable, const char* what) const { return ::to_buf(o, writable, what, gpu_); }
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  bool gpu() const { return gpu_; }
  Communicator& comm() { return *c_; }

  // Element counts per the NCCL conventions of comm/comm.h, worked out from the buffers.
  void Barrier() {
    run([&] { return c_->barrier(); });
  }

  // A call with its arguments converted: the buffers (kept alive and, for DLPack, released by it) and the
  // collective on them. Every collective is made this way, so that time_loop can repeat any of them.
  struct Prepared {
    Buf s, r;
    std::function<tt::Status()> call;
  };

  Prepared prepare_bcast(const py::object& buf, int root) {
    Prepared p;
    p.r = to_buf(buf, true, "Bcast");
    p.call = [c = c_.get(), b = p.r.ptr, n = p.r.count, dt = p.r.dtype, root] {
      return c->broadcast(tt::comm::kInPlace, b, n, dt, root);
    };
    return p;
  }
  void Bcast(const py::object& buf, int root) { run(prepare_bcast(buf, root).call); }

  Prepared prepare_allreduce(const py::object& send, const py::object& recv, Op op) {
    Prepared p;
    p.r = to_buf(recv, true, "Allreduce recvbuf");
    p.s = to_buf(send, false, "Allreduce sendbuf");
    same(p.s, p.r, 1, "Allreduce");
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr, n = p.r.count,
              dt = p.r.dtype, op] { return c->allreduce(s, r, n, dt, op); };
    return p;
  }
  void Allreduce(const py::object& send, const py::object& recv, Op op) { run(prepare_allreduce(send, recv, op).call); }

  // Benchmarks (bench/py_comm_bench.py): `iters` calls of one collective (by its Python name; Bcast takes recv) on
  // these buffers, converted once, back to back in C++ without the GIL; the seconds they took. Against the same calls
  // made from Python on the same buffers in the same process, this is the cost of the Python layer alone.
  double time_loop(const std::string& what, const py::object& send, const py::object& recv, Op op, int root,
                   int iters) {
    Prepared p = what == "Bcast"            ? prepare_bcast(recv, root)
                 : what == "Allreduce"      ? prepare_allreduce(send, recv, op)
                 : what == "Reduce"         ? prepare_reduce(send, recv, op, root)
                 : what == "Gather"         ? prepare_gather(send, recv, root)
                 : what == "Allgather"      ? prepare_allgather(send, recv)
                 : what == "Scatter"        ? prepare_scatter(send, recv, root)
                 : what == "Reduce_scatter" ? prepare_reduce_scatter(send, recv, op)
                 : what == "Alltoall"       ? prepare_alltoall(send, recv)
                                            : throw py::value_error("_time_loop: " + what +
                                                                    " (Bcast, Allreduce, Reduce, Gather, Allgather, "
                                                                    "Scatter, Reduce_scatter, Alltoall)");
    double seconds = 0;
    run([&]() -> tt::Status {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) TT_TRY(p.call());
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return tt::Status::ok();
    });
    return seconds;
  }

  Prepared prepare_reduce(const py::object& send, const py::object& recv, Op op, int root) {
    Prepared p;
    p.s = to_buf(send, false, "Reduce sendbuf");
    if (rank() == root || !recv.is_none()) p.r = to_buf(recv, true, "Reduce recvbuf");
    const size_t count = p.s.in_place ? p.r.count : p.s.count;
    const DType dt = p.s.in_place ? p.r.dtype : p.s.dtype;
    if (rank() == root && !p.s.in_place) same(p.s, p.r, 1, "Reduce");
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr, count, dt, op, root] {
      return c->reduce(s, r, count, dt, op, root);
    };
    return p;
  }
  void Reduce(const py::object& send, const py::object& recv, Op op, int root) {
    run(prepare_reduce(send, recv, op, root).call);
  }

  Prepared prepare_allgather(const py::object& send, const py::object& recv) {
    Prepared p;
    p.r = to_buf(recv, true, "Allgather recvbuf");
    p.s = to_buf(send, false, "Allgather sendbuf");
    const size_t per = p.r.count / static_cast<size_t>(size());
    if (p.r.count % static_cast<size_t>(size()) != 0)
      throw py::value_error("Allgather: recvbuf's " + std::to_string(p.r.count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
    if (!p.s.in_place) same_count(p.s, per, p.r.dtype, "Allgather sendbuf");
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr, per, dt = p.r.dtype] {
      return c->allgather(s, r, per, dt);
    };
    return p;
  }
  void Allgather(const py::object& send, const py::object& recv) { run(prepare_allgather(send, recv).call); }

  Prepared prepare_gather(const py::object& send, const py::object& recv, int root) {
    Prepared p;
    p.s = to_buf(send, false, "Gather sendbuf");
    if (rank() == root) p.r = to_buf(recv, true, "Gather recvbuf");
    size_t per = p.s.count;
    DType dt = p.s.dtype;
    if (rank() == root) {
      if (p.r.count % static_cast<size_t>(size()) != 0)
        throw py::value_error("Gather: recvbuf's " + std::to_string(p.r.count) + " elements are not a multiple of " +
                              std::to_string(size()) + " ranks");
      per = p.r.count / static_cast<size_t>(size());
      dt = p.r.dtype;
      if (!p.s.in_place) same_count(p.s, per, dt, "Gather sendbuf");
    }
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr, per, dt, root] {
      return c->gather(s, r, per, dt, root);
    };
    return p;
  }
  void Gather(const py::object& send, const py::object& recv, int root) { run(prepare_gather(send, recv, root).call); }

  Prepared prepare_scatter(const py::object& send, const py::object& recv, int root) {
    Prepared p;
    p.r = to_buf(recv, true, "Scatter recvbuf");
    if (rank() == root) p.s = to_buf(send, false, "Scatter sendbuf");
    size_t per = p.r.count;
    const DType dt = p.r.dtype;
    if (rank() == root && p.s.in_place) {
      divisible(p.r.count, "Scatter recvbuf");
      per = p.r.count / static_cast<size_t>(size());
    } else if (rank() == root) {
      same_count(p.s, per * static_cast<size_t>(size()), dt, "Scatter sendbuf");
    }
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr, per, dt, root] {
      return c->scatter(s, r, per, dt, root);
    };
    return p;
  }
  void Scatter(const py::object& send, const py::object& recv, int root) {
    run(prepare_scatter(send, recv, root).call);
  }

  Prepared prepare_reduce_scatter(const py::object& send, const py::object& recv, Op op) {
    Prepared p;
    p.r = to_buf(recv, true, "Reduce_scatter recvbuf");
    p.s = to_buf(send, false, "Reduce_scatter sendbuf");
    size_t per = p.r.count;
    if (p.s.in_place) {
      divisible(p.r.count, "Reduce_scatter recvbuf");
      per = p.r.count / static_cast<size_t>(size());
    } else {
      same_count(p.s, per * static_cast<size_t>(size()), p.r.dtype, "Reduce_scatter sendbuf");
    }
    p.call = [c = c_.get(), in_place = p.s.in_place, s = p.s.ptr, r = p.r.ptr, per, dt = p.r.dtype, op,
              me = rank()] {
      tt::Status st = c->reduce_scatter(in_place ? tt::comm::kInPlace : s, r, per, dt, op);
      // In place, MPI puts this rank's block at the start of recvbuf (comm/ leaves it at its own offset).
      const size_t es = tt::comm::dtype_size(dt);
      if (st.is_ok() && in_place && me > 0)
        std::memmove(r, static_cast<char*>(r) + static_cast<size_t>(me) * per * es, per * es);
      return st;
    };
    return p;
  }
  void Reduce_scatter(const py::object& send, const py::object& recv, Op op) {
    run(prepare_reduce_scatter(send, recv, op).call);
  }

  Prepared prepare_alltoall(const py::object& send, const py::object& recv) {
    Prepared p;
    p.r = to_buf(recv, true, "Alltoall recvbuf");
    p.s = to_buf(send, false, "Alltoall sendbuf");
    if (p.r.count % static_cast<size_t>(size()) != 0)
      throw py::value_error("Alltoall: recvbuf's " + std::to_string(p.r.count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
    if (!p.s.in_place) same(p.s, p.r, 1, "Alltoall");
    p.call = [c = c_.get(), s = p.s.in_place ? tt::comm::kInPlace : p.s.ptr, r = p.r.ptr,
              per = p.r.count / static_cast<size_t>(size()), dt = p.r.dtype] { return c->alltoall(s, r, per, dt); };
    return p;
  }
  void Alltoall(const py::object& send, const py::object& recv) { run(prepare_alltoall(send, recv).call); }

 private:
  // The communication, without the GIL; one call at a time per communicator (two Python threads must not run
  // collectives on it at once). The lock is taken without the GIL, so a thread waiting for it cannot block the one
  // holding it.
  template <typename F>
  void run(F&& f) {
    tt::Status s;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      s = f();
    }
    check(s);
  }
  void divisible(size_t count, const std::string& what) const {
    if (count % static_cast<size_t>(size()) != 0)
      throw py::value_error(what + ": " + std::to_string(count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
  }
  std::mutex mu_;
  static void same_count(const Buf& s, size_t count, DType dt, const std::string& what) {
    if (s.count != count || s.dtype != dt)
      throw py::value_error(what + ": " + std::to_string(s.count) + " " + tt::comm::dtype_name(s.dtype) +
                            " elements, expected " + std::to_string(count) + " " + tt::comm::dtype_name(dt));
  }
  static void same(const Buf& s, const Buf& r, size_t ratio, const std::string& what) {
    if (s.in_place) return;
    same_count(s, r.count / ratio, r.dtype, what + " sendbuf");
  }
  std::unique_ptr<Communicator> c_;
  bool gpu_ = false;  // the communicator takes GPU memory (nccl)
};

// Memory from the communicator's alloc_buffer (the shm backend's shared pool: Note [shared buffers] in
// comm/shm.cc), zeroed, as a writable buffer; the Comm object it came from stays alive while it does.
class SharedBuffer {
 public:
  SharedBuffer(py::object owner, Communicator* c, size_t bytes) : owner_(std::move(owner)), c_(c), bytes_(bytes) {
    tt::Result<void*> p = [&] {
      py::gil_scoped_release nogil;
      tt::Result<void*> r = c_->alloc_buffer(bytes_);
      if (r.is_ok()) std::memset(r.value(), 0, bytes_);  // its pages now, where the communicator placed them
      return r;
    }();
    if (!p.is_ok()) raise(p.status());
    p_ = p.value();
  }
  ~SharedBuffer() {
    if (p_ != nullptr) c_->free_buffer(p_);
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  py::buffer_info info() { return py::buffer_info(p_, 1, "B", static_cast<py::ssize_t>(bytes_)); }

 private:
  py::object owner_;
  Communicator* c_;
  size_t bytes_;
  void* p_ = nullptr;
};

// Note [python calls]
// pybind11 matches keyword arguments slowly: on the dev machine comm.Bcast(x, root=0) took 0.62 us a call against 0.41
// with root by position, and mpi4py's users name op and root. At 1 MiB a pooled broadcast takes 16-20 us on the H200
// host, so that difference alone is 1-1.5% of the call. The collectives are therefore methods of CPython's fast
// calling convention (METH_FASTCALL | METH_KEYWORDS), set on the Comm type after pybind11 has made it: they match their
// arguments themselves (TypeError as Python's own functions word it) and turn C++ exceptions into Python ones as
// pybind11 does.
struct Signature {
  const char* name;
  std::array<const char*, 4> params;
  int count;     // parameters
  int required;  // the first `required` have no default
};

// out[0..count): the arguments by position and keyword (nullptr where not given); false with a TypeError set for too
// many, unknown, repeated or missing ones.
bool match_args(const Signature& sig, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** out) {
  for (int i = 0; i < sig.count; ++i) out[i] = nullptr;
  if (nargs > sig.count) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", sig.name, sig.count, nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[i] = args[i];
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int at = -1;
    for (int i = 0; i < sig.count && at < 0; ++i)
      if (PyUnicode_CompareWithASCIIString(key, sig.params[static_cast<size_t>(i)]) == 0) at = i;
    if (at < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", sig.name, key);
      return false;
    }
    if (out[at] != nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", sig.name,
                   sig.params[static_cast<size_t>(at)]);
      return false;
    }
    out[at] = args[nargs + k];
  }
  for (int i = 0; i < sig.required; ++i)
    if (out[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", sig.name,
                   sig.params[static_cast<size_t>(i)]);
      return false;
    }
  return true;
}

py::object arg_or_none(PyObject* o) { return o != nullptr ? py::reinterpret_borrow<py::object>(o) : py::none(); }

// A call's arguments by kind: buffers as given (None where left out), op and root converted.
Op op_arg(PyObject* o, const char* name) {
  if (o == nullptr) return Op::kSum;
  if (!py::isinstance<Op>(o))
    throw py::type_error(std::string(name) + ": op must be tiertrain.comm.SUM, PROD, MIN, MAX or AVG");
  return py::handle(o).cast<Op>();
}
// An int, or anything with __index__ (numpy's integers), as pybind11's int caster takes them; not a float.
int root_arg(PyObject* o, const char* name) {
  if (o == nullptr) return 0;
  if (PyFloat_Check(o) || !PyIndex_Check(o)) throw py::type_error(std::string(name) + ": root must be an int");
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(o));
  if (!index) throw py::error_already_set();
  const long v = PyLong_AsLong(index.ptr());
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (v < INT32_MIN || v > INT32_MAX) throw py::value_error(std::string(name) + ": root out of range");
  return static_cast<int>(v);
}

// Runs f(comm, out) for a fast method: the arguments matched, C++ exceptions turned into Python's.
template <typename F>
PyObject* fast_method(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      F&& f) {
  PyObject* out[4];
  try {
    PyComm& c = py::handle(self).cast<PyComm&>();
    if (!match_args(sig, args, nargs, kwnames, out)) {
      // An argument error as any other (PyComm::guarded): the peers are told instead of waiting for the deadline.
      c.comm().abandon(std::string(sig.name) + ": arguments that do not match its signature");
      return nullptr;
    }
    c.guarded(sig.name, [&] { f(c, out); });
    Py_RETURN_NONE;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_SystemError, "tiertrain.comm: an unknown C++ exception");
  }
  return nullptr;
}

// One fast method: Sig's arguments matched, then Body(comm, arguments). (A function per method, made from a
// template: CPython calls a plain function.)
template <const Signature& Sig, auto Body>
PyObject* fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return fast_method(Sig, self, args, nargs, kwnames, Body);
}

template <auto F>
PyCFunction as_cfunction() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

using Args = PyObject**;
constexpr Signature kBcast{"Bcast", {"buf", "root"}, 2, 1};
constexpr Signature kAllreduce{"Allreduce", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kReduce{"Reduce", {"sendbuf", "recvbuf", "op", "root"}, 4, 1};
constexpr Signature kAllgather{"Allgather", {"sendbuf", "recvbuf"}, 2, 2};
constexpr Signature kGather{"Gather", {"sendbuf", "recvbuf", "root"}, 3, 1};
constexpr Signature kScatter{"Scatter", {"sendbuf", "recvbuf", "root"}, 3, 2};
constexpr Signature kReduceScatter{"Reduce_scatter", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kAlltoall{"Alltoall", {"sendbuf", "recvbuf"}, 2, 2};
constexpr int kFast = METH_FASTCALL | METH_KEYWORDS;

PyMethodDef g_fast_methods[] = {
    {"Bcast",
     as_cfunction<fast<kBcast, [](PyComm& c, Args a) { c.Bcast(arg_or_none(a[0]), root_arg(a[1], "Bcast")); }>>(),
     kFast,
     "Bcast(buf, root=0)\n\nbuf from rank root to every rank, in place."},
    {"Allreduce",
     as_cfunction<fast<kAllreduce, [](PyComm& c, Args a) {
       c.Allreduce(arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Allreduce"));
     }>>(),
     kFast,
     "Allreduce(sendbuf, recvbuf, op=SUM)\n\nsendbuf (or IN_PLACE: recvbuf) reduced over the ranks into every "
     "rank's recvbuf."},
    {"Reduce",
     as_cfunction<fast<kReduce, [](PyComm& c, Args a) {
       c.Reduce(arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Reduce"), root_arg(a[3], "Reduce"));
     }>>(),
     kFast,
     "Reduce(sendbuf, recvbuf=None, op=SUM, root=0)\n\nsendbuf (IN_PLACE at the root: recvbuf) reduced into the "
     "root's recvbuf."},
    {"Allgather",
     as_cfunction<fast<kAllgather, [](PyComm& c, Args a) { c.Allgather(arg_or_none(a[0]), arg_or_none(a[1])); }>>(),
     kFast,
     "Allgather(sendbuf, recvbuf)\n\nEvery rank's sendbuf, in rank order, into every rank's recvbuf (IN_PLACE: "
     "each rank's piece already at its place in recvbuf)."},
    {"Gather",
     as_cfunction<fast<kGather, [](PyComm& c, Args a) {
       c.Gather(arg_or_none(a[0]), arg_or_none(a[1]), root_arg(a[2], "Gather"));
     }>>(),
     kFast,
     "Gather(sendbuf, recvbuf=None, root=0)\n\nEvery rank's sendbuf, in rank order, into the root's recvbuf."},
    {"Scatter",
     as_cfunction<fast<kScatter, [](PyComm& c, Args a) {
       c.Scatter(arg_or_none(a[0]), arg_or_none(a[1]), root_arg(a[2], "Scatter"));
     }>>(),
     kFast,
     "Scatter(sendbuf, recvbuf, root=0)\n\nPiece q of the root's sendbuf into rank q's recvbuf (sendbuf None "
     "elsewhere; IN_PLACE at the root: recvbuf holds every piece)."},
    {"Reduce_scatter",
     as_cfunction<fast<kReduceScatter, [](PyComm& c, Args a) {
       c.Reduce_scatter(arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Reduce_scatter"));
     }>>(),
     kFast,
     "Reduce_scatter(sendbuf, recvbuf, op=SUM)\n\nsendbuf reduced over the ranks; block q into rank q's recvbuf "
     "(equal blocks; IN_PLACE: recvbuf holds all, the result at its start)."},
    {"Alltoall",
     as_cfunction<fast<kAlltoall, [](PyComm& c, Args a) { c.Alltoall(arg_or_none(a[0]), arg_or_none(a[1])); }>>(),
     kFast,
     "Alltoall(sendbuf, recvbuf)\n\nPiece q of every rank's sendbuf into rank q's recvbuf, in rank order."},
};

}  // namespace

PYBIND11_MODULE(_comm, m) {
  m.doc() = "tiertrain's collectives (comm/comm.h), mpi4py-style";
  g_comm_error = PyErr_NewException("tiertrain.comm.CommError", PyExc_RuntimeError, nullptr);
  g_timeout_error = PyErr_NewException("tiertrain.comm.CommTimeoutError", g_comm_error, nullptr);
  g_mismatch_error = PyErr_NewException("tiertrain.comm.CommMismatchError", g_comm_error, nullptr);
  g_aborted_error = PyErr_NewException("tiertrain.comm.CommAbortedError", g_comm_error, nullptr);
  m.attr("CommError") = py::handle(g_comm_error);
  m.attr("CommTimeoutError") = py::handle(g_timeout_error);
  m.attr("CommMismatchError") = py::handle(g_mismatch_error);
  m.attr("CommAbortedError") = py::handle(g_aborted_error);
  // The library's log lines, as the command line takes them (TIERTRAIN_DEBUG, TIERTRAIN_DEBUG_SUBSYS).
  const auto env = [](const char* name) { return std::string(std::getenv(name) ? std::getenv(name) : ""); };
  tt::log::configure(env("TIERTRAIN_DEBUG"), env("TIERTRAIN_DEBUG_SUBSYS"));

  py::enum_<Op>(m, "Op")
      .value("SUM", Op::kSum)
      .value("PROD", Op::kProd)
      .value("MIN", Op::kMin)
      .value("MAX", Op::kMax)
      .value("AVG", Op::kAvg)
      .export_values();

  // IN_PLACE: a unique sentinel object, compared by identity.
  py::object sentinel = py::module_::import("types").attr("SimpleNamespace")();
  sentinel.attr("__doc__") = "tiertrain.comm.IN_PLACE";
  g_in_place = sentinel.inc_ref().ptr();
  m.attr("IN_PLACE") = sentinel;

  py::class_<SharedBuffer>(m, "_SharedBuffer", py::buffer_protocol())
      .def_buffer([](SharedBuffer& b) { return b.info(); });

  py::class_<PyComm>(m, "Comm")
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def("Get_rank", &PyComm::rank)
      .def("Get_size", &PyComm::size)
      .def("Barrier", &PyComm::Barrier)
      .def("_alloc",
           [](py::object self, size_t nbytes) {
             PyComm& c = self.cast<PyComm&>();
             if (c.gpu())
               throw py::type_error("Comm.zeros: host communicators only (for nccl, allocate on the GPU, e.g. "
                                    "torch.zeros(..., device='cuda'))");
             return std::make_unique<SharedBuffer>(self, &c.comm(), nbytes);
           },
           py::arg("nbytes"), "Comm.zeros's memory: nbytes zeroed bytes from this communicator (its shared pool).")
      .def("_time_loop",
           [](PyComm& c, const std::string& what, const py::object& s, const py::object& r, Op op, int root,
              int iters) {
             double t = 0;
             c.guarded(what.c_str(), [&] { t = c.time_loop(what, s, r, op, root, iters); });
             return t;
           },
           py::arg("what"), py::arg("sendbuf"), py::arg("recvbuf"), py::arg("op") = Op::kSum, py::arg("root") = 0,
           py::arg("iters") = 1,
           "Benchmarks only: `iters` calls of one collective (its method's name: Bcast, Allreduce, Reduce, Gather, "
           "Allgather, Scatter, Reduce_scatter, Alltoall) on these buffers in a C++ loop; seconds.");

  // Note [python calls]: the collectives, as fast-call methods of Comm.
  py::object cls = m.attr("Comm");
  for (PyMethodDef& d : g_fast_methods) {
    PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &d);
    if (descr == nullptr || PyObject_SetAttrString(cls.ptr(), d.ml_name, descr) != 0) {
      Py_XDECREF(descr);
      throw py::error_already_set();
    }
    Py_DECREF(descr);
  }

  m.def("world", [] {
    // The rendezvous waits for the other ranks: without the GIL.
    tt::Result<std::unique_ptr<Communicator>> c = [] {
      py::gil_scoped_release nogil;
      return tt::comm::world();
    }();
    if (!c.is_ok()) raise(c.status());
    return std::make_unique<PyComm>(std::move(c.value()));
  }, "The communicator of this process's job (from the environment `tiertrain launch` sets; alone: a world of 1).");
}
