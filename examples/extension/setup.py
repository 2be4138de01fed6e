"""Build script for wf-example-ops: one C++ source compiled against the installed torch.

Build it against the torch already in the environment (no isolated build env, which would
download another torch):  pip install --no-build-isolation ./examples/extension
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[CppExtension("wf_example_ops._C", ["csrc/ops.cpp"], extra_compile_args=["-O2", "-g0"])],
    cmdclass={"build_ext": BuildExtension},
)
