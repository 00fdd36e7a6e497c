// Golden conformance of KDA layers: cases K_A (the plain gate) and K_LB (the lower-bound gate,
// -5), tests/data/golden/golden_kda_case{A,LB}.safetensors, written on an H200 by
// tools/kda_golden.py --fla (the KDA part of tests/data/golden/README.md), through the same code as
// `specstate check-golden`, on the CPU backend under both strategies. Each holds two expectations:
// the script's float64 reference (ref_*) and fla-core 0.6.0's own kernels (un-prefixed: its
// causal_conv1d_update and fused_recurrent_kda in verify mode). Corrupted copies must fail, the
// case must hold real numbers and its degenerate tokens, and the binary must pass it. Built only
// with the command line (SPECSTATE_CLI_PATH).
#include <gtest/gtest.h>

#if defined(SPECSTATE_CLI_PATH)

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/golden_case.h"
#include "common/golden_expect.h"
#include "specstate/safetensors.h"

namespace specstate::cli {
namespace {

const std::string kFile = std::string(SPECSTATE_TEST_DATA) + "/golden/golden_kda_caseA.safetensors";
const std::string kFileLb =
    std::string(SPECSTATE_TEST_DATA) + "/golden/golden_kda_caseLB.safetensors";

// Sizes of case K_A (tools/kda_golden.py): head_k_dim 32 and head_v_dim 24, sizes the CUDA
// kernels take (24 value rows: a full and a half-full V block of 16).
constexpr int kR = 5, kT = 4, kH = 2, kHV = 4, kK = 32, kV = 24;
constexpr int kD = 2 * kH * kK + kHV * kV;

class GoldenKda : public ::testing::TestWithParam<Strategy> {};

// Case K_A or K_LB passes on `backend` against the float64 reference and against fla's kernels.
void expect_case_passes(const std::string& file, Strategy strategy, const char* gate,
                        Backend backend = Backend::kCpu) {
  const GoldenReport report = run_golden_file(file, strategy, backend);
  const std::string text = golden_report_text(report);
  std::cout << text;
  ASSERT_EQ(report.outcome, GoldenOutcome::kPass) << text;
  EXPECT_NE(report.description.find("KDA chain T=4, rows=5 (4 real), L=2, H=2 HV=4 K=32 V=24 W=4"),
            std::string::npos)
      << text;
  if (backend == Backend::kCuda) {
    EXPECT_NE(report.description.find("backend cuda"), std::string::npos) << report.description;
  }
  EXPECT_NE(report.description.find(gate), std::string::npos) << text;
  EXPECT_NE(text.find("vs fla"), std::string::npos) << text;
  for (const std::string& name : compared_tensors(strategy)) {
    const TensorComparison* t = find_comparison(report, name);
    ASSERT_NE(t, nullptr) << name << " not compared\n" << text;
    EXPECT_TRUE(t->has_ref) << name;
    EXPECT_TRUE(t->has_sglang) << name << ": fla's tensor (the third party's column)";
    EXPECT_TRUE(t->pass) << name;
    const bool copy = name == "inter_conv_window" || name == "conv_state_committed";
    if (copy) {
      EXPECT_EQ(t->vs_ref, 0.0) << name;
      EXPECT_EQ(t->vs_sglang, 0.0) << name;
    } else {
      // f32 arithmetic against float64 and against fla's Triton kernels: not zero (the tensor
      // was not compared with itself), within the f32 tolerances.
      EXPECT_GT(t->vs_ref, 0.0) << name;
      EXPECT_LE(t->vs_ref, 1e-5) << name;
      EXPECT_GT(t->vs_sglang, 0.0) << name;
      EXPECT_LE(t->vs_sglang, 2e-5) << name;
    }
  }
  ASSERT_EQ(report.checks.size(), 4u);
  for (const PropertyCheck& c : report.checks) EXPECT_TRUE(c.pass) << c.name << ": " << c.detail;
  // The real row that accepts 0 keeps slot 0; slot 2 is named by no row.
  EXPECT_NE(text.find("slots without a commit unchanged [0, 2]"), std::string::npos) << text;
}

TEST_P(GoldenKda, CaseAPassesOnTheCpuAgainstTheReferenceAndFla) {
  expect_case_passes(kFile, GetParam(), "gate plain");
}

TEST_P(GoldenKda, CaseLowerBoundPassesOnTheCpuAgainstTheReferenceAndFla) {
  expect_case_passes(kFileLb, GetParam(), "gate lower bound -5");
}

// Each corruption makes the case fail where it should (the test can fail).
TEST_P(GoldenKda, CorruptedCopiesFail) {
  const Strategy strategy = GetParam();
  const std::vector<GoldenCorruption> corruptions = {
      {"one expected core_out value off by 1e-4 of the range",
       [](GoldenCaseEditor& e) {
         e.edit("ref_core_out.l1", [](auto& v) {
           float range = 0;
           for (float x : v) range = std::max(range, std::fabs(x));
           v[(1 * kT + 2) * kHV * kV + 5] += 1e-4f * range;
         });
       },
       {"core_out"},
       {"conv_out", "ssm_state_committed", "conv_state_committed"}},
      {"one of fla's core_out values off by 1e-4 of the range (the reference untouched)",
       [](GoldenCaseEditor& e) {
         e.edit("core_out.l0", [](auto& v) {
           float range = 0;
           for (float x : v) range = std::max(range, std::fabs(x));
           v[(2 * kT + 1) * kHV * kV + 3] -= 1e-4f * range;
         });
       },
       {"core_out"},
       {"conv_out", "ssm_state_committed", "conv_state_committed"}},
      {"one expected committed state value, one ulp in the unused slot 2",
       [](GoldenCaseEditor& e) {
         e.edit("ref_conv_state_committed.l0", [](auto& v) {
           float& x = v[2 * kD * 3 + 7];
           x = std::nextafter(x, 1e30f);
         });
       },
       {"conv_state_committed"},
       {"conv_out", "core_out", "ssm_state_committed"}},
      {"the raw gate of row 1 (every token)",
       [](GoldenCaseEditor& e) {
         e.edit("g.l0", [](auto& v) {
           for (int t = 0; t < kT; ++t) {
             for (int i = 0; i < kHV * kK; ++i) v[(1 * kT + t) * kHV * kK + i] += 0.5f;
           }
         });
       },
       {"core_out", "ssm_state_committed"},
       {"conv_out", "conv_state_committed"}},
      {"dt_bias of value head 2, key channel 9",
       [](GoldenCaseEditor& e) { e.edit("dt_bias.l1", [](auto& v) { v[2 * kK + 9] += 0.5f; }); },
       {"core_out", "ssm_state_committed"},
       {"conv_out"}},
      {"A_log",
       [](GoldenCaseEditor& e) { e.edit("A_log.l0", [](auto& v) { v[1] += 0.05f; }); },
       {"core_out", "ssm_state_committed"},
       {"conv_out"}},
      {"beta logits of row 0",
       [](GoldenCaseEditor& e) {
         e.edit("b.l1", [](auto& v) {
           for (int i = 0; i < kT * kHV; ++i) v[i] += 0.3f;
         });
       },
       {"core_out", "ssm_state_committed"},
       {"conv_out"}},
      shorter_acceptance_of_row_1(),
      {"the lower-bound gate declared for the plain gate's values",
       [](GoldenCaseEditor& e) {
         e.edit_params("\"gate\": \"plain\"",
                       "\"gate\": \"lower_bound\", "
                       "\"lower_bound\": -5.0");
       },
       {"core_out", "ssm_state_committed"},
       {"conv_out", "conv_state_committed"}},
  };
  expect_corruptions_fail(kFile, strategy, corruptions);
}

INSTANTIATE_TEST_SUITE_P(Cpu, GoldenKda, ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         [](const auto& info) { return std::string(strategy_name(info.param)); });

// The CUDA backend (device-memory views, GDN's kernel with the gate per key channel): both cases,
// the same tolerances, against the reference and fla; it skips visibly without a device.
class GoldenKdaCuda : public ::testing::TestWithParam<Strategy> {};

TEST_P(GoldenKdaCuda, CasesAAndLowerBoundPassOnTheCudaBackend) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  expect_case_passes(kFile, GetParam(), "gate plain", Backend::kCuda);
  expect_case_passes(kFileLb, GetParam(), "gate lower bound -5", Backend::kCuda);
}

INSTANTIATE_TEST_SUITE_P(Strategies, GoldenKdaCuda,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         [](const auto& info) { return std::string(strategy_name(info.param)); });

// The case holds real numbers (a run of zeros would pass against zeros) and the degenerate
// tokens that tools/kda_golden.py promises.
TEST(GoldenKdaCase, IsNotAllZerosAndHoldsTheDegenerateTokens) {
  const GoldenCaseEditor e(kFile);
  const auto max_abs = [](const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  for (const std::string& name : e.names()) {
    if (name.rfind("ref_", 0) != 0) continue;
    EXPECT_GT(max_abs(e.floats(name)), 0.05f) << name;
  }
  EXPECT_EQ(e.ints("cache_indices"), (std::vector<int32_t>{4, 3, 1, 0, -1}));
  EXPECT_EQ(e.ints("accept_len"), (std::vector<int32_t>{1, 4, 2, 0, 0}));
  // Layer 1, row 2, token 0: q and k of key head 1 are exactly zero after the conv, and the
  // outputs stay finite (the l2 norm's eps is inside the sqrt).
  const std::vector<float> conv = e.floats("ref_conv_out.l1");
  const float* tok = &conv[(2 * kT + 0) * kD];
  for (int i = 0; i < kK; ++i) {
    EXPECT_EQ(tok[kK + i], 0.0f) << "q channel " << i;
    EXPECT_EQ(tok[kH * kK + kK + i], 0.0f) << "k channel " << i;
  }
  EXPECT_NE(tok[0], 0.0f);  // key head 0 is not degenerate
  for (float x : e.floats("ref_core_out.l1")) ASSERT_TRUE(std::isfinite(x));
  // Gate inputs at the softplus threshold 20 (layer 0) and beta logits of +-10 (both layers).
  const std::vector<float> g = e.floats("g.l0"), dt = e.floats("dt_bias.l0");
  int near_threshold = 0;
  for (int tok_i = 0; tok_i < kR * kT; ++tok_i) {
    for (int j = 0; j < kHV * kK; ++j) {
      near_threshold += std::fabs(g[tok_i * kHV * kK + j] + dt[j] - 20.0f) <= 0.011f;
    }
  }
  EXPECT_GE(near_threshold, 5);
  int plus10 = 0, minus10 = 0;
  for (const char* name : {"b.l0", "b.l1"}) {
    for (float b : e.floats(name)) {
      plus10 += b == 10.0f;
      minus10 += b == -10.0f;
    }
  }
  EXPECT_GE(plus10, 2);
  EXPECT_GE(minus10, 2);
}

// params_json names the kind; without `model` a g.l0 of rank 4 still makes the case KDA (a GDN
// case's g.l0 is [R, T, HV]).
TEST(GoldenKdaCase, RecognisedByModelOrByTheRankOfG) {
  GoldenCaseEditor e(kFile);
  e.edit_params("\"model\": \"kda\", ", "");
  const GoldenReport report = run_golden_case(e.to_case(), golden_options(Strategy::kSnapshot));
  const std::string text = golden_report_text(report);
  EXPECT_EQ(report.outcome, GoldenOutcome::kPass) << text;
  EXPECT_EQ(report.description.rfind("KDA chain", 0), 0u) << text;
}

// A lower bound past float32 (or below its smallest magnitude) is the case's error, naming the
// file's own value: read as -inf or -0, it was refused by the pool's check naming a value the
// file does not hold.
TEST(GoldenKdaCase, ALowerBoundOutsideFloat32IsTheCasesErrorNamingItsText) {
  for (const std::string bad : {"-1e300", "-1e-50", "0.5", "\"x\""}) {
    GoldenCaseEditor e(kFileLb);
    e.edit_params("\"lower_bound\": -5.0", "\"lower_bound\": " + bad);
    const GoldenReport report = run_golden_case(e.to_case(), golden_options(Strategy::kSnapshot));
    EXPECT_EQ(report.outcome, GoldenOutcome::kError) << bad << ": " << report.message;
    const std::string shown = bad == "-1e300" ? "-1e+300" : bad;  // (as nlohmann-json prints it)
    EXPECT_NE(report.message.find("params_json 'lower_bound' = " + shown + " must be finite"),
              std::string::npos)
        << report.message;
  }
}

TEST(GoldenKdaCli, PassesThroughTheBinaryForBothStrategies) {
  expect_cli_passes(SPECSTATE_CLI_PATH, kFile, "KDA chain");
}

}  // namespace
}  // namespace specstate::cli

#endif  // SPECSTATE_CLI_PATH
