// The names a job gives the things it leaves on a machine: the job id that every one of
// them carries, the shared-memory names of the data service's rings, and the per-rank
// files of an output path. The launcher,
// the data service and the trainer all build and check these names here, so that what one
// program creates is what another one finds and removes.
#ifndef STOKER_COMMON_NAMES_H_
#define STOKER_COMMON_NAMES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace stoker {

// The longest job id: the socket path must fit sockaddr_un with room for the parent dir.
inline constexpr size_t kMaxJobIdLength = 64;

// True for the characters a job id may hold: A-Z, a-z, 0-9, '_' and '-'.
bool IsJobIdChar(char c);

// OK when `job_id` is 1 to kMaxJobIdLength characters of [A-Za-z0-9_-]; InvalidArgument
// (naming --job_id) otherwise. No '.': the segment names stoker.<job_id>.* must not match
// another job's (job "a" vs job "a.b"), or removing one job's leftovers would remove the
// other's.
absl::Status ValidateJobId(absl::string_view job_id);

// "/stoker.<job_id>.ring.<rank>" for a training ring, with ".val" appended for a
// validation ring: the shared-memory name of rank `rank`'s ring. The segment's file is
// this name under /dev/shm.
std::string RingSegmentName(absl::string_view job_id, int32_t rank, bool train);

// "<path>.rank<rank>": the file of rank `rank` where every rank writes an output of its own
// to one path the user gave (the trainer's --sample_log, --final_params_out, and
// --kernel_trace with several ranks).
std::string RankFilePath(absl::string_view path, int rank);

}  // namespace stoker

#endif  // STOKER_COMMON_NAMES_H_
