"""Shipping images and artifacts: derived images built and verified (``build``, ``verify``), image pins
adopted and resolved (``adopt``, ``operations``), and artifacts pushed and pulled as OCI artifacts (``artifact``).
"""
