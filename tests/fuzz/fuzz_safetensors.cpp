// libFuzzer target: the safetensors reader on arbitrary bytes. A file either parses, and then every
// tensor converts (to_float or to_int32) and serialize() of what was read reads back equal, or it
// throws specstate::Error; nothing else (no crash, no other exception, no hang).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "specstate/safetensors.h"
#include "specstate/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace specstate;
  std::vector<SafetensorsFile::NewTensor> tensors;
  std::map<std::string, std::string> metadata;
  try {
    const SafetensorsFile file =
        SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
    metadata = file.metadata();
    for (const std::string& name : file.names()) {
      const SafetensorsTensorInfo& info = file.info(name);
      if (info.dtype == SafetensorsDType::kI32) {
        if (static_cast<int64_t>(file.to_int32(name).size()) != info.numel) std::abort();
      } else {
        if (static_cast<int64_t>(file.to_float(name).size()) != info.numel) std::abort();
      }
      const uint8_t* raw = file.raw_data(name);
      tensors.push_back({name, info.dtype, info.shape,
                         std::vector<uint8_t>(raw, raw + (info.data_end - info.data_begin))});
    }
  } catch (const Error&) {
    return 0;  // rejected: fine
  }
  // Accepted: the same tensors written again must read back with the same infos.
  const SafetensorsFile again =
      SafetensorsFile::from_bytes(SafetensorsFile::serialize(tensors, metadata), "again");
  bool same = again.size() == tensors.size() && again.metadata() == metadata;
  for (std::size_t i = 0; same && i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const SafetensorsTensorInfo& info = again.info(t.name);
    const uint8_t* raw = again.raw_data(t.name);
    same = info.dtype == t.dtype && info.shape == t.shape &&
           static_cast<std::size_t>(info.data_end - info.data_begin) == t.bytes.size() &&
           std::equal(t.bytes.begin(), t.bytes.end(), raw);
  }
  if (!same) {
    std::fprintf(stderr, "fuzz_safetensors: round trip changed the file\n");
    std::abort();
  }
  return 0;
}
