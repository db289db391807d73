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
std::atomic<long long> g_first_ns{0};  // when (CLOCK_MONOTONIC)
std::atomic<bool> g_installed{false};
struct sigaction g_old[sizeof(kSignals) / sizeof(kSignals[0])];

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
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_first_ns.store(monotonic_ns());
    write_all("\ntiertrain: ");
    write_all(signal_name(sig));
    write_all(": stopping after the step in progress (a checkpoint, then exit 75); send it again to stop at once\n");
  } else if (monotonic_ns() - g_first_ns.load() >= 1000000000LL) {
    // A second request, not a copy of the first: what the signal does without us.
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
  sa.sa_flags = SA_RESTART;  // the system calls of the run go on; it stops at a step's end
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) sigaction(kSignals[i], &sa, &g_old[i]);
  return std::unique_ptr<StopRequest>(
      new StopRequest(time_limit_s, static_cast<double>(monotonic_ns()) * 1e-9 - elapsed_s));
}

StopRequest::~StopRequest() {
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) sigaction(kSignals[i], &g_old[i], nullptr);
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
