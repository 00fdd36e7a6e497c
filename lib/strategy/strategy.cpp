// The factory: the one place that switches on the strategy.
#include "strategy.h"

#include <string>

#include "snapshot.h"
#include "specstate/status.h"

namespace specstate::detail {

std::unique_ptr<StrategyImpl> make_strategy(const Layout& layout) {
  switch (layout.strategy) {
    case Strategy::kSnapshot:
      return std::make_unique<SnapshotStrategy>();
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
  }
  throw Error(Status::kInvalidArgument,
              "StatePool: options.strategy = " + std::to_string(static_cast<int>(layout.strategy)) +
                  " is not a strategy");
}

}  // namespace specstate::detail
