// The one strict command-line layer of Stoker's programs (trainer, launcher, launcher
// doctor, data_service and the tools). A program names its own flags (the Abseil flags
// defined in its own source files, or variables bound for one parse) in a FlagSpec;
// ParseFlags sets them from argv and from `--config=FILE` files, and returns every mistake
// as InvalidArgument naming the flag (and, in a file, the file and line), so that main()
// can print it and exit with the usage code 2. absl::ParseCommandLine instead exits with 1
// on its own and accepts the flags of every linked library.
//
// Accepted: `--name=value`, `-name=value`, `--name value` (not for bool flags), `--name`
// and `--noname` for bool flags, `--help` (`-h`, `--helpfull`). With `passed_on`, the first
// `--` ends the flags and what follows is handed back untouched (the launcher passes it to
// the trainers).
//
// A configuration file holds one flag per line, `--name=value` or `name=value`; blank lines
// and lines starting with `#` are ignored; a line may itself be `config=OTHER` (at most 8
// deep). Flags apply in order, so a flag after `--config` overrides the file and one before
// it is overridden by it.
//
//   FlagSpec spec;
//   spec.program = "data_service";
//   spec.files = {"data_service/flags.cc"};
//   absl::StatusOr<ParsedFlags> parsed = ParseFlags(absl::MakeConstSpan(argv + 1, argc - 1), spec);
//   if (!parsed.ok()) { /* print parsed.status().message() */ return kExitUsage; }
//
// Flags are process-global: ParseFlags is not thread-safe.
#ifndef STOKER_COMMON_FLAGS_H_
#define STOKER_COMMON_FLAGS_H_

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/exit_codes.h"

namespace stoker {

// A flag bound to a variable for one parse, for a subcommand whose flag names clash with
// the program's Abseil flags (`launcher doctor --np`). Made by IntFlag and StringFlag.
struct LocalFlag {
  std::string name;
  std::string help;
  std::string default_value;  // as --help shows it
  bool is_bool = false;
  // Sets the variable from `value`; false with `*error` set when `value` does not parse.
  std::function<bool(absl::string_view value, std::string* error)> parse;
};

LocalFlag IntFlag(absl::string_view name, int* value, absl::string_view help);
LocalFlag StringFlag(absl::string_view name, std::string* value, absl::string_view help);

// How errors and --help read. Each program keeps the wording its users and scripts see.
enum class FlagWording {
  // `--epochs: unknown flag (...)`, `--epochs: a value is required (--epochs=VALUE)`,
  // `--epochs=ten: not a valid value (...)`, `unexpected argument "x" (hint)`;
  // --help lists `  --epochs (default "1")`. The trainer, data_service and the tools.
  kNameFirst,
  // `unknown flag --np`, `--np needs a value`, `--np=two is not a valid value: ...`,
  // `unexpected argument 'x': hint`; --help lists `  --np=1`. The launcher and doctor.
  kSentence,
};

// A group of flags in --help, in the order given. Names the program does not define (for
// example flags of a binary's main.cc, absent from a library's test) are left out.
struct FlagSection {
  std::string title;
  std::vector<std::string> flags;
};

// Which flags a program accepts and how its command line reads.
struct FlagSpec {
  std::string program;  // as messages name it: "trainer", "launcher doctor"
  // The program's Abseil flags: those defined in a source file whose path ends with one
  // of these (e.g. "trainer/flags.cc"); flags of linked libraries do not count.
  std::vector<std::string> files;
  std::vector<LocalFlag> local;  // flags bound to variables, besides `files`
  // --help groups; without sections, every flag sorted by name. Flags in no section
  // follow, sorted, under "Other flags".
  std::vector<FlagSection> sections;
  // What a bare argument is told, e.g. "the trainer takes only --name=value flags".
  std::string positional_hint = "flags are --name=value";
  bool passed_on = false;       // the first `--` ends the flags; the rest is ParsedFlags::passed_on
  bool config_files = true;     // --config=FILE
  bool flagfile_alias = false;  // --flagfile=FILE as well (Abseil's name), for the trainer
  FlagWording wording = FlagWording::kNameFirst;
};

// A spec whose flags are the Abseil flags of one file, with the defaults above (the
// tools: FlagSpecOf("pack_imagefolder", "data_service/dataset/pack_imagefolder.cc")).
FlagSpec FlagSpecOf(absl::string_view program, absl::string_view file);

struct ParsedFlags {
  bool help = false;                   // --help, -h or --helpfull was given
  std::vector<std::string> passed_on;  // with FlagSpec::passed_on: everything after `--`
  std::set<std::string> given;         // names of the flags set, on the line or in a file
};

// Sets the flags of `spec` named in `args` (argv without argv[0]). InvalidArgument on an
// unknown flag, a missing or malformed value, a bare argument, or a configuration file that
// cannot be read or nests too deep.
absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const char* const> args, const FlagSpec& spec);
absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args, const FlagSpec& spec);

// The flags of `spec` by section, each with its default and help, then (with
// config_files) how to use --config.
std::string FlagsHelp(const FlagSpec& spec);

// For the tools: parses argv[1..] with `spec`; on an error prints
// "<program>: <message>\nRun `<program> --help` for the flags." and exits kExitUsage; on
// --help prints `usage`, a blank line and FlagsHelp(spec), and exits 0.
void ParseFlagsOrExit(int argc, char** argv, const FlagSpec& spec, absl::string_view usage);

}  // namespace stoker

#endif  // STOKER_COMMON_FLAGS_H_
