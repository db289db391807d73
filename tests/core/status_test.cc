// core/status: Status and Result<T>, the TT_TRY / TT_ASSIGN_OR_RETURN / TT_RETURN_IF macros and their breadcrumb
// trail (innermost hop first), with_context, the string forms, and str_format beyond its 512-byte stack buffer.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"

namespace tt {
namespace {

// "file:line" as add_breadcrumb writes it for this file: the path after the first "src/", else the whole path.
std::string here(int line) {
  std::string file = __FILE__;
  const size_t src = file.find("src/");
  if (src != std::string::npos) file = file.substr(src + 4);
  return file + ":" + std::to_string(line);
}

// --- a three-level call chain whose breadcrumb lines are recorded ------------------------------------------------

int g_inner_line = 0, g_middle_line = 0, g_outer_line = 0;

Status inner(int n) {
  g_inner_line = __LINE__ + 1;
  TT_RETURN_IF(n < 0, kInvalidArgument, "n must be >= 0, got %d", n);
  return Status::ok();
}

Status middle(int n) {
  g_middle_line = __LINE__ + 1;
  TT_TRY(inner(n));
  return Status::ok();
}

Status outer(int n) {
  g_outer_line = __LINE__ + 1;
  TT_TRY(middle(n));
  return Status::ok();
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_TRUE(s.breadcrumbs().empty());
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_EQ(s.to_string_with_trail(), "ok");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Status, CodeAndMessage) {
  Status s(StatusCode::kNotFound, "no tensor 'wte'");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no tensor 'wte'");
  EXPECT_EQ(s.to_string(), "not found: no tensor 'wte'");
}

TEST(Status, EveryCodeHasADistinctName) {
  const std::vector<StatusCode> codes = {StatusCode::kOk,          StatusCode::kInvalidArgument,
                                         StatusCode::kNotFound,    StatusCode::kIoError,
                                         StatusCode::kDataLoss,    StatusCode::kOutOfMemory,
                                         StatusCode::kFailedPrecondition, StatusCode::kUnimplemented,
                                         StatusCode::kInternal};
  std::vector<std::string> names;
  for (StatusCode c : codes) {
    std::string name = status_code_name(c);
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    for (const auto& other : names) EXPECT_NE(name, other);
    names.push_back(name);
  }
  EXPECT_STREQ(status_code_name(StatusCode::kOutOfMemory), "out of memory");
  EXPECT_STREQ(status_code_name(StatusCode::kDataLoss), "data loss");
}

TEST(Status, MakeStatusFormats) {
  Status s = make_status(StatusCode::kOutOfMemory, "need %lld bytes for '%s'", 4096LL, "wte");
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.message(), "need 4096 bytes for 'wte'");
  EXPECT_TRUE(s.breadcrumbs().empty());
}

TEST(Status, ReturnIfPassesWhenConditionIsFalse) {
  EXPECT_TRUE(inner(3).is_ok());
  EXPECT_TRUE(outer(0).is_ok());
}

TEST(Status, ReturnIfSetsCodeMessageAndOneBreadcrumb) {
  Status s = inner(-7);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "n must be >= 0, got -7");
  ASSERT_EQ(s.breadcrumbs().size(), 1u);
  EXPECT_EQ(s.breadcrumbs()[0], here(g_inner_line));
}

TEST(Status, TryLeavesATrailInnermostFirst) {
  Status s = outer(-1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "n must be >= 0, got -1");  // TT_TRY does not touch the message
  ASSERT_EQ(s.breadcrumbs().size(), 3u);
  EXPECT_EQ(s.breadcrumbs()[0], here(g_inner_line));
  EXPECT_EQ(s.breadcrumbs()[1], here(g_middle_line));
  EXPECT_EQ(s.breadcrumbs()[2], here(g_outer_line));
  EXPECT_NE(g_inner_line, g_middle_line);
  EXPECT_NE(g_middle_line, g_outer_line);
}

TEST(Status, ToStringWithTrail) {
  Status s = outer(-1);
  EXPECT_EQ(s.to_string(), "invalid argument: n must be >= 0, got -1");
  const std::string want = "invalid argument: n must be >= 0, got -1 [at " + here(g_inner_line) + " <- " +
                           here(g_middle_line) + " <- " + here(g_outer_line) + "]";
  EXPECT_EQ(s.to_string_with_trail(), want);
}

TEST(Status, BreadcrumbStripsEverythingUpToSrc) {
  Status s(StatusCode::kInternal, "x");
  s.add_breadcrumb("/home/me/tiertrain/src/memory/device_pool.cc", 42).add_breadcrumb("relative/file.cc", 7);
  ASSERT_EQ(s.breadcrumbs().size(), 2u);
  EXPECT_EQ(s.breadcrumbs()[0], "memory/device_pool.cc:42");
  EXPECT_EQ(s.breadcrumbs()[1], "relative/file.cc:7");
}

TEST(Status, WithContextPrefixesAndKeepsTrail) {
  Status s = outer(-2);
  s.with_context("loading checkpoint /ckpt/step_10.ttf");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "loading checkpoint /ckpt/step_10.ttf: n must be >= 0, got -2");
  EXPECT_EQ(s.breadcrumbs().size(), 3u);
  s.with_context("resuming");
  EXPECT_EQ(s.message(), "resuming: loading checkpoint /ckpt/step_10.ttf: n must be >= 0, got -2");
  EXPECT_EQ(s.to_string(), "invalid argument: resuming: loading checkpoint /ckpt/step_10.ttf: n must be >= 0, got -2");
}

