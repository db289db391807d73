// core/stop: the first of SIGTERM, SIGINT, SIGUSR1, SIGUSR2 is the request (copies within a second are the same
// one); another a second later ends the process as the signal would; the time limit counts the time already passed;
// the old handlers come back.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/stop.h"

namespace tt {
namespace {

TEST(StopRequest, TheFirstSignalIsTheRequestAndItsCopiesAreIt) {
  auto stop = StopRequest::install(0);
  ASSERT_TRUE(stop.is_ok()) << stop.status().to_string();
  EXPECT_EQ(stop.value()->code(), 0);
  EXPECT_FALSE(StopRequest::install(0).is_ok()) << "one at a time";
  raise(SIGUSR1);
  EXPECT_EQ(stop.value()->code(), SIGUSR1);
  raise(SIGTERM);  // within the second: the same request, the process goes on
  raise(SIGINT);
  EXPECT_EQ(stop.value()->code(), SIGUSR1);
  EXPECT_EQ(stop.value()->describe(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(stop.value()->describe(SIGTERM), "SIGTERM");
  stop.value().reset();
  auto again = StopRequest::install(0);  // a fresh request: nothing caught yet
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again.value()->code(), 0);
}

TEST(StopRequest, TheOldHandlersComeBack) {
  struct sigaction ign {}, before {}, during {}, after {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR2, &ign, &before), 0);
  {
    auto stop = StopRequest::install(0);
    ASSERT_TRUE(stop.is_ok());
    sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, SIG_IGN);
  }
  sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
  sigaction(SIGUSR2, &before, nullptr);
}

TEST(StopRequest, ASecondSignalASecondLaterEndsTheProcess) {
  pid_t child[2];
  for (int twice = 0; twice < 2; ++twice) {  // the two children at once: one second, not two
    child[twice] = fork();
    if (child[twice] == 0) {
      auto stop = StopRequest::install(0);
      if (!stop.is_ok()) _exit(3);
      raise(SIGTERM);
      if (stop.value()->code() != SIGTERM) _exit(4);
      usleep(1100 * 1000);
      if (twice) raise(SIGTERM);  // not a copy: what SIGTERM does without a handler
      _exit(0);
    }
  }
  int status[2] = {0, 0};
  for (int k = 0; k < 2; ++k) ASSERT_EQ(waitpid(child[k], &status[k], 0), child[k]);
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0) << status[0];
  EXPECT_TRUE(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGTERM) << status[1];
}

TEST(StopRequest, TheTimeLimitCountsTheTimeAlreadyPassed) {
  {
    auto stop = StopRequest::install(3600, 0);
    ASSERT_TRUE(stop.is_ok());
    EXPECT_EQ(stop.value()->code(), 0);
  }
  {
    auto stop = StopRequest::install(90, 90);  // the run took the whole limit to load
    ASSERT_TRUE(stop.is_ok());
    EXPECT_EQ(stop.value()->code(), StopRequest::kTimeLimit);
    EXPECT_EQ(stop.value()->describe(StopRequest::kTimeLimit), "the time limit of 1.5 min");
  }
  {
    auto stop = StopRequest::install(0.05, 0);  // passes while the run goes on
    ASSERT_TRUE(stop.is_ok());
    usleep(100 * 1000);
    EXPECT_EQ(stop.value()->code(), StopRequest::kTimeLimit);
  }
  EXPECT_FALSE(StopRequest::install(-1).is_ok());
}

}  // namespace
}  // namespace tt
