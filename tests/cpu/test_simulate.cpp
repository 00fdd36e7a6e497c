// `specstate simulate`: the simulation in-process (report schema, acceptance statistics equal
// to the trace's, memory and bytes computed here by hand, states checked against plain prefill,
// --strategy snapshot|replay|both) and the command line (exit codes, usage messages naming the
// argument, --out files).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/simulate.h"
#include "cli_checks.h"
#include "common/cli_run.h"
#include "specstate/spec/trace.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

using test::CliRun;

CliRun run_cli(const std::string& args) { return test::run_command(SPECSTATE_CLI_PATH, args); }

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

// The tiny preset's sizes, by hand (not from the code under test): 2 GDN layers, H=1, HV=2,
// K=V=16, W=4, everything f32. conv_dim = 2*1*16 + 2*16 = 64.
constexpr int64_t kTinyLayers = 2;
constexpr int64_t kTinyConvLayer = 64 * 3 * 4;                       // conv_dim x (W-1) x f32
constexpr int64_t kTinySsmLayer = 2 * 16 * 16 * 4;                   // HV x V x K x f32
constexpr int64_t kTinyStateLayer = kTinyConvLayer + kTinySsmLayer;  // 2816
// Replay v2 records of one token and layer (DESIGN.md section 4): the conv record is the token's
// conv input, conv_dim x f32; the factor record is kernels::gdn_factor_layout's: u f32 [HV][V]
// at 0, e^g f32 [HV] at 128, kf f32 [H] at 136, then k f32 [H][K] at 144 (140 padded to 16 B),
// 208 in all (a multiple of 16: no tail padding).
constexpr int64_t kTinyConvRecord = 64 * 4;                           // conv_dim x f32 = 256
constexpr int64_t kTinyFactorRecord = 2 * 16 * 4                      // u
                                      + 2 * 4                         // e^g
                                      + 1 * 4                         // kf
                                      + 4                             // padding: k starts at 144
                                      + 1 * 16 * 4;                   // k; 208
constexpr int64_t kTinyRecord = kTinyConvRecord + kTinyFactorRecord;  // 464

GdnConfig tiny_gdn() {
  GdnConfig g;
  g.num_k_heads = 1;
  g.num_v_heads = 2;
  g.head_k_dim = 16;
  g.head_v_dim = 16;
  g.act_dtype = g.conv_state_dtype = DType::kF32;
  return g;
}

// Replay workspace of the tiny preset, per slot: in every layer the conv records of a window,
// a ring of R = default_replay_ring(kGatedDeltaNet, window) factor records (the pool's default), a
// pending count and a cursor (base, h) (3 x int32); and the path (an int32 per window token).
int64_t tiny_replay_workspace(int64_t slots, int64_t window) {
  const int64_t ring = default_replay_ring(LayerKind::kGatedDeltaNet, window);
  return slots *
         (kTinyLayers * (window * kTinyConvRecord + ring * kTinyFactorRecord + 12) + window * 4);
}
// Snapshot workspace: the state after every window token, per row and layer.
int64_t tiny_snapshot_workspace(int64_t rows, int64_t window) {
  return kTinyLayers * rows * window * kTinyStateLayer;
}

// Accepted lengths of a JSON Lines trace, read with nlohmann (not the trace reader under test).
std::vector<int64_t> accepted_lengths(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<int64_t> out;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (header) {
      header = false;
      continue;
    }
    out.push_back(j.contains("accepted") ? j["accepted"].get<int64_t>()
                                         : static_cast<int64_t>(j["path"].size()));
  }
  return out;
}

