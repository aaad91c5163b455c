// data_service_benchmark: how many finished samples per second the data service delivers
// to one trainer rank. It starts the service in this process (or attaches to a running
// one with --socket), registers one rank, and acquires and releases batches as fast as
// they come, reporting images/s, images/s per decode thread and CPU time per image.
// --make_jpegs writes a folder of photo-like JPEGs first (the throughput target's images: 500x375
// quality-90 JPEGs, evaluation transform to 224, batch 256).
//
//   data_service_benchmark --make_jpegs=2000 --data=/tmp/jpegs --split=val --seconds=20
//   data_service_benchmark --dataset=packed --data=/tmp/train.stkpack --threads=15
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/logging.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/ring/ring_client.h"
#include "data_service/service.h"
#include "data_service/worker_pool.h"

ABSL_FLAG(std::string, dataset, "imagefolder", "imagefolder, packed or synthetic");
ABSL_FLAG(std::string, data, "", "the ImageFolder root, or the packed index file");
ABSL_FLAG(int32_t, make_jpegs, 0,
          "first write this many photo-like JPEGs into --data (an ImageFolder of 10 classes), "
          "unless it exists");
ABSL_FLAG(int32_t, jpeg_width, 500, "--make_jpegs: width");
ABSL_FLAG(int32_t, jpeg_height, 375, "--make_jpegs: height");
ABSL_FLAG(int32_t, jpeg_quality, 90, "--make_jpegs: JPEG quality (4:2:0 like Pillow's default)");
ABSL_FLAG(std::string, split, "val",
          "val (Resize + CenterCrop) or train (RandomResizedCrop + flip)");
ABSL_FLAG(int32_t, image_size, 224, "sample size");
ABSL_FLAG(int32_t, batch, 256, "batch size");
ABSL_FLAG(int32_t, slots, 4, "ring slots");
ABSL_FLAG(int32_t, threads, 0, "decode threads (0: the service's automatic choice)");
ABSL_FLAG(int32_t, prefetch, 2, "batches of the ring decoded at the same time");
ABSL_FLAG(double, seconds, 20, "measure for this long (after one warm-up epoch's first batches)");
ABSL_FLAG(int32_t, warmup_batches, 4, "batches consumed before measuring");
ABSL_FLAG(std::string, jpeg_decode, "fast", "fast or exact (Pillow's pixels), as data_service's");
ABSL_FLAG(double, gpu_decode_share, 0.0,
          "as data_service's: the share of each batch left undecoded for a GPU (the benchmark "
          "only takes the batches, so it measures the service's side)");
ABSL_FLAG(std::string, socket, "",
          "attach to the data service at this socket instead of starting one (then --dataset, "
          "--data, --threads and --prefetch are the running service's)");

constexpr char kUsage[] =
    "data_service_benchmark [--make_jpegs=N] --data=PATH [--dataset=imagefolder|packed] "
    "[--split=val|train] [--threads=N] [--seconds=S]: images/s one rank receives";

namespace stoker::data_service {
namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A photo-like image: smooth gradients, a bilinearly upsampled low-resolution texture,
// a few flat shapes and sensor-like noise. Its JPEGs are about as large, and decode about
// as fast, as photographs of the same size (unlike noise, which is far slower).
std::vector<uint8_t> PhotoLike(int width, int height, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::normal_distribution<float> noise(0.f, 3.f);
  const int tw = std::max(2, width / 40), th = std::max(2, height / 40);
  std::vector<float> texture(static_cast<size_t>(tw) * th * 3);
  for (float& t : texture) t = 255.f * unit(rng);
  float a[3], b[3], offset[3];
  for (int c = 0; c < 3; ++c)
    a[c] = 2 * unit(rng) - 1, b[c] = 2 * unit(rng) - 1, offset[c] = 2 * unit(rng) - 1;
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    const float ty = std::min<float>(th - 1.001f, y * (th - 1.f) / std::max(1, height - 1));
    const int y0 = static_cast<int>(ty);
    const float fy = ty - y0;
    for (int x = 0; x < width; ++x) {
      const float tx = std::min<float>(tw - 1.001f, x * (tw - 1.f) / std::max(1, width - 1));
      const int x0 = static_cast<int>(tx);
      const float fx = tx - x0;
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int xx, int yy) {
          return texture[(static_cast<size_t>(yy) * tw + xx) * 3 + c];
        };
        const float t = (at(x0, y0) * (1 - fx) + at(x0 + 1, y0) * fx) * (1 - fy) +
                        (at(x0, y0 + 1) * (1 - fx) + at(x0 + 1, y0 + 1) * fx) * fy;
        const float base = 128 + 70 * (a[c] * x / width + b[c] * y / height) + 30 * offset[c];
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(0.55f * base + 0.45f * t, 0.f, 255.f));
      }
    }
  }
  for (int shape = 0; shape < 14; ++shape) {
    int x0 = static_cast<int>(unit(rng) * width), x1 = static_cast<int>(unit(rng) * width);
    int y0 = static_cast<int>(unit(rng) * height), y1 = static_cast<int>(unit(rng) * height);
    if (x0 > x1) std::swap(x0, x1);
    if (y0 > y1) std::swap(y0, y1);
    const uint8_t colour[3] = {static_cast<uint8_t>(rng() % 256), static_cast<uint8_t>(rng() % 256),
                               static_cast<uint8_t>(rng() % 256)};
    const bool ellipse = rng() % 2 == 0;
    const float cx = (x0 + x1) / 2.f, cy = (y0 + y1) / 2.f;
    const float rx = std::max(1.f, (x1 - x0) / 2.f), ry = std::max(1.f, (y1 - y0) / 2.f);
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        if (ellipse && std::pow((x - cx) / rx, 2.f) + std::pow((y - cy) / ry, 2.f) > 1.f) continue;
        std::copy(colour, colour + 3, &rgb[(static_cast<size_t>(y) * width + x) * 3]);
      }
    }
  }
  for (uint8_t& v : rgb) v = static_cast<uint8_t>(std::clamp(v + noise(rng), 0.f, 255.f));
  return rgb;
}

