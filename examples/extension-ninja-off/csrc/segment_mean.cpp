// segment_mean: one translation unit, including torch's headers as each PyG operator does.
#include <torch/extension.h>

torch::Tensor segment_mean(const torch::Tensor& x, const std::vector<int64_t>& lengths) {
  TORCH_CHECK(x.dim() == 1, "segment_mean: x must be 1-D");
  auto out = torch::empty({static_cast<int64_t>(lengths.size())}, x.options());
  int64_t start = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    TORCH_CHECK(n > 0 && start + n <= x.size(0), "segment_mean: lengths must be positive and fit x");
    out[i] = x.narrow(0, start, n).mean();
    start += n;
  }
  return out;
}
