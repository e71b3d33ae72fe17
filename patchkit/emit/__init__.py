"""Emitting the compose files: ``deploy.toml`` (``config``), the pure writer (``compose``), the
security rules (``rules``), validation (``validate``) and the command's transaction (``files``).
"""
