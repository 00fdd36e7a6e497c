// The safetensors reader: round trips of every dtype, the golden files, and malformed files
// (each must be rejected with a specstate::Error naming the file, the tensor and the problem).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/address_limit.h"
#include "specstate/safetensors.h"
#include "specstate/status.h"

namespace specstate {
namespace {

const std::string kGoldenDir = std::string(SPECSTATE_TEST_DATA) + "/golden";

std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return out;
}

std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& values) {
  std::vector<uint8_t> out(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[2 * i] = static_cast<uint8_t>(values[i]);
    out[2 * i + 1] = static_cast<uint8_t>(values[i] >> 8);
  }
  return out;
}

std::vector<uint8_t> i32_bytes(const std::vector<int32_t>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto bits = static_cast<uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return out;
}

// A file image from a hand-written header and a data section.
std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Runs `fn`, expects a specstate::Error with kInvalidArgument whose message holds every one of
// `parts`; prints the message on failure.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message lacks '" << part << "': " << message;
    }
    return;
  }
  ADD_FAILURE() << "no specstate::Error thrown";
}

SafetensorsFile parse(const std::vector<uint8_t>& bytes, const std::string& label = "mem.st") {
  return SafetensorsFile::from_bytes(bytes, label);
}

std::vector<uint8_t> sample_file() {
  return SafetensorsFile::serialize(
      {{"w", SafetensorsDType::kF32, {2, 3}, f32_bytes({1, -2, 3.5f, 0, 1e-30f, -7})},
       {"idx", SafetensorsDType::kI32, {3}, i32_bytes({-1, 0, 2147483647})},
       // bf16 1.0, -2.0, 3.140625 (0x4049), smallest subnormal (0x0001)
       {"h", SafetensorsDType::kBF16, {2, 2}, u16_bytes({0x3f80, 0xc000, 0x4049, 0x0001})},
       {"s", SafetensorsDType::kF32, {}, f32_bytes({42.0f})}},
      {{"case", "X"}, {"part", "0"}});
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  const SafetensorsFile file = parse(sample_file());
  EXPECT_EQ(file.names(), (std::vector<std::string>{"h", "idx", "s", "w"}));
  EXPECT_EQ(file.metadata_value("case"), "X");
  EXPECT_EQ(file.metadata_value("nparts", "1"), "1");
  EXPECT_EQ(file.info("w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.info("w").describe(), "F32[2, 3]");
  EXPECT_EQ(file.info("s").numel, 1);
  EXPECT_TRUE(file.info("s").shape.empty());
  EXPECT_EQ(file.to_float("w"), (std::vector<float>{1, -2, 3.5f, 0, 1e-30f, -7}));
  EXPECT_EQ(file.to_int32("idx"), (std::vector<int32_t>{-1, 0, 2147483647}));
  const std::vector<float> h = file.to_float("h");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 3.140625f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -133));
  EXPECT_EQ(file.to_float("s"), (std::vector<float>{42.0f}));
}

