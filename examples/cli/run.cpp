// The `specstate` command line as a function: the executable's main (examples/cli/main.cpp) and
// the Python package's console script (`specstate`, python/specstate/__main__.py) both call it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/commands.h"
#include "specstate/specstate.h"

namespace specstate::cli {

int run(int argc, char** argv) {
  // One process may run several commands (the Python package's console script, `_cli_main`): a
  // write failure of an earlier one must not fail, or silence, this one.
  std::cout.clear();
  std::clearerr(stdout);
  CLI::App app{"specstate: recurrent state for speculative decoding"};
  app.set_version_flag("--version", specstate::version());
  app.require_subcommand(1);
  int exit_code = 0;
  add_check_golden_command(app, exit_code);
  add_simulate_command(app, exit_code);
  add_plan_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      // CLI11 says only "A subcommand is required", also for a mistyped command word: name it
      // and the commands there are.
      std::string commands;
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        commands += (commands.empty() ? "" : ", ") + sub->get_name();
      // The first argument says what went wrong: a word is a mistyped command; an option
      // (the top level takes only --help and --version) or `--` came before any command.
      if (argc > 1) {
        const std::string first = argv[1];
        if (first[0] != '-') {
          std::cerr << "specstate: unknown command '" << first << "' (the commands: " << commands
                    << ")\nRun with --help for more information.\n";
        } else {
          std::cerr << "specstate: '" << first << "' before the command: the command comes first ("
                    << commands << "), then its options\nRun with --help for more information.\n";
        }
        return 2;
      }
      std::cerr << "specstate: a command is required (" << commands
                << ")\nRun with --help for more information.\n";
      return 2;
    }
    const int code = app.exit(e);
    // CLI11 returns 0 for --help/--version; every real parse error is a usage error: exit 2.
    return code == 0 ? 0 : 2;
  } catch (const specstate::Error& e) {
    std::cerr << "specstate: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    // The simulator's own buffers (inputs and outputs of every request's window) are the
    // machine's memory to give; the pool checks its own up front.
    std::cerr << "specstate: out of memory (the run's buffers; fewer --requests, a smaller "
                 "--window or model)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "specstate: " << e.what() << "\n";
    return 1;
  }
  // What the command printed must have reached its destination: `plan --json > plan.json` on a
  // full disk (or a closed pipe) left an empty file and exited 0.
  errno = 0;
  std::cout.flush();
  const bool flushed = static_cast<bool>(std::cout) && std::fflush(stdout) == 0;
  const int err = errno;
  if (!flushed || std::ferror(stdout)) {
    std::cerr << "specstate: writing standard output failed"
              << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
    return exit_code != 0 ? exit_code : 1;
  }
  return exit_code;
}

}  // namespace specstate::cli
