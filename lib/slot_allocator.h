// Internal: hands out the lowest free slot and tracks a generation per slot, so that a handle
// kept after release is recognised as stale even when its slot is handed out again.
//
// Memory grows with the slots actually used, not with num_slots: slots [next_unused, num_slots)
// have never been handed out (free, generation 0) and cost nothing; below next_unused each slot
// has its generation and liveness, and each free one an entry of the released set. So building
// an allocator is O(1) whatever num_slots claims (the pool checks its size against the machine
// before allocating anything that large).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace specstate::detail {

class SlotAllocator {
 public:
  explicit SlotAllocator(int num_slots);

  // Returns the lowest free slot, or -1 when none is free. Bumps its generation.
  int allocate(uint32_t& generation);
  // Takes the free slot `slot` (false when it is not free). Bumps its generation.
  bool take(int slot, uint32_t& generation);
  // Frees a live slot (the caller has checked liveness).
  void free(int slot);
  bool is_live(int slot, uint32_t generation) const noexcept;
  bool is_allocated(int slot) const noexcept;
  uint32_t generation(int slot) const noexcept {
    return slot >= 0 && slot < next_unused_ ? generation_[static_cast<std::size_t>(slot)] : 0u;
  }
  int num_slots() const noexcept { return num_slots_; }
  // Slots [0, used_slots()) have been handed out at least once; every live slot is below it.
  int used_slots() const noexcept { return next_unused_; }
  int free_count() const noexcept {
    return num_slots_ - next_unused_ + static_cast<int>(released_.size());
  }

 private:
  // Hands out `slot` = next_unused_ (slots below it already tracked).
  void grow_to(int slot);

  int num_slots_ = 0;
  int next_unused_ = 0;               // slots at or above it were never handed out
  std::vector<uint32_t> generation_;  // [next_unused_]
  std::vector<bool> live_;            // [next_unused_]
  std::set<int> released_;            // free slots below next_unused_
};

}  // namespace specstate::detail
