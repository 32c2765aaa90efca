// The MPI backend's progress thread (engine/comm/mpi/progress_thread.hpp), under mpiexec -n 2.
//
// What it asserts:
//  - A 128 KiB send (32x Open MPI's 4 KiB eager limit) posted before the sender computes for kBusy without
//    entering MPI reaches the receiver while the sender is still computing: the receiver's wait ends in well
//    under half of kBusy, and the bytes are the sender's (fresh random values, compared exactly).
//  - The premise, so the first check can fail: with the thread off and Open MPI's single copy off (the suite's
//    setting, CMakeLists CLEAVE_MPIEXEC_FLAGS), the same receive waits for the sender's next MPI call.
//  - One thread per root communicator, shared by its splits, joined when the last of them goes; it makes no
//    MPI call while nothing is outstanding; "off" starts none.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "engine/comm/mpi/mpi_communicator.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::testing::comm_progress_test {
namespace {

using Clock = std::chrono::steady_clock;
using comm::P2POp;
using comm::P2PProgress;

constexpr std::int64_t kElements = 32768;  // 128 KiB of f32, the size of a pipeline activation in issue 13
constexpr auto kBusy = std::chrono::milliseconds(400);

std::unique_ptr<comm::MpiCommunicator> make_comm(P2PProgress progress) {
  comm::MpiOptions options;
  options.timeout_s = kTestTimeoutS;
  options.progress = progress;
  return std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD, options, "world-progress");
}

bool thread_multiple() { return mpi_runtime().provided() == comm::MpiThreadLevel::kMultiple; }

bool single_copy_off() {
  const char* mechanism = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
  return mechanism != nullptr && std::string(mechanism) == "none";
}

int thread_count() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.exists() ? 1 : 0;
  return n;
}

// Computes for `duration` without any MPI call (what the executor does between actions).
double compute_without_mpi(std::chrono::milliseconds duration) {
  const auto end = Clock::now() + duration;
  double x = 1.0;
  while (Clock::now() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  }
  return x;
}

// Rank 0 sends kElements fresh random floats to rank 1 and then computes for kBusy; rank 1 waits for them.
// Returns, on rank 1, how long its wait took (ms) after checking every value; -1 on other ranks.
double receive_while_sender_computes(comm::MpiCommunicator& comm) {
  Tensor seed = Tensor::empty({1}, DType::kI64, MemoryCategory::kActivations, cpu_allocator());
  seed.data<std::int64_t>()[0] = static_cast<std::int64_t>(std::random_device{}());
  comm.broadcast(seed, 0)->wait();  // fresh values every run, known to both sides
  std::mt19937 generator(static_cast<std::uint32_t>(seed.data<std::int64_t>()[0]));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Tensor expected = Tensor::empty({kElements}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < kElements; ++i) expected.data<float>()[i] = uniform(generator);

  double waited_ms = -1;
  comm.barrier()->wait();
  if (comm.rank() == 0) {
    comm::WorkPtr send = comm.batch_p2p({P2POp::send(expected, 1, 11)});
    EXPECT_NE(compute_without_mpi(kBusy), 0.0);
    send->wait();
  } else if (comm.rank() == 1) {
    Tensor received = Tensor::empty({kElements}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < kElements; ++i) received.data<float>()[i] = -7.0f;  // poison
    const auto start = Clock::now();
    comm.batch_p2p({P2POp::recv(received, 0, 11)})->wait();
    waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < kElements; ++i) wrong += received.data<float>()[i] != expected.data<float>()[i];
    EXPECT_EQ(wrong, 0) << "of " << kElements << " values differ from the sender's";
  }
  comm.barrier()->wait();
  return waited_ms;
}

TEST(ProgressThread, LargeSendArrivesWhileTheSenderComputes) {
  if (!thread_multiple()) GTEST_SKIP() << "MPI does not provide MPI_THREAD_MULTIPLE: no progress thread to test";
  auto comm = make_comm(P2PProgress::kThread);
  ASSERT_NE(comm->progress_thread(), nullptr);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double waited_ms = receive_while_sender_computes(*comm);
    if (comm->rank() == 1) {
      const double busy_ms = static_cast<double>(kBusy.count());
      EXPECT_LT(waited_ms, busy_ms / 2) << "the receive waited for the sender's computation (" << busy_ms
                                        << " ms) instead of completing during it";
      std::printf("[rank 1] 128 KiB receive with the progress thread: %.2f ms while the sender computed %.0f ms\n",
                  waited_ms, busy_ms);
    }
  }
}

TEST(ProgressThread, WithoutItTheReceiveWaitsForTheSendersNextMpiCall) {
  if (!single_copy_off()) GTEST_SKIP() << "Open MPI single copy is not 'none': large messages need no sender progress";
  auto comm = make_comm(P2PProgress::kOff);
  ASSERT_EQ(comm->progress_thread(), nullptr);
  const double waited_ms = receive_while_sender_computes(*comm);
  if (comm->rank() == 1) {
    const double busy_ms = static_cast<double>(kBusy.count());
    EXPECT_GT(waited_ms, busy_ms * 0.8) << "without a progress thread the receive should have waited for the sender";
    std::printf("[rank 1] 128 KiB receive without the progress thread: %.2f ms while the sender computed %.0f ms\n",
                waited_ms, busy_ms);
  }
}

TEST(ProgressThread, OnePerRootSharedBySplitsJoinedWithTheLastAndIdleWhenNothingIsOutstanding) {
  if (!thread_multiple()) GTEST_SKIP() << "MPI does not provide MPI_THREAD_MULTIPLE: no progress thread to test";
  const int before = thread_count();
  {
    auto root = make_comm(P2PProgress::kThread);
    EXPECT_EQ(thread_count(), before + 1);
    std::unique_ptr<comm::Communicator> split = root->split(root->rank() % 2, root->rank(), "half");
    ASSERT_NE(split, nullptr);
    const auto* child = dynamic_cast<const comm::MpiCommunicator*>(split.get());
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->progress_thread(), root->progress_thread());
    EXPECT_EQ(thread_count(), before + 1);

    // Outstanding work is polled for.
    const comm::ProgressThread* thread = root->progress_thread();
    const std::uint64_t polls_before = thread->polls();
    (void)receive_while_sender_computes(*root);
    EXPECT_GT(thread->polls(), polls_before);

    // Nothing outstanding: no MPI call. (At most one poll may still be under way when the last Work ends.)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::uint64_t idle = thread->polls();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(thread->polls(), idle) << "the progress thread polled with nothing outstanding";

    root.reset();  // the split still holds the thread
    EXPECT_EQ(thread_count(), before + 1);
    split->barrier()->wait();
  }
  EXPECT_EQ(thread_count(), before) << "the progress thread outlived its communicators";
  auto off = make_comm(P2PProgress::kOff);
  EXPECT_EQ(off->progress_thread(), nullptr);
  EXPECT_EQ(thread_count(), before);
}

}  // namespace
}  // namespace cleave::testing::comm_progress_test
