"""What a job's compile stages report beside their logs: compiler cache stats and CPU usage.

A compile stage (build-library.sh, build-torch.sh) runs under wfbuild.compiling.cpu_usage, which writes its CPU
and wall seconds to ``meta/usage/<stage>.json``; in container mode it also runs under a compiler cache
server of its own (wfbuild.compiling.compiler_cache.run_stage), which writes ``meta/sccache/<stage>.json``. Both
files are written inside the build's tree, so both are read as the build's files (wfbuild.hostfiles)
and kept only as numbers: a build can misreport only its own figures. The job's manifest gets
``compiler_cache`` and ``compile_usage`` (cores busy), each compile stage its ``cpu_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wfbuild import hostfiles
from wfbuild.compiling import cache_stats, compiler_cache, cpu_usage
from wfbuild.stages.stages import Stage


def compiles(stage: Stage) -> bool:
    return any(a.endswith(("build-library.sh", "build-torch.sh")) for a in stage.argv)


def wraps(stage: Stage) -> bool:
    """setuptools builds (domain libraries, extensions) call the compiler themselves: wrappers, not launchers."""
    return any(a.endswith("build-library.sh") for a in stage.argv)


class CompileRecords:
    def __init__(self, work: Path, note: Callable[[str], None]) -> None:
        self.work, self.note = work, note
        self.cache_stats: list[dict[str, Any]] = []  # container mode: each compile stage's server
        self.usage: dict[str, dict[str, Any]] = {}  # compile stage -> its CPU and wall seconds

    def argv(self, stage: Stage, in_container: bool, cached: bool) -> list[str]:
        """The stage's command: a compile stage under wfbuild.compiling.cpu_usage (and, in a container with the
        stack's cache, under a compiler cache server of its own)."""
        if not compiles(stage):
            return stage.argv
        argv = stage.argv
        if in_container and cached:
            argv = compiler_cache.stage_argv(f"/work/meta/sccache/{stage.name}.json", argv, wraps(stage))
        out = f"{'/work' if in_container else self.work}/meta/usage/{stage.name}.json"
        return ["python3", "-m", "wfbuild.compiling.cpu_usage", "--out", out, "--", *argv]

    def collect(self, stage: Stage, in_container: bool) -> float | None:
        """Read what the stage wrote; its CPU seconds (its own cache server's included), or None."""
        if not compiles(stage):
            return None
        server = 0.0
        if in_container:
            stats = cache_stats.read_stats(self.work, self.work / "meta" / "sccache" / f"{stage.name}.json", self.note)
            if stats is not None:
                self.cache_stats.append(stats)
                server = float(stats.get("server_cpu_seconds") or 0.0)
        try:
            raw = json.loads(hostfiles.read_inside(self.work, self.work / "meta" / "usage" / f"{stage.name}.json"))
            record = {k: float(raw[k]) for k in ("cpu_seconds", "wall_seconds")} | {"cores": int(raw["cores"])}
        except (hostfiles.UnsafeFile, ValueError, KeyError, TypeError) as exc:
            self.note(f"no CPU record of {stage.name}: {exc}")
            return None
        if min(record.values()) < 0:
            self.note(f"no CPU record of {stage.name}: negative figures")
            return None
        record["cpu_seconds"] = round(record["cpu_seconds"] + server, 2)
        self.usage[stage.name] = record
        return record["cpu_seconds"]

    def add_to_manifest(
        self, data: dict[str, Any], host_cache: compiler_cache.CompilerCache | None, env: Mapping[str, str]
    ) -> None:
        """``compiler_cache`` and ``compile_usage`` of the job; a host-mode server's CPU (its compilers
        are its children, not the stages') shared among the compile stages by their wall seconds."""
        stats: dict[str, Any] | None = None
        if host_cache is not None:
            stats = host_cache.stop(env)
        elif self.cache_stats:
            stats = cache_stats.combine(self.cache_stats)
        if stats is not None:
            data["compiler_cache"] = stats
            self.note(cache_stats.describe(stats))
        server = float((stats or {}).get("server_cpu_seconds") or 0.0) if host_cache is not None else 0.0
        usage = cpu_usage.summary(data.get("stages") or [], self.usage, server)
        if usage is None:
            return
        shares = usage.pop("stage_cpu_seconds")
        for stage in data.get("stages") or []:
            if stage.get("name") in shares:
                stage["cpu_seconds"] = shares[stage["name"]]
        data["compile_usage"] = usage  # what the planner sizes the next build of this source by
        self.note(cpu_usage.describe(usage))
