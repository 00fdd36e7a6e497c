// Internal: what a backend (CPU oracle, CUDA) implements. lib/pool.cpp validates every call once
// and hands the backend resolved, checked work descriptions; a backend never validates user input
// again, never sees SlotHandles and never switches on the strategy: the strategy object
// (lib/strategy/) says what each layer call stores (StateIO) and which commit primitive runs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layout.h"
#include "specstate/config.h"
#include "specstate/gdn.h"
#include "specstate/kda.h"
#include "specstate/mamba2.h"
#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate::detail {

// The pool's memory: the layout and one allocation per buffer it has (null when absent), owned
// by the backend that allocated it. The committed state is addressed per layer: slot s of layer
// l at conv_layers[l] + s * conv_slot_stride bytes (likewise SSM), which is the pool's own
// layer-major buffer (bind_owned_committed) or the caller's memory (layout.caller_committed:
// DESIGN.md section 4; the backend then allocates neither kConv nor kSsm and never frees them).
struct PoolStorage {
  ModelConfig config;
  Layout layout;
  std::array<void*, static_cast<int>(Buf::kCount)> buffers{};
  std::vector<char*> conv_layers, ssm_layers;         // [L] slot 0 of each layer
  int64_t conv_slot_stride = 0, ssm_slot_stride = 0;  // bytes between slots
  // Caller-owned committed views (layout.caller_committed): the addresses [lo, hi) that hold all
  // of them, so that a call's views are checked against each layer's span only when they fall
  // inside (check_no_alias runs for every view of every layer call).
  uintptr_t caller_lo = 0, caller_hi = 0;

  void* base(Buf b) const noexcept { return buffers[static_cast<int>(b)]; }
  char* bytes(Buf b, int64_t offset) const noexcept { return static_cast<char*>(base(b)) + offset; }
  char* conv(int layer, int slot) const noexcept {
    return conv_layers[static_cast<std::size_t>(layer)] + slot * conv_slot_stride;
  }
  char* ssm(int layer, int slot) const noexcept {
    return ssm_layers[static_cast<std::size_t>(layer)] + slot * ssm_slot_stride;
  }
  // Addresses the pool's own kConv / kSsm buffers (after allocation).
  void bind_owned_committed() {
    conv_layers.resize(static_cast<std::size_t>(layout.layers));
    ssm_layers.resize(static_cast<std::size_t>(layout.layers));
    for (int l = 0; l < layout.layers; ++l) {
      conv_layers[static_cast<std::size_t>(l)] = bytes(Buf::kConv, layout.conv_offset(l, 0));
      ssm_layers[static_cast<std::size_t>(l)] = bytes(Buf::kSsm, layout.ssm_offset(l, 0));
    }
    conv_slot_stride = layout.conv_bytes;
    ssm_slot_stride = layout.ssm_bytes;
  }
  // The constant distance in bytes between consecutive layers' slot 0, or -1 when there is none
  // (a caller's per-layer allocations); with one layer, 0.
  static int64_t layer_pitch(const std::vector<char*>& layers) noexcept {
    if (layers.size() < 2) return 0;
    const int64_t d = layers[1] - layers[0];
    for (std::size_t l = 2; l < layers.size(); ++l) {
      if (layers[l] - layers[l - 1] != d) return -1;
    }
    return d;
  }
  char* snap_conv(int layer, int row, int t) const noexcept {
    return bytes(Buf::kSnapConv, layout.snap_conv_offset(layer, row, t));
  }
  char* snap_ssm(int layer, int row, int t) const noexcept {
    return bytes(Buf::kSnapSsm, layout.snap_ssm_offset(layer, row, t));
  }
  char* record(int layer, int slot, int t) const noexcept {
    return bytes(Buf::kRecords, layout.record_offset(layer, slot, t));
  }
  char* factor(int layer, int slot, int pos) const noexcept {
    return bytes(Buf::kFactors, layout.factor_offset(layer, slot, pos));
  }
  int32_t* cursor(int layer, int slot) const noexcept {
    return static_cast<int32_t*>(base(Buf::kCursor)) + layout.cursor_index(layer, slot);
  }
  int32_t* pending() const noexcept { return static_cast<int32_t*>(base(Buf::kPending)); }
  int32_t* path() const noexcept { return static_cast<int32_t*>(base(Buf::kPath)); }
};

