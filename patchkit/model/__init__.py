"""The model pin: the hub boundary (``hub``), manifests (``manifest``), locking (``pin``), verifying
a local cache (``verify``, with its ``record``) and check's findings (``findings``).
"""
