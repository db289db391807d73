// The shm communicator, in real processes started by the real launcher (`tiertrain launch -n N -- this binary`):
// every collective x dtype x op x in/out of place against a reference computed here, at sizes 0, 1, a prime, not a
// multiple of the ranks, and large enough for many rounds and the split reduction; a rank that never arrives, one
// that calls something else, one that dies; the launcher naming a failed rank. This binary is both the test driver
// (gtest) and, with TT_COMM_SCENARIO set, a rank.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <random>
#include <sstream>
#include <fstream>
#include <iterator>
#include <limits>
#include <cctype>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#ifdef TIERTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

#include "comm/comm.h"
#include "comm/crew.h"
#include "comm/pool.h"
#include "comm/nccl.h"
#include "comm/reduce.h"
#include "comm/shm.h"
#include "core/bf16.h"
#include "core/log.h"
#include "temp_dir.h"

namespace tt {
namespace {

using comm::DType;
using comm::Op;

// ---- the ranks ----------------------------------------------------------------------------------------------------

// Rank r's element i of a buffer tagged `tag`, as doubles that every dtype holds exactly (small integers and halves,
// so that products of a few ranks stay exact too); distinct per rank, index and tag.
double value(int r, size_t i, int tag) {
  const uint64_t h = (static_cast<uint64_t>(r) * 1000003u + i * 7919u + static_cast<uint64_t>(tag) * 104729u) % 13u;
  return (static_cast<double>(h) - 6.0) * 0.5;
}

void store(void* p, size_t i, DType d, double x) {
  switch (d) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(x); break;
    case DType::kF64: static_cast<double*>(p)[i] = x; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(x)); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = comm::float_to_f16(static_cast<float>(x)); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(std::lround(x * 2)); break;
    case DType::kI64: static_cast<int64_t*>(p)[i] = std::llround(x * 2); break;
    case DType::kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(std::lround(x * 2) + 6); break;  // 0..12
    default: ADD_FAILURE() << "no test values for " << dtype_name(d);
  }
}

double load(const void* p, size_t i, DType d) {
  switch (d) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return comm::f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
    default: ADD_FAILURE() << "no test values for " << dtype_name(d);
  }
  return 0;
}

// The ranks' buffers: host memory, or with TT_COMM_MANAGED=1 (the nccl backend) CUDA managed memory, which both
// NCCL and the checks here can touch.
[[maybe_unused]] bool managed_buffers() {  // used only in builds with NCCL
  static const bool m = std::getenv("TT_COMM_MANAGED") != nullptr && std::string(std::getenv("TT_COMM_MANAGED")) == "1";
  return m;
}
// With TT_COMM_POOL_BUFFERS=1 the buffers come from the communicator's alloc_buffer (the shm backend's shared pool,
// Note [shared buffers]) once the scenario has set pool_comm.
comm::Communicator* pool_comm = nullptr;
bool pool_buffers() {
  static const bool p =
      std::getenv("TT_COMM_POOL_BUFFERS") != nullptr && std::string(std::getenv("TT_COMM_POOL_BUFFERS")) == "1";
  return p;
}
template <class T>
struct BufAlloc {
  using value_type = T;
  BufAlloc() = default;
  template <class U>
  BufAlloc(const BufAlloc<U>&) {}
  T* allocate(size_t n) {
#ifdef TIERTRAIN_HAVE_NCCL
    if (managed_buffers()) {
      void* p = nullptr;
      if (cudaMallocManaged(&p, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
#endif
    if (pool_buffers() && pool_comm != nullptr) {
      auto p = pool_comm->alloc_buffer(std::max<size_t>(n, 1) * sizeof(T));
      if (!p.is_ok()) throw std::bad_alloc();
      return static_cast<T*>(p.value());
    }
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
#ifdef TIERTRAIN_HAVE_NCCL
    if (managed_buffers()) {
      cudaFree(p);
      return;
    }
#endif
    if (pool_buffers() && pool_comm != nullptr) {
      pool_comm->free_buffer(p);
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const BufAlloc<U>&) const { return true; }
};
using Buf = std::vector<char, BufAlloc<char>>;
template <class T>
using Vec = std::vector<T, BufAlloc<T>>;

Buf make(int r, size_t n, DType d, int tag) {
  Buf b(std::max<size_t>(n, 1) * dtype_size(d));
  for (size_t i = 0; i < n; ++i) store(b.data(), i, d, value(r, i, tag));
  return b;
}

// The reduction of element i over ranks 0..n-1 in rank order, in the accumulation type of d (float for the 16-bit
// types, rounded once), written independently of comm/reduce.
double expected(int n, size_t i, DType d, Op op, int tag, size_t base = 0) {
  if (comm::op_on_integers_only(op)) {  // Note [bitwise and logical reductions]: on the integers as they are held
    auto held = [&](int r) {
      const long long x = std::llround(value(r, base + i, tag) * 2);
      return d == DType::kU8 ? x + 6 : x;
    };
    long long acc = held(0);  // (one rank: its value, as MPI's)
    for (int r = 1; r < n; ++r) {
      const long long x = held(r);
      switch (op) {
        case Op::kBand: acc &= x; break;
        case Op::kBor: acc |= x; break;
        case Op::kBxor: acc ^= x; break;
        case Op::kLand: acc = acc != 0 && x != 0; break;
        case Op::kLor: acc = acc != 0 || x != 0; break;
        default: acc = (acc != 0) != (x != 0); break;
      }
    }
    if (d == DType::kU8) return static_cast<double>(acc & 255);
    return static_cast<double>(d == DType::kI32 ? static_cast<int32_t>(acc) : acc);  // (ints are stored doubled)
  }
  if (d == DType::kU8) {
    // Bytes: the stored values are 2x + 6 (0 to 12); sums and products wrap modulo 256 as uint8_t arithmetic does,
    // and an average is the wrapped sum divided by the ranks, truncated.
    auto byte = [&](int r) { return static_cast<unsigned>(std::llround(value(r, base + i, tag) * 2) + 6); };
    unsigned acc = byte(0);
    for (int r = 1; r < n; ++r) {
      const unsigned x = byte(r);
      switch (op) {
        case Op::kSum:
        case Op::kAvg: acc = (acc + x) & 255u; break;
        case Op::kProd: acc = (acc * x) & 255u; break;
        case Op::kMin: acc = std::min(acc, x); break;
        case Op::kMax: acc = std::max(acc, x); break;
        default: break;
      }
    }
    if (op == Op::kAvg) acc /= static_cast<unsigned>(n);
    return acc;
  }
  std::vector<char> one(8);
  auto stored = [&](int r) {  // the value as rank r holds it
    store(one.data(), 0, d, value(r, base + i, tag));
    return load(one.data(), 0, d);
  };
  const bool is_int = d == DType::kI32 || d == DType::kI64;
  const bool narrow = d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  double acc = stored(0);
  float facc = static_cast<float>(acc);
  for (int r = 1; r < n; ++r) {
    const double x = stored(r);
    auto f = [&](auto a, auto b) -> decltype(a) {
      switch (op) {
        case Op::kSum:
        case Op::kAvg: return a + b;
        case Op::kProd: return a * b;
        case Op::kMin: return std::min(a, b);
        case Op::kMax: return std::max(a, b);
        default: return a;
      }
    };
    if (narrow) facc = f(facc, static_cast<float>(x));
    else acc = f(acc, x);
  }
  if (op == Op::kAvg) {
    if (narrow) facc = facc / static_cast<float>(n);
    else if (is_int) acc = std::trunc(acc / n);
    else acc = acc / n;
  }
  double out = narrow ? facc : acc;
  store(one.data(), 0, d, is_int ? out / 2 : out);  // rounds as the dtype does (ints are stored doubled)
  if (is_int) {
    // Integers: the stored values are 2x; the reduction is exact integer arithmetic on them.
    long long iacc = std::llround(value(0, base + i, tag) * 2);
    for (int r = 1; r < n; ++r) {
      const long long x = std::llround(value(r, base + i, tag) * 2);
      switch (op) {
        case Op::kSum:
        case Op::kAvg: iacc += x; break;
        case Op::kProd: iacc *= x; break;
        case Op::kMin: iacc = std::min(iacc, x); break;
        case Op::kMax: iacc = std::max(iacc, x); break;
        default: break;
      }
    }
    if (op == Op::kAvg) iacc /= n;
    if (d == DType::kI32) return static_cast<double>(static_cast<int32_t>(iacc));
    return static_cast<double>(iacc);
  }
  return load(one.data(), 0, d);
}

int failures = 0;
void check(bool ok, const char* what, int rank, size_t i, double got, double want) {
  if (ok) return;
  if (failures++ < 10)
    std::fprintf(stderr, "rank %d: %s: element %zu is %.9g, want %.9g\n", rank, what, i, got, want);
}
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

#define CHECK_OK(expr)                                                                         \
  do {                                                                                         \
    ::tt::Status s_ = (expr);                                                                  \
    if (!s_.is_ok()) {                                                                         \
      std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, #expr, s_.to_string().c_str()); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

// The world's communicator, or what kept this rank out of it (said on stderr, then the rank exits with 1).
int left_out(const Status& s) {
  std::fprintf(stderr, "world: %s\n", s.to_string().c_str());
  return 1;
}

int run_collectives() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  pool_comm = &c;  // (TT_COMM_POOL_BUFFERS=1: buffers from it; all are freed before it is)
  // A small buffer (TIERTRAIN_COMM_BUFFER from the driver) makes the large size take many rounds.
  const size_t large = 40000 + 5;
  int tag = 0;
  for (const size_t count : {size_t(0), size_t(1), size_t(7), size_t(n * 3 + 1), large}) {
    for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
      const size_t es = dtype_size(d);
      // Out of place, in place (kInPlace), and in place through the aliased forms of comm.h (send == recv, or at
      // this rank's block).
      for (const int mode : {0, 1, 2}) {
        const bool in_place = mode != 0;
        auto ip = [&](const void* alias) { return mode == 2 ? alias : comm::kInPlace; };
        // allreduce, reduce (root n-1), reduce_scatter with every op.
        std::vector<Op> ops = {Op::kSum, Op::kProd, Op::kMin, Op::kMax, Op::kAvg};
        if (d == DType::kI32 || d == DType::kI64 || d == DType::kU8)  // Note [bitwise and logical reductions]
          ops.insert(ops.end(), {Op::kBand, Op::kBor, Op::kBxor, Op::kLand, Op::kLor, Op::kLxor});
        for (Op op : ops) {
          ++tag;
          if (op == Op::kProd && count == large && d != DType::kF64 && d != DType::kI64 && d != DType::kU8)
            continue;  // overflow (bytes wrap, exactly)
          Buf send = make(rank, count, d, tag), recv(send.size());
          if (in_place) recv = send;
          CHECK_OK(c.allreduce(in_place ? ip(recv.data()) : send.data(), recv.data(), count, d, op));
          for (size_t i = 0; i < count; ++i) {
            const double got = load(recv.data(), i, d), want = expected(n, i, d, op, tag);
            check(same(got, want), "allreduce", rank, i, got, want);
          }
          const int root = n - 1;
          Buf rsend = make(rank, count, d, tag), rrecv(rsend.size());
          if (in_place && rank == root) rrecv = rsend;
          CHECK_OK(c.reduce(in_place && rank == root ? ip(rrecv.data()) : rsend.data(), rrecv.data(), count, d, op,
                            root));
          if (rank == root)
            for (size_t i = 0; i < count; ++i) {
              const double got = load(rrecv.data(), i, d), want = expected(n, i, d, op, tag);
              check(same(got, want), "reduce", rank, i, got, want);
            }
          // reduce_scatter: count per rank, from n * count.
          Buf ssend = make(rank, count * n, d, tag), srecv(std::max<size_t>(count, 1) * es);
          if (in_place) {
            if (mode == 2)
              CHECK_OK(c.reduce_scatter(ssend.data(), ssend.data() + rank * count * es, count, d, op));
            else
              CHECK_OK(c.reduce_scatter(comm::kInPlace, ssend.data(), count, d, op));
            std::memcpy(srecv.data(), ssend.data() + rank * count * es, count * es);
          } else {
            CHECK_OK(c.reduce_scatter(ssend.data(), srecv.data(), count, d, op));
          }
          for (size_t i = 0; i < count; ++i) {
            const double got = load(srecv.data(), i, d), want = expected(n, i, d, op, tag, rank * count);
            check(same(got, want), "reduce_scatter", rank, i, got, want);
          }
        }
        ++tag;
        // broadcast from rank 1 % n.
        const int root = 1 % n;
        Buf b = make(rank, count, d, tag), bout(b.size());
        if (in_place) {
          CHECK_OK(c.broadcast(ip(b.data()), b.data(), count, d, root));
          bout = b;
        } else {
          CHECK_OK(c.broadcast(b.data(), bout.data(), count, d, root));
        }
        const Buf rootdata = make(root, count, d, tag);
        for (size_t i = 0; i < count; ++i) {
          const double got = load(bout.data(), i, d), want = load(rootdata.data(), i, d);
          check(same(got, want), "broadcast", rank, i, got, want);
        }
        // allgather and gather (root 0): count from each.
        Buf mine = make(rank, count, d, tag), all(std::max<size_t>(count * n, 1) * es);
        if (in_place) std::memcpy(all.data() + rank * count * es, mine.data(), count * es);
        CHECK_OK(c.allgather(in_place ? ip(all.data() + rank * count * es) : mine.data(), all.data(), count, d));
        std::vector<Buf> theirs;
        for (int q = 0; q < n; ++q) theirs.push_back(make(q, count, d, tag));
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) {
            const double got = load(all.data(), q * count + i, d), want = load(theirs[q].data(), i, d);
            check(same(got, want), "allgather", rank, q * count + i, got, want);
          }
        Buf gall(all.size());
        if (in_place && rank == 0) std::memcpy(gall.data(), mine.data(), count * es);
        CHECK_OK(c.gather(in_place && rank == 0 ? ip(gall.data()) : mine.data(), gall.data(), count, d, 0));
        if (rank == 0)
          for (int q = 0; q < n; ++q)
            for (size_t i = 0; i < count; ++i) {
              const double got = load(gall.data(), q * count + i, d), want = load(theirs[q].data(), i, d);
              check(same(got, want), "gather", rank, q * count + i, got, want);
            }
        // scatter from root n-1: rank q gets piece q of the root's n * count.
        const int sroot = n - 1;
        Buf spieces = make(sroot, count * n, d, tag), sout(std::max<size_t>(count, 1) * es);
        if (in_place && rank == sroot) {
          CHECK_OK(c.scatter(ip(spieces.data()), spieces.data(), count, d, sroot));
          std::memcpy(sout.data(), spieces.data() + rank * count * es, count * es);
        } else {
          CHECK_OK(c.scatter(spieces.data(), sout.data(), count, d, sroot));
        }
        const Buf sref = make(sroot, count * n, d, tag);
        for (size_t i = 0; i < count; ++i) {
          const double got = load(sout.data(), i, d), want = load(sref.data(), rank * count + i, d);
          check(same(got, want), "scatter", rank, i, got, want);
        }
        // alltoall: rank r sends piece q of its n * count to rank q.
        Buf a2a = make(rank, count * n, d, tag), a2aout(a2a.size());
        if (in_place) {
          CHECK_OK(c.alltoall(ip(a2a.data()), a2a.data(), count, d));
          a2aout = a2a;
        } else {
          CHECK_OK(c.alltoall(a2a.data(), a2aout.data(), count, d));
        }
        for (int q = 0; q < n; ++q) {
          const Buf qsend = make(q, count * n, d, tag);
          for (size_t i = 0; i < count; ++i) {
            const double got = load(a2aout.data(), q * count + i, d), want = load(qsend.data(), rank * count + i, d);
            check(same(got, want), "alltoall", rank, q * count + i, got, want);
          }
        }
      }
    }
  }
  CHECK_OK(c.barrier());
  if (failures) {
    std::fprintf(stderr, "rank %d: %d wrong elements\n", rank, failures);
    return 1;
  }
  std::printf("rank %d: all collectives right (%lld operations, backend %s)\n", rank,
              static_cast<long long>(c.sequence()), c.backend());
  return 0;
}

// Rank 1 never calls the collective: the others fail within the deadline, naming it.
int run_never_arrives() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return 0;
  }
  Vec<float> x(1, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.allreduce(comm::kInPlace, x.data(), 1, DType::kF32, Op::kSum);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: after %.2f s: %s\n", c.rank(), secs, s.to_string().c_str());
  // (shm's world() does one collective of its own: the first of the test is #2; nccl counts its own calls.)
  const char* seq = std::string(c.backend()) == "nccl" ? "allreduce #1" : "allreduce #2";
  // Either this rank's own deadline passed, or a peer's did first and it gave up: both name rank 1.
  const bool own = s.code() == StatusCode::kDeadlineExceeded && s.message().find("rank(s) 1 did not arrive") != std::string::npos;
  const bool peer = s.code() == StatusCode::kAborted && s.message().find("still waiting for rank(s) 1") != std::string::npos;
  // The communicator stays unusable.
  Status again = c.barrier();
  return (own || peer) && s.message().find(seq) != std::string::npos && secs < 2.5 &&
                 again.code() == StatusCode::kFailedPrecondition
             ? 0
             : 1;
}

// Rank 1 stops itself (SIGSTOP) before the collective; rank 0 passes its deadline, says so and exits 1, and the
// job must end (under mpirun: MPI_Abort at exit, not MPI_Finalize waiting for the stopped rank).
int run_stopped_rank() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  if (c.rank() == 1) {
    std::fflush(nullptr);
    raise(SIGSTOP);
    return 0;
  }
  Vec<float> x(1, 1.0f);
  Status s = c.allreduce(comm::kInPlace, x.data(), 1, DType::kF32, Op::kSum);
  std::printf("rank %d: %s\n", c.rank(), s.to_string().c_str());
  std::fflush(stdout);
  return 1;
}

// Rank 0 passes a different count, rank 1 a different dtype: every rank gets an error naming the difference.
int run_mismatch() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  Vec<float> x(16, 1.0f);
  const size_t count = c.rank() == 0 ? 11 : 10;
  const DType d = c.rank() == 1 ? DType::kI32 : DType::kF32;
  Status s = c.allreduce(comm::kInPlace, x.data(), count, d, Op::kSum);
  std::printf("rank %d: %s\n", c.rank(), s.to_string().c_str());
  const bool ok = s.code() == StatusCode::kInvalidArgument && s.message().find("ranks disagree") != std::string::npos &&
                  (c.rank() == 0 ? s.message().find("count 10") != std::string::npos
                                 : s.message().find("count 11") != std::string::npos);
  return ok ? 0 : 1;
}

