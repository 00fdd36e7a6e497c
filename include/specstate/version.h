#pragma once

#define SPECSTATE_VERSION_MAJOR 0
#define SPECSTATE_VERSION_MINOR 1
#define SPECSTATE_VERSION_PATCH 0

namespace specstate {
const char* version() noexcept;
}  // namespace specstate
