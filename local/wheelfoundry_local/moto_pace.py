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
- Every JSONPath moto's interpreter evaluates (InputPath, ResultPath, each `.$` parameter, at every
  state of every execution) is parsed anew by jsonpath_ng, whose parser builds its PLY tables at each
  call (`JsonPathParser.__init__` -> `yacc`). A parsed path is kept per string: `find` and
  `update_or_create` read the expression, they do not change it.
- Each Lambda task creates a new boto3 client (`boto_client_for`: a session's service model load and
  client class build, tens of ms) to invoke its function. One client per (region, service, endpoint) is
  kept; boto3 clients are thread-safe.
On 2026-11-26 the last two showed in the GIL samples of a one-channel run of 100 whose Launch handlers
then ran past their 60 s timeout (`Sandbox.Timedout`, 49 runs failed in 4 minutes).

One cost is not the load's but every test's: moto reads a stack's template with PyYAML's pure-Python
loader, JSON included (JSON is YAML), about a quarter of a deploy of this project's template, which
`deploy` hands it as JSON. JSON is read as JSON first, the same dict; anything else goes to moto's reader.

Two more are every deploy's, measured with py-spy over `make test` (2026-11-29; 88 deploys, each in a fresh
state), where they were about a fifth of the pytest workers' samples:
- The ASL parse above, again at every deploy: the definition holds its functions' and documents' physical
  names, which moto suffixes at random, so no two deploys shared a syntax tree. Those names' suffixes are
  now derived from the stack's name and the resource's logical id, for a Lambda function or an SSM document
  that the template does not name and that is deleted with its stack (both are regional: one stack of a
  name per region holds them), and the trees are kept per process: a worker's tests, each in an emptied
  account, parse this project's definition once per region.
- Every EC2 backend (each region, at every reset) builds moto's list of the region's 1,100 ECS-optimized
  images, each with a snapshot: 0.06 CPU-s a backend. The farm launches only what its SSM parameters name
  (public_parameters.py): Amazon Linux 2023, from moto's latest-image lists, which stay, with its 44
  generic images; the ECS list is left out. (moto's SSM still lists the ECS-optimized images' parameters;
  RunInstances does not check an image exists.)
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import threading
from typing import Any

from ._moto import Patches


def install(patches: Patches) -> None:
    _parse_once(patches)
    _stable_names(patches)
    _images_the_farm_launches(patches)
    _tags_by_id(patches)
    _jsonpath_once(patches)
    _one_client_per_service(patches)
    _json_templates(patches)


def _parse_once(patches: Patches) -> None:
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    parse = AmazonStateLanguageParser.parse

    def parse_once(definition: str) -> tuple[Any, Any]:
        tree = _TREES.get(definition)
        if tree is None:
            program, tree = parse(definition)  # a definition that fails to parse is not kept
            _TREES[definition] = tree
            while len(_TREES) > KEPT_TREES:  # the oldest first (dicts keep insertion order)
                _TREES.pop(next(iter(_TREES)), None)
            return program, tree
        return Preprocessor().visit(tree), tree

    patches.set(AmazonStateLanguageParser, "parse", staticmethod(parse_once))


_TREES: dict[str, Any] = {}  # ASL definition -> ANTLR tree, for the process: a tree is only read once built
KEPT_TREES = 64  # a tree holds its parser and tokens: a few MB each; a worker's tests deploy a handful
STABLE_NAMES = ("AWS::Lambda::Function", "AWS::SSM::Document")  # what a state machine's definition names
_SUFFIX = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # moto's random_suffix alphabet, and its 12 characters


def _stable_names(patches: Patches) -> None:
    from moto.cloudformation import parsing

    original = parsing.parse_resource_and_generate_name

    def parse_resource_and_generate_name(logical_id: str, resource_json: dict[str, Any], resources_map: Any) -> Any:
        parsed = original(logical_id, resource_json, resources_map)
        kind = resource_json.get("Type")
        if not parsed or kind not in STABLE_NAMES or resource_json.get("DeletionPolicy", "Delete") != "Delete":
            return parsed  # a retained one may outlive its stack: the next stack of that name gets a new name
        if parsing.resource_name_property_from_type(kind) in (resource_json.get("Properties") or {}):
            return parsed  # named by the template
        stack = resources_map["AWS::StackName"]
        digest = hashlib.sha256(f"{stack}/{logical_id}".encode()).digest()
        suffix = "".join(_SUFFIX[b % len(_SUFFIX)] for b in digest[:12])
        return parsed[0], parsed[1], f"{stack}-{logical_id}-{suffix}"

    patches.set(parsing, "parse_resource_and_generate_name", parse_resource_and_generate_name)


def _images_the_farm_launches(patches: Patches) -> None:
    from moto.ec2.models import amis
    from moto.utilities.utils import load_resource as load  # what amis.py imports by that name

    def load_resource(package: str, resource: str) -> Any:
        if "/ecs/optimized_amis/" in resource:  # AmiBackend._load_amis treats a missing list as none
            raise FileNotFoundError(resource)
        return load(package, resource)

    patches.set(amis, "load_resource", load_resource)


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


def _jsonpath_once(patches: Patches) -> None:
    from jsonpath_ng.ext.parser import parse as parse_ext
    from jsonpath_ng.parser import parse as parse_plain
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    patches.set(json_path, "parse", functools.lru_cache(maxsize=4096)(parse_ext))
    patches.set(result_path, "parse", functools.lru_cache(maxsize=4096)(parse_plain))


def _one_client_per_service(patches: Patches) -> None:
    from moto.core.models import botocore_stubber
    from moto.settings import moto_server_port
    from moto.stepfunctions.parser.asl.utils import boto_client

    original = boto_client.boto_client_for
    clients: dict[tuple[Any, ...], Any] = {}
    lock = threading.Lock()

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        # moto's own function ignores state_credentials too; the endpoint is where its server listens
        key = (region, service, botocore_stubber.enabled, moto_server_port())
        with lock:
            client = clients.get(key)
            if client is None:
                client = clients[key] = original(region, service, state_credentials)
            return client

    # the integrations import the function by name: replace it in every module that holds it
    for name, module in list(sys.modules.items()):
        if name.startswith("moto.stepfunctions") and getattr(module, "boto_client_for", None) is original:
            patches.set(module, "boto_client_for", boto_client_for)


def _json_templates(patches: Patches) -> None:
    from moto.cloudformation.models import Stack

    parse = Stack.parse_template

    def parse_template(template: str) -> dict[str, Any]:
        try:
            parsed = json.loads(template)
        except ValueError:
            return parse(template)
        return parsed if isinstance(parsed, dict) else parse(template)

    patches.set(Stack, "parse_template", staticmethod(parse_template))
