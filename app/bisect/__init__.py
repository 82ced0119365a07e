"""Bisect: find the commit that changed a metric on a platform."""
