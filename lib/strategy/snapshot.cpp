#include "snapshot.h"

namespace specstate::detail {

void SnapshotStrategy::workspace(Layout& l) {
  SizeCalc c{"StatePool", "snapshot scratch (num_layers x max_rows x max_window x one state)"};
  const int64_t snaps = c.mul(c.mul(l.layers, l.max_rows), l.max_window);
  l.bytes[static_cast<int>(Buf::kSnapConv)] = c.mul(snaps, l.conv_bytes);
  l.bytes[static_cast<int>(Buf::kSnapSsm)] = c.mul(snaps, l.ssm_bytes);
}

StateIO SnapshotStrategy::verify_io(int, const RoundPlan&, bool) {
  StateIO io;
  io.store_tokens = true;
  return io;
}

StateIO SnapshotStrategy::advance_io(int, const std::vector<int32_t>&) {
  StateIO io;
  io.store_final = true;
  return io;
}

void SnapshotStrategy::commit(BackendImpl& backend, const PoolStorage& storage,
                              const CommitWork& work) {
  backend.commit_copy(storage, work);
}

}  // namespace specstate::detail