// --- Result<T> ------------------------------------------------------------------------------------------------------

Result<int> parse_positive(int n) {
  if (n <= 0) return make_status(StatusCode::kInvalidArgument, "%d is not positive", n);
  return n * 10;
}

TEST(Result, HoldsAValue) {
  Result<int> r = parse_positive(4);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value(), 40);
  EXPECT_EQ(*r, 40);
  EXPECT_TRUE(r.status().is_ok());
  EXPECT_TRUE(r.take_status().is_ok());
}

TEST(Result, HoldsAStatus) {
  Result<int> r = parse_positive(-3);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "-3 is not positive");
  Status s = r.take_status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "-3 is not positive");
}

TEST(Result, MoveOnlyValueAndArrow) {
  Result<std::unique_ptr<std::string>> r = std::make_unique<std::string>("hello");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(**r, "hello");
  EXPECT_EQ(r->get()->size(), 5u);
  std::unique_ptr<std::string> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, "hello");
}

// --- TT_ASSIGN_OR_RETURN --------------------------------------------------------------------------------------------

int g_assign_line = 0;

Result<int> twice_parsed(int a, int b) {
  TT_ASSIGN_OR_RETURN(int x, parse_positive(a));  // declares x
  int y = 0;
  g_assign_line = __LINE__ + 1;
  TT_ASSIGN_OR_RETURN(y, parse_positive(b));  // assigns an existing variable
  return x + y;
}

Status assign_into_status_function(int a, std::unique_ptr<int>* out) {
  TT_ASSIGN_OR_RETURN(std::unique_ptr<int> p, [&]() -> Result<std::unique_ptr<int>> {
    if (a < 0) return Status(StatusCode::kNotFound, "nothing for a negative key");
    return std::make_unique<int>(a + 1);
  }());
  *out = std::move(p);
  return Status::ok();
}

TEST(AssignOrReturn, AssignsOnSuccess) {
  Result<int> r = twice_parsed(2, 3);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), 50);
}

TEST(AssignOrReturn, ReturnsTheStatusWithABreadcrumb) {
  Result<int> r = twice_parsed(2, -5);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "-5 is not positive");
  ASSERT_EQ(r.status().breadcrumbs().size(), 1u);
  EXPECT_EQ(r.status().breadcrumbs()[0], here(g_assign_line));
}

TEST(AssignOrReturn, FirstFailureWins) {
  Result<int> r = twice_parsed(-1, -2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "-1 is not positive");
}

TEST(AssignOrReturn, MoveOnlyValueIntoStatusFunction) {
  std::unique_ptr<int> out;
  ASSERT_TRUE(assign_into_status_function(41, &out).is_ok());
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(*out, 42);

  std::unique_ptr<int> none;
  Status s = assign_into_status_function(-1, &none);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "nothing for a negative key");
  EXPECT_EQ(s.breadcrumbs().size(), 1u);
  EXPECT_EQ(none, nullptr);
}

// --- str_format -----------------------------------------------------------------------------------------------------

TEST(StrFormat, Short) {
  EXPECT_EQ(str_format("%d-%s-%.2f", 7, "x", 1.5), "7-x-1.50");
  EXPECT_EQ(str_format("plain"), "plain");
  EXPECT_EQ(str_format("%s", ""), "");
}

TEST(StrFormat, LengthsAroundTheStackBuffer) {
  // The implementation formats into 512 bytes first and falls back to the heap for longer results.
  for (size_t n : {510u, 511u, 512u, 513u, 1000u, 4096u, 100000u}) {
    std::string body(n, 'a');
    for (size_t i = 0; i < n; i += 37) body[i] = static_cast<char>('b' + (i % 23));
    const std::string got = str_format("<%s|%d>", body.c_str(), 12345);
    EXPECT_EQ(got.size(), n + 8) << "n = " << n;
    EXPECT_EQ(got, "<" + body + "|12345>") << "n = " << n;
  }
}

TEST(StrFormat, LongResultWithSeveralArgumentsAfterTheLongOne) {
  // The va_list is used twice on the slow path; every argument must survive the second pass.
  const std::string long_arg(700, 'z');
  const std::string got = str_format("%s %d %s %lld %.3f", long_arg.c_str(), -42, "tail", 1LL << 40, 3.25);
  EXPECT_EQ(got, long_arg + " -42 tail 1099511627776 3.250");
}

TEST(StrFormat, LongMessageThroughMakeStatusAndReturnIf) {
  const std::string path(600, 'p');
  Status s = make_status(StatusCode::kIoError, "cannot open '%s': %s", path.c_str(), "No such file");
  EXPECT_EQ(s.message(), "cannot open '" + path + "': No such file");
  auto f = [&]() -> Status {
    TT_RETURN_IF(true, kDataLoss, "%s is corrupt (%d)", path.c_str(), 9);
    return Status::ok();
  };
  Status t = f();
  EXPECT_EQ(t.code(), StatusCode::kDataLoss);
  EXPECT_EQ(t.message(), path + " is corrupt (9)");
}

}  // namespace
}  // namespace tt
