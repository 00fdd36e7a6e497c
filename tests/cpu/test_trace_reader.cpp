// Acceptance traces: the JSON Lines reader rejects malformed input with the line number and a
// clear reason, loads nothing on error, and reads back exactly what the writer wrote.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "specstate/spec/trace.h"
#include "specstate/status.h"

namespace specstate::spec {
namespace {

const char* kHeader = R"({"format": "specstate-trace", "version": 1, "requests": [0, 7]})";

std::string good_text() {
  return std::string(kHeader) + "\n" +
         R"({"request": 0, "round": 0, "window": 4, "accepted": 3})"
         "\n"
         R"({"request": 7, "round": 0, "window": 4, "accepted": 0})"
         "\n"
         R"({"request": 0, "round": 1, "window": 5, "parents": [-1, 0, 0, 1, 2], "path": [0, 2, 4]})"
         "\n"
         R"({"request": 7, "round": 1, "window": 2, "accepted": 2})"
         "\n";
}

Trace parse(const std::string& text) {
  std::istringstream in(text);
  return parse_trace(in, "t.jsonl");
}

// The error message for `text`, which must be rejected.
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

// `record` as line 2 after the header must be rejected with a message naming line 2 and
// containing `fragment`.
void expect_bad_record(const std::string& record, const std::string& fragment) {
  const std::string message = error_of(std::string(kHeader) + "\n" + record + "\n");
  EXPECT_NE(message.find("t.jsonl:2: "), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "record " << record << "\nmessage " << message << "\nmissing " << fragment;
}

TEST(TraceReader, ReadsAGoodTrace) {
  const Trace t = parse(good_text());
  EXPECT_EQ(t.requests, (std::vector<int64_t>{0, 7}));
  ASSERT_EQ(t.records.size(), 4u);
  EXPECT_EQ(t.records[0].accepted_length(), 3);
  EXPECT_EQ(t.records[0].path, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(t.records[0].window.is_chain());
  EXPECT_EQ(t.records[1].accepted_length(), 0);
  EXPECT_EQ(t.records[1].commit_value(false), 0);
  EXPECT_EQ(t.records[1].commit_value(true), -1);
  EXPECT_FALSE(t.records[2].window.is_chain());
  EXPECT_EQ(t.records[2].path, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(t.records[2].commit_value(true), 4);
  EXPECT_EQ(t.num_rounds(), 2);
  EXPECT_EQ(t.max_window(), 5);
  EXPECT_EQ(t.round(1).size(), 2u);
  EXPECT_EQ(t.accepted_histogram(), (std::vector<int64_t>{1, 0, 1, 2, 0, 0}));
  EXPECT_DOUBLE_EQ(t.mean_accepted_length(), 2.0);
}

TEST(TraceReader, BlankLinesAndCrlfAreFine) {
  std::string text = good_text();
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(parse(crlf).records.size(), 4u);
  EXPECT_EQ(parse("\n  \n" + text + "\n\n").records.size(), 4u);
  // A byte-order mark at the start of a line is ignored, a line of only one (and blanks) too:
  // docs/traces.md says so, and such a line was refused as empty JSON.
  const std::string bom = "\xEF\xBB\xBF";
  EXPECT_EQ(parse(bom + "\n" + bom + "  \n" + bom + text).records.size(), 4u);
}

// Key order is kept (ordered_json), which costs time quadratic in an object's keys: a header of
// 160,000 meta keys took 22 s and was accepted. An object of more than kMaxTraceObjectKeys keys
// is refused before the parse, on reading and on writing.
TEST(TraceReader, ObjectsOfTooManyKeysAreRefused) {
  const auto meta = [](int keys) {
    std::string m = "{";
    for (int i = 0; i < keys; ++i) m += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 1";
    return m + "}";
  };
  const std::string record = R"({"request": 0, "round": 0, "window": 2, "accepted": 1})";
  const auto header = [](const std::string& m) {
    return R"({"format": "specstate-trace", "version": 1, "requests": [0], "meta": )" + m + "}";
  };
  const Trace ok = parse(header(meta(kMaxTraceObjectKeys)) + "\n" + record + "\n");
  EXPECT_EQ(ok.records.size(), 1u);
  const std::string message =
      error_of(header(meta(kMaxTraceObjectKeys + 1)) + "\n" + record + "\n");
  EXPECT_NE(message.find("t.jsonl:1: an object with more than 4096 keys"), std::string::npos)
      << message;
  Trace bad = ok;
  bad.meta_json = meta(kMaxTraceObjectKeys + 1);
  std::ostringstream out;
  EXPECT_THROW(write_trace(out, bad), Error);
  EXPECT_TRUE(out.str().empty());
}

// The per-object bound alone let a header of 469 meta objects of 4096 keys each (16 MiB) take
// 4.6 s to read and 25 s through simulate's four parses: at most kMaxTraceLineKeys keys in all
// objects of a line, on reading, and meta's share of them (the header has 4 keys of its own) on
// writing, so that what is written is read.
TEST(TraceReader, LinesOfTooManyKeysInAllAreRefused) {
  const auto meta = [](int objects, int keys) {
    std::string m = "{";
    for (int o = 0; o < objects; ++o) {
      m += (o ? ",\"o" : "\"o") + std::to_string(o) + "\": {";
      for (int i = 0; i < keys; ++i) m += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 1";
      m += "}";
    }
    return m + "}";
  };
  const std::string record = R"({"request": 0, "round": 0, "window": 2, "accepted": 1})";
  const auto header = [](const std::string& m) {
    return R"({"format": "specstate-trace", "version": 1, "requests": [0], "meta": )" + m + "}";
  };
  // 16 objects of 4095 keys and meta's own 16: 65,536 with the header's 4 is past the limit.
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of(header(meta(16, 4095)) + "\n" + record + "\n");
  EXPECT_NE(message.find("t.jsonl:1: more than 65536 keys in the line's objects together"),
            std::string::npos)
      << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // 15 such objects (61,425 + 15 + 4 keys) are read, and written back as they were read.
  const Trace ok = parse(header(meta(15, 4095)) + "\n" + record + "\n");
  EXPECT_EQ(ok.records.size(), 1u);
  std::ostringstream written;
  write_trace(written, ok);
  EXPECT_EQ(parse(written.str()).meta_json, ok.meta_json);
  // A meta_json of 65,533 keys in all would make a header line of 65,537: refused by the writer.
  Trace bad = ok;
  bad.meta_json = meta(16, 4094);  // 65,504 + 16 = 65,520 keys: fits
  std::ostringstream fits;
  EXPECT_NO_THROW(write_trace(fits, bad));
  bad.meta_json = meta(17, 3854);  // 65,518 + 17 = 65,535 keys: past 65,532
  std::ostringstream out;
  EXPECT_THROW(write_trace(out, bad), Error);
  EXPECT_TRUE(out.str().empty());
}

// What the writer writes, the reader reads: the writer refused too little. A meta of 16 levels
// made a header of 17, and a meta_json of more than 16 MiB a header line the reader refuses.
TEST(TraceReader, TheWriterKeepsTheReadersBounds) {
  Trace t = parse(good_text());
  std::string deep = "{\"a\":1}";  // as the reader gives meta_json back (dumped)
  for (int d = 1; d < kMaxTraceJsonDepth - 1; ++d) deep = "{\"a\":" + deep + "}";
  t.meta_json = deep;  // 15 levels: a header of 16
  std::ostringstream out;
  write_trace(out, t);
  EXPECT_EQ(parse(out.str()).meta_json, deep);
  t.meta_json = "{\"a\":" + deep + "}";  // 16 levels
  try {
    validate_trace(t);
    ADD_FAILURE() << "a meta of 16 levels was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta_json nests JSON deeper than 15 levels"),
              std::string::npos)
        << e.what();
  }
  t.meta_json = "{\"a\": \"" + std::string(kMaxTraceLineBytes, 'x') + "\"}";
  try {
    validate_trace(t);
    ADD_FAILURE() << "a header line past kMaxTraceLineBytes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the header line would be"), std::string::npos)
        << e.what();
  }
}

// Files beside `path` whose names start with its name + ".tmp-" (write_trace_file's temporaries).
int temporaries_beside(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp-";
  int n = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

// In a death test's child: writes `big` over `path` under a 64 KiB file size limit, exits 0 iff the
// write failed naming the path, left `path` holding `before` and left no temporary file.
[[noreturn]] void write_under_a_size_limit(const std::string& path, const Trace& big,
                                           const std::string& before) {
  std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
  const rlimit limit{1 << 16, 1 << 16};
  setrlimit(RLIMIT_FSIZE, &limit);
  bool named = false;
  try {
    write_trace_file(path, big);
  } catch (const Error& e) {
    named = std::string(e.what()).find(path) != std::string::npos;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream now;
  now << in.rdbuf();
  std::exit(named && now.str() == before && temporaries_beside(path) == 0 ? 0 : 1);
}

// A write that fails partway (here a file size limit; a full disk alike) leaves the file it was
// to replace as it was, and the error names the path: the file was truncated first, so a failed
// `simulate --trace t.jsonl --save-trace t.jsonl` lost its input.
TEST(TraceReader, AFailedWriteLeavesTheOldFile) {
  const std::string path = ::testing::TempDir() + "specstate_trace_keep.jsonl";
  const Trace small = parse(good_text());
  write_trace_file(path, small);
  std::ostringstream expected;
  write_trace(expected, small);
  Trace big = generate_fixed(TraceShape{/*requests=*/64, /*rounds=*/512, Window::chain(4)}, 2);
  EXPECT_EXIT(write_under_a_size_limit(path, big, expected.str()), ::testing::ExitedWithCode(0),
              "");
  EXPECT_EQ(read_trace(path).records.size(), small.records.size());
  write_trace_file(path, big);  // without the limit it replaces the file
  EXPECT_EQ(read_trace(path).records.size(), big.records.size());
  EXPECT_EQ(temporaries_beside(path), 0);
  // Through a link: the file it names is replaced, the link stays a link, the file keeps its
  // permissions (the rename replaced the link by a new 0644 file); a file the caller may not
  // write is refused, unchanged.
  namespace fs = std::filesystem;
  const std::string link = path + ".link";
  std::remove(link.c_str());
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  fs::create_symlink(path, link);
  write_trace_file(link, small);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_trace(path).records.size(), small.records.size());
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  if (::geteuid() != 0) {  // root writes any file
    fs::permissions(path, fs::perms::owner_read);
    EXPECT_THROW(write_trace_file(path, big), Error);
    EXPECT_EQ(read_trace(path).records.size(), small.records.size());
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  }
  EXPECT_EQ(temporaries_beside(path), 0);
  std::remove(link.c_str());
  std::remove(path.c_str());
}

// As nobody (when run as root): the write of a file nobody may not write is refused, and the
// file stays (the refusal removed it: the clean-up named `path` until a temporary existed).
[[noreturn]] void refused_as_nobody(const std::string& path, const Trace& trace) {
  if (::geteuid() == 0 && ::setuid(65534) != 0) std::exit(2);
  bool named = false;
  try {
    write_trace_file(path, trace);
  } catch (const Error& e) {
    named = std::string(e.what()).find("cannot write") != std::string::npos;
  }
  std::exit(named && std::filesystem::exists(path) ? 0 : 1);
}

// A refused write, a name with no room for a temporary beside it and a link to no file: none of
// them removes or replaces what the caller named (the first two deleted the file, the third
// replaced the link by a file).
TEST(TraceReader, ARefusedWriteKeepsTheFileAndALinkToNoFileStaysALink) {
  namespace fs = std::filesystem;
  const Trace small = parse(good_text());
  const Trace big = generate_fixed(TraceShape{/*requests=*/2, /*rounds=*/3, Window::chain(4)}, 2);
  const fs::path dir = fs::path(::testing::TempDir()) / "specstate_trace_keep_dir";
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  fs::permissions(dir, fs::perms::all);  // 0777, no sticky bit: anyone may unlink in it
  // A read-only file (owned by the test's user) written as another user (or as this one).
  const std::string ro = (dir / "ro.jsonl").string();
  write_trace_file(ro, small);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  if (::geteuid() == 0) {
    EXPECT_EXIT(refused_as_nobody(ro, big), ::testing::ExitedWithCode(0), "");
  } else {
    EXPECT_THROW(write_trace_file(ro, big), Error);
  }
  ASSERT_TRUE(fs::exists(ro));
  EXPECT_EQ(read_trace(ro).records.size(), small.records.size());
  // A name at the length limit (NAME_MAX 255): its temporary's would not fit, so the file itself
  // is written (in place), not removed.
  const std::string longest = (dir / (std::string(248, 'a') + ".jsonl")).string();
  write_trace_file(longest, small);
  write_trace_file(longest, big);
  ASSERT_TRUE(fs::exists(longest));
  EXPECT_EQ(read_trace(longest).records.size(), big.records.size());
  // A link to a file that does not exist yet: the file it names is created, the link stays.
  const fs::path link = dir / "link.jsonl", real = dir / "sub" / "real.jsonl";
  fs::create_symlink(real, link);
  write_trace_file(link.string(), small);
  EXPECT_TRUE(fs::is_symlink(link));
  ASSERT_TRUE(fs::exists(real));
  EXPECT_EQ(read_trace(real.string()).records.size(), small.records.size());
  EXPECT_EQ(
      temporaries_beside(ro) + temporaries_beside(longest) + temporaries_beside(real.string()), 0);
  fs::remove_all(dir);
}

// A file with another name (a hard link) is written in place: a new file renamed over one name
// parted it from the other, which kept the old trace. (So is a file of another owner: a new file
// would have been the writer's, or refused in a sticky folder such as /tmp.)
TEST(TraceReader, AFileWithAnotherNameIsWrittenInPlace) {
  namespace fs = std::filesystem;
  const Trace small = parse(good_text());
  const Trace big = generate_fixed(TraceShape{/*requests=*/2, /*rounds=*/3, Window::chain(4)}, 2);
  const fs::path dir = fs::path(::testing::TempDir()) / "specstate_trace_links_dir";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string one = (dir / "one.jsonl").string(), two = (dir / "two.jsonl").string();
  write_trace_file(one, small);
  fs::create_hard_link(one, two);
  write_trace_file(one, big);
  EXPECT_EQ(fs::hard_link_count(one), 2u);
  EXPECT_EQ(read_trace(two).records.size(), big.records.size());
  EXPECT_EQ(temporaries_beside(one), 0);
  if (::geteuid() == 0) {  // a file of another owner (root can give one away): keeps its owner
    const std::string theirs = (dir / "theirs.jsonl").string();
    write_trace_file(theirs, small);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    write_trace_file(theirs, big);
    struct stat st {};
    ASSERT_EQ(::stat(theirs.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(read_trace(theirs).records.size(), big.records.size());
  }
  fs::remove_all(dir);
}

// A new trace file gets 0666 less the umask, as an ordinary create gives it (it was 0600, the
// temporary's mode, whatever the umask); an empty path is refused before anything is created
// (it ended in a rename error after a temporary was written in the working directory).
TEST(TraceReader, ANewFileGetsTheUmasksModeAndAnEmptyPathIsRefused) {
  namespace fs = std::filesystem;
  const Trace small = parse(good_text());
  const std::string path = ::testing::TempDir() + "specstate_trace_mode.jsonl";
  for (const mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    std::remove(path.c_str());
    const mode_t old = ::umask(mask);
    write_trace_file(path, small);
    ::umask(old);
    EXPECT_EQ(static_cast<mode_t>(fs::status(path).permissions() & fs::perms::all), 0666 & ~mask)
        << "umask " << std::oct << mask;
  }
  std::remove(path.c_str());
  try {
    write_trace_file("", small);
    ADD_FAILURE() << "an empty path was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spec::write_trace_file: path is empty"),
              std::string::npos)
        << e.what();
  }
  try {
    read_trace("");
    ADD_FAILURE() << "an empty path was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spec::read_trace: path is empty"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(temporaries_beside(fs::current_path().string() + "/"), 0);
}

// In a death test's child, as a user who is not root (root opens any file): under a umask that
// clears the owner's write bit, writes a trace to `path`; exits 0 iff it was written, reads back,
// and has mode 0444.
[[noreturn]] void write_under_umask_0222(const std::string& path, const Trace& trace) {
  if (::geteuid() == 0 && ::setuid(65534) != 0) std::exit(2);  // nobody
  ::umask(0222);
  try {
    write_trace_file(path, trace);
  } catch (const Error&) {
    std::exit(3);
  }
  namespace fs = std::filesystem;
  const bool mode = (fs::status(path).permissions() & fs::perms::all) ==
                    (fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const bool same = read_trace(path).records.size() == trace.records.size();
  std::remove(path.c_str());
  std::exit(mode && same ? 0 : 4);
}

// A umask that clears the owner's write bit gave the temporary file a mode its writer could not
// open by name ("cannot open", where an ordinary create and write succeed): it is written through
// mkstemp's descriptor, its mode set once it is complete.
TEST(TraceReader, AUmaskWithoutOwnerWriteStillWritesTheFile) {
  if (::geteuid() == 0) {  // the child drops root: check that this machine lets it
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(::setuid(65534) == 0 ? 0 : 1);
    int status = 1;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      GTEST_SKIP() << "root cannot become another user here (no CAP_SETUID)";
  }
  const std::string dir = "/tmp/specstate_trace_umask";
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);  // nobody writes here too
  const std::string path = dir + "/t.jsonl";
  std::remove(path.c_str());
  EXPECT_EXIT(write_under_umask_0222(path, parse(good_text())), ::testing::ExitedWithCode(0), "");
}

TEST(TraceReader, EachRecordFieldWrongOnce) {
  // Missing fields.
  expect_bad_record(R"({"round": 0, "window": 4, "accepted": 1})", "missing field \"request\"");
  expect_bad_record(R"({"request": 0, "window": 4, "accepted": 1})", "missing field \"round\"");
  expect_bad_record(R"({"request": 0, "round": 0, "accepted": 1})", "missing field \"window\"");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4})", "missing field \"accepted\"");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0]})",
                    "missing field \"path\"");
  // Wrong types.
  expect_bad_record(R"({"request": "0", "round": 0, "window": 4, "accepted": 1})",
                    "field \"request\" must be an integer, got string \"0\"");
  expect_bad_record(R"({"request": 0, "round": 0.5, "window": 4, "accepted": 1})",
                    "field \"round\" must be an integer, got number 0.5");
  expect_bad_record(R"({"request": 0, "round": 0, "window": null, "accepted": 1})",
                    "field \"window\" must be an integer, got null");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4, "accepted": true})",
                    "field \"accepted\" must be an integer, got boolean");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 3, "parents": "-1,0,0", "path": [0]})",
                    "field \"parents\" must be an array of integers");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0], "path": [0, "1"]})",
      "field \"path\"[1] must be an integer");
  // Out of range.
  expect_bad_record(R"({"request": -1, "round": 0, "window": 4, "accepted": 1})",
                    "field \"request\" = -1 is out of range");
  expect_bad_record(R"({"request": 0, "round": -2, "window": 4, "accepted": 1})",
                    "field \"round\" = -2 is out of range");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 0, "accepted": 0})",
                    "field \"window\" = 0 is out of range [1, 1024]");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4000, "accepted": 0})",
                    "field \"window\" = 4000 is out of range");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4, "accepted": 5})",
                    "field \"accepted\" = 5 is out of range [0, 4]");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4, "accepted": -1})",
                    "field \"accepted\" = -1 is out of range");
  // Trees.
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 4, "parents": [-1, 0, 0], "path": [0]})",
      "field \"parents\" has 3 entries but \"window\" = 4");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 2, 0], "path": [0]})",
      "parents[1] = 2");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 3, "parents": [0, 0, 0], "path": [0]})",
                    "parents[0] = 0");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0], "path": [0, 1, 2]})",
      "path[2] = 2 is not a child of path[1] = 1");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0], "path": [1]})",
      "path[0] = 1 must be 0");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0], "path": [0, 3]})",
      "field \"path\"[1] = 3 is out of range [0, 2]");
  expect_bad_record(
      R"({"request": 0, "round": 0, "window": 3, "parents": [-1, 0, 0], "path": [0, 1], "accepted": 3})",
      "field \"accepted\" = 3 disagrees with \"path\" (2 nodes)");
  expect_bad_record(R"({"request": 0, "round": 0, "window": 3, "path": [0, 1], "accepted": 2})",
                    "field \"path\" belongs to tree records");
  // Unknown fields (a typo must not pass silently).
  expect_bad_record(R"({"request": 0, "round": 0, "window": 4, "acepted": 1})",
                    "unknown field \"acepted\" in a record");
}

