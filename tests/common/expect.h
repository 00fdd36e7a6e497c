// Test helpers shared by the suites: a call that must be rejected with a status and a message
// naming what was wrong, and the test-name suffix of a strategy parameter.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::test {

// `fn` throws specstate::Error with `status` and every one of `words` in its message.
template <typename Fn>
void expect_rejected(Fn&& fn, Status status, const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "the call was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const std::string& w : words) {
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "'" << w << "' not in: " << e.what();
    }
  }
}

// "snapshot" / "replay": the name of a test parameterized by the strategy.
inline std::string strategy_test_name(const ::testing::TestParamInfo<Strategy>& info) {
  return info.param == Strategy::kReplay ? "replay" : "snapshot";
}

}  // namespace specstate::test
