// core/units: parse_bytes accepts what people write ("512MiB", "1.5GB", " 4 KiB ") and rejects junk, negatives,
// fractional byte counts and overflow with kInvalidArgument; format_bytes prints binary units with two decimals.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/units.h"

namespace tt {
namespace {

constexpr int64_t kKiB = int64_t(1) << 10;
constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;
constexpr int64_t kTiB = int64_t(1) << 40;

void expect_bytes(const std::string& text, int64_t want) {
  Result<int64_t> r = parse_bytes(text);
  ASSERT_TRUE(r.is_ok()) << "'" << text << "': " << r.status().to_string();
  EXPECT_EQ(r.value(), want) << "'" << text << "'";
}

void expect_rejected(const std::string& text, const std::string& message_part) {
  Result<int64_t> r = parse_bytes(text);
  ASSERT_FALSE(r.is_ok()) << "'" << text << "' was accepted as " << r.value();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "'" << text << "'";
  EXPECT_NE(r.status().message().find(message_part), std::string::npos)
      << "'" << text << "': message '" << r.status().message() << "' lacks '" << message_part << "'";
  EXPECT_NE(r.status().message().find("'" + text + "'"), std::string::npos)
      << "the message should quote the input: " << r.status().message();
}

TEST(ParseBytes, PlainIntegers) {
  expect_bytes("0", 0);
  expect_bytes("123", 123);
  expect_bytes("1048576", kMiB);
  expect_bytes("123B", 123);
  expect_bytes("123 b", 123);
  expect_bytes("2.0", 2);  // a decimal that is a whole number of bytes is fine
}

TEST(ParseBytes, BinaryUnits) {
  expect_bytes("512MiB", 512 * kMiB);
  expect_bytes("2GiB", 2 * kGiB);
  expect_bytes("4KiB", 4 * kKiB);
  expect_bytes("3TiB", 3 * kTiB);
  expect_bytes("1.5KiB", 1536);
  expect_bytes("0.5GiB", kGiB / 2);
  expect_bytes("1.25MiB", kMiB + kMiB / 4);
}

TEST(ParseBytes, DecimalUnits) {
  expect_bytes("1.5GB", 1500000000);
  expect_bytes("10KB", 10000);
  expect_bytes("7MB", 7000000);
  expect_bytes("2TB", 2000000000000);
}

TEST(ParseBytes, WhitespaceAroundAndBetween) {
  expect_bytes(" 4 KiB ", 4 * kKiB);
  expect_bytes("\t16MiB\n", 16 * kMiB);
  expect_bytes("  99  ", 99);
}

TEST(ParseBytes, CaseInsensitiveUnits) {
  expect_bytes("512mib", 512 * kMiB);
  expect_bytes("512MIB", 512 * kMiB);
  expect_bytes("2gIb", 2 * kGiB);
  expect_bytes("1.5gb", 1500000000);
  expect_bytes("1.5Gb", 1500000000);
  expect_bytes("8kib", 8 * kKiB);
}

TEST(ParseBytes, RejectsJunk) {
  expect_rejected("", "not a byte size");
  expect_rejected("   ", "not a byte size");
  expect_rejected("abc", "not a byte size");
  expect_rejected("MiB", "not a byte size");
  expect_rejected("12XB", "not a byte size");
  expect_rejected("12 MiB extra", "not a byte size");
  expect_rejected("4 K iB", "not a byte size");
  expect_rejected(".", "not a byte size");
  expect_rejected("1.2.3", "not a byte size");
}

TEST(ParseBytes, RejectsNegatives) {
  expect_rejected("-5", "not a byte size");
  expect_rejected("-1GiB", "not a byte size");
  expect_rejected("- 5", "not a byte size");
}

TEST(ParseBytes, RejectsFractionalBytes) {
  expect_rejected("1.5", "not a whole number of bytes");
  expect_rejected("0.25B", "not a whole number of bytes");
}

TEST(ParseBytes, RejectsOverflow) {
  // Exponent notation is not accepted at all; a value that parses but does not fit in int64 is "too large".
  Result<int64_t> e = parse_bytes("1e30GiB");
  ASSERT_FALSE(e.is_ok()) << "accepted as " << e.value();
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  expect_rejected("99999999999TiB", "too large");
  expect_rejected("8589934592GiB", "too large");  // exactly 2^63
  expect_rejected("100000000000000000000", "too large");
  expect_rejected("1000000000000000000000000000000GiB", "too large");
}

TEST(ParseBytes, LargeButRepresentable) {
  expect_bytes("1024TiB", 1024 * kTiB);
  expect_bytes("4611686018427387904", int64_t(1) << 62);
}

TEST(FormatBytes, SmallValuesInBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1), "1 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytes, BinaryUnitsWithTwoDecimals) {
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(kGiB + kGiB / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(3 * kTiB), "3.00 TiB");
  EXPECT_EQ(format_bytes(2048 * kTiB), "2048.00 TiB");  // TiB is the largest unit
  EXPECT_EQ(format_bytes(kMiB - 1), "1024.00 KiB");      // rounding of the two decimals
}

TEST(FormatBytes, RoundTripsThroughParse) {
  const std::vector<int64_t> values = {0, 1, 1023, 1024, 1536, 4 * kKiB, 512 * kMiB, kGiB + kGiB / 2, 7 * kTiB};
  for (int64_t v : values) {
    const std::string text = format_bytes(v);
    Result<int64_t> back = parse_bytes(text);
    ASSERT_TRUE(back.is_ok()) << text << ": " << back.status().to_string();
    EXPECT_EQ(back.value(), v) << text;
  }
}

}  // namespace
}  // namespace tt
