"""A discrete-event model of a pd-serve deployment that routes with the real `schedulers/` policies.

Map (imports point down):
    sweep          run_sweep: policies x rates from a SimConfig, summarized by bench.metrics
    config         SimConfig (configs/sim_*.yaml), build_cluster, build_policy
    simulator      Simulator / simulate: the event loop and a request's life
    router         SimRouter: the ClusterView and the policy.decide call, as pd_serve's router
    worker         SimWorker: vLLM-like step scheduling (decodes, chunks, blocks, preemption)
    links          SharedLink, Transfer: KV transfers sharing a link's bandwidth
    step_cost      StepCost: a step's seconds from schedulers' StepTimeModel
    engine_request, block_pool, events, presets, specs
"""
from __future__ import annotations

from bench.simulator.config import (SimConfig, SimConfigError, build_cluster, build_policy,
                                    load_sim_config, sim_config_from_dict)
from bench.simulator.presets import LINK_PRESETS, get_link
from bench.simulator.simulator import SimResult, Simulator, simulate
from bench.simulator.specs import ClusterSpec, EngineSpec, LinkSpec, WorkerSpec

__all__ = ["ClusterSpec", "EngineSpec", "LINK_PRESETS", "LinkSpec", "SimConfig", "SimConfigError",
           "SimResult", "Simulator", "WorkerSpec", "build_cluster", "build_policy", "get_link",
           "load_sim_config", "sim_config_from_dict", "simulate"]
