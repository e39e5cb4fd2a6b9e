"""Ray for rlflow's scale-out (the optional extra `pip install rlflow[ray]`): the one
module that imports Ray, and only when a `--ray` run asks for it.

    with ray_cluster("local", num_cpus=2) as cluster:   # a private Ray, 127.0.0.1 only
        ...                                             # Ray tasks; cluster.cpus, cluster.address
    with ray_cluster("10.0.0.5:6379") as cluster:      # join a running cluster
        ...

"local" starts a Ray instance owned by this process and stops it on exit. It listens on
the loopback interface only: Ray's own single-machine switch,
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (the default on macOS and Windows; Linux defaults
to 1), makes 127.0.0.1 the node's address, and Ray's GCS, raylet, workers and agents
then bind their ports to it. After the start every listening TCP socket of the Ray
processes is checked (Linux, /proc) and a non-loopback one stops the run with
RayClusterError, so a future Ray that binds wider fails loudly instead of exposing
ports. An address joins that cluster (`ray start --head` on one machine, `ray start
--address=...` on the others; every node needs rlflow installed) and only disconnects
on exit; an address on 127.0.0.1 (another process's local Ray) is joined through the
same switch. Ray's token authentication applies: a process joining by address needs
RAY_AUTH_MODE=token and the cluster's token (~/.ray/auth_token or RAY_AUTH_TOKEN).
When this process is already connected to Ray, that connection is used and left open
("local", "auto" or its own address; another address is refused).
A local Ray gets an object store of LOCAL_OBJECT_STORE_BYTES (episodes are small and
fetched at once) instead of 30% of the memory.

Workers import the rlflow this process imports. Ray puts the working folder of the
process that calls ray.init first on its workers' module path; run in a source checkout
of rlflow beside an installed rlflow, the workers would import the checkout's packages,
whose compiled modules are not built there (`cannot import name '_core' from partially
initialized module 'taso_env'`). Where the working folder holds such a copy
(`shadowing_packages`), ray.init runs in an empty temporary folder instead, kept until
the end of the block (a local Ray's processes work in it). Tasks that read paths run in
the driver's working folder (`working_folder`), so a relative path means on a worker
what it meant to the driver.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import ipaddress
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from taso_env.errors import ConfigError, TasoEnvError

LOCAL = "local"  # the address of `--ray` without a value
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20
PACKAGES = ("taso_env", "worldmodel", "controller", "tuner_agents", "rlflow")  # what a worker may import


class RayUnavailableError(ConfigError):
    """`--ray` was asked for but Ray is not installed."""


class RayClusterError(TasoEnvError, RuntimeError):
    """The Ray cluster cannot be started or reached, or a local one listens beyond loopback."""


def import_ray():
    """The `ray` module; RayUnavailableError naming the extra if it is not installed."""
    try:
        import ray
    except ImportError as err:
        raise RayUnavailableError(f"--ray needs Ray: pip install 'rlflow[ray]' ({err})") from None
    return ray


def ray_version() -> str:
    """The installed Ray's version without importing it ("" if absent)."""
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return ""


