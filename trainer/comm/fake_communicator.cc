#include "trainer/comm/fake_communicator.h"

#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace stoker::trainer {
namespace {

uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t exponent = (x >> 23) & 0xff;
  uint32_t mantissa = x & 0x7fffff;
  if (exponent == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mantissa != 0 ? 0x200 : 0));
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {  // a half subnormal, or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    const int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // a carry rounds up the exponent
  return static_cast<uint16_t>(half);
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t x = exponent == 0x1f ? sign | 0x7f800000 | (mantissa << 13)
                                      : sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

uint16_t FloatToBFloat16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16BitsToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace

double LoadElement(ElementType type, const void* p) {
  switch (type) {
    case ElementType::kFloat32: {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    case ElementType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof(v));
      return HalfBitsToFloat(v);
    }
    case ElementType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof(v));
      return BFloat16BitsToFloat(v);
    }
    case ElementType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, sizeof(v));
      return static_cast<double>(v);
    }
    case ElementType::kUInt8:
      return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

void StoreElement(ElementType type, double value, void* p) {
  switch (type) {
    case ElementType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(p, &v, sizeof(v));
      return;
    }
    case ElementType::kFloat16: {
      const uint16_t v = FloatToHalfBits(static_cast<float>(value));
      std::memcpy(p, &v, sizeof(v));
      return;
    }
    case ElementType::kBFloat16: {
      const uint16_t v = FloatToBFloat16Bits(static_cast<float>(value));
      std::memcpy(p, &v, sizeof(v));
      return;
    }
    case ElementType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(p, &v, sizeof(v));
      return;
    }
    case ElementType::kUInt8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(value);
      return;
  }
}

// What one rank asked for; every rank of a collective must ask for the same.
struct FakeCommunicator::Call {
  CollectiveKind kind = CollectiveKind::kNone;
  void* data = nullptr;
  size_t count = 0;  // elements (allreduce) or bytes (broadcast)
  ElementType type = ElementType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;

  bool SameAs(const Call& other) const {
    return kind == other.kind && count == other.count && type == other.type && op == other.op &&
           root == other.root;
  }
  std::string Describe() const {
    if (kind == CollectiveKind::kBroadcast)
      return absl::StrCat("broadcast of ", count, " bytes from ", root);
    return absl::StrCat("allreduce of ", count, " elements of ", ElementSize(type), " bytes");
  }
};

// The state a group shares. A round is the n-th collective of every rank.
struct FakeCommunicator::Rendezvous {
  struct Round {
    Call call;                   // as the first rank to arrive made it
    std::vector<void*> buffers;  // per rank; nullptr until it arrives, or once it left
    int arrived = 0;
    int departed = 0;
    bool done = false;     // every rank arrived (and the result is in every buffer)
    absl::Status failure;  // set by the first rank whose call failed
    int failed_rank = -1;
  };

  Rendezvous(int world_size, FakeCommunicatorOptions options)
      : world_size(world_size), options(std::move(options)), aborted(world_size, 0) {}

  const int world_size;
  const FakeCommunicatorOptions options;
  absl::Mutex mu;
  std::map<uint64_t, Round> rounds ABSL_GUARDED_BY(mu);
  std::vector<char> aborted ABSL_GUARDED_BY(mu);  // per rank: Abort() took effect
};

namespace {

// Sums (or averages) every rank's buffer and stores the result in every buffer: one
// computation, so every rank gets the same bits.
void Reduce(size_t count, ElementType type, ReduceOp op, const std::vector<void*>& buffers) {
  const size_t size = ElementSize(type);
  const int world = static_cast<int>(buffers.size());
  std::vector<char> result(count * size);
  for (size_t i = 0; i < count; ++i) {
    char* out = result.data() + i * size;
    switch (type) {
      case ElementType::kInt64: {
        uint64_t sum = 0;  // wraps as two's complement
        for (void* b : buffers) {
          int64_t v;
          std::memcpy(&v, static_cast<const char*>(b) + i * size, size);
          sum += static_cast<uint64_t>(v);
        }
        int64_t value = static_cast<int64_t>(sum);
        if (op == ReduceOp::kAverage) value /= world;
        std::memcpy(out, &value, size);
        break;
      }
      case ElementType::kUInt8: {
        uint8_t sum = 0;
        for (void* b : buffers) sum = static_cast<uint8_t>(sum + static_cast<const uint8_t*>(b)[i]);
        *reinterpret_cast<uint8_t*>(out) = op == ReduceOp::kAverage ? sum / world : sum;
        break;
      }
      default: {
        double sum = 0;
        for (void* b : buffers) sum += LoadElement(type, static_cast<const char*>(b) + i * size);
        StoreElement(type, op == ReduceOp::kAverage ? sum / world : sum, out);
        break;
      }
    }
  }
  for (void* b : buffers) std::memcpy(b, result.data(), result.size());
}

}  // namespace

std::vector<std::unique_ptr<FakeCommunicator>> FakeCommunicator::Group(int world_size) {
  return Group(world_size, FakeCommunicatorOptions());
}

std::vector<std::unique_ptr<FakeCommunicator>> FakeCommunicator::Group(
    int world_size, const FakeCommunicatorOptions& options) {
  auto rendezvous = std::make_shared<Rendezvous>(world_size, options);
  std::vector<std::unique_ptr<FakeCommunicator>> group;
  for (int rank = 0; rank < world_size; ++rank) {
    group.push_back(std::unique_ptr<FakeCommunicator>(new FakeCommunicator(rendezvous, rank)));
  }
  return group;
}

