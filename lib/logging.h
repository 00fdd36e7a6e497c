// Internal: the library's one named spdlog logger ("specstate"); never the default logger.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace specstate::detail {

spdlog::logger& logger();

}  // namespace specstate::detail
