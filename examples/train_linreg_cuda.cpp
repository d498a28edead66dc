// train_linreg_cuda: data-parallel training on GPUs with ccrun's
// collectives. Linear regression by full-batch gradient descent, all of it
// on the GPU with cuBLAS: every worker holds its shard of a synthetic data
// set (the same data on every worker, y = X w_true exactly) on
// cuda:LOCAL_RANK, computes its shard's gradient and loss into one CUDA
// buffer, and one all_reduce of that CUDA buffer (NCCL, through the default
// group) sums them. A host-buffer all_reduce (Gloo, same group) adds up the
// samples seen. It exits 0 when the weights reached w_true, 1 otherwise.
//
//   ccrun --standalone --nproc-per-node <GPUs> --no-python build/examples/train_linreg_cuda
//
// Built when CMake finds CUDA and NCCL (CCRUN_WITH_NCCL). cuBLAS runs on the
// legacy default stream; ccrun orders its NCCL calls after the work issued
// there, and Work::wait() returns once the all_reduce is done, so the update
// that follows sees the summed gradient.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ccrun/collectives.h"

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void blas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 65536, features = 32, steps = 300;
  double lr = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--samples") samples = std::stoi(argv[i + 1]);
    else if (a == "--steps") steps = std::stoi(argv[i + 1]);
    else if (a == "--lr") lr = std::stod(argv[i + 1]);
    else {
      std::fprintf(stderr, "train_linreg_cuda: unknown option %s (use --samples --steps --lr)\n", argv[i]);
      return 2;
    }
  }
  try {
    const char* lr_env = std::getenv("LOCAL_RANK");
    cuda_check(cudaSetDevice(lr_env ? std::atoi(lr_env) : 0), "cudaSetDevice(LOCAL_RANK)");
    auto pg = ccrun::init_process_group();  // CollectivesBackend::kAuto: host to Gloo, CUDA to NCCL
    const int rank = pg->rank(), world = pg->size();

    // The same data on every worker; this worker keeps rows [begin, end).
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
      y[s] = dot;
    }
    const int begin = int(int64_t(samples) * rank / world);
    const int rows = int(int64_t(samples) * (rank + 1) / world) - begin;

    // Device buffers. x is row-major [rows x features]: to cuBLAS (column
    // major) that is X^T, [features x rows] with leading dimension features.
    double *dx, *dy, *dw, *dr, *dgrad;
    cuda_check(cudaMalloc(&dx, sizeof(double) * size_t(rows) * features), "cudaMalloc x");
    cuda_check(cudaMalloc(&dy, sizeof(double) * size_t(rows)), "cudaMalloc y");
    cuda_check(cudaMalloc(&dw, sizeof(double) * features), "cudaMalloc w");
    cuda_check(cudaMalloc(&dr, sizeof(double) * size_t(rows)), "cudaMalloc r");
    cuda_check(cudaMalloc(&dgrad, sizeof(double) * (features + 1)), "cudaMalloc grad");  // grad, then loss
    cuda_check(cudaMemcpy(dx, &x[size_t(begin) * features], sizeof(double) * size_t(rows) * features,
                          cudaMemcpyHostToDevice), "copy x");
    cuda_check(cudaMemcpy(dy, &y[begin], sizeof(double) * rows, cudaMemcpyHostToDevice), "copy y");
    cuda_check(cudaMemset(dw, 0, sizeof(double) * features), "zero w");

    cublasHandle_t h;
    blas_check(cublasCreate(&h), "cublasCreate");
    blas_check(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), "cublasSetPointerMode");
    double *one, *minus_one, *zero, *step_size;  // scalars in device memory
    cuda_check(cudaMalloc(&one, 4 * sizeof(double)), "cudaMalloc scalars");
    minus_one = one + 1, zero = one + 2, step_size = one + 3;
    const double scalars[4] = {1.0, -1.0, 0.0, -lr / samples};
    cuda_check(cudaMemcpy(one, scalars, sizeof scalars, cudaMemcpyHostToDevice), "copy scalars");

    double first_loss = -1, loss = 0;
    for (int step = 0; step < steps; ++step) {
      // r = X w - y;  grad = X^T r;  loss = r . r
      cuda_check(cudaMemcpy(dr, dy, sizeof(double) * rows, cudaMemcpyDeviceToDevice), "copy r");
      blas_check(cublasDgemv(h, CUBLAS_OP_T, features, rows, one, dx, features, dw, 1, minus_one, dr, 1), "gemv Xw");
      blas_check(cublasDgemv(h, CUBLAS_OP_N, features, rows, one, dx, features, dr, 1, zero, dgrad, 1), "gemv X^T r");
      blas_check(cublasDdot(h, rows, dr, 1, dr, 1, dgrad + features), "dot");
      pg->all_reduce({dgrad, size_t(features + 1), ccrun::DataType::kFloat64, ccrun::DeviceType::kCuda})->wait();
      blas_check(cublasDaxpy(h, features, step_size, dgrad, 1, dw, 1), "axpy");  // w -= lr/n grad
      if (step == 0 || (step + 1) % 100 == 0 || step + 1 == steps) {
        cuda_check(cudaMemcpy(&loss, dgrad + features, sizeof loss, cudaMemcpyDeviceToHost), "copy loss");
        loss /= samples;
        if (first_loss < 0) first_loss = loss;
        if (rank == 0) std::printf("step %d: loss %.3e\n", step + 1, loss);
        std::fflush(stdout);
      }
    }
    // Host buffers go to Gloo in the same group.
    std::vector<int64_t> seen{int64_t(rows) * steps};
    pg->all_reduce({seen.data(), 1, ccrun::DataType::kInt64})->wait();

    std::vector<double> w(features);
    cuda_check(cudaMemcpy(w.data(), dw, sizeof(double) * features, cudaMemcpyDeviceToHost), "copy w");
    double err = 0;
    for (int f = 0; f < features; ++f) err = std::max(err, std::fabs(w[f] - w_true[f]));
    cublasDestroy(h);
    for (double* p : {dx, dy, dw, dr, dgrad, one}) cudaFree(p);
    pg->barrier()->wait();
    if (rank == 0) {
      std::printf("trained on %d GPU worker(s), %lld samples seen: loss %.3e -> %.3e, max |w - w_true| %.2e\n",
                  world, static_cast<long long>(seen[0]), first_loss, loss, err);
    }
    if (!(err < 1e-6)) {
      std::fprintf(stderr, "train_linreg_cuda: rank %d: the weights did not converge (max error %.3e)\n",
                   rank, err);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_linreg_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
