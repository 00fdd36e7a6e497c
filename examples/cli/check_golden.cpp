// `specstate check-golden FILE... [--backend cpu|cuda] [--strategy snapshot|replay]`: replays the
// golden verify + commit cases (tests/data/golden, docs/golden.md) through the public API and
// compares with SGLang and float64. The work is in golden_case.cpp, which the tests call directly.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/golden_case.h"
#include "specstate/specstate.h"

namespace specstate::cli {

void add_check_golden_command(CLI::App& app, int& exit_code) {
  struct Args {
    std::vector<std::string> files;
    std::string backend = "cpu";
    std::string strategy = "snapshot";
  };
  auto args = std::make_shared<Args>();
  CLI::App* command = app.add_subcommand(
      "check-golden",
      "Run the golden verify+commit cases of every layer kind (safetensors, parts grouped by "
      "their 'case' metadata; a folder stands for its *.safetensors files) and compare with the "
      "third party (SGLang; fla for KDA) and the float64 reference. Exit 0 when every case "
      "passes, 1 otherwise, 2 for a bad argument (--backend cuda with no usable device).");
  command->add_option("FILE", args->files, "golden case files or folders")
      ->required()
      ->check(CLI::ExistingPath);
  command->add_option("--backend", args->backend, "backend of the state pool (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  command
      ->add_option("--strategy", args->strategy,
                   "strategy of the state pool (default snapshot); replay keeps no intermediate "
                   "snapshots, so those comparisons are n/a and its outputs and commits are also "
                   "checked bit for bit against a snapshot run")
      ->check(CLI::IsMember({"snapshot", "replay"}));
  command->callback([args, &exit_code] {
    GoldenOptions options;
    options.backend = args->backend == "cuda" ? Backend::kCuda : Backend::kCpu;
    options.strategy = args->strategy == "replay" ? Strategy::kReplay : Strategy::kSnapshot;
    // A backend that cannot run is a bad argument (exit 2, as simulate's), not a failed
    // conformance check of every case (exit 1).
    try {
      require_backend(options.backend);
    } catch (const Error& e) {
      if (e.status() == Status::kNotSupported) throw CLI::ValidationError("--backend", e.what());
      throw;
    }
    exit_code = check_golden(args->files, options, std::cout);
  });
}

}  // namespace specstate::cli
