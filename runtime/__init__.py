"""The topic runtime."""
