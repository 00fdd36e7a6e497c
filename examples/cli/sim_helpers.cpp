#include "cli/sim_helpers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "cli_checks.h"
#include "specstate/dtype.h"
#include "specstate/shard.h"
#include "specstate/spec/json_depth.h"
#include "specstate/status.h"

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

// A KDA model as Kimi-Linear configures its layers (linear_attn_config): num_k_heads = num_v_heads
// = num_heads, head_k_dim = head_v_dim = head_dim, short_conv_kernel_size, no conv bias, the
// plain gate (no gate_lower_bound in the checkpoint), bf16 activations and conv state, f32 SSM.
ModelPreset make_kda_preset(std::string name, std::string description, int total_layers,
                            int kda_layers, int heads, int head_dim, int conv_width) {
  KdaConfig layer;
  layer.num_k_heads = layer.num_v_heads = heads;
  layer.head_k_dim = layer.head_v_dim = head_dim;
  layer.conv_width = conv_width;
  layer.conv_bias = false;
  layer.act_dtype = DType::kBF16;
  layer.conv_state_dtype = DType::kBF16;
  layer.ssm_state_dtype = DType::kF32;
  return ModelPreset{std::move(name), std::move(description), total_layers,
                     ModelConfig::kda(kda_layers, layer)};
}

}  // namespace

GdnConfig gdn_dims(const KdaConfig& k) {
  GdnConfig g;
  g.num_k_heads = k.num_k_heads;
  g.num_v_heads = k.num_v_heads;
  g.head_k_dim = k.head_k_dim;
  g.head_v_dim = k.head_v_dim;
  g.conv_width = k.conv_width;
  g.conv_bias = k.conv_bias;
  g.act_dtype = k.act_dtype;
  g.conv_state_dtype = k.conv_state_dtype;
  g.ssm_state_dtype = k.ssm_state_dtype;
  return g;
}

void set_gdn_dims(KdaConfig& k, const GdnConfig& g) {
  k.num_k_heads = g.num_k_heads;
  k.num_v_heads = g.num_v_heads;
  k.head_k_dim = g.head_k_dim;
  k.head_v_dim = g.head_v_dim;
  k.conv_width = g.conv_width;
  k.conv_bias = g.conv_bias;
  k.act_dtype = g.act_dtype;
  k.conv_state_dtype = g.conv_state_dtype;
  k.ssm_state_dtype = g.ssm_state_dtype;
}

GdnConfig gdn_dims(const ModelConfig& c) {
  return c.kind == LayerKind::kKda ? gdn_dims(c.kda_layer) : c.gdn;
}

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
      // Kimi-Linear-48B-A3B (moonshotai/Kimi-Linear-48B-A3B-Instruct config.json,
      // linear_attn_config; docs/kda.md): 27 layers, kda_layers lists 20 of them (every 4th layer
      // and the last are MLA), 32 heads of head_dim 128, short_conv_kernel_size 4.
      make_kda_preset("kimi-linear-48b-a3b",
                      "Kimi-Linear-48B-A3B: 27 layers of which 20 KDA, H=HV=32 K=V=128 W=4, "
                      "bf16 act+conv, f32 SSM",
                      27, 20, 32, 128, 4),
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
  // The library's sharding (specstate::shard_map, rank 0: every rank has the same shape): heads
  // (and Mamba2's groups) split over the ranks, K, V, P, N and W unchanged.
  try {
    return shard_map(preset.config, tp, 0).config;
  } catch (const Error& e) {
    throw CLI::ValidationError(
        "--tp", "--tp " + std::to_string(tp) + " does not shard " + preset.name + ": " + e.what());
  }
}

namespace {

// Byte counts of custom dimensions can pass int64 (2^20 layers of 4 GiB states, 2^20 requests):
// every product and sum is checked, and the error names the field, as the library's layout does.
int64_t mul_checked(int64_t a, int64_t b, const char* field) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) {
    throw Error(Status::kInvalidArgument, std::string("state_bytes: ") + field + ": " +
                                              with_commas(a) + " x " + with_commas(b) +
                                              " B does not fit in 64 bits");
  }
  return out;
}

