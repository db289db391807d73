// core/atomic_file: the temporary file beside the target is named for this host and process, and
// remove_stale_temporaries (Note [stale temporaries]) removes exactly those of this host whose writer is gone: not a
// live writer's, not another host's, not a file that only looks like one.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "temp_dir.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

// A pid that was a process and is gone: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

std::string host() {
  const std::string t = temporary_path("x");  // x.tmp.<host>.<pid>
  const size_t end = t.rfind('.');
  return end > 6 ? std::string(t.begin() + 6, t.begin() + static_cast<std::ptrdiff_t>(end)) : std::string();
}

TEST(AtomicFile, TemporaryPathNamesThisHostAndProcess) {
  const std::string t = temporary_path("/a/m.json");
  EXPECT_EQ(t.rfind("/a/m.json.tmp.", 0), 0u) << t;
  std::string suffix(1, '.');
  suffix += std::to_string(getpid());
  EXPECT_TRUE(t.ends_with(suffix)) << t;
  EXPECT_FALSE(host().empty());
}

TEST(AtomicFile, StaleTemporariesOfGoneWritersOnThisHostAreRemoved) {
  testing::TempDir dir;
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(getpid());
  const std::string h = host();
  const std::string gone1 = dir.write("step_00000009.ttf.tmp." + h + "." + dead, std::string(1000, 'x'));
  const std::string gone2 = dir.write("step_00000010.ttf.tmp." + dead, std::string(24, 'x'));  // older versions' name
  const std::string alive = dir.write("step_00000011.ttf.tmp." + h + "." + live, "x");
  const std::string other_host = dir.write("step_00000012.ttf.tmp.elsewhere-node." + dead, "x");
  const std::string not_pid = dir.write("step_00000013.ttf.tmp.notapid", "x");
  const std::string other_prefix = dir.write("notes.tmp." + h + "." + dead, "x");
  const std::string real = dir.write("step_00000008.ttf", "checkpoint");
  fs::create_directory(dir.file("step_00000014.ttf.tmp." + h + "." + dead));  // a folder is not a file
  const RemovedFiles r = remove_stale_temporaries(dir.path(), "step_");
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.bytes, 1024);
  EXPECT_FALSE(fs::exists(gone1));
  EXPECT_FALSE(fs::exists(gone2));
  for (const std::string& kept : {alive, other_host, not_pid, other_prefix, real})
    EXPECT_TRUE(fs::exists(kept)) << kept;
  EXPECT_TRUE(fs::exists(dir.file("step_00000014.ttf.tmp." + h + "." + dead)));
  // Nothing left to remove; a folder that does not exist is no error.
  EXPECT_EQ(remove_stale_temporaries(dir.path(), "step_").files, 0);
  EXPECT_EQ(remove_stale_temporaries(dir.file("nope"), "step_").files, 0);
}

TEST(AtomicFile, WritingLeavesNoTemporary) {
  testing::TempDir dir;
  ASSERT_TRUE(write_file_atomically(dir.file("m.json"), "{}\n").is_ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "m.json");
  }
  EXPECT_EQ(files, 1);
}

// A file written in pieces is the old one until commit(), the new one after; destroyed uncommitted, it leaves the old
// one and no temporary file.
TEST(AtomicFile, PiecesAppearAtOnceOnCommit) {
  testing::TempDir dir;
  const std::string path = dir.write("logits.npy", "old");
  auto only = [&](const std::string& name) {
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir.path())) files += e.path().filename() == name ? 1 : 100;
    return files == 1;
  };
  {
    auto f = AtomicFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    ASSERT_TRUE(f.value().write("ab", 2).is_ok());
    ASSERT_TRUE(f.value().write("cde", 3).is_ok());
    EXPECT_EQ(testing::read_file(path), "old");
    EXPECT_TRUE(fs::exists(temporary_path(path)));
  }  // destroyed uncommitted
  EXPECT_EQ(testing::read_file(path), "old");
  EXPECT_TRUE(only("logits.npy"));
  auto f = AtomicFile::open(path);
  ASSERT_TRUE(f.is_ok());
  AtomicFile moved = std::move(f.value());
  ASSERT_TRUE(moved.write("ab", 2).is_ok());
  ASSERT_TRUE(moved.write("cde", 3).is_ok());
  ASSERT_TRUE(moved.commit().is_ok());
  EXPECT_EQ(testing::read_file(path), "abcde");
  EXPECT_TRUE(only("logits.npy"));
  EXPECT_FALSE(moved.write("x", 1).is_ok()) << "committed: no more pieces";
  EXPECT_FALSE(moved.commit().is_ok());
  // A folder that does not exist is named.
  auto none = AtomicFile::open(dir.file("no/such/logits.npy"));
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no/such/logits.npy"), std::string::npos) << none.status().to_string();
}

}  // namespace
}  // namespace tt
