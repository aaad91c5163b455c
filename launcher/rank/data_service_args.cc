#include "launcher/rank/data_service_args.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stoker::launcher {

absl::string_view FlagNameOf(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return "";
  arg.remove_prefix(arg[1] == '-' ? 2 : 1);
  return arg.substr(0, arg.find('='));
}

absl::Status ValidateDataServiceArgs(absl::Span<const std::string> args) {
  for (const std::string& arg : args) {
    const absl::string_view name = FlagNameOf(arg);
    if (name.empty() || arg.find('=') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data_service_args: '", arg, "' is not a flag with a value (give --name=value words)"));
    }
    if (name == "socket" || name == "job_id" || name == "node_id" || name == "owner_record" ||
        name == "remove_socket_dir") {
      return absl::InvalidArgumentError(
          absl::StrCat("--data_service_args must not set --", name, " ('", arg,
                       "'): the program that starts the data service sets it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseDataServiceArgs(absl::string_view value) {
  std::vector<std::string> args = absl::StrSplit(value, ' ', absl::SkipEmpty());
  if (absl::Status valid = ValidateDataServiceArgs(args); !valid.ok()) return valid;
  return args;
}

}  // namespace stoker::launcher
