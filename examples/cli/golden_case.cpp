// The golden conformance check (golden_case.h, docs/golden.md, tests/data/golden/README.md):
// loading the case files, running each case through the runner of its layer kind
// (golden_runner.h; the adapters are golden_gdn.cpp, golden_mamba2.cpp and golden_kda.cpp), the
// report and the command's summary.
#include "cli/golden_case.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>
#include <utility>

#include "cli/golden_runner.h"
#include "specstate/spec/json_depth.h"
#include "specstate/specstate.h"

#if defined(SPECSTATE_CLI_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace specstate::cli {
namespace {

using golden::bad_case;
using golden::json;

// params_json is a flat object of scalars; anything nested deeper is hostile (nlohmann's dump()
// and operator!= recurse, so 100k levels would overflow the stack). Checked on the raw text.
constexpr int kMaxParamsJsonDepth = 16;

// The params_json of the case's parts (they must agree).
json case_params(const GoldenCase& golden) {
  json params;
  bool found = false;
  for (const auto& file : golden.store.files()) {
    const std::string text = file->metadata_value("params_json");
    if (text.empty()) continue;
    const int64_t too_deep = spec::json_nesting(text, kMaxParamsJsonDepth).first_past_limit;
    if (too_deep >= 0) {
      bad_case("'" + file->path() + "': params_json nests JSON deeper than the limit of " +
               std::to_string(kMaxParamsJsonDepth) + " levels (at byte " +
               std::to_string(too_deep) + ")");
    }
    json parsed;
    try {
      parsed = json::parse(text);
    } catch (const json::exception& e) {
      bad_case("'" + file->path() + "': params_json is not valid JSON: " + e.what());
    }
    if (!parsed.is_object()) bad_case("'" + file->path() + "': params_json is not a JSON object");
    if (found && parsed != params) {
      bad_case("'" + file->path() + "': params_json differs from the other parts of case " +
               golden.name);
    }
    params = std::move(parsed);
    found = true;
  }
  return found ? params : json::object();
}

// The layer kinds, tried in order: the first whose `matches` says yes runs the case. GDN comes
// last and takes every other case (one without mixed_qkv.l0 is "not a GDN golden case").
const golden::GoldenKind& kind_of(const GoldenCase& golden, const json& params) {
  const golden::GoldenKind* const kinds[] = {
      &golden::mamba2_golden_kind(), &golden::kda_golden_kind(), &golden::gdn_golden_kind()};
  for (const golden::GoldenKind* kind : kinds) {
    if (kind->matches(golden, params)) return *kind;
  }
  return golden::gdn_golden_kind();
}

std::string format_rel(double value) {
  if (std::isinf(value)) return "inf";
  std::ostringstream out;
  out << std::scientific << std::setprecision(2) << value;
  return out.str();
}

int part_number(const SafetensorsFile& file, const char* key, int fallback) {
  const std::string text = file.metadata_value(key);
  if (text.empty()) return fallback;
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error(Status::kInvalidArgument,
              "'" + file.path() + "': metadata " + key + " = '" + text + "' is not an integer");
}

}  // namespace

