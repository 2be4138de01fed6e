// Two small vector kernels exposed to Python with pybind11. The headers are the ones used: ATen's tensor,
// its operators and torch's pybind11 tensor caster. torch/extension.h would bring them too, with the whole
// C++ frontend: 52 CPU-s of g++ per build on a slow core instead of about 23 (bench/unit_costs.py).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <cmath>

namespace {

at::Tensor axpy(double alpha, const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(x.sizes() == y.sizes(), "axpy: x and y must have the same shape");
  TORCH_CHECK(x.is_floating_point() && y.is_floating_point(), "axpy: float tensors only");
  return y + alpha * x;
}

double norm2(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "norm2: float tensors only");
  return std::sqrt(x.to(at::kDouble).pow(2).sum().item<double>());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("axpy", &axpy, "alpha * x + y");
  m.def("norm2", &norm2, "Euclidean norm of all elements");
  m.attr("TORCH_BUILT_WITH") = TORCH_VERSION;
}
