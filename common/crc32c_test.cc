// CRC-32C against the published check values (RFC 3720's examples and "123456789").
#include "common/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace stoker {
namespace internal {
uint32_t Crc32cSoftwareForTest(const void* data, size_t size);
}  // namespace internal
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, ExtendingIsTheSameAsOneCall) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = Crc32c(data);
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t crc = Crc32cExtend(0, data.data(), split);
    crc = Crc32cExtend(crc, data.data() + split, data.size() - split);
    EXPECT_EQ(crc, whole) << split;
  }
}

TEST(Crc32cTest, TableAndInstructionPathsAgree) {
  std::string data;
  for (int i = 0; i < 4099; ++i) data.push_back(static_cast<char>((i * 131) ^ (i >> 3)));
  for (size_t n : {0, 3, 8, 64, 4099}) {
    EXPECT_EQ(internal::Crc32cSoftwareForTest(data.data(), n), Crc32cExtend(0, data.data(), n))
        << n;
  }
}

TEST(Crc32cTest, MaskIsTfRecords) {
  // TFRecord: rotate right by 15, add 0xa282ead8.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xa282ead9u);
}

}  // namespace
}  // namespace stoker
