"""Reaching container images: the adapters to registries and to a Docker engine.

``registry`` is the client of OCI distribution registries (manifests, layers, authentication),
with ``streams`` reading a layer as it streams, ``credentials`` the Docker config's credentials
and ``errors`` its ``RegistryError``; ``engine`` reads images through a local Docker engine;
``reader`` is the ``ImageReader`` behind ``--via``. What the commands do with images is in
``patchkit.ship``; references and OCI documents are parsed in ``patchkit.oci``. Importing the
package imports none of them, so the CLI starts fast.
"""
