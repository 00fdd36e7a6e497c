// The golden conformance check behind `specstate check-golden` (docs/golden.md): loads the GDN
// verify + commit cases produced with SGLang's kernels (tests/data/golden/README.md), runs each
// through the public API (StatePool: acquire, begin_verify, verify, commit) on a chosen backend,
// and compares every output with SGLang's and with the float64 reference.
//
// The CLI and the tests (tests/cpu/test_golden.cpp) both call these functions, so a test that
// passes here is the command that passes for a user.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "specstate/config.h"
#include "specstate/safetensors.h"

namespace specstate::cli {

// One case: the union of the tensors of its parts (files grouped by their `case` metadata).
struct GoldenCase {
  std::string name;                // metadata `case`, e.g. "A"
  std::vector<std::string> files;  // its parts, in part order
  bool named_explicitly = true;    // a file was named on the command line (not found in a folder)
  TensorStore store;
};

// A file that could not be read, or a case whose parts do not fit together.
struct GoldenLoadError {
  std::string file;
  std::string message;
  bool named_explicitly = true;
};

struct GoldenInputs {
  std::vector<GoldenCase> cases;
  std::vector<GoldenLoadError> errors;
};

// Opens every path (a folder stands for its *.safetensors files, sorted), groups the files by
// `case` metadata (a file without it is a case of its own) and checks that each case has all of
// its `nparts` parts exactly once. Problems are collected in `errors`, never thrown.
GoldenInputs load_golden_inputs(const std::vector<std::string>& paths);

// Builds a case from files already in memory (the tests' corrupted copies); throws on problems.
GoldenCase make_golden_case(std::vector<SafetensorsFile> parts, bool named_explicitly = true);

struct GoldenOptions {
  Backend backend = Backend::kCpu;
  // kReplay keeps no intermediate snapshots: their comparison is reported as n/a (a note), and
  // the outputs and committed states are also checked bit for bit against a snapshot run.
  Strategy strategy = Strategy::kSnapshot;
};

// One compared tensor, over all layers (the worst layer counts). max_rel = max|ours - x| / max|x|
// over the real rows (row-indexed tensors) or all slots (pool tensors).
struct TensorComparison {
  std::string tensor;       // conv_out, inter_conv_window, core_out, inter_ssm, ...
  bool has_sglang = false;  // SGLang's tensor is in the case
  bool has_ref = false;     // the float64 ref_* tensor is in the case
  double vs_sglang = 0.0;   // max_rel against SGLang (inf when non-finite values appear)
  double vs_ref = 0.0;      // max_rel against the float64 reference
  double tol_sglang = 0.0;  // allowed max_rel against SGLang
  double tol_ref = 0.0;     // allowed max_rel against the reference
  std::string worst;        // where the largest error against the gating tensor sits
  bool pass = false;
};

// A yes/no property of the run (verify left the pool alone, commits are exact copies, ...).
struct PropertyCheck {
  std::string name;
  bool pass = false;
  std::string detail;  // what differed, when it failed
};

enum class GoldenOutcome { kPass, kFail, kNotSupported, kError };

struct GoldenReport {
  std::string case_name;
  std::vector<std::string> files;
  bool named_explicitly = true;
  std::string description;  // sizes, dtypes, chain/tree, backend, strategy
  GoldenOutcome outcome = GoldenOutcome::kError;
  std::string message;  // why, for kNotSupported and kError
  std::vector<TensorComparison> tensors;
  std::vector<PropertyCheck> checks;
  std::vector<std::string> notes;  // lines printed after the tensors (e.g. what does not apply)
  // Whose kernels produced the case's un-prefixed tensors ("sglang", "fla"): the report's column.
  std::string third_party = "sglang";

  // Whether this case makes check-golden exit non-zero: a failed or broken case, or an
  // unsupported one that was named explicitly (one found in a folder is only reported).
  bool counts_as_failure() const noexcept;
};

// Whether this check-golden can run --backend cuda here: built with the CUDA runtime and a device
// is visible (decided once). The library may still lack its CUDA backend; the pool says so then.
bool cuda_device_available() noexcept;

// Runs one case. Never throws for problems of the case or the backend: they become kError (or
// kNotSupported for a case whose kind or shape the backend cannot run) with a message.
GoldenReport run_golden_case(const GoldenCase& golden, const GoldenOptions& options);

void print_golden_report(std::ostream& out, const GoldenReport& report);

// Throws Error(kNotSupported) naming the backend when a state pool of `backend` cannot be built
// here (a library without its CUDA backend, or no usable device): probed with the smallest pool.
// check-golden calls it before running any case, so that a backend that cannot run is a bad
// argument (the command's exit 2, Python's NotSupportedError), not a failed check of every case.
void require_backend(Backend backend);

// The whole command: load, run every case, print reports and a summary to `out`.
// Returns 0 when every case passed, 1 otherwise.
int check_golden(const std::vector<std::string>& paths, const GoldenOptions& options,
                 std::ostream& out);

}  // namespace specstate::cli
