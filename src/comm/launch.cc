#include "comm/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/units.h"

namespace tt::comm {
namespace {

std::string job_id() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "j%d-%08x", static_cast<int>(getpid()), rd());
  return buf;
}

std::string shm_dir() {
  const char* dir_env = std::getenv("TIERTRAIN_SHM_DIR");
  return dir_env && *dir_env ? dir_env : "/dev/shm";
}

// Segments a rank that died early may have left (their names are removed once every rank has mapped them).
void remove_leftovers(const std::string& id) {
  const std::string dir = shm_dir();
  const std::string prefix = "tiertrain-" + id + "-";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ::unlink((dir + "/" + e->d_name).c_str());
  closedir(d);
}

// Every file some process (of those whose /proc entries we may read) maps or holds open.
std::set<std::string> files_in_use() {
  std::set<std::string> used;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return used;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string base = std::string("/proc/") + e->d_name;
    std::ifstream maps(base + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      const size_t slash = line.find('/');
      if (slash == std::string::npos) continue;
      std::string path = line.substr(slash);
      if (path.ends_with(" (deleted)")) path.resize(path.size() - 10);
      used.insert(path);
    }
    DIR* fds = opendir((base + "/fd").c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      char target[4096];
      const ssize_t n = readlink((base + "/fd/" + f->d_name).c_str(), target, sizeof(target) - 1);
      if (n > 0) used.insert(std::string(target, static_cast<size_t>(n)));
    }
    closedir(fds);
  }
  closedir(proc);
  return used;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

RemovedFiles remove_stale_segments(double min_age_seconds) {
  RemovedFiles out;
  const std::string dir = shm_dir();
  char real[4096];
  const std::string where = realpath(dir.c_str(), real) ? std::string(real) : dir;
  DIR* d = opendir(where.c_str());
  if (d == nullptr) return out;
  const time_t now = time(nullptr);
  std::vector<std::pair<std::string, int64_t>> old;  // path, bytes
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "tiertrain-", 10) != 0) continue;
    const std::string path = where + "/" + e->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (difftime(now, st.st_mtime) < min_age_seconds) continue;
    old.emplace_back(path, static_cast<int64_t>(st.st_blocks) * 512);
  }
  closedir(d);
  if (old.empty()) return out;
  const std::set<std::string> used = files_in_use();
  for (const auto& [path, bytes] : old) {
    if (used.count(path)) continue;
    if (::unlink(path.c_str()) == 0) {
      ++out.files;
      out.bytes += bytes;
    }
  }
  return out;
}

