"""The model pin: manifests (``manifest``), locking (``pin``), verifying a local cache (``verify``,
with its ``record``), signatures (``signature``) and check's findings (``findings``). The Hub is
reached through ``patchkit.net.hub``.
"""
