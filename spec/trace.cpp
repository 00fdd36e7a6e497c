// Acceptance traces: JSON Lines reader, writer and generators. Format: docs/traces.md.
#include "specstate/spec/trace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "specstate/spec/file_path.h"
#include "specstate/spec/json_depth.h"
#include "specstate/status.h"

namespace specstate::spec {
namespace {

// ordered_json keeps the key order of the input (a header's meta reads back as written).
using Json = nlohmann::ordered_json;
using OrderedJson = nlohmann::ordered_json;

// A double with the digits that read back as it (std::to_string printed 1.0000001 as "1.000000"
// in "alpha = 1.000000 must be in [0, 1]").
std::string number(double x) {
  std::ostringstream s;
  s.precision(std::numeric_limits<double>::max_digits10);
  s << x;
  return s.str();
}

constexpr const char* kFormatName = "specstate-trace";

// Where a problem is, for messages: "<source>:<line>: " when reading, "record <i>: " otherwise.
struct Where {
  std::string prefix;
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Status::kInvalidArgument, prefix + what);
  }
};

// A nested Error's message without its leading "<status name>: " (the outer error adds its own).
std::string inner(const Error& e) {
  const std::string message = e.what();
  const std::string prefix = std::string(status_name(e.status())) + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

std::string type_of(const Json& j) {
  if (j.is_number_integer()) return "integer " + j.dump();
  if (j.is_number_float()) return "number " + j.dump();
  if (j.is_string()) return "string " + j.dump();
  return j.type_name();
}

int64_t get_int(const Json& obj, const char* key, int64_t lo, int64_t hi, const Where& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) where.fail(std::string("missing field \"") + key + "\"");
  if (!it->is_number_integer()) {
    where.fail(std::string("field \"") + key + "\" must be an integer, got " + type_of(*it));
  }
  bool in_range = true;
  int64_t value = 0;
  if (it->is_number_unsigned()) {
    const auto u = it->get<uint64_t>();
    in_range = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    value = in_range ? static_cast<int64_t>(u) : 0;
  } else {
    value = it->get<int64_t>();
  }
  if (!in_range || value < lo || value > hi) {
    where.fail(std::string("field \"") + key + "\" = " + it->dump() + " is out of range [" +
               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

std::vector<int32_t> get_int_array(const Json& obj, const char* key, int64_t lo, int64_t hi,
                                   const Where& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) where.fail(std::string("missing field \"") + key + "\"");
  if (!it->is_array()) {
    where.fail(std::string("field \"") + key + "\" must be an array of integers, got " +
               type_of(*it));
  }
  std::vector<int32_t> out;
  out.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (!v.is_number_integer()) {
      where.fail(std::string("field \"") + key + "\"[" + std::to_string(i) +
                 "] must be an integer, got " + type_of(v));
    }
    const bool neg = v.is_number_integer() && !v.is_number_unsigned();
    const int64_t x =
        neg ? v.get<int64_t>()
            : static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), uint64_t{1} << 62));
    if (x < lo || x > hi) {
      where.fail(std::string("field \"") + key + "\"[" + std::to_string(i) + "] = " + v.dump() +
                 " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

void reject_unknown(const Json& obj, std::initializer_list<const char*> known, const char* what,
                    const Where& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const bool ok =
        std::any_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; });
    if (!ok) where.fail(std::string("unknown field \"") + it.key() + "\" in " + what);
  }
}

