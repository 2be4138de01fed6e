"""The job contract: what the runner's helpers may read and call on the job they serve.

wfbuild.runner.runner's ``Job`` holds one execution's state and runs its stages. The modules that share
its work (the cells' schedule, host mode, a stage's environment, the compilers' memory, the last steps)
take a ``Job`` of this Protocol instead of importing the runner, so the runner imports them and none of
them imports it back: one direction, no circle. mypy checks the runner's class against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from wfbuild.compiling.compile_records import CompileRecords
from wfbuild.compiling.compiler_cache import CompilerCache
from wfbuild.execute import BuildLog, Runner
from wfbuild.runner.credentials import JobCredentials
from wfbuild.stages.stage_base import Stage


class MemoryRecord(Protocol):
    """The part of the compilers' memory watch (wfbuild.runner.compile_memory) that others read."""

    def gib_per_compiler(self, planned: float) -> float: ...

    def add_to_manifest(self, data: dict[str, Any]) -> None: ...


class Job(Protocol):
    environ: dict[str, str]
    token: str
    token_gone: bool
    bucket: str
    job_key: str
    prefix: str
    work: Path
    private: Path
    bundle: Path
    mode: str
    log: BuildLog
    runner: Runner
    s3: Any
    sfn: Any
    creds: JobCredentials | None
    cache: CompilerCache | None
    cuda_home: Path | None
    compile: CompileRecords
    results: list[dict[str, Any]]
    job: dict[str, Any]
    threads: list[Any]
    builder: dict[str, Any]
    sources: dict[str, Any]
    parallelism: dict[str, int | float | str]

    @property
    def memory(self) -> MemoryRecord: ...  # read-only here: the runner's CompileMemory is one

    def keys(self) -> dict[str, str]: ...

    def step(
        self, pair: tuple[Stage, Stage], image: str, fatal_failed: bool, extra: dict[str, str] | None = None
    ) -> bool: ...

    def run_one(self, stage_host: Stage, stage_in: Stage, image: str, extra: dict[str, str]) -> str: ...