TEST(Safetensors, F16ConvertsExactly) {
  EXPECT_EQ(float_from_f16(0x3c00), 1.0f);
  EXPECT_EQ(float_from_f16(0xc000), -2.0f);
  EXPECT_EQ(float_from_f16(0x7bff), 65504.0f);
  EXPECT_EQ(float_from_f16(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(float_from_f16(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(float_from_f16(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_TRUE(std::signbit(float_from_f16(0x8000)));
  EXPECT_EQ(float_from_f16(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(float_from_f16(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(float_from_f16(0x7e00)));
  // Every finite half survives a float round trip through the IEEE definition.
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const int exponent = static_cast<int>(bits >> 10);
    const int mantissa = static_cast<int>(bits & 0x3ff);
    const float expected = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                         : std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
    ASSERT_EQ(float_from_f16(static_cast<uint16_t>(bits)), expected) << "bits " << bits;
  }

  const SafetensorsFile file = parse(SafetensorsFile::serialize(
      {{"f", SafetensorsDType::kF16, {3}, u16_bytes({0x3c00, 0xb800, 0x0001})}}, {}));
  EXPECT_EQ(file.to_float("f"), (std::vector<float>{1.0f, -0.5f, std::ldexp(1.0f, -24)}));
  EXPECT_TRUE(file.metadata().empty());
}

TEST(Safetensors, ReadsFromDisk) {
  const std::string path = ::testing::TempDir() + "specstate_roundtrip.safetensors";
  {
    const std::vector<uint8_t> bytes = sample_file();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  const SafetensorsFile file(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.to_int32("idx"), (std::vector<int32_t>{-1, 0, 2147483647}));
  // A name with a NUL byte would open the file its prefix names: refused.
  expect_error([&] { SafetensorsFile nul(path + std::string(1, '\0') + "x"); },
               {"SafetensorsFile: path = '", "\\0x' holds a NUL byte"});
  expect_error([&] { SafetensorsFile empty(""); }, {"SafetensorsFile: path is empty"});
  std::remove(path.c_str());
  expect_error([&] { SafetensorsFile missing(path); }, {path, "cannot open"});
}

TEST(Safetensors, ReadsGoldenCaseA) {
  const SafetensorsFile file(kGoldenDir + "/golden_caseA.safetensors");
  EXPECT_EQ(file.metadata_value("case"), "A");
  EXPECT_EQ(file.metadata_value("nparts"), "1");
  EXPECT_NE(file.metadata_value("params_json").find("\"T\": 4"), std::string::npos);
  EXPECT_EQ(file.info("mixed_qkv.l0").describe(), "F32[4, 4, 256]");
  EXPECT_EQ(file.info("inter_ssm.l1.r3").describe(), "F32[4, 4, 32, 32]");
  EXPECT_EQ(file.to_int32("cache_indices"), (std::vector<int32_t>{4, 3, 1, -1}));
  EXPECT_EQ(file.to_int32("parents"), (std::vector<int32_t>{-1, 0, 1, 2}));
  const std::vector<float> init = file.to_float("ssm_state_init.l0");
  ASSERT_EQ(init.size(), 5u * 4 * 32 * 32);
  double norm = 0;
  for (float v : init) norm += static_cast<double>(v) * v;
  EXPECT_GT(norm, 0.0);
}

TEST(SafetensorsMalformed, TooShortForTheLengthField) {
  expect_error([] { parse({1, 2, 3}, "short.st"); }, {"short.st", "3 bytes", "truncated"});
}

TEST(SafetensorsMalformed, TruncatedHeader) {
  std::vector<uint8_t> bytes = sample_file();
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  bytes.resize(8 + header_len / 2);
  expect_error([&] { parse(bytes, "cut.st"); },
               {"cut.st", "header length " + std::to_string(header_len), "truncated header"});
}

TEST(SafetensorsMalformed, HeaderLengthBeyondTheFile) {
  std::vector<uint8_t> bytes = raw_file("{}", {});
  bytes[7] = 0x7f;  // an absurd length
  expect_error([&] { parse(bytes); }, {"mem.st", "exceeds"});
}

// read_header refuses a length field past the file's end before reading the header: it read up
// to 100 MB of such a file (the header limit) and only then refused it, whatever bound the
// caller gave (import_slot's is about the pool's header size). Checked in a child process whose
// address space allows 32 MB more than it holds.
TEST(SafetensorsMalformed, AHeaderLengthPastTheFilesEndIsRefusedUnread) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not hold under AddressSanitizer";
#else
  const std::string path = ::testing::TempDir() + "specstate_long_header.safetensors";
  const uint64_t size = uint64_t{120} << 20;
  {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) o.put(static_cast<char>(size >> (8 * i)));  // 8 bytes too many
  }
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0);
  for (const uint64_t bound : {uint64_t{4096}, UINT64_MAX}) {
    const auto read_under_a_limit = [&] {
      if (!test::limit_address_space(int64_t{32} << 20)) std::_Exit(2);
      try {
        SafetensorsFile::read_header(path, bound);
      } catch (const Error& e) {
        const std::string what = e.what();
        std::_Exit(what.find("header length 125829120 exceeds the 125829112 bytes that follow") !=
                               std::string::npos &&
                           what.find("not read") != std::string::npos
                       ? 0
                       : 3);
      } catch (...) {
        std::_Exit(1);
      }
      std::_Exit(4);
    };
    EXPECT_EXIT(read_under_a_limit(), ::testing::ExitedWithCode(0), "") << "bound " << bound;
  }
  std::remove(path.c_str());
#endif
}

// A file is read only once its length field and header hold: a 1 GB file of junk was read whole
// (1 GB of memory, seconds) and only then refused by its length field, and under a memory limit
// the refusal said "cannot allocate" instead. Sparse files, opened in a child process whose address
// space allows 32 MB more than it holds: junk, a header length past the 100 MB limit (read_header
// read 100 MB of it first), and a length that fits with a header that is not JSON.
TEST(SafetensorsMalformed, AFileIsRefusedByItsHeaderBeforeItsDataIsRead) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not hold under AddressSanitizer";
#else
  const std::string path = ::testing::TempDir() + "specstate_junk.safetensors";
  const uint64_t size = uint64_t{1} << 30;
  struct Case {
    std::string head;  // the file's first bytes
    std::string expected;
    bool header_only;
  };
  const auto length_field = [](uint64_t length) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(length >> (8 * i));
    return out;
  };
  const auto with_header = [&](const std::string& header) {
    return length_field(header.size()) + header;
  };
  const Case cases[] = {
      {"garbage!", "exceeds the 1073741816 bytes that follow the length field", false},
      {length_field(200000000), "header length 200000000 exceeds the limit of 100000000 bytes",
       false},
      {length_field(200000000), "header length 200000000 exceeds the limit of 100000000 bytes",
       true},
      {with_header("not json at all!"), "header is not valid JSON", false},
      // A header that holds, whose one tensor leaves the rest of the file uncovered.
      {with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"),
       "the tensors cover only 4", false},
  };
  for (const Case& c : cases) {
    {
      std::ofstream o(path, std::ios::binary | std::ios::trunc);
      o << c.head;
    }
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0);
    const auto open_under_a_limit = [&] {
      if (!test::limit_address_space(int64_t{32} << 20)) std::_Exit(2);
      try {
        if (c.header_only) {
          SafetensorsFile::read_header(path);
        } else {
          SafetensorsFile file(path);
        }
      } catch (const Error& e) {
        std::_Exit(std::string(e.what()).find(c.expected) != std::string::npos ? 0 : 3);
      } catch (...) {
        std::_Exit(1);
      }
      std::_Exit(4);
    };
    EXPECT_EXIT(open_under_a_limit(), ::testing::ExitedWithCode(0), "") << c.expected;
  }
  std::remove(path.c_str());
#endif
}

// The header's keys and arrays are bounded before its DOM is built (about 23 bytes of memory per
// header byte: a 98 MB header of one 49-million-extent shape took 2.3 GB), and a shape's element
// count overflows left to right, as the reference reader's and serialize's do: [2^62, 2^62, 0] was
// accepted, a file nobody can write back.
TEST(SafetensorsMalformed, LongArraysManyKeysAndOverflowingShapesAreRefused) {
  std::string shape = "[1";
  for (int i = 1; i < 65; ++i) shape += ",1";
  shape += "]";
  expect_error(
      [&] {
        parse(raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,4]}}",
                       f32_bytes({1})));
      },
      {"mem.st", "an array of more than 64 values"});
  // 64 extents still parse.
  std::string ok_shape = "[1";
  for (int i = 1; i < 64; ++i) ok_shape += ",1";
  ok_shape += "]";
  const SafetensorsFile ok = parse(
      raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":" + ok_shape + ",\"data_offsets\":[0,4]}}",
               f32_bytes({1})));
  EXPECT_EQ(ok.info("a").shape.size(), 64u);
  std::string many = "{";
  for (int i = 0; i <= 65536; ++i) {
    many += (i ? ",\"t" : "\"t") + std::to_string(i) +
            "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  many += "}";
  expect_error([&] { parse(raw_file(many, {})); }, {"mem.st", "more than 262144 keys"});
  expect_error(
      [] {
        parse(
            raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,"
                     "4611686018427387904,0],\"data_offsets\":[0,0]}}",
                     {}));
      },
      {"tensor 'a'", "overflows 64 bits"});
  // A zero extent first keeps the product at zero: accepted, as the reference reader does.
  EXPECT_EQ(parse(raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,"
                           "4611686018427387904],\"data_offsets\":[0,0]}}",
                           {}))
                .info("a")
                .numel,
            0);
}