TEST(TraceReader, RequestIdsAndRoundOrder) {
  expect_bad_record(R"({"request": 3, "round": 0, "window": 4, "accepted": 1})",
                    "request 3 is not declared in the header's \"requests\"");
  expect_bad_record(R"({"request": 0, "round": 1, "window": 4, "accepted": 1})",
                    "request 0 has round 1 where round 0 was expected");
  // A round repeated, on line 3.
  const std::string message = error_of(std::string(kHeader) + "\n" +
                                       R"({"request": 0, "round": 0, "window": 4, "accepted": 1})"
                                       "\n"
                                       R"({"request": 0, "round": 0, "window": 4, "accepted": 1})"
                                       "\n");
  EXPECT_NE(message.find("t.jsonl:3: request 0 has round 0 where round 1 was expected"),
            std::string::npos)
      << message;
}

TEST(TraceReader, HeaderFieldsWrongOnce) {
  auto expect_bad_header = [](const std::string& header, const std::string& fragment) {
    const std::string message = error_of(header + "\n");
    EXPECT_NE(message.find("t.jsonl:1: "), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message << "\nmissing " << fragment;
  };
  expect_bad_header(R"({"request": 0, "round": 0, "window": 4, "accepted": 1})",
                    "the first line must be the header");
  expect_bad_header(R"({"format": "other", "version": 1, "requests": [0]})",
                    "\"format\" must be \"specstate-trace\"");
  expect_bad_header(R"({"format": "specstate-trace", "version": 2, "requests": [0]})",
                    "\"version\" = 2 is not supported");
  expect_bad_header(R"({"format": "specstate-trace", "version": "1", "requests": [0]})",
                    "field \"version\" must be an integer");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1})",
                    "missing header field \"requests\"");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": 3})",
                    "\"requests\" must be an array of integers");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": []})",
                    "\"requests\" is empty");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": [1, 2, 1]})",
                    "declares request 1 twice");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": [-4]})",
                    "\"requests\"[0] = -4 must be >= 0");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": [0.5]})",
                    "\"requests\"[0] must be an integer");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": [0], "meta": 3})",
                    "\"meta\" must be an object");
  expect_bad_header(R"({"format": "specstate-trace", "version": 1, "requests": [0], "x": 3})",
                    "unknown field \"x\" in the header");
}

