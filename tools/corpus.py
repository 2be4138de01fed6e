"""The corpus: real PyTorch extensions from PyPI built through the farm, installed and checked as a user would.

    .venv/bin/python tools/corpus.py [--only NAME ...] [--all] [--state-dir DIR] [--timeout S] [--jobs N] [--cuda]

For each package of examples/corpus/corpus.toml (``ci = false`` ones only with --all or --only):
1. its sdist, downloaded once into $WF_CACHE_DIR/corpus/ and checked against PyPI's sha256;
2. built by the real state machine in the embedded AWS from examples/corpus/requests/<name>-cpu.json,
   what ``wheelfoundry local run <request> --source <sdist>`` does (one stack deployed for all of them);
3. installed with pip from the stack's index (``--isolated --index-url``) into a fresh venv with the
   catalog's torch, imported, and its check run (examples/corpus/checks/: ops against plain torch).

With --cuda, instead: each chosen package with a ``cuda_switch`` is built from its CUDA 13.0 requests
(requests/<name>-cu130.json and -cu130-switch.json, no GPU needed): passed when the farm refuses the cell
without the switch (no device code) and publishes it with the switch (docs/device-code.md).
Prints a table and writes bench/results/corpus-<UTC>.json: per package the CPU compile seconds (the
build stages' own time), wheel size, the layout the run reports, the result and the first error.
Exit status 1 if any package fails, 2 on bad input. Builds and environments reuse WF_CACHE_DIR.
--jobs (default 2): packages built at once on the one stack, as one farm serves several requests. Each
build is planned for CodeBuild's small type, one compiler at a time, so one package at a time left a core
idle (51% of 2 cores); two at once, a package's compile seconds include the other's load. Each line of a
package's own output is led by its name.
The --cuda requests build one at a time: each CUDA build takes the machine's cores and memory itself.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import json
import os
import platform
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.corpus_steps import (
    CorpusError,
    Outcome,
    Package,
    build_facts,
    install_and_check,
    load_corpus,
    restore_compiler_cache,
    save_compiler_cache,
    user_venv,
)
from wheelfoundry.planning.buildenv import extension_cache_scope
from wheelfoundry.request.model import ExtensionSource

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "corpus" / "corpus.toml"
RESULTS = ROOT / "bench" / "results"


def fetch_sdist(package: Package, cache: Path) -> Path:
    """The sdist from its pinned PyPI URL, once: a cached copy is used only if its sha256 still matches."""
    dest = cache / "corpus" / package.filename
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == package.sha256:
        return dest
    with urllib.request.urlopen(package.url, timeout=300) as response:  # noqa: S310 - a pinned https URL
        body = response.read()
    got = hashlib.sha256(body).hexdigest()
    if got != package.sha256:
        raise CorpusError(f"{package.filename}: sha256 {got} is not PyPI's {package.sha256} ({package.url})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    partial.write_bytes(body)
    partial.replace(dest)
    return dest


def speaker(name: str, lead: bool) -> Callable[[str], None]:
    """``print``, or with ``lead`` each line led by the package's name (packages built at once interleave)."""
    if not lead:
        return print
    return lambda text: print("\n".join(f"[{name}] {line}" if line else "" for line in str(text).split("\n")))


