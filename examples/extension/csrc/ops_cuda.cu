// CUDA implementations of wf_example_ops, registered for the CUDA dispatch key.
//
// Built only for CUDA cells (FORCE_CUDA=1, see setup.py). Compiling needs the CUDA toolkit, not a
// GPU; the kernels run wherever torch sees a device. matmul calls cuBLAS through torch's own handle
// (ATen/cuda/CUDAContext.h, which pulls in the cuBLAS, cuSPARSE and cuSOLVER headers, as most real
// CUDA extensions do).
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace wf_example_ops {
namespace {

constexpr int kThreads = 256;

// Grid-stride loops: correct for any size with a bounded grid.
template <typename T>
__global__ void scaled_add_kernel(const T* a, const T* b, T* out, T alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    out[i] = a[i] + alpha * b[i];
  }
}

template <typename T>
__global__ void relu_square_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const T v = x[i] > T(0) ? x[i] : T(0);
    out[i] = v * v;
  }
}

unsigned int blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(wanted < 65535 ? wanted : 65535);
}

}  // namespace

at::Tensor scaled_add_cuda(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: shapes differ: ", a.sizes(), " vs ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "scaled_add: dtypes differ");
  TORCH_CHECK(a.device() == b.device(), "scaled_add: tensors on different devices");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor ac = a.contiguous();
  at::Tensor bc = b.contiguous();
  at::Tensor out = at::empty_like(ac);
  const int64_t n = out.numel();
  if (n == 0) {
    return out;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(ac.scalar_type(), "scaled_add_cuda", [&] {
    scaled_add_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(
        ac.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), static_cast<scalar_t>(alpha), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor relu_square_cuda(const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t n = out.numel();
  if (n == 0) {
    return out;
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "relu_square_cuda", [&] {
    relu_square_kernel<scalar_t><<<blocks_for(n), kThreads, 0, stream>>>(xc.data_ptr<scalar_t>(),
                                                                          out.data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// Row-major a (m x k) @ b (k x n) is column-major b^T a^T: one cuBLAS call on torch's stream and handle.
at::Tensor matmul_cuda(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: 2-D tensors only");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul: shapes ", a.sizes(), " and ", b.sizes(), " do not chain");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "matmul: dtypes differ");
  TORCH_CHECK(a.device() == b.device(), "matmul: tensors on different devices");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor ac = a.contiguous();
  at::Tensor bc = b.contiguous();
  const int64_t m = ac.size(0), k = ac.size(1), n = bc.size(1);
  at::Tensor out = at::empty({m, n}, ac.options());
  if (out.numel() == 0) {
    return out;
  }
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // bound to the current stream
  if (ac.scalar_type() == at::kFloat) {
    const float one = 1.0f, zero = 0.0f;
    TORCH_CUDABLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, bc.data_ptr<float>(), n,
                                     ac.data_ptr<float>(), k, &zero, out.data_ptr<float>(), n));
  } else if (ac.scalar_type() == at::kDouble) {
    const double one = 1.0, zero = 0.0;
    TORCH_CUDABLAS_CHECK(cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, bc.data_ptr<double>(), n,
                                     ac.data_ptr<double>(), k, &zero, out.data_ptr<double>(), n));
  } else {
    TORCH_CHECK(false, "matmul: float32 or float64 only, not ", ac.scalar_type());
  }
  return out;
}

TORCH_LIBRARY_IMPL(wf_example_ops, CUDA, m) {
  m.impl("scaled_add", &scaled_add_cuda);
  m.impl("relu_square", &relu_square_cuda);
  m.impl("matmul", &matmul_cuda);
}

}  // namespace wf_example_ops
