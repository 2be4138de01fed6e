"""Compiling a job's sources fast and within memory: translation units in parallel (``parallel_compile``
and its build-stage side ``parallel_compile_tool``), deterministic nvcc (``nvcc``, ``cuda_home``), the
compiler cache (``compiler_cache``, ``cache_stats``), how cores and memory are shared (``parallelism``,
``compiler_memory``), what compilers held (``memwatch``, ``oom``) and used (``cpu_usage``,
``compile_records``). Stands on ``stages/`` (the Stage record) and the ground.
"""
