// parallel.p2p_progress as the MPI backend reads it (engine/comm/mpi/progress_thread.hpp): the three names
// round-trip, anything else is refused naming the key and the choices, and whether a root communicator runs a
// progress thread follows the rule "auto: where MPI grants MPI_THREAD_MULTIPLE and there are peers; thread:
// always, refused without MULTIPLE; off: never". No MPI call is made here.
#include <gtest/gtest.h>

#include <string>

#include "engine/comm/mpi/progress_thread.hpp"
#include "engine/core/error.hpp"

namespace cleave::comm {
namespace {

TEST(P2PProgressMode, NamesRoundTripAndOthersAreRefused) {
  for (P2PProgress mode : {P2PProgress::kAuto, P2PProgress::kThread, P2PProgress::kOff}) {
    EXPECT_EQ(parse_p2p_progress(p2p_progress_name(mode)), mode) << p2p_progress_name(mode);
  }
  for (const char* bad : {"", "Auto", "threads", "on"}) {
    try {
      (void)parse_p2p_progress(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const char* part : {"parallel.p2p_progress", "\"auto\", \"thread\", \"off\""}) {
        EXPECT_NE(message.find(part), std::string::npos) << message;
      }
      EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
    }
  }
}

TEST(P2PProgressMode, ThreadWhereMultipleIsGrantedAndThereArePeers) {
  EXPECT_TRUE(progress_thread_wanted(P2PProgress::kAuto, true, 2));
  EXPECT_FALSE(progress_thread_wanted(P2PProgress::kAuto, false, 2));  // falls back without MULTIPLE
  EXPECT_FALSE(progress_thread_wanted(P2PProgress::kAuto, true, 1));   // a world of one has nothing to move
  EXPECT_TRUE(progress_thread_wanted(P2PProgress::kThread, true, 1));
  EXPECT_TRUE(progress_thread_wanted(P2PProgress::kThread, true, 4));
  EXPECT_FALSE(progress_thread_wanted(P2PProgress::kOff, true, 4));
  EXPECT_FALSE(progress_thread_wanted(P2PProgress::kOff, false, 4));
}

TEST(P2PProgressMode, ThreadWithoutMultipleIsRefusedWithTheRemedy) {
  try {
    (void)progress_thread_wanted(P2PProgress::kThread, false, 2);
    ADD_FAILURE() << "\"thread\" accepted without MPI_THREAD_MULTIPLE";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* part : {"parallel.p2p_progress \"thread\"", "MPI_THREAD_MULTIPLE", "\"auto\"", "\"off\""}) {
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace cleave::comm
