"""Issue 31: uploads to a real index server (pypiserver on 127.0.0.1) with twine, then `pip install` from it.

The rules of wheelfoundry.publishing.uploads against the real thing: a signed wheel goes up and installs into a fresh
venv; the same sha256 again is skipped; other bytes under the same name are refused and the index keeps
the first; a file over the limit and an unsigned or altered one are refused before any upload; a wrong
token is the index's refusal, with twine's cause. `wheelfoundry verify` passes on the wheel downloaded
back from the index, given the provenance from the stack.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.indexserver import envelope_for, local_signer, new_key, pem, pypiserver, tiny_wheel
from wheelfoundry.errors import PublishFailed
from wheelfoundry.publishing.uploads import Candidate, Credentials, Outcome, publish
from wheelfoundry.request.publish_targets import PublishTarget, parse_to
from wheelfoundry_user import trust, verify

TOKEN = Credentials("__token__", "pypi-test-token")
CODE = "def add(a, b):\n    return a + b\n"
KEY = new_key()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pypiserver(tmp_path_factory.mktemp("index"), {TOKEN.username: TOKEN.password, "aws": "ca-token"}) as url:
        yield url


def candidates(wheels: list[Path], envelopes: dict[str, bytes | None]) -> list[Candidate]:
    """As `wheelfoundry publish` makes them: wheelfoundry verify's check with the stack's public key."""
    key = trust.Keyring((trust.TrustedKey(pem(KEY), "the stack's key"),))
    out = []
    for wheel in wheels:
        body = wheel.read_bytes()
        (verdict,) = verify.verify_all([(wheel.name, body, envelopes.get(wheel.name))], key, None, None)
        out.append(
            Candidate(wheel.name, hashlib.sha256(body).hexdigest(), len(body), None if verdict.ok else verdict.reason)
        )
    return out


def send(
    index: str, wheels: list[Path], target: PublishTarget | None = None, auth: Credentials = TOKEN, signed: bool = True
) -> list[Outcome]:
    target = target or parse_to(f"{index}/")
    envelopes = {w.name: envelope_for(w, local_signer(KEY)) if signed else None for w in wheels}
    by_name = {w.name: w for w in wheels}
    return publish(candidates(wheels, envelopes), by_name.__getitem__, target, f"{index}/", f"{index}/simple/", auth)


def served(index: str, name: str) -> bytes | None:
    """The file's bytes as the index serves them; None when it has no such file."""
    try:
        with urllib.request.urlopen(f"{index}/packages/{name}", timeout=10) as response:
            return bytes(response.read())
    except OSError:
        return None


@pytest.mark.heavy  # a real index server and a fresh venv: `make test-heavy` (.ci/heavy), keeping `make test` inside 10 min
@pytest.mark.slow
def test_signed_wheel_uploads_installs_in_a_fresh_venv_and_verifies_back(index: str, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path / "dist", "wf-pub-demo", "1.0", CODE)
    envelope = envelope_for(wheel, local_signer(KEY))
    (outcome,) = send(index, [wheel])
    assert (outcome.action, outcome.filename) == ("uploaded", wheel.name), outcome
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--isolated", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--index-url", f"{index}/simple/", "wf-pub-demo"], check=True)
    smoke = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import wf_pub_demo as m; print(m.add(2, 3), m.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert smoke.startswith("5 ") and str(venv) in smoke  # the installed copy, not a source tree
    # The bytes downloaded back from the index still verify against the provenance from the stack.
    back = tmp_path / "back"
    subprocess.run(
        [*pip, "download", "--no-deps", "--index-url", f"{index}/simple/", "-d", str(back), "wf-pub-demo"], check=True
    )
    (downloaded,) = back.glob("*.whl")
    (tmp_path / "stack.provenance.json").write_bytes(envelope)
    (tmp_path / "key.pem").write_bytes(pem(KEY))
    argv = [sys.executable, "-m", "wheelfoundry_cli.main", "verify", str(downloaded)]
    argv += ["--provenance", str(tmp_path / "stack.provenance.json"), "--public-key", str(tmp_path / "key.pem")]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"OK   {wheel.name}: signed provenance verified"), (
        done.stdout + done.stderr
    )


