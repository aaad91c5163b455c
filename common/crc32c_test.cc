// CRC-32C against the published check values (RFC 3720's examples and "123456789").
#include "common/crc32c.h"

#include <algorithm>
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

TEST(Crc32cTest, CombiningPartsGivesTheWholeBuffersCrc) {
  std::string data;
  for (int i = 0; i < 70000; ++i) data.push_back(static_cast<char>((i * 2654435761u) >> 13));
  const uint32_t whole = Crc32c(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{8}, size_t{4095}, size_t{65536}, data.size()}) {
    const uint32_t a = Crc32cExtend(0, data.data(), split);
    const uint32_t b = Crc32cExtend(0, data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - split), whole) << split;
  }
  // Many unequal parts, combined in order, as a writer with several threads does.
  uint32_t combined = 0;
  size_t at = 0;
  for (size_t length = 1; at < data.size(); length = length * 3 + 1) {
    const size_t n = std::min(length, data.size() - at);
    combined = Crc32cCombine(combined, Crc32cExtend(0, data.data() + at, n), n);
    at += n;
  }
  EXPECT_EQ(combined, whole);
  EXPECT_EQ(Crc32cCombine(whole, Crc32c(""), 0), whole);
}

TEST(Crc32cTest, CombiningReachesPartsOfManyGigabytes) {
  // A 5 GiB run of zero bytes, in two parts (a checkpoint's tensors reach that size):
  // combining A with B against extending A over B, with B's CRC built by combining too.
  const std::string mib(1 << 20, '\0');
  const uint32_t crc_mib = Crc32c(mib);
  uint32_t five_gib = 0;
  for (int i = 0; i < 5 * 1024; ++i) five_gib = Crc32cCombine(five_gib, crc_mib, mib.size());
  const uint32_t a = Crc32c("head");
  uint32_t extended = a;
  for (int i = 0; i < 5 * 1024; ++i) extended = Crc32cExtend(extended, mib.data(), mib.size());
  EXPECT_EQ(Crc32cCombine(a, five_gib, uint64_t{5} << 30), extended);
}

TEST(Crc32cTest, MaskIsTfRecords) {
  // TFRecord: rotate right by 15, add 0xa282ead8.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xa282ead9u);
}

}  // namespace
}  // namespace stoker
