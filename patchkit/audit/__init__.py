"""The audit report (``report``: what the deployment runs that differs from upstream) and the
CycloneDX SBOM (``sbom``). Recorded, signed audits are ``patchkit.signing.certify``.

Its renderings are in ``patchkit.formats``.
"""
