// Builds one verify round's batch (DESIGN.md sections 2 and 5): requests -> rows -> slots, the
// shared window size T, per-row trees, token offsets, and padding up to a CUDA-graph bucket.
//
//   VerifyBatchBuilder builder(VerifyBatchBuilder::power_of_two_buckets(64));
//   builder.add(handle_a, Window::chain(4));
//   builder.add(handle_b, Window::chain(3));       // shorter rows are padded to T = 4
//   BatchPlan plan = builder.build();               // 2 live rows, padded to bucket 2
//   pool.begin_verify(plan.batch);
//   ... pool.verify(layer, ...) with inputs packed at row * plan.window() + i ...
//   pool.commit(plan.commit_values(per_live_row_acceptance));
//
// Packing::kVariable (DESIGN.md section 2) packs each row's own tokens with no filler: the
// batch carries per-row lengths (padding rows 0) and token_offsets are their cumulative sums.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specstate/batch.h"
#include "specstate/config.h"
#include "specstate/spec/acceptance.h"
#include "specstate/spec/window.h"

namespace specstate::spec {

struct BatchPlan {
  // What StatePool::begin_verify takes. rows = live rows (in add() order) then padding rows;
  // window = T, the largest window added; parents empty when every row is a chain, [T] when
  // every row has the same tree, otherwise [rows * T].
  VerifyBatch batch;
  int live_rows = 0;
  // [rows] the window each row really has (padding rows: a chain of one). Padded packing: row
  // r's tokens beyond windows[r].size() (up to T) are filler, computed by verify and never
  // accepted. Variable packing: there are none (and padding rows have no tokens).
  std::vector<Window> windows;
  // [rows + 1] cu_seqlens: row r's tokens start at token_offsets[r] (padded: r * T; variable:
  // the sum of the earlier rows' lengths).
  std::vector<int32_t> token_offsets;

  int rows() const noexcept { return static_cast<int>(batch.rows.size()); }
  int window() const noexcept { return batch.window; }
  // Tokens of a layer's verify inputs.
  int64_t num_tokens() const noexcept { return token_offsets.empty() ? 0 : token_offsets.back(); }
  bool is_tree() const noexcept { return batch.is_tree(); }

  // The vector StatePool::commit takes, from one Acceptance per live row: chain rows give the
  // accepted length, tree rows the last accepted node; padding rows keep (0 or -1). Throws
  // Error(kInvalidArgument) when the count differs from live_rows or a path is not a path of
  // the row's window.
  std::vector<int32_t> commit_values(const std::vector<Acceptance>& accepted) const;
  // The same from accepted lengths (chains only; 0 = the row keeps its state).
  std::vector<int32_t> commit_lengths(const std::vector<int32_t>& accepted_lengths) const;
  // Greedy acceptance of every live row, from tokens and target argmax packed like the
  // verify inputs ([rows * T], row r at token_offsets[r]).
  std::vector<Acceptance> accept_greedy(const std::vector<int32_t>& tokens,
                                        const std::vector<int32_t>& target) const;
  // The three methods above first check that the fields agree as build() made them (they are
  // public and may have been changed since): live_rows in [0, rows()], one window a row,
  // rows() + 1 offsets from 0, non-decreasing, each row's window within its tokens and T.
  // Throws Error(kFailedPrecondition) naming the field that does not.
  void check_consistent(const char* function) const;
};

// How a batch's tokens are laid out: every row at r * T with filler up to T (a static shape), or
// each row's own tokens packed by cumulative offsets (batch.lengths; no filler is computed).
enum class Packing { kPadded, kVariable };

// Bounds on a built batch (sanity bounds on the input, far above any engine's batch): at most
// kMaxBatchRows rows (a bucket of 2^31 rows made build() allocate 16 GB of handles), and
// rows x window at most kMaxBatchTokens tokens (token_offsets are int32; the parents of a
// per-row tree batch are that many entries).
constexpr int kMaxBatchRows = 1 << 20;
constexpr int64_t kMaxBatchTokens = int64_t{1} << 26;
static_assert(kMaxBatchRows == PoolOptions::kMaxRows &&
                  kMaxWindowNodes == PoolOptions::kMaxWindow &&
                  kMaxBatchTokens == PoolOptions::kMaxRoundTokens,
              "the pool's bounds are the protocol's");

class VerifyBatchBuilder {
 public:
  // `buckets`: the batch sizes CUDA graphs were captured for, strictly increasing, in
  // [1, kMaxBatchRows]. A batch is padded to the smallest bucket that holds its rows. Empty: no
  // padding (at most kMaxBatchRows rows). Throws Error(kInvalidArgument) naming a bad bucket or
  // a packing that is none.
  explicit VerifyBatchBuilder(std::vector<int> buckets = {}, Packing packing = Packing::kPadded);

  // SGLang-style buckets 1, 2, 4, 8, ... up to and including max_rows (in [1, kMaxBatchRows]).
  static std::vector<int> power_of_two_buckets(int max_rows);

  // Adds a live row; returns its row index. Throws Error(kInvalidArgument) for a padding
  // handle or a slot already in the batch, Error(kOutOfRange) when the largest bucket is full or
  // the rows added so far would pass kMaxBatchTokens tokens as rows x the largest window (either
  // packing: build() refuses that, and a pool's round is bounded by max_rows x max_window), so
  // the windows held no longer grow past it (8192 rows of a 65536-node window held 4 GB before
  // build() refused them). A throwing add() (the error, or std::bad_alloc) changes nothing.
  int add(SlotHandle handle, const Window& window);
  void clear() noexcept;
  int size() const noexcept { return static_cast<int>(handles_.size()); }
  const std::vector<int>& buckets() const noexcept { return buckets_; }

  // Throws Error(kFailedPrecondition) when no row was added, Error(kOutOfRange) when the padded
  // batch would pass kMaxBatchTokens tokens.
  BatchPlan build() const;

 private:
  std::vector<int> buckets_;
  Packing packing_ = Packing::kPadded;
  std::vector<SlotHandle> handles_;
  std::vector<Window> windows_;
  int max_window_ = 0;  // the largest window added
  // (pool_id, slot) -> row of handles_: add's duplicate check in O(1).
  struct KeyHash {
    std::size_t operator()(const std::pair<uint64_t, int32_t>& k) const noexcept {
      return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^
                                   static_cast<uint32_t>(k.second));
    }
  };
  std::unordered_map<std::pair<uint64_t, int32_t>, int, KeyHash> rows_of_;
};

}  // namespace specstate::spec
