// Tests of bounded memory: in a death test's child process, cap the address space at what the
// process holds now plus a margin, so that an allocation past the margin fails (std::bad_alloc)
// instead of being measured. Not under AddressSanitizer (its shadow memory needs terabytes of
// address space): callers skip there.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>

namespace specstate::test {

// Sets RLIMIT_AS to the current virtual size plus `margin` bytes; false where it cannot.
inline bool limit_address_space(int64_t margin) {
  long vm_pages = 0;
  std::ifstream("/proc/self/statm") >> vm_pages;
  rlimit limit{};
  if (vm_pages <= 0 || getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = static_cast<rlim_t>(vm_pages) * sysconf(_SC_PAGE_SIZE) + margin;
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

}  // namespace specstate::test
