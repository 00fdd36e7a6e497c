// `specstate plan`: memory of the committed pool and the strategy's workspace (snapshot scratch
// or replay records). Expected values are computed here by hand from the presets' sizes, and
// held against a small real pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

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

// The snapshot "total" per request is the pool's total over its requests: with fewer rows than
// requests the scratch is shared, and the cell added a whole row's scratch to each request
// (368.4 MiB a request printed for a 6.9 GiB pool of 64).
TEST(PlanCli, SnapshotTotalPerRequestIsThePoolsShare) {
  const CliRun run =
      run_cli("plan --model qwen3-next-80b --max-requests 64 --max-rows 8 --window 4");
  ASSERT_EQ(run.code, 0) << run.output;
  // 64 x 77,266,944 + 8 x 309,067,776 = 7,417,626,624 B, / 64 = 115,900,416 B.
  EXPECT_NE(run.output.find("7,417,626,624 B"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("115,900,416 B (110.5 MiB)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("386,334,720"), std::string::npos) << run.output;
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
// activations, f32 SSM. Replay v2 keeps per token and layer a conv record (the token's conv
// input, 8192 bf16) and a factor record (kernels::gdn_factor_layout): u f32 [HV=32][V=128],
// e^g f32 [32], kf f32 [H=16] (16,576 B, a multiple of 16), then k bf16 [16][K=128]; 20,672 B.
constexpr int64_t kQwenLayer = 32 * 128 * 128 * 4 + 8192 * 3 * 2;                     // 2,146,304
constexpr int64_t kQwenConvRecord = 8192 * 2;                                         // 16,384
constexpr int64_t kQwenFactorRecord = 32 * 128 * 4 + 32 * 4 + 16 * 4 + 16 * 128 * 2;  // 20,672
constexpr int64_t kQwenRecord = kQwenConvRecord + kQwenFactorRecord;                  // 37,056
// Per slot and layer besides the records: a pending count and a cursor (base, h), 3 x int32.
constexpr int64_t kCounts = 3 * 4;

// plan's modelled replay traffic is simulate's: the same round measured by simulate (400 rounds,
// accepted lengths uniform in [1, T], as the ring model assumes) within 1%. plan left out the
// conv records (T written, the pending read back): 6% below simulate at the small model.
TEST(PlanCli, ReplayTrafficIsSimulates) {
  const std::string report = ::testing::TempDir() + "specstate_plan_traffic.json";
  const CliRun sim = run_cli(
      "simulate --model tiny --strategy replay --requests 8 --window 4 --rounds 400 "
      "--histogram 1,1,1,1 --quiet --out '" +
      report + "'");
  ASSERT_EQ(sim.code, 0) << sim.output;
  std::ifstream in(report);
  const auto measured = nlohmann::json::parse(in);
  const double simulated = measured["bytes"]["verify_bytes_per_round"].get<double>() / 8.0;
  const CliRun plan =
      run_cli("plan --model tiny --strategy replay --max-requests 8 --window 4 --json");
  ASSERT_EQ(plan.code, 0) << plan.output;
  double modelled = 0;
  const auto rings = nlohmann::json::parse(plan.output)["replay_rings"];
  for (const auto& r : rings) {
    if (r["default"].get<bool>()) modelled = r["state_bytes_per_round_per_request"].get<double>();
  }
  ASSERT_GT(modelled, 0.0) << plan.output;
  EXPECT_NEAR(modelled / simulated, 1.0, 0.01) << modelled << " vs " << simulated;
}

TEST(PlanCli, Qwen3NextTp1Replay) {
  const CliRun run =
      run_cli("plan --model qwen3-next-80b --tp 1 --max-requests 64 --window 4 --strategy replay");
  ASSERT_EQ(run.code, 0) << run.output;
  // 36 x (4 conv records + R = 3 x 4 = 12 factor records, GDN's default ring, + the counts) + 4
  // path entries = 11,290,048 B per slot.
  const int64_t per_slot = 36 * (4 * kQwenConvRecord + 12 * kQwenFactorRecord + kCounts) + 4 * 4;
  EXPECT_EQ(per_slot, 11290048);
  EXPECT_EQ(64 * per_slot, 722563072);
  EXPECT_EQ(int64_t{64} * 36 * kQwenLayer + 64 * per_slot, 5667647488);
  EXPECT_NE(run.output.find("strategy replay"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("77,266,944 B (73.7 MiB)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("11,290,048 B (10.8 MiB)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("722,563,072 B"), std::string::npos) << run.output;  // x 64 slots
  EXPECT_NE(run.output.find("none under replay"), std::string::npos) << run.output;
  // committed 4,945,084,416 + records 722,563,072
  EXPECT_NE(run.output.find("5,667,647,488 B"), std::string::npos) << run.output;
  EXPECT_EQ(kQwenRecord, 37056);
  EXPECT_NE(run.output.find("conv input 8192 x bf16 = 16,384 B"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("factor record (u, e^g, kf, k) 20,672 B"), std::string::npos)
      << run.output;
  // The ring table: R = 2T ... 8T, the default marked, its records as above (14.6% of the
  // committed state); R = 16: 36 x 4 more factor records. The fold model is a round of 64 rows
  // (--max-requests): the whole ring.
  EXPECT_NE(run.output.find("12 (default) 11,290,048 B (10.8 MiB)"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("14.6%"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(with_commas(per_slot + 36 * 4 * kQwenFactorRecord) + " B"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("rounds of 64 rows"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("recommended: R = 12"), std::string::npos) << run.output;
}

TEST(PlanCli, ReplayRingsInJsonFollowTheModelAndTheDefault) {
  // Every kind: its default ring is one row (KDA's 8 at T = 3 is no multiple of T: inserted in
  // its place), and within issue 16's memory budget.
  const std::vector<std::pair<std::string, LayerKind>> models{
      {"qwen3-next-80b", LayerKind::kGatedDeltaNet},
      {"nemotron-h-8b", LayerKind::kMamba2},
      {"kimi-linear-48b-a3b", LayerKind::kKda}};
  // Rounds of 64 rows (the default --max-requests) and of 4, below GDN's and KDA's 8 fold rows
  // (Mamba2's 1: the whole ring in every round, so its small rounds fold less).
  for (const auto& [model, kind] : models) {
    for (const auto& [T, requests] : {std::pair{1, 64}, {2, 64}, {3, 64}, {4, 64}, {4, 4}}) {
      SCOPED_TRACE(model + " T = " + std::to_string(T) + ", " + std::to_string(requests) +
                   " requests");
      const CliRun run =
          run_cli("plan --model " + model + " --window " + std::to_string(T) + " --max-requests " +
                  std::to_string(requests) + " --strategy replay --json");
      ASSERT_EQ(run.code, 0) << run.output;
      const auto j = nlohmann::json::parse(run.output);
      const int64_t def = default_replay_ring(kind, T);
      EXPECT_EQ(j["replay_ring"].get<int64_t>(), def);
      const int fold_rows = default_replay_fold_rows(kind);
      EXPECT_EQ(j["replay_fold_rows"].get<int>(), fold_rows);
      std::vector<int> expected;
      for (int mult : {2, 3, 4, 6, 8}) expected.push_back(mult * T);
      if (std::find(expected.begin(), expected.end(), def) == expected.end()) {
        expected.insert(std::upper_bound(expected.begin(), expected.end(), def),
                        static_cast<int>(def));
      }
      const auto& rings = j["replay_rings"];
      ASSERT_EQ(rings.size(), expected.size());
      int defaults = 0;
      double last_folds = 2, last_history = -1;
      int64_t last_records = 0;
      for (std::size_t i = 0; i < rings.size(); ++i) {
        const auto& r = rings[i];
        const int ring = r["ring"].get<int>();
        EXPECT_EQ(ring, expected[i]);
        const ReplayRingModel m = replay_ring_model(T, ring, requests, fold_rows);
        // Rounds below the kind's fold rows fold at the small limit, max(2T, 6) - 2T = 0 at
        // T = 4, whatever R: as often as a ring of 2T. Mamba2's (fold rows 1) use the whole ring.
        const bool whole_ring = requests >= fold_rows;
        if (!whole_ring) {
          EXPECT_DOUBLE_EQ(m.fold_rate, 1.0) << "R = " << ring;
        } else if (ring > 2 * T) {
          EXPECT_LT(m.fold_rate, 1.0) << "R = " << ring;
        }
        EXPECT_DOUBLE_EQ(r["fold_rate"].get<double>(), m.fold_rate);
        EXPECT_DOUBLE_EQ(r["mean_history"].get<double>(), m.mean_history);
        // A longer ring: fewer folds and a longer history where rounds use the whole ring (as
        // many otherwise), more records.
        if (whole_ring) {
          EXPECT_LT(m.fold_rate, last_folds);
          EXPECT_GT(m.mean_history, last_history);
        } else {
          EXPECT_LE(m.fold_rate, last_folds);
          EXPECT_GE(m.mean_history, last_history);
        }
        EXPECT_GT(r["records_bytes_per_slot"].get<int64_t>(), last_records);
        last_folds = m.fold_rate;
        last_history = m.mean_history;
        last_records = r["records_bytes_per_slot"].get<int64_t>();
        if (r["default"].get<bool>()) {
          ++defaults;
          EXPECT_EQ(ring, def);
          EXPECT_EQ(r["records_bytes_per_slot"].get<int64_t>(),
                    j["records_bytes_per_slot"].get<int64_t>());
          EXPECT_LE(r["records_fraction_of_committed"].get<double>(), 0.20);  // issue 16's budget
        }
        EXPECT_GT(r["state_bytes_per_round_per_request"].get<double>(), 0.0);
      }
      EXPECT_EQ(defaults, 1);
    }
  }
  // Snapshot plans carry no ring.
  const CliRun snap = run_cli("plan --model qwen3-next-80b --json");
  ASSERT_EQ(snap.code, 0) << snap.output;
  EXPECT_FALSE(nlohmann::json::parse(snap.output).contains("replay_rings"));
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
    // 36 x (3 conv records + R = 3 x 3 = 9 factor records, GDN's default ring, + the counts) +
    // 3 path entries.
    const int64_t records_slot =
        replay ? 36 * (3 * kQwenConvRecord + 9 * kQwenFactorRecord + kCounts) + 3 * 4 : 0;
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
  // Replay v2, per token and layer: the conv record (1024 bf16) and the factor record: u f32
  // [8][64], e^g f32 [8], kf f32 [4] (2,096 B, a multiple of 16), then k bf16 [4][64]: 2,608 B.
  const int64_t conv_record = 1024 * 2;                                   // 2,048
  const int64_t factor_record = 8 * 64 * 4 + 8 * 4 + 4 * 4 + 4 * 64 * 2;  // 2,608
  const int64_t workspace[] = {
      2 * 8 * 5 * layer,  // snapshot: rows x L x T
      // replay: slots x (L x (T conv records + R = 3T factor records, GDN's default ring at
      // T = 5, + pending count and cursor) + T path entries)
      3 * (8 * (5 * conv_record + 15 * factor_record + kCounts) + 5 * 4)};
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

TEST(PlanCli, DefaultModelIsSimulatesDefault) {
  const CliRun run = run_cli("plan --json");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(nlohmann::json::parse(run.output)["model"].get<std::string>(), kDefaultModel);
  EXPECT_EQ(std::string(kDefaultModel), "small");
}

// "the rest hold a KV cache" only where there is a rest.
TEST(PlanCli, KvCacheSentenceOnlyWhenSomeLayersAreNotRecurrent) {
  const CliRun qwen = run_cli("plan --model qwen3-next-80b");
  ASSERT_EQ(qwen.code, 0) << qwen.output;
  EXPECT_NE(qwen.output.find("48, of which 36 Gated DeltaNet (the rest hold a KV cache"),
            std::string::npos)
      << qwen.output;
  for (const char* args : {"plan --model small", "plan --model tiny", "plan --layers 5",
                           "plan --model qwen3-next-80b --total-layers 36"}) {
    const CliRun run = run_cli(args);
    ASSERT_EQ(run.code, 0) << args << "\n" << run.output;
    EXPECT_EQ(run.output.find("KV cache"), std::string::npos) << args << "\n" << run.output;
    EXPECT_EQ(run.output.find("the rest"), std::string::npos) << args << "\n" << run.output;
    EXPECT_NE(run.output.find("all Gated DeltaNet"), std::string::npos) << run.output;
  }
  const CliRun mamba = run_cli("plan --kind mamba2 --layers 6");
  ASSERT_EQ(mamba.code, 0) << mamba.output;
  EXPECT_EQ(mamba.output.find("the rest"), std::string::npos) << mamba.output;
  EXPECT_NE(mamba.output.find("6, all Mamba2"), std::string::npos) << mamba.output;
  const CliRun nemotron = run_cli("plan --model nemotron-h-8b");
  EXPECT_NE(nemotron.output.find("52, of which 24 Mamba2 (the rest are attention or MLP"),
            std::string::npos)
      << nemotron.output;
}

// Custom GDN dimensions: every field reaches the plan, and the plan equals a real pool.
TEST(PlanCli, CustomGdnDimensionsEqualARealPool) {
  const CliRun run = run_cli(
      "plan --layers 5 --heads 2 --v-heads 6 --head-k-dim 32 --head-v-dim 64 --conv-width 3 "
      "--act-dtype f32 --conv-dtype f32 --ssm-dtype bf16 --max-requests 3 --window 2 --json");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["model"].get<std::string>(), "small (custom)");
  EXPECT_EQ(j["gdn_layers"].get<int>(), 5);
  EXPECT_EQ(j["total_layers"].get<int>(), 5);  // small has no other layers
  EXPECT_EQ(j["num_k_heads"].get<int>(), 2);
  EXPECT_EQ(j["num_v_heads"].get<int>(), 6);
  EXPECT_EQ(j["conv_width"].get<int>(), 3);
  EXPECT_EQ(j["ssm_state_dtype"].get<std::string>(), "bf16");
  // conv_dim 2*2*32 + 6*64 = 512; conv 512 x 2 x f32; SSM 6 x 64 x 32 x bf16.
  const int64_t layer = 512 * 2 * 4 + 6 * 64 * 32 * 2;
  EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), 5 * layer);
  GdnConfig g;
  g.num_k_heads = 2;
  g.num_v_heads = 6;
  g.head_k_dim = 32;
  g.head_v_dim = 64;
  g.conv_width = 3;
  g.act_dtype = DType::kF32;
  g.conv_state_dtype = DType::kF32;
  g.ssm_state_dtype = DType::kBF16;
  PoolOptions po;
  po.num_slots = 3;
  po.max_rows = 3;
  po.max_window = 2;
  const StatePool pool(ModelConfig::gated_delta_net(5, g), po);
  EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), pool.committed_bytes());
  EXPECT_EQ(j["workspace_bytes_total"].get<int64_t>(), pool.workspace_bytes());
  // Over a preset with attention layers, the other layers stay: 12 of Qwen3-Next's 48.
  const CliRun qwen = run_cli("plan --model qwen3-next-80b --layers 24 --json");
  ASSERT_EQ(qwen.code, 0) << qwen.output;
  const auto q = nlohmann::json::parse(qwen.output);
  EXPECT_EQ(q["total_layers"].get<int>(), 36);
  EXPECT_EQ(q["committed_bytes_per_request"].get<int64_t>(), 24 * kQwenLayer);
}

TEST(PlanCli, CustomMamba2DimensionsEqualARealPool) {
  const CliRun run = run_cli(
      "plan --kind mamba2 --layers 3 --total-layers 7 --heads 8 --head-dim 16 --d-state 32 "
      "--groups 2 --conv-width 4 --max-requests 2 --window 3 --strategy replay --json");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["model"].get<std::string>(), "custom");
  EXPECT_EQ(j["layer_kind"].get<std::string>(), "mamba2");
  EXPECT_EQ(j["mamba2_layers"].get<int>(), 3);
  EXPECT_EQ(j["total_layers"].get<int>(), 7);
  // conv_dim 8*16 + 2*2*32 = 256; conv 256 x 3 x bf16; SSM 8 x 16 x 32 x f32.
  EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), 3 * (256 * 3 * 2 + 8 * 16 * 32 * 4));
  Mamba2Config m;
  m.num_heads = 8;
  m.head_dim = 16;
  m.d_state = 32;
  m.n_groups = 2;
  PoolOptions po;
  po.num_slots = 2;
  po.max_rows = 2;
  po.max_window = 3;
  po.strategy = Strategy::kReplay;
  const StatePool pool(ModelConfig::mamba2(3, m), po);
  EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), pool.committed_bytes());
  EXPECT_EQ(j["workspace_bytes_total"].get<int64_t>(), pool.workspace_bytes());
  // Over a Mamba2 preset: its heads split under TP like the preset's.
  const CliRun tp = run_cli("plan --model nemotron-h-8b --d-state 64 --tp 2 --json");
  ASSERT_EQ(tp.code, 0) << tp.output;
  const auto t = nlohmann::json::parse(tp.output);
  EXPECT_EQ(t["d_state"].get<int>(), 64);
  EXPECT_EQ(t["num_heads"].get<int>(), 64);
  EXPECT_EQ(t["model"].get<std::string>(), "nemotron-h-8b (custom)");
}

std::string write_model_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(PlanCli, ModelFileGivesTheModelAndDimensionsOverrideIt) {
  const std::string path = write_model_file("specstate_plan_model.json", R"({
    "name": "my-hybrid", "kind": "gdn", "layers": 12, "total_layers": 16,
    "num_k_heads": 8, "num_v_heads": 16, "head_k_dim": 128, "head_v_dim": 128,
    "conv_width": 4, "act_dtype": "bf16", "conv_state_dtype": "bf16", "ssm_state_dtype": "f32"})");
  const CliRun run = run_cli("plan --model-file " + path + " --json");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["model"].get<std::string>(), "my-hybrid");
  EXPECT_EQ(j["total_layers"].get<int>(), 16);
  const int64_t layer = (2 * 8 * 128 + 16 * 128) * 3 * 2 + 16 * 128 * 128 * 4;
  EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), 12 * layer);
  const CliRun text = run_cli("plan --model-file " + path);
  EXPECT_NE(text.output.find("16, of which 12 Gated DeltaNet (the rest hold a KV cache"),
            std::string::npos)
      << text.output;
  const CliRun over = run_cli("plan --model-file " + path + " --layers 6 --tp 2 --json");
  ASSERT_EQ(over.code, 0) << over.output;
  const auto o = nlohmann::json::parse(over.output);
  EXPECT_EQ(o["model"].get<std::string>(), "my-hybrid (custom)");
  EXPECT_EQ(o["total_layers"].get<int>(), 10);
  EXPECT_EQ(o["committed_bytes_per_request"].get<int64_t>(), 6 * layer / 2);
  std::remove(path.c_str());
  const std::string mamba = write_model_file("specstate_plan_mamba.json",
                                             R"({"kind": "mamba2", "layers": 2, "d_state": 64})");
  const CliRun m = run_cli("plan --model-file " + mamba + " --json");
  ASSERT_EQ(m.code, 0) << m.output;
  const auto mj = nlohmann::json::parse(m.output);
  EXPECT_EQ(mj["model"].get<std::string>(), "specstate_plan_mamba");  // the file's name
  EXPECT_EQ(mj["d_state"].get<int>(), 64);
  EXPECT_EQ(mj["num_heads"].get<int>(), Mamba2Config{}.num_heads);  // the library's default
  std::remove(mamba.c_str());
}

