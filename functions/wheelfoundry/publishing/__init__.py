"""From built wheels to what users install: merged wheels, signed provenance, indexes, uploads.

Entry points: ``merge.merge`` (every (torch, CUDA) build of one project and Python in one wheel, with
``loader``'s stub and ``elf``'s reading of what each file is), ``provenance`` (in-toto statement, DSSE
envelope, KMS signature), ``index.publish_index`` (PEP 503/691/658 pages, with ``index_pages`` and
``index_variants``), ``edge`` (a public channel's CDN), ``coverage`` (which cells a channel serves) and
``uploads.publish`` (twine, to another index). Stands on ``request/`` for the publish targets.
"""
