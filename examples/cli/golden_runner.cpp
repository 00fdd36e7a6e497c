// The kind-generic conformance runner (golden_runner.h, docs/golden.md): memory the pool reads,
// values in storage dtypes, the round through the public API, the property checks and the
// comparisons with SGLang and the float64 reference. The layer kind's side is its adapter.
#include "cli/golden_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "cli/sim_helpers.h"

namespace specstate::cli::golden {

void bad_case(const std::string& message) { throw CaseError(message); }

namespace {

// "[a, b, c]".
template <typename Int>
std::string list_string(const std::vector<Int>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

}  // namespace

std::string shape_string(const Shape& shape) { return list_string(shape); }
std::string int_list_string(const std::vector<int32_t>& values) { return list_string(values); }

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string layer_name(const std::string& base, int layer) {
  return base + ".l" + std::to_string(layer);
}

Shape shape_in(const TensorStore& store, const std::string& name) {
  if (!store.contains(name)) bad_case("the case has no tensor '" + name + "'");
  return store.info(name).shape;
}

void expect_shape(const TensorStore& store, const std::string& name, const Shape& expected) {
  const Shape got = shape_in(store, name);
  if (got != expected) {
    bad_case("tensor '" + name + "' has shape " + shape_string(got) + ", expected " +
             shape_string(expected));
  }
}

Shape shape_of_rank(const TensorStore& store, const std::string& name, std::size_t rank,
                    const std::string& layout) {
  const Shape shape = shape_in(store, name);
  if (shape.size() != rank)
    bad_case(name + " has shape " + shape_string(shape) + ", expected " + layout);
  return shape;
}

void check_param(const json& params, const char* key, int64_t value, const std::string& source) {
  const auto it = params.find(key);
  if (it == params.end()) return;
  if (!it->is_number_integer() || it->get<int64_t>() != value) {
    bad_case(std::string("params_json '") + key + "' = " + it->dump() + " but " + source +
             " gives " + std::to_string(value));
  }
}

void read_round_indices(const TensorStore& store, const json& params, RoundSpec& spec) {
  // Index tensors.
  spec.cache_indices = store.to_int32("cache_indices");
  if (static_cast<int>(spec.cache_indices.size()) != spec.R) {
    bad_case("cache_indices has " + std::to_string(spec.cache_indices.size()) +
             " entries, expected R = " + std::to_string(spec.R));
  }
  spec.real.assign(spec.R, false);
  std::set<int32_t> used;
  for (int r = 0; r < spec.R; ++r) {
    const int32_t slot = spec.cache_indices[r];
    if (slot < -1 || slot >= spec.S) {
      bad_case("cache_indices[" + std::to_string(r) + "] = " + std::to_string(slot) +
               " outside [-1, " + std::to_string(spec.S) + ")");
    }
    if (slot >= 0 && !used.insert(slot).second) {
      bad_case("cache_indices names slot " + std::to_string(slot) + " twice");
    }
    spec.real[r] = slot >= 0;
    spec.n_real += slot >= 0;
  }
  if (store.contains("parents")) {
    spec.parents = store.to_int32("parents");
    if (static_cast<int>(spec.parents.size()) != spec.T) {
      bad_case("parents has " + std::to_string(spec.parents.size()) +
               " entries, expected T = " + std::to_string(spec.T));
    }
  } else {
    for (int t = 0; t < spec.T; ++t) spec.parents.push_back(t - 1);
  }
  bool chain = true;
  for (int t = 0; t < spec.T; ++t) chain = chain && spec.parents[t] == t - 1;
  const auto tree = params.find("tree");
  spec.tree = !chain || (tree != params.end() && tree->is_boolean() && tree->get<bool>());

  // Every index is range-checked before any arithmetic on it (accept_len - 1 of INT32_MIN
  // overflows) and before it indexes anything.
  const auto check_range = [&](const std::vector<int32_t>& values, const char* name, int32_t lo,
                               int32_t hi) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] < lo || values[i] > hi) {
        bad_case(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
                 " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
    }
  };
  check_range(spec.parents, "parents", -1, spec.T - 1);
  if (store.contains("accept_len")) {
    spec.accept_len = store.to_int32("accept_len");
    check_range(spec.accept_len, "accept_len", 0, spec.T);
  }
  if (store.contains("last_step")) {
    spec.last_step = store.to_int32("last_step");
    check_range(spec.last_step, "last_step", -1, spec.T - 1);
  }
  if (spec.last_step.empty()) {
    if (spec.tree) bad_case("a tree case needs 'last_step' (the accepted node of each row)");
    if (spec.accept_len.empty()) bad_case("the case has neither 'accept_len' nor 'last_step'");
    for (int32_t n : spec.accept_len) spec.last_step.push_back(n - 1);
  }
  if (!spec.tree && spec.accept_len.empty()) {
    for (int32_t step : spec.last_step) spec.accept_len.push_back(step + 1);
  }
  if (static_cast<int>(spec.last_step.size()) != spec.R) {
    bad_case("last_step has " + std::to_string(spec.last_step.size()) + " entries, expected R");
  }
  if (!spec.tree && !spec.accept_len.empty()) {
    if (static_cast<int>(spec.accept_len.size()) != spec.R) {
      bad_case("accept_len has " + std::to_string(spec.accept_len.size()) + " entries, expected R");
    }
    for (int r = 0; r < spec.R; ++r) {
      if (spec.real[r] && spec.last_step[r] != spec.accept_len[r] - 1) {
        bad_case("row " + std::to_string(r) + ": last_step " + std::to_string(spec.last_step[r]) +
                 " != accept_len - 1 = " + std::to_string(spec.accept_len[r] - 1) +
                 " in a chain case");
      }
    }
  }
  for (int r = 0; r < spec.R; ++r) {
    if (!spec.real[r]) spec.last_step[r] = -1;  // a padding row keeps (and reads nothing)
  }
}

