// The state pool: committed per-layer states of every request (one slot each), the scratch a
// verify round records into, and the protocol of DESIGN.md section 5:
//
//   SlotHandle h = pool.acquire();                 // once per request (zeroed state)
//   pool.prefill(layer, h, weights, inputs, out);  // per layer, advances the committed state
//   pool.begin_verify(batch);                      // once per round: rows -> slots, window, tree
//   pool.verify(layer, weights, inputs, out);      // per layer, committed state untouched
//   pool.commit(accepted);                         // once per round, all layers, all-or-nothing
//   pool.release(h);                               // when the request ends
//
// Every call validates its whole input before touching memory and throws specstate::Error
// (naming the function, argument and value) without changing any state when it rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "specstate/config.h"
#include "specstate/gdn.h"
#include "specstate/mamba2.h"
#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate {

namespace detail {
struct PoolAccess;  // internal (lib/pool_access.h): the layout and memory, for benchmarks
}  // namespace detail

// A request's slot. The generation makes a handle stale once its slot is released (and maybe
// handed out again); the pool id makes a handle of another pool foreign. Both are rejected.
struct SlotHandle {
  int32_t slot = -1;
  uint32_t generation = 0;
  uint64_t pool_id = 0;

  // The handle of a padding row: never read, never written.
  static SlotHandle padding() noexcept { return SlotHandle{}; }
  bool is_padding() const noexcept { return slot < 0; }
  friend bool operator==(const SlotHandle& x, const SlotHandle& y) noexcept {
    return x.slot == y.slot && x.generation == y.generation && x.pool_id == y.pool_id;
  }
  friend bool operator!=(const SlotHandle& x, const SlotHandle& y) noexcept { return !(x == y); }
};

// Workspace tensors of a strategy (StatePool::workspace).
enum class Workspace : int32_t {
  kSnapshotConv = 0,  // snapshot: [max_rows, max_window, conv_dim, W-1] conv dtype
  kSnapshotSsm = 1,   // snapshot: [max_rows, max_window, HV, V, K] SSM dtype (Mamba2: nheads, P, N)
  kRecords = 2,       // replay:   [slots, max_window, record] act dtype, record = one token's
                      //           layer inputs [mixed_qkv | a | b] (Mamba2: [xBC | dt])
};

// One verify round's batch. Tokens of a layer's inputs are packed by row: token i of row r at
// r * window + i (padding rows keep their place; their tokens are read by nobody).
struct VerifyBatch {
  std::vector<SlotHandle> rows;  // B rows; SlotHandle::padding() marks a padding row
  int window = 1;                // T tokens per row; token 0 is the root
  // Empty: a chain. Otherwise a tree: parents[t] < t for t >= 1 and parents[0] = -1, either
  // [T] (one tree shared by every row) or [B * T] (row r's tree at r * T).
  std::vector<int32_t> parents;

  bool is_tree() const noexcept { return !parents.empty(); }
};

class StatePool {
 public:
  StatePool(const ModelConfig& config, const PoolOptions& options);
  ~StatePool() noexcept;
  StatePool(StatePool&&) noexcept;
  StatePool& operator=(StatePool&&) noexcept;
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  const ModelConfig& config() const noexcept;
  const PoolOptions& options() const noexcept;

  // --- slots -------------------------------------------------------------------------------
  // The lowest free slot, zeroed (conv window and SSM state of every layer).
  SlotHandle acquire();
  void release(SlotHandle handle);
  bool is_live(SlotHandle handle) const noexcept;
  int free_slots() const noexcept;
  // The slot index of a live handle (index into the views below); throws otherwise.
  int slot_index(SlotHandle handle) const;

