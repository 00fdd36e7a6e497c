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

// The embedded presets: "tiny", "small" (the default of plan and simulate), "qwen3-next-80b"
// (GDN); "nemotron-h-8b", "nemotron-h-47b", "nemotron-h-56b" (Mamba2); "kimi-linear-48b-a3b"
// (KDA).
const std::vector<ModelPreset>& model_presets();
std::vector<std::string> model_preset_names();
// Throws CLI::ValidationError naming --model when `name` is not a preset.
const ModelPreset& find_preset(const std::string& name);
// The per-GPU layer config under tensor parallelism: heads split over tp ranks (H/tp, HV/tp;
// K, V, W unchanged). Throws CLI::ValidationError naming --tp when tp does not divide H and HV.
ModelConfig apply_tp(const ModelPreset& preset, int tp);

// KDA layers have GDN's dimensions (H, HV, K, V, W, conv bias, dtypes): the CLI's GDN paths
// (byte model, TP split, custom dimensions, reports) read and write a KDA layer through these.
GdnConfig gdn_dims(const KdaConfig& layer);
void set_gdn_dims(KdaConfig& layer, const GdnConfig& dims);
// The GDN dimensions of a GDN or KDA model (the model's gdn for any other kind).
GdnConfig gdn_dims(const ModelConfig& config);

// The preset both `plan` and `simulate` use when no model is given.
inline constexpr const char* kDefaultModel = "small";

// Custom dimensions over the model (a preset or a model file); 0 or empty: the model's value.
struct ModelDims {
  std::string kind;      // --kind gdn|mamba2|kda (another kind than the model's needs --layers)
  int layers = 0;        // --layers: recurrent layers (GDN or Mamba2)
  int total_layers = 0;  // --total-layers: all layers (default: --layers + the model's others)
  int heads = 0;         // --heads: GDN key heads H, or Mamba2 heads
  int v_heads = 0;       // --v-heads: GDN value heads HV
  int head_k_dim = 0;    // --head-k-dim: GDN K
  int head_v_dim = 0;    // --head-v-dim: GDN V
  int head_dim = 0;      // --head-dim: Mamba2 P
  int d_state = 0;       // --d-state: Mamba2 N
  int groups = 0;        // --groups: Mamba2 G
  int conv_width = 0;    // --conv-width: W (both kinds)
  std::string act_dtype, conv_dtype, ssm_dtype;  // --act-dtype, --conv-dtype, --ssm-dtype
  bool any() const;
};

// The model a command runs on, at TP 1: `model_file` (JSON, see docs/simulate.md) when given,
// else the preset `model`; then `dims` over it. The name is the preset's (or the file's "name",
// or its file name), with " (custom)" appended when dims changed something. Throws
// CLI::ValidationError naming the option at fault (--model, --model-file, --kind, --layers,
// ...), also for a config the library's validation rejects.
ModelPreset resolve_model(const std::string& model, const std::string& model_file,
                          const ModelDims& dims);
// Reads a JSON model file: {"kind": "gdn" | "mamba2" | "kda" (GDN's fields), "layers": N, optional
// "name", "description", "total_layers" and the layer's fields (GDN: num_k_heads, num_v_heads,
// head_k_dim, head_v_dim; Mamba2: num_heads, head_dim, d_state, n_groups, d_skip, gate; both:
// conv_width, conv_bias, act_dtype, conv_state_dtype, ssm_state_dtype); fields left out keep
// the library's defaults (GdnConfig, Mamba2Config). Throws CLI::ValidationError naming
// --model-file, the key and the value; also for a file larger than kMaxModelFileBytes or nesting
// arrays/objects deeper than kMaxModelFileJsonDepth (checked on the raw text before parsing).
ModelPreset read_model_file(const std::string& path);
// A model file is one flat object (depth 1); the trace reader allows 16 levels, so do we.
inline constexpr int kMaxModelFileJsonDepth = 16;
inline constexpr int64_t kMaxModelFileBytes = int64_t{1} << 20;