def run_package(
    aws: Any, stack: Any, package: Package, cache: Path, state_dir: Path, timeout: float, say: Callable[[str], None]
) -> Outcome:
    from wheelfoundry_cli.index_server import serving

    from wheelfoundry_local.demo import copy_published, explain_failure, run_request, upload_source
    from wheelfoundry_local.progress import Progress

    outcome = Outcome.of(package)
    started = time.monotonic()
    try:
        sdist = fetch_sdist(package, cache)
    except (OSError, CorpusError) as exc:
        return outcome.failed("download", str(exc), started)
    request = json.loads(package.request("cpu").read_text())
    request["source"] = {"s3": upload_source(aws, stack, sdist, package.name)}
    say(f"\n== {package.name} {package.version}: wheelfoundry local run {package.request('cpu').name} --source {sdist}")
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    # The package's compiler cache outlives the emulated stack: kept in the cache folder between runs.
    prefix = f"sccache/ext-{extension_cache_scope(ExtensionSource(s3=request['source']['s3']))}-"
    kept = cache / "corpus-sccache" / package.name
    say(f"compiler cache: {restore_compiler_cache(s3, bucket, prefix, kept)} object(s) restored from {kept}")
    result = run_request(aws, stack, request, say, Progress(), timeout)
    say(f"compiler cache: {save_compiler_cache(s3, bucket, prefix, kept)} new object(s) saved to {kept}")
    outcome.run_id = result.arn.rsplit(":", 1)[1]
    build_facts(s3, bucket, outcome, request)
    if not result.succeeded:
        explain_failure(s3, bucket, result, state_dir, say, debug=False)
        return outcome.failed("build", build_error(s3, bucket, outcome.run_id, result), started)
    with serving(s3, bucket) as base:
        channel = result.output["channel"]
        wheels = copy_published(base, channel, package.name, state_dir / "dist" / package.name, say)
        if not wheels:
            return outcome.failed("publish", f"no wheel of {package.name} on {base}/simple/{channel}/", started)
        outcome.record_wheels(state_dir / "dist" / package.name, [w.filename for w in wheels])
        venv = user_venv(cache, package, state_dir / "venvs" / package.name, state_dir / "logs")
        stage, error = install_and_check(f"{base}/simple/{channel}/", package, venv, state_dir / "logs", say)
    return outcome.failed(stage, error, started) if error else outcome.passed(started)


def run_cuda(
    aws: Any, stack: Any, package: Package, kind: str, cache: Path, state_dir: Path, timeout: float
) -> Outcome:
    """A package's CUDA request (``cu130`` or ``cu130-switch``), built only (this host has no GPU to check on):
    without the package's own switch the farm must refuse the cell for its device code, with it publish a build
    whose cells hold code for the request's arch list (docs/device-code.md)."""
    from wheelfoundry_local.demo import explain_failure, run_request, show_device_code, upload_source
    from wheelfoundry_local.progress import Progress

    outcome = Outcome.of(package)
    outcome.name = f"{package.name} ({kind})"
    started = time.monotonic()
    request = json.loads(package.request(kind).read_text())
    request["source"] = {"s3": upload_source(aws, stack, fetch_sdist(package, cache), package.name)}
    print(f"\n== {package.name} {package.version}: wheelfoundry local run {package.request(kind).name}")
    result = run_request(aws, stack, request, print, Progress(), timeout)
    s3, bucket = aws.client("s3"), stack.outputs["WheelBucketName"]
    outcome.run_id = result.arn.rsplit(":", 1)[1]
    build_facts(s3, bucket, outcome, request)
    show_device_code(s3, bucket, result, print)
    if not result.succeeded:
        explain_failure(s3, bucket, result, state_dir, print, debug=False)
    error = build_error(s3, bucket, outcome.run_id, result) if not result.succeeded else ""
    if kind == "cu130-switch" and result.succeeded:
        return outcome.passed(started)
    if kind == "cu130" and "DEVICE CODE REFUSED" in error:  # refused, as it must be without the switch
        return outcome.passed(started)
    return outcome.failed(
        "build", error or f"published without {package.cuda_switch}: the check let it through", started
    )


def build_error(s3: Any, bucket: str, run_id: str, result: Any) -> str:
    """The first failed job's stage and cause line, as `local run` shows them; else the execution's error."""
    from wheelfoundry_user.failures import run_failures

    def get_json(key: str) -> Any:
        try:
            return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    for failure in run_failures(get_json, run_id):
        return f"{failure.job} {failure.stage or failure.error}: {' '.join(failure.cause[:1])}"
    return f"execution {result.status}: {result.error or ''}"


