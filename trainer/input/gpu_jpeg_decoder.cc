#include "trainer/input/gpu_jpeg_decoder.h"

#include <dlfcn.h>
#include <nvjpeg.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cuda_status.h"
#include "common/cuda_stream.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data_service/ring/wire_types.h"
#include "trainer/input/decode_arena.h"
#include "trainer/input/deferred_resample_kernel.h"

namespace stoker::trainer {
namespace internal {

// The entry points of libnvjpeg that the decoder uses, resolved with dlsym.
struct NvjpegApi {
  decltype(&::nvjpegCreateEx) CreateEx = nullptr;
  decltype(&::nvjpegDestroy) Destroy = nullptr;
  decltype(&::nvjpegJpegStateCreate) JpegStateCreate = nullptr;
  decltype(&::nvjpegJpegStateDestroy) JpegStateDestroy = nullptr;
  decltype(&::nvjpegGetImageInfo) GetImageInfo = nullptr;
  decltype(&::nvjpegDecodeBatchedInitialize) DecodeBatchedInitialize = nullptr;
  decltype(&::nvjpegDecodeBatched) DecodeBatched = nullptr;
};

// Everything the decoder owns, released in the destructor (after the last enqueued work
// has completed).
struct NvjpegState {
  NvjpegApi api;
  int device = 0;
  int max_batch = 0;
  int image_size = 0;
  bool hardware = false;
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t jpeg_state = nullptr;
  int initialized_batch = -1;  // the batch size of the last nvjpegDecodeBatchedInitialize
  // nvJPEG's CUDA backend, made when the hardware one refuses an image: a JPEG the engines
  // cannot take is not a bad file (Note [Hardware refusals]).
  nvjpegHandle_t cuda_handle = nullptr;
  nvjpegJpegState_t cuda_state = nullptr;
  int64_t cuda_decodes = 0;  // images the hardware refused and the CUDA backend decoded
  uint8_t* arena = nullptr;  // device: the full-size decoded images of one round
  size_t arena_bytes = 0;
  uint64_t arena_limit = 0;  // the arena never grows past this (Note [The GPU decode arena])
  // Pinned host memory: the private copy of the batch's JPEGs that nvJPEG reads (Note
  // [Decoding from a private copy]).
  uint8_t* jpeg_copy = nullptr;
  size_t jpeg_copy_bytes = 0;
  ResampleJob* host_jobs = nullptr;    // pinned, max_batch entries
  ResampleJob* device_jobs = nullptr;  // device, max_batch entries
  // nvJPEG's stream, which holds nothing else (Note [Decoding waits on the host]).
  CudaStream decode_stream;
  CudaEvent decoded;  // on decode_stream, after the last batch's decode
  CudaEvent done;     // on the caller's stream, after the last Decode()'s work
  bool pending = false;
  GpuDecodeTimes times;

