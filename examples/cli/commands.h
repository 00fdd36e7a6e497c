// The subcommands of the `specstate` command line. Each registers itself on the app and returns
// the exit status through the callback: 0 success, 1 a check failed, 2 bad arguments.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>

namespace specstate::cli {

// specstate check-golden FILE... [--backend cpu|cuda] [--strategy snapshot|replay]
void add_check_golden_command(CLI::App& app, int& exit_code);
// specstate simulate ...
void add_simulate_command(CLI::App& app, int& exit_code);
// specstate plan ... (--json writes its document to `json_out`: the Python module's plan() passes
// its own stream rather than redirecting the process-wide std::cout, which other threads write)
void add_plan_command(CLI::App& app, int& exit_code, std::ostream& json_out = std::cout);

// The whole command line (examples/cli/run.cpp): parses argv[1..], runs the subcommand and
// returns the exit status (0, 1 a check failed or an error, 2 a usage error).
int run(int argc, char** argv);

}  // namespace specstate::cli
