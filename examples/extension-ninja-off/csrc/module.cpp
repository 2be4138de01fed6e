// The module's bindings; the operators live in their own translation units.
#include <torch/extension.h>

torch::Tensor segment_sum(const torch::Tensor& x, const std::vector<int64_t>& lengths);
torch::Tensor segment_max(const torch::Tensor& x, const std::vector<int64_t>& lengths);
torch::Tensor segment_mean(const torch::Tensor& x, const std::vector<int64_t>& lengths);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("segment_sum", &segment_sum, "sum of each segment");
  m.def("segment_max", &segment_max, "max of each segment");
  m.def("segment_mean", &segment_mean, "mean of each segment");
}