TEST(PlanCli, BadModelsExitTwoNamingTheOption) {
  struct Bad {
    std::string args, names;
  };
  const std::string bad_key =
      write_model_file("specstate_bad_key.json", R"({"kind": "gdn", "layers": 2, "heads": 4})");
  const std::string bad_json = write_model_file("specstate_bad_json.json", R"({"kind": "gdn",)");
  const std::string no_kind = write_model_file("specstate_no_kind.json", R"({"layers": 2})");
  const std::string bad_value = write_model_file(
      "specstate_bad_value.json", R"({"kind": "gdn", "layers": 2, "num_v_heads": 0})");
  const std::string bad_heads = write_model_file(
      "specstate_bad_heads.json", R"({"kind": "gdn", "layers": 2, "num_k_heads": 3})");
  for (const Bad& b : {
           Bad{"plan --d-state 64", "--d-state"},
           Bad{"plan --model nemotron-h-8b --v-heads 4", "--v-heads"},
           Bad{"plan --kind mamba2", "--layers"},
           Bad{"plan --kind lstm --layers 2", "--kind"},
           Bad{"plan --layers 0", "--layers"},
           Bad{"plan --layers 4 --total-layers 3", "--total-layers"},
           Bad{"plan --heads 3", "num_v_heads"},
           Bad{"plan --act-dtype f16", "--act-dtype"},
           Bad{"plan --model tiny --model-file " + bad_key, "--model"},
           Bad{"plan --model-file /nonexistent/model.json", "--model-file"},
           Bad{"plan --model-file " + bad_key, "unknown key \"heads\""},
           Bad{"plan --model-file " + bad_json, "--model-file"},
           Bad{"plan --model-file " + no_kind, "\"kind\" missing"},
           Bad{"plan --model-file " + bad_value, "\"num_v_heads\" = 0"},
           Bad{"plan --model-file " + bad_heads, "--model-file"},
       }) {
    const CliRun run = run_cli(b.args);
    EXPECT_EQ(run.code, 2) << b.args << "\n" << run.output;
    EXPECT_NE(run.output.find(b.names), std::string::npos) << b.args << "\n" << run.output;
  }
  for (const auto& path : {bad_key, bad_json, no_kind, bad_value, bad_heads}) {
    std::remove(path.c_str());
  }
}

