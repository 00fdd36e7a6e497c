// specstate logs through its own spdlog logger named "specstate" (never the default logger).
#pragma once

namespace specstate {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

void set_log_level(LogLevel level);
LogLevel log_level();

}  // namespace specstate
