"""Surge tuner: Darshan logs and Surge profiles -> root causes, DCA-IO layouts, ML predictions."""

__version__ = "0.1.0"
