"""Renderings of an Analysis: terminal text, JSON, self-contained HTML."""
