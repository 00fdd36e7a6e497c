// Checks shared by the golden suites of every layer kind.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/golden_case.h"
#include "common/cli_run.h"
#include "specstate/safetensors.h"

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
  // A run that compared nothing would pass every loop below.
  ASSERT_FALSE(report.checks.empty()) << text;
  ASSERT_GE(report.tensors.size(), 3u) << text;
  for (const PropertyCheck& c : report.checks) EXPECT_TRUE(c.pass) << c.name << ": " << c.detail;
  ASSERT_EQ(report.checks.size(), f32.checks.size());
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

// --- helpers of the per-kind golden suites (tests/cpu/test_golden_*.cpp) -------------------

inline GoldenOptions golden_options(Strategy strategy, Backend backend = Backend::kCpu) {
  GoldenOptions o;
  o.backend = backend;
  o.strategy = strategy;
  return o;
}

inline GoldenReport run_golden_file(const std::string& path, Strategy strategy,
                                    Backend backend = Backend::kCpu) {
  std::vector<SafetensorsFile> parts;
  parts.emplace_back(path);
  return run_golden_case(make_golden_case(std::move(parts)), golden_options(strategy, backend));
}

inline std::string golden_report_text(const GoldenReport& report) {
  std::ostringstream out;
  print_golden_report(out, report);
  return out.str();
}

// The comparison of `tensor` in the report, or null.
inline const TensorComparison* find_comparison(const GoldenReport& report,
                                               const std::string& tensor) {
  for (const TensorComparison& t : report.tensors) {
    if (t.tensor == tensor) return &t;
  }
  return nullptr;
}

// An editable copy of a case file (every tensor as raw bytes, plus metadata), for the tests that
// corrupt a case and expect it to fail.
class GoldenCaseEditor {
 public:
  GoldenCaseEditor() = default;
  explicit GoldenCaseEditor(const std::string& path) {
    const SafetensorsFile file(path);
    metadata_ = file.metadata();
    for (const std::string& name : file.names()) {
      const SafetensorsTensorInfo& info = file.info(name);
      const uint8_t* data = file.raw_data(name);
      tensors_[name] = {name, info.dtype, info.shape,
                        std::vector<uint8_t>(data, data + (info.data_end - info.data_begin))};
    }
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& kv : tensors_) out.push_back(kv.first);
    return out;
  }
  // A tensor's raw bytes as 4-byte elements (f32 or i32).
  template <typename T>
  std::vector<T> values(const std::string& name) const {
    static_assert(sizeof(T) == 4, "f32 or i32 tensors");
    const auto& t = tensors_.at(name);
    std::vector<T> out(t.bytes.size() / 4);
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    return out;
  }
  std::vector<float> floats(const std::string& name) const { return values<float>(name); }
  void set_floats(const std::string& name, const std::vector<float>& values) {
    auto& t = tensors_.at(name);
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  }
  void edit(const std::string& name, const std::function<void(std::vector<float>&)>& fn) {
    std::vector<float> v = floats(name);
    fn(v);
    set_floats(name, v);
  }
  std::vector<int32_t> ints(const std::string& name) const { return values<int32_t>(name); }
  void set_ints(const std::string& name, const std::vector<int32_t>& values) {
    std::memcpy(tensors_.at(name).bytes.data(), values.data(), values.size() * 4);
  }
  std::map<std::string, std::string>& metadata() { return metadata_; }
  // Replaces `from` (which must occur) by `to` in params_json.
  void edit_params(const std::string& from, const std::string& to) {
    std::string& params = metadata_.at("params_json");
    const std::size_t at = params.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << params;
    params.replace(at, from.size(), to);
  }
  GoldenCase to_case() const {
    std::vector<SafetensorsFile::NewTensor> list;
    for (const auto& kv : tensors_) list.push_back(kv.second);
    std::vector<SafetensorsFile> parts;
    parts.push_back(SafetensorsFile::from_bytes(SafetensorsFile::serialize(list, metadata_),
                                                "edited.safetensors"));
    return make_golden_case(std::move(parts));
  }

 protected:
  std::map<std::string, SafetensorsFile::NewTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A corrupted copy of a golden case: `apply` edits it; the case must then fail, with the
// `failing` tensors failing and the `passing` ones still passing.
struct GoldenCorruption {
  const char* what;
  std::function<void(GoldenCaseEditor&)> apply;
  std::vector<const char*> failing;  // tensors that must fail
  std::vector<const char*> passing;  // tensors that must still pass
};

// The corruption every kind's suite makes: row 1 accepts one token fewer (its committed states
// change, its outputs do not).
inline GoldenCorruption shorter_acceptance_of_row_1() {
  return {"accepted length of row 1",
          [](GoldenCaseEditor& e) {
            std::vector<int32_t> a = e.ints("accept_len"), s = e.ints("last_step");
            a[1] -= 1;
            s[1] -= 1;
            e.set_ints("accept_len", a);
            e.set_ints("last_step", s);
          },
          {"ssm_state_committed", "conv_state_committed"},
          {"core_out", "conv_out"}};
}

// The tensors a passing case compares under `strategy`: outputs and committed states, and the
// intermediate snapshots under snapshot (replay keeps none).
inline std::vector<std::string> compared_tensors(Strategy strategy) {
  std::vector<std::string> expected = {"conv_out", "core_out", "conv_state_committed",
                                       "ssm_state_committed"};
  if (strategy == Strategy::kSnapshot) {
    expected.push_back("inter_conv_window");
    expected.push_back("inter_ssm");
  }
  return expected;
}

// The binary `cli` passes `file` under both strategies, its report naming `description`.
inline void expect_cli_passes(const std::string& cli, const std::string& file,
                              const std::string& description) {
  for (const char* strategy : {"snapshot", "replay"}) {
    const test::CliRun run = test::run_command(
        cli, std::string("check-golden --strategy ") + strategy + " '" + file + "'");
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("1 passed, 0 failed"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(description), std::string::npos) << run.output;
  }
}

inline void expect_corruptions_fail(const std::string& file, Strategy strategy,
                                    const std::vector<GoldenCorruption>& corruptions) {
  for (const GoldenCorruption& c : corruptions) {
    SCOPED_TRACE(c.what);
    GoldenCaseEditor e(file);
    c.apply(e);
    const GoldenReport report = run_golden_case(e.to_case(), golden_options(strategy));
    const std::string text = golden_report_text(report);
    EXPECT_EQ(report.outcome, GoldenOutcome::kFail) << text;
    for (const char* name : c.failing) {
      ASSERT_NE(find_comparison(report, name), nullptr) << name;
      EXPECT_FALSE(find_comparison(report, name)->pass) << name << " passed\n" << text;
    }
    for (const char* name : c.passing) {
      ASSERT_NE(find_comparison(report, name), nullptr) << name;
      EXPECT_TRUE(find_comparison(report, name)->pass) << name << " failed\n" << text;
    }
  }
}

}  // namespace specstate::cli
