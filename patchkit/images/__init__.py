"""Container images, one room for them all.

``registry`` is the client of OCI distribution registries (references,
manifests, layers, authentication), ``engine`` reads images through a local
Docker engine, and ``operations`` resolves, pins and reads images for the
commands. Importing the package imports none of them: each is loaded by the
command that uses it, so the CLI starts fast.
"""
