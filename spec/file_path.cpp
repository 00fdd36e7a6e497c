#include "specstate/spec/file_path.h"

namespace specstate::spec {

std::string path_nul_problem(const char* name, const std::string& path) {
  const std::size_t nul = path.find('\0');
  if (nul == std::string::npos) return {};
  std::string shown;
  for (char c : path) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return std::string(name) + " = '" + shown + "' holds a NUL byte (at " + std::to_string(nul) +
         "): no file has that name";
}

}  // namespace specstate::spec
