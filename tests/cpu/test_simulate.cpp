// `specstate simulate`: the simulation in-process (report schema, acceptance statistics equal
// to the trace's, memory equal to the pool's, states checked against plain prefill) and the
// command line (exit codes, usage messages naming the argument, --out files).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/simulate.h"
#include "common/cli_run.h"
#include "spec/trace.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

using test::CliRun;

CliRun run_cli(const std::string& args) { return test::run_command(SPECSTATE_CLI_PATH, args); }

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

TEST(Simulate, ReportSchemaAndStatistics) {
  SimulateOptions o;
  o.model = "tiny";
  o.requests = 3;
  o.rounds = 12;
  o.window = 4;
  o.accept_rate = 0.6;
  o.seed = 5;
  const auto report = run_simulation(o, nullptr);
  for (const char* key : {"tool", "report_version", "specstate_version", "options", "model",
                          "trace", "acceptance", "memory", "timing", "bytes", "check", "rounds"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  // The acceptance statistics are the generated trace's.
  spec::TraceShape shape;
  shape.requests = 3;
  shape.rounds = 12;
  shape.window = spec::Window::chain(4);
  shape.seed = 5;
  const spec::Trace trace = spec::generate_geometric(shape, 0.6);
  EXPECT_EQ(report["acceptance"]["histogram"].get<std::vector<int64_t>>(),
            trace.accepted_histogram());
  EXPECT_DOUBLE_EQ(report["acceptance"]["mean_accepted_length"].get<double>(),
                   trace.mean_accepted_length());
  EXPECT_DOUBLE_EQ(report["acceptance"]["tokens_per_round"].get<double>(),
                   3 * trace.mean_accepted_length());
  // Memory: what a pool of that shape holds.
  GdnConfig g;
  g.num_k_heads = 1;
  g.num_v_heads = 2;
  g.head_k_dim = 16;
  g.head_v_dim = 16;
  g.act_dtype = g.conv_state_dtype = DType::kF32;
  PoolOptions po;
  po.num_slots = 3;
  po.max_rows = 3;
  po.max_window = 4;
  const StatePool pool(ModelConfig::gated_delta_net(2, g), po);
  EXPECT_EQ(report["memory"]["committed_bytes"].get<int64_t>(), pool.committed_bytes());
  EXPECT_EQ(report["memory"]["scratch_bytes"].get<int64_t>(), pool.scratch_bytes());
  EXPECT_EQ(report["memory"]["committed_bytes_per_request"].get<int64_t>(),
            pool.committed_bytes() / 3);
  // Rounds and timing.
  ASSERT_EQ(report["rounds"].size(), 12u);
  double verify = 0;
  int64_t vbytes = 0;
  for (const auto& r : report["rounds"]) {
    EXPECT_EQ(r["live_rows"].get<int>(), 3);
    EXPECT_EQ(r["rows"].get<int>(), 3);
    EXPECT_GT(r["verify_seconds"].get<double>(), 0.0);
    EXPECT_GE(r["commit_seconds"].get<double>(), 0.0);
    verify += r["verify_seconds"].get<double>();
    vbytes += r["verify_bytes"].get<int64_t>();
  }
  EXPECT_NEAR(report["timing"]["verify_seconds"].get<double>(), verify, 1e-12);
  // Verify moves at least (1 + T) states per live row per layer.
  const int64_t per_layer = pool.committed_bytes() / 3 / 2;
  EXPECT_EQ(vbytes, int64_t{12} * 3 * 2 * per_layer * 5);
  EXPECT_FALSE(report["check"]["ran"].get<bool>());
}

TEST(Simulate, CheckPassesForChainsAndTrees) {
  SimulateOptions o;
  o.model = "tiny";
  o.requests = 5;  // padded to the bucket 5 (1, 2, 4, 5)
  o.rounds = 6;
  o.check = true;
  auto report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  EXPECT_TRUE(report["check"]["bit_identical"].get<bool>());
  EXPECT_TRUE(report["check"]["state_norm_nonzero"].get<bool>());
  // Warm-up rounds commit a = 0 (tree: -1), which must leave every committed state as it was.
  o.warmup = 3;
  report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  o.tree = "-1,0,0,1,2";
  o.accept_rate = 0.9;
  report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  EXPECT_EQ(report["trace"]["max_window"].get<int>(), 5);
}

TEST(Simulate, ReplaysATraceFileWithPaddingRowsAndZeroAcceptance) {
  // Request 2 stops after one round: later rounds run 2 live rows in a bucket of 2, then 1 row.
  const std::string path = ::testing::TempDir() + "specstate_simulate_trace.jsonl";
  {
    std::ofstream out(path);
    out << R"({"format": "specstate-trace", "version": 1, "requests": [10, 11, 12]})"
           "\n"
        << R"({"request": 10, "round": 0, "window": 3, "accepted": 3})"
           "\n"
        << R"({"request": 11, "round": 0, "window": 3, "accepted": 0})"
           "\n"
        << R"({"request": 12, "round": 0, "window": 2, "accepted": 1})"
           "\n"
        << R"({"request": 10, "round": 1, "window": 3, "accepted": 2})"
           "\n"
        << R"({"request": 11, "round": 1, "window": 4, "parents": [-1, 0, 0, 2], "path": [0, 2, 3]})"
           "\n"
        << R"({"request": 10, "round": 2, "window": 3, "accepted": 1})"
           "\n";
  }
  SimulateOptions o;
  o.model = "tiny";
  o.trace_path = path;
  o.check = true;
  const auto report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  ASSERT_EQ(report["rounds"].size(), 3u);
  EXPECT_EQ(report["rounds"][0]["live_rows"].get<int>(), 3);
  EXPECT_EQ(report["rounds"][1]["live_rows"].get<int>(), 2);
  EXPECT_EQ(report["rounds"][1]["window"].get<int>(), 4);
  EXPECT_EQ(report["rounds"][2]["rows"].get<int>(), 1);
  EXPECT_EQ(report["acceptance"]["histogram"].get<std::vector<int64_t>>(),
            (std::vector<int64_t>{1, 2, 1, 2, 0}));
  EXPECT_EQ(report["acceptance"]["tokens_total"].get<int64_t>(), 3 + 0 + 1 + 2 + 3 + 1);
  std::remove(path.c_str());
}

TEST(Simulate, SvgHasBothPlots) {
  SimulateOptions o;
  o.model = "tiny";
  o.rounds = 4;
  const std::string svg = render_svg(run_simulation(o, nullptr));
  EXPECT_TRUE(contains(svg, "<svg"));
  EXPECT_TRUE(contains(svg, "Accepted length"));
  EXPECT_TRUE(contains(svg, "Time per round"));
  EXPECT_TRUE(contains(svg, "</svg>"));
}

TEST(SimulateCli, DefaultRunSucceeds) {
  const CliRun run = run_cli("simulate --check");
  EXPECT_EQ(run.code, 0) << run.output;
  for (const char* f : {"tokens per round", "accepted length histogram", "committed", "scratch",
                        "verify", "commit", "bytes moved", "check", "PASS"}) {
    EXPECT_TRUE(contains(run.output, f)) << f << " missing in\n" << run.output;
  }
  // Not a terminal: no progress bar.
  EXPECT_FALSE(contains(run.output, "] 32/32 rounds"));
}

TEST(SimulateCli, OutWritesReportAndPlot) {
  const std::string base = ::testing::TempDir() + "specstate_sim_report";
  std::remove((base + ".json").c_str());
  std::remove((base + ".svg").c_str());
  const CliRun run = run_cli("simulate --model tiny --rounds 5 --fixed 2 --out " + base + ".json");
  ASSERT_EQ(run.code, 0) << run.output;
  std::ifstream json_in(base + ".json"), svg_in(base + ".svg");
  ASSERT_TRUE(json_in.good());
  ASSERT_TRUE(svg_in.good());
  const auto report = nlohmann::json::parse(json_in);
  EXPECT_EQ(report["tool"], "specstate simulate");
  EXPECT_EQ(report["rounds"].size(), 5u);
  EXPECT_EQ(report["acceptance"]["histogram"][2].get<int>(), 8 * 5);
  EXPECT_EQ(report["trace"]["meta"]["generator"], "fixed");
  std::stringstream svg;
  svg << svg_in.rdbuf();
  EXPECT_TRUE(contains(svg.str(), "<svg"));
}

TEST(SimulateCli, HistogramGeneratorAndSavedTraceReplay) {
  const std::string path = ::testing::TempDir() + "specstate_saved_trace.jsonl";
  std::remove(path.c_str());
  CliRun run = run_cli(
      "simulate --model tiny --requests 3 --rounds 40 --histogram 1,0,3 "
      "--seed 9 --save-trace " +
      path);
  ASSERT_EQ(run.code, 0) << run.output;
  const spec::Trace saved = spec::read_trace(path);
  ASSERT_EQ(saved.records.size(), 120u);
  const auto hist = saved.accepted_histogram();
  EXPECT_EQ(hist[2], 0);  // weight 0
  EXPECT_EQ(hist[4], 0);  // no weight given for a = 4
  EXPECT_GT(hist[3], hist[1]);
  EXPECT_NE(saved.meta_json.find("empirical"), std::string::npos);
  // Replaying the saved trace gives the same acceptance statistics.
  SimulateOptions o;
  o.model = "tiny";
  o.trace_path = path;
  const auto report = run_simulation(o, nullptr);
  EXPECT_EQ(report["acceptance"]["histogram"].get<std::vector<int64_t>>(), hist);
  std::remove(path.c_str());
}

TEST(SimulateCli, BadArgumentsExitTwoNamingTheArgument) {
  struct Bad {
    const char* args;
    const char* names;
  };
  const Bad cases[] = {
      {"simulate --window 0", "--window"},
      {"simulate --window abc", "--window"},
      {"simulate --requests 0", "--requests"},
      {"simulate --rounds -3", "--rounds"},
      {"simulate --accept-rate 1.5", "--accept-rate"},
      {"simulate --model gpt5", "--model"},
      {"simulate --model qwen3-next-80b --tp 3", "--tp"},
      {"simulate --backend tpu", "--backend"},
      {"simulate --trace /nonexistent/trace.jsonl", "--trace"},
      {"simulate --fixed 9 --window 4", "--fixed"},
      {"simulate --fixed 2 --accept-rate 0.5", "--fixed"},
      {"simulate --tree=-1,0,x", "--tree"},
      {"simulate --tree=-1,2", "--tree"},
      {"simulate --tree=-1,0 --window 3", "--tree"},
      {"simulate --no-such-flag", "--no-such-flag"},
      {"simulate --histogram 1,x", "--histogram"},
      {"simulate --histogram 0,0", "--histogram"},
      {"simulate --histogram 1,1,1,1,1 --window 4", "--histogram"},
      {"simulate --histogram 1,1 --accept-rate 0.5", "--histogram"},
      {"simulate --save-trace /nonexistent/dir/t.jsonl", "--save-trace"},
  };
  for (const Bad& b : cases) {
    const CliRun run = run_cli(b.args);
    EXPECT_EQ(run.code, 2) << b.args << "\n" << run.output;
    EXPECT_TRUE(contains(run.output, b.names)) << b.args << "\n" << run.output;
  }
}

TEST(SimulateCli, TraceOptionsExcludeGeneratorOptions) {
  const std::string path = ::testing::TempDir() + "specstate_cli_trace.jsonl";
  {
    std::ofstream out(path);
    out << R"({"format": "specstate-trace", "version": 1, "requests": [0]})"
           "\n"
        << R"({"request": 0, "round": 0, "window": 2, "accepted": 2})"
           "\n";
  }
  CliRun run = run_cli("simulate --model tiny --trace " + path);
  EXPECT_EQ(run.code, 0) << run.output;
  run = run_cli("simulate --model tiny --trace " + path + " --window 4");
  EXPECT_EQ(run.code, 2) << run.output;
  // A malformed trace: a clear error with the line number, exit 1 (bad input data, not usage).
  {
    std::ofstream out(path);
    out << R"({"format": "specstate-trace", "version": 1, "requests": [0]})"
           "\n"
        << R"({"request": 0, "round": 0, "window": 2, "accepted": 3})"
           "\n";
  }
  run = run_cli("simulate --model tiny --trace " + path);
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, ":2: field \"accepted\" = 3")) << run.output;
  std::remove(path.c_str());
}

