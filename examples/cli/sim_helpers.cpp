#include "cli/sim_helpers.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "specstate/dtype.h"

namespace specstate::cli {
namespace {

ModelPreset make_preset(std::string name, std::string description, int total_layers, int gdn_layers,
                        int h, int hv, int k, int v, DType act, DType conv) {
  GdnConfig layer;
  layer.num_k_heads = h;
  layer.num_v_heads = hv;
  layer.head_k_dim = k;
  layer.head_v_dim = v;
  layer.conv_width = 4;
  layer.act_dtype = act;
  layer.conv_state_dtype = conv;
  layer.ssm_state_dtype = DType::kF32;
  return ModelPreset{std::move(name), std::move(description), total_layers,
                     ModelConfig::gated_delta_net(gdn_layers, layer)};
}

// A Mamba2 model as Nemotron-H configures its layers: conv bias, D skip, no gate inside the
// recurrence (a gated RMSNorm follows it), conv width 4, bf16 activations and conv state, f32 SSM.
ModelPreset make_mamba2_preset(std::string name, std::string description, int total_layers,
                               int mamba_layers, int nheads, int head_dim, int d_state,
                               int n_groups) {
  Mamba2Config layer;
  layer.num_heads = nheads;
  layer.head_dim = head_dim;
  layer.d_state = d_state;
  layer.n_groups = n_groups;
  layer.conv_width = 4;
  layer.conv_bias = true;
  layer.d_skip = true;
  layer.gate = false;
  layer.act_dtype = DType::kBF16;
  layer.conv_state_dtype = DType::kBF16;
  layer.ssm_state_dtype = DType::kF32;
  return ModelPreset{std::move(name), std::move(description), total_layers,
                     ModelConfig::mamba2(mamba_layers, layer)};
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      make_preset("tiny", "2 GDN layers, H=1 HV=2 K=V=16, all f32 (tests)", 2, 2, 1, 2, 16, 16,
                  DType::kF32, DType::kF32),
      make_preset("small", "8 GDN layers, H=4 HV=8 K=V=64, bf16 act+conv, f32 SSM (default)", 8, 8,
                  4, 8, 64, 64, DType::kBF16, DType::kBF16),
      // Qwen3-Next-80B-A3B: 48 layers, every 4th full attention, the other 36 Gated DeltaNet
      // with 16 key heads, 32 value heads, head dims 128, conv width 4.
      make_preset("qwen3-next-80b",
                  "Qwen3-Next-80B-A3B: 48 layers of which 36 GDN, H=16 HV=32 K=V=128 W=4, "
                  "bf16 act+conv, f32 SSM",
                  48, 36, 16, 32, 128, 128, DType::kBF16, DType::kBF16),
      // Nemotron-H (Megatron-Bridge's NemotronH providers, HF nvidia/Nemotron-H-*-Base-8K): the
      // hybrid_override_pattern's "M" layers are Mamba2 with mamba_head_dim 64, 8 groups, conv
      // kernel 4. 8B: 52 layers, 24 Mamba2, 128 heads, d_state 128. 47B: 98 layers, 45 Mamba2,
      // 256 heads, d_state 256. 56B: 118 layers, 54 Mamba2, 256 heads, d_state 256.
      make_mamba2_preset("nemotron-h-8b",
                         "Nemotron-H-8B: 52 layers of which 24 Mamba2, nheads=128 P=64 N=128 G=8 "
                         "W=4, conv bias, D, bf16 act+conv, f32 SSM",
                         52, 24, 128, 64, 128, 8),
      make_mamba2_preset("nemotron-h-47b",
                         "Nemotron-H-47B: 98 layers of which 45 Mamba2, nheads=256 P=64 N=256 G=8 "
                         "W=4, conv bias, D, bf16 act+conv, f32 SSM",
                         98, 45, 256, 64, 256, 8),
      make_mamba2_preset("nemotron-h-56b",
                         "Nemotron-H-56B: 118 layers of which 54 Mamba2, nheads=256 P=64 N=256 "
                         "G=8 W=4, conv bias, D, bf16 act+conv, f32 SSM",
                         118, 54, 256, 64, 256, 8),
  };
  return presets;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : model_presets()) names.push_back(p.name);
  return names;
}

const ModelPreset& find_preset(const std::string& name) {
  for (const auto& p : model_presets()) {
    if (p.name == name) return p;
  }
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw CLI::ValidationError("--model", "unknown model \"" + name + "\" (known: " + known + ")");
}

ModelConfig apply_tp(const ModelPreset& preset, int tp) {
  ModelConfig config = preset.config;
  if (config.kind == LayerKind::kMamba2) {
    // Heads and B/C groups are split over the ranks (P, N, W unchanged).
    const int nh = config.mamba.num_heads, g = config.mamba.n_groups;
    if (tp < 1 || nh % tp != 0 || g % tp != 0) {
      throw CLI::ValidationError("--tp", "--tp " + std::to_string(tp) + " must divide the " +
                                             std::to_string(nh) + " heads and " +
                                             std::to_string(g) + " groups of " + preset.name);
    }
    config.mamba.num_heads = nh / tp;
    config.mamba.n_groups = g / tp;
    return config;
  }
  const int h = config.gdn.num_k_heads, hv = config.gdn.num_v_heads;
  if (tp < 1 || h % tp != 0 || hv % tp != 0) {
    throw CLI::ValidationError("--tp", "--tp " + std::to_string(tp) + " must divide the " +
                                           std::to_string(h) + " key heads and " +
                                           std::to_string(hv) + " value heads of " + preset.name);
  }
  config.gdn.num_k_heads = h / tp;
  config.gdn.num_v_heads = hv / tp;
  return config;
}

