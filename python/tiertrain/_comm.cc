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
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "comm/p2p.h"  // kBytesType (Note [point-to-point fast calls])
#include "core/env.h"
#include "core/log.h"
#include "core/recycling_allocator.h"

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
// Made in place by to_buf and never moved or copied: some exporters point the view's shape or strides into the view
// itself (bytearray, array.array), so the view lives here, inline (no allocation a call), where it was filled.
struct Buf {
  void* ptr = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kF32;
  // Note [bytes and other moved types]: the element type's name where it travels as a comm type of its size but
  // cannot be reduced as one (int8 as bytes, int16 as 2-byte elements, ...); null for the reducible types.
  const char* move_only = nullptr;
  bool in_place = false;
  bool has_view = false;  // view holds an export of the buffer protocol, released here
  Py_buffer view;  // (a raw Py_buffer, not py::buffer_info, which copies shape, strides and format a call)
  py::object capsule;  // DLPack
  DLManagedTensor* managed = nullptr;
  py::object array;  // a numpy array read directly (Note [numpy arrays]): held, so that it cannot be resized while a
                     // call or a Request (Note [non-blocking calls]) uses it
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() {  // (with the GIL, as every Buf is made and dropped)
    if (managed && managed->deleter) managed->deleter(managed);
    if (has_view) PyBuffer_Release(&view);
  }
};

PyObject* g_in_place = nullptr;  // owned for the life of the process (no destructor after Python's end)

// Note [numpy arrays]
// A numpy array's buffer export builds its format string and checks it against the one cached on the array, ~55 ns
// a buffer on the dev machine, more than half the rest of a call's layer (Note [python calls]). An exact
// numpy.ndarray is therefore read directly: its data, dimensions, flags and descr's type number sit where numpy's own
// macros (PyArray_DATA, PyArray_DIMS, PyArray_FLAGS, PyArray_TYPE) read them in every compiled extension, the same in
// numpy 1.x and 2.x (2.x moved the descr's elsize, which we do not read). Only the plain case is taken: C-contiguous,
// aligned, writable where written, native byte order, float32/float64/float16/int32/int64. Everything else (subclasses,
// other types, the errors) goes through the buffer protocol, which words the errors. The array is held during the
// call (Buf::array): with that reference numpy's resize refuses (its refcheck), as an export would make it.
struct NdArrayHead {  // numpy's PyArrayObject_fields, its first members
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NdDescrHead {  // numpy's PyArray_Descr, up to type_num
  PyObject_HEAD
  PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
  char flags;  // (numpy 2.x: _former_flags)
  int type_num;
};
constexpr int kNpyCContiguous = 0x0001, kNpyAligned = 0x0100, kNpyWriteable = 0x0400;
PyTypeObject* g_ndarray = nullptr;  // numpy.ndarray, once an argument of that name was found to be it
uint64_t g_numpy_reads = 0;  // arrays read directly (tests see which path a call took: _comm._numpy_direct_reads)

bool is_ndarray(PyObject* o) {
  PyTypeObject* t = Py_TYPE(o);
  if (g_ndarray != nullptr) return t == g_ndarray;
  if (std::strcmp(t->tp_name, "numpy.ndarray") != 0) return false;
  PyObject* numpy = PyImport_GetModule(py::str("numpy").ptr());  // (new reference or nullptr, no import)
  if (numpy == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject* nd = PyObject_GetAttrString(numpy, "ndarray");
  Py_DECREF(numpy);
  if (nd == nullptr) {
    PyErr_Clear();
    return false;
  }
  if (reinterpret_cast<PyTypeObject*>(nd) != t) {
    Py_DECREF(nd);
    return false;
  }
  g_ndarray = t;  // (the reference kept for the life of the process)
  return true;
}

// Fills b from a plain numpy array (above); false, with b untouched, for anything else.
bool numpy_buf(Buf& b, PyObject* o, bool writable) {
  if (!is_ndarray(o)) return false;
  const auto* a = reinterpret_cast<const NdArrayHead*>(o);
  if ((a->flags & kNpyCContiguous) == 0 || (a->flags & kNpyAligned) == 0 ||
      (writable && (a->flags & kNpyWriteable) == 0))
    return false;
  const auto* d = reinterpret_cast<const NdDescrHead*>(a->descr);
  if (d->byteorder == '>') return false;
  DType dt;
  const char* move_only = nullptr;  // Note [bytes and other moved types]
  switch (d->type_num) {
    case 11: dt = DType::kF32; break;  // NPY_FLOAT
    case 12: dt = DType::kF64; break;  // NPY_DOUBLE
    case 23: dt = DType::kF16; break;  // NPY_HALF
    case 5: dt = DType::kI32; break;   // NPY_INT
    case 7: dt = sizeof(long) == 8 ? DType::kI64 : DType::kI32; break;  // NPY_LONG
    case 9: dt = DType::kI64; break;   // NPY_LONGLONG
    case 2: dt = DType::kU8; break;    // NPY_UBYTE
    case 0: dt = DType::kU8, move_only = "bool"; break;     // NPY_BOOL
    case 1: dt = DType::kU8, move_only = "int8"; break;     // NPY_BYTE
    case 3: dt = DType::kF16, move_only = "int16"; break;   // NPY_SHORT
    case 4: dt = DType::kF16, move_only = "uint16"; break;  // NPY_USHORT
    case 6: dt = DType::kI32, move_only = "uint32"; break;  // NPY_UINT
    case 8: dt = sizeof(long) == 8 ? DType::kI64 : DType::kI32, move_only = "uint64"; break;  // NPY_ULONG
    case 10: dt = DType::kI64, move_only = "uint64"; break;  // NPY_ULONGLONG
    default: return false;
  }
  size_t n = 1;
  for (int i = 0; i < a->nd; ++i) n *= static_cast<size_t>(a->dimensions[i]);
  b.array = py::reinterpret_borrow<py::object>(o);
  ++g_numpy_reads;
  b.ptr = a->data;
  b.count = n;
  b.dtype = dt;
  b.move_only = move_only;
  return true;
}

// Note [bytes and other moved types]
// The collectives move bytes as every program does (bytearray, bytes, array('B'), numpy uint8), and reduce them as
// MPI reduces unsigned chars (modulo 256). Element types the communicators have no arithmetic for travel as a type of
// their size (int8 and bool as bytes, int16 and uint16 as 2-byte, uint32 as 4-byte, uint64 as 8-byte elements):
// Bcast, Gather, Scatter, Allgather, Alltoall and point-to-point move them bit for bit, with their element counts
// checked as theirs; a reduction of one is refused with a TypeError naming the type (Buf::move_only).
DType dtype_of_format(const char* format, size_t itemsize, const char* what, const char** move_only) {
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
  if (c == 'B' && itemsize == 1) return DType::kU8;
  // Note [bytes and other moved types].
  const bool one_char = fmt.size() == 1 || (fmt.size() == 2 && std::string_view("<>=@!").find(fmt[0]) != fmt.npos);
  if (one_char) {
    if ((c == 'b' || c == 'c' || c == '?') && itemsize == 1) {
      *move_only = c == 'b' ? "int8" : c == 'c' ? "char" : "bool";
      return DType::kU8;
    }
    if ((c == 'h' || c == 'H') && itemsize == 2) {
      *move_only = c == 'h' ? "int16" : "uint16";
      return DType::kF16;
    }
    if ((c == 'I' || c == 'L' || c == 'Q') && (itemsize == 4 || itemsize == 8)) {
      *move_only = itemsize == 4 ? "uint32" : "uint64";
      return itemsize == 4 ? DType::kI32 : DType::kI64;
    }
  }
  throw py::type_error(std::string(what) + ": element type '" + std::string(fmt) + "' (" + std::to_string(itemsize) +
                       " bytes) is not one tiertrain.comm moves: float32, float64, float16, int32, int64, uint8 "
                       "(and bytes), bfloat16 as a DLPack tensor; int8, bool, int16, uint16, uint32 and uint64 are "
                       "moved but not reduced");
}

// The reductions and copies read and write whole elements (vectorised): memory not aligned to its element size
// (np.frombuffer(..., offset=1), a packed struct) is refused with an error rather than risked.
void aligned(const void* p, DType dt, const char* what) {
  const size_t es = tt::dtype_size(dt);
  if (reinterpret_cast<uintptr_t>(p) % es != 0)
    throw py::value_error(std::string(what) + ": the buffer is not aligned to its " + std::to_string(es) +
                          "-byte elements (copy it, e.g. numpy.array(x))");
}

// writable: the receive side; gpu: the communicator takes GPU memory (nccl), and DLPack tensors on a CUDA device
// are accepted (their producer is asked to order its work before the legacy default stream, which the nccl
// backend's blocking calls follow). Fills b (a fresh Buf); raises TypeError/ValueError for what cannot be a buffer
// here.
// blocks: a collective's buffer of one block a rank (Gather's and Allgather's recvbuf, Scatter's sendbuf, Alltoall's
// both, Reduce_scatter's sendbuf): an mpi4py buffer spec's count is then a block's, as mpi4py reads it.
void to_buf(Buf& b, const py::object& o, bool writable, const char* what, bool gpu = false, int blocks = 1) {
  if (o.ptr() == g_in_place) {
    if (writable) throw py::type_error(std::string(what) + ": IN_PLACE goes in the send buffer's place, not here");
    b.in_place = true;
    return;
  }
  if (numpy_buf(b, o.ptr(), writable)) return;  // Note [numpy arrays]
  // mpi4py's buffer specs ([buf, MPI.DOUBLE], [buf, count, MPI.INT]): the buffer they name (tiertrain.comm._spec),
  // held by b.
  if (PyList_Check(o.ptr()) || PyTuple_Check(o.ptr())) {
    py::object inner = py::module_::import("tiertrain.comm").attr("_spec")(o, writable, blocks);
    if (PyList_Check(inner.ptr()) || PyTuple_Check(inner.ptr()))
      throw py::type_error(std::string(what) + ": a buffer spec names a buffer first");
    to_buf(b, inner, writable, what, gpu);
    if (!b.array) b.array = inner;
    return;
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
    else if (code == 1 && bits == 8) b.dtype = DType::kU8;  // Note [bytes and other moved types]
    else if (code == 0 && bits == 8) b.dtype = DType::kU8, b.move_only = "int8";
    else if (code == 6 && bits == 8) b.dtype = DType::kU8, b.move_only = "bool";
    else throw py::type_error(std::string(what) + ": DLPack dtype code " + std::to_string(code) + " bits " +
                              std::to_string(bits) + " is not supported");
    b.ptr = static_cast<char*>(t.data) + t.byte_offset;
    aligned(b.ptr, b.dtype, what);
    b.count = static_cast<size_t>(n);
    return;
  }
  if (!PyObject_CheckBuffer(o.ptr()))
    throw py::type_error(std::string(what) + ": expected a numpy array, a buffer or a DLPack tensor, got " +
                         std::string(py::str(o.get_type())));
  if (PyObject_GetBuffer(o.ptr(), &b.view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) throw py::error_already_set();
  b.has_view = true;  // released by b from here on, whatever is raised below
  const Py_buffer& v = b.view;
  if (writable && v.readonly) throw py::value_error(std::string(what) + ": the receive buffer is read-only");
  // Contiguous memory, in C or Fortran order: the collectives see the elements in memory order, as MPI does.
  Py_ssize_t expect = v.itemsize, n = 1;
  bool c_order = true;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] > 1 && v.strides != nullptr && v.strides[d] != expect) c_order = false;  // (no strides: C)
    expect *= v.shape[d];
    n *= v.shape[d];
  }
  if (!c_order) {
    expect = v.itemsize;
    for (int d = 0; d < v.ndim; ++d) {
      if (v.shape[d] > 1 && v.strides[d] != expect)
        throw py::value_error(std::string(what) + ": the buffer is not contiguous (use numpy.ascontiguousarray)");
      expect *= v.shape[d];
    }
  }
  b.dtype = dtype_of_format(v.format, static_cast<size_t>(v.itemsize), what, &b.move_only);
  aligned(v.buf, b.dtype, what);
  b.ptr = v.buf;
  b.count = static_cast<size_t>(n);
}