void set_state_shapes(RoundSpec& round, int conv_dim, int width, int heads, int v, int k) {
  const int64_t R = round.R, T = round.T, S = round.S;
  round.conv_out = {R, T, conv_dim};
  round.core_out = {R, T, heads, v};
  round.conv_window = {R, T, conv_dim, width - 1};
  round.ssm_step = {T, heads, v, k};
  round.conv_pool = {S, conv_dim, width - 1};
  round.ssm_pool = {S, heads, v, k};
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The first `rows` x `window` block of a [max_rows, max_window, ...] scratch view.
TensorView leading_block(TensorView view, int64_t rows, int64_t window) {
  view.shape[0] = rows;
  view.shape[1] = window;
  return view;
}

// --- comparisons ----------------------------------------------------------------------------

// max|ours - x| and max|x| over a set of elements, with where the largest difference sits.
struct Diff {
  double max_diff = 0.0;
  double max_ref = 0.0;
  bool nonfinite = false;
  std::string where;

  double rel() const {
    if (nonfinite) return kInf;
    if (max_ref > 0.0) return max_diff / max_ref;
    return max_diff > 0.0 ? kInf : 0.0;
  }
};

std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return shape_string(index);
}

// Adds ours vs x over the [outer, ...] tensor `shape`, skipping outer indices where !keep.
void accumulate(Diff& diff, const std::vector<float>& ours, const std::vector<float>& x,
                const Shape& shape, const std::vector<bool>* keep, const std::string& label,
                bool flat_where) {
  const int64_t n = numel_of(shape);
  const int64_t inner = shape.empty() || shape[0] == 0 ? 0 : n / shape[0];
  const auto at = [&](int64_t i) {
    return flat_where ? label + " element " + std::to_string(i)
                      : label + " " + index_string(i, shape);
  };
  for (int64_t i = 0; i < n; ++i) {
    if (keep != nullptr && !(*keep)[static_cast<std::size_t>(i / inner)]) continue;
    const double o = ours[i], r = x[i];
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (!diff.nonfinite) diff.where = at(i) + " non-finite";
      diff.nonfinite = true;
      continue;
    }
    diff.max_ref = std::max(diff.max_ref, std::abs(r));
    const double d = std::abs(o - r);
    if (d > diff.max_diff && !diff.nonfinite) diff.where = at(i);
    diff.max_diff = std::max(diff.max_diff, d);
  }
}

