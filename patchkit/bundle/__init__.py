"""The production bundle: its deterministic tar format (``tar``) and emitting and verifying it (``archive``)."""
