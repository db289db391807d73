// core/tensorfile: the .ttf container. Round trips of every dtype (scalar and empty shapes included) with metadata;
// detection of truncation, corruption and foreign files with kDataLoss and a message naming the file and the
// problem; read() type checks; atomic replacement that leaves no temporary file and never damages the old file; and
// compatibility with the Python writer through the committed golden file tests/golden/gpt_golden.ttf.
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "core/tensorfile.h"
#include "temp_dir.h"
#include "check_util.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

#define EXPECT_CONTAINS(s, part) EXPECT_TRUE(contains((s), (part))) << "'" << (s) << "' lacks '" << (part) << "'"

using testing::read_file;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The names in a directory, sorted.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class TensorFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path();
    // Deterministic contents of every dtype.
    f32_.resize(6);
    for (size_t i = 0; i < f32_.size(); ++i) f32_[i] = 0.5f * static_cast<float>(i) - 1.25f;
    f64_ = {3.141592653589793, -2.718281828459045, 1e-300, 1e300};
    i32_.resize(8);
    for (size_t i = 0; i < i32_.size(); ++i) i32_[i] = static_cast<int32_t>(i * i) - 20;
    u8_ = {0, 1, 127, 128, 255};  // 5 bytes: the next tensor must still start 64-byte aligned
    scalar_ = 42.5f;
    big_.resize(3000);
    for (size_t i = 0; i < big_.size(); ++i) big_[i] = static_cast<float>(i) * 0.001f;
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Writes the standard file: every dtype, a scalar, an empty tensor, and a larger tensor last.
  Status write_standard(const std::string& p) const {
    TensorFileWriter w;
    w.set_meta({{"step", 10}, {"model", "gpt"}, {"nested", {{"lr", 0.5}, {"ids", {1, 2, 3}}}}});
    w.add("a_f32", DType::kF32, {2, 3}, f32_.data());
    w.add("b_f64", DType::kF64, {4}, f64_.data());
    w.add("c_u8", DType::kU8, {5}, u8_.data());
    w.add("d_i32", DType::kI32, {2, 2, 2}, i32_.data());
    w.add("e_scalar", DType::kF32, {}, &scalar_);
    w.add("f_empty", DType::kF32, {0, 7}, nullptr);
    w.add("g_big", DType::kF32, {3000}, big_.data());
    return w.write_atomic(p);
  }

  // Byte offset in the file where the data section starts (from the header length in the prefix).
  static uint64_t data_start_of(const std::string& bytes) {
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data() + 8, 8);
    return (24 + header_bytes + 63) / 64 * 64;
  }
  static uint64_t header_bytes_of(const std::string& bytes) {
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data() + 8, 8);
    return header_bytes;
  }

  testing::TempDir tmp_;
  std::string dir_;
  std::vector<float> f32_;
  std::vector<double> f64_;
  std::vector<int32_t> i32_;
  std::vector<uint8_t> u8_;
  float scalar_ = 0;
  std::vector<float> big_;
};

// --- round trip -----------------------------------------------------------------------------------------------------

TEST_F(TensorFileTest, RoundTripEveryDtype) {
  const std::string p = path("rt.ttf");
  Status ws = write_standard(p);
  ASSERT_TRUE(ws.is_ok()) << ws.to_string();
  Result<TensorFileReader> rr = TensorFileReader::open(p);
  ASSERT_TRUE(rr.is_ok()) << rr.status().to_string();
  const TensorFileReader& r = rr.value();
  EXPECT_EQ(r.path(), p);

  std::vector<float> f32(6);
  ASSERT_TRUE(r.read("a_f32", DType::kF32, {2, 3}, f32.data()).is_ok());
  EXPECT_EQ(f32, f32_);
  std::vector<double> f64(4);
  ASSERT_TRUE(r.read("b_f64", DType::kF64, {4}, f64.data()).is_ok());
  EXPECT_EQ(f64, f64_);  // bit-exact
  std::vector<uint8_t> u8(5);
  ASSERT_TRUE(r.read("c_u8", DType::kU8, {5}, u8.data()).is_ok());
  EXPECT_EQ(u8, u8_);
  std::vector<int32_t> i32(8);
  ASSERT_TRUE(r.read("d_i32", DType::kI32, {2, 2, 2}, i32.data()).is_ok());
  EXPECT_EQ(i32, i32_);
  float scalar = 0;
  ASSERT_TRUE(r.read("e_scalar", DType::kF32, {}, &scalar).is_ok());
  EXPECT_EQ(scalar, 42.5f);
  float sentinel = -1;
  ASSERT_TRUE(r.read("f_empty", DType::kF32, {0, 7}, &sentinel).is_ok());
  EXPECT_EQ(sentinel, -1.0f);  // nothing written
  std::vector<float> big(3000);
  ASSERT_TRUE(r.read("g_big", DType::kF32, {3000}, big.data()).is_ok());
  EXPECT_EQ(big, big_);
}

