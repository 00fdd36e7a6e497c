// Runs the `specstate` binary through the shell and captures its exit code and output (stdout
// and stderr), for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace specstate::test {

struct CliRun {
  int code = -1;
  std::string output;  // stdout and stderr
};

inline CliRun run_command(const std::string& binary, const std::string& args) {
  CliRun run;
  const std::string command = "'" + binary + "' " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace specstate::test
