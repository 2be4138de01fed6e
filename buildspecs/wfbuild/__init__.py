"""The on-instance runner's package (the build bundle), one room a concern.

From the ground up (a room imports only rooms listed before it, as its row in tests/test_layering.py allows): the
shared ground here (``safety``: every untrusted string checked; ``execute``: stage processes and the build
log; ``hostfiles``, ``hostinfo``, ``envs``: Python build environments), ``wheels/`` (build, repair,
reproduce, read wheels), ``stages/`` (what a job runs, and the test job's steps), ``compiling/`` (parallel
compiles, nvcc, the compiler cache, memory), ``cuda/`` (the toolkit and device code), ``images/`` (the
builder and runtime images), ``runner/`` (one job from job.json to its callback) and ``gpu/`` (the GPU
test host's program). docs/architecture.md walks a job through them.
"""
