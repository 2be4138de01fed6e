"""Build a raw request from a file or preset, WHEELFOUNDRY_* variables and the builder's flags.

Precedence, lowest first: request file or preset, WHEELFOUNDRY_<FIELD> variables, the original
builder's variables (PYTORCH_VERSION, ...), command-line flags.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wheelfoundry.errors import Issue, RequestInvalid
from wheelfoundry.request.presets import preset_names
from wheelfoundry.request.request import loads_request

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}
# WHEELFOUNDRY_<NAME> mirrors a top-level request field; list fields take commas.
FIELD_VARS = {
    "FRAMEWORK": "framework",
    "VERSION": "version",
    "PYTHON": "python",
    "CHANNEL": "channel",
    "PACKAGES": "packages",
}
LIST_FIELDS = {"python", "packages"}
BOOL_FLAGS = {
    "is_arm64": "IS_ARM64",
    "enable_mkldnn": "ENABLE_MKLDNN",
    "enable_cuda": "ENABLE_CUDA",
    "keep_on_failure": "KEEP_ON_FAILURE",
    "torch_only": "TORCH_ONLY",
}


def add_builder_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("original builder flags (each has an environment twin)")
    group.add_argument("--pytorch-version", help="torch version, ref or commit (PYTORCH_VERSION)")
    group.add_argument("--python-version", help="Python version(s), comma-separated (PYTHON_VERSION)")
    group.add_argument("--is-arm64", action="store_true", default=None, help="build for aarch64 (IS_ARM64)")
    group.add_argument("--enable-mkldnn", action="store_true", default=None, help="mkldnn on (ENABLE_MKLDNN)")
    group.add_argument("--enable-cuda", action="store_true", default=None, help="CUDA build (ENABLE_CUDA)")
    group.add_argument("--cuda-version", help="CUDA version; implies --enable-cuda (CUDA_VERSION)")
    group.add_argument("--keep-on-failure", action="store_true", default=None, help="(KEEP_ON_FAILURE)")
    group.add_argument("--torch-only", action="store_true", default=None, help="skip domain libraries (TORCH_ONLY)")


def _env_bool(name: str, environ: Mapping[str, str], issues: list[Issue]) -> bool | None:
    if name not in environ:
        return None
    value = environ[name].strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    issues.append(Issue(f"${name}", f"{environ[name]!r} is not a boolean", environ[name], ("1", "0", "true", "false")))
    return None


def _python_list(text: str) -> list[str]:
    # Python images export PYTHON_VERSION=3.11.7: keep the minor version.
    return [re.sub(r"^(3\.\d+)\.\d+$", r"\1", p.strip()) for p in text.split(",") if p.strip()]


def load_source(source: str | None) -> dict[str, Any]:
    if source is None:
        return {}
    path = Path(source)
    if path.is_file():
        try:
            data = loads_request(path.read_bytes(), str(path))
        except OSError as exc:
            raise RequestInvalid([Issue(str(path), f"cannot read: {exc.strerror or exc}", source)]) from None
        if not isinstance(data, dict):
            raise RequestInvalid([Issue(str(path), "the request must be a JSON object", source)])
        return data
    if source in preset_names():
        return {"preset": source}
    raise RequestInvalid(
        [Issue("REQUEST", f"{source!r} is neither a request file nor a preset", source, preset_names())]
    )


def build_raw_request(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    raw = load_source(args.request)
    issues: list[Issue] = []
    for var, field in FIELD_VARS.items():
        value = environ.get(f"WHEELFOUNDRY_{var}")
        if value is not None:
            raw[field] = (
                _python_list(value) if field == "python" else (value.split(",") if field in LIST_FIELDS else value)
            )
    version = args.pytorch_version or environ.get("PYTORCH_VERSION")
    if version:
        raw["version"] = version
    python = args.python_version or environ.get("PYTHON_VERSION")
    if python:
        raw["python"] = _python_list(python)
    flags = {
        key: getattr(args, key) if getattr(args, key) is not None else _env_bool(var, environ, issues)
        for key, var in BOOL_FLAGS.items()
    }
    cuda = args.cuda_version or (environ.get("CUDA_VERSION") if flags["enable_cuda"] else None)
    if flags["is_arm64"] or flags["enable_cuda"] or cuda or flags["enable_mkldnn"]:
        target: dict[str, Any] = {"platform": "aarch64" if flags["is_arm64"] else "x86_64"}
        target["accelerator"] = "cuda" if (flags["enable_cuda"] or cuda) else "cpu"
        if cuda:
            target["cuda"] = cuda
        if flags["enable_mkldnn"]:
            target["mkldnn"] = True
        raw["targets"] = [target]
    if flags["keep_on_failure"]:
        raw.setdefault("options", {})["keep_on_failure"] = True
    if flags["torch_only"]:
        raw["packages"] = ["torch"]
    if issues:
        raise RequestInvalid(issues)
    return raw
