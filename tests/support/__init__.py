"""Helpers the tests share (fixtures stay in conftest modules; what they build lives here)."""
