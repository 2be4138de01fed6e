"""The GPU step: a CUDA job's wheels tested on a GPU as users meet them (``gpu_test``, with ``gpu_probe``
inside the test venv), and the GPU test host's program (``gpu_runner``). The top room: it stands on
``runner/`` for the callback.
"""
