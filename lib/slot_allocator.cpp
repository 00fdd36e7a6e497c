#include "slot_allocator.h"

namespace specstate::detail {

SlotAllocator::SlotAllocator(int num_slots) : num_slots_(num_slots < 0 ? 0 : num_slots) {}

void SlotAllocator::grow_to(int slot) {
  // Slots skipped on the way (take() of a slot above next_unused_) are free.
  for (int s = next_unused_; s < slot; ++s) released_.insert(released_.end(), s);
  generation_.resize(static_cast<std::size_t>(slot) + 1, 0u);
  live_.resize(static_cast<std::size_t>(slot) + 1, false);
  next_unused_ = slot + 1;
}

int SlotAllocator::allocate(uint32_t& generation) {
  int slot = -1;
  if (!released_.empty()) {  // every released slot is below next_unused_: the lowest free one
    slot = *released_.begin();
    released_.erase(released_.begin());
  } else if (next_unused_ < num_slots_) {
    slot = next_unused_;
    grow_to(slot);
  } else {
    return -1;
  }
  live_[static_cast<std::size_t>(slot)] = true;
  generation = ++generation_[static_cast<std::size_t>(slot)];  // 0 never names a live slot
  return slot;
}

bool SlotAllocator::take(int slot, uint32_t& generation) {
  if (slot < 0 || slot >= num_slots_) return false;
  if (slot >= next_unused_) {
    grow_to(slot);
  } else if (live_[static_cast<std::size_t>(slot)]) {
    return false;
  } else {
    released_.erase(slot);
  }
  live_[static_cast<std::size_t>(slot)] = true;
  generation = ++generation_[static_cast<std::size_t>(slot)];
  return true;
}

void SlotAllocator::free(int slot) {
  live_[static_cast<std::size_t>(slot)] = false;
  released_.insert(slot);
}

bool SlotAllocator::is_live(int slot, uint32_t generation) const noexcept {
  return is_allocated(slot) && generation_[static_cast<std::size_t>(slot)] == generation;
}

bool SlotAllocator::is_allocated(int slot) const noexcept {
  return slot >= 0 && slot < next_unused_ && live_[static_cast<std::size_t>(slot)];
}

}  // namespace specstate::detail
