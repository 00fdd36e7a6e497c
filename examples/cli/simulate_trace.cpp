// `specstate simulate`: the trace a simulation replays (a file, or generated from the options).
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

namespace {

// The comma-separated items of `text`, with an empty item where two commas meet or where the text
// ends in one (std::getline dropped a last empty item: "-1,0,0," read as a tree of three).
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::vector<int32_t> parse_parents(const std::string& text) {
  std::vector<int32_t> parents;
  for (const std::string& item : comma_items(text)) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      parents.push_back(v);
    } catch (const std::exception&) {
      throw CLI::ValidationError("--tree", "\"" + text +
                                               "\" is not a comma-separated list of integers "
                                               "(e.g. --tree=-1,0,0,1)");
    }
  }
  return parents;
}

}  // namespace

spec::Trace make_trace(const SimulateOptions& o, std::string& source) {
  if (!o.trace_path.empty()) {
    source = o.trace_path;
    spec::Trace trace = spec::read_trace(o.trace_path);
    if (trace.records.empty()) {
      throw CLI::ValidationError("--trace", o.trace_path + " has no record");
    }
    if (trace.requests.size() > static_cast<std::size_t>(kMaxRequests)) {
      throw CLI::ValidationError(
          "--trace", o.trace_path + " declares " + std::to_string(trace.requests.size()) +
                         " requests, more than the limit of " + std::to_string(kMaxRequests));
    }
    if (trace.num_rounds() > kMaxRounds) {
      throw CLI::ValidationError("--trace",
                                 o.trace_path + " holds " + with_commas(trace.num_rounds()) +
                                     " rounds, more than the limit of " + with_commas(kMaxRounds));
    }
    return trace;
  }
  spec::TraceShape shape;
  shape.requests = o.requests;
  shape.rounds = o.rounds;
  shape.seed = o.seed;
  if (!o.tree.empty()) {
    const std::vector<int32_t> parents = parse_parents(o.tree);
    if (parents.size() > static_cast<std::size_t>(spec::kMaxTraceWindow)) {
      throw CLI::ValidationError("--tree", "--tree has " + std::to_string(parents.size()) +
                                               " nodes, more than the limit of " +
                                               std::to_string(spec::kMaxTraceWindow));
    }
    try {
      shape.window = spec::Window::from_parents(parents);
    } catch (const Error& e) {
      throw CLI::ValidationError("--tree", e.what());
    }
  } else {
    shape.window = spec::Window::chain(o.window);
  }
  // Refused before anything is reserved (exit 2), naming both options and the limit.
  const int64_t records = int64_t{o.requests} * o.rounds;
  const std::string size = "--requests " + std::to_string(o.requests) + " x --rounds " +
                           std::to_string(o.rounds) + " = " + with_commas(records) +
                           " request-rounds";
  if (o.requests < 1 || o.rounds < 1) {
    throw CLI::ValidationError("--rounds", size + ": both must be at least 1");
  }
  if (records > kMaxGeneratedRecords) {
    throw CLI::ValidationError("--rounds", size + ", more than the limit of " +
                                               with_commas(kMaxGeneratedRecords) +
                                               " (a generated trace is held in memory)");
  }
  if (records * shape.window.size() > kMaxGeneratedNodes) {
    throw CLI::ValidationError(
        "--rounds", size + " of " + std::to_string(shape.window.size()) +
                        " window tokens = " + with_commas(records * shape.window.size()) +
                        " tokens, more than the limit of " + with_commas(kMaxGeneratedNodes));
  }
  if (!o.histogram.empty()) {
    std::vector<double> weights;
    for (const std::string& item : comma_items(o.histogram)) {
      try {
        std::size_t used = 0;
        weights.push_back(std::stod(item, &used));
        if (used != item.size() || !std::isfinite(weights.back())) {
          throw std::invalid_argument(item);
        }
      } catch (const std::exception&) {
        throw CLI::ValidationError("--histogram", "\"" + o.histogram +
                                                      "\" is not a comma-separated list of "
                                                      "weights (e.g. --histogram 0.3,0.2,0.1,0.4)");
      }
    }
    source = "empirical";
    try {
      return spec::generate_empirical(shape, weights);
    } catch (const Error& e) {
      throw CLI::ValidationError("--histogram", e.what());
    }
  }
  if (o.fixed > 0) {
    if (o.fixed > shape.window.max_depth()) {
      throw CLI::ValidationError("--fixed", "--fixed " + std::to_string(o.fixed) +
                                                " exceeds the window's depth " +
                                                std::to_string(shape.window.max_depth()));
    }
    source = "fixed";
    return spec::generate_fixed(shape, o.fixed);
  }
  source = "geometric";
  if (!(o.accept_rate >= 0.0 && o.accept_rate <= 1.0)) {  // NaN fails both comparisons
    throw CLI::ValidationError("--accept-rate", "--accept-rate " + std::to_string(o.accept_rate) +
                                                    " must be a number in [0, 1]");
  }
  return spec::generate_geometric(shape, o.accept_rate);
}

}  // namespace specstate::cli