def describe(address: str, workers: int) -> str:
    """The backend as rollout files record it, e.g. "ray 2.60.0 (local 127.0.0.1, 2 workers)"."""
    where = "local 127.0.0.1" if address == LOCAL else address
    width = f"{workers} workers" if workers else "one task per cluster CPU"
    return f"ray {ray_version()} ({where}, {width})"


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this process is connected to."""

    address: str  # the GCS address (host:port)
    cpus: int  # CPUs of the whole cluster
    started: bool  # started by this process (and stopped on exit)


@contextmanager
def ray_cluster(address: str, *, num_cpus: int | None = None) -> Iterator[Cluster]:
    """Connects this process to Ray for the `with` block (see the module docstring).

    Args:
        address: LOCAL for a private loopback-only Ray, else what `ray.init(address=...)`
            takes (host:port, "auto", ray://host:port).
        num_cpus: CPUs of a local Ray (default: this machine's); ignored otherwise.

    Raises:
        RayUnavailableError: Ray is not installed.
        RayClusterError: the cluster cannot be started or reached, or a local one
            listens on a non-loopback address.
    """
    ray = import_ray()
    if ray.is_initialized():
        cluster = _cluster(ray, started=False)
        if address not in (LOCAL, "auto", cluster.address):
            raise RayClusterError(f"this process is connected to the Ray cluster at {cluster.address}; "
                                  f"it cannot also join {address!r}")
        yield cluster
        return
    if address != LOCAL:
        _check_reachable(address)
    spare = tempfile.mkdtemp(prefix="rlflow_ray_") if shadowing_packages(os.getcwd()) else None
    try:
        with working_folder(spare):  # ray.init records the folder as the workers' first import path
            if address == LOCAL:
                _start_local(ray, num_cpus)
            else:
                _join(ray, address)
        try:
            yield _cluster(ray, started=address == LOCAL)
        finally:
            ray.shutdown()
    finally:
        if spare:
            shutil.rmtree(spare, ignore_errors=True)


def shadowing_packages(folder: str | os.PathLike) -> list[str]:
    """The packages of rlflow that this process imports from elsewhere and `folder`
    holds another copy of (a source checkout's root, where rlflow is installed): those
    a process with `folder` first on its module path would import instead."""
    found = []
    for name in PACKAGES:
        copy = os.path.join(folder, name)
        if not os.path.isfile(os.path.join(copy, "__init__.py")):
            continue
        module = sys.modules.get(name)
        spec = module.__spec__ if module is not None else importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin and not os.path.samefile(os.path.dirname(origin), copy):
            found.append(name)
    return found


@contextmanager
def working_folder(folder: str | None) -> Iterator[None]:
    """Runs the block in `folder` and returns to the current working folder after it;
    a `folder` that is None or not on this machine (a node of a cluster without the
    driver's filesystem) leaves the working folder as it is."""
    if not folder or not os.path.isdir(folder):
        yield
        return
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _join(ray, address: str) -> None:
    """ray.init of the cluster at `address`; RayClusterError if that fails."""
    try:
        with _loopback_switch(on=_is_loopback_address(address)):
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as err:  # ConnectionError, ValueError, RuntimeError, ... from ray.init
        hint = "" if os.environ.get("RAY_AUTH_MODE") else \
            " (a cluster with token authentication, Ray's default, is joined with RAY_AUTH_MODE=token set)"
        raise RayClusterError(f"cannot join the Ray cluster at {address!r}: {err}{hint}") from None


def _cluster(ray, started: bool) -> Cluster:
    return Cluster(address=ray.get_runtime_context().gcs_address,
                   cpus=int(ray.cluster_resources().get("CPU", 0)), started=started)


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """RayClusterError at once if host:port (or ray://host:port) takes no connection;
    ray.init would retry for minutes."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():  # "auto" and the like: Ray resolves them
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise RayClusterError(f"cannot reach the Ray cluster at {address!r}: {err}") from None


def _is_loopback_address(address: str) -> bool:
    """host:port (or ray://host:port) on the loopback interface."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    try:
        return host == "localhost" or is_loopback(host)
    except ValueError:  # a host name, "auto"
        return False


@contextmanager
def _loopback_switch(on: bool = True) -> Iterator[None]:
    """Ray's single-machine mode while the block runs: 127.0.0.1 is this node's address.

    Ray reads the switch when it is imported (ray._private.ray_constants) and its
    processes read it from the environment: both are set for the block and restored
    after it, so a later ray.init(address=...) of this process is unaffected. A process
    joining a loopback-only cluster needs it too, or Ray rewrites 127.0.0.1 into the
    machine's network address."""
    if not on:
        yield
        return
    constants = sys.modules.get("ray._private.ray_constants")
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    saved_env = os.environ.get(LOOPBACK_SWITCH)
    os.environ[LOOPBACK_SWITCH] = "0"
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(LOOPBACK_SWITCH, None)
        else:
            os.environ[LOOPBACK_SWITCH] = saved_env


def _start_local(ray, num_cpus: int | None) -> None:
    """ray.init of a new loopback-only instance; RayClusterError if it listens wider."""
    try:
        with _loopback_switch():
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, logging_level=logging.WARNING,
                     log_to_driver=False)
    except Exception as err:
        raise RayClusterError(f"cannot start a local Ray: {err}") from None
    host = ray.get_runtime_context().gcs_address.rsplit(":", 1)[0]
    wide = non_loopback_listeners(descendants(os.getpid())) if sys.platform.startswith("linux") else []
    if host != "127.0.0.1" or wide:
        ray.shutdown()
        raise RayClusterError(f"the local Ray does not keep to 127.0.0.1 (GCS at {host}, listening "
                              f"beyond loopback: {wide}); give an address to run on a network")


def descendants(pid: int) -> list[int]:
    """The processes started by `pid`, at any depth (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket (IPv4 and IPv6) the processes
    `pids` hold (Linux /proc; processes that ended meanwhile are skipped)."""
    listening: dict[str, tuple[str, int]] = {}
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            host, port = fields[1].split(":")
            raw = bytes.fromhex(host)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.IPv6Address(raw) if v6 else ipaddress.IPv4Address(raw)
            listening[fields[9]] = (str(ip), int(port, 16))
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                found.append((pid, *listening[target[8:-1]]))
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or an IPv4-mapped loopback address (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def non_loopback_listeners(pids: list[int]) -> list[tuple[int, str, int]]:
    """The listening sockets of `pids` reachable from other machines."""
    return [s for s in listening_sockets(pids) if not is_loopback(s[1])]
