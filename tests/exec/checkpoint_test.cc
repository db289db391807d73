// exec/checkpoint: round trip, the errors of truncated / corrupt / mismatched files (each names what is wrong),
// an unwritable directory, retention, and atomicity: a write that fails half-way leaves the previous checkpoint and
// the `latest` pointer exactly as they were, with no temporary file behind.
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensorfile.h"
#include "exec/checkpoint.h"
#include "exec/executor.h"
#include "model/model.h"
#include "temp_dir.h"
#include "exec_util.h"

namespace tt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

using testing::read_file;

struct Fixture {
  std::unique_ptr<Backend> be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  ModelConfig cfg{.vocab = 256, .layers = 1, .dim = 16, .heads = 2, .seq = 8};
  std::unique_ptr<Executor> gpt;
  Optimizer* opt = nullptr;
  CheckpointState state;

  Fixture() {
    gpt = std::move(testing::make_gpt(*be, cfg, 2, DType::kF32)).value();
    EXPECT_TRUE(gpt->init_params(5).is_ok());
    opt = &gpt->optimizer();
    std::vector<int32_t> tok(16, 3);
    be->copy_h2d(gpt->tokens(), tok.data(), be->compute_stream());
    be->copy_h2d(gpt->targets(), tok.data(), be->compute_stream());
    gpt->forward();
    gpt->backward();
    gpt->step(1e-3f);  // non-zero moments
    EXPECT_TRUE(be->compute_stream().synchronize().is_ok());
    state.step = 7;
    opt->set_steps_taken(7);  // one optimizer step a training step, as a checkpoint must record
    state.sampler = {2, 11};
    state.rng = {1, 2, 3, 4, 5};
    state.model = cfg;
    state.dtype = DType::kF32;
    state.batch = 2;
    state.seed = 9;
    state.data_path = "/data/x";
    state.data_fingerprint = 0xabcdef;
  }
  std::vector<float> params() {
    std::vector<float> p(static_cast<size_t>(gpt->num_params()));
    EXPECT_TRUE(gpt->download_params(p.data()).is_ok());
    return p;
  }
};

TEST(Checkpoint, RoundTripRestoresEverything) {
  TempDir dir;
  Fixture a;
  ASSERT_TRUE(save_checkpoint(dir.path(), a.state, *a.gpt, 3).is_ok());
  auto path = find_checkpoint(dir.path(), "latest");
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  EXPECT_EQ(path.value(), dir.file("step_00000007.ttf"));

  Fixture b;
  ASSERT_TRUE(b.gpt->init_params(77).is_ok());
  auto st = load_checkpoint(path.value(), a.state, *b.gpt);
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  EXPECT_EQ(st->step, 7);
  EXPECT_EQ(st->sampler.epoch, 2u);
  EXPECT_EQ(st->sampler.cursor, 11u);
  EXPECT_EQ(st->rng, a.state.rng);
  EXPECT_EQ(b.opt->steps_taken(), 7);
  EXPECT_EQ(a.params(), b.params());
  const size_t n = static_cast<size_t>(a.gpt->num_params());
  std::vector<float> ma(n), mb(n), va(n), vb(n);
  ASSERT_TRUE(a.opt->download_state(ma.data(), va.data()).is_ok());
  ASSERT_TRUE(b.opt->download_state(mb.data(), vb.data()).is_ok());
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(va, vb);
  EXPECT_NE(ma, std::vector<float>(n, 0.0f));
}

TEST(Checkpoint, TruncatedAndCorruptFilesAreNamed) {
  TempDir dir;
  Fixture a;
  ASSERT_TRUE(save_checkpoint(dir.path(), a.state, *a.gpt, 3).is_ok());
  const std::string good = read_file(dir.file("step_00000007.ttf"));

  dir.write("cut.ttf", good.substr(0, good.size() / 2));
  Fixture b;
  auto cut = load_checkpoint(dir.file("cut.ttf"), a.state, *b.gpt);
  ASSERT_FALSE(cut.is_ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();

  std::string flipped = good;
  flipped[flipped.size() - 100] ^= 0x55;  // inside the last tensor's data
  dir.write("flip.ttf", flipped);
  auto bad = load_checkpoint(dir.file("flip.ttf"), a.state, *b.gpt);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("CRC mismatch in tensor"), std::string::npos) << bad.status().message();

  dir.write("junk.ttf", "this is not a checkpoint at all, just text that is long enough");
  auto junk = load_checkpoint(dir.file("junk.ttf"), a.state, *b.gpt);
  ASSERT_FALSE(junk.is_ok());
  EXPECT_NE(junk.status().message().find("not a tiertrain tensor file"), std::string::npos);
}

