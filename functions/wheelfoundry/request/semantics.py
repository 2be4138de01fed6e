"""Catalog checks on a request whose shape may still be wrong in places.

Every function here tolerates any JSON value: a field of the wrong type is skipped (the
schema already reported it), so property-based tests can throw anything at ``check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from wheelfoundry.catalog.catalog import ALL_PACKAGES, Catalog, classify
from wheelfoundry.catalog.resolve import Resolved, Unresolvable, python_for, resolve_version
from wheelfoundry.config import FarmConfig
from wheelfoundry.errors import Issue
from wheelfoundry.request import exclusions
from wheelfoundry.request.stable_wheels import name_issues, retest_issues
from wheelfoundry.request.targets import check_arch_list, check_target, target_id

CHANNEL_BY_KIND = {"release": "release", "rc": "test", "nightly": "nightly"}

# What a request's build_env may not set: the variables this farm sets in a cell (its cores' split, the
# toolkit, the compiler flags reproducibility depends on, the cache, the AWS session) and those that change
# how a shell, Python, pip or the dynamic loader behave under the farm's own stage scripts.
FARM_ENV_PREFIXES = ("AWS_", "WF_", "SCCACHE_", "CUDA", "NVCC_", "TORCH_", "PYTORCH_", "CMAKE_", "LD_", "PYTHON",
                     "PIP_", "BASH", "LC_", "AUDITWHEEL_", "CCACHE_", "SSL_", "NVIDIA_")  # fmt: skip
FARM_ENV_NAMES = frozenset(
    ("PATH", "HOME", "USER", "SHELL", "ENV", "IFS", "PS4", "TMPDIR", "TZ", "LANG", "MAX_JOBS", "MAKEFLAGS", "NINJA",
     "CC", "CXX", "CPP", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "FORCE_CUDA", "USE_CUDA", "SOURCE_DATE_EPOCH",
     "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE")
)  # fmt: skip


STABLE_ABI_FROM = (
    "2.10"  # torch/csrc/stable and the versioned C shims (pytorch docs/source/notes/libtorch_stable_abi.md)
)


def farm_owned(name: str) -> bool:
    """Whether a build_env name is one the farm sets or relies on (refused in a request)."""
    upper = name.upper()
    return upper in FARM_ENV_NAMES or upper.startswith(FARM_ENV_PREFIXES)


def default_channel(version: str) -> str:
    return CHANNEL_BY_KIND.get(classify(version) or "", "dev")


def supported_python(version: str, catalog: Catalog) -> tuple[str, ...]:
    return resolve_version(version, catalog).python


def default_packages(version: str, catalog: Catalog) -> list[str]:
    resolved = resolve_version(version, catalog)
    if resolved.is_pinned:
        return ["torch"]
    return ["torch", *resolved.paired]


def default_extension_python(data: Mapping[str, Any], catalog: Catalog) -> list[str]:
    """Pythons every requested torch release supports (their intersection)."""
    common: set[str] | None = None
    for spec in data.get("torch") or ():
        versions = set(resolve_version(spec, catalog).python)
        common = versions if common is None else common & versions
    return sorted(common or (), key=Version)


def _items(value: Any) -> list[tuple[int, Any]]:
    return list(enumerate(value)) if isinstance(value, list) else []


def _strs(value: Any) -> list[tuple[int, str]]:
    """The string items of a list; anything else was already reported by the schema."""
    return [(i, v) for i, v in _items(value) if isinstance(v, str)]


def _check_python(path: str, values: Any, allowed: tuple[str, ...], what: str, skip: set[str]) -> list[Issue]:
    issues = []
    for i, py in _strs(values):
        where = f"{path}[{i}]"
        if isinstance(py, str) and where not in skip and py not in allowed:
            issues.append(Issue(where, f"Python {py} is not supported by {what}", py, allowed))
    return issues


def _package_names(packages: Any) -> list[tuple[int, str, Mapping[str, Any]]]:
    out: list[tuple[int, str, Mapping[str, Any]]] = []
    for i, pkg in _items(packages):
        if isinstance(pkg, str):
            out.append((i, pkg, {}))
        elif isinstance(pkg, Mapping) and isinstance(pkg.get("name"), str):
            out.append((i, pkg["name"], pkg))
    return out


def _check_packages(data: Mapping[str, Any], resolved: Resolved, catalog: Catalog, skip: set[str]) -> list[Issue]:
    issues: list[Issue] = []
    seen: set[str] = set()
    entries = _package_names(data.get("packages"))
    for i, name, spec in entries:
        where = f"packages[{i}]"
        if where in skip or name not in ALL_PACKAGES:
            continue
        if name in seen:
            issues.append(Issue(where, f"{name} is listed twice", name))
        seen.add(name)
        explicit = bool(spec.get("ref") or spec.get("version"))
        if name == "torch" or explicit:
            continue
        if resolved.is_pinned:
            issues.append(
                Issue(
                    where,
                    f"{name} needs an explicit ref when torch is a {resolved.kind} ({resolved.spec}): "
                    "the catalog cannot pair a domain library with an arbitrary commit or tag",
                    name,
                    ('{"name": "' + name + '", "ref": "<tag or commit>"}', "torch alone"),
                )
            )
        elif name not in resolved.paired:
            library = catalog.libraries[name]
            why = f"; {library.note}" if library.note else ""
            issues.append(
                Issue(
                    where, f"{name} has no release paired with torch {resolved.spec}{why}", name, tuple(resolved.paired)
                )
            )
        elif "python" not in skip and isinstance(data.get("python"), list):
            # A library is built for the Pythons it supports; the plan lists them. None at all is an error.
            supported = python_for(resolved, name)
            if not set(data["python"]) & set(supported):
                issues.append(
                    Issue(
                        where,
                        f"{name} {resolved.paired[name]} supports none of the requested Python versions",
                        name,
                        supported,
                    )
                )
    if entries and "torch" not in {name for _, name, _ in entries} and "packages" not in skip:
        issues.append(Issue("packages", "torch must be built too: domain libraries are built against it", None))
    return issues


def _check_pytorch(data: Mapping[str, Any], catalog: Catalog, config: FarmConfig, skip: set[str]) -> list[Issue]:
    issues: list[Issue] = []
    version = data.get("version") or catalog.newest_release().latest_patch()
    if not isinstance(version, str) or "version" in skip:
        return issues
    try:
        resolved = resolve_version(version, catalog)
    except Unresolvable as exc:
        return [Issue("version", f"{version!r}: {exc}", version, exc.allowed)]
    issues += _check_python("python", data.get("python"), resolved.python, f"torch {resolved.spec}", skip)
    issues += _check_packages(data, resolved, catalog, skip)
    seen: dict[str, int] = {}
    for i, target in _items(data.get("targets")):
        where = f"targets[{i}]"
        if not isinstance(target, Mapping) or where in skip:
            continue
        found = check_target(where, target, resolved, catalog, config, skip)
        issues += found
        if not found:
            tid = target_id(target)
            if tid in seen:
                issues.append(Issue(where, f"duplicates targets[{seen[tid]}] ({tid})", tid))
            seen.setdefault(tid, i)
    return issues


def _check_build_env(value: Any) -> list[Issue]:
    """build_env names the farm sets itself: refused, naming the variable (the schema checks the shape)."""
    if not isinstance(value, Mapping):
        return []
    why = (
        "is the farm's to set (the cell's cores, toolkit, compiler flags, cache or session, "
        "or how its shell, Python and loader run)"
    )
    return [
        Issue(f"build_env.{name}", f"{name} {why}", name, ("other upper-case names, like CAUSAL_CONV1D_FORCE_BUILD",))
        for name in value
        if isinstance(name, str) and farm_owned(name)
    ]


def _check_exclude(data: Mapping[str, Any], skip: set[str]) -> list[Issue]:
    """Each ``exclude`` entry names values of the request's own lists (the schema checks the shape)."""
    issues: list[Issue] = []
    lists = {"torch": "torch", "cuda": "cuda", "python": "python", "platform": "platforms"}
    for i, entry in _items(data.get("exclude")):
        if not isinstance(entry, Mapping) or f"exclude[{i}]" in skip:
            continue
        for key, field_name in lists.items():
            value, allowed = entry.get(key), [v for _, v in _strs(data.get(field_name))]
            if isinstance(value, str) and isinstance(data.get(field_name), list) and value not in allowed:
                why = f"{value!r} is not in the request's {field_name}: the entry would leave out no cell"
                issues.append(Issue(f"exclude[{i}].{key}", why, value, tuple(allowed)))
    return issues


