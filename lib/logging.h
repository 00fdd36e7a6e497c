// Internal: the library's one named spdlog logger ("specstate"); never the default logger.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace specstate::detail {

spdlog::logger& logger();

}  // namespace specstate::detail
