// Hostile input to the library's readers and validators (issue 8, defects 1, 3, 6, 7): each must
// fail with a specstate::Error that names the input and the limit, never crash, overflow the
// stack, read out of bounds, block or grow memory without bound. Every test here failed (crashed
// under ASan, hung, or threw the wrong thing) on the code before the fix.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/gdn_data.h"
#include "specstate/spec/acceptance.h"
#include "specstate/spec/trace.h"
#include "specstate/specstate.h"

namespace specstate {
namespace {

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no specstate::Error thrown)";
}

std::string temp_dir() {
  std::string dir = ::testing::TempDir() + "specstate_hostile_XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return ::testing::TempDir();
  return dir;
}

// --- defect 1: a TensorView with ndim outside [0, 6] -----------------------------------------

using test::tiny_config;  // common/gdn_data.h

TEST(HostileTensorView, DescribeNeverReadsPastTheArrays) {
  TensorView v;
  std::vector<float> data(4, 1.0f);
  v.data = data.data();
  v.ndim = 1000;
  v.shape[0] = 4;
  v.stride[0] = 1;
  const std::string text = v.describe();
  EXPECT_TRUE(contains(text, "ndim = 1000")) << text;
  EXPECT_TRUE(contains(text, "f32[4, 0, 0, 0, 0, 0]")) << text;
  v.ndim = -7;
  EXPECT_TRUE(contains(v.describe(), "ndim = -7")) << v.describe();
  EXPECT_EQ(v.numel(), 1);  // no dims readable: the empty product
}

// A dtype outside DType is named by its value in a view's description, which the shape and
// stride errors embed before the dtype check runs (it read "unknown dtype").
TEST(HostileTensorView, DescribeNamesADtypeOutsideTheEnumByItsValue) {
  std::vector<float> data(6, 1.0f);
  const TensorView v = TensorView::contiguous(data.data(), static_cast<DType>(7), {2, 3});
  EXPECT_TRUE(contains(v.describe(), "7 (not a DType)[2, 3]")) << v.describe();
  EXPECT_FALSE(contains(v.describe(), "unknown")) << v.describe();
}

TEST(HostileTensorView, PoolRejectsNdimOutsideZeroToSixAndChangesNothing) {
  const GdnConfig g = tiny_config();
  PoolOptions o;
  StatePool pool(ModelConfig::gated_delta_net(1, g), o);
  const SlotHandle h = pool.acquire();
  const int D = g.conv_dim();
  std::vector<float> w(static_cast<std::size_t>(D) * 2, 0.25f), alog(1, 0.1f), dtb(1, 0.2f);
  std::vector<float> qkv(D, 0.5f), a(1, 0.3f), b(1, 0.4f), conv_out(D), core_out(4);
  GdnWeights weights{TensorView::contiguous(w.data(), DType::kF32, {D, 2}),
                     {},
                     TensorView::contiguous(alog.data(), DType::kF32, {1}),
                     TensorView::contiguous(dtb.data(), DType::kF32, {1})};
  GdnInputs in{TensorView::contiguous(qkv.data(), DType::kF32, {1, D}),
               TensorView::contiguous(a.data(), DType::kF32, {1, 1}),
               TensorView::contiguous(b.data(), DType::kF32, {1, 1})};
  GdnOutputs out{TensorView::contiguous(conv_out.data(), DType::kF32, {1, D}),
                 TensorView::contiguous(core_out.data(), DType::kF32, {1, 1, 4})};
  for (int ndim : {7, 1000, std::numeric_limits<int>::max(), -1, std::numeric_limits<int>::min()}) {
    GdnInputs bad = in;
    bad.mixed_qkv.ndim = ndim;
    const std::string message = error_of([&] { pool.prefill(0, h, weights, bad, out); });
    // A negative ndim may already be refused as "0 tokens" by the caller of check_view; either
    // way the call is rejected naming the view, and nothing reads past shape[]/stride[].
    EXPECT_TRUE(contains(message, "mixed_qkv")) << message;
    if (ndim > 0) {
      EXPECT_TRUE(contains(message, "mixed_qkv has ndim = " + std::to_string(ndim))) << message;
      EXPECT_TRUE(contains(message, "outside [0, 6]")) << message;
    }
  }
  // Nothing was written: the slot is still zero, and a valid prefill still works.
  const TensorView ssm = pool.ssm_state(0);
  const float* s = static_cast<const float*>(ssm.data);
  for (int64_t i = 0; i < ssm.numel(); ++i) ASSERT_EQ(s[i], 0.0f) << i;
  pool.prefill(0, h, weights, in, out);
  double norm = 0;
  for (int64_t i = 0; i < ssm.numel(); ++i) norm += double(s[i]) * s[i];
  EXPECT_GT(norm, 0.0);
}