// The rules every record obeys with respect to the others: declared request, rounds of a
// request consecutive from 0. The declared ids are kept sorted and found by binary search:
// O(log n) a record whatever the ids (a hash table keyed by the id itself, libstdc++'s identity
// hash, let ids that are multiples of its bucket count share one chain: 100,000 records took 26 s).
class RoundTracker {
 public:
  void declare(const std::vector<int64_t>& requests, const Where& where) {
    if (requests.empty())
      where.fail("header field \"requests\" is empty (declare every request id)");
    // The error a loop in order would meet first: a negative id at i, or the second occurrence
    // of an id at i, whichever i is smaller.
    std::size_t first_negative = requests.size();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] < 0) {
        first_negative = i;
        break;
      }
    }
    std::vector<std::pair<int64_t, std::size_t>> order(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) order[i] = {requests[i], i};
    std::sort(order.begin(), order.end());
    std::size_t first_repeat = requests.size();
    for (std::size_t i = 1; i < order.size(); ++i) {
      if (order[i].first == order[i - 1].first)
        first_repeat = std::min(first_repeat, order[i].second);
    }
    if (first_negative < requests.size() && first_negative <= first_repeat) {
      where.fail("header field \"requests\"[" + std::to_string(first_negative) +
                 "] = " + std::to_string(requests[first_negative]) + " must be >= 0");
    }
    if (first_repeat < requests.size()) {
      where.fail("header field \"requests\" declares request " +
                 std::to_string(requests[first_repeat]) + " twice");
    }
    ids_.resize(order.size());
    next_round_.assign(order.size(), 0);
    for (std::size_t i = 0; i < order.size(); ++i) ids_[i] = order[i].first;
  }
  void check(int64_t request, int64_t round, const Where& where) {
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), request);
    if (it == ids_.end() || *it != request) {
      where.fail("request " + std::to_string(request) +
                 " is not declared in the header's \"requests\"");
    }
    int64_t& next = next_round_[static_cast<std::size_t>(it - ids_.begin())];
    if (round != next) {
      where.fail("request " + std::to_string(request) + " has round " + std::to_string(round) +
                 " where round " + std::to_string(next) +
                 " was expected (a request's rounds are consecutive from 0, each once)");
    }
    ++next;
  }

 private:
  std::vector<int64_t> ids_;         // declared, sorted
  std::vector<int64_t> next_round_;  // of ids_[i]
};

std::vector<int64_t> parse_header(const Json& j, std::string& meta_json, const Where& where) {
  if (!j.contains("format")) {
    where.fail(std::string("the first line must be the header {\"format\": \"") + kFormatName +
               "\", \"version\": 1, \"requests\": [...]}; it has no field \"format\"");
  }
  reject_unknown(j, {"format", "version", "requests", "meta"}, "the header", where);
  const Json& format = j["format"];
  if (!format.is_string() || format.get<std::string>() != kFormatName) {
    where.fail(std::string("header field \"format\" must be \"") + kFormatName + "\", got " +
               format.dump());
  }
  const int64_t version = get_int(j, "version", 0, std::numeric_limits<int32_t>::max(), where);
  if (version != kTraceFormatVersion) {
    where.fail("header field \"version\" = " + std::to_string(version) +
               " is not supported (this reader knows version " +
               std::to_string(kTraceFormatVersion) + ")");
  }
  const auto it = j.find("requests");
  if (it == j.end()) where.fail("missing header field \"requests\"");
  if (!it->is_array()) {
    where.fail("header field \"requests\" must be an array of integers, got " + type_of(*it));
  }
  std::vector<int64_t> requests;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      where.fail("header field \"requests\"[" + std::to_string(i) +
                 "] must be an integer in int64 range, got " + type_of(v));
    }
    requests.push_back(v.get<int64_t>());
  }
  if (j.contains("meta")) {
    if (!j["meta"].is_object()) {
      where.fail("header field \"meta\" must be an object, got " + type_of(j["meta"]));
    }
    meta_json = j["meta"].dump();
  }
  return requests;
}

TraceRecord parse_record(const Json& j, const Where& where) {
  reject_unknown(j, {"request", "round", "window", "accepted", "parents", "path"}, "a record",
                 where);
  TraceRecord rec;
  rec.request = get_int(j, "request", 0, std::numeric_limits<int64_t>::max(), where);
  rec.round = get_int(j, "round", 0, std::numeric_limits<int64_t>::max(), where);
  const int window = static_cast<int>(get_int(j, "window", 1, kMaxTraceWindow, where));
  if (j.contains("parents")) {
    std::vector<int32_t> parents = get_int_array(j, "parents", -1, window - 1, where);
    if (static_cast<int>(parents.size()) != window) {
      where.fail("field \"parents\" has " + std::to_string(parents.size()) +
                 " entries but \"window\" = " + std::to_string(window));
    }
    try {
      rec.window = Window::from_parents(std::move(parents));
    } catch (const Error& e) {
      where.fail("field \"parents\" is not a window: " + inner(e));
    }
    rec.path = get_int_array(j, "path", 0, window - 1, where);
    try {
      check_path(rec.window, rec.path, "field \"path\"");
    } catch (const Error& e) {
      where.fail(inner(e));
    }
    if (j.contains("accepted")) {
      const int64_t a = get_int(j, "accepted", 0, window, where);
      if (a != static_cast<int64_t>(rec.path.size())) {
        where.fail("field \"accepted\" = " + std::to_string(a) + " disagrees with \"path\" (" +
                   std::to_string(rec.path.size()) + " nodes)");
      }
    }
  } else {
    if (j.contains("path")) {
      where.fail(
          "field \"path\" belongs to tree records (with \"parents\"); a chain record "
          "gives \"accepted\"");
    }
    rec.window = Window::chain(window);
    const int64_t a = get_int(j, "accepted", 0, window, where);
    for (int32_t t = 0; t < a; ++t) rec.path.push_back(t);
  }
  return rec;
}

