"""Shared infrastructure: recipes, output, options, seeding, devices, data, kernels.

Nothing in here is method-specific, and nothing imports torch at module import time."""
