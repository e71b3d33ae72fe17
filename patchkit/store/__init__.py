"""The local disk: the repository and its atomic writes (``repo``), the lockfile transaction (``persist``),
and the content-addressed cache (``cache``).
"""
