// wf_example_ops: two small CPU operators registered with the PyTorch dispatcher.
//
// TORCH_LIBRARY (not pybind11) and per-operator ATen headers keep the translation unit light: it
// compiles in a fraction of the time <torch/extension.h> takes; the ops are torch.ops.wf_example_ops.*.
#include <Python.h>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace wf_example_ops {

// out = a + alpha * b, elementwise; both inputs must have the same shape and dtype.
at::Tensor scaled_add(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: shapes differ: ", a.sizes(), " vs ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "scaled_add: dtypes differ");
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "scaled_add: CPU tensors only");
  at::Tensor ac = a.contiguous();
  at::Tensor bc = b.contiguous();
  at::Tensor out = at::empty_like(ac);
  AT_DISPATCH_FLOATING_TYPES(ac.scalar_type(), "scaled_add", [&] {
    const scalar_t* pa = ac.data_ptr<scalar_t>();
    const scalar_t* pb = bc.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    const auto s = static_cast<scalar_t>(alpha);
    for (int64_t i = 0; i < out.numel(); ++i) {
      po[i] = pa[i] + s * pb[i];
    }
  });
  return out;
}

// out = max(x, 0)^2, elementwise.
at::Tensor relu_square(const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), "relu_square: CPU tensors only");
  at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "relu_square", [&] {
    const scalar_t* px = xc.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const scalar_t v = px[i] > scalar_t(0) ? px[i] : scalar_t(0);
      po[i] = v * v;
    }
  });
  return out;
}

// out = a @ b for 2-D float tensors (the CUDA build calls cuBLAS through torch's handle).
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: 2-D tensors only");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul: shapes ", a.sizes(), " and ", b.sizes(), " do not chain");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "matmul: dtypes differ");
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "matmul: CPU tensors only");
  at::Tensor ac = a.contiguous();
  at::Tensor bc = b.contiguous();
  const int64_t m = ac.size(0), k = ac.size(1), n = bc.size(1);
  at::Tensor out = at::zeros({m, n}, ac.options());
  AT_DISPATCH_FLOATING_TYPES(ac.scalar_type(), "matmul", [&] {
    const scalar_t* pa = ac.data_ptr<scalar_t>();
    const scalar_t* pb = bc.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const scalar_t av = pa[i * k + p];
        for (int64_t j = 0; j < n; ++j) {
          po[i * n + j] += av * pb[p * n + j];
        }
      }
    }
  });
  return out;
}

TORCH_LIBRARY(wf_example_ops, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
  m.def("relu_square(Tensor x) -> Tensor");
  m.def("matmul(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(wf_example_ops, CPU, m) {
  m.impl("scaled_add", &scaled_add);
  m.impl("relu_square", &relu_square);
  m.impl("matmul", &matmul);
}

}  // namespace wf_example_ops

// An empty Python module: importing wf_example_ops._C loads this library, and loading it runs
// the TORCH_LIBRARY registrations above (the pattern of PyTorch's custom-operator tutorial).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
