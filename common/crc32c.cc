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

// Note [Combining CRCs]
// A CRC without its pre- and post-inversion is linear over GF(2): the CRC of A followed by
// B is the CRC of A shifted by B's length in bits (A's remainder times x^(8 |B|) modulo the
// polynomial) plus B's, and the inversions cancel in that sum. So combining multiplies
// crc_a by x^(8 |B|) mod P, a product of the precomputed powers x^(2^k) mod P picked by the
// bits of 8 |B|. Polynomials are in the reflected order of the CRC itself: bit 31 is x^0.

// a * b modulo the polynomial.
uint32_t MultiplyModulo(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// powers[k] = x^(2^k) mod P.
const std::array<uint32_t, 64>& PowersOfX() {
  static const std::array<uint32_t, 64> powers = [] {
    std::array<uint32_t, 64> p{};
    p[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < p.size(); ++k) p[k] = MultiplyModulo(p[k - 1], p[k - 1]);
    return p;
  }();
  return powers;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // Note [Combining CRCs]: x^(8 length_b) = product of x^(2^(k + 3)) over the set bits k.
  const std::array<uint32_t, 64>& powers = PowersOfX();
  uint32_t shift = 1u << 31;  // x^0
  for (size_t k = 3; length_b != 0 && k < powers.size(); ++k, length_b >>= 1) {
    if (length_b & 1u) shift = MultiplyModulo(powers[k], shift);
  }
  return MultiplyModulo(shift, crc_a) ^ crc_b;
}

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
