// The geometry of the picture `specstate simulate --out` writes (issue 17.6): parsed back from
// the SVG, every text element's box is estimated from its x, y, text-anchor, font size, rotation
// and string length (0.6 em per character, 0.65 bold; 0.8 em above the baseline, 0.2 below), and
// no two boxes may overlap or leave the canvas; every time axis is in one unit (plain numbers on
// the ticks, the unit in the axis title), the round axis is numbered with round numbers, and
// --strategy both draws one panel per strategy in distinct colours on the same scale. Run over
// real reports (tiny model) and edited ones at the extremes (8 million request-rounds, a
// 1025-bar histogram, seconds per round, 5000 rounds, a long model name).
//
// Built only with the CLI (SPECSTATE_CLI_PATH is defined then).
#if defined(SPECSTATE_CLI_PATH)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "cli/simulate.h"

namespace specstate::cli {
namespace {

using Json = nlohmann::ordered_json;

struct Box {
  std::string text, cls;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

std::string attr(const std::string& attrs, const std::string& name) {
  std::smatch m;
  if (std::regex_search(attrs, m, std::regex("(^|\\s)" + name + "=\"([^\"]*)\""))) return m[2];
  return "";
}

std::string unescape(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
      s.replace(at, from.size(), to);
    }
  }
  return s;
}

std::size_t utf8_chars(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The boxes of every <text> of `svg` (font-size defaults to the root's).
std::vector<Box> text_boxes(const std::string& svg, double root_font) {
  std::vector<Box> out;
  const std::regex text_re("<text([^>]*)>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text_re);
       it != std::sregex_iterator(); ++it) {
    const std::string attrs = (*it)[1], content = unescape((*it)[2]);
    const double x = std::stod(attr(attrs, "x")), y = std::stod(attr(attrs, "y"));
    const std::string size = attr(attrs, "font-size");
    const double fs = size.empty() ? root_font : std::stod(size);
    const double em = attr(attrs, "font-weight") == "bold" ? 0.65 : 0.6;
    const double w = static_cast<double>(utf8_chars(content)) * em * fs;
    const std::string anchor = attr(attrs, "text-anchor");
    double bx0 = x;
    if (anchor == "middle") bx0 = x - w / 2;
    if (anchor == "end") bx0 = x - w;
    double corners[4][2] = {
        {bx0, y - 0.8 * fs}, {bx0 + w, y - 0.8 * fs}, {bx0, y + 0.2 * fs}, {bx0 + w, y + 0.2 * fs}};
    std::smatch m;
    const std::string transform = attr(attrs, "transform");
    if (std::regex_search(transform, m,
                          std::regex("rotate\\(([-0-9.e]+) ([-0-9.e]+) ([-0-9.e]+)\\)"))) {
      const double a = std::stod(m[1]) * M_PI / 180, cx = std::stod(m[2]), cy = std::stod(m[3]);
      for (auto& c : corners) {
        const double dx = c[0] - cx, dy = c[1] - cy;
        c[0] = cx + dx * std::cos(a) - dy * std::sin(a);
        c[1] = cy + dx * std::sin(a) + dy * std::cos(a);
      }
    } else {
      EXPECT_TRUE(transform.empty()) << "unexpected transform " << transform;
    }
    Box b{content, attr(attrs, "class"), 1e300, 1e300, -1e300, -1e300};
    for (const auto& c : corners) {
      b.x0 = std::min(b.x0, c[0]);
      b.y0 = std::min(b.y0, c[1]);
      b.x1 = std::max(b.x1, c[0]);
      b.y1 = std::max(b.y1, c[1]);
    }
    out.push_back(b);
  }
  return out;
}

std::string describe(const Box& b) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "\"%s\" (%s) [%.1f, %.1f] x [%.1f, %.1f]", b.text.c_str(),
                b.cls.c_str(), b.x0, b.x1, b.y0, b.y1);
  return buf;
}

// The text of one <g class="..."> group.
std::string group(const std::string& svg, const std::string& cls) {
  const std::string open = "<g class=\"" + cls + "\">";
  const auto begin = svg.find(open);
  if (begin == std::string::npos) return "";
  return svg.substr(begin, svg.find("</g>", begin) - begin);
}

std::vector<std::string> texts_of_class(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  for (const Box& b : text_boxes(svg, 12)) {
    if (b.cls == cls) out.push_back(b.text);
  }
  return out;
}

// Whether `step` is 1, 2 or 5 x 10^k.
bool round_step(double step) {
  if (!(step > 0)) return false;
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / mag;
  return std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9;
}

// Every check on one SVG.
void check_geometry(const std::string& svg, const std::vector<std::string>& strategies) {
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex("<svg [^>]*width=\"(\\d+)\" height=\"(\\d+)\"[^>]*font-size=\"(\\d+)\"")));
  const double width = std::stod(m[1]), height = std::stod(m[2]), font = std::stod(m[3]);
  const std::vector<Box> boxes = text_boxes(svg, font);
  ASSERT_GT(boxes.size(), 20u);
  // No text leaves the canvas, and no two texts overlap (touching is allowed: 0.25 px).
  for (const Box& b : boxes) {
    EXPECT_GE(b.x0, 0.0) << describe(b);
    EXPECT_GE(b.y0, 0.0) << describe(b);
    EXPECT_LE(b.x1, width) << describe(b);
    EXPECT_LE(b.y1, height) << describe(b);
  }
  int overlaps = 0;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    for (std::size_t j = i + 1; j < boxes.size(); ++j) {
      const Box &a = boxes[i], &b = boxes[j];
      const double ox = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
      const double oy = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
      if (ox > 0.25 && oy > 0.25 && ++overlaps <= 10) {
        ADD_FAILURE() << "overlap: " << describe(a) << " and " << describe(b);
      }
    }
  }
  EXPECT_EQ(overlaps, 0);

  // One panel per strategy, each with its own colours, all on one y scale in one unit.
  std::vector<std::string> y_labels_seen;
  std::set<std::string> fills_seen;
  for (const std::string& name : strategies) {
    SCOPED_TRACE(name);
    const std::string panel = group(svg, "panel-time-" + name);
    ASSERT_FALSE(panel.empty()) << "no panel for " << name;
    // The axis title names one unit; the tick labels are plain numbers with the same decimals.
    const std::vector<std::string> title = texts_of_class(panel, "ylabel");
    ASSERT_EQ(title.size(), 1u);
    EXPECT_TRUE(std::regex_match(title[0], std::regex("time per round \\((\xC2\xB5s|ms|s)\\)")))
        << title[0];
    const std::vector<std::string> ylabels = texts_of_class(panel, "ytick-label");
    ASSERT_GE(ylabels.size(), 3u);
    const auto dot = ylabels.back().find('.');
    const std::size_t decimals = dot == std::string::npos ? 0 : ylabels.back().size() - dot - 1;
    for (const std::string& l : ylabels) {
      EXPECT_TRUE(std::regex_match(l, std::regex("[0-9]+(\\.[0-9]+)?"))) << l;
      const auto d = l.find('.');
      EXPECT_EQ(d == std::string::npos ? 0 : l.size() - d - 1, decimals) << l;
    }
    if (!y_labels_seen.empty()) EXPECT_EQ(ylabels, y_labels_seen) << "the panels' y scales";
    y_labels_seen = ylabels;
    // The round axis: integers 0, s, 2s, ... with s = 1, 2 or 5 x 10^k.
    const std::vector<std::string> xlabels = texts_of_class(panel, "xtick-label");
    ASSERT_GE(xlabels.size(), 2u);
    for (std::size_t i = 0; i < xlabels.size(); ++i) {
      ASSERT_TRUE(std::regex_match(xlabels[i], std::regex("[0-9]+"))) << xlabels[i];
      EXPECT_EQ(std::stoll(xlabels[i]), static_cast<long long>(i) * std::stoll(xlabels[1]));
    }
    EXPECT_TRUE(round_step(std::stod(xlabels[1]))) << xlabels[1];
    // Its bars' colours are its own.
    std::set<std::string> fills;
    const std::regex bar("<rect class=\"bar-" + name + "\"[^>]*fill=\"([^\"]*)\"");
    for (auto it = std::sregex_iterator(panel.begin(), panel.end(), bar);
         it != std::sregex_iterator(); ++it) {
      fills.insert((*it)[1]);
    }
    EXPECT_EQ(fills.size(), 2u);  // verify, commit
    for (const std::string& f : fills) EXPECT_EQ(fills_seen.count(f), 0u) << f << " reused";
    fills_seen.insert(fills.begin(), fills.end());
  }
  // The histogram's axes are numbered too.
  const std::string hist = group(svg, "panel-histogram");
  EXPECT_GE(texts_of_class(hist, "ytick-label").size(), 2u);
  EXPECT_GE(texts_of_class(hist, "hist-xtick-label").size(), 2u);
}

