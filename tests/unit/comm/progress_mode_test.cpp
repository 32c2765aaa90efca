// parallel.p2p_progress as the MPI backend reads it (engine/comm/mpi/progress_thread.hpp): the three names
// round-trip, anything else is refused naming the key and the choices, and whether a root communicator runs a
// progress thread follows the rule "auto: where MPI grants MPI_THREAD_MULTIPLE, there are peers and messages do not
// move by single copy; thread: always, refused without MULTIPLE; off: never". No MPI call is made here.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/comm/mpi/progress_thread.hpp"
#include "engine/core/error.hpp"

namespace cleave::comm::progress_mode_test {
namespace {

TEST(P2PProgressMode, NamesRoundTripAndOthersAreRefused) {
  for (P2PProgress mode : {P2PProgress::kAuto, P2PProgress::kThread, P2PProgress::kOff}) {
    EXPECT_EQ(parse_enum<P2PProgress>(enum_name(mode), "parallel.p2p_progress"), mode) << enum_name(mode);
  }
  for (const char* bad : {"", "Auto", "threads", "on"}) {
    try {
      (void)parse_enum<P2PProgress>(bad, "parallel.p2p_progress");
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

TEST(P2PProgressMode, AutoSkipsTheThreadWhereOpenMpiCopiesOnceOnOneNode) {
  EXPECT_FALSE(progress_thread_wanted(P2PProgress::kAuto, true, 2, /*single_copy=*/true));
  EXPECT_TRUE(progress_thread_wanted(P2PProgress::kThread, true, 2, /*single_copy=*/true));  // insisting still runs it
  auto single_copy = [](std::map<std::string, std::string> env) {
    return single_copy_transport([&](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  const std::map<std::string, std::string> one_node = {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_TRUE(single_copy(one_node));  // Open MPI's default mechanism (CMA where the kernel allows it)
  auto with = [&](const std::string& key, const std::string& value) {
    auto env = one_node;
    env[key] = value;
    return env;
  };
  EXPECT_TRUE(single_copy(with("OMPI_MCA_btl_vader_single_copy_mechanism", "cma")));
  EXPECT_TRUE(single_copy(with("OMPI_MCA_btl_sm_single_copy_mechanism", "xpmem")));
  EXPECT_FALSE(single_copy(with("OMPI_MCA_btl_vader_single_copy_mechanism", "none")));  // copy-in/copy-out
  EXPECT_FALSE(single_copy(with("OMPI_MCA_btl_sm_single_copy_mechanism", "none")));     // Open MPI 5's name
  EXPECT_FALSE(single_copy(with("OMPI_COMM_WORLD_LOCAL_SIZE", "1")));                   // ranks on two nodes
  EXPECT_FALSE(single_copy({}));  // not launched by Open MPI: cannot tell
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
}  // namespace cleave::comm::progress_mode_test
