// The driver of a fuzz target built without libFuzzer (any compiler): replays every file of the
// corpus directories given on the command line, then runs a bounded number of random inputs
// (random bytes, and mutations of the corpus files: flips, insertions, truncations, splices).
//
//   fuzz_<target> [--runs N] [--seed S] [--max-len BYTES] [--seconds S] DIR_OR_FILE...
//
// Exits non-zero only through the target aborting (an oracle violation or a crash). With clang,
// the same target links against libFuzzer instead (docs/fuzzing.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);

namespace {

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> mutate(std::vector<uint8_t> input,
                            const std::vector<std::vector<uint8_t>>& corpus, std::mt19937_64& rng,
                            std::size_t max_len) {
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    const std::size_t n = input.size();
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (n) input[rng() % n] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte to an interesting value
        if (n) {
          static const uint8_t interesting[] = {0,   1,   0x7f, 0x80, 0xff, '[',
                                                '{', '"', ',',  '-',  '9',  '\n'};
          input[rng() % n] = interesting[rng() % sizeof(interesting)];
        }
        break;
      case 2:  // insert random bytes
        for (int k = static_cast<int>(rng() % 8); k >= 0; --k) {
          input.insert(input.begin() + static_cast<std::ptrdiff_t>(n ? rng() % (n + 1) : 0),
                       static_cast<uint8_t>(rng()));
        }
        break;
      case 3:  // truncate
        if (n) input.resize(rng() % n);
        break;
      case 4:  // splice in part of another corpus entry
        if (!corpus.empty()) {
          const auto& other = corpus[rng() % corpus.size()];
          if (!other.empty()) {
            const std::size_t from = rng() % other.size();
            const std::size_t len = 1 + rng() % (other.size() - from);
            input.insert(input.begin() + static_cast<std::ptrdiff_t>(n ? rng() % (n + 1) : 0),
                         other.begin() + static_cast<std::ptrdiff_t>(from),
                         other.begin() + static_cast<std::ptrdiff_t>(from + len));
          }
        }
        break;
      default:  // erase a range
        if (n > 1) {
          const std::size_t from = rng() % n;
          input.erase(input.begin() + static_cast<std::ptrdiff_t>(from),
                      input.begin() + static_cast<std::ptrdiff_t>(from + 1 + rng() % (n - from)));
        }
        break;
    }
  }
  if (input.size() > max_len) input.resize(max_len);
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  long long runs = 1000;
  unsigned long long seed = 1;
  std::size_t max_len = 4096;
  double seconds = 1e30;
  std::vector<std::vector<uint8_t>> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::atoll(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--max-len" && i + 1 < argc) {
      max_len = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      const std::filesystem::path p(arg);
      if (std::filesystem::is_directory(p)) {
        std::vector<std::filesystem::path> files;
        for (const auto& e : std::filesystem::directory_iterator(p)) {
          if (e.is_regular_file()) files.push_back(e.path());
        }
        std::sort(files.begin(), files.end());
        for (const auto& f : files) corpus.push_back(read_file(f));
      } else {
        corpus.push_back(read_file(p));
      }
    }
  }
  for (const auto& input : corpus) LLVMFuzzerTestOneInput(input.data(), input.size());
  std::printf("replayed %zu corpus inputs\n", corpus.size());
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  long long done = 0;
  for (; done < runs; ++done) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
      break;
    }
    std::vector<uint8_t> input;
    if (corpus.empty() || rng() % 4 == 0) {
      input.resize(rng() % (max_len + 1));
      for (uint8_t& b : input) b = static_cast<uint8_t>(rng());
    } else {
      input = mutate(corpus[rng() % corpus.size()], corpus, rng, max_len);
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("ran %lld random inputs (seed %llu), no failure\n", done, seed);
  return 0;
}
