// DataServiceOptions: everything one data_service process is asked to do, composed of the
// option structs of the parts that consume them (the datasets, the service and its
// decoding), with the process's own (cleanup on shutdown, the sandbox); Validate() checks
// them before anything starts. Filled from the command line by data_service/flags.h.
#ifndef STOKER_DATA_SERVICE_OPTIONS_H_
#define STOKER_DATA_SERVICE_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/service.h"

namespace stoker::data_service {

struct DataServiceOptions {
  // What to serve: --dataset, --train_dir, --val_dir, --synthetic_*, --data_seed,
  // --follow_links, --scan_timeout_s.
  DatasetConfig dataset;
  // How: --socket, --job_id, --node_id, --threads, --prefetch, the decode and bad-file
  // flags, --shutdown_timeout_s, --max_memory.
  ServiceOptions service;
  // On shutdown, after the rings and the socket: remove this file (the job owner record
  // of the rank that started the service, launcher/rank/node_data_service.h); empty:
  // none.
  std::string owner_record;
  // On shutdown, remove the socket's directory when nothing else is left in it (a node's
  // job directory, launcher/rank/job_files.h).
  bool remove_socket_dir = false;
  // data_service/sandbox.h: on where the kernel offers it (--nosandbox: off); with
  // `require_sandbox`, a kernel without seccomp filters or Landlock fails the start.
  bool sandbox = true;
  bool require_sandbox = false;

  // InvalidArgument naming the flag at fault: a missing --socket or --job_id, a bad job
  // id, a value out of range, --train_dir/--val_dir without a dataset that reads them.
  absl::Status Validate() const;
};

// --jpeg_decode: fast (false) or exact (true, Pillow's pixels).
absl::StatusOr<bool> ParseJpegDecode(absl::string_view value);
// --follow_links: yes (true) or no (false).
absl::StatusOr<bool> ParseFollowLinks(absl::string_view value);

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_OPTIONS_H_
