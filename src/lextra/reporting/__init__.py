"""Reporting: markdown tables, CSV rows, figures and reports written from results (no computation of its own)."""
