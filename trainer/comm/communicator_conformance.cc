#include "trainer/comm/communicator_conformance.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "trainer/comm/fake_communicator.h"

namespace stoker::trainer {

void* HostMemoryConformanceTarget::Allocate(size_t bytes) {
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void HostMemoryConformanceTarget::Free(void* buffer) { std::free(buffer); }
void HostMemoryConformanceTarget::CopyIn(void* buffer, const void* host, size_t bytes) {
  std::memcpy(buffer, host, bytes);
}
void HostMemoryConformanceTarget::CopyOut(void* host, const void* buffer, size_t bytes) {
  std::memcpy(host, buffer, bytes);
}

namespace {

// Every element type, with its name for messages.
constexpr std::pair<ElementType, const char*> kEveryType[] = {{ElementType::kFloat32, "float32"},
                                                              {ElementType::kFloat16, "float16"},
                                                              {ElementType::kBFloat16, "bfloat16"},
                                                              {ElementType::kInt64, "int64"},
                                                              {ElementType::kUInt8, "uint8"}};

const char* TypeName(ElementType type) {
  for (const auto& [each, name] : kEveryType) {
    if (each == type) return name;
  }
  return "?";
}

bool IsFloat(ElementType type) {
  return type == ElementType::kFloat32 || type == ElementType::kFloat16 ||
         type == ElementType::kBFloat16;
}

// A buffer of the target's memory, freed on destruction.
class Buffer {
 public:
  Buffer(CommunicatorConformanceTarget& target, size_t bytes)
      : target_(target), bytes_(bytes), data_(target.Allocate(bytes)) {}
  ~Buffer() { target_.Free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  void Set(const std::vector<char>& host) { target_.CopyIn(data_, host.data(), bytes_); }
  std::vector<char> Get() const {
    std::vector<char> host(bytes_);
    target_.CopyOut(host.data(), data_, bytes_);
    return host;
  }

 private:
  CommunicatorConformanceTarget& target_;
  const size_t bytes_;
  void* const data_;
};

// `count` elements of `type`, element i being value(i).
template <typename F>
std::vector<char> Elements(ElementType type, size_t count, F value) {
  std::vector<char> host(count * ElementSize(type));
  for (size_t i = 0; i < count; ++i)
    StoreElement(type, value(i), host.data() + i * ElementSize(type));
  return host;
}

// Expects element i of `host` to be expected(i), within `relative` of it; reports the
// first mismatch and how many there are.
template <typename F>
void ExpectElements(ElementType type, const std::vector<char>& host, F expected, double relative,
                    const std::string& what) {
  const size_t count = host.size() / ElementSize(type);
  size_t wrong = 0, first = 0;
  double first_value = 0;
  for (size_t i = 0; i < count; ++i) {
    const double value = LoadElement(type, host.data() + i * ElementSize(type));
    const double want = expected(i);
    if (std::fabs(value - want) > relative * std::fabs(want)) {
      if (wrong++ == 0) {
        first = i;
        first_value = value;
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << count
                       << " elements wrong; the first, element " << first << ", is " << first_value
                       << " instead of " << expected(first);
}

// Rank r's element i: small integers, so that sums and averages are exact in every type.
double Input(int rank, size_t i) { return static_cast<double>(i % 16) + 2 * rank + 1; }
double Sum(int world, size_t i) {
  return world * (static_cast<double>(i % 16) + 1) + world * (world - 1.0);
}

constexpr size_t kCount = 1031;  // odd, so that no chunking divides it evenly

TEST_P(CommunicatorConformanceTest, RanksAreZeroToWorldSizeMinusOneAndAgreeOnTheWorldSize) {
  target().RunOnEveryRank([&](Communicator& comm) {
    const int world = comm.world_size();
    ASSERT_GE(world, 1);
    ASSERT_GE(comm.rank(), 0);
    ASSERT_LT(comm.rank(), world);
    // Each rank sets its own slot and adds its world size: each slot must end up 1.
    Buffer slots(target(), (world + 1) * sizeof(int64_t));
    slots.Set(Elements(ElementType::kInt64, world + 1, [&](size_t i) {
      return i == static_cast<size_t>(comm.rank()) ? 1.0
             : i == static_cast<size_t>(world)     ? world
                                                   : 0.0;
    }));
    ASSERT_TRUE(comm.AllReduce(slots.data(), world + 1, ElementType::kInt64, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    ExpectElements(
        ElementType::kInt64, slots.Get(),
        [&](size_t i) { return i == static_cast<size_t>(world) ? 1.0 * world * world : 1.0; }, 0,
        "one slot per rank, then the sum of the world sizes");
  });
}

// On every rank, reduces kCount elements of each type with `op`: a type that the target
// does not support with `op` must fail, any other must give the sum (or the average) of
// the ranks' inputs.
void ExpectAllReduceOfEveryType(CommunicatorConformanceTarget& target, ReduceOp op) {
  const char* const op_name = op == ReduceOp::kSum ? "sum" : "average";
  target.RunOnEveryRank([&](Communicator& comm) {
    const int world = comm.world_size();
    for (const auto& [type, type_name] : kEveryType) {
      Buffer buffer(target, kCount * ElementSize(type));
      buffer.Set(Elements(type, kCount, [&](size_t i) { return Input(comm.rank(), i); }));
      const absl::Status status = comm.AllReduce(buffer.data(), kCount, type, op);
      if (!target.Supports(type, op)) {
        EXPECT_FALSE(status.ok()) << type_name << " is not supported, yet its " << op_name
                                  << " succeeded";
        continue;
      }
      ASSERT_TRUE(status.ok()) << type_name << ": " << status;
      ASSERT_TRUE(comm.Synchronize().ok());
      // The average is an integer here; a float implementation may multiply by 1/world.
      const double relative = op == ReduceOp::kSum            ? 0
                              : type == ElementType::kFloat32 ? 1e-6
                              : IsFloat(type)                 ? 1e-2
                                                              : 0;
      ExpectElements(
          type, buffer.Get(),
          [&](size_t i) { return op == ReduceOp::kSum ? Sum(world, i) : Sum(world, i) / world; },
          relative, absl::StrCat(op_name, " of ", type_name, " on rank ", comm.rank()));
    }
  });
}

TEST_P(CommunicatorConformanceTest, AllReduceSumsEveryElementTypeItSupports) {
  ExpectAllReduceOfEveryType(target(), ReduceOp::kSum);
}

TEST_P(CommunicatorConformanceTest, AllReduceAveragesEveryElementTypeItSupports) {
  ExpectAllReduceOfEveryType(target(), ReduceOp::kAverage);
}

TEST_P(CommunicatorConformanceTest, EveryRankGetsTheSameBits) {
  target().RunOnEveryRank([&](Communicator& comm) {
    for (ElementType type :
         {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        if (!target().Supports(type, op)) continue;
        const std::string what = absl::StrCat(
            TypeName(type), op == ReduceOp::kSum ? " sum" : " average", " on rank ", comm.rank());
        // Values whose sum rounds: the order of additions shows in the last bits.
        Buffer buffer(target(), kCount * ElementSize(type));
        buffer.Set(Elements(type, kCount, [&](size_t i) {
          return std::sin(0.1 * i + comm.rank()) * (1 + comm.rank());
        }));
        ASSERT_TRUE(comm.AllReduce(buffer.data(), kCount, type, op).ok()) << what;
        ASSERT_TRUE(comm.Synchronize().ok());
        const std::vector<char> mine = buffer.Get();
        // Rank 0's result, to compare with.
        Buffer first(target(), mine.size());
        first.Set(mine);
        ASSERT_TRUE(comm.Broadcast(first.data(), mine.size(), 0).ok()) << what;
        ASSERT_TRUE(comm.Synchronize().ok());
        EXPECT_TRUE(first.Get() == mine) << what << " differs from rank 0's in some bits";
      }
    }
  });
}

TEST_P(CommunicatorConformanceTest, BroadcastCopiesTheRootsBytesFromEveryRoot) {
  constexpr size_t kBytes = 4099;
  auto pattern = [](int rank) {
    std::vector<char> bytes(kBytes);
    for (size_t i = 0; i < kBytes; ++i)
      bytes[i] = static_cast<char>((rank * 37 + i * 7 + 1) & 0xff);
    return bytes;
  };
  target().RunOnEveryRank([&](Communicator& comm) {
    for (int root = 0; root < comm.world_size(); ++root) {
      Buffer buffer(target(), kBytes);
      buffer.Set(pattern(comm.rank()));
      ASSERT_TRUE(comm.Broadcast(buffer.data(), kBytes, root).ok()) << "root " << root;
      ASSERT_TRUE(comm.Synchronize().ok());
      EXPECT_TRUE(buffer.Get() == pattern(root))
          << "rank " << comm.rank() << " did not get root " << root << "'s bytes";
    }
  });
}

TEST_P(CommunicatorConformanceTest, ABroadcastRootThatIsNoRankIsInvalidArgument) {
  target().RunOnEveryRank([&](Communicator& comm) {
    Buffer buffer(target(), 8);
    EXPECT_TRUE(absl::IsInvalidArgument(comm.Broadcast(buffer.data(), 8, comm.world_size())));
    EXPECT_TRUE(absl::IsInvalidArgument(comm.Broadcast(buffer.data(), 8, -1)));
  });
}

TEST_P(CommunicatorConformanceTest, SynchronizeOrdersEveryOperationIssuedSoFar) {
  constexpr size_t kLarge = 1 << 20;
  target().RunOnEveryRank([&](Communicator& comm) {
    const int world = comm.world_size();
    const int last = world - 1;
    Buffer floats(target(), kLarge * sizeof(float));
    Buffer bytes(target(), kLarge);
    Buffer integers(target(), kCount * sizeof(int64_t));
    floats.Set(
        Elements(ElementType::kFloat32, kLarge, [&](size_t i) { return Input(comm.rank(), i); }));
    bytes.Set(std::vector<char>(kLarge, static_cast<char>(comm.rank() + 1)));
    integers.Set(
        Elements(ElementType::kInt64, kCount, [&](size_t i) { return Input(comm.rank(), i); }));
    // Issued back to back, then one Synchronize for all three.
    ASSERT_TRUE(comm.AllReduce(floats.data(), kLarge, ElementType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Broadcast(bytes.data(), kLarge, last).ok());
    ASSERT_TRUE(comm.AllReduce(integers.data(), kCount, ElementType::kInt64, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    ExpectElements(
        ElementType::kFloat32, floats.Get(), [&](size_t i) { return Sum(world, i); }, 0,
        "the first allreduce");
    EXPECT_TRUE(bytes.Get() == std::vector<char>(kLarge, static_cast<char>(last + 1)))
        << "the broadcast";
    ExpectElements(
        ElementType::kInt64, integers.Get(), [&](size_t i) { return Sum(world, i); }, 0,
        "the last allreduce");
  });
}

TEST_P(CommunicatorConformanceTest, TheLedgerRecordsEveryCollectiveAndItsCompletion) {
  target().RunOnEveryRank([&](Communicator& comm) {
    CollectiveLedger* ledger = comm.ledger();
    if (ledger == nullptr) return;  // it keeps none
    const uint64_t before = ledger->Read().issued;
    Buffer buffer(target(), kCount * sizeof(float));
    buffer.Set(
        Elements(ElementType::kFloat32, kCount, [&](size_t i) { return Input(comm.rank(), i); }));
    ASSERT_TRUE(comm.AllReduce(buffer.data(), kCount, ElementType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Broadcast(buffer.data(), 64, 0).ok());
    ASSERT_TRUE(comm.AllReduce(buffer.data(), kCount, ElementType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    buffer.Get();  // the work has finished
    ASSERT_TRUE(comm.PollCompletions().ok());
    const CollectiveLedger::Snapshot after = ledger->Read();
    EXPECT_EQ(after.issued, before + 3);
    EXPECT_EQ(after.completed, after.issued);
    EXPECT_EQ(after.pending, 0u);
    EXPECT_EQ(after.completed_kind, CollectiveKind::kAllReduce);
  });
}

TEST_P(CommunicatorConformanceTest, AbortFailsEveryLaterCollectiveWhereItIsSupported) {
  target().RunOnEveryRank([&](Communicator& comm) {
    if (!target().can_abort()) {
      EXPECT_FALSE(comm.Abort()) << "Abort() must say that it cannot interrupt";
      return;
    }
    EXPECT_TRUE(comm.Abort());
    Buffer buffer(target(), kCount * sizeof(float));
    EXPECT_FALSE(comm.AllReduce(buffer.data(), kCount, ElementType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_FALSE(comm.Broadcast(buffer.data(), 64, 0).ok());
  });
}

TEST_P(CommunicatorConformanceTest, AbortEndsACollectiveThatThePeersNeverJoin) {
  if (!target().can_interrupt_a_waiting_rank()) GTEST_SKIP() << "no host wait to interrupt";
  target().RunOnEveryRank([&](Communicator& comm) {
    if (comm.rank() != 0) return;  // the peers never join
    Buffer buffer(target(), sizeof(float));
    std::thread watchdog([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.Abort();
    });
    const absl::Time start = absl::Now();
    EXPECT_FALSE(comm.AllReduce(buffer.data(), 1, ElementType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    watchdog.join();
  });
}

TEST_P(CommunicatorConformanceTest, FailNextFailsOneCollectiveOnEveryRankAndNothingElse) {
  if (!target().can_fail_next()) GTEST_SKIP() << "no fail_next seam";
  target().RunOnEveryRank([&](Communicator& comm) {
    const int world = comm.world_size();
    if (comm.rank() == 0) target().FailNext(comm, absl::DataLossError("injected"));
    Buffer buffer(target(), kCount * sizeof(float));
    const std::vector<char> input =
        Elements(ElementType::kFloat32, kCount, [&](size_t i) { return Input(comm.rank(), i); });
    buffer.Set(input);
    const absl::Status failed =
        comm.AllReduce(buffer.data(), kCount, ElementType::kFloat32, ReduceOp::kSum);
    if (comm.rank() == 0) {
      EXPECT_EQ(failed, absl::DataLossError("injected"));
    } else {
      EXPECT_FALSE(failed.ok()) << "rank " << comm.rank()
                                << " completed a collective that rank 0 failed";
    }
    EXPECT_TRUE(buffer.Get() == input)
        << "a failed collective changed rank " << comm.rank() << "'s buffer";
    // The next one works again.
    ASSERT_TRUE(comm.AllReduce(buffer.data(), kCount, ElementType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Synchronize().ok());
    ExpectElements(
        ElementType::kFloat32, buffer.Get(), [&](size_t i) { return Sum(world, i); }, 0,
        "the collective after the failed one");
  });
}

}  // namespace
}  // namespace stoker::trainer
