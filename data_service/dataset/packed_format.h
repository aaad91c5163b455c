// The packed dataset format, version 1: for datasets of millions of small images, one
// index file plus a few large shard files of concatenated encoded images, so that loading
// a sample is one pread() from an already open shard instead of an open/read/close of
// its own file. pack_imagefolder writes it (packed_writer.h); PackedDataset reads it.
//
// All integers are little-endian; every struct below is the exact on-disk layout.
//
// Index file (e.g. train.stkpack):
//   [0, 64)                  PackedIndexHeader
//   [samples_offset, +24 n)  PackedSample[sample_count], in sample order: sample i has
//                            label samples[i].label and its encoded bytes at
//                            [offset, offset + length) of shard samples[i].shard
//   [shards_offset, +16 k)   PackedShard[shard_count]
//   [strings_offset, end)    the string table: strings stored as a uint32 byte length and
//                            then the bytes (UTF-8, no terminator), referenced by their
//                            offset from strings_offset. It starts with the class_count
//                            class names in label order; then the shard file names (plain
//                            file names in the index file's directory) and the sample
//                            names (each sample's path relative to the packed folder, for
//                            messages)
//   file_bytes is the size of the whole index file (a truncated index is detected).
//
// Shard file (e.g. train.stkpack-00000.shard):
//   [0, 16)                  PackedShardHeader (magic, version, the shard's number)
//   [16, bytes)              encoded images (JPEG, PNG, ... exactly the original files'
//                            bytes) back to back; PackedShard::bytes is the file's size.
//
// Sample order and labels are those of ImageFolderDataset on the packed folder, so a
// packed dataset and its folder give identical batches.
#ifndef STOKER_DATA_SERVICE_DATASET_PACKED_FORMAT_H_
#define STOKER_DATA_SERVICE_DATASET_PACKED_FORMAT_H_

#include <cstdint>
#include <type_traits>

namespace stoker::data_service {

inline constexpr char kPackedIndexMagic[8] = {'S', 'T', 'K', 'P', 'A', 'C', 'K', 'I'};
inline constexpr char kPackedShardMagic[8] = {'S', 'T', 'K', 'P', 'A', 'C', 'K', 'S'};
inline constexpr uint32_t kPackedVersion = 1;

struct PackedIndexHeader {
  char magic[8];          // kPackedIndexMagic
  uint32_t version;       // kPackedVersion
  uint32_t header_bytes;  // sizeof(PackedIndexHeader)
  int64_t sample_count;   // >= 1
  int32_t class_count;    // >= 1
  int32_t shard_count;    // >= 1
  uint64_t samples_offset;
  uint64_t shards_offset;
  uint64_t strings_offset;
  uint64_t file_bytes;
};
static_assert(std::is_trivially_copyable_v<PackedIndexHeader>);
static_assert(sizeof(PackedIndexHeader) == 64, "PackedIndexHeader is the on-disk format");

struct PackedSample {
  uint64_t offset;  // in the shard file, >= sizeof(PackedShardHeader)
  uint32_t length;  // bytes of the encoded image (0 for an empty file)
  uint32_t shard;   // < shard_count
  int32_t label;    // < class_count
  uint32_t name;    // string table offset of the sample's name
};
static_assert(std::is_trivially_copyable_v<PackedSample>);
static_assert(sizeof(PackedSample) == 24, "PackedSample is the on-disk format");

struct PackedShard {
  uint64_t bytes;     // the shard file's size
  uint32_t name;      // string table offset of its file name
  uint32_t reserved;  // 0
};
static_assert(std::is_trivially_copyable_v<PackedShard>);
static_assert(sizeof(PackedShard) == 16, "PackedShard is the on-disk format");

struct PackedShardHeader {
  char magic[8];     // kPackedShardMagic
  uint32_t version;  // kPackedVersion
  uint32_t shard;    // this shard's number in the index
};
static_assert(std::is_trivially_copyable_v<PackedShardHeader>);
static_assert(sizeof(PackedShardHeader) == 16, "PackedShardHeader is the on-disk format");

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_PACKED_FORMAT_H_
