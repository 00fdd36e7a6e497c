// libFuzzer target: random StatePool API sequences (valid and invalid calls) against a shadow pool
// that only decodes (pool_driver.h states the oracle). The bytes choose the config, the pool shape
// and every call; any oracle violation or any exception other than a rejection aborts.
#include <cstddef>
#include <cstdint>

#include "pool_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  specstate::fuzz::ByteSource src(data, size);
  specstate::fuzz::PoolDriver driver(src);
  for (int i = 0; i < 256 && driver.step(); ++i) {
  }
  return 0;
}
