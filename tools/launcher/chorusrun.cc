// chorusrun: a torchrun-like launcher for chorus programs. See UsageText() and
// tools/launcher/README.md.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/job_secret.h"
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
  // A job secret keeps strangers that reach MASTER_PORT out (docs/design/job_secret.md).
  // One node can make its own; nodes that cannot talk before the job starts cannot
  // agree on one, so there the user must set it.
  if (std::getenv("CHORUS_SECRET") == nullptr && std::getenv("CHORUS_SECRET_FILE") == nullptr) {
    if (options.nnodes == 1) {
      chorus::Result<std::string> secret = chorus::NewSecretText();
      if (!secret.ok()) {
        std::fprintf(stderr, "chorusrun: cannot make a job secret: %s\n", secret.status().ToString().c_str());
        return 1;
      }
      options.job_secret = std::move(secret).value();
    } else {
      std::fprintf(stderr,
                   "chorusrun: no job secret: any process that reaches %s:%d can join (set the same "
                   "CHORUS_SECRET or CHORUS_SECRET_FILE on every node)\n",
                   options.master_addr.c_str(), options.master_port);
    }
  }
  return RunLocalRanks(options);
}
