# The test bed's builder image: the layers of buildspecs/images/x86_64-cpu.Dockerfile that can run
# here, in the same order, with the same build arguments and the production install scripts
# (docker build context: buildspecs/images, as for the production recipes). Left out, with why:
# dnf (AlmaLinux's package manager; the test base is Debian), install_mkl.sh (a torch build's MKL,
# no extension needs it), install_openmpi.sh and install_sccache.sh (their downloads come from
# download.open-mpi.org and github.com, which this test bed cannot reach).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ARG TOOLS_PYTHON=/opt/python/cp311-cp311/bin/python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

COPY scripts/ /opt/wf/scripts/
RUN TOOLS_PYTHON="${TOOLS_PYTHON}" TOOLS_DIR=/opt/wf/tools /opt/wf/scripts/install_tools.sh
ENV PATH=/opt/wf/tools/bin:/opt/openmpi/bin:${PATH}
# Debian 12's glibc (2.36) is newer than manylinux_2_28's: repair tags what this base allows, as
# host mode does (wfbuild.runner sets the same for WF_CONTAINER=none).
ENV WF_REPAIR_PLAT=auto
WORKDIR /work