// One compared tensor over all layers: per layer max_rel, the worst layer counts. Against the
// float64 reference `tol`, against SGLang twice that (ours and SGLang's each within tol of it).
class Comparison {
 public:
  Comparison(std::string tensor, double tol, const ReportStyle& style) : style_(style) {
    out_.tensor = std::move(tensor);
    out_.tol_ref = tol;
    out_.tol_sglang = 2 * tol;
  }

  // ours vs `name` (SGLang) and `ref_` + name, for one layer; absent tensors are skipped.
  void add_layer(const TensorStore& store, const std::string& name, const std::vector<float>& ours,
                 const Shape& shape, const std::vector<bool>* keep) {
    Diff sglang, ref;
    const bool has_s = add(store, name, ours, shape, keep, sglang);
    const bool has_r = add(store, "ref_" + name, ours, shape, keep, ref);
    finish_layer(has_s, sglang, has_r, ref);
  }

  // Several tensors (one per row) making one logical layer tensor (inter_ssm.l<l>.r<i>).
  void add_rows(const TensorStore& store, const std::vector<std::string>& names,
                const std::vector<std::vector<float>>& ours, const Shape& shape) {
    if (style_.inter_ssm_rows_apart) {
      for (std::size_t i = 0; i < names.size(); ++i)
        add_layer(store, names[i], ours[i], shape, nullptr);
      return;
    }
    Diff sglang, ref;
    bool has_s = false, has_r = false;
    for (std::size_t i = 0; i < names.size(); ++i) {
      has_s = add(store, names[i], ours[i], shape, nullptr, sglang) || has_s;
      has_r = add(store, "ref_" + names[i], ours[i], shape, nullptr, ref) || has_r;
    }
    finish_layer(has_s, sglang, has_r, ref);
  }

  TensorComparison result(bool required) const {
    TensorComparison out = out_;
    const bool ok_ref = !out.has_ref || out.vs_ref <= out.tol_ref;
    const bool ok_sglang = !out.has_sglang || out.vs_sglang <= out.tol_sglang;
    out.pass = ok_ref && ok_sglang && (out.has_ref || out.has_sglang || !required);
    if (!out.has_ref && !out.has_sglang && required) out.worst = "missing from the case";
    return out;
  }

 private:
  bool add(const TensorStore& store, const std::string& name, const std::vector<float>& ours,
           const Shape& shape, const std::vector<bool>* keep, Diff& diff) const {
    if (!store.contains(name)) return false;
    expect_shape(store, name, shape);
    accumulate(diff, ours, store.to_float(name), shape, keep, name, style_.flat_where);
    return true;
  }

  void finish_layer(bool has_s, const Diff& sglang, bool has_r, const Diff& ref) {
    if (has_s) {
      out_.has_sglang = true;
      if (!(sglang.rel() <= out_.vs_sglang)) {
        out_.vs_sglang = sglang.rel();
        const bool show =
            style_.sglang_where_unless_earlier_ref ? !out_.has_ref : !has_r && !out_.has_ref;
        if (show) out_.worst = sglang.where;
      }
    }
    if (has_r) {
      out_.has_ref = true;
      if (!(ref.rel() <= out_.vs_ref)) {
        out_.vs_ref = ref.rel();
        out_.worst = ref.where;
      }
    }
  }

  const ReportStyle& style_;
  TensorComparison out_;  // what result() returns, but for pass
};

// The raw bytes of a run, per layer: what two strategies must agree on bit for bit.
struct RunBytes {
  std::vector<Bytes> conv_out, core_out, conv_committed, ssm_committed;
};

