// CRC-32C (Castagnoli), the checksum of checkpoints and of TensorBoard's TFRecord framing,
// with the SSE4.2 instruction where the CPU has it and a table-driven fallback.
#ifndef STOKER_COMMON_CRC32C_H_
#define STOKER_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace stoker {

// Extends `crc` (the CRC-32C of some prefix; 0 for none) by `size` bytes at `data`.
// Thread-safe.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// The CRC-32C of A followed by B, from `crc_a` (A's), `crc_b` (B's) and B's length: parts of
// a buffer checksummed apart (on several threads) give the whole buffer's. O(log
// `length_b`) without reading the bytes. Thread-safe.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// TFRecord's (and LevelDB's) masked form, for a CRC stored next to the data it covers.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace stoker

#endif  // STOKER_COMMON_CRC32C_H_
