// Errors of the public API: every function that rejects its input throws specstate::Error,
// which carries a Status and a message naming the function, the argument and its value.
#pragma once

#include <stdexcept>
#include <string>

namespace specstate {

enum class Status {
  kSuccess = 0,
  kInvalidArgument,     // a value, shape, stride or dtype the call cannot accept
  kOutOfRange,          // an index (slot, layer, row, token, tree node) outside its range
  kResourceExhausted,   // the pool has no free slot
  kFailedPrecondition,  // stale / released / foreign handle, call out of protocol order
  kNotSupported,        // a configuration this build or backend does not implement
  kBackendError,        // the device reported an error (CUDA)
};

const char* status_name(Status status) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(std::string(status_name(status)) + ": " + message),
        status_(status),
        text_(std::string(status_name(status)) + ": " + message) {}
  Status status() const noexcept { return status_; }
  // what() as a string of its full length: a message that quotes the caller's text (a source
  // name, a path) may hold a NUL byte, where what() would end.
  const std::string& text() const noexcept { return text_; }

 private:
  Status status_;
  std::string text_;
};

}  // namespace specstate
