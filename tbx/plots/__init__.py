"""Figures for reports and notebooks (matplotlib, Agg backend; no pyplot global state).

Each function takes plain records, writes one image file and returns its path.
"""
