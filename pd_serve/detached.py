"""Deployments that outlive the process that made them: `pd-serve up --detach` under
`ray job submit`, then `pd-serve status` and `pd-serve down` from anywhere on the cluster.

A detached deployment's actors are named `<name>:router`, `<name>:frontend` and
`<name>:<worker id>` in the `pd_serve` namespace, with lifetime "detached". The router knows
its workers, so it is the one name to look up.
"""
from __future__ import annotations

import logging
from typing import Any

from pd_serve.deployment import NAMESPACE, WORKER_SHUTDOWN_TIMEOUT_S, _reap
from pd_serve.shm_leftovers import unlink_leftovers

logger = logging.getLogger(__name__)
ROUTER_SUFFIX = ":router"


class DeploymentNotFoundError(LookupError):
    """No detached deployment of that name on the cluster."""


def connect(address: str | None) -> None:
    """Join the running cluster (`address`, $RAY_ADDRESS, or the local `ray start` one); never
    start a new one: a detached deployment needs a cluster that outlives this process."""
    import os

    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        address = _resolve_cluster_address(address or os.environ.get("RAY_ADDRESS") or "auto")
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    except ConnectionError as err:
        raise ConnectionError(f"no running Ray cluster to join ({err}); start one with "
                              "`ray start --head` or pass --address") from None


def _resolve_cluster_address(address: str, timeout_s: float = 3.0) -> str:
    """`address` ("auto" resolved the way Ray does), checked to accept connections.

    Ray's own connect waits for an unreachable GCS forever, and "auto" picks up the address a
    `ray start` recorded even after that cluster was killed without `ray stop`: fail fast."""
    import socket

    from ray._private.services import get_ray_address_from_environment

    resolved = get_ray_address_from_environment(address, None) if address == "auto" else address
    if "://" in resolved or ":" not in resolved:
        return resolved  # ray:// client addresses and the like: Ray's own errors apply
    host, port = resolved.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as err:
        raise ConnectionError(f"the Ray cluster at {resolved} does not answer: {err}") from None
    return resolved


def list_deployments() -> list[str]:
    import ray.util

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a.get("namespace") == NAMESPACE and a["name"].endswith(ROUTER_SUFFIX)]
    return sorted(n[: -len(ROUTER_SUFFIX)] for n in names)


def _actor(name: str) -> Any:
    import ray
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def resolve_name(name: str | None) -> str:
    """`name`, or the only detached deployment there is."""
    names = list_deployments()
    if name:
        if name not in names:
            raise DeploymentNotFoundError(f"no deployment named {name!r}; running: {names or 'none'}")
        return name
    if len(names) != 1:
        raise DeploymentNotFoundError(f"name the deployment (--name); running: {names or 'none'}")
    return names[0]


def status(name: str) -> dict:
    import ray

    router = _actor(name + ROUTER_SUFFIX)
    st = ray.get(router.status.remote(), timeout=30)
    frontend = _actor(name + ":frontend")
    addresses = ray.get(frontend.get_addresses.remote(), timeout=30) if frontend else None
    st["name"] = name
    st["grpc"] = addresses.grpc if addresses else None
    st["http"] = addresses.http_url if addresses else None
    return st


def down(name: str) -> list[str]:
    """Stop the frontend, every engine (gracefully, then its processes), the workers and the
    router. Returns the names of the actors it removed."""
    import ray

    from pd_serve.frontend.actor import stop_frontend

    router = _actor(name + ROUTER_SUFFIX)
    workers: dict[str, Any] = ray.get(router.handles.remote(), timeout=30)
    removed = []
    frontend = _actor(name + ":frontend")
    if frontend is not None:
        stop_frontend(frontend)
        removed.append(name + ":frontend")
    ray.kill(router)
    removed.append(name + ROUTER_SUFFIX)
    pids: list[int] = []
    segments: list[str] = []
    for wid, w in workers.items():
        try:
            pids += ray.get(w.child_pids.remote(), timeout=30)
            segments += ray.get(w.shm_segments.remote(), timeout=30)
            ray.get(w.shutdown.remote(), timeout=WORKER_SHUTDOWN_TIMEOUT_S)
        except Exception as err:  # already dead: nothing to stop gracefully
            logger.info("worker %s: %s", wid, type(err).__name__)
        ray.kill(w)
        removed.append(f"{name}:{wid}")
    _reap(pids)  # engine processes on this node whose actor could not stop them
    unlink_leftovers(segments)  # and the shared memory of any that was killed
    return removed