// --- defect 3: deeply nested JSON ------------------------------------------------------------

std::vector<uint8_t> safetensors_with_header(const std::string& header) {
  std::vector<uint8_t> bytes(8 + header.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), bytes.begin() + 8);
  return bytes;
}

TEST(HostileSafetensors, DeeplyNestedHeaderIsRejectedNamingTheLimit) {
  // 100k levels inside a tensor's "shape" (the reader dump()s the shape into its message) and as
  // the metadata value: both used to overflow the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& header :
       {R"({"t": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 0]}})",
        R"({"__metadata__": {"k": )" + deep + "}}", deep}) {
    const std::string message = error_of(
        [&] { SafetensorsFile::from_bytes(safetensors_with_header(header), "deep.safetensors"); });
    EXPECT_TRUE(contains(message, "deep.safetensors")) << message;
    EXPECT_TRUE(contains(message, "deeper than the limit of 64 levels")) << message;
  }
  // Brackets inside strings do not count, and a normal header still reads.
  const std::string in_string = R"({"__metadata__": {"k": ")" + std::string(1000, '[') + R"("}})";
  const SafetensorsFile ok =
      SafetensorsFile::from_bytes(safetensors_with_header(in_string), "ok.safetensors");
  EXPECT_EQ(ok.metadata_value("k").size(), 1000u);
}

TEST(HostileTrace, DeeplyNestedLineIsRejectedNamingTheLine) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::istringstream in(
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n"
      "{\"request\": 0, \"round\": 0, \"window\": 2, \"accepted\": " +
      deep + "}\n");
  const std::string message = error_of([&] { spec::parse_trace(in, "deep.jsonl"); });
  EXPECT_TRUE(contains(message, "deep.jsonl:2: JSON nests deeper than the limit of 16")) << message;
  // In the header too (its "meta" is dump()ed).
  std::istringstream header(
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0], "
      "\"meta\": {\"x\": " +
      deep + "}}\n");
  const std::string m2 = error_of([&] { spec::parse_trace(header, "deep.jsonl"); });
  EXPECT_TRUE(contains(m2, "deep.jsonl:1: JSON nests deeper")) << m2;
  spec::Trace trace;
  trace.requests = {0};
  trace.meta_json = "{\"x\": " + deep + "}";
  const std::string m3 = error_of([&] { spec::validate_trace(trace); });
  EXPECT_TRUE(contains(m3, "meta_json nests JSON deeper")) << m3;
}

// An integer out of its field's range was reported as "got integer", without the value.
TEST(HostileTrace, AnIntegerOutOfRangeIsReportedWithItsValue) {
  std::istringstream header(
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": "
      "[18446744073709551615]}\n");
  const std::string m1 = error_of([&] { spec::parse_trace(header, "big.jsonl"); });
  EXPECT_TRUE(contains(m1, "big.jsonl:1: header field \"requests\"[0]")) << m1;
  EXPECT_TRUE(contains(m1, "got integer 18446744073709551615")) << m1;
  std::istringstream record(
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n"
      "{\"request\": 0, \"round\": 0, \"window\": 2, \"accepted\": -7}\n");
  const std::string m2 = error_of([&] { spec::parse_trace(record, "neg.jsonl"); });
  EXPECT_TRUE(contains(m2, "neg.jsonl:2")) << m2;
  EXPECT_TRUE(contains(m2, "-7")) << m2;
}

// --- defect 6: directories and FIFOs are not safetensors files --------------------------------

