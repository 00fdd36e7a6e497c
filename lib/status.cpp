#include "specstate/status.h"

#include "specstate/config.h"
#include "specstate/dtype.h"
#include "specstate/version.h"

namespace specstate {

const char* status_name(Status status) noexcept {
  switch (status) {
    case Status::kSuccess:
      return "success";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kOutOfRange:
      return "out of range";
    case Status::kResourceExhausted:
      return "resource exhausted";
    case Status::kFailedPrecondition:
      return "failed precondition";
    case Status::kNotSupported:
      return "not supported";
    case Status::kBackendError:
      return "backend error";
  }
  return "unknown status";
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "unknown dtype";
}

const char* backend_name(Backend backend) noexcept {
  return backend == Backend::kCuda ? "cuda" : "cpu";
}

const char* strategy_name(Strategy strategy) noexcept {
  switch (strategy) {
    case Strategy::kSnapshot:
      return "snapshot";
    case Strategy::kReplay:
      return "replay";
  }
  return "unknown";
}

const char* conv_layout_name(ConvLayout layout) noexcept {
  switch (layout) {
    case ConvLayout::kChannelsFirst:
      return "channels_first";
    case ConvLayout::kChannelsLast:
      return "channels_last";
  }
  return "unknown";
}

const char* ssm_layout_name(SsmLayout layout) noexcept {
  switch (layout) {
    case SsmLayout::kVK:
      return "vk";
    case SsmLayout::kKV:
      return "kv";
  }
  return "unknown";
}

// The header's version macros (include/specstate/version.h), which a test keeps equal to
// CMakeLists.txt's project() version (the Python package's metadata reads that one).
#define SPECSTATE_STRINGIZE2(x) #x
#define SPECSTATE_STRINGIZE(x) SPECSTATE_STRINGIZE2(x)
const char* version() noexcept {
  return SPECSTATE_STRINGIZE(SPECSTATE_VERSION_MAJOR) "." SPECSTATE_STRINGIZE(
      SPECSTATE_VERSION_MINOR) "." SPECSTATE_STRINGIZE(SPECSTATE_VERSION_PATCH);
}

}  // namespace specstate
