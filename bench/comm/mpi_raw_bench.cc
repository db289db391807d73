// bench/mpi_raw_bench: Open MPI's collectives called from C++, timed as `tiertrain comm-bench` and
// bench/comm/mpi4py_bench.py time them (comm::warm_up and comm::timed_calls: warm-up calls, then rounds of more until
// --warmup-ms have passed, as many on every rank; a barrier; at least -n calls and --min-ms of them; each rank's mean
// time per call, averaged over the ranks), with nothing between the clock and MPI: the reference for the shm
// backend's latency, which mpi4py's per-call cost would flatter. f32, sum, root 0; out of place and in place rows
// like mpi4py_bench.py.
//   mpirun -n 8 --bind-to core build/gpu/bench/mpi_raw_bench -C broadcast -b 8 -e 64 -f 2 -n 2000 -w 200
//     --warmup-ms 100 --first-warmup-ms 1000 --min-ms 20 --json F
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/bench.h"
#include "size_arg.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// comm::warm_up's agreement over MPI: the largest value on any rank.
tt::Status max_over_ranks(double* x) {
  double m = 0;
  MPI_Allreduce(x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *x = m;
  return tt::Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::string coll = "allreduce", json;
  size_t min_b = 8, max_b = 64 << 20;
  double factor = 2, warmup_ms = 0, first_warmup_ms = 0, min_ms = 0;
  int iters = 20, warmup = 5;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      if (me == 0) std::fprintf(stderr, "mpi_raw_bench: %s needs a value\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "-C") coll = v;
    else if (a == "-b") min_b = parse_size(v);
    else if (a == "-e") max_b = parse_size(v);
    else if (a == "-f") factor = std::atof(v.c_str());
    else if (a == "-n") iters = std::atoi(v.c_str());
    else if (a == "-w") warmup = std::atoi(v.c_str());
    else if (a == "--warmup-ms") warmup_ms = std::atof(v.c_str());
    else if (a == "--first-warmup-ms") first_warmup_ms = std::atof(v.c_str());
    else if (a == "--min-ms") min_ms = std::atof(v.c_str());
    else if (a == "--json") json = v;
    else {
      if (me == 0) std::fprintf(stderr, "mpi_raw_bench: unknown flag %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  const std::vector<std::string> known = {"allreduce", "broadcast", "reduce", "gather", "scatter", "allgather"};
  if (std::find(known.begin(), known.end(), coll) == known.end() || factor <= 1) {
    if (me == 0) std::fprintf(stderr, "mpi_raw_bench: -C one of allreduce broadcast reduce gather scatter allgather, -f > 1\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool split = coll == "gather" || coll == "scatter" || coll == "allgather";
  // nccl-tests' bus-bandwidth factors (comm_bench_common.bus_factor).
  const double bus = coll == "allreduce" ? 2.0 * (n - 1) / n : (coll == "broadcast" || coll == "reduce") ? 1.0
                                                                                                     : (n - 1.0) / n;
  if (me == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    std::printf("# %s from C++: %s, float, sum, %d ranks\n", v.substr(0, v.find('\n')).c_str(), coll.c_str(), n);
    std::printf("#%11s %13s %9s %8s %8s %9s %8s %8s\n", "size", "count", "time", "algbw", "busbw", "time", "algbw",
                "busbw");
  }
  nlohmann::json rows = nlohmann::json::array();
  bool first = true;
  for (double size = static_cast<double>(min_b); size <= static_cast<double>(max_b) * 1.0000001; size *= factor) {
    size_t count = static_cast<size_t>(size) / 4;
    if (split) count = count / static_cast<size_t>(n) * static_cast<size_t>(n);
    if (count == 0) continue;
    const size_t per = count / static_cast<size_t>(n);
    const int c = static_cast<int>(count), p = static_cast<int>(per);
    double out[2][3];
    for (int form = 0; form < 2; ++form) {
      const bool in_place = form == 1;
      std::vector<float> send(split && coll != "scatter" ? per : count, 1.0f);
      std::vector<float> recv(coll == "scatter" ? per : count, 0.0f);
      float *s = send.data(), *r = recv.data();
      std::function<void()> call;
      if (coll == "allreduce") {
        call = [=] { MPI_Allreduce(in_place ? MPI_IN_PLACE : s, in_place ? s : r, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      } else if (coll == "broadcast") {
        call = [=] { MPI_Bcast(s, c, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      } else if (coll == "reduce") {
        const bool ip = in_place && me == 0;
        call = [=] { MPI_Reduce(ip ? MPI_IN_PLACE : s, ip ? s : r, c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); };
      } else if (coll == "gather") {
        const bool ip = in_place && me == 0;
        call = [=] { MPI_Gather(ip ? MPI_IN_PLACE : s, p, MPI_FLOAT, r, p, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      } else if (coll == "scatter") {
        const bool ip = in_place && me == 0;
        call = [=] { MPI_Scatter(s, p, MPI_FLOAT, ip ? MPI_IN_PLACE : r, p, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      } else {
        call = [=] { MPI_Allgather(in_place ? MPI_IN_PLACE : s, p, MPI_FLOAT, r, p, MPI_FLOAT, MPI_COMM_WORLD); };
      }
      // comm-bench's warm-up and count of timed calls (MPI's calls are done when they return: nothing to drain; the
      // agreement cannot fail).
      const double warm_ms = first && first_warmup_ms > 0 ? first_warmup_ms : warmup_ms;
      first = false;
      const double pace = tt::comm::warm_up([&] { call(); return tt::Status::ok(); }, [] { return tt::Status::ok(); },
                                            warmup, warm_ms, max_over_ranks).value().pace;
      const int64_t k = tt::comm::timed_calls(iters, min_ms, pace, max_over_ranks).value();
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      for (int64_t i = 0; i < k; ++i) call();
      double mine = (now() - t0) / static_cast<double>(k), sum = 0;
      MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      const double t = sum / n, alg = static_cast<double>(count) * 4 / t / 1e9;
      out[form][0] = t;
      out[form][1] = alg;
      out[form][2] = alg * bus;
      rows.push_back({{"collective", coll}, {"ranks", n}, {"backend", "openmpi-c++"}, {"size", count * 4},
                      {"count", count}, {"in_place", in_place}, {"time_us", t * 1e6}, {"algbw_gbs", alg},
                      {"busbw_gbs", alg * bus}, {"iters", k}});
    }
    if (me == 0) {
      std::printf("%12zu %13zu %9.2f %8.2f %8.2f %9.2f %8.2f %8.2f\n", count * 4, count, out[0][0] * 1e6, out[0][1],
                  out[0][2], out[1][0] * 1e6, out[1][1], out[1][2]);
      std::fflush(stdout);
    }
  }
  if (me == 0 && !json.empty()) std::ofstream(json) << rows.dump(1) << "\n";
  MPI_Finalize();
  return 0;
}