// The first layer and tensor where two runs differ, or "" when they are bit-identical.
std::string first_difference(const RunBytes& x, const RunBytes& y) {
  const std::pair<const char*, const std::vector<Bytes> RunBytes::*> tensors[] = {
      {"conv_out", &RunBytes::conv_out},
      {"core_out", &RunBytes::core_out},
      {"conv_state_committed", &RunBytes::conv_committed},
      {"ssm_state_committed", &RunBytes::ssm_committed}};
  for (const auto& [name, member] : tensors) {
    const auto& xs = x.*member;
    const auto& ys = y.*member;
    if (xs.size() != ys.size()) return std::string(name) + ": different layer counts";
    for (std::size_t l = 0; l < xs.size(); ++l) {
      if (xs[l] != ys[l]) return layer_name(name, static_cast<int>(l)) + " differs";
    }
  }
  return "";
}

// What we produced for one layer, as floats in row-major order.
struct LayerResult {
  std::vector<float> conv_out, core_out;             // SGLang's [R, T, ...] layouts
  std::vector<float> snap_conv, snap_ssm;            // [R, T, conv_dim, W-1], [R, T, ...]
  std::vector<float> conv_committed, ssm_committed;  // [S, ...]
};

// The name of the first real row's output that still holds a NaN sentinel, or "".
std::string first_unwritten(const RoundSpec& s, const ReportStyle& style, int l,
                            const LayerResult& res) {
  const std::pair<const char*, const std::vector<float>*> conv{"conv_out", &res.conv_out},
      core{"core_out", &res.core_out};
  const std::pair<const char*, const std::vector<float>*> order[] = {
      style.core_out_checked_first ? core : conv, style.core_out_checked_first ? conv : core};
  for (int r = 0; r < s.R; ++r) {
    if (!s.real[r]) continue;
    for (const auto& [base, values] : order) {
      const int64_t per_row = static_cast<int64_t>(values->size()) / s.R;
      for (int64_t i = 0; i < per_row; ++i) {
        if (std::isnan((*values)[r * per_row + i])) {
          return layer_name(base, l) + " row " + std::to_string(r);
        }
      }
    }
  }
  return "";
}

// The host memory a case's rounds take at most, refused past what is available now (as simulate
// refuses its runs): a few-MB file names S, R, T and the dimensions, and the pools they ask for
// are allocated and read back several times (a 42 MB case asked for a 17 GB pool, which the CPU
// backend accepts below physical memory, then about three times that in copies). A snapshot
// round holds its pool (CPU) and about three copies of the committed state and the scratch
// (before, after, the checks' reads and their floats); a replay round holds its pool, those
// copies of the committed state and, at once, the snapshot round it is compared with.
void check_case_memory(const GoldenAdapter& adapter, const GoldenOptions& options) {
  const RoundSpec& s = adapter.round();
  const StateBytes b = state_bytes(adapter.model(), s.T);
  const double committed = static_cast<double>(s.S) * static_cast<double>(b.committed_per_request);
  const double scratch = static_cast<double>(s.R) * static_cast<double>(b.scratch_per_row);
  const double records = static_cast<double>(s.S) * static_cast<double>(b.records_per_slot);
  const bool cpu = options.backend == Backend::kCpu;
  const double snapshot_round = (cpu ? committed + scratch : 0.0) + 3.0 * (committed + scratch);
  const double bytes = options.strategy == Strategy::kSnapshot
                           ? snapshot_round
                           : (cpu ? committed + records : 0.0) + 3.0 * committed + snapshot_round;
  const double available = available_host_bytes();
  if (available > 0 && bytes > available) {
    char text[240];
    std::snprintf(text, sizeof(text),
                  "the case needs about %.3g GB of host memory (S = %d slots, R = %d rows, T = %d "
                  "tokens, %d layers: its pools and their copies), %.3g GB are available",
                  bytes / 1e9, s.S, s.R, s.T, s.L, available / 1e9);
    throw Error(Status::kResourceExhausted, text);
  }
}

