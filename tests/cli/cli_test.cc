// The `tiertrain` program end to end: every kind of bad input gets a clear message and the right exit code, and
// loses nothing already written; --print-config shows where each value came from. Runs the real binary.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <regex>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/atomic_file.h"
#include "core/tensorfile.h"
#include "data/dataset.h"
#include "plan/schedule.h"
#include "gpt2_vocab.h"
#include "temp_dir.h"

namespace tt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct CliRun {
  int code = -1;
  std::string out;  // stdout and stderr together (or stdout alone: run's `stderr_to`)
};

// `stderr_to`: where stderr goes instead of `out` ("/dev/null": `out` is the program's data alone).
CliRun run(const std::string& args, const std::string& env = "", const std::string& stderr_to = "") {
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(TT_BINARY) + " " + args +
                          (stderr_to.empty() ? " 2>&1" : " 2>" + stderr_to);
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

using testing::read_file;

// Small, fast runs on a synthetic corpus.
std::string small(const std::string& data) {
  return "train --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --eval-every 0 --threads 1 --data " + data;
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// What `args --dry-run` (which must succeed) prints from `key` up to, not including, `until`; empty without key.
std::string dry_run_field(const std::string& args, const std::string& key, const std::string& until) {
  CliRun r = run(args + " --dry-run");
  EXPECT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find(key);
  return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find(until, at) - at);
}

TEST(Cli, MissingEmptyAndUnreadableData) {
  TempDir dir;
  CliRun missing = run(small(dir.file("nope.txt")) + " --steps 2");
  EXPECT_EQ(missing.code, 1);
  EXPECT_HAS(missing.out, "data path '" + dir.file("nope.txt") + "' does not exist");

  CliRun empty = run(small(dir.write("empty.txt", "")) + " --steps 2");
  EXPECT_EQ(empty.code, 1);
  EXPECT_HAS(empty.out, "is empty");

  CliRun through_file = run(small(dir.write("f.txt", "abc") + "/inner") + " --steps 2");
  EXPECT_EQ(through_file.code, 1);
  EXPECT_HAS(through_file.out, "does not exist");

  // A file that exists but cannot be read, even by root: reading /proc/self/mem at offset 0 fails with EIO.
  CliRun eio = run(small("/proc/self/mem") + " --steps 2");
  EXPECT_EQ(eio.code, 1);
  EXPECT_HAS(eio.out, "reading data file '/proc/self/mem' failed");

  if (geteuid() != 0) {  // root reads everything
    const std::string locked = dir.write("locked.txt", testing::synthetic_text(5000));
    fs::permissions(locked, fs::perms::none);
    CliRun unreadable = run(small(locked) + " --steps 2");
    EXPECT_EQ(unreadable.code, 1);
    EXPECT_HAS(unreadable.out, "cannot read data file");
  }
  CliRun too_short = run(small(dir.write("short.txt", "abc")) + " --steps 2");
  EXPECT_EQ(too_short.code, 1);
  EXPECT_HAS(too_short.out, "too few");
}

// Issue 25: every data failure exits 1 (the README's code for data), with a message that says what the file is.
TEST(Cli, DataFailuresExitOneAndSayWhatTheFileIs) {
  TempDir dir;
  auto header = [](int32_t magic, int32_t version, int32_t tokens) {
    std::string h(1024, '\0');
    std::memcpy(h.data(), &magic, 4);
    std::memcpy(h.data() + 4, &version, 4);
    std::memcpy(h.data() + 8, &tokens, 4);
    return h;
  };
  struct Case {
    std::string name, path, says;
  };
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const Case cases[] = {
      {"binary", dir.write("bin.dat", std::string("\x7f" "ELF\0\0\1", 7) + std::string(5000, '\0')),
       "is neither text (it has NUL bytes) nor a token shard (its first 4 bytes read 1179403647"},
      {"bad magic", dir.write("bad.bin", header(12345, 1, 100) + std::string(200, '\0')),
       "nor a token shard (its first 4 bytes read 12345; a shard's are 20240520"},
      {"header only", dir.write("empty_shard.bin", header(20240520, 1, 0)), "holds no training tokens"},
      {"short shard", dir.write("short_shard.bin", header(20240520, 1, 1000) + std::string(10, '\0')),
       "header says 1000 tokens"},
      {"fifo", fifo, "is neither a file nor a folder"},
      {"/dev/zero", "/dev/zero", "is neither a file nor a folder"},
      {"empty", dir.write("empty.txt", ""), "is empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CliRun r = run(small(c.path) + " --steps 2", "timeout 20");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_HAS(r.out, c.says);
  }
}

// The exit codes the guide's table lists are the ones --help lists, and usage errors give 2.
TEST(Cli, HelpListsTheExitCodesOfTheGuide) {
  CliRun help = run("--help");
  EXPECT_EQ(help.code, 0);
  const std::string guide = read_file(std::string(TT_SOURCE_DIR) + "/docs/GUIDE.md");
  const size_t table = guide.find("| code | meaning |");
  ASSERT_NE(table, std::string::npos);
  int rows = 0;
  for (size_t at = guide.find("\n| ", table); at != std::string::npos && at < guide.find("\n\n", table);
       at = guide.find("\n| ", at + 1)) {
    const size_t a = at + 3, b = guide.find(" |", a);
    const std::string code = guide.substr(a, b - a);
    if (code == "code" || code.find("---") != std::string::npos) continue;
    ++rows;
    EXPECT_HAS(help.out, "\n  " + code + " ");
  }
  EXPECT_EQ(rows, 6);
  EXPECT_EQ(run("train --no-such-flag").code, 2);
  EXPECT_EQ(run("").code, 2);
}

// Issue 24's CLI polish: choices shown in --help and matched in any case, a warm-up as long as the run warned about,
// and `--backend cuda` on a machine without a GPU explained.
TEST(Cli, ChoicesWarmupAndMissingGpuAreExplained) {
  CliRun help = run("train --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_HAS(help.out, "{NONE,WARN,INFO,TRACE}");
  EXPECT_HAS(help.out, "{auto,cpu,cuda}");
  EXPECT_EQ(help.out.find("CHOICE"), std::string::npos) << help.out;
  CliRun launch_help = run("launch --help");
  EXPECT_EQ(launch_help.code, 0);
  EXPECT_HAS(launch_help.out, "launch -n N [OPTIONS] -- CMD [ARGS...]");

  CliRun lower = run("train --debug info --backend CPU --print-config");
  EXPECT_EQ(lower.code, 0) << lower.out;
  EXPECT_HAS(lower.out, "INFO");

  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(4000));
  CliRun warm = run(small(data) + " --steps 3 --warmup 5 --backend cpu");
  EXPECT_EQ(warm.code, 0) << warm.out;
  EXPECT_HAS(warm.out, "--warmup 5 is not shorter than --steps 3");
  CliRun fine = run(small(data) + " --steps 3 --warmup 1 --backend cpu");
  EXPECT_EQ(fine.code, 0) << fine.out;
  EXPECT_EQ(fine.out.find("is not shorter than"), std::string::npos) << fine.out;

  // attention_workspace: auto (the default), a size, or 0; anything else is refused with what it takes.
  EXPECT_EQ(run(small(data) + " --steps 1 --backend cpu --attention-workspace 1GiB --dry-run").code, 0);
  EXPECT_EQ(run(small(data) + " --steps 1 --backend cpu --attention-workspace auto --dry-run").code, 0);
  CliRun bad_ws = run(small(data) + " --steps 1 --backend cpu --attention-workspace lots");
  EXPECT_EQ(bad_ws.code, 2) << bad_ws.out;
  EXPECT_HAS(bad_ws.out, "attention_workspace 'lots': a size such as 512MiB or 2GiB, 0, or auto");

  // f32_attention: auto, gemm or simt.
  EXPECT_EQ(run(small(data) + " --steps 1 --backend cpu --f32-attention simt --dry-run").code, 0);
  CliRun bad_f32 = run(small(data) + " --steps 1 --backend cpu --f32-attention fast");
  EXPECT_EQ(bad_f32.code, 2) << bad_f32.out;
  EXPECT_HAS(bad_f32.out, "--f32-attention");

  // Under a launcher with several ranks, train refuses (each rank would train alone); one rank is fine.
  CliRun ranks = run("launch -n 2 -- " + std::string(TT_BINARY) + " " + small(data) + " --steps 1 --backend cpu");
  EXPECT_EQ(ranks.code, 2) << ranks.out;
  EXPECT_HAS(ranks.out, "WORLD_SIZE=2 says this is one of 2 ranks, and train has no --mesh");
  CliRun one = run("launch -n 1 -- " + std::string(TT_BINARY) + " " + small(data) + " --steps 1 --backend cpu");
  EXPECT_EQ(one.code, 0) << one.out;

  CliRun cuda = run(small(data) + " --steps 1 --backend cuda --dry-run");
  if (cuda.code != 0) {  // no GPU here, or a build without CUDA (a GPU machine runs it)
    EXPECT_EQ(cuda.code, 1) << cuda.out;
    if (cuda.out.find("this build has no CUDA backend") == std::string::npos) {
      EXPECT_HAS(cuda.out, "--backend cuda: no usable GPU");
      EXPECT_HAS(cuda.out, "--backend cpu runs on the CPU");
    }
  }
}

// Issue 21, Note [data parallel] in plan/schedule.cc: `launch -n N -- train --mesh data=N` trains one model over the
// ranks, each on its shard of the same global batches: every step's loss and gradient norm are the one-process
// run's up to the order of the gradient sums (here within 1e-6 relative), on plans with the optimizer on the
// device and on the host; rank 0 alone prints and writes; the replicas are checked to be the same bits at every
// checkpoint and at the end.
std::vector<std::pair<double, double>> loss_and_norm(const std::string& metrics) {
  std::vector<std::pair<double, double>> v;
  const nlohmann::json j = nlohmann::json::parse(read_file(metrics));
  for (const auto& s : j.at("steps")) v.emplace_back(s.at("loss").get<double>(), s.at("grad_norm").get<double>());
  return v;
}

void expect_same_curve(const std::string& a, const std::string& b, const std::string& what) {
  const auto x = loss_and_norm(a), y = loss_and_norm(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  ASSERT_FALSE(x.empty()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(x[i].first, y[i].first, 1e-6 * x[i].first) << what << " step " << i + 1;
    EXPECT_NEAR(x[i].second, y[i].second, 1e-5 * x[i].second) << what << " step " << i + 1;
  }
  EXPECT_LT(y.back().first, y.front().first - 0.3) << what << ": it learns";
}

TEST(Cli, DataParallelOverAMeshTrainsTheOneProcessModel) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 6 --eval-batches 2 --threads 1 --log-every 4";
  for (const auto& [plan, ranks] : {std::pair<std::string, int>{"in-core", 2}, {"offload-all", 2}, {"recompute", 4}}) {
    const std::string one = dir.path() + "/one-" + plan + ".json", mesh = dir.path() + "/mesh-" + plan + ".json";
    CliRun a = run(args + " --plan " + plan + " --metrics-out " + one);
    ASSERT_EQ(a.code, 0) << a.out;
    CliRun b = run("launch -n " + std::to_string(ranks) + " -- " + bin + " " + args + " --plan " + plan +
                   " --mesh data=" + std::to_string(ranks) + " --metrics-out " + mesh);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_HAS(b.out, "[rank 0] mesh data=" + std::to_string(ranks) + ", layout batch:data: " + std::to_string(ranks) +
                          " ranks (shm backend); batch 8 = " + std::to_string(8 / ranks) + " a rank");
    EXPECT_EQ(b.out.find("[rank 1] step"), std::string::npos) << "rank 1 prints nothing of the run\n" << b.out;
    expect_same_curve(one, mesh, plan);
    const nlohmann::json x = nlohmann::json::parse(read_file(one)), y = nlohmann::json::parse(read_file(mesh));
    ASSERT_EQ(x.at("val").size(), 2u);
    ASSERT_EQ(y.at("val").size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(x["val"][i]["loss"].get<double>(), y["val"][i]["loss"].get<double>(), 1e-6) << plan;
  }
}

// Note [bf16 gradients] over data ranks: the bf16 segments are averaged as they are (the shm communicator adds them
// in f32 in rank order and rounds once), so two ranks follow the one-process run with bf16 gradients closely (not bit
// for bit: the average of two rounded halves is not the rounded whole) and learn; over model ranks, the same curve;
// the sharded optimizer is refused.
TEST(Cli, MeshesWithBf16GradientsFollowTheOneProcessRun) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 0 --threads 1 --log-every 4 --grad-dtype bf16";
  CliRun a = run(args + " --metrics-out " + dir.path() + "/one.json");
  ASSERT_EQ(a.code, 0) << a.out;
  CliRun b = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --metrics-out " + dir.path() + "/mesh.json");
  ASSERT_EQ(b.code, 0) << b.out;
  const auto x = loss_and_norm(dir.path() + "/one.json"), y = loss_and_norm(dir.path() + "/mesh.json");
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i].first, y[i].first, 1e-2 * x[i].first) << "step " << i + 1;
  EXPECT_LT(y.back().first, y.front().first - 0.3) << "it learns";
  // Over model ranks each rank's weight gradients are its slices of the one-process run's (the same sums): the same
  // curve, as with f32 gradients (Cli.TensorParallelOverAMeshTrainsTheOneProcessModel).
  const std::string tp_args = std::regex_replace(args, std::regex("--heads 2"), "--heads 4");
  CliRun d = run(tp_args + " --metrics-out " + dir.path() + "/one4.json");
  ASSERT_EQ(d.code, 0) << d.out;
  CliRun e = run("launch -n 2 -- " + bin + " " + tp_args + " --mesh model=2 --metrics-out " + dir.path() + "/tp.json");
  ASSERT_EQ(e.code, 0) << e.out;
  expect_same_curve(dir.path() + "/one4.json", dir.path() + "/tp.json", "model=2, bf16 gradients");
  CliRun c = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --shard-optimizer true");
  EXPECT_NE(c.code, 0);
  EXPECT_HAS(c.out, "--grad-dtype bf16");
}

// Note [bf16 gradients]: a checkpoint records the gradient type its run resolved (not the knob's auto), and a resume
// that resolves another is warned of, as other knobs whose change keeps the run going but not bit for bit.
TEST(Cli, ResumingWithAnotherGradientTypeIsWarnedOf) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(20000));
  const std::string args = small(data) + " --backend cpu --steps 4 --warmup 0 --checkpoint-dir " + dir.file("ck");
  ASSERT_EQ(run(args + " --grad-dtype bf16 --stop-at 2").code, 0);
  CliRun same = run(args + " --grad-dtype bf16 --stop-at 3 --resume");
  ASSERT_EQ(same.code, 0) << same.out;
  EXPECT_EQ(same.out.find("grad_dtype="), std::string::npos) << same.out;
  CliRun other = run(args + " --resume");  // auto: f32 on the CPU backend
  ASSERT_EQ(other.code, 0) << other.out;
  EXPECT_HAS(other.out, "written with grad_dtype=\"bf16\", resuming with \"f32\"");
}

// Checkpoints hold the whole model and the global sampler: a run on 2 ranks continues on 1, and one on 1 on 4,
// where the uninterrupted run goes.
TEST(Cli, DataParallelCheckpointsContinueOnAnotherMesh) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 0 --threads 1";
  CliRun whole = run(args + " --metrics-out " + dir.path() + "/whole.json");
  ASSERT_EQ(whole.code, 0) << whole.out;
  CliRun first = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --stop-at 6 --checkpoint-dir " +
                     dir.path() + "/ck");
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_HAS(first.out, "[rank 0] step      6 | checkpoint written");
  CliRun second = run(args + " --checkpoint-dir " + dir.path() + "/ck --resume --metrics-out " + dir.path() +
                      "/second.json");
  ASSERT_EQ(second.code, 0) << second.out;
  CliRun third = run(args + " --stop-at 6 --checkpoint-dir " + dir.path() + "/ck1");
  ASSERT_EQ(third.code, 0) << third.out;
  CliRun fourth = run("launch -n 4 -- " + bin + " " + args + " --mesh data=4 --checkpoint-dir " + dir.path() +
                      "/ck1 --resume --metrics-out " + dir.path() + "/fourth.json");
  ASSERT_EQ(fourth.code, 0) << fourth.out;
  const auto w = loss_and_norm(dir.path() + "/whole.json");
  for (const char* part : {"second", "fourth"}) {
    const auto p = loss_and_norm(dir.path() + "/" + part + ".json");
    ASSERT_EQ(p.size(), 6u) << part;
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i].first, w[6 + i].first, 1e-6 * w[6 + i].first) << part;
  }
}