TEST(Simulate, ReportSchemaAndStatistics) {
  const std::string saved = ::testing::TempDir() + "specstate_schema_trace.jsonl";
  SimulateOptions o;
  o.model = "tiny";
  o.requests = 3;
  o.rounds = 12;
  o.window = 4;
  o.accept_rate = 0.6;
  o.seed = 5;
  o.save_trace = saved;
  const auto report = run_simulation(o, nullptr);
  for (const char* key : {"tool", "report_version", "specstate_version", "options", "model",
                          "trace", "acceptance", "memory", "timing", "bytes", "check", "rounds"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  EXPECT_FALSE(report.contains("strategies"));
  EXPECT_EQ(report["options"]["strategy"].get<std::string>(), "snapshot");
  // The acceptance statistics are those of the trace it replayed (read back independently).
  const std::vector<int64_t> lengths = accepted_lengths(saved);
  ASSERT_EQ(lengths.size(), 36u);
  std::vector<int64_t> histogram(5, 0);
  int64_t tokens = 0, advancing = 0;
  for (int64_t a : lengths) {
    ++histogram.at(static_cast<std::size_t>(a));
    tokens += a;
    advancing += a > 0;
  }
  EXPECT_GT(histogram[0] + histogram[1] + histogram[2] + histogram[3], 0);  // not all a = 4
  EXPECT_EQ(report["acceptance"]["histogram"].get<std::vector<int64_t>>(), histogram);
  EXPECT_EQ(report["acceptance"]["tokens_total"].get<int64_t>(), tokens);
  EXPECT_DOUBLE_EQ(report["acceptance"]["mean_accepted_length"].get<double>(), tokens / 36.0);
  EXPECT_DOUBLE_EQ(report["acceptance"]["tokens_per_round"].get<double>(), tokens / 12.0);
  // Memory: by hand, and what a real pool of that shape holds.
  const int64_t committed = 3 * kTinyLayers * kTinyStateLayer;  // 16,896
  EXPECT_EQ(report["memory"]["committed_bytes"].get<int64_t>(), committed);
  EXPECT_EQ(report["memory"]["scratch_bytes"].get<int64_t>(), tiny_snapshot_workspace(3, 4));
  EXPECT_EQ(report["memory"]["workspace_bytes"].get<int64_t>(), tiny_snapshot_workspace(3, 4));
  EXPECT_EQ(report["memory"]["committed_bytes_per_request"].get<int64_t>(), committed / 3);
  EXPECT_EQ(report["memory"]["scratch_bytes_per_row"].get<int64_t>(),
            kTinyLayers * 4 * kTinyStateLayer);
  PoolOptions po;
  po.num_slots = 3;
  po.max_rows = 3;
  po.max_window = 4;
  const StatePool pool(ModelConfig::gated_delta_net(2, tiny_gdn()), po);
  EXPECT_EQ(pool.committed_bytes(), committed);
  EXPECT_EQ(pool.workspace_bytes(), tiny_snapshot_workspace(3, 4));
  // Rounds and timing.
  ASSERT_EQ(report["rounds"].size(), 12u);
  double verify = 0;
  int64_t vbytes = 0, cbytes = 0;
  for (const auto& r : report["rounds"]) {
    EXPECT_EQ(r["live_rows"].get<int>(), 3);
    EXPECT_EQ(r["rows"].get<int>(), 3);
    EXPECT_GT(r["verify_seconds"].get<double>(), 0.0);
    EXPECT_GE(r["commit_seconds"].get<double>(), 0.0);
    verify += r["verify_seconds"].get<double>();
    vbytes += r["verify_bytes"].get<int64_t>();
    cbytes += r["commit_bytes"].get<int64_t>();
  }
  EXPECT_NEAR(report["timing"]["verify_seconds"].get<double>(), verify, 1e-12);
  // Snapshot: verify moves (1 + T) states per live row-layer, commit 2 per advancing row-layer.
  EXPECT_EQ(vbytes, int64_t{12} * 3 * kTinyLayers * kTinyStateLayer * 5);
  EXPECT_EQ(cbytes, advancing * kTinyLayers * kTinyStateLayer * 2);
  EXPECT_EQ(report["bytes"]["verify_bytes"].get<int64_t>(), vbytes);
  EXPECT_EQ(report["bytes"]["commit_bytes"].get<int64_t>(), cbytes);
  EXPECT_FALSE(report["check"]["ran"].get<bool>());
  std::remove(saved.c_str());
}

// The examples' shared median (simulate's p50, tp_verify_loop's "median verify"): the mean of
// the two middle values for an even count (tp_verify_loop kept v[n / 2], the upper one, after
// simulate's was fixed).
TEST(Simulate, TheExamplesMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(examples::median({}), 0.0);
  EXPECT_EQ(examples::median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(examples::median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(examples::median({5.0, 7.0}), 6.0);
}

// Replay's report keeps the single-strategy keys; memory and the bytes model by hand.
// The p50 of an even number of rounds is the mean of the two middle ones (it was the upper one:
// two rounds printed the slower as their median).
TEST(Simulate, TheMedianOfTwoRoundsIsTheirMean) {
  SimulateOptions o;
  o.model = "tiny";
  o.requests = 2;
  o.rounds = 2;
  o.warmup = 0;
  const auto report = run_simulation(o, nullptr);
  for (const char* what : {"verify_seconds_per_round", "commit_seconds_per_round"}) {
    const auto& t = report["timing"][what];
    EXPECT_GT(t["max"].get<double>(), 0.0) << what;
    EXPECT_DOUBLE_EQ(t["p50"].get<double>(), t["mean"].get<double>()) << what;
  }
}

TEST(Simulate, ReplayReportMemoryAndBytesModel) {
  SimulateOptions o;
  o.model = "tiny";
  o.strategy = "replay";
  o.requests = 3;
  o.rounds = 5;
  o.window = 4;
  o.fixed = 2;
  const auto report = run_simulation(o, nullptr);
  EXPECT_FALSE(report.contains("strategies"));
  EXPECT_EQ(report["options"]["strategy"].get<std::string>(), "replay");
  const auto& mem = report["memory"];
  EXPECT_EQ(mem["committed_bytes"].get<int64_t>(), 3 * kTinyLayers * kTinyStateLayer);
  EXPECT_EQ(mem["workspace_bytes"].get<int64_t>(), tiny_replay_workspace(3, 4));  // 21,240
  // 3 slots x (2 layers x (4 conv records + R = 12 factor records + 12 B of counts) + 4 path
  // entries).
  EXPECT_EQ(mem["workspace_bytes"].get<int64_t>(), 3 * (2 * (4 * 256 + 12 * 208 + 12) + 4 * 4));
  EXPECT_EQ(mem["records_bytes_per_slot"].get<int64_t>(), tiny_replay_workspace(1, 4));
  EXPECT_EQ(mem["scratch_bytes_per_row"].get<int64_t>(), 0);
  PoolOptions po;
  po.num_slots = 3;
  po.max_rows = 3;
  po.max_window = 4;
  po.strategy = Strategy::kReplay;
  const StatePool pool(ModelConfig::gated_delta_net(2, tiny_gdn()), po);
  EXPECT_EQ(pool.workspace_bytes(), tiny_replay_workspace(3, 4));
  // Replay v2 (DESIGN.md sections 6 and 8), R = 3T = 12, but rounds of 3 rows fold at the small
  // limit (replay_fold_limit: max(2T, 6) - 2T = 0), so a verify folds iff h > 0.
  // Every round the 3 live rows read their checkpoint (conv window + SSM state) once per layer
  // and write the window's 4 records (conv + factor) per layer. Round 0 has h = 0 and no pending
  // conv steps: no fold, nothing else. From round 1 on each row has h = 2 (the last commit's
  // a = 2): it reads back 2 history factor records and 2 pending conv records, and writes the
  // conv window (after its pending steps) and the SSM checkpoint (the fold).
  const int64_t base = 3 * kTinyLayers * (kTinyStateLayer + 4 * kTinyRecord);
  ASSERT_EQ(report["rounds"].size(), 5u);
  for (std::size_t r = 0; r < 5; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const int64_t replayed = r == 0 ? 0 : 3 * 2;  // history = pending conv records, all rows
    const int64_t folded = r == 0 ? 0 : 3;        // rows writing their checkpoint
    EXPECT_EQ(report["rounds"][r]["verify_bytes"].get<int64_t>(),
              base + replayed * kTinyLayers * kTinyRecord + folded * kTinyLayers * kTinyStateLayer);
    EXPECT_EQ(report["rounds"][r]["commit_bytes"].get<int64_t>(), 0);
  }
  // The last commit's steps (h = 2 per slot) are applied by the final materialize: per slot and
  // layer the state read and written once and 2 factor + 2 conv records read.
  EXPECT_EQ(report["bytes"]["materialize_bytes"].get<int64_t>(),
            3 * kTinyLayers * 2 * kTinyStateLayer + 3 * 2 * kTinyLayers * kTinyRecord);
  EXPECT_GE(report["timing"]["materialize_seconds"].get<double>(), 0.0);
}

TEST(Simulate, ReplayCheckPassesForChainsTreesAndTraceFiles) {
  SimulateOptions o;
  o.model = "tiny";
  o.strategy = "replay";
  o.requests = 5;
  o.rounds = 6;
  o.check = true;
  auto report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  EXPECT_TRUE(report["check"]["bit_identical"].get<bool>());
  EXPECT_TRUE(report["check"]["state_norm_nonzero"].get<bool>());
  o.tree = "-1,0,0,1,2";
  o.accept_rate = 0.9;
  report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
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

// --strategy both: the same trace through each strategy; --check proves each against plain
// prefill and the two against each other, bit for bit.
TEST(Simulate, BothRunsEachStrategyAndChecksThemAgainstEachOther) {
  for (const char* tree : {"", "-1,0,0,1,2"}) {
    SCOPED_TRACE(std::string("tree ") + tree);
    SimulateOptions o;
    o.model = "tiny";
    o.strategy = "both";
    o.requests = 5;
    o.rounds = 7;
    o.tree = tree;
    o.accept_rate = 0.8;
    o.check = true;
    const auto report = run_simulation(o, nullptr);
    ASSERT_TRUE(report.contains("strategies"));
    EXPECT_EQ(report["options"]["strategy"].get<std::string>(), "both");
    const int T = *tree ? 5 : 4;
    for (const char* name : {"snapshot", "replay"}) {
      SCOPED_TRACE(name);
      const auto& s = report["strategies"][name];
      for (const char* key : {"memory", "timing", "bytes", "check", "rounds"}) {
        EXPECT_TRUE(s.contains(key)) << key;
      }
      EXPECT_EQ(s["rounds"].size(), 7u);
      EXPECT_TRUE(s["check"]["passed"].get<bool>()) << s["check"].dump();
      EXPECT_TRUE(s["check"]["bit_identical"].get<bool>());
      EXPECT_EQ(s["memory"]["committed_bytes"].get<int64_t>(), 5 * kTinyLayers * kTinyStateLayer);
    }
    EXPECT_EQ(report["strategies"]["snapshot"]["memory"]["workspace_bytes"].get<int64_t>(),
              tiny_snapshot_workspace(5, T));
    EXPECT_EQ(report["strategies"]["replay"]["memory"]["workspace_bytes"].get<int64_t>(),
              tiny_replay_workspace(5, T));
    // The bytes models differ the way DESIGN.md section 8 says: replay never moves a state in
    // commit, and moves fewer bytes per round whenever T >= 2.
    EXPECT_EQ(report["strategies"]["replay"]["bytes"]["commit_bytes"].get<int64_t>(), 0);
    EXPECT_GT(report["strategies"]["snapshot"]["bytes"]["commit_bytes"].get<int64_t>(), 0);
    EXPECT_LT(report["strategies"]["replay"]["bytes"]["verify_bytes"].get<int64_t>(),
              report["strategies"]["snapshot"]["bytes"]["verify_bytes"].get<int64_t>());
    const auto& chk = report["check"];
    EXPECT_TRUE(chk["ran"].get<bool>());
    EXPECT_TRUE(chk["passed"].get<bool>()) << chk.dump();
    EXPECT_TRUE(chk["strategies_passed"].get<bool>());
    EXPECT_TRUE(chk["outputs_identical"].get<bool>());
    EXPECT_TRUE(chk["committed_states_identical"].get<bool>());
    EXPECT_TRUE(chk["difference"].is_null());
    // Not vacuous: every timed round and every request was compared.
    EXPECT_EQ(chk["compared_rounds"].get<int64_t>(), 7);
    EXPECT_EQ(chk["compared_requests"].get<int64_t>(), 5);
  }
}

TEST(Simulate, BothWithoutCheckComparesNothing) {
  SimulateOptions o;
  o.model = "tiny";
  o.strategy = "both";
  o.rounds = 3;
  const auto report = run_simulation(o, nullptr);
  EXPECT_FALSE(report["check"]["ran"].get<bool>());
  EXPECT_FALSE(report.contains("memory"));  // per strategy, under "strategies"
  EXPECT_TRUE(report["strategies"]["snapshot"].contains("memory"));
  EXPECT_TRUE(report["strategies"]["replay"].contains("memory"));
}

TEST(Simulate, BadStrategyNamesTheOption) {
  SimulateOptions o;
  o.model = "tiny";
  o.strategy = "foo";
  try {
    run_simulation(o, nullptr);
    FAIL() << "accepted --strategy foo";
  } catch (const CLI::ValidationError& e) {
    EXPECT_TRUE(contains(e.what(), "--strategy")) << e.what();
    EXPECT_TRUE(contains(e.what(), "foo")) << e.what();
  }
}

// A trace file: one JSON object per line.
void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << "\n";
}

TEST(Simulate, ReplaysATraceFileWithPaddingRowsAndZeroAcceptance) {
  // Request 2 stops after one round: later rounds run 2 live rows in a bucket of 2, then 1 row.
  const std::string path = ::testing::TempDir() + "specstate_simulate_trace.jsonl";
  write_lines(
      path,
      {
          R"({"format": "specstate-trace", "version": 1, "requests": [10, 11, 12]})",
          R"({"request": 10, "round": 0, "window": 3, "accepted": 3})",
          R"({"request": 11, "round": 0, "window": 3, "accepted": 0})",
          R"({"request": 12, "round": 0, "window": 2, "accepted": 1})",
          R"({"request": 10, "round": 1, "window": 3, "accepted": 2})",
          R"({"request": 11, "round": 1, "window": 4, "parents": [-1, 0, 0, 2], "path": [0, 2, 3]})",
          R"({"request": 10, "round": 2, "window": 3, "accepted": 1})",
      });
  SimulateOptions o;
  o.model = "tiny";
  o.trace_path = path;
  o.check = true;
  // Under both strategies (a slot that sits out rounds keeps replay's pending steps).
  o.strategy = "both";
  const auto both = run_simulation(o, nullptr);
  EXPECT_TRUE(both["check"]["passed"].get<bool>()) << both["check"].dump();
  o.strategy = "snapshot";
  const auto report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  ASSERT_EQ(report["rounds"].size(), 3u);
  EXPECT_EQ(report["rounds"][0]["live_rows"].get<int>(), 3);
  EXPECT_EQ(report["rounds"][1]["live_rows"].get<int>(), 2);
  EXPECT_EQ(report["rounds"][1]["window"].get<int>(), 4);
  EXPECT_EQ(report["rounds"][2]["rows"].get<int>(), 1);
  // Windows of depth 3 at most (chains of 3, a 4-node tree of depth 3): a = 0..3 only.
  EXPECT_EQ(report["acceptance"]["histogram"].get<std::vector<int64_t>>(),
            (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(report["acceptance"]["tokens_total"].get<int64_t>(), 3 + 0 + 1 + 2 + 3 + 1);
  std::remove(path.c_str());
}

// --packing variable: rows of different windows verify only their own tokens (no filler), with
// the same committed states (checked against prefill, and both strategies bit for bit).
TEST(Simulate, VariablePackingVerifiesNoFillerTokens) {
  const std::string path = ::testing::TempDir() + "specstate_simulate_varlen.jsonl";
  write_lines(
      path,
      {
          R"({"format": "specstate-trace", "version": 1, "requests": [1, 2, 3]})",
          R"({"request": 1, "round": 0, "window": 4, "accepted": 3})",
          R"({"request": 2, "round": 0, "window": 1, "accepted": 1})",
          R"({"request": 3, "round": 0, "window": 2, "accepted": 0})",
          R"({"request": 1, "round": 1, "window": 2, "accepted": 2})",
          R"({"request": 2, "round": 1, "window": 4, "parents": [-1, 0, 0, 2], "path": [0, 2, 3]})",
      });
  SimulateOptions o;
  o.model = "tiny";
  o.trace_path = path;
  o.check = true;
  o.strategy = "both";
  o.packing = "variable";
  const auto both = run_simulation(o, nullptr);
  EXPECT_TRUE(both["check"]["passed"].get<bool>()) << both["check"].dump();
  o.strategy = "snapshot";
  const auto var = run_simulation(o, nullptr);
  o.packing = "padded";
  const auto pad = run_simulation(o, nullptr);
  EXPECT_TRUE(var["check"]["passed"].get<bool>()) << var["check"].dump();
  ASSERT_EQ(var["rounds"].size(), 2u);
  // Round 0: 4 + 1 + 2 tokens (padded: 3 rows of 4; the buckets are 1, 2, 3); round 1: 2 + 4
  // (padded: 2 rows of 4).
  EXPECT_EQ(var["rounds"][0]["verified_tokens"].get<int64_t>(), 7);
  EXPECT_EQ(var["rounds"][1]["verified_tokens"].get<int64_t>(), 6);
  EXPECT_EQ(pad["rounds"][0]["verified_tokens"].get<int64_t>(), 12);
  EXPECT_EQ(pad["rounds"][1]["verified_tokens"].get<int64_t>(), 8);
  // Snapshot bytes: (1 + the row's tokens) states per live row-layer.
  EXPECT_EQ(var["rounds"][0]["verify_bytes"].get<int64_t>(),
            (3 + 7) * kTinyLayers * kTinyStateLayer);
  EXPECT_EQ(pad["rounds"][0]["verify_bytes"].get<int64_t>(), 3 * 5 * kTinyLayers * kTinyStateLayer);
  EXPECT_EQ(var["acceptance"]["tokens_total"].get<int64_t>(),
            pad["acceptance"]["tokens_total"].get<int64_t>());
  o.packing = "none";
  EXPECT_THROW(run_simulation(o, nullptr), CLI::ValidationError);
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

// A tree of 4 nodes whose deepest path has 3 nodes accepts 0..3 tokens: a = 4 is no bar.
TEST(Simulate, TreeHistogramShowsOnlyReachableAcceptedLengths) {
  SimulateOptions o;
  o.model = "tiny";
  o.rounds = 6;
  o.tree = "-1,0,0,1";
  const auto report = run_simulation(o, nullptr);
  EXPECT_EQ(report["trace"]["max_window"].get<int>(), 4);
  EXPECT_EQ(report["acceptance"]["max_accepted_length"].get<int>(), 3);
  const auto hist = report["acceptance"]["histogram"].get<std::vector<int64_t>>();
  ASSERT_EQ(hist.size(), 4u);
  int64_t total = 0;
  for (int64_t c : hist) total += c;
  EXPECT_EQ(total, report["trace"]["records"].get<int64_t>());
  const std::string svg = render_svg(report);
  EXPECT_FALSE(std::regex_search(svg, std::regex("class=\"hist-xtick-label\"[^>]*>4</text>")))
      << svg;
  EXPECT_TRUE(std::regex_search(svg, std::regex("class=\"hist-xtick-label\"[^>]*>3</text>")))
      << svg;
  // A chain of T reaches T.
  o.tree.clear();
  o.window = 4;
  EXPECT_EQ(run_simulation(o, nullptr)["acceptance"]["histogram"].size(), 5u);
}

int count_of(const std::string& text, const std::string& fragment) {
  int n = 0;
  for (auto at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) {
    ++n;
  }
  return n;
}

TEST(Simulate, SvgNamesTheRunAndHasYTicksAndLabels) {
  SimulateOptions o;
  o.model = "tiny";
  o.rounds = 4;
  o.window = 3;
  o.accept_rate = 0.6;
  const std::string svg = render_svg(run_simulation(o, nullptr));
  // model, window, acceptance, backend, strategy
  EXPECT_TRUE(contains(svg, "specstate simulate: tiny (TP 1, 2 GDN layers)")) << svg;
  EXPECT_TRUE(contains(svg, "T = 3 (chain")) << svg;
  EXPECT_TRUE(contains(svg, "acceptance geometric, alpha 0.60")) << svg;
  EXPECT_TRUE(contains(svg, "backend cpu")) << svg;
  EXPECT_TRUE(contains(svg, "strategy snapshot")) << svg;
  // Both panels: a y axis with at least 3 ticks, each labelled, and an axis label.
  EXPECT_GE(count_of(svg, "class=\"ytick\""), 6) << svg;
  EXPECT_EQ(count_of(svg, "class=\"ytick\""), count_of(svg, "class=\"ytick-label\""));
  EXPECT_TRUE(contains(svg, ">request-rounds</text>")) << svg;
  // One unit for the whole time axis, named in its title (the ticks are plain numbers).
  EXPECT_TRUE(std::regex_search(svg, std::regex(">time per round \\((\xC2\xB5s|ms|s)\\)</text>")))
      << svg;
  EXPECT_TRUE(contains(svg, "Accepted length"));
  EXPECT_TRUE(contains(svg, "Time per round"));
}

TEST(Simulate, SvgShowsBothStrategiesWhenBothRan) {
  SimulateOptions o;
  o.model = "tiny";
  o.rounds = 3;
  o.fixed = 2;
  o.strategy = "both";
  const std::string svg = render_svg(run_simulation(o, nullptr));
  EXPECT_TRUE(contains(svg, "strategy snapshot vs replay")) << svg;
  EXPECT_TRUE(contains(svg, "acceptance fixed a = 2")) << svg;
  // Every timed round has a verify and a commit bar per strategy, and the legend names both.
  EXPECT_EQ(count_of(svg, "class=\"bar-snapshot\""), 2 * 3) << svg;
  EXPECT_EQ(count_of(svg, "class=\"bar-replay\""), 2 * 3) << svg;
  EXPECT_TRUE(contains(svg, "verify (all layers), snapshot"));
  EXPECT_TRUE(contains(svg, "verify (all layers), replay"));
  EXPECT_TRUE(contains(svg, "commit, replay"));
  // One panel per strategy (tests/cpu/test_simulate_svg.cpp checks their geometry).
  EXPECT_TRUE(contains(svg, ">Time per round, snapshot (max ")) << svg;
  EXPECT_TRUE(contains(svg, ">Time per round, replay (max ")) << svg;
}

TEST(Simulate, SameDefaultModelAsPlan) {
  EXPECT_EQ(SimulateOptions{}.model, std::string(kDefaultModel));
  const CliRun run = run_cli("plan --json");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(nlohmann::json::parse(run.output)["model"].get<std::string>(), SimulateOptions{}.model);
}

// Custom GDN dimensions (no preset has them) run and pass the check against plain prefill.
TEST(SimulateCli, CustomDimensionsRunAndCheck) {
  const CliRun run = run_cli(
      "simulate --layers 3 --heads 2 --v-heads 4 --head-k-dim 32 --head-v-dim 16 --conv-width 3 "
      "--act-dtype f32 --conv-dtype f32 --rounds 3 --requests 2 --check --quiet");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "small (custom) (TP 1: 3 GDN layers, H=2 HV=4 K=32 V=16)"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "PASS")) << run.output;
}

TEST(Simulate, ModelFileRunsAndNamesTheModel) {
  const std::string path = ::testing::TempDir() + "specstate_sim_model.json";
  {
    std::ofstream out(path);
    out << R"({"name": "toy-gdn", "kind": "gdn", "layers": 2, "total_layers": 4,
               "num_k_heads": 1, "num_v_heads": 2, "head_k_dim": 32, "head_v_dim": 32,
               "act_dtype": "f32", "conv_state_dtype": "f32", "ssm_state_dtype": "f32"})";
  }
  SimulateOptions o;
  o.model_file = path;
  o.rounds = 3;
  o.check = true;
  const auto report = run_simulation(o, nullptr);
  EXPECT_TRUE(report["check"]["passed"].get<bool>()) << report["check"].dump();
  EXPECT_EQ(report["model"]["name"].get<std::string>(), "toy-gdn");
  // The options name the file, not the preset it excludes (they said "model": "small").
  EXPECT_TRUE(report["options"]["model"].is_null()) << report["options"].dump();
  EXPECT_EQ(report["options"]["model_file"].get<std::string>(), path);
  EXPECT_EQ(report["model"]["gdn_layers"].get<int>(), 2);
  EXPECT_EQ(report["model"]["total_layers"].get<int>(), 4);
  EXPECT_EQ(report["model"]["head_k_dim"].get<int>(), 32);
  // 2 layers x (conv_dim 2*32 + 2*32 = 128 x 3 x 4 + 2 x 32 x 32 x 4) per request.
  EXPECT_EQ(report["memory"]["committed_bytes_per_request"].get<int64_t>(),
            2 * (128 * 3 * 4 + 2 * 32 * 32 * 4));
  std::remove(path.c_str());
}

// --out is checked before anything runs: a million rounds would take minutes, the usage error
// takes none, and no summary is printed.
TEST(SimulateCli, UnwritableOutFailsBeforeTheRun) {
  const std::string dir = ::testing::TempDir() + "specstate_out_dir";
  std::remove((dir + "/r.svg").c_str());
  ::mkdir(dir.c_str(), 0755);
  ::mkdir((dir + "/r.svg").c_str(), 0755);  // the plot's path is a directory
  for (const std::string& out : {std::string("/nonexistent-dir/r.json"), dir, dir + "/r.json"}) {
    SCOPED_TRACE(out);
    const CliRun run = run_cli("simulate --model tiny --rounds 1000000 --quiet --out " + out);
    EXPECT_EQ(run.code, 2) << run.output;
    EXPECT_TRUE(contains(run.output, "--out")) << run.output;
    EXPECT_FALSE(contains(run.output, "tokens per round")) << run.output;
    SimulateOptions o;
    o.model = "tiny";
    o.rounds = 1000000;
    o.out = out;
    EXPECT_THROW(run_simulation(o, nullptr), CLI::ValidationError);
  }
  ::rmdir((dir + "/r.svg").c_str());
  ::rmdir(dir.c_str());
}

TEST(SimulateCli, DefaultRunSucceeds) {
  const CliRun run = run_cli("simulate --check");
  EXPECT_EQ(run.code, 0) << run.output;
  for (const char* f :
       {"strategy snapshot", "tokens per round", "accepted length histogram", "committed",
        "scratch", "verify", "commit", "bytes moved", "check", "PASS"}) {
    EXPECT_TRUE(contains(run.output, f)) << f << " missing in\n" << run.output;
  }
  // Not a terminal: no progress bar.
  EXPECT_FALSE(contains(run.output, "] 32/32 rounds"));
}

TEST(SimulateCli, BothPrintsSideBySideAndChecks) {
  const std::string base = ::testing::TempDir() + "specstate_sim_both";
  std::remove((base + ".json").c_str());
  const CliRun run =
      run_cli("simulate --model tiny --rounds 6 --strategy both --check --out " + base + ".json");
  ASSERT_EQ(run.code, 0) << run.output;
  for (const char* f :
       {"strategy both", "side by side", "snapshot", "replay", "time: verify", "time: commit",
        "bytes moved: verify", "memory: committed", "memory: workspace", "check vs plain prefill",
        "snapshot vs replay bit-identical: outputs yes (6 rounds), "
        "committed states yes (8 requests): PASS"}) {
    EXPECT_TRUE(contains(run.output, f)) << f << " missing in\n" << run.output;
  }
  std::ifstream in(base + ".json");
  ASSERT_TRUE(in.good());
  const auto report = nlohmann::json::parse(in);
  EXPECT_EQ(report["options"]["strategy"], "both");
  EXPECT_EQ(report["strategies"]["snapshot"]["rounds"].size(), 6u);
  EXPECT_EQ(report["strategies"]["replay"]["rounds"].size(), 6u);
  EXPECT_TRUE(report["check"]["passed"].get<bool>());
  std::ifstream svg_in(base + ".svg");
  std::stringstream svg;
  svg << svg_in.rdbuf();
  EXPECT_TRUE(contains(svg.str(), "commit, replay")) << svg.str();
  std::remove((base + ".json").c_str());
  std::remove((base + ".svg").c_str());
}

TEST(SimulateCli, ReplayRunKeepsTheSingleStrategyReport) {
  const std::string base = ::testing::TempDir() + "specstate_sim_replay";
  const CliRun run =
      run_cli("simulate --model tiny --rounds 4 --strategy replay --check --out " + base + ".json");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "strategy replay")) << run.output;
  EXPECT_TRUE(contains(run.output, "replay records")) << run.output;
  EXPECT_TRUE(contains(run.output, "PASS")) << run.output;
  std::ifstream in(base + ".json");
  const auto report = nlohmann::json::parse(in);
  for (const char* key : {"memory", "timing", "bytes", "check", "rounds"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  EXPECT_EQ(report["options"]["strategy"], "replay");
  EXPECT_EQ(report["memory"]["workspace_bytes"].get<int64_t>(), tiny_replay_workspace(8, 4));
  std::remove((base + ".json").c_str());
  std::remove((base + ".svg").c_str());
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
      {"simulate --tree=-1,0,0,", "--tree"},  // a trailing comma ran a tree of three
      {"simulate --tree=,-1,0", "--tree"},
      {"simulate --no-such-flag", "--no-such-flag"},
      {"simulate --histogram 1,x", "--histogram"},
      {"simulate --histogram 0.5,0.5,", "--histogram"},
      {"simulate --histogram 0,0", "--histogram"},
      {"simulate --histogram 1,1,1,1,1 --window 4", "--histogram"},
      {"simulate --histogram 1,1 --accept-rate 0.5", "--histogram"},
      {"simulate --save-trace /nonexistent/dir/t.jsonl", "--save-trace"},
      {"simulate --strategy foo", "--strategy: foo"},
      {"simulate --strategy", "--strategy"},
      {"simulate --strategy Replay", "--strategy: Replay"},
  };
  for (const Bad& b : cases) {
    const CliRun run = run_cli(b.args);
    EXPECT_EQ(run.code, 2) << b.args << "\n" << run.output;
    EXPECT_TRUE(contains(run.output, b.names)) << b.args << "\n" << run.output;
  }
}

// A trace of one request, `rounds` rounds of window 1 each accepting `accepted` (0 or 1).
void write_one_request_trace(const std::string& path, int64_t rounds, int accepted) {
  std::ofstream out(path);
  out << R"({"format": "specstate-trace", "version": 1, "requests": [0]})"
      << "\n";
  for (int64_t r = 0; r < rounds; ++r)
    out << R"({"request":0,"round":)" << r << R"(,"window":1,"accepted":)" << accepted << "}\n";
}

// Files: a refused run writes no --save-trace (it was written before the pool was checked and
// replaced the user's trace), and outputs that would overwrite each other are usage errors
// (--out r.svg replaced the report by its plots; --out over --save-trace or --trace destroyed the
// trace), naming --out; nothing is written.
TEST(SimulateCli, ARefusedRunOrCollidingOutputsWriteNothing) {
  const std::string dir = ::testing::TempDir();
  const std::string keep = dir + "specstate_cli_keep.jsonl";
  const std::string kept = R"({"format": "specstate-trace", "version": 1, "requests": [0]})"
                           "\n"
                           R"({"request": 0, "round": 0, "window": 2, "accepted": 1})"
                           "\n";
  const auto write_keep = [&] { std::ofstream(keep) << kept; };
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  write_keep();
  // A pool of terabytes: refused (the host-memory check, before any pool is built), after the
  // trace was generated.
  CliRun run = run_cli(
      "simulate --model qwen3-next-80b --requests 4096 --window 64 --rounds 1 "
      "--quiet --save-trace " +
      keep);
  EXPECT_EQ(run.code, 2) << run.output;  // a usage error naming the option (was exit 1)
  EXPECT_TRUE(contains(run.output, "--requests: --requests 4096: the run needs about"))
      << run.output;
  EXPECT_EQ(read(keep), kept) << "a refused run replaced --save-trace";
  const std::string svg = dir + "specstate_cli_r.svg";
  std::remove(svg.c_str());
  run = run_cli("simulate --model tiny --rounds 2 --quiet --out " + svg);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_TRUE(contains(run.output, "--out")) << run.output;
  EXPECT_FALSE(std::ifstream(svg).good());
  for (const char* other : {"--save-trace ", "--trace "}) {
    write_keep();
    run = run_cli(std::string("simulate --model tiny --quiet --out ") + keep + " " + other + keep);
    EXPECT_EQ(run.code, 2) << other << run.output;
    EXPECT_TRUE(contains(run.output, "would overwrite")) << run.output;
    EXPECT_EQ(read(keep), kept) << other;
    // The report's plots (FILE.svg) over the other file: it exists (a --trace must), and stays.
    const std::string report = dir + "specstate_cli_keep.json";
    const std::string plots = dir + "specstate_cli_keep.svg";
    std::ofstream(plots) << kept;
    run =
        run_cli(std::string("simulate --model tiny --quiet --out ") + report + " " + other + plots);
    EXPECT_EQ(run.code, 2) << other << run.output;
    EXPECT_TRUE(contains(run.output, "would overwrite")) << other << run.output;
    EXPECT_EQ(read(plots), kept) << other;
    std::remove(plots.c_str());
  }
  std::remove(keep.c_str());
}

// --check of a trace that accepts nothing: the committed states are the zeros they should be,
// and the check passes (it required a nonzero state and printed FAIL beside "bit-identical yes").
TEST(SimulateCli, ACheckOfATraceThatAcceptsNothingPasses) {
  const std::string path = ::testing::TempDir() + "specstate_cli_zero.jsonl";
  write_one_request_trace(path, 3, 0);
  const CliRun run =
      run_cli("simulate --model tiny --quiet --check --strategy both --trace " + path);
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "PASS")) << run.output;
  std::remove(path.c_str());
}

// A --trace is held to --rounds' limit (kMaxRounds): the report keeps about 1 KB a round, and a
// trace of 8 M rounds (the reader's limit) ran out of memory inside the report and aborted.
TEST(SimulateCli, ATraceOfMoreRoundsThanTheLimitIsRefused) {
  const std::string path = ::testing::TempDir() + "specstate_cli_long_trace.jsonl";
  write_one_request_trace(path, int64_t{kMaxRounds} + 1, 1);
  const CliRun run = run_cli("simulate --model tiny --trace " + path);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_TRUE(contains(run.output, "holds 1,000,001 rounds, more than the limit of 1,000,000"))
      << run.output;
  std::remove(path.c_str());
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
