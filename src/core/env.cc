#include "core/env.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/config.h"
#include "core/log.h"

extern char** environ;

namespace tt::env {

namespace {

// Every environment variable tiertrain reads. Keep each group sorted by name; the help says what the variable does
// and where the code that reads it explains more.
constexpr Param kParams[] = {
    // --- The program ---
    {"TIERTRAIN_CONFIG", "none", "a JSON config file, as --config (a flag wins over it)"},
    {"TIERTRAIN_DEVICE", "LOCAL_RANK modulo the devices this process sees, else 0",
     "the CUDA device of this process (core/device_env.h)"},
    {"TIERTRAIN_F32_ATTENTION_RANGES", "4", "for measurements: the f32 attention's key ranges a block, 1 to 8 "
     "(backend/cuda/attention_gemm.cu)", Kind::kTestHook, "TT_F32_ATTENTION_RANGES"},
    {"TIERTRAIN_OPENBLAS_CORE", "tiertrain corrects OpenBLAS's kernel choice",
     "keep: keep OpenBLAS's own choice of kernels (Note [OpenBLAS core] in backend/cpu/openblas_core.h)"},
    {"TIERTRAIN_OPENBLAS_CHOSE", "unset", "the kernels OpenBLAS chose, set by tiertrain when it re-executes itself "
     "with OPENBLAS_CORETYPE (Note [OpenBLAS core])", Kind::kInternal},
    // --- The communicator (comm/comm.h, comm/shm.h, comm/launch.h) ---
    {"TIERTRAIN_BIN", "the tiertrain next to the package, else on PATH",
     "the program the Python package's `tiertrain` command runs (python/tiertrain/__main__.py)"},
    {"TIERTRAIN_COMM_BACKEND", "auto", "the collectives' backend: auto, shm, mpi or nccl (comm/comm.h)"},
    {"TIERTRAIN_COMM_BUFFER", "8388608", "bytes of each of the two data areas of a rank's segment (comm/shm.h)"},
    {"TIERTRAIN_COMM_CMA_BYTES", "32768 at 2-3 ranks, 262144 from 4 (where the ranks may attach to each other)",
     "gather and scatter pieces (and at 2-3 ranks broadcasts below 1 MiB) of at least this many bytes are copied "
     "rank to rank in one copy; 0: never (comm/shm.h)"},
    {"TIERTRAIN_COMM_CMA_HUGE_BYTES", "see comm/shm.h", "single copies into huge pages from this many bytes a piece"},
    {"TIERTRAIN_COMM_P2P_CMA_BYTES", "32768", "point-to-point messages of at least this many bytes go in one copy "
     "from sender to receiver; 0: never (Note [point-to-point single copy])"},
    {"TIERTRAIN_COMM_P2P_SHARED_BYTES", "262144", "point-to-point single copies of at least this many bytes are "
     "made by receiver and sender together, in chunks; 0: never (Note [both sides copy])"},
    {"TIERTRAIN_COMM_CMA_EXCHANGE_BYTES", "32768 up to 8 ranks, 262144 from 9",
     "allgather and alltoall blocks of at least this many bytes go in one copy from each peer's buffer; 0: never "
     "(Note [single-copy exchanges])"},
    {"TIERTRAIN_COMM_CMA_ALLREDUCE_BYTES", "262144", "2-rank allreduces of at least this many bytes read the peer's "
     "half straight out of its buffer; 0: never (Note [two-rank single-copy allreduce])"},
    {"TIERTRAIN_COMM_HUGE_BYTES", "4194304", "comm.zeros() buffers of at least this many bytes on huge pages; 0: never"},
    {"TIERTRAIN_COMM_ID", "set by tiertrain launch", "the job's unique name, which its ranks meet under",
     Kind::kInternal},
    {"TIERTRAIN_COMM_INLINE", "by the world's size", "1: small rounds carry their data in the arrival lines; "
     "0 on any rank: off everywhere (Note [inline rounds])"},
    {"TIERTRAIN_COMM_MEMPOLICY", "auto", "where each rank's segment goes: auto, local, preferred:N, bind:N, "
     "interleave (comm/shm.h)"},
    {"TIERTRAIN_COMM_POOL", "auto", "bytes of each rank's pool of buffers its peers map; 0: no pool "
     "(Note [shared buffers])"},
    {"TIERTRAIN_COMM_PROFILE", "0", "1: every rank prints the seconds spent in each phase of its rounds when it closes"},
    {"TIERTRAIN_COMM_REDUCE_SPAN", "half an area", "a reduction's rounds take at most this many bytes over all ranks"},
    {"TIERTRAIN_COMM_ROOTED", "1", "0 on any rank: rooted collectives run full rounds everywhere "
     "(Note [rooted rounds])"},
    {"TIERTRAIN_COMM_STREAM_BYTES", "see comm/shm.h", "results of at least this many bytes are written with "
     "streaming stores; 0: never"},
    {"TIERTRAIN_COMM_THREAD_BYTES", "see comm/shm.h", "copies and reductions of at least this many bytes are shared "
     "out over a rank's threads"},
    {"TIERTRAIN_COMM_THREAD_PIN", "1 where the launcher bound the rank", "0: the helper threads are left to the "
     "scheduler (Note [crew])"},
    {"TIERTRAIN_COMM_THREAD_WAIT_US", "5000", "how long a helper thread stays awake after its last job"},
    {"TIERTRAIN_COMM_THREADS", "see comm/shm.h", "threads of a rank for its large copies and reductions, 1 to 8"},
    {"TIERTRAIN_COMM_TIMEOUT", "see comm/comm.h", "seconds any one wait for other ranks may take before the call "
     "fails, naming the ranks missing"},
    {"TIERTRAIN_COMM_TREE_RANKS", "see comm/shm.h", "rounds arrive through a two-level tree from this many ranks up; "
     "0: never (Note [arrival tree])"},
    {"TIERTRAIN_CPUS_BOUND", "unset", "1: the launcher bound each rank to its cores (set by tiertrain launch --bind)",
     Kind::kInternal},
    {"TIERTRAIN_HBW_NODES", "from the machine's memory tiers", "the high-bandwidth NUMA nodes, e.g. 4-7 "
     "(comm/topology.h)"},
    {"TIERTRAIN_PYTHON", "set by the Python package", "the interpreter `tiertrain launch -- python3` runs",
     Kind::kInternal},
    {"TIERTRAIN_RANK", "RANK, else 0", "this process's rank (set by tiertrain launch)", Kind::kInternal},
    {"TIERTRAIN_SHM_DIR", "/dev/shm", "the folder of the ranks' segments, for containers whose /dev/shm is small"},
    {"TIERTRAIN_WORLD_SIZE", "WORLD_SIZE, else 1", "the number of ranks (set by tiertrain launch)", Kind::kInternal},
    // --- Knobs the Python package reads itself (the program reads them as knobs, core/config.h) ---
    {"TIERTRAIN_DEBUG", "WARN", "log level: WARN, INFO or TRACE (the knob `debug`; core/log.h)"},
    {"TIERTRAIN_DEBUG_SUBSYS", "ALL", "the subsystems logged (the knob `debug_subsys`; core/log.h)"},
    // --- Test hooks: no effect unless set ---
    {"TIERTRAIN_BENCH_TRACE", "unset", "comm-bench prints each timed call (comm/bench.cc)", Kind::kTestHook,
     "TT_BENCH_TRACE"},
    {"TIERTRAIN_COMM_JITTER_US", "0", "a rank- and round-dependent delay before each write of the shm rounds, so "
     "tests see ranks late", Kind::kTestHook},
    {"TIERTRAIN_TEST_NCCL_INIT_DELAY_S", "0", "seconds rank 1 sleeps before NCCL's init, so tests see a late rank",
     Kind::kTestHook, "TT_TEST_NCCL_INIT_DELAY_S"},
    // --- Other programs' and the system's ---
    {"COLUMNS", "100", "--print-config's width when stdout is not a terminal", Kind::kOutside},
    {"HOME", "", "the machine profiles' cache is ~/.cache/tiertrain without XDG_CACHE_HOME", Kind::kOutside},
    {"LOCAL_RANK", "", "a launcher's rank on this node (the device of the rank)", Kind::kOutside},
    {"MEMKIND_HBW_NODES", "", "memkind's high-bandwidth nodes, read after TIERTRAIN_HBW_NODES", Kind::kOutside},
    {"MPI_LOCALNRANKS", "", "MPICH/Hydra: this process was started by mpirun", Kind::kOutside},
    {"MPI_LOCALRANKID", "", "MPICH/Hydra: the rank on this node", Kind::kOutside},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "", "Open MPI: the rank on this node", Kind::kOutside},
    {"OMPI_COMM_WORLD_SIZE", "", "Open MPI: the number of ranks (started by mpirun)", Kind::kOutside},
    {"OPENBLAS_CORETYPE", "", "OpenBLAS's kernels; set, tiertrain leaves OpenBLAS's choice alone", Kind::kOutside},
    {"PMI_SIZE", "", "a PMI launcher's number of ranks", Kind::kOutside},
    {"PMIX_RANK", "", "a PMIx launcher's rank", Kind::kOutside},
    {"RANK", "", "the rank, as torchrun and tiertrain launch set it", Kind::kOutside},
    {"SLURM_LOCALID", "", "Slurm: the rank on this node", Kind::kOutside},
    {"SLURM_NTASKS", "", "Slurm: the number of ranks", Kind::kOutside},
    {"WORLD_SIZE", "", "the number of ranks, as torchrun and tiertrain launch set it", Kind::kOutside},
    {"XDG_CACHE_HOME", "~/.cache", "the machine profiles' cache is $XDG_CACHE_HOME/tiertrain", Kind::kOutside},
};
constexpr size_t kCount = sizeof(kParams) / sizeof(kParams[0]);

// One flag a variable: logged the first time it is read set.
std::atomic<bool> g_logged[kCount];

size_t index_of(std::string_view name) {
  for (size_t i = 0; i < kCount; ++i)
    if (kParams[i].name == name) return i;
  std::fprintf(stderr, "tiertrain: internal error: the environment variable %.*s is read but not declared in "
               "core/env.cc\n", static_cast<int>(name.size()), name.data());
  std::abort();
}

const char* raw(std::string_view name) {
  const std::string n(name);
  const char* v = std::getenv(n.c_str());
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSetting: return "setting";
    case Kind::kInternal: return "internal";
    case Kind::kTestHook: return "test hook";
    case Kind::kOutside: return "outside";
  }
  return "?";
}

