/* CHECK(call) for the C test programs: a failed NCCL call prints itself, its result
 * and ncclGetLastError's text, and main returns 1. */
#ifndef CHORUS_TESTS_NCCL_CHECK_H_
#define CHORUS_TESTS_NCCL_CHECK_H_

#include <stdio.h>

#include "nccl/nccl.h"

#define CHECK(call)                                                                            \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess) {                                                                   \
      fprintf(stderr, "%s: %s (%s)\n", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

#endif /* CHORUS_TESTS_NCCL_CHECK_H_ */
