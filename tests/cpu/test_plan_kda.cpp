// The KDA preset of `specstate plan` and `simulate` (Kimi-Linear-48B-A3B): the real model's layer
// counts and shapes, TP splitting key and value heads, memory figures computed from the config's
// fields (checked by hand below) and held against real pools of both strategies, and simulate
// running KDA layers through both strategies. Built only with the command line.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#if defined(SPECSTATE_CLI_PATH)

#include <nlohmann/json.hpp>
#include <string>

#include "cli/sim_helpers.h"
#include "common/cli_run.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

// Kimi-Linear-48B-A3B's config.json: num_hidden_layers 27, linear_attn_config.kda_layers 20 of
// them, num_heads 32, head_dim 128, short_conv_kernel_size 4 (docs/kda.md).
TEST(PlanKda, KimiLinearPresetHasTheRealModelsShapes) {
  const ModelPreset& p = find_preset("kimi-linear-48b-a3b");
  EXPECT_EQ(p.total_layers, 27);
  ASSERT_EQ(p.config.kind, LayerKind::kKda);
  EXPECT_EQ(p.config.num_layers, 20);
  const KdaConfig& k = p.config.kda_layer;
  EXPECT_EQ(k.num_k_heads, 32);
  EXPECT_EQ(k.num_v_heads, 32);
  EXPECT_EQ(k.head_k_dim, 128);
  EXPECT_EQ(k.head_v_dim, 128);
  EXPECT_EQ(k.conv_width, 4);
  EXPECT_FALSE(k.conv_bias);
  EXPECT_FALSE(k.lower_bound.has_value());
  for (int tp : {1, 2, 4, 8}) {
    const ModelConfig c = apply_tp(p, tp);
    ASSERT_EQ(c.kind, LayerKind::kKda);
    EXPECT_EQ(c.kda_layer.num_k_heads, 32 / tp);
    EXPECT_EQ(c.kda_layer.num_v_heads, 32 / tp);
    EXPECT_EQ(c.kda_layer.head_k_dim, 128);
    c.validate();
  }
  EXPECT_THROW(apply_tp(p, 3), CLI::ValidationError);
}

// By hand, TP1: conv_dim = 2 x 32 x 128 + 32 x 128 = 12,288; conv 12,288 x 3 x 2 B = 73,728 B;
// SSM 32 x 128 x 128 x 4 B = 2,097,152 B; per request 20 x 2,170,880 = 43,417,600 B. Records
// per token and layer: conv input 12,288 x 2 = 24,576 B; factor record (kda_factor_layout) u
// 32 x 128 x 4 = 16,384 at 0, e^g 16,384 at 16,384, kf 128 at 32,768, k 32 x 128 x 2 = 8,192 at
// 32,896: 41,088 B. TP8: 4 heads, conv_dim 1,536, per request 20 x (9,216 + 262,144) = 5,427,200;
// factor record u 2,048, e^g 2,048 at 2,048, kf 16 at 4,096, k 1,024 at 4,112: 5,136 B.
TEST(PlanKda, MemoryFromTheFieldsEqualsRealPools) {
  const StateBytes b1 = state_bytes(apply_tp(find_preset("kimi-linear-48b-a3b"), 1), 4);
  EXPECT_EQ(b1.conv_dim, 12288);
  EXPECT_EQ(b1.conv_per_layer, 73728);
  EXPECT_EQ(b1.ssm_per_layer, 2097152);
  EXPECT_EQ(b1.committed_per_request, 43417600);
  EXPECT_EQ(b1.conv_record_per_token, 24576);
  EXPECT_EQ(b1.factor_record_per_token, 41088);
  const ModelConfig tp8 = apply_tp(find_preset("kimi-linear-48b-a3b"), 8);
  const StateBytes b8 = state_bytes(tp8, 4);
  EXPECT_EQ(b8.conv_dim, 1536);
  EXPECT_EQ(b8.committed_per_request, 5427200);
  EXPECT_EQ(b8.factor_record_per_token, 5136);
  for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
    PoolOptions o;
    o.num_slots = 2;
    o.max_rows = 2;
    o.max_window = 4;
    o.strategy = s;
    StatePool pool(tp8, o);
    EXPECT_EQ(pool.committed_bytes(), 2 * b8.committed_per_request) << strategy_name(s);
    EXPECT_EQ(pool.workspace_bytes(), workspace_bytes(b8, s, 2, 2)) << strategy_name(s);
  }
}

