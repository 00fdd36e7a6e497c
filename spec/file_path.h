// File name arguments: a name with a NUL byte names another file (the system reads it up to the
// NUL), so every function that opens a file by name refuses one. Shared by the trace files and
// the library's slot and safetensors files.
#pragma once

#include <string>

namespace specstate::spec {

// "name = '<path, NULs shown as \0>' holds a NUL byte (at i): no file has that name", or an
// empty string when `path` has no NUL byte.
std::string path_nul_problem(const char* name, const std::string& path);

}  // namespace specstate::spec