def _check_toolkits(data: Mapping[str, Any], resolved: list[Resolved], catalog: Catalog, skip: set[str]) -> list[Issue]:
    """A CUDA version a torch release was published for, with no toolkit here: no catalog row and no approved
    lock of the stack's watcher (a newer CUDA than this deployment: wheelfoundry.toolkits.stack_toolkits)."""
    usable = tuple(sorted((c for c, tk in catalog.cuda.items() if tk.requirements), key=Version))
    issues = []
    for i, cuda in _strs(data.get("cuda")):
        where = f"cuda[{i}]"
        if cuda == "cpu" or where in skip or cuda in catalog.cuda or not any(cuda in r.cuda for r in resolved):
            continue  # one not offered for the release is refused above, by the release
        why = f"CUDA {cuda} has no toolkit in this deployment yet (no catalog row, no approved lock of the stack's"
        why += " watcher: wheelfoundry toolkits list)"
        issues.append(Issue(where, why, cuda, usable))
    return issues


def stable_abi_issues(abi: object, versions: Mapping[str, str], names: str, fix: str = "") -> list[Issue]:
    """``abi: stable`` over torch releases (label -> version) that include one before LibTorch's stable ABI: the
    one rule of a request (Validate) and of a subscription's range (subscribe), said in ``names`` words."""
    if abi != "stable":
        return []
    before = [label for label, version in versions.items() if Version(version) < Version(STABLE_ABI_FROM)]
    why = f"LibTorch's stable ABI begins with torch {STABLE_ABI_FROM}; {names} {', '.join(before)}{fix}"
    return [Issue("abi", why, "stable", ("auto", "per-torch"))] if before else []


