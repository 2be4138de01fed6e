"""A stand-in for the docker CLI, for container-mode tests on a host without a Docker engine.

``image inspect`` finds nothing, ``build``/``push``/``kill`` succeed, and ``run`` executes the
command on this host with the env file's variables, mapping the two mounts (``-v HOST:/work``,
``-v HOST:/bundle:ro``) back to their host paths in argv and values. Every call is appended as
JSON to $FAKE_DOCKER_LOG.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:2] == ["image", "inspect"]:
        return 1
    if argv[0] != "run":
        return 0
    mounts: dict[str, str] = {}
    env_file = ""
    i = 1
    while argv[i].startswith("-"):
        flag = argv[i]
        if flag == "--rm":
            i += 1
            continue
        value = argv[i + 1]
        if flag == "-v":
            host, inside = value.split(":")[:2]
            mounts[inside] = host
        elif flag == "--env-file":
            env_file = value
        i += 2
    command = argv[i + 1 :]  # argv[i] is the image

    def outside(text: str) -> str:
        for inside, host in mounts.items():
            if text == inside or text.startswith(inside + "/"):
                return host + text[len(inside) :]
        return text

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    for name in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL", "PIP_CERT"):
        if name in os.environ:
            env[name] = os.environ[name]
    with open(env_file, encoding="utf-8") as handle:
        for line in handle.read().splitlines():
            name, value = line.split("=", 1)
            env[name] = outside(value)
    return subprocess.run([outside(a) for a in command], env=env, cwd=mounts["/work"]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
