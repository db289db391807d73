#include "core/stop.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace tt {

namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

// What the handler touches: lock-free atomics only (async-signal-safe), set by install().
std::atomic<int> g_signal{0};          // the first signal caught
std::atomic<long long> g_first_ns{0};  // when (CLOCK_MONOTONIC); 0 until the first one's handler has stored it
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long long>::is_always_lock_free);
struct sigaction g_old[sizeof(kSignals) / sizeof(kSignals[0])];
struct sigaction g_old_pipe;

long long monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
  }
}

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_signal(int sig) {
  const int saved_errno = errno;
  const long long now = monotonic_ns();
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_first_ns.store(now);
    // The run writes on to its end: a reader of its output that the same Ctrl-C ended (`| tee log`) must not end
    // it by SIGPIPE before its checkpoint (restored with the other handlers).
    signal(SIGPIPE, SIG_IGN);
    write_all("\ntiertrain: ");
    write_all(signal_name(sig));
    write_all(": stopping after the step in progress (a checkpoint, then exit 75); send it again to stop at once\n");
  } else if (const long long first = g_first_ns.load(); first != 0 && now - first >= 1000000000LL) {
    // A second request, not a copy of the first (a copy may find the first one's time not stored yet: 0): what
    // the signal does without us.
    signal(sig, SIG_DFL);
    raise(sig);
  }
  errno = saved_errno;
}

}  // namespace

Result<std::unique_ptr<StopRequest>> StopRequest::install(double time_limit_s, double elapsed_s) {
  TT_RETURN_IF(!(time_limit_s >= 0) || !(elapsed_s >= 0), kInvalidArgument,
               "the time limit is %g s with %g s passed, expected both >= 0", time_limit_s, elapsed_s);
  bool expected = false;
  TT_RETURN_IF(!g_installed.compare_exchange_strong(expected, true), kFailedPrecondition,
               "a StopRequest is installed already (one a process)");
  g_signal.store(0);
  g_first_ns.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaddset(&sa.sa_mask, sig);  // one handler at a time on a thread
  sa.sa_flags = SA_RESTART;  // the system calls of the run go on; it stops at a step's end
  sigaction(SIGPIPE, nullptr, &g_old_pipe);
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) sigaction(kSignals[i], &sa, &g_old[i]);
  return std::unique_ptr<StopRequest>(
      new StopRequest(time_limit_s, static_cast<double>(monotonic_ns()) * 1e-9 - elapsed_s));
}

StopRequest::~StopRequest() {
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  sigaction(SIGPIPE, &g_old_pipe, nullptr);
  g_installed.store(false);
}

int StopRequest::code() const {
  if (const int sig = g_signal.load(); sig != 0) return sig;
  if (limit_s_ > 0 && static_cast<double>(monotonic_ns()) * 1e-9 - start_s_ >= limit_s_) return kTimeLimit;
  return 0;
}

std::string StopRequest::describe(int code) const {
  if (code == kTimeLimit) return str_format("the time limit of %g min", limit_s_ / 60);
  return signal_name(code);
}

}  // namespace tt
