// `specstate plan`: memory of the committed pool and the strategy's workspace (snapshot scratch
// or replay records). Expected values are computed here by hand from the presets' sizes, and
// held against a small real pool.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/sim_helpers.h"
#include "common/cli_run.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

using test::CliRun;

CliRun run_cli(const std::string& args) { return test::run_command(SPECSTATE_CLI_PATH, args); }

TEST(PlanCli, Qwen3NextTp1PrintsTheCommittedStatePerRequest) {
  const CliRun run = run_cli("plan --model qwen3-next-80b --tp 1 --max-requests 64 --window 4");
  ASSERT_EQ(run.code, 0) << run.output;
  // 36 layers x (32*128*128*4 + 8192*3*2) bytes.
  EXPECT_NE(run.output.find("77,266,944 B (73.7 MiB)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(std::to_string(36) + " Gated DeltaNet"), std::string::npos);
  // 64 requests, 64 rows of T = 4 snapshots.
  EXPECT_NE(run.output.find("4,945,084,416 B"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("19,780,337,664 B"), std::string::npos) << run.output;
}

TEST(PlanCli, JsonAcrossTensorParallelism) {
  for (int tp : {1, 2, 4, 8}) {
    const CliRun run = run_cli("plan --model qwen3-next-80b --tp " + std::to_string(tp) +
                               " --max-requests 8 --window 3 --json");
    ASSERT_EQ(run.code, 0) << run.output;
    const auto j = nlohmann::json::parse(run.output);
    const int64_t hv = 32 / tp, conv_dim = (2 * 16 * 128 + 32 * 128) / tp;
    const int64_t per_layer = hv * 128 * 128 * 4 + conv_dim * 3 * 2;
    SCOPED_TRACE("tp " + std::to_string(tp));
    EXPECT_EQ(j["num_v_heads"].get<int64_t>(), hv);
    EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), 36 * per_layer);
    EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), 8 * 36 * per_layer);
    EXPECT_EQ(j["scratch_bytes_per_row"].get<int64_t>(), 3 * 36 * per_layer);
    EXPECT_EQ(j["scratch_bytes_total"].get<int64_t>(), 8 * 3 * 36 * per_layer);
  }
}

// Qwen3-Next-80B at TP1: 36 GDN layers, conv_dim = 2*16*128 + 32*128 = 8192, bf16 conv and
// activations, f32 SSM. A replay record is one token's layer inputs: (8192 + 2*32) bf16 values.
constexpr int64_t kQwenLayer = 32 * 128 * 128 * 4 + 8192 * 3 * 2;  // 2,146,304
constexpr int64_t kQwenRecord = (8192 + 2 * 32) * 2;               // 16,512

