// Seed corpora a fuzz target writes itself, from Stoker's own writers (a ring a producer
// initialised, a checkpoint the writer made): with STOKER_FUZZ_WRITE_SEEDS=DIR set, the
// target's binary writes its seeds into DIR and exits before main() runs, under libFuzzer's
// main and the corpus runner's alike.
//
//   void WriteSeeds(const std::string& dir) { WriteSeedFile(dir, "ring_0", bytes); ... }
//   const bool kSeedsWritten = WriteSeedsIfAsked(&WriteSeeds);  // at namespace scope
#ifndef STOKER_FUZZ_SEED_FILES_H_
#define STOKER_FUZZ_SEED_FILES_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"

namespace stoker::fuzz {

// Writes `bytes` as DIR/NAME; aborts when it cannot.
inline void WriteSeedFile(const std::string& dir, const std::string& name,
                          absl::string_view bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) {
    std::fprintf(stderr, "cannot write the seed %s/%s\n", dir.c_str(), name.c_str());
    std::abort();
  }
}

// With STOKER_FUZZ_WRITE_SEEDS=DIR: write(DIR), then exit 0. Else returns false.
inline bool WriteSeedsIfAsked(void (*write)(const std::string& dir)) {
  const char* dir = std::getenv("STOKER_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return false;
  write(dir);
  std::exit(0);
}

}  // namespace stoker::fuzz

#endif  // STOKER_FUZZ_SEED_FILES_H_
