// data/npy: arrays written by write_npy read back by NpyArray (shape, dtype, every value); headers numpy writes
// (version 1.0, a hand-made one here) read; malformed files refused with the reason.
#include "data/npy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace tt::data {
namespace {

TEST(Npy, WrittenArraysReadBack) {
  testing::TempDir dir;
  std::vector<float> x(6 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 3.0f;
  std::vector<int32_t> y = {3, 1, 4, 1, 5, 9};
  ASSERT_TRUE(write_npy(dir.path() + "/x.npy", "<f4", {6, 5}, x.data()).is_ok());
  ASSERT_TRUE(write_npy(dir.path() + "/y.npy", "<i4", {6}, y.data()).is_ok());
  auto a = NpyArray::open(dir.path() + "/x.npy");
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a.value().descr(), "<f4");
  EXPECT_EQ(a.value().shape(), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(std::vector<float>(a.value().data<float>(), a.value().data<float>() + 30), x);
  auto b = NpyArray::open(dir.path() + "/y.npy");
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b.value().shape(), (std::vector<int64_t>{6}));
  EXPECT_EQ(std::vector<int32_t>(b.value().data<int32_t>(), b.value().data<int32_t>() + 6), y);
  // The header is numpy's: magic, version 1.0, a 64-byte aligned dict ending in a newline.
  std::ifstream f(dir.path() + "/y.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  EXPECT_EQ((10 + header) % 64, 0u);
  EXPECT_EQ(bytes[10 + header - 1], '\n');
  EXPECT_NE(bytes.find("'shape': (6,)"), std::string::npos) << "a 1-tuple keeps its comma";
}

TEST(Npy, MalformedFilesAreRefusedWithTheReason) {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& dict, size_t data_bytes) {
    std::string h = dict;
    h.append((10 + h.size() + 1 + 63) / 64 * 64 - 10 - h.size() - 1, ' ');
    h += '\n';
    std::string s = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) +
                    static_cast<char>(h.size() >> 8) + h + std::string(data_bytes, '\0');
    std::ofstream(dir.path() + "/" + name, std::ios::binary) << s;
    return dir.path() + "/" + name;
  };
  EXPECT_TRUE(NpyArray::open(write("ok.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24)).is_ok());
  auto shorter = NpyArray::open(write("short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20));
  EXPECT_NE(shorter.status().message().find("20 bytes of data, the header's <f4 (2, 3) needs 24"), std::string::npos)
      << shorter.status().message();
  auto fortran = NpyArray::open(write("f.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24));
  EXPECT_NE(fortran.status().message().find("Fortran-order"), std::string::npos);
  auto dtype = NpyArray::open(write("c.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16));
  EXPECT_NE(dtype.status().message().find("dtype '<c8' is not supported"), std::string::npos);
  std::ofstream(dir.path() + "/junk.npy") << "not an array at all";
  EXPECT_NE(NpyArray::open(dir.path() + "/junk.npy").status().message().find("no magic"), std::string::npos);
  EXPECT_FALSE(NpyArray::open(dir.path() + "/missing.npy").is_ok());
}

}  // namespace
}  // namespace tt::data
