// What the hierarchical algorithms (allreduce_hierarchical.cc and its siblings) share:
// the peers they check headers with, and the hand-over between an extra rank and its
// partner (hierarchy.h).
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/context.h"

namespace pycollect {

// The peers a two-level call exchanges headers with: its ring neighbours in the group
// (as every algorithm's: a neighbour that chose another algorithm is a MismatchError),
// its neighbours in each of `views` it runs a ring on (rank lists holding this rank),
// and `partners` (its fold partner or extras). Symmetric: each of those lists it too.
std::vector<int> levelPeers(const Context& ctx, const std::vector<std::vector<int>>& views,
                            const std::vector<int>& partners);

// What a two-level call on the core-and-rails plan (all-reduce, all-gather, reduce-scatter)
// knows of this rank: its host's core ranks, its rail, and the ranks it folds with (a core
// rank's extras, an extra's partner). Constructing it exchanges the call's headers with
// every peer of every phase (levelPeers).
struct Levels {
  explicit Levels(Context& ctx);
  const Hierarchy& hy;
  std::vector<int> core, rail, partners;
};

// The blocks of the intra-host ring over a host's core ranks, in a buffer of `count`
// elements per group rank: core rank i's is rail i's members' slots on every host, host by
// host (Hierarchy::members).
std::vector<Block> hostBlocks(const Hierarchy& hy, size_t count);

// Sends `bytes` to `peer` (left in flight: the call's drainSends waits for it).
void handTo(Context& ctx, int peer, const void* data, size_t bytes, const char* phase);
// Receives `bytes` from `peer`, naming `phase` while it waits.
void takeFrom(Context& ctx, int peer, void* data, size_t bytes, const char* phase);

}  // namespace pycollect
