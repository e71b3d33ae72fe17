"""Patch series: ordered multi-file patches per upstream, selected per profile.

``model`` (the lockfile's ``[series.NAME]`` records and their reading and
writing), ``parse`` (a patch file, ``git format-patch`` or plain unified
diff, read once as ``git apply`` reads it by ``headers`` and
:mod:`patchkit.diffs`, byte for byte, and cross-checked with unidiff),
``apply`` (the series applied in order to a tree, exactly, in memory),
``tree`` (reading and atomically writing a directory tree and the record of
what was applied), ``rebase`` and ``bump`` (a series moved onto a
new upstream like ``git am -3``) and ``source`` (the upstream tree read
offline). The check rules are ``patchkit.check.series``, the Containerfile
writer ``patchkit.emit.containerfile`` and the patch-queue recognition of
``patchkit import`` ``patchkit.importing.queue``.
"""
