"""The ``wheelfoundry`` command line and the catalog tooling: what no Lambda runs.

It imports the Lambda package (``wheelfoundry``: the planner, catalog, handlers' core), the embedded AWS
(``wheelfoundry_local``) and the user's commands (``wheelfoundry_user``); nothing under functions/
imports it (tests/test_layering.py).
"""