TEST_F(TensorFileTest, ReadAllTemplates) {
  ASSERT_TRUE(write_standard(path("rt.ttf")).is_ok());
  Result<TensorFileReader> rr = TensorFileReader::open(path("rt.ttf"));
  ASSERT_TRUE(rr.is_ok()) << rr.status().to_string();
  const TensorFileReader& r = rr.value();
  Result<std::vector<int32_t>> i32 = r.read_all<int32_t>("d_i32");
  ASSERT_TRUE(i32.is_ok()) << i32.status().to_string();
  EXPECT_EQ(i32.value(), i32_);
  Result<std::vector<float>> scalar = r.read_all<float>("e_scalar");
  ASSERT_TRUE(scalar.is_ok());
  ASSERT_EQ(scalar.value().size(), 1u);
  EXPECT_EQ(scalar.value()[0], 42.5f);
  Result<std::vector<float>> empty = r.read_all<float>("f_empty");
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_TRUE(empty.value().empty());
  Result<std::vector<double>> wrong = r.read_all<double>("a_f32");
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  Result<std::vector<float>> missing = r.read_all<float>("zzz");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "'zzz'");
}

TEST_F(TensorFileTest, EntriesMetaAndLayout) {
  ASSERT_TRUE(write_standard(path("rt.ttf")).is_ok());
  Result<TensorFileReader> rr = TensorFileReader::open(path("rt.ttf"));
  ASSERT_TRUE(rr.is_ok()) << rr.status().to_string();
  const TensorFileReader& r = rr.value();

  EXPECT_EQ(r.meta()["step"], 10);
  EXPECT_EQ(r.meta()["model"], "gpt");
  EXPECT_DOUBLE_EQ(r.meta()["nested"]["lr"].get<double>(), 0.5);
  EXPECT_EQ(r.meta()["nested"]["ids"], nlohmann::json({1, 2, 3}));

  const std::vector<std::string> names = {"a_f32", "b_f64", "c_u8", "d_i32", "e_scalar", "f_empty", "g_big"};
  ASSERT_EQ(r.entries().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorFileEntry& e = r.entries()[i];
    EXPECT_EQ(e.name, names[i]);  // file order is insertion order
    EXPECT_EQ(e.offset % 64, 0u) << e.name;
    if (i > 0) {
      EXPECT_GE(e.offset, r.entries()[i - 1].offset + r.entries()[i - 1].bytes) << e.name;
    }
  }
  const TensorFileEntry* a = r.find("a_f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->bytes, 24u);
  EXPECT_EQ(a->crc32, crc32_of(f32_.data(), 24));
  const TensorFileEntry* c = r.find("c_u8");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kU8);
  EXPECT_EQ(c->bytes, 5u);
  const TensorFileEntry* s = r.find("e_scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->bytes, 4u);
  const TensorFileEntry* empty = r.find("f_empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(empty->bytes, 0u);
  EXPECT_EQ(r.find("nope"), nullptr);

  // Frame: magic, header, trailer magic, and the trailer records the file size.
  const std::string bytes = read_file(path("rt.ttf"));
  EXPECT_EQ(bytes.substr(0, 8), "TTTENSR1");
  EXPECT_EQ(bytes.substr(bytes.size() - 16, 8), "TTEND001");
  uint64_t recorded = 0;
  std::memcpy(&recorded, bytes.data() + bytes.size() - 8, 8);
  EXPECT_EQ(recorded, bytes.size());
  const TensorFileEntry* last = r.find("g_big");
  EXPECT_EQ(data_start_of(bytes) + last->offset + last->bytes + 16, bytes.size());
}

TEST_F(TensorFileTest, NoTensorsOnlyMeta) {
  TensorFileWriter w;
  w.set_meta({{"only", "meta"}});
  ASSERT_TRUE(w.write_atomic(path("meta.ttf")).is_ok());
  Result<TensorFileReader> r = TensorFileReader::open(path("meta.ttf"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->entries().empty());
  EXPECT_EQ(r->meta()["only"], "meta");
}

TEST(Crc32, KnownValues) {
  // The standard CRC-32 (zlib / Python's zlib.crc32) check value.
  EXPECT_EQ(crc32_of("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32_of("", 0), 0u);
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({4, 32}), "[4, 32]");
}

// --- corruption and truncation --------------------------------------------------------------------------------------

void expect_open_fails(const std::string& p, StatusCode code, const std::vector<std::string>& parts) {
  Result<TensorFileReader> r = TensorFileReader::open(p);
  ASSERT_FALSE(r.is_ok()) << p << " opened";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_CONTAINS(r.status().message(), p);
  for (const auto& part : parts) EXPECT_CONTAINS(r.status().message(), part);
}

TEST_F(TensorFileTest, TruncationIsDetectedAtEveryCut) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  const std::string bytes = read_file(path("full.ttf"));
  const uint64_t header_bytes = header_bytes_of(bytes);
  const uint64_t data_start = data_start_of(bytes);
  ASSERT_GT(bytes.size(), data_start + 1000);
  const std::vector<std::pair<std::string, size_t>> cuts = {
      {"empty", 0},
      {"10 bytes", 10},
      {"prefix only", 24},
      {"mid-header", 24 + header_bytes / 2},
      {"end of header", 24 + header_bytes},
      {"start of data", data_start},
      {"mid-data", data_start + (bytes.size() - 16 - data_start) / 2},
      {"mid-trailer", bytes.size() - 8},
      {"missing last byte", bytes.size() - 1},
  };
  for (const auto& [what, size] : cuts) {
    SCOPED_TRACE(what);
    const std::string p = path("cut.ttf");
    write_bytes(p, bytes.substr(0, size));
    expect_open_fails(p, StatusCode::kDataLoss, {"truncated"});
  }
}

TEST_F(TensorFileTest, ExtraTrailingByteIsDetected) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  write_bytes(path("long.ttf"), read_file(path("full.ttf")) + std::string(1, '\0'));
  expect_open_fails(path("long.ttf"), StatusCode::kDataLoss, {});
}

TEST_F(TensorFileTest, FlippedDataByteIsACrcMismatchNamingTheTensor) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  std::string bytes = read_file(path("full.ttf"));
  Result<TensorFileReader> clean = TensorFileReader::open(path("full.ttf"));
  ASSERT_TRUE(clean.is_ok());
  const TensorFileEntry* d = clean->find("d_i32");
  ASSERT_NE(d, nullptr);
  bytes[data_start_of(bytes) + d->offset + 5] ^= 0x10;
  write_bytes(path("flip.ttf"), bytes);

  Result<TensorFileReader> r = TensorFileReader::open(path("flip.ttf"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();  // data CRCs are checked per read
  std::vector<int32_t> dst(8);
  Status s = r->read("d_i32", DType::kI32, {2, 2, 2}, dst.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "CRC mismatch");
  EXPECT_CONTAINS(s.message(), "'d_i32'");
  EXPECT_CONTAINS(s.message(), path("flip.ttf"));
  // The other tensors are intact and still read.
  std::vector<float> a(6);
  EXPECT_TRUE(r->read("a_f32", DType::kF32, {2, 3}, a.data()).is_ok());
  EXPECT_EQ(a, f32_);
  std::vector<float> big(3000);
  EXPECT_TRUE(r->read("g_big", DType::kF32, {3000}, big.data()).is_ok());
}

TEST_F(TensorFileTest, FlippedByteInEveryTensorIsDetected) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  const std::string bytes = read_file(path("full.ttf"));
  Result<TensorFileReader> clean = TensorFileReader::open(path("full.ttf"));
  ASSERT_TRUE(clean.is_ok());
  for (const TensorFileEntry& e : clean->entries()) {
    if (e.bytes == 0) continue;
    for (uint64_t at : {uint64_t(0), e.bytes / 2, e.bytes - 1}) {
      SCOPED_TRACE(e.name + " byte " + std::to_string(at));
      std::string b = bytes;
      b[data_start_of(b) + e.offset + at] ^= 0x01;
      write_bytes(path("flip.ttf"), b);
      Result<TensorFileReader> r = TensorFileReader::open(path("flip.ttf"));
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      std::vector<char> dst(e.bytes);
      Status s = r->read(e.name, e.dtype, e.shape, dst.data());
      EXPECT_EQ(s.code(), StatusCode::kDataLoss);
      EXPECT_CONTAINS(s.message(), "'" + e.name + "'");
    }
  }
}

TEST_F(TensorFileTest, FlippedHeaderByteIsAHeaderCrcMismatch) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  const std::string bytes = read_file(path("full.ttf"));
  const uint64_t header_bytes = header_bytes_of(bytes);
  for (uint64_t at : {uint64_t(24), 24 + header_bytes / 3, 24 + header_bytes - 1}) {
    SCOPED_TRACE("header byte at " + std::to_string(at));
    std::string b = bytes;
    b[at] ^= 0x04;
    write_bytes(path("hdr.ttf"), b);
    expect_open_fails(path("hdr.ttf"), StatusCode::kDataLoss, {"header CRC mismatch"});
  }
  // A flipped bit of the stored header CRC itself.
  std::string b = bytes;
  b[17] ^= 0x80;
  write_bytes(path("crc.ttf"), b);
  expect_open_fails(path("crc.ttf"), StatusCode::kDataLoss, {"header CRC mismatch"});
}

TEST_F(TensorFileTest, CorruptHeaderLengthIsDetected) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  std::string b = read_file(path("full.ttf"));
  b[8 + 5] ^= 0x01;  // header length becomes enormous
  write_bytes(path("len.ttf"), b);
  expect_open_fails(path("len.ttf"), StatusCode::kDataLoss, {});
  b = read_file(path("full.ttf"));
  b[8] ^= 0x01;  // header length off by one
  write_bytes(path("len1.ttf"), b);
  expect_open_fails(path("len1.ttf"), StatusCode::kDataLoss, {});
}

