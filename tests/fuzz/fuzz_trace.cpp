// libFuzzer target: the acceptance-trace reader on arbitrary text. A trace either parses, and then
// writing it and reading it back gives the same records, or it throws specstate::Error; nothing
// else (no crash, no other exception, no unbounded growth).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "specstate/spec/trace.h"
#include "specstate/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace specstate;
  spec::Trace trace;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    trace = spec::parse_trace(in, "fuzz.jsonl");
  } catch (const Error&) {
    return 0;  // rejected: fine
  }
  std::ostringstream out;
  spec::write_trace(out, trace);  // must not throw: what was read is valid
  std::istringstream back_in(out.str());
  const spec::Trace back = spec::parse_trace(back_in, "rewritten.jsonl");
  bool same = back.requests == trace.requests && back.records.size() == trace.records.size();
  for (std::size_t i = 0; same && i < trace.records.size(); ++i) {
    const auto &x = trace.records[i], &y = back.records[i];
    same = x.request == y.request && x.round == y.round && x.path == y.path && x.window == y.window;
  }
  if (!same) {
    std::fprintf(stderr, "fuzz_trace: write + read changed the trace\n");
    std::abort();
  }
  return 0;
}