Result<int> launch(const LaunchOptions& o) {
  TT_RETURN_IF(o.ranks < 1 || o.ranks > 4096, kInvalidArgument, "launch: -n %d (1..4096)", o.ranks);
  TT_RETURN_IF(o.command.empty(), kInvalidArgument, "launch: no command (tiertrain launch -n N -- CMD ...)");
  if (const RemovedFiles gone = remove_stale_segments(); gone.files > 0)
    std::fprintf(stderr, "tiertrain launch: removed %d shared-memory segment%s (%s) that killed jobs left in %s\n",
                 gone.files, gone.files == 1 ? "" : "s", format_bytes(gone.bytes).c_str(), shm_dir().c_str());
  const std::string id = job_id();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if ((o.bind_cores || o.bind_share) && sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);

  // The signals we handle arrive through sigtimedwait, blocked from now on; the ranks get the mask they had.
  // SIGCHLD must not be ignored (an inherited SIG_IGN would let the kernel reap the ranks behind our back).
  struct sigaction dfl {}, old_chld {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, &old_chld);
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGQUIT}) sigaddset(&handled, s);
  const bool interactive = isatty(0) != 0;
  const pid_t launcher_pid = getpid();
  sigprocmask(SIG_BLOCK, &handled, &old);

  std::vector<char*> argv;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<pid_t> pids(static_cast<size_t>(o.ranks), -1);
  std::vector<int> status(static_cast<size_t>(o.ranks), -1);
  int running = 0;
  for (int r = 0; r < o.ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      const int e = errno;
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      while (running-- > 0) wait(nullptr);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      return make_status(StatusCode::kInternal, "launch: fork for rank %d: %s", r, std::strerror(e));
    }
    if (pid == 0) {
      // Its own process group, so that stopping the rank stops what it started too (a shell, a Python wrapper);
      // except rank 0 when stdin is a terminal: it stays in the foreground group and can read from it (the others
      // read /dev/null, as background groups could not).
      if (!(r == 0 && interactive)) setpgid(0, 0);
      if (r != 0) {
        const int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
          dup2(devnull, 0);
          ::close(devnull);
        }
      }
      // The rank ends with the launcher, even if the launcher is killed outright.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      sigaction(SIGCHLD, &old_chld, nullptr);
      const std::string rank = std::to_string(r), world = std::to_string(o.ranks);
      setenv("RANK", rank.c_str(), 1);
      setenv("LOCAL_RANK", rank.c_str(), 1);
      setenv("WORLD_SIZE", world.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      setenv("TIERTRAIN_RANK", rank.c_str(), 1);
      setenv("TIERTRAIN_WORLD_SIZE", world.c_str(), 1);
      setenv("TIERTRAIN_COMM_ID", id.c_str(), 1);
      if (!cpus.empty()) {
        const size_t k = o.bind_share ? std::max<size_t>(1, cpus.size() / static_cast<size_t>(o.ranks)) : 1;
        cpu_set_t mine;
        CPU_ZERO(&mine);
        for (size_t j = 0; j < k; ++j) CPU_SET(cpus[(static_cast<size_t>(r) * k + j) % cpus.size()], &mine);
        sched_setaffinity(0, sizeof(mine), &mine);
        setenv("TIERTRAIN_CPUS_BOUND", "1", 1);  // Note [crew]: CPUs of its own, so its helpers may be pinned there
        // Note [crew]: the rank's threads use its share, unless the user chose their number.
        if (o.bind_share) setenv("TIERTRAIN_COMM_THREADS", std::to_string(std::min<size_t>(k, 8)).c_str(), 0);
      }
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "tiertrain launch: rank %d: cannot run '%s': %s\n", r, argv[0], std::strerror(errno));
      _exit(127);
    }
    if (!(r == 0 && interactive)) setpgid(pid, pid);  // also here: whichever of parent and child runs first
    pids[static_cast<size_t>(r)] = pid;
    ++running;
  }

  int failed = -1;  // the first rank that failed
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  auto signal_all = [&](int sig) {
    for (int r = 0; r < o.ranks; ++r)
      if (status[static_cast<size_t>(r)] < 0) {
        const pid_t pid = pids[static_cast<size_t>(r)];
        // Its group (what it started too), or the rank alone when it has none of its own.
        if (getpgid(pid) != pid || kill(-pid, sig) != 0) kill(pid, sig);
      }
  };
  while (running > 0) {
    // Reap whatever has ended.
    for (;;) {
      int st = 0;
      const pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid < 0 && errno == ECHILD) {
        // Nothing left to wait for although we count ranks running: they were reaped elsewhere. Their exit status
        // is lost; count them as failed.
        for (int r = 0; r < o.ranks; ++r)
          if (status[static_cast<size_t>(r)] < 0) {
            status[static_cast<size_t>(r)] = 255 << 8;
            if (failed < 0) failed = r;
          }
        running = 0;
        break;
      }
      if (pid <= 0) break;
      for (int r = 0; r < o.ranks; ++r) {
        if (pids[static_cast<size_t>(r)] != pid) continue;
        status[static_cast<size_t>(r)] = st;
        --running;
        const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && failed < 0 && !stopping) {
          failed = r;
          std::fprintf(stderr, "tiertrain launch: rank %d (pid %d) %s; stopping the other %d rank(s)\n", r,
                       static_cast<int>(pid), describe(st).c_str(), running);
          stopping = true;
          signal_all(SIGTERM);
          kill_at = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(o.grace_seconds * 1000.0));
        }
      }
    }
    if (running == 0) break;
    if (stopping && std::chrono::steady_clock::now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = std::chrono::steady_clock::now() + std::chrono::hours(24);
    }
    timespec wait_for{0, 100 * 1000 * 1000};
    siginfo_t info{};
    const int sig = sigtimedwait(&handled, &info, &wait_for);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
      if (!stopping) {
        std::fprintf(stderr, "tiertrain launch: %s: passing it to the %d rank(s)\n", strsignal(sig), running);
        stopping = true;
        signal_all(sig);
        kill_at = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long long>(o.grace_seconds * 1000.0));
      } else {
        signal_all(SIGKILL);  // a second signal: no more waiting
      }
    }
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  remove_leftovers(id);
  if (failed >= 0) {
    const int st = status[static_cast<size_t>(failed)];
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
  // Stopped by a signal to the launcher, or every rank succeeded.
  for (int r = 0; r < o.ranks; ++r) {
    const int st = status[static_cast<size_t>(r)];
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      std::fprintf(stderr, "tiertrain launch: rank %d %s\n", r, describe(st).c_str());
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
  }
  return 0;
}

}  // namespace tt::comm
