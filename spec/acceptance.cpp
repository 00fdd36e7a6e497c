#include "specstate/spec/acceptance.h"

#include <string>

#include "specstate/status.h"

namespace specstate::spec {
namespace {

void check_pointers(const char* fn, const int32_t* tokens, const int32_t* target) {
  if (tokens == nullptr || target == nullptr) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": " + (tokens == nullptr ? "tokens" : "target") + " is null");
  }
}

void check_sizes(const char* fn, std::size_t window, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& target) {
  if (tokens.size() != window || target.size() != window) {
    throw Error(Status::kInvalidArgument,
                std::string(fn) + ": tokens has " + std::to_string(tokens.size()) +
                    " entries and target " + std::to_string(target.size()) +
                    ", both must equal the window size " + std::to_string(window));
  }
}

}  // namespace

std::vector<int32_t> Acceptance::emitted(const int32_t* tokens) const {
  std::vector<int32_t> out;
  if (path.empty()) return out;
  if (tokens == nullptr && path.size() > 1) {
    throw Error(Status::kInvalidArgument,
                "spec::Acceptance::emitted: tokens is null (the path has " +
                    std::to_string(path.size()) + " nodes)");
  }
  for (std::size_t i = 1; i < path.size(); ++i) {
    if (path[i] < 0) {
      throw Error(Status::kInvalidArgument, "spec::Acceptance::emitted: path[" + std::to_string(i) +
                                                "] = " + std::to_string(path[i]) +
                                                " is no window node");
    }
  }
  out.reserve(path.size());
  for (std::size_t i = 1; i < path.size(); ++i) out.push_back(tokens[path[i]]);
  out.push_back(bonus_token);
  return out;
}

std::vector<int32_t> Acceptance::emitted(const std::vector<int32_t>& tokens) const {
  for (std::size_t i = 1; i < path.size(); ++i) {
    if (path[i] < 0 || static_cast<std::size_t>(path[i]) >= tokens.size()) {
      throw Error(Status::kInvalidArgument, "spec::Acceptance::emitted: path[" + std::to_string(i) +
                                                "] = " + std::to_string(path[i]) +
                                                " is outside tokens (" +
                                                std::to_string(tokens.size()) + " entries)");
    }
  }
  return emitted(tokens.data());
}

Acceptance accept_greedy_chain(const int32_t* tokens, const int32_t* target, int window) {
  check_pointers("spec::accept_greedy_chain", tokens, target);
  if (window < 1) {
    throw Error(Status::kInvalidArgument,
                "spec::accept_greedy_chain: window = " + std::to_string(window) + " must be >= 1");
  }
  Acceptance out;
  out.path.push_back(0);
  for (int t = 1; t < window && tokens[t] == target[t - 1]; ++t) out.path.push_back(t);
  out.bonus_token = target[out.path.back()];
  return out;
}

Acceptance accept_greedy_chain(const std::vector<int32_t>& tokens,
                               const std::vector<int32_t>& target) {
  check_sizes("spec::accept_greedy_chain", tokens.size(), tokens, target);
  if (tokens.empty()) {  // else its null data() was reported as "tokens is null"
    throw Error(Status::kInvalidArgument,
                "spec::accept_greedy_chain: tokens and target are empty: a window holds at least "
                "its root (1 token)");
  }
  return accept_greedy_chain(tokens.data(), target.data(), static_cast<int>(tokens.size()));
}

Acceptance accept_greedy_tree(const Window& window, const int32_t* tokens, const int32_t* target) {
  check_pointers("spec::accept_greedy_tree", tokens, target);
  const auto& parents = window.parents();
  Acceptance out;
  out.path.push_back(0);
  int32_t node = 0;
  // Children have larger indices than their parent, so one forward scan from node+1 finds the
  // matching child of lowest index; the next search starts after it.
  for (int32_t c = 1; c < window.size(); ++c) {
    if (parents[static_cast<std::size_t>(c)] == node && tokens[c] == target[node]) {
      out.path.push_back(c);
      node = c;
    }
  }
  out.bonus_token = target[node];
  return out;
}

Acceptance accept_greedy_tree(const Window& window, const std::vector<int32_t>& tokens,
                              const std::vector<int32_t>& target) {
  check_sizes("spec::accept_greedy_tree", static_cast<std::size_t>(window.size()), tokens, target);
  return accept_greedy_tree(window, tokens.data(), target.data());
}

Acceptance accept_greedy(const Window& window, const int32_t* tokens, const int32_t* target) {
  return window.is_chain() ? accept_greedy_chain(tokens, target, window.size())
                           : accept_greedy_tree(window, tokens, target);
}

}  // namespace specstate::spec
