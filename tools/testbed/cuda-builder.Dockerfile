# The test bed's CUDA builder: the test builder image (BASE_IMAGE) plus the CUDA toolkit the production
# recipe (buildspecs/images/x86_64-cuda.Dockerfile) installs, by the same script and lock:
# install_cuda.sh assembles /usr/local/cuda-<CUDA_VERSION> from scripts/cuda/cuda-<CUDA_VERSION>-x86_64.toml,
# here offline (--network none): pip takes the lock's nvidia-* wheels, each checked against the lock's
# sha256, from the wheelhouse folder tools/docker_testbed_cuda.py filled on the host. The same folder
# carries a CUDA torch and its dependencies (tools/testbed/wheelhouse-cu130-requirements.txt) for the
# cells' build environments. Left out, as in builder.Dockerfile: dnf's gcc-toolset (Debian's gcc 12 is
# within nvcc 13.0's range), MKL, Open MPI.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ARG CUDA_VERSION
ARG CUDA_REQUIREMENTS=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY wheelhouse/ /opt/wf/wheelhouse/
RUN CUDA_VERSION="${CUDA_VERSION}" CUDA_REQUIREMENTS="${CUDA_REQUIREMENTS}" /opt/wf/scripts/install_cuda.sh
ENV CUDA_HOME=/usr/local/cuda \
    LIBRARY_PATH=/usr/local/cuda/lib64/stubs \
    PATH=/usr/local/cuda/bin:${PATH}
