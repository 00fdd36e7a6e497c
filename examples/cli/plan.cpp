// `specstate plan`: how much memory a strategy needs for a model, per request and in total: the
// committed pool, and the strategy's workspace (snapshot scratch per verify row, or replay
// records per slot), computed from the ModelConfig's fields (DESIGN.md section 4).
//
//   specstate plan --model qwen3-next-80b --tp 1 --max-requests 64 --window 4 [--json]
//                  [--strategy snapshot|replay]
//   specstate plan --layers 24 --heads 8 --v-heads 16 --head-k-dim 128 --head-v-dim 128
//   specstate plan --model-file model.json
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/sim_helpers.h"
#include "cli_checks.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

struct PlanArgs {
  std::string model = kDefaultModel;
  std::string model_file;
  ModelDims dims;
  int tp = 1;
  int max_requests = 64;
  int max_rows = 0;  // 0: max_requests
  int window = 4;
  std::string strategy = "snapshot";
  bool json = false;
};

std::string bytes_cell(int64_t bytes) {
  return with_commas(bytes) + " B (" + human_bytes(static_cast<double>(bytes)) + ")";
}

// "--layers 1048576": the option (with its value) a byte count of the model is blamed on when it
// passes int64. Custom dimensions are the only way there (no preset comes near).
std::string model_option(const PlanArgs& args) {
  if (args.dims.layers > 0) return "--layers " + std::to_string(args.dims.layers);
  if (!args.model_file.empty()) return "--model-file " + args.model_file;
  return "--model " + args.model;
}

// a * b or a + b of byte counts; CLI::ValidationError (exit 2) naming `option` (name and value)
// when the result does not fit in int64.
int64_t checked(int64_t a, int64_t b, bool add, const std::string& option, const char* what) {
  int64_t out = 0;
  const bool overflow =
      add ? __builtin_add_overflow(a, b, &out) : __builtin_mul_overflow(a, b, &out);
  if (overflow) {
    throw CLI::ValidationError(option.substr(0, option.find(' ')),
                               option + ": " + what + " = " + with_commas(a) +
                                   (add ? " + " : " x ") + with_commas(b) +
                                   " B does not fit in 64 bits (more than 8 EiB)");
  }
  return out;
}

// The replay records of a token and layer: its conv input (a window's are kept) and its factor
// record (`parts`; a ring of R are kept).
void print_records(const StateBytes& b, DType act, const char* parts) {
  std::printf(
      "  records       per token and layer: conv input %lld x %s = %s B (a window's);\n"
      "                factor record (%s) %s B (a ring of R)\n",
      static_cast<long long>(b.conv_dim), dtype_name(act),
      with_commas(b.conv_record_per_token).c_str(), parts,
      with_commas(b.factor_record_per_token).c_str());
}

// One candidate replay ring of the plan (issue 16: memory and modelled traffic per R).
struct RingRow {
  int ring = 0;
  bool is_default = false;
  int64_t records_per_slot = 0;
  double of_committed = 0;  // records_per_slot / committed state of a request
  ReplayRingModel model;    // folds per round and mean history (acceptance uniform in [1, T])
  // Per round and request (DESIGN.md section 8's floor): every layer reads the checkpoint,
  // writes it at the fold rate, reads and writes the conv window, reads the history's factor
  // records and writes the window's.
  double state_bytes_per_round = 0;
};

