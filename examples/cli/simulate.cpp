// `specstate simulate`: replays an acceptance trace through a StatePool with synthetic weights
// and inputs, and reports what verify and commit cost per round (docs/simulate.md).
//
//   specstate simulate                                  # small preset, CPU, alpha = 0.7
//   specstate simulate --model qwen3-next-80b --tp 1 --requests 2 --rounds 8 --window 4
//   specstate simulate --trace trace.jsonl --out report.json   # + report.svg beside it
#include "cli/simulate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifdef SPECSTATE_CLI_CUDA
#include <cuda_runtime.h>
#endif

#include "cli/commands.h"
#include "cli/sim_helpers.h"
#include "cli_checks.h"
#include "specstate/spec/file_path.h"
#include "specstate/spec/trace.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/specstate.h"

namespace specstate::cli {

using Json = nlohmann::ordered_json;

namespace {

// CLI11's Range passes NaN (every comparison with it is false): reject non-finite numbers first.
CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
          return "'" + text + "' is not a finite number";
        }
        return "";
      },
      "FINITE");
}

// A value that names something: `--out ""` wrote no report, `--save-trace ""` no trace,
// `--histogram ""` and `--tree ""` fell back to the geometric generator and chain(4), all with
// exit 0 (`--trace ""` failed ExistingFile).
CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "an empty value names nothing" : "";
      },
      "NONEMPTY");
}

// A file of the report written but not yet in place (spec::ReplacingFile): a regular file (or a
// new one) is written to a temporary file beside it and renamed over it only once every file of
// the report is complete (write_report_files), so a write that fails (a full disk, a file size
// limit) leaves the old report and plots as they were; anything else (/dev/stdout, /dev/full) is
// written in place. Throws naming the option and the file; a temporary written is removed when
// the file is dropped.
// `earlier_in_place`: a file staged before this one was written in place (the message then
// cannot say that no file of the report changed).
std::unique_ptr<spec::ReplacingFile> stage_file(const std::string& path, const std::string& text,
                                                const char* option, bool earlier_in_place) {
  auto file = std::make_unique<spec::ReplacingFile>(path);
  if (!file->ok()) {
    throw CLI::ValidationError(option, "cannot write " + path + ": " + file->error());
  }
  const bool written = spec::write_all(file->fd(), text.data(), text.size());
  const std::string failed = file->finish(written, written ? 0 : errno);
  if (!failed.empty()) {
    // failed: "writing failed[: <reason>]" (finish's wording), quoted here with the path.
    const std::string prefix = "writing failed";
    const std::string reason =
        failed.rfind(prefix, 0) == 0 ? failed.substr(prefix.size()) : ": " + failed;
    throw Error(
        Status::kInvalidArgument,
        std::string(option) + ": writing " + path + " failed" + reason +
            (file->in_place() || earlier_in_place ? " (written in place: the report is incomplete)"
                                                  : " (no file of the report was changed)"));
  }
  return file;
}

// Writes every (path, text) of the report (stage_file), then renames them into place: a failure
// before the renames changes no file of the report.
void write_report_files(const std::vector<std::pair<std::string, std::string>>& files,
                        const char* option) {
  std::vector<std::unique_ptr<spec::ReplacingFile>> staged;
  bool in_place = false;
  for (const auto& [path, text] : files) {
    staged.push_back(stage_file(path, text, option, in_place));
    in_place = in_place || staged.back()->in_place();
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    const std::string failed = staged[i]->replace();
    if (!failed.empty()) {
      throw Error(Status::kInvalidArgument, std::string(option) + ": renaming the written " +
                                                files[i].first + " into place failed: " + failed);
    }
  }
}

}  // namespace