TEST(SafetensorsMalformed, BadJson) {
  expect_error([] { parse(raw_file("{\"w\": {\"dtype\": \"F32\",", {})); },
               {"mem.st", "not valid JSON"});
  expect_error([] { parse(raw_file("[1, 2, 3]", {})); }, {"mem.st", "expected an object"});
  expect_error([] { parse(raw_file("{\"w\": 3}", {})); }, {"tensor 'w'", "expected an object"});
}

// nlohmann's parser stops at a NUL byte and keeps the last of two equal keys: a header with
// garbage after a NUL, or a tensor declared twice (F32, then I32: read back as I32), was accepted.
TEST(SafetensorsMalformed, NulBytesAndDuplicateKeys) {
  const std::string good =
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
  expect_error(
      [&] {
        parse(raw_file(good + std::string(1, '\0') + " ]]] {{{", {0, 0, 0, 0}));
      },
      {"mem.st", "header holds a NUL byte (at header byte " + std::to_string(good.size()) + ")"});
  const std::string twice =
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
      "\"a\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
  expect_error(
      [&] {
        parse(raw_file(twice, {0, 0, 0, 0}));
      },
      {"mem.st", "header names 'a' twice in one object"});
  const std::string inner =
      "{\"a\": {\"dtype\": \"F32\", \"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, "
      "4]}}";
  expect_error([&] { parse(raw_file(inner, {0, 0, 0, 0})); }, {"header names 'dtype' twice"});
  // The same keys in different objects are fine.
  EXPECT_NO_THROW(parse(raw_file(good, {0, 0, 0, 0})));
}

