"""Signing what is shipped: SSH signatures (``sshsig``), keys (``keys``), allowed signers
(``signers``), signing and verifying files and bundles (``signatures``), provenance (``attest``)
and recorded, signed audits of patches (``certify``).
"""
