// The picture `specstate simulate --out FILE` writes beside its report (FILE.svg), drawn by hand:
// the accepted-length histogram and, per strategy, the time per round (verify and commit
// stacked). Every axis has numbered ticks in one unit (the time axes: s, ms or us for the whole
// axis, chosen from its top), and the layout keeps every label clear of the others by estimating
// its box from the font size and the string's length (kCharEm), which the tests check too
// (tests/cpu/test_simulate.cpp, SvgTextBoxesNeverOverlap).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/simulate.h"

namespace specstate::cli {
namespace {

using Json = nlohmann::ordered_json;

// Text metrics of sans-serif, in em: the average advance of a character (digits are 0.56, lower
// case about 0.5, capitals 0.67; bold a little wider), and the part of a line below the baseline
// (the rest, 0.8 em, is above it).
constexpr double kCharEm = 0.6;
constexpr double kBoldCharEm = 0.65;
constexpr double kDescentEm = 0.2;
constexpr int kFont = 12;       // the SVG's font-size
constexpr int kTitleFont = 15;  // bold
constexpr int kPanelFont = 14;  // panel titles

// Characters of UTF-8 text (continuation bytes do not count).
std::size_t utf8_length(const std::string& text) {
  std::size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

double text_width(const std::string& text, double font, double em = kCharEm) {
  return static_cast<double>(utf8_length(text)) * em * font;
}

// `text`, cut to fit `width` pixels with "..." at the end (ASCII, so a byte is a character).
std::string fit(const std::string& text, double font, double width, double em = kCharEm) {
  if (text_width(text, font, em) <= width) return text;
  const auto chars = static_cast<std::size_t>(std::max(0.0, width / (em * font) - 3));
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80 && n++ == chars) break;
    out += text[i];
  }
  return out + "...";
}

// Tick values 0, step, 2 step, ... covering [0, peak], step 1, 2 or 5 x 10^k (about 4 ticks).
std::vector<double> nice_ticks(double peak, bool integers) {
  if (!(peak > 0)) peak = 1;
  const double raw = peak / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  if (integers) step = std::max(1.0, std::ceil(step));
  std::vector<double> ticks;
  for (int i = 0; i * step <= peak * (1 + 1e-9); ++i) ticks.push_back(i * step);
  if (ticks.back() < peak) ticks.push_back(ticks.back() + step);  // the axis covers the peak
  return ticks;
}

// The labels of `ticks` times `scale`, all with the decimals the step needs ("0", "50", "100";
// "0.0", "0.5", "1.0").
std::vector<std::string> tick_labels(const std::vector<double>& ticks, double scale) {
  const double step = ticks.size() > 1 ? (ticks[1] - ticks[0]) * scale : 1.0;
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  std::vector<std::string> out;
  for (double t : ticks) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, t * scale);
    out.emplace_back(buf);
  }
  return out;
}

// One unit for a whole time axis, from its top value in seconds.
struct TimeUnit {
  const char* name;
  double per_second;
};
TimeUnit time_unit(double top_seconds) {
  if (top_seconds < 1e-3) return {"\xC2\xB5s", 1e6};  // µs
  if (top_seconds < 1.0) return {"ms", 1e3};
  return {"s", 1.0};
}

// The length of the valid UTF-8 sequence at text[i] (1..4), or 0 where none starts there.
std::size_t utf8_sequence(const std::string& text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                        : c >= 0xE0 && c <= 0xEF ? 3
                        : c >= 0xF0 && c <= 0xF4 ? 4
                                                 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  const unsigned char c1 = byte(i + 1);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
      (c == 0xF4 && c1 > 0x8F)) {
    return 0;  // overlong, a surrogate, or past U+10FFFF
  }
  return n;
}

// Text as XML character data: the markup characters escaped; control characters XML 1.0 does
// not allow and bytes that are no UTF-8 (a file name's, in the report) as U+FFFD, so the SVG
// stays well-formed (they were passed through, and XML parsers refused the file).
std::string xml_escape(const std::string& text) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    ++i;
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += kReplacement;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void text(std::ostringstream& s, double x, double y, const std::string& content,
          const char* anchor = "start", const char* cls = nullptr, int font = 0) {
  s << "<text";
  if (cls) s << " class=\"" << cls << "\"";
  s << " x=\"" << x << "\" y=\"" << y << "\"";
  if (std::string(anchor) != "start") s << " text-anchor=\"" << anchor << "\"";
  if (font) s << " font-size=\"" << font << "\"";
  s << ">" << xml_escape(content) << "</text>\n";
}

