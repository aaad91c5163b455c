#include "data_service/dataset/encoded_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"

namespace stoker::data_service {
namespace {

// An errno from opening or reading an image: the file's fault (marked), unless the
// service ran out of descriptors or memory. EIO and other unexpected errors are the
// file's too: the data cannot be read.
absl::Status FileError(int errno_value, absl::string_view what) {
  absl::Status status = stoker::ErrnoToStatus(errno_value, what);
  if (absl::IsResourceExhausted(status)) return status;
  if (absl::IsInternal(status)) status = absl::DataLossError(status.message());
  return MarkBadSample(std::move(status));
}

absl::Span<uint8_t> Grow(std::vector<uint8_t>* buffer, size_t bytes) {
  if (buffer->size() < bytes) buffer->resize(bytes);
  return absl::MakeSpan(buffer->data(), bytes);
}

// Reads exactly `out.size()` bytes at `offset`; `what` names the read in errors.
absl::Status ReadFully(int fd, uint64_t offset, absl::Span<uint8_t> out, absl::string_view what) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got =
        pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return FileError(errno, absl::StrCat("read ", what));
    }
    if (got == 0) {
      return MarkBadSample(absl::DataLossError(
          absl::StrCat("read ", what, ": the file ends after ", offset + done, " bytes, ",
                       out.size() - done, " bytes short (truncated, or changed while read)")));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<absl::Span<const uint8_t>> ReadImageFile(const std::string& path,
                                                        std::vector<uint8_t>* buffer) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return FileError(errno, "open");
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return FileError(errno, "fstat");
  if (!S_ISREG(st.st_mode)) {
    return MarkBadSample(absl::InvalidArgumentError(
        "not a regular file (a FIFO, socket or device named like an image)"));
  }
  if (st.st_size > kMaxImageFileBytes) {
    return MarkBadSample(absl::InvalidArgumentError(absl::StrCat(
        "the file is ", st.st_size, " bytes, more than the limit of ", kMaxImageFileBytes)));
  }
  absl::Span<uint8_t> bytes = Grow(buffer, static_cast<size_t>(st.st_size));
  if (absl::Status s = ReadFully(fd.get(), 0, bytes, "file"); !s.ok()) return s;
  return absl::Span<const uint8_t>(bytes);
}

absl::StatusOr<absl::Span<const uint8_t>> ReadFileRange(int fd, uint64_t offset, uint32_t length,
                                                        std::vector<uint8_t>* buffer) {
  absl::Span<uint8_t> bytes = Grow(buffer, length);
  if (absl::Status s = ReadFully(fd, offset, bytes, "shard"); !s.ok()) return s;
  return absl::Span<const uint8_t>(bytes);
}

absl::StatusOr<image::TransformSpec> SampleTransform(const SampleOptions& options) {
  image::TransformSpec spec;
  if (options.train) {
    spec = image::TransformSpec::Train(options.image_size);
  } else {
    const int32_t resize = options.eval_resize > 0
                               ? options.eval_resize
                               : EvalResizeSize(options.image_size, kDefaultEvalResizeRatio);
    spec = image::TransformSpec::Eval(resize, options.image_size);
  }
  spec.decode.max_pixels = options.max_pixels;
  if (options.exact_jpeg) {
    const image::DecodeOptions exact;  // Pillow's reconstruction
    spec.decode.fast_idct = exact.fast_idct;
    spec.decode.fancy_upsampling = exact.fancy_upsampling;
  }
  if (options.max_pixels <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_pixels must be positive, got ", options.max_pixels));
  }
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  return spec;
}

absl::Status DecodeSample(absl::Span<const uint8_t> bytes, int64_t index,
                          const SampleOptions& options, SampleScratch& scratch, uint8_t* dst) {
  absl::StatusOr<image::TransformSpec> spec = SampleTransform(options);
  if (!spec.ok()) return spec.status();
  const image::SampleKey key{options.seed, options.epoch, index};
  absl::Status status;
  if (scratch.time_stages) {
    image::TransformTrace trace;
    trace.time_resize = true;
    status = image::DecodeAndTransform(bytes, *spec, key, scratch.transform, dst, &trace);
    scratch.times.resize_us = trace.resize_ns / 1000;
  } else {
    status = image::DecodeAndTransform(bytes, *spec, key, scratch.transform, dst);
  }
  // The spec is valid, so what remains is the image's fault, except running out of memory.
  if (status.ok() || absl::IsResourceExhausted(status)) return status;
  return MarkBadSample(std::move(status));
}

absl::Status EncodedImageDataset::Load(int64_t index, const SampleOptions& options,
                                       SampleScratch& scratch, uint8_t* dst) const {
  if (!scratch.time_stages) {
    absl::StatusOr<absl::Span<const uint8_t>> bytes = ReadEncoded(index, scratch);
    if (!bytes.ok()) return bytes.status();
    return DecodeSample(*bytes, index, options, scratch, dst);
  }
  using Clock = std::chrono::steady_clock;
  auto micros = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  };
  const Clock::time_point start = Clock::now();
  absl::StatusOr<absl::Span<const uint8_t>> bytes = ReadEncoded(index, scratch);
  const Clock::time_point read = Clock::now();
  scratch.times = SampleTimes();
  scratch.times.read_us = micros(read - start);
  if (!bytes.ok()) return bytes.status();
  scratch.times.file_bytes = static_cast<int64_t>(bytes->size());
  absl::Status status = DecodeSample(*bytes, index, options, scratch, dst);
  scratch.times.decode_us =
      std::max<int64_t>(0, micros(Clock::now() - read) - scratch.times.resize_us);
  return status;
}

}  // namespace stoker::data_service