// Rank 1 exits (cleanly, so the launcher does not stop the job) without calling: rank 0 sees it gone long before
// its 60 s deadline.
// Note [nccl init deadline]: rank 1 joins NCCL's init late (TIERTRAIN_TEST_NCCL_INIT_DELAY_S, after the id exchange): rank
// 0's world() fails within the deadline saying so, instead of waiting inside NCCL for ever. The ranks leave with
// _exit: a helper thread is still inside NCCL's bootstrap, which the process's normal teardown need not survive.
int run_nccl_init_late() {
  const auto t0 = std::chrono::steady_clock::now();
  auto w = comm::world();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool one = std::getenv("RANK") && std::string(std::getenv("RANK")) == "1";
  std::printf("rank %s: after %.2f s: %s\n", one ? "1" : "0", secs, w.is_ok() ? "joined" : w.status().to_string().c_str());
  const bool ok = one || (!w.is_ok() && w.status().code() == StatusCode::kDeadlineExceeded &&
                          w.status().message().find("ncclCommInitRank did not finish") != std::string::npos &&
                          secs < 10);
  std::fflush(stdout);
  _exit(ok ? 0 : 1);
}

int run_peer_exits() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  if (c.rank() == 1) return 0;
  float x = 1;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.allreduce(comm::kInPlace, &x, 1, DType::kF32, Op::kSum);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: after %.2f s: %s\n", c.rank(), secs, s.to_string().c_str());
  return s.code() == StatusCode::kAborted && s.message().find("rank(s) 1 died") != std::string::npos && secs < 10 ? 0
                                                                                                                  : 1;
}

// A wait that its peers satisfied succeeds, although they gave up or exited right after (before the waiting rank
// looked again): rank 1 comes late to a barrier (rank 0, with TIERTRAIN_COMM_JITTER_US, pauses inside its wait),
// then gives up (TT_PASSED=gave_up), or it sends rank 0 a message (TT_PASSED=sent), and exits. Rank 0's barrier, or
// its receive, succeeds; its next call fails at once, naming rank 1. (The pause is in the collectives' wait; the
// receive's window, between its look at the rings and its look at the peer, has no pause: there the test checks
// the outcome, not the order.)
int run_passed_then_gone() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const std::string what = std::getenv("TT_PASSED") ? std::getenv("TT_PASSED") : "";
  const int value = 42;
  if (c.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // longer than rank 0's jittered arrival
    if (what == "sent") {
      if (Status s = c.send(&value, 1, DType::kI32, 0, 7); !s.is_ok()) return left_out(s);
      return 0;
    }
    if (Status s = c.barrier(); !s.is_ok()) return left_out(s);
    c.abandon("the test gives up");
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int got = 0;
  Status first = what == "sent" ? c.recv(&got, 1, DType::kI32, 1, 7) : c.barrier();
  if (first.is_ok() && what == "sent") std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Status next = what == "sent" ? c.recv(&got, 1, DType::kI32, 1, 7) : c.barrier();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank 0: after %.2f s: %s (got %d); then %s\n", secs, first.to_string().c_str(), got,
              next.to_string().c_str());
  const bool named = next.message().find(what == "sent" ? "rank 1 died" : "rank(s) 1 gave up") != std::string::npos;
  return first.is_ok() && (what != "sent" || got == value) && !next.is_ok() && named && secs < 10 ? 0 : 1;
}

// Point-to-point (Note [point-to-point] in comm/p2p.h), checked at every rank: a ring of eager sends, a ring of long
// messages (longer than shm's 64 KiB rings) by sendrecv and by isend/irecv, receives by tag out of the order sent,
// from any source (who sent how much), many messages of one tag in their order, messages to oneself, a message of any
// length after a probe, a long isend that streams while its sender is in a barrier, and receives that cannot take
// their message (too long; another type, where the backend carries types): an error, after which the stream still
// delivers what follows.
int run_p2p() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "rank %d: p2p: %s\n", rank, what.c_str());
    ++failures;
  };
  auto value = [](int from, int tag, size_t i) { return static_cast<float>(from * 1000 + tag * 7 + static_cast<int>(i % 997)); };
  auto filled = [&](int from, int tag, size_t count) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = value(from, tag, i);
    return v;
  };
  auto check_from = [&](const std::vector<float>& v, int from, int tag, const std::string& what) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != value(from, tag, i)) return fail(what + ": element " + std::to_string(i) + " wrong");
  };
  // 1. A ring of small messages: everyone sends, then receives (buffered sends: no deadlock).
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
    const int tag = static_cast<int>(count % 100);
    std::vector<float> out = filled(rank, tag, count), in(count, -1.0f);
    comm::MessageInfo info;
    if (Status s = c.send(out.data(), count, DType::kF32, next, tag); !s.is_ok()) fail("ring send: " + s.to_string());
    if (Status s = c.recv(in.data(), count, DType::kF32, prev, tag, &info); !s.is_ok()) fail("ring recv: " + s.to_string());
    if (info.source != prev || info.tag != tag || info.bytes != count * 4) fail("ring recv info");
    check_from(in, prev, tag, "ring of " + std::to_string(count));
  }
  // 1b. A ring of long messages the same way (unsafe in MPI: every rank in a blocking send first): over shm they get
  // through, through the stash (Note [point-to-point single copy]: a single copy unclaimed for kStashAfter is
  // stashed); over MPI they deadlock, as MPI allows.
  if (std::string(c.backend()) == "shm") {
    const size_t count = size_t{1} << 18;  // 1 MiB
    std::vector<float> out = filled(rank, 8, count), in(count, -1.0f);
    if (Status s = c.send(out.data(), count, DType::kF32, next, 8); !s.is_ok()) fail("long ring send: " + s.to_string());
    if (Status s = c.recv(in.data(), count, DType::kF32, prev, 8); !s.is_ok()) fail("long ring recv: " + s.to_string());
    check_from(in, prev, 8, "long ring");
  }
  // 2. Long messages around the ring: sendrecv, then isend + irecv.
  for (size_t count : {size_t{100000}, size_t{3} << 20}) {
    std::vector<float> out = filled(rank, 5, count), in(count, -1.0f);
    comm::MessageInfo info;
    if (Status s = c.sendrecv(out.data(), count, DType::kF32, next, 5, in.data(), count, DType::kF32, prev, 5, &info);
        !s.is_ok())
      fail("sendrecv: " + s.to_string());
    if (info.source != prev || info.bytes != count * 4) fail("sendrecv info");
    check_from(in, prev, 5, "sendrecv of " + std::to_string(count));
    std::fill(in.begin(), in.end(), -1.0f);
    comm::Request rr = c.irecv(in.data(), count, DType::kF32, prev, 6);
    comm::Request rs = c.isend(out.data(), count, DType::kF32, next, 6);
    if (Status s = rs.wait(); !s.is_ok()) fail("isend: " + s.to_string());
    if (Status s = rr.wait(); !s.is_ok()) fail("irecv: " + s.to_string());
    for (size_t i = 0; i < count; ++i)
      if (in[i] != value(prev, 5, i)) {
        fail("isend/irecv of " + std::to_string(count) + ": element " + std::to_string(i));
        break;
      }
  }
  // 3. Tags received out of the order sent (rank 0 to rank 1), and many of one tag in order (rank 1 to rank 0).
  if (n >= 2 && rank == 0) {
    for (int tag : {1, 2, 3}) {
      std::vector<float> v = filled(0, tag, 10 + tag);
      if (!c.send(v.data(), v.size(), DType::kF32, 1, tag).is_ok()) fail("tagged send");
    }
    for (int64_t k = 0; k < 200; ++k) {
      int64_t got = -1;
      comm::MessageInfo info;
      if (!c.recv(&got, 1, DType::kI64, 1, comm::kAnyTag, &info).is_ok() || got != k || info.tag != 7)
        return fail("message " + std::to_string(k) + " of 200 out of order or wrong: " + std::to_string(got)), 1;
    }
  } else if (rank == 1) {
    for (int tag : {3, 1, 2}) {
      std::vector<float> v(10 + tag, -1.0f);
      comm::MessageInfo info;
      if (Status s = c.recv(v.data(), v.size(), DType::kF32, 0, tag, &info); !s.is_ok())
        fail("tagged recv: " + s.to_string());
      if (info.tag != tag || info.source != 0) fail("tagged recv info");
      check_from(v, 0, tag, "tag " + std::to_string(tag));
    }
    for (int64_t k = 0; k < 200; ++k)
      if (!c.send(&k, 1, DType::kI64, 0, 7).is_ok()) fail("ordered send");
  }
  // 4. From any source: every other rank sends its rank to rank 0.
  if (rank == 0) {
    std::vector<int> seen;
    for (int k = 1; k < n; ++k) {
      int32_t who = -1;
      comm::MessageInfo info;
      if (!c.recv(&who, 1, DType::kI32, comm::kAnySource, 11, &info).is_ok() || who != info.source || info.bytes != 4)
        fail("any-source recv");
      seen.push_back(who);
    }
    std::sort(seen.begin(), seen.end());
    for (int k = 1; k < n; ++k)
      if (seen[static_cast<size_t>(k - 1)] != k) fail("any-source: rank " + std::to_string(k) + " not seen once");
  } else {
    const int32_t me = rank;
    if (!c.send(&me, 1, DType::kI32, 0, 11).is_ok()) fail("any-source send");
  }
  // 5. To oneself; then a message of any length after a probe.
  {
    const std::vector<float> v = filled(rank, 9, 321);
    std::vector<float> back(321);
    if (!c.send(v.data(), v.size(), DType::kF32, rank, 9).is_ok() ||
        !c.recv(back.data(), back.size(), DType::kF32, rank, 9).is_ok() || back != v)
      fail("a message to oneself");
    std::string text = "from rank " + std::to_string(rank) + std::string(static_cast<size_t>(rank) * 50000, '.');
    if (!c.send_bytes(text.data(), text.size(), next, 12).is_ok()) fail("send_bytes");
    comm::MessageInfo probed, info;
    if (!c.probe(prev, 12, &probed).is_ok() || probed.bytes != 10 + std::to_string(prev).size() + size_t(prev) * 50000)
      fail("probe: " + std::to_string(probed.bytes));
    std::vector<char> got;
    if (!c.recv_any(&got, prev, 12, &info).is_ok() || info.bytes != probed.bytes ||
        std::string(got.begin(), got.end()).rfind("from rank " + std::to_string(prev), 0) != 0)
      fail("recv_any");
    auto nothing = c.iprobe(comm::kAnySource, 99);
    if (!nothing.is_ok() || nothing.value()) fail("iprobe found a message never sent");
  }
  // 6. A long isend that streams while its sender waits in a barrier the receiver reaches before it receives.
  if (n >= 2 && rank <= 1) {
    std::vector<float> big = filled(rank, 13, size_t{1} << 20), in(size_t{1} << 20);
    comm::Request r;
    if (rank == 0) r = c.isend(big.data(), big.size(), DType::kF32, 1, 13);
    if (!c.barrier().is_ok()) fail("barrier beside an isend");
    if (rank == 1) {
      if (!c.recv(in.data(), in.size(), DType::kF32, 0, 13).is_ok()) fail("recv after the barrier");
      check_from(in, 0, 13, "isend across a barrier");
    } else if (!r.wait().is_ok()) {
      fail("isend across a barrier");
    }
  } else if (!c.barrier().is_ok()) {
    fail("barrier");
  }
  // 7. Receives that cannot take their message fail, and what follows still arrives whole.
  if (n >= 2 && rank == 0) {
    std::vector<float> ten(10, 1.0f), long_one(50000, 2.0f), after = filled(0, 15, 77);
    std::vector<int32_t> ints(10, 3);
    if (!c.send(ten.data(), 10, DType::kF32, 1, 14).is_ok() ||
        !c.send(long_one.data(), long_one.size(), DType::kF32, 1, 14).is_ok() ||
        !c.send(ints.data(), 10, DType::kI32, 1, 14).is_ok() ||
        !c.send(after.data(), after.size(), DType::kF32, 1, 15).is_ok())
      fail("sends of the messages to refuse");
  } else if (rank == 1) {
    std::vector<float> five(5), many(20000), after(77);
    Status s = c.recv(five.data(), 5, DType::kF32, 0, 14);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("longer") == std::string::npos)
      fail("a short buffer: " + s.to_string());
    s = c.recv(many.data(), many.size(), DType::kF32, 0, 14);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("longer") == std::string::npos)
      fail("a long message into a short buffer: " + s.to_string());
    s = c.recv(many.data(), 10, DType::kF32, 0, 14);
    const bool typed = std::string(c.backend()) != "mpi";
    if (typed && (s.code() != StatusCode::kInvalidArgument || s.message().find("holds i32") == std::string::npos))
      fail("another type: " + s.to_string());
    if (!typed && !s.is_ok()) fail("mpi: same length, another type: " + s.to_string());
    if (!c.recv(after.data(), after.size(), DType::kF32, 0, 15).is_ok()) fail("the message after the refused ones");
    check_from(after, 0, 15, "after the refused ones");
  }
  // 7b. A window: rank 0 posts six long isends (tags 20..25, 1.25 MiB and an odd count each) before rank 1 posts its
  // receives in another order; several single copies of one sender in flight at once (Note [both sides copy]: each
  // shared copy must land in its own receive).
  if (n >= 2 && rank <= 1) {
    const size_t count = (size_t{5} << 16) + 3;
    std::vector<std::vector<float>> bufs;
    std::vector<comm::Request> reqs;
    for (int k = 0; k < 6; ++k) bufs.push_back(rank == 0 ? filled(0, 20 + k, count) : std::vector<float>(count, -1.0f));
    for (int k = 0; k < 6; ++k) {
      const int tag = rank == 0 ? 20 + k : 20 + (k * 5) % 6;  // rank 1: 20, 25, 24, 23, 22, 21
      reqs.push_back(rank == 0 ? c.isend(bufs[static_cast<size_t>(k)].data(), count, DType::kF32, 1, tag)
                               : c.irecv(bufs[static_cast<size_t>(tag - 20)].data(), count, DType::kF32, 0, tag));
    }
    for (comm::Request& r : reqs)
      if (Status st = r.wait(); !st.is_ok()) fail("window: " + st.to_string());
    if (rank == 1)
      for (int k = 0; k < 6; ++k) check_from(bufs[static_cast<size_t>(k)], 0, 20 + k, "window tag " + std::to_string(20 + k));
  }
  // 8. Arguments: a destination that is not a rank, a negative tag.
  {
    float x = 0;
    if (c.send(&x, 1, DType::kF32, n, 0).code() != StatusCode::kInvalidArgument) fail("destination n accepted");
    if (c.send(&x, 1, DType::kF32, next, -3).code() != StatusCode::kInvalidArgument) fail("tag -3 accepted");
  }
  if (!c.barrier().is_ok()) fail("last barrier");
  if (failures == 0) std::printf("rank %d: point-to-point right (backend %s)\n", rank, c.backend());
  return failures == 0 ? 0 : 1;
}

// Point-to-point's deadline and a peer that died: rank 1 waits for a message from rank 0 that never comes
// (TIERTRAIN_COMM_TIMEOUT), or with P2P_DEAD=1 from rank 0, which has exited: named within the deadline, without it.
int run_p2p_errors() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const bool dead = std::getenv("P2P_DEAD") != nullptr;
  if (c.rank() == 0) {
    if (!dead) std::this_thread::sleep_for(std::chrono::seconds(4));
    return 0;
  }
  float x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = c.recv(&x, 1, DType::kF32, 0, 9);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: after %.2f s: %s\n", c.rank(), secs, s.to_string().c_str());
  const bool named = s.message().find("receive at rank 1 from rank 0 (tag 9)") != std::string::npos;
  const bool right = dead ? s.code() == StatusCode::kAborted && s.message().find("rank 0 died") != std::string::npos
                          : s.code() == StatusCode::kDeadlineExceeded && secs >= 1.9;
  // And point-to-point is unusable from then on.
  const Status after = c.send(&x, 1, DType::kF32, 1, 0);
  return named && right && after.code() == StatusCode::kFailedPrecondition ? 0 : 1;
}

// Rank 2 crashes: the launcher stops the others and exits non-zero naming rank 2.
int run_crash() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  if (w.value()->rank() == 2) std::abort();
  std::this_thread::sleep_for(std::chrono::seconds(30));
  return 0;
}

// One allreduce and a barrier, checked.
int run_smoke() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(c.rank() + i);
  if (!c.allreduce(comm::kInPlace, x.data(), x.size(), DType::kF32, Op::kSum).is_ok() || !c.barrier().is_ok()) return 1;
  const int n = c.size();
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i))) return 1;
  std::printf("rank %d: smoke right; buffers: %s\n", c.rank(), c.placement().c_str());
  return 0;
}