def _check_extension(data: Mapping[str, Any], catalog: Catalog, skip: set[str]) -> list[Issue]:
    issues: list[Issue] = _check_build_env(data.get("build_env"))
    resolved: list[Resolved] = []
    for i, spec in _strs(data.get("torch")):
        where = f"torch[{i}]"
        if where in skip or not isinstance(spec, str):
            continue
        try:
            found = resolve_version(spec, catalog)
        except Unresolvable as exc:
            issues.append(Issue(where, f"{spec!r}: {exc}", spec, exc.allowed))
            continue
        twin = next((r for r in resolved if r.torch_version == found.torch_version), None)
        if twin is not None:
            issues.append(Issue(where, f"{spec!r} is torch {found.torch_version} again (as {twin.spec!r})", spec))
            continue
        resolved.append(found)
    named = {r.spec: r.torch_version for r in resolved if r.torch_version}
    issues += stable_abi_issues(data.get("abi"), named, "the request also names torch")
    if data.get("abi_build") == "newest" and data.get("abi") == "per-torch":  # each cell is its own build there
        issues.append(Issue("abi_build", "newest picks the torch of a stable build; abi per-torch builds every torch",
                            "newest", ("oldest", "newest with abi stable or auto")))  # fmt: skip
    issues += retest_issues(data, named)
    left_out = exclusions.parse(data.get("exclude"))
    issues += _check_exclude(data, skip)
    for r in resolved:
        asked = data.get("python")
        if isinstance(asked, list):  # a Python every cell of this torch leaves out is not asked of it
            asked = [None if exclusions.excluded(left_out, torch=r.spec, python=str(p)) else p for p in asked]
        issues += _check_python("python", asked, r.python, f"torch {r.spec}", skip)
        for i, cuda in _strs(data.get("cuda")):
            where = f"cuda[{i}]"
            if cuda == "cpu" or where in skip or cuda in r.cuda:
                continue
            if not exclusions.excluded(left_out, torch=r.spec, cuda=cuda):  # a cell asks for it
                issues.append(Issue(where, f"CUDA {cuda} is not available for torch {r.spec}", cuda, ("cpu", *r.cuda)))
    issues += _check_toolkits(data, resolved, catalog, skip)
    cudas = [c for _, c in _strs(data.get("cuda")) if c != "cpu"]
    platforms = [p for _, p in _strs(data.get("platforms"))]
    if "aarch64" in platforms:  # aarch64 CUDA cells build against upstream's aarch64 CUDA torch wheels
        for r in resolved:
            for i, cuda in _strs(data.get("cuda")):
                if cuda == "cpu" or cuda not in r.cuda or cuda in r.aarch64_cuda or f"cuda[{i}]" in skip:
                    continue
                if not exclusions.excluded(left_out, torch=r.spec, cuda=cuda, platform="aarch64"):
                    why = f"CUDA {cuda} on aarch64 is not available for torch {r.spec} (upstream builds no such wheel)"
                    issues.append(Issue(f"cuda[{i}]", why, cuda, ("cpu", *r.aarch64_cuda)))
    arch_list = data.get("arch_list")
    if isinstance(arch_list, str) and "arch_list" not in skip:
        for cuda in cudas:
            if cuda in catalog.cuda:
                issues += check_arch_list("arch_list", arch_list, catalog.cuda[cuda])
    cells = len(resolved) * max(1, len(list(_strs(data.get("cuda")))))
    if data.get("layout") == "per-cell" and data.get("local_version") is False and cells > 1:
        # Without the +pt<XY><variant> label every cell's wheel has the same file name.
        message = f"per-cell layout with {cells} torch x CUDA cells needs local versions (or layout 'merged')"
        issues.append(Issue("local_version", message, False, ("true",)))
    if isinstance(arch_list, str) and not cudas and "arch_list" not in skip:
        issues.append(Issue("arch_list", "arch_list applies only when cuda lists a CUDA version", arch_list))
    if left_out and resolved and not issues and not _some_cell(data, resolved, left_out):
        issues.append(Issue("exclude", "the entries leave out every cell of the request: nothing to build", None))
    issues += _local_labels_to_pypi(data) + name_issues(data)
    return issues


