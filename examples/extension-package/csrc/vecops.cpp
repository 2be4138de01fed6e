// Two small vector kernels exposed to Python with pybind11 (torch/extension.h brings it).
#include <torch/extension.h>

namespace {

torch::Tensor axpy(double alpha, const torch::Tensor& x, const torch::Tensor& y) {
  TORCH_CHECK(x.sizes() == y.sizes(), "axpy: x and y must have the same shape");
  TORCH_CHECK(x.is_floating_point() && y.is_floating_point(), "axpy: float tensors only");
  return y + alpha * x;
}

double norm2(const torch::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "norm2: float tensors only");
  return std::sqrt(x.to(torch::kDouble).pow(2).sum().item<double>());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("axpy", &axpy, "alpha * x + y");
  m.def("norm2", &norm2, "Euclidean norm of all elements");
  m.attr("TORCH_BUILT_WITH") = TORCH_VERSION;
}
