"""What the AWS CLI sends that moto answers unlike AWS (found by running the CLI against `local up`).

- `aws stepfunctions start-execution` without `--name`: AWS names the execution with a UUID; moto's
  ASL backend would name it "None" (and every later unnamed execution the same).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from ._moto import Patches


def install(patches: Patches) -> None:
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def start_execution(self: Any, state_machine_arn: str, name: Any = None, *args: Any, **kwargs: Any) -> Any:
            return original(self, state_machine_arn, name or str(uuid.uuid4()), *args, **kwargs)

        return start_execution

    patches.wrap(StepFunctionsParserBackend, "start_execution", make)
