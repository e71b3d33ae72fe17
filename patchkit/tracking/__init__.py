"""What upstream says now.

``refs`` holds the issues, pull requests and commits a patch tracks and their recorded states;
``online`` is ``check --online``: the registries, the Hub and the issue tracker asked in turn.
"""
