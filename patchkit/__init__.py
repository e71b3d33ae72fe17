"""patchkit: exact, checkable patch and artifact pins for model-serving deployments."""

__version__ = "0.1.0"