TEST_F(TensorFileTest, BadMagic) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  std::string b = read_file(path("full.ttf"));
  b[3] = 'X';
  write_bytes(path("magic.ttf"), b);
  expect_open_fails(path("magic.ttf"), StatusCode::kDataLoss, {"bad magic"});

  // A file that is not a tensor file at all.
  write_bytes(path("text.ttf"), std::string(200, 'x'));
  expect_open_fails(path("text.ttf"), StatusCode::kDataLoss, {"not a tiertrain tensor file"});
}

TEST_F(TensorFileTest, CorruptTrailerMagic) {
  ASSERT_TRUE(write_standard(path("full.ttf")).is_ok());
  std::string b = read_file(path("full.ttf"));
  b[b.size() - 12] ^= 0x20;
  write_bytes(path("trailer.ttf"), b);
  // Issue 25: a flipped marker used to read "size 1457104 != recorded 1457104".
  expect_open_fails(path("trailer.ttf"), StatusCode::kDataLoss, {"last 16 bytes are not a tensor file's trailer"});
}

TEST_F(TensorFileTest, MissingFileIsNotFound) {
  expect_open_fails(path("absent.ttf"), StatusCode::kNotFound, {"does not exist"});
}

// A folder or a FIFO is refused before it is opened (a FIFO would block the open until a writer came).
TEST_F(TensorFileTest, AFolderOrAFifoIsNotATensorFile) {
  expect_open_fails(path(""), StatusCode::kFailedPrecondition, {"is a folder, not a file"});
  const std::string fifo = path("fifo.ttf");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_open_fails(fifo, StatusCode::kFailedPrecondition, {"is a FIFO, socket or device"});
}