// R = 2T, 3T, 4T, 6T and 8T, and the default, default_replay_ring(kind, T), in its place where
// it is none of them (KDA's 8 at T = 3). The fold model is a round of `rows` rows, `round_rows`
// (replay_fold_limit).
std::vector<RingRow> ring_rows(const ModelConfig& config, int window, int round_rows,
                               int64_t committed) {
  std::vector<RingRow> rows;
  const int def = static_cast<int>(default_replay_ring(config.kind, window));
  std::vector<int> rings;
  for (int mult : {2, 3, 4, 6, 8}) rings.push_back(mult * window);
  if (std::find(rings.begin(), rings.end(), def) == rings.end()) {
    rings.insert(std::upper_bound(rings.begin(), rings.end(), def), def);
  }
  for (int ring : rings) {
    RingRow r;
    r.ring = ring;
    r.is_default = r.ring == def;
    StateBytes b;
    try {
      b = state_bytes(config, window, r.ring);
    } catch (const Error& e) {
      throw CLI::ValidationError("--window",
                                 "--window " + std::to_string(window) + ": " + e.what());
    }
    r.records_per_slot = b.records_per_slot;
    r.of_committed = static_cast<double>(b.records_per_slot) / static_cast<double>(committed);
    r.model = replay_ring_model(window, r.ring, round_rows, default_replay_fold_rows(config.kind));
    // DESIGN.md section 8, as simulate counts it: the checkpoint read and a fold write at the
    // ring's rate, the conv window read and written, the h history factor records read and T
    // written, and the conv records: T written, the pending steps' (the last round's accepted
    // tokens, (T + 1) / 2 on average under the ring model's uniform acceptance) read back.
    // (Without the conv records it was 6.3% below simulate's figure at the small model.)
    const double pending = (window + 1) / 2.0;
    r.state_bytes_per_round =
        static_cast<double>(config.num_layers) *
        (static_cast<double>(b.ssm_per_layer) * (1.0 + r.model.fold_rate) +
         2.0 * static_cast<double>(b.conv_per_layer) +
         (r.model.mean_history + window) * static_cast<double>(b.factor_record_per_token) +
         (window + pending) * static_cast<double>(b.conv_record_per_token));
    rows.push_back(r);
  }
  return rows;
}