// Note [split]: the ranks split by parity with the key -rank (so in reverse order), then with rank 0 left out
// (kUndefined: nullptr), then a group split again; every group's size, ranks and collectives are its members' only,
// and the parent works beside its groups.
int run_split() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "rank %d: split: %s\n", rank, what);
    return 1;
  };
  auto half = c.split(rank % 2, -rank);
  if (!half.is_ok()) return fail(half.status().to_string().c_str());
  comm::Communicator& h = *half.value();
  std::vector<int64_t> members;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == rank % 2) members.push_back(r);
  const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  if (h.size() != static_cast<int>(members.size()) || h.rank() != want_rank) return fail("size or rank");
  // The buffers in Vec: GPU-visible memory for the nccl backend (TT_COMM_MANAGED=1).
  Vec<int64_t> got(members.size()), me(1, rank);
  if (!h.allgather(me.data(), got.data(), 1, DType::kI64).is_ok() ||
      !std::equal(got.begin(), got.end(), members.begin(), members.end()))
    return fail("allgather in the group");
  Vec<int64_t> sum(1, rank);
  if (!h.allreduce(comm::kInPlace, sum.data(), 1, DType::kI64, Op::kSum).is_ok() ||
      sum[0] != std::accumulate(members.begin(), members.end(), int64_t{0}))
    return fail("allreduce in the group");
  Vec<int64_t> all(1, rank);
  if (!c.allreduce(comm::kInPlace, all.data(), 1, DType::kI64, Op::kSum).is_ok() || all[0] != int64_t{n} * (n - 1) / 2)
    return fail("allreduce in the parent after the split");
  auto rest = c.split(rank == 0 ? comm::Communicator::kUndefined : 7, rank);
  if (!rest.is_ok()) return fail(rest.status().to_string().c_str());
  if (rank == 0 && rest.value() != nullptr) return fail("kUndefined got a communicator");
  if (rank != 0 && (rest.value() == nullptr || rest.value()->size() != n - 1 || rest.value()->rank() != rank - 1))
    return fail("the rest's size or rank");
  if (rank != 0 && !rest.value()->barrier().is_ok()) return fail("barrier of the rest");
  auto again = h.split(0, h.rank());
  if (!again.is_ok() || again.value()->size() != h.size() || again.value()->rank() != h.rank())
    return fail("a group's split");
  Vec<int64_t> x(1, 1);
  if (!again.value()->allreduce(comm::kInPlace, x.data(), 1, DType::kI64, Op::kSum).is_ok() || x[0] != h.size())
    return fail("allreduce in the group's split");
  std::printf("rank %d: split right (group of %d, rank %d there; %s)\n", rank, h.size(), h.rank(), h.backend());
  return 0;
}

// Note [nccl point-to-point]: messages between buffers in GPU-visible memory (managed: TT_COMM_MANAGED=1), staged
// through the host communicator: to oneself, around the ring (blocking and not), of any length into a host vector,
// from any source.
int run_gpu_p2p() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "rank %d: gpu p2p: %s\n", rank, what.c_str());
    ++failures;
  };
  auto value = [](int from, int tag, size_t i) {
    return static_cast<float>(from * 1000 + tag * 7 + static_cast<int>(i % 997));
  };
  auto right = [&](const Vec<float>& v, int from, int tag) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != value(from, tag, i)) return false;
    return true;
  };
  for (size_t count : {size_t{1}, size_t{321}, size_t{1} << 20}) {
    const int tag = static_cast<int>(count % 50);
    Vec<float> out(count), in(count, -1.0f), self(count, -1.0f);
    for (size_t i = 0; i < count; ++i) out[i] = value(rank, tag, i);
    comm::MessageInfo info;
    if (!c.send(out.data(), count, DType::kF32, rank, tag).is_ok() ||
        !c.recv(self.data(), count, DType::kF32, rank, tag, &info).is_ok() || !right(self, rank, tag) ||
        info.bytes != count * 4)
      fail("to oneself, " + std::to_string(count));
    if (!c.sendrecv(out.data(), count, DType::kF32, next, tag, in.data(), count, DType::kF32, prev, tag, &info)
             .is_ok() ||
        !right(in, prev, tag) || info.source != prev)
      fail("sendrecv, " + std::to_string(count));
    std::fill(in.begin(), in.end(), -1.0f);
    comm::Request rr = c.irecv(in.data(), count, DType::kF32, prev, tag + 1);
    comm::Request rs = c.isend(out.data(), count, DType::kF32, next, tag + 1);
    if (!rs.wait().is_ok() || !rr.wait().is_ok() || !right(in, prev, tag))
      fail("isend/irecv, " + std::to_string(count));
    // Of any length into a host vector, from the GPU buffer.
    std::vector<char> any;
    if (!c.send(out.data(), count, DType::kF32, next, 40).is_ok() || !c.recv_any(&any, prev, 40, &info).is_ok() ||
        any.size() != count * 4 || std::memcmp(any.data(), in.data(), any.size()) != 0)
      fail("recv_any, " + std::to_string(count));
  }
  if (rank == 0) {
    for (int k = 1; k < n; ++k) {
      Vec<int32_t> who(1, -1);
      comm::MessageInfo info;
      if (!c.recv(who.data(), 1, DType::kI32, comm::kAnySource, 11, &info).is_ok() || who[0] != info.source)
        fail("any-source recv");
    }
  } else {
    Vec<int32_t> me(1, rank);
    if (!c.send(me.data(), 1, DType::kI32, 0, 11).is_ok()) fail("any-source send");
  }
  if (!c.barrier().is_ok()) fail("last barrier");
  if (failures == 0) std::printf("rank %d: point-to-point on GPU buffers right (backend %s)\n", rank, c.backend());
  return failures == 0 ? 0 : 1;
}

// Non-blocking calls: posted while a peer is late they return at once and are not done; several in flight with a
// blocking call between them (which runs after them) all give the right results.
int run_nonblocking() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<float> a(5000), b(3000), g(4 * static_cast<size_t>(n)), blocking(10);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(rank + i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rank * 2);
  for (int i = 0; i < 4; ++i) g[static_cast<size_t>(rank) * 4 + static_cast<size_t>(i)] = static_cast<float>(rank * 10 + i);
  for (float& x : blocking) x = 1.0f;
  const auto t0 = std::chrono::steady_clock::now();
  comm::Request ra = c.iallreduce(comm::kInPlace, a.data(), a.size(), DType::kF32, Op::kSum);
  const double post_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool done_early = ra.test();
  comm::Request rb = c.iallreduce(comm::kInPlace, b.data(), b.size(), DType::kF32, Op::kMax);
  comm::Request rg = c.iallgather(comm::kInPlace, g.data(), 4, DType::kF32);
  CHECK_OK(c.allreduce(comm::kInPlace, blocking.data(), blocking.size(), DType::kF32, Op::kSum));  // after them
  CHECK_OK(rb.wait());
  CHECK_OK(rg.wait());
  CHECK_OK(ra.wait());
  bool ok = ra.test() && rb.test() && rg.test();
  for (size_t i = 0; i < a.size(); ++i) ok = ok && a[i] == static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i));
  for (float x : b) ok = ok && x == static_cast<float>((n - 1) * 2);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 4; ++i) ok = ok && g[static_cast<size_t>(q) * 4 + static_cast<size_t>(i)] == static_cast<float>(q * 10 + i);
  for (float x : blocking) ok = ok && x == static_cast<float>(n);
  std::printf("rank %d: posted in %.4f s, done at once: %d, results %s\n", rank, post_s, done_early ? 1 : 0,
              ok ? "right" : "WRONG");
  // Rank 0 posted while rank 1 slept: its call returned at once and was not done.
  if (rank == 0 && (post_s > 0.1 || done_early)) return 1;
  return ok ? 0 : 1;
}

// A bad argument on one rank (TT_MISUSE: in place at a non-root, or a root that is no rank) is an error on every
// rank, at once, not a hang until the deadline (on shm, in place: at the next call on rank 2, Note [rooted rounds]).
int run_misuse() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const std::string what = std::getenv("TT_MISUSE") ? std::getenv("TT_MISUSE") : "";
  Vec<float> x(8, 1.0f), y(8);
  std::vector<float> host(8, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  if (what == "host") {  // nccl: rank 1 gives host memory
    s = c.allreduce(c.rank() == 1 ? host.data() : x.data(), y.data(), x.size(), DType::kF32, Op::kSum);
  } else if (what == "inplace") {
    s = c.reduce(c.rank() == 1 ? comm::kInPlace : x.data(), y.data(), x.size(), DType::kF32, Op::kSum, 0);
  } else {
    s = c.broadcast(x.data(), y.data(), x.size(), DType::kF32, 7);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: after %.2f s: %s\n", c.rank(), secs, s.to_string().c_str());
  // Note [rooted rounds]: the reduce (of 32 B) waits for its root alone on the other ranks, so ranks 2 and up, which
  // agree with the root, may return with their part done; their next call fails at once.
  if (s.is_ok() && what == "inplace" && c.rank() >= 2 && std::string(c.backend()) == "shm") {
    Status next = c.barrier();
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d: then after %.2f s: %s\n", c.rank(), secs, next.to_string().c_str());
    return next.code() == StatusCode::kAborted && next.message().find("gave up") != std::string::npos && secs < 5 ? 0
                                                                                                                : 1;
  }
  const std::string want = what == "inplace" ? "rank 1 asked for in place but is not the root"
                           : what == "host"  ? "rank 1 gave a buffer that is not memory of its GPU"
                                             : "gave a root that is not a rank";
  return s.code() == StatusCode::kInvalidArgument && s.message().find(want) != std::string::npos && secs < 5 ? 0 : 1;
}

// Rank 1 starts with another buffer size: an error at once, naming the difference.
int run_buffer_mismatch() {
  if (std::getenv("RANK") && std::string(std::getenv("RANK")) == "1") setenv("TIERTRAIN_COMM_BUFFER", "131072", 1);
  auto w = comm::world();
  std::printf("rank %s: %s\n", std::getenv("RANK"), w.is_ok() ? "joined" : w.status().to_string().c_str());
  return w.is_ok() ? 0 : 1;
}

// nccl's stream-ordered calls (2 ranks or more: on one rank every collective is the identity): a non-blocking call
// posted first (the queued calls keep the call order behind it); on a stream of the caller's, an allreduce, the
// caller's own copy of its result (ordered after it), an allreduce of that copy and an allgather; the results right.
int run_nccl_stream() {
#ifdef TIERTRAIN_HAVE_NCCL
  auto w = comm::nccl_world();
  if (!w.is_ok()) {
    std::fprintf(stderr, "nccl_world: %s\n", w.status().to_string().c_str());
    return 1;
  }
  comm::NcclCommunicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  if (n < 2) return 2;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  const size_t count = 1 << 20;
  Vec<float> a(count), copy(count), g(count * static_cast<size_t>(n)), b(1000);
  for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(rank + i % 100);
  for (size_t i = 0; i < count; ++i) g[static_cast<size_t>(rank) * count + i] = static_cast<float>(rank * 3);
  for (float& x : b) x = static_cast<float>(rank + 1);
  comm::Request rb = c.iallreduce(comm::kInPlace, b.data(), b.size(), DType::kF32, Op::kMax);
  CHECK_OK(c.enqueue(stream, {comm::kAllreduce, comm::kInPlace, a.data(), count, DType::kF32, Op::kSum, -1}));
  if (cudaMemcpyAsync(copy.data(), a.data(), count * sizeof(float), cudaMemcpyDefault, stream) != cudaSuccess) return 1;
  CHECK_OK(c.enqueue(stream, {comm::kAllreduce, copy.data(), copy.data(), count, DType::kF32, Op::kSum, -1}));
  CHECK_OK(c.enqueue(stream, {comm::kAllgather, comm::kInPlace, g.data(), count, DType::kF32, Op::kSum, -1}));
  CHECK_OK(c.synchronize(stream));
  CHECK_OK(rb.wait());
  bool ok = true;
  for (size_t i = 0; i < count; ++i) {
    const float sum = static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i % 100));
    ok = ok && a[i] == sum && copy[i] == static_cast<float>(n) * sum;
  }
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) ok = ok && g[static_cast<size_t>(q) * count + i] == static_cast<float>(q * 3);
  for (float x : b) ok = ok && x == static_cast<float>(n);
  cudaStreamDestroy(stream);
  std::printf("rank %d: stream-ordered calls %s on %s\n", rank, ok ? "right" : "WRONG", c.placement().c_str());
  return ok ? 0 : 1;
#else
  return 2;
#endif
}

