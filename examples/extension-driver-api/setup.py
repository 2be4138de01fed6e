"""Build script for wf-driver-api: a CUDA extension that calls the CUDA driver API, linked with -lcuda.

Like FlashAttention-3's Hopper build (cuTensorMapEncodeTiled) and many TMA kernels, it links the driver
library itself (``libraries=["cuda"]``). torch.utils.cpp_extension links with the host compiler and gives
it only ``-L$CUDA_HOME/lib64``: the link needs the toolkit's driver stub (lib64/stubs/libcuda.so) on
LIBRARY_PATH, as WheelFoundry's build environment sets it. The module needs ``libcuda.so.1``, the driver of
whoever imports it. Build against the torch already installed:  pip install --no-build-isolation .
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    ext_modules=[
        CUDAExtension(
            "wf_driver_api._C",
            ["csrc/driver.cpp", "csrc/fill.cu"],
            extra_compile_args={"cxx": ["-O2", "-g0"], "nvcc": ["-O2"]},
            libraries=["cuda"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