// Writes `count` JPEGs on all cores: image i is class (i % 10)'s img<i>.jpg.
absl::Status MakeJpegs(const std::string& root, int count, int width, int height, int quality) {
  for (int c = 0; c < 10; ++c)
    std::filesystem::create_directories(absl::StrFormat("%s/class%02d", root, c));
  const int workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<absl::Status> failures(workers);
  std::vector<uint64_t> bytes(workers, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
      for (int i = w; i < count; i += workers) {
        const std::vector<uint8_t> rgb = PhotoLike(width, height, 1000 + i);
        unsigned char* jpeg = nullptr;
        unsigned long size = 0;
        if (tjCompress2(handle.get(), rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                        TJSAMP_420, quality, 0) != 0) {
          failures[w] =
              absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(handle.get())));
          return;
        }
        const std::string path = absl::StrFormat("%s/class%02d/img%06d.jpg", root, i % 10, i);
        FILE* file = std::fopen(path.c_str(), "wb");
        const bool ok = file != nullptr && std::fwrite(jpeg, 1, size, file) == size;
        if (file != nullptr) std::fclose(file);
        tjFree(jpeg);
        if (!ok) {
          failures[w] = absl::InternalError(absl::StrCat("cannot write ", path));
          return;
        }
        bytes[w] += size;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  uint64_t total = 0;
  for (int w = 0; w < workers; ++w) {
    if (!failures[w].ok()) return failures[w];
    total += bytes[w];
  }
  std::printf("wrote %d JPEGs of %dx%d, quality %d, %.1f KiB on average, to %s\n", count, width,
              height, quality, total / 1024.0 / std::max(1, count), root.c_str());
  return absl::OkStatus();
}

