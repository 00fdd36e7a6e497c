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
// nlohmann's SAX interface: a set of keys per open object, a value count per open array.
struct DuplicateKeys final : nlohmann::json::json_sax_t {
  DuplicateKeys(std::size_t most, std::size_t most_total, std::size_t most_items)
      : max_keys(most), max_total_keys(most_total), max_array_items(most_items) {}
  std::vector<std::set<std::string>> open;
  // Per open container, innermost last: the values of an array so far, or -1 for an object.
  std::vector<int64_t> items;
  std::size_t max_keys, max_total_keys, max_array_items, total_keys = 0;
  std::string found;
  bool too_many = false, too_many_total = false, too_many_items = false;
  // A value (scalar or container) starts: counted against the array it sits in.
  bool value() {
    if (items.empty() || items.back() < 0) return true;
    if (static_cast<std::size_t>(++items.back()) > max_array_items) {
      too_many_items = true;
      return false;  // stops the parse
    }
    return true;
  }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    if (!value()) return false;
    open.emplace_back();
    items.push_back(-1);
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
    if (!items.empty()) items.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (!value()) return false;
    items.push_back(0);
    return true;
  }
  bool end_array() override {
    if (!items.empty()) items.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;
  }
};
}  // namespace

JsonKeyProblem json_key_problem(std::string_view text, std::size_t max_keys,
                                std::size_t max_total_keys, std::size_t max_array_items) {
  DuplicateKeys sax(max_keys, max_total_keys, max_array_items);
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                            false);
  JsonKeyProblem out;
  out.duplicate = sax.found;
  out.too_many_keys = sax.too_many;
  out.too_many_total_keys = sax.too_many_total;
  out.too_many_array_items = sax.too_many_items;
  return out;
}

std::string json_duplicate_key(std::string_view text) {
  return json_key_problem(text, std::numeric_limits<std::size_t>::max()).duplicate;
}

}  // namespace specstate::spec
