"""Routing policies, one per module; build them by name with `schedulers.registry.make_policy`."""
from __future__ import annotations

from schedulers.policies.adaptive import AdaptivePolicy
from schedulers.policies.colocated import ColocatedPolicy
from schedulers.policies.disaggregated import DisaggregatedPolicy
from schedulers.policies.length_threshold import LengthThresholdPolicy

__all__ = ["AdaptivePolicy", "ColocatedPolicy", "DisaggregatedPolicy", "LengthThresholdPolicy"]