Json run(SimulateOptions o) {
  o.model = "tiny";
  return run_simulation(o, nullptr);
}

TEST(SimulateSvg, TextBoxesNeverOverlapOnRealRuns) {
  struct Case {
    const char* what;
    SimulateOptions options;
    std::vector<std::string> strategies;
  };
  std::vector<Case> cases;
  cases.push_back({"default", {}, {"snapshot"}});
  cases.push_back({"both", {}, {"snapshot", "replay"}});
  cases.back().options.strategy = "both";
  cases.back().options.rounds = 3;
  cases.back().options.fixed = 2;
  cases.push_back({"replay, 500 rounds (bars grouped)", {}, {"replay"}});
  cases.back().options.strategy = "replay";
  cases.back().options.rounds = 500;
  cases.back().options.requests = 2;
  cases.push_back({"window 32", {}, {"snapshot"}});
  cases.back().options.window = 32;
  cases.back().options.rounds = 40;
  cases.push_back({"tree", {}, {"snapshot", "replay"}});
  cases.back().options.tree = "-1,0,0,1,1,2";
  cases.back().options.strategy = "both";
  cases.back().options.rounds = 7;
  for (Case& c : cases) {
    SCOPED_TRACE(c.what);
    c.options.warmup = 0;
    const std::string svg = render_svg(run(c.options));
    check_geometry(svg, c.strategies);
  }
}

