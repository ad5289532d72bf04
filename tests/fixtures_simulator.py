"""Fixtures that start the embedded simulator (owned by the simulator work)."""