// Note [data-parallel input]: direct, via-root and replicated feed each rank the same windows: the same run, bit for
// bit (every logged loss, norm and validation loss equal).
TEST(Cli, DataParallelInputModesGiveTheSameRun) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 10 --warmup 2 "
                           "--eval-every 5 --eval-batches 2 --threads 1 --mesh data=2";
  std::vector<nlohmann::json> runs;
  for (const char* input : {"direct", "via-root", "replicated"}) {
    const std::string out = dir.path() + "/" + input + ".json";
    CliRun r = run("launch -n 2 -- " + std::string(TT_BINARY) + " " + args + " --input " + input + " --metrics-out " +
                   out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, std::string("input ") + input);
    runs.push_back(nlohmann::json::parse(read_file(out)));
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    ASSERT_EQ(runs[k]["steps"].size(), runs[0]["steps"].size());
    for (size_t i = 0; i < runs[0]["steps"].size(); ++i) {
      EXPECT_EQ(runs[k]["steps"][i]["loss"], runs[0]["steps"][i]["loss"]) << k << " step " << i + 1;
      EXPECT_EQ(runs[k]["steps"][i]["grad_norm"], runs[0]["steps"][i]["grad_norm"]) << k << " step " << i + 1;
    }
    EXPECT_EQ(runs[k]["val"], runs[0]["val"]) << k;
  }
  // via-root stages the global batch on data rank 0's device (input.global: its 2 x 8 x 16 tokens and targets, 1 KiB
  // beside input.next's share), which it scatters from there.
  auto device_input = [&](const char* input) {
    CliRun r = run(args + " --input " + input + " --dry-run");
    EXPECT_EQ(r.code, 0) << r.out;
    const size_t at = r.out.find("input ", r.out.find("device "));
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find_first_of(",\n", at) - at);
  };
  EXPECT_EQ(device_input("direct"), "input 1.00 KiB");
  EXPECT_EQ(device_input("via-root"), "input 2.00 KiB");
  CliRun bad = run(args + " --input scatter");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_HAS(bad.out, "direct");
}

// The same under mpirun, over the mpi backend (skipped where there is no mpirun or the build has no MPI).
TEST(Cli, DataParallelUnderMpirun) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (openmpi-bin)";
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 10 --warmup 2 "
                           "--eval-every 0 --threads 1";
  CliRun a = run(args + " --metrics-out " + dir.path() + "/one.json");
  ASSERT_EQ(a.code, 0) << a.out;
  const std::string cmd = "TIERTRAIN_COMM_BACKEND=mpi mpirun --allow-run-as-root --oversubscribe -n 2 " +
                          std::string(TT_BINARY) + " " + args + " --mesh data=2 --metrics-out " + dir.path() +
                          "/mpi.json 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  if (out.find("this build has no MPI") != std::string::npos) GTEST_SKIP() << "a build without MPI";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_HAS(out, "2 ranks (mpi backend)");
  expect_same_curve(dir.path() + "/one.json", dir.path() + "/mpi.json", "mpirun");
}

// On two GPUs or more (issue 22's machines): the reductions go through NCCL on the comm stream, each rank on its
// own GPU (core/device_env.h); in f32 the curve is the one-GPU run's.
TEST(Cli, DataParallelOnTwoGpusThroughNccl) {
  FILE* p = popen("nvidia-smi -L 2>/dev/null | grep -c '^GPU'", "r");
  int gpus = 0;
  if (p != nullptr) {
    if (std::fscanf(p, "%d", &gpus) != 1) gpus = 0;
    pclose(p);
  }
  if (gpus < 2) GTEST_SKIP() << "fewer than 2 GPUs (" << gpus << ")";
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string args = "train --data " + data +
                           " --backend cuda --dtype f32 --layers 2 --dim 64 --heads 2 --seq 32 --batch 8 --steps 12 "
                           "--warmup 2 --eval-every 0";
  CliRun a = run(args + " --metrics-out " + dir.path() + "/one.json");
  ASSERT_EQ(a.code, 0) << a.out;
  CliRun b = run("launch -n 2 -- " + std::string(TT_BINARY) + " " + args + " --mesh data=2 --metrics-out " +
                 dir.path() + "/two.json");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_HAS(b.out, "[rank 0] mesh data=2");
  expect_same_curve(dir.path() + "/one.json", dir.path() + "/two.json", "two GPUs");
}

// Note [tensor parallel] in model/gpt.h: `--mesh model=N` splits every block's heads and MLP width and the
// vocabulary (Note [vocabulary-parallel cross-entropy]) over the ranks, or the blocks alone with a layout that
// leaves the vocabulary out; data=2,model=2 combines it with data parallel; every step's loss and gradient norm are
// the one-process run's up to the order of the partial sums (within 1e-6 relative), with the optimizer on the device
// and on the host, with recomputed and swapped blocks, and so are the validation losses; rank 0 alone prints.
TEST(Cli, TensorParallelOverAMeshTrainsTheOneProcessModel) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 4 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 6 --eval-batches 2 --threads 1 --log-every 4";
  struct Case {
    std::string plan, mesh;
    int ranks;
    std::string layout;  // "": the default (vocab split too)
  };
  for (const Case& c : {Case{"in-core", "model=2", 2, ""}, Case{"in-core", "model=2", 2, "heads:model,ff:model"},
                        Case{"offload-all", "model=2", 2, ""}, Case{"swap-activations", "model=4", 4, ""},
                        Case{"recompute", "data=2,model=2", 4, ""}}) {
    const std::string one = dir.path() + "/one-" + c.plan + ".json", mesh = dir.path() + "/tp-" + c.plan + ".json";
    CliRun a = run(args + " --plan " + c.plan + " --metrics-out " + one);
    ASSERT_EQ(a.code, 0) << a.out;
    CliRun b = run("launch -n " + std::to_string(c.ranks) + " -- " + bin + " " + args + " --plan " + c.plan +
                   " --mesh " + c.mesh + (c.layout.empty() ? "" : " --layout " + c.layout) + " --metrics-out " + mesh);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_HAS(b.out, "[rank 0] mesh " + c.mesh + ", layout " +
                          (c.layout.empty() ? std::string(c.mesh.starts_with("data") ? "batch:data," : "") +
                                                  "heads:model,ff:model,vocab:model"
                                            : c.layout));
    EXPECT_EQ(b.out.find("[rank 1] step"), std::string::npos) << "rank 1 prints nothing of the run\n" << b.out;
    expect_same_curve(one, mesh, c.plan + " " + c.mesh + " " + c.layout);
    const nlohmann::json x = nlohmann::json::parse(read_file(one)), y = nlohmann::json::parse(read_file(mesh));
    ASSERT_EQ(x.at("val").size(), 2u);
    ASSERT_EQ(y.at("val").size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(x["val"][i]["loss"].get<double>(), y["val"][i]["loss"].get<double>(), 1e-6) << c.plan;
    if (c.mesh != "data=2,model=2") continue;
    // The input modes on the 2-D mesh (each data coordinate's model ranks read the same part): the same run, bit for
    // bit.
    for (const char* input : {"via-root", "replicated"}) {
      const std::string other = dir.path() + "/tp-" + input + ".json";
      CliRun d = run("launch -n 4 -- " + bin + " " + args + " --plan " + c.plan + " --mesh " + c.mesh + " --input " +
                     input + " --metrics-out " + other);
      ASSERT_EQ(d.code, 0) << d.out;
      const nlohmann::json z = nlohmann::json::parse(read_file(other));
      ASSERT_EQ(z["steps"].size(), y["steps"].size()) << input;
      for (size_t i = 0; i < y["steps"].size(); ++i) {
        EXPECT_EQ(z["steps"][i]["loss"], y["steps"][i]["loss"]) << input << " step " << i + 1;
        EXPECT_EQ(z["steps"][i]["grad_norm"], y["steps"][i]["grad_norm"]) << input << " step " << i + 1;
      }
      EXPECT_EQ(z["val"], y["val"]) << input;
    }
  }
}

// The Llama family over a mesh (docs/ARCHITECTURE.md invariant 5): tensor parallel over heads with whole key/value
// groups a rank (and the vocabulary and the untied head split), data parallel, and both, follow the one-process run;
// its checkpoint, written over model=2, resumes in one process bit for bit with the uninterrupted one-process run.
// Fine-tuning data of `text` in a masked shard (Note [loss mask]) in folder `to`: documents of 40 to 70 bytes, the
// first 5 to 35 of each a prompt the loss does not count.
void write_masked_shard(const std::string& text, const std::string& to) {
  std::vector<uint32_t> tokens;
  for (size_t at = 0, k = 0; at < text.size(); ++k) {
    const size_t n = std::min(text.size() - at, 40 + (k * 7919) % 31), prompt = 5 + (k * 104729) % 31;
    for (size_t i = 0; i < n; ++i)
      tokens.push_back(static_cast<unsigned char>(text[at + i]) | (i < prompt ? data::kNoLoss : 0u));
    at += n;
  }
  std::filesystem::create_directories(to);
  ASSERT_TRUE(data::write_token_shard(to + "/train_000.bin", data::Tokens(tokens), 256).is_ok());
}

// Note [loss mask]: fine-tuning data (prompts not counted, the counted targets differing from rank to rank within a
// batch) over data=2 and data=4, with each input mode, follows the one-process run: the gradient's scale is the whole
// batch's count on every rank, the loss the mean over the whole batch's counted targets.
TEST(Cli, MaskedDataOverADataMeshTrainsTheOneProcessModel) {
  TempDir dir;
  const std::string text = tt::testing::synthetic_text(30000);
  write_masked_shard(text, dir.file("masked"));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + dir.file("masked") +
                           " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 6 --eval-batches 2 --threads 1 --log-every 4";
  const std::string one = dir.path() + "/one.json";
  CliRun a = run(args + " --metrics-out " + one);
  ASSERT_EQ(a.code, 0) << a.out;
  for (const auto& [input, ranks] : {std::pair<std::string, int>{"direct", 2}, {"replicated", 2}, {"via-root", 4}}) {
    const std::string mesh = dir.path() + "/mesh-" + input + ".json";
    CliRun b = run("launch -n " + std::to_string(ranks) + " -- " + bin + " " + args + " --mesh data=" +
                   std::to_string(ranks) + " --input " + input + " --metrics-out " + mesh);
    ASSERT_EQ(b.code, 0) << b.out;
    expect_same_curve(one, mesh, "masked " + input);
    const nlohmann::json x = nlohmann::json::parse(read_file(one)), y = nlohmann::json::parse(read_file(mesh));
    ASSERT_EQ(x.at("val").size(), 2u);
    ASSERT_EQ(y.at("val").size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(x["val"][i]["loss"].get<double>(), y["val"][i]["loss"].get<double>(), 1e-6);
  }
}

// Note [gradient accumulation] over a data mesh: --grad-accum 2 over data=2 (each input mode, and with the CPU
// optimizer) follows the one-process run with --grad-accum 2 (one reduction a step, after the second micro-batch), on
// text and on masked data; the one-process run follows --batch 16 without accumulation up to rounding, and is
// --batch 16 --micro-batch 8 bit for bit. A micro-batch that does not divide the step, or both flags, exit 2.
TEST(Cli, GradientAccumulationOverADataMeshTrainsTheOneProcessModel) {
  TempDir dir;
  const std::string text = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  write_masked_shard(text, dir.file("masked"));
  const std::string bin = TT_BINARY;
  for (const std::string& data : {text, dir.file("masked")}) {
    const std::string base = "train --data " + data +
                             " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --steps 12 --warmup 2 "
                             "--eval-every 6 --eval-batches 2 --threads 1 --log-every 4";
    const std::string args = base + " --batch 8 --grad-accum 2";
    const std::string one = dir.path() + "/one.json", big = dir.path() + "/big.json";
    CliRun a = run(args + " --metrics-out " + one);
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_HAS(a.out, "batch 16 = 2 micro-batches of 8 (256 tokens/step)");
    CliRun b = run(base + " --batch 16 --eval-batches 1 --metrics-out " + big);
    ASSERT_EQ(b.code, 0) << b.out;
    expect_same_curve(big, one, "accumulated against one batch");
    // --batch 16 --micro-batch 8 is the same run as --batch 8 --grad-accum 2.
    const std::string micro = dir.path() + "/micro.json";
    CliRun mb = run(base + " --batch 16 --micro-batch 8 --metrics-out " + micro);
    ASSERT_EQ(mb.code, 0) << mb.out;
    EXPECT_HAS(mb.out, "batch 16 = 2 micro-batches of 8 (256 tokens/step)");
    EXPECT_EQ(loss_and_norm(micro), loss_and_norm(one)) << "--micro-batch against --grad-accum";
    for (const std::string input : {"direct", "via-root"}) {
      const std::string mesh = dir.path() + "/mesh-" + input + ".json";
      CliRun m = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --input " + input + " --metrics-out " +
                     mesh);
      ASSERT_EQ(m.code, 0) << m.out;
      expect_same_curve(one, mesh, "accumulated over data=2 " + input);
    }
    for (const char* bad : {" --batch 16 --micro-batch 5", " --batch 16 --micro-batch 8 --grad-accum 2"}) {
      CliRun r = run(base + bad);
      EXPECT_EQ(r.code, 2) << bad << "\n" << r.out;
      EXPECT_HAS(r.out, "--micro-batch");
    }
    // With the CPU optimizer: the sums reduced and copied to the host once, after the second micro-batch.
    const std::string cpu = dir.path() + "/mesh-cpu-optimizer.json";
    CliRun c = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --optimizer cpu --metrics-out " + cpu);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_HAS(c.out, "CPU optimizer");
    expect_same_curve(one, cpu, "accumulated over data=2, CPU optimizer");
  }
}

// A copy of checkpoint `from` at `to` (valid CRCs), its metadata through `meta` and each tensor's bytes through
// `bytes` (either may be empty).
void rewrite_checkpoint(const std::string& from, const std::string& to,
                        const std::function<void(nlohmann::json&)>& meta,
                        const std::function<void(const TensorFileEntry&, std::vector<unsigned char>&)>& bytes) {
  auto r = TensorFileReader::open(from);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::vector<std::vector<unsigned char>> data;
  data.reserve(r->entries().size());
  TensorFileWriter w;
  nlohmann::json m = r->meta();
  if (meta) meta(m);
  w.set_meta(m);
  for (const TensorFileEntry& e : r->entries()) {
    data.emplace_back(e.bytes);
    ASSERT_TRUE(r->read(e.name, e.dtype, e.shape, data.back().data()).is_ok());
    if (bytes) bytes(e, data.back());
    w.add(e.name, e.dtype, e.shape, data.back().data());
  }
  ASSERT_TRUE(w.write_atomic(to).is_ok());
}

// A copy of checkpoint `from` at `to` (valid CRCs) with element 0 of tensor `name` set to `value`.
void write_checkpoint_with(const std::string& from, const std::string& to, const std::string& name, float value) {
  bool found = false;
  rewrite_checkpoint(from, to, {}, [&](const TensorFileEntry& e, std::vector<unsigned char>& data) {
    if (e.name != name) return;
    ASSERT_EQ(e.dtype, DType::kF32);
    std::memcpy(data.data(), &value, sizeof value);
    found = true;
  });
  ASSERT_TRUE(found) << name;
}

// A tiny run's checkpoint of step 2 of 4 (CPU backend): the train command's arguments, and the file.
struct StepTwoCheckpoint {
  std::string args, file;
};
StepTwoCheckpoint step_two_checkpoint(TempDir& dir) {
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(6000));
  StepTwoCheckpoint c;
  c.args = "train --data " + data +
           " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 4 --warmup 1 --backend cpu --eval-every 0 "
           "--threads 1";
  CliRun t = run(c.args + " --stop-at 2 --checkpoint-dir " + dir.file("ck") + " --checkpoint-every 2");
  EXPECT_EQ(t.code, 0) << t.out;
  c.file = dir.file("ck/step_00000002.ttf");
  return c;
}

// The commands that read a checkpoint's parameters alone: sample, eval (on `data`) and export (into `out`).
std::vector<std::string> checkpoint_readers(const std::string& ckpt, const std::string& data, const std::string& out) {
  return {"sample " + ckpt + " --tokens 4 --backend cpu", "eval " + ckpt + " --data " + data + " --batch 2 --backend cpu",
          "export " + ckpt + " --out " + out};
}

