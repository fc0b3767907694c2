"""The Ray backend of the simulation pool (agent/sim_pool.py, `Execution(backend="ray")`).

Each `SimJob` becomes one Ray task of one CPU that runs `sim_pool.run_one` on a worker: what travels
is the job (the simulation config as plain data, its base folder and source, the seed) and the
caller's `Inspect` function (by reference, so workers import infralab), and what comes back is the
`SimResult`. Workers read the files a config names (traces) at the same absolute paths as this
process, so on a cluster of several machines those paths must be shared (docs/explain.md, "search on
a Ray cluster").

The cluster: the one at `ray_address` (HOST:PORT, ray://HOST:PORT or "auto"), or a local one of
`workers` CPUs started for the pool and shut down after it. When this process is already connected
to Ray (a caller ran `ray.init`, e.g. with its own runtime_env) and names no address, that
connection is used and left open. Ray is an optional extra, imported only here and only when this backend is chosen.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from infralab.errors import InputError

if TYPE_CHECKING:
    from infralab.agent.sim_pool import Inspect, SimJob, SimResult

INSTALL_HINT = "install the extra: pip install 'infralab[ray]'"
ADDRESS_EXPECTED = "the address of a running Ray cluster: HOST:PORT (as `ray start --head` prints), ray://HOST:PORT or auto"
CONNECT_TIMEOUT_S = 5.0  # Ray itself retries an unreachable address for minutes before giving up


def import_ray() -> ModuleType:
    """The `ray` module, or one InputError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--backend ray", "ray is not installed", INSTALL_HINT) from None
    return ray


def check_reachable(address: str) -> None:
    """InputError unless a TCP connection to `address` opens within CONNECT_TIMEOUT_S ("auto" is
    left to Ray, which fails at once when no cluster runs on this machine)."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError("--ray-address", f"bad address {address!r}", ADDRESS_EXPECTED)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError("--ray-address", f"cannot reach a Ray cluster at {address!r} ({exc})",
                         ADDRESS_EXPECTED) from None


@contextlib.contextmanager
def ray_cluster(address: str | None, workers: int) -> Iterator[ModuleType]:
    """Ray, connected: to the cluster at `address`, or to a local one of `workers` CPUs started
    here and shut down on exit; without an address, an existing connection of this process is
    used as it is (and left open)."""
    ray = import_ray()
    if ray.is_initialized():
        if address is not None:
            raise InputError("--ray-address", f"{address!r}, but this process is already connected to Ray",
                             "no address when the caller has run ray.init itself")
        yield ray
        return
    # Workers' output stays in Ray's session logs: a failed job comes back as its exception.
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        ray.init(address="local", num_cpus=workers, include_dashboard=False, **quiet)
    else:
        check_reachable(address)
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            # A cluster started with token authentication also wants its token here (docs/explain.md).
            raise InputError("--ray-address", f"cannot join a Ray cluster at {address!r} ({exc})",
                             ADDRESS_EXPECTED + "; with token authentication, RAY_AUTH_MODE=token and the "
                             "cluster's token (RAY_AUTH_TOKEN or ~/.ray/auth_token)") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def run_on_ray(
    jobs: Sequence[SimJob],
    workers: int,
    inspect: Inspect | None,
    on_done: Callable[[], None] | None,
    address: str | None,
) -> list[SimResult]:
    """Every job's result, in job order, from one Ray task per job (see the module docstring).
    The first failure cancels the tasks not finished yet and is raised as the job raised it."""
    from infralab.agent.sim_pool import run_one

    if not jobs:
        return []
    with ray_cluster(address, workers) as ray:
        task = ray.remote(num_cpus=1)(run_one)
        refs = [task.remote(job, inspect) for job in jobs]
        order = {ref: i for i, ref in enumerate(refs)}
        results: list[SimResult | None] = [None] * len(jobs)
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    results[order[ref]] = ray.get(ref)
                    if on_done is not None:
                        on_done()
        except ray.exceptions.RayTaskError as exc:
            _cancel(ray, pending)
            # The job's own exception (an InputError stays one line); Ray's text keeps the remote traceback.
            raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from exc
        except BaseException:
            _cancel(ray, pending)
            raise
    return [r for r in results if r is not None]


def _cancel(ray: ModuleType, refs: Sequence[object]) -> None:
    for ref in refs:
        ray.cancel(ref)
