"""What patchkit writes for people and machines, one module per kind of output.

``safe`` makes repository-controlled text safe for a terminal and for JSON;
``findings`` renders a check's findings as text, JSON or GitHub annotations;
``audit_html`` renders the audit report as one self-contained HTML page.
"""