// Issue 47: checkpoint metadata no run writes is refused on resume, exit 1, naming the field: another optimizer's
// name, an all-zero generator state, a config whose learning rate is not a number (NaN is written as null) or whose
// steps are negative.
TEST(Cli, CheckpointMetadataNoRunWritesIsRefused) {
  TempDir dir;
  const StepTwoCheckpoint c = step_two_checkpoint(dir);
  const std::string& args = c.args;
  const std::string& good = c.file;
  const std::vector<std::tuple<std::string, std::function<void(nlohmann::json&)>, std::string>> cases = {
      {"sgd", [](nlohmann::json& m) { m["optimizer"]["name"] = "sgd"; }, "metadata optimizer.name is 'sgd'"},
      {"rng", [](nlohmann::json& m) { m["rng"] = std::vector<uint64_t>(m["rng"].size(), 0); },
       "metadata rng is all zero"},
      {"lr", [](nlohmann::json& m) { m["config"]["lr"] = nullptr; }, "metadata config.lr is null, not a finite"},
      {"steps", [](nlohmann::json& m) { m["config"]["steps"] = -1; }, "metadata config.steps is -1"},
  };
  for (const auto& [name, change, says] : cases) {
    SCOPED_TRACE(name);
    const std::string ck = dir.file(name);
    std::filesystem::create_directories(ck);
    rewrite_checkpoint(good, ck + "/step_00000002.ttf", change, {});
    CliRun r = run(args + " --checkpoint-dir " + ck + " --resume");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_HAS(r.out, says);
    EXPECT_EQ(r.out.find("step      3"), std::string::npos) << "nothing may run";
  }
  CliRun resumed = run(args + " --checkpoint-dir " + dir.file("ck") + " --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
}

// Issue 47: a checkpoint damaged where sample, eval and export do not read (AdamW's moments at the end of the file) is
// refused by them too, naming the tensor, as by a resume: every tensor's CRC is checked.
TEST(Cli, DamagedMomentsAreRefusedByEveryReaderOfACheckpoint) {
  TempDir dir;
  const StepTwoCheckpoint c = step_two_checkpoint(dir);
  std::ifstream in(c.file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 400u);
  bytes[bytes.size() - 300] ^= 0x5a;  // inside the last tensors (the final norm's moments), before the trailer
  const std::string bad = dir.write("bad.ttf", std::string(bytes.begin(), bytes.end()));
  const std::string data = dir.file("corpus.txt");
  for (const std::string& cmd : checkpoint_readers(bad, data, dir.file("hf"))) {
    CliRun r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_HAS(r.out, "is corrupt: CRC mismatch in tensor 'adam.");
  }
}

// Issue 47: a checkpoint's config follows the model the run took: a resume without the model flags writes the
// checkpoint's sizes there, not the flags' defaults; a file whose config names other sizes than its model (as such
// resumes wrote before) resumes with the model's, and a warning naming both.
TEST(Cli, CheckpointConfigFollowsTheModelTaken) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(6000));
  const std::string common = "train --data " + data + " --batch 2 --steps 4 --warmup 1 --backend cpu --eval-every 0 "
                             "--threads 1 --checkpoint-every 2 --checkpoint-dir " + dir.file("ck");
  CliRun first = run(common + " --layers 1 --dim 16 --heads 2 --seq 8 --stop-at 2");
  ASSERT_EQ(first.code, 0) << first.out;
  CliRun second = run(common + " --resume");  // the model from the checkpoint, not from the flags (their defaults)
  ASSERT_EQ(second.code, 0) << second.out;
  auto r = TensorFileReader::open(dir.file("ck/step_00000004.ttf"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const nlohmann::json& meta = r.value().meta();
  for (const char* k : {"layers", "dim", "heads", "seq"}) EXPECT_EQ(meta["config"][k], meta["model"][k]) << k;
  EXPECT_EQ(meta["config"]["dim"], 16);
  std::filesystem::create_directories(dir.file("other"));
  rewrite_checkpoint(dir.file("ck/step_00000002.ttf"), dir.file("other/step_00000002.ttf"),
                     [](nlohmann::json& m) { m["config"]["dim"] = 32; }, {});
  CliRun resumed = run("train --data " + data + " --batch 2 --steps 4 --warmup 1 --backend cpu --eval-every 0 "
                       "--threads 1 --checkpoint-dir " + dir.file("other") + " --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_HAS(resumed.out, "metadata config.dim is 32 but the model's (metadata model.dim, which the tensors follow) "
                          "is 16: the model's is used");
}

// Issue 47: a checkpoint holding NaN (a parameter) or a negative second moment is refused by sample, eval, export
// and a resume, naming the tensor and element (exit 1); --allow-nonfinite loads it, for forensics. A run whose
// gradient norm is not finite stops there, as one whose loss is not.
TEST(Cli, CheckpointsWithNonFiniteValuesAreRefused) {
  TempDir dir;
  const StepTwoCheckpoint c = step_two_checkpoint(dir);
  const std::string& args = c.args;
  const std::string& good = c.file;
  const std::string data = dir.file("corpus.txt");
  std::filesystem::create_directories(dir.file("nan"));
  write_checkpoint_with(good, dir.file("nan/step_00000002.ttf"), "param/wte", std::nanf(""));
  std::filesystem::create_directories(dir.file("negv"));
  write_checkpoint_with(good, dir.file("negv/step_00000002.ttf"), "adam.v/wte", -1.0f);
  const std::string nan = dir.file("nan/step_00000002.ttf");
  for (const std::string& cmd : checkpoint_readers(nan, data, dir.file("hf"))) {
    CliRun r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_HAS(r.out, "param/wte holds nan at element 0 (not finite)");
  }
  CliRun forensics = run("sample " + nan + " --tokens 4 --backend cpu --allow-nonfinite");
  EXPECT_EQ(forensics.code, 0) << forensics.out;
  CliRun resume = run(args + " --checkpoint-dir " + dir.file("negv") + " --resume latest");
  EXPECT_EQ(resume.code, 1) << resume.out;
  EXPECT_HAS(resume.out, "adam.v/wte holds -1 at element 0 (a second moment below 0)");
  CliRun resume_nan = run(args + " --checkpoint-dir " + dir.file("nan") + " --resume latest");
  EXPECT_EQ(resume_nan.code, 1) << resume_nan.out;
  EXPECT_HAS(resume_nan.out, "param/wte holds nan at element 0");
}

// Issue 47: a checkpoint folder's `latest` is a file of its own holding one line: a symbolic link (to a file outside)
// is not followed and nothing it points at is printed; a second line, a NUL or a name that leaves the folder is
// refused without echoing the contents; the pointer tiertrain writes resumes.
TEST(Cli, LatestPointersAreFilesOfTheFoldersOwn) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(6000));
  const std::string args = "train --data " + data +
                           " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 4 --warmup 1 --backend cpu "
                           "--eval-every 0 --threads 1 --checkpoint-dir " + dir.file("ck");
  CliRun t = run(args + " --stop-at 2 --checkpoint-every 2");
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string latest = dir.file("ck/latest");
  const std::string secret = dir.write("secret.txt", "SECRET-FIRST-LINE\n");
  std::filesystem::remove(latest);
  std::filesystem::create_symlink(secret, latest);
  for (const std::string& cmd : {args + " --resume latest", "sample " + dir.file("ck") + " --tokens 2 --backend cpu"}) {
    CliRun r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_HAS(r.out, "is a symbolic link");
    EXPECT_EQ(r.out.find("SECRET"), std::string::npos) << r.out;
  }
  for (const std::string& text : {std::string("step_00000002.ttf\nSECRET-SECOND\n"),
                                  std::string("step_00000002.ttf\0SECRET", 24), std::string("../secret.txt\n"),
                                  std::string("..\n")}) {
    std::filesystem::remove(latest);
    std::ofstream(latest, std::ios::binary) << text;
    CliRun r = run(args + " --resume latest");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_HAS(r.out, "does not hold one line naming a checkpoint file beside it");
    EXPECT_EQ(r.out.find("SECRET"), std::string::npos) << r.out;
  }
  std::filesystem::remove(latest);
  std::ofstream(latest, std::ios::binary) << "step_00000002.ttf\n";
  CliRun ok = run(args + " --resume latest");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// Issue 47, through the binary: a request past the machine's memory is refused before anything is taken (it was a
// std::bad_alloc, rc 134); an output file or a tokenizer file that is a FIFO is refused at once (they hung); a data
// folder of validation shards alone is refused (it trained on them).
TEST(Cli, OversizedRequestsFifosAndValidationOnlyDataAreRefused) {
  TempDir dir;
  CliRun big = run("gen-features --out " + dir.file("f") + " --samples 68719476736 --dim 16777216");
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_HAS(big.out, "of features; this machine has");
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(4000));
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  CliRun jsonl = run("train --data " + data + " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 1 --warmup 1"
                     " --backend cpu --metrics-jsonl " + dir.file("fifo"));
  EXPECT_EQ(jsonl.code, 2) << jsonl.out;
  EXPECT_HAS(jsonl.out, "--metrics-jsonl " + dir.file("fifo") + ": is a FIFO, socket or device, not a file");
  std::filesystem::create_directories(dir.file("vocab"));
  testing::write_small_gpt2_vocab(dir.file("vocab"), {{"a", "b"}});
  std::filesystem::remove(dir.file("vocab/vocab.bpe"));
  ASSERT_EQ(mkfifo(dir.file("vocab/vocab.bpe").c_str(), 0600), 0);
  CliRun tok = run("tokenize " + data + " --tokenizer " + dir.file("vocab") + " --out " + dir.file("shards"));
  EXPECT_EQ(tok.code, 1) << tok.out;
  EXPECT_HAS(tok.out, "is a FIFO, socket or device, not a file");
  std::filesystem::create_directories(dir.file("valonly"));
  std::vector<uint16_t> tokens(600, 7);
  ASSERT_TRUE(data::write_token_shard(dir.file("valonly/val_000000.bin"), tokens).is_ok());
  CliRun val = run("train --data " + dir.file("valonly") +
                   " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 1 --warmup 1 --backend cpu");
  EXPECT_EQ(val.code, 1) << val.out;
  EXPECT_HAS(val.out, "holds validation shards (names with \"val\") and no training shard");
}

// Issue 47: numbers CLI11's own checks let through are usage errors (exit 2) naming the flag: NaN and negative
// learning rates and step factors, a negative seed on an unsigned option, a negative or NaN grace.
TEST(Cli, NonFiniteAndNegativeNumbersAreUsageErrors) {
  TempDir dir;
  for (const std::string& args :
       {std::string("train-features --data ") + dir.path() + " --lr nan", std::string("train-features --data ") +
        dir.path() + " --lr -1", std::string("comm-bench -f nan"), std::string("sample ") + dir.path() + " --seed -1",
        std::string("launch -n 1 --grace nan -- true"), std::string("launch -n 1 --grace -1 -- true")}) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_TRUE(r.out.find("not a finite number") != std::string::npos ||
                r.out.find("must be") != std::string::npos || r.out.find("not a whole number") != std::string::npos)
        << args << "\n" << r.out;
  }
}

TEST(Cli, LlamaOverAMeshTrainsTheOneProcessModel) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --family llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --ffn 48 "
                           "--qkv-bias true --tied-embeddings false --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 6 --eval-batches 2 --threads 1 --log-every 4";
  struct Case {
    std::string plan, mesh;
    int ranks;
  };
  for (const Case& c : {Case{"in-core", "model=2", 2}, Case{"recompute", "data=2,model=2", 4},
                        Case{"offload-all", "data=2", 2}}) {
    SCOPED_TRACE(c.plan + " " + c.mesh);
    const std::string one = dir.path() + "/one-" + c.plan + ".json", mesh = dir.path() + "/mesh-" + c.plan + ".json";
    CliRun a = run(args + " --plan " + c.plan + " --metrics-out " + one);
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_HAS(a.out, "model: Llama L2 d32 H4 KV2 F48 T16 V256");
    CliRun b = run("launch -n " + std::to_string(c.ranks) + " -- " + bin + " " + args + " --plan " + c.plan +
                   " --mesh " + c.mesh + " --metrics-out " + mesh);
    ASSERT_EQ(b.code, 0) << b.out;
    expect_same_curve(one, mesh, c.plan + " " + c.mesh);
    const nlohmann::json x = nlohmann::json::parse(read_file(one)), y = nlohmann::json::parse(read_file(mesh));
    ASSERT_EQ(x.at("val").size(), 2u);
    ASSERT_EQ(y.at("val").size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(x["val"][i]["loss"].get<double>(), y["val"][i]["loss"].get<double>(), 1e-6);
  }
  // A checkpoint of the model=2 run at step 6 (the whole model's layout) continues in one process.
  const std::string ck = dir.path() + "/ck";
  CliRun half = run("launch -n 2 -- " + bin + " " + args + " --plan in-core --mesh model=2 --stop-at 6 "
                    "--checkpoint-dir " + ck + " --checkpoint-every 6");
  ASSERT_EQ(half.code, 0) << half.out;
  const std::string rest = dir.path() + "/rest.json", whole = dir.path() + "/whole.json";
  CliRun r = run(args + " --plan in-core --checkpoint-dir " + ck + " --resume latest --metrics-out " + rest);
  ASSERT_EQ(r.code, 0) << r.out;
  CliRun w = run(args + " --plan in-core --metrics-out " + whole);
  ASSERT_EQ(w.code, 0) << w.out;
  const nlohmann::json a = nlohmann::json::parse(read_file(rest)), b = nlohmann::json::parse(read_file(whole));
  ASSERT_FALSE(a["steps"].empty());
  EXPECT_EQ(a["steps"][0]["step"], 7);
  for (const auto& s : a["steps"]) {
    const auto& t = b["steps"][s["step"].get<size_t>() - 1];
    EXPECT_NEAR(s["loss"].get<double>(), t["loss"].get<double>(), 1e-5) << "step " << s["step"];
  }
}

// Checkpoints hold the whole model in its one-device layout whatever the mesh: data=2,model=2 stops at step 4, model=4
// continues to step 8, one process to the end; every piece follows the uninterrupted run.
TEST(Cli, TensorParallelCheckpointsContinueOnAnotherMesh) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 4 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 0 --threads 1";
  const std::string ck = " --checkpoint-dir " + dir.path() + "/ck";
  CliRun whole = run(args + " --metrics-out " + dir.path() + "/whole.json");
  ASSERT_EQ(whole.code, 0) << whole.out;
  CliRun first = run("launch -n 4 -- " + bin + " " + args + " --mesh data=2,model=2 --stop-at 4" + ck);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_HAS(first.out, "[rank 0] step      4 | checkpoint written");
  CliRun second = run("launch -n 4 -- " + bin + " " + args + " --mesh model=4 --stop-at 8 --resume" + ck +
                      " --metrics-out " + dir.path() + "/second.json");
  ASSERT_EQ(second.code, 0) << second.out;
  CliRun third = run(args + " --resume" + ck + " --metrics-out " + dir.path() + "/third.json");
  ASSERT_EQ(third.code, 0) << third.out;
  const auto w = loss_and_norm(dir.path() + "/whole.json");
  ASSERT_EQ(w.size(), 12u);
  for (const auto& [part, from] : {std::pair<const char*, size_t>{"second", 4}, {"third", 8}}) {
    const auto p = loss_and_norm(dir.path() + "/" + part + ".json");
    ASSERT_EQ(p.size(), 4u) << part;
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_NEAR(p[i].first, w[from + i].first, 1e-6 * w[from + i].first) << part << " step " << from + i + 1;
      EXPECT_NEAR(p[i].second, w[from + i].second, 1e-5 * w[from + i].second) << part << " step " << from + i + 1;
    }
  }
}

