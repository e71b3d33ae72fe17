"""The lockfile: its model (``model``), the series records (``series``), what a base or a series was
verified against (``verified``, ``verification``), reader (``reader``), canonical writer (``writer``,
which also gives the SHA256SUMS patchkit generates) and the located TOML reader (``tomlpos``) that
``deploy.toml`` shares.
"""