def table(outcomes: list[Outcome]) -> list[str]:
    head = f"{'package':<18} {'version':<8} {'loading':<22} {'ninja':<5} {'layout':<16} {'compile s':>9} "
    head += f"{'wheel KiB':>9}  result"
    lines = [head, "-" * len(head)]
    for o in outcomes:
        compile_s = f"{o.compile_seconds:.1f}" if o.compile_seconds is not None else "-"
        size = f"{o.wheel_bytes / 1024:.1f}" if o.wheel_bytes else "-"
        result = "passed" if o.result == "passed" else f"FAILED at {o.stage}: {o.error}"
        ninja = "on" if o.ninja else "off"
        lines.append(
            f"{o.name:<18} {o.version:<8} {'+'.join(o.loading):<22} {ninja:<5} {o.layout:<16} {compile_s:>9} "
            f"{size:>9}  {result}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="a package's name (repeatable)")
    parser.add_argument("--all", action="store_true", help="also the packages marked ci = false")
    parser.add_argument("--state-dir", default=".wf-local/corpus", help="instances, logs, venvs, wheels")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per package's run")
    parser.add_argument("--jobs", type=int, default=2, help="packages built at once (default 2; --cuda: one at a time)")
    parser.add_argument(
        "--cuda", action="store_true", help="instead: the CUDA requests of packages with a cuda_switch (long builds)"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1 package at a time")
    if isinstance(sys.stdout, io.TextIOWrapper):  # progress shows as it happens in CI's captured log too
        sys.stdout.reconfigure(line_buffering=True)
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    try:
        packages = load_corpus(CORPUS)
        chosen = select(packages, args.only, args.all)
    except CorpusError as exc:
        print(f"corpus: {exc}")
        return 2
    state_dir = Path(args.state_dir).resolve()
    cache = Path(os.environ.get("WF_CACHE_DIR") or state_dir / "cache")
    from wheelfoundry_local.session import EmbeddedAws

    started = time.monotonic()
    with EmbeddedAws(state_dir=state_dir) as aws:
        stack = aws.deploy(ROOT / "template.yaml", parameters={"BuildHeartbeatSeconds": "120"})
        runs: list[Callable[[], Outcome]] = []
        for package in chosen:
            if not args.cuda:
                say = speaker(package.name, lead=args.jobs > 1)
                runs.append(functools.partial(run_package, aws, stack, package, cache, state_dir, args.timeout, say))
            elif package.cuda_switch:  # without the switch refused (no device code), with it published
                for kind in ("cu130", "cu130-switch"):
                    runs.append(functools.partial(run_cuda, aws, stack, package, kind, cache, state_dir, args.timeout))
        with ThreadPoolExecutor(max_workers=1 if args.cuda else args.jobs) as pool:
            outcomes = list(pool.map(lambda run: run(), runs))  # in the corpus's order
        left = aws.instances()
    lines = table(outcomes)
    print("\n" + "\n".join(lines))
    print(f"instances still pending/running in the emulator: {len(left)}; {time.monotonic() - started:.0f}s in all")
    out = RESULTS / f"corpus-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    body = {"machine": machine, "seconds": round(time.monotonic() - started, 1), "instances_left": len(left)}
    out.write_text(json.dumps({**body, "packages": [o.to_dict() for o in outcomes]}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 1 if left or any(o.result != "passed" for o in outcomes) else 0


def select(packages: list[Package], only: list[str], everything: bool) -> list[Package]:
    names = {p.name for p in packages}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise CorpusError(f"--only {', '.join(unknown)}: not in {CORPUS.name} (it has {', '.join(sorted(names))})")
    if only:
        return [p for p in packages if p.name in only]
    return [p for p in packages if p.ci or everything]


if __name__ == "__main__":
    sys.exit(main())
