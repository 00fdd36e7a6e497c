// Greedy acceptance (DESIGN.md section 5, step 4): compare the draft tokens of a window with the
// target model's argmax at every window position.
//
// Conventions. `tokens[t]` is the token at window index t (tokens[0] is the root, the previous
// round's bonus token); `target[t]` is the target model's argmax after consuming the path
// root..t, i.e. its prediction for the child of t. A draft token at index c with parent p is
// accepted when every node on its path is accepted and tokens[c] == target[p]. The round then
// emits the accepted drafts followed by the bonus token target[last accepted node].
#pragma once

#include <cstdint>
#include <vector>

#include "specstate/spec/window.h"

namespace specstate::spec {

// Result of one row. `path` holds the accepted window indices root..last (never empty: the
// root is always consumed), so the accepted length is path.size() and, for a chain, path is
// 0, 1, ..., a-1.
struct Acceptance {
  std::vector<int32_t> path;
  int32_t bonus_token = -1;

  int accepted_length() const noexcept { return static_cast<int>(path.size()); }
  int32_t last_node() const noexcept { return path.empty() ? -1 : path.back(); }
  // What StatePool::commit takes for this row: the accepted length (chain) or the last
  // accepted node (tree).
  int32_t commit_value(bool tree) const noexcept {
    return tree ? last_node() : static_cast<int32_t>(path.size());
  }
  // Tokens the round appends to the output: tokens[path[1..]] then the bonus token. Throws
  // Error(kInvalidArgument) for a negative path node (and a null `tokens` when there is a draft
  // to read); the vector overload also for a node past tokens.size().
  std::vector<int32_t> emitted(const int32_t* tokens) const;
  std::vector<int32_t> emitted(const std::vector<int32_t>& tokens) const;
};

// A chain of `window` tokens: a = 1 + the length of the longest prefix of drafts with
// tokens[t] == target[t-1]. Throws Error(kInvalidArgument) when window < 1 or a pointer is null.
Acceptance accept_greedy_chain(const int32_t* tokens, const int32_t* target, int window);
Acceptance accept_greedy_chain(const std::vector<int32_t>& tokens,
                               const std::vector<int32_t>& target);

// A tree: from the root, repeatedly step to the first child (lowest index) whose token equals
// the target's argmax at the current node; stop when no child matches.
// `tokens` and `target` hold window.size() entries.
Acceptance accept_greedy_tree(const Window& window, const int32_t* tokens, const int32_t* target);
Acceptance accept_greedy_tree(const Window& window, const std::vector<int32_t>& tokens,
                              const std::vector<int32_t>& target);

// Either of the above, chosen by window.is_chain().
Acceptance accept_greedy(const Window& window, const int32_t* tokens, const int32_t* target);

}  // namespace specstate::spec