// 400 broadcasts from changing roots (some of several rounds, in and out of place) between allreduces, gathers
// and barriers, every result checked: with jitter, a rank that writes a half before its readers have left it shows
// as a wrong element.
int run_broadcast_mix() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  const auto value = [](int it, int root, size_t i) { return static_cast<float>(it * 1000 + root * 100) + i * 0.5f; };
  int wrong = 0;
  for (int it = 0; it < 400; ++it) {
    const int root = (it * 7 + 3) % n;
    const size_t len = 1 + static_cast<size_t>(it * 37) % 1500;  // halves of 2 KiB: up to 3 rounds
    std::vector<float> b(len, -1.0f), out(len, -2.0f);
    if (rank == root)
      for (size_t i = 0; i < len; ++i) b[i] = value(it, root, i);
    const bool in_place = it % 2 == 0;
    CHECK_OK(c.broadcast(in_place ? comm::kInPlace : b.data(), in_place ? b.data() : out.data(), len, DType::kF32,
                         root));
    const std::vector<float>& got = in_place ? b : out;
    for (size_t i = 0; i < len; ++i) wrong += got[i] != value(it, root, i);
    if (it % 3 == 0) {
      std::vector<int32_t> x(5, rank + it);
      CHECK_OK(c.allreduce(comm::kInPlace, x.data(), x.size(), DType::kI32, Op::kSum));
      for (int32_t v : x) wrong += v != n * it + n * (n - 1) / 2;
    }
    if (it % 5 == 0) {
      const int groot = it % n;
      std::vector<float> mine = {static_cast<float>(rank), static_cast<float>(it)}, all(2 * static_cast<size_t>(n));
      CHECK_OK(c.gather(mine.data(), all.data(), 2, DType::kF32, groot));
      if (rank == groot)
        for (int q = 0; q < n; ++q)
          wrong += all[2 * static_cast<size_t>(q)] != static_cast<float>(q) ||
                   all[2 * static_cast<size_t>(q) + 1] != static_cast<float>(it);
    }
    if (it % 11 == 0) CHECK_OK(c.barrier());
  }
  std::printf("rank %d: broadcast mix %s (%d wrong)\n", rank, wrong == 0 ? "right" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Note [inline rounds]: collectives of at most 8 B a rank back to back, new values every call, each checked: a slot
// written again before a slow reader has read it (jitter delays the reads after the arrival) shows as a wrong value.
int run_small_rounds() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  int wrong = 0;
  for (int it = 0; it < 1500; ++it) {
    const int root = (it * 5 + 1) % n;
    double x = rank + 3.0 * it;
    CHECK_OK(c.allreduce(comm::kInPlace, &x, 1, DType::kF64, Op::kSum));
    wrong += x != n * 3.0 * it + n * (n - 1) / 2.0;
    float b[2] = {rank == root ? static_cast<float>(it) : -1.0f, rank == root ? static_cast<float>(-it) : -1.0f};
    CHECK_OK(c.broadcast(comm::kInPlace, b, 2, DType::kF32, root));
    wrong += b[0] != static_cast<float>(it) || b[1] != static_cast<float>(-it);
    const int32_t mine = it * n + rank;
    std::vector<int32_t> all(static_cast<size_t>(n), -1);
    CHECK_OK(c.allgather(&mine, all.data(), 1, DType::kI32));
    for (int q = 0; q < n; ++q) wrong += all[static_cast<size_t>(q)] != it * n + q;
    const int64_t piece = static_cast<int64_t>(it) * 100 + rank;
    std::vector<int64_t> got(static_cast<size_t>(n), -1);
    CHECK_OK(c.gather(&piece, got.data(), 1, DType::kI64, root));
    if (rank == root)
      for (int q = 0; q < n; ++q) wrong += got[static_cast<size_t>(q)] != static_cast<int64_t>(it) * 100 + q;
    uint16_t h[3] = {0x3c00, 0x4000, 0x4200};  // f16 1, 2, 3 (6 B)
    CHECK_OK(c.allreduce(comm::kInPlace, h, 3, DType::kF16, Op::kMax));
    wrong += h[0] != 0x3c00 || h[1] != 0x4000 || h[2] != 0x4200;
    if (it % 100 == 0) {
      // Calls whose last round is small after full ones (128 KiB halves: 32768 floats a round, then 1): area rounds
      // and an inline one in the same call.
      const size_t big = 2 * 32768 + 1;
      std::vector<float> v(big);
      for (size_t i = 0; i < big; ++i) v[i] = static_cast<float>(rank + static_cast<int>(i % 7) + it);
      CHECK_OK(c.allreduce(comm::kInPlace, v.data(), big, DType::kF32, Op::kSum));
      for (size_t i = 0; i < big; ++i)
        wrong += v[i] != static_cast<float>(n * (static_cast<int>(i % 7) + it) + n * (n - 1) / 2);
      std::vector<float> piece(big, static_cast<float>(rank * 10 + it)), every(big * static_cast<size_t>(n), -1.0f);
      CHECK_OK(c.allgather(piece.data(), every.data(), big, DType::kF32));
      for (int q = 0; q < n; ++q)
        wrong += every[static_cast<size_t>(q) * big + big - 1] != static_cast<float>(q * 10 + it) ||
                 every[static_cast<size_t>(q) * big] != static_cast<float>(q * 10 + it);
      std::vector<float> from(big, rank == root ? static_cast<float>(it) : 0.0f);
      CHECK_OK(c.broadcast(comm::kInPlace, from.data(), big, DType::kF32, root));
      wrong += from[0] != static_cast<float>(it) || from[big - 1] != static_cast<float>(it);
    }
  }
  std::printf("rank %d: small rounds %s (%d wrong)\n", rank, wrong == 0 ? "right" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Note [rooted rounds]: gathers and reduces of one round back to back from changing roots, of 4-8 B a rank (inline
// where on) and of 160-320 B (the areas), then broadcasts and scatters, new values every call, each checked. With
// jitter, a rank that writes its half again before the reader of its last round there (a root) is done shows as a
// wrong element.
int run_rooted_rounds() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  int wrong = 0;
  for (int it = 0; it < 600; ++it) {
    const int roots[2] = {(it * 5 + 1) % n, (it * 3 + 2) % n};
    // Rooted rounds back to back, the root changing every call: a rank writes its half again while the root that
    // read it two rounds ago may not have waited for it since.
    for (int k = 0; k < 4; ++k) {
      const size_t len = k < 2 ? 1 : 40;
      const int root = roots[k % 2], rroot = roots[(k + 1) % 2];
      std::vector<int32_t> mine(len), all(len * static_cast<size_t>(n), -1);
      for (size_t i = 0; i < len; ++i) mine[i] = it * 1000 + rank * 50 + static_cast<int32_t>(i);
      CHECK_OK(c.gather(mine.data(), all.data(), len, DType::kI32, root));
      if (rank == root)
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < len; ++i)
            wrong += all[static_cast<size_t>(q) * len + i] != it * 1000 + q * 50 + static_cast<int32_t>(i);
      std::vector<int64_t> sum(len, -1);
      std::vector<int64_t> part(len);
      for (size_t i = 0; i < len; ++i) part[i] = it + rank + static_cast<int64_t>(i) + k;
      CHECK_OK(c.reduce(part.data(), sum.data(), len, DType::kI64, Op::kSum, rroot));
      if (rank == rroot)
        for (size_t i = 0; i < len; ++i)
          wrong += sum[i] != static_cast<int64_t>(n) * (it + static_cast<int64_t>(i) + k) + n * (n - 1) / 2;
    }
    // Then full rounds (broadcast, scatter), whose writes follow rooted ones.
    for (size_t len : {size_t{1}, size_t{40}}) {
      const int broot = roots[len % 2];
      std::vector<float> b(2 * len, -1.0f);
      if (rank == broot)
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(it * 100 + broot * 10) + static_cast<float>(i);
      CHECK_OK(c.broadcast(comm::kInPlace, b.data(), b.size(), DType::kF32, broot));
      for (size_t i = 0; i < b.size(); ++i)
        wrong += b[i] != static_cast<float>(it * 100 + broot * 10) + static_cast<float>(i);
      std::vector<int32_t> pieces(len * static_cast<size_t>(n)), got(len, -1);
      for (size_t i = 0; i < pieces.size(); ++i) pieces[i] = it * 7 + broot + static_cast<int32_t>(i);
      CHECK_OK(c.scatter(pieces.data(), got.data(), len, DType::kI32, broot));
      for (size_t i = 0; i < len; ++i)
        wrong += got[i] != it * 7 + broot + static_cast<int32_t>(static_cast<size_t>(rank) * len + i);
    }
    if (it % 40 == 0) {
      int64_t x = rank + it;
      CHECK_OK(c.allreduce(comm::kInPlace, &x, 1, DType::kI64, Op::kSum));
      wrong += x != static_cast<int64_t>(n) * it + n * (n - 1) / 2;
    }
    if (it % 97 == 0) CHECK_OK(c.barrier());
  }
  std::printf("rank %d: rooted rounds %s (%d wrong)\n", rank, wrong == 0 ? "right" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Note [rooted rounds]: a mismatch in a rooted round (TT_ROOTED=reduce: rank 1 reduces 3 elements where the others
// reduce 2 to rank 0; gather: rank 0 gathers i32 where the others gather f32 to rank 2; late: rank 1 never calls the
// reduce) is an error on the root and on the rank that differs, naming the difference (or the late rank);
// every other rank gets an error at its next call at the latest, at once (late: within the deadline).
int run_rooted_errors() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const std::string what = std::getenv("TT_ROOTED") ? std::getenv("TT_ROOTED") : "";
  const int rank = c.rank();
  if (what == "late" && rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return 0;
  }
  std::vector<float> x(4, 1.0f), all(4 * static_cast<size_t>(c.size()));
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  int root = 0;
  std::string want;  // what the root's and the differing rank's errors say
  if (what == "reduce") {
    s = c.reduce(x.data(), all.data(), rank == 1 ? 3 : 2, DType::kF32, Op::kSum, 0);
    want = rank == 0 ? "rank 1 has count 3" : "rank 0 has count 2";
  } else if (what == "gather") {
    root = 2;
    s = c.gather(x.data(), all.data(), 1, rank == 0 ? DType::kI32 : DType::kF32, root);
    want = rank == root ? "rank 0 has dtype i32" : "rank 2 has dtype f32";
  } else {
    s = c.reduce(x.data(), all.data(), 2, DType::kF32, Op::kSum, 0);
    want = "rank(s) 1 did not arrive within 1.0 s";
  }
  const bool named = rank == root || (what != "late" && rank == 1 - root / 2);  // the root, and the rank that differs
  Status next = c.barrier();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank %d: after %.2f s: %s; then %s\n", rank, secs, s.to_string().c_str(), next.to_string().c_str());
  // (Late: the root's own deadline, or the other rank's, which waits for rank 1 too in its next call, came first.)
  if (named && s.message().find(want) == std::string::npos &&
      (what != "late" || s.message().find("still waiting for rank(s) 1") == std::string::npos))
    return 1;
  return !next.is_ok() && secs < (what == "late" ? 2.5 : 1.5) ? 0 : 1;
}

// Note [shared buffers]: each rank overwrites its pooled buffers the moment a collective returns (send buffers of
// allreduce, reduce, allgather, reduce_scatter and alltoall; a broadcast root's buffer); a peer still reading them
// then gets NaNs, which its checks see. The pool must be there (the communicator's log line says so).
int run_pool_reuse() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  const size_t count = 4 * 32768;  // 512 KiB: four chunks of 128 KiB (256 KiB areas), all read where they are
  const size_t per = count / static_cast<size_t>(n);
  std::vector<float*> bufs;
  const auto alloc = [&](size_t k) {
    auto p = c.alloc_buffer(k * sizeof(float));
    bufs.push_back(p.is_ok() ? static_cast<float*>(p.value()) : nullptr);
    return bufs.back();
  };
  float *send = alloc(count), *recv = alloc(count), *all = alloc(per * static_cast<size_t>(n)), *b = alloc(count);
  for (float* p : bufs)
    if (p == nullptr) return 1;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // From the end: the last chunk, the one peers may still be at, first.
  const auto spoil = [&](float* p, size_t k) {
    for (size_t i = k; i-- > 0;) p[i] = nan;
  };
  int wrong = 0;
  for (int it = 0; it < 20; ++it) {
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(rank + it + static_cast<int>(i % 7));
    CHECK_OK(c.allreduce(send, recv, count, DType::kF32, Op::kSum));
    spoil(send, count);
    for (size_t i = 0; i < count; ++i)
      wrong += recv[i] != static_cast<float>(n * (it + static_cast<int>(i % 7)) + n * (n - 1) / 2);
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(rank);
    CHECK_OK(c.reduce(send, recv, count, DType::kF32, Op::kSum, n - 1));
    spoil(send, count);
    if (rank == n - 1)
      for (size_t i = 0; i < count; ++i) wrong += recv[i] != static_cast<float>(n * (n - 1) / 2);
    const int root = it % n;
    if (rank == root)
      for (size_t i = 0; i < count; ++i) b[i] = static_cast<float>(it * 10 + static_cast<int>(i % 5));
    CHECK_OK(c.broadcast(comm::kInPlace, b, count, DType::kF32, root));
    if (rank == root) spoil(b, count);
    else
      for (size_t i = 0; i < count; ++i) wrong += b[i] != static_cast<float>(it * 10 + static_cast<int>(i % 5));
    for (size_t i = 0; i < per; ++i) send[i] = static_cast<float>(rank * 3 + it);
    CHECK_OK(c.allgather(send, all, per, DType::kF32));
    spoil(send, per);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < per; ++i) wrong += all[static_cast<size_t>(q) * per + i] != static_cast<float>(q * 3 + it);
    // reduce_scatter and alltoall: blocks of `per` from n * per.
    const size_t blocks = per * static_cast<size_t>(n);
    for (size_t i = 0; i < blocks; ++i) send[i] = static_cast<float>(rank + it + static_cast<int>(i / per));
    CHECK_OK(c.reduce_scatter(send, recv, per, DType::kF32, Op::kSum));
    spoil(send, blocks);
    for (size_t i = 0; i < per; ++i) wrong += recv[i] != static_cast<float>(n * (it + rank) + n * (n - 1) / 2);
    for (size_t i = 0; i < blocks; ++i) send[i] = static_cast<float>(rank * 100 + static_cast<int>(i / per));
    CHECK_OK(c.alltoall(send, all, per, DType::kF32));
    spoil(send, blocks);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < per; ++i)
        wrong += all[static_cast<size_t>(q) * per + i] != static_cast<float>(q * 100 + rank);
  }
  CHECK_OK(c.barrier());
  for (float* p : bufs) c.free_buffer(p);
  std::printf("rank %d: pool reuse %s (%d wrong)\n", rank, wrong == 0 ? "right" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Note [two-rank single-copy allreduce]: each rank spoils its send and receive buffers the moment an allreduce
// returns (having copied the result out); a peer still reading either (its half of the send buffer in the first round,
// its reduced half of the receive buffer in the second) then gets NaNs, which its checks see. Out of place and in place.
int run_allreduce_reuse() {
  auto w = comm::world();
  if (!w.is_ok()) return left_out(w.status());
  comm::Communicator& c = *w.value();
  const int rank = c.rank(), n = c.size();
  const size_t count = 65536 + 3;  // 256 KiB and a little: halves of unequal length
  std::vector<float> send(count), recv(count), got(count);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int wrong = 0;
  for (int it = 0; it < 20; ++it) {
    const bool in_place = it % 2 == 1;
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(rank + it + static_cast<int>(i % 7));
    if (in_place) recv = send;
    CHECK_OK(c.allreduce(in_place ? comm::kInPlace : send.data(), recv.data(), count, DType::kF32, Op::kSum));
    std::memcpy(got.data(), recv.data(), count * sizeof(float));
    std::fill(recv.begin(), recv.end(), nan);
    std::fill(send.begin(), send.end(), nan);
    for (size_t i = 0; i < count; ++i)
      wrong += got[i] != static_cast<float>(n * (it + static_cast<int>(i % 7)) + n * (n - 1) / 2);
  }
  std::printf("rank %d: allreduce reuse %s (%d wrong)\n", rank, wrong == 0 ? "right" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

int rank_main(const std::string& scenario) {
  // TT_RANK1_ENV=NAME=VALUE: a setting that rank 1 alone starts with.
  if (const char* e = std::getenv("TT_RANK1_ENV"); e && std::getenv("RANK") && std::string(std::getenv("RANK")) == "1") {
    const std::string kv = e;
    setenv(kv.substr(0, kv.find('=')).c_str(), kv.substr(kv.find('=') + 1).c_str(), 1);
  }
  // TT_LOG_COMM=1: the communicator's INFO lines (what it agreed on at init) on stderr.
  if (std::getenv("TT_LOG_COMM") != nullptr) log::configure({log::Level::kInfo, log::kComm});
  if (scenario == "nccl_stream") return run_nccl_stream();
  if (scenario == "nccl_init_late") return run_nccl_init_late();
  if (scenario == "misuse") return run_misuse();
  if (scenario == "buffer_mismatch") return run_buffer_mismatch();
  if (scenario == "nonblocking") return run_nonblocking();
  if (scenario == "smoke") return run_smoke();
  if (scenario == "split") return run_split();
  if (scenario == "p2p") return run_p2p();
  if (scenario == "gpu_p2p") return run_gpu_p2p();
  if (scenario == "p2p_errors") return run_p2p_errors();
  if (scenario == "collectives") return run_collectives();
  if (scenario == "never_arrives") return run_never_arrives();
  if (scenario == "stopped_rank") return run_stopped_rank();
  if (scenario == "mismatch") return run_mismatch();
  if (scenario == "broadcast_mix") return run_broadcast_mix();
  if (scenario == "small_rounds") return run_small_rounds();
  if (scenario == "rooted_rounds") return run_rooted_rounds();
  if (scenario == "rooted_errors") return run_rooted_errors();
  if (scenario == "pool_reuse") return run_pool_reuse();
  if (scenario == "allreduce_reuse") return run_allreduce_reuse();
  if (scenario == "peer_exits") return run_peer_exits();
  if (scenario == "passed_then_gone") return run_passed_then_gone();
  if (scenario == "crash") return run_crash();
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}

// ---- the driver ---------------------------------------------------------------------------------------------------

std::string self_path;

struct Job {
  int code = -1;
  std::string output;
  double seconds = 0;
};

using tt::testing::TempDir;
#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// A line of the launcher's output without its "[rank R] " tag (Note [rank output]).
std::string untagged(const std::string& line) {
  if (line.rfind("[rank ", 0) != 0) return line;
  const size_t end = line.find("] ");
  return end == std::string::npos ? line : line.substr(end + 2);
}

// Runs a shell command; its exit code (-1 if it did not exit), its stdout and stderr, and how long it took.
Job shell(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  Job j;
  if (!p) return j;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) j.output.append(buf, n);
  const int st = pclose(p);
  j.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return j;
}

// A job of this binary's ranks running `scenario`, started by the real launcher.
Job launch(int ranks, const std::string& scenario, const std::string& env = "") {
  return shell("env TT_COMM_SCENARIO=" + scenario + " " + env + " " + TT_BINARY + " launch -n " +
               std::to_string(ranks) + " -- " + self_path);
}

// Runs the "collectives" scenario (every collective, dtype, op and size against a reference) in `ranks` ranks with
// `env`; `what` labels a failure.
void expect_collectives_right(int ranks, const std::string& env, const std::string& what = "") {
  const Job j = launch(ranks, "collectives", env);
  EXPECT_EQ(j.code, 0) << what << "\n" << j.output;
  EXPECT_NE(j.output.find("rank 0: all collectives right"), std::string::npos) << what << "\n" << j.output;
}

// Note [streaming stores]: a result takes them only into pages already resident. pages_resident says so of every
// page of a range: a new mapping none, after a write to each page all, one page left untouched not all; it copes
// with ranges that start and end inside pages, and an empty one; and stream_copy writes the bytes either way.
TEST(CommShm, StreamingStoresOnlyIntoResidentPages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), n = 3000 * page;  // past one 1024-page mincore call
  char* p = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_FALSE(comm::pages_resident(p, n));
  EXPECT_FALSE(comm::pages_resident(p + 100, 10));
  EXPECT_TRUE(comm::pages_resident(p, 0));
  for (size_t i = 0; i < n; i += page) p[i] = 1;
  EXPECT_TRUE(comm::pages_resident(p, n));
  EXPECT_TRUE(comm::pages_resident(p + 100, n - 200));
  ASSERT_EQ(madvise(p + 2500 * page, page, MADV_DONTNEED), 0);  // one page out, past the first mincore call
  EXPECT_FALSE(comm::pages_resident(p, n));
  EXPECT_FALSE(comm::pages_resident(p + 2500 * page + 7, 1));
  EXPECT_TRUE(comm::pages_resident(p, 2500 * page));
  EXPECT_TRUE(comm::pages_resident(p + 2501 * page, n - 2501 * page));
  std::vector<char> src(n - 123);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  comm::stream_copy(p + 61, src.data(), src.size());
  EXPECT_EQ(std::memcmp(p + 61, src.data(), src.size()), 0);
  munmap(p, n);
}

// Note [single-copy exchanges]: unset, the threshold is 32 KiB up to 8 ranks and 256 KiB from 9; a value given
// (TIERTRAIN_COMM_CMA_EXCHANGE_BYTES, 0 included) holds at any size.
TEST(CommShm, ExchangeThresholdByWorldSize) {
  comm::ShmOptions o;
  EXPECT_EQ(o.exchange_bytes(2), size_t{32} << 10);
  EXPECT_EQ(o.exchange_bytes(3), size_t{32} << 10);
  EXPECT_EQ(o.exchange_bytes(4), size_t{32} << 10);
  EXPECT_EQ(o.exchange_bytes(8), size_t{32} << 10);
  EXPECT_EQ(o.exchange_bytes(9), size_t{256} << 10);
  EXPECT_EQ(o.exchange_bytes(15), size_t{256} << 10);
  EXPECT_EQ(o.exchange_bytes(16), size_t{256} << 10);
  EXPECT_EQ(o.exchange_bytes(64), size_t{256} << 10);
  o.cma_exchange_bytes = 0;
  EXPECT_EQ(o.exchange_bytes(16), 0u);
  o.cma_exchange_bytes = 4096;
  EXPECT_EQ(o.exchange_bytes(2), 4096u);
  EXPECT_EQ(o.exchange_bytes(16), 4096u);
}

// Note [split] over shared memory: 4 and 5 ranks (groups of 2 and 2, 3 and 2).
TEST(CommShm, SplitGroupsRanksByColorAndKey) {
  for (int ranks : {4, 5}) {
    const Job j = launch(ranks, "split", "TIERTRAIN_COMM_TIMEOUT=60");
    EXPECT_EQ(j.code, 0) << j.output;
    for (int r = 0; r < ranks; ++r)
      EXPECT_NE(j.output.find("rank " + std::to_string(r) + ": split right"), std::string::npos) << j.output;
  }
}

// Note [point-to-point] over shared memory: 2, 3 and 4 ranks.
TEST(CommShm, PointToPointMessagesArriveWholeInOrderAndByTag) {
  for (int ranks : {2, 3, 4}) {
    const Job j = launch(ranks, "p2p", "TIERTRAIN_COMM_TIMEOUT=60");
    EXPECT_EQ(j.code, 0) << j.output;
    for (int r = 0; r < ranks; ++r)
      EXPECT_HAS(j.output, "rank " + std::to_string(r) + ": point-to-point right (backend shm)");
  }
  // Note [point-to-point single copy]: by default from 32 KiB (the scenario's long messages), where the ranks may
  // attach to each other; every message of a byte or more (short, long, stashed, refused, probed, any source) in one
  // copy; none (every message through the rings).
  const Job said = launch(2, "p2p", "TIERTRAIN_COMM_TIMEOUT=60 TT_LOG_COMM=1");
  EXPECT_EQ(said.code, 0) << said.output;
  if (said.output.find("cannot attach") == std::string::npos) {
    EXPECT_HAS(said.output, "point-to-point single copies from 32.00 KiB");
  }
  // Note [both sides copy]: by default from 256 KiB (the scenario's 400 KB-12 MiB messages and its window); every
  // single copy shared, from a byte (the chunks' edges inside short messages; stashed, refused and probed ones too).
  for (const char* env : {"TIERTRAIN_COMM_P2P_CMA_BYTES=1", "TIERTRAIN_COMM_P2P_CMA_BYTES=0",
                          "TIERTRAIN_COMM_P2P_CMA_BYTES=1 TIERTRAIN_COMM_P2P_SHARED_BYTES=1",
                          "TIERTRAIN_COMM_P2P_SHARED_BYTES=0"}) {
    const Job k = launch(3, "p2p", std::string("TIERTRAIN_COMM_TIMEOUT=60 TT_LOG_COMM=1 ") + env);
    EXPECT_EQ(k.code, 0) << env << "\n" << k.output;
    for (int r = 0; r < 3; ++r)
      EXPECT_HAS(k.output, "rank " + std::to_string(r) + ": point-to-point right (backend shm)");
    if (std::string(env) == "TIERTRAIN_COMM_P2P_CMA_BYTES=0") {
      EXPECT_HAS(k.output, "point-to-point single copies off");
    }
  }
  // The scenario the nccl backend runs on GPU buffers, here on host memory (it checks itself, not only nccl).
  const Job j = launch(3, "gpu_p2p", "TIERTRAIN_COMM_TIMEOUT=60");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_HAS(j.output, "rank 2: point-to-point on GPU buffers right (backend shm)");
}

TEST(CommShm, PointToPointDeadlineAndADeadPeerAreNamed) {
  Job j = launch(2, "p2p_errors", "TIERTRAIN_COMM_TIMEOUT=2");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_HAS(j.output, "not done within 2.0 s");
  j = launch(2, "p2p_errors", "TIERTRAIN_COMM_TIMEOUT=60 P2P_DEAD=1");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_HAS(j.output, "rank 0 died");
  EXPECT_LT(j.seconds, 15) << j.output;
}

class CommRanks : public ::testing::TestWithParam<int> {};

TEST_P(CommRanks, EveryCollectiveDtypeOpAndSizeIsRight) {
  // 256 KiB areas (rounds of 128 KiB halves): the large size takes several rounds, and those of more than 64 KiB
  // take the split reduction.
  // Jitter: each rank waits a rank- and round-dependent time before each of its writes, so that a rank reading
  // before its peers have written (a missing wait) reads stale data.
  // Results of 1000 bytes and more go out with streaming stores (Note [streaming stores]), and gather and scatter
  // pieces of 1000 bytes and more go in single copies (Note [single copy]): the small sizes take the memcpy and
  // segment paths, the others the streaming and single-copy ones, at unaligned offsets and lengths too. Allgather and
  // alltoall blocks of 1000 bytes and more are read out of the peers' buffers (Note [single-copy exchanges]), in
  // place and not, and so are 2-rank allreduces of 1000 bytes and more (Note [two-rank single-copy allreduce]).
  expect_collectives_right(GetParam(),
                           "TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_STREAM_BYTES=1000 "
                           "TIERTRAIN_COMM_CMA_BYTES=1000 TIERTRAIN_COMM_CMA_EXCHANGE_BYTES=1000 "
                           "TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES=1000");
}

// Note [crew]: every collective, dtype, op and size again with three threads a rank sharing out every copy and
// reduction from 1000 bytes (at uneven splits; threads outnumber the CPUs here, so they also wait for each other);
// the 2-rank single-copy allreduce's halves over the three too.
TEST_P(CommRanks, EveryCollectiveWithThreeThreadsARank) {
  expect_collectives_right(GetParam(),
                           "TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_STREAM_BYTES=1000 "
                           "TIERTRAIN_COMM_THREADS=3 TIERTRAIN_COMM_THREAD_BYTES=1000 "
                           "TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES=1000");
}

// Note [shared buffers]: every collective with buffers from the shared pools (read and written where they are, at
// chunks of 64 KiB and more; gather and scatter pieces straight into and out of the root's), with only rank 1's there
// (the others copy through the segments), with three threads a rank, and with a pool too small for them (private
// memory instead, copied as before).
TEST_P(CommRanks, EveryCollectiveInSharedBuffers) {
  const std::string base = "TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 ";
  expect_collectives_right(GetParam(), base + "TT_COMM_POOL_BUFFERS=1", "all in pools");
  // Single copies from 1000 bytes: gather and scatter roots' buffers in their pools are copied into (out of) directly,
  // and a 2-rank allreduce reads the peer's pooled buffers where they are (with only rank 1's pooled too).
  expect_collectives_right(GetParam(),
                           base + "TT_COMM_POOL_BUFFERS=1 TIERTRAIN_COMM_CMA_BYTES=1000 TIERTRAIN_COMM_CMA_EXCHANGE_BYTES=1000 "
                                  "TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES=1000",
                           "single copies");
  if (GetParam() == 2)  // (the single-copy allreduce is the 2-rank path)
    expect_collectives_right(GetParam(),
                             base + "TT_RANK1_ENV=TT_COMM_POOL_BUFFERS=1 TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES=1000",
                             "single-copy allreduce, rank 1 in its pool");
  expect_collectives_right(GetParam(), base + "TT_RANK1_ENV=TT_COMM_POOL_BUFFERS=1", "rank 1 in its pool");
  expect_collectives_right(GetParam(),
                           base + "TT_COMM_POOL_BUFFERS=1 TIERTRAIN_COMM_THREADS=3 TIERTRAIN_COMM_THREAD_BYTES=1000",
                           "three threads");
  expect_collectives_right(GetParam(), base + "TT_COMM_POOL_BUFFERS=1 TIERTRAIN_COMM_POOL=131072", "pool full");
}

// Note [shared buffers]: no rank returns while a peer still reads or writes its pooled buffers (each overwrites
// them at once), with a pool in place (the log line).
// MPI's COMM_SELF: each self() is a communicator of this process alone, apart from the others, made without any
// other process.
TEST(Comm, SelfIsThisProcessAlone) {
  auto a = comm::self(), b = comm::self();
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string();
  for (comm::Communicator* c : {a.value().get(), b.value().get()}) {
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    float x[3] = {1.5f, -2.0f, 4.0f};
    ASSERT_TRUE(c->allreduce(comm::kInPlace, x, 3, DType::kF32, comm::Op::kSum).is_ok());
    EXPECT_EQ(x[0], 1.5f);
    EXPECT_EQ(x[2], 4.0f);
    ASSERT_TRUE(c->barrier().is_ok());
  }
}

TEST(Comm, PooledBuffersAreTheCallersAgainWhenACollectiveReturns) {
  for (int ranks : {3, 4}) {
    const Job j = launch(ranks, "pool_reuse", "TT_LOG_COMM=1 TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20");
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_NE(j.output.find("rank 0: pool reuse right"), std::string::npos) << j.output;
    EXPECT_NE(j.output.find("; pool "), std::string::npos) << j.output;
    EXPECT_EQ(j.output.find("pool none"), std::string::npos) << j.output;
  }
}

// Note [two-rank single-copy allreduce]: no rank returns while its peer still reads its send or receive buffer (each
// spoils both at once); the jitter (up to 2 x 3 ms before each round's reads and copies) gives a rank that returned
// early the time to spoil them before its peer reads.
TEST(Comm, SingleCopyAllreduceBuffersAreTheCallersAgainWhenItReturns) {
  const Job j = launch(2, "allreduce_reuse",
                       "TT_LOG_COMM=1 TIERTRAIN_COMM_JITTER_US=3000 TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES=1000");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_HAS(j.output, "rank 0: allreduce reuse right");
  EXPECT_HAS(j.output, "rank 1: allreduce reuse right");
  if (j.output.find("cannot attach") == std::string::npos) {
    EXPECT_HAS(j.output, "single-copy allreduce from 1000 B");
  }
}

// Note [shared buffers]: where the address space is limited (ulimit -v) and the pools cannot all be mapped, every rank
// goes without them, says so, and every collective is still right on buffers that would have been in them.
TEST(Comm, PoolsThatCannotBeMappedAreOffEverywhere) {
  const Job j = shell(std::string("ulimit -v 8000000; env TT_COMM_SCENARIO=collectives TT_LOG_COMM=1 ") +
                      "TT_COMM_POOL_BUFFERS=1 TIERTRAIN_COMM_POOL=1099511627776 TIERTRAIN_COMM_BUFFER=262144 " +
                      TT_BINARY + " launch -n 3 -- " + self_path);
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("rank 0: all collectives right"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("pool off (not mapped everywhere)"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("could not map every rank's pool"), std::string::npos) << j.output;
}

// Note [shared buffers]: ranks started with pools of other sizes are an error at the rendezvous, naming the setting.
TEST(Comm, PoolsOfDifferentSizesAreAnErrorAtStart) {
  const Job j = launch(2, "smoke", "TT_RANK1_ENV=TIERTRAIN_COMM_POOL=1048576");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("TIERTRAIN_COMM_POOL"), std::string::npos) << j.output;
}

// comm/pool: first fit in granules; ranges given back merge with their free neighbours; a full pool says so.
TEST(PoolRanges, TakesFirstFitAndMergesWhatComesBack) {
  tt::comm::PoolRanges p(10 * 4096 + 100, 4096);
  EXPECT_EQ(p.capacity(), 10u * 4096);
  size_t t = 0;
  EXPECT_EQ(p.take(1, &t), 0u);
  EXPECT_EQ(t, 4096u);
  EXPECT_EQ(p.take(0, &t), 4096u);  // an empty buffer takes a granule too
  EXPECT_EQ(p.take(3 * 4096, &t), 2u * 4096);
  EXPECT_EQ(t, 3u * 4096);
  EXPECT_EQ(p.take(5 * 4096 + 1, &t), tt::comm::PoolRanges::kNone);  // 5 granules left
  EXPECT_EQ(p.take(5 * 4096, &t), 5u * 4096);
  EXPECT_EQ(p.in_use(), 10u * 4096);
  EXPECT_EQ(p.give_back(4096), 4096u);
  EXPECT_EQ(p.give_back(4096), 0u);  // not in use any more
  EXPECT_EQ(p.give_back(123), 0u);   // never handed out
  EXPECT_EQ(p.give_back(0), 4096u);
  EXPECT_EQ(p.take(2 * 4096, &t), 0u);  // [0, 2 granules) merged
  EXPECT_EQ(p.give_back(0), 2u * 4096);
  EXPECT_EQ(p.give_back(2 * 4096), 3u * 4096);
  EXPECT_EQ(p.take(5 * 4096, &t), 0u);  // [0, 5) merged from both sides
  EXPECT_EQ(p.take(~size_t{0} - 10, &t), tt::comm::PoolRanges::kNone);  // no overflow
}

// Note [single copy]: the ranks agree on the path of every call, whatever each started with: here rank 1 has single
// copies off (the others must follow, or gather and scatter would hang or go wrong), then a larger threshold than
// the others (all must take it).
TEST(Comm, RanksAgreeOnSingleCopies) {
  for (const char* rank1 : {"TIERTRAIN_COMM_CMA_BYTES=0", "TIERTRAIN_COMM_CMA_BYTES=100000",
                            "TIERTRAIN_COMM_CMA_EXCHANGE_BYTES=0", "TIERTRAIN_COMM_CMA_EXCHANGE_BYTES=100000"}) {
    expect_collectives_right(3,
                             std::string("TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_CMA_BYTES=1000 "
                                         "TIERTRAIN_COMM_CMA_EXCHANGE_BYTES=1000 TT_RANK1_ENV=") + rank1,
                             rank1);
  }
}

// Note [reduction rounds]: reductions in rounds of span / ranks bytes (64 KiB here, under the 128 KiB halves), and
// ranks that asked for different spans (one none at all, one smaller) agree on one: every collective still right.
TEST(Comm, ReductionsInRoundsOfTheAgreedSpan) {
  for (const char* rank1 : {"TIERTRAIN_COMM_REDUCE_SPAN=65536", "TIERTRAIN_COMM_REDUCE_SPAN=0",
                            "TIERTRAIN_COMM_REDUCE_SPAN=131072"}) {
    expect_collectives_right(3,
                             std::string("TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 "
                                         "TIERTRAIN_COMM_REDUCE_SPAN=65536 TT_RANK1_ENV=") + rank1,
                             rank1);
  }
  // Below a round's floor (64 KiB) the setting is a mistake (issue 47): refused, named, exit 2.
  const Job j = shell("env TIERTRAIN_COMM_REDUCE_SPAN=1 " + std::string(TT_BINARY) + " launch -n 2 -- " + TT_BINARY +
                      " comm-bench -C allreduce -b 8 -e 8 -n 1 -w 0");
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_NE(j.output.find("TIERTRAIN_COMM_REDUCE_SPAN=1: bytes, 0 (no bound) or at least 65536"), std::string::npos)
      << j.output;
}

// Issue 47: settings a job reads later are checked when it starts, and a job name that cannot name shared-memory
// segments is refused, by the launcher and by a rank started without it: each named, exit 2.
TEST(Comm, BadSettingsAreNamedAtStart) {
  const std::string bench = std::string(TT_BINARY) + " comm-bench -C allreduce -b 8 -e 8 -n 1 -w 0";
  const struct {
    std::string cmd, says;
  } cases[] = {
      {"env TIERTRAIN_COMM_HUGE_BYTES=abc " + std::string(TT_BINARY) + " launch -n 2 -- " + bench,
       "TIERTRAIN_COMM_HUGE_BYTES=abc is not an integer"},
      {"env TIERTRAIN_COMM_ID=../../etc " + std::string(TT_BINARY) + " launch -n 2 -- " + bench,
       "TIERTRAIN_COMM_ID=../../etc: the job's name takes letters, digits"},
      {"env TIERTRAIN_COMM_ID=../x TIERTRAIN_RANK=0 TIERTRAIN_WORLD_SIZE=2 " + bench,
       "TIERTRAIN_COMM_ID=../x: the job's name takes letters, digits"},
  };
  for (const auto& c : cases) {
    const Job j = shell(c.cmd);
    EXPECT_EQ(j.code, 2) << c.cmd << "\n" << j.output;
    EXPECT_NE(j.output.find(c.says), std::string::npos) << c.cmd << "\n" << j.output;
  }
}

// Note [single copy]: unless TIERTRAIN_COMM_CMA_BYTES says otherwise, single copies take pieces of 32 KiB and more
// at 2 and 3 ranks and of 256 KiB from 4 (where the probe passes, as it does here); the setting overrides it both ways.
TEST(Comm, SingleCopiesByDefaultFrom32KiBBelowFourRanksAnd256KiBFromFour) {
  const auto threshold = [](int ranks, const std::string& env) {
    const Job j = shell("env TIERTRAIN_DEBUG=INFO TIERTRAIN_DEBUG_SUBSYS=COMM " + env + " " + TT_BINARY + " launch -n " +
                        std::to_string(ranks) + " -- " + TT_BINARY + " comm-bench -C gather -b 1M -e 1M -n 1 -w 0");
    EXPECT_EQ(j.code, 0) << j.output;
    // A machine where ranks may not attach to each other (a seccomp profile, Yama's ptrace_scope 3) has them off.
    if (j.output.find("cannot attach") != std::string::npos) return std::string("single copies off");
    const size_t at = j.output.find("single copies ");
    return at == std::string::npos ? std::string("(no line)")
                                   : j.output.substr(at, j.output.find_first_of(";\n", at) - at);
  };
  const bool can = threshold(2, "TIERTRAIN_COMM_CMA_BYTES=4096") != "single copies off";
  if (can) {
    EXPECT_EQ(threshold(2, "TIERTRAIN_COMM_CMA_BYTES=4096"), "single copies from 4.00 KiB a piece");
  }
  for (int ranks : {2, 3})
    EXPECT_EQ(threshold(ranks, ""), can ? "single copies from 32.00 KiB a piece" : "single copies off") << ranks;
  EXPECT_EQ(threshold(4, ""), can ? "single copies from 256.00 KiB a piece" : "single copies off");
  EXPECT_EQ(threshold(4, "TIERTRAIN_COMM_CMA_BYTES=0"), "single copies off");
}

// Note [crew]: every part runs once, on as many threads as the crew has, and its writes are seen after run(); a run
// called from inside a part (the crew busy) runs its parts in turn on that thread; share() covers [0, n) exactly.
TEST(Crew, RunsEveryPartOnceAndNestedRunsInTurnAndWakesWithoutAJob) {
  for (int threads : {1, 3, 8}) {
    tt::comm::Crew crew(threads);
    ASSERT_GE(crew.size(), 1);
    ASSERT_LE(crew.size(), threads);
    for (int round = 0; round < 200; ++round) {
      std::vector<int> hits(static_cast<size_t>(crew.size()), 0);
      std::vector<std::thread::id> who(static_cast<size_t>(crew.size()));
      crew.run([&](int i) {
        hits[static_cast<size_t>(i)] += round + 1;
        who[static_cast<size_t>(i)] = std::this_thread::get_id();
      });
      for (int i = 0; i < crew.size(); ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], round + 1);
      EXPECT_EQ(who[0], std::this_thread::get_id());  // part 0 on the caller
    }
    std::vector<int> inner(static_cast<size_t>(crew.size()) * static_cast<size_t>(crew.size()), 0);
    crew.run([&](int i) {
      crew.run([&](int j) { ++inner[static_cast<size_t>(i * crew.size() + j)]; });
    });
    for (int v : inner) EXPECT_EQ(v, 1);
  }
  // Helpers that sleep at once (awake 0) or after a while, woken without a job (wake()) between runs, some of them
  // asleep by then: every run still runs each part exactly once, and a wake runs none.
  for (auto awake : {std::chrono::microseconds(0), std::chrono::microseconds(200)}) {
    tt::comm::Crew crew(4, awake);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(crew.size()));
    for (int round = 0; round < 300; ++round) {
      if (round % 3 == 0) crew.wake();
      if (round % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(400));
      if (round % 2 == 0) crew.wake();
      crew.run([&](int i) { hits[static_cast<size_t>(i)].fetch_add(1); });
      for (int i = 0; i < crew.size(); ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), round + 1) << i;
    }
    crew.wake();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (int i = 0; i < crew.size(); ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 300) << "a wake ran a job";
  }
  for (size_t n : {size_t(0), size_t(1), size_t(4095), size_t(4097), size_t(100000)}) {
    for (int parts : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        size_t b = 0, e = 0;
        tt::comm::share(n, parts, i, 4096, &b, &e);
        EXPECT_EQ(b, std::min(next, n)) << n << " " << parts << " " << i;
        EXPECT_TRUE(b % 4096 == 0 || b == n);
        next = std::max(next, e);
      }
      EXPECT_EQ(next, n);
    }
  }
}

