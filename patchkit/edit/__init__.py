"""Changing a deployment by hand: init, add, remove, lock, sums and diffs (``changes``), upstreams (``upstreams``)."""
