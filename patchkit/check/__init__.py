"""``patchkit check``: every offline invariant of a deployment, as a list of findings."""
