# The test bed's stand-in for the manylinux builder base (tools/docker_testbed.py builds it FROM the
# imported Debian rootfs). What the production recipes and the runner expect of a manylinux base:
# an interpreter at /opt/python/cp311-cp311/bin/python, bash, curl. The wheelhouse is the only
# package source inside (PIP_NO_INDEX): stages that need no network run with --network none.
ARG ROOTFS
FROM ${ROOTFS}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN mkdir -p /opt/python/cp311-cp311/bin \
 && ln -s /usr/bin/python3.11 /opt/python/cp311-cp311/bin/python \
 && ln -s /usr/bin/python3.11 /opt/python/cp311-cp311/bin/python3.11 \
 && ln -s /usr/bin/python3.11 /usr/local/bin/python3
COPY wheelhouse/ /opt/wf/wheelhouse/
ENV PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/opt/wf/wheelhouse \
    PIP_DISABLE_PIP_VERSION_CHECK=1
