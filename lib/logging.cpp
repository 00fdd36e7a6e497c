#include "logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

#include "specstate/log.h"
#include "specstate/status.h"

namespace specstate {
namespace detail {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto existing = spdlog::get("specstate");
    if (existing) return existing;
    auto created = spdlog::stderr_color_mt("specstate");
    created->set_level(spdlog::level::warn);
    return created;
  }();
  return *instance;
}

}  // namespace detail

namespace {
spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  throw Error(Status::kInvalidArgument,
              "set_log_level: level = " + std::to_string(static_cast<int>(level)) +
                  " is none (kTrace = 0 .. kOff = 5); the level is "
                  "unchanged");
}
}  // namespace

void set_log_level(LogLevel level) { detail::logger().set_level(to_spdlog(level)); }

LogLevel log_level() {
  switch (detail::logger().level()) {
    case spdlog::level::trace:
      return LogLevel::kTrace;
    case spdlog::level::debug:
      return LogLevel::kDebug;
    case spdlog::level::info:
      return LogLevel::kInfo;
    case spdlog::level::warn:
      return LogLevel::kWarn;
    case spdlog::level::err:
    case spdlog::level::critical:
      return LogLevel::kError;
    default:
      return LogLevel::kOff;
  }
}

}  // namespace specstate
