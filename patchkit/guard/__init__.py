"""The runtime guard: ``runtime.py`` (the dependency-free script the entrypoint runs inside the container)
and ``config.py`` (its ``[guard]`` table in ``deploy.toml``). The ``guard.json`` that ``patchkit emit``
writes for it is ``patchkit.emit.manifest``."""
