// The factory: the one place that switches on the strategy.
#include "strategy.h"

#include <string>

#include "replay.h"
#include "snapshot.h"
#include "specstate/status.h"

namespace specstate::detail {

std::unique_ptr<StrategyImpl> make_strategy(const Layout& layout) {
  switch (layout.strategy) {
    case Strategy::kSnapshot:
      return std::make_unique<SnapshotStrategy>();
    case Strategy::kReplay:
      return std::make_unique<ReplayStrategy>(layout);
  }
  throw Error(Status::kInvalidArgument,
              "StatePool: options.strategy = " + std::to_string(static_cast<int>(layout.strategy)) +
                  " is not a strategy");
}

void strategy_workspace(Layout& layout) {
  switch (layout.strategy) {
    case Strategy::kSnapshot:
      SnapshotStrategy::workspace(layout);
      return;
    case Strategy::kReplay:
      ReplayStrategy::workspace(layout);
      return;
  }
  throw Error(Status::kInvalidArgument,
              "StatePool: options.strategy = " + std::to_string(static_cast<int>(layout.strategy)) +
                  " is not a strategy");
}

}  // namespace specstate::detail
