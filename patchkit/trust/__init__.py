"""Trusting a rebase: semantic checks of merged Python files and interdiffs per patch.

``pycheck`` (pure: parse, undefined names with pyflakes, the imports a file makes and the names a
module defines), ``names``, ``screen`` (what a merge can break, found without parsing),
``imports`` (resolving imports in an upstream tree read through a source adapter), ``semantic``
(the checks a rebase runs on every file it produces) and ``interdiff`` (the old patch against the
new one). ``check --deep`` is ``patchkit.check.deep``; ``upstream find-base`` is
``patchkit.importing.findbase``.
"""
