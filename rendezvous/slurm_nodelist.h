// Expands SLURM's compressed host lists ("node[01-04,07],gpu3", "rack[1-2]-n[1-3]").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::rendezvous {

// Every host in `nodelist`, in order. Bracket ranges keep the zero padding of their
// lower bound (n[08-10] -> n08 n09 n10); several bracket groups in one name expand as a
// product. Errors (unbalanced brackets, bad ranges, more than `max_hosts` hosts) name
// the list.
Result<std::vector<std::string>> ExpandSlurmNodelist(const std::string& nodelist, size_t max_hosts = 1 << 20);

// The first host of `nodelist`, without expanding the rest.
Result<std::string> FirstSlurmHost(const std::string& nodelist);

}  // namespace chorus::rendezvous