// Note [sharded optimizer] in exec/optimizer.h (--shard-optimizer, ZeRO-1): each data-parallel rank updates its
// share of the parameters with its share of the moments, then the shares go to every rank (one allgather a segment
// where the ranks divide it: data=2; a broadcast from each owner where they do not: data=3): bit for bit the
// unsharded run (on data=2, data=3 and data=2,model=2), with half the moments' memory on 2 ranks; checkpoints gather
// the shares, so
// a sharded run continues in one process where the uninterrupted run goes, and a one-process checkpoint continues
// sharded; with the CPU optimizer it is refused.
TEST(Cli, ShardedOptimizerIsTheUnshardedRunWithLessMemory) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(30000));
  const std::string bin = TT_BINARY;
  const std::string args = "train --data " + data +
                           " --backend cpu --layers 2 --dim 32 --heads 4 --seq 16 --batch 8 --steps 12 --warmup 2 "
                           "--eval-every 6 --eval-batches 2 --threads 1";
  for (const auto& [mesh, ranks] : {std::pair<std::string, int>{"data=2", 2}, {"data=3", 3}, {"data=2,model=2", 4}}) {
    std::vector<nlohmann::json> runs;
    for (const char* shard : {"", " --shard-optimizer"}) {
      const std::string out = dir.path() + "/" + mesh + (shard[0] ? "-sharded" : "") + ".json";
      // (batch 8 over data=3 does not divide: 6 there)
      CliRun r = run("launch -n " + std::to_string(ranks) + " -- " + bin + " " + args + " --mesh " + mesh + shard +
                     (ranks == 3 ? " --batch 6" : "") + " --metrics-out " + out);
      ASSERT_EQ(r.code, 0) << r.out;
      runs.push_back(nlohmann::json::parse(read_file(out)));
    }
    ASSERT_EQ(runs[1]["steps"].size(), 12u);
    for (size_t i = 0; i < 12; ++i) {
      EXPECT_EQ(runs[1]["steps"][i]["loss"], runs[0]["steps"][i]["loss"]) << mesh << " step " << i + 1;
      EXPECT_EQ(runs[1]["steps"][i]["grad_norm"], runs[0]["steps"][i]["grad_norm"]) << mesh << " step " << i + 1;
    }
    EXPECT_EQ(runs[1]["val"], runs[0]["val"]) << mesh;
  }
  auto optim_state = [&](const std::string& extra) {
    return dry_run_field(args + " --mesh data=2" + extra, "optim_state ", ",");
  };
  EXPECT_EQ(optim_state(""), "optim_state 267.00 KiB") << "the test's model changed: update the figures";
  EXPECT_EQ(optim_state(" --shard-optimizer"), "optim_state 133.50 KiB");
  // Without a data dimension there is nothing to shard: said, and the run goes on unsharded.
  CliRun alone = run(args + " --steps 1 --eval-every 0 --shard-optimizer");
  EXPECT_EQ(alone.code, 0) << alone.out;
  EXPECT_HAS(alone.out, "--shard-optimizer: nothing to shard");
  // Checkpoints: sharded -> one process, and one process -> sharded, each where the uninterrupted run goes.
  const std::string plain = "train --data " + data +
                            " --backend cpu --layers 2 --dim 32 --heads 4 --seq 16 --batch 8 --steps 12 --warmup 2 "
                            "--eval-every 0 --threads 1";
  CliRun whole = run(plain + " --metrics-out " + dir.path() + "/whole.json");
  ASSERT_EQ(whole.code, 0) << whole.out;
  CliRun first = run("launch -n 2 -- " + bin + " " + plain + " --mesh data=2 --shard-optimizer --stop-at 4 "
                     "--checkpoint-dir " + dir.path() + "/ck");
  ASSERT_EQ(first.code, 0) << first.out;
  CliRun second = run(plain + " --stop-at 8 --resume --checkpoint-dir " + dir.path() + "/ck --metrics-out " +
                      dir.path() + "/second.json");
  ASSERT_EQ(second.code, 0) << second.out;
  CliRun third = run("launch -n 2 -- " + bin + " " + plain + " --mesh data=2 --shard-optimizer --resume "
                     "--checkpoint-dir " + dir.path() + "/ck --metrics-out " + dir.path() + "/third.json");
  ASSERT_EQ(third.code, 0) << third.out;
  const auto w = loss_and_norm(dir.path() + "/whole.json");
  for (const auto& [part, from] : {std::pair<const char*, size_t>{"second", 4}, {"third", 8}}) {
    const auto p = loss_and_norm(dir.path() + "/" + part + ".json");
    ASSERT_EQ(p.size(), 4u) << part;
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_NEAR(p[i].first, w[from + i].first, 1e-6 * w[from + i].first) << part << " step " << from + i + 1;
  }
  // The CPU optimizer sharded too (ZeRO-Offload's split): each rank's host keeps and updates its shares alone, the
  // device copies gathered after; the same bits as unsharded, with the speculative update too, on equal shares
  // (data=2: allgathers) and unequal ones (data=3: broadcasts), in half the host memory at data=2.
  for (const auto& [mesh, ranks, extra] : {std::tuple<std::string, int, std::string>{"data=2", 2, ""},
                                          {"data=3", 3, " --batch 6"},
                                          {"data=2", 2, " --speculative-update"}}) {
    std::vector<nlohmann::json> runs;
    for (const char* shard : {"", " --shard-optimizer"}) {
      const std::string out = dir.path() + "/cpu-" + mesh + (shard[0] ? "-sharded" : "") + ".json";
      CliRun r = run("launch -n " + std::to_string(ranks) + " -- " + bin + " " + args + " --mesh " + mesh + shard +
                     " --optimizer cpu" + extra + " --metrics-out " + out);
      ASSERT_EQ(r.code, 0) << r.out;
      runs.push_back(nlohmann::json::parse(read_file(out)));
    }
    ASSERT_EQ(runs[1]["steps"].size(), 12u);
    for (size_t i = 0; i < 12; ++i) {
      EXPECT_EQ(runs[1]["steps"][i]["loss"], runs[0]["steps"][i]["loss"]) << mesh << extra << " step " << i + 1;
      EXPECT_EQ(runs[1]["steps"][i]["grad_norm"], runs[0]["steps"][i]["grad_norm"])
          << mesh << extra << " step " << i + 1;
    }
    EXPECT_EQ(runs[1]["val"], runs[0]["val"]) << mesh << extra;
  }
  auto host_need = [&](const std::string& extra) {
    return dry_run_field(args + " --mesh data=2 --optimizer cpu" + extra, "fits: ", " pageable");
  };
  // In the (pinned) slab the master and the gradients' copy, 8 bytes a parameter (267 KiB), 1.25 KiB of input staging
  // and the norm, and 1 KiB of the steps' two readback slots (Note [host one step ahead]); m and v pageable (Note
  // [pinned and pageable host memory]): 267 KiB; sharded, each segment's half of both.
  EXPECT_HAS(host_need(""), "fits: 269.25 KiB in the host slab (param 133.50 KiB, grad 133.50 KiB, ");
  EXPECT_HAS(host_need(""), "), 267.00 KiB") << "the test's model changed: update the figures";
  EXPECT_HAS(host_need(" --shard-optimizer"), "fits: 135.75 KiB in the host slab");
  EXPECT_HAS(host_need(" --shard-optimizer"), "), 133.50 KiB");
  // Saved sharded on the host, resumed by one process with the device optimizer: where the uninterrupted run goes.
  CliRun cpu_first = run("launch -n 2 -- " + bin + " " + plain + " --mesh data=2 --shard-optimizer --optimizer cpu "
                         "--stop-at 4 --checkpoint-dir " + dir.path() + "/ck-cpu");
  ASSERT_EQ(cpu_first.code, 0) << cpu_first.out;
  CliRun cpu_second = run(plain + " --resume --checkpoint-dir " + dir.path() + "/ck-cpu --metrics-out " + dir.path() +
                          "/cpu-second.json");
  ASSERT_EQ(cpu_second.code, 0) << cpu_second.out;
  const auto c2 = loss_and_norm(dir.path() + "/cpu-second.json");
  ASSERT_EQ(c2.size(), 8u);
  for (size_t i = 0; i < c2.size(); ++i)
    EXPECT_NEAR(c2[i].first, w[4 + i].first, 1e-6 * w[4 + i].first) << "step " << 4 + i + 1;
  // What keeps the whole compute copy or the gradients on the host does not shard.
  CliRun streamed =
      run("launch -n 2 -- " + bin + " " + plain + " --mesh data=2 --shard-optimizer --plan offload-params");
  EXPECT_NE(streamed.code, 0) << streamed.out;
  EXPECT_HAS(streamed.out, "--shard-optimizer with parameters or gradients streamed from the host");
}

// Issue 21's large-input workload (apps/features.h): an MLP on dense features, data parallel; the three input modes
// feed each rank the same rows (bit-identical runs), two ranks follow the one-process run (within 1e-5), it learns,
// and bad data or options are named.
TEST(Cli, FeatureWorkloadInputModesGiveTheSameRun) {
  TempDir dir;
  const std::string bin = TT_BINARY, data = dir.path() + "/feat";
  CliRun gen = run("gen-features --out " + data + " --samples 3000 --dim 96 --classes 6");
  ASSERT_EQ(gen.code, 0) << gen.out;
  EXPECT_HAS(gen.out, "features.npy (3000 x 96 float32)");
  const std::string args = "train-features --data " + data + " --backend cpu --batch 256 --hidden 32 --steps 8 "
                           "--threads 1 --lr 0.01";
  CliRun one = run(args + " --metrics-out " + dir.path() + "/one.json");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_HAS(one.out, "96 -> 32 -> 6");
  std::vector<nlohmann::json> runs;
  for (const char* input : {"direct", "via-root", "replicated"}) {
    const std::string out = dir.path() + "/" + input + ".json";
    CliRun r = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --input " + input + " --metrics-out " + out);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, std::string("input ") + input);
    runs.push_back(nlohmann::json::parse(read_file(out)));
    EXPECT_EQ(runs.back()["ranks"], 2);
    EXPECT_EQ(runs.back()["input_bytes_per_step"], 256 * 97 * 4);
  }
  const nlohmann::json o = nlohmann::json::parse(read_file(dir.path() + "/one.json"));
  ASSERT_EQ(o["steps"].size(), 8u);
  for (size_t k = 0; k < runs.size(); ++k) {
    ASSERT_EQ(runs[k]["steps"].size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(runs[k]["steps"][i]["loss"], runs[0]["steps"][i]["loss"]) << k << " step " << i + 1;
      const double a = o["steps"][i]["loss"].get<double>(), b = runs[k]["steps"][i]["loss"].get<double>();
      EXPECT_NEAR(a, b, 1e-5 * a) << k << " step " << i + 1;
    }
  }
  EXPECT_LT(o["steps"][7]["loss"].get<double>(), o["steps"][0]["loss"].get<double>() - 0.3) << "it learns";
  CliRun missing = run("train-features --data " + dir.path() + "/none --backend cpu");
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_HAS(missing.out, "none/features.npy");
  // Issue 47: a bad .npy is a failure of the data (exit 1, as a missing one), not of the flags: too short, no magic,
  // Fortran order, another dtype, a FIFO (refused, not opened: that would block), a negative label.
  {
    const std::string feats = read_file(data + "/features.npy"), labels = read_file(data + "/labels.npy");
    auto with = [&](const std::string& name, const std::string& features, const std::string& label_bytes) {
      const std::string d = dir.path() + "/" + name;
      std::filesystem::create_directories(d);
      std::ofstream(d + "/features.npy", std::ios::binary) << features;
      std::ofstream(d + "/labels.npy", std::ios::binary) << label_bytes;
      return run("train-features --data " + d + " --backend cpu --steps 1", "timeout 30");
    };
    std::string fortran = feats, f8 = feats, negative = labels;
    fortran.replace(fortran.find("'fortran_order': False"), 22, "'fortran_order': True ");
    f8.replace(f8.find("<f4"), 3, "<i4");
    const size_t data_at = negative.find('\n') + 1;  // the header ends with a newline
    const int32_t minus_one = -1;
    negative.replace(data_at, 4, reinterpret_cast<const char*>(&minus_one), 4);
    for (const auto& [name, f, l, says] :
         std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
             {"short", "\x93NUM", labels, "not a .npy file (too short)"},
             {"magic", "GARBAGE-GARBAGE-GARBAGE", labels, "not a .npy file (no magic)"},
             {"fortran", fortran, labels, "fortran"},
             {"dtype", f8, labels, "must be a 2-D float32 array"},
             {"label", feats, negative, "label -1 at row 0"}}) {
      CliRun r = with(name, f, l);
      EXPECT_EQ(r.code, 1) << name << "\n" << r.out;
      EXPECT_HAS(r.out, says);
    }
    const std::string d = dir.path() + "/fifo";
    std::filesystem::create_directories(d);
    ASSERT_EQ(mkfifo((d + "/features.npy").c_str(), 0600), 0);
    std::ofstream(d + "/labels.npy", std::ios::binary) << labels;
    CliRun fifo = run("train-features --data " + d + " --backend cpu --steps 1", "timeout 30");
    EXPECT_EQ(fifo.code, 1) << fifo.out;
    EXPECT_HAS(fifo.out, "is a FIFO, socket or device, not a file");
  }
  CliRun odd = run("launch -n 2 -- " + bin + " train-features --data " + data + " --backend cpu --mesh data=2 --batch 255");
  EXPECT_NE(odd.code, 0) << odd.out;
  EXPECT_HAS(odd.out, "--batch 255 is not divisible by the 2 ranks");
  CliRun two_d = run(args + " --mesh data=1,model=1");
  EXPECT_EQ(two_d.code, 2) << two_d.out;
  EXPECT_HAS(two_d.out, "data parallel only");
}

TEST(Cli, MeshMistakesAreNamedBeforeAnythingRuns) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", tt::testing::synthetic_text(20000));
  const std::string bin = TT_BINARY;
  const std::string args = small(data) + " --backend cpu --steps 2 --batch 8";
  CliRun alone = run(args + " --mesh data=2");
  EXPECT_EQ(alone.code, 2) << alone.out;
  EXPECT_HAS(alone.out, "--mesh data=2 needs 2 ranks, and this job has 1 (start it with tiertrain launch -n 2");
  CliRun embed = run("launch -n 2 -- " + bin + " " + args + " --mesh model=2 --layout heads:model,ff:model,embed:model");
  EXPECT_NE(embed.code, 0) << embed.out;
  EXPECT_HAS(embed.out, "splits embed over mesh dimension model: the model width is not split");
  CliRun half = run("launch -n 2 -- " + bin + " " + args + " --mesh model=2 --layout heads:model");
  EXPECT_NE(half.code, 0) << half.out;
  EXPECT_HAS(half.out, "heads and ff must be split over the same mesh dimension");
  CliRun heads = run("launch -n 4 -- " + bin + " " + args + " --mesh model=4");
  EXPECT_NE(heads.code, 0) << heads.out;
  EXPECT_HAS(heads.out, "heads is 2 (attention heads), not divisible by the 4 ranks");
  CliRun three = run("launch -n 3 -- " + bin + " " + args + " --mesh data=3");
  EXPECT_NE(three.code, 0) << three.out;
  EXPECT_HAS(three.out, "batch is 8 (--batch: sequences a step over all ranks), not divisible by the 3 ranks");
  CliRun bad = run(args + " --mesh data=0");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_HAS(bad.out, "dimension data has size '0'");
  CliRun idle = run("launch -n 2 -- " + bin + " " + args + " --mesh data=1,pipe=2");
  EXPECT_NE(idle.code, 0) << idle.out;
  EXPECT_HAS(idle.out, "mesh dimension pipe (2 ranks) carries no tensor dimension");
  // A rank started with another configuration: named on that rank, and every rank stops.
  CliRun other = run("launch -n 2 -- sh -c 'if [ \"$RANK\" = 1 ]; then exec " + bin + " " + args +
                     " --mesh data=2 --lr 0.001; else exec " + bin + " " + args + " --mesh data=2; fi'");
  EXPECT_NE(other.code, 0) << other.out;
  EXPECT_HAS(other.out, "rank 1 of the mesh was started with another configuration than rank 0: --lr 0.001");
  EXPECT_EQ(other.out.find("done:"), std::string::npos) << other.out;
  // The gradient type each rank resolved is compared too (Note [bf16 gradients]: the reductions read it).
  CliRun grads = run("launch -n 2 -- sh -c 'if [ \"$RANK\" = 1 ]; then exec " + bin + " " + args +
                     " --mesh data=2 --grad-dtype bf16; else exec " + bin + " " + args + " --mesh data=2; fi'");
  EXPECT_NE(grads.code, 0) << grads.out;
  EXPECT_HAS(grads.out, "another configuration than rank 0: --grad-dtype \"bf16\" (rank 0: \"f32\")");
  // A rank that dies mid-run (killed after a second): the job stops at once, naming it.
  const auto t0 = std::chrono::steady_clock::now();
  CliRun dies = run("launch -n 2 -- sh -c 'if [ \"$RANK\" = 1 ]; then exec timeout -s KILL 1 " + bin + " " + args +
                    " --steps 100000 --mesh data=2; else exec " + bin + " " + args + " --steps 100000 --mesh data=2; "
                    "fi'");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(dies.code, 0) << dies.out;
  EXPECT_HAS(dies.out, "rank 1 (pid");
  EXPECT_LT(secs, 30) << dies.out;
  CliRun automatic = run("launch -n 2 -- " + bin + " " + args + " --mesh data=2 --plan auto");
  EXPECT_EQ(automatic.code, 2) << automatic.out;
  EXPECT_HAS(automatic.out, "--plan auto with --mesh");
}

TEST(Cli, BadFlagValues) {
  CliRun nonnum = run("train --steps abc");
  EXPECT_EQ(nonnum.code, 2);
  EXPECT_HAS(nonnum.out, "--steps: 'abc' is not an integer");

  CliRun range = run("train --batch 0");
  EXPECT_EQ(range.code, 2);
  EXPECT_HAS(range.out, "--batch: 0 is out of range");

  CliRun lr = run("train --lr fast");
  EXPECT_EQ(lr.code, 2);
  EXPECT_HAS(lr.out, "--lr: 'fast' is not a number");

  CliRun bytes = run("train --device-budget 12XB");
  EXPECT_EQ(bytes.code, 2);
  EXPECT_HAS(bytes.out, "--device-budget: '12XB' is not a byte size");

  CliRun choice = run("train --backend tpu");
  EXPECT_EQ(choice.code, 2);
  EXPECT_HAS(choice.out, "--backend: 'tpu' is not one of auto, cpu, cuda");

  CliRun heads = run("train --dim 100 --heads 3");
  EXPECT_EQ(heads.code, 2);
  EXPECT_HAS(heads.out, "--dim 100 is not divisible by --heads 3");

  CliRun unknown = run("train --no-such-flag 1");
  EXPECT_EQ(unknown.code, 2);

  CliRun env = run("train --steps 1", "TIERTRAIN_BATCH=-4");
  EXPECT_EQ(env.code, 2);
  EXPECT_HAS(env.out, "TIERTRAIN_BATCH: -4 is out of range");
}