void add_simulate_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SimulateOptions>();
  auto quiet = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay an acceptance trace through the state pool and time verify/commit");
  add_model_options(cmd, o->model, o->model_file, o->tp, o->dims);
  auto* trace = cmd->add_option("--trace", o->trace_path,
                                "Replay this acceptance trace (JSON Lines, docs/traces.md)")
                    ->check(CLI::ExistingFile);
  const std::string limits =
      " (generated trace; requests x rounds <= " + with_commas(kMaxGeneratedRecords) +
      ", x window tokens <= " + with_commas(kMaxGeneratedNodes) + ")";
  auto* requests = cmd->add_option("--requests", o->requests, "Requests" + limits)
                       ->transform(specstate::examples::decimal())
                       ->check(CLI::Range(1, kMaxRequests))
                       ->capture_default_str();
  auto* rounds = cmd->add_option("--rounds", o->rounds, "Rounds" + limits)
                     ->transform(specstate::examples::decimal())
                     ->check(CLI::Range(1, kMaxRounds))
                     ->capture_default_str();
  auto* window = cmd->add_option("--window", o->window, "Window T: tokens verified per round")
                     ->transform(specstate::examples::decimal())
                     ->check(CLI::Range(1, spec::kMaxTraceWindow))
                     ->capture_default_str();
  auto* tree = cmd->add_option("--tree", o->tree,
                               "Tree window as parents, e.g. --tree=-1,0,0,1 (instead of --window)")
                   ->check(non_empty());
  auto* rate = cmd->add_option("--accept-rate", o->accept_rate,
                               "Per-draft acceptance probability alpha (geometric generator)")
                   ->check(finite_number())
                   ->check(CLI::Range(0.0, 1.0))
                   ->capture_default_str();
  auto* fixed = cmd->add_option("--fixed", o->fixed, "Every round accepts exactly this many tokens")
                    ->transform(specstate::examples::decimal())
                    ->check(CLI::Range(1, spec::kMaxTraceWindow));
  auto* histogram =
      cmd->add_option(
             "--histogram", o->histogram,
             "Empirical generator: weights of accepted lengths 1, 2, ..., e.g. 0.3,0.2,0.5")
          ->check(non_empty());
  cmd->add_option("--save-trace", o->save_trace,
                  "Write the replayed trace to FILE (JSON Lines, docs/traces.md)")
      ->check(non_empty());
  cmd->add_option("--backend", o->backend, "cpu or cuda (cuda only where built)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--strategy", o->strategy,
                  "snapshot, replay, or both (the same trace through each, side by side)")
      ->check(CLI::IsMember({"snapshot", "replay", "both"}))
      ->capture_default_str();
  cmd->add_option("--packing", o->packing,
                  "padded (every row at r*T, filler up to the round's largest window) or "
                  "variable (each row's own tokens, no filler)")
      ->check(CLI::IsMember({"padded", "variable"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the generator and the synthetic weights")
      ->transform(specstate::examples::unsigned_64())
      ->capture_default_str();
  cmd->add_flag("--check", o->check,
                "Also replay the accepted tokens through prefill on a CPU pool and compare each "
                "strategy's committed states; with --strategy both also the two strategies' "
                "outputs and committed states, bit for bit (exit 1 on mismatch)");
  cmd->add_option("--warmup", o->warmup,
                  "Untimed rounds first (verify, then commit with a = 0, which keeps the state)")
      ->transform(specstate::examples::decimal())
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Write the JSON report to FILE and the plots beside it (FILE without its "
                  "extension + .svg)")
      ->check(non_empty());
  cmd->add_flag("--quiet", *quiet, "No progress bar");
  for (auto* opt : {requests, rounds, window, tree, rate, fixed, histogram}) trace->excludes(opt);
  tree->excludes(window);
  rate->excludes(fixed);
  histogram->excludes(rate);
  histogram->excludes(fixed);
  cmd->callback([o, quiet, &exit_code] {
    // Before anything runs: a bad --out or --save-trace is a usage error (exit 2) naming the
    // option, and so are files that would overwrite each other (the report by its plots, a
    // saved trace or the replayed one by the report).
    if (!o->out.empty()) {
      check_writable(o->out, "--out");
      check_writable(svg_path_for(o->out), "--out");
      if (same_file(o->out, svg_path_for(o->out))) {
        throw CLI::ValidationError("--out", "--out " + o->out +
                                                ": the plots go to FILE.svg beside the report; "
                                                "name the report otherwise (e.g. .json)");
      }
      for (const auto& [other, name] :
           {std::pair{o->save_trace, "--save-trace"}, std::pair{o->trace_path, "--trace"},
            std::pair{o->model_file, "--model-file"}}) {
        if (!other.empty() &&
            (same_file(other, o->out) || same_file(other, svg_path_for(o->out)))) {
          throw CLI::ValidationError("--out", std::string("--out ") + o->out + " (report " +
                                                  o->out + ", plots " + svg_path_for(o->out) +
                                                  ") would overwrite " + name + " " + other);
        }
      }
    }
    if (!o->save_trace.empty()) {
      check_writable(o->save_trace, "--save-trace");
      // The saved trace would replace the model file the run read (a trace saved over the one
      // replayed is the same trace, read before: allowed).
      if (!o->model_file.empty() && same_file(o->model_file, o->save_trace)) {
        throw CLI::ValidationError(
            "--save-trace",
            "--save-trace " + o->save_trace + " would overwrite --model-file " + o->model_file);
      }
    }
    const bool tty = !*quiet && isatty(fileno(stderr)) != 0;
    const Json report = run_simulation(*o, tty ? &std::cerr : nullptr);
    print_summary(report, std::cout);
    if (!o->out.empty()) {
      const std::string svg_path = svg_path_for(o->out);
      // Bytes that are no UTF-8 (a file name's) are replaced in the report: nlohmann's dump
      // threw on them, naming no option, after the whole run.
      write_report_files(
          {{o->out, report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"},
           {svg_path, render_svg(report)}},
          "--out");
      std::cout << "  report: " << o->out << ", plots: " << svg_path << "\n";
    }
    exit_code =
        report["check"]["ran"].get<bool>() && !report["check"]["passed"].get<bool>() ? 1 : 0;
  });
}

}  // namespace specstate::cli
