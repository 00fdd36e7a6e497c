#include "specstate/spec/window.h"

#include <sstream>
#include <string>

#include "specstate/status.h"

namespace specstate::spec {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(Status::kInvalidArgument, message);
}

}  // namespace

Window::Window(std::vector<int32_t> parents) : parents_(std::move(parents)) {
  depth_.assign(parents_.size(), 1);
  is_chain_ = true;
  max_depth_ = 1;
  for (std::size_t t = 1; t < parents_.size(); ++t) {
    depth_[t] = depth_[static_cast<std::size_t>(parents_[t])] + 1;
    if (depth_[t] > max_depth_) max_depth_ = depth_[t];
    if (parents_[t] != static_cast<int32_t>(t) - 1) is_chain_ = false;
  }
}

Window Window::chain(int length) {
  if (length < 1 || length > kMaxWindowNodes) {
    fail("spec::Window::chain: length = " + std::to_string(length) + " must be in [1, " +
         std::to_string(kMaxWindowNodes) + "] (kMaxWindowNodes)");
  }
  std::vector<int32_t> parents(static_cast<std::size_t>(length));
  for (int t = 0; t < length; ++t) parents[static_cast<std::size_t>(t)] = t - 1;
  return Window(std::move(parents));
}

Window Window::from_parents(std::vector<int32_t> parents) {
  if (parents.empty()) fail("spec::Window::from_parents: parents is empty (a window has a root)");
  if (parents.size() > static_cast<std::size_t>(kMaxWindowNodes)) {
    fail("spec::Window::from_parents: parents has " + std::to_string(parents.size()) +
         " entries, more than kMaxWindowNodes = " + std::to_string(kMaxWindowNodes));
  }
  if (parents[0] != -1) {
    fail("spec::Window::from_parents: parents[0] = " + std::to_string(parents[0]) +
         " must be -1 (node 0 is the root)");
  }
  for (std::size_t t = 1; t < parents.size(); ++t) {
    if (parents[t] < 0 || parents[t] >= static_cast<int32_t>(t)) {
      fail("spec::Window::from_parents: parents[" + std::to_string(t) +
           "] = " + std::to_string(parents[t]) + " must be in [0, " + std::to_string(t - 1) +
           "] (a parent precedes its child)");
    }
  }
  return Window(std::move(parents));
}

Window Window::from_links(const std::vector<int32_t>& first_child,
                          const std::vector<int32_t>& next_sibling) {
  const char* fn = "spec::Window::from_links: ";
  if (first_child.empty()) fail(std::string(fn) + "first_child is empty (a window has a root)");
  if (first_child.size() > static_cast<std::size_t>(kMaxWindowNodes)) {
    fail(std::string(fn) + "first_child has " + std::to_string(first_child.size()) +
         " entries, more than kMaxWindowNodes = " + std::to_string(kMaxWindowNodes));
  }
  if (first_child.size() != next_sibling.size()) {
    fail(std::string(fn) + "first_child has " + std::to_string(first_child.size()) +
         " entries but next_sibling has " + std::to_string(next_sibling.size()));
  }
  const int n = static_cast<int>(first_child.size());
  for (int t = 0; t < n; ++t) {
    for (const auto* links : {&first_child, &next_sibling}) {
      const int32_t v = (*links)[static_cast<std::size_t>(t)];
      if (v < -1 || v >= n) {
        fail(std::string(fn) + (links == &first_child ? "first_child[" : "next_sibling[") +
             std::to_string(t) + "] = " + std::to_string(v) + " is out of range [-1, " +
             std::to_string(n - 1) + "]");
      }
    }
  }
  if (next_sibling[0] != -1) {
    fail(std::string(fn) + "next_sibling[0] = " + std::to_string(next_sibling[0]) +
         " must be -1 (the root has no sibling)");
  }
  std::vector<int32_t> parents(static_cast<std::size_t>(n), -2);  // -2: not reached yet
  parents[0] = -1;
  // Nodes are visited in index order; since a child's index exceeds its parent's, a node's
  // parent is known when the node is visited, and a node reached twice is caught at once.
  for (int t = 0; t < n; ++t) {
    if (parents[static_cast<std::size_t>(t)] == -2) {
      fail(std::string(fn) + "node " + std::to_string(t) +
           " is not reached from the root through first_child / next_sibling");
    }
    int steps = 0;
    int32_t prev = -1;  // the sibling whose next_sibling is c (-1: first_child[t])
    for (int32_t c = first_child[static_cast<std::size_t>(t)]; c != -1;
         prev = c, c = next_sibling[static_cast<std::size_t>(c)]) {
      if (c <= t) {
        fail(std::string(fn) + "node " + std::to_string(c) + " is a child of node " +
             std::to_string(t) + " but a child's index must exceed its parent's");
      }
      if (parents[static_cast<std::size_t>(c)] == t) {
        fail(std::string(fn) + "next_sibling[" + std::to_string(prev) + "] = " + std::to_string(c) +
             " closes a loop among the children of node " + std::to_string(t));
      }
      if (parents[static_cast<std::size_t>(c)] != -2) {
        const std::string link = prev == -1 ? "first_child[" + std::to_string(t) + "]"
                                            : "next_sibling[" + std::to_string(prev) + "]";
        fail(std::string(fn) + link + " = " + std::to_string(c) + ": node " + std::to_string(c) +
             " is reached twice (children of " +
             std::to_string(parents[static_cast<std::size_t>(c)]) + " and of " + std::to_string(t) +
             ")");
      }
      parents[static_cast<std::size_t>(c)] = t;
      if (++steps > n) break;  // unreachable: a repeat is caught above
    }
  }
  return Window(std::move(parents));
}

