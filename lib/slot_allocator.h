// Internal: hands out the lowest free slot and tracks a generation per slot, so that a handle
// kept after release is recognised as stale even when its slot is handed out again.
//
// Memory grows with the slots actually used, not with num_slots nor with the index of a slot
// taken: a slot never handed out costs nothing (free, generation 0); one handed out at least once
// has an entry (its generation and liveness), and the free slots are kept as disjoint intervals
// (one entry per run of free slots). So building an allocator is O(1) whatever num_slots claims,
// and adopt() of the last slot of a huge caller-owned pool is O(log) (it was an entry per slot
// below it: 839 MiB for the last of 2^24).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace specstate::detail {

class SlotAllocator {
 public:
  explicit SlotAllocator(int num_slots);

  // Returns the lowest free slot, or -1 when none is free. Bumps its generation.
  int allocate(uint64_t& generation);
  // Takes the free slot `slot` (false when it is not free). Bumps its generation.
  bool take(int slot, uint64_t& generation);
  // Frees a live slot (the caller has checked liveness). Allocates nothing: the free run's entry
  // it may need was allocated when the slot was taken (Entry::spare), so release() can free the
  // slot after changing the round without a std::bad_alloc between the two.
  void free(int slot) noexcept;
  bool is_live(int slot, uint64_t generation) const noexcept;
  bool is_allocated(int slot) const noexcept;
  uint64_t generation(int slot) const noexcept;
  int num_slots() const noexcept { return num_slots_; }
  // The live slots, in increasing order.
  std::vector<int32_t> live_slots() const;
  int free_count() const noexcept { return num_slots_ - live_count_; }

 private:
  using Runs = std::map<int, int>;
  struct Entry {
    uint64_t generation = 0;
    bool live = false;
    Runs::node_type spare;  // a free run's entry for free() (allocated by take())
  };
  // Takes `slot` out of the free interval that holds it (the caller found it free).
  void unfree(int slot);

  int num_slots_ = 0;
  int live_count_ = 0;
  std::map<int, Entry> used_;  // slots handed out at least once
  Runs free_;                  // free runs: start -> end (exclusive), disjoint, not adjacent
};

}  // namespace specstate::detail
