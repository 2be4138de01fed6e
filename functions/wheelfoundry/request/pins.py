"""Refuse, at Validate, an image the deployed bundle cannot build: nothing is launched for it.

A builder or runtime image is built only from bases pinned by digest and downloads pinned by sha256
(the bundle's base-images.lock and checksums.sha256, docs/security.md section 5); on the build host
anything else is refused, but only after an instance or a CodeBuild build has started. The bundle
publisher records those pins in ``bundles/current.json`` (buildspecs/wfbuild/images/pins.py); this module
checks a plan against them. Pure: no AWS, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from wheelfoundry.errors import Issue
from wheelfoundry.toolkits import stack_toolkits

PIN_BASE = "pin it with `buildspecs/images/bump_base_images.py bump {}` where a registry is reachable, then redeploy"
PIN_FILE = "add its sha256 to buildspecs/images/scripts/checksums.sha256 (the file says how), then redeploy"
LOCK_CUDA = (
    "lock it with `python3 tools/lock_cuda.py wheels {cuda} --platform {platform}` (CUDA 11/12: also `redist`), "
    "then redeploy"
)


def archive_name(template: str, value: str, recipe: str) -> str:
    return template.format(value=value, bare=value.removeprefix("v"), arch=recipe.split("-", 1)[0])


def _pinned_values(pins: Mapping[str, Any], arg: str, template: str, recipe: str) -> tuple[str, ...]:
    """The values of ``arg`` whose download the bundle pins, for this recipe (a hint in the error)."""
    archives = set(pins.get("archives", ()))
    prefix, _, suffix = archive_name(template, "\0", recipe).partition("\0")
    found = [a[len(prefix) : len(a) - len(suffix)] for a in archives if a.startswith(prefix) and a.endswith(suffix)]
    with_v = "{bare}" in template  # the name drops the leading "v" the argument carries
    return tuple(sorted(f"v{v}" if with_v else v for v in found))


def _same_repository(bases: Iterable[str], ref: str) -> tuple[str, ...]:
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    return tuple(sorted(b for b in bases if b == repository or b.startswith(repository + ":")))


def builder_issues(job: Any, pins: Mapping[str, Any], stack_locked: bool = False) -> list[Issue]:
    """A framework or extension job's builder image: its base and each install script's download."""
    image, issues = job.image, []
    bases = pins.get("bases", ())
    where = "targets" if job.kind == "pytorch" else "packages"
    if image.base not in bases:
        why = f"job {job.id}: its builder image's base {image.base} has no pinned digest in this deployment; "
        why += PIN_BASE.format(image.base)
        issues.append(Issue(where, why, image.base, _same_repository(bases, image.base)))
    archives = set(pins.get("archives", ()))
    for arg, template in sorted(pins.get("archive_names", {}).items()):
        value = image.build_args.get(arg)
        if not value or value == "none":  # e.g. ACL_VERSION=none: that script downloads nothing
            continue
        name = archive_name(template, value, image.recipe)
        if name in archives:
            continue
        why = f"job {job.id}: its builder image needs {name} ({arg}={value}), which has no pinned sha256 here; "
        why += PIN_FILE
        issues.append(Issue(where, why, value, _pinned_values(pins, arg, template, image.recipe)))
    return issues + ([] if stack_locked else cuda_issues(job, pins))


def cuda_issues(job: Any, pins: Mapping[str, Any], stack_key: str | None = None) -> list[Issue]:
    """A CUDA builder image's toolkit: a lock for (CUDA version, platform) holding every library line
    (``stack_key``: the stack's lock it is, which the messages name)."""
    cuda = job.image.build_args.get("CUDA_VERSION")
    locks = pins.get("cuda")
    if not cuda or locks is None:  # a CPU image, or a bundle from before toolkit locks were recorded
        return []
    where = "targets" if job.kind == "pytorch" else "cuda"
    lock = locks.get(f"{cuda}-{job.platform}")
    hint = LOCK_CUDA.format(cuda=cuda, platform=job.platform)
    if lock is None:
        why = f"job {job.id}: this deployment has no CUDA {cuda} toolkit lock for {job.platform}; {hint}"
        return [Issue(where, why, cuda, tuple(sorted(locks)))]
    issues, name = [], f"the CUDA {cuda} {job.platform} lock" + (f" {stack_key} (the watcher's)" if stack_key else "")
    if not lock.get("compiler", True):
        why = f"job {job.id}: {name} has no compiler (nvcc) yet; lock it with "
        why += f"`python3 tools/lock_cuda.py redist {cuda} --platform {job.platform} ...`, then redeploy"
        issues.append(Issue(where, why, cuda))
    for line in filter(None, job.image.build_args.get("CUDA_REQUIREMENTS", "").splitlines()):
        if line in lock["unavailable"]:
            why = f"job {job.id}: CUDA {cuda} on {job.platform} cannot be built: {lock['unavailable'][line]}"
            issues.append(Issue(where, why, line))
        elif line not in lock["requirements"]:
            issues.append(Issue(where, f"job {job.id}: {line} is not in {name}; {hint}", line))
    return issues


def runtime_issues(image: Any, pins: Mapping[str, Any]) -> list[Issue]:
    """A runtime image job: its base and the Python image it copies from."""
    bases = pins.get("bases", ())
    refs = [ref for ref in dict.fromkeys((image.base, image.python_image)) if ref and ref not in bases]
    why = "{}: base {} has no pinned digest in this deployment; " + PIN_BASE
    return [Issue("image", why.format(image.id, ref, ref), ref, _same_repository(bases, ref)) for ref in refs]


def unbuildable(
    jobs: Iterable[Any],
    images: Iterable[Any],
    pins: Mapping[str, Any] | None,
    stack_locked: Collection[str] = (),
    record: Mapping[str, stack_toolkits.StackToolkit] | None = None,
) -> list[Issue]:
    """Every image of the plan the bundle cannot build; none when the bundle predates pin summaries.
    ``stack_locked``: the jobs whose CUDA lock is the stack's (the runner makes their image with it): checked
    against that lock's ``record`` entry (compiler, requirement lines), as the bundle's are, before a launch."""
    if not pins:
        return []
    issues = [issue for job in jobs for issue in builder_issues(job, pins, job.id in stack_locked)]
    for job in jobs:
        cuda = job.image.build_args.get("CUDA_VERSION") if job.id in stack_locked else None
        entry = (record or {}).get(f"{cuda}-{job.platform}") if cuda else None
        if entry is not None:
            view = {
                "compiler": entry.compiler,
                "unavailable": entry.unavailable,
                "requirements": entry.row.requirements,
            }
            issues += cuda_issues(job, {"cuda": {entry.name: view}}, entry.key)
    return issues + [issue for image in images for issue in runtime_issues(image, pins)]


def bundle_lacks_locks(jobs: Iterable[Any], bundle: Any) -> bool:
    """Whether a CUDA job's toolkit has no lock in the bundle's pins (an older or trimmed bundle, with a catalog
    row for it): then the stack's record may hold the one the watcher wrote. False where the bundle predates pin
    summaries (nothing to compare)."""
    if not isinstance(bundle, Mapping):
        return False
    for job in jobs:
        cuda = job.image.build_args.get("CUDA_VERSION") if getattr(job, "image", None) else None
        if cuda and f"{cuda}-{job.platform}" not in bundle:
            return True
    return False


def job_locks(
    jobs: Iterable[Any], record: Mapping[str, stack_toolkits.StackToolkit], bundle: Any
) -> dict[str, dict[str, str]]:
    """Job id -> ``{"key", "sha256"}`` for each CUDA job whose lock is the stack's (its contract's toolkit_lock)."""
    found = {}
    for job in jobs:
        cuda = job.image.build_args.get("CUDA_VERSION") if getattr(job, "image", None) else None
        if cuda and (
            lock := stack_toolkits.contract_lock(
                record, bundle if isinstance(bundle, Mapping) else None, cuda, job.platform
            )
        ):
            found[job.id] = lock
    return found