int64_t add_checked(int64_t a, int64_t b, const char* field) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out)) {
    throw Error(Status::kInvalidArgument, std::string("state_bytes: ") + field + ": " +
                                              with_commas(a) + " + " + with_commas(b) +
                                              " B does not fit in 64 bits");
  }
  return out;
}

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

StateBytes state_bytes(const ModelConfig& config, int window, int ring) {
  const int64_t layers = config.num_layers;
  int64_t conv_cols = 0, conv_size = 0, ssm_elems = 0, ssm_size = 0, record_cols = 0, act_size = 0;
  StateBytes out;
  if (config.kind == LayerKind::kMamba2) {
    // conv_dim = nheads * P + 2 * G * N; SSM nheads x P x N; record [xBC | dt].
    const Mamba2Config& m = config.mamba;
    out.conv_dim = int64_t{m.num_heads} * m.head_dim + 2 * int64_t{m.n_groups} * m.d_state;
    conv_cols = m.conv_width - 1;
    conv_size = static_cast<int64_t>(dtype_size(m.conv_state_dtype));
    ssm_elems = mul_checked(int64_t{m.num_heads} * m.head_dim, m.d_state, "ssm_per_layer");
    ssm_size = static_cast<int64_t>(dtype_size(m.ssm_state_dtype));
    record_cols = out.conv_dim;
    act_size = static_cast<int64_t>(dtype_size(m.act_dtype));
    const int64_t x_off = round16(8 * int64_t{m.num_heads});
    const int64_t b_off = round16(x_off + act_size * m.num_heads * m.head_dim);
    out.factor_record_per_token = round16(b_off + act_size * m.n_groups * m.d_state);
  } else {
    const GdnConfig g = gdn_dims(config);  // KDA: the same dimensions
    const int64_t hv = g.num_v_heads;
    out.conv_dim = 2 * int64_t{g.num_k_heads} * g.head_k_dim + hv * g.head_v_dim;
    conv_cols = g.conv_width - 1;
    conv_size = static_cast<int64_t>(dtype_size(g.conv_state_dtype));
    ssm_elems = mul_checked(hv * g.head_v_dim, g.head_k_dim, "ssm_per_layer");
    ssm_size = static_cast<int64_t>(dtype_size(g.ssm_state_dtype));
    record_cols = out.conv_dim;
    act_size = static_cast<int64_t>(dtype_size(g.act_dtype));
    // GDN: u [HV][V] f32, e^g [HV] f32, kf [H] f32 packed, k act [H][K] at 16; KDA: u, e^g
    // [HV][K], kf each at 16 (kernels::kda_factor_layout), then k.
    const int64_t k_off =
        config.kind == LayerKind::kKda
            ? round16(round16(round16(4 * hv * g.head_v_dim) + 4 * hv * g.head_k_dim) +
                      4 * int64_t{g.num_k_heads})
            : round16(4 * (hv * g.head_v_dim + hv + g.num_k_heads));
    out.factor_record_per_token = round16(k_off + act_size * int64_t{g.num_k_heads} * g.head_k_dim);
  }
  out.conv_per_layer = mul_checked(mul_checked(out.conv_dim, conv_cols, "conv_per_layer"),
                                   conv_size, "conv_per_layer");
  out.ssm_per_layer = mul_checked(ssm_elems, ssm_size, "ssm_per_layer");
  out.committed_per_request =
      mul_checked(layers, add_checked(out.conv_per_layer, out.ssm_per_layer, "bytes per layer"),
                  "committed_per_request");
  out.scratch_per_row = mul_checked(out.committed_per_request, window, "scratch_per_row");
  out.conv_record_per_token = mul_checked(record_cols, act_size, "record_per_token");
  out.record_per_token =
      add_checked(out.conv_record_per_token, out.factor_record_per_token, "record_per_token");
  out.ring = ring > 0 ? ring : static_cast<int>(default_replay_ring(config.kind, window));
  const int64_t per_layer = add_checked(
      add_checked(mul_checked(window, out.conv_record_per_token, "records_per_slot"),
                  mul_checked(out.ring, out.factor_record_per_token, "records_per_slot"),
                  "records_per_slot"),
      12, "records_per_slot");
  out.records_per_slot = add_checked(mul_checked(layers, per_layer, "records_per_slot"),
                                     int64_t{window} * 4, "records_per_slot");
  return out;
}

