"""patchkit's command line: a thin layer that parses arguments, calls one core function and renders its result.

One module per command family (``deployment``, ``upstream``, ``image``, ``model``,
``importing``, ``ship``, ``audit``, ``signing``), what they share in ``common``, and
``app``, which registers them on the root group. The core never imports this package.
"""

from patchkit.cli.app import cli, main

__all__ = ["cli", "main"]