// tiertrain plan and calibrate (perf/): the machine calibrated on first use into XDG_CACHE_HOME (said once, then
// cached), every shortcut and the automatic plan predicted, bad requests and bad profiles named.
// Note [pricing collectives] (perf/costs.cc): calibrate under `launch -n 2` measures an allreduce over two ranks
// (every rank together; rank 0 keeps the profile), and plans of a data=2 and a model=2 mesh are priced with it;
// data=4 has no rate and says so; a later calibration of one process keeps the two-rank rate.
TEST(Cli, CalibrateUnderLaunchPricesTheMeshsCollectives) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string env = "XDG_CACHE_HOME=" + dir.file("cache");
  const std::string model =
      " --backend cpu --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --threads 1 --data " + data;
  const std::string profile = dir.file("profile.json");
  CliRun cal = run("launch -n 2 -- " + std::string(TT_BINARY) + " calibrate" + model + " --out " + profile, env);
  ASSERT_EQ(cal.code, 0) << cal.out;
  EXPECT_HAS(cal.out, "[rank 0] calibrate: an allreduce over 2 ranks");
  EXPECT_HAS(cal.out, "[rank 0]   allreduce x2");
  EXPECT_HAS(cal.out, "[rank 1] calibrate: rank 1 measured the allreduce with the others");
  const nlohmann::json j = nlohmann::json::parse(read_file(profile));
  ASSERT_TRUE(j.contains("allreduce")) << j.dump().substr(0, 500);
  EXPECT_GT(j["allreduce"]["2"]["bytes_per_s"].get<double>(), 0);
  EXPECT_EQ(j["allreduce"]["2"]["points"].size(), 6u);  // 64 KiB to 64 MiB, by 4
  CliRun two = run("plan" + model + " --mesh data=2 --machine-profile " + profile, env);
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_HAS(two.out, "its collectives priced from the profile's allreduce rate for their ranks");
  EXPECT_EQ(two.out.find("are unpriced"), std::string::npos) << two.out;
  // The model dimension's sums over the same two ranks are priced at the same rate.
  CliRun tp = run("plan" + model + " --mesh model=2 --machine-profile " + profile, env);
  ASSERT_EQ(tp.code, 0) << tp.out;
  EXPECT_EQ(tp.out.find("are unpriced"), std::string::npos) << tp.out;
  CliRun four = run("plan" + model + " --mesh data=4 --machine-profile " + profile, env);
  ASSERT_EQ(four.code, 0) << four.out;
  EXPECT_HAS(four.out, "the mesh's collectives are unpriced where the profile has no allreduce rate");
  EXPECT_HAS(four.out, "tiertrain launch -n 4 -- tiertrain calibrate");
  // The cache holds the rate too, and a later calibration of one process keeps it there and in --out.
  CliRun cached = run("plan" + model + " --mesh data=2", env);
  ASSERT_EQ(cached.code, 0) << cached.out;
  EXPECT_EQ(cached.out.find("are unpriced"), std::string::npos) << cached.out;
  CliRun again = run("calibrate" + model + " --out " + profile, env);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(nlohmann::json::parse(read_file(profile)).contains("allreduce")) << "the two-rank rate was dropped";
}

TEST(Cli, PlanPredictsEveryPlanAndCalibratesOnce) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string env = "XDG_CACHE_HOME=" + dir.file("cache");
  const std::string model = " --layers 4 --dim 32 --heads 2 --seq 32 --batch 4 --threads 1 --data " + data;
  CliRun first = run("plan" + model + " --device-budget 1500KiB", env);
  EXPECT_EQ(first.code, 0) << first.out;
  EXPECT_HAS(first.out, "calibrate: measuring this machine");
  for (const char* row : {"in-core ", "in-core-selective ", "recompute ", "swap-activations ",
                          "swap-attention-recompute-mlp-norms ",
                          "offload-all ", "um ", "um-advised ", "um-swap-activations ", "auto "})
    EXPECT_HAS(first.out, std::string("\n") + row);
  EXPECT_HAS(first.out, "auto plan: ");
  EXPECT_HAS(first.out, "(in-core needs ");
  int profiles = 0;
  for (const auto& e : fs::directory_iterator(dir.file("cache") + "/tiertrain")) profiles += e.path().extension() == ".json";
  EXPECT_EQ(profiles, 1);

  CliRun again = run("plan" + model + " --plans in-core/device,auto --explain", env);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out.find("calibrate: measuring"), std::string::npos) << "the cached profile is used";
  EXPECT_EQ(again.out.find("\nrecompute "), std::string::npos) << "only the rows asked for: " << again.out;
  EXPECT_HAS(again.out, "searched ");

  CliRun bad_row = run("plan" + model + " --plans in-core,sideways", env);
  EXPECT_EQ(bad_row.code, 2);
  EXPECT_HAS(bad_row.out, "--plans: 'sideways' is none of the plans");

  // What-if: another link and memory size; a sweep over budgets writes its CSV and plot.
  CliRun what = run("plan" + model + " --what-if link=1GB/s,device_mem=2MiB", env);
  EXPECT_EQ(what.code, 0) << what.out;
  EXPECT_HAS(what.out, "what-if: h2d 1.0 GB/s, d2h 1.0 GB/s, device memory 2.00 MiB");
  EXPECT_HAS(what.out, "budget 1.90 MiB");
  // Unified Memory beyond the budget: priced as oversubscribed (Note [oversubscribed Unified Memory]), never chosen.
  EXPECT_HAS(what.out, "\num                                   device    over ");
  EXPECT_HAS(what.out, "over: runs only with --um-allow-oversubscription");
  CliRun preset = run("plan" + model + " --what-if v100-pcie3 --plans in-core", env);
  EXPECT_EQ(preset.code, 0) << preset.out;
  EXPECT_HAS(preset.out, "what-if v100-pcie3");
  EXPECT_EQ(run("plan" + model + " --what-if warp-drive", env).code, 2);
  EXPECT_EQ(run("plan" + model + " --what-if link=fast", env).code, 2);
  EXPECT_EQ(run("plan" + model + " --what-if h100-pcie5 --measure 2", env).code, 2);
  CliRun sweep = run("plan" + model + " --plans auto --sweep-budget 1MiB:3MiB:1MiB --sweep-out " + dir.file("sw"), env);
  EXPECT_EQ(sweep.code, 0) << sweep.out;
  EXPECT_HAS(sweep.out, "sweep: 3 budgets written");
  const std::string csv = read_file(dir.file("sw.csv"));
  EXPECT_HAS(csv, "budget_bytes,budget_gib,strategy,fits,ms_per_step,detail\n");
  EXPECT_HAS(csv, "3145728,");
  EXPECT_HAS(csv, ",auto,1,");
  EXPECT_HAS(read_file(dir.file("sw.svg")), "<polyline");
  EXPECT_EQ(run("plan" + model + " --sweep-budget 3MiB:1MiB:1MiB", env).code, 2);

  CliRun missing = run("plan" + model + " --machine-profile " + dir.file("none.json"), env);
  EXPECT_EQ(missing.code, 1);
  EXPECT_HAS(missing.out, "no such file");

  // calibrate --out writes a profile that plan reads; damaged, it is refused naming the field.
  CliRun cal = run("calibrate" + model + " --heat 0.01 --out " + dir.file("p.json"), env);
  EXPECT_EQ(cal.code, 0) << cal.out;
  EXPECT_HAS(cal.out, "calibrated in ");
  EXPECT_HAS(cal.out, "h2d pinned");
  EXPECT_HAS(cal.out, "UM to host");  // the CPU backend's emulated managed memory
  // A profile from before Unified Memory's rates: plan measures them when a row needs them.
  nlohmann::json no_um = nlohmann::json::parse(read_file(dir.file("p.json")));
  ASSERT_TRUE(no_um.contains("um"));
  no_um.erase("um");
  std::ofstream(dir.file("no_um.json")) << no_um.dump();
  CliRun older = run("plan" + model + " --plans um-swap-activations --machine-profile " + dir.file("no_um.json"), env);
  EXPECT_EQ(older.code, 0) << older.out;
  EXPECT_HAS(older.out, "\num-swap-activations ");
  CliRun with = run("plan" + model + " --plans in-core --machine-profile " + dir.file("p.json"), env);
  EXPECT_EQ(with.code, 0) << with.out;
  EXPECT_HAS(with.out, "profile: " + dir.file("p.json"));
  nlohmann::json j = nlohmann::json::parse(read_file(dir.file("p.json")));
  j["links"]["h2d_pinned"]["bytes_per_s"] = -1;
  std::ofstream(dir.file("bad.json")) << j.dump();
  CliRun bad = run("plan" + model + " --machine-profile " + dir.file("bad.json"), env);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_HAS(bad.out, "profile.links.h2d_pinned.bytes_per_s");
  j = nlohmann::json::parse(read_file(dir.file("p.json")));
  j["machine"]["device"] = "another device";
  std::ofstream(dir.file("other.json")) << j.dump();
  CliRun other = run("plan" + model + " --machine-profile " + dir.file("other.json"), env);
  EXPECT_EQ(other.code, 1) << other.out;
  EXPECT_HAS(other.out, "machine.device is 'another device'");
}

// --plan auto says what it chose and trains with it; with no --plan a run whose in-core plan does not fit chooses the
// same way, and one that nothing fits keeps the error that names every plan's need.
TEST(Cli, TrainChoosesThePlanWhenAskedOrWhenInCoreDoesNotFit) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string env = "XDG_CACHE_HOME=" + dir.file("cache");
  const std::string model = "train --layers 4 --dim 32 --heads 2 --seq 32 --batch 4 --threads 1 --eval-every 0 "
                            "--steps 2 --data " + data;
  CliRun asked = run(model + " --plan auto --device-budget 1500KiB", env);
  EXPECT_EQ(asked.code, 0) << asked.out;
  EXPECT_HAS(asked.out, "auto plan: ");
  EXPECT_HAS(asked.out, "step      2/2");
  CliRun implied = run(model + " --device-budget 1500KiB --explain", env);
  EXPECT_EQ(implied.code, 0) << implied.out;
  EXPECT_HAS(implied.out, "choosing a plan (--plan auto)");
  EXPECT_HAS(implied.out, "searched ");
  EXPECT_HAS(implied.out, "step      2/2");
  CliRun fits = run(model, env);
  EXPECT_EQ(fits.code, 0) << fits.out;
  EXPECT_EQ(fits.out.find("auto plan"), std::string::npos) << "in-core fits: nothing to choose";
  CliRun nothing = run(model + " --device-budget 200KiB", env);
  EXPECT_EQ(nothing.code, 1) << nothing.out;
  EXPECT_HAS(nothing.out, "does not fit the device budget");
  CliRun dry = run(model + " --plan auto --dry-run", env);
  EXPECT_EQ(dry.code, 2) << dry.out;
  EXPECT_HAS(dry.out, "tiertrain plan predicts the automatic plan");
  CliRun opt = run(model + " --plan auto --optimizer cpu --device-budget 1500KiB", env);
  EXPECT_EQ(opt.code, 2) << opt.out;
  EXPECT_HAS(opt.out, "leave --optimizer at 'plan'");
  // Note [automatic micro-batch]: --micro-batch auto splits the step of --batch 4 with the plan, trains, and says
  // what it tried; it needs --plan auto.
  CliRun micro = run(model + " --plan auto --micro-batch auto --device-budget 1500KiB --explain", env);
  EXPECT_EQ(micro.code, 0) << micro.out;
  EXPECT_HAS(micro.out, "auto micro-batch: ");
  EXPECT_HAS(micro.out, "micro-batch 4 x 1: ");
  EXPECT_HAS(micro.out, "micro-batch 1 x 4: ");
  EXPECT_HAS(micro.out, "step      2/2");
  CliRun alone = run(model + " --micro-batch auto", env);
  EXPECT_EQ(alone.code, 2) << alone.out;
  EXPECT_HAS(alone.out, "add --plan auto");
  CliRun word = run(model + " --micro-batch some", env);
  EXPECT_EQ(word.code, 2) << word.out;
}

// Issue 25's first cases: an output file that names a folder is refused before training (it used to fail after it,
// leaving FOLDER.tmp); comm-bench from 0 bytes used to loop forever; an endless or overflowing collective deadline
// used to fail every rank at once.
TEST(Cli, OutputFoldersEndlessSizesAndDeadlinesAreRefusedAtOnce) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  fs::create_directories(dir.file("out"));
  for (const char* flag : {"--metrics-out", "--trace"}) {
    CliRun r = run(small(data) + " --steps 2 " + flag + " " + dir.file("out"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_HAS(r.out, std::string(flag) + " " + dir.file("out") + ": is a folder");
    EXPECT_EQ(r.out.find("step "), std::string::npos) << "no training may start";
  }
  EXPECT_FALSE(fs::exists(dir.file("out") + ".tmp"));
  CliRun sched = run(small(data) + " --dry-run --schedule " + dir.file("out"));
  EXPECT_EQ(sched.code, 2) << sched.out;

  CliRun zero = run("comm-bench -b 0 -e 8", "timeout 60");
  EXPECT_EQ(zero.code, 2) << zero.out;
  EXPECT_HAS(zero.out, "-b 0: the smallest size must be at least 1 byte");
  for (const char* t : {"inf", "1e400", "1e17", "nan", "-1", "abc", ""}) {
    if (std::string(t).empty()) continue;  // unset: the default
    CliRun r = run("comm-bench -b 8 -e 8", std::string("timeout 60 env TIERTRAIN_COMM_TIMEOUT=") + t);
    EXPECT_EQ(r.code, 2) << t << ": " << r.out;
    EXPECT_HAS(r.out, "at most 604800");
  }
  CliRun ok = run("comm-bench -b 8 -e 8 -n 2 -w 1", "timeout 60 env TIERTRAIN_COMM_TIMEOUT=30");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// A path that is not UTF-8 (Linux paths are bytes) in --data, --checkpoint-dir and --metrics-out: the run trains,
// writes its metrics and checkpoints (the name as U+FFFD in the JSON), and resumes (it used to abort with
// nlohmann::json's type_error.316 at the first write, after the training).
TEST(Cli, PathsThatAreNotUtf8) {
  TempDir dir;
  const std::string bad = std::string("bad") + static_cast<char>(0xff) + "name";
  const std::string data = dir.write(bad + ".txt", testing::synthetic_text(20000));
  const std::string ckpt = dir.file(bad + "-ckpt"), metrics = dir.file(bad + ".json");
  const std::string args = small("'" + data + "'") + " --steps 4 --checkpoint-dir '" + ckpt + "' --metrics-out '" +
                           metrics + "'";
  CliRun first = run(args + " --stop-at 2");
  EXPECT_EQ(first.code, 0) << first.out;
  ASSERT_TRUE(fs::exists(metrics)) << first.out;
  const nlohmann::json j = nlohmann::json::parse(read_file(metrics));
  EXPECT_NE(j["config"]["data"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
  CliRun resumed = run(args + " --resume");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_HAS(resumed.out, "step      4/4");
}

// A FIFO (or a folder) where a file is read: --config, TIERTRAIN_CONFIG, --plan, --resume=PATH and a checkpoint
// folder's `latest` are refused at once, naming what is there (opening a FIFO used to block forever, a folder as
// --config to abort).
TEST(Cli, FifosAndFoldersWhereAFileIsReadAreRefused) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string t = "timeout 30";
  CliRun config = run(small(data) + " --steps 2 --config " + fifo, t);
  EXPECT_EQ(config.code, 1) << config.out;  // a failure of the file, as a missing one (issue 47)
  EXPECT_HAS(config.out, "config file '" + fifo + "' is a FIFO, socket or device, not a file");
  CliRun config_dir = run(small(data) + " --steps 2", t + " env TIERTRAIN_CONFIG=" + dir.path());
  EXPECT_EQ(config_dir.code, 1) << config_dir.out;
  EXPECT_HAS(config_dir.out, "is a folder, not a file");
  CliRun plan = run(small(data) + " --steps 2 --plan " + fifo, t);
  EXPECT_EQ(plan.code, 1) << plan.out;
  EXPECT_HAS(plan.out, "--plan '" + fifo + "' is a FIFO");
  CliRun resume = run(small(data) + " --steps 2 --checkpoint-dir " + dir.file("ck") + " --resume=" + fifo, t);
  EXPECT_NE(resume.code, 124) << "blocked";
  EXPECT_NE(resume.code, 0) << resume.out;
  EXPECT_HAS(resume.out, "checkpoint '" + fifo + "' is a FIFO");
  // A run with checkpoints, then its `latest` replaced by a FIFO: refused, not another step loaded.
  ASSERT_EQ(run(small(data) + " --steps 2 --checkpoint-dir " + dir.file("ck2")).code, 0);
  fs::remove(dir.file("ck2") + "/latest");
  ASSERT_EQ(mkfifo((dir.file("ck2") + "/latest").c_str(), 0600), 0);
  CliRun latest = run(small(data) + " --steps 4 --checkpoint-dir " + dir.file("ck2") + " --resume", t);
  EXPECT_EQ(latest.code, 1) << latest.out;
  EXPECT_HAS(latest.out, "checkpoint pointer '" + dir.file("ck2") + "/latest' is a FIFO");
}

TEST(Cli, ModelLargerThanBudgetNamesBytes) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  CliRun r = run(small(data) + " --steps 2 --device-budget 64KiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.out, "does not fit the device budget even in-core: it needs");
  EXPECT_HAS(r.out, "but the budget is 64.00 KiB");
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no training may start";
}

// --dry-run prints the device need per class against the budget and the host need, allocates nothing, and exits 0
// when the run fits, 1 when it does not.
TEST(Cli, DryRunReportsTheNeedOfAPlan) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  CliRun fits = run(small(data) + " --dry-run --plan swap-activations --layers 4");
  EXPECT_EQ(fits.code, 0) << fits.out;
  EXPECT_HAS(fits.out, "dry run (nothing allocated)");
  EXPECT_HAS(fits.out, "plan: swap-activations: activations swap 4 (swap prefetch 1)");
  EXPECT_HAS(fits.out, "(fits): param");
  EXPECT_HAS(fits.out, "host: ");
  EXPECT_EQ(fits.out.find("step "), std::string::npos) << "no training may start";
  CliRun tight = run(small(data) + " --dry-run --plan recompute --device-budget 64KiB");
  EXPECT_EQ(tight.code, 1) << tight.out;
  EXPECT_HAS(tight.out, "of a 64.00 KiB budget (DOES NOT FIT)");
  // Note [gradients in dead activations]: swapped blocks hold none; in-core's 4 blocks hold their predecessors'
  // (the small model's gradients are smaller than a set, so block 3's would lie above every set: apart).
  EXPECT_EQ(fits.out.find("gradients of"), std::string::npos) << fits.out;
  CliRun in_core = run(small(data) + " --dry-run --layers 4");
  EXPECT_HAS(in_core.out, "gradients of 3 blocks live in later blocks' activation memory");
  CliRun apart = run(small(data) + " --dry-run --layers 4 --grads-in-activations false");
  EXPECT_EQ(apart.out.find("gradients of"), std::string::npos) << apart.out;
}

// Note [dry run without the GPU] (exec/trainer.cc): on a machine without a usable GPU, a build with the CUDA backend
// still sizes a GPU run: bf16, a GPU's inventory (no CPU arena in the host's need), against --device-budget where
// given; the run itself is refused as before.
TEST(Cli, DryRunOfAGpuRunWithoutTheGpu) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const CliRun real = run(small(data) + " --backend cuda --steps 1");
  if (real.code == 0) GTEST_SKIP() << "a GPU is here";
  if (real.out.find("no CUDA backend") != std::string::npos) GTEST_SKIP() << "a build without the CUDA backend";
  EXPECT_HAS(real.out, "no usable GPU");
  const CliRun sized = run(small(data) + " --backend cuda --dry-run --layers 4");
  EXPECT_EQ(sized.code, 0) << sized.out;
  EXPECT_HAS(sized.out, "bf16 compute (bf16 block gradients)");  // Note [bf16 gradients]: auto, the default
  EXPECT_HAS(sized.out, "device cuda (no usable GPU on this machine: what a run on one would take): needs ");
  EXPECT_HAS(sized.out, "no budget to compare with");
  EXPECT_HAS(sized.out, "gradients of 3 blocks live in later blocks' activation memory");
  EXPECT_EQ(sized.out.find("CPU backend's device arena"), std::string::npos) << sized.out;
  const CliRun fits = run(small(data) + " --backend cuda --dry-run --layers 4 --device-budget 1GiB");
  EXPECT_EQ(fits.code, 0) << fits.out;
  EXPECT_HAS(fits.out, "of a 1.00 GiB budget (fits)");
  const CliRun tight = run(small(data) + " --backend cuda --dry-run --layers 4 --device-budget 1MiB");
  EXPECT_EQ(tight.code, 1) << tight.out;
  EXPECT_HAS(tight.out, "of a 1.00 MiB budget (DOES NOT FIT)");
  // auto gives f32 gradients where the run cannot take bf16 ones (the CPU optimizer, accumulation), and where named.
  for (const char* f32 : {" --optimizer cpu", " --grad-accum 2", " --grad-dtype f32"}) {
    const CliRun r = run(small(data) + " --backend cuda --dry-run --layers 4" + f32);
    EXPECT_EQ(r.code, 0) << f32 << r.out;
    EXPECT_HAS(r.out, "bf16 compute, batch");
  }
}

// Note [host memory of a run] (issue 46): a run whose host state cannot fit the RAM available (the CPU optimizer's
// master, moments and gradients of 32B parameters, and on the CPU backend its device arena) is refused before
// anything is allocated, exit 1, with the bytes of each part; its dry run says so; a small run's dry run fits.
TEST(Cli, ARunWhoseHostStateCannotFitIsRefusedWithItsParts) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string big = "train --data " + data +
                          " --backend cpu --optimizer cpu --plan in-core --layers 40 --dim 8192 --heads 64 --seq 64 "
                          "--batch 1 --steps 1 --warmup 0 --device-budget 4TiB --threads 1";
  CliRun r = run(big);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "of host memory (");
  EXPECT_HAS(r.out, "optim_state 240.05 GiB");  // m and v of 32.2B parameters
  EXPECT_HAS(r.out, "grad 120.03 GiB");
  EXPECT_HAS(r.out, "for the CPU backend's device arena");
  EXPECT_HAS(r.out, "available (of ");
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "nothing may run";
  CliRun dry = run(big + " --dry-run");
  EXPECT_EQ(dry.code, 1) << dry.out;
  EXPECT_HAS(dry.out, "DOES NOT FIT: 240.05 GiB in the host slab");
  EXPECT_HAS(dry.out, "240.05 GiB pageable (optim_state 240.05 GiB)");  // Note [pinned and pageable host memory]
  CliRun small_run = run(small(data) + " --dry-run --optimizer cpu");
  EXPECT_EQ(small_run.code, 0) << small_run.out;
  EXPECT_HAS(small_run.out, "available (of ");
  EXPECT_HAS(small_run.out, "fits: ");
}

