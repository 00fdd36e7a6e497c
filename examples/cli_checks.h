// CLI11 validators the example programs share: a uint64 given as digits (CLI11 takes "-1" for a
// uint64 option as 2^64 - 1), a finite number in a range (CLI::Range lets NaN through: every
// comparison with it is false); and the median their reports print.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace specstate::examples {

// The median of `v` (0 for none): the mean of the two middle values for an even count (v[n / 2],
// the upper one, printed the slower of two rounds as their median).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Leading zeros dropped from a run of digits ("010" -> "10", "000" -> "0"): CLI11 converts
// integers with base 0, so "010" was read as octal 8 and "0x10" as 16 (a seed copied from a
// zero-padded run name reproduced another run).
inline void strip_leading_zeros(std::string& digits) {
  const std::size_t first = digits.find_first_not_of('0');
  digits.erase(0, first == std::string::npos ? digits.size() - 1 : first);
}

// An integer option given in decimal: an optional sign and digits, leading zeros dropped before
// CLI11 converts it (which would read "010" as octal and "0x10" as hex); anything else is refused
// naming the text. Put it before the option's range check.
inline CLI::Validator decimal() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
        std::string digits = text.substr(sign);
        if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                           [](unsigned char c) { return c >= '0' && c <= '9'; })) {
          return "'" + text + "' is not a decimal integer";
        }
        strip_leading_zeros(digits);
        text = (sign && text[0] == '-' ? "-" : "") + digits;
        return "";
      },
      "", "decimal");
}

inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && std::all_of(text.begin(), text.end(),
                                         [](unsigned char c) { return c >= '0' && c <= '9'; });
        std::string value = text;
        if (digits) strip_leading_zeros(value);  // decimal, as written (not octal)
        if (!digits || value.size() > 20 ||
            (value.size() == 20 && value > "18446744073709551615")) {
          return "'" + text + "' is not an integer in [0, 18446744073709551615]";
        }
        text = value;
        return "";
      },
      "UINT64");
}

inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        // (An empty value is no number: stod's failure left used == 0 == its size, and CLI11
        // then read it as 0: --noise "" ran a perfect drafter.)
        std::size_t used = std::string::npos;
        double x = 0;
        try {
          x = std::stod(text, &used);
        } catch (const std::exception&) {
          used = std::string::npos;
        }
        if (text.empty() || used != text.size() || !std::isfinite(x) || x < lo || x > hi) {
          return "'" + text + "' is not a finite number in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "]";
        }
        return "";
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

}  // namespace specstate::examples
