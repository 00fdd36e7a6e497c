// How the CUDA backend packs a round's small int32 arrays (slots, parents, token offsets, host
// commit steps) into upload launches (kernels::pack_upload, which launch_upload_i32 calls with a
// kernel launch per batch): every value lands at its place in its array, a batch holds at most
// kUploadSpans arrays and kUploadChunk values, arrays longer than a batch's room continue in the
// next, and a failed launch stops the upload. Host-only: runs in CI, where the kernel cannot.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kernels/kernel_types.h"

namespace specstate::kernels {
namespace {

// Source arrays of the given sizes (distinct values: array a, element i holds a * 100000 + i),
// their destinations, and the batches pack_upload hands to its launch.
struct Upload {
  std::vector<std::vector<int32_t>> src, dst;
  std::vector<UploadSpan> spans;
  std::vector<UploadBatch> batches;

  explicit Upload(const std::vector<int>& sizes) {
    for (std::size_t a = 0; a < sizes.size(); ++a) {
      src.emplace_back(static_cast<std::size_t>(sizes[a]));
      for (int i = 0; i < sizes[a]; ++i) src[a][i] = static_cast<int32_t>(a * 100000 + i);
      dst.emplace_back(static_cast<std::size_t>(sizes[a]), -1);
    }
    for (std::size_t a = 0; a < sizes.size(); ++a) {
      spans.push_back({dst[a].data(), src[a].data(), sizes[a]});
    }
  }
  // Packs, then runs each batch as the kernel does (on the host) and checks its limits.
  int run(int fail_at = -1, int error = 0) {
    const int rc =
        pack_upload(spans.data(), static_cast<int>(spans.size()), [&](const UploadBatch& b) {
          batches.push_back(b);
          return static_cast<int>(batches.size()) - 1 == fail_at ? error : 0;
        });
    for (const UploadBatch& b : batches) {
      EXPECT_GE(b.spans, 1);
      EXPECT_LE(b.spans, kUploadSpans);
      EXPECT_LE(b.begin[b.spans], kUploadChunk);
      for (int s = 0; s < b.spans; ++s) {
        EXPECT_LT(b.begin[s], b.begin[s + 1]) << "an empty array in a batch";
        for (int i = b.begin[s]; i < b.begin[s + 1]; ++i) b.dst[s][i - b.begin[s]] = b.values[i];
      }
    }
    return rc;
  }
};

TEST(PackUpload, ARoundsSlotsParentsAndOffsetsAreOneLaunch) {
  Upload u({8, 16, 9});  // 8 rows of T = 2: slots, parents, cu_seqlens
  EXPECT_EQ(u.run(), 0);
  EXPECT_EQ(u.batches.size(), 1u);
  EXPECT_EQ(u.dst, u.src);
}

TEST(PackUpload, ArraysPastOneLaunchContinueInTheNextInOrder) {
  // 300 slots and 900 parents (300 rows of T = 3): 960 values, then the last 240 parents.
  Upload a({300, 900});
  EXPECT_EQ(a.run(), 0);
  ASSERT_EQ(a.batches.size(), 2u);
  EXPECT_EQ(a.batches[0].begin[a.batches[0].spans], kUploadChunk);
  EXPECT_EQ(a.batches[1].begin[a.batches[1].spans], 240);
  EXPECT_EQ(a.dst, a.src);
  // An array longer than a launch, empty arrays (no launch, no span) and one of exactly 960.
  Upload b({1000, 3, 0, 960, 1});
  EXPECT_EQ(b.run(), 0);
  EXPECT_EQ(b.batches.size(), 3u);  // 960 | 40 + 3 + 917 | 43 + 1
  EXPECT_EQ(b.dst, b.src);
  const int total =
      std::accumulate(b.batches.begin(), b.batches.end(), 0,
                      [](int n, const UploadBatch& x) { return n + x.begin[x.spans]; });
  EXPECT_EQ(total, 1000 + 3 + 960 + 1);
}

TEST(PackUpload, MoreArraysThanALaunchWritesTakeAnotherLaunch) {
  Upload u({1, 1, 1, 1, 1, 1});
  EXPECT_EQ(u.run(), 0);
  ASSERT_EQ(u.batches.size(), 2u);
  EXPECT_EQ(u.batches[0].spans, kUploadSpans);
  EXPECT_EQ(u.batches[1].spans, 2);
  EXPECT_EQ(u.dst, u.src);
}

TEST(PackUpload, NothingToUploadLaunchesNothing) {
  Upload u({0, 0});
  EXPECT_EQ(u.run(), 0);
  EXPECT_TRUE(u.batches.empty());
  EXPECT_EQ(pack_upload(nullptr, 0, [](const UploadBatch&) { return 1; }), 0);
}

TEST(PackUpload, AFailedLaunchStopsTheUploadAndIsReturned) {
  Upload u({960, 960, 960});
  EXPECT_EQ(u.run(/*fail_at=*/1, /*error=*/7), 7);
  EXPECT_EQ(u.batches.size(), 2u);  // the third batch is never launched
  EXPECT_EQ(u.dst[2], std::vector<int32_t>(960, -1));
}

}  // namespace
}  // namespace specstate::kernels
