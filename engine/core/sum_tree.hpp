// The canonical summation order of deterministic mode: how n ordered terms t[0..n) are added up, whether they
// are the ranks' contributions to a reduction or one rank's micro-batch gradients.
//
//   sum(t[0..n)) = t[0]                                     if n == 1
//                = sum(t[0..L)) + sum(t[L..n))              otherwise, L = the largest power of two below n
//
// Invariant that makes layouts agree bit for bit: when n = m * 2^j, every aligned block of 2^j consecutive
// terms is one subtree, and the tree over the m block sums is the canonical tree over m terms. So a step whose
// n micro-batches are spread over m data-parallel ranks, 2^j contiguous micro-batches each, adds exactly the
// same floats in exactly the same order as one rank adding all n: each rank sums its block canonically, the
// rank-ordered reduction sums the m block sums canonically. (For n <= 3 this is the plain left-to-right sum.)
//
// Streaming form (terms arriving in order, as micro-batches do): keep a stack of partial sums whose sizes are
// decreasing powers of two; a new term is pushed, and while the top two have equal size they merge (earlier
// one on the left). When all n terms are in, fold the stack from the right: s[0] + (s[1] + (... + s[k])).
// That evaluates the tree above exactly, with at most floor(log2 n) + 1 partial sums alive.
#pragma once

#include <cstdint>

namespace cleave {

// Number of terms in the left subtree of the canonical sum over n >= 2 terms.
constexpr std::int64_t sum_tree_left(std::int64_t n) {
  std::int64_t left = 1;
  while (left * 2 < n) left *= 2;
  return left;
}

}  // namespace cleave
