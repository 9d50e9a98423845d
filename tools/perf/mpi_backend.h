// Open MPI (or any MPI) behind the chorus_perf Backend interface. Registered as "mpi".
// Rank and size come from MPI (launch with mpirun); the collectives are the plain MPI
// ones (MPI_Allreduce, MPI_Bcast, ...), so --algo is ignored: Open MPI's tuned
// component picks its own (set OMPI_MCA_coll_tuned_* to force one).
// dtypes: float32, float64, int8, uint8, int32, int64 (plain MPI has no float16 or
// bfloat16); ops: sum, prod, max, min (no avg).
#pragma once

#include <memory>

#include "tools/perf/backend.h"

namespace chorus {
namespace perf {

std::unique_ptr<Backend> MakeMpiBackend();

}  // namespace perf
}  // namespace chorus