// std::getline with a bound: reads up to '\n' (dropped) or the end of the input. Returns false at
// the end of the input with nothing read; sets `too_long` (and stops reading) past `max_bytes`.
bool read_line(std::istream& in, std::string& line, int64_t max_bytes, bool& too_long) {
  line.clear();
  too_long = false;
  std::streambuf* buf = in.rdbuf();
  if (buf == nullptr || !in.good()) return false;
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (static_cast<int64_t>(line.size()) >= max_bytes) {
      too_long = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
  }
}

std::string strip_prefix(const std::string& message) {
  // nlohmann messages start with "[json.exception.parse_error.101] "; the rest says where.
  const auto pos = message.find("] ");
  return pos == std::string::npos ? message : message.substr(pos + 2);
}

// Reproducible across standard libraries (std::*_distribution are implementation-defined).
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}
int uniform_index(std::mt19937_64& rng, int n) {
  return std::min(n - 1, static_cast<int>(uniform01(rng) * n));
}

void check_shape(const TraceShape& shape, const char* fn) {
  if (shape.requests < 1 || shape.rounds < 0) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": requests = " + std::to_string(shape.requests) +
                    " must be >= 1 and rounds = " + std::to_string(shape.rounds) + " >= 0");
  }
  if (shape.window.size() > kMaxTraceWindow) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": window has " + std::to_string(shape.window.size()) +
                    " tokens, more than " + std::to_string(kMaxTraceWindow));
  }
  // The reader's bound: a trace it would refuse is not generated (10^6 x 10^6 records asked for
  // terabytes).
  const int64_t records = int64_t{shape.requests} * shape.rounds;
  if (records <= kMaxTraceRecords && records * shape.window.size() > kMaxTraceNodes) {
    throw Error(
        Status::kInvalidArgument,
        std::string(fn) + ": requests x rounds x window nodes = " + std::to_string(shape.requests) +
            " x " + std::to_string(shape.rounds) + " x " + std::to_string(shape.window.size()) +
            ", more than " + std::to_string(kMaxTraceNodes) + " (kMaxTraceNodes)");
  }
  if (records > kMaxTraceRecords) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": requests x rounds = " + std::to_string(shape.requests) +
                    " x " + std::to_string(shape.rounds) + " records, more than " +
                    std::to_string(kMaxTraceRecords) + " (kMaxTraceRecords)");
  }
  // The header holds every request id: a generated trace the reader would refuse is not made
  // (INT_MAX requests of 0 rounds allocated 16 GB before std::bad_alloc).
  if (shape.requests > kMaxTraceRequests) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": requests = " + std::to_string(shape.requests) +
                    ", more than " + std::to_string(kMaxTraceRequests) +
                    " (kMaxTraceRequests: their ids are the header line, which the reader "
                    "bounds)");
  }
}

template <typename PathFn>
Trace generate(const TraceShape& shape, OrderedJson meta, PathFn&& path_fn) {
  Trace trace;
  meta["seed"] = shape.seed;
  meta["window"] = shape.window.describe();
  trace.meta_json = meta.dump();
  for (int r = 0; r < shape.requests; ++r) trace.requests.push_back(r);
  std::mt19937_64 rng(shape.seed);
  trace.records.reserve(static_cast<std::size_t>(shape.requests) * shape.rounds);
  for (int round = 0; round < shape.rounds; ++round) {
    for (int r = 0; r < shape.requests; ++r) {
      TraceRecord rec;
      rec.request = r;
      rec.round = round;
      rec.window = shape.window;
      rec.path = path_fn(rng);
      trace.records.push_back(std::move(rec));
    }
  }
  return trace;
}