TEST(HostileSafetensors, DirectoryIsRejectedWithAnError) {
  const std::string dir = temp_dir();
  std::string message;
  try {
    SafetensorsFile file(dir);
    message = "(opened)";
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("wrong exception type: ") + e.what();  // std::bad_alloc before
  }
  EXPECT_TRUE(contains(message, "is not a regular file (a directory)")) << message;
  EXPECT_TRUE(contains(message, dir)) << message;
  ::rmdir(dir.c_str());
}

TEST(HostileSafetensors, FifoIsRejectedWithoutBlocking) {
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/case.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Before the fix the open blocked until a writer came; this writer arrives after 5 s so that
  // the old code fails the timing check instead of hanging the suite.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 100 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { SafetensorsFile file(fifo); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  writer.join();
  EXPECT_LT(seconds, 2.0);
  EXPECT_TRUE(contains(message, "is not a regular file (a FIFO)")) << message;
  ::unlink(fifo.c_str());
  ::rmdir(dir.c_str());
}

// --- defect 7: unbounded trace input ---------------------------------------------------------

TEST(HostileTrace, DevZeroFailsAtTheLineLengthLimit) {
  // /dev/zero never ends a line: before the fix getline grew one string without bound.
  const std::string message = error_of([] { spec::read_trace("/dev/zero"); });
  EXPECT_TRUE(contains(message, "/dev/zero:1: line is longer than the limit of " +
                                    std::to_string(spec::kMaxTraceLineBytes) + " bytes"))
      << message;
}

// A directory is refused by name (it leaked std::ios_base::failure, "basic_filebuf::underflow
// error reading the file: Is a directory"); a stream buffer that throws on a read error is
// reported as the source's error at its line.
TEST(HostileTrace, ReadErrorsAreTheSourcesErrors) {
  const std::string dir = ::testing::TempDir();
  const std::string message = error_of([&] { spec::read_trace(dir); });
  EXPECT_TRUE(contains(message, "is a directory, not a trace file")) << message;

  struct FailingBuf : std::streambuf {
    std::string text = "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n";
    std::size_t pos = 0;
    int_type underflow() override {
      if (pos < text.size()) {
        setg(&text[pos], &text[pos], &text[pos] + 1);
        ++pos;
        return traits_type::to_int_type(text[pos - 1]);
      }
      throw std::ios_base::failure("read error from the device");
    }
  } buf;
  std::istream in(&buf);
  const std::string read = error_of([&] { spec::parse_trace(in, "dev.jsonl"); });
  EXPECT_TRUE(contains(read, "dev.jsonl:2: cannot read: read error from the device")) << read;
}

// JSON text holds no NUL byte: nlohmann's parser stopped at one and ignored what followed, so a
// record followed by a NUL and garbage was accepted.
TEST(HostileTrace, NulBytesInALineAreRefused) {
  std::string text = "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n";
  text += "{\"request\": 0, \"round\": 0, \"window\": 4, \"accepted\": 3}";
  text += std::string(1, '\0') + " garbage ]]] {{{\n";
  std::istringstream in(text);
  const std::string message = error_of([&] { spec::parse_trace(in, "nul.jsonl"); });
  EXPECT_TRUE(contains(message, "nul.jsonl:2: a NUL byte at column 55")) << message;
}

// nlohmann keeps the last of two equal keys: a record with "accepted": 1, "accepted": 3 read as 3,
// and a header with "format" twice was accepted.
TEST(HostileTrace, DuplicateKeysAreRefused) {
  const std::string header =
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n";
  {
    std::istringstream in(header +
                          "{\"request\": 0, \"round\": 0, \"window\": 4, \"accepted\": 1, "
                          "\"accepted\": 3}\n");
    const std::string message = error_of([&] { spec::parse_trace(in, "dup.jsonl"); });
    EXPECT_TRUE(contains(message, "dup.jsonl:2: key \"accepted\" appears twice in one object"))
        << message;
  }
  {
    std::istringstream in(
        "{\"format\": \"specstate-trace\", \"format\": \"specstate-trace\", \"version\": 1, "
        "\"requests\": [0]}\n");
    const std::string message = error_of([&] { spec::parse_trace(in, "dup.jsonl"); });
    EXPECT_TRUE(contains(message, "dup.jsonl:1: key \"format\" appears twice")) << message;
  }
  spec::Trace t;
  t.requests = {0};
  t.meta_json = "{\"a\": 1, \"a\": 2}";
  EXPECT_TRUE(contains(error_of([&] { spec::validate_trace(t); }), "holds key \"a\" twice"));
  t.meta_json = std::string("{}") + std::string(1, '\0') + "xx";
  EXPECT_TRUE(contains(error_of([&] { spec::validate_trace(t); }), "meta_json holds a NUL byte"));
  t.meta_json = "{\"a\": {\"b\": 1}, \"b\": {\"a\": 2}}";  // the same keys in other objects
  EXPECT_NO_THROW(spec::validate_trace(t));
}