// Where the tokens of each row of a layer call lie in its inputs (DESIGN.md section 2): uniform
// (row r's `window` tokens at r * window), host offsets (variable windows: row r's tokens
// [offsets[r], offsets[r+1]), each at most `window`), or the caller's device cu_seqlens (CUDA:
// read by the kernels at execution time; the host knows only the maximum `window`).
struct TokenRanges {
  int window = 0;                // T: tokens per row (uniform) or the most a row has
  std::vector<int32_t> offsets;  // [rows + 1] host offsets, or empty
  TensorView device_offsets;     // int32 [rows + 1] device cu_seqlens, or empty

  bool variable() const noexcept { return !offsets.empty() || !device_offsets.empty(); }
  // Host-known ranges (uniform or host offsets).
  int64_t token0(int r) const noexcept {
    return offsets.empty() ? int64_t{r} * window : offsets[static_cast<std::size_t>(r)];
  }
  int length(int r) const noexcept {
    return offsets.empty()
               ? window
               : offsets[static_cast<std::size_t>(r) + 1] - offsets[static_cast<std::size_t>(r)];
  }
};

// A validated verify round. parents is [rows * window], always filled (a chain as
// -1, 0, 1, ..., T-2 per row) so that one code path serves chains and trees; with variable
// windows row r's entries beyond its length are unused (chain values).
struct RoundPlan {
  int rows = 0;
  int window = 0;  // T (the largest window under variable windows)
  bool is_tree = false;
  std::vector<int32_t> slots;    // [rows]; -1 = padding row
  std::vector<int32_t> parents;  // [rows * window]
  TokenRanges tokens;            // tokens.window == window
  int64_t num_tokens = 0;        // tokens the layer inputs hold
  int fold_limit = 0;            // replay: the round's fold limit (kernels::replay_fold_limit)
};

// What one layer call reads and writes of the state, decided by the strategy. Every token step
// starts from the committed state of its row's slot (or, in a tree, from its parent's state).
// Replay (DESIGN.md section 6): the committed SSM memory is a checkpoint plus `h` history factor
// records per slot and layer (kFactors, kCursor); the committed conv window plus pending conv
// steps (kRecords, kPending, kPath).
struct StateIO {
  bool conv_pending = false;    // first re-run the slot's pending conv steps (window shifts)
  bool history = false;         // apply the slot's history factor records to the checkpoint
  bool store_replayed = false;  // then write the committed conv window (and, unless `fold`
                                // decides, the SSM state) once
  bool fold = false;            // verify: store the post-history SSM state iff the fold
                                // predicate holds (kernels::replay_folds with fold_limit),
                                // nothing otherwise
  bool settled = false;         // verify repeated in a round: a cursor the predicate says folded
                                // is read as settled (base + h, 0): the checkpoint holds it
  int fold_limit = 0;           // fold / settled: the round's fold limit (RoundPlan::fold_limit)
  bool store_tokens = false;    // the state after every token into row-indexed snapshot scratch
  bool store_final = false;     // the state after the last token into the committed state
  bool write_records = false;   // each token's conv and factor record (ring position base+h+t)
  bool replay() const noexcept { return conv_pending || history; }
};

