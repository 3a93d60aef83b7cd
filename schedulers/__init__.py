"""Scheduling policies and cost models for pd-serve: pure Python, no Ray, vLLM, torch or NIXL.

Map (imports point down):
    registry        make_policy(name, **params)
    policies/       colocated, disaggregated, length_threshold, adaptive
    route_prediction, candidates, slo
    step_time       one engine iteration's time, roofline defaults or least-squares fit
    roofline, seed_quantities, flops, hardware, model_spec
    types           RequestInfo, WorkerView, LinkEstimate, ClusterView, Decision, Policy
"""
from __future__ import annotations

from schedulers.types import (ClusterView, Decision, LinkEstimate, NoCandidateError, Policy,
                              RequestInfo, WorkerView)

__all__ = ["ClusterView", "Decision", "LinkEstimate", "NoCandidateError", "Policy", "RequestInfo",
           "WorkerView"]
