// Checks shared by the golden suites of every layer kind.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "cli/golden_case.h"

namespace specstate::cli {

// A case whose gate parameters are held in mixed dtypes (as engines hold them) against the same
// numbers declared f32: the descriptions name the dtypes, every property check passes, and every
// tensor's errors are bit for bit the f32 run's. The conv tensors do not see the gate parameters
// (no error against the reference for the copied windows); every other tensor shows the bf16
// rounding of the parameters (the references are the unrounded f32 ones), within 1e-2 of the
// reference and 2e-2 of SGLang.
// `text`: the report rendered, for failure messages.
inline void expect_mixed_params_equal_f32(const GoldenReport& report, const GoldenReport& f32,
                                          const std::string& text, const std::string& mixed,
                                          const std::string& all_f32) {
  ASSERT_NE(report.outcome, GoldenOutcome::kError) << text;
  EXPECT_NE(report.description.find(mixed), std::string::npos) << text;
  EXPECT_NE(f32.description.find(all_f32), std::string::npos) << f32.description;
  for (const PropertyCheck& c : report.checks) EXPECT_TRUE(c.pass) << c.name << ": " << c.detail;
  ASSERT_EQ(report.tensors.size(), f32.tensors.size());
  for (std::size_t i = 0; i < report.tensors.size(); ++i) {
    const TensorComparison& t = report.tensors[i];
    SCOPED_TRACE(t.tensor);
    ASSERT_TRUE(t.has_ref && t.has_sglang);
    EXPECT_EQ(t.vs_ref, f32.tensors[i].vs_ref);
    EXPECT_EQ(t.vs_sglang, f32.tensors[i].vs_sglang);
    if (t.tensor == "inter_conv_window" || t.tensor == "conv_state_committed") {
      EXPECT_EQ(t.vs_ref, 0.0);
    } else if (t.tensor != "conv_out") {
      EXPECT_GT(t.vs_ref, 1e-6) << "the bf16 rounding left no trace";
      EXPECT_LE(t.vs_ref, 1e-2);
      EXPECT_LE(t.vs_sglang, 2e-2);
    }
  }
}

}  // namespace specstate::cli
