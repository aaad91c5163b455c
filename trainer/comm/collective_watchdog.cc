#include "trainer/comm/collective_watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/logging.h"

namespace stoker::trainer {
namespace {

void ExitNow(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

// A rank counts as stalled once its heartbeat is this many poll intervals old (and at
// least a second: a busy machine may delay a thread that long).
constexpr int kStallPolls = 5;

absl::Duration StallThreshold(absl::Duration poll_interval) {
  return std::max(absl::Seconds(1), kStallPolls * poll_interval);
}

std::string DescribeRankState(const NodeRankState& state, uint64_t seq) {
  if (state.rank < 0) return "never joined the progress table";
  if (state.gone) return absl::StrFormat("gone: pid %d no longer exists", state.pid);
  if (state.stalled) {
    return absl::StrFormat("stalled: no heartbeat for %.1fs (stopped or hung)",
                           state.heartbeat_age_s);
  }
  if (state.issued >= seq) return absl::StrFormat("waiting in it for %.1fs", state.waiting_s);
  if (state.issued > state.completed) {
    return absl::StrFormat("waiting in the earlier #%d for %.1fs", state.completed + 1,
                           state.waiting_s);
  }
  return "alive, busy outside collectives";
}

}  // namespace

std::string DescribeStalledCollective(const StalledCollective& stall) {
  std::string text = absl::StrFormat(
      "collective #%d (%s) on the %s communicator has not completed after %.1fs "
      "(--collective_timeout_s=%d)",
      stall.seq, CollectiveKindName(stall.kind), stall.channel, stall.waited_s,
      static_cast<int>(absl::ToInt64Seconds(stall.timeout)));
  if (stall.node.empty()) {
    absl::StrAppend(&text, "; no progress table: the ranks that hold it up are not known here");
    return text;
  }
  std::vector<std::string> behind;
  std::vector<std::string> last;
  for (const NodeRankState& state : stall.node) {
    const std::string who = state.rank < 0 ? "a rank" : absl::StrCat("rank ", state.rank);
    if (state.rank < 0 || state.issued < stall.seq) {
      behind.push_back(
          absl::StrFormat("%s (pid %d): %s", who, state.pid, DescribeRankState(state, stall.seq)));
    }
    if (state.rank < 0) continue;
    std::string entry = absl::StrFormat("rank %d #%d (%s)", state.rank, state.completed,
                                        CollectiveKindName(state.completed_kind));
    if ((state.gone || state.stalled) && state.issued > state.completed) {
      absl::StrAppend(&entry, ", inside #", state.completed + 1);
    }
    if (state.gone) {
      absl::StrAppend(&entry, ", gone");
    } else if (state.stalled) {
      absl::StrAppend(&entry, absl::StrFormat(", no heartbeat for %.1fs", state.heartbeat_age_s));
    } else if (state.issued > state.completed) {
      absl::StrAppend(&entry, absl::StrFormat(", waiting in #%d for %.1fs", state.completed + 1,
                                              state.waiting_s));
    }
    last.push_back(std::move(entry));
  }
  const int elsewhere = stall.world_size - static_cast<int>(stall.node.size());
  // Stalled or gone ranks that did reach it hold it up too (they stopped inside it).
  std::vector<std::string> stuck_inside;
  for (const NodeRankState& state : stall.node) {
    if (state.rank >= 0 && state.issued >= stall.seq && (state.gone || state.stalled)) {
      stuck_inside.push_back(absl::StrFormat("rank %d (pid %d): %s", state.rank, state.pid,
                                             DescribeRankState(state, stall.seq)));
    }
  }
  if (!behind.empty()) {
    absl::StrAppend(&text, ": not reached by ", absl::StrJoin(behind, "; "));
  } else {
    absl::StrAppend(&text, ": every rank of node ", stall.node_index, " reached it",
                    stuck_inside.empty() && elsewhere > 0
                        ? ", so the ranks holding it up are on other nodes"
                        : "");
  }
  if (!stuck_inside.empty()) {
    absl::StrAppend(&text, "; stuck inside it: ", absl::StrJoin(stuck_inside, "; "));
  }
  absl::StrAppend(&text, ". Last collective each rank of node ", stall.node_index,
                  " completed: ", absl::StrJoin(last, "; "));
  if (elsewhere > 0) {
    absl::StrAppend(
        &text, ". ", elsewhere, " of ", stall.world_size,
        " ranks are on other nodes and not visible here: their nodes' ranks report them");
  }
  return text;
}

std::vector<NodeRankState> ReadNodeProgress(const CollectiveProgressTable& table, int channel,
                                            int64_t now_ns, absl::Duration stall_after) {
  std::vector<NodeRankState> rows;
  for (int i = 0; i < table.local_size(); ++i) {
    const RankProgress& slot = table.slot(i);
    NodeRankState state;
    state.rank = LoadAcquire(&slot.rank);
    state.pid = LoadAcquire(&slot.pid);
    if (state.rank >= 0) {
      const int64_t beat = LoadAcquire(&slot.heartbeat_ns);
      state.heartbeat_age_s = (now_ns - beat) / 1e9;
      state.stalled = now_ns - beat > absl::ToInt64Nanoseconds(stall_after);
      state.gone = state.pid > 0 && kill(state.pid, 0) != 0 && errno == ESRCH;
      const ChannelProgress& progress = slot.channels[channel];
      state.completed = LoadAcquire(&progress.completed);
      state.issued = LoadAcquire(&progress.issued);
      state.completed_kind = static_cast<CollectiveKind>(LoadAcquire(&progress.completed_kind));
      if (state.issued > state.completed) {
        // The oldest pending one's start is known only for the last issued; with one
        // pending (host collectives) they are the same.
        state.waiting_s = (now_ns - LoadAcquire(&progress.issued_at_ns)) / 1e9;
      }
    }
    rows.push_back(state);
  }
  return rows;
}

absl::StatusOr<std::unique_ptr<CollectiveWatchdog>> CollectiveWatchdog::Start(
    const CollectiveWatchdogOptions& options, const WatchedRank& place,
    std::vector<Communicator*> watched, CollectiveProgressTable* table, ExitFunction exit_process) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--collective_timeout_s must be > 0 (got ",
                                                   absl::FormatDuration(options.timeout), ")"));
  }
  if (options.abort_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--collective_abort_grace_s must be >= 0 (got ",
                                                   absl::FormatDuration(options.abort_grace), ")"));
  }
  std::vector<Communicator*> distinct;
  for (Communicator* communicator : watched) {
    if (communicator == nullptr || communicator->ledger() == nullptr) continue;
    if (std::find(distinct.begin(), distinct.end(), communicator) != distinct.end()) continue;
    distinct.push_back(communicator);
  }
  if (distinct.size() > kMaxProgressChannels) {
    return absl::InvalidArgumentError(absl::StrCat("the collective watchdog watches at most ",
                                                   kMaxProgressChannels, " communicators"));
  }
  if (table != nullptr && (place.local_rank < 0 || place.local_rank >= table->local_size())) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", place.local_rank,
                                                   " has no slot in a progress table of ",
                                                   table->local_size()));
  }
  if (exit_process == nullptr) exit_process = ExitNow;
  return std::unique_ptr<CollectiveWatchdog>(
      new CollectiveWatchdog(options, place, std::move(distinct), table, std::move(exit_process)));
}

