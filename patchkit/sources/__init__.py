"""Upstream sources: git repositories, Python wheels and plain directories."""
