#include "comm/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/env.h"
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
  const char* dir_env = env::get("TIERTRAIN_SHM_DIR");
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

namespace {

// Note [rank output]
// With tag_output or a log_dir, every rank's stdout and stderr are pipes the launcher reads (poll, 100 ms at most
// between its checks of the ranks). Bytes go to the log files as they come; for the terminal they are cut into lines,
// and each whole line is written with one write(2) and the prefix "[rank R] ", so that no two ranks' lines mix (a
// rank's last line without a newline gets one at its end). The ranks see pipes, not a terminal, so stdio buffers
// their output in blocks: the launcher sets PYTHONUNBUFFERED=1 for them (unless set), tiertrain flushes each line it
// logs, and other C programs should flush (or run under `stdbuf -oL`).
class RankOutput {
 public:
  struct Stream {
    int fd = -1;     // read end of the rank's pipe; -1 once it reached EOF
    int rank = 0;
    int to = 1;      // the launcher's stdout (1) or stderr (2)
    int file = -1;   // log file, or -1
    std::string partial;
  };

  RankOutput(bool tag) : tag_(tag) {}
  ~RankOutput() {
    for (Stream& s : streams_) {
      if (s.fd >= 0) ::close(s.fd);
      if (s.file >= 0) ::close(s.file);
    }
  }
  void add(Stream s) { streams_.push_back(std::move(s)); }
  bool open() const {
    for (const Stream& s : streams_)
      if (s.fd >= 0) return true;
    return false;
  }

