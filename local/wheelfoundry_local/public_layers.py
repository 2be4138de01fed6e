"""Layers AWS publishes from its own accounts (Powertools for AWS Lambda), as moto sees them.

template.yaml's functions use AWS's public Powertools layer by ARN. moto knows only layers published
into its own backend and refuses a function whose layer it cannot find (and its CloudFormation model
drops Layers altogether). Here a layer of AWS's publisher account is accepted as it is: the handlers
run in-process with this venv's Powertools (the same major), so the layer's contents are never
needed; the function's configuration still lists it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._moto import Patches

# The accounts AWS publishes Powertools for AWS Lambda (Python) layers from (commercial regions).
PUBLISHERS = frozenset({"017000801446"})


def is_public(arn: str) -> bool:
    parts = arn.split(":")
    return len(parts) == 8 and parts[2] == "lambda" and parts[4] in PUBLISHERS and parts[5] == "layer"


def install(patches: Patches) -> None:
    from moto.awslambda.models import LambdaFunction

    def make(original: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
        def layers_data(self: Any, arns: list[str]) -> list[dict[str, Any]]:
            own = iter(original(self, [arn for arn in arns if not is_public(arn)]))
            return [{"Arn": arn, "CodeSize": 0} if is_public(arn) else next(own) for arn in arns]

        return layers_data

    patches.wrap(LambdaFunction, "_get_layers_data", make)

    # moto's CloudFormation model drops a function's Layers; keep them, so the deployed function's
    # configuration lists its layers as on AWS (`aws lambda get-function-configuration`).
    original = vars(LambdaFunction)["create_from_cloudformation_json"].__func__

    def create(cls: Any, resource_name: str, cloudformation_json: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        fn = original(cls, resource_name, cloudformation_json, *args, **kwargs)
        layers = cloudformation_json.get("Properties", {}).get("Layers")
        if layers:
            # A layer of the stack itself (!Ref PublishToolsLayer) resolves to moto's LayerVersion, not its ARN.
            layers = [layer if isinstance(layer, str) else layer.arn for layer in layers]
            fn.layers = fn._get_layers_data(layers)
        return fn

    patches.set(LambdaFunction, "create_from_cloudformation_json", classmethod(create))