int run_plan(const PlanArgs& args, std::ostream& json_out) {
  const ModelPreset preset = resolve_model(args.model, args.model_file, args.dims);
  const ModelConfig config = apply_tp(preset, args.tp);
  config.validate();
  const Strategy strategy = parse_strategy(args.strategy, "--strategy");
  const bool replay = strategy == Strategy::kReplay;
  const int rows = args.max_rows > 0 ? args.max_rows : args.max_requests;
  const std::string requests_opt = "--max-requests " + std::to_string(args.max_requests);
  const std::string rows_opt =
      args.max_rows > 0 ? "--max-rows " + std::to_string(args.max_rows) : requests_opt;
  const std::string window_opt = "--window " + std::to_string(args.window);
  // Every byte count is checked: custom dimensions reach past int64 (issue 20.3). A byte count
  // of one request at T = 1 is the model's; one at T = --window is the window's.
  StateBytes b;
  try {
    b = state_bytes(config, 1);
  } catch (const Error& e) {
    const std::string option = model_option(args);
    throw CLI::ValidationError(option.substr(0, option.find(' ')), option + ": " + e.what());
  }
  try {
    b = state_bytes(config, args.window);
  } catch (const Error& e) {
    throw CLI::ValidationError("--window", window_opt + ": " + e.what());
  }
  const int64_t committed_total = checked(b.committed_per_request, args.max_requests, false,
                                          requests_opt, "committed state of all requests");
  // Only the strategy's own workspace exists: snapshot scratch per row, or records per slot.
  const int64_t scratch_per_row = replay ? 0 : b.scratch_per_row;
  const int64_t scratch_total =
      checked(scratch_per_row, rows, false, rows_opt, "snapshot scratch of all rows");
  const int64_t records_per_slot = replay ? b.records_per_slot : 0;
  const int64_t records_total =
      checked(records_per_slot, args.max_requests, false, requests_opt, "records of all slots");
  const int64_t workspace_total = replay ? records_total : scratch_total;
  const int64_t total = checked(committed_total, workspace_total, true,
                                replay ? requests_opt : rows_opt, "committed state + workspace");
  // (After the byte totals, whose 64-bit refusals come first.) A pool refuses rows x window past
  // PoolOptions::kMaxRoundTokens: so does its plan, naming the command's options (it printed a 5.5
  // TiB plan of a pool no one can build).
  if (int64_t{rows} * args.window > PoolOptions::kMaxRoundTokens) {
    throw CLI::ValidationError(
        rows_opt.substr(0, rows_opt.find(' ')),
        rows_opt + " x " + window_opt + " = " + std::to_string(int64_t{rows} * args.window) +
            " tokens a round, more than a pool takes (" +
            std::to_string(PoolOptions::kMaxRoundTokens) + ", PoolOptions::kMaxRoundTokens)");
  }
  // Per request: its committed state and records (replay), or its share of the pool's total
  // (snapshot: the scratch belongs to the max_rows rows, not to each request; adding a row's
  // scratch to every request printed 368.4 MiB a request for a 6.9 GiB pool of 64 requests with
  // 8 rows).
  const int64_t total_per_request =
      replay ? checked(b.committed_per_request, records_per_slot, true, window_opt,
                       "committed state + records per request")
             : total / args.max_requests;
  const GdnConfig g = gdn_dims(config);  // GDN or KDA (the same dimensions)
  const bool kda = config.kind == LayerKind::kKda;
  const char* kind_label = kda ? "KDA" : "Gated DeltaNet";
  const std::vector<RingRow> rings =
      replay ? ring_rows(config, args.window, rows, b.committed_per_request)
             : std::vector<RingRow>{};

  if (args.json) {
    nlohmann::ordered_json j;
    j["model"] = preset.name;
    j["tp"] = args.tp;
    describe_model(preset, config, j);
    j["max_requests"] = args.max_requests;
    j["max_rows"] = rows;
    j["window"] = args.window;
    j["conv_bytes_per_layer"] = b.conv_per_layer;
    j["ssm_bytes_per_layer"] = b.ssm_per_layer;
    j["committed_bytes_per_request"] = b.committed_per_request;
    j["committed_bytes_total"] = committed_total;
    j["scratch_bytes_per_row"] = scratch_per_row;
    j["scratch_bytes_total"] = scratch_total;
    j["strategy"] = strategy_name(strategy);
    j["record_bytes_per_token_layer"] = b.record_per_token;
    j["records_bytes_per_slot"] = records_per_slot;
    j["records_bytes_total"] = records_total;
    j["workspace_bytes_total"] = workspace_total;
    // All the memory the strategy needs: committed state + its workspace.
    j["total_bytes"] = total;
    if (replay) {
      j["replay_ring"] = default_replay_ring(config.kind, args.window);
      j["replay_fold_rows"] = default_replay_fold_rows(config.kind);
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const RingRow& r : rings) {
        list.push_back({{"ring", r.ring},
                        {"default", r.is_default},
                        {"records_bytes_per_slot", r.records_per_slot},
                        {"records_fraction_of_committed", r.of_committed},
                        {"fold_rate", r.model.fold_rate},
                        {"mean_history", r.model.mean_history},
                        {"state_bytes_per_round_per_request", r.state_bytes_per_round}});
      }
      j["replay_rings"] = list;
    }
    // Bytes that are no UTF-8 (a --model-file name's) are replaced: dump threw on them.
    json_out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }

  std::printf("specstate plan: %s, TP %d, strategy %s (memory per GPU)\n", preset.name.c_str(),
              args.tp, strategy_name(strategy));
  if (config.kind == LayerKind::kMamba2) {
    const Mamba2Config& m = config.mamba;
    if (preset.total_layers > config.num_layers) {
      std::printf(
          "  layers        %d, of which %d Mamba2 (the rest are attention or MLP, not ours)\n",
          preset.total_layers, config.num_layers);
    } else {
      std::printf("  layers        %d, all Mamba2\n", config.num_layers);
    }
    std::printf("  Mamba2 layer  nheads=%d P=%d N=%d G=%d W=%d, conv_dim %lld\n", m.num_heads,
                m.head_dim, m.d_state, m.n_groups, m.conv_width,
                static_cast<long long>(b.conv_dim));
    std::printf("  per layer     conv %lld x %d x %s = %s B; SSM %d x %d x %d x %s = %s B\n",
                static_cast<long long>(b.conv_dim), m.conv_width - 1,
                dtype_name(m.conv_state_dtype), with_commas(b.conv_per_layer).c_str(), m.num_heads,
                m.head_dim, m.d_state, dtype_name(m.ssm_state_dtype),
                with_commas(b.ssm_per_layer).c_str());
    if (replay) print_records(b, m.act_dtype, "dt, dA, x, B");
  } else {
    if (preset.total_layers > config.num_layers) {
      std::printf("  layers        %d, of which %d %s (the rest hold a KV cache, not ours)\n",
                  preset.total_layers, config.num_layers, kind_label);
    } else {
      std::printf("  layers        %d, all %s\n", config.num_layers, kind_label);
    }
    std::printf("  %s layer     H=%d HV=%d K=%d V=%d W=%d, conv_dim %lld\n", kda ? "KDA" : "GDN",
                g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, g.conv_width,
                static_cast<long long>(b.conv_dim));
    std::printf("  per layer     conv %lld x %d x %s = %s B; SSM %d x %d x %d x %s = %s B\n",
                static_cast<long long>(b.conv_dim), g.conv_width - 1,
                dtype_name(g.conv_state_dtype), with_commas(b.conv_per_layer).c_str(),
                g.num_v_heads, g.head_v_dim, g.head_k_dim, dtype_name(g.ssm_state_dtype),
                with_commas(b.ssm_per_layer).c_str());
    if (replay) print_records(b, g.act_dtype, kda ? "u, e^g [HV][K], kf, k" : "u, e^g, kf, k");
  }
  std::printf("\n");
  std::printf("  %-30s %-32s %s\n", "", "per request", "total");
  std::printf("  %-30s %-32s %s  (%d requests)\n", "committed state",
              bytes_cell(b.committed_per_request).c_str(), bytes_cell(committed_total).c_str(),
              args.max_requests);
  const std::string window = "(T=" + std::to_string(args.window) + ")";
  if (replay) {
    const std::string label = "replay records " + window;
    std::printf("  %-30s %-32s %s  (%d slots)\n", label.c_str(),
                bytes_cell(records_per_slot).c_str(), bytes_cell(records_total).c_str(),
                args.max_requests);
    std::printf("  %-30s %s\n", "snapshot scratch", "none under replay");
    std::printf("  %-30s %-32s %s\n", "total", bytes_cell(total_per_request).c_str(),
                bytes_cell(total).c_str());
    std::printf(
        "\n  replay ring R (factor records per slot and layer; per round a accepted in [1, T]\n"
        "  uniformly, rounds of %d rows; traffic: DESIGN.md section 8's state bytes of a round,\n"
        "  per request)\n",
        rows);
    std::printf("  %-12s %-30s %13s %12s %9s  %s\n", "R", "records per request", "of committed",
                "folds/round", "history", "traffic/round");
    for (const RingRow& r : rings) {
      const std::string label = std::to_string(r.ring) + (r.is_default ? " (default)" : "");
      std::printf("  %-12s %-30s %12.1f%% %12.2f %9.2f  %s\n", label.c_str(),
                  bytes_cell(r.records_per_slot).c_str(), 100.0 * r.of_committed, r.model.fold_rate,
                  r.model.mean_history, human_bytes(r.state_bytes_per_round).c_str());
    }
    const int fold_rows = default_replay_fold_rows(config.kind);
    const std::string small_rounds =
        fold_rows > 1
            ? "rounds below " + std::to_string(fold_rows) + " rows fold as R = max(2T, 6)\n  would"
            : "every round, of any size, uses the whole\n  ring";
    std::printf(
        "  recommended: R = %lld, the default (measured, docs/cuda.md: a larger R writes the\n"
        "  checkpoint less often but applies longer histories, up to the verify's chunk of 16\n"
        "  tokens; %s); PoolOptions::replay_ring sets it.\n",
        static_cast<long long>(default_replay_ring(config.kind, args.window)),
        small_rounds.c_str());
  } else {
    const std::string label = "snapshot scratch " + window;
    std::printf("  %-30s %-32s %s  (%d rows)\n", label.c_str(), bytes_cell(scratch_per_row).c_str(),
                bytes_cell(scratch_total).c_str(), rows);
    std::printf("  %-30s %-32s %s\n", "total", bytes_cell(total_per_request).c_str(),
                bytes_cell(total).c_str());
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code, std::ostream& json_out) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Memory of the committed state pool and the strategy's workspace (snapshot scratch or "
      "replay records) for a model");
  add_model_options(cmd, args->model, args->model_file, args->tp, args->dims);
  cmd->add_option("--max-requests", args->max_requests, "Requests the pool holds (slots)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-rows", args->max_rows,
                  "Largest verify batch, padding included (default: --max-requests)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--window", args->window, "Tokens verified per request per round (T)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy,
                  "snapshot (T states of scratch per verify row) or replay (records of a few "
                  "KiB per token per slot)")
      ->check(CLI::IsMember({"snapshot", "replay"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->callback([args, &exit_code, &json_out] { exit_code = run_plan(*args, json_out); });
}

}  // namespace specstate::cli