StateBytes state_bytes(const ModelConfig& config, int window) {
  const int64_t layers = config.num_layers;
  StateBytes out;
  if (config.kind == LayerKind::kMamba2) {
    // conv_dim = nheads * P + 2 * G * N; SSM nheads x P x N; record [xBC | dt].
    const Mamba2Config& m = config.mamba;
    out.conv_dim = int64_t{m.num_heads} * m.head_dim + 2 * int64_t{m.n_groups} * m.d_state;
    out.conv_per_layer =
        out.conv_dim * (m.conv_width - 1) * static_cast<int64_t>(dtype_size(m.conv_state_dtype));
    out.ssm_per_layer = int64_t{m.num_heads} * m.head_dim * m.d_state *
                        static_cast<int64_t>(dtype_size(m.ssm_state_dtype));
    out.committed_per_request = layers * (out.conv_per_layer + out.ssm_per_layer);
    out.scratch_per_row = out.committed_per_request * window;
    out.record_per_token =
        (out.conv_dim + m.num_heads) * static_cast<int64_t>(dtype_size(m.act_dtype));
    out.records_per_slot =
        layers * window * out.record_per_token + layers * 4 + int64_t{window} * 4;
    return out;
  }
  const GdnConfig& g = config.gdn;
  const int64_t hv = g.num_v_heads;
  out.conv_dim = 2 * int64_t{g.num_k_heads} * g.head_k_dim + hv * g.head_v_dim;
  out.conv_per_layer =
      out.conv_dim * (g.conv_width - 1) * static_cast<int64_t>(dtype_size(g.conv_state_dtype));
  out.ssm_per_layer =
      hv * g.head_v_dim * g.head_k_dim * static_cast<int64_t>(dtype_size(g.ssm_state_dtype));
  out.committed_per_request = layers * (out.conv_per_layer + out.ssm_per_layer);
  out.scratch_per_row = out.committed_per_request * window;
  out.record_per_token = (out.conv_dim + 2 * hv) * static_cast<int64_t>(dtype_size(g.act_dtype));
  out.records_per_slot = layers * window * out.record_per_token + layers * 4 + int64_t{window} * 4;
  return out;
}

int64_t workspace_bytes(const StateBytes& bytes, Strategy strategy, int64_t slots, int64_t rows) {
  return strategy == Strategy::kReplay ? bytes.records_per_slot * slots
                                       : bytes.scratch_per_row * rows;
}

Strategy parse_strategy(const std::string& text, const char* option) {
  if (text == "snapshot") return Strategy::kSnapshot;
  if (text == "replay") return Strategy::kReplay;
  throw CLI::ValidationError(option,
                             std::string(option) + " " + text + " must be snapshot or replay");
}

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, units[u]);
  }
  return buf;
}

std::string human_seconds(double seconds) {
  char buf[64];
  if (seconds >= 1.0) {
    std::snprintf(buf, sizeof(buf), "%.2f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", seconds * 1e6);
  }
  return buf;
}

void add_model_options(CLI::App* cmd, std::string& model, int& tp) {
  std::string models;
  for (const auto& n : model_preset_names()) models += (models.empty() ? "" : ", ") + n;
  cmd->add_option("--model", model, "Model preset: " + models)->capture_default_str();
  cmd->add_option("--tp", tp, "Tensor-parallel ranks (heads split over them)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
}

void describe_model(const ModelPreset& preset, const ModelConfig& config,
                    nlohmann::ordered_json& out) {
  if (config.kind == LayerKind::kMamba2) {
    const Mamba2Config& m = config.mamba;
    out["layer_kind"] = layer_kind_name(config.kind);
    out["total_layers"] = preset.total_layers;
    out["mamba2_layers"] = config.num_layers;
    out["num_heads"] = m.num_heads;
    out["head_dim"] = m.head_dim;
    out["d_state"] = m.d_state;
    out["n_groups"] = m.n_groups;
    out["conv_width"] = m.conv_width;
    out["conv_dim"] = config.conv_dim();
    out["act_dtype"] = dtype_name(m.act_dtype);
    out["conv_state_dtype"] = dtype_name(config.conv_state_dtype());
    out["ssm_state_dtype"] = dtype_name(config.ssm_state_dtype());
    return;
  }
  const GdnConfig& g = config.gdn;
  out["total_layers"] = preset.total_layers;
  out["gdn_layers"] = config.num_layers;
  out["num_k_heads"] = g.num_k_heads;
  out["num_v_heads"] = g.num_v_heads;
  out["head_k_dim"] = g.head_k_dim;
  out["head_v_dim"] = g.head_v_dim;
  out["conv_width"] = g.conv_width;
  out["conv_dim"] = config.conv_dim();
  out["act_dtype"] = dtype_name(g.act_dtype);
  out["conv_state_dtype"] = dtype_name(config.conv_state_dtype());
  out["ssm_state_dtype"] = dtype_name(config.ssm_state_dtype());
}

}  // namespace specstate::cli