// A call's buffers (Note [python calls]): the send side and the receive side.
struct CallBufs {
  Buf s, r;
};
// What comes after a call that has nothing to do after it.
struct NoAfter {
  void operator()() const {}
};

// Note [non-blocking calls]
// Comm.Iallreduce and the other I-methods return a Request, as mpi4py's do. It holds what the operation needs while
// it is in flight: its buffers (their exports, arrays or DLPack tensors, so that they can be neither freed nor
// resized), the Comm, and the C++ request. Wait() waits without the GIL, then does what comes after the call (the
// in-place Reduce_scatter's move) and lets the buffers go; Test() says whether it is done (and then waits, which
// returns at once); Request.Waitall(requests) waits for them all. A Request that is dropped before it was waited for
// waits in its destructor: its buffers are not let go while the operation may still touch them. (The Request type:
// Note [request objects].)
struct Pending {
  CallBufs a;
  tt::comm::Request req;
  std::function<void()> after;
  // Point-to-point (Note [python point-to-point]): what a receive found, a message of any length received, and
  // the pickled bytes of an object being sent (held until the send is done).
  tt::comm::MessageInfo info;
  std::vector<char> bytes;
  bool wants_bytes = false;
  py::object comm;
  // The wait and what comes after it, done once whoever waits (two threads may Wait on one Request). (A mutex, not
  // std::call_once: glibc's pthread_once makes a futex call each time it runs a routine, a syscall per Wait.)
  std::mutex wait_mu;
  bool waited = false;
  tt::Status status;
  void wait_once() {  // (without the GIL, unless req is ready)
    std::lock_guard<std::mutex> lock(wait_mu);
    if (waited) return;
    status = req.valid() ? req.wait() : tt::Status::ok();  // (no request: done at once, PROC_NULL's)
    if (status.is_ok() && after) after();
    waited = true;
  }
};

// mpi4py's Status, duck-typed: its source, tag and count (bytes) are set where given.
void fill_status(const py::object& status, const tt::comm::MessageInfo& info) {
  if (status.is_none()) return;
  status.attr("source") = info.source;
  status.attr("tag") = info.tag;
  status.attr("count") = info.bytes;
}

// A Pending, its block recycled (Note [recycled blocks] in core/recycling_allocator.h).
std::shared_ptr<Pending> new_pending() { return std::allocate_shared<Pending>(tt::RecyclingAllocator<Pending>{}); }

