"""WheelFoundry's Lambda package: the handlers and the core they need, one room a concern.

From the ground up (a room imports only rooms listed before it, as its row in tests/test_layering.py allows):
``errors``, ``config`` and ``conditional`` (the typed errors the state machine matches, the farm's settings,
S3 conditional writes), ``catalog/`` (what can be built), ``toolkits/`` (CUDA toolkits as locks and facts),
``request/`` (a request, parsed and checked), ``planning/`` (request in, plan out), ``publishing/`` (merged
wheels, indexes, provenance, uploads),
``watch/`` (subscriptions and the watcher's tick), ``aws/`` (each state's AWS side) and ``handlers/`` (one thin
Lambda handler a state). docs/architecture.md walks a request through them.
"""
