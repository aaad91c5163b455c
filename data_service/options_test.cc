// DataServiceOptions::Validate refuses every out-of-range value with InvalidArgument
// naming its flag; the choice parsers refuse unknown words the same way.
#include "data_service/options.h"

#include <functional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

DataServiceOptions Valid() {
  DataServiceOptions options;
  options.service.socket_path = "/tmp/stoker.j/node0.sock";
  options.service.job_id = "j";
  return options;
}

TEST(DataServiceOptionsTest, TheDefaultsWithASocketAndAJobIdAreValid) {
  EXPECT_TRUE(Valid().Validate().ok()) << Valid().Validate();
}

TEST(DataServiceOptionsTest, EveryBadValueIsRefusedNamingItsFlag) {
  const std::pair<const char*, std::function<void(DataServiceOptions&)>> cases[] = {
      {"--socket: required", [](DataServiceOptions& o) { o.service.socket_path = ""; }},
      {"--job_id: required", [](DataServiceOptions& o) { o.service.job_id = ""; }},
      {"--job_id", [](DataServiceOptions& o) { o.service.job_id = "a/b"; }},
      {"--node_id: must", [](DataServiceOptions& o) { o.service.node_id = -1; }},
      {"--threads: must", [](DataServiceOptions& o) { o.service.threads = -1; }},
      {"--prefetch: must", [](DataServiceOptions& o) { o.service.prefetch = 0; }},
      {"--train_dir/--val_dir", [](DataServiceOptions& o) { o.dataset.train_dir = "/tmp"; }},
      {"--max_bad_fraction", [](DataServiceOptions& o) { o.service.bad_samples.max_fraction = 2; }},
      {"--max_image_pixels: must", [](DataServiceOptions& o) { o.service.max_image_pixels = 0; }},
      {"--eval_resize_ratio: must",
       [](DataServiceOptions& o) { o.service.eval_resize_ratio = 0.5; }},
      {"--gpu_decode_share", [](DataServiceOptions& o) { o.service.gpu_decode_share = 1.5; }},
      {"--scan_timeout_s: must",
       [](DataServiceOptions& o) { o.dataset.image_folder.scan_timeout = absl::ZeroDuration(); }},
      {"--shutdown_timeout_s: must",
       [](DataServiceOptions& o) { o.service.shutdown_timeout = absl::ZeroDuration(); }},
  };
  for (const auto& [flag, spoil] : cases) {
    DataServiceOptions options = Valid();
    spoil(options);
    const absl::Status status = options.Validate();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << flag << ": " << status;
    EXPECT_NE(std::string(status.message()).find(flag), std::string::npos) << status;
  }
}

TEST(DataServiceOptionsTest, ADatasetFolderIsForTheDatasetsThatReadOne) {
  for (const char* kind : {"imagefolder", "packed"}) {
    DataServiceOptions options = Valid();
    options.dataset.kind = kind;
    options.dataset.train_dir = "/data/train";
    EXPECT_TRUE(options.Validate().ok()) << kind;
  }
}

TEST(DataServiceOptionsTest, ChoicesAreParsedOrRefusedNamingTheirFlag) {
  EXPECT_FALSE(*ParseJpegDecode("fast"));
  EXPECT_TRUE(*ParseJpegDecode("exact"));
  EXPECT_EQ(ParseJpegDecode("slow").status().message(),
            "--jpeg_decode=slow: must be fast or exact");
  EXPECT_TRUE(*ParseFollowLinks("yes"));
  EXPECT_FALSE(*ParseFollowLinks("no"));
  EXPECT_EQ(ParseFollowLinks("maybe").status().message(),
            "--follow_links=maybe: must be yes or no");
}

}  // namespace
}  // namespace stoker::data_service
