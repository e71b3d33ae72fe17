"""Patch series: ordered multi-file patches per upstream, selected per profile.

``parse`` (a patch file, ``git format-patch`` or plain unified diff, read once as ``git apply``
reads it by ``headers`` and :mod:`patchkit.core.diffs`, byte for byte, and cross-checked with
unidiff), ``apply`` (the series applied in order to a tree, exactly, in memory), ``tree``
(reading and atomically writing a directory tree and the record of what was applied),
``source`` (the upstream tree read offline), ``checks`` and ``stalepins``. The records are
``patchkit.lockfile.series``; rebasing a series is ``patchkit.rebase.series`` and
``patchkit.rebase.bump``; the check rules are ``patchkit.check.series``, the Containerfile
writer ``patchkit.emit.containerfile`` and the queue recognition of ``patchkit import``
``patchkit.importing.queue``.
"""