// Note [host buffers in rings] (issue 46): with host_buffers auto, a run whose whole host copies do not fit the RAM
// available and whose rings do is given the rings, and its dry run says so and fits; "whole" keeps the copies and
// does not fit. The model is sized from this machine's available memory: on the CPU backend (f32) the whole copies
// take 24 bytes a parameter (master, gradients' copy, two moments, and the arena's parameters and gradients), the
// rings 20 and two blocks: about 22 a parameter is between them.
TEST(Cli, HostBuffersBecomeRingsWhereOnlyRingsFitTheHost) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const double per_block = 12.0 * 1024 * 1024;  // GPT d1024: 12 d^2 parameters a block
  const int layers = static_cast<int>(std::lround(static_cast<double>(cpu::available_memory_bytes()) / 22.0 / per_block));
  ASSERT_GE(layers, 4);
  const std::string cmd = "train --data " + data + " --backend cpu --optimizer cpu --plan in-core --layers " +
                          std::to_string(layers) +
                          " --dim 1024 --heads 8 --seq 16 --batch 1 --steps 1 --warmup 0 --device-budget 4TiB --dry-run";
  CliRun automatic = run(cmd);
  EXPECT_EQ(automatic.code, 0) << automatic.out;
  EXPECT_HAS(automatic.out, "host buffers as rings");
  EXPECT_HAS(automatic.out, "gradients and compute copy through host rings");
  EXPECT_HAS(automatic.out, "fits: ");
  CliRun whole = run(cmd + " --host-buffers whole");
  EXPECT_EQ(whole.code, 1) << whole.out;
  EXPECT_HAS(whole.out, "DOES NOT FIT");
  EXPECT_EQ(whole.out.find("host rings"), std::string::npos) << whole.out;
}

// Issue 20 through the binary: a Unified Memory plan trains (the CPU backend emulates managed memory), its dry run
// shows the managed reservation and what of it the plan keeps on the device, the schedule it writes holds the UM
// operations, and managed optimizer state with the CPU optimizer (which keeps it on the host) is refused.
TEST(Cli, UnifiedMemoryPlans) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string file = dir.file("schedule.json");
  CliRun dry = run(small(data) + " --dry-run --plan um-swap-activations --layers 4 --schedule " + file);
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_HAS(dry.out, "activations managed_offload 4");
  EXPECT_HAS(dry.out, "managed memory (Unified Memory): ");
  EXPECT_HAS(dry.out, "of which the plan keeps ");
  const nlohmann::json j = nlohmann::json::parse(read_file(file));
  auto s = Schedule::from_json(j);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  int moves = 0, dead = 0;
  for (const Op& op : s.value().pass(Pass::kTrain)) {
    ASSERT_EQ(op.entry.empty(), op.kind != OpKind::kUmPrefetch) << op.name;
    (op.um_dead ? dead : moves) += op.kind == OpKind::kUmPrefetch ? 1 : 0;
  }
  EXPECT_EQ(dead, 4 + 4);   // every block released after its backward and populated before its forward
  EXPECT_EQ(moves, 2 * 2);  // the first two out and back in (the last two stay)
  EXPECT_EQ(j["memory_peak"]["managed"]["peak_bytes"], j["inventory"]["managed"]["total_bytes"]);
  CliRun train = run(small(data) + " --plan um-advised --layers 2 --steps 3");
  EXPECT_EQ(train.code, 0) << train.out;
  EXPECT_HAS(train.out, "managed, ");
  // --um-counters: on the CPU backend, what the emulated prefetches move per step (2 of 4 blocks leave and come
  // back; populates and releases move nothing), and no faults.
  const std::string metrics = dir.file("m.json");
  CliRun counted = run(small(data) + " --plan um-swap-activations --layers 4 --steps 4 --um-counters --metrics-out " +
                       metrics);
  EXPECT_EQ(counted.code, 0) << counted.out;
  EXPECT_HAS(counted.out, "unified memory per step (after the first): GPU page faults 0.0, CPU page faults 0.0");
  const nlohmann::json m = nlohmann::json::parse(read_file(metrics));
  const nlohmann::json& per = m.at("um_counters_per_step");
  const int64_t block = j["inventory"]["managed"]["entries"][0]["bytes"].get<int64_t>();
  EXPECT_EQ(per.at("bytes_to_host").get<double>(), 2.0 * static_cast<double>(block));
  EXPECT_EQ(per.at("bytes_to_device").get<double>(), 2.0 * static_cast<double>(block));
  EXPECT_EQ(per.at("gpu_page_faults").get<double>(), 0.0);
  CliRun cpu = run(small(data) + " --plan um --optimizer cpu --layers 2 --steps 2");
  EXPECT_EQ(cpu.code, 2) << cpu.out;
  EXPECT_HAS(cpu.out, "\"optim_state\" cannot be managed");
}

// --dry-run --schedule FILE writes the schedule the run would execute (docs/FORMATS.md); it reads back, validated,
// and its memory is the dry run's figure. Without --dry-run the flag is a usage error.
TEST(Cli, DryRunWritesTheSchedule) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string file = dir.file("schedule.json");
  CliRun r = run(small(data) + " --dry-run --plan offload-all --speculative-update --layers 3 --schedule " + file);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "schedule: ");
  const nlohmann::json j = nlohmann::json::parse(read_file(file));
  auto s = Schedule::from_json(j);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s.value().spec.model.layers, 3);
  EXPECT_TRUE(s.value().spec.speculate);
  bool swaps = false, uploads = false, host_updates = false;
  for (const Op& op : s.value().pass(Pass::kTrain)) {
    swaps = swaps || op.kind == OpKind::kSwapOut;
    uploads = uploads || op.kind == OpKind::kParamsIn;
    host_updates = host_updates || op.kind == OpKind::kHostAdamW;
  }
  EXPECT_TRUE(swaps && uploads && host_updates);
  EXPECT_EQ(j["memory_peak"]["device"]["peak_bytes"], j["inventory"]["device"]["total_bytes"]);
  EXPECT_EQ(j["memory_peak"]["host"]["peak_bytes"], j["inventory"]["host"]["total_bytes"]);
  CliRun no_dry = run(small(data) + " --steps 2 --schedule " + file);
  EXPECT_EQ(no_dry.code, 2) << no_dry.out;
  EXPECT_HAS(no_dry.out, "--schedule FILE is written by a dry run");
}

// Issue 47: what used to be accepted and ignored: a --layout with no mesh, a config file naming another config, and
// a key repeated in a config file or a JSON plan (the last used to win without a word). Each exits 2, named.
TEST(Cli, IgnoredSettingsAreRefused) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(6000));
  const std::string args = "train --data " + data +
                           " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 1 --warmup 0 --eval-every 0 "
                           "--backend cpu --threads 1";
  CliRun layout = run(args + " --layout heads:model");
  EXPECT_EQ(layout.code, 2) << layout.out;
  EXPECT_HAS(layout.out, "there is no --mesh");
  const std::string nested = dir.write("nested.json", R"({"config": "other.json", "layers": 1})");
  CliRun config = run(args + " --config " + nested);
  EXPECT_EQ(config.code, 2) << config.out;
  EXPECT_HAS(config.out, "a config file cannot name another");
  const std::string twice = dir.write("twice.json", R"({"batch": 2, "steps": 1, "batch": 4})");
  CliRun repeated = run(args + " --config " + twice);
  EXPECT_EQ(repeated.code, 2) << repeated.out;
  EXPECT_HAS(repeated.out, "key \"batch\" appears twice in one object");
  const std::string plan = dir.write(
      "plan.json", R"({"version": 1, "optimizer": "device", "layers": [{"activation": "resident", "activation": "swap"}]})");
  CliRun p = run(args + " --plan " + plan);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_HAS(p.out, "key \"activation\" appears twice in one object");
  EXPECT_EQ(p.out.find("step "), std::string::npos) << "nothing may run";
}

TEST(Cli, ConfigFileEnvAndFlagsWithOrigins) {
  TempDir dir;
  const std::string cfg = dir.write("run.json", R"({"layers": 3, "dim": 64, "device-budget": "1GiB"})");
  CliRun r = run("train --config " + cfg + " --dim 96 --print-config", "TIERTRAIN_STEPS=7");
  EXPECT_EQ(r.code, 0) << r.out;
  // name, value and origin on one line, the origins in one column however long the values (the data path).
  std::map<std::string, std::vector<std::string>> row;  // knob -> its line's words
  size_t origin_column = 0;
  bool columns_agree = true;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("environment variables", 0) == 0) break;  // the environment registry's list, in its own format
    if (line.rfind("  ", 0) != 0 || line.rfind("      ", 0) == 0) continue;
    std::istringstream f(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
    if (w.size() < 3) continue;
    row[w[0]] = w;
    const size_t at = line.find(w[2], line.find(w[1]) + w[1].size());
    if (origin_column == 0) origin_column = at;
    columns_agree = columns_agree && at == origin_column;
  }
  EXPECT_TRUE(columns_agree) << r.out;
  ASSERT_EQ(row.count("layers"), 1u) << r.out;
  EXPECT_EQ(row["layers"][1], "3");
  EXPECT_EQ(row["layers"][2] + " " + row["layers"][3], "file " + cfg);
  EXPECT_EQ(row["dim"][1], "96");
  EXPECT_EQ(row["dim"][2] + " " + row["dim"][3], "flag --dim");
  EXPECT_EQ(row["steps"][1], "7");
  EXPECT_EQ(row["steps"][2] + " " + row["steps"][3], "env TIERTRAIN_STEPS");
  EXPECT_EQ(row["device_budget"][1], "1GiB");
  EXPECT_EQ(row["data"][1], "/usr/share/games/fortunes");

  const std::string bad = dir.write("bad.json", R"({"layerz": 3})");
  CliRun b = run("train --config " + bad);
  EXPECT_EQ(b.code, 2);
  EXPECT_HAS(b.out, "unknown knob 'layerz'");
  const std::string broken = dir.write("broken.json", "{\"layers\": ");
  CliRun j = run("train --config " + broken);
  EXPECT_EQ(j.code, 2);
  EXPECT_HAS(j.out, "is not valid JSON");

  CliRun top = run("--print-config");
  EXPECT_EQ(top.code, 0);
  EXPECT_HAS(top.out, "device_budget");
  EXPECT_HAS(top.out, "TIERTRAIN_DEVICE_BUDGET");
}

TEST(Cli, TrainsWritesMetricsAndCheckpointsAndResumes) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string ckpt = dir.file("ckpt");
  CliRun first = run(small(data) + " --steps 6 --stop-at 3 --log-every 1 --checkpoint-dir " + ckpt);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_HAS(first.out, "step      3/6 | loss");
  EXPECT_HAS(first.out, "checkpoint written to " + ckpt);
  ASSERT_TRUE(fs::exists(ckpt + "/step_00000003.ttf"));

  CliRun second = run(small(data) + " --steps 6 --log-every 1 --resume --checkpoint-dir " + ckpt + " --metrics-out " +
                   dir.file("m.json"));
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_HAS(second.out, "resumed from " + ckpt + "/step_00000003.ttf at step 3");
  EXPECT_HAS(second.out, "step      6/6 | loss");
  EXPECT_EQ(second.out.find("step      2/6"), std::string::npos);
  EXPECT_HAS(read_file(dir.file("m.json")), "\"median_tokens_per_s\"");
}