TEST(SimulateCli, CudaBackendOnlyWhereBuilt) {
  const std::string out = ::testing::TempDir() + "specstate_sim_cuda.json";
  const CliRun run =
      run_cli("simulate --model tiny --rounds 2 --quiet --backend cuda --out " + out);
#ifndef SPECSTATE_TEST_HAVE_CUDA
  // Without the CUDA backend: a usage error naming --backend, never a silent CPU run.
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_TRUE(contains(run.output, "--backend")) << run.output;
  EXPECT_TRUE(contains(run.output, "no CUDA backend")) << run.output;
#else
  if (run.code == 0) {
    // It ran: the report must say the state lived on the device.
    std::ifstream in(out);
    const auto report = nlohmann::ordered_json::parse(in);
    EXPECT_EQ(report["options"]["backend"].get<std::string>(), "cuda");
    EXPECT_EQ(report["memory"]["state_device"].get<std::string>(), "cuda");
  } else {
    // No device here: a clear error, not exit 0 on the CPU.
    EXPECT_TRUE(contains(run.output, "cuda") || contains(run.output, "CUDA")) << run.output;
  }
#endif
  std::remove(out.c_str());
  std::remove((::testing::TempDir() + "specstate_sim_cuda.svg").c_str());
}

TEST(Simulate, ReportsWhereTheStateLives) {
  SimulateOptions o;
  o.model = "tiny";
  o.rounds = 2;
  const auto report = run_simulation(o, nullptr);
  EXPECT_EQ(report["memory"]["state_device"].get<std::string>(), "cpu");
}

}  // namespace
}  // namespace specstate::cli
