#include "replay.h"

namespace specstate::detail {

void ReplayStrategy::workspace(Layout& l) {
  SizeCalc c{"StatePool", "replay records (num_layers x num_slots x max_window x record)"};
  const int64_t records = c.mul(c.mul(l.layers, l.slots), l.max_window);
  l.bytes[static_cast<int>(Buf::kRecords)] = c.mul(records, l.record_bytes);
  c.field = "replay pending counts (num_layers x num_slots)";
  l.bytes[static_cast<int>(Buf::kPending)] = c.mul(c.mul(l.layers, l.slots), 4);
  c.field = "replay paths (num_slots x max_window)";
  l.bytes[static_cast<int>(Buf::kPath)] = c.mul(c.mul(l.slots, l.max_window), 4);
}

ReplayStrategy::ReplayStrategy(const Layout& layout)
    : layers_(layout.layers),
      slots_(layout.slots),
      deferred_(static_cast<std::size_t>(layout.layers) * layout.slots, 0),
      sticky_(static_cast<std::size_t>(layout.slots), 0),
      consumed_(deferred_.size(), 0) {}

bool ReplayStrategy::deferred(int layer, int slot) const {
  const std::size_t i = static_cast<std::size_t>(layer) * slots_ + slot;
  return consumed_[i] == 0 && (sticky_[slot] != 0 || deferred_[i] != 0);
}

bool ReplayStrategy::any_deferred(int layer, const std::vector<int32_t>& slots) const {
  for (int32_t s : slots) {
    if (s >= 0 && deferred(layer, s)) return true;
  }
  return false;
}

StateIO ReplayStrategy::verify_io(int layer, const RoundPlan& plan, bool first) {
  StateIO io;
  io.write_records = true;
  // The first verify of a layer in a round always runs the replay phase (the device counts say
  // how many steps; often none): a verify captured in a CUDA graph must replay whatever the
  // commit of the previous graph launch left, which the host cannot know at capture. A repeated
  // verify of the layer in the same round starts from the memory the first one made exact.
  (void)plan;
  io.replay = first;
  io.store_replayed = io.replay;
  if (first) {
    for (int32_t s : plan.slots) {
      if (s < 0) continue;
      set(layer, s, false);
      consumed_[static_cast<std::size_t>(layer) * slots_ + s] = 1;
    }
  }
  return io;
}

StateIO ReplayStrategy::advance_io(int layer, const std::vector<int32_t>& slots) {
  StateIO io;
  io.store_final = true;
  io.replay = any_deferred(layer, slots);
  return io;
}

void ReplayStrategy::after_advance(BackendImpl& backend, const PoolStorage& storage, int layer,
                                   const std::vector<int32_t>& slots, const StateIO& io) {
  if (!io.replay) return;
  std::vector<int32_t> cleared;
  for (int32_t s : slots) {
    if (s >= 0 && deferred(layer, s)) {
      cleared.push_back(s);
      set(layer, s, false);
    }
  }
  backend.clear_pending(storage, layer, layer + 1, cleared);
}

void ReplayStrategy::commit(BackendImpl& backend, const PoolStorage& storage,
                            const CommitWork& work) {
  backend.commit_pending(storage, work);
  const RoundPlan& plan = *work.plan;
  const bool device = !work.device_accepted.empty();
  for (int r = 0; r < plan.rows; ++r) {
    const int32_t s = plan.slots[r];
    if (s < 0) continue;
    // Device-valued commits: the value is unknown here, so the slot may be pending (and may be
    // committed again by later launches of a graph holding this commit).
    const bool pending = device || work.last_step[r] >= 0;
    for (int l = 0; l < layers_; ++l) {
      set(l, s, pending);
      consumed_[static_cast<std::size_t>(l) * slots_ + s] = 0;
    }
    if (device) sticky_[s] = 1;
  }
}

void ReplayStrategy::discard_round(BackendImpl& backend, const PoolStorage& storage,
                                   const RoundPlan& plan, const std::vector<bool>& verified) {
  // Verified layers re-ran their pending steps into the committed memory and overwrote the
  // records: their device counts must not be replayed again. Unverified layers keep theirs.
  std::vector<int32_t> live;
  for (int32_t s : plan.slots) {
    if (s < 0) continue;
    live.push_back(s);
    for (int l = 0; l < layers_; ++l) consumed_[static_cast<std::size_t>(l) * slots_ + s] = 0;
  }
  if (live.empty()) return;
  for (int l = 0; l < layers_; ++l) {
    if (verified[l]) backend.clear_pending(storage, l, l + 1, live);
  }
}

void ReplayStrategy::reset_slot(int slot) {
  for (int l = 0; l < layers_; ++l) {
    set(l, slot, false);
    consumed_[static_cast<std::size_t>(l) * slots_ + slot] = 0;
  }
  sticky_[slot] = 0;
}

void ReplayStrategy::slot_overwritten(int slot) {
  for (int l = 0; l < layers_; ++l) {
    set(l, slot, false);
    consumed_[static_cast<std::size_t>(l) * slots_ + slot] = 0;
  }
}

void ReplayStrategy::materialize(BackendImpl& backend, const PoolStorage& storage,
                                 const std::vector<int32_t>& slots,
                                 const std::function<void(const LayerRun&)>& run_layer) {
  for (int l = 0; l < layers_; ++l) {
    LayerRun run;
    run.layer = l;
    run.tokens_per_row = 0;
    for (int32_t s : slots) {
      if (s >= 0 && deferred(l, s)) run.slots.push_back(s);
    }
    if (run.slots.empty()) continue;
    run.io.replay = true;
    run.io.store_final = true;
    run_layer(run);
    for (int32_t s : run.slots) set(l, s, false);
    backend.clear_pending(storage, l, l + 1, run.slots);
  }
}

}  // namespace specstate::detail
