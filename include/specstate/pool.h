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
// Round lifecycle (DESIGN.md section 5.6, docs/lifecycle.md): while a round is open (begin_verify
// .. commit / abort_round) its rows' slots cannot be advanced, reset, copied or imported into; a
// row released mid-round becomes a padding row (its commit value must be 0 / -1) and the other
// rows still commit; begin_verify over a round that has verified a layer is an error (commit it
// or abort_round() first).
//
// Every call validates its whole input before touching memory and throws specstate::Error
// (naming the function, argument and value) without changing any state when it rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "specstate/batch.h"
#include "specstate/config.h"
#include "specstate/gdn.h"
#include "specstate/kda.h"
#include "specstate/mamba2.h"
#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate {

namespace detail {
struct PoolAccess;  // internal (lib/pool_access.h): the layout and memory, for benchmarks
}  // namespace detail

// Workspace tensors of a strategy (StatePool::workspace).
enum class Workspace : int32_t {
  kSnapshotConv = 0,  // snapshot: [max_rows, max_window, conv_dim, W-1] conv dtype
  kSnapshotSsm = 1,   // snapshot: [max_rows, max_window, HV, V, K] SSM dtype (Mamba2: nheads, P, N)
  kRecords = 2,       // replay:   [slots, max_window, conv_dim] act dtype, one window token's
                      //           conv input (GDN mixed_qkv, Mamba2 xBC, KDA [q | k | v]); the
                      //           ring of factor records is internal (DESIGN.md section 4)
};

// Caller-owned committed state (DESIGN.md section 4): per layer, views of an engine's own state
// tensors (SGLang's MambaPool, vLLM's per-layer state tensors), which a pool adopts instead of
// allocating. Slot s of the pool is index s of every view's leading dimension.
struct CommittedStateViews {
  std::vector<TensorView> conv;  // [L] views [slots, conv_dim, W-1] in the conv state dtype
  std::vector<TensorView> ssm;   // [L] views [slots, HV, V, K] (Mamba2 [slots, nheads, P, N])
};

// Threads: a StatePool is not synchronised. Its calls, reads included (is_live, free_slots,
// current_batch...), must not overlap: one thread at a time, or the engine's own lock (the
// Python package takes one per pool). Different pools may be used from different threads at
// once (each GPU's pool from its own thread: examples/tp_verify_loop).
class StatePool {
 public:
  StatePool(const ModelConfig& config, const PoolOptions& options);
  // A pool whose committed state is the caller's memory: it is read and written in place, never
  // allocated or freed by the pool, and its contents are kept (acquire() zeroes the slot it
  // hands out; adopt() keeps it). The workspace (snapshot scratch, replay records) is still the
  // pool's. Rejected (kInvalidArgument, naming the view) unless: L views of each kind, each of
  // exactly [options.num_slots, ...] in the state dtype, on the backend's device (host for cpu,
  // device memory of options.device for cuda); each slot's state contiguous (compact inner
  // strides); one slot stride per kind for every layer, at least one slot's state (slots never
  // overlap); every view aligned to its dtype (on cuda every view address and slot stride
  // 16-byte aligned); no byte of a slot's state in two views. Views may interleave: vLLM v1's
  // hybrid pages (slot p's conv state and SSM state side by side in page p, both views with the
  // page as slot stride) are accepted. The memory must outlive the pool. Everything else
  // (strategies, rounds, graphs, slot operations, export/import) works as on an owning pool, bit
  // for bit. When the pool is destroyed (or moved onto), its live slots are materialized into
  // this memory first, as release() does for one: the memory then holds every request's committed
  // state under either strategy, ready for another pool to adopt(). An error there cannot be
  // thrown from a destructor and is only logged: call materialize() first to see it.
  StatePool(const ModelConfig& config, const PoolOptions& options,
            const CommittedStateViews& committed);
  ~StatePool() noexcept;
  // Ends the pool as the destructor does, except that a caller-owned pool's live slots are not
  // materialized into the caller's memory first: for a caller whose memory is no longer the
  // pool's to write (freed, or moved elsewhere; the Python bindings call it when a torch tensor
  // of the committed state has moved to new memory). The live slots' deferred steps (replay) are
  // lost; the memory keeps what the pool last wrote. Waits for the pool's queued work (as the
  // destructor, it cannot while the pool's stream is being captured: logged), then leaves a
  // moved-from pool. On an owning pool it is the destructor.
  void discard() noexcept;
  // Moving leaves the source a moved-from pool: it can be assigned to or destroyed; any other
  // call throws kFailedPrecondition (the noexcept getters return empty values).
  StatePool(StatePool&&) noexcept;
  StatePool& operator=(StatePool&&) noexcept;
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  const ModelConfig& config() const noexcept;
  const PoolOptions& options() const noexcept;

