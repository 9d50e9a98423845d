// Data-parallel training, the way DistributedDataParallel does it: every rank holds the
// whole model and a shard of the data, computes the gradient on its shard, and an
// all-reduce combines the gradients, so every rank applies the same update and the
// replicas stay identical. The model is a linear regression y = w.x + b fitted by
// gradient descent on the mean squared error, to data made from a known w and b.
//
//   chorusrun --nproc-per-node 2 -- train_step
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"
#include "chorus/communicator.h"

namespace {

constexpr int kFeatures = 4;
constexpr int kSamples = 1000;  // the whole data set, split across the ranks
constexpr int kSteps = 200;
constexpr double kLearningRate = 0.5;
const double kTrueW[kFeatures] = {2.0, -3.0, 0.5, 1.0};
constexpr double kTrueB = 0.25;

struct Model {
  double w[kFeatures] = {};
  double b = 0;
};

// Sample i, the same on every rank: features in [-1, 1) from a fixed generator.
void MakeSample(int i, double x[kFeatures], double* y) {
  uint64_t state = 0x9E3779B97F4A7C15ull * (i + 1);
  *y = kTrueB;
  for (int j = 0; j < kFeatures; ++j) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x[j] = static_cast<double>(state >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
    *y += kTrueW[j] * x[j];
  }
}

// Sums over samples [first, end) taken every `stride`: the squared-error loss's gradient
// (d/dw, then d/db), the loss itself and the number of samples, in one buffer so that a
// single all-reduce combines them.
std::vector<double> GradientSums(const Model& m, int first, int stride) {
  std::vector<double> sums(kFeatures + 3, 0.0);
  for (int i = first; i < kSamples; i += stride) {
    double x[kFeatures], y;
    MakeSample(i, x, &y);
    double prediction = m.b;
    for (int j = 0; j < kFeatures; ++j) prediction += m.w[j] * x[j];
    const double error = prediction - y;
    for (int j = 0; j < kFeatures; ++j) sums[j] += 2 * error * x[j];
    sums[kFeatures] += 2 * error;
    sums[kFeatures + 1] += error * error;
    sums[kFeatures + 2] += 1;
  }
  return sums;
}

}  // namespace

int main() {
  std::unique_ptr<chorus::Communicator> comm = example::Connect(2);
  const int rank = comm->rank();
  const int n = comm->size();

  // Every replica starts from rank 0's parameters (a real model would be randomly
  // initialised on each rank; the broadcast makes them agree).
  Model model;
  if (rank == 0) model.w[0] = 0.1;
  CHECK_OK(comm->Broadcast(&model, sizeof(Model) / sizeof(double), chorus::DataType::kFloat64, /*root=*/0));

  double first_loss = 0, loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    // This rank's shard: samples rank, rank + n, rank + 2n, ...
    std::vector<double> sums = GradientSums(model, rank, n);
    // SUM, then divide by the total sample count: the mean over the whole data set even
    // where shards differ in size (with equal shards, ReduceOp::kAvg of the shard means
    // gives the same).
    CHECK_OK(
        comm->AllReduce(sums.data(), sums.data(), sums.size(), chorus::DataType::kFloat64, chorus::ReduceOp::kSum));
    const double samples = sums[kFeatures + 2];
    if (step == 0) {
      // The combined gradient is the one a single process gets from all the data.
      std::vector<double> whole = GradientSums(model, 0, 1);
      for (int j = 0; j <= kFeatures; ++j) {
        if (std::fabs(sums[j] - whole[j]) > 1e-9 * (1 + std::fabs(whole[j]))) {
          example::Fail("all-reduced gradient " + std::to_string(j) + " differs from the whole-data one");
        }
      }
    }
    // The same update on every rank, from the same numbers.
    for (int j = 0; j < kFeatures; ++j) model.w[j] -= kLearningRate * sums[j] / samples;
    model.b -= kLearningRate * sums[kFeatures] / samples;
    loss = sums[kFeatures + 1] / samples;
    if (step == 0) first_loss = loss;
    if (rank == 0 && step % 50 == 0) std::printf("step %3d  loss %.3e\n", step, loss);
  }

  // The replicas must be bit-for-bit identical: gather every rank's parameters and compare.
  std::vector<Model> replicas(n);
  CHECK_OK(comm->AllGather(&model, replicas.data(), sizeof(Model), chorus::DataType::kUint8));
  for (int q = 0; q < n; ++q) {
    // Bit for bit is the point (a -0.0 or a NaN payload must match too).
    if (std::memcmp(&replicas[q], &model, sizeof(Model)) != 0) {  // NOLINT(bugprone-suspicious-memory-comparison)
      example::Fail("the replica on rank " + std::to_string(q) + " differs from this rank's");
    }
  }
  // And they must have learned the true parameters.
  double worst = std::fabs(model.b - kTrueB);
  for (int j = 0; j < kFeatures; ++j) worst = std::fmax(worst, std::fabs(model.w[j] - kTrueW[j]));
  if (!(loss < 1e-6 * first_loss) || worst > 1e-3) {
    example::Fail("did not converge: loss " + std::to_string(first_loss) + " -> " + std::to_string(loss) +
                  ", largest parameter error " + std::to_string(worst));
  }
  CHECK_OK(comm->Shutdown());
  std::printf("rank %d: train_step ok (loss %.1e -> %.1e, w = %.3f %.3f %.3f %.3f, b = %.3f)\n", rank, first_loss, loss,
              model.w[0], model.w[1], model.w[2], model.w[3], model.b);
  return 0;
}