// Issue 47: the header's tensor entries are checked field by field (a type error used to surface as nlohmann's own
// words: "[json.exception.type_error.302] type must be string, but is number"), a tensor named twice is refused,
// and so is a prefix whose reserved word is not 0. Each damaged header keeps its length (padded with spaces) and a
// valid CRC, so only the check under test can refuse it.
TEST_F(TensorFileTest, HeaderEntriesAreCheckedFieldByField) {
  const std::string p = path("t.ttf");
  ASSERT_TRUE(write_standard(p).is_ok());
  const std::string good = read_file(p);
  const uint64_t hb = header_bytes_of(good);
  const nlohmann::json header = nlohmann::json::parse(good.substr(24, hb));
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json h = header;
    change(h);
    std::string text = h.dump();
    EXPECT_LE(text.size(), hb) << "the damaged header must not be longer";
    text.resize(hb, ' ');
    std::string bytes = good;
    bytes.replace(24, hb, text);
    const uint32_t crc = crc32_of(text.data(), text.size());
    std::memcpy(bytes.data() + 16, &crc, 4);
    write_bytes(p, bytes);
  };
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"dtype zz", [](nlohmann::json& h) { h["tensors"][0]["dtype"] = "zz"; }, "dtype 'zz' is not one this build reads"},
      {"name a number", [](nlohmann::json& h) { h["tensors"][1]["name"] = 5; },
       "tensor entry 1: field 'name' must be a non-empty string"},
      {"shape a string", [](nlohmann::json& h) { h["tensors"][1]["shape"] = "x"; },
       "('b_f64'): field 'shape' must be an array"},
      {"offset a string", [](nlohmann::json& h) { h["tensors"][2]["offset"] = "0"; },
       "tensor entry 2: field 'offset' must be an integer"},
      {"a name twice", [](nlohmann::json& h) { h["tensors"][1]["name"] = "a_f32"; },
       "tensor 'a_f32' appears twice in the file"},
      {"tensors not an array", [](nlohmann::json& h) { h["tensors"] = 0; }, "'tensors' must be an array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    with(c.change);
    auto r = TensorFileReader::open(p);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_CONTAINS(r.status().message(), c.says);
    EXPECT_EQ(r.status().message().find("json.exception"), std::string::npos) << r.status().message();
  }
  std::string reserved = good;
  reserved[20] = 1;
  write_bytes(p, reserved);
  expect_open_fails(p, StatusCode::kDataLoss, {"reserved word"});
  write_bytes(p, good);
  EXPECT_TRUE(TensorFileReader::open(p).is_ok());
}

