"""Emitting the compose files: ``deploy.toml`` (``config``), the pure writer (``compose``), the
security rules (``rules``), validation (``validate``) and the command's transaction (``files``); a
Containerfile applying the patch series at build time (``containerfile``); and the runtime guard's
``guard.json`` (``manifest``).
"""
