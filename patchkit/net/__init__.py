"""HTTP and the services reached over it.

``transport`` is the one bounded-HTTP helper; ``github`` is GitHub's REST API and ``hub`` the
Hugging Face Hub, both through it.
"""
