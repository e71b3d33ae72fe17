"""The pure core every layer shares: values, findings, outcomes, diffs, SHA256SUMS, hashing.

Nothing here touches the network, a subprocess or the repository's files beyond what a caller hands in;
the lockfile model (``patchkit.lockfile``) and OCI parsing (``patchkit.oci``) are the core's other two packages.
"""
