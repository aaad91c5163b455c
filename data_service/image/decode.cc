// JPEG decoding through libjpeg-turbo's libjpeg API (DCT scaling, column cropping, row
// skipping) and PNG decoding through libpng, both with setjmp-based error recovery.
//
// Note [libjpeg API for partial decode]
// The TurboJPEG 2.1 API (tjDecompress2) decodes whole images only. Decoding just the
// rows and columns a crop needs takes jpeg_skip_scanlines() and jpeg_crop_scanline(),
// which exist only in the libjpeg API. Debian builds both libturbojpeg.so.0 and
// libjpeg.so.62 from the same libjpeg-turbo 2.1.5 source (libjpeg62-turbo-dev provides
// jpeglib.h), so Stoker decodes with the libjpeg API and takes the set of DCT scale
// factors from tjGetScalingFactors(), which is the set the libjpeg API implements
// (n/8, n = 1..16). libturbojpeg does not export the jpeg_* symbols, hence -ljpeg.
//
// Note [setjmp discipline]
// libjpeg and libpng report errors by longjmp() out of library code. Every library call
// happens inside one of the *Guarded() functions below; each sets its jump point first,
// keeps no C++ object with a destructor on its own frame, and returns false when the
// library jumped back. Nothing that outlives the jump is a local of that frame.
#include "data_service/image/decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h needs <cstdio> (FILE, size_t) first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "data_service/image/jpeg_huffman.h"

namespace stoker::data_service::image {
namespace internal {

// Note [JPEG warnings]
// libjpeg reports trouble in two ways. Errors (error_exit) stop the decode; they are
// always InvalidArgument here. Warnings (emit_message with level -1) let it continue with
// damaged pixels: a truncated file ("Premature end of JPEG file") is completed with grey
// rows, a bad Huffman code or a lost restart marker leaves grey or smeared blocks. Those
// are bad training samples, so every warning about the entropy-coded data is an error,
// as with TurboJPEG's TJFLAG_STOPONWARNING. Warnings that leave the pixels intact are
// tolerated: stray bytes between header markers or before the final EOI marker
// (JWRN_EXTRANEOUS_DATA; some ImageNet files end that way), an unknown JFIF revision or
// Adobe transform code, and a bad ICC marker (profiles are not used). Pillow ignores all
// warnings, so Stoker refuses a few damaged files torchvision would train on; the
// caller decides whether a refused file fails the job or is skipped. Only the rows a crop
// needs are decoded, so damage wholly outside them goes unseen, as it does not matter.
struct JpegErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  bool in_header = false;
  char message[JMSG_LENGTH_MAX] = "";
};

struct JpegState {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  bool created = false;
  bool cmyk = false;  // decode to CMYK and convert (Adobe-inverted, as Pillow)

  ~JpegState() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[256] = "";

  void Reset() {
    if (png != nullptr) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    png = nullptr;
    info = nullptr;
  }
  ~PngState() { Reset(); }
};

}  // namespace internal

