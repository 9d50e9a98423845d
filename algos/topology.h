// Which ranks share a host: what hierarchical algorithms and the selector's cost model
// need to know of the world. Hosts are numbered in the order of their lowest rank.
#pragma once

#include <string>
#include <vector>

namespace chorus::algos {

struct Topology {
  std::vector<std::vector<int>> hosts;  // each host's ranks, in rank order
  std::vector<int> host_of;             // by rank: its host
  std::vector<int> local_index;         // by rank: its place among its host's ranks

  // From each rank's host identity (equal strings: one host).
  static Topology FromHostIds(const std::vector<std::string>& host_ids);
  // Every rank on a host of its own (what a communicator without host knowledge assumes).
  static Topology Flat(int world_size);

  int size() const { return static_cast<int>(host_of.size()); }
  int num_hosts() const { return static_cast<int>(hosts.size()); }
  // The most ranks any host runs.
  int max_local() const;
  // Every host runs as many ranks as every other.
  bool even() const;
  // The ranks with local index i, one per host, in host order (an even topology).
  std::vector<int> Rail(int i) const;
  // One rank per host, in host order, for a rooted call: the root on its host; elsewhere
  // the rank with the root's local index on an even topology, else the host's first.
  std::vector<int> Bridges(int root) const;
  // "2 hosts x 2 ranks", "3 hosts (3, 1, 2 ranks)".
  std::string Describe() const;
};

}  // namespace chorus::algos
