"""Pin the builder images' base images by digest, and check the pins (base-images.lock).

python3 bump_base_images.py check            # Dockerfile defaults carry @sha256 and match the lock
python3 bump_base_images.py bump [REF ...]   # resolve tags to digests (docker buildx / skopeo / crane)
python3 bump_base_images.py resolve REF      # print REF@sha256:... or fail if REF is not pinned
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "base-images.lock"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]{1,128})?$")
DEFAULT = re.compile(r"^ARG BASE_IMAGE(=(?P<value>\S+))?$", re.MULTILINE)
# Runtime images (runtime/*.Dockerfile) are multi-stage: every ARG <NAME>_IMAGE default is pinned and
# every FROM names such an ARG or an earlier stage.
IMAGE_ARG = re.compile(r"^ARG (?P<name>[A-Z_]*IMAGE)=(?P<value>\S+)$", re.MULTILINE)
STAGE = re.compile(r"^FROM\s+(?P<image>\S+)(?:\s+AS\s+(?P<name>\S+))?", re.MULTILINE | re.IGNORECASE)
Resolver = Callable[[str], str]


class Unpinned(LookupError):
    pass


def load(lock: Path = LOCK) -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate(lock.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        ref, digest = line.split()
        if not REF.match(ref) or not DIGEST.match(digest):
            raise ValueError(f"{lock.name}:{number}: expected '<reference> sha256:<64 hex>', got {line!r}")
        pins[ref] = digest
    return pins


def resolve(ref: str, lock: Path = LOCK) -> str:
    """The pinned form of a base reference; an unpinned base is an error, never a floating tag."""
    base = ref.split("@", 1)[0]
    pins = load(lock)
    if base not in pins:
        raise Unpinned(f"{base} has no digest in {lock.name}; run bump_base_images.py bump {base}")
    pinned = f"{base}@{pins[base]}"
    if "@" in ref and ref != pinned:
        raise Unpinned(f"{ref} differs from the pin {pinned}")
    return pinned


def runtime_problems(dockerfile: Path, pins: dict[str, str]) -> list[str]:
    text, problems = dockerfile.read_text(encoding="utf-8"), []
    args = {m["name"]: m["value"] for m in IMAGE_ARG.finditer(text)}
    for name, value in args.items():
        base, _, digest = value.partition("@")
        if pins.get(base) != digest:
            problems.append(f"runtime/{dockerfile.name}: {name} default {value} is not {base}@{pins.get(base)}")
    stages: set[str] = set()
    for match in STAGE.finditer(text):
        image = match["image"]
        if image not in stages and image.removeprefix("${").removesuffix("}") not in args:
            problems.append(f"runtime/{dockerfile.name}: FROM {image} is neither a pinned image ARG nor a stage")
        if match["name"]:
            stages.add(match["name"])
    return problems


def check(images: Path = HERE, lock: Path = LOCK) -> list[str]:
    """Problems with the Dockerfiles' pins: FROM must be ${BASE_IMAGE}, and a default must be pinned."""
    pins, problems = load(lock), []
    for dockerfile in sorted(images.glob("runtime/*.Dockerfile")):
        problems += runtime_problems(dockerfile, pins)
    for dockerfile in sorted(images.glob("*.Dockerfile")):
        text = dockerfile.read_text(encoding="utf-8")
        froms = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
        if froms != ["${BASE_IMAGE}"]:
            problems.append(f"{dockerfile.name}: FROM must be exactly ${{BASE_IMAGE}}, found {froms}")
        default = DEFAULT.search(text)
        value = default.group("value") if default else None
        if value is None:
            continue  # no default: the runner always passes the job's (pinned) base
        base, _, digest = value.partition("@")
        if pins.get(base) != digest:
            problems.append(f"{dockerfile.name}: BASE_IMAGE default {value} is not {base}@{pins.get(base)}")
    return problems


def registry_digest(ref: str) -> str:
    """The digest a registry serves for ref now (the manifest list's, so every platform shares it)."""
    tools = [
        ["docker", "buildx", "imagetools", "inspect", ref, "--format", "{{json .Manifest.Digest}}"],
        ["skopeo", "inspect", "--raw", "--format", "{{.Digest}}", f"docker://{ref}"],
        ["crane", "digest", ref],
    ]
    for argv in tools:
        if shutil.which(argv[0]):
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().strip('"')
            if DIGEST.match(out):
                return out
    raise RuntimeError("need docker buildx, skopeo or crane, and access to the registry")


def bump(
    refs: list[str], resolver: Resolver = registry_digest, images: Path = HERE, lock: Path = LOCK
) -> dict[str, str]:
    pins = load(lock)
    for ref in refs or list(pins):
        if not REF.match(ref):
            raise ValueError(f"not an image reference: {ref!r}")
        digest = resolver(ref)
        if not DIGEST.match(digest):
            raise ValueError(f"{ref}: resolver returned {digest!r}")
        pins[ref] = digest
    header = [line for line in lock.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    body = [f"{ref}  {digest}" for ref, digest in sorted(pins.items())]
    lock.write_text("\n".join(header + body) + "\n", encoding="utf-8")
    for dockerfile in sorted([*images.glob("*.Dockerfile"), *images.glob("runtime/*.Dockerfile")]):
        text = dockerfile.read_text(encoding="utf-8")
        for default in IMAGE_ARG.finditer(text):
            base = default["value"].split("@", 1)[0]
            if base in pins:
                text = text.replace(default.group(0), f"ARG {default['name']}={base}@{pins[base]}")
        dockerfile.write_text(text, encoding="utf-8")
    return pins


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("check", [])
    if command == "check":
        problems = check()
        print("\n".join(problems) or f"ok: {len(load())} pinned base image(s)")
        return 1 if problems else 0
    if command == "bump":
        for ref, digest in bump(args).items():
            print(f"{ref}  {digest}")
        return 0
    if command == "resolve" and len(args) == 1:
        print(resolve(args[0]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