// The nodes of `window` at depth d (1-based), in index order.
std::vector<std::vector<int32_t>> nodes_by_depth(const Window& window) {
  std::vector<std::vector<int32_t>> out(static_cast<std::size_t>(window.max_depth()) + 1);
  for (int t = 0; t < window.size(); ++t)
    out[static_cast<std::size_t>(window.depth(t))].push_back(t);
  return out;
}

}  // namespace

int64_t Trace::num_rounds() const noexcept {
  int64_t n = 0;  // 1 + the largest round (a hand-built round of INT64_MAX saturates)
  for (const auto& r : records) {
    n = std::max(n, r.round < std::numeric_limits<int64_t>::max() ? r.round + 1 : r.round);
  }
  return n;
}

int Trace::max_window() const noexcept {
  int t = 1;
  for (const auto& r : records) t = std::max(t, r.window.size());
  return t;
}

std::vector<const TraceRecord*> Trace::round(int64_t round) const {
  std::vector<const TraceRecord*> out;
  for (const auto& r : records) {
    if (r.round == round) out.push_back(&r);
  }
  return out;
}

std::vector<int64_t> Trace::accepted_histogram() const {
  // Sized by the longest path as well: a hand-built record (not validated) may hold a path
  // longer than its window.
  std::size_t longest = static_cast<std::size_t>(max_window());
  for (const auto& r : records) longest = std::max(longest, r.path.size());
  std::vector<int64_t> hist(longest + 1, 0);
  for (const auto& r : records) ++hist[r.path.size()];
  return hist;
}

double Trace::mean_accepted_length() const noexcept {
  if (records.empty()) return 0.0;
  double sum = 0;
  for (const auto& r : records) sum += r.accepted_length();
  return sum / static_cast<double>(records.size());
}

