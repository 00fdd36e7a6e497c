// Internal: what a backend (CPU oracle, CUDA) implements. lib/pool.cpp validates every call
// once and hands the backend resolved, checked work descriptions; a backend never validates
// user input again and never sees SlotHandles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "specstate/config.h"
#include "specstate/gdn.h"
#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate::detail {

// The pool's memory, owned by the backend that allocated it. Layouts (DESIGN.md section 4):
//   conv      [L, slots, conv_dim, W-1]            conv_state_dtype
//   ssm       [L, slots, HV, V, K]                 ssm_state_dtype
//   snap_conv [L, max_rows, max_window, conv_dim, W-1]
//   snap_ssm  [L, max_rows, max_window, HV, V, K]
struct PoolStorage {
  ModelConfig config;
  int num_slots = 0;
  int max_rows = 0;
  int max_window = 0;
  void* conv = nullptr;
  void* ssm = nullptr;
  void* snap_conv = nullptr;
  void* snap_ssm = nullptr;

  int64_t conv_elems() const noexcept { return config.conv_state_elems(); }  // one slot, layer
  int64_t ssm_elems() const noexcept { return config.ssm_state_elems(); }
  int64_t conv_layer_elems() const noexcept { return conv_elems() * num_slots; }
  int64_t ssm_layer_elems() const noexcept { return ssm_elems() * num_slots; }
  int64_t snap_conv_layer_elems() const noexcept { return conv_elems() * max_rows * max_window; }
  int64_t snap_ssm_layer_elems() const noexcept { return ssm_elems() * max_rows * max_window; }
  std::size_t conv_bytes() const noexcept {
    return conv_layer_elems() * config.num_layers * dtype_size(config.conv_state_dtype());
  }
  std::size_t ssm_bytes() const noexcept {
    return ssm_layer_elems() * config.num_layers * dtype_size(config.ssm_state_dtype());
  }
  std::size_t snap_conv_bytes() const noexcept {
    return snap_conv_layer_elems() * config.num_layers * dtype_size(config.conv_state_dtype());
  }
  std::size_t snap_ssm_bytes() const noexcept {
    return snap_ssm_layer_elems() * config.num_layers * dtype_size(config.ssm_state_dtype());
  }
};

// A validated verify round. parents is [rows * window], always filled (a chain as
// -1, 0, 1, ..., T-2 per row) so that one code path serves chains and trees.
struct RoundPlan {
  int rows = 0;
  int window = 0;
  bool is_tree = false;
  std::vector<int32_t> slots;    // [rows]; -1 = padding row
  std::vector<int32_t> parents;  // [rows * window]
};

// Committed-path work: `rows` requests, each advancing by `tokens_per_row` tokens packed at
// r * tokens_per_row + i. Prefill is rows = 1; decode is tokens_per_row = 1.
struct AdvanceWork {
  int layer = 0;
  int tokens_per_row = 1;
  std::vector<int32_t> slots;  // [rows]; -1 = padding row (skipped)
};

// Commit work: per row the window index whose snapshot becomes the committed state, or -1.
// `last_step` is either host values (validated) or, on CUDA, a device int32 [rows] view holding
// raw accepted values that the kernel checks itself.
struct CommitWork {
  const RoundPlan* plan = nullptr;
  std::vector<int32_t> last_step;  // host path: [rows], -1 = keep
  TensorView device_accepted;      // device path: int32 [rows], raw accepted values
};

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual Backend kind() const noexcept = 0;
  virtual Device device() const noexcept = 0;

  // Allocates (and zeroes) the storage's four buffers; frees them.
  virtual void allocate(PoolStorage& storage) = 0;
  virtual void free(PoolStorage& storage) noexcept = 0;
  // Zeroes the committed conv and SSM state of `slot` in every layer.
  virtual void zero_slot(const PoolStorage& storage, int slot) = 0;

  // Called by begin_verify once the round is validated, outside any verify/commit (so outside a
  // CUDA graph that captures them): a device backend uploads slots and parents here to buffers
  // of fixed address that the captured kernels read.
  virtual void begin_round(const PoolStorage& storage, const RoundPlan& plan) {
    (void)storage;
    (void)plan;
  }

  virtual void advance_gdn(const PoolStorage& storage, const AdvanceWork& work,
                           const GdnWeights& weights, const GdnInputs& inputs,
                           const GdnOutputs& outputs) = 0;
  virtual void verify_gdn(const PoolStorage& storage, int layer, const RoundPlan& plan,
                          const GdnWeights& weights, const GdnInputs& inputs,
                          const GdnOutputs& outputs) = 0;
  virtual void commit(const PoolStorage& storage, const CommitWork& work) = 0;
  // Outcome of the device-side checks of the last commit (waits for it): kOutOfRange when a
  // row's device accepted value was out of range (that row was skipped). Host-validated
  // backends report kSuccess.
  virtual Status last_commit_status() { return Status::kSuccess; }
};

std::unique_ptr<BackendImpl> make_cpu_backend();
// Defined in lib/cuda/ when the CUDA backend is built; otherwise throws kNotSupported.
std::unique_ptr<BackendImpl> make_cuda_backend(const PoolOptions& options);

}  // namespace specstate::detail
