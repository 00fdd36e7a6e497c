// Acceptance traces: how many tokens every request accepted in every round, as JSON Lines
// (format in docs/traces.md). A simulator replays a trace through the pool to measure verify and
// commit without a model; generators make synthetic traces, all seeded (std::mt19937_64).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "specstate/spec/window.h"

namespace specstate::spec {

constexpr int kTraceFormatVersion = 1;
// Largest window a trace may describe (a sanity bound on the input, not a pool limit).
constexpr int kMaxTraceWindow = 1024;
// Bounds on what the reader accepts, so that hostile input (/dev/zero, a line of 100k nested
// brackets, an endless file) fails with a message naming the line instead of exhausting memory
// or the stack. A line holds one record (a 1024-node tree is about 10 KB) or the header (the
// request ids: 16 MiB is about two million of them).
constexpr int64_t kMaxTraceLineBytes = int64_t{16} << 20;
constexpr int64_t kMaxTraceRecords = int64_t{1} << 23;    // 8,388,608 records
constexpr int64_t kMaxTraceLines = 2 * kMaxTraceRecords;  // blank lines included
// The most window nodes over all records: a record holds its window (parents and depths, 8 bytes
// a node) and its path, so 8M records of 1024-node windows (a 23 MB file of 400k such lines
// took 4 GB) would need about 100 GB. 2^26 nodes: 8M records of up to 8 nodes.
constexpr int64_t kMaxTraceNodes = int64_t{1} << 26;
constexpr int kMaxTraceJsonDepth = 16;  // a record nests 2 levels
// The most keys one JSON object of a line may hold (a record has 6 at most; the header's free-form
// "meta" is the one place with more): parsing keeps the key order, which is quadratic in an
// object's keys (a header of 160,000 meta keys took 22 s).
constexpr int kMaxTraceObjectKeys = 4096;
// The most keys all objects of a line may hold together: the per-object bound alone let a header
// of 469 meta objects of 4096 keys each take 4.6 s to read and 25 s through simulate's four
// parses of it.
constexpr int kMaxTraceLineKeys = 65536;
// The most requests a generator numbers: their ids (0 .. requests-1) are the header line, which
// must fit kMaxTraceLineBytes (2^20 ids are about 7.9 MB of it).
constexpr int kMaxTraceRequests = 1 << 20;

// One round of one request.
struct TraceRecord {
  int64_t request = 0;
  int64_t round = 0;
  Window window;
  // Accepted window indices, root first: 0, 1, ..., a-1 for a chain; empty when the request
  // did not advance this round (a = 0).
  std::vector<int32_t> path;

  int accepted_length() const noexcept { return static_cast<int>(path.size()); }
  // What StatePool::commit takes: accepted length (chain window) or last node (tree, -1 = keep).
  int32_t commit_value(bool tree) const noexcept {
    if (tree) return path.empty() ? -1 : path.back();
    return static_cast<int32_t>(path.size());
  }
};

struct Trace {
  std::vector<int64_t> requests;     // declared request ids, in header order
  std::vector<TraceRecord> records;  // in file order; a request's rounds are 0, 1, 2, ...
  std::string meta_json = "{}";      // the header's free-form "meta" object (JSON text)

  // 1 + the largest round index (0 for no record).
  int64_t num_rounds() const noexcept;
  // Largest window size of any record (1 for no record).
  int max_window() const noexcept;
  // Records of round `round`, in file order.
  std::vector<const TraceRecord*> round(int64_t round) const;
  // histogram[a] = records that accepted a tokens, a = 0 .. max_window().
  std::vector<int64_t> accepted_histogram() const;
  // Mean accepted length over all records (0 for no record).
  double mean_accepted_length() const noexcept;
};

// Parses a trace; `source` names the input in messages ("trace.jsonl"). Throws
// Error(kInvalidArgument) with "<source>:<line>: <what>" at the first problem, and returns
// nothing then: a trace is loaded whole or not at all.
Trace parse_trace(std::istream& in, const std::string& source = "<trace>");
// Reads a file; Error(kInvalidArgument) when it cannot be opened.
Trace read_trace(const std::string& path);

// Writes the header then one record per line. Validates `trace` first (the same rules as the
// reader), so whatever is written reads back equal.
void write_trace(std::ostream& out, const Trace& trace);
void write_trace_file(const std::string& path, const Trace& trace);
// Throws Error(kInvalidArgument) naming the first record (by index) that breaks a rule.
void validate_trace(const Trace& trace);

// --- generators ---------------------------------------------------------------------------
// Records are written round-major (round 0 of every request, then round 1, ...), requests
// numbered 0 .. requests-1, each with `window` in every round. The generators refuse
// (kInvalidArgument) a shape of more than kMaxTraceRecords records, as the reader does, and more
// than kMaxTraceRequests requests (whose header line the reader would refuse), rounds = 0 too.
struct TraceShape {
  int requests = 1;
  int rounds = 1;
  Window window = Window::chain(4);
  uint64_t seed = 0;
};

// Every round accepts `accepted_length` tokens (1 .. window.max_depth()); on a tree, along the
// lowest-index node at that depth.
Trace generate_fixed(const TraceShape& shape, int accepted_length);
// Every draft is accepted with probability alpha given that its parent was (alpha in [0, 1]):
// a chain accepts a = 1 + k tokens with P(k) = alpha^k (1 - alpha) (truncated at T-1). On a
// tree, each step goes on with probability alpha to a child chosen uniformly.
Trace generate_geometric(const TraceShape& shape, double alpha);
// Accepted lengths drawn from `weights[a-1]` for a = 1 .. weights.size() (non-negative, not all
// zero, at most window.max_depth() entries); on a tree, a node of that depth drawn uniformly.
Trace generate_empirical(const TraceShape& shape, const std::vector<double>& weights);

}  // namespace specstate::spec
