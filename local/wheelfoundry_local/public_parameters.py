"""Public SSM parameters AWS publishes that moto does not carry: the Deep Learning Base AMI's.

The GPU test step resolves its AMI from AWS's parameter for the Deep Learning Base AMI (template.yaml
GpuAmiParameter). moto ships the Amazon Linux ones only; here a ``/aws/service/deeplearning/ami/``
name resolves to moto's own Amazon Linux 2023 image of the same architecture, which RunInstances
accepts. The emulator has no GPU either way: the GPU host is played by the local agent
(WF_GPU_HOST=emulated), whose verdict is "skipped-in-emulation", never "passed".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ._moto import Patches

PREFIX = "/aws/service/deeplearning/ami/"
STAND_IN = {
    "x86_64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
    "arm64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64",
}


def install(patches: Patches) -> None:
    from moto.ssm.models import Parameter, ParameterDict

    parameter: Any = Parameter  # moto's model class (abstract to the type checker: CloudFormation hooks)

    def make(original: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
        def check(self: Any, key: str) -> None:
            original(self, key)
            key = str(key or "")
            if not key.startswith(PREFIX) or dict.get(self, key):
                return
            arch = key[len(PREFIX) :].split("/", 1)[0]
            source = STAND_IN.get(arch)
            if source is None:
                return
            original(self, source)
            found = dict.get(self, source) or []
            if found:
                template = found[-1]
                # defaultdict's own item access: ParameterDict's would call this check again
                defaultdict.__getitem__(self, key).append(
                    parameter(
                        account_id=self.account_id,
                        name=key,
                        value=template.value,
                        parameter_type="String",
                        description=None,
                        allowed_pattern=None,
                        keyid=None,
                        last_modified_date=template.last_modified_date,
                        version=1,
                        data_type="aws:ec2:image",
                    )
                )

        return check

    patches.wrap(ParameterDict, "_check_loading_status", make)