TEST(PlanKda, JsonReportAndSimulateThroughTheBinary) {
  const test::CliRun run = test::run_command(
      SPECSTATE_CLI_PATH,
      "plan --model kimi-linear-48b-a3b --tp 1 --max-requests 4 --window 4 --json");
  ASSERT_EQ(run.code, 0) << run.output;
  const nlohmann::json j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["layer_kind"], "kda");
  EXPECT_EQ(j["kda_layers"], 20);
  EXPECT_EQ(j["total_layers"], 27);
  EXPECT_EQ(j["num_k_heads"], 32);
  EXPECT_EQ(j["committed_bytes_per_request"], 43417600);
  for (int tp : {2, 4, 8}) {
    const test::CliRun t = test::run_command(
        SPECSTATE_CLI_PATH, "plan --model kimi-linear-48b-a3b --tp " + std::to_string(tp) +
                                " --strategy replay --window 4");
    EXPECT_EQ(t.code, 0) << t.output;
    EXPECT_NE(t.output.find("20 KDA"), std::string::npos) << t.output;
    EXPECT_NE(t.output.find("KDA layer     H=" + std::to_string(32 / tp)), std::string::npos)
        << t.output;
  }
  // --kind kda over a GDN model keeps its dimensions and dtypes (it took Kimi-Linear's: 32 heads
  // of 128); over a Mamba2 model it starts from KDA's defaults; --kind gdn over a KDA model keeps
  // them too.
  {
    const auto plan_json = [](const std::string& args) {
      const test::CliRun r = test::run_command(SPECSTATE_CLI_PATH, "plan " + args + " --json");
      EXPECT_EQ(r.code, 0) << r.output;
      return r.code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
    };
    const nlohmann::json tiny = plan_json("--model tiny");
    const nlohmann::json kda = plan_json("--model tiny --kind kda --layers 3");
    EXPECT_EQ(kda["layer_kind"], "kda");
    for (const char* key : {"num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"}) {
      EXPECT_EQ(kda[key], tiny[key]) << key;
    }
    const nlohmann::json back =
        plan_json("--model kimi-linear-48b-a3b --kind gdn --layers 2 --heads 4 --v-heads 8");
    EXPECT_EQ(back.value("layer_kind", "gdn"), "gdn");  // (a GDN plan names no kind)
    EXPECT_FALSE(back.contains("kda_layers"));
    EXPECT_EQ(back["num_k_heads"], 4);
    EXPECT_EQ(back["head_k_dim"], 128);
    const nlohmann::json from_mamba = plan_json("--model nemotron-h-8b --kind kda --layers 2");
    EXPECT_EQ(from_mamba["num_k_heads"], 32);
  }
  // simulate runs KDA layers: a small custom KDA model (--kind kda with GDN's options) and one
  // from a model file, through both strategies, proven against prefill and against each other.
  const std::string file = ::testing::TempDir() + "specstate_kda_model.json";
  {
    std::ofstream out(file);
    out << R"({"kind": "kda", "layers": 2, "num_k_heads": 2, "num_v_heads": 4,
               "head_k_dim": 16, "head_v_dim": 8})";
  }
  for (const std::string& model :
       {std::string("--kind kda --layers 3 --heads 2 --v-heads 2 --head-k-dim 16 --head-v-dim 16"),
        "--model-file " + file}) {
    SCOPED_TRACE(model);
    const test::CliRun sim = test::run_command(
        SPECSTATE_CLI_PATH, "simulate " + model +
                                " --requests 3 --rounds 6 --strategy both --check --packing "
                                "variable --quiet");
    EXPECT_EQ(sim.code, 0) << sim.output;
    EXPECT_NE(sim.output.find("KDA layers, H=2"), std::string::npos) << sim.output;
    EXPECT_NE(sim.output.find("snapshot vs replay bit-identical: outputs yes"), std::string::npos)
        << sim.output;
    EXPECT_NE(sim.output.find("PASS (bit-identical yes"), std::string::npos) << sim.output;
  }
  std::remove(file.c_str());
}

}  // namespace
}  // namespace specstate::cli

#endif  // SPECSTATE_CLI_PATH
