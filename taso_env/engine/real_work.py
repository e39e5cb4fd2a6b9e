"""The real-work ledger: counts, per process, where real work happens, and forbids it
where it must not happen (dream training).

Real work is anything that touches the real substitution environment:

    "candidates"   the C++ engine enumerating a graph's candidates (Graph.candidates)
    "apply"        the C++ engine applying a rewrite (Graph.apply)
    "successors"   the C++ engine looking one rewrite ahead (search.successors: one per
                   successor graph built and partly enumerated)
    "step"         the C++ engine applying a rewrite and enumerating the new graph near
                   it (search.step)
    "search"       a C++ search baseline (te.search)
    "env_init"     constructing a GraphRewriteEnv
    "env_step"     a GraphRewriteEnv step (also the steps' own candidates/apply calls)
    "env_reset"    a GraphRewriteEnv reset

The engine and the environment call `record(kind)` where the work happens. Inside
`forbidden(reason)` any such call raises `RealWorkForbiddenError` before the work is
done, so code that must be pure (the controller's dream training) fails loudly if it
touches the real environment; `counts()` and `snapshot()` let callers report how much
real work they did.

    with real_work.forbidden("dream training"):
        train_in_the_dream()          # a Graph.candidates() call in here raises
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

from taso_env.errors import TasoEnvError

KINDS = ("candidates", "apply", "successors", "step", "search", "env_init", "env_step", "env_reset")

_counts: Counter = Counter()
_forbidden: list[str] = []  # reasons, innermost last
_lock = threading.Lock()


class RealWorkForbiddenError(TasoEnvError, RuntimeError):
    """Real environment work (engine call, env construction or step) inside a region
    that must not do any, e.g. the dream."""


def record(kind: str, n: int = 1) -> None:
    """Counts `n` units of real work of `kind`; raises inside a `forbidden` region."""
    if kind not in KINDS:
        raise ValueError(f"unknown real-work kind {kind!r}; one of {KINDS}")
    if _forbidden:
        raise RealWorkForbiddenError(
            f"real work {kind!r} is forbidden here ({_forbidden[-1]}): the real environment was touched")
    with _lock:
        _counts[kind] += n


def counts() -> dict[str, int]:
    """Real work done in this process so far, by kind (every kind present)."""
    with _lock:
        return {k: int(_counts[k]) for k in KINDS}


def since(before: dict[str, int]) -> dict[str, int]:
    """Real work done since `before` (a `counts()` snapshot), by kind."""
    now = counts()
    return {k: now[k] - before.get(k, 0) for k in KINDS}


def enumerations(work: dict[str, int]) -> int:
    """The graphs whose candidates `work` (a `since()` or `counts()` result) enumerated,
    whole or near a rewrite: what an agent's optimisation time is spent on."""
    return work["candidates"] + work["successors"] + work["step"]


@contextlib.contextmanager
def forbidden(reason: str):
    """A region where any real work raises RealWorkForbiddenError."""
    _forbidden.append(reason)
    try:
        yield
    finally:
        _forbidden.pop()


def is_forbidden() -> bool:
    return bool(_forbidden)


__all__ = ["KINDS", "RealWorkForbiddenError", "counts", "forbidden", "is_forbidden", "record", "since"]