int64_t workspace_bytes(const StateBytes& bytes, Strategy strategy, int64_t slots, int64_t rows) {
  return strategy == Strategy::kReplay
             ? mul_checked(bytes.records_per_slot, slots, "records of all slots")
             : mul_checked(bytes.scratch_per_row, rows, "scratch of all rows");
}

double available_host_bytes() {
  if (const char* forced = std::getenv("SPECSTATE_SIM_HOST_BYTES")) {
    const double v = std::strtod(forced, nullptr);
    if (v > 0) return v;
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
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

namespace {

// "f32" / "bf16" (the names dtype_name prints); throws CLI::ValidationError naming `option`.
DType parse_dtype(const std::string& text, const std::string& option) {
  if (text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  throw CLI::ValidationError(option, "\"" + text +
                                         "\" is not a state or activation dtype "
                                         "(f32 or bf16)");
}

const char* cli_kind_name(LayerKind kind) {
  return kind == LayerKind::kMamba2 ? "mamba2" : kind == LayerKind::kKda ? "kda" : "gdn";
}

LayerKind parse_kind(const std::string& text, const std::string& option) {
  if (text == "gdn" || text == "gated_delta_net") return LayerKind::kGatedDeltaNet;
  if (text == "mamba2") return LayerKind::kMamba2;
  if (text == "kda") return LayerKind::kKda;
  throw CLI::ValidationError(option, "\"" + text + "\" is not a layer kind (gdn, mamba2 or kda)");
}

}  // namespace

bool ModelDims::any() const {
  return !kind.empty() || layers > 0 || total_layers > 0 || heads > 0 || v_heads > 0 ||
         head_k_dim > 0 || head_v_dim > 0 || head_dim > 0 || d_state > 0 || groups > 0 ||
         conv_width > 0 || !act_dtype.empty() || !conv_dtype.empty() || !ssm_dtype.empty();
}

ModelPreset read_model_file(const std::string& path) {
  const std::string option = "--model-file";
  // A FIFO would block the open until a writer came (a model file is read whole, not streamed
  // as a --trace is): refused by name.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
    throw CLI::ValidationError(option, path + " is a FIFO; give the model file itself");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CLI::ValidationError(option, "cannot read " + path);
  // A model file is a few hundred bytes; reading a bounded prefix keeps /dev/zero or a huge file
  // from exhausting memory.
  std::string content(static_cast<std::size_t>(kMaxModelFileBytes) + 1, '\0');
  in.read(&content[0], static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw CLI::ValidationError(option, "cannot read " + path);
  if (static_cast<int64_t>(content.size()) > kMaxModelFileBytes) {
    throw CLI::ValidationError(option, path + " is larger than the limit of " +
                                           std::to_string(kMaxModelFileBytes) +
                                           " bytes (not a model file?)");
  }
  // JSON text holds no NUL byte; nlohmann's parser takes one as the end of the input and would
  // ignore what follows it, as the trace reader and the safetensors header check say.
  if (const std::size_t nul = content.find('\0'); nul != std::string::npos) {
    throw CLI::ValidationError(option, path + " holds a NUL byte (at byte " + std::to_string(nul) +
                                           "; not a model file?)");
  }
  // nlohmann's parser is iterative, but dump() (the messages below quote values) and comparisons
  // recurse: 100,000 nested brackets overflow the stack after a successful parse (issue 20.6).
  // Checked on the raw text, as the trace and safetensors readers do.
  const spec::JsonNesting depth = spec::json_nesting(content, kMaxModelFileJsonDepth);
  if (depth.first_past_limit >= 0) {
    throw CLI::ValidationError(option, path + " nests JSON " + std::to_string(depth.max_depth) +
                                           " levels deep, more than the limit of " +
                                           std::to_string(kMaxModelFileJsonDepth) +
                                           " (first past it at byte " +
                                           std::to_string(depth.first_past_limit) + ")");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(content);
  } catch (const nlohmann::json::exception& e) {
    throw CLI::ValidationError(option, path + " is no JSON: " + e.what());
  }
  if (!j.is_object()) throw CLI::ValidationError(option, path + ": a model file is a JSON object");
  if (const std::string dup = spec::json_duplicate_key(content); !dup.empty()) {
    throw CLI::ValidationError(option, path + ": key \"" + dup + "\" appears twice in one object");
  }
  const auto fail = [&](const std::string& what) {
    throw CLI::ValidationError(option, path + ": " + what);
  };
  if (!j.contains("kind")) fail("\"kind\" missing (\"gdn\", \"mamba2\" or \"kda\")");
  if (!j.contains("layers")) fail("\"layers\" missing (the recurrent layers)");
  if (!j["kind"].is_string()) fail("\"kind\" must be \"gdn\", \"mamba2\" or \"kda\"");
  const std::string kind_text = j["kind"].get<std::string>();
  LayerKind kind = LayerKind::kGatedDeltaNet;
  try {
    kind = parse_kind(kind_text, option);
  } catch (const CLI::ValidationError&) {  // (named with the file, as every other refusal here)
    fail("\"kind\": \"" + kind_text + "\" is not a layer kind (gdn, mamba2 or kda)");
  }
  const bool mamba = kind == LayerKind::kMamba2;
  const std::set<std::string> common = {
      "name",       "description", "kind",      "layers",           "total_layers",
      "conv_width", "conv_bias",   "act_dtype", "conv_state_dtype", "ssm_state_dtype"};
  const std::set<std::string> gdn_keys = {"num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"};
  const std::set<std::string> mamba_keys = {"num_heads", "head_dim", "d_state",
                                            "n_groups",  "d_skip",   "gate"};
  const std::set<std::string>& own = mamba ? mamba_keys : gdn_keys;
  for (const auto& [key, value] : j.items()) {
    if (common.count(key) == 0 && own.count(key) == 0) {
      std::string known;
      for (const auto* keys : {&common, &own}) {
        for (const auto& k : *keys) known += (known.empty() ? "" : ", ") + k;
      }
      fail("unknown key \"" + key + "\" for a " + cli_kind_name(kind) + " model (known: " + known +
           ")");
    }
  }
  const auto integer = [&](const char* key, int fallback) {
    if (!j.contains(key)) return fallback;
    const auto& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
      fail(std::string("\"") + key + "\" = " + v.dump() + ": an integer in [1, 1048576]");
    }
    return static_cast<int>(v.get<int64_t>());
  };
  const auto boolean = [&](const char* key, bool fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_boolean())
      fail(std::string("\"") + key + "\" = " + j[key].dump() + ": true or false");
    return j[key].get<bool>();
  };
  const auto dtype = [&](const char* key, DType fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_string())
      fail(std::string("\"") + key + "\" = " + j[key].dump() + ": f32 or bf16");
    try {
      return parse_dtype(j[key].get<std::string>(), option);
    } catch (const CLI::ValidationError&) {
      fail(std::string("\"") + key + "\" = " + j[key].dump() + ": f32 or bf16");
    }
    return fallback;
  };
  const auto text = [&](const char* key, const std::string& fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_string()) fail(std::string("\"") + key + "\" must be a string");
    std::string value = j[key].get<std::string>();
    // Printed in the reports' text (a NUL ended the name there, other control characters
    // garbled the terminal): refused, the value quoted as JSON.
    for (std::size_t i = 0; i < value.size(); ++i) {
      const auto c = static_cast<unsigned char>(value[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        // The value quoted up to 64 bytes (a description may be a megabyte of them).
        fail(std::string("\"") + key + "\" holds a control character at byte " + std::to_string(i) +
             " (names and descriptions are printed): " +
             nlohmann::json(value.substr(0, 64))
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
             (value.size() > 64 ? "..." : ""));
      }
    }
    return value;
  };
  std::string stem =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0)
    stem.resize(stem.size() - 5);
  ModelPreset out;
  out.name = text("name", stem);
  out.description = text("description", "model file " + path);
  const int layers = integer("layers", 1);
  out.total_layers = integer("total_layers", layers);
  if (out.total_layers < layers) {
    fail("\"total_layers\" = " + std::to_string(out.total_layers) +
         " is less than \"layers\" = " + std::to_string(layers));
  }
  if (mamba) {
    Mamba2Config m;
    m.num_heads = integer("num_heads", m.num_heads);
    m.head_dim = integer("head_dim", m.head_dim);
    m.d_state = integer("d_state", m.d_state);
    m.n_groups = integer("n_groups", m.n_groups);
    m.conv_width = integer("conv_width", m.conv_width);
    m.conv_bias = boolean("conv_bias", m.conv_bias);
    m.d_skip = boolean("d_skip", m.d_skip);
    m.gate = boolean("gate", m.gate);
    m.act_dtype = dtype("act_dtype", m.act_dtype);
    m.conv_state_dtype = dtype("conv_state_dtype", m.conv_state_dtype);
    m.ssm_state_dtype = dtype("ssm_state_dtype", m.ssm_state_dtype);
    out.config = ModelConfig::mamba2(layers, m);
  } else {
    // GDN and KDA read the same fields, each over its own library defaults.
    const bool kda = kind == LayerKind::kKda;
    GdnConfig g = kda ? gdn_dims(KdaConfig{}) : GdnConfig{};
    g.num_k_heads = integer("num_k_heads", g.num_k_heads);
    g.num_v_heads = integer("num_v_heads", g.num_v_heads);
    g.head_k_dim = integer("head_k_dim", g.head_k_dim);
    g.head_v_dim = integer("head_v_dim", g.head_v_dim);
    g.conv_width = integer("conv_width", g.conv_width);
    g.conv_bias = boolean("conv_bias", g.conv_bias);
    g.act_dtype = dtype("act_dtype", g.act_dtype);
    g.conv_state_dtype = dtype("conv_state_dtype", g.conv_state_dtype);
    g.ssm_state_dtype = dtype("ssm_state_dtype", g.ssm_state_dtype);
    if (kda) {
      KdaConfig k;
      set_gdn_dims(k, g);
      out.config = ModelConfig::kda(layers, k);
    } else {
      out.config = ModelConfig::gated_delta_net(layers, g);
    }
  }
  try {
    out.config.validate();
  } catch (const Error& e) {
    fail(e.what());
  }
  return out;
}