  ~NvjpegState() {
    if (pending) (void)done.Synchronize();
    if (decode_stream.get() != nullptr) (void)decode_stream.Synchronize();
    if (cuda_state != nullptr) api.JpegStateDestroy(cuda_state);
    if (cuda_handle != nullptr) api.Destroy(cuda_handle);
    if (jpeg_state != nullptr) api.JpegStateDestroy(jpeg_state);
    if (handle != nullptr) api.Destroy(handle);
    if (arena != nullptr) cudaFree(arena);
    if (jpeg_copy != nullptr) cudaFreeHost(jpeg_copy);
    if (device_jobs != nullptr) cudaFree(device_jobs);
    if (host_jobs != nullptr) cudaFreeHost(host_jobs);
  }
};

}  // namespace internal

namespace {

using internal::NvjpegApi;
using internal::NvjpegState;

absl::string_view NvjpegStatusName(nvjpegStatus_t status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS:
      return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG:
      return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "incomplete bitstream";
    default:
      return "unknown status";
  }
}

absl::Status NvjpegStatus(nvjpegStatus_t status, absl::string_view expression) {
  if (status == NVJPEG_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(expression, ": nvJPEG error ", static_cast<int>(status),
                                           " (", NvjpegStatusName(status), ")");
  if (status == NVJPEG_STATUS_ALLOCATOR_FAILURE) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

#define RETURN_IF_NVJPEG_ERROR(expr) RETURN_IF_ERROR(NvjpegStatus((expr), #expr))

absl::StatusOr<NvjpegApi> LoadNvjpeg() {
  const std::string name = NvjpegLibraryName();
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "the ring holds deferred samples (--gpu_decode_share is above 0, or auto on a GPU), "
        "which need nvJPEG, but ",
        name, " cannot be loaded: ", why != nullptr ? why : "?",
        ". Install it (`pip install nvidia-nvjpeg`, which puts libnvjpeg.so.13 in "
        "nvidia/cu13/lib), point STOKER_NVJPEG_LIBRARY at a copy (torchvision ships one in "
        "torchvision.libs), or run the trainer with --gpu_decode_share=0 (and the data "
        "service with its default, --gpu_decode_share=auto)"));
  }
  // The library stays loaded for the life of the process: nvJPEG keeps threads and
  // CUDA state that a dlclose would pull from under them.
  NvjpegApi api;
  auto resolve = [&](auto& fn, const char* symbol) -> absl::Status {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, symbol));
    if (fn != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(name, " has no ", symbol, ": nvJPEG 12 or newer is needed"));
  };
  RETURN_IF_ERROR(resolve(api.CreateEx, "nvjpegCreateEx"));
  RETURN_IF_ERROR(resolve(api.Destroy, "nvjpegDestroy"));
  RETURN_IF_ERROR(resolve(api.JpegStateCreate, "nvjpegJpegStateCreate"));
  RETURN_IF_ERROR(resolve(api.JpegStateDestroy, "nvjpegJpegStateDestroy"));
  RETURN_IF_ERROR(resolve(api.GetImageInfo, "nvjpegGetImageInfo"));
  RETURN_IF_ERROR(resolve(api.DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize"));
  RETURN_IF_ERROR(resolve(api.DecodeBatched, "nvjpegDecodeBatched"));
  return api;
}

ResampleAxis ToResampleAxis(const data_service::DeferredAxis& axis) {
  return ResampleAxis{axis.in0, axis.scale, axis.out_offset, axis.clip_begin, axis.clip_end, 0};
}

// Note [Decoding waits on the host]
// nvjpegDecodeBatched on the hardware backend returns only once its batch is decoded, so
// the prefetch thread spends that time in the call (GpuDecodeTimes): about 35 us per image
// on an idle H200. nvJPEG runs its kernels on streams of its own, which wait behind another
// stream's work only where the two share a hardware queue (Note [Hardware work queues] in
// common/cuda_work_queues.h). The decoder gives nvJPEG a stream of its own too, so that a
// batch's decode is not ordered behind the copy stream's wait for the compute stream to
// release the staging buffer: the decode reads only the batch's host bytes and writes only
// the decoder's arena, and the caller's stream waits for it (an event) before the crops
// that write into the batch.

// Note [Hardware refusals]
// When a batched decode fails, each of its images is decoded alone to find the one at
// fault; an image the hardware backend refuses alone is tried once more with nvJPEG's
// CUDA backend, so that a JPEG the engines do not take (a size or layout they lack) is
// decoded rather than taken for a bad file. Only an image both refuse is reported.

// Note [Decoding from a private copy]
// The ring is memory the data service writes, and may rewrite while the trainer reads it,
// so nothing that the decoder trusts is read from it twice: the headers are the ring
// client's copy, checked there (Note [Slot contents are checked] in
// data_service/ring/ring_client.cc: sizes, a decoded size within the arena, a crop inside
// the image), and each JPEG's bytes (as many as its checked header says) are copied once
// into the decoder's pinned memory, from which nvJPEG reads both the image's size and its
// data. The copy stays unchanged until the decode's work is done (the next Decode() waits
// for it before reusing the memory).

// One deferred sample of the batch being decoded.
struct Pending {
  int32_t position = 0;
  data_service::DeferredSampleHeader header;
  const uint8_t* jpeg = nullptr;  // in the private copy
  size_t pitch = 0;
  uint64_t bytes = 0;  // decoded
  size_t offset = 0;   // in the arena, within its round
  bool ok = true;
};

}  // namespace

absl::Status CheckNvjpegLoadable() { return LoadNvjpeg().status(); }

std::string NvjpegLibraryName() {
  const char* path = std::getenv("STOKER_NVJPEG_LIBRARY");
  return path != nullptr && path[0] != '\0' ? path : "libnvjpeg.so.13";
}

GpuJpegDecoder::GpuJpegDecoder(std::unique_ptr<NvjpegState> state) : state_(std::move(state)) {}
GpuJpegDecoder::~GpuJpegDecoder() = default;

bool GpuJpegDecoder::hardware() const { return state_->hardware; }
int64_t GpuJpegDecoder::cuda_backend_decodes() const { return state_->cuda_decodes; }
GpuDecodeTimes GpuJpegDecoder::times() const { return state_->times; }