// A y axis at x0 from y0 (value 0) up `height` pixels (value ticks.back()): the line, the ticks
// with their labels, and the axis title rotated beside them, clear of the widest label.
void y_axis(std::ostringstream& s, int x0, int y0, int height, const std::vector<double>& ticks,
            const std::vector<std::string>& labels, const std::string& title) {
  s << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0 << "\" y2=\"" << y0 - height
    << "\" stroke=\"black\"/>\n";
  double widest = 0;
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double y = y0 - height * ticks[i] / ticks.back();
    s << "<line class=\"ytick\" x1=\"" << x0 - 4 << "\" y1=\"" << y << "\" x2=\"" << x0
      << "\" y2=\"" << y << "\" stroke=\"black\"/>\n";
    text(s, x0 - 6, y + 4, labels[i], "end", "ytick-label");
    widest = std::max(widest, text_width(labels[i], kFont));
  }
  // Rotated by -90 degrees, the title's glyphs reach 0.8 em left of its baseline and kDescentEm
  // right of it: 6 px between its right edge and the labels' left edge.
  const double lx = x0 - 6 - widest - 6 - kDescentEm * kFont, ly = y0 - height / 2.0;
  s << "<text class=\"ylabel\" x=\"" << lx << "\" y=\"" << ly << "\" text-anchor=\"middle\" "
    << "transform=\"rotate(-90 " << lx << " " << ly << ")\">" << xml_escape(title) << "</text>\n";
}

// The colours of a strategy's verify and commit bars: distinct for each strategy, so that the
// panels of --strategy both cannot be mixed up.
std::pair<const char*, const char*> strategy_colours(const std::string& strategy) {
  if (strategy == "snapshot") return {"#4878d0", "#ee854a"};  // blue, orange
  if (strategy == "replay") return {"#6acc64", "#d65f5f"};    // green, red
  return {"#8c8c8c", "#4d4d4d"};
}

// The most bars a time panel draws: beyond, consecutive rounds share a bar (their mean).
constexpr std::size_t kMaxBars = 400;

}  // namespace