// The exit code of a forked child, or -1 if it has not exited within 10 s (it is then killed).
int wait_child(pid_t child) {
  int status = -1;
  for (int i = 0; i < 1000 && waitpid(child, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return -1;
}

// Note [crew after fork]: in a fork's child a crew runs every part on the calling thread and is destroyed without
// waiting for helpers that are not there; the parent's crew goes on as before.
TEST(Crew, AForksChildRunsThePartsItselfAndExits) {
  tt::comm::Crew crew(3, std::chrono::microseconds(200));
  ASSERT_EQ(crew.size(), 3);
  crew.run([](int) {});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<int> hits(3, 0);
    std::vector<std::thread::id> who(3);
    crew.wake();
    crew.run([&](int i) {
      ++hits[static_cast<size_t>(i)];
      who[static_cast<size_t>(i)] = std::this_thread::get_id();
    });
    bool ok = hits == std::vector<int>{1, 1, 1} && who[1] == std::this_thread::get_id() &&
              who[2] == std::this_thread::get_id();
    {
      tt::comm::Crew fresh(3, std::chrono::microseconds(200));  // made in the child: its helpers are here
      std::vector<std::thread::id> by(3);
      fresh.run([&](int i) { by[static_cast<size_t>(i)] = std::this_thread::get_id(); });
      ok = ok && fresh.size() == 3 && by[1] != std::this_thread::get_id() && by[2] != std::this_thread::get_id();
    }
    crew.~Crew();  // as at exit: must not wait for the helpers
    _exit(ok ? 0 : 3);
  }
  EXPECT_EQ(wait_child(child), 0) << "-1: the child hung";
  std::vector<std::thread::id> who(3);
  crew.run([&](int i) { who[static_cast<size_t>(i)] = std::this_thread::get_id(); });
  EXPECT_NE(who[1], std::this_thread::get_id());  // the parent's helpers still run their parts
}

// Note [crew]: a rank's helpers are pinned where `tiertrain launch --bind-to` gave it CPUs of its own (one rank, its
// share: both CPUs of a 2-CPU machine), and left to the scheduler where the rank shares its CPUs (--bind-to none).
TEST(Crew, HelpersArePinnedOnlyWhereTheLauncherBoundTheRank) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one CPU";
  const auto line = [](const std::string& bind) {
    const Job j = shell("env TIERTRAIN_DEBUG=INFO TIERTRAIN_DEBUG_SUBSYS=COMM TIERTRAIN_COMM_THREADS=2 " +
                        std::string(TT_BINARY) + " launch -n 1 --bind-to " + bind + " -- " + TT_BINARY +
                        " comm-bench -e 8");
    EXPECT_EQ(j.code, 0) << j.output;
    const size_t at = j.output.find(" thread(s)");
    return at == std::string::npos ? std::string("(no line)") : j.output.substr(at, j.output.find('\n', at) - at);
  };
  EXPECT_EQ(line("share"), " thread(s) (helpers pinned)");
  EXPECT_EQ(line("none"), " thread(s)");
}

