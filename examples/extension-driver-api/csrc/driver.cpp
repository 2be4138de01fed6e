// The driver API, called directly: cuDriverGetVersion and cuMemGetInfo (cuda.h renames it to
// cuMemGetInfo_v2, the symbol the driver exports). Linked with -lcuda: the module needs libcuda.so.1.
#include <cuda.h>
#include <torch/extension.h>

namespace {

int driver_version() {
  int version = 0;
  CUresult status = cuDriverGetVersion(&version);
  TORCH_CHECK(status == CUDA_SUCCESS, "cuDriverGetVersion failed: ", static_cast<int>(status));
  return version;
}

std::tuple<size_t, size_t> memory_info() {
  size_t free = 0, total = 0;
  CUresult status = cuMemGetInfo(&free, &total);  // needs a current context (torch makes one)
  TORCH_CHECK(status == CUDA_SUCCESS, "cuMemGetInfo failed: ", static_cast<int>(status));
  return {free, total};
}

}  // namespace

void fill(torch::Tensor out, float value);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("driver_version", &driver_version, "the CUDA driver's version, from cuDriverGetVersion");
  m.def("memory_info", &memory_info, "(free, total) device memory, from cuMemGetInfo");
  m.def("fill", &fill, "fill a float32 CUDA tensor with a value (device code of this extension)");
}
