// Every collective once, each result checked against what it must be. They follow
// torch.distributed: `count` is the number of elements per rank (all_gather, gather:
// elements each rank contributes; reduce_scatter, scatter: elements each receives;
// all_to_all: elements per peer). Every rank must make the same calls in the same order.
//
//   chorusrun --nproc-per-node 2 -- collectives
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "chorus/communicator.h"

using chorus::DataType;
using chorus::ReduceOp;

namespace {
constexpr size_t kCount = 4;

void Expect(const std::vector<int32_t>& got, size_t i, int64_t want, const char* what) {
  if (got[i] != want) {
    example::Fail(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                  ", expected " + std::to_string(want));
  }
}
}  // namespace

int main() {
  std::unique_ptr<chorus::Communicator> comm = example::Connect(2);
  const int r = comm->rank();
  const int n = comm->size();
  const int64_t rank_sum = int64_t{n} * (n - 1) / 2;  // 0 + 1 + ... + n-1

  // AllReduce: every rank gets the element-wise sum (in place: send == recv).
  std::vector<int32_t> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = r + static_cast<int32_t>(i);
  CHECK_OK(comm->AllReduce(v.data(), v.data(), kCount, DataType::kInt32, ReduceOp::kSum));
  for (size_t i = 0; i < kCount; ++i) Expect(v, i, rank_sum + int64_t{n} * i, "AllReduce");

  // Broadcast: the root's buffer is copied into every rank's; blocks until this rank
  // has it.
  std::vector<int32_t> b(kCount, 0);
  if (r == 0) b = {3, 1, 4, 1};
  CHECK_OK(comm->Broadcast(b.data(), kCount, DataType::kInt32, /*root=*/0));
  const int32_t pi[kCount] = {3, 1, 4, 1};
  for (size_t i = 0; i < kCount; ++i) Expect(b, i, pi[i], "Broadcast");

  // Reduce: only the root (here the last rank) receives the maximum.
  const int root = n - 1;
  std::vector<int32_t> mine(kCount), max(kCount, -1);
  for (size_t i = 0; i < kCount; ++i) mine[i] = r * 10 + static_cast<int32_t>(i);
  CHECK_OK(comm->Reduce(mine.data(), max.data(), kCount, DataType::kInt32, ReduceOp::kMax, root));
  if (r == root) {
    for (size_t i = 0; i < kCount; ++i) Expect(max, i, (n - 1) * 10 + int64_t(i), "Reduce(max)");
  }

  // AllGather: rank q's kCount elements land at [q*kCount, (q+1)*kCount) on every rank.
  std::vector<int32_t> all(n * kCount);
  CHECK_OK(comm->AllGather(mine.data(), all.data(), kCount, DataType::kInt32));
  for (size_t i = 0; i < all.size(); ++i) Expect(all, i, (i / kCount) * 10 + i % kCount, "AllGather");

  // Gather: the same, onto the root only.
  std::vector<int32_t> gathered(n * kCount, -1);
  CHECK_OK(comm->Gather(mine.data(), gathered.data(), kCount, DataType::kInt32, /*root=*/0));
  if (r == 0) {
    for (size_t i = 0; i < gathered.size(); ++i) Expect(gathered, i, (i / kCount) * 10 + i % kCount, "Gather");
  }

  // ReduceScatter: n*kCount elements in, summed over ranks; rank q keeps block q.
  std::vector<int32_t> in(n * kCount), block(kCount);
  for (size_t j = 0; j < in.size(); ++j) in[j] = r + static_cast<int32_t>(j);
  CHECK_OK(comm->ReduceScatter(in.data(), block.data(), kCount, DataType::kInt32, ReduceOp::kSum));
  for (size_t i = 0; i < kCount; ++i) Expect(block, i, rank_sum + int64_t{n} * (r * kCount + i), "ReduceScatter");

  // Scatter: the root's n*kCount elements, block q to rank q.
  std::vector<int32_t> source(n * kCount), part(kCount);
  for (size_t j = 0; j < source.size(); ++j) source[j] = 100 + static_cast<int32_t>(j);
  CHECK_OK(comm->Scatter(source.data(), part.data(), kCount, DataType::kInt32, /*root=*/0));
  for (size_t i = 0; i < kCount; ++i) Expect(part, i, 100 + r * kCount + i, "Scatter");

  // AllToAll: block p of rank q's input goes to rank p, into block q of its output.
  std::vector<int32_t> out(n * kCount), back(n * kCount);
  for (size_t j = 0; j < out.size(); ++j) out[j] = r * 1000 + static_cast<int32_t>(j / kCount) * 10 + j % kCount;
  CHECK_OK(comm->AllToAll(out.data(), back.data(), kCount, DataType::kInt32));
  for (size_t j = 0; j < back.size(); ++j) Expect(back, j, (j / kCount) * 1000 + r * 10 + j % kCount, "AllToAll");

  // The I-forms return a Work at once: here an average, overlapped with nothing.
  float x = static_cast<float>(r + 1);
  chorus::Work avg = comm->IAllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kAvg);
  CHECK_OK(avg.Wait());
  if (x != (n + 1) / 2.0f) example::Fail("IAllReduce(avg) gave " + std::to_string(x));

  CHECK_OK(comm->Barrier());  // returns once every rank has called it
  CHECK_OK(comm->Shutdown());
  std::printf("rank %d: collectives ok\n", r);
  return 0;
}
