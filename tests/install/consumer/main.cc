// Each rank adds rank + 1; every rank must see 1 + 2 + ... + size.
#include <cstdio>

#include "comm/comm.h"

int main() {
  auto world = tt::comm::world();
  if (!world.is_ok()) {
    std::fprintf(stderr, "allreduce_sum: %s\n", world.status().message().c_str());
    return 1;
  }
  tt::comm::Communicator& comm = *world.value();
  double x = comm.rank() + 1;
  const tt::Status s = comm.allreduce(tt::comm::kInPlace, &x, 1, tt::comm::DType::kF64, tt::comm::Op::kSum);
  if (!s.is_ok()) {
    std::fprintf(stderr, "allreduce_sum: %s\n", s.message().c_str());
    return 1;
  }
  const double want = comm.size() * (comm.size() + 1) / 2.0;
  std::printf("rank %d of %d: sum %g\n", comm.rank(), comm.size(), x);
  return x == want ? 0 : 1;
}