TEST(TraceReader, TruncatedAndNonJsonLines) {
  const std::string good = good_text();
  // A file cut in the middle of its last line.
  const std::string cut = good.substr(0, good.size() - 12);
  std::string message = error_of(cut);
  EXPECT_NE(message.find("t.jsonl:5: not valid JSON"), std::string::npos) << message;
  // Cut in the middle of the header.
  message = error_of(std::string(kHeader).substr(0, 20));
  EXPECT_NE(message.find("t.jsonl:1: not valid JSON"), std::string::npos) << message;
  // Not an object.
  message = error_of(std::string(kHeader) + "\n[1, 2]\n");
  EXPECT_NE(message.find("t.jsonl:2: expected a JSON object, got array"), std::string::npos)
      << message;
  message = error_of(std::string(kHeader) + "\n42\n");
  EXPECT_NE(message.find("t.jsonl:2: expected a JSON object"), std::string::npos) << message;
  // Two records on one line.
  message = error_of(std::string(kHeader) + "\n" +
                     R"({"request": 0, "round": 0, "window": 4, "accepted": 1} {"request": 7})"
                     "\n");
  EXPECT_NE(message.find("t.jsonl:2: not valid JSON"), std::string::npos) << message;
  // Empty input.
  message = error_of("");
  EXPECT_NE(message.find("empty trace"), std::string::npos) << message;
  message = error_of("\n\n");
  EXPECT_NE(message.find("empty trace"), std::string::npos) << message;
}