// Note [crew after fork]: a communicator whose non-blocking calls started its progress thread is destroyed in a fork's
// child without waiting for that thread (which the child does not have).
TEST(Comm, AForksChildDestroysACommunicatorWithAProgressThread) {
  auto w = tt::comm::world();
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  tt::comm::Request r = w.value()->ibarrier();
  ASSERT_TRUE(r.wait().is_ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    w.value().reset();
    _exit(0);
  }
  EXPECT_EQ(wait_child(child), 0) << "-1: the child hung";
  EXPECT_TRUE(w.value()->ibarrier().wait().is_ok());  // the parent's progress thread still runs
}

// Note [crew]: pinned helpers each run on a CPU of their own among the thread's, none on the constructing thread's,
// where there is a CPU for every thread (the test narrows itself to 2 CPUs); else none is pinned.
TEST(Crew, PinnedHelpersRunOnCpusOfTheirOwnWhereThereAreEnough) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  struct Restore {  // the later tests run on every CPU again, however this one ends
    cpu_set_t set;
    ~Restore() { sched_setaffinity(0, sizeof(set), &set); }
  } restore{before};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &before)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU";
  cpu_set_t two;
  CPU_ZERO(&two);
  CPU_SET(cpus[0], &two);
  CPU_SET(cpus[1], &two);
  ASSERT_EQ(sched_setaffinity(0, sizeof(two), &two), 0);
  const int before_cpu = sched_getcpu();
  tt::comm::Crew crew(2, std::chrono::microseconds(200), true);
  const int after_cpu = sched_getcpu();
  ASSERT_EQ(crew.size(), 2);
  ASSERT_EQ(crew.pinned().size(), 1u);
  if (before_cpu == after_cpu) {  // (unless this thread moved meanwhile)
    EXPECT_NE(crew.pinned()[0], before_cpu);
  }
  EXPECT_TRUE(crew.pinned()[0] == cpus[0] || crew.pinned()[0] == cpus[1]);
  std::vector<int> where(2, -1);
  for (int round = 0; round < 50; ++round) {
    crew.run([&](int i) { where[static_cast<size_t>(i)] = sched_getcpu(); });
    EXPECT_EQ(where[1], crew.pinned()[0]);  // the helper never runs elsewhere
  }
  tt::comm::Crew three(3, std::chrono::microseconds(200), true);  // 3 threads, 2 CPUs: none pinned
  EXPECT_TRUE(three.pinned().empty());
  tt::comm::Crew unpinned(2, std::chrono::microseconds(200), false);
  EXPECT_TRUE(unpinned.pinned().empty());
}

// The kilobytes of transparent huge pages in the mapping that holds p, from /proc/self/smaps (AnonHugePages): an
// oracle independent of on_huge_pages. -1 if it cannot be read.
long huge_kb_at(const void* p) {
  std::ifstream f("/proc/self/smaps");
  if (!f) return -1;
  const auto a = reinterpret_cast<uintptr_t>(p);
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      in = lo <= a && a < hi;
    } else if (in && line.rfind("AnonHugePages:", 0) == 0) {
      return std::atol(line.c_str() + 14);
    }
  }
  return -1;
}

// Whether the kernel has PAGEMAP_SCAN (Linux 6.7 and later).
bool kernel_has_pagemap_scan() {
  utsname u{};
  int major = 0, minor = 0;
  return uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 6 || (major == 6 && minor >= 7));
}

// A fresh 2 MiB-aligned buffer that asked for huge pages, written; whether smaps shows it on huge pages (the
// machine has them on madvise or always). Freed before returning.
bool huge_pages_here() {
  const size_t huge = size_t(2) << 20;
  void* p = std::aligned_alloc(huge, 2 * huge);
  if (p == nullptr) return false;
  madvise(p, 2 * huge, MADV_HUGEPAGE);
  std::memset(p, 1, 2 * huge);
  const bool seen = huge_kb_at(p) >= 2048;
  std::free(p);
  return seen;
}

// Where smaps shows huge pages and the kernel has PAGEMAP_SCAN, on_huge_pages must say so; 4 KiB pages, untouched
// and empty ranges are never taken for huge ones.
TEST(Comm, HugePagesAreToldApart) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* q = mmap(nullptr, 64 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(q, MAP_FAILED);
  madvise(q, 64 * page, MADV_NOHUGEPAGE);
  EXPECT_FALSE(tt::comm::on_huge_pages(q, 64 * page));  // not yet touched: no pages at all
  std::memset(q, 1, 64 * page);
  EXPECT_FALSE(tt::comm::on_huge_pages(q, 64 * page));  // 4 KiB pages
  EXPECT_FALSE(tt::comm::on_huge_pages(q, 0));
  munmap(q, 64 * page);
  if (!kernel_has_pagemap_scan() || !huge_pages_here())
    GTEST_SKIP() << "no huge pages here (smaps), or a kernel before 6.7 (no PAGEMAP_SCAN)";
  const size_t huge = size_t(2) << 20;
  void* p = std::aligned_alloc(huge, 2 * huge);
  ASSERT_NE(p, nullptr);
  madvise(p, 2 * huge, MADV_HUGEPAGE);
  std::memset(p, 1, 2 * huge);
  ASSERT_GE(huge_kb_at(p), 2048);
  EXPECT_TRUE(tt::comm::on_huge_pages(static_cast<char*>(p) + 4096, huge));  // any part of them
  std::free(p);
}

// comm-bench's table in output: (rows, rows with #wrong 0 in both forms).
std::pair<size_t, size_t> bench_rows(const std::string& output) {
  size_t rows = 0, wrong_free = 0;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(untagged(line));
    std::vector<std::string> w{std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
    if (w.size() != 13 || w[0].empty() || !std::isdigit(static_cast<unsigned char>(w[0][0]))) continue;
    ++rows;
    wrong_free += w[8] == "0" && w[12] == "0";
  }
  return {rows, wrong_free};
}

// Note [single copy by pages]: below the single-copy threshold, gathers and scatters of one round take single copies
// when the root's buffer is on huge pages (comm-bench's buffers are from TIERTRAIN_COMM_HUGE_BYTES up), and the
// segments otherwise: both right (comm-bench checks every element, out of place and in place, roots 0 and 2), at
// uneven sizes, with the readers' jitter. The root's trace line says which path it took.
TEST(Comm, SingleCopiesIntoHugePagesBelowTheThreshold) {
  const bool huge = kernel_has_pagemap_scan() && huge_pages_here();
  for (const char* c : {"gather", "scatter"}) {
    for (const char* pages : {"TIERTRAIN_COMM_HUGE_BYTES=1", "TIERTRAIN_COMM_HUGE_BYTES=0"}) {
      for (const char* root : {"0", "2"}) {
        // (No pool: comm-bench's buffers are then private memory, on huge pages or not as TIERTRAIN_COMM_HUGE_BYTES
        // says.)
        const Job j = shell(std::string("env TIERTRAIN_DEBUG=TRACE TIERTRAIN_DEBUG_SUBSYS=COMM TIERTRAIN_COMM_POOL=0 ") +
                            pages + " TIERTRAIN_COMM_CMA_BYTES=1048576 TIERTRAIN_COMM_CMA_HUGE_BYTES=1000 "
                            "TIERTRAIN_COMM_BUFFER=1048576 TIERTRAIN_COMM_JITTER_US=20 " + TT_BINARY +
                            " launch -n 3 -- " + TT_BINARY + " comm-bench -C " + c + " -r " + root +
                            " -b 3000 -e 600000 -f 7 -n 2 -w 0 -c 2");
        ASSERT_EQ(j.code, 0) << j.output;
        const auto [rows, wrong_free] = bench_rows(j.output);
        EXPECT_EQ(rows, 3u) << j.output;  // 3000, 21000, 147000 bytes (600000 is past -e)
        EXPECT_EQ(wrong_free, rows) << c << " " << pages << " root " << root << "\n" << j.output;
        const bool single = j.output.find("the root's buffer is on huge pages") != std::string::npos;
        EXPECT_EQ(single, huge && std::string(pages) == "TIERTRAIN_COMM_HUGE_BYTES=1") << c << " " << pages << "\n"
                                                                                       << j.output;
      }
    }
  }
}

// Note [single copy by pages]: the ranks agree on TIERTRAIN_COMM_CMA_HUGE_BYTES (the largest asked for; 0 anywhere:
// off), so that every rank knows when the root cannot take single copies. Rank 1 alone asks for 0, then for more
// than any piece here: no root takes single copies, and every gather and scatter is still right.
TEST(Comm, RanksAgreeOnSingleCopiesIntoHugePages) {
  const bool huge = kernel_has_pagemap_scan() && huge_pages_here();
  if (!huge)  // the results are still checked, but the old rule (the root's setting alone) would pass as well
    std::printf("[   NOTE   ] no huge pages or PAGEMAP_SCAN here: which path the root took is not checked\n");
  for (const char* rank1 : {"0", "100000", "1000"}) {
    for (const char* c : {"gather", "scatter"}) {
      const std::string bench = std::string(TT_BINARY) + " comm-bench -C " + c + " -b 3000 -e 600000 -f 7 -n 2 -w 0 -c 2";
      const Job j = shell(std::string("env TIERTRAIN_DEBUG=TRACE TIERTRAIN_DEBUG_SUBSYS=COMM TIERTRAIN_COMM_POOL=0 "
                                      "TIERTRAIN_COMM_HUGE_BYTES=1 TIERTRAIN_COMM_CMA_BYTES=1048576 "
                                      "TIERTRAIN_COMM_CMA_HUGE_BYTES=1000 TIERTRAIN_COMM_BUFFER=1048576 "
                                      "TIERTRAIN_COMM_JITTER_US=20 ") +
                          TT_BINARY + " launch -n 3 -- sh -c 'if [ \"$RANK\" = 1 ]; then export "
                          "TIERTRAIN_COMM_CMA_HUGE_BYTES=" + rank1 + "; fi; exec " + bench + "'");
      ASSERT_EQ(j.code, 0) << j.output;
      const auto [rows, wrong_free] = bench_rows(j.output);
      EXPECT_EQ(rows, 3u) << j.output;
      EXPECT_EQ(wrong_free, rows) << c << " rank 1 " << rank1 << "\n" << j.output;
      const bool single = j.output.find("the root's buffer is on huge pages") != std::string::npos;
      EXPECT_EQ(single, huge && std::string(rank1) == "1000") << c << " rank 1 " << rank1 << "\n" << j.output;
    }
  }
}

// Note [inline rounds]: every collective, dtype, op and size again with small rounds' data in the input areas (inline
// rounds off; on by default), with the readers' jitter.
TEST_P(CommRanks, EveryCollectiveWithSmallRoundsInTheAreas) {
  expect_collectives_right(GetParam(), "TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_INLINE=0");
}

// Note [arrival tree]: every collective, dtype, op and size again with rounds arriving through group leaders (from 2
// ranks: groups of 2 at 2-4 ranks, so that 3 ranks have a group of one), with the readers' jitter.
TEST_P(CommRanks, EveryCollectiveThroughTheArrivalTree) {
  expect_collectives_right(GetParam(),
                           "TIERTRAIN_COMM_BUFFER=262144 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_TREE_RANKS=2");
}

// Note [arrival tree]: a mismatch, a misuse and a late rank are found and named as without the tree; the tree is on
// only where every rank asked for it.
TEST(Comm, TheArrivalTreeNamesMismatchesMisuseAndLateRanks) {
  for (int ranks : {3, 4}) {
    SCOPED_TRACE(ranks);
    const Job mismatch = launch(ranks, "mismatch", "TIERTRAIN_COMM_TIMEOUT=20 TIERTRAIN_COMM_TREE_RANKS=2");
    EXPECT_EQ(mismatch.code, 0) << mismatch.output;
    EXPECT_NE(mismatch.output.find("rank 1 has count 10 dtype i32"), std::string::npos) << mismatch.output;
    const Job misuse = launch(ranks, "misuse", "TT_MISUSE=inplace TIERTRAIN_COMM_TIMEOUT=60 TIERTRAIN_COMM_TREE_RANKS=2");
    EXPECT_EQ(misuse.code, 0) << misuse.output;
    const Job late = launch(ranks, "never_arrives", "TIERTRAIN_COMM_TIMEOUT=1 TIERTRAIN_COMM_TREE_RANKS=2");
    EXPECT_EQ(late.code, 0) << late.output;
    EXPECT_NE(late.output.find("rank(s) 1 did not arrive within 1.0 s"), std::string::npos) << late.output;
  }
  // What rank 0 agreed on (rank 1 may start with its own setting: TT_RANK1_ENV).
  const auto arrival = [](int ranks, const std::string& env) {
    const Job j = launch(ranks, "smoke", "TT_LOG_COMM=1 " + env);
    EXPECT_EQ(j.code, 0) << j.output;
    const size_t line = j.output.find("rank 0 of " + std::to_string(ranks));
    const size_t at = line == std::string::npos ? line : j.output.find("arrival ", line);
    return at == std::string::npos ? std::string("(no line)")
                                   : j.output.substr(at, j.output.find_first_of(";\n", at) - at);
  };
  EXPECT_EQ(arrival(4, ""), "arrival flat");
  EXPECT_EQ(arrival(4, "TIERTRAIN_COMM_TREE_RANKS=2"), "arrival through groups of 2");
  EXPECT_EQ(arrival(4, "TIERTRAIN_COMM_TREE_RANKS=8"), "arrival flat");
  EXPECT_EQ(arrival(4, "TIERTRAIN_COMM_TREE_RANKS=2 TT_RANK1_ENV=TIERTRAIN_COMM_TREE_RANKS=0"), "arrival flat");
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommRanks, ::testing::Values(1, 2, 3, 4));

TEST(Comm, ARankThatNeverArrivesIsNamedWithinTheDeadline) {
  const Job j = launch(3, "never_arrives", "TIERTRAIN_COMM_TIMEOUT=1");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("rank(s) 1 did not arrive within 1.0 s"), std::string::npos) << j.output;
}

TEST(Comm, MismatchedCountsAndDtypesAreErrorsOnEveryRank) {
  const Job j = launch(3, "mismatch", "TIERTRAIN_COMM_TIMEOUT=20");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("rank 1 has count 10 dtype i32"), std::string::npos) << j.output;
}

// Broadcasts from changing roots, of one round and several, mixed with other collectives under jitter, at 2-4 ranks
// and through the arrival tree; at 2 and 3 ranks also in single copies from 1 KiB (Note [single-copy broadcast]: a
// root that took its buffer back before its readers were done would show as wrong elements).
TEST(Comm, BroadcastsFromChangingRootsAmongOtherCollectivesAreRight) {
  const std::tuple<int, const char*, const char*> runs[] = {  // ranks, tree from, more settings
      {2, "0", ""}, {3, "0", ""}, {4, "0", ""}, {4, "2", ""},
      {2, "0", " TIERTRAIN_COMM_CMA_BYTES=1024"}, {3, "0", " TIERTRAIN_COMM_CMA_BYTES=1024"}};
  for (const auto& [ranks, tree, more] : runs) {
    const Job j = launch(ranks, "broadcast_mix",
                         std::string("TIERTRAIN_COMM_BUFFER=4096 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_TREE_RANKS=") +
                             tree + more);
    EXPECT_EQ(j.code, 0) << ranks << " ranks, tree from " << tree << more << "\n" << j.output;
    EXPECT_NE(j.output.find("rank 0: broadcast mix right"), std::string::npos) << j.output;
  }
}

