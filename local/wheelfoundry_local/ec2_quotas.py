"""EC2 vCPU quotas in the embedded AWS: Service Quotas answers them and RunInstances enforces them.

moto 5.2.1's Service Quotas knows only the VPC service (GetServiceQuota for ec2 codes raises
NoSuchResourceException) and its RunInstances launches without limit. On AWS an account's running
instances of a family may hold at most its vCPU quota; one more instance past it fails with
VcpuLimitExceeded (on-demand) or MaxSpotInstanceCountExceeded (spot). This module adds both, with
the values a test sets (``aws.quotas.set("L-1216C47A", 16)``); the defaults are roomy so that a test
that does not care never waits.
"""

from __future__ import annotations

import threading
from typing import Any

from wheelfoundry.planning.quotas import QUOTAS, SERVICE_CODE, Quota, quota_for

from ._moto import ACCOUNT_ID, Patches

# The emulator's own defaults (not AWS's: a new AWS account often has far less, P often 0).
ROOMY = {"standard": 4096.0, "g": 512.0, "p": 512.0}


def _error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


class Ec2Quotas:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # one RunInstances checks and launches at a time: no overshoot
        self._values: dict[str, float] = {q.code: ROOMY[group] for (group, _), q in QUOTAS.items()}
        self.refused = 0  # RunInstances calls refused for quota (tests and the bench read it)

    def set(self, code: str, value: float) -> None:
        if code not in self._values:
            raise KeyError(f"{code} is not an EC2 vCPU quota this emulation knows: {sorted(self._values)}")
        self._values[code] = float(value)

    def value(self, code: str) -> float:
        return self._values[code]

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _quota(self, code: str, region: str) -> dict[str, Any]:
        quota = next(q for q in QUOTAS.values() if q.code == code)
        return {
            "ServiceCode": SERVICE_CODE,
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT_ID}:{SERVICE_CODE}/{code}",
            "QuotaCode": code,
            "QuotaName": quota.name,
            "Value": self._values[code],
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }

    def _in_use(self, backend: Any, quota: Quota) -> int:
        from moto.ec2.models.instance_types import INSTANCE_TYPES

        total = 0
        for instance in backend.all_instances():
            if instance.state not in ("pending", "running"):
                continue
            if quota_for(instance.instance_type, instance.lifecycle == "spot") == quota:
                info = INSTANCE_TYPES.get(instance.instance_type, {})
                total += int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        return total

    def install(self, patches: Patches) -> None:
        from moto.ec2.models.instance_types import INSTANCE_TYPES
        from moto.ec2.models.instances import InstanceBackend
        from moto.servicequotas.models import ServiceQuotasBackend

        quotas = self

        def make_get(original: Any) -> Any:
            def get_service_quota(backend: Any, service_code: str, quota_code: str) -> dict[str, Any]:
                if service_code == SERVICE_CODE and quota_code in quotas._values:
                    return quotas._quota(quota_code, backend.region_name)
                return dict(original(backend, service_code, quota_code))

            return get_service_quota

        def make_run(original: Any) -> Any:
            def run_instances(backend: Any, image_id: str, count: int, *args: Any, **kwargs: Any) -> Any:
                itype = str(kwargs.get("instance_type") or "")
                spot = bool(kwargs.get("instance_market_options"))
                quota = quota_for(itype, spot)
                if quota is None:
                    return original(backend, image_id, count, *args, **kwargs)
                want = int(INSTANCE_TYPES.get(itype, {}).get("VCpuInfo", {}).get("DefaultVCpus", 0)) * int(count)
                with quotas._lock:
                    limit = quotas._values[quota.code]
                    if quotas._in_use(backend, quota) + want > limit:
                        quotas.refused += 1
                        if spot:
                            raise _error("MaxSpotInstanceCountExceeded", "Max spot instance count exceeded")
                        raise _error(
                            "VcpuLimitExceeded",
                            f"You have requested more vCPU capacity than your current vCPU limit of {int(limit)} "
                            "allows for the instance bucket that the specified instance type belongs to. "
                            "Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment "
                            "to this limit.",
                        )
                    return original(backend, image_id, count, *args, **kwargs)

            return run_instances

        patches.wrap(ServiceQuotasBackend, "get_service_quota", make_get)
        patches.wrap(InstanceBackend, "run_instances", make_run)