// Issue 20.3: custom dimensions whose byte totals pass int64 were printed wrapped ("snapshot
// scratch 0 B", exit 0). Each product is checked; the refusal names the option and its value.
TEST(PlanCli, ByteTotalsPastInt64AreRefusedNamingTheOption) {
  // 2^12 layers of 4 GiB SSM states: 2^44 B per request, fine; x 2^20 requests passes 2^63.
  // (A request's state is at most 2^48 B, ModelConfig::kMaxSlotBytes, so only the counts that
  // multiply it can pass 64 bits: requests and rows; one request-row x a window of at most 1024
  // cannot. The bound's own refusal is below.)
  const std::string huge =
      "plan --layers 4096 --heads 64 --v-heads 1024 --head-k-dim 1024 --head-v-dim 1024 ";
  struct Bad {
    std::string args, option;
  };
  for (const Bad& b : {
           Bad{huge + "--max-requests 1048576 --window 1024", "--max-requests 1048576"},
           Bad{huge + "--max-requests 1048576 --window 1024 --json", "--max-requests 1048576"},
           Bad{huge + "--max-requests 1048576 --window 1 --strategy replay",
               "--max-requests 1048576"},
           // One request-row fits, 1024 rows of it do not.
           Bad{huge + "--max-requests 1 --max-rows 1024 --window 1024", "--max-rows 1024"},
       }) {
    SCOPED_TRACE(b.args);
    const CliRun run = run_cli(b.args);
    EXPECT_EQ(run.code, 2) << run.output;
    EXPECT_NE(run.output.find(b.option), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("64 bits"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find(" 0 B"), std::string::npos) << run.output;  // no wrapped plan
    EXPECT_EQ(run.output.find("\"model\""), std::string::npos) << run.output;
  }
  // Just below the edge the plan is printed, exactly: 2^20 requests of one 4 GiB layer each, in
  // rounds of 64 rows (2^20 rows of 1024 tokens, 2^30 tokens a round, is no pool's: below).
  const CliRun ok = run_cli(
      "plan --layers 1 --heads 64 --v-heads 1024 --head-k-dim 1024 --head-v-dim 1024 "
      "--max-requests 1048576 --max-rows 64 --window 1024 --json");
  ASSERT_EQ(ok.code, 0) << ok.output;
  const auto j = nlohmann::json::parse(ok.output);
  const int64_t conv = (2 * 64 * 1024 + 1024 * 1024) * 3 * 2;  // bf16 conv state
  const int64_t layer = int64_t{1024} * 1024 * 1024 * 4 + conv;
  EXPECT_EQ(j["committed_bytes_per_request"].get<int64_t>(), layer);
  EXPECT_EQ(j["committed_bytes_total"].get<int64_t>(), layer << 20);
  EXPECT_EQ(j["scratch_bytes_total"].get<int64_t>(), layer * 64 * 1024);
  EXPECT_EQ(j["total_bytes"].get<int64_t>(), (layer << 20) + layer * 64 * 1024);
  // A plan of rows x window past a pool's kMaxRoundTokens is refused naming the options (it was
  // printed: a pool that cannot be built).
  const CliRun past = run_cli("plan --model tiny --max-rows 1048576 --window 1024");
  EXPECT_EQ(past.code, 2) << past.output;
  EXPECT_NE(past.output.find("--max-rows 1048576 x --window 1024 = 1073741824 tokens a round, more "
                             "than a pool takes (67108864, PoolOptions::kMaxRoundTokens)"),
            std::string::npos)
      << past.output;
  // One request's state past 2^48 B (2^20 layers of 4 GiB; or of 2^52 B, past 64 bits) is
  // refused by the model's own bound, naming it, before any total is formed.
  for (const std::string& big :
       {std::string("plan --layers 1048576 --heads 64 --v-heads 1024 --head-k-dim 1024 "
                    "--head-v-dim 1024 --max-requests 1 --window 1"),
        std::string("plan --layers 1048576 --heads 1 --v-heads 1024 --head-k-dim 1048576 "
                    "--head-v-dim 1048576 --max-requests 1 --window 1")}) {
    const CliRun run = run_cli(big);
    EXPECT_EQ(run.code, 2) << run.output;
    // (Named by every option given, with its value: the message names no single field.)
    EXPECT_NE(run.output.find("--layers: --layers 1048576, --heads "), std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("over the 1048576 layers"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("more than 2^48"), std::string::npos) << run.output;
  }
}

// The helpers' own checks: state_bytes names the field that overflows.
TEST(PlanHelpers, StateBytesThrowsNamingTheFieldPastInt64) {
  GdnConfig g;
  g.num_k_heads = 1;
  g.num_v_heads = 1024;
  g.head_k_dim = 1 << 20;
  g.head_v_dim = 1 << 20;
  try {
    (void)state_bytes(ModelConfig::gated_delta_net(1 << 20, g), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("committed_per_request"), std::string::npos) << e.what();
  }
  const StateBytes one = state_bytes(ModelConfig::gated_delta_net(1, g), 1);
  EXPECT_EQ(one.ssm_per_layer, int64_t{1024} << 42);
  EXPECT_THROW((void)workspace_bytes(one, Strategy::kSnapshot, 1, int64_t{1} << 20), Error);
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
