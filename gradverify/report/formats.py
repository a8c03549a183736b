"""The name of each report format, as ``--format``, ``format =`` in ``[tool.gradverify]`` and
``--output`` take it: read by the option table (``gradverify.optiontable``, below the
renderers), so it imports nothing. ``registry.RENDERERS`` has a renderer for each name (a test
keeps the two equal)."""
from __future__ import annotations

FORMATS = ("rich", "plain", "json", "junit", "markdown", "github", "html")
