// Internal: a strategy (DESIGN.md section 6) decides what a verify stores, what commit does and
// how deferred work is made visible (materialize). It owns its workspace in the layout and its
// host-side bookkeeping; it drives the backend only through the backend's primitives, so no
// backend ever switches on the strategy.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../backend.h"
#include "../layout.h"

namespace specstate::detail {

class StrategyImpl {
 public:
  virtual ~StrategyImpl() = default;
  virtual Strategy kind() const noexcept = 0;
  // Whether the committed memory may lag the committed state (then views and copies materialize).
  virtual bool defers_work() const noexcept = 0;

  // State I/O of the verify of `layer` in the open round; `first` is false when the layer was
  // already verified in this round (a repeated verify).
  virtual StateIO verify_io(int layer, const RoundPlan& plan, bool first) = 0;
  // After that verify's launch returned (not when it threw: the layer is then not verified, and
  // nothing may be recorded as if it had run).
  virtual void after_verify(int layer, const RoundPlan& plan, bool first) {
    (void)layer, (void)plan, (void)first;
  }
  // State I/O of an advance (prefill / decode) of `layer` over `slots` (-1 = padding).
  virtual StateIO advance_io(int layer, const std::vector<int32_t>& slots) = 0;
  // After the advance launched with `io`.
  virtual void after_advance(BackendImpl& backend, const PoolStorage& storage, int layer,
                             const std::vector<int32_t>& slots, const StateIO& io) = 0;
  // The call being made (verify, prefill / decode, materialize, commit) is captured into a CUDA
  // graph on the pool's stream, not run: told before its state I/O is decided. A graph's
  // launches then run it again, unseen by the host, on whatever the graph's slots hold by then.
  virtual void captured() noexcept {}
  // Ends the round: the host- or device-valued commit.
  virtual void commit(BackendImpl& backend, const PoolStorage& storage, const CommitWork& work) = 0;
  // The round is dropped without commit after the layers marked in `verified` ran.
  virtual void discard_round(BackendImpl& backend, const PoolStorage& storage,
                             const RoundPlan& plan, const std::vector<bool>& verified) = 0;
  // A slot was acquired (zeroed) or released.
  virtual void reset_slot(int slot) = 0;
  // The slot's committed memory was overwritten with an exact state (copy_slot, import_slot,
  // reset) and its device-side pending counts were cleared: it has no deferred work. Unlike
  // reset_slot, what a CUDA graph may still do to the slot (replay's sticky flag) is kept.
  virtual void slot_overwritten(int slot) { (void)slot; }

  // Whether `slot` has deferred work in `layer` (the committed memory lags the state).
  virtual bool deferred(int layer, int slot) const = 0;
  // Makes the committed memory of `slots` exact in every layer (from the strategy's own records:
  // no weights, inputs or outputs).
  virtual void materialize(BackendImpl& backend, const PoolStorage& storage,
                           const std::vector<int32_t>& slots) = 0;
};

// The strategy of `layout.strategy`, and the workspace it adds to a layout (sizes overflow-checked;
// called by make_layout).
std::unique_ptr<StrategyImpl> make_strategy(const Layout& layout);
void strategy_workspace(Layout& layout);

}  // namespace specstate::detail
