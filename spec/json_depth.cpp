#include "json_depth.h"

#include <algorithm>

namespace specstate::spec {

JsonNesting json_nesting(std::string_view text, int limit) noexcept {
  JsonNesting out;
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      out.max_depth = std::max(out.max_depth, ++depth);
      if (depth > limit && out.first_past_limit < 0) out.first_past_limit = static_cast<int64_t>(i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return out;
}

}  // namespace specstate::spec