  // --- slots -------------------------------------------------------------------------------
  // The lowest free slot, zeroed (conv window and SSM state of every layer).
  SlotHandle acquire();
  // Takes the free slot `slot` as a new request keeping its committed state as it is in memory
  // (a caller-owned pool: a state the engine computed or restored in its own tensors), with no
  // pending steps. kOutOfRange outside [0, num_slots); kFailedPrecondition when it is live.
  SlotHandle adopt(int slot);
  // Frees the slot. A row of the open round becomes a padding row of that round: its commit
  // value must be 0 (chain) / -1 (tree), the other rows commit as usual (on CUDA the round's
  // slot list is re-uploaded with the row as -1, so a device-valued commit skips it too).
  // The slot is materialized first (DESIGN.md section 5.7; replay: one slot's deferred steps
  // applied and stored): the memory of a released slot holds its committed state under every
  // strategy, ready to be kept (a caller-owned pool's) or adopt()ed again.
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
  // One slot's committed state (materializes only that slot): no stride arithmetic needed.
  TensorView conv_state(int layer, SlotHandle handle) const;  // [conv_dim, W-1]
  TensorView ssm_state(int layer, SlotHandle handle) const;   // [HV, V, K]; Mamba2: [nheads, P, N]
  // The strategy's workspace, per layer: snapshot scratch (kSnapshot) or replay records
  // (kReplay). Throws kFailedPrecondition when the pool's strategy has no such workspace.
  TensorView workspace(Workspace which, int layer) const;
  // Shorthands of workspace(kSnapshotConv / kSnapshotSsm, layer).
  TensorView snapshot_conv(int layer) const;  // [max_rows, max_window, conv_dim, W-1]
  TensorView snapshot_ssm(int layer) const;   // [max_rows, max_window, HV, V, K]
  int64_t committed_bytes() const noexcept;   // all slots, all layers
  // Everything the strategy needs besides the committed state (snapshot scratch, or replay
  // records + bookkeeping), all layers. Not counted, since they do not grow with the pool: the
  // CPU backend's working copies of one slot's layer state (one; three for snapshot rounds in a
  // non-canonical element order; under replay one more for each window token that later tokens
  // still start from: two for a chain, up to T / 2 + 1 for a tree; host memory, sized at the
  // first layer call that needs them and kept; its host-memory check at construction counts
  // 3 + max_window / 2 + 1 of them for replay pools), and the CUDA backend's round tables (a few
  // int32 a row).
  int64_t workspace_bytes() const noexcept;
  int64_t scratch_bytes() const noexcept { return workspace_bytes(); }

  // --- deferred work (DESIGN.md section 5.7) -------------------------------------------------
  // Makes the committed memory of `handles` (all live slots when empty) equal their committed
  // state in every layer. A no-op for the snapshot strategy. Under replay it applies the slots'
  // history factor records to their checkpoints and stores them (and shifts the conv windows
  // by the recorded inputs): no weights are read, so the last verify's views may be gone.
  // Allowed inside an open round. A handle given twice is rejected
  // (kInvalidArgument, naming both indices), like a stale or foreign one, before any work runs.
  void materialize(const std::vector<SlotHandle>& handles = {});