bool cuda_device_available() noexcept {
#if defined(SPECSTATE_CLI_CUDA)
  static const bool available = [] {
    int count = 0;
    // Fails (cudaErrorInsufficientDriver, 35) on machines without a driver.
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return available;
#else
  return false;
#endif
}

bool GoldenReport::counts_as_failure() const noexcept {
  switch (outcome) {
    case GoldenOutcome::kPass:
      return false;
    case GoldenOutcome::kNotSupported:
      return named_explicitly;
    case GoldenOutcome::kFail:
    case GoldenOutcome::kError:
      return true;
  }
  return true;
}

GoldenCase make_golden_case(std::vector<SafetensorsFile> parts, bool named_explicitly) {
  if (parts.empty()) throw Error(Status::kInvalidArgument, "a golden case needs at least one file");
  GoldenCase golden;
  golden.named_explicitly = named_explicitly;
  golden.name = parts.front().metadata_value("case", parts.front().path());
  const int nparts = part_number(parts.front(), "nparts", 1);
  std::map<int, std::size_t> by_part;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const SafetensorsFile& file = parts[i];
    const std::string name = file.metadata_value("case", file.path());
    if (name != golden.name) {
      throw Error(Status::kInvalidArgument,
                  "'" + file.path() + "' is case '" + name + "', not case '" + golden.name + "'");
    }
    if (part_number(file, "nparts", 1) != nparts) {
      throw Error(Status::kInvalidArgument,
                  "'" + file.path() + "': nparts = " + file.metadata_value("nparts", "1") +
                      " but the other parts of case " + golden.name + " say " +
                      std::to_string(nparts));
    }
    const int part = part_number(file, "part", 0);
    if (part < 0 || part >= nparts) {
      throw Error(Status::kInvalidArgument, "'" + file.path() + "': part " + std::to_string(part) +
                                                " outside [0, " + std::to_string(nparts) + ")");
    }
    if (!by_part.emplace(part, i).second) {
      throw Error(Status::kInvalidArgument,
                  "case " + golden.name + ": part " + std::to_string(part) + " given twice ('" +
                      parts[by_part[part]].path() + "' and '" + file.path() + "')");
    }
  }
  if (static_cast<int>(by_part.size()) != nparts) {
    // The first few missing parts only: nparts comes from the file (up to 2^31 - 1), and listing
    // them all took that much time and memory.
    constexpr int kListed = 16;
    const int64_t absent = int64_t{nparts} - static_cast<int64_t>(by_part.size());
    std::string missing;
    int listed = 0;
    for (int p = 0; p < nparts && listed < kListed; ++p) {
      if (!by_part.count(p)) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        ++listed;
      }
    }
    if (absent > listed) missing += ", ... (" + std::to_string(absent) + " missing)";
    throw Error(Status::kInvalidArgument, "case " + golden.name + " has " + std::to_string(nparts) +
                                              " parts; missing part(s) " + missing +
                                              " (pass every file of the case)");
  }
  for (const auto& kv : by_part) {
    golden.files.push_back(parts[kv.second].path());
    golden.store.add(std::move(parts[kv.second]));
  }
  return golden;
}

GoldenInputs load_golden_inputs(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  GoldenInputs inputs;
  // (path, named explicitly), without repeats: a file named both ways counts as named.
  std::vector<std::pair<std::string, bool>> files;
  std::map<std::string, std::size_t> seen;
  auto add_file = [&](const std::string& path, bool named) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(path, ec).string();
    const auto it = seen.find(ec ? path : key);
    if (it != seen.end()) {
      files[it->second].second = files[it->second].second || named;
      return;
    }
    seen.emplace(ec ? path : key, files.size());
    files.emplace_back(path, named);
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
          found.push_back(entry.path().string());
        }
      }
      if (ec) inputs.errors.push_back({path, "cannot list the folder: " + ec.message(), true});
      std::sort(found.begin(), found.end());
      if (found.empty()) inputs.errors.push_back({path, "no *.safetensors file in folder", true});
      for (const std::string& f : found) add_file(f, false);
    } else {
      add_file(path, true);
    }
  }

  // Group by case, keeping the order in which cases first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<SafetensorsFile, bool>>> groups;
  for (const auto& [path, named] : files) {
    try {
      SafetensorsFile file(path);
      const std::string name = file.metadata_value("case", path);
      if (!groups.count(name)) order.push_back(name);
      groups[name].emplace_back(std::move(file), named);
    } catch (const std::exception& e) {
      inputs.errors.push_back({path, e.what(), named});
    }
  }
  for (const std::string& name : order) {
    auto& group = groups[name];
    bool named = false;
    std::vector<SafetensorsFile> parts;
    std::string listed;
    for (auto& [file, explicit_file] : group) {
      named = named || explicit_file;
      listed += (listed.empty() ? "" : ", ") + file.path();
      parts.push_back(std::move(file));
    }
    try {
      inputs.cases.push_back(make_golden_case(std::move(parts), named));
    } catch (const std::exception& e) {
      inputs.errors.push_back({listed, e.what(), named});
    }
  }
  return inputs;
}

GoldenReport run_golden_case(const GoldenCase& golden, const GoldenOptions& options) {
  GoldenReport report;
  report.case_name = golden.name;
  report.files = golden.files;
  report.named_explicitly = golden.named_explicitly;
  const char* error_prefix = "";
  try {
    const json params = case_params(golden);
    const golden::GoldenKind& kind = kind_of(golden, params);
    error_prefix = kind.error_prefix;
    const auto adapter = kind.make(golden, params);
    report.description = adapter->describe(options);
    golden::run_round(golden.store, *adapter, options, report);
  } catch (const golden::CaseError& e) {
    report.outcome = GoldenOutcome::kError;
    report.tensors.clear();
    report.checks.clear();
    report.message = Error(e.status(), error_prefix + e.detail()).what();
  } catch (const Error& e) {
    report.outcome = GoldenOutcome::kError;
    report.tensors.clear();
    report.checks.clear();
    report.message = e.status() == Status::kNotSupported && options.backend == Backend::kCuda
                         ? std::string("backend cuda unavailable: ") + e.what()
                         : e.what();
  } catch (const std::exception& e) {
    report.outcome = GoldenOutcome::kError;
    report.tensors.clear();
    report.checks.clear();
    report.message = e.what();
  }
  return report;
}

