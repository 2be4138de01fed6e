"""The CUDA toolkit and device code: host mode's locked toolkit (``toolkit``, ``stack_lock``), what a
compiled file's fatbinary holds (``fatbin``), which code runs on which GPU (``archrule``) and whether a
cell holds what it claims (``devicecode``). Stands on the ground alone.
"""
