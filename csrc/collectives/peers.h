// Building the list of peers an algorithm exchanges headers with.
#pragma once

#include <algorithm>
#include <vector>

namespace pycollect {

// Appends `peer` unless it is `self` or already listed.
inline void addPeer(std::vector<int>& peers, int peer, int self) {
  if (peer != self && std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
}

// The header peers of a log-step algorithm: its ring neighbours (as every algorithm
// includes them, two neighbours that chose different algorithms always read each
// other's header, so a disagreement is a MismatchError, never a wait for a header
// that is not coming) plus the peers it exchanges payload with.
inline std::vector<int> headerPeers(const std::vector<int>& ringPeers, const std::vector<int>& partners,
                                    int self) {
  std::vector<int> peers;
  for (int p : ringPeers) addPeer(peers, p, self);
  for (int p : partners) addPeer(peers, p, self);
  return peers;
}

}  // namespace pycollect