void print_golden_report(std::ostream& out, const GoldenReport& report) {
  out << "case " << report.case_name << " (";
  for (std::size_t i = 0; i < report.files.size(); ++i) {
    out << (i ? ", " : "") << std::filesystem::path(report.files[i]).filename().string();
  }
  out << ")\n";
  if (!report.description.empty()) out << "  " << report.description << "\n";
  if (report.outcome == GoldenOutcome::kNotSupported) {
    out << "  " << report.message << "\n";
    out << (report.named_explicitly
                ? "  FAIL (counted as a failure: the file was named explicitly)\n"
                : "  SKIP (found in a folder, not counted; name the file to make it count)\n");
    return;
  }
  if (report.outcome == GoldenOutcome::kError) {
    out << "  error: " << report.message << "\n  FAIL\n";
    return;
  }
  const std::string third = report.third_party == "sglang" ? "sgl" : report.third_party;
  out << "  " << std::left << std::setw(22) << "tensor" << std::setw(12)
      << "vs " + report.third_party << std::setw(12) << "vs f64 ref" << std::setw(20)
      << "tolerance (ref/" + third + ")"
      << "result\n";
  for (const TensorComparison& t : report.tensors) {
    std::ostringstream tol;
    tol << (t.tol_ref == 0 ? "exact" : format_rel(t.tol_ref)) << "/"
        << (t.tol_sglang == 0 ? "exact" : format_rel(t.tol_sglang));
    out << "  " << std::setw(22) << t.tensor << std::setw(12)
        << (t.has_sglang ? format_rel(t.vs_sglang) : "absent") << std::setw(12)
        << (t.has_ref ? format_rel(t.vs_ref) : "absent") << std::setw(20) << tol.str()
        << (t.pass ? "ok" : "FAIL");
    if (!t.has_ref && !t.has_sglang) {
      out << (t.pass ? "  (not in the case)" : "  (missing from the case)");
    } else if (!t.pass && !t.worst.empty()) {
      out << "  worst at " << t.worst;
    }
    out << "\n";
  }
  for (const std::string& note : report.notes) out << "  " << note << "\n";
  for (const PropertyCheck& c : report.checks) {
    out << "  check " << c.name << ": " << (c.pass ? "ok" : "FAIL");
    if (!c.pass && !c.detail.empty()) out << " (" << c.detail << ")";
    out << "\n";
  }
  out << std::right << "  " << (report.outcome == GoldenOutcome::kPass ? "PASS" : "FAIL") << "\n";
}

void require_backend(Backend backend) {
  if (backend == Backend::kCpu) return;
  PoolOptions probe;
  probe.backend = backend;
  probe.num_slots = 1;
  probe.max_rows = 1;
  probe.max_window = 1;
  GdnConfig g;
  g.num_k_heads = 1;
  g.num_v_heads = 1;
  g.head_k_dim = 32;
  g.head_v_dim = 32;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, g), probe);
  } catch (const Error& e) {
    if (e.status() != Status::kNotSupported) throw;
    // The pool's message without its status prefix (this error carries the same status).
    std::string why = e.text();
    const std::string prefix = std::string(status_name(e.status())) + ": ";
    if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
    throw Error(Status::kNotSupported,
                "backend " + std::string(backend_name(backend)) + " cannot run here: " + why);
  }
}

int check_golden(const std::vector<std::string>& paths, const GoldenOptions& options,
                 std::ostream& out) {
  const GoldenInputs inputs = load_golden_inputs(paths);
  int passed = 0, failed = 0, skipped = 0;
  for (const GoldenLoadError& error : inputs.errors) {
    out << "error: " << error.file << ": " << error.message << "\n  FAIL\n";
    ++failed;
  }
  for (const GoldenCase& golden : inputs.cases) {
    const GoldenReport report = run_golden_case(golden, options);
    print_golden_report(out, report);
    if (report.outcome == GoldenOutcome::kPass) {
      ++passed;
    } else if (report.counts_as_failure()) {
      ++failed;
    } else {
      ++skipped;
    }
  }
  if (inputs.cases.empty() && inputs.errors.empty()) {
    out << "error: no golden case given\n";
    ++failed;
  }
  out << "check-golden (" << backend_name(options.backend) << ", "
      << strategy_name(options.strategy) << "): " << passed << " passed, " << failed << " failed";
  if (skipped > 0) out << ", " << skipped << " not supported (not counted)";
  out << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace specstate::cli
