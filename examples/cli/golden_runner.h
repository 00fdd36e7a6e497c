// The kind-generic half of `specstate check-golden` (golden_case.h, docs/golden.md): one verify +
// commit round of a golden case through the public API (StatePool: acquire, begin_verify, verify,
// commit) under the chosen strategy and backend, the property checks, and the comparisons with
// SGLang's tensors and the float64 reference (ref_*), with the per-dtype tolerances.
//
// What depends on the layer kind (which tensors hold the inputs, the sizes and dtypes, the layer
// config, one layer's verify call) is a small adapter (GoldenAdapter): golden_gdn.cpp for GDN,
// golden_mamba2.cpp for Mamba2, golden_kda.cpp for KDA. A new kind is one more adapter file and
// one line in the kind table of golden_case.cpp. Internal to the CLI library (examples/cli), not a
// public header.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/golden_case.h"
#include "specstate/specstate.h"

namespace specstate::cli::golden {

using json = nlohmann::json;
using Shape = std::vector<int64_t>;
using Bytes = std::vector<unsigned char>;

// A problem of the case itself (missing tensor, inconsistent shapes, ...): Error with
// kInvalidArgument. run_golden_case starts its message with the kind's error_prefix.
class CaseError : public Error {
 public:
  explicit CaseError(const std::string& detail)
      : Error(Status::kInvalidArgument, detail), detail_(detail) {}
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string detail_;
};

[[noreturn]] void bad_case(const std::string& message);

std::string shape_string(const Shape& shape);
std::string int_list_string(const std::vector<int32_t>& values);
int64_t numel_of(const Shape& shape);
std::string layer_name(const std::string& base, int layer);  // base.l<layer>

// The shape of a tensor of the case (bad_case when absent), and a check of it.
Shape shape_in(const TensorStore& store, const std::string& name);
void expect_shape(const TensorStore& store, const std::string& name, const Shape& expected);
// The shape of a tensor of the case that must have `rank` dims; bad_case otherwise, saying
// "<name> has shape [..], expected <layout>".
Shape shape_of_rank(const TensorStore& store, const std::string& name, std::size_t rank,
                    const std::string& layout);
// A value that params_json may state: when present it must be the integer `value` (which
// `source` gives).
void check_param(const json& params, const char* key, int64_t value, const std::string& source);

// The round's indices, read the GDN way (chain or tree, accept_len and/or last_step;
// docs/golden.md), for a new kind to reuse. Fills cache_indices, real, n_real, parents, tree,
// accept_len, last_step of `round` from R, T and S.
struct RoundSpec;
void read_round_indices(const TensorStore& store, const json& params, RoundSpec& round);

// --- memory the pool's backend reads: host memory, or device memory through the CUDA runtime --

class Memory {
 public:
  virtual ~Memory() = default;
  virtual Device device() const noexcept = 0;
  virtual void* allocate(std::size_t bytes) = 0;  // owned by this object
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
};

// golden_memory.cpp. `cuda_error_prefix` starts the message of a failed CUDA runtime call.
std::unique_ptr<Memory> make_memory(Backend backend, int device,
                                    const std::string& cuda_error_prefix);

// Floats from raw bytes of `dtype` (f32 or bf16).
std::vector<float> decode(const Bytes& bytes, DType dtype);
// A row-major view of `shape` at `data`.
TensorView make_view(void* data, DType dtype, const Shape& shape, Device device);
// The view's elements in row-major order, as raw bytes of its dtype (for bit-exact checks), and
// `values` written into a view in its dtype (exactly: see upload). `what` names it in errors.
Bytes read_bytes(Memory& memory, const TensorView& view, const std::string& what);
void write_floats(Memory& memory, const TensorView& view, const std::vector<float>& values,
                  const std::string& what);

// A new buffer holding `values` in `dtype`, viewed row-major as `shape`. With `exact`, a value
// that bf16 cannot hold exactly is a bad_case (a bf16 case stores exact float32 copies).
TensorView upload(Memory& memory, const std::vector<float>& values, DType dtype, const Shape& shape,
                  const std::string& what, bool exact = true);
// The case's tensor `name`, uploaded in `dtype` as `shape`.
TensorView upload_tensor(Memory& memory, const TensorStore& store, const std::string& name,
                         DType dtype, const Shape& shape);
// NaNs in `dtype` as `shape`: an output that a real row leaves unwritten cannot pass.
TensorView upload_nan(Memory& memory, DType dtype, const Shape& shape, const std::string& what);

// --- what a kind adapter tells the runner ----------------------------------------------------

// The round and the shapes of one layer's tensors, in the kind's terms. Row-indexed shapes start
// with [R, T]; pool shapes with [S].
struct RoundSpec {
  int L = 0, R = 0, T = 0, S = 0;
  bool tree = false;
  std::vector<int32_t> parents;  // [T], for a tree
  std::vector<int32_t> cache_indices, accept_len, last_step;
  std::vector<bool> real;  // [R]
  int n_real = 0;
  DType act = DType::kF32, conv_state = DType::kF32, ssm_state = DType::kF32;
  Shape conv_out, core_out;   // [R, T, ...] (SGLang's layout of the outputs)
  Shape conv_window;          // [R, T, conv_dim, W-1] (inter_conv_window)
  Shape ssm_step;             // [T, ...] (inter_ssm.l<l>.r<i>: one row's states after each token)
  Shape conv_pool, ssm_pool;  // [S, ...] (conv_state_committed, ssm_state_committed)
};

// The shapes above for a kind whose slot holds a conv state [conv_dim, W-1] and an ssm state
// [heads, v, k], and whose core output is [heads, v] per token (GDN, KDA: HV, V, K; Mamba2: H, P,
// N), from the round's R, T and S.
void set_state_shapes(RoundSpec& round, int conv_dim, int width, int heads, int v, int k);

// Details in which the Mamba2 report has always differed from the GDN one, kept so that each
// kind's output stays what it was. A new kind takes the defaults (the GDN report).
struct ReportStyle {
  std::string cuda_error_prefix = "check-golden: ";
  bool flat_where = false;                       // "worst at x element 17", not "x [0, 1, 3]"
  bool sglang_where_unless_earlier_ref = false;  // which tensor's worst place is shown
  bool intermediates_required = false;           // inter_conv_window / inter_ssm must be present
  bool inter_ssm_rows_apart = false;             // each row's max_rel on its own, not pooled
  bool core_out_checked_first = false;           // the NaN-sentinel check's order within a row
  bool layer_names_in_purity = false;            // "conv_state.l0 changed", ssm_state last
  bool commit_error_lists_accepted = true;       // "...skipped rows of accepted [..]"
  std::string third_party = "sglang";            // whose kernels wrote the un-prefixed tensors
};

struct LayerOutputs {
  TensorView conv_out, core_out;  // what verify wrote, as passed to it
};

class GoldenAdapter {
 public:
  virtual ~GoldenAdapter() = default;
  virtual const RoundSpec& round() const = 0;
  virtual const ReportStyle& style() const;  // the defaults (the GDN report)
  // Sizes, dtypes, chain/tree, backend, strategy: the report's second line.
  virtual std::string describe(const GoldenOptions& options) const = 0;
  virtual ModelConfig model() const = 0;
  // Uploads layer l's weights and inputs (packed as [R*T, ...]) and NaN-filled outputs into
  // `memory`, which outlives the round, and calls pool.verify(l, ...).
  virtual LayerOutputs verify_layer(StatePool& pool, Memory& memory, int layer) const = 0;
  // Lines printed after the runner's notes.
  virtual std::vector<std::string> notes() const { return {}; }
};

// What every adapter has: the case's tensors and the kind's Spec (a RoundSpec that adds the kind's
// sizes and dtypes), which the adapter reads from the case in its constructor.
//
// A new kind's file (see golden_mamba2.cpp): a `struct Spec : RoundSpec`, a read_spec that fills
// it from the case (read_round_indices reads the round's indices, set_state_shapes the shapes),
// describe_case(spec, options), an adapter deriving from AdapterBase<Spec> with model() and
// verify_layer(), and its GoldenKind, added to the kind table of golden_case.cpp.
template <typename Spec>
class AdapterBase : public GoldenAdapter {
 public:
  const RoundSpec& round() const final { return spec_; }
  // describe_case(const Spec&, const GoldenOptions&), found next to Spec.
  std::string describe(const GoldenOptions& options) const final {
    return describe_case(spec_, options);
  }