// Note [inline rounds]: small collectives back to back with readers late, flat and through the arrival tree, with
// the data in the arrival lines (the default; rank 1 says TIERTRAIN_COMM_INLINE=1) and, where rank 1 alone turns it
// off (which turns it off everywhere), in the areas.
TEST(Comm, SmallRoundsBackToBackWithLateReadersAreRight) {
  const std::tuple<int, const char*, const char*> runs[] = {
      {2, "0", "1"}, {3, "0", "1"}, {4, "0", "1"}, {4, "2", "1"}, {3, "2", "1"}, {3, "0", "0"}};  // ranks, tree from,
                                                                                                 // rank 1's setting
  for (const auto& [ranks, tree, on] : runs) {
    const Job j = launch(ranks, "small_rounds",
                         std::string("TT_LOG_COMM=1 TIERTRAIN_COMM_BUFFER=262144 "
                                     "TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_TREE_RANKS=") +
                             tree + " TT_RANK1_ENV=TIERTRAIN_COMM_INLINE=" + on);
    EXPECT_EQ(j.code, 0) << ranks << " ranks, tree from " << tree << ", inline " << on << "\n" << j.output;
    EXPECT_NE(j.output.find("rank 0: small rounds right"), std::string::npos) << j.output;
    // What the ranks agreed on (rank 1 alone saying 0 turns it off everywhere).
    const bool on_all = std::string(on) == "1";
    EXPECT_NE(j.output.find(on_all ? "inline rounds on" : "inline rounds off"), std::string::npos) << j.output;
    EXPECT_EQ(j.output.find(on_all ? "inline rounds off" : "inline rounds on"), std::string::npos) << j.output;
  }
}

// Note [rooted rounds]: rooted rounds back to back with late readers, flat and through the arrival tree, inline and
// in the areas, and (rank 1 alone turning them off, which turns them off everywhere) as full rounds.
TEST(Comm, RootedRoundsBackToBackWithLateReadersAreRight) {
  const std::tuple<int, const char*, const char*, const char*> runs[] = {
      {2, "0", "1", "1"}, {3, "0", "1", "1"}, {4, "0", "1", "1"}, {4, "2", "1", "1"},
      {3, "0", "0", "1"}, {4, "2", "0", "1"}, {3, "0", "1", "0"}};  // ranks, tree from, inline, rank 1's rooted
  for (const auto& [ranks, tree, inl, on] : runs) {
    const Job j = launch(ranks, "rooted_rounds",
                         std::string("TT_LOG_COMM=1 TIERTRAIN_COMM_JITTER_US=20 TIERTRAIN_COMM_TREE_RANKS=") + tree +
                             " TIERTRAIN_COMM_INLINE=" + inl + " TT_RANK1_ENV=TIERTRAIN_COMM_ROOTED=" + on);
    SCOPED_TRACE(std::to_string(ranks) + " ranks, tree from " + tree + ", inline " + inl + ", rooted " + on);
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_NE(j.output.find("rank 0: rooted rounds right"), std::string::npos) << j.output;
    const bool on_all = std::string(on) == "1";
    EXPECT_NE(j.output.find(on_all ? "rooted rounds on" : "rooted rounds off"), std::string::npos) << j.output;
    EXPECT_EQ(j.output.find(on_all ? "rooted rounds off" : "rooted rounds on"), std::string::npos) << j.output;
  }
}

TEST(Comm, RootedRoundsNameMismatchesAndLateRanksAndTheOthersFailNext) {
  for (const char* what : {"reduce", "gather", "late"}) {
    const Job j = launch(3, "rooted_errors", std::string("TT_ROOTED=") + what + " TIERTRAIN_COMM_TIMEOUT=" +
                                                 (std::string(what) == "late" ? "1" : "20"));
    EXPECT_EQ(j.code, 0) << what << "\n" << j.output;
  }
}

TEST(Comm, ARankThatExitsIsSeenDeadBeforeTheDeadline) {
  const Job j = launch(2, "peer_exits", "TIERTRAIN_COMM_TIMEOUT=60");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_LT(j.seconds, 15) << j.output;
}

TEST(Comm, AWaitThePeersSatisfiedSucceedsThoughTheyLeftRightAfter) {
  for (const char* what : {"gave_up", "sent"}) {
    const Job j = launch(2, "passed_then_gone",
                         std::string("TT_PASSED=") + what + " TIERTRAIN_COMM_TIMEOUT=30 TT_RANK1_ENV=TIERTRAIN_COMM_JITTER_US=0 " +
                             "TIERTRAIN_COMM_JITTER_US=200000");
    EXPECT_EQ(j.code, 0) << what << "\n" << j.output;
  }
}

TEST(Launch, ACrashingRankStopsTheJobAndIsNamed) {
  const Job j = launch(3, "crash", "TIERTRAIN_COMM_TIMEOUT=60");
  EXPECT_EQ(j.code, 128 + SIGABRT) << j.output;
  EXPECT_NE(j.output.find("rank 2 (pid"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("killed by signal 6"), std::string::npos) << j.output;
  EXPECT_LT(j.seconds, 20) << "the other ranks sleep 30 s: the launcher must have stopped them\n" << j.output;
}

// --bind-to core gives each rank one CPU; --bind-to share gives each its equal share of the launcher's CPUs and
// sets TIERTRAIN_COMM_THREADS to it (Note [crew]), unless it is set already.
// Note [stale segments]: `launch --cleanup` (and every launch) removes this user's segments that are over a minute
// old and that no process maps or holds open; a mapped one, an open one, a young one and other files stay.
TEST(Launch, StaleSegmentsAreRemovedAndLiveOnesKept) {
  char tmpl[] = "/tmp/tiertrain-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto make = [&](const std::string& name, bool old) {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, 1 << 20), 0);
    EXPECT_EQ(pwrite(fd, "x", 1, 0), 1);  // a page in use
    if (old) {
      const struct timeval t[2] = {{time(nullptr) - 600, 0}, {time(nullptr) - 600, 0}};
      EXPECT_EQ(futimes(fd, t), 0);
    }
    return std::pair<std::string, int>(path, fd);
  };
  auto [dead, dead_fd] = make("tiertrain-jdead-0", true);
  ::close(dead_fd);
  auto [mapped, mapped_fd] = make("tiertrain-jlive-0", true);
  void* map = mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, mapped_fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  ::close(mapped_fd);
  auto [open_one, open_fd] = make("tiertrain-jopen-1", true);  // held open, not mapped
  auto [young, young_fd] = make("tiertrain-jyoung-0", false);
  ::close(young_fd);
  auto [other, other_fd] = make("not-ours-0", true);
  ::close(other_fd);
  const Job j = shell("env TIERTRAIN_SHM_DIR=" + dir + " " + TT_BINARY + " launch --cleanup");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("removed 1 shared-memory segment ("), std::string::npos) << j.output;
  EXPECT_NE(access(dead.c_str(), F_OK), 0);
  for (const std::string& kept : {mapped, open_one, young, other}) EXPECT_EQ(access(kept.c_str(), F_OK), 0) << kept;
  // Once nothing uses it, the next launch removes the open one, and says so.
  ::close(open_fd);
  const Job l = shell("env TIERTRAIN_SHM_DIR=" + dir + " " + TT_BINARY + " launch -n 1 -- true");
  EXPECT_EQ(l.code, 0) << l.output;
  EXPECT_NE(l.output.find("removed 1 shared-memory segment"), std::string::npos) << l.output;
  EXPECT_NE(access(open_one.c_str(), F_OK), 0);
  EXPECT_EQ(access(mapped.c_str(), F_OK), 0);
  munmap(map, 1 << 20);
  // -n is required for a job.
  EXPECT_EQ(shell(std::string(TT_BINARY) + " launch -- true").code, 2);
  shell("rm -rf " + dir);
}

TEST(Launch, BindingToCoresAndToShares) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  const int cpus = CPU_COUNT(&mask);
  // Each rank prints its CPU list and TIERTRAIN_COMM_THREADS.
  const std::string show =
      " -- sh -c 'echo \"cpus=$(sed -n \"s/^Cpus_allowed_list:[[:space:]]*//p\" /proc/self/status) "
      "threads=${TIERTRAIN_COMM_THREADS:-unset}\"'";
  const Job core = shell(std::string("env -u TIERTRAIN_COMM_THREADS ") + TT_BINARY + " launch -n 2 --bind-to core" +
                         show);
  ASSERT_EQ(core.code, 0) << core.output;
  // One CPU each: a list without a range or a comma.
  for (const char* several : {"-", ","}) {
    std::istringstream lines(core.output);
    int seen = 0;
    for (std::string tagged; std::getline(lines, tagged);) {
      const std::string line = untagged(tagged);
      if (line.rfind("cpus=", 0) != 0) continue;
      ++seen;
      EXPECT_EQ(line.substr(0, line.find(' ')).find(several), std::string::npos) << line;
    }
    EXPECT_EQ(seen, 2) << core.output;
  }
  EXPECT_NE(core.output.find("threads=unset"), std::string::npos) << core.output;
  const Job share = shell(std::string("env -u TIERTRAIN_COMM_THREADS ") + TT_BINARY + " launch -n 1 --bind-to share" +
                          show);
  ASSERT_EQ(share.code, 0) << share.output;
  std::string all;  // the launcher's CPU list, as this process has it
  {
    std::ifstream st("/proc/self/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0)
        all = "cpus=" + line.substr(line.find_first_not_of(" \t", 18)) + " ";
  }
  EXPECT_NE(share.output.find(all + "threads=" + std::to_string(std::min(cpus, 8))), std::string::npos)
      << share.output;
  const Job chosen = shell(std::string("env TIERTRAIN_COMM_THREADS=1 ") + TT_BINARY + " launch -n 1 --bind-to share" +
                           show);
  EXPECT_NE(chosen.output.find("threads=1"), std::string::npos) << chosen.output;
  // Unbound ranks share the CPUs: each one's OpenMP team is its share, unless OMP_NUM_THREADS is set; one rank, or
  // bound ranks, keep their default (their affinity masks).
  const std::string omp = " -- sh -c 'echo omp=${OMP_NUM_THREADS:-unset}'";
  const Job two = shell(std::string("env -u OMP_NUM_THREADS ") + TT_BINARY + " launch -n 2" + omp);
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_HAS(two.output, "[rank 1] omp=" + std::to_string(std::max(1, cpus / 2)) + "\n");
  const Job given = shell(std::string("env OMP_NUM_THREADS=3 ") + TT_BINARY + " launch -n 2" + omp);
  EXPECT_HAS(given.output, "[rank 0] omp=3\n");
  const Job one = shell(std::string("env -u OMP_NUM_THREADS ") + TT_BINARY + " launch -n 1" + omp);
  EXPECT_HAS(one.output, "omp=unset");
  const Job bound = shell(std::string("env -u OMP_NUM_THREADS ") + TT_BINARY + " launch -n 2 --bind-to core" + omp);
  EXPECT_HAS(bound.output, "[rank 0] omp=unset");
}

// Note [rank output]: every line a rank writes reaches the terminal whole, tagged with its rank, however long and
// however the ranks interleave (200 KB lines, written in several pieces, from 4 ranks at once); a last line without a
// newline gets one; --log-dir keeps each rank's streams untagged; --no-tag-output passes them through.
TEST(Launch, RankOutputIsTaggedWholeLinesAndLogged) {
  TempDir dir;
  const std::string logs = dir.path() + "/logs/deeper";
  const Job j = shell(std::string(TT_BINARY) + " launch -n 4 --log-dir " + logs +
                      " -- sh -c 'echo out$RANK; echo err$RANK >&2; yes $RANK | head -c 400000 | tr -d \"\\n\"; echo; "
                      "printf last$RANK'");
  ASSERT_EQ(j.code, 0) << j.output.substr(0, 2000);
  std::istringstream lines(j.output);
  int long_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0u) << line.substr(0, 200);
    const char r = line[6];
    ASSERT_GE(r, '0');
    ASSERT_LE(r, '3');
    const std::string body = untagged(line);
    if (body.size() > 100) {
      ++long_lines;
      EXPECT_EQ(body.size(), 200000u);
      EXPECT_EQ(body.find_first_not_of(r), std::string::npos) << "rank " << r << "'s line holds another rank's bytes";
    } else {
      EXPECT_TRUE(body == std::string("out") + r || body == std::string("err") + r ||
                  body == std::string("last") + r) << line;
    }
  }
  EXPECT_EQ(long_lines, 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_HAS(j.output, "[rank " + std::to_string(r) + "] last" + std::to_string(r) + "\n");
    std::ifstream out(logs + "/rank" + std::to_string(r) + ".out"), err(logs + "/rank" + std::to_string(r) + ".err");
    const std::string o{std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>()};
    const std::string e{std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>()};
    EXPECT_EQ(o.substr(0, 5), "out" + std::to_string(r) + "\n");
    EXPECT_EQ(o.size(), 5u + 200001u + 5u);  // untagged, the last line as written (no newline added)
    EXPECT_EQ(e, "err" + std::to_string(r) + "\n");
  }
  const Job plain = shell(std::string(TT_BINARY) + " launch -n 2 --no-tag-output -- sh -c 'echo plain$RANK'");
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_HAS(plain.output, "plain0\n");
  EXPECT_EQ(plain.output.find("[rank"), std::string::npos) << plain.output;
  const Job bad = shell(std::string(TT_BINARY) + " launch -n 1 --log-dir /proc/no-such-dir -- true");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_HAS(bad.output, "cannot create launch --log-dir");
}

TEST(Launch, ExitCodesAndBadCommands) {
  auto run = [](const std::string& args) {
    const Job j = shell(std::string(TT_BINARY) + " launch " + args);
    return std::make_pair(j.code, j.output);
  };
  auto ok = run("-n 3 -- sh -c 'test $WORLD_SIZE = 3 && test $RANK = $LOCAL_RANK && test -n \"$TIERTRAIN_COMM_ID\"'");
  EXPECT_EQ(ok.first, 0) << ok.second;
  auto fail = run("-n 2 -- sh -c 'exit $((RANK + 3))'");
  EXPECT_TRUE(fail.first == 3 || fail.first == 4) << fail.second;
  EXPECT_NE(fail.second.find("exited with code"), std::string::npos) << fail.second;
  auto missing = run("-n 2 -- /nonexistent/program");
  EXPECT_EQ(missing.first, 127) << missing.second;
  EXPECT_NE(missing.second.find("cannot run '/nonexistent/program'"), std::string::npos) << missing.second;
  auto usage = run("-n 0 -- true");
  EXPECT_NE(usage.first, 0);
}

// Segments as files in a chosen directory (for a container whose /dev/shm is too small), removed at the end.
TEST(Comm, FileBackedSegmentsInAChosenDirectory) {
  char dir[] = "/tmp/tt-comm-shm-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const Job j = launch(3, "smoke", std::string("TIERTRAIN_SHM_DIR=") + dir);
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("rank 2: smoke right"), std::string::npos) << j.output;
  EXPECT_EQ(rmdir(dir), 0) << "segments left behind in " << dir;
}

// Not enough room where the segments go: refused before anything is mapped, with what to do about it.
TEST(Comm, TooSmallSharedMemoryIsReportedWithTheFixes) {
  const Job j = launch(2, "smoke", "TIERTRAIN_COMM_BUFFER=1099511627776 TIERTRAIN_COMM_TIMEOUT=5");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("--shm-size"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("TIERTRAIN_SHM_DIR"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("exited with code 1"), std::string::npos) << j.output;
}

TEST(Comm, OneRanksBadArgumentIsAnErrorOnEveryRankAtOnce) {
  for (const char* what : {"inplace", "root"}) {
    const Job j = launch(3, "misuse", std::string("TT_MISUSE=") + what + " TIERTRAIN_COMM_TIMEOUT=60");
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_LT(j.seconds, 15) << j.output;
  }
}

TEST(Comm, RanksWithDifferentBuffersFailAtOnce) {
  const Job j = launch(2, "buffer_mismatch", "TIERTRAIN_COMM_TIMEOUT=60");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("ranks started with different settings"), std::string::npos) << j.output;
  EXPECT_LT(j.seconds, 15) << j.output;
}

TEST(Comm, NonBlockingCallsOverlapAndKeepTheirOrder) {
  for (int ranks : {2, 3}) {
    const Job j = launch(ranks, "nonblocking", "TIERTRAIN_COMM_TIMEOUT=20");
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_NE(j.output.find("rank 0: posted in"), std::string::npos) << j.output;
  }
}

// Buffer placement: named HBW nodes are used with the policy asked for; bind without any HBW node is refused.
TEST(Comm, HbwPlacementFromTheEnvironment) {
  const Job j = launch(2, "smoke", "TIERTRAIN_HBW_NODES=0 TIERTRAIN_COMM_MEMPOLICY=bind");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("buffers: bind NUMA node(s) 0 (HBW: TIERTRAIN_HBW_NODES); pages on node 0"), std::string::npos)
      << j.output;
  const Job il = launch(2, "smoke", "TIERTRAIN_HBW_NODES=0 TIERTRAIN_COMM_MEMPOLICY=interleave");
  EXPECT_EQ(il.code, 0) << il.output;
  EXPECT_NE(il.output.find("buffers: interleave NUMA node(s) 0"), std::string::npos) << il.output;
  const Job bad = launch(2, "smoke", "TIERTRAIN_HBW_NODES=999");
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_NE(bad.output.find("no NUMA node 999"), std::string::npos) << bad.output;
}

