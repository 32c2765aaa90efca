// engine/comm/nccl/nccl_group.hpp on the CPU: NCCL's group calls need no GPU, and an ncclSend on a null
// communicator fails inside a group (ncclInvalidArgument) as a failing op of a real batch would: NCCL records the
// error for the group and keeps the thread inside it until ncclGroupEnd. The guard must end the group exactly once
// on every path, so the thread is outside any group afterwards (a lone ncclGroupEnd is refused as ncclInvalidUsage)
// and the failed group's error does not surface again at the next group's end.
#include <gtest/gtest.h>

#include "engine/comm/nccl/nccl_group.hpp"

namespace cleave::testing::nccl_group_test {
namespace {

using comm::detail::NcclGroup;

// An op that fails inside the group, unchecked: the error is the group's.
void failing_send() { (void)ncclSend(nullptr, 4, ncclInt8, 0, nullptr, nullptr); }

TEST(NcclGroup, ACheckThrowingInsideTheGroupStillEndsIt) {
  EXPECT_THROW(
      {
        NcclGroup group;
        CLEAVE_NCCL_CHECK(ncclSend(nullptr, 4, ncclInt8, 0, nullptr, nullptr));
        group.end();
      },
      BackendError);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "the thread was left inside the failed group";
  NcclGroup next;
  EXPECT_NO_THROW(next.end()) << "the failed group's error carried over into the next group";
}

TEST(NcclGroup, EndReportsTheGroupsErrorOnceAndClosesIt) {
  {
    NcclGroup group;
    failing_send();
    EXPECT_THROW(group.end(), BackendError);
  }  // the destructor must not end it again
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  {
    NcclGroup group;
    group.end();
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
}

}  // namespace
}  // namespace cleave::testing::nccl_group_test
