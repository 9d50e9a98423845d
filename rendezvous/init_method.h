// Turning an init method ("env://", "tcp://host:port", "file:///path") plus the
// environment into "who am I and where do we meet", like torch.distributed's
// init_process_group. Rank and world size come from the arguments, else from
// torchrun's variables (RANK, WORLD_SIZE, ...), else from a detected launcher:
// SLURM (srun), Open MPI (mpirun), PBS / MPICH-hydra (PMI_RANK, PMI_SIZE).
#pragma once

#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/job_secret.h"
#include "common/status.h"

namespace chorus::rendezvous {

inline constexpr uint16_t kDefaultMasterPort = 29500;

struct InitSpec {
  std::string method;       // "env", "tcp", "file"
  std::string master_addr;  // env, tcp: where the store is ("" for file)
  uint16_t master_port = 0;
  std::string file_path;  // file
  int rank = -1;
  int world_size = -1;
  // -1 when no launcher said; the bootstrap then derives them from host ids.
  int local_rank = -1;
  int local_world_size = -1;
  // Where rank/size came from: "arguments", "torchrun/env", "SLURM", "Open MPI", "PBS"
  // ("PMI" for an MPICH-hydra launch outside PBS).
  std::string source;
  // CHORUS_SECRET / CHORUS_SECRET_FILE (set by the caller from its Config, not by
  // ResolveInit): the store admits only processes that know it.
  JobSecret secret;
};

// `init_method`: "env://", "tcp://host:port" (IPv4, name or [IPv6]), "file:///abs/path";
// "" means env://. `rank`, `world_size`: -1 = from the environment. Every error names
// the variable or URL part that was missing or wrong.
Result<InitSpec> ResolveInit(const std::string& init_method, int rank, int world_size, const EnvLookup& env);

}  // namespace chorus::rendezvous
