"""One build-environment cache for the whole test session.

A cold torch environment costs ~45 s (torch 2.13.0+cpu) and far more for a CUDA torch. The embedded
AWS's agent and CodeBuild, the runner tests and the `wheelfoundry local run/up` subprocesses all read
``WF_CACHE_DIR``; pointing them at one folder builds each environment once per session, as one farm
machine reuses them between jobs (wfbuild.envs keys the cache by interpreter and packages).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_CREATED: list[str] = []
# Sources the tests build (a fixture package's own tests run inside its test job, against its wheel).
collect_ignore = ["fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    _one_botocore_loader()
    if not os.environ.get("WF_CACHE_DIR"):
        os.environ["WF_CACHE_DIR"] = tempfile.mkdtemp(prefix="wf-test-cache-")
        _CREATED.append(os.environ["WF_CACHE_DIR"])
    os.makedirs(os.environ["WF_CACHE_DIR"], exist_ok=True)  # a folder named but not made yet (fixtures write into it)


def _one_botocore_loader() -> None:
    """Every botocore session of a test process reads its data files (endpoints, service models) through one
    loader, which keeps what it read. moto's mock_aws drops boto3's default session at each start, and each
    new session read the endpoint data again: about a tenth of `make test`'s pytest-worker CPU under py-spy
    (2026-11-29). One loader per data path, as botocore's own clients of one session share theirs; a boto3
    session adds its own data folder to the loader's search path once, not once per session."""
    import boto3.session
    import botocore.session

    if hasattr(botocore.session.create_loader, "cache_info"):
        return
    botocore.session.create_loader = functools.cache(botocore.session.create_loader)

    def setup_loader(self: boto3.session.Session) -> None:
        self._loader = self._session.get_component("data_loader")
        data = os.path.join(os.path.dirname(boto3.session.__file__), "data")
        if data not in self._loader.search_paths:
            self._loader.search_paths.append(data)

    boto3.session.Session._setup_loader = setup_loader  # type: ignore[method-assign]


# Measured seconds per test (tools/test_durations.py writes it from a JUnit report of a whole run).
DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED = 30.0  # a test not measured yet: a middling guess, so a new heavy test neither starts first nor last
HEAVY_TIMEOUT = 3600.0  # seconds: within the gate's 90 minutes, past any build-and-rebuild test on slow cores


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules holding the longest tests first: pytest-xdist hands tests to its workers in this order,
    so a long build starts while the others run, never alone at the end of the session. A module's tests
    stay together in their own order: interleaving modules would tear down and rebuild module-scoped
    fixtures (a built library, a deployed stack) between their tests (stable: ties keep file order)."""
    for item in items:
        heavy_hang_guard(item)
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    longest: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        longest[module] = max(longest.get(module, 0.0), seconds.get(item.nodeid, UNMEASURED))
    items.sort(key=lambda item: -longest[item.nodeid.split("::", 1)[0]])


def heavy_hang_guard(item: pytest.Item) -> None:
    """A heavy test's timeout is a hang guard, never a speed check: at least HEAVY_TIMEOUT, whatever its mark
    or pyproject's 600 s says. A module fixture's builds count towards its first test's time, and on slower,
    busier cores (make test-heavy-slow) a build-and-rebuild test passed 600 s doing exactly what it should."""
    if item.get_closest_marker("heavy") is None:
        return
    marked = item.get_closest_marker("timeout")
    if marked is None or not marked.args or float(marked.args[0]) < HEAVY_TIMEOUT:
        item.add_marker(pytest.mark.timeout(HEAVY_TIMEOUT), append=False)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true (.ci/run) a skipped test is a failed one: the gate runs every test, so a test that did
    not run (no engine, no cgroup, a tool missing) must not read as green. Off CI a skip says why, as ever."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: skipped under CI=true ({reason}); the gate runs every test"


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _CREATED:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_key_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The provenance keys a test's commands remember (wheelfoundry_user.trust) stay that test's: never the
    user's ~/.cache, never another test's stack. Created only when something is remembered."""
    name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WHEELFOUNDRY_CACHE", str(tmp_path_factory.getbasetemp() / "key-caches" / name))
        yield
