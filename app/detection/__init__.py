"""Regression detection: the statistics (`detector`), the series they run on (`series`) and the
service that turns change points into alerts (`service`).

`find_change_points(values)` is the DESIGN.md contract: the service's default configuration
applied to one series. Everything else is imported from the module that owns it.
"""
from app.detection.detector import find_change_points

__all__ = ["find_change_points"]