  // --- non-speculative path: advances the committed state in place -------------------------
  // `inputs` hold n tokens of one request, in order. A slot that is a row of the open round is
  // rejected (its commit would overwrite the advance).
  // Each layer call comes in one overload per layer kind; the pool's kind (config().kind) must
  // match the argument types, otherwise the call is rejected (kInvalidArgument).
  // Every layer call (prefill, decode, verify) rejects (kInvalidArgument, naming both views) an
  // output that shares a byte with one of its inputs, its weights or its other output, or with
  // the pool's memory. The test is exact along the views' token dimension, so views that
  // interleave token by token in one buffer (an input's columns and an output's columns of one
  // projection buffer) are accepted; within one token a view counts as its whole span.
  void prefill(int layer, SlotHandle handle, const GdnWeights& weights, const GdnInputs& inputs,
               const GdnOutputs& outputs);
  void prefill(int layer, SlotHandle handle, const Mamba2Weights& weights,
               const Mamba2Inputs& inputs, const Mamba2Outputs& outputs);
  void prefill(int layer, SlotHandle handle, const KdaWeights& weights, const KdaInputs& inputs,
               const KdaOutputs& outputs);
  // Batched variable-length prefill, one call per layer for several requests: handles[r]
  // advances by lengths[r] tokens (0 allowed), packed at lengths[0] + .. + lengths[r-1]; the
  // inputs hold sum(lengths) tokens. Equal to prefilling each request on its own.
  void prefill(int layer, const std::vector<SlotHandle>& handles,
               const std::vector<int32_t>& lengths, const GdnWeights& weights,
               const GdnInputs& inputs, const GdnOutputs& outputs);
  void prefill(int layer, const std::vector<SlotHandle>& handles,
               const std::vector<int32_t>& lengths, const Mamba2Weights& weights,
               const Mamba2Inputs& inputs, const Mamba2Outputs& outputs);
  void prefill(int layer, const std::vector<SlotHandle>& handles,
               const std::vector<int32_t>& lengths, const KdaWeights& weights,
               const KdaInputs& inputs, const KdaOutputs& outputs);
  // One token per row (row r's token at r); padding rows are skipped.
  void decode(int layer, const std::vector<SlotHandle>& rows, const GdnWeights& weights,
              const GdnInputs& inputs, const GdnOutputs& outputs);
  void decode(int layer, const std::vector<SlotHandle>& rows, const Mamba2Weights& weights,
              const Mamba2Inputs& inputs, const Mamba2Outputs& outputs);
  void decode(int layer, const std::vector<SlotHandle>& rows, const KdaWeights& weights,
              const KdaInputs& inputs, const KdaOutputs& outputs);

  // --- slot operations (prefix caching, parallel sampling, preemption, hand-off) --------------
  // Each materializes its source first (DESIGN.md section 5.7) and leaves its destination with
  // no pending steps. A destination that is a row of the open round is rejected
  // (kFailedPrecondition): its commit would overwrite the write. A source may be one.
  //
  // Copies src's committed state (every layer) into dst. On CUDA: asynchronous on the pool's
  // stream, one strided copy per buffer.
  void copy_slot(SlotHandle src, SlotHandle dst);
  // acquire() + copy_slot(src, new handle): a new request with src's state (kResourceExhausted
  // when the pool is full; nothing is acquired when the copy is rejected).
  SlotHandle fork(SlotHandle src);
  // Zeroes the slot's committed state (every layer) and drops its pending steps, as acquire.
  void reset(SlotHandle handle);