void Window::check_node(const char* function, int node) const {
  if (node < 0 || node >= size()) {
    throw Error(Status::kOutOfRange, std::string(function) + ": node = " + std::to_string(node) +
                                         " is out of range [0, " + std::to_string(size() - 1) +
                                         "]");
  }
}

int32_t Window::parent(int node) const {
  check_node("spec::Window::parent", node);
  return parents_[static_cast<std::size_t>(node)];
}

std::vector<int32_t> Window::children(int node) const {
  check_node("spec::Window::children", node);
  std::vector<int32_t> out;
  for (int t = node + 1; t < size(); ++t) {
    if (parents_[static_cast<std::size_t>(t)] == node) out.push_back(t);
  }
  return out;
}

std::vector<int32_t> Window::path_to(int node) const {
  check_node("spec::Window::path_to", node);
  std::vector<int32_t> path(static_cast<std::size_t>(depth_[static_cast<std::size_t>(node)]));
  for (int32_t t = node, i = static_cast<int32_t>(path.size()) - 1; t != -1;
       t = parents_[static_cast<std::size_t>(t)], --i) {
    path[static_cast<std::size_t>(i)] = t;
  }
  return path;
}

int Window::depth(int node) const {
  check_node("spec::Window::depth", node);
  return depth_[static_cast<std::size_t>(node)];
}

void Window::to_links(std::vector<int32_t>& first_child, std::vector<int32_t>& next_sibling) const {
  first_child.assign(parents_.size(), -1);
  next_sibling.assign(parents_.size(), -1);
  std::vector<int32_t> last_child(parents_.size(), -1);
  for (std::size_t t = 1; t < parents_.size(); ++t) {
    const auto p = static_cast<std::size_t>(parents_[t]);
    if (last_child[p] == -1) {
      first_child[p] = static_cast<int32_t>(t);
    } else {
      next_sibling[static_cast<std::size_t>(last_child[p])] = static_cast<int32_t>(t);
    }
    last_child[p] = static_cast<int32_t>(t);
  }
}

std::string Window::describe() const {
  std::ostringstream out;
  if (is_chain_) {
    out << "chain(" << size() << ")";
    return out.str();
  }
  out << "tree[";
  for (std::size_t t = 0; t < parents_.size(); ++t) out << (t ? "," : "") << parents_[t];
  out << "]";
  return out.str();
}

namespace {
// A window as an error message quotes it: its description, cut at 64 characters (a tree of
// 65536 nodes described whole made a 371 KB message), and its size.
std::string quoted(const Window& window) {
  const std::string d = window.describe();
  return d.size() <= 64 ? d : d.substr(0, 64) + "... (" + std::to_string(window.size()) + " nodes)";
}
}  // namespace

void check_path(const Window& window, const std::vector<int32_t>& path, const char* what) {
  if (what == nullptr) what = "spec::check_path";
  for (std::size_t i = 0; i < path.size(); ++i) {
    const int32_t node = path[i];
    if (node < 0 || node >= window.size()) {
      fail(std::string(what) + ": path[" + std::to_string(i) + "] = " + std::to_string(node) +
           " is not a node of the window (" + quoted(window) + ")");
    }
    const int32_t expected_parent = i == 0 ? -1 : path[i - 1];
    if (window.parent(node) != expected_parent) {
      fail(std::string(what) + ": path[" + std::to_string(i) + "] = " + std::to_string(node) +
           (i == 0 ? std::string(" must be 0 (a path starts at the root)")
                   : " is not a child of path[" + std::to_string(i - 1) +
                         "] = " + std::to_string(path[i - 1]) + " (its parent is " +
                         std::to_string(window.parent(node)) + ")") +
           " in " + quoted(window));
    }
  }
}

}  // namespace specstate::spec
