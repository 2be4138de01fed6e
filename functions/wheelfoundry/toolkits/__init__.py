"""CUDA toolkits as data: locks of NVIDIA's wheels and the facts a plan needs of each toolkit.

Entry points: ``toolkit_lock`` (resolve a lock from PyPI's answers; tools/lock_cuda.py and the watcher
both use it), ``toolkit_lock_file.render`` (the lock as the TOML install_cuda.py reads), ``toolkit_facts``
(arch list and host compiler range read from upstream files), ``toolkit_row`` (those facts, or the
catalog's), ``stack_toolkits`` (the locks the watcher keeps in the stack's bucket). Stands on ``catalog/``.
"""
