// `specstate`: the command line of the library (check-golden, simulate, plan).
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "specstate/specstate.h"

int main(int argc, char** argv) {
  CLI::App app{"specstate: recurrent state for speculative decoding"};
  app.set_version_flag("--version", specstate::version());
  app.require_subcommand(1);
  int exit_code = 0;
  specstate::cli::add_check_golden_command(app, exit_code);
  specstate::cli::add_simulate_command(app, exit_code);
  specstate::cli::add_plan_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // CLI11 returns 0 for --help/--version; every real parse error is a usage error: exit 2.
    return code == 0 ? 0 : 2;
  } catch (const specstate::Error& e) {
    std::cerr << "specstate: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "specstate: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
