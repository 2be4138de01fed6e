"""moto's server, in this process, on 127.0.0.1 and a free port.

Server mode (rather than `mock_aws`) because three kinds of clients must reach the same backends:
this process's boto3 clients, the ASL interpreter's own clients (which call
`localhost:$MOTO_PORT`), and the build scripts that the local SSM agent runs in subprocesses.
The backends stay in this process, so the rest of the package can also read them directly.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from typing import Any

from ._moto import DEFAULT_REGION
from .iam_enforce import IamEnforcer, enforcing_server

# Fake, but fixed: moto maps any unknown key to its default account 123456789012.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
# Variables that would send clients to a real account or a different profile.
_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SECURITY_TOKEN", "AWS_CA_BUNDLE")

MOTO_CONFIG: dict[str, Any] = {
    "stepfunctions": {"execute_state_machine": True},
    # Lambda code never runs in Docker here: lambdas.py replaces the runner.
    "lambda": {"use_docker": True},
}

_QUIET_LOGGERS = {"werkzeug": logging.ERROR, "moto.stepfunctions.parser": logging.CRITICAL}


class MotoServer:
    """Start/stop/reset a ThreadedMotoServer and point this process's environment at it."""

    def __init__(self, region: str = DEFAULT_REGION) -> None:
        self.region = region
        self._server: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._saved_config: dict[str, Any] | None = None
        self._saved_log_levels: dict[str, int] = {}
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def iam(self) -> IamEnforcer:
        """Every S3 request of an assumed-role session, with its decision."""
        if self._server is None:
            raise RuntimeError("moto server not started")
        enforcer: IamEnforcer = self._server.enforcer
        return enforcer

    @property
    def running(self) -> bool:
        return self._server is not None

    def environment(self) -> dict[str, str]:
        """What a client (in-process or a subprocess) needs to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            **FAKE_CREDENTIALS,
        }

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("moto server already started")
        # werkzeug logs every request at INFO: thousands of lines per state-machine run. The ASL
        # interpreter logs every failed state (caught or not) as an ERROR with a multi-kilobyte repr
        # of the state; the execution history has the same facts in a usable form.
        for name, level in _QUIET_LOGGERS.items():
            self._saved_log_levels[name] = logging.getLogger(name).level
            logging.getLogger(name).setLevel(level)

        server = enforcing_server("127.0.0.1", 0)  # S3 authorizes assumed-role sessions (iam_enforce.py)
        server.start()
        self.port = int(server.get_host_and_port()[1])
        self._server = server
        self._set_env({**self.environment(), "MOTO_PORT": str(self.port)})
        self._apply_config()

    def _set_env(self, values: dict[str, str]) -> None:
        for key in (*values, *_UNSET):
            self._saved_env.setdefault(key, os.environ.get(key))
        for key in _UNSET:
            os.environ.pop(key, None)
        os.environ.update(values)
        self._forget_boto3_session()

    @staticmethod
    def _forget_boto3_session() -> None:
        # boto3's default session caches credentials and region from when it was first used.
        import boto3

        boto3.DEFAULT_SESSION = None

    def _apply_config(self) -> None:
        from moto.core.config import default_user_config

        if self._saved_config is None:
            self._saved_config = {k: dict(v) for k, v in default_user_config.items()}  # type: ignore[call-overload]
        # In-process is equivalent to POST /moto-api/config: the server reads this same dict.
        for section, values in MOTO_CONFIG.items():
            default_user_config.setdefault(section, {}).update(values)  # type: ignore[misc]

    def reset(self) -> None:
        """Empty every moto backend (like POST /moto-api/reset) and re-apply the configuration."""
        self._post("/moto-api/reset")
        self._apply_config()

    def _post(self, path: str, body: bytes = b"") -> None:
        url = self.endpoint + path  # http://127.0.0.1:<port>/...: never another scheme or host
        request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._saved_config is not None:
            from moto.core.config import default_user_config

            default_user_config.update(self._saved_config)  # type: ignore[typeddict-item]
            self._saved_config = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        self._forget_boto3_session()
        for name, level in self._saved_log_levels.items():
            logging.getLogger(name).setLevel(level)
        self._saved_log_levels.clear()
