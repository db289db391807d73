// apps/features: the large-input workload of issue 21 (GPT's token batches are tiny: 256 KiB at B64 T1024): an MLP
// classifier trained on dense float features from .npy arrays, data parallel over the ranks of a job, each rank fed
// its shard of every global batch by one of the three input modes of the mesh (Note [data-parallel input]):
//   direct      each rank reads only its rows into its own pinned buffer and copies them to its device;
//   via-root    rank 0 reads the whole global batch, copies it to its device and scatters it (the seed's baseline);
//   replicated  every rank reads the whole global batch and keeps its rows.
// The input stage (read, copy to the device, and the scatter for via-root) is timed on every rank, apart from the
// compute, so that the modes can be compared: the seed's point.
//
//   tiertrain gen-features --out DIR --samples 65536 --dim 4096 --classes 16     # DIR/features.npy, DIR/labels.npy
//   tiertrain launch -n 4 -- tiertrain train-features --data DIR --mesh data=4 --batch 16384 --input direct
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tt {

struct FeatureGenOptions {
  std::string out;          // a folder: features.npy [samples, dim] f32, labels.npy [samples] i32
  int64_t samples = 65536;
  int dim = 1024;
  int classes = 16;
  uint64_t seed = 1;
};
// Features drawn around one random centre per class (so that the task can be learnt), labels uniform.
Status generate_features(const FeatureGenOptions& o);

struct FeatureTrainOptions {
  std::string data;           // a folder from generate_features (or numpy: the same two files)
  std::string mesh;           // "data=N" (or N); "" = one rank
  std::string input = "direct";
  std::string backend = "auto";
  int batch = 4096;           // global: rows a step over all ranks
  int hidden = 256;
  int steps = 20;
  float lr = 1e-3f;
  uint64_t seed = 1;
  int threads = 0;
  std::string metrics_out;    // JSON: per step loss, input and step times; rank 0 writes it
};

struct FeatureStep {
  double loss = 0;         // the mean over the global batch
  double input_ms = 0;     // this rank's input stage
  double input_ms_max = 0; // the slowest rank's
  double step_ms = 0;      // the whole step, input included (rank 0)
};
struct FeatureRun {
  std::vector<FeatureStep> steps;
  int ranks = 1;
  int64_t input_bytes_per_step = 0;  // the global batch's features and labels
};

// Trains as the options say, printing progress on rank 0 (out may be null). Every rank calls it.
Result<FeatureRun> train_features(const FeatureTrainOptions& o, FILE* out);

}  // namespace tt