void run_round(const TensorStore& store, const GoldenAdapter& adapter, const GoldenOptions& options,
               GoldenReport& report, RunBytes* bytes) {
  const bool snapshots = options.strategy == Strategy::kSnapshot;
  const RoundSpec& s = adapter.round();
  if (bytes == nullptr) check_case_memory(adapter, options);  // the outer round: both rounds
  const ReportStyle& style = adapter.style();
  report.third_party = style.third_party;
  PoolOptions pool_options;
  pool_options.num_slots = s.S;
  pool_options.max_rows = s.R;
  pool_options.max_window = s.T;
  pool_options.backend = options.backend;
  pool_options.strategy = options.strategy;
  StatePool pool(adapter.model(), pool_options);
  std::unique_ptr<Memory> memory =
      make_memory(options.backend, pool_options.device, style.cuda_error_prefix);
  Memory& mem = *memory;

  // Slot s of the case is slot s of the pool: acquire all of them and index by slot.
  std::vector<SlotHandle> by_slot(s.S);
  for (int i = 0; i < s.S; ++i) {
    const SlotHandle handle = pool.acquire();
    by_slot.at(static_cast<std::size_t>(pool.slot_index(handle))) = handle;
  }

  std::vector<Bytes> conv_before(s.L), ssm_before(s.L);
  for (int l = 0; l < s.L; ++l) {
    write_floats(mem, pool.conv_state(l), store.to_float(layer_name("conv_state_init", l)),
                 layer_name("conv_state_init", l));
    write_floats(mem, pool.ssm_state(l), store.to_float(layer_name("ssm_state_init", l)),
                 layer_name("ssm_state_init", l));
    conv_before[l] = read_bytes(mem, pool.conv_state(l), "conv_state");
    ssm_before[l] = read_bytes(mem, pool.ssm_state(l), "ssm_state");
  }

  VerifyBatch batch;
  batch.window = s.T;
  for (int r = 0; r < s.R; ++r) {
    batch.rows.push_back(s.real[r] ? by_slot[s.cache_indices[r]] : SlotHandle::padding());
  }
  if (s.tree) batch.parents = s.parents;
  pool.begin_verify(batch);

  const std::vector<bool>& real = s.real;
  std::vector<LayerResult> ours(s.L);
  RunBytes run;
  run.conv_out.resize(s.L);
  run.core_out.resize(s.L);
  std::vector<Bytes> snap_conv_bytes(s.L), snap_ssm_bytes(s.L);
  std::string unwritten;
  for (int l = 0; l < s.L; ++l) {
    const LayerOutputs outputs = adapter.verify_layer(pool, mem, l);
    LayerResult& res = ours[l];
    run.conv_out[l] = read_bytes(mem, outputs.conv_out, "conv_out");
    run.core_out[l] = read_bytes(mem, outputs.core_out, "core_out");
    res.conv_out = decode(run.conv_out[l], outputs.conv_out.dtype);
    res.core_out = decode(run.core_out[l], outputs.core_out.dtype);
    if (snapshots) {
      // Replay keeps no snapshots (records only): there is nothing to read.
      const TensorView snap_conv = leading_block(pool.snapshot_conv(l), s.R, s.T);
      const TensorView snap_ssm = leading_block(pool.snapshot_ssm(l), s.R, s.T);
      snap_conv_bytes[l] = read_bytes(mem, snap_conv, "snapshot_conv");
      snap_ssm_bytes[l] = read_bytes(mem, snap_ssm, "snapshot_ssm");
      res.snap_conv = decode(snap_conv_bytes[l], snap_conv.dtype);
      res.snap_ssm = decode(snap_ssm_bytes[l], snap_ssm.dtype);
    }
    if (unwritten.empty()) unwritten = first_unwritten(s, style, l, res);
  }

  // Verify is pure (DESIGN.md section 7): the committed pool is bit-identical to before. (Under
  // replay too: the views materialize, and no slot of the case had pending steps.)
  std::string impure;
  for (int l = 0; l < s.L && impure.empty(); ++l) {
    const bool conv_changed = read_bytes(mem, pool.conv_state(l), "conv_state") != conv_before[l];
    if (style.layer_names_in_purity) {
      if (conv_changed) impure = layer_name("conv_state", l) + " changed";
      if (read_bytes(mem, pool.ssm_state(l), "ssm_state") != ssm_before[l]) {
        impure = layer_name("ssm_state", l) + " changed";
      }
    } else if (conv_changed) {
      impure = "conv_state layer " + std::to_string(l) + " changed";
    } else if (read_bytes(mem, pool.ssm_state(l), "ssm_state") != ssm_before[l]) {
      impure = "ssm_state layer " + std::to_string(l) + " changed";
    }
  }

  std::vector<int32_t> accepted(s.R);
  for (int r = 0; r < s.R; ++r) {
    accepted[r] = s.tree ? s.last_step[r] : (s.real[r] ? s.accept_len[r] : 0);
  }
  if (mem.device() == Device::kCuda) {
    // The engine's path on a GPU: accepted values in device memory, checked by the commit kernel.
    void* data = mem.allocate(accepted.size() * sizeof(int32_t));
    mem.upload(data, accepted.data(), accepted.size() * sizeof(int32_t));
    pool.commit(make_view(data, DType::kI32, {s.R}, Device::kCuda));
    const Status status = pool.last_commit_status();
    if (status != Status::kSuccess) {
      throw Error(status,
                  style.commit_error_lists_accepted
                      ? "StatePool::commit skipped rows of accepted " + int_list_string(accepted)
                      : std::string("StatePool::commit skipped rows"));
    }
  } else {
    pool.commit(accepted);
  }

  // Under replay the views materialize the accepted steps (the history factor records applied to
  // the checkpoints; no weights are read).
  std::vector<Bytes> conv_after(s.L), ssm_after(s.L);
  for (int l = 0; l < s.L; ++l) {
    conv_after[l] = read_bytes(mem, pool.conv_state(l), "conv_state");
    ssm_after[l] = read_bytes(mem, pool.ssm_state(l), "ssm_state");
    ours[l].conv_committed = decode(conv_after[l], s.conv_state);
    ours[l].ssm_committed = decode(ssm_after[l], s.ssm_state);
  }

  // Commit copies the snapshot of the accepted step bit for bit; every other slot keeps its bytes.
  const std::size_t conv_slot = numel_of(s.conv_pool) / s.S * dtype_size(s.conv_state);
  const std::size_t ssm_slot = numel_of(s.ssm_pool) / s.S * dtype_size(s.ssm_state);
  std::vector<int32_t> row_of_slot(s.S, -1);
  for (int r = 0; r < s.R; ++r) {
    if (s.real[r] && s.last_step[r] >= 0) row_of_slot[s.cache_indices[r]] = r;
  }
  std::string copy_error, keep_error;
  std::vector<int32_t> kept;
  for (int slot = 0; slot < s.S; ++slot) {
    const int r = row_of_slot[slot];
    if (r < 0) kept.push_back(slot);
    for (int l = 0; l < s.L; ++l) {
      const unsigned char* conv_now = conv_after[l].data() + slot * conv_slot;
      const unsigned char* ssm_now = ssm_after[l].data() + slot * ssm_slot;
      if (r < 0) {
        if (keep_error.empty() &&
            (std::memcmp(conv_now, conv_before[l].data() + slot * conv_slot, conv_slot) != 0 ||
             std::memcmp(ssm_now, ssm_before[l].data() + slot * ssm_slot, ssm_slot) != 0)) {
          keep_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) + " changed";
        }
        continue;
      }
      const std::size_t snap = static_cast<std::size_t>(r) * s.T + s.last_step[r];
      if (snapshots && copy_error.empty() &&
          (std::memcmp(conv_now, snap_conv_bytes[l].data() + snap * conv_slot, conv_slot) != 0 ||
           std::memcmp(ssm_now, snap_ssm_bytes[l].data() + snap * ssm_slot, ssm_slot) != 0)) {
        copy_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) +
                     " differs from row " + std::to_string(r) + " step " +
                     std::to_string(s.last_step[r]);
      }
    }
  }
  report.checks.push_back(
      {"verify left the committed pool unchanged (bit-exact)", impure.empty(), impure});
  report.checks.push_back({"outputs of every real row written", unwritten.empty(),
                           unwritten.empty() ? "" : unwritten + " still holds the NaN sentinel"});
  if (snapshots) {
    report.checks.push_back(
        {"commit = own snapshot at the accepted step (bit-exact)", copy_error.empty(), copy_error});
  } else {
    // The strategy-equivalence invariant (DESIGN.md section 7) on the golden inputs: the same
    // case through a snapshot pool on the same backend gives the same bytes.
    run.conv_committed = conv_after;
    run.ssm_committed = ssm_after;
    GoldenOptions snapshot_options = options;
    snapshot_options.strategy = Strategy::kSnapshot;
    GoldenReport snapshot_report;
    RunBytes snapshot_run;
    run_round(store, adapter, snapshot_options, snapshot_report, &snapshot_run);
    const std::string differs = first_difference(run, snapshot_run);
    report.checks.push_back(
        {"outputs and commit = the snapshot strategy's (bit-exact)", differs.empty(), differs});
  }
  report.checks.push_back(
      {"slots without a commit unchanged " + int_list_string(kept) + " (bit-exact)",
       keep_error.empty(), keep_error});

  // Against SGLang and the float64 reference. Tolerances: tests/data/golden/README.md, per
  // activation dtype, against ref_*; against SGLang twice that (ours and SGLang's each within tol
  // of float64). Conv windows are copies of inputs: exact.
  const double tol = s.act == DType::kBF16 ? 1e-2 : 1e-5;
  Comparison conv_out("conv_out", tol, style), window("inter_conv_window", 0.0, style),
      core_out("core_out", tol, style), inter_ssm("inter_ssm", tol, style),
      conv_committed("conv_state_committed", 0.0, style),
      ssm_committed("ssm_state_committed", tol, style);
  for (int l = 0; l < s.L; ++l) {
    const LayerResult& res = ours[l];
    conv_out.add_layer(store, layer_name("conv_out", l), res.conv_out, s.conv_out, &real);
    core_out.add_layer(store, layer_name("core_out", l), res.core_out, s.core_out, &real);
    if (snapshots) {
      window.add_layer(store, layer_name("inter_conv_window", l), res.snap_conv, s.conv_window,
                       &real);
      std::vector<std::string> names;
      std::vector<std::vector<float>> rows;
      const int64_t per_row = numel_of(s.ssm_step);
      for (int r = 0; r < s.R; ++r) {
        if (!real[r]) continue;
        names.push_back(layer_name("inter_ssm", l) + ".r" + std::to_string(r));
        rows.emplace_back(res.snap_ssm.begin() + r * per_row,
                          res.snap_ssm.begin() + (r + 1) * per_row);
      }
      inter_ssm.add_rows(store, names, rows, s.ssm_step);
    }
    conv_committed.add_layer(store, layer_name("conv_state_committed", l), res.conv_committed,
                             s.conv_pool, nullptr);
    ssm_committed.add_layer(store, layer_name("ssm_state_committed", l), res.ssm_committed,
                            s.ssm_pool, nullptr);
  }
  if (snapshots) {
    const bool inter = style.intermediates_required;
    report.tensors = {conv_out.result(true),       window.result(inter),
                      core_out.result(true),       inter_ssm.result(inter),
                      conv_committed.result(true), ssm_committed.result(true)};
  } else {
    report.tensors = {conv_out.result(true), core_out.result(true), conv_committed.result(true),
                      ssm_committed.result(true)};
    report.notes.push_back(
        "intermediate snapshots (inter_conv_window, inter_ssm): n/a under replay (the strategy "
        "keeps none)");
  }
  for (std::string& note : adapter.notes()) report.notes.push_back(std::move(note));
  if (bytes != nullptr) {
    run.conv_committed = std::move(conv_after);
    run.ssm_committed = std::move(ssm_after);
    *bytes = std::move(run);
  }

  bool pass = true;
  for (const auto& t : report.tensors) pass = pass && t.pass;
  for (const auto& c : report.checks) pass = pass && c.pass;
  report.outcome = pass ? GoldenOutcome::kPass : GoldenOutcome::kFail;
}

}  // namespace

const ReportStyle& GoldenAdapter::style() const {
  static const ReportStyle style;
  return style;
}

void run_round(const TensorStore& store, const GoldenAdapter& adapter, const GoldenOptions& options,
               GoldenReport& report) {
  run_round(store, adapter, options, report, nullptr);
}

}  // namespace specstate::cli::golden
