// `plan` and `check_golden` of the command line as functions (examples/cli).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"

#ifdef SPECSTATE_PY_CLI
#include "cli/commands.h"
#include "cli/golden_case.h"
#endif

namespace specstate::py {

#ifdef SPECSTATE_PY_CLI
namespace {

// The most strings _cli_main's argv and check_golden's paths take (a command line's own limit is
// of this order).
constexpr Py_ssize_t kMaxCliArguments = Py_ssize_t{1} << 16;

// A string argument holding a NUL byte: the command line's C strings end there, so the rest
// would be dropped without a word ("tiny\0junk" ran "tiny"). ValueError naming the argument, the
// NUL kept as \x00.
void refuse_nul(const std::string& value, const std::string& name) {
  if (value.find('\0') != std::string::npos) {
    throw nb::value_error(
        (name + ": '" + escape_nul(value) + "' holds a NUL byte, which a command line cannot pass")
            .c_str());
  }
}

// `object`, a sequence of command-line strings (argv, check_golden's paths), as the bytes the
// command line takes: a str through os.fsencode (so that a name of no valid UTF-8, which Python
// holds with surrogate escapes, passes as its bytes, as the executable takes it: the surrogates
// made nanobind's str caster fail with "expected str, got str"), bytes as they are, and, where
// `paths`, any os.PathLike. TypeError naming `name[i]` otherwise.
std::vector<std::string> fs_strings(nb::handle object, const std::string& name, bool paths) {
  const nb::object items =
      sequence_items(object, name, kMaxCliArguments, paths ? "paths" : "str or bytes");
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::handle item(PyTuple_GET_ITEM(items.ptr(), i));
    const std::string arg = name + "[" + std::to_string(i) + "]";
    if (PyBytes_Check(item.ptr())) {
      out.emplace_back(PyBytes_AS_STRING(item.ptr()), PyBytes_GET_SIZE(item.ptr()));
    } else if (nb::isinstance<nb::str>(item) ||
               (paths && !item.is_none() && nb::hasattr(item, "__fspath__"))) {
      std::optional<std::string> bytes = as_path(item);
      if (!bytes) {
        throw nb::type_error(
            (arg + ": expected a str, bytes or os.PathLike, got " + arg_type_name(item)).c_str());
      }
      out.push_back(std::move(*bytes));
    } else {
      throw nb::type_error((arg + ": expected " +
                            (paths ? "a str, bytes or os.PathLike" : "a str or bytes") + ", got " +
                            arg_type_name(item))
                               .c_str());
    }
    refuse_nul(out.back(), arg);
  }
  return out;
}

}  // namespace
#endif