// Adds --model (one of the presets), --model-file, --tp (1..8) and the custom dimensions
// (--kind, --layers, --total-layers, --heads, --v-heads, --head-k-dim, --head-v-dim,
// --head-dim, --d-state, --groups, --conv-width, --act-dtype, --conv-dtype, --ssm-dtype).
void add_model_options(CLI::App* cmd, std::string& model, std::string& model_file, int& tp,
                       ModelDims& dims);

// Throws CLI::ValidationError naming `option` unless `path` can be written: an existing file
// that is writable and no directory, or a new file in an existing, writable directory. Called
// before a run, so that a bad --out costs nothing.
void check_writable(const std::string& path, const char* option);
// Whether two paths name the same file (compared as absolute, normalised paths; a file that
// exists through another name, a link, is compared by its identity).
bool same_file(const std::string& a, const std::string& b);

// Writes the preset's layer counts, shapes and dtypes (under TP) into `out`, the same keys in
// every report: total_layers, gdn_layers, num_k_heads, num_v_heads, head_k_dim, head_v_dim,
// conv_width, conv_dim, act_dtype, conv_state_dtype, ssm_state_dtype (a KDA preset: the same
// keys with layer_kind "kda" and kda_layers for gdn_layers). A Mamba2 preset writes
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
  // Replay (DESIGN.md section 4): per token and layer a conv record (its conv input, act dtype)
  // and a factor record (GDN: u f32 [HV][V], e^g f32 [HV], kf f32 [H], k act [H][K]; KDA: the
  // same with e^g f32 [HV][K]; Mamba2: dt, dA f32 [nheads], x act [nheads][P], B act [G][N];
  // each part 16-byte aligned).
  int64_t conv_record_per_token = 0;    // conv_dim * sizeof(act dtype)
  int64_t factor_record_per_token = 0;  // the factor record, padded to 16 bytes
  int64_t record_per_token = 0;         // both
  int ring = 0;  // R: state_bytes' ring, or default_replay_ring(kind, window)
  // Per slot: the conv records of a window and a ring of R factor records in every layer, a
  // pending count (int32) and a cursor (2 x int32) per layer, and the window index of each
  // pending conv step (int32 per window token).
  int64_t records_per_slot = 0;  // layers * (window * conv record + R * factor + 12) + window * 4
};
// Every product is overflow-checked: throws specstate::Error(kInvalidArgument) naming the field
// whose byte count passes int64 (custom dimensions can: 2^20 layers of 4 GiB states).
// `ring`: the replay ring R of the records (0: the pool's default, default_replay_ring(kind,
// window)).
StateBytes state_bytes(const ModelConfig& config, int window, int ring = 0);

// The strategy's workspace (everything besides the committed state) of a pool with `slots`
// slots, `rows` verify rows and windows up to `window`: snapshot scratch * rows, or replay
// records * slots. Throws specstate::Error as state_bytes when the product passes int64.
int64_t workspace_bytes(const StateBytes& bytes, Strategy strategy, int64_t slots, int64_t rows);

// The bytes of host memory available now (/proc/meminfo's MemAvailable, else free pages), or
// 0 where neither can be read. SPECSTATE_SIM_HOST_BYTES (a positive number) stands in for it: the
// tests' way to reach the refusals of simulate and check-golden on any machine.
double available_host_bytes();

// "snapshot" / "replay"; throws CLI::ValidationError naming `option` for anything else.
Strategy parse_strategy(const std::string& text, const char* option);

// "77,266,944"
std::string with_commas(int64_t value);
// "73.7 MiB" (B, KiB, MiB, GiB, TiB; one decimal)
std::string human_bytes(double bytes);
// "1.2 ms", "35 us", "2.31 s"
std::string human_seconds(double seconds);

}  // namespace specstate::cli