Trace parse_trace(std::istream& in, const std::string& source) {
  Trace trace;
  RoundTracker tracker;
  bool have_header = false;
  std::string line;
  int64_t line_no = 0;
  int64_t nodes = 0;  // window nodes of the records read
  bool too_long = false;
  // A stream buffer may throw on a read error (a file stream of /proc/self/mem, an I/O error):
  // reported as the source's, naming the line.
  const auto next_line = [&] {
    try {
      return read_line(in, line, kMaxTraceLineBytes, too_long);
    } catch (const std::ios_base::failure& e) {
      throw Error(Status::kInvalidArgument,
                  source + ":" + std::to_string(line_no + 1) + ": cannot read: " + e.what());
    }
  };
  while (next_line()) {
    ++line_no;
    const Where where{source + ":" + std::to_string(line_no) + ": "};
    if (too_long) {
      where.fail("line is longer than the limit of " + std::to_string(kMaxTraceLineBytes) +
                 " bytes (not a trace?)");
    }
    // JSON text holds no NUL byte; the parser would stop at one and ignore what follows.
    if (const std::size_t nul = line.find('\0'); nul != std::string::npos) {
      where.fail("a NUL byte at column " + std::to_string(nul + 1) + " (not a trace?)");
    }
    if (line_no > kMaxTraceLines) {
      where.fail("more than " + std::to_string(kMaxTraceLines) + " lines (the limit)");
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A UTF-8 byte-order mark at the start of a line is ignored (a line of only one is blank).
    if (line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const int64_t too_deep = json_nesting(line, kMaxTraceJsonDepth).first_past_limit;
    if (too_deep >= 0) {
      where.fail("JSON nests deeper than the limit of " + std::to_string(kMaxTraceJsonDepth) +
                 " levels (at column " + std::to_string(too_deep + 1) + ")");
    }
    if (have_header && static_cast<int64_t>(trace.records.size()) >= kMaxTraceRecords) {
      where.fail("more than " + std::to_string(kMaxTraceRecords) + " records (the limit)");
    }
    // Keys first (no DOM): a key twice in one object, more keys than kMaxTraceObjectKeys in one
    // or than kMaxTraceLineKeys in all.
    if (const JsonKeyProblem keys = json_key_problem(line, kMaxTraceObjectKeys, kMaxTraceLineKeys);
        !keys.duplicate.empty()) {
      where.fail("key \"" + keys.duplicate + "\" appears twice in one object");
    } else if (keys.too_many_keys) {
      where.fail("an object with more than " + std::to_string(kMaxTraceObjectKeys) +
                 " keys (the limit, kMaxTraceObjectKeys)");
    } else if (keys.too_many_total_keys) {
      where.fail("more than " + std::to_string(kMaxTraceLineKeys) +
                 " keys in the line's objects together (the limit, kMaxTraceLineKeys)");
    }
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::exception& e) {
      where.fail("not valid JSON (" + strip_prefix(e.what()) + ")");
    }
    if (!j.is_object()) where.fail(std::string("expected a JSON object, got ") + type_of(j));
    if (!have_header) {
      trace.requests = parse_header(j, trace.meta_json, where);
      tracker.declare(trace.requests, where);
      have_header = true;
      continue;
    }
    TraceRecord rec = parse_record(j, where);
    tracker.check(rec.request, rec.round, where);
    nodes += rec.window.size();
    if (nodes > kMaxTraceNodes) {
      where.fail("more than " + std::to_string(kMaxTraceNodes) +
                 " window nodes over all records (the limit, kMaxTraceNodes)");
    }
    trace.records.push_back(std::move(rec));
  }
  if (in.bad()) throw Error(Status::kInvalidArgument, source + ": read error");
  if (!have_header) {
    throw Error(Status::kInvalidArgument,
                source + ":" + std::to_string(line_no) + ": empty trace (no header line)");
  }
  return trace;
}

namespace {
void check_trace_path(const char* function, const std::string& path) {
  if (path.empty())
    throw Error(Status::kInvalidArgument, std::string(function) + ": path is empty");
  const std::string problem = path_nul_problem("path", path);
  if (!problem.empty())
    throw Error(Status::kInvalidArgument, std::string(function) + ": " + problem);
}
}  // namespace

Trace read_trace(const std::string& path) {
  check_trace_path("spec::read_trace", path);
  // A directory opens as a stream whose reads fail: refused by name. Pipes stay readable (a
  // trace piped through /dev/stdin; a FIFO waits for its writer, as any reader does), and
  // endless devices end at the line limit.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(Status::kInvalidArgument,
                "spec::read_trace: \"" + path + "\" is a directory, not a trace file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Status::kInvalidArgument, "spec::read_trace: cannot open \"" + path + "\"");
  return parse_trace(in, path);
}

namespace {
// The header line write_trace writes (without its newline).
std::string header_line(const Trace& trace, const OrderedJson& meta) {
  OrderedJson header;
  header["format"] = kFormatName;
  header["version"] = kTraceFormatVersion;
  header["requests"] = trace.requests;
  header["meta"] = meta;
  return header.dump();
}
}  // namespace

