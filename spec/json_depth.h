// The nesting of raw JSON text, checked before it is parsed: nlohmann's parser is iterative, but
// dump() and comparisons recurse, so 100,000 nested brackets would overflow the stack after a
// successful parse. Shared by every reader of untrusted JSON (traces, safetensors headers, the
// CLI's model files and golden params).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace specstate::spec {

struct JsonNesting {
  int max_depth = 0;              // deepest nesting of arrays / objects
  int64_t first_past_limit = -1;  // byte offset where it first passes the limit, or -1
};

// Brackets inside strings (escapes included) do not count. O(size of text).
JsonNesting json_nesting(std::string_view text, int limit) noexcept;

// The first key that an object of `text` holds twice, or an empty string when none does (or when
// `text` is not JSON: the caller's parse says why). nlohmann keeps the last of two equal keys
// silently; a reader of untrusted JSON refuses the document instead. O(size of text), no DOM.
std::string json_duplicate_key(std::string_view text);

// The same pass with a bound on the keys of one object and on the keys of all objects:
// `duplicate` as above, `too_many_keys` when an object has more than `max_keys` keys, or
// `too_many_total_keys` when the objects of `text` hold more than `max_total_keys` keys together
// (the pass stops at the first). Run before a DOM parse into nlohmann::ordered_json, whose
// insertion is linear in the object's keys (a header of 160,000 keys took 22 s to parse; 469
// objects of 4096 keys each, 4.6 s).
// `too_many_array_items` when an array holds more than `max_array_items` values (a header whose
// one shape lists 49 million extents took 2.3 GB as a DOM).
struct JsonKeyProblem {
  std::string duplicate;
  bool too_many_keys = false;
  bool too_many_total_keys = false;
  bool too_many_array_items = false;
};
JsonKeyProblem json_key_problem(std::string_view text, std::size_t max_keys,
                                std::size_t max_total_keys = static_cast<std::size_t>(-1),
                                std::size_t max_array_items = static_cast<std::size_t>(-1));

}  // namespace specstate::spec
