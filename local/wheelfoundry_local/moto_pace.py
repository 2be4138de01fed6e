"""What keeps moto's pace with 100 runs at once: two of its costs that grow with the load, made flat.

The embedded AWS serves every request, runs every handler and interprets every execution in one
process, under one GIL. py-spy samples of `bench/concurrency.py` (100 runs started at once) showed
where the CPU went, and each of these starved the rest past the builds' 60 s heartbeat or the
handlers' 60 s timeout:

- moto parses a state machine's ASL with ANTLR's pure-Python runtime at every execution start (and
  every Distributed Map child): about 0.5 s of CPU for this project's definition (57 of 91 GIL
  samples in the start burst). The syntax tree is kept per definition; each execution still gets
  fresh evaluation components from moto's own Preprocessor (about 0.07 s), so none is shared.
- An EC2 resource's tags are found by scanning every tag in the account with a regex per tag, once
  per resource and filter, so a DescribeInstances with tag filters (Launch, the reapers) costs the
  square of the instances launched (16 of 64 samples once a hundred instances existed). Here they
  are read from moto's own table by the resource's id, in the shape describe_tags returns.
"""

from __future__ import annotations

from typing import Any

from ._moto import Patches


def install(patches: Patches) -> None:
    _parse_once(patches)
    _tags_by_id(patches)


def _parse_once(patches: Patches) -> None:
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    parse = AmazonStateLanguageParser.parse
    trees: dict[str, Any] = {}

    def parse_once(definition: str) -> tuple[Any, Any]:
        tree = trees.get(definition)
        if tree is None:
            program, tree = parse(definition)  # a definition that fails to parse is not kept
            trees[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    patches.set(AmazonStateLanguageParser, "parse", staticmethod(parse_once))


def _tags_by_id(patches: Patches) -> None:
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(resource: Any) -> list[dict[str, str]]:
        if not resource.id:
            return []
        tags = dict(resource.ec2_backend.tags.get(resource.id) or {})
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource.id), "")
        return [{"resource_id": resource.id, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]

    patches.set(TaggedEC2Resource, "get_tags", get_tags)