// tiertrain comm-bench under the launcher: every collective, a few dtypes and ops, checked results (#wrong 0), JSON
// rows for both placements of each size.
TEST(CommBench, EveryCollectiveRunsCheckedAndWritesJson) {
  char dir[] = "/tmp/tt-comm-bench-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const char* cases[][3] = {{"allreduce", "f32", "sum"},   {"allreduce", "bf16", "max"}, {"broadcast", "i64", "sum"},
                            {"reduce", "f64", "min"},      {"allgather", "f16", "sum"},  {"gather", "i32", "sum"},
                            {"scatter", "f32", "sum"},     {"reduce_scatter", "i32", "prod"},
                            {"alltoall", "bf16", "sum"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c[0]) + " " + c[1] + " " + c[2]);
    const std::string json = std::string(dir) + "/" + c[0] + "-" + c[1] + ".json";
    const Job j = shell("env TIERTRAIN_COMM_BUFFER=1048576 " + std::string(TT_BINARY) + " launch -n 3 -- " +
                        TT_BINARY + " comm-bench -C " + c[0] + " -d " + c[1] + " -o " + c[2] +
                        " -r 2 -b 96 -e 300K -f 16 -n 2 -w 1 -c 2 --vary --json " + json);
    const std::string& out = j.output;
    ASSERT_EQ(j.code, 0) << out;
    EXPECT_NE(out.find("#wrong"), std::string::npos) << out;
    FILE* f = fopen(json.c_str(), "r");
    ASSERT_NE(f, nullptr) << out;
    std::string text;
    char buf[1024];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) text.append(buf, n);
    fclose(f);
    // 96 B, 1.5 KiB, 24 KiB (and 384 KiB is above -e): three sizes, out of place and in place.
    size_t rows = 0, pos = 0;
    while ((pos = text.find("\"wrong\": 0", pos)) != std::string::npos) ++rows, ++pos;
    EXPECT_EQ(rows, 6u) << text;
    EXPECT_EQ(text.find("\"wrong\": -1"), std::string::npos) << text;
    std::remove(json.c_str());
  }
  rmdir(dir);
}

// --min-ms: every row times at least -n calls and about as many as take that long at the warm-up's pace (all ranks
// the same number, or the run would fail on a mismatch); without it, exactly -n; with -w 0 too. The first row warms
// up for --first-warmup-ms, the others for --warmup-ms (TIERTRAIN_BENCH_TRACE: rank 0's warm-up of each row on stderr).
// Negative times are refused.
TEST(CommBench, MinMsTimesEnoughCallsAndTheFirstRowWarmsUpLonger) {
  char dir[] = "/tmp/tt-comm-bench-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string output;
  const auto rows = [&](const std::string& flags) {
    const std::string json = std::string(dir) + "/rows.json";
    const Job j = shell("env TIERTRAIN_BENCH_TRACE=1 " + std::string(TT_BINARY) + " launch -n 2 -- " + TT_BINARY +
                        " comm-bench -b 8 -e 64K -f 64 -n 3 " + flags + " --json " + json);
    EXPECT_EQ(j.code, 0) << j.output;
    output = j.output;
    std::ifstream f(json);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::remove(json.c_str());
    // (iters, time_us) of each row, in order.
    std::vector<std::pair<long, double>> out;
    for (size_t at = text.find("\"iters\""); at != std::string::npos; at = text.find("\"iters\"", at + 1)) {
      const size_t row = text.rfind('{', at), end = text.find('}', at);
      const size_t t = text.find("\"time_us\"", row);
      EXPECT_TRUE(t != std::string::npos && t < end) << text;
      out.emplace_back(std::stol(text.substr(text.find(':', at) + 1)), std::stod(text.substr(text.find(':', t) + 1)));
    }
    return out;
  };
  // The warm-up times (ms) of rank 0's rows, in order, from the trace.
  const auto warmups = [&]() {
    std::vector<double> ms;
    for (size_t at = output.find("warm-up: "); at != std::string::npos; at = output.find("warm-up: ", at + 1))
      ms.push_back(std::stod(output.substr(output.find(" in ", at) + 4)));
    return ms;
  };
  const auto plain = rows("-w 1");
  ASSERT_EQ(plain.size(), 6u);  // 8 B, 512 B and 32 KiB, out of place and in place
  for (const auto& [iters, us] : plain) EXPECT_EQ(iters, 3);
  const auto timed = rows("-w 2 --warmup-ms 5 --first-warmup-ms 400 --min-ms 30");
  ASSERT_EQ(timed.size(), 6u);
  std::vector<double> spent;
  for (const auto& [iters, us] : timed) {
    EXPECT_GT(iters, 3);  // more than -n: a call of 8 B to 32 KiB takes far less than 30 ms here
    spent.push_back(static_cast<double>(iters) * us);
  }
  // The count goes by the warm-up rounds' pace, and the timed calls' may differ from it on a busy machine (under
  // ctest -j2 one row once timed 0.67 ms): a loose bound on the time spent, on the median row.
  std::sort(spent.begin(), spent.end());
  EXPECT_GE(spent[spent.size() / 2], 30e3 / 4) << output;
  const std::vector<double> ms = warmups();
  ASSERT_EQ(ms.size(), 6u) << output;
  // At most 20 rounds: where the calls keep getting faster than the pace so far (a busy machine), each round falls
  // short of the time left and the cap ends the warm-up a little early (397 ms once under ctest -j2).
  EXPECT_GE(ms[0], 360) << output;
  for (size_t i = 1; i < ms.size(); ++i) EXPECT_LT(ms[i], 200) << i << "\n" << output;
  // No warm-up calls at all: -n calls timed (no pace to go by), every rank alike.
  const auto bare = rows("-w 0 --min-ms 30");
  ASSERT_EQ(bare.size(), 6u);
  for (const auto& [iters, us] : bare) EXPECT_EQ(iters, 3);
  const Job bad = shell(std::string(TT_BINARY) + " comm-bench -e 64 --min-ms -1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--min-ms are >= 0"), std::string::npos) << bad.output;
  rmdir(dir);
}

// --stream is for the nccl backend; an unknown backend is named.
TEST(CommBench, OptionsThatDoNotApplyAreRefused) {
  Job j = shell(std::string(TT_BINARY) + " comm-bench --stream -e 64");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("--stream is for the nccl backend (this is shm)"), std::string::npos) << j.output;
  j = shell(std::string(TT_BINARY) + " comm-bench --backend gloo -e 64");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("gloo not in {auto,shm,mpi,nccl}"), std::string::npos) << j.output;
}

// The same scenarios over MPI, under mpirun (Open MPI from Debian's packages), when the build has MPI.
Job mpirun(int ranks, const std::string& scenario, const std::string& env = "") {
  return shell("mpirun --allow-run-as-root --oversubscribe -n " + std::to_string(ranks) + " env TT_COMM_SCENARIO=" +
               scenario + " TIERTRAIN_COMM_BACKEND=mpi " + env + " " + self_path);
}

#ifdef TIERTRAIN_HAVE_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif

// Why a test cannot run here ("" if it can). GTEST_SKIP only leaves the function it is in: the tests call
// SKIP_IF_MISSING(...) in their own body.
#define SKIP_IF_MISSING(why_expr)                          \
  do {                                                      \
    if (const std::string why_ = (why_expr); !why_.empty()) \
      GTEST_SKIP() << why_;                                 \
  } while (0)

std::string missing_mpirun() {
  if (!kHaveMpi) return "this build has no MPI (libopenmpi-dev)";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) return "no mpirun (openmpi-bin)";
  return "";
}

TEST(CommMpi, EveryCollectiveDtypeOpAndSizeIsRight) {
  SKIP_IF_MISSING(missing_mpirun());
  for (int ranks : {2, 3}) {
    const Job j = mpirun(ranks, "collectives");
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_NE(j.output.find("backend mpi"), std::string::npos) << j.output;
  }
}

TEST(CommMpi, SplitGroupsRanksByColorAndKey) {
  SKIP_IF_MISSING(missing_mpirun());
  const Job j = mpirun(4, "split", "TIERTRAIN_COMM_TIMEOUT=60");
  EXPECT_EQ(j.code, 0) << j.output;
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(j.output.find("rank " + std::to_string(r) + ": split right"), std::string::npos) << j.output;
}

TEST(CommMpi, PointToPointMessagesArriveWholeInOrderAndByTag) {
  SKIP_IF_MISSING(missing_mpirun());
  for (int ranks : {2, 3}) {
    const Job j = mpirun(ranks, "p2p", "TIERTRAIN_COMM_TIMEOUT=60");
    EXPECT_EQ(j.code, 0) << j.output;
    for (int r = 0; r < ranks; ++r)
      EXPECT_HAS(j.output, "rank " + std::to_string(r) + ": point-to-point right (backend mpi)");
  }
}

TEST(CommMpi, PointToPointDeadlineIsNamed) {
  SKIP_IF_MISSING(missing_mpirun());
  const Job j = mpirun(2, "p2p_errors", "TIERTRAIN_COMM_TIMEOUT=2");
  // The rank that gave up ends the job with MPI_Abort at exit (Note [mpi calls]): its message is what counts.
  EXPECT_HAS(j.output, "receive at rank 1 from rank 0 (tag 9) (mpi): not done within 2.0 s");
}

TEST(CommMpi, MismatchesAndMisuseAreErrorsOnEveryRank) {
  SKIP_IF_MISSING(missing_mpirun());
  Job j = mpirun(3, "mismatch", "TIERTRAIN_COMM_TIMEOUT=30");
  EXPECT_EQ(j.code, 0) << j.output;
  for (const char* what : {"inplace", "root"}) {
    j = mpirun(3, "misuse", std::string("TT_MISUSE=") + what + " TIERTRAIN_COMM_TIMEOUT=30");
    EXPECT_EQ(j.code, 0) << j.output;
  }
}

// shm under mpirun: MPI gives the ranks and carries the job id.
TEST(CommMpi, ShmBootstrappedByMpirun) {
  SKIP_IF_MISSING(missing_mpirun());
  const Job j = mpirun(3, "collectives", "TIERTRAIN_COMM_BACKEND=shm TIERTRAIN_COMM_BUFFER=262144");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("backend shm"), std::string::npos) << j.output;
}

// Issue 25: with a rank stopped, the other reports its deadline and the whole job ends (it used to hang in
// MPI_Finalize for ever).
TEST(CommMpi, AStoppedRankEndsTheJobAtTheDeadline) {
  SKIP_IF_MISSING(missing_mpirun());
  const auto t0 = std::chrono::steady_clock::now();
  const Job j = shell("timeout 60 mpirun --allow-run-as-root --oversubscribe -n 2 env TT_COMM_SCENARIO=stopped_rank "
                      "TIERTRAIN_COMM_BACKEND=mpi TIERTRAIN_COMM_TIMEOUT=2 " + self_path);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << "the job did not end: " << j.output;
  EXPECT_LT(secs, 50) << j.output;
  EXPECT_NE(j.output.find("not complete within 2.0 s"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("aborting the MPI job"), std::string::npos) << j.output;
}

TEST(CommMpi, NonBlockingCalls) {
  SKIP_IF_MISSING(missing_mpirun());
  const Job j = mpirun(2, "nonblocking", "TIERTRAIN_COMM_TIMEOUT=30");
  EXPECT_EQ(j.code, 0) << j.output;
}

// The nccl backend, on the GPUs of this machine (1 rank on one GPU, 2 on two), with managed buffers so that the
// scenarios above check the results on the host.
int cuda_devices() {
#ifdef TIERTRAIN_HAVE_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
#else
  return 0;
#endif
}

std::string missing_gpus(int need) {
  if (!comm::have_nccl()) return "this build has no nccl backend (CUDA and NCCL at build time)";
  if (cuda_devices() < need)
    return "needs " + std::to_string(need) + " GPU(s); this machine has " + std::to_string(cuda_devices());
  return "";
}

const char* kNccl = "TIERTRAIN_COMM_BACKEND=nccl TT_COMM_MANAGED=1 NCCL_NVLS_ENABLE=0";

TEST(CommNccl, EveryCollectiveDtypeOpAndSizeIsRight) {
  SKIP_IF_MISSING(missing_gpus(1));
  for (int ranks : {1, 2}) {
    if (cuda_devices() < ranks) continue;
    const Job j = launch(ranks, "collectives", kNccl);
    EXPECT_EQ(j.code, 0) << j.output;
    EXPECT_NE(j.output.find("backend nccl"), std::string::npos) << j.output;
  }
}

// Note [nccl backend] split and Note [nccl point-to-point]: the split scenario on GPU buffers, the point-to-point one
// on host buffers (the host communicator's semantics whole), and messages between GPU buffers (staged).
TEST(CommNccl, SplitAndPointToPoint) {
  SKIP_IF_MISSING(missing_gpus(1));
  for (int ranks : {1, 2}) {
    if (cuda_devices() < ranks) continue;
    for (const char* scenario : {"split", "p2p", "gpu_p2p"}) {
      SCOPED_TRACE(std::string(scenario) + " on " + std::to_string(ranks) + " rank(s)");
      const Job j = launch(ranks, scenario, kNccl);
      EXPECT_EQ(j.code, 0) << j.output;
      EXPECT_NE(j.output.find("nccl"), std::string::npos) << j.output;
    }
  }
}

TEST(CommNccl, StreamOrderedAndNonBlockingCalls) {
  SKIP_IF_MISSING(missing_gpus(2));
  const Job j = launch(2, "nccl_stream", kNccl);
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("rank 0: stream-ordered calls right"), std::string::npos) << j.output;
}

TEST(CommNccl, MismatchesMisuseHostBuffersAndLateRanksAreErrorsOnEveryRank) {
  SKIP_IF_MISSING(missing_gpus(2));
  const std::string env = std::string(kNccl) + " TIERTRAIN_COMM_TIMEOUT=30";
  Job j = launch(2, "mismatch", env);
  EXPECT_EQ(j.code, 0) << j.output;
  for (const char* what : {"inplace", "root", "host"}) {
    j = launch(2, "misuse", env + " TT_MISUSE=" + what);
    EXPECT_EQ(j.code, 0) << what << "\n" << j.output;
  }
  j = launch(2, "never_arrives", std::string(kNccl) + " TIERTRAIN_COMM_TIMEOUT=1");
  EXPECT_EQ(j.code, 0) << j.output;
  // Note [nccl init deadline]: a rank that stops after the id exchange does not hang the others in NCCL's init.
  j = launch(2, "nccl_init_late", std::string(kNccl) + " TIERTRAIN_COMM_TIMEOUT=3 TT_RANK1_ENV=TIERTRAIN_TEST_NCCL_INIT_DELAY_S=8");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_LT(j.seconds, 15) << j.output;
}

TEST(CommNccl, BenchmarkChecksEveryCollectiveOnDeviceBuffers) {
  SKIP_IF_MISSING(missing_gpus(1));
  const int ranks = std::min(cuda_devices(), 2);
  for (const char* c : {"allreduce", "broadcast", "reduce", "allgather", "gather", "scatter", "reduce_scatter",
                        "alltoall"}) {
    for (const char* mode : {"", " --stream"}) {
      SCOPED_TRACE(std::string(c) + mode);
      // --no-tag-output: the table's lines as comm-bench prints them (launch tags each with "[rank R] " by default).
      const Job j = shell("env NCCL_NVLS_ENABLE=0 " + std::string(TT_BINARY) + " launch --no-tag-output -n " +
                          std::to_string(ranks) + " -- " + TT_BINARY + " comm-bench --backend nccl -C " + c +
                          " -d bf16 -b 64 -e 4M -f 64 -n 3 -w 1 -c 2" + mode);
      ASSERT_EQ(j.code, 0) << j.output;
      EXPECT_NE(j.output.find("(nccl)"), std::string::npos) << j.output;
      // Every row checked and right: the #wrong columns are 0.
      size_t rows = 0;
      for (size_t pos = 0; (pos = j.output.find("\n", pos)) != std::string::npos; ++pos) {
        const size_t end = j.output.find('\n', pos + 1);
        const std::string line = j.output.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
        if (line.empty() || line[0] == '#' || line.find("bfloat16") == std::string::npos) continue;
        ++rows;
        char size[32], cnt[32], ty[32], op[32];
        int root = 0;
        double t0, a0, b0, t1, a1, b1;
        long long w0 = -1, w1 = -1;
        ASSERT_EQ(std::sscanf(line.c_str(), "%31s %31s %31s %31s %d %lf %lf %lf %lld %lf %lf %lf %lld", size, cnt, ty,
                              op, &root, &t0, &a0, &b0, &w0, &t1, &a1, &b1, &w1),
                  13)
            << line;
        EXPECT_EQ(w0, 0) << line;
        EXPECT_EQ(w1, 0) << line;
      }
      EXPECT_EQ(rows, 3u) << j.output;  // 64 B, 4 KiB, 256 KiB
    }
  }
}

TEST(CommNccl, RefusedWithAClearErrorWhereThereIsNoNccl) {
  if (comm::have_nccl() && cuda_devices() > 0) GTEST_SKIP() << "this machine has GPUs and NCCL";
  const Job j = shell("env TIERTRAIN_COMM_BACKEND=nccl " + std::string(TT_BINARY) + " comm-bench -e 64");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_TRUE(j.output.find("sees no CUDA device") != std::string::npos ||
              j.output.find("nccl backend is not in this build") != std::string::npos)
      << j.output;
}

// The half-precision conversions the reductions use, at the edges.
TEST(CommHalf, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(comm::float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(comm::float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(comm::float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(comm::float_to_f16(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(comm::float_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // a tie: to even
  EXPECT_EQ(comm::float_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // a tie: to even (up)
  EXPECT_EQ(comm::float_to_f16(5.960464477539063e-08f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(comm::float_to_f16(0.0f), 0x0000);
  EXPECT_TRUE(std::isnan(comm::f16_to_float(comm::float_to_f16(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive half survives the round trip
    ASSERT_EQ(comm::float_to_f16(comm::f16_to_float(static_cast<uint16_t>(h))), h) << h;
}

}  // namespace
}  // namespace tt

int main(int argc, char** argv) {
  if (const char* s = std::getenv("TT_COMM_SCENARIO")) return tt::rank_main(s);
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  tt::self_path = n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv[0];
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