CollectiveWatchdog::CollectiveWatchdog(const CollectiveWatchdogOptions& options,
                                       const WatchedRank& place, std::vector<Communicator*> watched,
                                       CollectiveProgressTable* table, ExitFunction exit_process)
    : options_(options),
      place_(place),
      watched_(std::move(watched)),
      table_(table),
      exit_process_(std::move(exit_process)),
      poll_interval_(
          options.poll_interval > absl::ZeroDuration()
              ? options.poll_interval
              : std::clamp(options.timeout / 10, absl::Milliseconds(10), absl::Seconds(1))) {
  if (table_ != nullptr) {
    RankProgress& slot = table_->slot(place_.local_rank);
    StoreRelease(&slot.pid, getpid());
    StoreRelease(&slot.heartbeat_ns, MonotonicNanos());
    for (size_t i = 0; i < watched_.size(); ++i) watched_[i]->ledger()->MirrorTo(&slot.channels[i]);
    StoreRelease(&slot.rank, place_.rank);
  }
  watchdog_thread_ = std::thread([this] { Run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watchdog_thread_.join();
  if (table_ != nullptr) {
    for (Communicator* communicator : watched_) communicator->ledger()->MirrorTo(nullptr);
  }
}

void CollectiveWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    Beat();
    if (CheckOnce()) return;
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), poll_interval_);
  }
}

void CollectiveWatchdog::Beat() {
  if (table_ == nullptr) return;
  StoreRelease(&table_->slot(place_.local_rank).heartbeat_ns, MonotonicNanos());
}

