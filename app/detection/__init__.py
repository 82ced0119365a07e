"""Regression detection: the statistics (`detector`), the series they run on (`series`) and the
service that turns change points into alerts (`service`).

`find_change_points(values)` is the DESIGN.md contract: the service's default configuration
applied to one series.
"""
from app.detection.detector import (
    DEFAULT_CONFIG,
    ChangePoint,
    DetectorConfig,
    PlatformSeries,
    classify_change,
    compare_accuracy,
    detect,
    detect_recent,
    effect_threshold,
    evidence_at,
    find_change_points,
    mcnemar_exact,
    two_proportion_z,
)

__all__ = ["DEFAULT_CONFIG", "ChangePoint", "DetectorConfig", "PlatformSeries", "classify_change",
           "compare_accuracy", "detect", "detect_recent", "effect_threshold", "evidence_at",
           "find_change_points", "mcnemar_exact", "two_proportion_z"]
