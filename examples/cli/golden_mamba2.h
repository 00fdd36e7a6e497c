// The Mamba2 half of `specstate check-golden` (golden_case.h; the cases are described in the
// Mamba2 part of tests/data/golden/README.md): replays one Mamba2 verify + commit case through the
// public API (StatePool with ModelConfig::mamba2: acquire, begin_verify, verify, commit) and
// compares every output with SGLang's and with the float64 reference, under either strategy.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/golden_case.h"

namespace specstate::cli {

// Runs a Mamba2 case (golden_case.cpp decides which cases are) and fills `report` (description,
// tensors, checks, outcome kPass / kFail). Throws specstate::Error for problems of the case or the
// backend (the caller reports kError).
void run_mamba2_golden_case(const GoldenCase& golden, const nlohmann::json& params,
                            const GoldenOptions& options, GoldenReport& report);

}  // namespace specstate::cli
