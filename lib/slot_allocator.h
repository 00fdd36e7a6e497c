// Internal: hands out the lowest free slot and tracks a generation per slot, so that a handle
// kept after release is recognised as stale even when its slot is handed out again.
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
  uint32_t generation(int slot) const noexcept { return generation_[slot]; }
  int num_slots() const noexcept { return static_cast<int>(generation_.size()); }
  int free_count() const noexcept { return static_cast<int>(free_.size()); }

 private:
  std::vector<uint32_t> generation_;
  std::vector<bool> live_;
  std::set<int> free_;
};

}  // namespace specstate::detail