ModelPreset resolve_model(const std::string& model, const std::string& model_file,
                          const ModelDims& d) {
  ModelPreset out = model_file.empty() ? find_preset(model) : read_model_file(model_file);
  if (!d.any()) return out;
  const int others = out.total_layers - out.config.num_layers;  // attention, MLP: not ours
  ModelConfig& c = out.config;
  bool switched = false;  // another layer kind than the model's
  if (!d.kind.empty()) {
    const LayerKind kind = parse_kind(d.kind, "--kind");
    if (kind != c.kind) {
      if (d.layers == 0) {
        throw CLI::ValidationError("--kind", "--kind " + d.kind + " changes the layers of " +
                                                 out.name + " (" + layer_kind_name(c.kind) +
                                                 "): give --layers too");
      }
      // Another kind, every layer recurrent unless --total-layers says otherwise. Between the
      // two delta-rule kinds (GDN, KDA) the model's dimensions and dtypes are kept (--model tiny
      // --kind kda took Kimi-Linear's 32 heads of 128 and needed 43 GB at --layers 10000);
      // to or from Mamba2, whose dimensions are others, the library's defaults of that layer
      // (Nemotron-H-8B / Qwen3-Next-80B / Kimi-Linear-48B at TP 1).
      const bool delta_before = c.kind != LayerKind::kMamba2;
      if (kind == LayerKind::kKda) {
        KdaConfig k;
        if (delta_before) set_gdn_dims(k, gdn_dims(c));
        c = ModelConfig::kda(d.layers, k);
      } else if (kind == LayerKind::kGatedDeltaNet) {
        c = ModelConfig::gated_delta_net(d.layers, delta_before ? gdn_dims(c) : GdnConfig{});
      } else {
        c = ModelConfig::mamba2(d.layers, Mamba2Config{});
      }
      out.name = "custom";
      out.total_layers = d.layers;
      switched = true;
    }
  }
  const bool mamba = c.kind == LayerKind::kMamba2;
  const auto other_kind = [&](int value, const char* option) {
    if (value > 0) {
      throw CLI::ValidationError(
          option, std::string(option) + " is a " + (mamba ? "Gated DeltaNet / KDA" : "Mamba2") +
                      " dimension; the layers of " + out.name + " are " + layer_kind_name(c.kind));
    }
  };
  const auto set = [](int value, int& field) {
    if (value > 0) field = value;
  };
  if (d.layers > 0 && !switched) {
    c.num_layers = d.layers;
    out.total_layers = d.layers + others;
  }
  if (d.total_layers > 0) {
    if (d.total_layers < c.num_layers) {
      throw CLI::ValidationError("--total-layers",
                                 "--total-layers " + std::to_string(d.total_layers) +
                                     " is less than the " + std::to_string(c.num_layers) +
                                     " recurrent layers");
    }
    out.total_layers = d.total_layers;
  }
  if (mamba) {
    other_kind(d.v_heads, "--v-heads");
    other_kind(d.head_k_dim, "--head-k-dim");
    other_kind(d.head_v_dim, "--head-v-dim");
    Mamba2Config& m = c.mamba;
    set(d.heads, m.num_heads);
    set(d.head_dim, m.head_dim);
    set(d.d_state, m.d_state);
    set(d.groups, m.n_groups);
    set(d.conv_width, m.conv_width);
    if (!d.act_dtype.empty()) m.act_dtype = parse_dtype(d.act_dtype, "--act-dtype");
    if (!d.conv_dtype.empty()) m.conv_state_dtype = parse_dtype(d.conv_dtype, "--conv-dtype");
    if (!d.ssm_dtype.empty()) m.ssm_state_dtype = parse_dtype(d.ssm_dtype, "--ssm-dtype");
  } else {
    other_kind(d.head_dim, "--head-dim");
    other_kind(d.d_state, "--d-state");
    other_kind(d.groups, "--groups");
    GdnConfig g = gdn_dims(c);  // GDN or KDA
    set(d.heads, g.num_k_heads);
    set(d.v_heads, g.num_v_heads);
    set(d.head_k_dim, g.head_k_dim);
    set(d.head_v_dim, g.head_v_dim);
    set(d.conv_width, g.conv_width);
    if (!d.act_dtype.empty()) g.act_dtype = parse_dtype(d.act_dtype, "--act-dtype");
    if (!d.conv_dtype.empty()) g.conv_state_dtype = parse_dtype(d.conv_dtype, "--conv-dtype");
    if (!d.ssm_dtype.empty()) g.ssm_state_dtype = parse_dtype(d.ssm_dtype, "--ssm-dtype");
    if (c.kind == LayerKind::kKda) {
      set_gdn_dims(c.kda_layer, g);
    } else {
      c.gdn = g;
    }
  }
  if (!switched) out.name += " (custom)";
  out.description = "custom dimensions";
  try {
    c.validate();
  } catch (const Error& e) {
    // Named by the options given whose field the library's message names (--v-heads 6 where
    // num_v_heads must be a multiple of num_k_heads), with their values, else by every option
    // given ("custom dimensions (--heads, --layers, ...)" named options nobody passed).
    const std::string what = e.what();
    const std::pair<int, const char*> fields[] = {
        {d.layers, "num_layers"},     {d.heads, mamba ? "num_heads" : "num_k_heads"},
        {d.v_heads, "num_v_heads"},   {d.head_k_dim, "head_k_dim"},
        {d.head_v_dim, "head_v_dim"}, {d.head_dim, "head_dim"},
        {d.d_state, "d_state"},       {d.groups, "n_groups"},
        {d.conv_width, "conv_width"}};
    const char* options[] = {"--layers",   "--heads",   "--v-heads", "--head-k-dim", "--head-v-dim",
                             "--head-dim", "--d-state", "--groups",  "--conv-width"};
    std::string named, given;
    for (std::size_t i = 0; i < std::size(fields); ++i) {
      if (fields[i].first <= 0) continue;
      const std::string option = std::string(options[i]) + " " + std::to_string(fields[i].first);
      given += (given.empty() ? "" : ", ") + option;
      if (what.find(fields[i].second) != std::string::npos) {
        named += (named.empty() ? "" : ", ") + option;
      }
    }
    for (const auto& [value, option] :
         {std::pair<const std::string&, const char*>{d.act_dtype, "--act-dtype"},
          {d.conv_dtype, "--conv-dtype"},
          {d.ssm_dtype, "--ssm-dtype"}}) {
      if (!value.empty()) given += (given.empty() ? "" : ", ") + std::string(option) + " " + value;
    }
    const std::string who = named.empty() ? given : named;
    const std::string base = model_file.empty() ? model : model_file;
    throw CLI::ValidationError(
        who.empty() ? "--kind" : who.substr(0, who.find(' ')),
        (who.empty() ? "--kind " + d.kind : who) + " (over " + base + "): " + what);
  }
  return out;
}