void validate_trace(const Trace& trace) {
  RoundTracker tracker;
  tracker.declare(trace.requests, Where{"spec::validate_trace: "});
  // The header holds meta one level down: a file's lines nest at most kMaxTraceJsonDepth.
  if (json_nesting(trace.meta_json, kMaxTraceJsonDepth - 1).first_past_limit >= 0) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: meta_json nests JSON deeper than " +
                    std::to_string(kMaxTraceJsonDepth - 1) + " levels (the header's limit of " +
                    std::to_string(kMaxTraceJsonDepth) + " less the header's own)");
  }
  if (trace.meta_json.find('\0') != std::string::npos) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: meta_json holds a NUL byte (JSON text has none)");
  }
  // The header line holds meta's keys and its own four (format, version, requests, meta).
  constexpr int kMetaKeys = kMaxTraceLineKeys - 4;
  const JsonKeyProblem keys = json_key_problem(trace.meta_json, kMaxTraceObjectKeys, kMetaKeys);
  if (!keys.duplicate.empty()) {
    throw Error(Status::kInvalidArgument, "spec::validate_trace: meta_json holds key \"" +
                                              keys.duplicate + "\" twice in one object");
  }
  if (keys.too_many_keys) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: meta_json holds an object of more than " +
                    std::to_string(kMaxTraceObjectKeys) + " keys (kMaxTraceObjectKeys)");
  }
  if (keys.too_many_total_keys) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: meta_json holds more than " + std::to_string(kMetaKeys) +
                    " keys in all (kMaxTraceLineKeys, less the header's own 4)");
  }
  Json meta;
  try {
    meta = Json::parse(trace.meta_json);
  } catch (const Json::exception& e) {
    throw Error(Status::kInvalidArgument, "spec::validate_trace: meta_json is not valid JSON (" +
                                              strip_prefix(e.what()) + ")");
  }
  if (!meta.is_object()) {
    throw Error(Status::kInvalidArgument, "spec::validate_trace: meta_json must be a JSON object");
  }
  if (static_cast<int64_t>(trace.records.size()) > kMaxTraceRecords) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: " + std::to_string(trace.records.size()) +
                    " records, more than the reader takes (kMaxTraceRecords = " +
                    std::to_string(kMaxTraceRecords) + ")");
  }
  if (const int64_t bytes = static_cast<int64_t>(header_line(trace, meta).size());
      bytes > kMaxTraceLineBytes) {
    throw Error(Status::kInvalidArgument,
                "spec::validate_trace: the header line would be " + std::to_string(bytes) +
                    " bytes (requests and meta_json), more than the reader takes "
                    "(kMaxTraceLineBytes = " +
                    std::to_string(kMaxTraceLineBytes) + ")");
  }
  int64_t nodes = 0;
  for (std::size_t i = 0; i < trace.records.size(); ++i) {
    const TraceRecord& rec = trace.records[i];
    const Where where{"spec::validate_trace: record " + std::to_string(i) + ": "};
    nodes += rec.window.size();
    if (nodes > kMaxTraceNodes) {
      where.fail("more than " + std::to_string(kMaxTraceNodes) +
                 " window nodes over the records so far (the reader's limit, kMaxTraceNodes)");
    }
    if (rec.window.size() > kMaxTraceWindow) {
      where.fail("window has " + std::to_string(rec.window.size()) + " tokens, more than " +
                 std::to_string(kMaxTraceWindow));
    }
    if (rec.round < 0) where.fail("round = " + std::to_string(rec.round) + " must be >= 0");
    tracker.check(rec.request, rec.round, where);
    try {
      check_path(rec.window, rec.path, "path");
    } catch (const Error& e) {
      where.fail(inner(e));
    }
  }
}

void write_trace(std::ostream& out, const Trace& trace) {
  validate_trace(trace);
  out << header_line(trace, OrderedJson::parse(trace.meta_json)) << '\n';
  for (const TraceRecord& rec : trace.records) {
    OrderedJson j;
    j["request"] = rec.request;
    j["round"] = rec.round;
    j["window"] = rec.window.size();
    if (!rec.window.is_chain()) {
      j["parents"] = rec.window.parents();
      j["path"] = rec.path;
    }
    j["accepted"] = rec.accepted_length();
    out << j.dump() << '\n';
  }
  if (!out) throw Error(Status::kInvalidArgument, "spec::write_trace: write failed");
}

void write_trace_file(const std::string& path, const Trace& trace) {
  check_trace_path("spec::write_trace_file", path);
  validate_trace(trace);  // before any file is created
  // All or nothing where it can be (ReplacingFile: a temporary beside the file, renamed over it;
  // a link's file replaced, the link kept; in place for devices, FIFOs, a link to no file and a
  // file with no room for a temporary beside it); a file the caller may not write is refused.
  ReplacingFile file(path);
  if (!file.ok()) {
    throw Error(Status::kInvalidArgument, "spec::write_trace_file: cannot write \"" + path +
                                              "\" (" + file.error() + "; nothing was changed)");
  }
  bool written = false;
  int write_errno = 0;
  {
    FdStreamBuf buf(file.fd());
    std::ostream out(&buf);
    try {
      write_trace(out, trace);
      out.flush();
      written = out.good() && buf.ok();
    } catch (const Error&) {
      written = false;  // write_trace's own "write failed"
    }
    write_errno = buf.error();
  }
  const std::string failed = file.commit(written, write_errno);
  if (!failed.empty()) {
    throw Error(Status::kInvalidArgument,
                "spec::write_trace_file: \"" + path + "\": " + failed + " (" +
                    (file.in_place() ? "written in place: the file is incomplete)"
                                     : "nothing was changed)"));
  }
}