std::span<const Param> params() { return {kParams, kCount}; }

const Param* find(std::string_view name) {
  for (const Param& p : kParams)
    if (p.name == name) return &p;
  return nullptr;
}

const char* get(std::string_view name) {
  const size_t i = index_of(name);
  const Param& p = kParams[i];
  const char* v = raw(p.name);
  bool old = false;
  if (v == nullptr && !p.old_name.empty()) {
    v = raw(p.old_name);
    old = v != nullptr;
  }
  if (v != nullptr && !g_logged[i].exchange(true)) {
    if (old)
      TT_LOG(WARN, ALL, "%.*s is the old name of %.*s: %s used (rename it; the old name goes in a later release)",
             static_cast<int>(p.old_name.size()), p.old_name.data(), static_cast<int>(p.name.size()), p.name.data(),
             v);
    else
      TT_LOG(INFO, ALL, "environment: %.*s=%s", static_cast<int>(p.name.size()), p.name.data(), v);
  }
  return v;
}

std::string get_or(std::string_view name, std::string_view fallback) {
  const char* v = get(name);
  return v != nullptr ? std::string(v) : std::string(fallback);
}

bool is_set(std::string_view name) { return get(name) != nullptr; }

char** environment() { return environ; }

std::string describe(int width) {
  std::string out = "environment variables (core/env.cc; the knobs' TIERTRAIN_<KNOB> variables are above):\n";
  for (const Param& p : kParams) {
    const char* v = raw(p.name);
    if (v == nullptr && !p.old_name.empty()) v = raw(p.old_name);
    std::string line = "  " + std::string(p.name) + " = " + (v != nullptr ? std::string(v) : "unset") + "  [" +
                       kind_name(p.kind) + "; default: " + std::string(p.default_text.empty() ? "unset" : p.default_text) +
                       "]";
    out += line + "\n";
    std::string help(p.help);
    if (!p.old_name.empty()) help += " (old name: " + std::string(p.old_name) + ")";
    out += wrap_text(help, "      ", width);
  }
  return out;
}

}  // namespace tt::env
