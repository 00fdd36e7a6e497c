// `specstate simulate`: the report printed after a run (per strategy: time, bytes, memory, checks).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/simulate.h"

#ifdef SPECSTATE_CLI_CUDA
#include <cuda_runtime.h>
#endif

#include "cli/commands.h"
#include "cli/sim_helpers.h"
#include "specstate/spec/trace.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/specstate.h"

namespace specstate::cli {

using Json = nlohmann::ordered_json;

std::vector<std::pair<std::string, const Json*>> strategy_sections(const Json& r) {
  std::vector<std::pair<std::string, const Json*>> out;
  if (r.contains("strategies")) {
    for (const auto& [name, s] : r["strategies"].items()) out.emplace_back(name, &s);
  } else {
    out.emplace_back(r["options"]["strategy"].get<std::string>(), &r);
  }
  return out;
}

namespace {

std::string check_cell(const Json& chk) {
  if (!chk["ran"].get<bool>()) return "not run";
  char cell[128];
  std::snprintf(cell, sizeof(cell), "%s (bit-identical %s, max rel %.3g)",
                chk["passed"].get<bool>() ? "PASS" : "FAIL",
                chk["bit_identical"].get<bool>() ? "yes" : "no",
                chk["max_rel_error"].get<double>());
  if (chk.contains("reason")) return std::string(cell) + ": " + chk["reason"].get<std::string>();
  return cell;
}

}  // namespace

void print_summary(const Json& r, std::ostream& out) {
  const Json& m = r["model"];
  const Json& t = r["trace"];
  const Json& acc = r["acceptance"];
  // (Streamed: a fixed buffer cut a long model name, and the rest of the line with it.)
  const Json& o = r["options"];
  out << "specstate simulate: " << m["name"].get<std::string>() << " (TP " << o["tp"].get<int>()
      << ": ";
  if (m.contains("mamba2_layers")) {
    out << m["mamba2_layers"].get<int>() << " Mamba2 layers, heads=" << m["num_heads"].get<int>()
        << " P=" << m["head_dim"].get<int>() << " N=" << m["d_state"].get<int>()
        << " G=" << m["n_groups"].get<int>();
  } else {
    const bool kda = m.contains("kda_layers");  // KDA reports GDN's dimensions
    out << m[kda ? "kda_layers" : "gdn_layers"].get<int>() << (kda ? " KDA" : " GDN")
        << " layers, H=" << m["num_k_heads"].get<int>() << " HV=" << m["num_v_heads"].get<int>()
        << " K=" << m["head_k_dim"].get<int>() << " V=" << m["head_v_dim"].get<int>();
  }
  out << "), backend " << o["backend"].get<std::string>() << ", strategy "
      << o["strategy"].get<std::string>() << "\n";
  out << "  trace: " << t["source"].get<std::string>() << ", " << t["requests"].get<int>()
      << " requests, " << t["rounds"].get<int64_t>() << " rounds, window up to "
      << t["max_window"].get<int>() << ", meta " << t["meta"].dump() << "\n";
  char line[512];  // (numbers and short fixed strings from here on)
  std::snprintf(line, sizeof(line),
                "  tokens per round: %.2f (%.3f accepted per request per round)\n",
                acc["tokens_per_round"].get<double>(), acc["mean_accepted_length"].get<double>());
  out << line;
  out << "  accepted length histogram:\n";
  const auto hist = acc["histogram"].get<std::vector<int64_t>>();
  int64_t total = 0, peak = 1;
  for (int64_t c : hist) total += c, peak = std::max(peak, c);
  for (std::size_t a = 0; a < hist.size(); ++a) {
    const int bar = static_cast<int>(40 * hist[a] / peak);
    std::snprintf(line, sizeof(line), "    a=%-3zu %8lld  %5.1f%%  %s\n", a,
                  static_cast<long long>(hist[a]), total ? 100.0 * hist[a] / total : 0.0,
                  std::string(static_cast<std::size_t>(bar), '#').c_str());
    out << line;
  }
  const auto sections = strategy_sections(r);
  if (sections.size() == 1) {
    const Json& s = *sections.front().second;
    const bool replay = sections.front().first == "replay";
    const Json& mem = s["memory"];
    const Json& tim = s["timing"];
    const Json& by = s["bytes"];
    out << "  memory: committed " << human_bytes(mem["committed_bytes"].get<double>()) << " ("
        << human_bytes(mem["committed_bytes_per_request"].get<double>()) << " per request), ";
    if (replay) {
      out << "workspace (replay records) " << human_bytes(mem["workspace_bytes"].get<double>())
          << " (" << human_bytes(mem["records_bytes_per_slot"].get<double>())
          << " per slot), no snapshot scratch\n";
    } else {
      out << "scratch " << human_bytes(mem["scratch_bytes"].get<double>()) << " ("
          << human_bytes(mem["scratch_bytes_per_row"].get<double>()) << " per row)\n";
    }
    const Json& v = tim["verify_seconds_per_round"];
    const Json& c = tim["commit_seconds_per_round"];
    out << "  time per round: verify " << human_seconds(v["mean"].get<double>()) << " (p50 "
        << human_seconds(v["p50"].get<double>()) << ", max "
        << human_seconds(v["max"].get<double>()) << "), commit "
        << human_seconds(c["mean"].get<double>()) << " (p50 "
        << human_seconds(c["p50"].get<double>()) << ", max "
        << human_seconds(c["max"].get<double>()) << ")";
    if (replay) {
      out << "; materialize at the end " << human_seconds(tim["materialize_seconds"].get<double>());
    }
    out << "\n";
    std::snprintf(line, sizeof(line),
                  "  bytes moved per round (state%s, lower bound): verify %s (%.2f GB/s), "
                  "commit %s (%.2f GB/s)\n",
                  replay ? " + records" : "",
                  human_bytes(by["verify_bytes_per_round"].get<double>()).c_str(),
                  by["verify_gb_per_s"].get<double>(),
                  human_bytes(by["commit_bytes_per_round"].get<double>()).c_str(),
                  by["commit_gb_per_s"].get<double>());
    out << line;
    out << "  wall time: " << human_seconds(tim["wall_seconds"].get<double>()) << "\n";
    const Json& chk = s["check"];
    if (chk["ran"].get<bool>()) {
      std::snprintf(line, sizeof(line),
                    "  check: committed states vs plain prefill of the accepted tokens (CPU): %s "
                    "(bit-identical %s, max abs error %.3g, max rel error %.3g, tolerance %.0e)\n",
                    chk["passed"].get<bool>() ? "PASS" : "FAIL",
                    chk["bit_identical"].get<bool>() ? "yes" : "no",
                    chk["max_abs_error"].get<double>(), chk["max_rel_error"].get<double>(),
                    chk["tolerance"].get<double>());
      out << line;
      if (chk.contains("reason")) out << "    " << chk["reason"].get<std::string>() << "\n";
    }
    return;
  }

  // --strategy both: one column per strategy.
  out << "  side by side (the same trace, weights and inputs; means per round):\n";
  const auto row = [&](const std::string& label, const std::function<std::string(const Json&)>& f) {
    std::string text = "    " + label;
    text.resize(34, ' ');
    for (const auto& [name, s] : sections) {
      std::string cell = " " + f(*s);
      cell.resize(std::max<std::size_t>(cell.size(), 40), ' ');
      text += cell;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << "\n";
  };
  const auto mean = [](const Json& s, const char* key) {
    return s["timing"][key]["mean"].get<double>();
  };
  row("", [&](const Json& s) {
    for (const auto& [name, sec] : sections) {
      if (sec == &s) return name;
    }
    return std::string();
  });
  row("time: verify", [&](const Json& s) {
    return human_seconds(mean(s, "verify_seconds_per_round")) + " (p50 " +
           human_seconds(s["timing"]["verify_seconds_per_round"]["p50"].get<double>()) + ")";
  });
  row("time: commit", [&](const Json& s) {
    return human_seconds(mean(s, "commit_seconds_per_round")) + " (p50 " +
           human_seconds(s["timing"]["commit_seconds_per_round"]["p50"].get<double>()) + ")";
  });
  row("time: round (verify + commit)", [&](const Json& s) {
    return human_seconds(mean(s, "verify_seconds_per_round") + mean(s, "commit_seconds_per_round"));
  });
  row("time: materialize at the end", [&](const Json& s) {
    return human_seconds(s["timing"]["materialize_seconds"].get<double>());
  });
  row("bytes moved: verify", [&](const Json& s) {
    return human_bytes(s["bytes"]["verify_bytes_per_round"].get<double>());
  });
  row("bytes moved: commit", [&](const Json& s) {
    return human_bytes(s["bytes"]["commit_bytes_per_round"].get<double>());
  });
  row("memory: committed",
      [&](const Json& s) { return human_bytes(s["memory"]["committed_bytes"].get<double>()); });
  row("memory: workspace", [&](const Json& s) {
    const Json& mem = s["memory"];
    const bool replay = mem["records_bytes_per_slot"].get<int64_t>() > 0;
    return human_bytes(mem["workspace_bytes"].get<double>()) + " (" +
           human_bytes(replay ? mem["records_bytes_per_slot"].get<double>()
                              : mem["scratch_bytes_per_row"].get<double>()) +
           (replay ? " per slot)" : " per row)");
  });
  if (r["check"]["ran"].get<bool>()) {
    row("check vs plain prefill (CPU)", [&](const Json& s) { return check_cell(s["check"]); });
  }
  out << "  bytes model: " << sections[0].second->at("bytes")["model"].get<std::string>() << "; "
      << sections[1].second->at("bytes")["model"].get<std::string>() << "\n";
  out << "  wall time: " << human_seconds(r["timing"]["wall_seconds"].get<double>()) << "\n";
  const Json& chk = r["check"];
  if (chk["ran"].get<bool>()) {
    std::snprintf(line, sizeof(line),
                  "  check: both strategies vs plain prefill %s; snapshot vs replay bit-identical: "
                  "outputs %s (%lld rounds), committed states %s (%lld requests): %s\n",
                  chk["strategies_passed"].get<bool>() ? "PASS" : "FAIL",
                  chk["outputs_identical"].get<bool>() ? "yes" : "no",
                  static_cast<long long>(chk["compared_rounds"].get<int64_t>()),
                  chk["committed_states_identical"].get<bool>() ? "yes" : "no",
                  static_cast<long long>(chk["compared_requests"].get<int64_t>()),
                  chk["passed"].get<bool>() ? "PASS" : "FAIL");
    out << line;
    if (!chk["difference"].is_null()) {
      out << "    first difference: " << chk["difference"].get<std::string>() << "\n";
    }
  }
}

std::string svg_path_for(const std::string& out) {
  std::string svg_path = out;
  const auto dot = svg_path.rfind('.');
  const auto slash = svg_path.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
    svg_path.resize(dot);
  }
  return svg_path + ".svg";
}

}  // namespace specstate::cli
