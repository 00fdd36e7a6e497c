// Internal: the snapshot strategy (SGLang's design, the reference). Verify stores the conv window
// and SSM state after every window token into row-indexed scratch; commit copies the accepted
// step into the slot. Nothing is deferred.
#pragma once

#include "strategy.h"

namespace specstate::detail {

class SnapshotStrategy final : public StrategyImpl {
 public:
  // kSnapConv / kSnapSsm: [L][max_rows][max_window][one state].
  static void workspace(Layout& layout);

  Strategy kind() const noexcept override { return Strategy::kSnapshot; }
  bool defers_work() const noexcept override { return false; }
  StateIO verify_io(int layer, const RoundPlan& plan, bool first) override;
  StateIO advance_io(int layer, const std::vector<int32_t>& slots) override;
  void after_advance(BackendImpl&, const PoolStorage&, int, const std::vector<int32_t>&,
                     const StateIO&) override {}
  void commit(BackendImpl& backend, const PoolStorage& storage, const CommitWork& work) override;
  void discard_round(BackendImpl&, const PoolStorage&, const RoundPlan&,
                     const std::vector<bool>&) override {}
  void reset_slot(int) override {}
  bool deferred(int, int) const override { return false; }
  void materialize(BackendImpl&, const PoolStorage&, const std::vector<int32_t>&) override {}
};

}  // namespace specstate::detail
