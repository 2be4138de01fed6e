// A kernel, so the cell has device code of its own, as every CUDA extension the farm builds does.
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

namespace {
__global__ void fill_kernel(float* out, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    out[i] = value;
  }
}
}  // namespace

void fill(torch::Tensor out, float value) {
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == torch::kFloat32 && out.is_contiguous(), "a float32 CUDA tensor");
  const int64_t n = out.numel();
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  fill_kernel<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(), value, n);
}