TEST(Checkpoint, TensorFileThatIsNotACheckpointIsAnError) {
  TempDir dir;
  Fixture b;
  for (const char* meta : {R"({"format": 1})", R"([1, 2])", R"({"format": "tiertrain-checkpoint", "version": "x"})"}) {
    TensorFileWriter w;
    w.set_meta(nlohmann::json::parse(meta));
    float x = 1.0f;
    w.add("x", DType::kF32, {1}, &x);
    ASSERT_TRUE(w.write_atomic(dir.file("other.ttf")).is_ok());
    auto st = load_checkpoint(dir.file("other.ttf"), b.state, *b.gpt);
    ASSERT_FALSE(st.is_ok()) << meta;
    EXPECT_TRUE(st.status().code() == StatusCode::kDataLoss || st.status().code() == StatusCode::kFailedPrecondition)
        << st.status().to_string();
  }
}

TEST(Checkpoint, MismatchesAreNamed) {
  TempDir dir;
  Fixture a;
  ASSERT_TRUE(save_checkpoint(dir.path(), a.state, *a.gpt, 3).is_ok());
  Fixture b;
  CheckpointState expected = a.state;
  expected.model.dim = 32;
  expected.model.layers = 3;
  auto st = load_checkpoint(dir.file("step_00000007.ttf"), expected, *b.gpt);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = st.status().message();
  EXPECT_NE(msg.find("dim is 16 in the checkpoint but 32 now"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers is 1 in the checkpoint but 3 now"), std::string::npos) << msg;

  expected = a.state;
  expected.data_fingerprint = 1;
  expected.data_path = "/other";
  auto data = load_checkpoint(dir.file("step_00000007.ttf"), expected, *b.gpt);
  ASSERT_FALSE(data.is_ok());
  EXPECT_NE(data.status().message().find("the dataset differs"), std::string::npos);
  EXPECT_NE(data.status().message().find("/other"), std::string::npos);
  // A failed load leaves the model untouched.
  Fixture fresh;
  EXPECT_EQ(b.params(), fresh.params());
}

TEST(Checkpoint, UnwritableDirectoryFailsEarly) {
  TempDir dir;
  const std::string file = dir.write("plain-file", "x");
  Status s = ensure_checkpoint_dir(file + "/ckpt");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("cannot create checkpoint directory"), std::string::npos) << s.message();
  Status s2 = ensure_checkpoint_dir(file);
  ASSERT_FALSE(s2.is_ok());
  EXPECT_NE(s2.message().find("not a directory"), std::string::npos) << s2.message();
  EXPECT_TRUE(ensure_checkpoint_dir(dir.file("a/b/c")).is_ok());
}

TEST(Checkpoint, KeepsTheNewestAndFindsThemWithoutLatest) {
  TempDir dir;
  Fixture a;
  for (int64_t step : {1, 2, 3, 4}) {
    a.state.step = step;
    ASSERT_TRUE(save_checkpoint(dir.path(), a.state, *a.gpt, 2).is_ok());
  }
  EXPECT_FALSE(fs::exists(dir.file("step_00000001.ttf")));
  EXPECT_FALSE(fs::exists(dir.file("step_00000002.ttf")));
  EXPECT_TRUE(fs::exists(dir.file("step_00000003.ttf")));
  EXPECT_TRUE(fs::exists(dir.file("step_00000004.ttf")));
  fs::remove(dir.file("latest"));
  auto p = find_checkpoint(dir.path(), "latest");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p.value(), dir.file("step_00000004.ttf"));
  TempDir empty;
  auto none = find_checkpoint(empty.path(), "latest");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no checkpoint to resume from"), std::string::npos);
}

TEST(Checkpoint, FailedWriteLosesNothing) {
  TempDir dir;
  Fixture a;
  ASSERT_TRUE(save_checkpoint(dir.path(), a.state, *a.gpt, 5).is_ok());
  const std::string before = read_file(dir.file("step_00000007.ttf"));
  const std::string latest_before = read_file(dir.file("latest"));
  ASSERT_FALSE(before.empty());

  // Make the next write fail half-way: files may not grow past half a checkpoint (EFBIG instead of SIGXFSZ).
  struct rlimit old {};
  getrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = before.size() / 2;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  a.state.step = 8;
  Status s = save_checkpoint(dir.path(), a.state, *a.gpt, 5);
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, SIG_DFL);

  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(read_file(dir.file("step_00000007.ttf")), before);
  EXPECT_EQ(read_file(dir.file("latest")), latest_before);
  EXPECT_FALSE(fs::exists(dir.file("step_00000008.ttf")));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace tt