namespace {

using internal::JpegErrorManager;
using internal::JpegState;
using internal::PngState;

// Buffers only grow, so a warm decoder neither allocates nor clears memory.
template <typename T>
void GrowTo(std::vector<T>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

// ---------------------------------------------------------------------------------------
// libjpeg callbacks and guarded calls.

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

bool IsToleratedJpegWarning(const jpeg_error_mgr& err, bool in_header) {
  switch (err.msg_code) {
    case JWRN_EXTRANEOUS_DATA:
      return in_header || err.msg_parm.i[1] == 0xD9;  // before EOI
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
      return true;
    default:
      return false;
  }
}

void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  ++cinfo->err->num_warnings;
  if (IsToleratedJpegWarning(*cinfo->err, err->in_header)) return;
  JpegErrorExit(cinfo);  // Note [JPEG warnings]
}

// Note [One decompressor per image]
// libjpeg keeps the quantisation and Huffman tables an image defines in its decompressor
// (jpeg_abort_decompress keeps them: abbreviated streams rely on it) and loads the standard
// Huffman tables only into empty slots. A decompressor reused across files would read a
// file that does not define every table it uses (motion-JPEG frames, damaged headers) with
// the tables of whatever file the thread read before: an error, or silently other pixels,
// and batches that depend on the thread. So each ReadHeader creates a fresh one; that costs
// microseconds against a millisecond of decoding. Our own row buffers are still reused.
bool JpegCreateGuarded(JpegState* j) {
  j->cinfo.err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = JpegErrorExit;
  j->err.pub.emit_message = JpegEmitMessage;
  if (setjmp(j->err.jump)) return false;
  jpeg_create_decompress(&j->cinfo);
  return true;
}

bool JpegReadHeaderGuarded(JpegState* j, const uint8_t* data, size_t size) {
  if (setjmp(j->err.jump)) {
    j->err.in_header = false;
    return false;
  }
  j->err.in_header = true;
  j->err.pub.num_warnings = 0;
  jpeg_mem_src(&j->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&j->cinfo, TRUE);
  j->err.in_header = false;
  return true;
}

// Pillow's CMYK JPEG handling: the samples are Adobe-inverted ("CMYK;I"), and
// convert("RGB") computes r = 255 - k' - c' * (255 - k') / 255 on the re-inverted values.
void CmykRowToRgb(const uint8_t* cmyk, int width, uint8_t* rgb) {
  for (int x = 0; x < width; ++x) {
    const int nk = cmyk[3];  // 255 - k, k = 255 - stored
    for (int c = 0; c < 3; ++c) {
      const int v = 255 - cmyk[c];   // c, m or y
      const int tmp = v * nk + 128;  // Pillow's MULDIV255
      const int r = nk - (((tmp >> 8) + tmp) >> 8);
      rgb[c] = static_cast<uint8_t>(r < 0 ? 0 : (r > 255 ? 255 : r));
    }
    cmyk += 4;
    rgb += 3;
  }
}

struct JpegDecodeJob {
  ScaleFactor scale;
  PixelRect region;
  int keep_rows = 0;  // Decode()'s promise: rows stay valid for this many more rows
  bool fast_idct = false;
  bool fancy_upsampling = true;
  internal::JpegHuffmanDecoder* huffman = nullptr;  // null: libjpeg's own
  std::vector<uint8_t>* rows;
  std::vector<uint8_t*>* row_pointers;
  std::vector<uint8_t>* rgb_row;
  const ImageDecoder::RowSink* sink;
  char problem[160] = "";  // set when Stoker's own checks fail (libjpeg's go to err)
};

constexpr int kJpegBatchRows = 8;

bool JpegDecodeGuarded(JpegState* j, JpegDecodeJob* job) {
  jpeg_decompress_struct* cinfo = &j->cinfo;
  if (setjmp(j->err.jump)) return false;
  cinfo->scale_num = job->scale.num;
  cinfo->scale_denom = job->scale.denom;
  cinfo->out_color_space = j->cmyk ? JCS_CMYK : JCS_RGB;
  // libjpeg's and Pillow's defaults are JDCT_ISLOW and fancy upsampling.
  cinfo->dct_method = job->fast_idct ? JDCT_IFAST : JDCT_ISLOW;
  cinfo->do_fancy_upsampling = job->fancy_upsampling ? TRUE : FALSE;
  jpeg_calc_output_dimensions(cinfo);
  const PixelRect& r = job->region;
  if (r.width <= 0 || r.height <= 0 || r.x < 0 || r.y < 0 ||
      static_cast<JDIMENSION>(r.x + r.width) > cinfo->output_width ||
      static_cast<JDIMENSION>(r.y + r.height) > cinfo->output_height) {
    std::snprintf(job->problem, sizeof(job->problem),
                  "region %dx%d at (%d,%d) is outside the %ux%u scaled image", r.width, r.height,
                  r.x, r.y, cinfo->output_width, cinfo->output_height);
    return true;
  }
  jpeg_start_decompress(cinfo);
  if (job->huffman != nullptr) job->huffman->Install(cinfo);  // false: libjpeg's decodes
  // Note [Crop margin]: the fancy chroma upsampler treats both edges of the cropped rows
  // as the image's edges, which changes the pixels next to them. Cropping one iMCU wider
  // on each side (where the image has it) keeps every pixel of the region exactly as a
  // full decode makes it (RegionDecodeEqualsTheSameRegionOfAFullDecode checks this).
  // Upsampling by replication reads no neighbouring chroma, so it needs no margin.
  const int margin =
      job->fancy_upsampling ? cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size : 0;
  const int left = std::max(0, r.x - margin);
  const int right = std::min(static_cast<int>(cinfo->output_width), r.x + r.width + margin);
  JDIMENSION xoffset = static_cast<JDIMENSION>(left);
  JDIMENSION width = static_cast<JDIMENSION>(right - left);
  if (width != cinfo->output_width) jpeg_crop_scanline(cinfo, &xoffset, &width);
  const int skip_columns = r.x - static_cast<int>(xoffset);
  if (r.y > 0 &&
      jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(r.y)) != static_cast<JDIMENSION>(r.y)) {
    std::snprintf(job->problem, sizeof(job->problem), "could not skip to row %d", r.y);
    return true;
  }
  const int components = cinfo->output_components;
  const size_t row_bytes = static_cast<size_t>(cinfo->output_width) * components;
  // Rows go round a ring of kJpegBatchRows + keep_rows rows: a batch overwrites only rows
  // handed over at least keep_rows rows ago. CMYK rows are converted into a ring of
  // keep_rows + 1 RGB rows.
  const int ring_rows = kJpegBatchRows + job->keep_rows;
  GrowTo(job->rows, row_bytes * ring_rows);
  GrowTo(job->row_pointers, kJpegBatchRows);
  const int rgb_ring_rows = job->keep_rows + 1;
  const size_t rgb_row_bytes = static_cast<size_t>(r.width) * 3;
  if (j->cmyk) GrowTo(job->rgb_row, rgb_row_bytes * rgb_ring_rows);
  int y = r.y;
  const int end = r.y + r.height;
  while (y < end) {
    const JDIMENSION want = static_cast<JDIMENSION>(std::min(kJpegBatchRows, end - y));
    for (JDIMENSION i = 0; i < want; ++i) {
      (*job->row_pointers)[i] =
          job->rows->data() + ((y - r.y + static_cast<int>(i)) % ring_rows) * row_bytes;
    }
    const JDIMENSION got = jpeg_read_scanlines(cinfo, job->row_pointers->data(), want);
    if (got == 0) {
      std::snprintf(job->problem, sizeof(job->problem), "no data for row %d", y);
      return true;
    }
    for (JDIMENSION i = 0; i < got; ++i) {
      const uint8_t* row = (*job->row_pointers)[i] + skip_columns * components;
      if (j->cmyk) {
        uint8_t* rgb = job->rgb_row->data() +
                       ((y - r.y + static_cast<int>(i)) % rgb_ring_rows) * rgb_row_bytes;
        CmykRowToRgb(row, r.width, rgb);
        row = rgb;
      }
      (*job->sink)(y + static_cast<int>(i), row);
    }
    y += static_cast<int>(got);
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// libpng callbacks and guarded calls.

void PngError(png_structp png, png_const_charp message) {
  auto* p = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(p->message, sizeof(p->message), "%s", message);
  png_longjmp(png, 1);
}

// Warnings (bad ancillary chunks and the like) do not touch the pixels: ignored, as by
// Pillow.
void PngWarning(png_structp, png_const_charp) {}

void PngReadData(png_structp png, png_bytep out, png_size_t length) {
  auto* p = static_cast<PngState*>(png_get_io_ptr(png));
  if (length > p->size - p->pos) png_error(png, "file ends early (truncated PNG)");
  std::memcpy(out, p->data + p->pos, length);
  p->pos += length;
}

bool PngReadHeaderGuarded(PngState* p, png_uint_32* width, png_uint_32* height) {
  if (setjmp(png_jmpbuf(p->png))) return false;
  png_set_read_fn(p->png, p, PngReadData);
  // Stoker's own pixel limit applies instead, with its clearer message.
  png_set_user_limits(p->png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_read_info(p->png, p->info);
  *width = png_get_image_width(p->png, p->info);
  *height = png_get_image_height(p->png, p->info);
  return true;
}

// Note [16-bit grayscale PNG]
// Pillow opens 16-bit RGB, RGBA and LA PNGs keeping each sample's high byte, as
// png_set_strip_16() does. It opens 16-bit grayscale as mode "I;16", whose
// convert("RGB") clips every value above 255 to 255, so such an image comes out almost
// white. Stoker keeps the high byte there too (v >> 8), the one conversion that keeps the
// picture: the only place where its pixels differ from Pillow's on purpose.
struct PngDecodeJob {
  PixelRect region;
  int keep_rows;
  int width;
  int height;
  std::vector<uint8_t>* rows;
  std::vector<uint8_t*>* row_pointers;
  const ImageDecoder::RowSink* sink;
};

bool PngDecodeGuarded(PngState* p, PngDecodeJob* job) {
  png_structp png = p->png;
  png_infop info = p->info;
  if (setjmp(png_jmpbuf(png))) return false;
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  // Pillow's convert("RGB"): palette and low-bit gray expand, tRNS and alpha channels
  // are dropped, 16-bit samples keep their high byte (Note [16-bit grayscale PNG]).
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  // png_set_palette_to_rgb() also turns tRNS into alpha; strip that as well.
  if ((color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) {
    png_set_strip_alpha(png);
  }
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (row_bytes != static_cast<size_t>(job->width) * 3) {
    png_error(png, "unexpected row size after conversion to RGB");
  }
  const PixelRect& r = job->region;
  const uint8_t* rows = nullptr;
  if (passes == 1) {
    // A ring of keep_rows + 1 rows (Decode()'s promise).
    const int ring_rows = job->keep_rows + 1;
    GrowTo(job->rows, row_bytes * ring_rows);
    for (int y = 0; y < r.y + r.height; ++y) {
      uint8_t* row = job->rows->data() + (y % ring_rows) * row_bytes;
      png_read_row(png, row, nullptr);
      if (y >= r.y) (*job->sink)(y, row + static_cast<size_t>(r.x) * 3);
    }
    return true;
  }
  // Interlaced (Adam7): every pass covers the whole image, so all of it is decoded.
  GrowTo(job->rows, row_bytes * job->height);
  GrowTo(job->row_pointers, job->height);
  for (int y = 0; y < job->height; ++y) {
    (*job->row_pointers)[y] = job->rows->data() + static_cast<size_t>(y) * row_bytes;
  }
  png_read_image(png, job->row_pointers->data());
  rows = job->rows->data();
  for (int y = r.y; y < r.y + r.height; ++y) {
    (*job->sink)(y, rows + static_cast<size_t>(y) * row_bytes + static_cast<size_t>(r.x) * 3);
  }
  return true;
}

// ---------------------------------------------------------------------------------------

std::vector<ScaleFactor> TurboJpegScaleFactors() {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  std::vector<ScaleFactor> out;
  for (int i = 0; factors != nullptr && i < count; ++i) {
    if (factors[i].num > 0 && factors[i].num <= factors[i].denom) {
      out.push_back(ScaleFactor{factors[i].num, factors[i].denom});
    }
  }
  std::sort(out.begin(), out.end(), [](const ScaleFactor& a, const ScaleFactor& b) {
    return static_cast<int64_t>(a.num) * b.denom > static_cast<int64_t>(b.num) * a.denom;
  });
  if (out.empty() || out.front() != ScaleFactor{1, 1}) {
    out.insert(out.begin(), ScaleFactor{1, 1});
  }
  return out;
}

absl::Span<const ScaleFactor> JpegScaleFactors() {
  static const std::vector<ScaleFactor>* const factors =
      new std::vector<ScaleFactor>(TurboJpegScaleFactors());
  return *factors;
}

absl::Span<const ScaleFactor> JpegPowerOfTwoScaleFactors() {
  static const std::vector<ScaleFactor>* const factors = [] {
    auto* out = new std::vector<ScaleFactor>();
    for (const ScaleFactor& s : JpegScaleFactors()) {
      const int64_t d = s.denom / s.num;
      if (s.denom % s.num == 0 && (d & (d - 1)) == 0) out->push_back(s);
    }
    return out;
  }();
  return *factors;
}

constexpr ScaleFactor kUnitScale[] = {ScaleFactor{1, 1}};

std::string HexPrefix(absl::Span<const uint8_t> bytes) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : " ", absl::StrFormat("%02x", bytes[i]));
  }
  return out;
}

bool StartsWith(absl::Span<const uint8_t> bytes, const char* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

}  // namespace

absl::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
  }
  return "unknown";
}