// serialize writes only what the parser takes: each of these wrote a file its own parser then
// refused (a shape of 2^62 x 4 with no bytes, by an overflowing size; negative extents; a dtype
// that is none; a tensor named __metadata__), or leaked nlohmann's type_error (a name that is
// no UTF-8).
TEST(SafetensorsMalformed, SerializeRefusesWhatTheParserWould) {
  using T = SafetensorsFile::NewTensor;
  const auto refused = [](const std::vector<T>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& needle) {
    expect_error([&] { SafetensorsFile::serialize(tensors, metadata); }, {needle});
  };
  refused({T{"w", SafetensorsDType::kF32, {int64_t{1} << 62, 4}, {}}}, {}, "passes 64-bit sizes");
  refused({T{"w", SafetensorsDType::kF32, {-1, -4}, std::vector<uint8_t>(16)}}, {},
          "has a negative extent");
  refused({T{"w", static_cast<SafetensorsDType>(9), {1}, std::vector<uint8_t>(4)}}, {},
          "dtype = 9 is none");
  refused({T{"__metadata__", SafetensorsDType::kF32, {1}, std::vector<uint8_t>(4)}}, {},
          "'__metadata__' is the header's metadata");
  refused({T{"w\xff", SafetensorsDType::kF32, {1}, std::vector<uint8_t>(4)}}, {},
          "not valid UTF-8");
  refused({}, {{"k", "v\xfe"}}, "not valid UTF-8");
  // A header the reader refuses for its size (it was written, then failed on read).
  refused({T{"t", SafetensorsDType::kF32, {1}, std::vector<uint8_t>(4)}},
          {{"big", std::string(101'000'000, 'x')}}, "more than the reader's limit of 100000000");
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  const std::vector<uint8_t> data = f32_bytes({1, 2, 3, 4});
  expect_error(
      [&] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}})", data),
              "range.st");
      },
      {"range.st", "tensor 'w'", "[0, 24]", "out of range", "16 bytes"});
  expect_error(
      [&] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", data));
      },
      {"tensor 'w'", "[8, 4]"});
  expect_error(
      [&] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, -16]}})", data));
      },
      {"tensor 'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 8]}})",
                       f32_bytes({1, 2})),
              "dtype.st");
      },
      {"dtype.st", "tensor 'w'", "unsupported dtype 'Q4_K'"});
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", f32_bytes({1, 2})));
      },
      {"tensor 'w'", "missing dtype"});
}

TEST(SafetensorsMalformed, ShapeSizeMismatch) {
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})",
                       f32_bytes({1, 2, 3, 4})),
              "shape.st");
      },
      {"shape.st", "tensor 'w'", "F32[2, 3]", "6 elements", "16 bytes", "mismatch"});
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})",
                       f32_bytes({1, 2})));
      },
      {"tensor 'w'", "BF16[3]", "mismatch"});
  // A shape whose element count overflows int64 must not wrap around into a match.
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],)"
                       R"( "data_offsets": [0, 0]}})",
                       {}));
      },
      {"tensor 'w'"});
  expect_error(
      [] {
        parse(raw_file(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})",
                       f32_bytes({1, 2})));
      },
      {"tensor 'w'", "non-negative"});
}

