#include "slot_allocator.h"

namespace specstate::detail {

SlotAllocator::SlotAllocator(int num_slots)
    : generation_(static_cast<std::size_t>(num_slots), 0u),
      live_(static_cast<std::size_t>(num_slots), false) {
  for (int slot = 0; slot < num_slots; ++slot) free_.insert(free_.end(), slot);
}

int SlotAllocator::allocate(uint32_t& generation) {
  if (free_.empty()) return -1;
  const int slot = *free_.begin();
  free_.erase(free_.begin());
  live_[slot] = true;
  generation = ++generation_[slot];  // generation 0 never names a live slot
  return slot;
}

bool SlotAllocator::take(int slot, uint32_t& generation) {
  if (slot < 0 || slot >= num_slots() || live_[slot]) return false;
  free_.erase(slot);
  live_[slot] = true;
  generation = ++generation_[slot];
  return true;
}

void SlotAllocator::free(int slot) {
  live_[slot] = false;
  free_.insert(slot);
}

bool SlotAllocator::is_live(int slot, uint32_t generation) const noexcept {
  return slot >= 0 && slot < num_slots() && live_[slot] && generation_[slot] == generation;
}

bool SlotAllocator::is_allocated(int slot) const noexcept {
  return slot >= 0 && slot < num_slots() && live_[slot];
}

}  // namespace specstate::detail