ScaleFactor ChooseScale(absl::Span<const ScaleFactor> factors, int64_t source_width,
                        int64_t target_width, int64_t source_height, int64_t target_height) {
  ScaleFactor best{1, 1};
  for (const ScaleFactor& s : factors) {
    if (source_width * s.num >= target_width * s.denom &&
        source_height * s.num >= target_height * s.denom) {
      best = s;  // factors shrink monotonically: the last that fits is the smallest
    } else {
      break;
    }
  }
  return best;
}

absl::StatusOr<ImageFormat> DetectImageFormat(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("empty file (0 bytes), not an image");
  if (StartsWith(bytes, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (StartsWith(bytes, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  const char* other = nullptr;
  if (StartsWith(bytes, "GIF8", 4)) other = "a GIF image";
  if (StartsWith(bytes, "BM", 2)) other = "possibly a BMP image";
  if (StartsWith(bytes, "II*\0", 4) || StartsWith(bytes, "MM\0*", 4)) other = "a TIFF image";
  if (bytes.size() >= 12 && StartsWith(bytes, "RIFF", 4) &&
      std::memcmp(bytes.data() + 8, "WEBP", 4) == 0) {
    other = "a WebP image";
  }
  return absl::InvalidArgumentError(
      absl::StrCat("not a JPEG or PNG image (", bytes.size(), " bytes starting ", HexPrefix(bytes),
                   other != nullptr ? absl::StrCat("; looks like ", other, ", which is unsupported")
                                    : std::string(),
                   ")"));
}

ImageDecoder::ImageDecoder() = default;
ImageDecoder::~ImageDecoder() = default;

absl::StatusOr<ImageHeader> ImageDecoder::ReadHeader(absl::Span<const uint8_t> bytes,
                                                     const DecodeOptions& options) {
  header_ready_ = false;
  if (options.max_pixels <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeOptions::max_pixels must be positive, got ", options.max_pixels));
  }
  ASSIGN_OR_RETURN(const ImageFormat format, DetectImageFormat(bytes));
  dct_scaling_ = options.dct_scaling;
  fast_idct_ = options.fast_idct;
  fancy_upsampling_ = options.fancy_upsampling;
  fast_huffman_ = options.fast_huffman;
  int64_t width = 0;
  int64_t height = 0;
  if (format == ImageFormat::kJpeg) {
    // Note [One decompressor per image].
    jpeg_.reset();
    auto j = std::make_unique<internal::JpegState>();
    if (!JpegCreateGuarded(j.get())) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot create a JPEG decoder: ", j->err.message));
    }
    j->created = true;
    jpeg_ = std::move(j);
    if (!JpegReadHeaderGuarded(jpeg_.get(), bytes.data(), bytes.size())) {
      jpeg_abort_decompress(&jpeg_->cinfo);
      return absl::InvalidArgumentError(absl::StrCat("invalid JPEG header: ", jpeg_->err.message));
    }
    const jpeg_decompress_struct& c = jpeg_->cinfo;
    switch (c.jpeg_color_space) {
      case JCS_GRAYSCALE:
      case JCS_YCbCr:
      case JCS_RGB:
        jpeg_->cmyk = false;
        break;
      case JCS_CMYK:
      case JCS_YCCK:
        jpeg_->cmyk = true;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("unsupported JPEG color space (",
                                                       c.num_components,
                                                       " components, libjpeg "
                                                       "color space ",
                                                       static_cast<int>(c.jpeg_color_space), ")"));
    }
    width = c.image_width;
    height = c.image_height;
  } else {
    if (png_ == nullptr) png_ = std::make_unique<internal::PngState>();
    png_->Reset();
    png_->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, png_.get(), PngError, PngWarning);
    if (png_->png != nullptr) png_->info = png_create_info_struct(png_->png);
    if (png_->png == nullptr || png_->info == nullptr) {
      png_->Reset();
      return absl::ResourceExhaustedError("cannot create a PNG decoder");
    }
    png_->data = bytes.data();
    png_->size = bytes.size();
    png_->pos = 0;
    png_uint_32 w = 0;
    png_uint_32 h = 0;
    if (!PngReadHeaderGuarded(png_.get(), &w, &h)) {
      const std::string message = png_->message;
      png_->Reset();
      return absl::InvalidArgumentError(absl::StrCat("invalid PNG header: ", message));
    }
    width = w;
    height = h;
  }
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ImageFormatName(format), " image has no pixels (", width, "x", height, ")"));
  }
  if (width * height > options.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat(ImageFormatName(format), " image is ", width, "x", height, " = ",
                     width * height, " pixels, more than the limit of ", options.max_pixels,
                     " (decompression bomb?); not decoded"));
  }
  header_ = ImageHeader{format, static_cast<int>(width), static_cast<int>(height)};
  header_ready_ = true;
  return header_;
}