void check_writable(const std::string& path, const char* option) {
  const auto fail = [&](const std::string& why) {
    throw CLI::ValidationError(option, std::string(option) + " " + path + ": " + why);
  };
  if (path.empty()) fail("empty file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail("is a directory");
    if (::access(path.c_str(), W_OK) != 0)
      fail(std::string("cannot write: ") + std::strerror(errno));
    return;
  }
  if (errno != ENOENT) fail(std::strerror(errno));
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0) fail("directory " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail(dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    fail("cannot create a file in " + dir + ": " + std::strerror(errno));
  }
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;  // both exist, one file
  const auto norm = [](const std::string& p) {
    std::error_code e;
    const auto w = std::filesystem::weakly_canonical(std::filesystem::absolute(p, e), e);
    return e ? std::filesystem::path(p).lexically_normal() : w;
  };
  return norm(a) == norm(b);
}

void add_model_options(CLI::App* cmd, std::string& model, std::string& model_file, int& tp,
                       ModelDims& dims) {
  std::string models;
  for (const auto& n : model_preset_names()) models += (models.empty() ? "" : ", ") + n;
  auto* preset =
      cmd->add_option("--model", model, "Model preset: " + models)->capture_default_str();
  auto* file =
      cmd->add_option("--model-file", model_file,
                      "JSON model file instead of a preset: {\"kind\": \"gdn\"|\"mamba2\"|\"kda\", "
                      "\"layers\": N, ...} (docs/simulate.md)")
          ->check(CLI::ExistingFile);
  file->excludes(preset);
  cmd->add_option("--tp", tp, "Tensor-parallel ranks (heads split over them)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  const auto dim = [&](const char* name, int& field, const char* help) {
    cmd->add_option(name, field, help)
        ->transform(specstate::examples::decimal())
        ->check(CLI::Range(1, 1 << 20))
        ->group("Model dimensions");
  };
  cmd->add_option("--kind", dims.kind,
                  "Layer kind of custom dimensions: gdn, mamba2 or kda (KDA takes GDN's options)")
      ->check(CLI::IsMember({"gdn", "mamba2", "kda"}))
      ->group("Model dimensions");
  dim("--layers", dims.layers, "Recurrent (GDN, Mamba2 or KDA) layers");
  dim("--total-layers", dims.total_layers,
      "All layers, attention included (default: --layers + the model's other layers)");
  dim("--heads", dims.heads, "GDN / KDA: key heads H; Mamba2: heads");
  dim("--v-heads", dims.v_heads, "GDN / KDA: value heads HV (a multiple of H)");
  dim("--head-k-dim", dims.head_k_dim, "GDN / KDA: key head dim K");
  dim("--head-v-dim", dims.head_v_dim, "GDN / KDA: value head dim V");
  dim("--head-dim", dims.head_dim, "Mamba2: channels per head P");
  dim("--d-state", dims.d_state, "Mamba2: state size N");
  dim("--groups", dims.groups, "Mamba2: groups G of B and C");
  cmd->add_option("--conv-width", dims.conv_width, "Conv taps W (at least 2: the state keeps W-1)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(2, 1 << 20))
      ->group("Model dimensions");
  for (auto [name, field, help] :
       {std::tuple<const char*, std::string*, const char*>{"--act-dtype", &dims.act_dtype,
                                                           "Activation dtype: f32 or bf16"},
        {"--conv-dtype", &dims.conv_dtype, "Conv state dtype: f32 or bf16"},
        {"--ssm-dtype", &dims.ssm_dtype, "SSM state dtype: f32 or bf16"}}) {
    cmd->add_option(name, *field, help)
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->group("Model dimensions");
  }
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
  const GdnConfig g = gdn_dims(config);
  const bool kda = config.kind == LayerKind::kKda;
  if (kda) out["layer_kind"] = layer_kind_name(config.kind);
  out["total_layers"] = preset.total_layers;
  out[kda ? "kda_layers" : "gdn_layers"] = config.num_layers;
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
