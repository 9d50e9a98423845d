// Starts the local ranks of one chorusrun invocation and supervises them: prefixes
// their output, stops everyone when one fails, forwards signals, enforces --timeout.
#pragma once

#include <string>

#include "common/status.h"
#include "tools/launcher/options.h"

namespace chorus::launcher {

// Runs the ranks to completion; returns chorusrun's exit code (see UsageText()).
// Rank output goes to fds 1 and 2, prefixed "[rank R] "; launcher messages go to fd 2.
int RunLocalRanks(const LaunchOptions& options);

// A TCP port free on every local address a moment ago (bind port 0, read it, close).
// Another process may take it before rank 0 binds it: the window is tiny, and
// ephemeral ports are handed out round-robin by the kernel.
Result<int> PickFreePort();

}  // namespace chorus::launcher
