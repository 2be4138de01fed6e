"""A stand-in for the SSM agent: runs each SendCommand's real document script on this host.

For every (command, instance) the document deployed from the template is read back from moto, each
`aws:runShellScript` step's `runCommand` is written to `_script.sh` (as the agent does) and run with
`bash` in its own process group, in `<state dir>/instances/<instance-id>/`. Parameters are exported
as `SSM_<Name>`; `{{ Name }}` is pasted into commands only for parameters that are not ENV_VAR.
The step's `timeoutSeconds` is enforced (-> TimedOut); a terminated instance or CancelCommand kills
the process group (-> Cancelled). The invocation's status and output are written back into moto,
and an `EC2 Command Invocation Status-change Notification` is delivered for InProgress and for the
final status, as AWS emits them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from . import ssm_ext, ssm_script
from ._moto import ACCOUNT_ID, Patches, ec2_backend, iso, utcnow
from .events import EventDelivery
from .ssm_script import CommandRun

Output = Callable[[str, str, str], None]  # (instance id, command id, line)
INSTANCE_LOOK_SECONDS = 1.0
# On AWS an instance's build and the control plane (Step Functions, Lambda, S3) never share a CPU.
# Here they share this host's cores: the emulated instances' and CodeBuild's commands run niced, so a
# burst of builds cannot starve the embedded AWS past the deadlines it enforces (heartbeats, Lambda
# timeouts) that on AWS no build could make it miss.
INSTANCE_NICE = ("nice", "-n", "10")


class SsmAgent:
    def __init__(
        self,
        region: str,
        state_dir: Path,
        environment: dict[str, str],
        events: EventDelivery,
        registration: ssm_ext.Registration,
        output: Output | None = None,
    ) -> None:
        self.region = region
        self.state_dir = state_dir
        self.environment = environment
        self.events = events
        self.registration = registration
        self.output = output
        self._runs: list[CommandRun] = []
        self._pids: dict[str, int] = {}  # instance id -> process group of its running command
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._patches = Patches()
        self._closing = False
        self.lookup_errors: list[str] = []  # instance look-ups that raised (none expected; tests read it)

    def install(self) -> None:
        ssm_ext.install(self._patches, self.registration, self.submit, self.cancel)

    def uninstall(self) -> None:
        self._patches.undo()

    def runs(self) -> list[CommandRun]:
        with self._lock:
            return list(self._runs)

    def submit(self, region: str, command: Any) -> None:
        for instance_id in command.instance_ids:
            log = self.state_dir / "instances" / instance_id / "logs" / f"{command.command_id}.log"
            run = CommandRun(command.command_id, instance_id, command.document_name, log)
            thread = threading.Thread(
                target=self._run,
                args=(region, command, run),
                daemon=True,
                name=f"wf-agent-{instance_id}-{command.command_id[:8]}",
            )
            with self._lock:
                self._runs.append(run)
                self._threads.append(thread)
            thread.start()

    def freeze(self, instance_id: str) -> bool:
        """Stop the instance's running command dead (SIGSTOP): a hung instance that sends nothing more."""
        with self._lock:
            pids = [pid for iid, pid in self._pids.items() if iid == instance_id]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGSTOP)
        return bool(pids)

    def cancel(self, region: str, command_id: str, instance_ids: list[str]) -> None:
        for run in self.runs():
            if run.command_id == command_id and run.instance_id in instance_ids:
                run.cancel = True

    def wait_idle(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Kill whatever still runs (the emulated instances go away); deliver no more events."""
        self._closing = True
        for run in self.runs():
            run.cancel = True
        self.wait_idle(15)
        with self._lock:
            self._threads.clear()
            self._runs.clear()
        self._closing = False

    # -- one invocation -------------------------------------------------------------------------
    def _run(self, region: str, command: Any, run: CommandRun) -> None:
        started = utcnow()
        self._report(region, command, run, "InProgress", started)
        try:
            document, declared = ssm_ext.document_parameters(region, command.document_name)
            status, stdout, stderr = self._execute(region, command, run, document.content_json, declared)
        except Exception as exc:  # a document the agent cannot run fails the invocation, as on AWS
            status, stdout, stderr = "Failed", "", f"{type(exc).__name__}: {exc}\n"
        ssm_script.upload_output(self.environment["AWS_ENDPOINT_URL"], command, run, stdout, stderr)
        self._report(region, command, run, status, started, stdout, stderr)

    def _execute(
        self, region: str, command: Any, run: CommandRun, content: dict[str, Any], declared: dict[str, Any]
    ) -> tuple[str, str, str]:
        params = ssm_script.params_of(declared, command.parameters or {})
        pasted = {k: v for k, v in params.items() if declared[k].get("interpolationType") != "ENV_VAR"}
        steps = [s for s in content.get("mainSteps") or [] if s.get("action") == "aws:runShellScript"]
        if not steps:
            return "Failed", "", "document has no aws:runShellScript step\n"
        root = self.state_dir / "instances" / run.instance_id
        run.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SSM_", "MOTO_"))}
        env.update(self.environment)
        env.update(ssm_script.instance_role(self.environment["AWS_ENDPOINT_URL"], region, run.instance_id))
        env.update({f"SSM_{name}": value for name, value in params.items()})
        env.update(
            {
                # Stages on this host; WF_LOCAL_CONTAINER=docker runs them in the Docker test bed's
                # builder image instead (tools/docker_testbed.py, tests/container/).
                "WF_CONTAINER": env.get("WF_LOCAL_CONTAINER") or "none",
                # One machine without a GPU plays every instance, the GPU test's too (wfbuild.gpu.gpu_runner).
                "WF_GPU_HOST": "emulated",
                # The Build document puts job work under ${WF_WORK_ROOT:-/var/lib/wheelfoundry}.
                "WF_WORK_ROOT": str(root / "work"),
                # One machine plays every instance: share build environments (torch installs) between them.
                "WF_CACHE_DIR": env.get("WF_CACHE_DIR") or str(self.state_dir / "cache"),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
                "TMPDIR": str(root / "tmp"),
            }
        )
        if env["WF_CONTAINER"] == "docker":  # the document's `systemctl start docker`: the test bed's engine
            env["PATH"] = f"{Path(__file__).parent / 'instance_bin'}{os.pathsep}{env['PATH']}"
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        out_all: list[str] = []
        err_all: list[str] = []
        status = "Success"
        with run.log_path.open("a", encoding="utf-8") as log:
            for index, step in enumerate(steps):
                inputs = step.get("inputs") or {}
                lines = inputs.get("runCommand") or []
                script = ssm_script.substitute("\n".join([lines] if isinstance(lines, str) else lines), pasted)
                timeout = float(ssm_script.substitute(str(inputs.get("timeoutSeconds", 3600)), params))
                step_dir = root / "orchestration" / run.command_id / str(step.get("name") or f"step{index}")
                cwd = root / str(ssm_script.substitute(inputs.get("workingDirectory") or "", params)).lstrip("/")
                for folder in (step_dir, cwd):
                    folder.mkdir(parents=True, exist_ok=True)
                (step_dir / "_script.sh").write_text(script + "\n", encoding="utf-8")
                status = self._spawn(region, run, step_dir / "_script.sh", cwd, env, timeout, log, out_all, err_all)
                if status != "Success":
                    break
        return status, "".join(out_all), "".join(err_all)

    def _spawn(
        self,
        region: str,
        run: CommandRun,
        script: Path,
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        log: IO[str],
        out_all: list[str],
        err_all: list[str],
    ) -> str:
        process = subprocess.Popen(
            [*INSTANCE_NICE, "bash", str(script)],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        with self._lock:
            self._pids[run.instance_id] = process.pid
        lock = threading.Lock()

        def pump(stream: IO[str], sink: list[str]) -> None:
            for line in stream:
                with lock:
                    sink.append(line)
                    log.write(line)
                    log.flush()
                if self.output is not None:
                    self.output(run.instance_id, run.command_id, line.rstrip("\n"))

        assert process.stdout is not None and process.stderr is not None
        pumps = [
            threading.Thread(target=pump, args=(s, k), daemon=True)
            for s, k in ((process.stdout, out_all), (process.stderr, err_all))
        ]
        for pump_thread in pumps:
            pump_thread.start()
        deadline = time.monotonic() + timeout
        verdict: str | None = None
        why = ""
        next_look = 0.0
        while process.poll() is None:
            now = time.monotonic()
            if now > deadline:
                verdict, why = "TimedOut", f"the step's timeoutSeconds ({timeout:g} s) passed"
            elif run.cancel:
                verdict, why = "Cancelled", "CancelCommand"
            elif now >= next_look:
                # An instance's state changes at the pace of API calls: a look a second keeps the
                # emulator's CPU for the runs (each look walks every reservation under the GIL).
                next_look = now + INSTANCE_LOOK_SECONDS
                gone = self._instance_gone(region, run.instance_id)
                if gone:
                    verdict, why = "Cancelled", f"instance {run.instance_id} is {gone}"
            if verdict is not None:
                self._kill(process, env["WF_WORK_ROOT"])
                break
            time.sleep(0.05)
        process.wait()
        with self._lock:
            self._pids.pop(run.instance_id, None)
        for pump_thread in pumps:
            pump_thread.join(5)
        run.exit_code = process.returncode
        if verdict is None:
            verdict = "Success" if process.returncode == 0 else "Failed"
        with lock:
            reason = f" ({why})" if why else ""
            log.write(f"[wheelfoundry_local agent] exit code {process.returncode}: {verdict}{reason}\n")
        return verdict

    @staticmethod
    def _kill(process: subprocess.Popen[str], work_root: str) -> None:
        """Everything the command started, as a dying instance would: its process group, and what left it."""
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(process.pid, signal.SIGKILL)
        kill_left_behind(work_root)

    def _instance_gone(self, region: str, instance_id: str) -> str | None:
        """Why the instance can no longer run a command (its state, or "not found"); None while it can.

        A lookup that raises is no answer, and the next look asks again: killing a build on it would
        be the emulator's fault, not the instance's."""
        try:
            instance = ec2_backend(region).get_instance_by_id(instance_id)
        except Exception as exc:
            self.lookup_errors.append(f"{instance_id}: {type(exc).__name__}: {exc}")
            return None
        if instance is None:
            return "not found"
        return None if instance.state in ("pending", "running") else str(instance.state)

    # -- reporting back ---------------------------------------------------------------------------
    def _report(
        self, region: str, command: Any, run: CommandRun, status: str, started: Any, stdout: str = "", stderr: str = ""
    ) -> None:
        run.status = status
        ssm_ext.record_status(command, run.instance_id, status, started, run.exit_code, stdout, stderr)
        if self._closing:
            return
        detail = {
            "command-id": run.command_id,
            "document-name": run.document_name,
            "instance-id": run.instance_id,
            "requested-date-time": iso(command.requested_date_time).replace("Z", ".000Z"),
            "status": status,
        }
        resources = [f"arn:aws:ec2:{region}:{ACCOUNT_ID}:instance/{run.instance_id}"]
        try:
            self.events.put("aws.ssm", "EC2 Command Invocation Status-change Notification", detail, resources)
        except Exception:  # EventBridge delivery is best effort; the invocation's status stands
            logging.getLogger(__name__).exception("delivering the SSM status event failed")


def kill_left_behind(work_root: str) -> list[int]:
    """Kill what a killed command left running outside its process group, as the instance's end would.

    sccache daemonizes its server (its own session), so killing the command's group leaves it running
    on this host, which plays every instance. Every process of the instance carries its WF_WORK_ROOT."""
    mark = f"\0WF_WORK_ROOT={work_root}\0".encode()
    killed: list[int] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark not in b"\0" + Path(f"/proc/{pid}/environ").read_bytes():
                continue
            os.kill(int(pid), signal.SIGKILL)
        except OSError:  # ProcessLookupError included
            continue  # gone, or not ours to read
        killed.append(int(pid))
    return killed