def _some_cell(data: Mapping[str, Any], resolved: list[Resolved], left_out: tuple[exclusions.Entry, ...]) -> bool:
    for r in resolved:
        pythons = [p for _, p in _strs(data.get("python"))] if isinstance(data.get("python"), list) else r.python
        for _, cuda in _strs(data.get("cuda")):
            for _, platform in _strs(data.get("platforms")):
                for py in pythons:
                    cell = {"torch": r.spec, "cuda": cuda, "python": py, "platform": platform}
                    if py in r.python and not exclusions.excluded(left_out, **cell):
                        return True
    return False


def _local_labels_to_pypi(data: Mapping[str, Any]) -> list[Issue]:
    """PyPI and TestPyPI refuse PEP 440 local versions (``+pt211cu130``): per-cell wheels never get there.

    Said before the build, not at the Upload step after it. Layout ``auto`` decides after the build
    (Upload then refuses the labelled wheels with the same advice).
    """
    options = data.get("options") or {}
    publish = options.get("publish")
    target = publish.get("repository") if isinstance(publish, Mapping) else publish
    if target not in ("pypi", "testpypi") or data.get("layout") != "per-cell" or data.get("local_version") is False:
        return []
    why = (
        f"per-cell wheels carry local version labels (+pt<XY><variant>), which {target} refuses (PEP 440 local "
        "versions are not allowed there); serve them from a public channel instead (deploy with "
        "PublicChannels=<channel>: pip install NAME -f https://<domain>/simple/<channel>/torch-<X.Y.Z>+<cuda>.html), "
        "or build the merged layout for PyPI"
    )
    return [Issue("options.publish", why, target, ("layout 'merged' or 'auto'", "a public channel"))]


def check(data: Mapping[str, Any], catalog: Catalog, config: FarmConfig, skip: set[str]) -> list[Issue]:
    """Every catalog-level problem of a (defaults-filled) request."""
    if data.get("framework") == "extension":
        return _check_extension(data, catalog, skip)
    return _check_pytorch(data, catalog, config, skip)
