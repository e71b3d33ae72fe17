"""The audit report: what the deployment runs that differs from upstream (``report``).

Its renderings are in ``patchkit.formats``.
"""
