// Helpers shared by `specstate simulate` and `specstate plan`: model presets (with tensor
// parallelism), memory arithmetic from a ModelConfig, and number formatting.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specstate/config.h"

namespace specstate::cli {

struct ModelPreset {
  std::string name;
  std::string description;
  int total_layers = 0;  // all layers of the model (attention included); GDN layers are config's
  ModelConfig config;    // at TP 1
};

// The embedded presets: "tiny", "small" (the simulate default), "qwen3-next-80b" (GDN);
// "nemotron-h-8b", "nemotron-h-47b", "nemotron-h-56b" (Mamba2: plan only so far).
const std::vector<ModelPreset>& model_presets();
std::vector<std::string> model_preset_names();
// Throws CLI::ValidationError naming --model when `name` is not a preset.
const ModelPreset& find_preset(const std::string& name);
// The per-GPU layer config under tensor parallelism: heads split over tp ranks (H/tp, HV/tp;
// K, V, W unchanged). Throws CLI::ValidationError naming --tp when tp does not divide H and HV.
ModelConfig apply_tp(const ModelPreset& preset, int tp);

// Adds --model (one of the presets) and --tp (1..8) to a subcommand.
void add_model_options(CLI::App* cmd, std::string& model, int& tp);

// Writes the preset's layer counts, shapes and dtypes (under TP) into `out`, the same keys in
// every report: total_layers, gdn_layers, num_k_heads, num_v_heads, head_k_dim, head_v_dim,
// conv_width, conv_dim, act_dtype, conv_state_dtype, ssm_state_dtype. A Mamba2 preset writes
// layer_kind "mamba2", total_layers, mamba2_layers, num_heads, head_dim, d_state, n_groups,
// conv_width, conv_dim and the dtypes instead.
void describe_model(const ModelPreset& preset, const ModelConfig& config,
                    nlohmann::ordered_json& out);

// Memory of one request's committed state, of one verify row's snapshot scratch and of one
// slot's replay records, from the config's fields alone (DESIGN.md section 4). Computed here,
// not asked of the library, so that the tests can hold one against the other.
struct StateBytes {
  int64_t conv_dim = 0;               // 2 * H * K + HV * V
  int64_t conv_per_layer = 0;         // conv_dim * (W-1) * sizeof(conv dtype)
  int64_t ssm_per_layer = 0;          // HV * V * K * sizeof(ssm dtype)
  int64_t committed_per_request = 0;  // layers * (conv + ssm)
  // Snapshot: the conv window and SSM state after every window token, per verify row.
  int64_t scratch_per_row = 0;  // layers * window * (conv + ssm)
  // Replay: one token's record per layer is its layer inputs [mixed_qkv | a | b].
  int64_t record_per_token = 0;  // (conv_dim + 2 * HV) * sizeof(act dtype)
  // Per slot: the records of a window in every layer, a pending count (int32) per layer and the
  // window index of each pending step (int32 per window token).
  int64_t records_per_slot = 0;  // layers * window * record + layers * 4 + window * 4
};
StateBytes state_bytes(const ModelConfig& config, int window);

// The strategy's workspace (everything besides the committed state) of a pool with `slots`
// slots, `rows` verify rows and windows up to `window`: snapshot scratch * rows, or replay
// records * slots.
int64_t workspace_bytes(const StateBytes& bytes, Strategy strategy, int64_t slots, int64_t rows);

// "snapshot" / "replay"; throws CLI::ValidationError naming `option` for anything else.
Strategy parse_strategy(const std::string& text, const char* option);

// "77,266,944"
std::string with_commas(int64_t value);
// "73.7 MiB" (B, KiB, MiB, GiB, TiB; one decimal)
std::string human_bytes(double bytes);
// "1.2 ms", "35 us", "2.31 s"
std::string human_seconds(double seconds);

}  // namespace specstate::cli
