// The shape of one row's verify window (DESIGN.md section 2): a chain of T tokens, or a draft
// tree given by a parents array or by EAGLE-style first-child / next-sibling links.
//
// Window index 0 is always the root (the previous round's bonus token); every other index is a
// draft token whose parent has a smaller index, so a window is a topologically ordered tree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specstate::spec {

// The most nodes a window may have: a sanity bound on the input (speculative windows are tens of
// tokens), so that Window::chain(2^31 - 1) is refused instead of allocating 16 GB.
constexpr int kMaxWindowNodes = 1 << 16;

class Window {
 public:
  // A chain of `length` tokens (root + length-1 drafts). Throws Error(kInvalidArgument) when
  // length is outside [1, kMaxWindowNodes].
  static Window chain(int length);
  // A tree from parents[t] (parents[0] = -1, 0 <= parents[t] < t for t >= 1). A parents array
  // that is a chain (parents[t] = t-1) gives a window with is_chain() true.
  // Throws Error(kInvalidArgument) naming the first bad entry, or when there are more than
  // kMaxWindowNodes entries.
  static Window from_parents(std::vector<int32_t> parents);
  // A tree from EAGLE / SGLang links: first_child[t] is t's first child (-1: leaf) and
  // next_sibling[t] the next child of t's parent (-1: last). Both [T]; node 0 is the root and
  // has no sibling. Every node must be reached exactly once from the root, and every child
  // must have a larger index than its parent, at most kMaxWindowNodes nodes. Throws
  // Error(kInvalidArgument) otherwise.
  static Window from_links(const std::vector<int32_t>& first_child,
                           const std::vector<int32_t>& next_sibling);

  Window() = default;  // a chain of one token (the root alone)

  int size() const noexcept { return static_cast<int>(parents_.size()); }
  bool is_chain() const noexcept { return is_chain_; }
  // parents[t] for every node, parents[0] = -1 (a chain gives -1, 0, 1, ..., T-2).
  const std::vector<int32_t>& parents() const noexcept { return parents_; }
  // The parent of `node` (-1 for the root). Throws Error(kOutOfRange) outside [0, size()).
  int32_t parent(int node) const;
  // Children of `node`, in increasing index order.
  std::vector<int32_t> children(int node) const;
  // Nodes from the root to `node`, both included.
  std::vector<int32_t> path_to(int node) const;
  // Number of nodes on the path root..node (the root has depth 1).
  int depth(int node) const;
  // Largest depth of any node: the most tokens one round can accept.
  int max_depth() const noexcept { return max_depth_; }
  // The first-child / next-sibling links of this window (children in index order).
  void to_links(std::vector<int32_t>& first_child, std::vector<int32_t>& next_sibling) const;
  // "chain(4)" or "tree[-1,0,0,1]".
  std::string describe() const;

  friend bool operator==(const Window& x, const Window& y) noexcept {
    return x.parents_ == y.parents_;
  }
  friend bool operator!=(const Window& x, const Window& y) noexcept { return !(x == y); }

 private:
  explicit Window(std::vector<int32_t> parents);
  // Throws Error(kOutOfRange) naming `function` and `node` outside [0, size()).
  void check_node(const char* function, int node) const;
  std::vector<int32_t> parents_{-1};
  std::vector<int32_t> depth_{1};
  bool is_chain_ = true;
  int max_depth_ = 1;
};

// Checks that `path` is a root-to-node path of `window` (path[0] = 0, each entry a child of
// the one before). An empty path is allowed (the row did not advance). Throws
// Error(kInvalidArgument) naming `what`, the bad position and value.
void check_path(const Window& window, const std::vector<int32_t>& path, const char* what);

}  // namespace specstate::spec
