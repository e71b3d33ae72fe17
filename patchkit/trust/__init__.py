"""Trusting a rebase: semantic checks of merged Python files, interdiffs per patch, finding a lost base.

``pycheck`` (pure: parse, undefined names with pyflakes, the imports a file makes and the names a
module defines), ``imports`` (resolving those imports in an upstream tree read through a source
adapter), ``semantic`` (the checks a rebase runs on every file it produces), ``deep`` (the same
import check on the pinned state, ``check --deep``), ``interdiff`` (the old patch against the new
one) and ``findbase`` (``upstream find-base``).
"""