// Window nodes are bounded over the whole trace (kMaxTraceNodes): 400k lines of 1024-node windows
// (a 23 MB file) took 4 GB before failing with std::bad_alloc; a shape as wide is refused by the
// generators before anything is allocated.
TEST(HostileTrace, WindowNodesAreBoundedOverTheTrace) {
  const int64_t per_record = spec::kMaxTraceWindow;
  const int64_t records = spec::kMaxTraceNodes / per_record + 1;
  std::string text = "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n";
  for (int64_t r = 0; r < records; ++r) {
    text += "{\"request\": 0, \"round\": " + std::to_string(r) +
            ", \"window\": 1024, \"accepted\": 1}\n";
  }
  std::istringstream in(text);
  const std::string message = error_of([&] { spec::parse_trace(in, "wide.jsonl"); });
  EXPECT_TRUE(contains(message, "wide.jsonl:" + std::to_string(records + 1) + ": more than " +
                                    std::to_string(spec::kMaxTraceNodes) + " window nodes"))
      << message;
  spec::TraceShape shape;
  shape.requests = 1 << 20;
  shape.window = spec::Window::chain(1024);
  const std::string generated = error_of([&] { spec::generate_fixed(shape, 1024); });
  EXPECT_TRUE(contains(generated, "requests x rounds x window nodes = 1048576 x 1 x 1024"))
      << generated;
}

// Small edges of the public helpers, each of which crashed, leaked another exception or went
// wrong silently: Acceptance::emitted(nullptr) (SEGV), check_path with a null name
// (std::logic_error from std::string(nullptr)), accepted_histogram of a hand-built record whose
// path is longer than its window (a write past the histogram), num_rounds of a round INT64_MAX
// (signed overflow), set_log_level of a value that is no level (silently warn).
TEST(HostileApi, SmallEdges) {
  spec::Acceptance a;
  a.path = {0, 1};
  a.bonus_token = 5;
  EXPECT_TRUE(contains(error_of([&] { a.emitted(nullptr); }), "tokens is null"));
  const int32_t tokens[] = {7, 8};
  EXPECT_EQ(a.emitted(tokens), (std::vector<int32_t>{8, 5}));
  spec::Acceptance root;
  root.path = {0};
  root.bonus_token = 9;
  EXPECT_EQ(root.emitted(nullptr), (std::vector<int32_t>{9}));  // no draft token is read
  // A hand-built path with a negative node read before the tokens (a SEGV); the vector overload
  // also refuses a node past the tokens.
  spec::Acceptance neg;
  neg.path = {0, -100000};
  EXPECT_TRUE(contains(error_of([&] { neg.emitted(tokens); }),
                       "spec::Acceptance::emitted: path[1] = -100000 is no window node"));
  const std::vector<int32_t> two = {7, 8};
  EXPECT_TRUE(contains(error_of([&] { neg.emitted(two); }), "path[1] = -100000 is outside tokens"));
  spec::Acceptance past;
  past.path = {0, 2};
  EXPECT_TRUE(contains(error_of([&] { past.emitted(two); }),
                       "spec::Acceptance::emitted: path[1] = 2 is outside tokens (2 entries)"));
  EXPECT_EQ(a.emitted(two), (std::vector<int32_t>{8, 5}));

  EXPECT_TRUE(contains(error_of([] {
                         spec::check_path(spec::Window::chain(3), {0, 5}, nullptr);
                       }),
                       "spec::check_path: path[1] = 5"));

  spec::Trace t;
  spec::TraceRecord r;
  r.window = spec::Window::chain(2);
  r.path = {0, 1, 2, 3, 4};  // not validated: longer than its window
  r.round = std::numeric_limits<int64_t>::max();
  t.records.push_back(r);
  const std::vector<int64_t> hist = t.accepted_histogram();
  ASSERT_EQ(hist.size(), 6u);
  EXPECT_EQ(hist[5], 1);
  EXPECT_EQ(t.num_rounds(), std::numeric_limits<int64_t>::max());

  const LogLevel before = log_level();
  const std::string bad = error_of([] { set_log_level(static_cast<LogLevel>(99)); });
  EXPECT_TRUE(contains(bad, "set_log_level: level = 99 is none")) << bad;
  EXPECT_EQ(log_level(), before);
}