FakeCommunicator::FakeCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank)
    : rendezvous_(std::move(rendezvous)), rank_(rank), ledger_(rendezvous_->options.channel) {}

FakeCommunicator::~FakeCommunicator() = default;

int FakeCommunicator::world_size() const { return rendezvous_->world_size; }

void FakeCommunicator::fail_next(absl::Status status) {
  absl::MutexLock lock(&seams_mu_);
  fail_next_ = std::move(status);
}

void FakeCommunicator::set_latency(absl::Duration latency) {
  absl::MutexLock lock(&seams_mu_);
  latency_ = latency;
}

void FakeCommunicator::set_async_error(absl::Status status) {
  absl::MutexLock lock(&seams_mu_);
  async_error_ = std::move(status);
}

absl::Status FakeCommunicator::AsyncError() {
  absl::MutexLock lock(&seams_mu_);
  return async_error_;
}

void FakeCommunicator::set_on_abort(std::function<void()> on_abort) {
  absl::MutexLock lock(&seams_mu_);
  on_abort_ = std::move(on_abort);
}

bool FakeCommunicator::Abort() {
  ++aborts_;
  std::function<void()> on_abort;
  {
    absl::MutexLock lock(&seams_mu_);
    on_abort = on_abort_;
  }
  if (on_abort) on_abort();
  if (!rendezvous_->options.can_abort) return false;
  absl::MutexLock lock(&rendezvous_->mu);
  rendezvous_->aborted[rank_] = 1;  // wakes a collective waiting in this rank
  return true;
}

absl::Status FakeCommunicator::Synchronize() {
  absl::MutexLock lock(&rendezvous_->mu);
  if (rendezvous_->aborted[rank_]) return absl::AbortedError("the fake communicator was aborted");
  return absl::OkStatus();
}

absl::Status FakeCommunicator::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  Call call;
  call.kind = CollectiveKind::kAllReduce;
  call.data = data;
  call.count = count;
  call.type = type;
  call.op = op;
  return Collective(call);
}

absl::Status FakeCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  Call call;
  call.kind = CollectiveKind::kBroadcast;
  call.data = data;
  call.count = bytes;
  call.root = root;
  return Collective(call);
}

absl::Status FakeCommunicator::Collective(const Call& call) {
  std::optional<absl::Status> injected;
  absl::Duration latency;
  {
    absl::MutexLock lock(&seams_mu_);
    injected = std::exchange(fail_next_, std::nullopt);
    latency = latency_;
  }
  Rendezvous& group = *rendezvous_;
  {
    absl::MutexLock lock(&group.mu);
    if (group.aborted[rank_]) return absl::AbortedError("the fake communicator was aborted");
  }
  if (latency > absl::ZeroDuration()) absl::SleepFor(latency);
  const uint64_t seq = ledger_.Issue(call.kind);
  absl::Cleanup complete = [this, seq] { ledger_.Complete(seq); };
  const uint64_t id = ++rounds_joined_;
  const absl::Time deadline = absl::Now() + group.options.peer_timeout;

  absl::MutexLock lock(&group.mu);
  // Not a structured binding: leave_failed below captures the iterator, and C++17 lambdas
  // cannot capture structured bindings.
  const auto emplaced = group.rounds.try_emplace(id);
  const auto it = emplaced.first;
  Rendezvous::Round& round = it->second;
  if (emplaced.second) {
    round.call = call;
    round.buffers.assign(group.world_size, nullptr);
  }
  ++round.arrived;
  // Leaves the round with `status`, which fails it for every rank (no buffer changes).
  auto leave_failed = [&](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(group.mu) {
    if (round.failure.ok()) {
      round.failure = status;
      round.failed_rank = rank_;
    }
    round.buffers[rank_] = nullptr;
    if (round.arrived == group.world_size) round.done = true;
    if (++round.departed == group.world_size) group.rounds.erase(it);
    return status;
  };
  if (!round.call.SameAs(call)) {
    return leave_failed(absl::InvalidArgumentError(absl::StrCat(
        "collective #", id, ": rank ", rank_, " called ", call.Describe(), " but another rank ",
        round.call.Describe(), " (collectives must be called in the same order on every rank)")));
  }
  if (injected.has_value()) return leave_failed(*injected);
  round.buffers[rank_] = call.data;
  if (round.arrived == group.world_size) {
    if (round.failure.ok()) {
      if (call.kind == CollectiveKind::kAllReduce) {
        Reduce(call.count, call.type, call.op, round.buffers);
      } else {
        const void* source = round.buffers[call.root];
        for (void* b : round.buffers) {
          if (b != source) std::memcpy(b, source, call.count);
        }
      }
    }
    round.done = true;
  }
  auto finished = [&]() ABSL_SHARED_LOCKS_REQUIRED(group.mu) {
    return round.done || group.aborted[rank_] != 0;
  };
  if (!group.mu.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
    return leave_failed(absl::DeadlineExceededError(absl::StrCat(
        "collective #", id, " (", call.Describe(), "): ", group.world_size - round.arrived, " of ",
        group.world_size, " ranks did not join within ",
        absl::FormatDuration(group.options.peer_timeout))));
  }
  if (!round.done) return leave_failed(absl::AbortedError("the fake communicator was aborted"));
  absl::Status status =
      round.failure.ok()
          ? absl::OkStatus()
          : absl::UnavailableError(absl::StrCat("collective #", id, ": rank ", round.failed_rank,
                                                " failed in it: ", round.failure.message()));
  round.buffers[rank_] = nullptr;
  if (++round.departed == group.world_size) group.rounds.erase(it);
  return status;
}

}  // namespace stoker::trainer
