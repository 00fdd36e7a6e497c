// Internal: the storage (layout and buffers) of a pool, for the benchmarks, which launch the
// backend's kernels directly with the backend's own param builders. Not part of the public API.
#pragma once

#include "backend.h"
#include "specstate/pool.h"

namespace specstate::detail {

struct PoolAccess {
  static const PoolStorage& storage(const StatePool& pool);
};

}  // namespace specstate::detail