 protected:
  AdapterBase(const TensorStore& store, Spec spec) : store_(store), spec_(std::move(spec)) {}
  // The case's tensor `base`.l<layer> in a new buffer of `memory`, as `dtype` viewed as `shape`.
  TensorView layer_tensor(Memory& memory, const char* base, int layer, DType dtype,
                          const Shape& shape) const {
    return upload_tensor(memory, store_, layer_name(base, layer), dtype, shape);
  }
  // `layer` (a kind's config) with the round's storage dtypes.
  template <typename Config>
  Config with_storage_dtypes(Config layer) const {
    layer.act_dtype = spec_.act;
    layer.conv_state_dtype = spec_.conv_state;
    layer.ssm_state_dtype = spec_.ssm_state;
    return layer;
  }

  const TensorStore& store_;
  const Spec spec_;
};

// A layer kind of the golden cases: whether a case is of it, and its adapter (reads and checks
// the case's sizes, dtypes and indices; bad_case on problems).
struct GoldenKind {
  const char* name;
  const char* error_prefix;  // starts the message of a CaseError of its cases
  bool (*matches)(const GoldenCase& golden, const json& params);
  std::unique_ptr<GoldenAdapter> (*make)(const GoldenCase& golden, const json& params);
};

template <typename Adapter>
std::unique_ptr<GoldenAdapter> make_adapter(const GoldenCase& golden, const json& params) {
  return std::make_unique<Adapter>(golden, params);
}

const GoldenKind& gdn_golden_kind();     // golden_gdn.cpp
const GoldenKind& mamba2_golden_kind();  // golden_mamba2.cpp
const GoldenKind& kda_golden_kind();     // golden_kda.cpp

// Runs the round and fills `report` (tensors, checks, notes, outcome kPass / kFail). Throws
// specstate::Error for problems of the case or the backend; the caller reports kError.
void run_round(const TensorStore& store, const GoldenAdapter& adapter, const GoldenOptions& options,
               GoldenReport& report);

}  // namespace specstate::cli::golden