// Edited reports at the extremes a run can produce.
TEST(SimulateSvg, TextBoxesNeverOverlapAtTheExtremes) {
  SimulateOptions o;
  o.strategy = "both";
  o.rounds = 4;
  const Json base = run(o);
  // 8,388,608 request-rounds over a 1025-bar histogram (window 1024), one bar near the top.
  {
    Json r = base;
    std::vector<int64_t> hist(1025, 8000);
    hist[0] = 8388608 - 1024 * 8000;
    r["acceptance"]["histogram"] = hist;
    r["model"]["name"] = std::string(300, 'm');  // a long model file name: cut to fit
    SCOPED_TRACE("1025 bars, 8M request-rounds, long name");
    check_geometry(render_svg(r), {"snapshot", "replay"});
  }
  // Seconds per round, and 5000 rounds (the bars are grouped, the round axis numbered).
  for (const auto& [seconds, unit] : std::vector<std::pair<double, std::string>>{
           {2.5, "(s)"}, {0.0123, "(ms)"}, {0.00097, "(ms)"}, {3e-6, "(\xC2\xB5s)"}}) {
    Json r = base;
    for (auto& [name, s] : r["strategies"].items()) {
      Json rounds = Json::array();
      for (int i = 0; i < 5000; ++i) {
        Json rd = s["rounds"][0];
        rd["round"] = i;
        rd["verify_seconds"] = seconds * (0.5 + (i % 7) / 10.0);
        rd["commit_seconds"] = seconds * 0.1;
        rounds.push_back(rd);
      }
      s["rounds"] = rounds;
    }
    SCOPED_TRACE("5000 rounds of " + std::to_string(seconds) + " s");
    const std::string svg = render_svg(r);
    check_geometry(svg, {"snapshot", "replay"});
    // The unit follows the axis top (the largest round is 1.2 x seconds): s, ms or us.
    EXPECT_NE(svg.find("time per round " + unit), std::string::npos) << unit;
    // At most one bar per 2 pixels: grouped.
    const auto bars = std::count(svg.begin(), svg.end(), '\n');
    EXPECT_LT(bars, 2500) << "bars were not grouped";
  }
}

}  // namespace
}  // namespace specstate::cli

#endif  // SPECSTATE_CLI_PATH