// A checkpoint's tensors (parameters, AdamW's moments, the data position, ...) by name, their bytes: two runs'
// checkpoints of one step hold the same state when these are equal (the metadata names each run's own folders).
std::map<std::string, std::vector<unsigned char>> checkpoint_tensors(const std::string& path) {
  std::map<std::string, std::vector<unsigned char>> out;
  auto r = TensorFileReader::open(path);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return out;
  for (const TensorFileEntry& e : r.value().entries()) {
    std::vector<unsigned char>& b = out[e.name];
    b.resize(e.bytes);
    EXPECT_TRUE(r.value().read(e.name, e.dtype, e.shape, b.data()).is_ok()) << e.name;
  }
  return out;
}

// `tiertrain ARGS` started in the background (exec'd by the shell, so that the pid is the program's), its stdout and
// stderr to `log`.
pid_t start(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + std::string(TT_BINARY) + " " + args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits (up to a minute) until `log` holds `text`; false if the process ended or the time ran out first.
bool wait_for_text(pid_t pid, const std::string& log, const std::string& text) {
  for (int i = 0; i < 6000; ++i) {
    if (read_file(log).find(text) != std::string::npos) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    usleep(10 * 1000);
  }
  return false;
}

int exit_code(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The step "stopped at step N of" names in `out`, or -1.
long long stopped_at(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("stopped at step ([0-9]+) of")) ? std::stoll(m[1].str()) : -1;
}

// Note [stopping early]: at SIGTERM (or the --time-limit) a run finishes the step in flight, checkpoints it and exits
// 75; the same command with --resume ends with the state of a run never stopped, bit for bit.
TEST(Cli, StopsAtASignalOrItsTimeLimitWithACheckpointAndResumesBitExact) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string args = small(data) + " --steps 40 --warmup 4 --log-every 1";

  CliRun limit = run(args + " --time-limit 0.000001 --checkpoint-dir " + dir.file("t"));
  EXPECT_EQ(limit.code, 75) << limit.out;
  EXPECT_HAS(limit.out, "step      1 | stopping: the time limit of 1e-06 min");
  EXPECT_HAS(limit.out, "stopped at step 1 of 40 (the time limit of 1e-06 min): checkpoint in " + dir.file("t") +
                            "; to go on, run the same command with --resume");
  EXPECT_TRUE(fs::exists(dir.file("t/step_00000001.ttf")));
  EXPECT_EQ(limit.out.find("step      2/40"), std::string::npos) << limit.out;
  CliRun none = run(args + " --stop-at 3 --time-limit 0.000001");  // no --checkpoint-dir: said, and not 75
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_HAS(none.out, "stopped at step 1 of 40 (the time limit of 1e-06 min); nothing saved: no --checkpoint-dir");

  // SIGTERM while it trains (slowed down so that the signal comes before the end): the request is said, the step in
  // flight finished and checkpointed, and the metrics say why the run ended.
  const std::string ck = dir.file("ck"), log = dir.file("log");
  const pid_t pid = start(args + " --cpu-compute-delay-us 3000 --checkpoint-dir " + ck + " --metrics-out " +
                              dir.file("m.json"), log);
  ASSERT_TRUE(wait_for_text(pid, log, "step      3/40")) << read_file(log);
  kill(pid, SIGTERM);
  EXPECT_EQ(exit_code(pid), 75) << read_file(log);
  const std::string out = read_file(log);
  EXPECT_HAS(out, "tiertrain: SIGTERM: stopping after the step in progress");
  EXPECT_HAS(out, "| stopping: SIGTERM");
  const long long at = stopped_at(out);
  ASSERT_GE(at, 3) << out;
  ASSERT_LT(at, 40) << out;
  char name[32];
  std::snprintf(name, sizeof name, "/step_%08lld.ttf", at);
  EXPECT_TRUE(fs::exists(ck + name)) << out;
  EXPECT_EQ(read_file(ck + "/latest"), std::string(name + 1) + "\n");
  const nlohmann::json m = nlohmann::json::parse(read_file(dir.file("m.json")));
  EXPECT_EQ(m["summary"]["stopped"], "SIGTERM");
  EXPECT_EQ(m["summary"]["last_step"], at);

  CliRun resumed = run(args + " --checkpoint-dir " + ck + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_HAS(resumed.out, "at step " + std::to_string(at));
  CliRun straight = run(args + " --checkpoint-dir " + dir.file("straight"));
  ASSERT_EQ(straight.code, 0) << straight.out;
  const auto a = checkpoint_tensors(ck + "/step_00000040.ttf");
  const auto b = checkpoint_tensors(dir.file("straight/step_00000040.ttf"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the resumed run's state differs from the straight run's";
}

// The pid of rank `rank` of the launcher `launcher` (a process whose parent it is and whose environment says
// TIERTRAIN_RANK=rank), or -1.
pid_t rank_pid(pid_t launcher, int rank) {
  const std::string want = "TIERTRAIN_RANK=" + std::to_string(rank);
  for (const auto& d : fs::directory_iterator("/proc")) {
    const std::string name = d.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so count from the last ')'.
    const std::string stat = read_file(d.path().string() + "/stat");
    std::istringstream rest(stat.substr(stat.rfind(')') + 1));
    std::string state;
    long ppid = -1;
    if (!(rest >> state >> ppid) || ppid != launcher) continue;
    const std::string env = read_file(d.path().string() + "/environ");
    for (size_t at = 0; at < env.size();) {
      const size_t end = env.find('\0', at);
      if (env.compare(at, end == std::string::npos ? std::string::npos : end - at, want) == 0)
        return static_cast<pid_t>(std::stol(name));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return -1;
}

// Under launch, a data-parallel run's ranks agree on the step they stop after (the time limit passes on each at its
// own time; a signal to one rank reaches no other), all exit 75, and the launcher, which passes a signal it gets to
// every rank, waits for their checkpoint however short its --grace (that is for stopping the others after a rank
// failed) and exits 75.
TEST(Cli, DataParallelRanksStopTogetherAndTheLauncherWaitsForThem) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string launch = "launch -n 2 --grace 0 -- " + std::string(TT_BINARY) + " train --data " + data +
                             " --backend cpu --layers 1 --dim 16 --heads 2 --seq 16 --batch 4 --steps 40 --warmup 2 "
                             "--eval-every 0 --threads 1 --log-every 1 --mesh data=2";
  CliRun limit = run(launch + " --time-limit 0.000001 --checkpoint-dir " + dir.file("t"));
  EXPECT_EQ(limit.code, 75) << limit.out;
  EXPECT_HAS(limit.out, "[rank 0] stopped at step 1 of 40 (the time limit of 1e-06 min)");
  EXPECT_EQ(limit.out.find("stopping the other"), std::string::npos) << limit.out;
  EXPECT_TRUE(fs::exists(dir.file("t/step_00000001.ttf")));

  // SIGTERM to rank 1 alone (a step takes ~0.1 s), then SIGUSR1 (a scheduler's early notice) to the launcher (~0.3
  // s: a kill after --grace 0 would come before the ranks are done).
  for (const bool to_launcher : {false, true}) {
    const std::string log = dir.file(to_launcher ? "log1" : "log0"), ck = dir.file(to_launcher ? "ck1" : "ck0");
    const pid_t pid =
        start(launch + " --cpu-compute-delay-us " + (to_launcher ? "10000" : "3000") + " --checkpoint-dir " + ck, log);
    ASSERT_TRUE(wait_for_text(pid, log, "[rank 0] step      3/40")) << read_file(log);
    const pid_t target = to_launcher ? pid : rank_pid(pid, 1);
    ASSERT_GT(target, 0);
    kill(target, to_launcher ? SIGUSR1 : SIGTERM);
    EXPECT_EQ(exit_code(pid), 75) << read_file(log);
    const std::string out = read_file(log);
    if (to_launcher) {
      EXPECT_HAS(out, "tiertrain launch: User defined signal 1: passing it to the 2 rank(s)");
      EXPECT_HAS(out, "| stopping: SIGUSR1");
    } else {
      EXPECT_HAS(out, "| stopping: SIGTERM");
    }
    const long long at = stopped_at(out);
    ASSERT_GE(at, 3) << out;
    char name[32];
    std::snprintf(name, sizeof name, "/step_%08lld.ttf", at);
    EXPECT_TRUE(fs::exists(ck + name)) << out;
  }
}

// A signal passed on by the launcher has no deadline, but a rank it killed is a failure like any other: the ranks left
// (here one that ignores SIGTERM, as one waiting for the dead one in a collective would not end) are killed after
// the grace, and the launcher exits with the dead rank's code.
TEST(Cli, ARankKilledByAPassedOnSignalStopsTheOthers) {
  TempDir dir;
  const std::string log = dir.file("log");
  const pid_t pid =
      start("launch -n 2 --grace 0.2 -- sh -c 'if [ \"$RANK\" = 0 ]; then trap \"\" TERM; fi; echo ready; sleep 30'",
            log);
  for (int i = 0; i < 3000 && read_file(log).find("[rank 1] ready") == std::string::npos; ++i) usleep(10 * 1000);
  for (int i = 0; i < 3000 && read_file(log).find("[rank 0] ready") == std::string::npos; ++i) usleep(10 * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  EXPECT_EQ(exit_code(pid), 128 + SIGTERM) << read_file(log);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_HAS(read_file(log), "tiertrain launch: rank 1 (pid ");
  EXPECT_HAS(read_file(log), "stopping the other 1 rank(s)");
}

TEST(Cli, BadCheckpointsAreNamedAndNothingIsLost) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run(small(data) + " --steps 4 --stop-at 2 --checkpoint-dir " + ckpt).code, 0);
  const std::string good_path = ckpt + "/step_00000002.ttf";
  const std::string good = read_file(good_path);
  ASSERT_FALSE(good.empty());

  // Truncated copy.
  const std::string cut = dir.write("cut.ttf", good.substr(0, good.size() - 10));
  CliRun t = run(small(data) + " --steps 4 --resume=" + cut);
  EXPECT_EQ(t.code, 1);
  EXPECT_HAS(t.out, "cannot resume");
  EXPECT_HAS(t.out, "truncated");

  // Corrupt copy.
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  const std::string corrupt = dir.write("corrupt.ttf", flipped);
  CliRun c = run(small(data) + " --steps 4 --resume=" + corrupt);
  EXPECT_EQ(c.code, 1);
  EXPECT_HAS(c.out, "corrupt");

  // Mismatched model.
  CliRun m = run("train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --eval-every 0 --threads 1 --steps 4 --data " +
              data + " --resume --checkpoint-dir " + ckpt);
  EXPECT_EQ(m.code, 1);
  EXPECT_HAS(m.out, "dim is 16 in the checkpoint but 32 now");

  // Mismatched data.
  const std::string other = dir.write("other.txt", testing::synthetic_text(30000, 7));
  CliRun d = run(small(other) + " --steps 4 --resume --checkpoint-dir " + ckpt);
  EXPECT_EQ(d.code, 1);
  EXPECT_HAS(d.out, "the dataset differs");

  // None of that touched the good checkpoint.
  EXPECT_EQ(read_file(good_path), good);
  EXPECT_EQ(read_file(ckpt + "/latest"), "step_00000002.ttf\n");
}

// A copy of the checkpoint at `from` with its metadata changed by `edit` (a valid file: every CRC right).
std::string rewrite_meta(const std::string& from, const std::string& to,
                         const std::function<void(nlohmann::json&)>& edit) {
  auto r = TensorFileReader::open(from);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  nlohmann::json meta = r.value().meta();
  edit(meta);
  TensorFileWriter w;
  w.set_meta(meta);
  std::vector<std::vector<unsigned char>> keep;
  for (const TensorFileEntry& e : r.value().entries()) {
    keep.emplace_back(e.bytes);
    EXPECT_TRUE(r.value().read(e.name, e.dtype, e.shape, keep.back().data()).is_ok());
    w.add(e.name, e.dtype, e.shape, keep.back().data());
  }
  EXPECT_TRUE(w.write_atomic(to).is_ok());
  return to;
}

// Issue 25: checkpoint metadata with a valid CRC but impossible values is refused, naming the field; it used to
// resume at step -5 with a negative learning rate, read 2^64-1 as -1, say "nothing to do" for 2^62, turn an
// optimizer step of -100 into NaN and one of 0 into another trajectory, and restart the epoch for a sampler out of
// range.
TEST(Cli, CheckpointMetadataIsCheckedLikeTheTensors) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run(small(data) + " --steps 4 --stop-at 2 --checkpoint-dir " + ckpt).code, 0);
  const std::string good = ckpt + "/step_00000002.ttf";
  // The harness itself: a copy with the metadata unchanged resumes.
  const std::string same = rewrite_meta(good, dir.file("same.ttf"), [](nlohmann::json&) {});
  CliRun ok = run(small(data) + " --steps 4 --resume=" + same);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_HAS(ok.out, "at step 2");
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  };
  const Case cases[] = {
      {"negative step", [](nlohmann::json& m) { m["step"] = -5; m["optimizer"]["step"] = -5; }, "metadata step is -5"},
      {"2^64-1", [](nlohmann::json& m) { m["step"] = UINT64_MAX; }, "metadata step is 18446744073709551615"},
      {"2^62", [](nlohmann::json& m) { m["step"] = int64_t(1) << 62; }, "metadata step is 4611686018427387904"},
      {"float step", [](nlohmann::json& m) { m["step"] = 2.5; }, "metadata step is 2.5, not an integer"},
      {"optimizer -100", [](nlohmann::json& m) { m["optimizer"]["step"] = -100; }, "metadata optimizer.step is -100"},
      {"optimizer 0", [](nlohmann::json& m) { m["optimizer"]["step"] = 0; }, "optimizer.step is 0 but step is 2"},
      {"step 3", [](nlohmann::json& m) { m["step"] = 3; m["optimizer"]["step"] = 3; }, "3 steps of batch 2 draw 6"},
      {"cursor", [](nlohmann::json& m) { m["sampler"]["cursor"] = 1000000; }, "sampler cursor 1000000 is past"},
      {"epoch", [](nlohmann::json& m) { m["sampler"]["epoch"] = 999999; }, "sampler epoch 999999 is beyond"},
      {"negative cursor", [](nlohmann::json& m) { m["sampler"]["cursor"] = -1; }, "sampler.cursor is -1"},
      {"huge dim", [](nlohmann::json& m) { m["model"]["dim"] = int64_t(1) << 40; }, "model.dim is 1099511627776"},
      {"batch string", [](nlohmann::json& m) { m["batch"] = "two"; }, "metadata batch is \"two\""},
      {"no seed", [](nlohmann::json& m) { m.erase("seed"); }, "metadata has no seed"},
      {"rng", [](nlohmann::json& m) { m["rng"][1] = -3; }, "metadata rng[1]"},
      {"dtype", [](nlohmann::json& m) { m["dtype"] = "f128"; }, "metadata dtype 'f128'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bad = rewrite_meta(good, dir.file(std::string("bad_") + c.name + ".ttf"), c.edit);
    CliRun r = run(small(data) + " --steps 4 --resume='" + bad + "'");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_HAS(r.out, "cannot resume");
    EXPECT_HAS(r.out, c.says);
    EXPECT_EQ(r.out.find("step      3/4"), std::string::npos) << "it trained";
  }
}

// Issue 25: what killed writers left (a checkpoint's and the pointer's temporary files, a metrics file's) is removed
// when the next run starts, and said; a live writer's is not (Note [stale temporaries]).
TEST(Cli, TemporariesOfKilledRunsAreRemovedAtStart) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(30000));
  const std::string ckpt = dir.file("ckpt");
  fs::create_directories(ckpt);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  // temporary_path names this host and this process; the dead writer's differ only in the pid.
  auto dead = [&](const std::string& path) {
    std::string t = temporary_path(path);
    return t.substr(0, t.rfind('.') + 1) + std::to_string(child);
  };
  const std::string step_tmp = dead(ckpt + "/step_00000007.ttf"), latest_tmp = dead(ckpt + "/latest");
  const std::string metrics_tmp = dead(dir.file("m.json"));
  const std::string live_tmp = temporary_path(ckpt + "/step_00000008.ttf");
  for (const std::string& f : {step_tmp, latest_tmp, metrics_tmp, live_tmp}) std::ofstream(f) << std::string(100, 'x');
  CliRun r = run(small(data) + " --steps 2 --checkpoint-dir " + ckpt + " --metrics-out " + dir.file("m.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "removed 1 temporary file (100 B) that killed runs left in " + dir.path());
  EXPECT_HAS(r.out, "removed 2 temporary files (200 B) that killed runs left in " + ckpt);
  EXPECT_FALSE(fs::exists(step_tmp));
  EXPECT_FALSE(fs::exists(latest_tmp));
  EXPECT_FALSE(fs::exists(metrics_tmp));
  EXPECT_TRUE(fs::exists(live_tmp));  // this (test) process is alive
}

TEST(Cli, UnwritableCheckpointDirFailsBeforeTraining) {
  TempDir dir;
  const std::string data = dir.write("c.txt", testing::synthetic_text(20000));
  const std::string file = dir.write("plain", "x");
  CliRun r = run(small(data) + " --steps 3 --checkpoint-dir " + file + "/ckpt");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.out, "cannot create checkpoint directory");
  EXPECT_EQ(r.out.find("step "), std::string::npos);
  CliRun nodir = run(small(data) + " --steps 3 --resume");
  EXPECT_EQ(nodir.code, 2);
  EXPECT_HAS(nodir.out, "--resume without a file needs --checkpoint-dir");
}

