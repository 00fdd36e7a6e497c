#include "replay.h"

namespace specstate::detail {

void ReplayStrategy::workspace(Layout& l) {
  SizeCalc c{"StatePool", "replay conv records (num_layers x num_slots x max_window x record)"};
  const int64_t records = c.mul(c.mul(l.layers, l.slots), l.max_window);
  l.bytes[static_cast<int>(Buf::kRecords)] = c.mul(records, l.record_bytes);
  c.field = "replay pending counts (num_layers x num_slots)";
  l.bytes[static_cast<int>(Buf::kPending)] = c.mul(c.mul(l.layers, l.slots), 4);
  c.field = "replay paths (num_slots x max_window)";
  l.bytes[static_cast<int>(Buf::kPath)] = c.mul(c.mul(l.slots, l.max_window), 4);
  c.field = "replay factor ring (num_layers x num_slots x replay_ring x factor record)";
  l.bytes[static_cast<int>(Buf::kFactors)] =
      c.mul(c.mul(c.mul(l.layers, l.slots), l.ring), l.factor_bytes);
  c.field = "replay cursors (num_layers x num_slots x 2)";
  l.bytes[static_cast<int>(Buf::kCursor)] = c.mul(c.mul(l.layers, l.slots), 8);
}

ReplayStrategy::ReplayStrategy(const Layout& layout)
    : layers_(layout.layers),
      slots_(layout.slots),
      deferred_(static_cast<std::size_t>(layout.layers) * layout.slots, 0),
      sticky_(static_cast<std::size_t>(layout.slots), 0),
      verified_(deferred_.size(), 0) {}

bool ReplayStrategy::deferred(int layer, int slot) const {
  return graph_ || sticky_[slot] != 0 || deferred_[at(layer, slot)] != 0;
}

StateIO ReplayStrategy::verify_io(int, const RoundPlan& plan, bool first) {
  StateIO io;
  io.write_records = true;
  io.history = true;
  io.fold = true;
  io.fold_limit = plan.fold_limit;
  // The first verify of a layer in a round always runs the replay phase (the device cursors and
  // counts say how much; often nothing): a verify captured in a CUDA graph must replay whatever
  // the commit of the previous graph launch left, which the host cannot know at capture. A
  // repeated verify of the layer in the same round finds the conv window exact and reads a
  // folded cursor as settled.
  io.conv_pending = first;
  io.store_replayed = first;
  io.settled = !first;
  return io;
}

void ReplayStrategy::after_verify(int layer, const RoundPlan& plan, bool first) {
  // Marked only once the verify's launch returned: a layer marked verified is settled by a
  // later materialize as if its verify had stored the folded checkpoint, so a verify that threw
  // before running must leave no mark (its history would be dropped).
  round_fold_limit_ = plan.fold_limit;
  if (first) {
    for (int32_t s : plan.slots) {
      if (s >= 0) verified_[at(layer, s)] = 1;
    }
  }
}

StateIO ReplayStrategy::advance_io(int layer, const std::vector<int32_t>& slots) {
  StateIO io;
  io.store_final = true;
  for (int32_t s : slots) {
    if (s >= 0 && deferred(layer, s)) {
      io.conv_pending = true;
      io.history = true;
      break;
    }
  }
  return io;
}

void ReplayStrategy::after_advance(BackendImpl& backend, const PoolStorage& storage, int layer,
                                   const std::vector<int32_t>& slots, const StateIO& io) {
  if (!io.replay()) return;
  std::vector<int32_t> cleared;
  for (int32_t s : slots) {
    if (s >= 0 && deferred(layer, s)) {
      cleared.push_back(s);
      deferred_[at(layer, s)] = 0;
    }
  }
  backend.clear_pending(storage, layer, layer + 1, cleared, BackendImpl::Clear::kConsumed);
}

void ReplayStrategy::commit(BackendImpl& backend, const PoolStorage& storage,
                            const CommitWork& work) {
  backend.commit_pending(storage, work);
  const RoundPlan& plan = *work.plan;
  const bool device = !work.device_accepted.empty();
  for (int r = 0; r < plan.rows; ++r) {
    const int32_t s = plan.slots[r];
    if (s < 0) continue;
    // Device-valued commits: the value is unknown here, so the slot may lag (and may be
    // committed again by later launches of a graph holding this commit). A row that keeps
    // (a = 0) lags as before: a fold only made its checkpoint exact.
    const bool advanced = device || work.last_step[r] >= 0;
    for (int l = 0; l < layers_; ++l) {
      if (advanced) deferred_[at(l, s)] = 1;
      verified_[at(l, s)] = 0;
    }
    if (device) sticky_[s] = 1;
  }
}

void ReplayStrategy::discard_round(BackendImpl& backend, const PoolStorage& storage,
                                   const RoundPlan& plan, const std::vector<bool>& verified) {
  // Verified layers brought their conv windows up to date and may have folded: settle them.
  // Unverified layers keep everything as it was, and so do layers whose verify was only
  // captured into a graph (verified for the pool, not marked in verified_: it ran nothing).
  std::vector<int32_t> live;
  for (int32_t s : plan.slots) {
    if (s >= 0) live.push_back(s);
  }
  std::vector<int32_t> settle;
  settle.reserve(live.size());  // (before the first change: no allocation between them)
  for (int l = 0; l < layers_ && !live.empty(); ++l) {
    if (!verified[l]) continue;
    settle.clear();
    for (int32_t s : live) {
      if (verified_[at(l, s)]) settle.push_back(s);
    }
    if (!settle.empty()) {
      backend.clear_pending(storage, l, l + 1, settle, BackendImpl::Clear::kSettled,
                            plan.fold_limit);
    }
  }
  for (int32_t s : live) {
    for (int l = 0; l < layers_; ++l) verified_[at(l, s)] = 0;
  }
}

void ReplayStrategy::reset_slot(int slot) {
  for (int l = 0; l < layers_; ++l) {
    deferred_[at(l, slot)] = 0;
    verified_[at(l, slot)] = 0;
  }
  sticky_[slot] = 0;
}

void ReplayStrategy::slot_overwritten(int slot) {
  for (int l = 0; l < layers_; ++l) {
    deferred_[at(l, slot)] = 0;
    verified_[at(l, slot)] = 0;
  }
}

void ReplayStrategy::materialize(BackendImpl& backend, const PoolStorage& storage,
                                 const std::vector<int32_t>& slots) {
  for (int l = 0; l < layers_; ++l) {
    LayerRun run;
    run.layer = l;
    run.tokens_per_row = 0;
    std::vector<int32_t> settle;
    for (int32_t s : slots) {
      if (s < 0 || !deferred(l, s)) continue;
      run.slots.push_back(s);
      // A layer the open round verified: its cursor may read as folded, its pending conv count
      // is stale (the verify wrote the window). Settle it first (idempotent: the round's commit
      // settles again and finds nothing to do).
      if (verified_[at(l, s)]) settle.push_back(s);
    }
    if (run.slots.empty()) continue;
    backend.clear_pending(storage, l, l + 1, settle, BackendImpl::Clear::kSettled,
                          round_fold_limit_);
    run.io.conv_pending = true;
    run.io.history = true;
    run.io.store_replayed = true;
    backend.materialize_layer(storage, run);
    for (int32_t s : run.slots) deferred_[at(l, s)] = 0;
    backend.clear_pending(storage, l, l + 1, run.slots, BackendImpl::Clear::kConsumed);
  }
}

}  // namespace specstate::detail
