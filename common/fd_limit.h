// Room for file descriptors before a transport opens many at once (a TCP mesh opens
// sockets x channels per peer): the soft RLIMIT_NOFILE is raised toward the hard one
// where that is enough, else the caller gets an error naming both limits and the need,
// rather than EMFILE from whichever socket happens to come last.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace chorus {

// The descriptors this process has open now (entries of /proc/self/fd).
int64_t OpenFdCount();

// Makes room for `more` descriptors beyond those open now. `what` says who needs them
// ("rank 3: the TCP mesh of 255 peers x 2 sockets") and `lower` how to need fewer;
// both go into the error.
Status ReserveFds(int64_t more, const std::string& what, const std::string& lower);

}  // namespace chorus
