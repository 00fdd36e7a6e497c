// `specstate simulate`: replays an acceptance trace (from a file or a seeded generator) through a
// StatePool with synthetic weights and inputs, and measures what verify and commit cost per round.
// The CLI command and the tests both drive run_simulation().
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/sim_helpers.h"
#include "specstate/spec/trace.h"

namespace specstate::cli {

struct SimulateOptions {
  std::string model = kDefaultModel;  // a preset, the same default as `plan`
  std::string model_file;             // a JSON model file instead of a preset
  ModelDims dims;                     // custom dimensions over the model
  int tp = 1;
  int requests = 8;
  int rounds = 32;
  int window = 4;
  std::string tree;        // parents of a tree window, "-1,0,0,1" (empty: a chain of `window`)
  std::string trace_path;  // replay this trace instead of generating one
  double accept_rate = 0.7;
  int fixed = 0;           // > 0: every round accepts exactly this many tokens
  std::string histogram;   // "w1,w2,...": accepted length a drawn with weight w_a (empirical)
  std::string save_trace;  // write the replayed trace here (JSON Lines, docs/traces.md)
  std::string backend = "cpu";
  // snapshot, replay, or both: the same trace through a snapshot pool and a replay pool, side by
  // side (the report's per-strategy keys then sit under "strategies").
  std::string strategy = "snapshot";
  // padded: every row of a round at r * T with filler up to the round's largest window;
  // variable: each row's own tokens packed by cumulative offsets (VerifyBatch::lengths, no
  // filler computed; DESIGN.md section 2).
  std::string packing = "padded";
  uint64_t seed = 0;
  // Replay the accepted tokens through prefill on a CPU pool and compare every strategy's
  // committed states with it; with `both` also the strategies' outputs and states bit for bit.
  bool check = false;
  int warmup = 1;   // untimed rounds first: a full verify, then a commit that keeps (a = 0)
  std::string out;  // FILE.json: report; FILE.svg beside it: the plots (checked before the run)
};

// Limits of a simulation (refused up front, exit 2; docs/simulate.md).
// The most requests one simulation holds (--requests, or the requests a --trace declares).
inline constexpr int kMaxRequests = 4096;
// The most rounds one simulation runs (--rounds, or the rounds a --trace holds): the report keeps
// about 1 KB a round, and a trace of 8 M rounds (the reader's limit) ran out of memory inside the
// report's JSON and aborted.
inline constexpr int kMaxRounds = 1000000;
// The most records (request-rounds) a generated trace holds: the trace reader's limit, so that
// every generated trace can be saved (--save-trace) and replayed (--trace). The generator
// reserves them all at once: 4096 requests x 10^6 rounds asked for 4e9 records and died with
// std::bad_alloc (issue 20.11).
inline constexpr int64_t kMaxGeneratedRecords = spec::kMaxTraceRecords;
// ... and the most window nodes over all its records (each record holds its window's parents and
// its accepted path: about 8 bytes per node), so that a wide window cannot do the same.
inline constexpr int64_t kMaxGeneratedNodes = spec::kMaxTraceNodes;

// The trace a simulation replays: --trace's file, or one generated from the options (--fixed,
// --histogram, --accept-rate), checked against the limits above. `source` names it.
spec::Trace make_trace(const SimulateOptions& options, std::string& source);

// The report's files: FILE.svg beside FILE.json.
std::string svg_path_for(const std::string& out);

// Runs the simulation; `progress` (may be null) receives a progress bar. Returns the report
// (schema in docs/simulate.md). Throws CLI::ValidationError for bad options and
// specstate::Error for what the library rejects.
nlohmann::ordered_json run_simulation(const SimulateOptions& options, std::ostream* progress);
// The human-readable summary of a report.
void print_summary(const nlohmann::ordered_json& report, std::ostream& out);
// The per-strategy sections of a report: [(name, section)], one for a single-strategy run (its
// keys sit at the top level), two for --strategy both.
std::vector<std::pair<std::string, const nlohmann::ordered_json*>> strategy_sections(
    const nlohmann::ordered_json& report);
// An SVG (simulate_svg.cpp) with a title naming the run (model, window, acceptance, backend,
// strategy), the accepted-length histogram, and per strategy a panel of the time per round
// (verify and commit stacked, each strategy in its own colours, the panels on one y scale): every
// axis numbered, the time axes in one unit (s, ms or us) named in the axis title, round numbers on
// x, no two labels overlapping (their boxes estimated from font size and length).
std::string render_svg(const nlohmann::ordered_json& report);

}  // namespace specstate::cli