// --- read() checks ------------------------------------------------------------------------------------------------

TEST_F(TensorFileTest, ReadWithWrongDtypeOrShapeNamesBoth) {
  ASSERT_TRUE(write_standard(path("rt.ttf")).is_ok());
  Result<TensorFileReader> r = TensorFileReader::open(path("rt.ttf"));
  ASSERT_TRUE(r.is_ok());
  std::vector<double> dst(6, -7.0);

  Status dtype = r->read("a_f32", DType::kF64, {2, 3}, dst.data());
  EXPECT_EQ(dtype.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(dtype.message(), "'a_f32'");
  EXPECT_CONTAINS(dtype.message(), "f32 [2, 3]");
  EXPECT_CONTAINS(dtype.message(), "f64 [2, 3]");

  Status shape = r->read("a_f32", DType::kF32, {3, 2}, dst.data());
  EXPECT_EQ(shape.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(shape.message(), "f32 [2, 3]");
  EXPECT_CONTAINS(shape.message(), "f32 [3, 2]");

  Status rank = r->read("e_scalar", DType::kF32, {1}, dst.data());
  EXPECT_EQ(rank.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(rank.message(), "f32 []");
  EXPECT_CONTAINS(rank.message(), "f32 [1]");

  for (double v : dst) EXPECT_EQ(v, -7.0);  // nothing was written on a failed check

  Status missing = r->read("nope", DType::kF32, {1}, dst.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.message(), "'nope'");
}

// --- atomic writes --------------------------------------------------------------------------------------------------

TEST_F(TensorFileTest, AtomicWriteLeavesNoTempFileAndReplaces) {
  const std::string p = path("ckpt.ttf");
  const float one = 1.0f, two = 2.0f;
  TensorFileWriter w1;
  w1.set_meta({{"step", 1}});
  w1.add("x", DType::kF32, {}, &one);
  ASSERT_TRUE(w1.write_atomic(p).is_ok());
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"ckpt.ttf"});

  TensorFileWriter w2;
  w2.set_meta({{"step", 2}});
  w2.add("x", DType::kF32, {}, &two);
  w2.add("y", DType::kI32, {1}, &i32_[0]);
  ASSERT_TRUE(w2.write_atomic(p).is_ok());
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"ckpt.ttf"});

  Result<TensorFileReader> r = TensorFileReader::open(p);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->meta()["step"], 2);
  EXPECT_EQ(r->entries().size(), 2u);
  float x = 0;
  ASSERT_TRUE(r->read("x", DType::kF32, {}, &x).is_ok());
  EXPECT_EQ(x, 2.0f);
}