def test_same_bytes_are_skipped_other_bytes_refused_and_the_index_keeps_the_first(index: str, tmp_path: Path) -> None:
    first = tiny_wheel(tmp_path / "a", "wf-pub-dup", "1.0", CODE)
    assert [o.action for o in send(index, [first])] == ["uploaded"]
    (again,) = send(index, [first])
    assert again.action == "skipped" and "with the same sha256" in again.reason
    other = tiny_wheel(tmp_path / "b", "wf-pub-dup", "1.0", CODE + "# rebuilt differently\n")
    assert other.name == first.name and other.read_bytes() != first.read_bytes()
    (conflict,) = send(index, [other])
    assert conflict.action == "refused"
    assert hashlib.sha256(first.read_bytes()).hexdigest() in conflict.reason
    assert hashlib.sha256(other.read_bytes()).hexdigest() in conflict.reason
    assert "raise the version" in conflict.reason
    assert served(index, first.name) == first.read_bytes()


def test_a_file_over_the_limit_is_refused_naming_the_limit_and_the_options(index: str, tmp_path: Path) -> None:
    big = tiny_wheel(tmp_path, "wf-pub-big", "1.0", CODE + "# " + "x" * 3000 + "\n")
    small = tiny_wheel(tmp_path, "wf-pub-small", "1.0", CODE)
    target = parse_to(f"{index}/", max_file_mb=0.002)  # 2000 bytes: the big one is over, the small one fits
    outcomes = {o.filename: o for o in send(index, [big, small], target)}
    refused = outcomes[big.name]
    assert refused.action == "refused" and "per-file limit of 0.002 MB" in refused.reason
    for option in ("public channel", "fewer archs in arch_list", "limit increase"):
        assert option in refused.reason
    assert outcomes[small.name].action == "uploaded"
    assert served(index, big.name) is None and served(index, small.name) == small.read_bytes()
    # PyPI's own default, without a raised limit
    assert PublishTarget("pypi").limit_mb == 100


def test_unsigned_and_altered_wheels_are_refused_before_any_upload(index: str, tmp_path: Path) -> None:
    unsigned = tiny_wheel(tmp_path / "u", "wf-pub-unsigned", "1.0", CODE)
    (outcome,) = send(index, [unsigned], signed=False)
    assert outcome.action == "refused" and "no valid signed provenance: no provenance" in outcome.reason
    altered = tiny_wheel(tmp_path / "t", "wf-pub-altered", "1.0", CODE)
    envelope = envelope_for(altered, local_signer(KEY))
    altered.write_bytes(altered.read_bytes() + b"\0")  # the bytes changed after signing
    (outcome,) = publish(
        candidates([altered], {altered.name: envelope}),
        lambda n: altered,
        parse_to(f"{index}/"),
        f"{index}/",
        f"{index}/simple/",
        TOKEN,
    )
    assert outcome.action == "refused" and "is not the statement's subject" in outcome.reason
    other_key = new_key()
    forged = tiny_wheel(tmp_path / "f", "wf-pub-forged", "1.0", CODE)
    outcomes = publish(
        candidates([forged], {forged.name: envelope_for(forged, local_signer(other_key))}),
        lambda n: forged,
        parse_to(f"{index}/"),
        f"{index}/",
        f"{index}/simple/",
        TOKEN,
    )
    assert outcomes[0].action == "refused" and "signature does not verify" in outcomes[0].reason
    for wheel in (unsigned, altered, forged):
        assert served(index, wheel.name) is None


def test_a_wrong_token_is_the_index_refusal_with_twine_cause(index: str, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path, "wf-pub-token", "1.0", CODE)
    with pytest.raises(PublishFailed, match=r"twine upload to http://127\.0\.0\.1:\d+/ failed .*(403|401)"):
        send(index, [wheel], auth=Credentials("__token__", "wrong"))
    assert served(index, wheel.name) is None