absl::StatusOr<std::unique_ptr<GpuJpegDecoder>> GpuJpegDecoder::Create(int device, int max_batch,
                                                                       int image_size,
                                                                       uint64_t arena_bytes) {
  if (max_batch < 1 || image_size < 1 || arena_bytes < 1) {
    return absl::InvalidArgumentError(
        "GpuJpegDecoder needs a batch size, an image size and an arena bound");
  }
  ASSIGN_OR_RETURN(NvjpegApi api, LoadNvjpeg());
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  auto state = std::make_unique<NvjpegState>();
  state->api = api;
  state->device = device;
  state->max_batch = max_batch;
  state->image_size = image_size;
  state->arena_limit = arena_bytes;
  nvjpegStatus_t created =
      api.CreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &state->handle);
  state->hardware = created == NVJPEG_STATUS_SUCCESS;
  if (!state->hardware) {
    LogWarning(
        "nvJPEG's hardware backend is not available on GPU %d (%s): deferred samples "
        "are decoded by nvJPEG's CUDA backend, on the GPU's cores",
        device, std::string(NvjpegStatusName(created)).c_str());
    state->handle = nullptr;
    RETURN_IF_NVJPEG_ERROR(
        api.CreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &state->handle));
  }
  RETURN_IF_NVJPEG_ERROR(api.JpegStateCreate(state->handle, &state->jpeg_state));
  RETURN_IF_CUDA_ERROR(
      cudaMallocHost(reinterpret_cast<void**>(&state->host_jobs), sizeof(ResampleJob) * max_batch));
  RETURN_IF_CUDA_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&state->device_jobs), sizeof(ResampleJob) * max_batch));
  ASSIGN_OR_RETURN(state->decode_stream, CudaStream::Create(device));
  ASSIGN_OR_RETURN(state->decoded, CudaEvent::Create());
  ASSIGN_OR_RETURN(state->done, CudaEvent::Create());
  return std::unique_ptr<GpuJpegDecoder>(new GpuJpegDecoder(std::move(state)));
}

