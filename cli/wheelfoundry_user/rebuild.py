"""`wheelfoundry rebuild RUN`: the same request again, into a scratch channel, and each wheel's sha256
compared with the run's.

The request is the run's own (``runs/<run>/request.json``, as Validate stored it) with one change: the
channel becomes ``rebuild-<run>-<salt>``, so the rebuilt wheels land in a channel of their own and never
replace a published one. Same source, same builder, same request: an extension's wheels should come
back byte-identical (docs/provenance.md says what makes them so); where a wheel differs, the report
names the archive members that differ (content sha256 and size, or only the zip entry's time and
mode), which is what diffoscope would show first.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import secrets
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from wheelfoundry_user import NotFound, UserError
from wheelfoundry_user.farm import Farm
from wheelfoundry_user.status import ENDED
from wheelfoundry_user.wheels import IndexedWheel, run_wheels


@dataclass(frozen=True)
class Compared:
    filename: str
    original: str | None  # sha256, None: the original run did not publish it
    rebuilt: str | None
    members: list[str] = field(default_factory=list)  # what differs inside, one line each

    @property
    def same(self) -> bool:
        return self.original is not None and self.original == self.rebuilt

    def line(self) -> str:
        if self.same:
            return f"SAME {self.filename}: sha256:{self.original}"
        if self.original is None or self.rebuilt is None:
            return f"DIFF {self.filename}: only in {'the rebuild' if self.original is None else 'the original run'}"
        return f"DIFF {self.filename}: sha256:{self.original[:16]}... rebuilt as sha256:{self.rebuilt[:16]}..."


def scratch_channel(run: str, salt: str) -> str:
    """``rebuild-<run>-<salt>`` as a valid channel name (lower case, digits and '-', at most 63
    characters): each rebuild its own channel, so two rebuilds never meet in one."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run.lower()).strip("-")
    return f"rebuild-{slug[: 63 - len('rebuild--') - len(salt)].rstrip('-')}-{salt}"


def rebuild_request(farm: Farm, run: str, salt: str) -> dict[str, Any]:
    request = farm.get_json(f"runs/{run}/request.json")
    if not isinstance(request, dict):
        raise NotFound(f"run {run} has no runs/{run}/request.json: nothing to rebuild from")
    return {**request, "channel": scratch_channel(run, salt)}


def member_differences(original: bytes, rebuilt: bytes) -> list[str]:
    """The archive members that differ: content (sha256, size), presence, or only the zip metadata."""
    with zipfile.ZipFile(io.BytesIO(original)) as a, zipfile.ZipFile(io.BytesIO(rebuilt)) as b:
        left, right = {i.filename: i for i in a.infolist()}, {i.filename: i for i in b.infolist()}
        lines = [f"  only in the original: {n}" for n in sorted(left.keys() - right.keys())]
        lines += [f"  only in the rebuild: {n}" for n in sorted(right.keys() - left.keys())]
        for name in sorted(left.keys() & right.keys()):
            x, y = a.read(name), b.read(name)
            if x != y:
                lines.append(
                    f"  {name}: content differs ({len(x)} bytes sha256:{hashlib.sha256(x).hexdigest()[:12]} vs "
                    f"{len(y)} bytes sha256:{hashlib.sha256(y).hexdigest()[:12]})"
                )
            elif (left[name].date_time, left[name].external_attr) != (right[name].date_time, right[name].external_attr):
                lines.append(f"  {name}: same content, zip entry differs (time {left[name].date_time} vs "
                             f"{right[name].date_time}, mode {left[name].external_attr >> 16:o} vs "
                             f"{right[name].external_attr >> 16:o})")  # fmt: skip
        if not lines and [i.filename for i in a.infolist()] != [i.filename for i in b.infolist()]:
            lines.append("  same members and contents, in another order")
    return lines or ["  same members and contents; the archives differ in their zip framing"]


def compare(farm: Farm, original: list[IndexedWheel], rebuilt: list[IndexedWheel]) -> list[Compared]:
    before, after = {w.filename: w for w in original}, {w.filename: w for w in rebuilt}
    found = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        item = Compared(name, a.sha256 if a else None, b.sha256 if b else None)
        if a and b and not item.same:
            body_a, body_b = farm.get(a.key), farm.get(b.key)
            if body_a is not None and body_b is not None:
                item = Compared(name, a.sha256, b.sha256, member_differences(body_a, body_b))
        found.append(item)
    return found


def wait_ended(farm: Farm, run: str, timeout: float, tick: Callable[[str], None]) -> dict[str, Any]:
    """Poll the rebuild's execution until it ends (in the user's shell, never in a Lambda)."""
    deadline, last = time.monotonic() + timeout, ""
    while True:
        described = farm.describe(run)
        if described["status"] in ENDED:
            return described
        if time.monotonic() > deadline:
            raise UserError(f"rebuild {run} still running after {timeout:.0f}s: `wheelfoundry status {run}` follows it")
        if described["status"] != last:
            tick(f"{run}: {described['status'].lower()}")
            last = described["status"]
        time.sleep(1)


def rebuild(farm: Farm, run: str, timeout: float, tick: Callable[[str], None]) -> dict[str, Any]:
    """Start the rebuild, wait for it, compare; ``{"run", "rebuild", "channel", "wheels": [...], "same"}``."""
    original = farm.describe(run)
    name = original["name"]
    salt = secrets.token_hex(3)
    request = rebuild_request(farm, name, salt)
    again = f"{name[:60]}-rebuild-{salt}"
    farm.client("stepfunctions").start_execution(
        stateMachineArn=farm.state_machine_arn, name=again, input=json.dumps(request)
    )
    tick(f"{again}: started ({request['channel']})")
    ended = wait_ended(farm, again, timeout, tick)
    if ended["status"] != "SUCCEEDED":
        cause = f"{ended.get('error') or ended['status']}: {str(ended.get('cause') or '')[:300]}"
        raise UserError(f"rebuild {again} ended {ended['status']} ({cause}); `wheelfoundry status {again}` shows why")
    wheels = compare(farm, run_wheels(farm, name, None), run_wheels(farm, again, None))
    return {
        "run": name,
        "rebuild": again,
        "channel": request["channel"],
        "wheels": [asdict(w) for w in wheels],
        "same": bool(wheels) and all(w.same for w in wheels),  # nothing compared proves nothing
        "lines": [line for w in wheels for line in (w.line(), *w.members)],
    }