TEST(PlanCli, Qwen3NextTp1Replay) {
  const CliRun run =
      run_cli("plan --model qwen3-next-80b --tp 1 --max-requests 64 --window 4 --strategy replay");
  ASSERT_EQ(run.code, 0) << run.output;
  // 36 x 4 records + a pending count per layer + 4 path entries = 2,377,888 B per slot.
  const int64_t per_slot = 36 * 4 * kQwenRecord + 36 * 4 + 4 * 4;
  EXPECT_EQ(per_slot, 2377888);
  EXPECT_NE(run.output.find("strategy replay"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("77,266,944 B (73.7 MiB)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("2,377,888 B (2.3 MiB)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("152,184,832 B"), std::string::npos) << run.output;  // x 64 slots
  EXPECT_NE(run.output.find("none under replay"), std::string::npos) << run.output;
  // committed 4,945,084,416 + records 152,184,832
  EXPECT_NE(run.output.find("5,097,269,248 B"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("16,512 B per token and layer"), std::string::npos) << run.output;
}

TEST(PlanCli, JsonTotalIsAllTheMemoryOfTheStrategy) {
  for (const char* strategy : {"snapshot", "replay"}) {
    SCOPED_TRACE(strategy);
    const CliRun run = run_cli(
        std::string("plan --model qwen3-next-80b --max-requests 8 --max-rows 6 --window 3 --json "
                    "--strategy ") +
        strategy);
    ASSERT_EQ(run.code, 0) << run.output;
    const auto j = nlohmann::json::parse(run.output);
    const bool replay = std::string(strategy) == "replay";
    // Today's keys, unchanged in meaning for the committed state.
    for (const char* key :
         {"model", "tp", "max_requests", "max_rows", "window", "conv_bytes_per_layer",
          "ssm_bytes_per_layer", "committed_bytes_per_request", "committed_bytes_total",
          "scratch_bytes_per_row", "scratch_bytes_total", "total_bytes"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["strategy"].get<std::string>(), strategy);
    const int64_t committed = 8 * 36 * kQwenLayer;
    const int64_t scratch_row = replay ? 0 : 3 * 36 * kQwenLayer;
    const int64_t records_slot = replay ? 36 * 3 * kQwenRecord + 36 * 4 + 3 * 4 : 0;
    EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), committed);
    EXPECT_EQ(j["scratch_bytes_per_row"].get<int64_t>(), scratch_row);
    EXPECT_EQ(j["scratch_bytes_total"].get<int64_t>(), 6 * scratch_row);
    EXPECT_EQ(j["records_bytes_per_slot"].get<int64_t>(), records_slot);
    EXPECT_EQ(j["records_bytes_total"].get<int64_t>(), 8 * records_slot);
    EXPECT_EQ(j["workspace_bytes_total"].get<int64_t>(), 6 * scratch_row + 8 * records_slot);
    EXPECT_EQ(j["total_bytes"].get<int64_t>(), committed + 6 * scratch_row + 8 * records_slot);
  }
}

// The plan's numbers (computed in the CLI from the config's fields) against what a real pool
// allocates, and both against the sizes worked out by hand: the small preset is 8 GDN layers,
// H=4 HV=8 K=V=64, W=4, bf16 activations and conv state, f32 SSM; conv_dim = 1024.
TEST(PlanCli, AgreesWithARealPoolForEachStrategy) {
  const int64_t layer = 1024 * 3 * 2 + 8 * 64 * 64 * 4;  // 137,216
  const int64_t committed = 3 * 8 * layer;
  const int64_t workspace[] = {2 * 8 * 5 * layer,  // snapshot: rows x L x T
                               3 * (8 * 5 * (1024 + 16) * 2 + 8 * 4 + 5 * 4)};  // replay: slots
  for (int k = 0; k < 2; ++k) {
    const Strategy strategy = k == 0 ? Strategy::kSnapshot : Strategy::kReplay;
    SCOPED_TRACE(strategy_name(strategy));
    const CliRun run =
        run_cli(std::string("plan --model small --max-requests 3 --max-rows 2 --window 5 --json "
                            "--strategy ") +
                strategy_name(strategy));
    ASSERT_EQ(run.code, 0) << run.output;
    const auto j = nlohmann::json::parse(run.output);
    EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), committed);
    EXPECT_EQ(j["workspace_bytes_total"].get<int64_t>(), workspace[k]);
    EXPECT_EQ(j["total_bytes"].get<int64_t>(), committed + workspace[k]);
    EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), 8 * layer);
    PoolOptions po;
    po.num_slots = 3;
    po.max_rows = 2;
    po.max_window = 5;
    po.strategy = strategy;
    const StatePool pool(apply_tp(find_preset("small"), 1), po);
    EXPECT_EQ(pool.committed_bytes(), committed);
    EXPECT_EQ(pool.workspace_bytes(), workspace[k]);
    EXPECT_EQ(j["workspace_bytes_total"].get<int64_t>(), pool.workspace_bytes());
    EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), pool.committed_bytes());
  }
}

TEST(PlanCli, BadArgumentsExitTwo) {
  for (const char* args :
       {"plan --tp 3", "plan --tp 16 --model qwen3-next-80b", "plan --model nope",
        "plan --window 0", "plan --max-requests 0", "plan --max-requests x", "plan --strategy foo",
        "plan --strategy both", "plan --strategy"}) {
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << args << "\n" << run.output;
  }
  const CliRun run = run_cli("plan --tp 3");
  EXPECT_NE(run.output.find("--tp"), std::string::npos) << run.output;
  const CliRun bad = run_cli("plan --strategy foo --json");
  EXPECT_NE(bad.output.find("--strategy"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("foo"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("\"model\""), std::string::npos) << bad.output;  // no plan printed
}

TEST(PlanHelpers, Formatting) {
  EXPECT_EQ(with_commas(77266944), "77,266,944");
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(with_commas(999), "999");
  EXPECT_EQ(with_commas(1000), "1,000");
  EXPECT_EQ(with_commas(-1234567), "-1,234,567");
  EXPECT_EQ(human_bytes(77266944), "73.7 MiB");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
}

}  // namespace
}  // namespace specstate::cli