// One layer call: `rows` rows of `tokens_per_row` tokens packed at r * tokens_per_row + i, or
// (variable windows, batched prefill) as ranges() says. Verify: slots, parents and token
// ranges are the round's (plan); advance (prefill/decode/materialize): slots given here, a
// chain, tokens_per_row may be 0 (materialize: only the pending steps); `offsets` [rows + 1]
// when the rows have different lengths (batched prefill; tokens_per_row is then the longest).
struct LayerRun {
  int layer = 0;
  int tokens_per_row = 1;
  const RoundPlan* plan = nullptr;  // verify only
  std::vector<int32_t> slots;       // advance only: [rows]; -1 = padding row (skipped)
  std::vector<int32_t> offsets;     // advance only: [rows + 1] token offsets, or empty (uniform)
  StateIO io;
  int rows() const noexcept { return plan ? plan->rows : static_cast<int>(slots.size()); }
  int64_t token0(int r) const noexcept {
    if (plan) return plan->tokens.token0(r);
    return offsets.empty() ? int64_t{r} * tokens_per_row : offsets[static_cast<std::size_t>(r)];
  }
  int length(int r) const noexcept {
    if (plan) return plan->tokens.length(r);
    return offsets.empty()
               ? tokens_per_row
               : offsets[static_cast<std::size_t>(r) + 1] - offsets[static_cast<std::size_t>(r)];
  }
};

