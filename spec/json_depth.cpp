#include "json_depth.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

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

namespace {
// nlohmann's SAX interface: a set of keys per open object.
struct DuplicateKeys final : nlohmann::json::json_sax_t {
  DuplicateKeys(std::size_t most, std::size_t most_total)
      : max_keys(most), max_total_keys(most_total) {}
  std::vector<std::set<std::string>> open;
  std::size_t max_keys, max_total_keys, total_keys = 0;
  std::string found;
  bool too_many = false, too_many_total = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (open.empty()) return true;
    if (!open.back().insert(k).second) {
      found = k;
      return false;  // stops the parse
    }
    if (open.back().size() > max_keys) {
      too_many = true;
      return false;
    }
    if (++total_keys > max_total_keys) {
      too_many_total = true;
      return false;
    }
    return true;
  }
  bool end_object() override {
    if (!open.empty()) open.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;
  }
};
}  // namespace

JsonKeyProblem json_key_problem(std::string_view text, std::size_t max_keys,
                                std::size_t max_total_keys) {
  DuplicateKeys sax(max_keys, max_total_keys);
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                            false);
  JsonKeyProblem out;
  out.duplicate = sax.found;
  out.too_many_keys = sax.too_many;
  out.too_many_total_keys = sax.too_many_total;
  return out;
}

std::string json_duplicate_key(std::string_view text) {
  return json_key_problem(text, std::numeric_limits<std::size_t>::max()).duplicate;
}

}  // namespace specstate::spec