// Note [run folder]: one folder keeps the resolved config, the metrics as they were logged, the summary, the final
// checkpoint and a sample of it; a used folder is refused unless the run resumes from it (which appends); the flags
// for each file still win; `tiertrain sample` reads the folder.
TEST(Cli, RunFolderKeepsConfigMetricsCheckpointAndSample) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(20000));
  const std::string rd = dir.path() + "/run";
  const std::string args = small(data) + " --eval-every 10 --log-every 5 --run-dir " + rd;
  CliRun first = run(args + " --steps 20 --sample-tokens 30");
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_HAS(first.out, "run folder: " + rd);
  EXPECT_HAS(first.out, "--- sample of " + rd + "/checkpoints/step_00000020.ttf (step 20): 30 tokens");
  const nlohmann::json config = nlohmann::json::parse(read_file(rd + "/config.json"));
  EXPECT_EQ(config.at("steps"), 20);
  EXPECT_EQ(config.at("run_dir"), rd);
  EXPECT_EQ(config.at("checkpoint_dir"), rd + "/checkpoints");
  auto records = [&] {
    std::vector<nlohmann::json> r;
    std::istringstream lines(read_file(rd + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) r.push_back(nlohmann::json::parse(line));
    return r;
  };
  std::vector<std::string> seen;
  for (const nlohmann::json& r : records())
    seen.push_back(r.at("kind").get<std::string>() + (r.contains("step") ? std::to_string(r.at("step").get<int>()) : ""));
  EXPECT_EQ(seen, (std::vector<std::string>{"train1", "train5", "train10", "val10", "train15", "train20", "val20",
                                            "summary"}));
  EXPECT_EQ(records().back().at("last_step"), 20);
  EXPECT_TRUE(fs::exists(rd + "/metrics.json"));
  EXPECT_TRUE(fs::exists(rd + "/checkpoints/latest"));
  EXPECT_EQ(read_file(rd + "/sample.txt").size(), 31u);  // the prompt (a newline) and 30 bytes
  const std::string svg = read_file(rd + "/loss.svg");  // the loss curves: training and validation
  EXPECT_HAS(svg, "<svg");
  EXPECT_HAS(svg, ">train</text>");
  EXPECT_HAS(svg, ">validation</text>");
  size_t lines_drawn = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines_drawn;
  EXPECT_EQ(lines_drawn, 2u);

  // A used folder is refused, and left as it was.
  CliRun again = run(args + " --steps 20");
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_HAS(again.out, "already holds a run");
  EXPECT_EQ(records().size(), 8u);
  // Resuming it appends.
  CliRun more = run(args + " --steps 30 --resume --sample-tokens 0");
  ASSERT_EQ(more.code, 0) << more.out;
  EXPECT_EQ(records().back().at("last_step"), 30);
  EXPECT_EQ(records().back().at("first_step"), 21);

  // `tiertrain sample` of the folder: the same seed the same text, another seed another.
  CliRun s1 = run("sample " + rd + " --tokens 40 --seed 3 --temperature 1.5 --backend cpu");
  CliRun s2 = run("sample " + rd + " --tokens 40 --seed 3 --temperature 1.5 --backend cpu");
  CliRun s3 = run("sample " + rd + " --tokens 40 --seed 4 --temperature 1.5 --backend cpu");
  ASSERT_EQ(s1.code, 0) << s1.out;
  EXPECT_HAS(s1.out, "(step 30): 40 tokens after a prompt of 1");
  // Between the header and the closing "---" (the header and the line after the sample carry times).
  auto text = [](const std::string& out) {
    const size_t from = out.find('\n'), to = out.find("\n---\n", from);
    return out.substr(from, to == std::string::npos ? std::string::npos : to - from);
  };
  EXPECT_EQ(text(s1.out), text(s2.out));
  EXPECT_NE(text(s1.out), text(s3.out));
  // Data on stdout, diagnostics on stderr: `tiertrain sample RUN > out.txt` keeps the text alone.
  CliRun only_data = run("sample " + rd + " --tokens 40 --seed 3 --temperature 1.5 --backend cpu", "", "/dev/null");
  EXPECT_EQ(only_data.code, 0);
  EXPECT_EQ(only_data.out.find("--- sample of"), std::string::npos) << only_data.out;
  EXPECT_EQ(only_data.out.find("(a token:"), std::string::npos) << only_data.out;
  EXPECT_EQ("\n" + only_data.out, text(s1.out) + "\n") << "stdout holds the sample's text and nothing else";
  EXPECT_EQ(run("sample " + rd + " --temperature 0").code, 2);
  CliRun none = run("sample " + dir.file("nothing"));
  EXPECT_EQ(none.code, 1);
  EXPECT_HAS(none.out, "does not exist");

  // `tiertrain plot` of a metrics.jsonl whose last line a killed run cut, and of a metrics.json; nothing to plot is
  // an error.
  {
    std::ofstream cut(rd + "/metrics.jsonl", std::ios::app);
    cut << "{\"kind\":\"train\",\"step\":31,\"lo";
  }
  CliRun plotted = run("plot " + rd + " --out " + dir.file("cut.svg"));
  ASSERT_EQ(plotted.code, 0) << plotted.out;
  EXPECT_HAS(plotted.out, "loss curves (8 training and 3 validation points) written to " + dir.file("cut.svg"));
  EXPECT_HAS(plotted.out, "1 records of " + rd + "/metrics.jsonl could not be read");
  CliRun from_json = run("plot " + rd + "/metrics.json");
  ASSERT_EQ(from_json.code, 0) << from_json.out;
  EXPECT_TRUE(fs::exists(rd + "/metrics.svg"));
  CliRun nothing = run("plot " + dir.path() + "/nothing");
  EXPECT_EQ(nothing.code, 1);
  EXPECT_HAS(nothing.out, "no metrics in");

  // `tiertrain eval` of the folder on the corpus.
  CliRun scored = run("eval " + rd + " --data " + data + " --batch 2 --batches 3 --backend cpu");
  ASSERT_EQ(scored.code, 0) << scored.out;
  EXPECT_HAS(scored.out, "(step 30) on " + data + ": loss ");
  EXPECT_HAS(scored.out, "3 batches, 96 tokens");

  // --init-from a run folder starts a new run from its parameters; with --resume it is a usage error.
  CliRun tuned = run(small(data) + " --steps 3 --init-from " + rd);
  ASSERT_EQ(tuned.code, 0) << tuned.out;
  EXPECT_HAS(tuned.out, "parameters from " + rd + "/checkpoints/step_00000030.ttf (step 30 of its run)");
  CliRun both = run(small(data) + " --steps 3 --init-from " + rd + " --checkpoint-dir " + rd + "/checkpoints --resume");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_HAS(both.out, "--init-from and --resume");

  // The flag for a file wins over the folder's.
  const std::string rd2 = dir.path() + "/run2";
  CliRun own = run(small(data) + " --steps 5 --sample-tokens 0 --run-dir " + rd2 + " --metrics-out " +
                   dir.file("mine.json"));
  ASSERT_EQ(own.code, 0) << own.out;
  EXPECT_TRUE(fs::exists(dir.file("mine.json")));
  EXPECT_FALSE(fs::exists(rd2 + "/metrics.json"));
  EXPECT_TRUE(fs::exists(rd2 + "/metrics.jsonl"));
}

// `tiertrain export`: a folder with model.safetensors (8-byte header length, JSON header, data) in GPT-2's layout and
// config.json; training starts from it with --from-safetensors (the values: tests/apps/generate_test.cc; the Llama
// family's folders: tests/exec/hf_test.cc).
TEST(Cli, ExportWritesGpt2SafetensorsAndTrainingStartsFromThem) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(20000));
  ASSERT_EQ(run(small(data) + " --steps 3 --checkpoint-dir " + dir.file("ck")).code, 0);
  CliRun ex = run("export " + dir.file("ck") + " --out " + dir.file("hf"));
  ASSERT_EQ(ex.code, 0) << ex.out;
  EXPECT_HAS(ex.out, "16 tensors");
  EXPECT_HAS(ex.out, "AutoModelForCausalLM.from_pretrained(\"" + dir.file("hf") + "\")");
  const std::string file = read_file(dir.file("hf") + "/model.safetensors");
  ASSERT_GT(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  ASSERT_LE(8 + n, file.size());
  const nlohmann::json h = nlohmann::json::parse(file.substr(8, n));
  EXPECT_EQ(h.size(), 17u);  // 16 tensors and the metadata
  EXPECT_EQ(h.at("transformer.h.0.attn.c_attn.weight").at("shape"), nlohmann::json::array({16, 48}));
  EXPECT_EQ(h.at("transformer.h.0.mlp.c_proj.weight").at("shape"), nlohmann::json::array({64, 16}));
  EXPECT_EQ(h.at("transformer.wte.weight").at("shape"), nlohmann::json::array({256, 16}));
  const nlohmann::json config = nlohmann::json::parse(read_file(dir.file("hf") + "/config.json"));
  EXPECT_EQ(config.at("model_type"), "gpt2");
  EXPECT_EQ(config.at("n_embd"), 16);
  EXPECT_EQ(config.at("n_positions"), 16);
  CliRun from = run(small(data) + " --steps 2 --from-safetensors " + dir.file("hf"));
  ASSERT_EQ(from.code, 0) << from.out;
  EXPECT_HAS(from.out, "parameters from " + dir.file("hf") + " (GPT-2 L");
  // The folder's config.json gives the model: a flag that disagrees is named; without a config.json (the file
  // alone) the flags give the model and its tensors must fit it.
  CliRun other = run("train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --eval-every 0 --threads 1 --steps 1 "
                     "--data " + data + " --from-safetensors " + dir.file("hf"));
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_HAS(other.out, "--dim 32 but 16");
  CliRun file_alone = run("train --layers 1 --dim 32 --heads 2 --seq 16 --batch 2 --eval-every 0 --threads 1 --steps 1 "
                          "--data " + data + " --from-safetensors " + dir.file("hf") + "/model.safetensors");
  EXPECT_EQ(file_alone.code, 1) << file_alone.out;
  EXPECT_HAS(file_alone.out, "transformer.wte.weight has shape [256,16], this model's is [256,32]");
  EXPECT_EQ(run("export " + dir.file("ck")).code, 2);  // --out is required
}

// `tiertrain eval --token-losses --grads-out` (for tools/hf_golden.py, which compares them with transformers'): each
// scored token's loss, whose mean is the loss; the gradient of the mean loss written under the names and shapes
// export gives the weights, every tensor finite and not all zero; on a Llama with grouped-query attention.
TEST(Cli, EvalWritesEachTokensLossAndTheGradientsUnderTheExportNames) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", testing::synthetic_text(20000));
  ASSERT_EQ(run("train --family llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --ffn 48 --tied-embeddings false "
                "--seq 16 --batch 2 --eval-every 0 --threads 1 --data " + data + " --steps 3 --checkpoint-dir " +
                dir.file("ck"))
                .code,
            0);
  ASSERT_EQ(run("export " + dir.file("ck") + " --out " + dir.file("hf")).code, 0);
  CliRun ev = run("eval " + dir.file("ck") + " --data " + data + " --batch 2 --batches 3 --backend cpu --json "
                  "--token-losses --grads-out " + dir.file("grads"));
  ASSERT_EQ(ev.code, 0) << ev.out;
  const nlohmann::json j = nlohmann::json::parse(ev.out);
  const std::vector<double> tl = j.at("token_losses").get<std::vector<double>>();
  ASSERT_EQ(tl.size(), 3u * 2u * 16u);  // batches x batch x seq
  double sum = 0;
  for (double x : tl) sum += x;
  EXPECT_NEAR(sum / static_cast<double>(tl.size()), j.at("loss").get<double>(), 1e-6 * j.at("loss").get<double>());
  auto header = [](const std::string& path, std::string* file, size_t* data_at) {
    *file = read_file(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>((*file)[static_cast<size_t>(i)]);
    *data_at = 8 + n;
    return nlohmann::json::parse(file->substr(8, n));
  };
  std::string weights, grads;
  size_t weights_at = 0, data_at = 0;
  nlohmann::json hw = header(dir.file("hf") + "/model.safetensors", &weights, &weights_at);
  nlohmann::json hg = header(dir.file("grads") + "/model.safetensors", &grads, &data_at);
  EXPECT_EQ(hg.at("__metadata__").at("producer"), "tiertrain eval --grads-out");
  hw.erase("__metadata__");
  hg.erase("__metadata__");
  ASSERT_EQ(hw.size(), hg.size());
  EXPECT_TRUE(hg.contains("model.layers.1.self_attn.k_proj.weight"));
  for (const auto& [name, e] : hw.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(hg.contains(name));
    EXPECT_EQ(hg.at(name).at("shape"), e.at("shape"));
    EXPECT_EQ(hg.at(name).at("dtype"), "F32");
    const size_t a = hg.at(name).at("data_offsets")[0].get<size_t>(), b = hg.at(name).at("data_offsets")[1];
    size_t nonzero = 0;
    for (size_t at = a; at < b; at += 4) {
      float v;
      std::memcpy(&v, grads.data() + data_at + at, 4);
      ASSERT_TRUE(std::isfinite(v)) << at;
      nonzero += v != 0.0f;
    }
    EXPECT_GT(nonzero, 0u);
  }
  EXPECT_TRUE(fs::exists(dir.file("grads") + "/config.json"));
}

// `tokenize` writes the shards `train` reads, and a model of them samples text from a text prompt (`--vocab`): on a
// small byte-level vocabulary in GPT-2's file format (python/tests/test_tokenize.py checks GPT-2's own files against
// tiktoken where they can be installed). Missing files, no text and a text prompt without --vocab are named.
TEST(Cli, TokenizeTrainAndSampleFromATextPrompt) {
  TempDir dir;
  const std::string sp = testing::gpt2_char_of(' ');
  std::filesystem::create_directories(dir.file("vocab"));
  // Merges that make every word of the corpus one token: "the", " cat", " sat", " on", " the", " mat", ".".
  testing::write_small_gpt2_vocab(dir.file("vocab"),
                                  {{"t", "h"}, {"th", "e"}, {sp, "c"}, {"a", "t"}, {sp + "c", "at"}, {sp, "s"},
                                   {sp + "s", "at"}, {sp, "m"}, {sp + "m", "at"}, {sp, "o"}, {sp + "o", "n"},
                                   {sp, "th"}, {sp + "th", "e"}});
  std::filesystem::create_directories(dir.file("corpus"));
  std::string text;
  while (text.size() < 12000) text += "the cat sat on the mat. ";
  dir.write("corpus/a.txt", text);
  dir.write("corpus/b.txt", text);
  CliRun t = run("tokenize " + dir.file("corpus") + " --vocab " + dir.file("vocab") + " --out " + dir.file("shards") +
                 " --shard-tokens 4000 --val-tokens 1000");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_HAS(t.out, "tokenized 2 files");
  EXPECT_TRUE(std::filesystem::exists(dir.file("shards/val_000000.bin"))) << t.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("shards/train_000001.bin"))) << t.out;
  CliRun tr = run("train --layers 1 --dim 32 --heads 2 --seq 32 --batch 4 --steps 60 --warmup 5 --lr 1e-2 "
                  "--eval-every 0 --threads 1 --backend cpu --data " + dir.file("shards") + " --checkpoint-dir " +
                  dir.file("ck"));
  ASSERT_EQ(tr.code, 0) << tr.out;
  CliRun s = run("sample " + dir.file("ck") + " --vocab " + dir.file("vocab") +
                 " --prompt 'the cat' --tokens 12 --top-k 1 --backend cpu --out " + dir.file("s.txt"));
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_HAS(s.out, "after a prompt of 2");  // "the" and " cat", one token each
  const std::string sample = read_file(dir.file("s.txt"));
  EXPECT_EQ(sample.rfind("the cat", 0), 0u) << sample;
  EXPECT_TRUE(sample.find(" sat") != std::string::npos || sample.find(" mat") != std::string::npos) << sample;
  // What is missing or wrong is named.
  CliRun novocab = run("tokenize " + dir.file("corpus") + " --vocab " + dir.file("corpus") + " --out " +
                       dir.file("x"));
  EXPECT_NE(novocab.code, 0);
  EXPECT_HAS(novocab.out, "no encoder.json or vocab.json");
  std::filesystem::create_directories(dir.file("empty"));
  dir.write("empty/bin.dat", std::string("\0\1\2", 3));
  CliRun notext = run("tokenize " + dir.file("empty") + " --vocab " + dir.file("vocab") + " --out " + dir.file("y"));
  EXPECT_NE(notext.code, 0);
  EXPECT_HAS(notext.out, "no text in the inputs");
  CliRun ids = run("sample " + dir.file("ck") + " --prompt 'the cat' --tokens 1 --backend cpu");
  EXPECT_NE(ids.code, 0);
  EXPECT_HAS(ids.out, "give --tokenizer");
}

}  // namespace
}  // namespace tt