// Request ids chosen to collide in a hash table keyed by the id (libstdc++'s std::hash<int64_t>
// is the identity: multiples of the table's bucket count share one chain) cost no more than any
// others: the reader found a record's request by walking that chain, and 80,000 such ids with
// 20,000 records took 11 s (read_trace of a 6.4 MB file 26 s); sorted ids take milliseconds.
TEST(TraceReader, RequestIdsThatCollideInAHashTableReadInLinearTime) {
  constexpr int kRequests = 80000, kRecords = 20000;
  constexpr int64_t kStride = 85229;  // a bucket count libstdc++'s table passes through
  const auto text_of = [&](int64_t stride) {
    std::string text = R"({"format": "specstate-trace", "version": 1, "requests": [)";
    for (int i = 0; i < kRequests; ++i) text += (i ? "," : "") + std::to_string(i * stride);
    text += "]}\n";
    for (int i = 0; i < kRecords; ++i) {
      text += R"({"request": )" + std::to_string(i * stride) +
              R"(, "round": 0, "window": 1, "accepted": 1})" + "\n";
    }
    return text;
  };
  const auto seconds_of = [](const std::string& text, Trace& t) {
    const auto start = std::chrono::steady_clock::now();
    t = parse(text);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // Against the same trace with ids 0, 1, 2, ... (as slow under sanitizers or on a busy machine).
  Trace plain, t;
  const double t_plain = seconds_of(text_of(1), plain);
  const double t_collide = seconds_of(text_of(kStride), t);
  EXPECT_EQ(t.records.size(), static_cast<std::size_t>(kRecords));
  EXPECT_EQ(t.requests.size(), static_cast<std::size_t>(kRequests));
  EXPECT_EQ(t.records.back().request, int64_t{kRecords - 1} * kStride);
  EXPECT_LT(t_collide, 4.0 * t_plain + 1.0) << "ids 0, 1, 2, ... took " << t_plain << " s";
  // The rules the tracker enforces still hold: an undeclared id between two declared ones, a
  // repeated round, a declared id given twice, a negative id before a repeat.
  const std::string head = R"({"format": "specstate-trace", "version": 1, "requests": [5, 3, 9]})";
  const std::string rec = R"(, "round": 0, "window": 1, "accepted": 1})";
  EXPECT_NE(
      error_of(head + "\n" + R"({"request": 4)" + rec + "\n").find("request 4 is not declared"),
      std::string::npos);
  EXPECT_NE(
      error_of(head + "\n" + R"({"request": 9)" + rec + "\n" + R"({"request": 9)" + rec + "\n")
          .find("request 9 has round 0 where round 1 was expected"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"format": "specstate-trace", "version": 1, "requests": [1, 2, 1, -1]})"
                     "\n")
                .find("declares request 1 twice"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"format": "specstate-trace", "version": 1, "requests": [1, -2, 1]})"
                     "\n")
                .find("\"requests\"[1] = -2 must be >= 0"),
            std::string::npos);
}

