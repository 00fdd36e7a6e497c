// A request's slot handle and one verify round's batch: what a pool's round takes (StatePool::
// begin_verify) and what the protocol layer (spec/: VerifyBatchBuilder) builds, without the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "specstate/tensor_view.h"

namespace specstate {

// A request's slot. The generation makes a handle stale once its slot is released (and maybe
// handed out again); the pool id makes a handle of another pool foreign. Both are rejected. The
// generation is 64 bits: a 32-bit one wrapped after 2^32 uses of one slot (about 50 days of a
// server that hands its slot 0 a request every millisecond), and the first handle was then live
// again.
struct SlotHandle {
  int32_t slot = -1;
  uint64_t generation = 0;
  uint64_t pool_id = 0;

  // The handle of a padding row: never read, never written. Only a batch's rows (begin_verify,
  // decode, batched prefill) may be padding; a call that takes one request's handle (prefill,
  // release, slot_index, the per-slot views, copy_slot, fork, reset, export_slot, import_slot,
  // each of materialize's handles) rejects it (kInvalidArgument: "handle is a padding handle:
  // prefill needs a live request").
  // A padding row is slot -1 (whatever its generation and pool id); any other negative slot is
  // not padding but a corrupt handle, rejected where a pool resolves it (kOutOfRange, or
  // kFailedPrecondition for another pool's id, naming the row).
  static SlotHandle padding() noexcept { return SlotHandle{}; }
  bool is_padding() const noexcept { return slot == -1; }
  friend bool operator==(const SlotHandle& x, const SlotHandle& y) noexcept {
    return x.slot == y.slot && x.generation == y.generation && x.pool_id == y.pool_id;
  }
  friend bool operator!=(const SlotHandle& x, const SlotHandle& y) noexcept { return !(x == y); }
};

// One verify round's batch. Tokens of a layer's inputs are packed by row: token i of row r at
// r * window + i (padding rows keep their place; their tokens are read by nobody), or, with
// variable windows, by cumulative offsets (DESIGN.md section 2).
struct VerifyBatch {
  std::vector<SlotHandle> rows;  // B rows; SlotHandle::padding() marks a padding row
  int window = 1;                // T tokens per row; token 0 is the root. Variable: the largest
  // Empty: a chain. Otherwise a tree: parents[t] < t for t >= 1 and parents[0] = -1, either
  // [T] (one tree shared by every row) or [B * T] (row r's tree at r * T). With `lengths`:
  // [sum(lengths)] (row r's tree packed at its token offset) or [B * T] (row r's tree at r * T,
  // entries past its length unused).
  std::vector<int32_t> parents;
  // Variable windows: row r verifies lengths[r] tokens, 0..window (0: the row sits the round
  // out and must commit 0 / -1). Its tokens are packed at cu[r] = lengths[0] + .. +
  // lengths[r-1], no filler: a layer's inputs hold sum(lengths) tokens. A commit value is
  // checked against the row's own length. Empty: every row has `window` tokens.
  std::vector<int32_t> lengths;
  // CUDA only, instead of `lengths`, for CUDA graphs whose lengths change on the device: an
  // int32 [B + 1] device view of cu_seqlens (row r's tokens [cu[r], cu[r+1]), at most `window`),
  // read by the kernels when they run, never by the host. The inputs then hold B * window
  // tokens (the static maximum); parents is [T] or [B * T]. A row whose range is malformed
  // (negative, decreasing, longer than window, past B * window) computes nothing, and the
  // round's commit then commits no row and is reported by last_commit_status() (kOutOfRange).
  TensorView cu_seqlens;

  bool is_tree() const noexcept { return !parents.empty(); }
  bool is_variable() const noexcept { return !lengths.empty() || !cu_seqlens.empty(); }
};

}  // namespace specstate