// A new Request for p (Note [request objects], below).
py::object make_request(std::shared_ptr<Pending> p);

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
  void to_buf(Buf& b, const py::object& o, bool writable, const char* what, int blocks = 1) const {
    ::to_buf(b, o, writable, what, gpu_, blocks);
  }
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  bool gpu() const { return gpu_; }
  Communicator& comm() { return *c_; }

  // The continuation of the blocking methods (Note [python calls]): the call, once, and what comes after it.
  auto once() {
    return [this](auto blocking, auto /*nonblocking*/, auto after, auto... args) {
      run([&] {
        tt::Status st = (c_.get()->*blocking)(args...);
        if (st.is_ok()) after();
        return st;
      });
    };
  }
  // The continuation of the non-blocking methods (Note [non-blocking calls]): the operation started, into p.
  auto start(Pending& p) {
    return [this, &p](auto /*blocking*/, auto nonblocking, auto after, auto... args) {
      p.after = after;
      locked([&] { p.req = (c_.get()->*nonblocking)(args...); });
    };
  }
  // The send side of a call: its buffer, or kInPlace.
  static const void* send_ptr(const Buf& s) { return s.in_place ? tt::comm::kInPlace : s.ptr; }

  // Note [python calls]: each collective below converts its arguments into the Bufs of `a` (the caller's: on the
  // stack for a blocking call, where they stay, as a Buf never moves; on the heap, in the Request, for a
  // non-blocking one), checks them, and hands k the Communicator's blocking and non-blocking member functions, what to
  // do after a successful call (reduce_scatter's in-place move) and the call's arguments. k calls one of them: once
  // (once(), for the methods), in a timed loop (time_loop), or starts it (start(), the I-methods). No allocation a
  // blocking call, and one definition of each collective for all three.
  // The collectives. Element counts per the NCCL conventions of comm/comm.h, worked out from the buffers.
  template <typename K>
  void barrier(K&& k) {
    k(&Communicator::barrier, &Communicator::ibarrier, NoAfter{});
  }
  void Barrier() { barrier(once()); }

  template <typename K>
  void bcast(CallBufs& a, const py::object& buf, int root, K&& k) {
    Buf& r = a.r;
    to_buf(r, buf, true, "Bcast");
    k(&Communicator::broadcast, &Communicator::ibroadcast, NoAfter{}, tt::comm::kInPlace, r.ptr, r.count, r.dtype,
      root);
  }
  void Bcast(const py::object& buf, int root) {
    CallBufs a;
    bcast(a, buf, root, once());
  }

  template <typename K>
  void allreduce(CallBufs& a, const py::object& send, const py::object& recv, Op op, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(r, recv, true, "Allreduce recvbuf");
    to_buf(s, send, false, "Allreduce sendbuf");
    reducible(s, r, op, "Allreduce");
    same(s, r, 1, "Allreduce");
    k(&Communicator::allreduce, &Communicator::iallreduce, NoAfter{}, send_ptr(s), r.ptr, r.count, r.dtype, op);
  }
  void Allreduce(const py::object& send, const py::object& recv, Op op) {
    CallBufs a;
    allreduce(a, send, recv, op, once());
  }

  template <typename K>
  void reduce(CallBufs& a, const py::object& send, const py::object& recv, Op op, int root, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(s, send, false, "Reduce sendbuf");
    if (rank() == root || !recv.is_none()) to_buf(r, recv, true, "Reduce recvbuf");
    reducible(s, r, op, "Reduce");
    const size_t count = s.in_place ? r.count : s.count;
    const DType dt = s.in_place ? r.dtype : s.dtype;
    if (rank() == root && !s.in_place) same(s, r, 1, "Reduce");
    k(&Communicator::reduce, &Communicator::ireduce, NoAfter{}, send_ptr(s), r.ptr, count, dt, op, root);
  }
  void Reduce(const py::object& send, const py::object& recv, Op op, int root) {
    CallBufs a;
    reduce(a, send, recv, op, root, once());
  }

  template <typename K>
  void allgather(CallBufs& a, const py::object& send, const py::object& recv, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(r, recv, true, "Allgather recvbuf", size());
    to_buf(s, send, false, "Allgather sendbuf");
    const size_t per = r.count / static_cast<size_t>(size());
    if (r.count % static_cast<size_t>(size()) != 0)
      throw py::value_error("Allgather: recvbuf's " + std::to_string(r.count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
    if (!s.in_place) same_count(s, per, r.dtype, "Allgather sendbuf");
    k(&Communicator::allgather, &Communicator::iallgather, NoAfter{}, send_ptr(s), r.ptr, per, r.dtype);
  }
  void Allgather(const py::object& send, const py::object& recv) {
    CallBufs a;
    allgather(a, send, recv, once());
  }

  template <typename K>
  void gather(CallBufs& a, const py::object& send, const py::object& recv, int root, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(s, send, false, "Gather sendbuf");
    if (rank() == root) to_buf(r, recv, true, "Gather recvbuf", size());
    size_t per = s.count;
    DType dt = s.dtype;
    if (rank() == root) {
      if (r.count % static_cast<size_t>(size()) != 0)
        throw py::value_error("Gather: recvbuf's " + std::to_string(r.count) + " elements are not a multiple of " +
                              std::to_string(size()) + " ranks");
      per = r.count / static_cast<size_t>(size());
      dt = r.dtype;
      if (!s.in_place) same_count(s, per, dt, "Gather sendbuf");
    }
    k(&Communicator::gather, &Communicator::igather, NoAfter{}, send_ptr(s), r.ptr, per, dt, root);
  }
  void Gather(const py::object& send, const py::object& recv, int root) {
    CallBufs a;
    gather(a, send, recv, root, once());
  }

  template <typename K>
  void scatter(CallBufs& a, const py::object& send, const py::object& recv, int root, K&& k) {
    Buf &s = a.s, &r = a.r;
    if (rank() == root && recv.ptr() == g_in_place) {
      // MPI's in-place Scatter: the root's recvbuf is IN_PLACE, its block stays where it is in sendbuf; that is the
      // communicator's in-place scatter of sendbuf (which does not write the root's buffer).
      to_buf(r, send, true, "Scatter sendbuf (IN_PLACE the root's recvbuf)", size());
      s.in_place = true;
    } else {
      to_buf(r, recv, true, "Scatter recvbuf");
      if (rank() == root) to_buf(s, send, false, "Scatter sendbuf", size());
    }
    size_t per = r.count;
    if (rank() == root && s.in_place) {
      divisible(r.count, "Scatter recvbuf");
      per = r.count / static_cast<size_t>(size());
    } else if (rank() == root) {
      same_count(s, per * static_cast<size_t>(size()), r.dtype, "Scatter sendbuf");
    }
    k(&Communicator::scatter, &Communicator::iscatter, NoAfter{}, send_ptr(s), r.ptr, per, r.dtype, root);
  }
  void Scatter(const py::object& send, const py::object& recv, int root) {
    CallBufs a;
    scatter(a, send, recv, root, once());
  }

  template <typename K>
  void reduce_scatter(CallBufs& a, const py::object& send, const py::object& recv, Op op, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(s, send, false, "Reduce_scatter sendbuf", size());
    to_buf(r, recv, true, "Reduce_scatter recvbuf", s.in_place ? size() : 1);
    reducible(s, r, op, "Reduce_scatter");
    size_t per = r.count;
    if (s.in_place) {
      divisible(r.count, "Reduce_scatter recvbuf");
      per = r.count / static_cast<size_t>(size());
    } else {
      same_count(s, per * static_cast<size_t>(size()), r.dtype, "Reduce_scatter sendbuf");
    }
    // In place, MPI puts this rank's block at the start of recvbuf (comm/ leaves it at its own offset).
    const size_t block = per * tt::dtype_size(r.dtype);
    const size_t from = s.in_place ? static_cast<size_t>(rank()) * block : 0;
    auto after = [p = static_cast<char*>(r.ptr), from, block] {
      if (from > 0) std::memmove(p, p + from, block);
    };
    k(&Communicator::reduce_scatter, &Communicator::ireduce_scatter, after, send_ptr(s), r.ptr, per, r.dtype, op);
  }
  void Reduce_scatter(const py::object& send, const py::object& recv, Op op) {
    CallBufs a;
    reduce_scatter(a, send, recv, op, once());
  }

  template <typename K>
  void alltoall(CallBufs& a, const py::object& send, const py::object& recv, K&& k) {
    Buf &s = a.s, &r = a.r;
    to_buf(r, recv, true, "Alltoall recvbuf", size());
    to_buf(s, send, false, "Alltoall sendbuf", size());
    if (r.count % static_cast<size_t>(size()) != 0)
      throw py::value_error("Alltoall: recvbuf's " + std::to_string(r.count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
    if (!s.in_place) same(s, r, 1, "Alltoall");
    k(&Communicator::alltoall, &Communicator::ialltoall, NoAfter{}, send_ptr(s), r.ptr,
      r.count / static_cast<size_t>(size()), r.dtype);
  }
  void Alltoall(const py::object& send, const py::object& recv) {
    CallBufs a;
    alltoall(a, send, recv, once());
  }

  // Benchmarks (bench/comm/py_comm_bench.py): `iters` calls of one collective (by its Python name; Bcast takes recv) on
  // these buffers, converted once, back to back in C++ without the GIL; the seconds they took. Against the same calls
  // made from Python on the same buffers in the same process, this is the cost of the Python layer alone.
  double time_loop(const std::string& what, const py::object& send, const py::object& recv, Op op, int root,
                   int iters) {
    double seconds = 0;
    auto loop = [&](auto blocking, auto /*nonblocking*/, auto after, auto... args) {
      run([&]() -> tt::Status {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          TT_TRY((c_.get()->*blocking)(args...));
          after();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return tt::Status::ok();
      });
    };
    CallBufs a;
    if (what == "Bcast") bcast(a, recv, root, loop);
    else if (what == "Allreduce") allreduce(a, send, recv, op, loop);
    else if (what == "Reduce") reduce(a, send, recv, op, root, loop);
    else if (what == "Gather") gather(a, send, recv, root, loop);
    else if (what == "Allgather") allgather(a, send, recv, loop);
    else if (what == "Scatter") scatter(a, send, recv, root, loop);
    else if (what == "Reduce_scatter") reduce_scatter(a, send, recv, op, loop);
    else if (what == "Alltoall") alltoall(a, send, recv, loop);
    else
      throw py::value_error("_time_loop: " + what +
                            " (Bcast, Allreduce, Reduce, Gather, Allgather, Scatter, Reduce_scatter, Alltoall)");
    return seconds;
  }

  // Note [non-blocking calls]: the I-methods. The arguments are converted and checked as for the blocking call, into
  // the Request's own Bufs (which hold the buffers until it is waited for), and the operation is queued on the
  // communicator's progress thread (comm/comm.h); the Request holds the Comm too.
  template <typename F>
  py::object nonblocking(PyObject* self, F&& convert_and_start) {
    auto p = new_pending();
    p->comm = py::reinterpret_borrow<py::object>(self);
    convert_and_start(*p);
    return make_request(std::move(p));
  }
  py::object Ibarrier(PyObject* self) {
    return nonblocking(self, [&](Pending& p) { barrier(start(p)); });
  }
  py::object Ibcast(PyObject* self, const py::object& buf, int root) {
    return nonblocking(self, [&](Pending& p) { bcast(p.a, buf, root, start(p)); });
  }
  py::object Iallreduce(PyObject* self, const py::object& send, const py::object& recv, Op op) {
    return nonblocking(self, [&](Pending& p) { allreduce(p.a, send, recv, op, start(p)); });
  }
  py::object Ireduce(PyObject* self, const py::object& send, const py::object& recv, Op op, int root) {
    return nonblocking(self, [&](Pending& p) { reduce(p.a, send, recv, op, root, start(p)); });
  }
  py::object Iallgather(PyObject* self, const py::object& send, const py::object& recv) {
    return nonblocking(self, [&](Pending& p) { allgather(p.a, send, recv, start(p)); });
  }
  py::object Igather(PyObject* self, const py::object& send, const py::object& recv, int root) {
    return nonblocking(self, [&](Pending& p) { gather(p.a, send, recv, root, start(p)); });
  }
  py::object Iscatter(PyObject* self, const py::object& send, const py::object& recv, int root) {
    return nonblocking(self, [&](Pending& p) { scatter(p.a, send, recv, root, start(p)); });
  }
  py::object Ireduce_scatter(PyObject* self, const py::object& send, const py::object& recv, Op op) {
    return nonblocking(self, [&](Pending& p) { reduce_scatter(p.a, send, recv, op, start(p)); });
  }
  py::object Ialltoall(PyObject* self, const py::object& send, const py::object& recv) {
    return nonblocking(self, [&](Pending& p) { alltoall(p.a, send, recv, start(p)); });
  }

 private:
  // The communication, without the GIL; one call at a time per communicator (two Python threads must not run
  // collectives on it at once). The lock is taken without the GIL, so a thread waiting for it cannot block the one
  // holding it.
  template <typename F>
  void run(F&& f) {
    check(locked(f));
  }
  // f() without the GIL, holding the communicator's lock (the calls and the I-calls' starts alike).
  template <typename F>
  auto locked(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return f();
  }
  void divisible(size_t count, const std::string& what) const {
    if (count % static_cast<size_t>(size()) != 0)
      throw py::value_error(what + ": " + std::to_string(count) + " elements are not a multiple of " +
                            std::to_string(size()) + " ranks");
  }
  std::mutex mu_;
  static void same_count(const Buf& s, size_t count, DType dt, const std::string& what) {
    if (s.count != count || s.dtype != dt)
      throw py::value_error(what + ": " + std::to_string(s.count) + " " +
                            (s.move_only ? s.move_only : tt::dtype_name(s.dtype)) + " elements, expected " +
                            std::to_string(count) + " " + tt::dtype_name(dt));
  }
  // Note [bytes and other moved types]: a type moved as another of its size is not reduced as that one.
  static void reducible(const Buf& s, const Buf& r, Op op, const char* call) {
    for (const Buf* b : {&s, &r}) {
      // Note [bitwise and logical reductions] (comm/comm.h): integers only, as MPI's.
      if (tt::comm::op_on_integers_only(op) && !b->in_place && b->ptr != nullptr && !b->move_only &&
          b->dtype != DType::kI32 && b->dtype != DType::kI64 && b->dtype != DType::kU8)
        throw py::type_error(std::string(call) + ": " + tt::comm::op_name(op) + " of " + tt::dtype_name(b->dtype) +
                             " elements: the bitwise and logical reductions take integers (int32, int64, uint8), as "
                             "MPI's");
      if (b->move_only)
        throw py::type_error(std::string(call) + ": " + b->move_only +
                             " elements are moved by tiertrain.comm (Bcast, Gather, Scatter, Allgather, Alltoall, "
                             "Send and Recv) but not reduced; reductions take float32, float64, float16, bfloat16, "
                             "int32, int64 and uint8 (convert, e.g. x.astype(numpy.int32))");
    }
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
// On the H200 host the layer cost about 1.1 us a call (8 B, 8 ranks, Python loop against the same calls from C++ in
// the same process: Bcast 1.83 against 0.72 us), 3-4 times what it costs on the dev machine; at 1 MiB a pooled gather
// takes 9-16 us there, so the layer alone was 7-12%. Hence also, a call: the buffers' views on the stack (no
// allocation), the collective handed to its continuation as a lambda (no std::function), self's PyComm read from
// pybind11's instance and the op found by identity (no type lookups in pybind11's hash table), numpy arrays read
// directly (Note [numpy arrays]), Barrier a fast method too. On the dev machine (bench/comm/py_layer_cost.py: 1 rank, 8 B,
// through a closure, the eight collectives) that took the layer from 227-361 to 110-170 ns a call (Barrier 181 -> 96;
// docs/benchmarks/2026-11-30-h200x2-comm-python-layer/dev-layer-cost.txt).
struct Signature {
  const char* name;
  std::array<const char*, 8> params;
  int count;     // parameters
  int required;  // the first `required` have no default
};

// Whether a keyword is this parameter's name: an ASCII string's bytes compared directly (the usual case, a few ns),
// else by CPython's comparison.
bool same_name(PyObject* key, const char* name) {
  if (PyUnicode_Check(key) && PyUnicode_IS_COMPACT_ASCII(key)) {
    const size_t n = static_cast<size_t>(PyUnicode_GET_LENGTH(key));
    return std::strlen(name) == n && std::memcmp(PyUnicode_DATA(key), name, n) == 0;
  }
  return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

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
      if (same_name(key, sig.params[static_cast<size_t>(i)])) at = i;
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

// The module's SUM, PROD, MIN, MAX, AVG objects and their values: an op is found among them by identity first
// (pybind11's isinstance and cast look its type up in a hash table, a call).
std::array<std::pair<PyObject*, Op>, 11> g_ops{};

// A call's arguments by kind: buffers as given (None where left out), op and root converted.
Op op_arg(PyObject* o, const char* name) {
  if (o == nullptr) return Op::kSum;
  for (const auto& [obj, op] : g_ops)
    if (o == obj) return op;
  if (!py::isinstance<Op>(o))
    throw py::type_error(std::string(name) + ": op must be tiertrain.comm.SUM, PROD, MIN, MAX, AVG, BAND, BOR, BXOR, "
                         "LAND, LOR or LXOR");
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

// The PyComm of a fast method's self (a Comm: CPython's method descriptor checks the type). Read from pybind11's
// instance directly where its layout is the simple one (one C++ type, holder made); pybind11's cast otherwise,
// which looks the type up in a hash table and raises for an instance without its C++ object.
PyComm& comm_of(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  if (inst->simple_layout && inst->simple_holder_constructed && inst->simple_value_holder[0] != nullptr)
    return *static_cast<PyComm*>(inst->simple_value_holder[0]);
  return py::handle(self).cast<PyComm&>();
}

// Runs f (returning a new reference, or nullptr with a Python error set), C++ exceptions turned into Python's.
template <typename F>
PyObject* python_errors(F&& f) {
  try {
    return f();
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

// Runs f(comm, out) for a fast method: the arguments matched, C++ exceptions turned into Python's.
template <typename F>
PyObject* fast_method(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      F&& f) {
  return python_errors([&]() -> PyObject* {
    PyObject* out[8];
    PyComm& c = comm_of(self);
    if (!match_args(sig, args, nargs, kwnames, out)) {
      // An argument error as any other (PyComm::guarded): the peers are told instead of waiting for the deadline.
      c.comm().abandon(std::string(sig.name) + ": arguments that do not match its signature");
      return nullptr;
    }
    PyObject* result = nullptr;
    c.guarded(sig.name, [&] {
      if constexpr (std::is_invocable_v<F&, PyComm&, PyObject**, PyObject*>) {
        result = f(c, out, self).release().ptr();  // (the I-methods: their Request)
      } else {
        f(c, out);
        Py_INCREF(Py_None);
        result = Py_None;
      }
    });
    return result;
  });
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
constexpr Signature kBarrier{"Barrier", {}, 0, 0};
constexpr Signature kBcast{"Bcast", {"buf", "root"}, 2, 1};
constexpr Signature kAllreduce{"Allreduce", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kReduce{"Reduce", {"sendbuf", "recvbuf", "op", "root"}, 4, 1};
constexpr Signature kAllgather{"Allgather", {"sendbuf", "recvbuf"}, 2, 2};
constexpr Signature kGather{"Gather", {"sendbuf", "recvbuf", "root"}, 3, 1};
constexpr Signature kScatter{"Scatter", {"sendbuf", "recvbuf", "root"}, 3, 2};
constexpr Signature kReduceScatter{"Reduce_scatter", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kAlltoall{"Alltoall", {"sendbuf", "recvbuf"}, 2, 2};
constexpr int kFast = METH_FASTCALL | METH_KEYWORDS;

constexpr Signature kIbarrier{"Ibarrier", {}, 0, 0};
constexpr Signature kIbcast{"Ibcast", {"buf", "root"}, 2, 1};
constexpr Signature kIallreduce{"Iallreduce", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kIreduce{"Ireduce", {"sendbuf", "recvbuf", "op", "root"}, 4, 1};
constexpr Signature kIallgather{"Iallgather", {"sendbuf", "recvbuf"}, 2, 2};
constexpr Signature kIgather{"Igather", {"sendbuf", "recvbuf", "root"}, 3, 1};
constexpr Signature kIscatter{"Iscatter", {"sendbuf", "recvbuf", "root"}, 3, 2};
constexpr Signature kIreduceScatter{"Ireduce_scatter", {"sendbuf", "recvbuf", "op"}, 3, 2};
constexpr Signature kIalltoall{"Ialltoall", {"sendbuf", "recvbuf"}, 2, 2};
using Self = PyObject*;

PyMethodDef g_fast_methods[] = {
    {"Barrier", as_cfunction<fast<kBarrier, [](PyComm& c, Args) { c.Barrier(); }>>(), kFast,
     "Barrier()\n\nReturns once every rank has called it."},
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
    // Note [non-blocking calls]
    {"Ibarrier", as_cfunction<fast<kIbarrier, [](PyComm& c, Args, Self self) { return c.Ibarrier(self); }>>(), kFast,
     "Ibarrier() -> Request\n\nBarrier, started: Wait() on the Request returns once every rank has called it."},
    {"Ibcast",
     as_cfunction<fast<kIbcast, [](PyComm& c, Args a, Self self) {
       return c.Ibcast(self, arg_or_none(a[0]), root_arg(a[1], "Ibcast"));
     }>>(),
     kFast, "Ibcast(buf, root=0) -> Request\n\nBcast, started (buf is held, and must not be touched, until Wait())."},
    {"Iallreduce",
     as_cfunction<fast<kIallreduce, [](PyComm& c, Args a, Self self) {
       return c.Iallreduce(self, arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Iallreduce"));
     }>>(),
     kFast,
     "Iallreduce(sendbuf, recvbuf, op=SUM) -> Request\n\nAllreduce, started (the buffers are held until Wait())."},
    {"Ireduce",
     as_cfunction<fast<kIreduce, [](PyComm& c, Args a, Self self) {
       return c.Ireduce(self, arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Ireduce"), root_arg(a[3], "Ireduce"));
     }>>(),
     kFast, "Ireduce(sendbuf, recvbuf=None, op=SUM, root=0) -> Request\n\nReduce, started."},
    {"Iallgather",
     as_cfunction<fast<kIallgather, [](PyComm& c, Args a, Self self) {
       return c.Iallgather(self, arg_or_none(a[0]), arg_or_none(a[1]));
     }>>(),
     kFast, "Iallgather(sendbuf, recvbuf) -> Request\n\nAllgather, started."},
    {"Igather",
     as_cfunction<fast<kIgather, [](PyComm& c, Args a, Self self) {
       return c.Igather(self, arg_or_none(a[0]), arg_or_none(a[1]), root_arg(a[2], "Igather"));
     }>>(),
     kFast, "Igather(sendbuf, recvbuf=None, root=0) -> Request\n\nGather, started."},
    {"Iscatter",
     as_cfunction<fast<kIscatter, [](PyComm& c, Args a, Self self) {
       return c.Iscatter(self, arg_or_none(a[0]), arg_or_none(a[1]), root_arg(a[2], "Iscatter"));
     }>>(),
     kFast, "Iscatter(sendbuf, recvbuf, root=0) -> Request\n\nScatter, started."},
    {"Ireduce_scatter",
     as_cfunction<fast<kIreduceScatter, [](PyComm& c, Args a, Self self) {
       return c.Ireduce_scatter(self, arg_or_none(a[0]), arg_or_none(a[1]), op_arg(a[2], "Ireduce_scatter"));
     }>>(),
     kFast, "Ireduce_scatter(sendbuf, recvbuf, op=SUM) -> Request\n\nReduce_scatter, started."},
    {"Ialltoall",
     as_cfunction<fast<kIalltoall, [](PyComm& c, Args a, Self self) {
       return c.Ialltoall(self, arg_or_none(a[0]), arg_or_none(a[1]));
     }>>(),
     kFast, "Ialltoall(sendbuf, recvbuf) -> Request\n\nAlltoall, started."},
};

// Note [python point-to-point]
// Send, Recv, Sendrecv, Isend, Irecv, Probe and Iprobe take any contiguous buffer, in C or Fortran order (numpy
// arrays of any type, bytes, bytearray, memoryview) or a CPU DLPack tensor. Elements of a type the collectives know (float32/64/16,
// int32/64, bfloat16 by DLPack) travel typed, so a receive into another of those types is refused as the C++ call
// refuses it; others travel as bytes (and match any type). Status objects (tiertrain.comm.Status, or any object with
// settable attributes) get the source, the tag and the count in bytes. The lower-case object forms (send, recv,
// isend, irecv, sendrecv) send pickles through _send_obj and the others, and receive messages of any length.
// A point-to-point buffer: its Buf (where the caller keeps it: on the stack, or in a Request's Pending) and how it
// travels.
struct P2pBuf {
  Buf& b;
  size_t bytes = 0;
  bool typed = false;
};

P2pBuf p2p_buf(const PyComm& c, Buf& b, const py::object& o, bool writable, const char* what) {
  if (o.ptr() == g_in_place) throw py::type_error(std::string(what) + ": IN_PLACE is for collectives");
  P2pBuf pb{b};
  if (numpy_buf(b, o.ptr(), writable)) {  // Note [numpy arrays]: aligned, so typed
    pb.bytes = b.count * tt::dtype_size(b.dtype);
    pb.typed = true;
    return pb;
  }
  if (PyObject_CheckBuffer(o.ptr())) {
    const int flags = PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);  // (C or Fortran)
    if (PyObject_GetBuffer(o.ptr(), &b.view, flags) != 0) throw py::error_already_set();
    b.has_view = true;
    const Py_buffer& v = b.view;
    b.ptr = v.buf;
    pb.bytes = static_cast<size_t>(v.len);
    try {
      b.dtype = dtype_of_format(v.format, static_cast<size_t>(v.itemsize), what, &b.move_only);
      pb.typed = reinterpret_cast<uintptr_t>(v.buf) % tt::dtype_size(b.dtype) == 0;
      b.count = pb.typed ? pb.bytes / tt::dtype_size(b.dtype) : 0;
    } catch (const py::type_error&) {
      pb.typed = false;  // bytes
    }
    return pb;
  }
  c.to_buf(b, o, writable, what);  // DLPack (raises for what is neither)
  pb.bytes = b.count * tt::dtype_size(b.dtype);
  pb.typed = true;
  return pb;
}

tt::Status p2p_send(Communicator& c, const P2pBuf& pb, int dest, int tag) {
  return pb.typed ? c.send(pb.b.ptr, pb.b.count, pb.b.dtype, dest, tag) : c.send_bytes(pb.b.ptr, pb.bytes, dest, tag);
}
tt::Status p2p_recv(Communicator& c, const P2pBuf& pb, int source, int tag, tt::comm::MessageInfo* info) {
  return pb.typed ? c.recv(pb.b.ptr, pb.b.count, pb.b.dtype, source, tag, info)
                  : c.recv_bytes(pb.b.ptr, pb.bytes, source, tag, info);
}

std::string bytes_of(const py::bytes& data) { return std::string(data); }

// Note [point-to-point fast calls]
// Send, Recv, Sendrecv, Isend and Irecv are what mpi4py programs call most, a message at a time, and pybind11's
// dispatcher costs about as much as the engine's post (it builds argument vectors and matches overloads, a few
// allocations a call); a Python function in front costs a fifth of it again. So they are fast-call methods of Comm
// themselves (Note [python calls]), with mpi4py's keywords and defaults: the common case, exact numpy arrays and
// peers that are someone (not PROC_NULL), runs here; every other case (mpi4py's buffer specs, PROC_NULL, other
// buffers) goes to comm.py's general function of that name (_set_p2p_general), which calls the positional methods
// below: _p2p_send(buf, dest, tag), _p2p_recv(buf, source, tag, status), _p2p_sendrecv(sendbuf, dest, sendtag,
// recvbuf, source, recvtag, status), _p2p_isend(buf, dest, tag), _p2p_irecv(buf, source, tag). Unlike the
// collectives', their errors do not give up on the communicator: no peer waits in a collective for this rank.

bool p2p_args(const char* name, Py_ssize_t n, Py_ssize_t want) {
  if (n == want) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, want, n);
  return false;
}

// An int (or anything with __index__) that fits one, else a Python error.
bool p2p_int(PyObject* o, const char* what, int* out) {
  const long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    PyErr_Format(PyExc_OverflowError, "%s %ld is out of range", what, v);
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

// Send (send) or Recv (status: where the source, tag and count go, or None): the buffer's export on the stack, the
// call without the GIL.
PyObject* p2p_blocking(PyObject* self, PyObject* buf, int peer, int tag, PyObject* status, bool send) {
  return python_errors([&]() -> PyObject* {
    PyComm& c = comm_of(self);
    Buf b;
    const P2pBuf pb = p2p_buf(c, b, py::reinterpret_borrow<py::object>(buf), !send, send ? "Send" : "Recv");
    tt::comm::MessageInfo info;
    tt::Status st;
    {
      py::gil_scoped_release nogil;
      st = send ? p2p_send(c.comm(), pb, peer, tag) : p2p_recv(c.comm(), pb, peer, tag, &info);
    }
    check(st);
    if (!send) fill_status(py::reinterpret_borrow<py::object>(status), info);
    Py_RETURN_NONE;
  });
}

// Isend (send) or Irecv: a Request holding the buffer's export and the communicator until it is done.
PyObject* p2p_post(PyObject* self, PyObject* buf, int peer, int tag, bool send) {
  return python_errors([&]() -> PyObject* {
    PyComm& c = comm_of(self);
    auto p = new_pending();
    const py::object b = py::reinterpret_borrow<py::object>(buf);
    const P2pBuf pb = send ? p2p_buf(c, p->a.s, b, false, "Isend") : p2p_buf(c, p->a.r, b, true, "Irecv");
    p->comm = py::reinterpret_borrow<py::object>(self);
    if (send)
      p->req = pb.typed ? c.comm().isend(pb.b.ptr, pb.b.count, pb.b.dtype, peer, tag)
                        : c.comm().isend_bytes(pb.b.ptr, pb.bytes, peer, tag);
    else
      p->req = pb.typed ? c.comm().irecv(pb.b.ptr, pb.b.count, pb.b.dtype, peer, tag, &p->info)
                        : c.comm().irecv_bytes(pb.b.ptr, pb.bytes, peer, tag, &p->info);
    return make_request(std::move(p)).release().ptr();
  });
}

// The positional methods: (buf, peer, tag) and Recv's status.
template <bool Send, bool Post>
PyObject* p2p_positional(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  constexpr const char* name = Post ? (Send ? "_p2p_isend" : "_p2p_irecv") : (Send ? "_p2p_send" : "_p2p_recv");
  int peer = 0, tag = 0;
  if (!p2p_args(name, n, !Post && !Send ? 4 : 3) || !p2p_int(args[1], Send ? "dest" : "source", &peer) ||
      !p2p_int(args[2], "tag", &tag))
    return nullptr;
  if constexpr (Post) return p2p_post(self, args[0], peer, tag, Send);
  return p2p_blocking(self, args[0], peer, tag, Send ? Py_None : args[3], Send);
}

// Send and Recv at once, both driven on this thread (neither waits for the other).
PyObject* p2p_sendrecv(PyObject* self, PyObject* sendbuf, int dest, int sendtag, PyObject* recvbuf, int source,
                       int recvtag, PyObject* status) {
  return python_errors([&]() -> PyObject* {
    PyComm& c = comm_of(self);
    Buf sb, rb;
    const P2pBuf s = p2p_buf(c, sb, py::reinterpret_borrow<py::object>(sendbuf), false, "Sendrecv");
    const P2pBuf r = p2p_buf(c, rb, py::reinterpret_borrow<py::object>(recvbuf), true, "Sendrecv");
    const auto type = [](const P2pBuf& pb) {
      return pb.typed ? static_cast<int32_t>(pb.b.dtype) : tt::comm::kBytesType;
    };
    tt::comm::MessageInfo info;
    tt::Status st;
    {
      py::gil_scoped_release nogil;
      st = c.comm().sendrecv_raw(s.b.ptr, s.bytes, type(s), dest, sendtag, r.b.ptr, r.bytes, type(r), source, recvtag,
                                 &info);
    }
    check(st);
    fill_status(py::reinterpret_borrow<py::object>(status), info);
    Py_RETURN_NONE;
  });
}
PyObject* p2p_sendrecv_method(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  int dest = 0, sendtag = 0, source = 0, recvtag = 0;
  if (!p2p_args("_p2p_sendrecv", n, 7) || !p2p_int(args[1], "dest", &dest) ||
      !p2p_int(args[2], "sendtag", &sendtag) || !p2p_int(args[4], "source", &source) ||
      !p2p_int(args[5], "recvtag", &recvtag))
    return nullptr;
  return p2p_sendrecv(self, args[0], dest, sendtag, args[3], source, recvtag, args[6]);
}

// mpi4py's PROC_NULL: a peer that is no one (comm.py's operations with it are done at once).
constexpr int kProcNull = -2;
// comm.py's general Send, Recv, Isend, Irecv and Sendrecv (owned for the life of the process; null before it is
// imported).
std::array<PyObject*, 5> g_p2p_general{};

// comm.py's general function `which` (Note [point-to-point fast calls]), called with these arguments.
PyObject* p2p_general(size_t which, const char* name, PyObject* const* call, size_t n) {
  PyObject* general = g_p2p_general[which];
  if (general == nullptr) {
    PyErr_Format(PyExc_TypeError, "Comm.%s: import tiertrain.comm first (it takes buffer specs and PROC_NULL)", name);
    return nullptr;
  }
  return PyObject_Vectorcall(general, call, n, nullptr);
}

constexpr Signature kSend{"Send", {"buf", "dest", "tag"}, 3, 2};
constexpr Signature kRecv{"Recv", {"buf", "source", "tag", "status"}, 4, 1};
constexpr Signature kIsend{"Isend", {"buf", "dest", "tag"}, 3, 2};
constexpr Signature kIrecv{"Irecv", {"buf", "source", "tag"}, 3, 1};

// The public methods: the arguments by position or keyword; an exact numpy array to someone here, the rest in
// comm.py's general function (given the peer and tag as converted, the defaults filled in).
template <bool Send, bool Post>
PyObject* p2p_public(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Signature& sig = Post ? (Send ? kIsend : kIrecv) : (Send ? kSend : kRecv);
  PyObject* out[8];
  if (!match_args(sig, args, nargs, kwnames, out)) return nullptr;
  int peer = tt::comm::kAnySource, tag = Send ? 0 : tt::comm::kAnyTag;
  if ((out[1] != nullptr && !p2p_int(out[1], Send ? "dest" : "source", &peer)) ||
      (out[2] != nullptr && !p2p_int(out[2], "tag", &tag)))
    return nullptr;
  PyObject* status = !Post && !Send && out[3] != nullptr ? out[3] : Py_None;
  if (is_ndarray(out[0]) && peer != kProcNull) {
    if constexpr (Post) return p2p_post(self, out[0], peer, tag, Send);
    return p2p_blocking(self, out[0], peer, tag, status, Send);
  }
  py::object p = py::reinterpret_steal<py::object>(PyLong_FromLong(peer));
  py::object t = py::reinterpret_steal<py::object>(PyLong_FromLong(tag));
  if (!p || !t) return nullptr;
  PyObject* call[5] = {self, out[0], p.ptr(), t.ptr(), status};
  return p2p_general((Post ? 2 : 0) + (Send ? 0 : 1), sig.name, call, !Post && !Send ? 5 : 4);
}

constexpr Signature kSendrecv{"Sendrecv", {"sendbuf", "dest", "sendtag", "recvbuf", "source", "recvtag", "status"}, 7,
                              2};

// Sendrecv: two exact numpy arrays, each to or from someone, here; the rest in comm.py's general Sendrecv.
PyObject* p2p_sendrecv_public(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* out[8];
  if (!match_args(kSendrecv, args, nargs, kwnames, out)) return nullptr;
  int dest = 0, sendtag = 0, source = tt::comm::kAnySource, recvtag = tt::comm::kAnyTag;
  if (!p2p_int(out[1], "dest", &dest) || (out[2] != nullptr && !p2p_int(out[2], "sendtag", &sendtag)) ||
      (out[4] != nullptr && !p2p_int(out[4], "source", &source)) ||
      (out[5] != nullptr && !p2p_int(out[5], "recvtag", &recvtag)))
    return nullptr;
  PyObject* status = out[6] != nullptr ? out[6] : Py_None;
  if (out[3] != nullptr && is_ndarray(out[0]) && is_ndarray(out[3]) && dest != kProcNull && source != kProcNull)
    return p2p_sendrecv(self, out[0], dest, sendtag, out[3], source, recvtag, status);
  const std::array<py::object, 4> ints{py::reinterpret_steal<py::object>(PyLong_FromLong(dest)),
                                       py::reinterpret_steal<py::object>(PyLong_FromLong(sendtag)),
                                       py::reinterpret_steal<py::object>(PyLong_FromLong(source)),
                                       py::reinterpret_steal<py::object>(PyLong_FromLong(recvtag))};
  for (const py::object& i : ints)
    if (!i) return nullptr;
  PyObject* recvbuf = out[3] != nullptr ? out[3] : Py_None;
  PyObject* call[8] = {self, out[0], ints[0].ptr(), ints[1].ptr(), recvbuf, ints[2].ptr(), ints[3].ptr(), status};
  return p2p_general(4, "Sendrecv", call, 8);
}

PyMethodDef g_p2p_methods[] = {
    {"Send", as_cfunction<p2p_public<true, false>>(), METH_FASTCALL | METH_KEYWORDS,
     "Send(buf, dest, tag=0): sends `buf` (or an mpi4py buffer spec) to rank `dest` (MPI's standard send: returns "
     "once `buf` may be reused; messages under 32 KiB are buffered at once)."},
    {"Recv", as_cfunction<p2p_public<false, false>>(), METH_FASTCALL | METH_KEYWORDS,
     "Recv(buf, source=ANY_SOURCE, tag=ANY_TAG, status=None): receives a message from `source` (or ANY_SOURCE) with "
     "`tag` (or ANY_TAG) into `buf`: at most its length (a longer message raises CommMismatchError and is dropped). "
     "`status` gets the source, tag and length."},
    {"Isend", as_cfunction<p2p_public<true, true>>(), METH_FASTCALL | METH_KEYWORDS,
     "Isend(buf, dest, tag=0): Send, started: a Request (Wait, Test). `buf` must not change until it is done."},
    {"Irecv", as_cfunction<p2p_public<false, true>>(), METH_FASTCALL | METH_KEYWORDS,
     "Irecv(buf, source=ANY_SOURCE, tag=ANY_TAG): Recv, started: a Request; Wait(status) fills `status`. Leave "
     "`buf` alone until it is done."},
    {"Sendrecv", as_cfunction<p2p_sendrecv_public>(), METH_FASTCALL | METH_KEYWORDS,
     "Sendrecv(sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None): Send and "
     "Recv at once (neither waits for the other)."},
    {"_p2p_send", as_cfunction<p2p_positional<true, false>>(), METH_FASTCALL,
     "_p2p_send(buf, dest, tag): Send's call (Note [point-to-point fast calls])."},
    {"_p2p_recv", as_cfunction<p2p_positional<false, false>>(), METH_FASTCALL,
     "_p2p_recv(buf, source, tag, status): Recv's call."},
    {"_p2p_sendrecv", as_cfunction<p2p_sendrecv_method>(), METH_FASTCALL,
     "_p2p_sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status): Sendrecv's call."},
    {"_p2p_isend", as_cfunction<p2p_positional<true, true>>(), METH_FASTCALL,
     "_p2p_isend(buf, dest, tag): Isend's call."},
    {"_p2p_irecv", as_cfunction<p2p_positional<false, true>>(), METH_FASTCALL,
     "_p2p_irecv(buf, source, tag): Irecv's call."},
};

// Note [request objects]
// Request is a type of CPython's C API, not a pybind11 class: an mpi4py program makes and drops one a message (Isend,
// Irecv), and a pybind11 instance costs about a third of a post to make and drop (its registry of instances, keyed by
// address, updated each time; its type looked up in a hash table at each cast). The object holds the Pending (null
// once waited for), what the wait found and the object layer's received bytes. Its methods are Note [non-blocking
// calls]'s; Waitall and the other list operations are comm.py's (Note [request sets]), over _wait_plain.
struct RequestObject {
  PyObject_HEAD
  std::shared_ptr<Pending> p;  // null once waited for
  tt::comm::MessageInfo info;  // what the wait found
  PyObject* result;            // the object layer's received bytes once waited for, else None (owned)
};
PyTypeObject* g_request_type = nullptr;  // (owned for the life of the process)

RequestObject* as_request(PyObject* o) { return reinterpret_cast<RequestObject*>(o); }

py::object make_request(std::shared_ptr<Pending> p) {
  void* mem = PyObject_Malloc(sizeof(RequestObject));
  if (mem == nullptr) throw std::bad_alloc();
  PyObject* o = PyObject_Init(static_cast<PyObject*>(mem), g_request_type);  // (a reference to the type, too)
  RequestObject* r = as_request(o);
  new (&r->p) std::shared_ptr<Pending>(std::move(p));
  new (&r->info) tt::comm::MessageInfo();
  Py_INCREF(Py_None);
  r->result = Py_None;
  return py::reinterpret_steal<py::object>(o);
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// r completed after p's wait: what it found kept, p let go (the last holder lets the buffers go, with the GIL).
tt::Status complete(RequestObject* r, std::shared_ptr<Pending>& p) {
  const tt::Status st = p->status;
  r->info = p->info;
  if (st.is_ok() && p->wants_bytes) {
    PyObject* b = PyBytes_FromStringAndSize(p->bytes.data(), static_cast<Py_ssize_t>(p->bytes.size()));
    if (b == nullptr) throw py::error_already_set();
    PyObject* old = r->result;
    r->result = b;
    Py_DECREF(old);
  }
  p.reset();
  return st;
}

// Wait: without the GIL unless the operation is done already (a small message's usual case). Two threads may wait
// on one Request: each holds the Pending while it waits, and the wait is done once (Pending::wait_once).
void wait_request(RequestObject* r, const py::object& status) {
  if (std::shared_ptr<Pending> p = r->p) {
    if (p->req.ready()) {
      p->wait_once();
    } else {
      py::gil_scoped_release nogil;
      p->wait_once();
    }
    r->p.reset();
    check(complete(r, p));
  }
  fill_status(status, r->info);
}

// Note [request sets] (comm.py): Waitall's plain case, every item a Request of this type and no statuses, in one
// call: the waits under one release of the GIL (none when all are done), then each request completed as Wait
// completes it; the first error raised once all are done.
void wait_all(const std::vector<RequestObject*>& rs) {
  std::vector<std::shared_ptr<Pending>> ps;
  ps.reserve(rs.size());
  bool ready = true;
  for (RequestObject* r : rs) {
    ps.push_back(r->p);
    if (r->p && !r->p->req.ready()) ready = false;
  }
  if (ready) {
    for (const auto& p : ps)
      if (p) p->wait_once();
  } else {
    py::gil_scoped_release nogil;
    for (const auto& p : ps)
      if (p) p->wait_once();
  }
  tt::Status first;
  for (size_t i = 0; i < rs.size(); ++i) {
    if (!ps[i]) continue;
    rs[i]->p.reset();  // (a request listed twice: completed twice, the same way)
    const tt::Status st = complete(rs[i], ps[i]);
    if (!st.is_ok() && first.is_ok()) first = st;
  }
  check(first);
}

constexpr Signature kWait{"Wait", {"status"}, 1, 0};
constexpr Signature kTest{"Test", {"status"}, 1, 0};

PyObject* request_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* out[8];
  if (!match_args(kWait, args, nargs, kwnames, out)) return nullptr;
  return python_errors([&]() -> PyObject* {
    wait_request(as_request(self), arg_or_none(out[0]));
    Py_RETURN_NONE;
  });
}

PyObject* request_test(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* out[8];
  if (!match_args(kTest, args, nargs, kwnames, out)) return nullptr;
  return python_errors([&]() -> PyObject* {
    const std::shared_ptr<Pending>& p = as_request(self)->p;
    if (p && p->req.valid() && !p->req.test()) Py_RETURN_FALSE;
    wait_request(as_request(self), arg_or_none(out[0]));
    Py_RETURN_TRUE;
  });
}

PyObject* request_result(PyObject* self, PyObject*) {
  PyObject* r = as_request(self)->result;
  Py_INCREF(r);
  return r;
}

// Only a list of this type's Requests (an exact type check an item): they are waited for (True); else nothing is and
// the caller takes the general way (False). The items are held while the GIL is let go (the list may change then).
PyObject* request_wait_plain(PyObject*, PyObject* requests) {
  if (!PyList_CheckExact(requests)) Py_RETURN_FALSE;
  return python_errors([&]() -> PyObject* {
    const Py_ssize_t n = PyList_GET_SIZE(requests);
    std::vector<py::object> held;
    std::vector<RequestObject*> rs;
    held.reserve(static_cast<size_t>(n));
    rs.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* o = PyList_GET_ITEM(requests, i);
      if (Py_TYPE(o) != g_request_type) Py_RETURN_FALSE;
      held.push_back(py::reinterpret_borrow<py::object>(o));
      rs.push_back(as_request(o));
    }
    wait_all(rs);
    Py_RETURN_TRUE;
  });
}

// Waited for (mpi4py's requests become REQUEST_NULL then): its buffers let go, Wait returns at once.
PyObject* request_waited(PyObject* self, void*) { return PyBool_FromLong(!as_request(self)->p); }

// Done (a Wait would return at once), without waiting or letting anything go: Testall's look.
PyObject* request_ready(PyObject* self, void*) {
  return python_errors([&]() -> PyObject* {
    const std::shared_ptr<Pending>& p = as_request(self)->p;
    return PyBool_FromLong(!p || !p->req.valid() || p->req.test());
  });
}

// mpi4py's: a request waited for compares equal to REQUEST_NULL (and to any other waited for).
PyObject* request_compare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(a, g_request_type) ||
      !PyObject_TypeCheck(b, g_request_type))
    Py_RETURN_NOTIMPLEMENTED;
  const bool eq = a == b || (!as_request(a)->p && !as_request(b)->p);
  return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

Py_hash_t request_hash(PyObject* self) { return PyBaseObject_Type.tp_hash(self); }  // (by identity)

PyObject* request_new(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError, "tiertrain.comm.Request: made by Isend, Irecv and the other I-methods only");
  return nullptr;
}

// A Request dropped before it was waited for is waited for here (what comes after it too), its error logged: its
// buffers are not let go while the operation may still touch them.
void request_dealloc(PyObject* self) {
  RequestObject* r = as_request(self);
  PyTypeObject* type = Py_TYPE(self);
  if (std::shared_ptr<Pending> p = std::move(r->p)) {
    if (finalizing()) {
      p->wait_once();  // (the progress thread needs no GIL)
    } else {
      py::gil_scoped_release nogil;
      p->wait_once();
    }
    if (!p->status.is_ok())
      TT_LOG(WARN, COMM, "a Request dropped before Wait() failed: %s", p->status.to_string().c_str());
  }
  r->p.~shared_ptr();
  Py_XDECREF(r->result);
  PyObject_Free(self);
  Py_DECREF(type);
}

PyMethodDef g_request_methods[] = {
    {"Wait", as_cfunction<request_wait>(), METH_FASTCALL | METH_KEYWORDS,
     "Wait(status=None): waits for the operation (without the GIL), then lets its buffers go; raises as the "
     "blocking call would. A receive's source, tag and count (bytes) go into `status` if given."},
    {"Test", as_cfunction<request_test>(), METH_FASTCALL | METH_KEYWORDS,
     "Test(status=None): whether the operation is done (and if so, as Wait())."},
    {"_result", request_result, METH_NOARGS, "The object layer's received bytes, once waited for."},
    {"_wait_plain", request_wait_plain, METH_O | METH_STATIC,
     "Waitall's plain case: waits for every item of a list of Requests (True), or does nothing (False) where an "
     "item is another kind of request."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef g_request_getset[] = {
    {"_waited", request_waited, nullptr, "Waited for: its buffers let go.", nullptr},
    {"_ready", request_ready, nullptr, "Done: a Wait would return at once.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// The type, made once at import (a heap type: comm.py adds Waitall and the other list operations to it).
PyTypeObject* make_request_type() {
  static PyType_Slot slots[] = {
      {Py_tp_dealloc, reinterpret_cast<void*>(request_dealloc)},
      {Py_tp_methods, g_request_methods},
      {Py_tp_getset, g_request_getset},
      {Py_tp_richcompare, reinterpret_cast<void*>(request_compare)},
      {Py_tp_hash, reinterpret_cast<void*>(request_hash)},
      {Py_tp_new, reinterpret_cast<void*>(request_new)},
      {Py_tp_doc, const_cast<char*>("A non-blocking operation in flight (mpi4py's Request): Wait, Test.")},
      {0, nullptr},
  };
  static PyType_Spec spec = {"tiertrain._comm.Request", static_cast<int>(sizeof(RequestObject)), 0,
                             Py_TPFLAGS_DEFAULT, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  return reinterpret_cast<PyTypeObject*>(type);
}

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
  tt::log::configure(tt::env::get_or("TIERTRAIN_DEBUG", ""), tt::env::get_or("TIERTRAIN_DEBUG_SUBSYS", ""));

  py::enum_<Op>(m, "Op")
      .value("SUM", Op::kSum)
      .value("PROD", Op::kProd)
      .value("MIN", Op::kMin)
      .value("MAX", Op::kMax)
      .value("AVG", Op::kAvg)
      // Note [bitwise and logical reductions] (comm/comm.h): integer elements only.
      .value("BAND", Op::kBand)
      .value("BOR", Op::kBor)
      .value("BXOR", Op::kBxor)
      .value("LAND", Op::kLand)
      .value("LOR", Op::kLor)
      .value("LXOR", Op::kLxor)
      .export_values();
  g_ops = {{{py::object(m.attr("SUM")).release().ptr(), Op::kSum},
            {py::object(m.attr("PROD")).release().ptr(), Op::kProd},
            {py::object(m.attr("MIN")).release().ptr(), Op::kMin},
            {py::object(m.attr("MAX")).release().ptr(), Op::kMax},
            {py::object(m.attr("AVG")).release().ptr(), Op::kAvg},
            {py::object(m.attr("BAND")).release().ptr(), Op::kBand},
            {py::object(m.attr("BOR")).release().ptr(), Op::kBor},
            {py::object(m.attr("BXOR")).release().ptr(), Op::kBxor},
            {py::object(m.attr("LAND")).release().ptr(), Op::kLand},
            {py::object(m.attr("LOR")).release().ptr(), Op::kLor},
            {py::object(m.attr("LXOR")).release().ptr(), Op::kLxor}}};  // owned for the process's life

  // IN_PLACE: a unique sentinel object, compared by identity.
  py::object sentinel = py::module_::import("types").attr("SimpleNamespace")();
  sentinel.attr("__doc__") = "tiertrain.comm.IN_PLACE";
  g_in_place = sentinel.inc_ref().ptr();
  m.attr("IN_PLACE") = sentinel;

  py::class_<SharedBuffer>(m, "_SharedBuffer", py::buffer_protocol())
      .def_buffer([](SharedBuffer& b) { return b.info(); });

  // Note [non-blocking calls]
  g_request_type = make_request_type();
  m.attr("Request") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_request_type));

  py::class_<PyComm>(m, "Comm")
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("backend", [](PyComm& c) { return std::string(c.comm().backend()); },
                             "What carries the messages: shm, mpi or nccl.")
      .def("Get_rank", &PyComm::rank)
      .def("Get_size", &PyComm::size)
      .def(
          "Split",
          [](PyComm& c, int color, int key) -> std::unique_ptr<PyComm> {
            tt::Result<std::unique_ptr<Communicator>> sub = std::unique_ptr<Communicator>();
            c.guarded("Split", [&] {
              py::gil_scoped_release nogil;  // a collective: it waits for the other ranks
              sub = c.comm().split(color, key);
            });
            if (!sub.is_ok()) raise(sub.status());
            if (sub.value() == nullptr) return nullptr;
            return std::make_unique<PyComm>(std::move(sub.value()));
          },
          py::arg("color") = 0, py::arg("key") = 0,
          "mpi4py's Split (Note [split] in comm/comm.h): the ranks giving the same color form a new Comm, ranked by "
          "(key, rank here); a color < 0 (UNDEFINED) joins none and gets None. Collective over this Comm.")
      .def(
          "Dup",
          [](PyComm& c) -> std::unique_ptr<PyComm> {
            tt::Result<std::unique_ptr<Communicator>> sub = std::unique_ptr<Communicator>();
            c.guarded("Dup", [&] {
              py::gil_scoped_release nogil;
              sub = c.comm().split(0, c.comm().rank());
            });
            if (!sub.is_ok()) raise(sub.status());
            return std::make_unique<PyComm>(std::move(sub.value()));
          },
          "mpi4py's Dup: a new Comm of the same ranks in the same order (its operations apart from this one's). "
          "Collective.")
      // Note [python point-to-point]; Send, Recv, Sendrecv, Isend and Irecv: Note [point-to-point fast calls]
      .def(
          "_Probe",
          [](PyComm& c, int source, int tag, const py::object& status) {
            tt::comm::MessageInfo info;
            tt::Status st;
            {
              py::gil_scoped_release nogil;
              st = c.comm().probe(source, tag, &info);
            }
            check(st);
            fill_status(status, info);
          },
          py::arg("source") = tt::comm::kAnySource, py::arg("tag") = tt::comm::kAnyTag, py::arg("status") = py::none(),
          "Waits until a message that Recv(source, tag) would take has arrived, without taking it.")
      .def(
          "_Iprobe",
          [](PyComm& c, int source, int tag, const py::object& status) {
            tt::comm::MessageInfo info;
            tt::Result<bool> got = false;
            {
              py::gil_scoped_release nogil;
              got = c.comm().iprobe(source, tag, &info);
            }
            if (!got.is_ok()) raise(got.status());
            if (got.value()) fill_status(status, info);
            return got.value();
          },
          py::arg("source") = tt::comm::kAnySource, py::arg("tag") = tt::comm::kAnyTag, py::arg("status") = py::none(),
          "Whether a message that Recv(source, tag) would take has arrived (not taken).")
      .def_static(
          "_null_request",
          [](int source) {
            auto p = new_pending();
            p->info.source = source;
            return make_request(std::move(p));
          },
          py::arg("source"), "A Request done at once (an operation with PROC_NULL), its status' source `source`.")
      .def(
          "_send_obj",
          [](PyComm& c, const py::bytes& data, int dest, int tag) {
            const std::string d = bytes_of(data);
            tt::Status st;
            {
              py::gil_scoped_release nogil;
              st = c.comm().send_bytes(d.data(), d.size(), dest, tag);
            }
            check(st);
          },
          py::arg("data"), py::arg("dest"), py::arg("tag"))
      .def(
          "_recv_obj",
          [](PyComm& c, int source, int tag, const py::object& status) {
            std::vector<char> got;
            tt::comm::MessageInfo info;
            tt::Status st;
            {
              py::gil_scoped_release nogil;
              st = c.comm().recv_any(&got, source, tag, &info);
            }
            check(st);
            fill_status(status, info);
            return py::bytes(got.data(), got.size());
          },
          py::arg("source"), py::arg("tag"), py::arg("status") = py::none())
      .def(
          "_isend_obj",
          [](py::object self, const py::bytes& data, int dest, int tag) {
            PyComm& c = self.cast<PyComm&>();
            auto p = new_pending();
            const std::string d = bytes_of(data);
            p->bytes.assign(d.begin(), d.end());
            p->comm = self;
            p->req = c.comm().isend_bytes(p->bytes.data(), p->bytes.size(), dest, tag);
            return make_request(std::move(p));
          },
          py::arg("data"), py::arg("dest"), py::arg("tag"))
      .def(
          "_irecv_obj",
          [](py::object self, int source, int tag) {
            PyComm& c = self.cast<PyComm&>();
            auto p = new_pending();
            p->comm = self;
            p->wants_bytes = true;
            p->req = c.comm().irecv_any(&p->bytes, source, tag, &p->info);
            return make_request(std::move(p));
          },
          py::arg("source"), py::arg("tag"))
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

  // Note [python calls]: the collectives, as fast-call methods of Comm; Note [point-to-point fast calls] too.
  py::object cls = m.attr("Comm");
  std::vector<PyMethodDef*> methods;
  for (PyMethodDef& d : g_fast_methods) methods.push_back(&d);
  for (PyMethodDef& d : g_p2p_methods) methods.push_back(&d);
  for (PyMethodDef* dp : methods) {
    PyMethodDef& d = *dp;
    PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &d);
    if (descr == nullptr || PyObject_SetAttrString(cls.ptr(), d.ml_name, descr) != 0) {
      Py_XDECREF(descr);
      throw py::error_already_set();
    }
    Py_DECREF(descr);
  }

  m.def("_numpy_direct_reads", [] { return g_numpy_reads; },
        "Tests only: how many numpy arrays the calls have read directly (Note [numpy arrays]).");

  m.attr("UNDEFINED") = Communicator::kUndefined;
  m.attr("ANY_SOURCE") = tt::comm::kAnySource;
  m.attr("ANY_TAG") = tt::comm::kAnyTag;
  m.attr("PROC_NULL") = kProcNull;
  m.def(
      "_set_p2p_general",
      [](const py::object& send, const py::object& recv, const py::object& isend, const py::object& irecv,
         const py::object& sendrecv) {
        // Note [point-to-point fast calls]: comm.py's functions for the cases the methods do not take themselves.
        const std::array<const py::object*, 5> fs{&send, &recv, &isend, &irecv, &sendrecv};
        for (size_t i = 0; i < fs.size(); ++i) {
          Py_XDECREF(g_p2p_general[i]);
          g_p2p_general[i] = fs[i]->inc_ref().ptr();
        }
      },
      py::arg("send"), py::arg("recv"), py::arg("isend"), py::arg("irecv"), py::arg("sendrecv"),
      "comm.py's general Send, Recv, Isend, Irecv and Sendrecv (buffer specs, PROC_NULL, buffers other than numpy "
      "arrays).");
  m.attr("TAG_UB") = tt::comm::kMaxTag;
  m.def("world", [] {
    // The rendezvous waits for the other ranks: without the GIL.
    tt::Result<std::unique_ptr<Communicator>> c = [] {
      py::gil_scoped_release nogil;
      return tt::comm::world();
    }();
    if (!c.is_ok()) raise(c.status());
    return std::make_unique<PyComm>(std::move(c.value()));
  }, "The communicator of this process's job (from the environment `tiertrain launch` sets; alone: a world of 1).");
  m.def("self_comm", [] {
    tt::Result<std::unique_ptr<Communicator>> c = tt::comm::self();
    if (!c.is_ok()) raise(c.status());
    return std::make_unique<PyComm>(std::move(c.value()));
  }, "A communicator of this process alone (mpi4py's COMM_SELF).");
}
