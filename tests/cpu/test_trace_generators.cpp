// Trace generators: seeded and reproducible, with the distributions they promise.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "specstate/spec/trace.h"
#include "specstate/status.h"

namespace specstate::spec {
namespace {

TraceShape shape(int requests, int rounds, Window window, uint64_t seed) {
  TraceShape s;
  s.requests = requests;
  s.rounds = rounds;
  s.window = std::move(window);
  s.seed = seed;
  return s;
}

std::string text_of(const Trace& t) {
  std::ostringstream out;
  write_trace(out, t);
  return out.str();
}

TEST(TraceGenerators, FixedLength) {
  const Trace t = generate_fixed(shape(3, 5, Window::chain(4), 1), 3);
  ASSERT_EQ(t.records.size(), 15u);
  for (const auto& r : t.records) EXPECT_EQ(r.path, (std::vector<int32_t>{0, 1, 2}));
  // Round-major order, requests 0 .. 2.
  EXPECT_EQ(t.records[4].round, 1);
  EXPECT_EQ(t.records[4].request, 1);
  EXPECT_NO_THROW(validate_trace(t));
  EXPECT_THROW(generate_fixed(shape(3, 5, Window::chain(4), 1), 5), Error);
  EXPECT_THROW(generate_fixed(shape(3, 5, Window::chain(4), 1), 0), Error);
  // On a tree: the lowest-index node at that depth.
  const Trace tree = generate_fixed(shape(1, 2, Window::from_parents({-1, 0, 0, 2, 1}), 1), 3);
  EXPECT_EQ(tree.records[0].path, (std::vector<int32_t>{0, 2, 3}));
}

// Each of the three generators refuses `s` with kInvalidArgument and a message holding every
// one of `needles`.
void expect_generators_refuse(const TraceShape& s, const std::vector<std::string>& needles) {
  const std::vector<double> weights = {1.0, 1.0};
  for (int g = 0; g < 3; ++g) {
    try {
      if (g == 0) generate_fixed(s, 2);
      if (g == 1) generate_geometric(s, 0.5);
      if (g == 2) generate_empirical(s, weights);
      ADD_FAILURE() << "generator " << g << ": " << s.requests << " x " << s.rounds << " generated";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << what;
    }
  }
}

// A shape of more records than the reader takes is refused, naming both counts, before anything
// is allocated (10^6 x 10^6 records raised std::bad_alloc, 2^31 - 1 squared std::length_error).
TEST(TraceGenerators, ShapesPastTheRecordLimitAreRefused) {
  for (const auto& [requests, rounds] :
       {std::pair{1000000, 1000000}, std::pair{2147483647, 2147483647}, std::pair{4097, 2048}}) {
    expect_generators_refuse(
        shape(requests, rounds, Window::chain(4), 1),
        {"requests x rounds = " + std::to_string(requests) + " x " + std::to_string(rounds),
         "kMaxTraceRecords"});
  }
  // The limit itself is allowed (4096 x 2048 = kMaxTraceRecords).
  EXPECT_EQ(int64_t{4096} * 2048, kMaxTraceRecords);
  EXPECT_NO_THROW(generate_fixed(shape(4096, 1, Window::chain(2), 1), 1));
}

// More requests than a header line the reader takes holds (their ids) are refused even with few
// or no records: INT_MAX requests of 0 rounds allocated 16 GB before std::bad_alloc, 3 million
// made a trace that write_trace and the reader refuse. The limit itself is generated, written
// and read back.
TEST(TraceGenerators, RequestsPastTheHeaderLimitAreRefused) {
  for (const auto& [requests, rounds] :
       {std::pair{2147483647, 0}, std::pair{kMaxTraceRequests + 1, 1}, std::pair{3000000, 0}}) {
    expect_generators_refuse(shape(requests, rounds, Window::chain(4), 1),
                             {"requests = " + std::to_string(requests), "kMaxTraceRequests"});
  }
  const Trace t = generate_fixed(shape(kMaxTraceRequests, 0, Window::chain(2), 1), 1);
  EXPECT_EQ(t.requests.size(), static_cast<std::size_t>(kMaxTraceRequests));
  EXPECT_NO_THROW(validate_trace(t));
  std::istringstream in(text_of(t));
  EXPECT_EQ(parse_trace(in, "max requests").requests.size(),
            static_cast<std::size_t>(kMaxTraceRequests));
}

TEST(TraceGenerators, SeededAndReproducible) {
  const auto s = shape(4, 50, Window::chain(6), 1234);
  EXPECT_EQ(text_of(generate_geometric(s, 0.6)), text_of(generate_geometric(s, 0.6)));
  auto other = s;
  other.seed = 1235;
  EXPECT_NE(text_of(generate_geometric(s, 0.6)), text_of(generate_geometric(other, 0.6)));
  const std::vector<double> w{1, 2, 3};
  EXPECT_EQ(text_of(generate_empirical(s, w)), text_of(generate_empirical(s, w)));
  // Reproducible across builds and standard libraries, not only within one process: the same
  // seed gives the traces stored in tests/data/traces (written once by this generator).
  const auto stored = [](const std::string& name) {
    std::ifstream in(std::string(SPECSTATE_TEST_DATA) + "/traces/" + name, std::ios::binary);
    EXPECT_TRUE(in.good()) << name;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_EQ(text_of(generate_geometric(s, 0.6)),
            stored("geometric_r4_n50_chain6_a0.6_seed1234.jsonl"));
  EXPECT_EQ(text_of(generate_empirical(s, w)),
            stored("empirical_r4_n50_chain6_w123_seed1234.jsonl"));
  // The seed and the generator are recorded in the header's meta.
  EXPECT_NE(generate_geometric(s, 0.6).meta_json.find("\"seed\":1234"), std::string::npos);
  EXPECT_NE(generate_geometric(s, 0.6).meta_json.find("\"generator\":\"geometric\""),
            std::string::npos);
}

TEST(TraceGenerators, GeometricMeanMatchesTheory) {
  const int T = 5;
  for (double alpha : {0.0, 0.3, 0.7, 1.0}) {
    const Trace t = generate_geometric(shape(8, 2000, Window::chain(T), 99), alpha);
    // E[a] = sum_{k=0}^{T-1} alpha^k (draft k accepted with probability alpha^k).
    double expected = 0;
    for (int k = 0; k < T; ++k) expected += std::pow(alpha, k);
    SCOPED_TRACE("alpha " + std::to_string(alpha) + " seed 99");
    EXPECT_NEAR(t.mean_accepted_length(), expected, 0.03 * expected + 1e-12);
    const auto hist = t.accepted_histogram();
    EXPECT_EQ(hist[0], 0);  // a generated round always consumes the root
    // P(a = 1) = 1 - alpha.
    EXPECT_NEAR(static_cast<double>(hist[1]) / t.records.size(), 1.0 - alpha, 0.02);
  }
  EXPECT_THROW(generate_geometric(shape(1, 1, Window::chain(4), 0), 1.5), Error);
  EXPECT_THROW(generate_geometric(shape(1, 1, Window::chain(4), 0), -0.1), Error);
  EXPECT_THROW(generate_geometric(shape(1, 1, Window::chain(4), 0), std::nan("")), Error);
  EXPECT_THROW(generate_geometric(shape(0, 1, Window::chain(4), 0), 0.5), Error);
}

TEST(TraceGenerators, GeometricOnTreesWalksValidPaths) {
  const Window w = Window::from_parents({-1, 0, 0, 1, 1, 2, 3});
  const Trace t = generate_geometric(shape(4, 500, w, 7), 0.8);
  int reached_leaf = 0, took_node_2 = 0;
  for (const auto& r : t.records) {
    ASSERT_NO_THROW(check_path(w, r.path, "generated"));
    reached_leaf += r.path.back() == 6;
    took_node_2 += r.path.size() > 1 && r.path[1] == 2;
  }
  // 2000 records: node 2 is taken with probability alpha / 2 = 0.4 (children drawn uniformly),
  // the leaf 6 with probability alpha^3 / 4 = 0.128.
  EXPECT_NEAR(took_node_2 / 2000.0, 0.4, 0.04);
  EXPECT_NEAR(reached_leaf / 2000.0, 0.128, 0.03);
}

TEST(TraceGenerators, EmpiricalFollowsTheWeights) {
  const std::vector<double> weights{0.5, 0.0, 0.25, 0.25};
  const Trace t = generate_empirical(shape(10, 2000, Window::chain(4), 3), weights);
  const auto hist = t.accepted_histogram();
  const double n = static_cast<double>(t.records.size());
  EXPECT_EQ(hist[2], 0);  // zero weight: never drawn
  EXPECT_NEAR(hist[1] / n, 0.5, 0.02);
  EXPECT_NEAR(hist[3] / n, 0.25, 0.02);
  EXPECT_NEAR(hist[4] / n, 0.25, 0.02);
  // On a tree: a uniformly drawn node of the drawn depth.
  const Window w = Window::from_parents({-1, 0, 0, 1, 2});
  const Trace tree = generate_empirical(shape(2, 1000, w, 4), {0, 0, 1});
  int node3 = 0;
  for (const auto& r : tree.records) {
    ASSERT_EQ(r.accepted_length(), 3);
    node3 += r.path.back() == 3;
  }
  EXPECT_GT(node3, 800);
  EXPECT_LT(node3, 1200);
  // Bad weights.
  EXPECT_THROW(generate_empirical(shape(1, 1, Window::chain(4), 0), {}), Error);
  EXPECT_THROW(generate_empirical(shape(1, 1, Window::chain(4), 0), {1, 1, 1, 1, 1}), Error);
  EXPECT_THROW(generate_empirical(shape(1, 1, Window::chain(4), 0), {0, 0}), Error);
  EXPECT_THROW(generate_empirical(shape(1, 1, Window::chain(4), 0), {1, -1}), Error);
  EXPECT_THROW(generate_empirical(shape(1, 1, Window::chain(4), 0), {1, INFINITY}), Error);
  // Finite weights whose sum overflows drew the last length every time.
  try {
    generate_empirical(shape(1, 1, Window::chain(4), 0), {1e308, 1e308});
    ADD_FAILURE() << "weights summing to inf accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum to inf"), std::string::npos) << e.what();
  }
  // Large finite weights whose sum is finite keep their proportions (1 : 3).
  const Trace large = generate_empirical(shape(4, 1000, Window::chain(4), 3), {1e300, 3e300});
  int two = 0;
  for (const auto& r : large.records) two += r.accepted_length() == 2;
  EXPECT_GT(two, 2800);
  EXPECT_LT(two, 3200);
}

TEST(TraceGenerators, GeneratedTracesReadBack) {
  const Window w = Window::from_parents({-1, 0, 0, 1});
  const Trace t = generate_geometric(shape(3, 20, w, 11), 0.5);
  std::istringstream in(text_of(t));
  const Trace back = parse_trace(in);
  ASSERT_EQ(back.records.size(), t.records.size());
  for (std::size_t i = 0; i < t.records.size(); ++i)
    EXPECT_EQ(back.records[i].path, t.records[i].path);
  EXPECT_EQ(back.meta_json, t.meta_json);
}

}  // namespace
}  // namespace specstate::spec
