"""Following upstream: subscribed packages and the watcher's pure tick.

Entry points: ``subscriptions.parse_subscription``, ``watch_facts.release_facts`` and ``package_releases``
(what upstream published), ``watcher.tick`` (subscriptions + upstream + what the channels serve -> runs to
start, each planned by ``planning/``). The AWS side, reading and starting, is ``aws/watch.py``.
"""
