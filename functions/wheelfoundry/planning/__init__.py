"""Request in, plan out: the jobs a request runs, where, on what, for how long and at what cost.

One corridor, ``planning.plan_request``, in the order it runs:
1. the jobs: ``planning.framework_jobs`` (a framework request, with ``buildenv``'s environment contract,
   ``sizing`` and ``framework_wall``) or ``extensions.plan_extension`` (an extension's cells, grouped into
   builds by ``cells``: per torch, or once per CUDA major on the stable ABI; packed onto hosts by
   ``walltime``, priced by ``calibration``, ``source_profile`` and ``compiler_memory``, laid out by
   ``wheel_size``);
2. ``executors.assign_all``: EC2 or CodeBuild, per job (``quotas``, whether the account's vCPUs fit, is
   asked after the plan, by the AWS side);
3. ``gpu_tests.with_gpu_tests``, ``testjobs.plan_tests`` (the published bytes, tested), ``image_jobs``;
4. the guardrails, then ``plan.Plan``. The records it is made of: ``jobs``.
Stands on ``request/`` and ``catalog/``.
"""