// Commit work: per row the window index of the last accepted step (chain a-1, tree node) or -1.
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

  // Whether this backend can run a pool of this layout, answered before any allocation:
  // kSuccess, or the status with a message naming the unsupported value in `why`.
  virtual Status can_implement(const Layout& layout, const ModelConfig& config,
                               std::string* why) const = 0;
  // Whether this backend can run a verify round of this shape (e.g. tree windows).
  virtual Status can_run_round(const Layout& layout, const RoundPlan& plan,
                               std::string* why) const {
    (void)layout;
    (void)plan;
    (void)why;
    return Status::kSuccess;
  }

  // Allocates (and zeroes) every buffer of the layout; frees them.
  virtual void allocate(PoolStorage& storage) = 0;
  virtual void free(PoolStorage& storage) noexcept = 0;
  // Before a pool's last work (a caller-owned pool's materialize at its end): waits for all the
  // work queued on the device, the pool's on other streams included; false where no work may
  // run now (the pool's stream is being captured into a graph: a launch would be captured, not
  // run). The CPU backend runs synchronously: always true.
  virtual bool settle_for_close() noexcept { return true; }
  // Whether the pool's stream is being captured into a CUDA graph now (what is launched then runs
  // again at each launch of the graph, unseen by the host). The CPU backend never captures.
  virtual bool capturing() const noexcept { return false; }
  // Zeroes the committed conv and SSM state of `slot` in every layer, and its pending steps.
  virtual void zero_slot(const PoolStorage& storage, int slot) = 0;

  // Slot operations (all layers; the pool has validated the slots and materialized the source).
  // copy_slot: src's committed conv and SSM state into dst. export_slot / import_slot: the
  // slot's committed state to / from `buffer` (host or device memory as `buffer_device` says;
  // the pool only passes kCuda to a CUDA backend) in the export layout: for each layer, the conv
  // window (layout.conv_bytes) then the SSM state (layout.ssm_bytes), no padding. Host buffers
  // are done on return; device buffers may complete asynchronously in the backend's order.
  virtual void copy_slot(const PoolStorage& storage, int src, int dst) = 0;
  virtual void export_slot(const PoolStorage& storage, int slot, void* buffer,
                           Device buffer_device) = 0;
  virtual void import_slot(const PoolStorage& storage, int slot, const void* buffer,
                           Device buffer_device) = 0;

  // Called by begin_verify once the round is validated, outside any verify/commit (so outside a
  // CUDA graph that captures them): a device backend uploads slots and parents here to buffers
  // of fixed address that the captured kernels read. Called again (outside any graph) when a row
  // is released mid-round, with that row's slot set to -1, so device-side commits skip it.
  virtual void begin_round(const PoolStorage& storage, const RoundPlan& plan) {
    (void)storage;
    (void)plan;
  }

  // One layer call of the pool's layer kind (the pool calls the one of storage.config.kind).
  // Materialize (LayerRun without a plan, tokens_per_row = 0) passes empty inputs and outputs:
  // only recorded steps are re-run.
  virtual void run_gdn(const PoolStorage& storage, const LayerRun& run, const GdnWeights& weights,
                       const GdnInputs& inputs, const GdnOutputs& outputs) = 0;
  virtual void run_mamba2(const PoolStorage& storage, const LayerRun& run,
                          const Mamba2Weights& weights, const Mamba2Inputs& inputs,
                          const Mamba2Outputs& outputs) = 0;
  virtual void run_kda(const PoolStorage& storage, const LayerRun& run, const KdaWeights& weights,
                       const KdaInputs& inputs, const KdaOutputs& outputs) = 0;

  // Commit primitives (the strategy picks one). Copy: each row's snapshot of its last step into
  // its slot (every layer). Pending (replay): in every layer, each row's slot settles its cursor
  // (the fold predicate), compacts a tree's accepted path of factor records in the ring, advances
  // h by the accepted steps and records them as its pending conv steps (kPending/kPath); no state
  // moves.
  virtual void commit_copy(const PoolStorage& storage, const CommitWork& work) = 0;
  virtual void commit_pending(const PoolStorage& storage, const CommitWork& work) = 0;
  // Replay bookkeeping of `slots` in layers [layer_begin, layer_end):
  //   kConsumed: the committed memory was made exact (materialize, advance, overwrite): no
  //              pending conv steps, the history consumed (base += h, h = 0).
  //   kSettled:  a verify of the layer ran and its round ends without commit (or is read
  //              mid-round): no pending conv steps (the verify wrote the window), the cursor
  //              settled by the fold predicate.
  enum class Clear { kConsumed, kSettled };
  // `fold_limit`: kSettled's, the round's (RoundPlan::fold_limit).
  virtual void clear_pending(const PoolStorage& storage, int layer_begin, int layer_end,
                             const std::vector<int32_t>& slots, Clear how = Clear::kConsumed,
                             int fold_limit = 0) = 0;
  // Replay: makes the committed memory of `run.slots` in `run.layer` exact from the records alone
  // (pending conv steps, history factors): the kind's run with no weights, inputs or outputs
  // (run.io asks for no token). The bookkeeping is cleared by the caller (clear_pending
  // kConsumed).
  void materialize_layer(const PoolStorage& storage, const LayerRun& run) {
    storage.config.visit_layer([&](const auto& config) { run_records(storage, run, config); });
  }

  // Outcome of the device-side checks of the last commit (waits for it): kOutOfRange when a
  // row's device accepted value was out of range (that row was skipped). Host-validated
  // backends report kSuccess.
  virtual Status last_commit_status() { return Status::kSuccess; }

 private:
  // materialize_layer's run of each kind (the records only).
  void run_records(const PoolStorage& s, const LayerRun& r, const GdnConfig&) {
    run_gdn(s, r, GdnWeights{}, GdnInputs{}, GdnOutputs{});
  }
  void run_records(const PoolStorage& s, const LayerRun& r, const Mamba2Config&) {
    run_mamba2(s, r, Mamba2Weights{}, Mamba2Inputs{}, Mamba2Outputs{});
  }
  void run_records(const PoolStorage& s, const LayerRun& r, const KdaConfig&) {
    run_kda(s, r, KdaWeights{}, KdaInputs{}, KdaOutputs{});
  }
};

// Whether the CUDA backend has kernels for the config's layer kind: kSuccess, or kNotSupported
// with a message naming the kind in `why`. Answered from the config alone (no device, no CUDA
// runtime), so a pool the CUDA backend cannot run is refused the same way in every build and on
// every machine (lib/cuda_kinds.cpp).
Status cuda_supports_kind(const ModelConfig& config, std::string* why);

std::unique_ptr<BackendImpl> make_cpu_backend();
// Defined in lib/cuda/ when the CUDA backend is built; otherwise throws kNotSupported.
std::unique_ptr<BackendImpl> make_cuda_backend(const PoolOptions& options);

}  // namespace specstate::detail