TEST_F(TensorFileTest, ReaderKeepsTheOldFileWhileItIsReplaced) {
  // The rename replaces the directory entry; an open reader keeps reading the file it opened.
  const std::string p = path("ckpt.ttf");
  ASSERT_TRUE(write_standard(p).is_ok());
  Result<TensorFileReader> r = TensorFileReader::open(p);
  ASSERT_TRUE(r.is_ok());
  const float other = 9.0f;
  TensorFileWriter w;
  w.add("a_f32", DType::kF32, {}, &other);
  ASSERT_TRUE(w.write_atomic(p).is_ok());
  std::vector<float> big(3000);
  ASSERT_TRUE(r->read("g_big", DType::kF32, {3000}, big.data()).is_ok());
  EXPECT_EQ(big, big_);
}

TEST_F(TensorFileTest, WriteIntoMissingDirectoryFails) {
  const std::string p = path("no/such/dir/x.ttf");
  TensorFileWriter w;
  w.add("a", DType::kF32, {6}, f32_.data());
  Status s = w.write_atomic(p);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_CONTAINS(s.message(), path("no/such/dir/x.ttf"));
  EXPECT_FALSE(fs::exists(path("no")));
}

TEST_F(TensorFileTest, WriteUnderARegularFileFails) {
  // Tests may run as root, for whom a chmod'ed read-only directory is writable; a path "under" a regular file fails
  // for everyone (ENOTDIR).
  ASSERT_TRUE(write_standard(path("old.ttf")).is_ok());
  const std::string before = read_file(path("old.ttf"));
  TensorFileWriter w;
  w.add("a", DType::kF32, {6}, f32_.data());
  for (const std::string& p : {path("old.ttf") + "/x.ttf", std::string("/etc/passwd/x.ttf")}) {
    Status s = w.write_atomic(p);
    EXPECT_EQ(s.code(), StatusCode::kIoError) << p;
    EXPECT_CONTAINS(s.message(), p);
  }
  EXPECT_EQ(read_file(path("old.ttf")), before);
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"old.ttf"});
}

TEST_F(TensorFileTest, RenameFailureKeepsTargetAndRemovesTemp) {
  // The target is a non-empty directory: the temp file is written, the rename fails (EISDIR/ENOTEMPTY).
  const std::string target = path("ckpt.ttf");
  fs::create_directory(target);
  write_bytes(target + "/keep", "keep me");
  TensorFileWriter w;
  w.add("a", DType::kF32, {6}, f32_.data());
  Status s = w.write_atomic(target);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_CONTAINS(s.message(), "renaming");
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"ckpt.ttf"});
  EXPECT_EQ(read_file(target + "/keep"), "keep me");
}

TEST_F(TensorFileTest, FailedWriteLeavesTheOldFileIntact) {
  // RLIMIT_FSIZE makes write() fail with EFBIG part-way through the data, as a full disk would; it applies to root
  // too. The old checkpoint at the same path must be untouched and no temp file may remain.
  const std::string p = path("ckpt.ttf");
  const float one = 1.0f;
  TensorFileWriter small;
  small.add("x", DType::kF32, {}, &one);
  ASSERT_TRUE(small.write_atomic(p).is_ok());
  const std::string before = read_file(p);
  ASSERT_LT(before.size(), 4096u);

  std::vector<float> huge(1 << 16, 3.0f);  // 256 KiB
  TensorFileWriter w;
  w.add("huge", DType::kF32, {1 << 16}, huge.data());

  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 * 1024;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  Status s = w.write_atomic(p);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  EXPECT_CONTAINS(s.message(), "writing");
  EXPECT_EQ(read_file(p), before);
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"ckpt.ttf"});
  Result<TensorFileReader> r = TensorFileReader::open(p);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  float x = 0;
  EXPECT_TRUE(r->read("x", DType::kF32, {}, &x).is_ok());
  EXPECT_EQ(x, 1.0f);
}

