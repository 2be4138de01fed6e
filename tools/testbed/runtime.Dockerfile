# The test bed's stand-in for the runtime images' base (python:3.12-slim-bookworm): the test base
# without its compilers, as a slim image has none (the runtime image tests refuse an image that still
# carries cc/c++/gcc/g++). dpkg removes them offline.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3027
RUN apt-get purge -y -qq --auto-remove g++ gcc cpp make && rm -rf /var/lib/apt/lists/* \
 && test -z "$(command -v cc c++ gcc g++ || true)"
