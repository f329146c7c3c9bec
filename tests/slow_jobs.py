"""Jobs for the sweep's worker processes that import nothing heavy: one that returns at once, one that sleeps."""

import time


def quick_or_slow_job(payload):
    """Sleep ``payload["sleep_s"]`` seconds, then return no run results."""
    time.sleep(payload["sleep_s"])
    return []