  // Export / import of one slot's committed state as bytes, the same on every backend and
  // strategy, so a CPU <-> GPU or GPU <-> GPU hand-off is a copy. Layout (slot_state_bytes()
  // bytes, little-endian, no padding): a header of kSlotStateHeaderBytes, then for each layer
  // l = 0..L-1 the conv window [conv_dim][W-1] in the conv dtype (oldest column first), then the
  // SSM state ([HV][V][K], KDA too; Mamba2 [nheads][P][N]) in the SSM dtype, both in the pool's
  // element order (PoolOptions::conv_layout / ssm_layout: [W-1][conv_dim], [HV][K][V]). The
  // header says which config the state belongs to (docs/lifecycle.md "The export format" gives
  // its fields):
  //   [0, 8) magic "specslot"; [8, 12) u32 version 1; [12, 16) u32 kind (LayerKind);
  //   [16, 20) u32 num_layers; [20, 23) u8 act, conv state, ssm state dtype (DType); [23] u8
  //   element order (bit 0 conv_layout kChannelsLast, bit 1 ssm_layout kKV);
  //   [24, 44) u32 x 5 shape fields (GDN and KDA num_k_heads, num_v_heads, head_k_dim,
  //   head_v_dim, conv_width; Mamba2 num_heads, head_dim, d_state, n_groups, conv_width); [44, 48)
  //   0; [48, 56) u64 state bytes that follow; [56, 64) u64 FNV-1a 64 of bytes [0, 56).
  static constexpr int64_t kSlotStateHeaderBytes = 64;
  // kSlotStateHeaderBytes + L x (conv window + SSM state) bytes: the header included.
  int64_t slot_state_bytes() const noexcept;
  // `dst` / `src`: a contiguous 1-D view of any dtype (i32, f32 or bf16) of exactly
  // ceil(slot_state_bytes() / dtype size) elements; only the first slot_state_bytes() bytes are
  // written / read. Host memory on either backend; device memory on kCuda only (a CPU pool
  // rejects a cuda view). On CUDA, the state of a device buffer is copied asynchronously on the
  // pool's stream, its header with one wait for the stream (export writes it, import reads it
  // in stream order), so neither is for use inside a graph capture; host buffers are done when
  // the call returns (it waits for the stream). The buffer must not overlap the pool's memory.
  // Import checks the header before writing anything and rejects (kInvalidArgument, naming what
  // differs, e.g. "src (...) was exported from conv_state_dtype = f32, this pool has bf16") a
  // buffer of another layer kind, layer count, dtype or shape field, even of the same size, and
  // one whose header is missing, of another version, truncated or corrupt.
  void export_slot(SlotHandle handle, const TensorView& dst);
  void import_slot(SlotHandle handle, const TensorView& src);
  // The same through a safetensors file: tensors `layers.{l}.conv_state` [conv_dim, W-1] and
  // `layers.{l}.ssm_state` [HV, V, K] (Mamba2 [nheads, P, N]) in the pool's dtypes, metadata
  // format = "specstate.slot_state", version, kind, num_layers, conv_dim, conv_width, ssm_shape,
  // conv_dtype, ssm_dtype, act_dtype and the header's shape fields by name (num_k_heads, ...).
  // Import checks the kind, the layer count, every tensor's name, dtype and shape, and then
  // act_dtype and the shape fields where the file has them, against the pool, and rejects a
  // mismatch (kInvalidArgument, naming the file and tensor or key) before writing anything.
  // Export opens `path` before it materializes the slot, so a path that cannot be written is
  // rejected with nothing changed.
  void export_slot(SlotHandle handle, const std::string& path);
  void import_slot(SlotHandle handle, const std::string& path);

