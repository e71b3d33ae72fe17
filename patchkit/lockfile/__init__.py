"""The lockfile: its model (``model``), reader (``reader``), canonical writer (``writer``) and the
located TOML reader (``tomlpos``) that ``deploy.toml`` shares.
"""
