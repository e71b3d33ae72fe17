"""``patchkit rebase``: carrying the patches of a deployment onto a new upstream, overlays and series both.

``overlays`` plans, commits and resumes the rebase of an upstream's overlays;
``series`` rebases a patch series commit by commit and ``bump`` runs it as one
transaction; ``bumping`` is ``bump --image`` (the image upstream derived from the pins, the newest
clean nightly); ``explain`` says which upstream commits touched a patch's lines and ``resolutions``
remembers conflict resolutions; ``merge`` holds the three-way merges (git's engine, through
``patchkit.vcs.gitmerge``) and ``state`` reads a saved state as untrusted input.
"""
