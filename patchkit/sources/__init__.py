"""Upstream sources: git repositories, Python wheels, plain directories and images.

``context`` is the ``Context`` the command line hands down (the cache directory, the progress to
report to, the registry and engine factories); ``materialize`` gives the files that run, diff-only
patches rebuilt and pinned bases recovered offline.
"""