// --- compatibility with the Python writer (tools/tensorfile.py) -----------------------------------------------------

TEST(TensorFileGolden, PythonWrittenFileReads) {
  const std::string p = testing::data_path("gpt_golden.ttf");
  Result<TensorFileReader> rr = TensorFileReader::open(p);
  ASSERT_TRUE(rr.is_ok()) << rr.status().to_string();
  const TensorFileReader& r = rr.value();

  EXPECT_EQ(r.meta()["config"]["V"], 256);
  EXPECT_EQ(r.meta()["config"]["T"], 32);
  EXPECT_EQ(r.meta()["config"]["B"], 4);
  EXPECT_EQ(r.meta()["steps"], 10);

  const TensorFileEntry* tokens = r.find("tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->dtype, DType::kI32);
  EXPECT_EQ(tokens->shape, (std::vector<int64_t>{4, 32}));
  const TensorFileEntry* loss = r.find("loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->dtype, DType::kF32);
  EXPECT_TRUE(loss->shape.empty());

  // Values as tools/tensorfile.py reads them (numpy), recorded when this test was written.
  std::vector<int32_t> tok(4 * 32);
  ASSERT_TRUE(r.read("tokens", DType::kI32, {4, 32}, tok.data()).is_ok());
  EXPECT_EQ(std::vector<int32_t>(tok.begin(), tok.begin() + 8),
            (std::vector<int32_t>{203, 34, 2, 239, 195, 71, 163, 54}));
  int64_t sum = 0;
  for (int32_t t : tok) {
    sum += t;
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
  }
  EXPECT_EQ(sum, 17569);
  Result<std::vector<int32_t>> targets = r.read_all<int32_t>("targets");
  ASSERT_TRUE(targets.is_ok()) << targets.status().to_string();
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t + 1 < 32; ++t) EXPECT_EQ(targets.value()[b * 32 + t], tok[b * 32 + t + 1]) << b << "," << t;

  float l = 0;
  ASSERT_TRUE(r.read("loss", DType::kF32, {}, &l).is_ok());
  uint32_t bits = 0;
  std::memcpy(&bits, &l, 4);
  EXPECT_EQ(bits, 1085421281u) << "loss " << l;  // 5.569199085235596f
  Result<std::vector<float>> step_losses = r.read_all<float>("step_losses");
  ASSERT_TRUE(step_losses.is_ok());
  ASSERT_EQ(step_losses.value().size(), 10u);
  EXPECT_EQ(step_losses.value()[0], l);
  for (size_t i = 1; i < 10; ++i) EXPECT_LT(step_losses.value()[i], step_losses.value()[i - 1]);
}

TEST(TensorFileGolden, EveryEntryPassesItsCrc) {
  for (const char* name : {"gpt_golden.ttf", "gpt_golden_f64.ttf"}) {
    SCOPED_TRACE(name);
    Result<TensorFileReader> rr = TensorFileReader::open(testing::data_path(name));
    ASSERT_TRUE(rr.is_ok()) << rr.status().to_string();
    const TensorFileReader& r = rr.value();
    ASSERT_GT(r.entries().size(), 60u);
    for (const TensorFileEntry& e : r.entries()) {
      EXPECT_EQ(e.offset % 64, 0u) << e.name;
      std::vector<char> buf(e.bytes);
      Status s = r.read(e.name, e.dtype, e.shape, buf.data());
      EXPECT_TRUE(s.is_ok()) << e.name << ": " << s.to_string();
      EXPECT_EQ(crc32_of(buf.data(), buf.size()), e.crc32) << e.name;
    }
  }
}

}  // namespace
}  // namespace tt