std::string render_svg(const Json& r) {
  const auto hist = r["acceptance"]["histogram"].get<std::vector<int64_t>>();
  const auto sections = strategy_sections(r);
  // Panels: the histogram top left; one time panel per strategy on the right, stacked, sharing
  // the y scale and the x axis (round numbers).
  constexpr int kW = 1000, kTop = 90, kPlotH = 220, kRowH = 330;
  const int panels = std::max<int>(1, static_cast<int>(sections.size()));
  const int kH = kTop + (panels - 1) * kRowH + kPlotH + 70;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
    << "\" font-family=\"sans-serif\" font-size=\"" << kFont << "\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // The run: model (TP, layers), window, acceptance, backend, strategy.
  {
    const Json& m = r["model"];
    const Json& opts = r["options"];
    const Json& acc = r["acceptance"];
    const std::string layers =
        m.contains("gdn_layers")   ? std::to_string(m["gdn_layers"].get<int>()) + " GDN layers"
        : m.contains("kda_layers") ? std::to_string(m["kda_layers"].get<int>()) + " KDA layers"
                                   : std::to_string(m.value("mamba2_layers", 0)) + " Mamba2 layers";
    const std::string window = r["trace"].value("window", std::string());
    std::string strategies;
    for (const auto& [name, sec] : sections)
      strategies += (strategies.empty() ? "" : " vs ") + name;
    char mean[64];
    std::snprintf(mean, sizeof(mean), "%.2f", acc["mean_accepted_length"].get<double>());
    const std::string title = "specstate simulate: " + m["name"].get<std::string>() + " (TP " +
                              std::to_string(opts["tp"].get<int>()) + ", " + layers + ")";
    const std::string detail = "T = " + std::to_string(r["trace"]["max_window"].get<int>()) +
                               (window.empty() ? "" : " (" + window + ")") + ", acceptance " +
                               acc.value("source", std::string("?")) + " (mean accepted " + mean +
                               "), backend " + opts["backend"].get<std::string>() + ", strategy " +
                               strategies + ", " +
                               std::to_string(r["trace"]["requests"].get<int>()) + " requests";
    s << "<text class=\"title\" x=\"20\" y=\"24\" font-size=\"" << kTitleFont
      << "\" font-weight=\"bold\">" << xml_escape(fit(title, kTitleFont, kW - 40, kBoldCharEm))
      << "</text>\n";
    text(s, 20, 44, fit(detail, kFont, kW - 40), "start", "subtitle");
  }
  // Panel 1: accepted-length histogram (the lengths the window can reach).
  {
    s << "<g class=\"panel-histogram\">\n";
    const int x0 = 90, width = 350, y0 = kTop + kPlotH;
    int64_t peak = 1;
    for (int64_t c : hist) peak = std::max(peak, c);
    const std::vector<double> ticks = nice_ticks(static_cast<double>(peak), true);
    const double top = ticks.back();
    text(s, x0, kTop - 24, "Accepted length per request-round", "start", "panel-title", kPanelFont);
    y_axis(s, x0, y0, kPlotH, ticks, tick_labels(ticks, 1.0), "request-rounds");
    const std::size_t bars = std::max<std::size_t>(1, hist.size());
    const double bw = static_cast<double>(width) / static_cast<double>(bars);
    // Every a labelled while the labels fit under their bars, else every 2nd, 5th, 10th, ...
    const double widest = text_width(std::to_string(bars - 1), kFont) + 6;
    std::size_t every = 1;
    for (std::size_t m = 1; every * bw < widest; m *= 10) {
      for (std::size_t k : {1, 2, 5}) {
        every = k * m;
        if (every * bw >= widest) break;
      }
    }
    for (std::size_t a = 0; a < hist.size(); ++a) {
      const double h = kPlotH * static_cast<double>(hist[a]) / top;
      const double x = x0 + a * bw;
      s << "<rect class=\"hist-bar\" x=\"" << x + std::min(2.0, bw / 8) << "\" y=\"" << y0 - h
        << "\" width=\"" << std::max(bw - 2 * std::min(2.0, bw / 8), 0.5) << "\" height=\"" << h
        << "\" fill=\"#7f7f7f\"/>\n";
      if (a % every == 0) {
        s << "<line class=\"xtick\" x1=\"" << x + bw / 2 << "\" y1=\"" << y0 << "\" x2=\""
          << x + bw / 2 << "\" y2=\"" << y0 + 4 << "\" stroke=\"black\"/>\n";
        text(s, x + bw / 2, y0 + 16, std::to_string(a), "middle", "hist-xtick-label");
      }
      // The count above its bar where it fits the bar's width (the y axis gives the rest).
      const std::string count = std::to_string(hist[a]);
      if (text_width(count, kFont) + 2 <= bw) {
        text(s, x + bw / 2, y0 - h - 4, count, "middle", "hist-count");
      }
    }
    s << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0 + width << "\" y2=\"" << y0
      << "\" stroke=\"black\"/>\n";
    text(s, x0 + width / 2.0, y0 + 34, "accepted tokens a", "middle", "xlabel");
    s << "</g>\n";
  }
  // The time panels: one per strategy, the same y scale (one unit) and x axis (round numbers).
  double peak = 0;
  int64_t last_round = 0;
  for (const auto& [name, sec] : sections) {
    for (const auto& rd : (*sec)["rounds"]) {
      peak =
          std::max(peak, rd["verify_seconds"].get<double>() + rd["commit_seconds"].get<double>());
      last_round = std::max(last_round, rd["round"].get<int64_t>());
    }
  }
  if (peak <= 0) peak = 1e-9;
  const std::vector<double> yticks = nice_ticks(peak, false);
  const TimeUnit unit = time_unit(yticks.back());
  const std::vector<double> xticks =
      nice_ticks(static_cast<double>(std::max<int64_t>(1, last_round)), true);
  const double slots = xticks.back() + 1;  // round t is the slot [t, t + 1), labelled at its middle
  for (std::size_t k = 0; k < sections.size(); ++k) {
    const std::string& name = sections[k].first;
    const Json& rounds = (*sections[k].second)["rounds"];
    const auto [verify_colour, commit_colour] = strategy_colours(name);
    // (x0 leaves the last round label room to the canvas' edge: "1000000" is 50 px wide.)
    const int x0 = 560, width = 400, top = kTop + static_cast<int>(k) * kRowH, y0 = top + kPlotH;
    const double scale = width / slots;
    double own_peak = 0;  // this strategy's slowest round
    for (const auto& rd : rounds) {
      own_peak = std::max(own_peak,
                          rd["verify_seconds"].get<double>() + rd["commit_seconds"].get<double>());
    }
    char peak_text[64];
    std::snprintf(peak_text, sizeof(peak_text), "%.3g %s", own_peak * unit.per_second, unit.name);
    s << "<g class=\"panel-time-" << name << "\">\n";
    text(s, x0, top - 24, "Time per round, " + name + " (max " + peak_text + ")", "start",
         "panel-title", kPanelFont);
    y_axis(s, x0, y0, kPlotH, yticks, tick_labels(yticks, unit.per_second),
           std::string("time per round (") + unit.name + ")");
    // One bar per round, or per group of consecutive rounds (their mean) past kMaxBars.
    const std::size_t group = (static_cast<std::size_t>(slots) + kMaxBars - 1) / kMaxBars;
    for (std::size_t i = 0; i < rounds.size();) {
      const int64_t first = rounds[i]["round"].get<int64_t>();
      const int64_t bucket = first / static_cast<int64_t>(group);
      double v = 0, c = 0;
      std::size_t n = 0;
      for (; i < rounds.size() &&
             rounds[i]["round"].get<int64_t>() / static_cast<int64_t>(group) == bucket;
           ++i, ++n) {
        v += rounds[i]["verify_seconds"].get<double>();
        c += rounds[i]["commit_seconds"].get<double>();
      }
      const double vh = kPlotH * (v / n) / yticks.back(), ch = kPlotH * (c / n) / yticks.back();
      const double bar = scale * static_cast<double>(group);
      const double gap = bar > 4 ? 1 : 0;
      const double x = x0 + static_cast<double>(bucket * static_cast<int64_t>(group)) * scale + gap;
      const double w = std::max(bar - 2 * gap, 0.5);
      s << "<rect class=\"bar-" << name << "\" x=\"" << x << "\" y=\"" << y0 - vh << "\" width=\""
        << w << "\" height=\"" << vh << "\" fill=\"" << verify_colour << "\"/>\n";
      s << "<rect class=\"bar-" << name << "\" x=\"" << x << "\" y=\"" << y0 - vh - ch
        << "\" width=\"" << w << "\" height=\"" << ch << "\" fill=\"" << commit_colour << "\"/>\n";
    }
    s << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0 + width << "\" y2=\"" << y0
      << "\" stroke=\"black\"/>\n";
    for (double t : xticks) {
      const double x = x0 + (t + 0.5) * scale;
      s << "<line class=\"xtick\" x1=\"" << x << "\" y1=\"" << y0 << "\" x2=\"" << x << "\" y2=\""
        << y0 + 4 << "\" stroke=\"black\"/>\n";
      text(s, x, y0 + 16, tick_labels({t}, 1.0).front(), "middle", "xtick-label");
    }
    text(s, x0 + width / 2.0, y0 + 34,
         group > 1 ? "round (timed rounds; a bar is the mean of " + std::to_string(group) + ")"
                   : "round (timed rounds, in order)",
         "middle", "xlabel");
    const int y = y0 + 45;
    s << "<rect x=\"" << x0 << "\" y=\"" << y << "\" width=\"10\" height=\"10\" fill=\""
      << verify_colour << "\"/>\n";
    text(s, x0 + 14, y + 9, "verify (all layers), " + name, "start", "legend");
    s << "<rect x=\"" << x0 + 240 << "\" y=\"" << y << "\" width=\"10\" height=\"10\" fill=\""
      << commit_colour << "\"/>\n";
    text(s, x0 + 254, y + 9, "commit, " + name, "start", "legend");
    s << "</g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace specstate::cli
