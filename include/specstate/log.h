// specstate logs through its own spdlog logger named "specstate" (never the default logger).
#pragma once

namespace specstate {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// Throws Error(kInvalidArgument) for a value that is no LogLevel (the level stays as it was).
void set_log_level(LogLevel level);
LogLevel log_level();

}  // namespace specstate
