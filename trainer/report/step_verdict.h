// The verdict on a traced step (--trace): which of input, copy, compute, communication or a
// straggler bounded it, with the numbers and the rank, host and stage at fault; and the
// verdict on the whole window. Pure functions of the ranks' step times, which the run
// gathers on rank 0 (trainer/traced_steps.h).
#ifndef STOKER_TRAINER_REPORT_STEP_VERDICT_H_
#define STOKER_TRAINER_REPORT_STEP_VERDICT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stoker::trainer {

// Where one rank's step went, host milliseconds.
struct RankStepTimes {
  double input_ms = 0;    // waiting for its data service's batch (the ring was empty)
  double copy_ms = 0;     // the batch to the device (copy and normalisation)
  double compute_ms = 0;  // forward, backward, optimizer: its own work
  double comm_ms = 0;     // waiting in collectives (gradient buckets, the stop vote)
  double step_ms = 0;     // the whole step
};

// Where a rank runs.
struct RankPlace {
  int rank = 0;
  std::string host;
  int node = 0;  // its node's index: the node's data service feeds it
};

// The names are the words of the progress line and of the JSON lines.
enum class StepBound { kInput, kCopy, kCompute, kCommunication, kStraggler };
const char* StepBoundName(StepBound bound);  // "input", "copy", "compute", ...

struct StepVerdict {
  int64_t step = 0;
  StepBound bound = StepBound::kCompute;
  double step_ms = 0;    // the slowest rank's step
  double median_ms = 0;  // the median step of the window so far
  // The rank that held the others back; -1 when no rank stands out (every rank alike).
  int rank = -1;
  std::string host;
  int node = -1;
  std::string stage;          // "input", "copy", "compute" or "communication"
  double stage_ms = 0;        // that rank's time in the stage (the ranks' mean when rank < 0)
  double excess_ms = 0;       // over the other ranks' median in the stage (rank >= 0)
  double others_comm_ms = 0;  // the other ranks' longest wait in collectives
  std::string text;           // one line, as rank 0 prints it
};

// Note [Step verdict]: a rank's own time is its input wait, copy and compute; whatever else
// a step takes is waiting for the other ranks in a collective. The rank with the most own
// time holds the others back when it exceeds the other ranks' median by more than 10% of
// the step (and 2 ms): its stage that exceeds theirs the most names the bound (input: its
// node's data service is behind; copy; compute: a straggler). When no rank stands out the
// step is bound by the stage the ranks spend most time in on average (communication
// included). `ranks[i]` belongs to `places[i]`; `median_ms` is the window's median step.
StepVerdict JudgeStep(int64_t step, const std::vector<RankStepTimes>& ranks,
                      const std::vector<RankPlace>& places, double median_ms);

// The median of `values` (0 when empty).
double Median(std::vector<double> values);

// The verdicts of a window, summed up. Owned by the training thread.
class VerdictSummary {
 public:
  void Add(const StepVerdict& verdict);
  int steps() const { return steps_; }
  // The bound of most steps (ties: the first in StepBound's order); kCompute when empty.
  StepBound bound() const;
  // "trace verdict over 10 steps: straggler 9, compute 1; mostly: rank 1 on host (node 0),
  // compute, 61.2 ms over the other ranks per step".
  std::string Text() const;
  // The rank most often at fault and its mean excess; rank -1 when none.
  int culprit_rank() const;
  std::string culprit_stage() const;
  double culprit_excess_ms() const;

 private:
  struct Culprit {
    int count = 0;
    double excess_ms = 0;  // summed
    std::string host;
    int node = 0;
  };
  const Culprit* MostNamed(std::pair<int, std::string>* key) const;

  int steps_ = 0;
  std::map<StepBound, int> by_bound_;
  std::map<std::pair<int, std::string>, Culprit> culprits_;  // by (rank, stage)
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_REPORT_STEP_VERDICT_H_
