// A faster Huffman entropy decoder for baseline JPEGs, installed into a libjpeg
// decompressor in place of libjpeg-turbo's own (Note [Replacing libjpeg's entropy decoder]
// in jpeg_huffman.cc). Entropy decoding is lossless, so the pixels are exactly those of
// libjpeg-turbo's decoder; only the time differs.
#ifndef STOKER_DATA_SERVICE_IMAGE_JPEG_HUFFMAN_H_
#define STOKER_DATA_SERVICE_IMAGE_JPEG_HUFFMAN_H_

#include <cstdint>
#include <cstdio>
#include <memory>

// jpeglib.h needs <cstdio> (FILE, size_t) first.
#include <jpeglib.h>

namespace stoker::data_service::image::internal {

// The decoding tables of one Huffman table (jpeg_huffman.cc).
struct HuffmanLookup;

// One per decoding thread; reused across images, it keeps the tables it derived and
// re-derives them only when an image's tables differ. Not thread-safe.
class JpegHuffmanDecoder {
 public:
  // allow_bmi2 = false keeps to the x86-64 baseline even where the CPU has BMI2 (tests
  // compare both builds of the decoder).
  explicit JpegHuffmanDecoder(bool allow_bmi2 = true);
  ~JpegHuffmanDecoder();
  JpegHuffmanDecoder(const JpegHuffmanDecoder&) = delete;
  JpegHuffmanDecoder& operator=(const JpegHuffmanDecoder&) = delete;

  // Takes over entropy decoding of `cinfo`, whose source is the whole file in memory
  // (jpeg_mem_src), if the image is baseline or extended sequential, Huffman-coded, in one
  // interleaved scan without restart markers (what cameras and Pillow write); returns false
  // and changes nothing otherwise. Call after jpeg_start_decompress() and before the
  // first jpeg_read_scanlines() or jpeg_skip_scanlines(); this object must outlive the
  // decompression (until jpeg_abort_decompress or jpeg_destroy_decompress). Corrupt data
  // is reported through libjpeg's error manager, as libjpeg-turbo reports it (warnings
  // JWRN_HUFF_BAD_CODE, JWRN_HIT_MARKER, JWRN_JPEG_EOF), with one difference: a file whose
  // entropy-coded data is whole but which lacks the final EOI marker decodes, where
  // libjpeg-turbo's decoder, reading ahead, warns of the missing bytes.
  bool Install(j_decompress_ptr cinfo);

  // Whether Install() uses the build of the decoder compiled with BMI2.
  bool uses_bmi2() const { return bmi2_; }

  struct State;  // jpeg_huffman.cc

 private:
  std::unique_ptr<State> state_;
  bool bmi2_ = false;
};

}  // namespace stoker::data_service::image::internal

#endif  // STOKER_DATA_SERVICE_IMAGE_JPEG_HUFFMAN_H_