void bind_cli(nb::module_& m) {
#ifdef SPECSTATE_PY_CLI
  m.attr("HAS_CLI") = true;
  m.def(
      "_cli_main",
      [](nb::handle argv_arg) {
        std::vector<std::string> args = fs_strings(argv_arg, "_cli_main: argv", false);
        if (args.empty())
          throw nb::value_error("_cli_main: argv is empty (argv[0] is the program name)");
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        // The command's own output goes to this process's stdout / stderr, as the executable's.
        nb::gil_scoped_release release;
        return cli::run(static_cast<int>(args.size()), argv.data());
      },
      nb::sig("def _cli_main(argv: collections.abc.Sequence[str | bytes]) -> int"), nb::arg("argv"),
      "The `specstate` command line (argv[0] is the program name): returns its exit status.");
  m.def(
      "plan",
      [](const std::string& model, nb::handle tp_arg, nb::handle max_requests_arg,
         nb::handle max_rows_arg, nb::handle window_arg, const std::string& strategy) {
        // Named integers (a bool is no count; nanobind's int caster took True as 1 and named
        // nothing past int32).
        const int tp = to_integer<int>(tp_arg, "plan: tp");
        const int max_requests = to_integer<int>(max_requests_arg, "plan: max_requests");
        const int max_rows = to_integer<int>(max_rows_arg, "plan: max_rows");
        const int window = to_integer<int>(window_arg, "plan: window");
        refuse_nul(model, "plan: model");
        if (strategy != "snapshot" && strategy != "replay") {
          throw nb::value_error(
              ("plan: strategy = '" + escape_nul(strategy) + "', expected 'snapshot' or 'replay'")
                  .c_str());
        }
        std::vector<std::string> args = {"specstate",      "plan",
                                         "--model",        model,
                                         "--tp",           std::to_string(tp),
                                         "--max-requests", std::to_string(max_requests),
                                         "--window",       std::to_string(window),
                                         "--strategy",     strategy,
                                         "--json"};
        if (max_rows != 0) {  // 0: the default; anything else the command checks (and names)
          args.push_back("--max-rows");
          args.push_back(std::to_string(max_rows));
        }
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        std::string text;
        int code = 0;
        {
          // The document goes to this call's own stream: std::cout is the process's, written by
          // other threads (_cli_main runs without the GIL).
          std::ostringstream json;
          CLI::App app("specstate");
          app.require_subcommand(1);
          cli::add_plan_command(app, code, json);
          try {
            app.parse(static_cast<int>(argv.size()), argv.data());
          } catch (const CLI::ParseError& e) {
            throw nb::value_error(("plan: " + std::string(e.what())).c_str());
          }
          text = json.str();
        }
        if (code != 0) throw nb::value_error(("plan: exit status " + std::to_string(code)).c_str());
        return nb::module_::import_("json").attr("loads")(text);
      },
      nb::sig("def plan(*, model: str = 'qwen3-next-80b', tp: typing.SupportsIndex = 1, "
              "max_requests: typing.SupportsIndex = 64, max_rows: typing.SupportsIndex = 0, "
              "window: typing.SupportsIndex = 4, strategy: str = 'snapshot') -> "
              "dict[str, typing.Any]"),
      nb::kw_only(), nb::arg("model") = "qwen3-next-80b", nb::arg("tp") = 1,
      nb::arg("max_requests") = 64, nb::arg("max_rows") = 0, nb::arg("window") = 4,
      nb::arg("strategy") = "snapshot",
      "`specstate plan --json` for a model preset ('tiny', 'small', 'qwen3-next-80b', "
      "'nemotron-h-8b', 'nemotron-h-47b', 'nemotron-h-56b', 'kimi-linear-48b-a3b'), as a dict: "
      "the committed pool's memory and the strategy's workspace: strategy 'snapshot' (the "
      "default) the snapshot scratch, 'replay' the replay records with the rings compared "
      "('replay_rings', 'replay_ring', 'replay_fold_rows'). Defaults differ from the command's: "
      "model 'qwen3-next-80b' (the command's is 'small'). max_rows 0: max_requests.");
  m.def(
      "check_golden",
      [](nb::handle paths_arg, const std::string& backend) {
        const std::vector<std::string> paths = fs_strings(paths_arg, "check_golden: paths", true);
        if (backend != "cpu" && backend != "cuda") {
          throw nb::value_error(
              ("backend: '" + escape_nul(backend) + "', expected 'cpu' or 'cuda'").c_str());
        }
        cli::GoldenOptions options;
        options.backend = backend == "cuda" ? Backend::kCuda : Backend::kCpu;
        std::ostringstream out;
        int code = 0;
        {
          nb::gil_scoped_release release;
          // A backend that cannot run here raises NotSupportedError naming it (the command's
          // exit 2), not five failed cases.
          cli::require_backend(options.backend);
          code = cli::check_golden(paths, options, out);
        }
        // The report names the paths as given: bytes of no valid UTF-8 become U+FFFD (a str
        // conversion of them raised UnicodeDecodeError after the run), as in the simulator's
        // reports.
        const std::string report = out.str();
        nb::object text = nb::steal(
            PyUnicode_DecodeUTF8(report.data(), static_cast<Py_ssize_t>(report.size()), "replace"));
        if (!text.is_valid()) throw nb::python_error();
        return nb::make_tuple(code, text);
      },
      nb::sig("def check_golden(paths: collections.abc.Sequence[str | bytes | os.PathLike[str] | "
              "os.PathLike[bytes]], "
              "backend: str = 'cpu') -> "
              "tuple[int, str]"),
      nb::arg("paths"), nb::arg("backend") = "cpu",
      "`specstate check-golden`: runs the golden cases (files or folders) and returns "
      "(exit_code, report): 0 when every case passed, 1 otherwise. A backend that cannot run "
      "here (backend='cuda' without a usable device or CUDA backend) raises NotSupportedError "
      "naming it before any case runs.");
#else
  m.attr("HAS_CLI") = false;
#endif
}

}  // namespace specstate::py
