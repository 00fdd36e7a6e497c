// Internal: the replay strategy (DESIGN.md section 6, replay v2). Per slot and layer the committed
// SSM memory holds a checkpoint, and a ring of R factor records holds the steps accepted since
// (the cursor (base, h): h records from ring position base). Verify loads the checkpoint, applies
// the h history records (one multiply-add per state element each), runs the window with the
// unchanged step and writes one factor record per window token at ring position base + h + t;
// iff the fold predicate holds (h > R - 2 T_max) it stores the post-history state as the new
// checkpoint, and the cursor reads as (base + h, 0) from then on. Commit settles the cursor by
// the same predicate, compacts a tree's accepted path and adds the accepted steps to h: no state
// traffic. The conv window keeps the raw inputs of the last window (kRecords) and is brought up
// to date by the slot's next verify (pending conv steps, kPending / kPath).
//
// Host bookkeeping: deferred_[layer * slots + slot] says the slot may lag in that layer (history
// records or pending conv steps). It decides whether a materialize or an advance needs its replay
// phase; the device-side cursors and counts are the truth. verified_ marks the layers an open
// round has verified for a slot: their cursors may read as folded and their pending conv counts
// are stale, so a materialize settles them first (clear_pending kSettled), and a discarded round
// settles them. A slot committed with device-resident values may be in a CUDA graph whose later
// launches commit again without the host seeing it: such a slot is `sticky` (always possibly
// deferred) until it is released. Once the pool has captured any layer call or commit into a
// graph (`graph_`), every slot is possibly deferred, for good: a graph's launches verify, commit
// and advance whatever slots its rows hold by then (begin_verify outside the graph uploads them;
// inside, a released slot index acquired again is in the graph's rows), and a captured advance
// or materialize bakes its replay phase in. The replay phase of a slot with nothing pending
// (the device cursors and counts say so) does nothing. A captured verify does not mark its layer
// verified for the strategy: a capture abandoned before its launch ran nothing, so abort_round
// settles nothing (capture the commit with the verifies: a graph of verifies alone launched and
// then aborted is not settled).

#pragma once

#include <vector>

#include "strategy.h"

namespace specstate::detail {

class ReplayStrategy final : public StrategyImpl {
 public:
  // kRecords [L][slots][max_window][conv record], kPending int32 [L][slots], kPath int32
  // [slots][max_window], kFactors [L][slots][R][factor record], kCursor int32 [L][slots][2].
  static void workspace(Layout& layout);

  explicit ReplayStrategy(const Layout& layout);

  Strategy kind() const noexcept override { return Strategy::kReplay; }
  bool defers_work() const noexcept override { return true; }
  StateIO verify_io(int layer, const RoundPlan& plan, bool first) override;
  void after_verify(int layer, const RoundPlan& plan, bool first) override;
  StateIO advance_io(int layer, const std::vector<int32_t>& slots) override;
  void after_advance(BackendImpl& backend, const PoolStorage& storage, int layer,
                     const std::vector<int32_t>& slots, const StateIO& io) override;
  void captured() noexcept override { graph_ = true; }
  void commit(BackendImpl& backend, const PoolStorage& storage, const CommitWork& work) override;
  void discard_round(BackendImpl& backend, const PoolStorage& storage, const RoundPlan& plan,
                     const std::vector<bool>& verified) override;
  void reset_slot(int slot) override;
  void slot_overwritten(int slot) override;
  bool deferred(int layer, int slot) const override;
  // Needs no weights: the records alone make the memory exact.
  void materialize(BackendImpl& backend, const PoolStorage& storage,
                   const std::vector<int32_t>& slots) override;

 private:
  std::size_t at(int layer, int slot) const {
    return static_cast<std::size_t>(layer) * slots_ + slot;
  }

  int layers_ = 0;
  int slots_ = 0;
  std::vector<uint8_t> deferred_;  // [L][slots]
  std::vector<uint8_t> sticky_;    // [slots]
  std::vector<uint8_t> verified_;  // [L][slots] verified in the open round, not yet committed
  int round_fold_limit_ = 0;       // the open round's fold limit (RoundPlan::fold_limit)
  bool graph_ = false;             // a call was captured into a CUDA graph: every slot deferred
};

}  // namespace specstate::detail