  // --- speculative path ----------------------------------------------------------------------
  // Starts a round: checks rows (live, from this pool, no slot twice), window <= max_window,
  // rows <= max_rows and the tree. An open round that has verified at least one layer is an
  // error (kFailedPrecondition, naming the round and its verified layers): commit it or call
  // abort_round() first; nothing changes. An open round that has verified no layer yet is
  // replaced (it has done nothing the new one would not redo).
  void begin_verify(const VerifyBatch& batch);
  // Drops the open round without committing (kFailedPrecondition when none is open): every
  // row's committed state stays what it was before begin_verify (replay: pending steps the
  // round's verifies re-ran stay in the committed memory, the others stay pending).
  void abort_round();
  // Whether a round is open (begin_verify called, not yet committed or aborted).
  bool round_open() const noexcept;
  // Verify one layer of the current round: outputs for every window token, and what commit needs
  // (snapshot: the conv window and SSM state after every token into row-indexed scratch; replay:
  // the tokens' records, after bringing the slot's conv window up to date from its pending
  // records and applying its history records to the checkpoint in registers; the checkpoint is
  // stored only when the verify folds, DESIGN.md section 6). The committed state is unchanged.
  // A layer may be verified more than once in a round (a retried layer call, a forward pass
  // that runs a layer again): each verify starts from the same committed state, so with the same
  // inputs it gives the same outputs bit for bit, and the last verify of a layer replaces what
  // the earlier ones recorded. Commit then commits as if each layer had been verified once, with
  // its last verify's inputs (both strategies, bit for bit). Commit needs every layer verified
  // at least once.
  void verify(int layer, const GdnWeights& weights, const GdnInputs& inputs,
              const GdnOutputs& outputs);
  void verify(int layer, const Mamba2Weights& weights, const Mamba2Inputs& inputs,
              const Mamba2Outputs& outputs);
  void verify(int layer, const KdaWeights& weights, const KdaInputs& inputs,
              const KdaOutputs& outputs);
  // Ends the round: per row, chain: accepted length a in [0, T] (0 = keep, a = state after
  // token a-1); tree: accepted node in [-1, T-1] (-1 = keep). Every layer must have been
  // verified. Validated as a whole before anything is written.
  void commit(const std::vector<int32_t>& accepted);
  // The same with `accepted` as an int32 [rows] view (host memory; device memory on kCuda).
  void commit(const TensorView& accepted);
  // With `accepted` in device memory the values are checked on the device, not before the
  // launch (no host sync), and still all-or-nothing: if any row's value is out of range (chain
  // a < 0 or a > T, tree node outside [-1, T-1]) the round commits no row, every slot keeping
  // its state bit for bit (as if every value were 0 / -1), and the round is closed. This waits
  // for the pool's stream and returns kOutOfRange if the last commit was refused so, kSuccess
  // otherwise. Host values are validated before anything is written (a rejected call throws),
  // so this is always kSuccess after them, and on the CPU backend, with one exception: a round
  // whose lengths are a device cu_seqlens view, where the host checks each value against the
  // batch's window and the device against the row's own length (a value past it, or a malformed
  // range, refuses the round's commit, reported here).
  Status last_commit_status() const;

  // The batch of the current round (empty rows when none is open); a row released during the
  // round shows as SlotHandle::padding().
  const VerifyBatch& current_batch() const noexcept;

 private:
  friend struct detail::PoolAccess;
  struct Construct {};  // tags the constructor both public ones delegate to
  StatePool(Construct, const ModelConfig& config, const PoolOptions& options,
            const CommittedStateViews* committed);
  struct Impl;
  // The pool's state; null once the pool was moved from. A moved-from pool can be assigned to or
  // destroyed; its other calls throw kFailedPrecondition ("the pool was moved from") and its
  // noexcept getters return empty values (no slot live, 0 bytes, no round, default config).
  class ImplPtr {
   public:
    ImplPtr() noexcept;
    ImplPtr(ImplPtr&&) noexcept;
    ImplPtr& operator=(ImplPtr&&) noexcept;
    ~ImplPtr();
    ImplPtr& operator=(std::unique_ptr<Impl> p) noexcept;
    Impl* operator->() const {
      if (!p_) moved_from();
      return p_.get();
    }
    Impl* get() const noexcept { return p_.get(); }
    explicit operator bool() const noexcept { return p_ != nullptr; }

   private:
    [[noreturn]] static void moved_from();
    std::unique_ptr<Impl> p_;
  };
  ImplPtr impl_;
};

}  // namespace specstate
