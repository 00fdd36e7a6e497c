// Internal: the replay strategy (DESIGN.md section 6). Verify writes each window token's record
// (its layer inputs, kilobytes) into the slot's record area; commit records per slot how many
// steps were accepted and which window indices they are (a tree: the accepted node's path); the
// slot's next verify of each layer first re-runs those steps from the committed state with the
// same step function, writes the committed state once, then runs the new window. Per round and
// row-layer: one state read and one write.
//
// Host bookkeeping: deferred_[layer * slots + slot] says the slot may have pending steps in that
// layer (set by commit, cleared when a call re-ran them). It only decides whether a launch needs
// its replay phase; the device-side counts (kPending) are the truth and are 0 wherever the flag
// is clear, except for layers a still-open round has verified (they are overwritten by commit or
// cleared by discard_round). A slot committed with device-resident values may be in a CUDA graph
// whose later launches commit again without the host seeing it: such a slot is `sticky` (always
// possibly pending) until it is released, except in a layer an open round has verified
// (`consumed_`: that layer's device count is stale until the round's commit overwrites it).
#pragma once

#include <vector>

#include "strategy.h"

namespace specstate::detail {

class ReplayStrategy final : public StrategyImpl {
 public:
  // kRecords [L][slots][max_window][record], kPending int32 [L][slots], kPath int32
  // [slots][max_window].
  static void workspace(Layout& layout);

  explicit ReplayStrategy(const Layout& layout);

  Strategy kind() const noexcept override { return Strategy::kReplay; }
  bool defers_work() const noexcept override { return true; }
  StateIO verify_io(int layer, const RoundPlan& plan, bool first) override;
  StateIO advance_io(int layer, const std::vector<int32_t>& slots) override;
  void after_advance(BackendImpl& backend, const PoolStorage& storage, int layer,
                     const std::vector<int32_t>& slots, const StateIO& io) override;
  void commit(BackendImpl& backend, const PoolStorage& storage, const CommitWork& work) override;
  void discard_round(BackendImpl& backend, const PoolStorage& storage, const RoundPlan& plan,
                     const std::vector<bool>& verified) override;
  void reset_slot(int slot) override;
  void slot_overwritten(int slot) override;
  bool deferred(int layer, int slot) const override;
  void materialize(BackendImpl& backend, const PoolStorage& storage,
                   const std::vector<int32_t>& slots,
                   const std::function<void(const LayerRun&)>& run_layer) override;

 private:
  bool any_deferred(int layer, const std::vector<int32_t>& slots) const;
  void set(int layer, int slot, bool value) {
    deferred_[static_cast<std::size_t>(layer) * slots_ + slot] = value ? 1 : 0;
  }

  int layers_ = 0;
  int slots_ = 0;
  std::vector<uint8_t> deferred_;  // [L][slots]
  std::vector<uint8_t> sticky_;    // [slots]
  std::vector<uint8_t> consumed_;  // [L][slots] verified in the open round, not yet committed
};

}  // namespace specstate::detail