// TensorView's helpers: a negative extent was taken (numel() -12), a shape past 2^63 elements
// gave wrapped strides (signed overflow), and numel() / is_contiguous() overflowed on a
// hand-filled view.
TEST(HostileApi, TensorViewHelpers) {
  float x = 0;
  EXPECT_TRUE(contains(error_of([&] {
                         TensorView::contiguous(&x, DType::kF32, {-3, 4});
                       }),
                       "TensorView::contiguous: shape[0] = -3 is negative"));
  EXPECT_TRUE(contains(error_of([&] {
                         TensorView::contiguous(&x, DType::kF32, {INT64_MAX, 2});
                       }),
                       "holds more than 2^63 elements"));
  EXPECT_TRUE(contains(error_of([&] {
                         TensorView::contiguous(&x, DType::kF32, {2, int64_t{1} << 62, 4});
                       }),
                       "holds more than 2^63 elements"));
  EXPECT_TRUE(contains(error_of([&] {
                         TensorView::strided(&x, DType::kF32, {2, -1}, {1, 1});
                       }),
                       "TensorView::strided: shape[1] = -1 is negative"));
  // A zero extent holds no element, however large the others (no overflow to refuse).
  EXPECT_EQ(TensorView::contiguous(&x, DType::kF32, {int64_t{1} << 62, 4, 0}).numel(), 0);
  // strided() took such a shape (its header says it throws as contiguous() for the shape).
  EXPECT_TRUE(contains(error_of([&] {
                         TensorView::strided(&x, DType::kF32, {int64_t{1} << 62, 4}, {0, 0});
                       }),
                       "TensorView::strided: shape [4611686018427387904, 4] holds more than 2^63 "
                       "elements"));
  const TensorView ok = TensorView::contiguous(&x, DType::kF32, {int64_t{1} << 31, 1 << 30});
  EXPECT_EQ(ok.stride[0], int64_t{1} << 30);
  EXPECT_EQ(ok.numel(), int64_t{1} << 61);
  TensorView wide = ok;
  wide.shape[0] = INT64_MAX;
  EXPECT_EQ(wide.numel(), INT64_MAX);  // saturates
  EXPECT_FALSE(wide.is_contiguous());
}

TEST(HostileTrace, LongLineFailsNamingItsNumber) {
  std::string text = "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n\n";
  text += std::string(static_cast<std::size_t>(spec::kMaxTraceLineBytes) + 10, ' ');
  text += "\n";
  std::istringstream in(text);
  const std::string message = error_of([&] { spec::parse_trace(in, "long.jsonl"); });
  EXPECT_TRUE(contains(message, "long.jsonl:3: line is longer than the limit")) << message;
  // A line at the limit is fine (blank, so skipped).
  std::istringstream at_limit(
      "{\"format\": \"specstate-trace\", \"version\": 1, \"requests\": [0]}\n" +
      std::string(static_cast<std::size_t>(spec::kMaxTraceLineBytes), ' ') + "\n");
  EXPECT_EQ(spec::parse_trace(at_limit, "ok.jsonl").records.size(), 0u);
}

TEST(HostileTrace, LimitsAreStated) {
  // The record bound is what stops an endless well-formed trace; its value is the documented one.
  EXPECT_EQ(spec::kMaxTraceRecords, int64_t{1} << 23);
  EXPECT_EQ(spec::kMaxTraceLines, 2 * spec::kMaxTraceRecords);
  EXPECT_EQ(spec::kMaxTraceLineBytes, int64_t{16} << 20);
}

}  // namespace
}  // namespace specstate