  // Waits up to `ms` for output and forwards what there is.
  void pump(int ms) {
    std::vector<pollfd> fds;
    std::vector<Stream*> of;
    for (Stream& s : streams_)
      if (s.fd >= 0) {
        fds.push_back(pollfd{s.fd, POLLIN, 0});
        of.push_back(&s);
      }
    if (fds.empty()) {
      if (ms > 0) ::poll(nullptr, 0, ms);
      return;
    }
    if (::poll(fds.data(), fds.size(), ms) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_some(*of[i]);
  }

 private:
  static void write_all(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;  // a closed terminal or pipe: the output is lost, the job goes on
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void read_some(Stream& s) {
    char buf[65536];
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {  // EOF (or an error: the same for us)
      if (!s.partial.empty()) emit(s, s.partial + "\n");
      s.partial.clear();
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    if (s.file >= 0) write_all(s.file, buf, static_cast<size_t>(n));
    if (!tag_) {
      write_all(s.to, buf, static_cast<size_t>(n));
      return;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    const size_t last = s.partial.rfind('\n');
    if (last == std::string::npos) return;
    emit(s, s.partial.substr(0, last + 1));
    s.partial.erase(0, last + 1);
  }
  // Whole lines, prefixed, in one write.
  void emit(const Stream& s, const std::string& lines) {
    if (!tag_) {
      write_all(s.to, lines.data(), lines.size());
      return;
    }
    const std::string prefix = "[rank " + std::to_string(s.rank) + "] ";
    std::string out;
    out.reserve(lines.size() + prefix.size() * 4);
    size_t a = 0;
    while (a < lines.size()) {
      const size_t b = lines.find('\n', a);
      out += prefix;
      out.append(lines, a, b - a + 1);
      a = b + 1;
    }
    write_all(s.to, out.data(), out.size());
  }

  bool tag_;
  std::vector<Stream> streams_;
};

}  // namespace

Result<int> launch(const LaunchOptions& o) {
  TT_RETURN_IF(o.ranks < 1 || o.ranks > 4096, kInvalidArgument, "launch: -n %d (1..4096)", o.ranks);
  TT_RETURN_IF(o.command.empty(), kInvalidArgument, "launch: no command (tiertrain launch -n N -- CMD ...)");
  if (const RemovedFiles gone = remove_stale_segments(); gone.files > 0)
    std::fprintf(stderr, "tiertrain launch: removed %d shared-memory segment%s (%s) that killed jobs left in %s\n",
                 gone.files, gone.files == 1 ? "" : "s", format_bytes(gone.bytes).c_str(), shm_dir().c_str());
  // The ranks get a name of the launcher's; one set beforehand is replaced, and refused where it could not be a name
  // (issue 47: the ranks would refuse it too).
  if (const char* mine = env::get("TIERTRAIN_COMM_ID"); mine != nullptr && *mine != '\0')
    for (const char* c = mine; *c != '\0'; ++c)
      TT_RETURN_IF(!(std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' || *c == '-'),
                   kInvalidArgument,
                   "TIERTRAIN_COMM_ID=%s: the job's name takes letters, digits, '.', '_' and '-' (`tiertrain launch` "
                   "sets one: unset it)", mine);
  const std::string id = job_id();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  const bool have_mask = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
  if ((o.bind_cores || o.bind_share) && have_mask)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  // Unbound ranks share the CPUs: each one's OpenMP team defaults to its share of them (as torchrun sets
  // OMP_NUM_THREADS), unless the user set OMP_NUM_THREADS; bound ranks' teams follow their affinity masks.
  const int available = have_mask ? CPU_COUNT(&allowed) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const std::string omp_share = std::to_string(std::max(1, available / o.ranks));

  // Note [rank output]: the pipes (and log files) of every rank, made before any rank starts (and
  // before the signals are taken over, so that an error here leaves nothing to restore).
  const bool piped = o.tag_output || !o.log_dir.empty();
  RankOutput output(o.tag_output);
  std::vector<std::array<int, 2>> child_fds(static_cast<size_t>(o.ranks), {-1, -1});  // the ranks' stdout, stderr
  if (piped) {
    if (!o.log_dir.empty()) {
      if (Status st = make_directories(o.log_dir, "launch --log-dir"); !st.is_ok()) {
        return st;
      }
    }
    for (int r = 0; r < o.ranks; ++r) {
      for (int k = 0; k < 2; ++k) {
        int p[2];
        if (::pipe2(p, O_CLOEXEC) != 0) {
          const int e = errno;
          return make_status(StatusCode::kIoError, "launch: a pipe for rank %d's output: %s", r, std::strerror(e));
        }
        RankOutput::Stream s;
        s.fd = p[0];
        s.rank = r;
        s.to = k == 0 ? 1 : 2;
        if (!o.log_dir.empty()) {
          const std::string path = o.log_dir + "/rank" + std::to_string(r) + (k == 0 ? ".out" : ".err");
          s.file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (s.file < 0) {
            const int e = errno;
            ::close(p[0]);
            ::close(p[1]);
            return make_status(StatusCode::kIoError, "launch --log-dir: cannot write '%s': %s", path.c_str(),
                               std::strerror(e));
          }
        }
        output.add(std::move(s));
        child_fds[static_cast<size_t>(r)][static_cast<size_t>(k)] = p[1];
      }
    }
  }
  // The signals we handle arrive through sigtimedwait, blocked from now on; the ranks get the mask they had.
  // SIGCHLD must not be ignored (an inherited SIG_IGN would let the kernel reap the ranks behind our back).
  struct sigaction dfl {}, old_chld {}, ign {}, old_pipe {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, &old_chld);
  // A closed stdout (a reader that is gone) loses the output, not the job: the ranks may be writing a checkpoint.
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&handled, s);
  const bool interactive = isatty(0) != 0;
  const pid_t launcher_pid = getpid();
  sigprocmask(SIG_BLOCK, &handled, &old);

  auto close_child_ends = [&](int r) {
    for (int& fd : child_fds[static_cast<size_t>(r)])
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  };

  // Note [the launcher's python]: started through the Python package's `tiertrain` command, which names its
  // interpreter in TIERTRAIN_PYTHON, a command `python` or `python3` is that interpreter (with the package that
  // started us), not whichever comes first on PATH; an explicit path is left alone.
  std::vector<std::string> command = o.command;
  if (const char* py = env::get("TIERTRAIN_PYTHON");
      py && *py && (command[0] == "python" || command[0] == "python3"))
    command[0] = py;
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
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
      for (int q = 0; q < o.ranks; ++q) close_child_ends(q);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      sigaction(SIGCHLD, &old_chld, nullptr);
      sigaction(SIGPIPE, &old_pipe, nullptr);
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
      if (piped) {
        dup2(child_fds[static_cast<size_t>(r)][0], 1);
        dup2(child_fds[static_cast<size_t>(r)][1], 2);
        setenv("PYTHONUNBUFFERED", "1", 0);  // Note [rank output]: Python's stdio would buffer a pipe in blocks
      }
      // The rank ends with the launcher, even if the launcher is killed outright.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      sigaction(SIGCHLD, &old_chld, nullptr);
      sigaction(SIGPIPE, &old_pipe, nullptr);  // (an ignored signal stays ignored across exec)
      const std::string rank = std::to_string(r), world = std::to_string(o.ranks);
      setenv("RANK", rank.c_str(), 1);
      setenv("LOCAL_RANK", rank.c_str(), 1);
      setenv("WORLD_SIZE", world.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      setenv("TIERTRAIN_RANK", rank.c_str(), 1);
      setenv("TIERTRAIN_WORLD_SIZE", world.c_str(), 1);
      setenv("TIERTRAIN_COMM_ID", id.c_str(), 1);
      if (cpus.empty() && o.ranks > 1) setenv("OMP_NUM_THREADS", omp_share.c_str(), 0);
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
    close_child_ends(r);  // the rank holds them now; the pipes reach EOF when it (and what it started) is done
  }

  int failed = -1;  // the first rank that failed
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  // skip_foreground: not rank 0 when it shares the terminal's process group (interactive), which the terminal's own
  // signal reached already (a copy later than a second would be a second Ctrl-C to it: Note [stopping early]).
  auto signal_all = [&](int sig, bool skip_foreground = false) {
    for (int r = 0; r < o.ranks; ++r)
      if (status[static_cast<size_t>(r)] < 0 && !(skip_foreground && r == 0 && interactive)) {
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
        // (75: stopped early to be resumed, Note [stopping early] in exec/trainer.cc; not a failure: the other
        // ranks are stopping too, and one that is still writing its checkpoint is let finish.)
        const bool ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == kStoppedEarly);
        // (Also after a signal passed on: a rank it killed, one that had not yet taken it as a request to stop,
        // leaves the others waiting for it in a collective; they are stopped too, after the grace.)
        if (!ok && failed < 0) {
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
    if (piped) {  // the 100 ms are spent waiting for output instead
      output.pump(100);
      wait_for.tv_nsec = 0;
    }
    siginfo_t info{};
    const int sig = sigtimedwait(&handled, &info, &wait_for);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1 || sig == SIGUSR2) {
      if (!stopping) {
        // No deadline: a rank may be finishing a step and writing a checkpoint (Note [stopping early]); a scheduler
        // that will not wait sends SIGKILL, a user a second signal.
        std::fprintf(stderr, "tiertrain launch: %s: passing it to the %d rank(s) (again: kill them)\n",
                     strsignal(sig), running);
        stopping = true;
        signal_all(sig, info.si_code == SI_KERNEL);  // SI_KERNEL: from the terminal (Ctrl-C), to its whole group
        kill_at = std::chrono::steady_clock::time_point::max();
      } else {
        signal_all(SIGKILL);  // a second signal: no more waiting
      }
    }
  }
  // What the ranks wrote last; a process they started in the background may hold the pipes open, so at most 2 s.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
       output.open() && std::chrono::steady_clock::now() < until;)
    output.pump(50);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  remove_leftovers(id);
  if (failed >= 0) {
    const int st = status[static_cast<size_t>(failed)];
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
  // Stopped by a signal to the launcher, or every rank succeeded or stopped early (75 if any did).
  int code = 0;
  for (int r = 0; r < o.ranks; ++r) {
    const int st = status[static_cast<size_t>(r)];
    if (WIFEXITED(st) && WEXITSTATUS(st) == kStoppedEarly) {
      code = kStoppedEarly;
    } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      std::fprintf(stderr, "tiertrain launch: rank %d %s\n", r, describe(st).c_str());
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
  }
  return code;
}

}  // namespace tt::comm
