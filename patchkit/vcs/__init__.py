"""The git adapter.

``gitclient`` runs every git process (disarmed: no hooks, no config a clone brings); ``gitmerge``
is git's own merge-ort over many files at once.
"""
