#include "slot_allocator.h"

#include <iterator>

namespace specstate::detail {

SlotAllocator::SlotAllocator(int num_slots) : num_slots_(num_slots < 0 ? 0 : num_slots) {
  if (num_slots_ > 0) free_.emplace(0, num_slots_);
}

void SlotAllocator::unfree(int slot) {
  const auto it = std::prev(free_.upper_bound(slot));  // the run holding slot
  const int begin = it->first, end = it->second;
  // The only allocation first: a failure changes nothing.
  if (slot + 1 < end) free_.emplace_hint(std::next(it), slot + 1, end);
  if (begin < slot) {
    it->second = slot;
  } else {
    free_.erase(it);
  }
}

int SlotAllocator::allocate(uint64_t& generation) {
  if (free_.empty()) return -1;
  const int slot = free_.begin()->first;  // the lowest free slot
  if (!take(slot, generation)) return -1;
  return slot;
}

bool SlotAllocator::take(int slot, uint64_t& generation) {
  if (slot < 0 || slot >= num_slots_ || is_allocated(slot)) return false;
  Entry& e = used_[slot];  // a new entry (live false, generation 0) changes nothing observable
  Runs::node_type spare;
  if (e.spare.empty()) {  // the run entry free() will need, allocated while a failure is harmless
    Runs one;
    one.emplace(slot, slot + 1);
    spare = one.extract(one.begin());
  }
  unfree(slot);
  if (!spare.empty()) e.spare = std::move(spare);
  e.live = true;
  generation = ++e.generation;  // 0 never names a live slot
  ++live_count_;
  return true;
}

void SlotAllocator::free(int slot) noexcept {
  // [slot, slot + 1) joins the runs that end at slot and start at slot + 1; a new run's entry is
  // the slot's spare node (take()), so nothing is allocated.
  Entry& e = used_.find(slot)->second;
  const auto next = free_.lower_bound(slot);
  const bool join_next = next != free_.end() && next->first == slot + 1;
  const auto prev = next == free_.begin() ? free_.end() : std::prev(next);
  const bool join_prev = prev != free_.end() && prev->second == slot;
  if (join_prev) {
    prev->second = join_next ? next->second : slot + 1;
    if (join_next) free_.erase(next);
  } else {
    Runs::node_type run = std::move(e.spare);
    run.key() = slot;
    run.mapped() = join_next ? next->second : slot + 1;
    free_.insert(next, std::move(run));
    if (join_next) free_.erase(next);
  }
  e.live = false;
  --live_count_;
}

uint64_t SlotAllocator::generation(int slot) const noexcept {
  const auto it = used_.find(slot);
  return it == used_.end() ? 0u : it->second.generation;
}

bool SlotAllocator::is_live(int slot, uint64_t generation) const noexcept {
  const auto it = used_.find(slot);
  return it != used_.end() && it->second.live && it->second.generation == generation;
}

bool SlotAllocator::is_allocated(int slot) const noexcept {
  const auto it = used_.find(slot);
  return it != used_.end() && it->second.live;
}

std::vector<int32_t> SlotAllocator::live_slots() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<std::size_t>(live_count_));
  for (const auto& [slot, e] : used_) {
    if (e.live) out.push_back(slot);
  }
  return out;
}

}  // namespace specstate::detail
