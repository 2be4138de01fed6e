"""The stages of a job: what runs, in which order, with which variables (``stages.render_stages`` over
``stage_base``'s records), and the steps a test job runs in them (``published``, ``published_stages``,
``smoke`` with its probe, ``package_tests``). Stands on ``wheels/`` and the ground.
"""
