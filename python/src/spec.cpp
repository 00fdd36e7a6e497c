// The protocol helpers of spec/ (namespace specstate::spec): windows, greedy acceptance, the
// verify batch builder and acceptance traces.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "specstate/spec/acceptance.h"
#include "specstate/spec/trace.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/spec/window.h"

namespace specstate::py {
namespace {

// The most Acceptance values BatchPlan.commit_values takes (one per live row; a pool's rows are
// far fewer).
constexpr Py_ssize_t kMaxRowsArgument = Py_ssize_t{1} << 20;

using spec::Acceptance;
using spec::BatchPlan;
using spec::Trace;
using spec::TraceRecord;
using spec::TraceShape;
using spec::VerifyBatchBuilder;
using spec::Window;

void check_len(const std::vector<int32_t>& v, std::size_t n, const char* name) {
  if (v.size() != n) {
    throw Error(Status::kInvalidArgument, std::string(name) + ": " + std::to_string(v.size()) +
                                              " entries, the window has " + std::to_string(n));
  }
}

}  // namespace

void bind_spec(nb::module_& m) {
  nb::class_<Window>(m, "Window",
                     "One row's verify window: a chain of T tokens or a draft tree (index 0 is "
                     "the root, every parent has a smaller index).")
      .def(nb::init<>(), "A chain of one token (the root alone).")
      .def_static(
          "chain",
          [](nb::handle length) {
            return Window::chain(to_integer<int>(length, "Window.chain: length"));
          },
          nb::sig("def chain(length: typing.SupportsIndex) -> Window"), nb::arg("length"),
          "A chain of `length` tokens (root + length-1 drafts).")
      .def_static(
          "from_parents",
          [](IntList parents) {
            return Window::from_parents(
                to_int_vector<int32_t>(parents, "Window.from_parents: parents"));
          },
          nb::arg("parents"), "A tree from parents[t] (parents[0] = -1, 0 <= parents[t] < t).")
      .def_static(
          "from_links",
          [](IntList first_child, IntList next_sibling) {
            return Window::from_links(
                to_int_vector<int32_t>(first_child, "Window.from_links: first_child"),
                to_int_vector<int32_t>(next_sibling, "Window.from_links: next_sibling"));
          },
          nb::arg("first_child"), nb::arg("next_sibling"),
          "A tree from EAGLE / SGLang first-child / next-sibling links.")
      .def("size", &Window::size, "T: nodes of the window.")
      .def("__len__", &Window::size)
      .def("is_chain", &Window::is_chain, "Whether the window is a chain.")
      .def("parents", &Window::parents, "parents[t] of every node (parents[0] = -1).")
      .def(
          "parent",
          [](const Window& w, nb::handle node) {
            return w.parent(to_integer<int>(node, "Window.parent: node"));
          },
          nb::sig("def parent(self, node: typing.SupportsIndex) -> int"), nb::arg("node"),
          "The parent of `node`.")
      .def(
          "children",
          [](const Window& w, nb::handle node) {
            return w.children(to_integer<int>(node, "Window.children: node"));
          },
          nb::sig("def children(self, node: typing.SupportsIndex) -> list[int]"), nb::arg("node"),
          "Children of `node`, ascending.")
      .def(
          "path_to",
          [](const Window& w, nb::handle node) {
            return w.path_to(to_integer<int>(node, "Window.path_to: node"));
          },
          nb::sig("def path_to(self, node: typing.SupportsIndex) -> list[int]"), nb::arg("node"),
          "Nodes root..node.")
      .def(
          "depth",
          [](const Window& w, nb::handle node) {
            return w.depth(to_integer<int>(node, "Window.depth: node"));
          },
          nb::sig("def depth(self, node: typing.SupportsIndex) -> int"), nb::arg("node"),
          "Nodes on the path root..node.")
      .def("max_depth", &Window::max_depth, "The most tokens one round can accept.")
      .def(
          "to_links",
          [](const Window& w) {
            std::vector<int32_t> first_child, next_sibling;
            w.to_links(first_child, next_sibling);
            return nb::make_tuple(first_child, next_sibling);
          },
          nb::sig("def to_links(self) -> tuple[list[int], list[int]]"),
          "(first_child, next_sibling) links of this window.")
      .def("describe", &Window::describe, "'chain(4)' or 'tree[-1,0,0,1]'.")
      .def("__repr__", [](const Window& w) { return "Window." + w.describe(); })
      .def(
          "__eq__", [](const Window& a, const Window& b) { return a == b; },
          nb::sig("def __eq__(self, other: object, /) -> bool"), nb::is_operator())
      .def(
          "__ne__", [](const Window& a, const Window& b) { return a != b; },
          nb::sig("def __ne__(self, other: object, /) -> bool"), nb::is_operator())
      // Equal windows (the same parents) hash equally: windows key dicts and sets by value.
      .def("__hash__", [](const Window& w) {
        std::size_t h = 0x9E3779B97F4A7C15ull;
        for (const int32_t p : w.parents()) h = (h ^ static_cast<uint32_t>(p)) * 0x100000001B3ull;
        return static_cast<nb::ssize_t>(h >> 1);
      });
  m.def(
      "check_path",
      [](const Window& window, IntList path, const std::string& what) {
        // `what` labels the message: a NUL in it would end it there (spec::check_path takes a
        // C string).
        const std::string label = escape_nul(what);
        spec::check_path(window, to_int_vector<int32_t>(path, "check_path: " + label),
                         label.c_str());
      },
      nb::arg("window"), nb::arg("path"), nb::arg("what") = "path",
      "Raises InvalidArgumentError unless `path` is a root-to-node path of `window` (empty "
      "is allowed).");

  nb::class_<Acceptance>(m, "Acceptance",
                         "One row's greedy acceptance: the accepted window indices root..last "
                         "and the bonus token.")
      .def(nb::init<>())
      .def_prop_rw(
          "path", [](const Acceptance& a) { return a.path; },
          [](Acceptance& a, IntList v) { a.path = to_int_vector<int32_t>(v, "Acceptance.path"); },
          "Accepted window indices, root first.")
      .def_prop_rw("bonus_token", field_getter(&Acceptance::bonus_token),
                   int_setter(&Acceptance::bonus_token, "Acceptance.bonus_token"),
                   nb::arg("value").none(), value_sig("bonus_token", "typing.SupportsIndex"),
                   "target[last accepted node].")
      .def("accepted_length", &Acceptance::accepted_length, "len(path).")
      .def("last_node", &Acceptance::last_node, "path[-1] (-1 when empty).")
      .def("commit_value", &Acceptance::commit_value, nb::arg("tree"),
           "What StatePool.commit takes for this row: the accepted length (chain) or the last "
           "node (tree).")
      .def(
          "emitted",
          [](const Acceptance& a, IntList tokens) {
            return a.emitted(to_int_vector<int32_t>(tokens, "Acceptance.emitted: tokens"));
          },
          nb::arg("tokens"), "Tokens the round emits: tokens[path[1:]] then the bonus token.")
      .def("__repr__", [](const Acceptance& a) {
        std::string s = "Acceptance(path=[";
        for (std::size_t i = 0; i < a.path.size(); ++i)
          s += (i ? ", " : "") + std::to_string(a.path[i]);
        return s + "], bonus_token=" + std::to_string(a.bonus_token) + ")";
      });

  m.def(
      "accept_greedy_chain",
      [](IntList tokens, IntList target) {
        return spec::accept_greedy_chain(
            to_int_vector<int32_t>(tokens, "accept_greedy_chain: tokens"),
            to_int_vector<int32_t>(target, "accept_greedy_chain: target"));
      },
      nb::arg("tokens"), nb::arg("target"),
      "Chain acceptance: a = 1 + the longest prefix of drafts with tokens[t] == target[t-1]; "
      "target[t] is the target's argmax after token t.");
  m.def(
      "accept_greedy_tree",
      [](const Window& w, IntList tokens, IntList target) {
        return spec::accept_greedy_tree(
            w, to_int_vector<int32_t>(tokens, "accept_greedy_tree: tokens"),
            to_int_vector<int32_t>(target, "accept_greedy_tree: target"));
      },
      nb::arg("window"), nb::arg("tokens"), nb::arg("target"),
      "Tree acceptance: from the root, step to the first child whose token equals the target's "
      "argmax at the current node.");
  m.def(
      "accept_greedy",
      [](const Window& w, IntList tokens_arg, IntList target_arg) {
        const std::vector<int32_t> tokens = to_int_vector<int32_t>(tokens_arg, "tokens");
        const std::vector<int32_t> target = to_int_vector<int32_t>(target_arg, "target");
        check_len(tokens, static_cast<std::size_t>(w.size()), "tokens");
        check_len(target, static_cast<std::size_t>(w.size()), "target");
        return spec::accept_greedy(w, tokens.data(), target.data());
      },
      nb::arg("window"), nb::arg("tokens"), nb::arg("target"),
      "Chain or tree acceptance, chosen by window.is_chain().");

  nb::class_<BatchPlan>(m, "BatchPlan", "One round's batch as built by VerifyBatchBuilder.")
      // Read-only copies: the methods below index with these fields (a BatchPlan is what
      // build() made of one round; build another to change it).
      .def_prop_ro(
          "batch", [](const BatchPlan& p) { return p.batch; },
          "What StatePool.begin_verify takes (a copy).")
      .def_ro("live_rows", &BatchPlan::live_rows, "Rows added (the rest are padding).")
      .def_prop_ro(
          "windows", [](const BatchPlan& p) { return p.windows; },
          "The window each row really has (copies).")
      .def_prop_ro(
          "token_offsets", [](const BatchPlan& p) { return p.token_offsets; },
          "[rows+1] cu_seqlens (padded: r*T; variable: cumulative row lengths).")
      .def("rows", &BatchPlan::rows, "Rows, padding included.")
      .def("window", &BatchPlan::window, "T.")
      .def("num_tokens", &BatchPlan::num_tokens, "Tokens of a layer's verify inputs.")
      .def("is_tree", &BatchPlan::is_tree, "Whether the batch has a tree.")
      .def(
          "commit_values",
          [](const BatchPlan& p, nb::handle accepted) {
            return p.commit_values(to_object_vector<Acceptance>(
                accepted, "BatchPlan.commit_values: accepted", kMaxRowsArgument, "Acceptance"));
          },
          nb::sig("def commit_values(self, accepted: collections.abc.Sequence[Acceptance]) -> "
                  "list[int]"),
          nb::arg("accepted"), "StatePool.commit's list from one Acceptance per live row.")
      .def(
          "commit_lengths",
          [](const BatchPlan& p, IntList lengths) {
            return p.commit_lengths(
                to_int_vector<int32_t>(lengths, "BatchPlan.commit_lengths: accepted_lengths"));
          },
          nb::arg("accepted_lengths"),
          "StatePool.commit's list from accepted lengths (chains; 0 = keep).")
      .def(
          "accept_greedy",
          [](const BatchPlan& p, IntList tokens, IntList target) {
            return p.accept_greedy(
                to_int_vector<int32_t>(tokens, "BatchPlan.accept_greedy: tokens"),
                to_int_vector<int32_t>(target, "BatchPlan.accept_greedy: target"));
          },
          nb::arg("tokens"), nb::arg("target"),
          "Greedy acceptance of every live row from [num_tokens] tokens and target argmax.");

  nb::enum_<spec::Packing>(m, "Packing", "How a batch's tokens are laid out.")
      .value("PADDED", spec::Packing::kPadded, "Every row at r*T, filler up to T.")
      .value("VARIABLE", spec::Packing::kVariable,
             "Each row's own tokens packed by cumulative offsets (batch.lengths), no filler.");

  nb::class_<VerifyBatchBuilder>(m, "VerifyBatchBuilder",
                                 "Builds a round's batch: requests -> rows, the shared T, trees, "
                                 "padding up to a CUDA-graph bucket.")
      .def(
          "__init__",
          [](VerifyBatchBuilder* self, IntList buckets, spec::Packing packing) {
            std::vector<int> b = to_int_vector<int>(buckets, "VerifyBatchBuilder: buckets");
            new (self) VerifyBatchBuilder(std::move(b), packing);
          },
          nb::arg("buckets") = nb::tuple(), nb::arg("packing").noconvert() = spec::Packing::kPadded,
          "buckets: the batch sizes CUDA graphs were captured for (empty: no padding); "
          "packing: Packing.PADDED or Packing.VARIABLE.")
      .def_static(
          "power_of_two_buckets",
          [](nb::handle max_rows) {
            return VerifyBatchBuilder::power_of_two_buckets(
                to_integer<int>(max_rows, "VerifyBatchBuilder.power_of_two_buckets: max_rows"));
          },
          nb::sig("def power_of_two_buckets(max_rows: typing.SupportsIndex) -> list[int]"),
          nb::arg("max_rows"), "1, 2, 4, ... up to and including max_rows.")
      .def(
          "add",
          [](VerifyBatchBuilder& b, nb::handle handle, nb::handle window) {
            const SlotHandle h = *to_handle(handle, "VerifyBatchBuilder.add: handle", false);
            return b.add(h,
                         to_object<Window>(window, "VerifyBatchBuilder.add: window", "a Window"));
          },
          nb::arg("handle"), nb::arg("window"),
          nb::sig("def add(self, handle: SlotHandle, window: Window) -> int"),
          "Adds a live row; returns its row index.")
      .def("clear", &VerifyBatchBuilder::clear, "Removes every row.")
      .def("size", &VerifyBatchBuilder::size, "Rows added.")
      .def("buckets", &VerifyBatchBuilder::buckets, "The buckets.")
      .def("build", &VerifyBatchBuilder::build, "The BatchPlan.");

  nb::class_<TraceRecord>(m, "TraceRecord", "One round of one request in a trace.")
      .def(nb::init<>())
      .def_prop_rw("request", field_getter(&TraceRecord::request),
                   int_setter(&TraceRecord::request, "TraceRecord.request"),
                   nb::arg("value").none(), value_sig("request", "typing.SupportsIndex"),
                   "Request id.")
      .def_prop_rw("round", field_getter(&TraceRecord::round),
                   int_setter(&TraceRecord::round, "TraceRecord.round"), nb::arg("value").none(),
                   value_sig("round", "typing.SupportsIndex"), "Round index.")
      .def_prop_rw("window", field_getter(&TraceRecord::window),
                   object_setter(&TraceRecord::window, "TraceRecord.window", "a Window"),
                   nb::arg("value").none(), value_sig("window", "Window"),
                   "The round's window (a copy: assign a Window to change it).")
      .def_prop_rw(
          "path", [](const TraceRecord& r) { return r.path; },
          [](TraceRecord& r, IntList v) { r.path = to_int_vector<int32_t>(v, "TraceRecord.path"); },
          "Accepted indices, root first (empty: a = 0).")
      .def("accepted_length", &TraceRecord::accepted_length, "len(path).")
      .def("commit_value", &TraceRecord::commit_value, nb::arg("tree"),
           "What StatePool.commit takes.");

  nb::class_<Trace>(m, "Trace", "An acceptance trace (docs/traces.md).")
      .def(nb::init<>())
      // Copies in and out (a list element is not a view into the trace: assign a new list to
      // change the field; specstate.CopiedList refuses in-place edits).
      .def_prop_rw(
          "requests", [](const Trace& t) { return t.requests; },
          [](Trace& t, IntList v) { t.requests = to_int_vector<int64_t>(v, "Trace.requests"); },
          "Declared request ids (a copy).")
      .def_prop_rw(
          "records", [](const Trace& t) { return t.records; },
          [](Trace& t, nb::handle v) {
            t.records = to_object_vector<TraceRecord>(v, "Trace.records", spec::kMaxTraceRecords,
                                                      "TraceRecord");
          },
          "Records in file order (copies).")
      .def_prop_rw("meta_json", field_getter(&Trace::meta_json),
                   object_setter(&Trace::meta_json, "Trace.meta_json", "a str"),
                   nb::arg("value").none(), value_sig("meta_json", "str"),
                   "The header's 'meta' object (JSON text).")
      .def("num_rounds", &Trace::num_rounds, "1 + the largest round index.")
      .def("max_window", &Trace::max_window, "Largest window of any record.")
      .def(
          "round",
          [](const Trace& t, nb::handle round) {
            std::vector<TraceRecord> out;
            for (const TraceRecord* rec : t.round(to_integer<int64_t>(round, "Trace.round: round")))
              out.push_back(*rec);
            return out;
          },
          nb::arg("round"), "Copies of the records of round `round`.")
      .def("accepted_histogram", &Trace::accepted_histogram,
           "histogram[a] = records that accepted a tokens.")
      .def("mean_accepted_length", &Trace::mean_accepted_length, "Mean accepted length.");

  m.def(
      "parse_trace",
      [](const std::string& text, const std::string& source) {
        // (text and source are copies: the parse runs without the GIL.)
        nb::gil_scoped_release release;
        std::istringstream in(text);
        return spec::parse_trace(in, source);
      },
      nb::arg("text"), nb::arg("source") = "<trace>",
      "Parses a trace from JSON Lines text; InvalidArgumentError names '<source>:<line>'.");
  m.def(
      "read_trace",
      [](nb::handle path) {
        const std::string p = path_arg(path, "read_trace");
        // Without the GIL: a FIFO (or a slow file system) blocks the read until its writer
        // comes, and the writer may be another Python thread.
        nb::gil_scoped_release release;
        return spec::read_trace(p);
      },
      nb::sig("def read_trace(path: str | os.PathLike[str]) -> Trace"), nb::arg("path"),
      "Reads a trace file (a str or os.PathLike; a FIFO waits for its writer).");
  // The bounds of spec/trace.h, window.h and verify_batch.h (docs/traces.md).
  m.attr("MAX_TRACE_WINDOW") = spec::kMaxTraceWindow;
  m.attr("MAX_TRACE_LINE_BYTES") = spec::kMaxTraceLineBytes;
  m.attr("MAX_TRACE_RECORDS") = spec::kMaxTraceRecords;
  m.attr("MAX_TRACE_NODES") = spec::kMaxTraceNodes;
  m.attr("MAX_TRACE_OBJECT_KEYS") = spec::kMaxTraceObjectKeys;
  m.attr("MAX_WINDOW_NODES") = spec::kMaxWindowNodes;
  m.attr("MAX_BATCH_ROWS") = spec::kMaxBatchRows;
  m.attr("MAX_BATCH_TOKENS") = spec::kMaxBatchTokens;
  m.def(
      "write_trace",
      [](const Trace& t) {
        const Trace copy = t;  // another thread may assign the trace's fields meanwhile
        std::string text;
        {
          nb::gil_scoped_release release;
          std::ostringstream out;
          spec::write_trace(out, copy);
          text = out.str();
        }
        return text;
      },
      nb::arg("trace"), "The trace as JSON Lines text (validated first).");
  m.def(
      "write_trace_file",
      [](nb::handle path, const Trace& trace) {
        const std::string p = path_arg(path, "write_trace_file");
        const Trace copy = trace;  // another thread may assign the trace's fields meanwhile
        // Without the GIL: a FIFO blocks the write until its reader comes, and the reader may be
        // another Python thread (read_trace's reason).
        nb::gil_scoped_release release;
        spec::write_trace_file(p, copy);
      },
      nb::sig("def write_trace_file(path: str | os.PathLike[str], trace: Trace) -> None"),
      nb::arg("path"), nb::arg("trace"),
      "Writes a trace file (a str or os.PathLike; validated first, replaced only once complete).");
  m.def("validate_trace", &spec::validate_trace, nb::arg("trace"),
        "Raises InvalidArgumentError naming the first bad record.");

  nb::class_<TraceShape>(m, "TraceShape", "Shape of a generated trace.")
      .def(
          "__init__",
          [](TraceShape* self, nb::handle requests, nb::handle rounds, const Window& window,
             nb::handle seed) {
            new (self) TraceShape{to_integer<int>(requests, "TraceShape.requests"),
                                  to_integer<int>(rounds, "TraceShape.rounds"), window,
                                  to_integer<uint64_t>(seed, "TraceShape.seed")};
          },
          nb::sig("def __init__(self, *, requests: typing.SupportsIndex = 1, rounds: "
                  "typing.SupportsIndex = 1, window: Window = ..., seed: typing.SupportsIndex = 0) "
                  "-> None"),
          nb::kw_only(), nb::arg("requests").none() = 1, nb::arg("rounds").none() = 1,
          nb::arg("window") = Window::chain(4), nb::arg("seed").none() = 0,
          "Keyword arguments set the fields.")
      .def_prop_rw("requests", field_getter(&TraceShape::requests),
                   int_setter(&TraceShape::requests, "TraceShape.requests"),
                   nb::arg("value").none(), value_sig("requests", "typing.SupportsIndex"),
                   "Requests 0 .. requests-1.")
      .def_prop_rw("rounds", field_getter(&TraceShape::rounds),
                   int_setter(&TraceShape::rounds, "TraceShape.rounds"), nb::arg("value").none(),
                   value_sig("rounds", "typing.SupportsIndex"), "Rounds per request.")
      .def_prop_rw("window", field_getter(&TraceShape::window),
                   object_setter(&TraceShape::window, "TraceShape.window", "a Window"),
                   nb::arg("value").none(), value_sig("window", "Window"),
                   "Window of every round (a copy: assign a Window to change it).")
      .def_prop_rw("seed", field_getter(&TraceShape::seed),
                   int_setter(&TraceShape::seed, "TraceShape.seed"), nb::arg("value").none(),
                   value_sig("seed", "typing.SupportsIndex"), "std::mt19937_64 seed.");
  m.def(
      "generate_fixed",
      [](const TraceShape& shape, nb::handle accepted_length) {
        const int a = to_integer<int>(accepted_length, "generate_fixed: accepted_length");
        const TraceShape copy = shape;
        nb::gil_scoped_release release;  // (8M records: seconds)
        return spec::generate_fixed(copy, a);
      },
      nb::sig(
          "def generate_fixed(shape: TraceShape, accepted_length: typing.SupportsIndex) -> Trace"),
      nb::arg("shape"), nb::arg("accepted_length").none(),
      "Every round accepts `accepted_length` tokens.");
  m.def(
      "generate_geometric",
      [](const TraceShape& shape, nb::handle alpha) {
        const double p = to_double(alpha, "generate_geometric: alpha");
        const TraceShape copy = shape;
        nb::gil_scoped_release release;
        return spec::generate_geometric(copy, p);
      },
      nb::sig("def generate_geometric(shape: TraceShape, alpha: typing.SupportsFloat | "
              "typing.SupportsIndex) -> Trace"),
      nb::arg("shape"), nb::arg("alpha"),
      "Each draft accepted with probability alpha given its parent was.");
  m.def(
      "generate_empirical",
      [](const TraceShape& shape, FloatList weights) {
        const std::vector<double> w = to_float_vector(weights, "generate_empirical: weights");
        const TraceShape copy = shape;
        nb::gil_scoped_release release;
        return spec::generate_empirical(copy, w);
      },
      nb::arg("shape"), nb::arg("weights"), "Accepted lengths drawn from weights[a-1].");
}

}  // namespace specstate::py
