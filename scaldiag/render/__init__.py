"""Renderers: a Report in, text out. They format; they never decide."""
