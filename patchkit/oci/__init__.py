"""OCI parsing, pure: image references (``ref``), manifests and indexes (``manifest``), layer paths (``layers``)."""
