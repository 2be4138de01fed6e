"""S3 conditional writes (``If-Match`` / ``If-None-Match``): the answers that mean another writer came first,
and the pause before reading again. PublishIndex's state file and the stack's toolkit record both take turns
this way."""

from __future__ import annotations

import random
import time

CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict")  # the object changed since it was read


def jittered(attempt: int) -> None:
    """Back off before attempt ``attempt`` + 1: up to 0.2 s x 2^attempt, at most 5 s, at random."""
    time.sleep(random.uniform(0, min(5.0, 0.2 * 2**attempt)))  # noqa: S311 (backoff jitter, no secret)
