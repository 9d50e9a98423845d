#include "algos/topology.h"

#include <algorithm>
#include <map>

namespace chorus::algos {

Topology Topology::FromHostIds(const std::vector<std::string>& host_ids) {
  Topology t;
  std::map<std::string, int> index;
  t.host_of.resize(host_ids.size());
  t.local_index.resize(host_ids.size());
  for (size_t r = 0; r < host_ids.size(); ++r) {
    auto [it, fresh] = index.emplace(host_ids[r], static_cast<int>(t.hosts.size()));
    if (fresh) t.hosts.emplace_back();
    t.host_of[r] = it->second;
    t.local_index[r] = static_cast<int>(t.hosts[it->second].size());
    t.hosts[it->second].push_back(static_cast<int>(r));
  }
  return t;
}

Topology Topology::Flat(int world_size) {
  std::vector<std::string> ids;
  for (int r = 0; r < world_size; ++r) ids.push_back(std::to_string(r));
  return FromHostIds(ids);
}

int Topology::max_local() const {
  size_t m = 0;
  for (const auto& h : hosts) m = std::max(m, h.size());
  return static_cast<int>(m);
}

bool Topology::even() const {
  for (const auto& h : hosts) {
    if (h.size() != hosts[0].size()) return false;
  }
  return true;
}

std::vector<int> Topology::Rail(int i) const {
  std::vector<int> rail;
  for (const auto& h : hosts) rail.push_back(h[static_cast<size_t>(i)]);
  return rail;
}

std::vector<int> Topology::Bridges(int root) const {
  const bool same_index = even();
  std::vector<int> bridges;
  for (int h = 0; h < num_hosts(); ++h) {
    bridges.push_back(h == host_of[root] ? root : hosts[h][same_index ? local_index[root] : 0]);
  }
  return bridges;
}

std::string Topology::Describe() const {
  if (hosts.empty()) return "no ranks";
  const std::string n = std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  if (even()) return n + " x " + std::to_string(hosts[0].size()) + (hosts[0].size() == 1 ? " rank" : " ranks");
  std::string s = n + " (";
  for (size_t i = 0; i < hosts.size(); ++i) s += (i ? ", " : "") + std::to_string(hosts[i].size());
  return s + " ranks)";
}

}  // namespace chorus::algos
