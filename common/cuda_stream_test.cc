// CudaStream and CudaEvent own what they create, move without double destruction, and
// report CUDA's errors as Status (tag gpu: needs a GPU).
#include "common/cuda_stream.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <utility>

#include "gtest/gtest.h"

namespace stoker {
namespace {

class CudaStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) GTEST_SKIP() << "needs 1 GPU";
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    std::printf("[ device ] 0: %s\n", prop.name);
  }
};

TEST_F(CudaStreamTest, AStreamMovesAndTheMovedFromOwnerHoldsNothing) {
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_NE(stream->get(), nullptr);
  EXPECT_EQ(stream->device(), 0);
  unsigned flags = 0;
  ASSERT_EQ(cudaStreamGetFlags(stream->get(), &flags), cudaSuccess);
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
  const cudaStream_t raw = stream->get();
  CudaStream moved = std::move(*stream);
  EXPECT_EQ(moved.get(), raw);
  EXPECT_EQ(stream->get(), nullptr);
  EXPECT_TRUE(moved.Synchronize().ok());
  CudaStream assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.get(), raw);
}

TEST_F(CudaStreamTest, APriorityIsKept) {
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  auto stream = CudaStream::Create(0, cudaStreamNonBlocking, greatest);
  ASSERT_TRUE(stream.ok()) << stream.status();
  int priority = 0;
  ASSERT_EQ(cudaStreamGetPriority(stream->get(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
}

TEST_F(CudaStreamTest, ANonexistentDeviceIsAnError) {
  EXPECT_FALSE(CudaStream::Create(1 << 20).ok());
}

TEST_F(CudaStreamTest, EventsRecordQuerySynchronizeAndTime) {
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  auto start = CudaEvent::Create(cudaEventDefault);
  auto stop = CudaEvent::Create(cudaEventDefault);
  ASSERT_TRUE(start.ok() && stop.ok());
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 64 << 20), cudaSuccess);
  ASSERT_TRUE(start->Record(stream->get()).ok());
  ASSERT_EQ(cudaMemsetAsync(buffer, 1, 64 << 20, stream->get()), cudaSuccess);
  ASSERT_TRUE(stop->Record(stream->get()).ok());
  ASSERT_TRUE(stop->Synchronize().ok());
  auto done = stop->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  auto ms = stop->ElapsedMs(*start);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.0f);
  cudaFree(buffer);
}

TEST_F(CudaStreamTest, TimingAnEventWithoutTimingIsAnError) {
  auto stream = CudaStream::Create(0);
  auto start = CudaEvent::Create();
  auto stop = CudaEvent::Create();
  ASSERT_TRUE(stream.ok() && start.ok() && stop.ok());
  ASSERT_TRUE(start->Record(stream->get()).ok());
  ASSERT_TRUE(stop->Record(stream->get()).ok());
  ASSERT_TRUE(stop->Synchronize().ok());
  EXPECT_FALSE(stop->ElapsedMs(*start).ok());
  cudaGetLastError();
}

TEST_F(CudaStreamTest, AMovedEventIsDestroyedOnce) {
  auto event = CudaEvent::Create();
  ASSERT_TRUE(event.ok());
  const cudaEvent_t raw = event->get();
  CudaEvent moved = std::move(*event);
  EXPECT_EQ(event->get(), nullptr);
  EXPECT_EQ(moved.get(), raw);
  moved = CudaEvent();
  EXPECT_EQ(moved.get(), nullptr);
}

}  // namespace
}  // namespace stoker
