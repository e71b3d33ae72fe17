"""``patchkit rebase``: carrying the patches of a deployment onto a new upstream, overlays and series both.

``overlays`` plans, commits and resumes the rebase of an upstream's overlays;
``series`` rebases a patch series commit by commit and ``bump`` runs it as one
transaction; ``merge`` holds the three-way merges (git's engine, through
``patchkit.gitmerge``) and ``state`` reads a saved state as untrusted input.
"""
