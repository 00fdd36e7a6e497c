// `specstate plan`: memory of the committed pool and the snapshot scratch from ModelConfig.
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

TEST(PlanCli, AgreesWithARealPool) {
  const CliRun run = run_cli("plan --model small --max-requests 3 --max-rows 2 --window 5 --json");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto j = nlohmann::json::parse(run.output);
  PoolOptions po;
  po.num_slots = 3;
  po.max_rows = 2;
  po.max_window = 5;
  const StatePool pool(apply_tp(find_preset("small"), 1), po);
  EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), pool.committed_bytes());
  EXPECT_EQ(j["scratch_bytes_total"].get<int64_t>(), pool.scratch_bytes());
  EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), pool.config().slot_bytes());
}

TEST(PlanCli, BadArgumentsExitTwo) {
  for (const char* args :
       {"plan --tp 3", "plan --tp 16 --model qwen3-next-80b", "plan --model nope",
        "plan --window 0", "plan --max-requests 0", "plan --max-requests x"}) {
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << args << "\n" << run.output;
  }
  const CliRun run = run_cli("plan --tp 3");
  EXPECT_NE(run.output.find("--tp"), std::string::npos) << run.output;
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