namespace {

// Decodes `work` (one round) into the arena on nvJPEG's stream; the images nvJPEG refuses
// are marked not ok and added to `refused`, with why. Note [Hardware refusals].
absl::Status DecodeInArena(NvjpegState& s, absl::Span<Pending> work,
                           std::vector<RefusedJpeg>& refused) {
  std::vector<const unsigned char*> data(work.size());
  std::vector<size_t> lengths(work.size());
  std::vector<nvjpegImage_t> images(work.size());
  for (size_t k = 0; k < work.size(); ++k) {
    data[k] = work[k].jpeg;
    lengths[k] = work[k].header.encoded_bytes;
    std::memset(&images[k], 0, sizeof(images[k]));
    images[k].channel[0] = s.arena + work[k].offset;
    images[k].pitch[0] = work[k].pitch;
  }
  const int n = static_cast<int>(work.size());
  // Note [Decoding waits on the host].
  const absl::Time started = absl::Now();
  if (s.initialized_batch != n) {
    RETURN_IF_NVJPEG_ERROR(
        s.api.DecodeBatchedInitialize(s.handle, s.jpeg_state, n, 1, NVJPEG_OUTPUT_RGBI));
    s.initialized_batch = n;
    ++s.times.initializations;
  }
  const nvjpegStatus_t decoded = s.api.DecodeBatched(
      s.handle, s.jpeg_state, data.data(), lengths.data(), images.data(), s.decode_stream.get());
  const double host_ms = absl::ToDoubleMilliseconds(absl::Now() - started);
  ++s.times.batches;
  s.times.host_ms += host_ms;
  s.times.longest_host_ms = std::max(s.times.longest_host_ms, host_ms);
  if (decoded == NVJPEG_STATUS_ALLOCATOR_FAILURE) {
    return NvjpegStatus(decoded, "nvjpegDecodeBatched");
  }
  if (decoded == NVJPEG_STATUS_SUCCESS) return absl::OkStatus();
  // Some image of the round is refused: find which, one at a time.
  s.initialized_batch = -1;
  for (size_t k = 0; k < work.size(); ++k) {
    RETURN_IF_NVJPEG_ERROR(
        s.api.DecodeBatchedInitialize(s.handle, s.jpeg_state, 1, 1, NVJPEG_OUTPUT_RGBI));
    nvjpegStatus_t one = s.api.DecodeBatched(s.handle, s.jpeg_state, &data[k], &lengths[k],
                                             &images[k], s.decode_stream.get());
    if (one == NVJPEG_STATUS_ALLOCATOR_FAILURE) return NvjpegStatus(one, "nvjpegDecodeBatched");
    const nvjpegStatus_t hardware = one;
    if (one != NVJPEG_STATUS_SUCCESS && s.hardware) {
      // Note [Hardware refusals].
      if (s.cuda_handle == nullptr) {
        RETURN_IF_NVJPEG_ERROR(
            s.api.CreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &s.cuda_handle));
        RETURN_IF_NVJPEG_ERROR(s.api.JpegStateCreate(s.cuda_handle, &s.cuda_state));
      }
      RETURN_IF_NVJPEG_ERROR(
          s.api.DecodeBatchedInitialize(s.cuda_handle, s.cuda_state, 1, 1, NVJPEG_OUTPUT_RGBI));
      one = s.api.DecodeBatched(s.cuda_handle, s.cuda_state, &data[k], &lengths[k], &images[k],
                                s.decode_stream.get());
      if (one == NVJPEG_STATUS_ALLOCATOR_FAILURE) return NvjpegStatus(one, "nvjpegDecodeBatched");
      if (one == NVJPEG_STATUS_SUCCESS) ++s.cuda_decodes;
    }
    if (one != NVJPEG_STATUS_SUCCESS) {
      work[k].ok = false;
      refused.push_back(RefusedJpeg{
          work[k].position,
          s.hardware ? absl::StrCat("nvJPEG's hardware backend (", NvjpegStatusName(hardware),
                                    ") and CUDA backend (", NvjpegStatusName(one), ") refused it")
                     : absl::StrCat("nvJPEG refused it (", NvjpegStatusName(one), ")")});
    }
  }
  s.initialized_batch = 1;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RefusedJpeg>> GpuJpegDecoder::Decode(
    const data_service::BatchView& batch, uint8_t* device_images, cudaStream_t stream) {
  NvjpegState& s = *state_;
  std::vector<RefusedJpeg> refused;
  if (batch.deferred_count == 0 || batch.sample_kinds == nullptr) return refused;
  if (batch.deferred_headers == nullptr) {
    return absl::InvalidArgumentError(
        "deferred samples without their checked headers (RingClient::Acquire's copy)");
  }
  if (batch.count > s.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", batch.count, " samples, the decoder takes ", s.max_batch));
  }
  const size_t sample_bytes = static_cast<size_t>(s.image_size) * s.image_size * 3;
  // The arena, the private copy and the job table are reused: the previous batch's work
  // must be done.
  if (s.pending) {
    RETURN_IF_ERROR(s.done.Synchronize());
    s.pending = false;
  }

  // Note [Decoding from a private copy]: the checked headers, and one copy of the bytes.
  std::vector<Pending> deferred;
  size_t copy_bytes = 0;
  for (int32_t i = 0; i < batch.count; ++i) {
    if (batch.sample_kinds[i] != static_cast<uint8_t>(data_service::SampleKind::kDeferredJpeg)) {
      continue;
    }
    Pending p;
    p.position = i;
    p.header = batch.deferred_headers[i];
    if (p.header.encoded_bytes > sample_bytes - sizeof(p.header)) {
      return absl::InvalidArgumentError(absl::StrCat("deferred sample ", i, " of ",
                                                     p.header.encoded_bytes,
                                                     " bytes, more than its place holds"));
    }
    p.offset = copy_bytes;  // in the private copy, until the arena's offsets are set
    copy_bytes += p.header.encoded_bytes;
    deferred.push_back(p);
  }
  if (copy_bytes > s.jpeg_copy_bytes) {
    if (s.jpeg_copy != nullptr) RETURN_IF_CUDA_ERROR(cudaFreeHost(s.jpeg_copy));
    s.jpeg_copy = nullptr;
    s.jpeg_copy_bytes = 0;
    const size_t bytes = copy_bytes + copy_bytes / 4;
    RETURN_IF_CUDA_ERROR(cudaMallocHost(reinterpret_cast<void**>(&s.jpeg_copy), bytes));
    s.jpeg_copy_bytes = bytes;
  }
  for (Pending& p : deferred) {
    std::memcpy(s.jpeg_copy + p.offset, batch.images + sample_bytes * p.position + sizeof(p.header),
                p.header.encoded_bytes);
    p.jpeg = s.jpeg_copy + p.offset;
  }

  // nvJPEG's own reading of each JPEG's size, from the copy, which must be the header's.
  std::vector<Pending> work;
  std::vector<uint64_t> decoded_bytes;
  for (Pending& p : deferred) {
    int components = 0;
    nvjpegChromaSubsampling_t subsampling;
    int widths[NVJPEG_MAX_COMPONENT] = {};
    int heights[NVJPEG_MAX_COMPONENT] = {};
    const nvjpegStatus_t info = s.api.GetImageInfo(s.handle, p.jpeg, p.header.encoded_bytes,
                                                   &components, &subsampling, widths, heights);
    if (info != NVJPEG_STATUS_SUCCESS) {
      refused.push_back(RefusedJpeg{p.position, absl::StrCat("nvJPEG cannot read its header (",
                                                             NvjpegStatusName(info), ")")});
      continue;
    }
    if (components != 3 || widths[0] != p.header.width || heights[0] != p.header.height) {
      refused.push_back(RefusedJpeg{
          p.position, absl::StrCat("nvJPEG reads a ", widths[0], "x", heights[0], " image of ",
                                   components, " components, the data service a ", p.header.width,
                                   "x", p.header.height, " one of 3")});
      continue;
    }
    p.pitch = data_service::DeferredDecodedBytes(p.header.width, 1);
    p.bytes = data_service::DeferredDecodedBytes(p.header.width, p.header.height);
    decoded_bytes.push_back(p.bytes);
    work.push_back(p);
  }
  if (work.empty()) {
    std::sort(refused.begin(), refused.end(),
              [](const RefusedJpeg& a, const RefusedJpeg& b) { return a.position < b.position; });
    return refused;
  }

  // Note [The GPU decode arena]: rounds that each fit the bound, in an arena no larger
  // than the largest round.
  ASSIGN_OR_RETURN(std::vector<DecodeRound> rounds, PlanDecodeRounds(decoded_bytes, s.arena_limit));
  uint64_t arena_needed = 0;
  for (const DecodeRound& round : rounds) arena_needed = std::max(arena_needed, round.bytes);
  if (arena_needed > s.arena_bytes) {
    if (s.arena != nullptr) RETURN_IF_CUDA_ERROR(cudaFree(s.arena));
    s.arena = nullptr;
    s.arena_bytes = 0;
    const size_t bytes = std::min<uint64_t>(arena_needed + arena_needed / 4, s.arena_limit);
    RETURN_IF_CUDA_ERROR(cudaMalloc(reinterpret_cast<void**>(&s.arena), bytes));
    s.arena_bytes = bytes;
  }

  int jobs = 0;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const DecodeRound& round = rounds[r];
    if (r > 0) {
      // The previous round's crops, on `stream`, read the arena this round overwrites.
      RETURN_IF_ERROR(s.done.Record(stream));
      RETURN_IF_ERROR(s.done.Synchronize());
    }
    absl::Span<Pending> round_work(work.data() + round.first, round.count);
    size_t offset = 0;
    for (Pending& p : round_work) {
      p.offset = offset;
      offset += p.bytes;
    }
    RETURN_IF_ERROR(DecodeInArena(s, round_work, refused));
    RETURN_IF_ERROR(s.decoded.Record(s.decode_stream.get()));
    RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(stream, s.decoded.get(), 0));
    const int first_job = jobs;
    for (const Pending& p : round_work) {
      if (!p.ok) continue;
      ResampleJob& job = s.host_jobs[jobs++];
      job.src = s.arena + p.offset;
      job.dst = device_images + sample_bytes * p.position;
      job.src_pitch = static_cast<int64_t>(p.pitch);
      job.x = ToResampleAxis(p.header.x);
      job.y = ToResampleAxis(p.header.y);
      job.flip = p.header.flip;
      job.reserved = 0;
    }
    const int round_jobs = jobs - first_job;
    if (round_jobs > 0) {
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(s.device_jobs + first_job, s.host_jobs + first_job,
                                           sizeof(ResampleJob) * round_jobs, cudaMemcpyHostToDevice,
                                           stream));
      RETURN_IF_CUDA_ERROR(
          LaunchDeferredResample(s.device_jobs + first_job, round_jobs, s.image_size, stream));
    }
  }
  RETURN_IF_ERROR(s.done.Record(stream));
  s.pending = true;
  std::sort(refused.begin(), refused.end(),
            [](const RefusedJpeg& a, const RefusedJpeg& b) { return a.position < b.position; });
  return refused;
}

}  // namespace stoker::trainer