TEST(SafetensorsMalformed, OverlapsAndGaps) {
  const std::vector<uint8_t> data = f32_bytes({1, 2, 3, 4});
  expect_error(
      [&] {
        parse(raw_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
                       R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                       data));
      },
      {"tensor 'b'", "overlap tensor 'a'"});
  expect_error(
      [&] {
        parse(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                       R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                       data));
      },
      {"tensor 'b'", "unused"});
  expect_error(
      [&] {
        parse(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", data));
      },
      {"16 bytes", "cover only 8"});
}

TEST(SafetensorsMalformed, MetadataMustHoldStrings) {
  expect_error([] { parse(raw_file(R"({"__metadata__": {"part": 0}})", {})); },
               {"__metadata__", "'part'", "expected a string"});
}

// Any damage to a file either still parses (then every tensor reads within bounds) or throws
// specstate::Error; never anything else (run under ASan/UBSan by scripts/test).
TEST(SafetensorsMalformed, RandomDamageThrowsOrParses) {
  const uint64_t seed = 7;
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> good = sample_file();
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes = good;
    const int kind = trial % 3;
    if (kind == 0) {
      bytes.resize(rng() % bytes.size());  // truncated anywhere
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        // Mostly in the length field and the header, where the structure is.
        const std::size_t limit =
            kind == 1 ? std::min<std::size_t>(bytes.size(), 64) : bytes.size();
        bytes[rng() % limit] = static_cast<uint8_t>(rng());
      }
    }
    try {
      const SafetensorsFile file = parse(bytes, "damaged.st");
      for (const std::string& name : file.names()) {
        if (file.info(name).dtype == SafetensorsDType::kI32) {
          EXPECT_EQ(file.to_int32(name).size(), static_cast<std::size_t>(file.info(name).numel));
        } else {
          EXPECT_EQ(file.to_float(name).size(), static_cast<std::size_t>(file.info(name).numel));
        }
      }
      ++parsed;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("damaged.st"), std::string::npos)
          << "seed " << seed << " trial " << trial << ": " << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000) << "seed " << seed;
  EXPECT_GT(parsed, 0) << "seed " << seed;  // flips inside the data section are harmless
}

TEST(SafetensorsAccess, WrongDtypeAndMissingNames) {
  const SafetensorsFile file = parse(sample_file(), "acc.st");
  expect_error([&] { file.to_int32("w"); }, {"acc.st", "tensor 'w'", "F32[2, 3]", "expected I32"});
  expect_error([&] { file.to_float("idx"); }, {"tensor 'idx'", "not a floating-point"});
  expect_error([&] { file.info("nope"); }, {"acc.st", "no tensor named 'nope'"});
}

TEST(TensorStore, UnionOfPartsRejectsDuplicates) {
  TensorStore store;
  store.add(
      parse(SafetensorsFile::serialize({{"x.l0", SafetensorsDType::kF32, {2}, f32_bytes({1, 2})}},
                                       {{"case", "X"}, {"part", "0"}, {"nparts", "2"}}),
            "part0.st"));
  store.add(
      parse(SafetensorsFile::serialize({{"x.l1", SafetensorsDType::kF32, {1}, f32_bytes({3})}},
                                       {{"case", "X"}, {"part", "1"}, {"nparts", "2"}}),
            "part1.st"));
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x.l0", "x.l1"}));
  EXPECT_EQ(store.to_float("x.l1"), (std::vector<float>{3}));
  EXPECT_EQ(store.file_of("x.l0").path(), "part0.st");
  expect_error(
      [&] {
        store.add(parse(
            SafetensorsFile::serialize({{"x.l0", SafetensorsDType::kF32, {1}, f32_bytes({9})}}, {}),
            "dup.st"));
      },
      {"'x.l0'", "part0.st", "dup.st"});
  EXPECT_EQ(store.files().size(), 2u);  // the rejected file was not added
  expect_error([&] { store.to_float("x.l2"); }, {"no tensor named 'x.l2'", "part0.st", "part1.st"});
}

}  // namespace
}  // namespace specstate