TEST(TraceReader, NothingHalfLoaded) {
  const Trace good = parse(good_text());
  const std::size_t before = good.records.size();
  ASSERT_EQ(before, 4u);
  // The bad record comes after good ones: the reader reads past them and reports the bad line
  // (line 6: the header and four records precede it), returning no trace at all.
  const std::string bad = good_text() + R"({"request": 0, "round": 2, "window": 4, "accepted": 9})"
                                        "\n";
  const std::string message = error_of(bad);
  EXPECT_NE(message.find("t.jsonl:6: field \"accepted\" = 9"), std::string::npos) << message;
}

TEST(TraceReader, WriterRoundTrip) {
  const Trace t = parse(good_text());
  std::ostringstream out;
  write_trace(out, t);
  const Trace back = parse(out.str());
  EXPECT_EQ(back.requests, t.requests);
  ASSERT_EQ(back.records.size(), t.records.size());
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    EXPECT_EQ(back.records[i].request, t.records[i].request);
    EXPECT_EQ(back.records[i].round, t.records[i].round);
    EXPECT_EQ(back.records[i].window, t.records[i].window);
    EXPECT_EQ(back.records[i].path, t.records[i].path);
  }
  // One line per record plus the header.
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
}

TEST(TraceReader, FilesAndWriterValidation) {
  const std::string path = ::testing::TempDir() + "specstate_trace_roundtrip.jsonl";
  const Trace t = parse(good_text());
  write_trace_file(path, t);
  EXPECT_EQ(read_trace(path).records.size(), t.records.size());
  std::remove(path.c_str());
  try {
    read_trace(path);
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
  // The writer refuses what the reader would refuse.
  Trace bad = t;
  bad.records[1].round = 5;
  std::ostringstream out;
  EXPECT_THROW(write_trace(out, bad), Error);
  EXPECT_TRUE(out.str().empty());
  bad = t;
  bad.records[0].path = {1};
  EXPECT_THROW(write_trace(out, bad), Error);
  bad = t;
  bad.records[0].request = 3;
  EXPECT_THROW(write_trace(out, bad), Error);
  bad = t;
  bad.meta_json = "[1]";
  EXPECT_THROW(write_trace(out, bad), Error);
}

// A file name with a NUL byte names another file (the system reads it up to the NUL): refused,
// and the file the name's prefix names is neither written nor read.
TEST(TraceReader, PathsWithANulByteAreRefused) {
  const std::string prefix = ::testing::TempDir() + "specstate_trace_nul";
  const std::string path = prefix + std::string(1, '\0') + ".jsonl";
  std::remove(prefix.c_str());
  const Trace t = parse(good_text());
  for (int write = 0; write < 2; ++write) {
    try {
      if (write) {
        write_trace_file(path, t);
      } else {
        read_trace(path);
      }
      ADD_FAILURE() << "took a path with a NUL byte";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(what.find(write ? "spec::write_trace_file" : "spec::read_trace"), std::string::npos)
          << what;
      EXPECT_NE(what.find("specstate_trace_nul\\0.jsonl' holds a NUL byte"), std::string::npos)
          << what;
    }
  }
  std::ifstream created(prefix);
  EXPECT_FALSE(created.good()) << prefix << " was written";
}

}  // namespace
}  // namespace specstate::spec
