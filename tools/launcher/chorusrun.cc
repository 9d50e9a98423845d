// chorusrun: a torchrun-like launcher for chorus programs. See UsageText() and
// tools/launcher/README.md.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/launcher/options.h"
#include "tools/launcher/supervisor.h"

int main(int argc, char** argv) {
  using namespace chorus::launcher;
  std::vector<std::string> args(argv + 1, argv + argc);
  chorus::Result<LaunchOptions> parsed = ParseLaunchArgs(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "chorusrun: %s\n%s", parsed.status().message().c_str(), UsageText().c_str());
    return 2;
  }
  LaunchOptions options = std::move(parsed).value();
  if (options.help) {
    std::fputs(UsageText().c_str(), stdout);
    return 0;
  }
  if (options.master_port == 0) {
    chorus::Result<int> port = PickFreePort();
    if (!port.ok()) {
      std::fprintf(stderr, "chorusrun: %s (pass --master-port)\n", port.status().ToString().c_str());
      return 1;
    }
    options.master_port = *port;
  }
  return RunLocalRanks(options);
}