int Run() {
  const std::string data = absl::GetFlag(FLAGS_data);
  std::string socket = absl::GetFlag(FLAGS_socket);
  std::unique_ptr<DataService> service;
  std::string socket_dir;
  if (socket.empty()) {
    if (absl::GetFlag(FLAGS_make_jpegs) > 0 && !std::filesystem::exists(data)) {
      if (absl::Status s =
              MakeJpegs(data, absl::GetFlag(FLAGS_make_jpegs), absl::GetFlag(FLAGS_jpeg_width),
                        absl::GetFlag(FLAGS_jpeg_height), absl::GetFlag(FLAGS_jpeg_quality));
          !s.ok()) {
        std::fprintf(stderr, "data_service_benchmark: %s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    DatasetConfig config;
    config.kind = absl::GetFlag(FLAGS_dataset);
    config.train_dir = data;
    config.val_dir = config.kind == "synthetic" ? "" : data;
    absl::StatusOr<Datasets> datasets = OpenDatasets(config);
    if (!datasets.ok()) {
      std::fprintf(stderr, "data_service_benchmark: %s\n",
                   std::string(datasets.status().message()).c_str());
      return 1;
    }
    char dir[] = "/tmp/stoker-bench-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    socket_dir = dir;
    socket = socket_dir + "/ds.sock";
    ServiceOptions options;
    options.socket_path = socket;
    options.job_id = absl::StrCat("bench", getpid());
    options.threads = absl::GetFlag(FLAGS_threads);
    options.prefetch = absl::GetFlag(FLAGS_prefetch);
    const std::string jpeg_decode = absl::GetFlag(FLAGS_jpeg_decode);
    if (jpeg_decode != "fast" && jpeg_decode != "exact") {
      std::fprintf(stderr, "data_service_benchmark: --jpeg_decode must be fast or exact\n");
      return 1;
    }
    options.exact_jpeg = jpeg_decode == "exact";
    options.gpu_decode_share = absl::GetFlag(FLAGS_gpu_decode_share);
    absl::StatusOr<std::unique_ptr<DataService>> started = DataService::Start(options, *datasets);
    if (!started.ok()) {
      std::fprintf(stderr, "data_service_benchmark: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    service = std::move(*started);
  }

  RingRequest request;
  request.batch_size = absl::GetFlag(FLAGS_batch);
  request.image_size = absl::GetFlag(FLAGS_image_size);
  request.slot_count = absl::GetFlag(FLAGS_slots);
  request.train = absl::GetFlag(FLAGS_split) == "train";
  absl::StatusOr<std::unique_ptr<RingClient>> client =
      RingClient::Connect(socket, request, absl::Seconds(60));
  if (!client.ok()) {
    std::fprintf(stderr, "data_service_benchmark: %s\n",
                 std::string(client.status().message()).c_str());
    return 1;
  }
  const int threads = service != nullptr ? service->stats().active_threads : 0;
  int64_t epoch = 0;
  int64_t batches_left = 0;
  int64_t deferred = 0;  // deferred samples received
  auto next_batch = [&]() -> absl::StatusOr<int32_t> {
    // As the trainer: the next epoch is asked for when this one starts.
    if (batches_left == 0) {
      if (epoch == 0) {
        absl::StatusOr<EpochInfo> info = (*client)->StartEpoch(epoch++, 1);
        if (!info.ok()) return info.status();
        batches_left += info->batches;
      }
      absl::StatusOr<EpochInfo> info = (*client)->StartEpoch(epoch++, 1);
      if (!info.ok()) return info.status();
      batches_left += info->batches;
    }
    absl::StatusOr<BatchView> batch = (*client)->Acquire(absl::Seconds(120));
    if (!batch.ok()) return batch.status();
    --batches_left;
    deferred += batch->deferred_count;
    const int32_t count = batch->count;
    if (absl::Status s = (*client)->Release(*batch); !s.ok()) return s;
    return count;
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup_batches); ++i) {
    if (absl::StatusOr<int32_t> got = next_batch(); !got.ok()) {
      std::fprintf(stderr, "data_service_benchmark: %s\n",
                   std::string(got.status().message()).c_str());
      return 1;
    }
  }
  const absl::Time start = absl::Now();
  const double cpu_start = CpuSeconds();
  const absl::Duration length = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  int64_t images = 0, batches = 0;
  deferred = 0;  // counted over the measured batches only
  while (absl::Now() - start < length) {
    absl::StatusOr<int32_t> got = next_batch();
    if (!got.ok()) {
      std::fprintf(stderr, "data_service_benchmark: %s\n",
                   std::string(got.status().message()).c_str());
      return 1;
    }
    images += *got;
    ++batches;
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = CpuSeconds() - cpu_start;
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  std::string line =
      absl::StrFormat("%s %s split: %d images in %d batches of %d (%dx%d) in %.2f s: %.0f images/s",
                      data, request.train ? "train" : "val", images, batches, request.batch_size,
                      request.image_size, request.image_size, wall, images / wall);
  if (absl::GetFlag(FLAGS_gpu_decode_share) > 0.0) {
    line += absl::StrFormat(" (%.1f%% of the samples deferred to a GPU, undecoded)",
                            100.0 * deferred / std::max<int64_t>(1, images));
  }
  if (service != nullptr) {
    const ServiceStats stats = service->stats();
    line += absl::StrFormat(
        ", %.0f images/s per decode thread (%d threads, %d cores), %.2f ms CPU per image, "
        "max RSS %.0f MiB (rings %.0f MiB, decode scratch %.1f MiB)",
        images / wall / std::max(1, threads), threads,
        static_cast<int>(std::thread::hardware_concurrency()),
        1000.0 * cpu / std::max<int64_t>(1, images), usage.ru_maxrss / 1024.0,
        stats.ring_bytes / 1048576.0, stats.scratch_bytes / 1048576.0);
  }
  std::printf("%s\n", line.c_str());
  client->reset();
  if (service != nullptr) (void)service->Shutdown();
  if (!socket_dir.empty()) rmdir(socket_dir.c_str());
  return 0;
}

}  // namespace
}  // namespace stoker::data_service

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv,
      stoker::FlagSpecOf("data_service_benchmark", "data_service/data_service_benchmark.cc"),
      kUsage);
  stoker::SetLogIdentity("data_service_benchmark");
  return stoker::data_service::Run();
}
