// tools/simulate: the selector's cost model at scale, on paper (simulate.h).
#include <cstdio>
#include <string>
#include <vector>

#include "tools/simulate/simulate.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  chorus::Result<chorus::simulate::SimOptions> options = chorus::simulate::ParseSimFlags(args);
  if (!options.ok()) {
    std::fprintf(stderr, "simulate: %s\n", options.status().message().c_str());
    return 2;
  }
  if (options.value().help) {
    std::fputs(chorus::simulate::SimUsage().c_str(), stdout);
    return 0;
  }
  const std::vector<chorus::simulate::Row> rows = chorus::simulate::Simulate(options.value());
  if (options.value().csv) {
    std::fputs(chorus::simulate::FormatCsv(rows).c_str(), stdout);
  } else {
    std::fputs(chorus::simulate::FormatTable(options.value(), rows).c_str(), stdout);
    std::fputs(chorus::simulate::FormatSummary(rows).c_str(), stdout);
  }
  return 0;
}
