// The two levels of a group that spans hosts, as the hierarchical algorithms see them.
//
// Hosts come from the group's topology (pycollect/topology.py: which ranks share a host,
// learned as the group forms), numbered by their lowest rank; local index i is a host's
// i-th rank in rank order. Every host has at least m = min(ranks per host) ranks: local
// ranks 0..m-1 are its core ranks, and the core ranks with one local index, one per
// host, form a rail (rail i: local rank i of every host). The hierarchical algorithms
// run their inter-host phase on the m rails at once, each rail's traffic crossing each
// host's cable once, and their intra-host phases among a host's core ranks.
//
// A host with more than m ranks folds its extra ranks (local k >= m) into core rank
// k mod m, its partner: before the core's phases the extras hand their data to their
// partner, after them they get the result back, both over the host's shared memory.
// With the same number of ranks on every host there are no extras.
//
// Example, 3 + 1 ranks, hosts [0, 1, 2] [3]: m = 1, the one rail is [0, 3]; ranks 1 and
// 2 fold into rank 0. Example, 2 x 2, hosts [0, 1] [2, 3]: m = 2, rails [0, 2] [1, 3].
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/blocks.h"

namespace pycollect {

class Hierarchy {
 public:
  // hostOf[r]: the host of group rank r, for every rank of the group (any numbering;
  // hosts are renumbered by their lowest rank).
  Hierarchy(const std::vector<int>& hostOf, int rank);

  int hosts() const { return static_cast<int>(hosts_.size()); }
  int host() const { return host_; }
  int local() const { return local_; }
  int rails() const { return rails_; }
  bool core() const { return local_ < rails_; }
  int hostOf(int rank) const;
  // The group ranks of host h, ascending.
  const std::vector<int>& ranksOf(int h) const { return hosts_[h]; }
  // The core ranks of host h (its first rails() ranks).
  std::vector<int> coreOf(int h) const;
  // Rail i: local rank i of every host, hosts in order.
  std::vector<int> rail(int i) const;
  // The group ranks rail i carries for host h: its core rank i, then the extras folded
  // into it (local k >= rails(), k mod rails() == i), in rank order.
  std::vector<int> members(int h, int i) const;
  // This rank's partner (an extra's core rank) or its extras (a core rank's).
  int partner() const { return hosts_[host_][local_ % rails_]; }
  std::vector<int> extras() const;

 private:
  std::vector<std::vector<int>> hosts_;
  int host_ = 0, local_ = 0, rails_ = 1;
};

}  // namespace pycollect
