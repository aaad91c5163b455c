// Reading a file the user did not write themselves (--model's archive, --init_weights'
// state dict) into memory, with the refusals every parser of such a file shares: the size
// cap, and the exit codes that tell a bad file (kExitUsage: fix the command or the file)
// from storage that cannot be read (kExitCheckpointIo: fix the storage).
#ifndef STOKER_TRAINER_NN_MODEL_FILE_H_
#define STOKER_TRAINER_NN_MODEL_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {

// Note [Untrusted model files]
// A model archive or a weights file may come from a colleague or a hub: every parser of one
// (safetensors, the .pt2 zip, its JSON and tensor records, torch.save's pickles) treats its
// bytes as hostile. Each refusal is an InvalidArgument naming the flag, the file and the
// field, tagged kExitUsage, returned on every rank before any step; no malformed file
// aborts a rank. Files are read whole (no second read of what was checked), up to
// kMaxModelFileBytes; a record or header that claims more than the file holds is refused
// before anything is allocated for it. torch.save's pickle format is refused unless the run
// passes --allow_pickle (trainer/nn/state_dict_file.h says why). The fuzz targets of fuzz/
// (safetensors, export_archive) run these parsers under ASan and UBSan.

// The largest model archive or weights file Stoker reads (64 GiB): each is read whole into
// memory, so a larger one is refused before it is read rather than exhausting the node.
inline constexpr int64_t kMaxModelFileBytes = int64_t{64} << 30;

// InvalidArgument "<flag>=<path>: <why>", tagged kExitUsage: the file's content is refused.
absl::Status RefuseModelFile(absl::string_view flag, absl::string_view path, absl::string_view why);

// The bytes of the regular file `path`, named in errors as "<flag>=<path>" (flag
// "--init_weights"). Refused with kExitUsage when the path names no file (missing, a
// directory, not a regular file) or one over `max_bytes`; kExitCheckpointIo when the file
// is there but cannot be opened or read (permissions, an I/O error).
absl::StatusOr<std::string> ReadModelFile(absl::string_view flag, const std::string& path,
                                          int64_t max_bytes = kMaxModelFileBytes);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_MODEL_FILE_H_
