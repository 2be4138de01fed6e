"""argparse wiring of the user's commands (`wheelfoundry start|status|runs|logs|fetch|cancel|verify|rebuild|
publish|public-key|index list`)."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wheelfoundry_user import EXIT_FAILED, EXIT_INVALID, EXIT_OK, NotFound, UserError
from wheelfoundry_user.failures import readable
from wheelfoundry_user.farm import Farm, aws_problem, default_stack
from wheelfoundry_user.status import ENDED, render_runs, render_status, run_status, runs_list
from wheelfoundry_user.subscriptions import add_subscription_commands, status_section
from wheelfoundry_user.tables import table
from wheelfoundry_user.toolkits import add_toolkit_commands
from wheelfoundry_user.trust import add_trust_flags
from wheelfoundry_user.wheels import Expect, channels, download, indexed, run_wheels


def _farm(args: argparse.Namespace) -> Farm:
    return Farm(args.stack, endpoint_url=args.endpoint_url, region=args.region)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def _start(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError
    from wheelfoundry_cli.request_flags import load_source

    from wheelfoundry.catalog.catalog import load_catalog
    from wheelfoundry.config import load_config
    from wheelfoundry.planning.planning import plan_request
    from wheelfoundry.request.request import parse_request

    raw = load_source(args.request)  # RequestInvalid: exit 2, every problem printed (wheelfoundry_cli.main)
    catalog, config = load_catalog(), load_config()
    plan = plan_request(parse_request(raw, catalog, config), catalog, config)
    farm = _farm(args)
    name = args.name or f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    try:
        started = farm.client("stepfunctions").start_execution(
            stateMachineArn=farm.state_machine_arn, name=name, input=json.dumps(raw)
        )
    except (ClientError, BotoCoreError) as exc:
        raise aws_problem(exc) from None
    summary = plan.summary()
    data = {"run": name, "execution_arn": started["executionArn"], **summary}
    # The stack checks what this machine cannot (where its roles may read sources, what its bundle can
    # build): wait for its Validate step, so a refused request exits 2 here, not in a later `status`.
    verdict = None if args.no_wait else farm.validated(started["executionArn"], args.wait)
    if verdict is not None and verdict.get("error") in ("RequestInvalid", "GuardrailExceeded"):
        message = readable(verdict.get("cause") or "")
        if args.json:
            refused = {**data, "status": verdict["status"], "error": verdict["error"], "message": message}
            print(json.dumps(refused, indent=2))
        print(f"{name}: the stack's Validate refused the request ({verdict['error']}):\n{message}", file=sys.stderr)
        return EXIT_INVALID
    data["validated"] = verdict is not None
    text = (
        f"{name}\nstarted: {len(plan.jobs)} job(s), estimated {summary.get('estimated_usd')} USD; "
        f"`wheelfoundry status {name} --watch` follows it"
    )
    _emit(args, data, text)
    return EXIT_OK


def _outcome(status: str) -> int:
    return EXIT_OK if status in ("RUNNING", "SUCCEEDED") else EXIT_FAILED


def _status(args: argparse.Namespace) -> int:
    farm = _farm(args)
    run = args.run
    if run is None:
        recent = farm.executions(1)
        if not recent:
            raise NotFound(f"no runs yet in stack {farm.stack!r}")
        run = recent[0]["name"]
    while True:
        status = run_status(farm, run)
        if args.json:
            print(json.dumps(status, indent=2, default=str), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[H\033[J", end="")
            print(render_status(status) + ("\n" if args.watch else ""), flush=True)
        if not args.watch or status["status"] in ENDED:
            if not args.json:  # the packages the stack follows, and the watcher's last tick
                print("\n".join(status_section(farm)))
            return _outcome(status["status"])
        time.sleep(args.interval)


def _runs(args: argparse.Namespace) -> int:
    runs = runs_list(_farm(args), args.limit)
    _emit(args, runs, render_runs(runs))
    return EXIT_OK


def _logs(args: argparse.Namespace) -> int:
    from wheelfoundry_user.logs import show_log

    return show_log(_farm(args), args.run, args.job, args.follow, args.interval, sys.stdout.write)


def _fetch(args: argparse.Namespace) -> int:
    from wheelfoundry_user import public, verify

    target = args.target
    store: Any
    if public.is_url(target):  # a public channel: HTTPS, no AWS account, the key pinned by fingerprint
        store = public.PublicIndex.parse(target)
        wheels = indexed(store, store.need_channel(target), args.package)
        pins = None if args.no_verify else (args.key_fingerprint, args.public_key)
        keys = None if pins is None else public.keyring_for(store, *pins, target)
    else:
        store = _farm(args)
        is_channel = target in channels(store) and not target.startswith("arn:")
        wheels = indexed(store, target, args.package) if is_channel else run_wheels(store, target, args.package)
        keys = None if args.no_verify else verify.keyring(store, args.public_key or [])
    if args.no_verify:
        print("warning: --no-verify: signatures NOT checked, only the sha256 the index lists", file=sys.stderr)
    expect = Expect(keys, args.source, args.builder)
    results = [download(store, w, Path(args.dest), expect) for w in wheels]
    fetched, refused = [r for r in results if "refused" not in r], [r for r in results if "refused" in r]
    check = "signed" if keys else "index"
    rows = [(f["filename"], f"{f['size'] / 1024:.1f} KiB", f["sha256"][:16] + "...", check) for f in fetched]
    text = (table(("WHEEL", "SIZE", "SHA256", "CHECKED"), rows) + f"\n-> {args.dest}") if fetched else "nothing fetched"
    _emit(args, results, text)
    for r in refused:
        print(f"REFUSED {r['filename']}: {r['refused']} (not written to {args.dest})", file=sys.stderr)
    return EXIT_FAILED if refused else EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    farm = _farm(args)
    described = farm.describe(args.run)
    if described["status"] == "RUNNING":
        try:
            farm.client("stepfunctions").stop_execution(
                executionArn=described["executionArn"], error="Cancelled", cause="wheelfoundry cancel"
            )
        except (ClientError, BotoCoreError) as exc:
            raise aws_problem(exc) from None
    deadline = time.monotonic() + args.wait
    while True:
        instances = farm.instances(described["executionArn"])
        alive = [i for i in instances if i["State"]["Name"] in ("pending", "running", "stopping", "stopped")]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(1)
    status = farm.describe(described["name"])["status"]
    data = {
        "run": described["name"],
        "status": status,
        "instances": [{"id": i["InstanceId"], "state": i["State"]["Name"]} for i in instances],
        "left_running": [i["InstanceId"] for i in alive],
    }
    lines = [f"run {described['name']}: {status}"]
    lines += [f"  instance {i['id']}: {i['state']}" for i in data["instances"]] or ["  no instance was launched"]
    if alive:
        lines.append(f"still alive after {args.wait:.0f}s: {', '.join(data['left_running'])} (the reapers retry)")
    _emit(args, data, "\n".join(lines))
    return EXIT_FAILED if alive else EXIT_OK


def _index_list(args: argparse.Namespace) -> int:
    farm = _farm(args)
    if args.channel is None:
        names = channels(farm)
        _emit(args, names, "\n".join(names) if names else "no channel published yet")
        return EXIT_OK
    wheels = indexed(farm, args.channel)
    data = [{"project": w.project, "filename": w.filename, "sha256": w.sha256} for w in wheels]
    _emit(args, data, table(("PROJECT", "WHEEL", "SHA256"), [(w.project, w.filename, w.sha256) for w in wheels]))
    return EXIT_OK


def _rebuild(args: argparse.Namespace) -> int:
    from wheelfoundry_user.rebuild import rebuild

    def tick(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr, flush=True)

    data = rebuild(_farm(args), args.run, args.wait, tick)
    verdict = "byte-identical" if data["same"] else "NOT byte-identical"
    lines = [*data["lines"], f"{data['rebuild']}: {len(data['wheels'])} wheel(s) {verdict} to run {data['run']}'s"]
    _emit(args, {k: v for k, v in data.items() if k != "lines"}, "\n".join(lines))
    return EXIT_OK if data["same"] else EXIT_FAILED


def _verify(args: argparse.Namespace) -> int:
    from wheelfoundry_user import public, verify

    if not args.wheels and not args.channel and not args.index_url:
        raise UserError("verify: name a WHEEL (file or URL), --channel C or --index-url URL")
    site_url = args.index_url or next((w for w in args.wheels if public.is_url(w)), None)
    if args.key_fingerprint or args.index_url:  # a public site's wheels against the key the user pinned
        assert site_url is not None
        keys = public.keyring_for(public.PublicIndex.parse(site_url), args.key_fingerprint, args.public_key, site_url)
    else:
        keys = verify.keyring(None if args.public_key and not args.channel else _farm(args), args.public_key or [])
    items = [t for spec in args.wheels for t in verify.targets(spec, args.provenance)]
    if args.channel:
        items += verify.channel_targets(_farm(args), args.channel)
    if args.index_url:
        site = public.PublicIndex.parse(args.index_url)
        items += verify.channel_targets(site, site.need_channel(args.index_url))
    request = Path(args.request) if args.request else None
    verdicts = verify.verify_all(items, keys, args.source, request, args.builder)
    data = [{"wheel": v.filename, "ok": v.ok, "reason": v.reason} for v in verdicts]
    _emit(args, data, "\n".join(v.line() for v in verdicts))
    return EXIT_OK if verdicts and all(v.ok for v in verdicts) else EXIT_FAILED


def _publish(args: argparse.Namespace) -> int:
    from wheelfoundry.request.publish_targets import parse_to
    from wheelfoundry_user import verify
    from wheelfoundry_user.publish import publish_wheels

    target = parse_to(args.to, args.max_file_mb, args.index_url)  # RequestInvalid: exit 2, field and value named
    farm = _farm(args)
    keys = verify.keyring(farm, args.public_key or [])  # wheelfoundry verify's trust: the stack's key or --public-key
    outcomes = publish_wheels(
        farm, args.target, args.package, target, args.token_secret, keys, args.source, args.builder
    )
    data = {
        "target": target.name,
        "wheels": [{"wheel": o.filename, "action": o.action, "reason": o.reason} for o in outcomes],
    }
    counts = {a: sum(o.action == a for o in outcomes) for a in ("uploaded", "skipped", "refused")}
    summary = f"{target.name}: " + ", ".join(f"{n} {a}" for a, n in counts.items())
    _emit(args, data, "\n".join([*(o.line() for o in outcomes), summary]))
    return EXIT_FAILED if counts["refused"] or not outcomes else EXIT_OK


def _public_key(args: argparse.Namespace) -> int:
    from wheelfoundry_user import verify
    from wheelfoundry_user.trust import TrustedKey

    pem = verify.public_key_pem(_farm(args))
    Path(args.out).write_bytes(pem)
    fingerprint = TrustedKey(pem, args.out).fingerprint
    print(
        f"{args.out}: the provenance public key of stack {args.stack} (`wheelfoundry verify --public-key {args.out}`)\n"
        f"fingerprint (sha256): {fingerprint}\n"
        f"users of a public channel pin it: wheelfoundry fetch|verify ... --key-fingerprint {fingerprint}"
    )
    return EXIT_OK


def _guard(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        return code

    return run


def _common(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    parser.add_argument("--stack", default=default_stack(), help="the stack's name (default: %(default)s)")
    parser.add_argument("--endpoint-url", help="e.g. `wheelfoundry local up`'s (or $WHEELFOUNDRY_ENDPOINT_URL)")
    parser.add_argument("--region", help="default: boto3's (AWS_REGION, the profile)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON")


def add_user_commands(sub: Any, index_sub: Any) -> None:
    """Register the commands on `wheelfoundry`'s subparsers (and `list` on its `index` group)."""
    start = sub.add_parser("start", help="validate a request here, then start a run on the stack; prints its name")
    start.add_argument("request", help="a request JSON file or a preset name")
    start.add_argument("--name", help="the run's name (default: time + random)")
    start.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the stack's Validate step")
    start.add_argument("--no-wait", action="store_true", help="return once started, before the stack validates")
    _common(start)
    start.set_defaults(func=_guard(_start))
    status = sub.add_parser("status", help="a run's jobs: executor, state, stage, elapsed, estimated vs actual cost")
    status.add_argument("run", nargs="?", help="run name or execution ARN (default: the newest run)")
    status.add_argument("--watch", action="store_true", help="refresh until the run ends")
    status.add_argument("--interval", type=float, default=5.0)
    _common(status)
    status.set_defaults(func=_guard(_status))
    runs = sub.add_parser("runs", help="recent runs with their outcome")
    runs.add_argument("--limit", type=int, default=20)
    _common(runs)
    runs.set_defaults(func=_guard(_runs))
    logs = sub.add_parser("logs", help="a job's build log, also while it builds")
    logs.add_argument("run")
    logs.add_argument("job")
    logs.add_argument("--follow", action="store_true", help="print new lines as they come until the job ends")
    logs.add_argument("--interval", type=float, default=5.0)
    _common(logs, json_flag=False)
    logs.set_defaults(func=_guard(_logs))
    fetch = sub.add_parser(
        "fetch", help="download a run's or a channel's wheels, each only if its signed provenance verifies"
    )
    fetch.add_argument("target", metavar="RUN|CHANNEL|URL", help="a run, a channel, or a public channel's index URL")
    fetch.add_argument("package", nargs="?")
    fetch.add_argument("--dest", required=True)
    add_trust_flags(fetch)
    _common(fetch)
    fetch.set_defaults(func=_guard(_fetch))
    cancel = sub.add_parser("cancel", help="stop a run; then show that its instances were terminated")
    cancel.add_argument("run")
    cancel.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the reaper")
    _common(cancel)
    cancel.set_defaults(func=_guard(_cancel))
    verify = sub.add_parser("verify", help="check wheels against their signed provenance: signature, sha256, source")
    verify.add_argument("wheels", nargs="*", metavar="WHEEL|URL", help="wheel files or URLs (provenance beside each)")
    verify.add_argument("--channel", help="every wheel of this channel, from the stack's bucket")
    verify.add_argument("--index-url", help="every wheel of a public channel: https://HOST/simple/CHANNEL/")
    verify.add_argument("--provenance", help="the envelope, when not beside the wheel as WHEEL.provenance.json")
    add_trust_flags(verify, no_verify=False)
    verify.add_argument("--request", help="fail unless the statement's request equals this JSON file")
    _common(verify)
    verify.set_defaults(func=_guard(_verify))
    again = sub.add_parser(
        "rebuild", help="build a run's request again into a scratch channel; compare sha256 per wheel"
    )
    again.add_argument("run")
    again.add_argument("--wait", type=float, default=7200.0, help="seconds to wait for the rebuild to end")
    _common(again)
    again.set_defaults(func=_guard(_rebuild))
    pub = sub.add_parser("publish", help="upload a run's or channel's signed wheels to PyPI, CodeArtifact or an index")
    pub.add_argument("target", metavar="RUN|CHANNEL")
    pub.add_argument("package", nargs="?")
    pub.add_argument(
        "--to", required=True, help="pypi, testpypi, codeartifact:DOMAIN/REPOSITORY[@OWNER] or an upload URL"
    )
    pub.add_argument("--token-secret", help="Secrets Manager secret ARN holding the token (else $TWINE_PASSWORD)")
    pub.add_argument("--max-file-mb", type=float, help="the target's per-file limit when raised (PyPI: 100)")
    pub.add_argument("--index-url", help="the upload URL's simple index (default: URL/simple/)")
    add_trust_flags(pub, no_verify=False)  # no --no-verify: only wheels with valid provenance go out
    _common(pub)
    pub.set_defaults(func=_guard(_publish))
    public_key = sub.add_parser("public-key", help="save the stack's provenance public key (PEM) for offline verify")
    public_key.add_argument("--out", default="wheelfoundry-provenance.pem")
    _common(public_key, json_flag=False)
    public_key.set_defaults(func=_guard(_public_key))
    add_subscription_commands(sub, _common, _guard)
    add_toolkit_commands(sub, _common, _guard)
    listing = index_sub.add_parser("list", help="the index's channels, or a channel's wheels")
    listing.add_argument("channel", nargs="?")
    _common(listing)
    listing.set_defaults(func=_guard(_index_list))