// Note [Culprit's node reports first]
// Only the ranks of the stalled rank's node can name it (Note [Collective side channel]).
// The first rank to exit makes mpirun end the others, so a rank that sees no suspect on its
// node (every local rank alive and waiting in this collective or an earlier one: the
// hold-up is on another node) waits a little longer than the timeout before it fires, to
// let the culprit's node report first; the bound grows by that much.
namespace {

absl::Duration ElsewhereDeferral(absl::Duration poll_interval) {
  return std::max(absl::Seconds(3), 3 * poll_interval);
}

// Whether no rank of this node is a suspect (gone, stalled, or behind and busy outside
// collectives) in a job with ranks on other nodes: every one is alive and waiting in
// collective `seq` of `channel` or an earlier one.
bool HeldUpElsewhere(const CollectiveProgressTable* table, const WatchedRank& place, int channel,
                     uint64_t seq, int64_t now_ns, absl::Duration poll_interval) {
  if (table == nullptr || place.world_size <= table->local_size()) return false;
  for (const NodeRankState& state :
       ReadNodeProgress(*table, channel, now_ns, StallThreshold(poll_interval))) {
    if (state.rank < 0 || state.gone || state.stalled) return false;
    if (state.issued < seq && state.issued <= state.completed) return false;
  }
  return true;
}

}  // namespace

bool CollectiveWatchdog::CheckOnce() {
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (absl::Status polled = watched_[i]->PollCompletions(); !polled.ok() && !poll_error_logged_) {
      poll_error_logged_ = true;
      LogWarning("collective watchdog: %s", polled.ToString());
    }
    const CollectiveLedger::Snapshot snapshot = watched_[i]->ledger()->Read();
    // Note [Asynchronous communicator errors].
    if (absl::Status async = watched_[i]->AsyncError(); !async.ok()) {
      LogError("collective watchdog: %s; not waiting for --collective_timeout_s=%d",
               StatusText(async), static_cast<int>(absl::ToInt64Seconds(options_.timeout)));
      Fire(static_cast<int>(i), snapshot, MonotonicNanos(), /*stalled=*/false);
      return true;
    }
    if (snapshot.pending == 0) continue;
    const int64_t now = MonotonicNanos();
    const int64_t waited = now - snapshot.pending_since_ns;
    if (waited < absl::ToInt64Nanoseconds(options_.timeout)) continue;
    if (waited < absl::ToInt64Nanoseconds(options_.timeout + ElsewhereDeferral(poll_interval_)) &&
        HeldUpElsewhere(table_, place_, static_cast<int>(i), snapshot.pending, now,
                        poll_interval_)) {
      continue;  // Note [Culprit's node reports first]
    }
    Fire(static_cast<int>(i), snapshot, now);
    return true;
  }
  return false;
}

// Note [Process deadline thread]
// The deadline must hold even when ncclCommAbort hangs in this watchdog thread, or the
// training thread hangs in the destructor of this watchdog (joining it). So it is a thread of
// its own that owns copies of everything it needs, detached: it ends the process, so it
// never outlives what it uses.
void CollectiveWatchdog::Fire(int channel, const CollectiveLedger::Snapshot& stuck, int64_t now_ns,
                              bool stalled) {
  fired_ = true;
  if (stalled) ReportStall(channel, stuck, now_ns);
  AbortAndArmDeadline();
}

void CollectiveWatchdog::ReportStall(int channel, const CollectiveLedger::Snapshot& stuck,
                                     int64_t now_ns) {
  StalledCollective stall;
  stall.rank = place_.rank;
  stall.world_size = place_.world_size;
  stall.node_index = place_.node_index;
  stall.channel = watched_[channel]->ledger()->channel();
  stall.seq = stuck.pending;
  stall.kind = stuck.pending_kind;
  stall.waited_s = (now_ns - stuck.pending_since_ns) / 1e9;
  stall.timeout = options_.timeout;
  if (table_ != nullptr) {
    stall.node = ReadNodeProgress(*table_, channel, now_ns, StallThreshold(poll_interval_));
  }
  LogError("collective watchdog: %s", DescribeStalledCollective(stall));
}

void CollectiveWatchdog::AbortAndArmDeadline() {
  const absl::Duration grace = options_.abort_grace;
  const int exit_code = options_.exit_code;
  const ExitFunction exit_process = exit_process_;
  std::thread([grace, exit_code, exit_process] {
    absl::SleepFor(grace);
    LogError(
        "collective watchdog: the abort did not end this rank within "
        "--collective_abort_grace_s=%d: exiting with code %d",
        static_cast<int>(absl::ToInt64Seconds(grace)), exit_code);
    exit_process(exit_code);
  }).detach();

  // A communicator that cannot abort matters only when a collective of it is waiting.
  bool interrupted = true;
  for (Communicator* communicator : watched_) {
    const bool aborted = communicator->Abort();
    if (!aborted && communicator->ledger()->Read().pending != 0) interrupted = false;
  }
  if (!interrupted) {
    LogError(
        "collective watchdog: a blocked MPI collective cannot be interrupted: exiting "
        "with code %d so that mpirun ends the job",
        exit_code);
    exit_process(exit_code);
    return;
  }
  LogError("collective watchdog: communicators aborted; this rank ends within %s",
           absl::FormatDuration(grace));
}

}  // namespace stoker::trainer
