"""What patchkit writes for people and machines, one module per kind of output.

``safe`` makes repository-controlled text safe for a terminal and for JSON;
``findings`` renders a check's findings as text, JSON or GitHub annotations;
``audit`` renders the audit report as Markdown or JSON, ``audit_html`` as one
self-contained HTML page. Every report kind has one ``interface.Formats`` table
of its renderers (``findings.FINDINGS``, ``audit.AUDIT``).
"""