Trace generate_fixed(const TraceShape& shape, int accepted_length) {
  check_shape(shape, "spec::generate_fixed");
  if (accepted_length < 1 || accepted_length > shape.window.max_depth()) {
    throw Error(Status::kInvalidArgument,
                "spec::generate_fixed: accepted_length = " + std::to_string(accepted_length) +
                    " must be in [1, " + std::to_string(shape.window.max_depth()) +
                    "] for window " + shape.window.describe());
  }
  const auto by_depth = nodes_by_depth(shape.window);
  const std::vector<int32_t> path =
      shape.window.path_to(by_depth[static_cast<std::size_t>(accepted_length)].front());
  OrderedJson meta;
  meta["generator"] = "fixed";
  meta["accepted"] = accepted_length;
  return generate(shape, std::move(meta), [&](std::mt19937_64&) { return path; });
}

Trace generate_geometric(const TraceShape& shape, double alpha) {
  check_shape(shape, "spec::generate_geometric");
  if (!(alpha >= 0.0 && alpha <= 1.0)) {
    throw Error(Status::kInvalidArgument,
                "spec::generate_geometric: alpha = " + number(alpha) + " must be in [0, 1]");
  }
  std::vector<std::vector<int32_t>> children(static_cast<std::size_t>(shape.window.size()));
  for (int t = 0; t < shape.window.size(); ++t)
    children[static_cast<std::size_t>(t)] = shape.window.children(t);
  OrderedJson meta;
  meta["generator"] = "geometric";
  meta["alpha"] = alpha;
  return generate(shape, std::move(meta), [&](std::mt19937_64& rng) {
    std::vector<int32_t> path{0};
    for (;;) {
      const auto& kids = children[static_cast<std::size_t>(path.back())];
      if (kids.empty() || !(uniform01(rng) < alpha)) break;
      const int pick = kids.size() == 1 ? 0 : uniform_index(rng, static_cast<int>(kids.size()));
      path.push_back(kids[static_cast<std::size_t>(pick)]);
    }
    return path;
  });
}

Trace generate_empirical(const TraceShape& shape, const std::vector<double>& weights) {
  check_shape(shape, "spec::generate_empirical");
  if (weights.empty() || static_cast<int>(weights.size()) > shape.window.max_depth()) {
    throw Error(Status::kInvalidArgument,
                "spec::generate_empirical: weights has " + std::to_string(weights.size()) +
                    " entries; it needs 1 to " + std::to_string(shape.window.max_depth()) +
                    " (one per accepted length of window " + shape.window.describe() + ")");
  }
  std::vector<double> cumulative;
  double total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] >= 0.0) || !std::isfinite(weights[i])) {
      throw Error(Status::kInvalidArgument, "spec::generate_empirical: weights[" +
                                                std::to_string(i) + "] = " + number(weights[i]) +
                                                " must be finite and >= 0");
    }
    total += weights[i];
    cumulative.push_back(total);
  }
  if (!(total > 0)) {
    throw Error(Status::kInvalidArgument, "spec::generate_empirical: every weight is zero");
  }
  if (!std::isfinite(total)) {
    // Every draw would land past the last finite partial sum: the last length, always.
    throw Error(Status::kInvalidArgument,
                "spec::generate_empirical: the weights sum to inf (each is finite): scale them "
                "down");
  }
  const auto by_depth = nodes_by_depth(shape.window);
  OrderedJson meta;
  meta["generator"] = "empirical";
  meta["weights"] = weights;
  return generate(shape, std::move(meta), [&](std::mt19937_64& rng) {
    const double u = uniform01(rng) * total;
    // First length whose cumulative weight exceeds u; zero-weight lengths are never chosen.
    std::size_t k = static_cast<std::size_t>(
        std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
    if (k >= cumulative.size()) k = cumulative.size() - 1;
    while (k > 0 && weights[k] == 0.0) --k;  // only after the clamp above
    const auto& nodes = by_depth[k + 1];
    const int pick = nodes.size() == 1 ? 0 : uniform_index(rng, static_cast<int>(nodes.size()));
    return shape.window.path_to(nodes[static_cast<std::size_t>(pick)]);
  });
}

}  // namespace specstate::spec