  // --- memory views (device memory for Backend::kCuda) --------------------------------------
  // Views of the committed state. A strategy that defers work (replay) materializes the pool's
  // slots first (DESIGN.md section 5.7), so the memory a view shows is exact once that work has
  // run: on CUDA it is queued on the pool's stream, so read the view in stream order (or after
  // synchronizing the stream). It stays exact until the next commit.
  TensorView conv_state(int layer) const;  // [slots, conv_dim, W-1], oldest column first
  TensorView ssm_state(int layer) const;   // [slots, HV, V, K]; Mamba2: [slots, nheads, P, N]
  // The strategy's workspace, per layer: snapshot scratch (kSnapshot) or replay records
  // (kReplay). Throws kFailedPrecondition when the pool's strategy has no such workspace.
  TensorView workspace(Workspace which, int layer) const;
  // Shorthands of workspace(kSnapshotConv / kSnapshotSsm, layer).
  TensorView snapshot_conv(int layer) const;  // [max_rows, max_window, conv_dim, W-1]
  TensorView snapshot_ssm(int layer) const;   // [max_rows, max_window, HV, V, K]
  int64_t committed_bytes() const noexcept;   // all slots, all layers
  // Everything the strategy needs besides the committed state (snapshot scratch, or replay
  // records + bookkeeping), all layers.
  int64_t workspace_bytes() const noexcept;
  int64_t scratch_bytes() const noexcept { return workspace_bytes(); }

  // --- deferred work (DESIGN.md section 5.7) -------------------------------------------------
  // Makes the committed memory of `handles` (all live slots when empty) equal their committed
  // state in every layer. A no-op for the snapshot strategy. Under replay it re-runs the slots'
  // pending accepted steps with the weights of each layer's last verify, so those views must
  // still be valid. Allowed inside an open round.
  void materialize(const std::vector<SlotHandle>& handles = {});

  // --- non-speculative path: advances the committed state in place -------------------------
  // `inputs` hold n tokens of one request, in order. A slot that is a row of the open round is
  // rejected (its commit would overwrite the advance).
  // Each layer call comes in one overload per layer kind; the pool's kind (config().kind) must
  // match the argument types, otherwise the call is rejected (kInvalidArgument).
  void prefill(int layer, SlotHandle handle, const GdnWeights& weights, const GdnInputs& inputs,
               const GdnOutputs& outputs);
  void prefill(int layer, SlotHandle handle, const Mamba2Weights& weights,
               const Mamba2Inputs& inputs, const Mamba2Outputs& outputs);
  // One token per row (row r's token at r); padding rows are skipped.
  void decode(int layer, const std::vector<SlotHandle>& rows, const GdnWeights& weights,
              const GdnInputs& inputs, const GdnOutputs& outputs);
  void decode(int layer, const std::vector<SlotHandle>& rows, const Mamba2Weights& weights,
              const Mamba2Inputs& inputs, const Mamba2Outputs& outputs);

  // --- speculative path ----------------------------------------------------------------------
  // Starts a round: checks rows (live, from this pool, no slot twice), window <= max_window,
  // rows <= max_rows and the tree. A previous uncommitted round is discarded.
  void begin_verify(const VerifyBatch& batch);
  // Verify one layer of the current round: outputs for every window token, and what commit needs
  // (snapshot: the conv window and SSM state after every token into row-indexed scratch; replay:
  // the tokens' records, after re-running the slot's pending steps into the committed memory).
  // The committed state is unchanged (replay: its memory becomes exact).
  void verify(int layer, const GdnWeights& weights, const GdnInputs& inputs,
              const GdnOutputs& outputs);
  void verify(int layer, const Mamba2Weights& weights, const Mamba2Inputs& inputs,
              const Mamba2Outputs& outputs);
  // Ends the round: per row, chain: accepted length a in [0, T] (0 = keep, a = state after
  // token a-1); tree: accepted node in [-1, T-1] (-1 = keep). Every layer must have been
  // verified. Validated as a whole before anything is written.
  void commit(const std::vector<int32_t>& accepted);
  // The same with `accepted` as an int32 [rows] view (host memory; device memory on kCuda).
  void commit(const TensorView& accepted);
  // With `accepted` in device memory the values are checked by the commit kernel, not before
  // the launch (no host sync): a row whose value is out of range (chain a < 0 or a > T, tree
  // node outside [-1, T-1]) is skipped and left bit-identical, the other rows commit. This
  // waits for the pool's stream and returns kOutOfRange if the last commit skipped such a row,
  // kSuccess otherwise (always kSuccess for host-validated commits and the CPU backend).
  Status last_commit_status() const;

  // The batch of the current round (empty rows when none is open).
  const VerifyBatch& current_batch() const noexcept;

 private:
  friend struct detail::PoolAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specstate
