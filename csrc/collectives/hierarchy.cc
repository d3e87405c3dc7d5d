#include "collectives/hierarchy.h"

#include <algorithm>
#include <map>

namespace pycollect {

Hierarchy::Hierarchy(const std::vector<int>& hostOf, int rank) {
  std::map<int, std::vector<int>> byHost;
  for (size_t r = 0; r < hostOf.size(); ++r) byHost[hostOf[r]].push_back(static_cast<int>(r));
  for (auto& [id, ranks] : byHost) hosts_.push_back(ranks);  // ranks ascending
  std::sort(hosts_.begin(), hosts_.end());  // by lowest rank
  rails_ = static_cast<int>(hosts_[0].size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    rails_ = std::min(rails_, static_cast<int>(hosts_[h].size()));
    auto it = std::find(hosts_[h].begin(), hosts_[h].end(), rank);
    if (it != hosts_[h].end()) {
      host_ = static_cast<int>(h);
      local_ = static_cast<int>(it - hosts_[h].begin());
    }
  }
}

int Hierarchy::hostOf(int rank) const {
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (std::find(hosts_[h].begin(), hosts_[h].end(), rank) != hosts_[h].end()) return static_cast<int>(h);
  }
  return -1;
}

std::vector<int> Hierarchy::coreOf(int h) const {
  return std::vector<int>(hosts_[h].begin(), hosts_[h].begin() + rails_);
}

std::vector<int> Hierarchy::rail(int i) const {
  std::vector<int> ranks;
  for (const auto& host : hosts_) ranks.push_back(host[i]);
  return ranks;
}

std::vector<int> Hierarchy::members(int h, int i) const {
  std::vector<int> ranks;
  for (size_t k = i; k < hosts_[h].size(); k += rails_) ranks.push_back(hosts_[h][k]);
  return ranks;
}

std::vector<int> Hierarchy::extras() const {
  if (!core()) return {};
  std::vector<int> ranks = members(host_, local_);
  ranks.erase(ranks.begin());
  return ranks;
}

}  // namespace pycollect
