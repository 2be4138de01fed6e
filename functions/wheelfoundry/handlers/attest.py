"""Attest: sign an in-toto SLSA provenance statement for every wheel the run published (KMS key of the stack).

First, the layout's evidence: a merged wheel that failed its test in a ``layout: auto`` run is not the
end of the run; MergedWheelFailed sends the state machine back to Merge for the cell wheels
(wheelfoundry.aws.fallback), and nothing is signed now.
"""

from __future__ import annotations

from typing import Any

from wheelfoundry.aws.attest import attest_run
from wheelfoundry.aws.fallback import evidence
from wheelfoundry.errors import MergedWheelFailed
from wheelfoundry.handlers.runtime import Runtime, entrypoint, logger, metrics
from wheelfoundry.publishing.provenance import kms_signer


@entrypoint
def handler(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    if why := evidence(event, rt.client("s3")):
        logger.info("merged wheel failed its test: per-cell wheels instead", extra={"run": event["run"]["id"]})
        raise MergedWheelFailed(why)
    key_id = rt.var("WF_PROVENANCE_KEY_ARN")
    sign = kms_signer(rt.client("kms"), key_id)
    result = attest_run(event, rt.client("s3"), sign, key_id, rt.var("WF_STACK_NAME"))
    metrics.add_metric(name="WheelsAttested", unit="Count", value=len(result["signed"]))
    logger.info("attested", extra={"run": event["run"]["id"], **result})
    return result