absl::Span<const ScaleFactor> ImageDecoder::scale_factors() const {
  if (header_.format != ImageFormat::kJpeg) return kUnitScale;
  switch (dct_scaling_) {
    case DctScaling::kNone:
      return kUnitScale;
    case DctScaling::kPowerOfTwo:
      return JpegPowerOfTwoScaleFactors();
    case DctScaling::kAll:
      return JpegScaleFactors();
  }
  return kUnitScale;
}

absl::Status ImageDecoder::Decode(ScaleFactor scale, const PixelRect& region, RowSink sink,
                                  int keep_rows) {
  if (!header_ready_) {
    return absl::FailedPreconditionError("ImageDecoder::Decode without a successful ReadHeader");
  }
  header_ready_ = false;
  if (keep_rows < 0 || keep_rows > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_rows must be in [0, 65536], got ", keep_rows));
  }
  if (header_.format == ImageFormat::kJpeg) return DecodeJpeg(scale, region, sink, keep_rows);
  if (scale != ScaleFactor{1, 1}) {
    return absl::InvalidArgumentError(
        absl::StrCat("PNG has no scaled decoding; asked for ", scale.num, "/", scale.denom));
  }
  return DecodePng(region, sink, keep_rows);
}

absl::Status ImageDecoder::DecodeJpeg(ScaleFactor scale, const PixelRect& region, RowSink sink,
                                      int keep_rows) {
  const auto factors = scale_factors();
  if (std::find(factors.begin(), factors.end(), scale) == factors.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported JPEG scale ", scale.num, "/", scale.denom));
  }
  JpegDecodeJob job;
  job.scale = scale;
  job.region = region;
  job.keep_rows = keep_rows;
  job.fast_idct = fast_idct_;
  job.fancy_upsampling = fancy_upsampling_;
  if (fast_huffman_) {
    if (huffman_ == nullptr) huffman_ = std::make_unique<internal::JpegHuffmanDecoder>();
    job.huffman = huffman_.get();
  }
  job.rows = &rows_;
  job.row_pointers = &row_pointers_;
  job.rgb_row = &rgb_row_;
  job.sink = &sink;
  const bool ok = JpegDecodeGuarded(jpeg_.get(), &job);
  jpeg_abort_decompress(&jpeg_->cinfo);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("corrupt or truncated JPEG data: ", jpeg_->err.message));
  }
  if (job.problem[0] != '\0') {
    return absl::InvalidArgumentError(absl::StrCat("JPEG decode: ", job.problem));
  }
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodePng(const PixelRect& region, RowSink sink, int keep_rows) {
  if (region.width <= 0 || region.height <= 0 || region.x < 0 || region.y < 0 ||
      region.x + region.width > header_.width || region.y + region.height > header_.height) {
    png_->Reset();
    return absl::InvalidArgumentError(absl::StrCat(
        "PNG decode: region ", region.width, "x", region.height, " at (", region.x, ",", region.y,
        ") is outside the ", header_.width, "x", header_.height, " image"));
  }
  PngDecodeJob job{region, keep_rows, header_.width, header_.height, &rows_, &row_pointers_, &sink};
  const bool ok = PngDecodeGuarded(png_.get(), &job);
  const std::string message = ok ? std::string() : std::string(png_->message);
  png_->Reset();
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("corrupt or truncated PNG: ", message));
  return absl::OkStatus();
}

size_t ImageDecoder::capacity_bytes() const {
  return rows_.capacity() + rgb_row_.capacity() + row_pointers_.capacity() * sizeof(uint8_t*);
}

void ImageDecoder::ReleaseBuffers() {
  std::vector<uint8_t>().swap(rows_);
  std::vector<uint8_t>().swap(rgb_row_);
  std::vector<uint8_t*>().swap(row_pointers_);
}

absl::StatusOr<DecodedImage> DecodeImage(absl::Span<const uint8_t> bytes,
                                         const DecodeOptions& options) {
  ImageDecoder decoder;
  ASSIGN_OR_RETURN(const ImageHeader header, decoder.ReadHeader(bytes, options));
  DecodedImage image;
  image.width = header.width;
  image.height = header.height;
  image.rgb.resize(static_cast<size_t>(header.width) * header.height * 3);
  const size_t row_bytes = static_cast<size_t>(header.width) * 3;
  RETURN_IF_ERROR(decoder.Decode(
      ScaleFactor{1, 1}, PixelRect{0, 0, header.width, header.height},
      [&](int y, const uint8_t* rgb) { std::memcpy(&image.rgb[y * row_bytes], rgb, row_bytes); }));
  return image;
}

}  // namespace stoker::data_service::image
