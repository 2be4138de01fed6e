"""One job on its host: ``python -m wfbuild.runner.runner`` reads job.json, runs the stages, uploads,
calls back. ``job.Job`` is the contract its helpers take (so none imports the runner): ``cells`` (how many
build at once), ``stage_env``, ``host_mode`` (toolkit and cache without a container), ``compile_memory``,
``credentials`` (the job's own session), ``source``, ``manifest``, ``callback`` and ``finish``.
Stands on every other room but ``gpu/``.
"""
