// CLI11 validators the example programs share: a uint64 given as digits (CLI11 takes "-1" for a
// uint64 option as 2^64 - 1), a finite number in a range (CLI::Range lets NaN through: every
// comparison with it is false).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <string>

namespace specstate::examples {

inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            std::all_of(text.begin(), text.end(),
                                        [](unsigned char c) { return c >= '0' && c <= '9'; });
        if (!digits || (text.size() == 20 && text > "18446744073709551615")) {
          return "'" + text + "' is not an integer in [0, 18446744073709551615]";
        }
        return "";
      },
      "UINT64");
}

inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        std::size_t used = 0;
        double x = 0;
        try {
          x = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || !std::isfinite(x) || x < lo || x > hi) {
          return "'" + text + "' is not a finite number in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "]";
        }
        return "";
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

}  // namespace specstate::examples
