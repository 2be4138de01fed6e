"""``wheelfoundry catalog``: verify the catalog against upstream files, extract their facts, write its docs.

    wheelfoundry catalog verify --upstream DIR [--upstream DIR ...] [--release X.Y]
    wheelfoundry catalog extract --upstream DIR --release X.Y [--cite KIND=TEXT ...]
    wheelfoundry catalog docs [--check]

Exit codes: 0 no unexplained difference (docs: current), 1 an unexplained difference (docs: stale),
2 unusable input.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelfoundry.catalog.catalog import load_catalog

if TYPE_CHECKING:  # the verifier and its parsers load only when a catalog command runs (plan starts faster)
    from wheelfoundry_cli.upstream_facts import UpstreamFacts

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"


def _cites(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        kind, sep, text = pair.partition("=")
        if not sep:
            raise SystemExit(f"error: --cite wants KIND=TEXT, got {pair!r}")
        out[kind] = text
    return out


def _release_of(dirs: list[Path], given: str | None) -> str | None:
    if given:
        return given
    for folder in dirs:
        version = folder / "version.txt"
        if version.is_file():
            match = re.match(r"(\d+\.\d+)", version.read_text(encoding="utf-8"))
            if match:
                return match[1]
    return None


def gather(dirs: list[Path], release: str | None, cites: dict[str, str]) -> UpstreamFacts:
    from wheelfoundry_cli.catalog_verify import release_or_moving
    from wheelfoundry_cli.upstream_facts import FACTS_FILE, read_facts_toml, read_files

    """Facts from every folder: a facts TOML where a folder has one, else its upstream files."""
    catalog = load_catalog()
    minor = _release_of(dirs, release)
    merged: UpstreamFacts | None = None
    for folder in dirs:
        if not folder.is_dir():
            raise SystemExit(f"error: --upstream {folder}: not a directory")
        if (folder / FACTS_FILE).is_file():
            facts = read_facts_toml(folder / FACTS_FILE)
        else:
            rel = release_or_moving(catalog, minor or "")
            if rel is None:
                raise SystemExit(
                    f"error: name the release (--release X.Y) for {folder}; {minor!r} is not in the catalog"
                )
            facts = read_files(folder, rel, cites)
        if merged is None:
            merged = facts
        else:
            merged.merge(facts)
    if merged is None:
        raise SystemExit("error: give at least one --upstream DIR")
    return merged


def _verify(args: argparse.Namespace) -> int:
    from wheelfoundry_cli.catalog_verify import compare, report

    facts = gather([Path(d) for d in args.upstream], args.release, {})
    findings = compare(load_catalog(), facts)
    print(report(findings, facts.release))
    return 1 if any(f.status == "DIFFERS" for f in findings) else 0


def _extract(args: argparse.Namespace) -> int:
    from wheelfoundry_cli.upstream_facts import facts_toml

    print(facts_toml(gather([Path(d) for d in args.upstream], args.release, _cites(args.cite))), end="")
    return 0


def _docs(args: argparse.Namespace) -> int:
    from wheelfoundry_cli import catalog_docs

    path = Path(args.out)
    text = catalog_docs.render(load_catalog())
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            print(f"{path} is stale: run `wheelfoundry catalog docs`", file=sys.stderr)
            return 1
        print(f"{path} is current")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


def add_catalog_commands(sub: Any) -> None:
    cat = sub.add_parser("catalog", help="the compatibility catalog: verify against upstream, docs")
    cat_sub = cat.add_subparsers(dest="catalog_command", required=True)
    verify = cat_sub.add_parser("verify", help="compare the catalog and rendered builds with upstream files")
    verify.add_argument("--upstream", action="append", required=True, metavar="DIR", help="checkout or facts folder")
    verify.add_argument("--release", help="torch minor (X.Y); default: version.txt or the facts file")
    verify.set_defaults(func=_verify)
    extract = cat_sub.add_parser("extract", help="print the facts of upstream files as TOML (for fixtures)")
    extract.add_argument("--upstream", action="append", required=True, metavar="DIR")
    extract.add_argument("--release", help="torch minor (X.Y)")
    extract.add_argument("--cite", action="append", default=[], metavar="KIND=TEXT", help="provenance of a file kind")
    extract.set_defaults(func=_extract)
    docs = cat_sub.add_parser("docs", help="write docs/catalog.md from the catalog (--check: fail if stale)")
    docs.add_argument("--out", default=str(DOCS_PATH))
    docs.add_argument("--check", action="store_true")
    docs.set_defaults(func=_docs)
