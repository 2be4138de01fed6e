"""A job's compiler-cache numbers: sccache's JSON stats summarised, several servers' added up, a
container stage's stats read back as the build's file, and the one log line that says what the cache did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wfbuild import hostfiles


def describe(stats: Mapping[str, Any]) -> str:
    """One log line: what the cache did for this job (a low hit rate on a rebuild: the package defeats it)."""
    if stats.get("status") != "used":
        return f"compiler cache: not used ({stats.get('detail', '')})"
    rate = "-" if stats.get("hit_rate") is None else f"{stats['hit_rate']:.0%}"
    langs = ", ".join(f"{k} {v['hits']}/{v['hits'] + v['misses']}" for k, v in stats.get("per_language", {}).items())
    uncached = sum(stats.get("not_cached", {}).values())
    return (
        f"compiler cache: {stats['compile_requests']} requests, {stats['hits']} hits, {stats['misses']} misses"
        f" (hit rate {rate}; {langs or 'no compiles'}; {uncached} not cacheable)"
    )


def summary(raw: Mapping[str, Any]) -> dict[str, Any]:
    """sccache's JSON stats -> what the manifest keeps: requests, hits, misses and errors per language."""
    stats = raw.get("stats", {})

    def counts(name: str) -> dict[str, int]:
        return {k: int(v) for k, v in (stats.get(name) or {}).get("counts", {}).items()}

    hits, misses = counts("cache_hits"), counts("cache_misses")
    total_hits, total_misses = sum(hits.values()), sum(misses.values())
    looked_up = total_hits + total_misses
    return {
        "status": "used",
        "location": raw.get("cache_location", ""),
        "compile_requests": int(stats.get("compile_requests", 0)),
        "hits": total_hits,
        "misses": total_misses,
        "hit_rate": round(total_hits / looked_up, 3) if looked_up else None,
        "per_language": {
            lang: {"hits": hits.get(lang, 0), "misses": misses.get(lang, 0)} for lang in sorted({*hits, *misses})
        },
        "errors": sum(counts("cache_errors").values()),
        # objects stored: what a relaunch of an interrupted job finds (its hits) instead of compiling again
        "writes": int(stats.get("cache_writes", 0)),
        "not_cached": {k: int(v) for k, v in (stats.get("not_cached") or {}).items()},
    }


def combine(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several servers' summaries (container mode: one per build stage) as one job's."""
    used = [p for p in parts if p.get("status") == "used"]
    if not used:
        return dict(parts[0]) if parts else {"status": "unavailable", "detail": "no compile stage ran"}
    langs: dict[str, dict[str, int]] = {}
    for part in used:
        for lang, count in part.get("per_language", {}).items():
            mine = langs.setdefault(lang, {"hits": 0, "misses": 0})
            mine["hits"] += count["hits"]
            mine["misses"] += count["misses"]
    hits, misses = sum(p["hits"] for p in used), sum(p["misses"] for p in used)
    not_cached: dict[str, int] = {}
    for part in used:
        for reason, n in part.get("not_cached", {}).items():
            not_cached[reason] = not_cached.get(reason, 0) + n
    return {
        "status": "used",
        "location": used[0].get("location", ""),
        "compile_requests": sum(p["compile_requests"] for p in used),
        "hits": hits,
        "misses": misses,
        "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
        "per_language": dict(sorted(langs.items())),
        "errors": sum(p.get("errors", 0) for p in used),
        "writes": sum(int(p.get("writes", 0)) for p in used),
        "not_cached": not_cached,
        "servers": len(parts),
        # CPU of the compilers the servers ran (their children, not the stages'): part of the compile work
        "server_cpu_seconds": round(sum(float(p.get("server_cpu_seconds") or 0.0) for p in used), 2),
    }


def read_stats(work: Path, path: Path, note: Callable[[str], None]) -> dict[str, Any] | None:
    """A stage's stats as run_stage wrote them, or None. Written inside the build's container, so read
    as the build's file (hostfiles: no link, a small regular file in the job's folder) and reduced to
    its counts: numbers to show, never trusted further (a build can only misreport its own hit rate)."""
    try:
        raw = json.loads(hostfiles.read_inside(work, path, 1 << 20))
        if raw.get("status") != "used":
            return {"status": "unavailable", "detail": str(raw.get("detail", ""))[:300]}
        langs = raw.get("per_language") or {}
        return combine([
            {
                "status": "used",
                "location": str(raw.get("location", ""))[:300],
                "compile_requests": int(raw["compile_requests"]),
                "hits": int(raw["hits"]),
                "misses": int(raw["misses"]),
                "errors": int(raw.get("errors", 0)),
                "writes": int(raw.get("writes", 0)),
                "per_language": {str(k)[:40]: {"hits": int(v["hits"]), "misses": int(v["misses"])}
                                 for k, v in list(langs.items())[:20]},
                "not_cached": {str(k)[:80]: int(v) for k, v in list((raw.get("not_cached") or {}).items())[:20]},
                "server_cpu_seconds": max(0.0, float(raw.get("server_cpu_seconds") or 0.0)),
            }
        ])  # fmt: skip
    except hostfiles.Missing:  # the stage ended before its server wrote them
        return None
    except hostfiles.UnsafeFile as exc:
        note(f"compiler cache stats refused: {exc}")
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        note(f"compiler cache stats {path.name} unreadable: {exc}")
        return None
