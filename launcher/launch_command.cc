#include "launcher/launch_command.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stoker::launcher {
namespace {

// Returns the name of the flag `arg` sets ("seed" for "--seed=3", "-seed" or "--seed"), or
// an empty string when `arg` is not a flag.
absl::string_view FlagName(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return "";
  arg.remove_prefix(arg[1] == '-' ? 2 : 1);
  return arg.substr(0, arg.find('='));
}

bool IsShellSafe(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("@%+=:,./_-").find(c) != absl::string_view::npos;
}

// Quotes `word` in single quotes, whatever it holds.
std::string SingleQuote(absl::string_view word) {
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

}  // namespace

bool IsEnvironmentName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::vector<std::string> EnvironmentNamesWithPrefix(absl::Span<const std::string> environment,
                                                    absl::string_view prefix) {
  std::vector<std::string> names;
  for (absl::string_view entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == absl::string_view::npos) continue;
    absl::string_view name = entry.substr(0, equals);
    if (absl::StartsWith(name, prefix)) names.emplace_back(name);
  }
  return names;
}

absl::StatusOr<std::vector<std::string>> BuildTrainerArgv(const TrainerLaunch& launch) {
  if (launch.mpirun.empty()) return absl::InvalidArgumentError("--mpirun must not be empty");
  if (launch.trainer.empty()) return absl::InvalidArgumentError("--trainer must not be empty");
  if (launch.data_socket.empty()) {
    return absl::InvalidArgumentError("the trainers' --data_socket must not be empty");
  }
  if (launch.ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--np must be >= 1 (got ", launch.ranks_per_node, ")"));
  }
  for (const std::string& arg : launch.mpirun_args) {
    absl::string_view name = FlagName(arg);
    if (name == "np" || name == "n" || name == "c") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mpirun_args must not set the rank count ('", arg, "'): use the launcher's --np"));
    }
  }
  for (const std::string& arg : launch.trainer_args) {
    absl::string_view name = FlagName(arg);
    if (name == "data_socket" || name == "seed") {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer flag '", arg, "' after '--' conflicts with the launcher, which sets --", name,
          name == "seed" ? " from its own --seed" : " to the job's data service socket"));
    }
  }

  std::vector<std::string> argv;
  switch (launch.mode) {
    case LaunchMode::kLocal:
      argv = {launch.mpirun, "-np", absl::StrCat(launch.ranks_per_node)};
      break;
  }
  argv.insert(argv.end(), launch.mpirun_args.begin(), launch.mpirun_args.end());
  absl::flat_hash_set<std::string> exported;
  for (const std::string& name : launch.exported_env) {
    if (!IsEnvironmentName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot export '", name, "' to the ranks: not a variable name"));
    }
    if (!exported.insert(name).second) continue;
    argv.push_back("-x");
    argv.push_back(name);
  }
  argv.push_back(launch.trainer);
  argv.push_back(absl::StrCat("--data_socket=", launch.data_socket));
  argv.push_back(absl::StrCat("--seed=", launch.seed));
  argv.insert(argv.end(), launch.trainer_args.begin(), launch.trainer_args.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> BuildDataServiceArgv(const DataServiceLaunch& launch) {
  if (launch.program.empty()) {
    return absl::InvalidArgumentError("--data_service must not be empty");
  }
  if (launch.socket.empty() || launch.job_id.empty()) {
    return absl::InvalidArgumentError("the data service needs a socket path and a job id");
  }
  if (launch.dataset != "" && launch.dataset != "synthetic" && launch.dataset != "imagefolder") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset must be 'synthetic' or 'imagefolder' (got '", launch.dataset, "')"));
  }
  if (launch.dataset == "imagefolder" && launch.train_dir.empty()) {
    return absl::InvalidArgumentError("--dataset=imagefolder needs --train_dir");
  }
  struct NonNegative {
    const char* flag;
    int64_t value;
  };
  for (const NonNegative& check : {NonNegative{"--synthetic_samples", launch.synthetic_samples},
                                   NonNegative{"--synthetic_classes", launch.synthetic_classes},
                                   NonNegative{"--data_threads", launch.threads},
                                   NonNegative{"--data_prefetch", launch.prefetch},
                                   NonNegative{"the node id", launch.node_id}}) {
    if (check.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(check.flag, " must be >= 0 (got ", check.value, ")"));
    }
  }

  std::vector<std::string> argv = {
      launch.program,
      absl::StrCat("--socket=", launch.socket),
      absl::StrCat("--job_id=", launch.job_id),
      absl::StrCat("--node_id=", launch.node_id),
      absl::StrCat("--data_seed=", launch.data_seed),
  };
  if (!launch.dataset.empty()) argv.push_back(absl::StrCat("--dataset=", launch.dataset));
  if (!launch.train_dir.empty()) argv.push_back(absl::StrCat("--train_dir=", launch.train_dir));
  if (!launch.val_dir.empty()) argv.push_back(absl::StrCat("--val_dir=", launch.val_dir));
  if (launch.synthetic_samples > 0) {
    argv.push_back(absl::StrCat("--synthetic_samples=", launch.synthetic_samples));
  }
  if (launch.synthetic_classes > 0) {
    argv.push_back(absl::StrCat("--synthetic_classes=", launch.synthetic_classes));
  }
  if (launch.threads > 0) argv.push_back(absl::StrCat("--threads=", launch.threads));
  if (launch.prefetch > 0) argv.push_back(absl::StrCat("--prefetch=", launch.prefetch));
  return argv;
}

std::string ShellQuote(absl::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), IsShellSafe)) {
    return std::string(word);
  }
  return SingleQuote(word);
}

std::string FormatCommand(absl::Span<const std::string> env, absl::Span<const std::string> argv) {
  std::vector<std::string> words;
  words.reserve(env.size() + argv.size());
  for (const std::string& entry : env) {
    // NAME=VALUE: only the value may need quoting, or the shell would not see an assignment.
    const size_t equals = entry.find('=');
    if (equals != std::string::npos && IsEnvironmentName(entry.substr(0, equals))) {
      words.push_back(absl::StrCat(entry.substr(0, equals + 1), ShellQuote(entry.substr(equals + 1))));
    } else {
      words.push_back(ShellQuote(entry));
    }
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    // A first word with '=' in it would read as one more assignment.
    const bool looks_like_assignment = i == 0 && argv[i].find('=') != std::string::npos;
    words.push_back(looks_like_assignment ? SingleQuote(argv[i]) : ShellQuote(argv[i]));
  }
  return absl::StrJoin(words, " ");
}

}  // namespace stoker::launcher
