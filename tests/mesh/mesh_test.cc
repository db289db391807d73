// mesh/: the mesh's shape and coordinates, the layout rules and their checks against a model, and the per-dimension
// communicators of real shm communicators (one thread a rank).
#include "mesh/mesh.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "comm/shm.h"

namespace tt::mesh {
namespace {

#define EXPECT_ERROR_HAS(expr, needle)                                                     \
  do {                                                                                     \
    const Status s_ = (expr).status();                                                    \
    EXPECT_FALSE(s_.is_ok());                                                              \
    EXPECT_NE(s_.message().find(needle), std::string::npos) << s_.message();              \
  } while (0)

TEST(MeshShape, ParsesNamedDimensionsAndAPlainCount) {
  auto m = MeshShape::parse(" data=2, model=4 ");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m.value().ranks(), 8);
  EXPECT_EQ(m.value().to_string(), "data=2,model=4");
  EXPECT_EQ(m.value().index_of("model"), 1);
  EXPECT_EQ(m.value().index_of("pipe"), -1);
  EXPECT_EQ(m.value().size_of("pipe"), 1);
  auto n = MeshShape::parse("4");
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(n.value().to_string(), "data=4");
}

TEST(MeshShape, BadSpecsAreErrorsNamingWhatIsWrong) {
  EXPECT_ERROR_HAS(MeshShape::parse(""), "empty");
  EXPECT_ERROR_HAS(MeshShape::parse("data"), "'data' is not NAME=SIZE");
  EXPECT_ERROR_HAS(MeshShape::parse("data=0"), "dimension data has size '0'");
  EXPECT_ERROR_HAS(MeshShape::parse("data=x"), "dimension data has size 'x'");
  EXPECT_ERROR_HAS(MeshShape::parse("data=2,data=2"), "named twice");
  EXPECT_ERROR_HAS(MeshShape::parse("da-ta=2"), "dimension name 'da-ta'");
  EXPECT_ERROR_HAS(MeshShape::parse("a=1024,b=1024,c=2"), "more than");
  auto m = MeshShape::parse("data=2,model=2");
  ASSERT_TRUE(m.is_ok());
  const Status s = m.value().check_ranks(3);
  EXPECT_NE(s.message().find("needs 4 ranks, and this job has 3"), std::string::npos) << s.message();
  EXPECT_TRUE(m.value().check_ranks(4).is_ok());
}

TEST(MeshShape, CoordinatesAreRowMajorAndRoundTrip) {
  auto m = MeshShape::parse("a=2,b=3,c=4");
  ASSERT_TRUE(m.is_ok());
  const MeshShape& s = m.value();
  EXPECT_EQ(s.coords(0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(s.coords(1), (std::vector<int>{0, 0, 1}));  // the last dimension varies fastest
  EXPECT_EQ(s.coords(4), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(s.coords(23), (std::vector<int>{1, 2, 3}));
  for (int r = 0; r < s.ranks(); ++r) EXPECT_EQ(s.rank_of(s.coords(r)), r);
}

TEST(Layout, DefaultsFollowTheDimensionsNames) {
  auto shape = MeshShape::parse("data=2,model=2").value();
  auto l = Layout::resolve("", shape);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l.value().to_string(), "batch:data,heads:model,ff:model,vocab:model");
  EXPECT_EQ(l.value().ways("heads", shape), 2);
  EXPECT_EQ(l.value().ways("embed", shape), 1);
  EXPECT_EQ(Layout::resolve("", MeshShape::parse("tp=4").value()).value().to_string(), "heads:tp,ff:tp,vocab:tp");
  EXPECT_EQ(Layout::resolve("", MeshShape::parse("gpus=4").value()).value().to_string(), "batch:gpus");
  EXPECT_EQ(Layout::resolve("", MeshShape::parse("rows=2,cols=2").value()).value().to_string(),
            "batch:rows,heads:cols,ff:cols,vocab:cols");
  EXPECT_ERROR_HAS(Layout::resolve("", MeshShape::parse("x=2,y=2,z=2").value()), "mesh dimension x (2 ranks) carries "
                                                                                  "no tensor dimension");
}

TEST(Layout, ExplicitRulesAreCheckedAgainstTheMesh) {
  auto shape = MeshShape::parse("data=2,model=2").value();
  auto l = Layout::resolve("batch:data, heads:model, ff:model", shape);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l.value().mesh_dim("vocab"), "");
  EXPECT_ERROR_HAS(Layout::resolve("batch:data,heads:pipe", shape), "heads:pipe names no dimension of --mesh");
  EXPECT_ERROR_HAS(Layout::resolve("batch:data,seq:model", shape), "'seq' is not a tensor dimension");
  EXPECT_ERROR_HAS(Layout::resolve("batch:data,heads:model,heads:data", shape), "heads is laid out twice");
  EXPECT_ERROR_HAS(Layout::resolve("batch:model,heads:model,ff:model,vocab:model", shape),
                   "batch and heads are both split over mesh dimension model");
  EXPECT_ERROR_HAS(Layout::resolve("batch:data", shape), "mesh dimension model (2 ranks) carries no tensor");
  EXPECT_ERROR_HAS(Layout::resolve("batch data", shape), "is not TENSOR_DIM:MESH_DIM");
}

TEST(Layout, AnIndivisibleDimensionIsAnErrorNamingIt) {
  auto shape = MeshShape::parse("data=2,model=4").value();
  auto l = Layout::resolve("batch:data,heads:model,ff:model,vocab:model,embed:model", shape).value();
  ModelConfig m{.vocab = 50257, .layers = 2, .dim = 768, .heads = 12, .seq = 64};
  EXPECT_TRUE(l.check(shape, m, 8).is_ok()) << l.check(shape, m, 8).to_string();
  Status s = l.check(shape, m, 7);
  EXPECT_NE(s.message().find("batch is 7 (--batch: sequences a step over all ranks), not divisible by the 2 ranks of "
                             "mesh dimension data"),
            std::string::npos)
      << s.message();
  m.heads = 6;
  s = l.check(shape, m, 8);
  EXPECT_NE(s.message().find("heads is 6 (attention heads), not divisible by the 4 ranks"), std::string::npos)
      << s.message();
  m.heads = 12;
  m.dim = 780;  // 780 % 4 == 0, 4 * 780 too; vocab padded 50304 % 4 == 0: all fine but for heads (780 / 12 = 65)
  EXPECT_TRUE(l.check(shape, m, 8).is_ok());
  auto seven = MeshShape::parse("model=7").value();
  auto l7 = Layout::resolve("vocab:model", seven).value();
  ModelConfig g{.vocab = 50257, .layers = 2, .dim = 768, .heads = 12, .seq = 64};
  s = l7.check(seven, g, 8);
  EXPECT_NE(s.message().find("vocab is 50304 (vocabulary rows, padded to a multiple of 128), not divisible by the 7"),
            std::string::npos)
      << s.message();
}

// Real communicators: each rank a thread with its shm communicator; every rank checks its coordinates, the size and
// rank of its communicator along each dimension, and an allreduce there (the sum of the world ranks that share its
// other coordinates).
TEST(Mesh, CommunicatorsAlongEachDimensionGroupTheRightRanks) {
  for (const char* spec : {"data=2,model=2", "a=2,b=3", "data=4", "x=1,y=3"}) {
    const MeshShape shape = MeshShape::parse(spec).value();
    const int n = shape.ranks();
    const std::string job = "meshtest" + std::to_string(getpid()) + "-" + std::to_string(n) + shape.dims()[0].name;
    std::atomic<int> failures{0};
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        auto fail = [&](const std::string& why) {
          errors[static_cast<size_t>(r)] = why;
          ++failures;
        };
        comm::ShmOptions o;
        o.job_id = job;
        o.buffer_bytes = 64 << 10;
        o.pool_bytes = 0;
        o.common.timeout = std::chrono::seconds(60);
        auto c = comm::create_shm(r, n, o);
        if (!c.is_ok()) return fail(c.status().to_string());
        auto m = Mesh::create(shape, std::move(c.value()));
        if (!m.is_ok()) return fail(m.status().to_string());
        Mesh& mesh = *m.value();
        if (mesh.coords() != shape.coords(r)) return fail("coordinates");
        for (size_t i = 0; i < shape.dims().size(); ++i) {
          const Dim& d = shape.dims()[i];
          comm::Communicator* along = mesh.along(d.name);
          if (d.size == 1) {
            if (along != nullptr) fail("a communicator along a dimension of one rank");
            continue;
          }
          if (along == nullptr || along->size() != d.size || along->rank() != mesh.coord(d.name))
            return fail("the communicator along " + d.name);
          int64_t x = r, want = 0;
          std::vector<int> c2 = mesh.coords();
          for (int k = 0; k < d.size; ++k) {
            c2[i] = k;
            want += shape.rank_of(c2);
          }
          if (!along->allreduce(comm::kInPlace, &x, 1, comm::DType::kI64, comm::Op::kSum).is_ok() || x != want)
            return fail("allreduce along " + d.name + ": " + std::to_string(x) + " != " + std::to_string(want));
        }
        if (mesh.along("pipe") != nullptr) fail("a dimension the mesh does not have");
        if (mesh.describe().find("rank " + std::to_string(r) + " of " + std::to_string(n) + " at ") != 0)
          fail("describe: " + mesh.describe());
      });
    }
    for (auto& t : ranks) t.join();
    EXPECT_EQ(failures.load(), 0) << spec;
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << spec << " rank " << r;
  }
}

TEST(Mesh, AWorldOfAnotherSizeIsRefused) {
  comm::ShmOptions o;
  o.job_id = "meshtest-one-" + std::to_string(getpid());
  o.buffer_bytes = 64 << 10;
  auto c = comm::create_shm(0, 1, o);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  auto m = Mesh::create(MeshShape::parse("data=2").value(), std::move(c.value()));
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("--mesh data=2 needs 2 ranks, and this job has 1"), std::string::npos);
}

}  // namespace
}  // namespace tt::mesh
