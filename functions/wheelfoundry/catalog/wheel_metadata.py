"""What a published torch wheel's METADATA says about its build: its CUDA and the pins its CUDA build adds.

Read by ``wheelfoundry catalog verify`` (wheelfoundry_cli.upstream_facts) and by the watcher
(wheelfoundry.catalog.upstream_index), which derives a new torch release's extension-build facts from them.
"""

from __future__ import annotations

import re


def metadata_requirements(text: str) -> tuple[str, ...]:
    """Requires-Dist lines of a torch wheel that its CUDA build adds (nvidia-*, cuda-*, triton; not extras),
    markers kept; the older ``name (==1.0) ; marker`` spelling (torch <= 2.6) read as ``name==1.0; marker``."""
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            req = line.split(":", 1)[1].strip()
            if req.startswith(("nvidia-", "cuda-", "triton")):
                req = re.sub(r"^([\w.\[\],-]+)\s*\(([^)]*)\)\s*", r"\1\2", req)
                out.append(req.replace(" ;", ";"))
    return tuple(out)


def metadata_cuda(text: str) -> str | None:
    """The CUDA a torch wheel was built for, from its runtime pin ("13.0" from cuda-toolkit==13.0.3)."""
    match = re.search(
        r"^Requires-Dist:\s*(?:cuda-toolkit\S*==|nvidia-cuda-runtime-cu\d+\s*\(?==)(\d+\.\d+)", text, re.M
    )
    return match[1] if match else None


def metadata_python(text: str) -> str | None:
    match = re.search(r"^Requires-Python:\s*(\S+)", text, re.M)
    return match[1] if match else None
