"""The runtime guard: ``runtime.py`` (the dependency-free script the entrypoint runs inside the container)
and ``manifest.py`` (the ``guard.json`` that ``patchkit emit`` writes for it from the lockfile)."""
