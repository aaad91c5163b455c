#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace stoker {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78u;  // reflected Castagnoli

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing by 8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

const Tables& SoftwareTables() {
  static const Tables* tables = [] {
    auto* t = new Tables;
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1u)));
      (*t)[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k)
        (*t)[k][b] = ((*t)[k - 1][b] >> 8) ^ (*t)[0][(*t)[k - 1][b] & 0xff];
    }
    return t;
  }();
  return *tables;
}

uint32_t SoftwareExtend(uint32_t crc, const uint8_t* p, size_t n) {
  const Tables& t = SoftwareTables();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= crc;
    crc = t[7][word & 0xff] ^ t[6][(word >> 8) & 0xff] ^ t[5][(word >> 16) & 0xff] ^
          t[4][(word >> 24) & 0xff] ^ t[3][(word >> 32) & 0xff] ^ t[2][(word >> 40) & 0xff] ^
          t[1][(word >> 48) & 0xff] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareExtend(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HasSse42()) return ~HardwareExtend(crc, p, size);
#endif
  return ~SoftwareExtend(crc, p, size);
}

namespace internal {
// For the test: the table-driven path alone.
uint32_t Crc32cSoftwareForTest(const void* data, size_t size) {
  return ~SoftwareExtend(~0u, static_cast<const uint8_t*>(data), size);
}
}  // namespace internal

}  // namespace stoker
