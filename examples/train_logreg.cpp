// train_logreg: a small data-parallel training program in C++. Logistic
// regression by full-batch gradient descent on a synthetic data set that
// every worker generates identically; each worker computes the gradient of
// its shard, and one all_reduce sums the shards' gradients, so the weights
// after any number of workers equal a single-process run's (to rounding).
//
//   ccrun --nproc-per-node 4 --no-python build/examples/train_logreg --out w.txt
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ccrun/collectives.h"

int main(int argc, char** argv) {
  int samples = 8192, features = 16, steps = 200;
  double lr = 0.5;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--samples") samples = std::stoi(argv[i + 1]);
    else if (a == "--steps") steps = std::stoi(argv[i + 1]);
    else if (a == "--lr") lr = std::stod(argv[i + 1]);
    else if (a == "--out") out = argv[i + 1];
    else {
      std::fprintf(stderr, "train_logreg: unknown option %s (use --samples --steps --lr --out)\n", argv[i]);
      return 2;
    }
  }
  try {
    auto pg = ccrun::init_process_group();
    int rank = pg->rank(), world = pg->size();

    // The same data on every worker: x ~ N(0, 1), y = [x . w_true > 0].
    std::mt19937 gen(1234);
    std::normal_distribution<double> normal;
    std::vector<double> w_true(features), x(size_t(samples) * features), y(samples);
    for (auto& w : w_true) w = normal(gen);
    for (int s = 0; s < samples; ++s) {
      double dot = 0;
      for (int f = 0; f < features; ++f) {
        x[size_t(s) * features + f] = normal(gen);
        dot += x[size_t(s) * features + f] * w_true[f];
      }
      y[s] = dot > 0 ? 1.0 : 0.0;
    }
    int begin = int(int64_t(samples) * rank / world), end = int(int64_t(samples) * (rank + 1) / world);

    std::vector<double> w(features + 1, 0.0);     // weights, then bias
    std::vector<double> grad(features + 2, 0.0);  // gradient sums, then loss sum
    for (int step = 0; step < steps; ++step) {
      std::fill(grad.begin(), grad.end(), 0.0);
      for (int s = begin; s < end; ++s) {
        const double* xs = &x[size_t(s) * features];
        double z = w[features];
        for (int f = 0; f < features; ++f) z += w[f] * xs[f];
        double p = 1.0 / (1.0 + std::exp(-z));
        for (int f = 0; f < features; ++f) grad[f] += (p - y[s]) * xs[f];
        grad[features] += p - y[s];
        grad[features + 1] += -(y[s] * std::log(p + 1e-12) + (1 - y[s]) * std::log(1 - p + 1e-12));
      }
      pg->all_reduce({grad.data(), grad.size(), ccrun::DataType::kFloat64})->wait();
      for (int f = 0; f <= features; ++f) w[f] -= lr * grad[f] / samples;
      if (rank == 0 && (step + 1) % 50 == 0) {
        std::printf("step %d: loss %.4f\n", step + 1, grad[features + 1] / samples);
        std::fflush(stdout);
      }
    }
    if (rank == 0) {
      if (!out.empty()) {
        FILE* f = std::fopen(out.c_str(), "w");
        if (!f) {
          std::fprintf(stderr, "train_logreg: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
          return 1;
        }
        for (double v : w) std::fprintf(f, "%.17g\n", v);
        std::fclose(f);
      }
      std::printf("trained on %d worker(s)\n", world);
    }
    pg->barrier()->wait();
  } catch (const ccrun::Error& e) {
    std::fprintf(stderr, "train_logreg: %s\n", e.what());
    return 1;
  }
  return 0;
}
