"""A build request: raw JSON in, a checked, typed, frozen ``Request`` out, or every problem at once.

Entry points: ``request.parse_request`` (schema, then the catalog's checks; RequestInvalid names each
field, value and what is allowed), ``model`` (the frozen dataclasses every later room reads),
``presets.load_preset``. The checks behind it: ``semantics`` (versions, Pythons, build_env), ``targets``,
``images``, ``exclusions``, ``publish_targets`` (``options.publish``) and ``pins`` (an image the deployed
bundle cannot build). Stands on ``catalog/`` and ``toolkits/``.
"""
