"""Build script for wf-vecops: a Python package whose own code calls its compiled kernels.

The compiled module sits inside the package (``wf_vecops._kernels._C``) and the package's
``__init__`` imports Python code that imports it: the layout a merged WheelFoundry wheel must keep
working unchanged. Like many real extensions it builds without ninja (one compiler at a time).
Build against the torch already installed:  pip install --no-build-isolation ./examples/extension-package
"""

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="wf-vecops",
    version="0.2.0",
    packages=find_packages(include=["wf_vecops", "wf_vecops.*"]),
    ext_modules=[CppExtension("wf_vecops._kernels._C", ["csrc/vecops.cpp"], extra_compile_args=["-O2", "-g0"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    install_requires=["torch"],
    python_requires=">=3.9",
)
