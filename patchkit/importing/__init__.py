"""Adopting hand-kept deployment repositories: ``patchkit import``."""
