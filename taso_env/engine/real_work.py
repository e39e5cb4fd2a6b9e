"""The real-work ledger: counts, per process, where real work happens, and forbids it
where it must not happen (dream training).

Real work is anything that touches the real substitution environment or its cost model.
The engine and the environment call `record(kind)` where it happens; the raw kinds:

    "enumeration"   a graph's candidates enumerated whole, as an Enumeration
                    (search.enumeration: an environment's reset)
    "step"          a rewrite applied and the new graph enumerated near it (search.step:
                    an environment step, or a look-ahead's successor_enumeration)
    "step_entered"  an environment step entering the graph a "step" built (in that env
                    step or in a look-ahead before it)
    "successors"    one rewrite looked ahead of without entering it (search.successors:
                    one per successor graph built and partly enumerated)
    "apply"         a rewrite applied outside an environment (Graph.apply, search.apply)
    "candidates"    a priced candidate list outside an Enumeration (Graph.candidates,
                    search.candidates, a rule set's own candidates / candidate_effects)
    "cost"          a graph priced by a cost model (Graph.cost)
    "op_costs"      a graph's ops priced by a cost model (Graph.op_costs)
    "search"        a C++ search baseline (te.search; its expansions are its own figure)
    "env_init"      constructing a GraphRewriteEnv
    "env_step"      a GraphRewriteEnv step (stop and invalid actions included)
    "env_reset"     a GraphRewriteEnv reset

`ledger(work)` folds them into what every evaluation table shows (`LEDGER`):

    env_steps          environment steps ("env_step")
    enumerations       graphs whose candidates were enumerated, whole or near a rewrite:
                       "enumeration" + "step" + "successors" (what optimisation time is
                       spent on; an env step is one, a look-ahead's successor one more)
    successor_lookups  successor graphs built or scored that no environment step entered:
                       "successors" + "apply" + "step" - "step_entered" (these are
                       enumerations too, apply aside: the columns overlap)
    cost_queries       pricing outside an enumeration: "candidates" + "cost" + "op_costs"

Inside `forbidden(reason)` any `record` raises `RealWorkForbiddenError` before the work
is done, so code that must be pure (the controller's dream training) fails loudly if it
touches the real environment or its cost model; `counts()` and `since()` let callers
report how much real work they did.

    with real_work.forbidden("dream training"):
        train_in_the_dream()          # a Graph.cost() or Graph.candidates() call in here raises
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

from taso_env.errors import TasoEnvError

KINDS = ("enumeration", "step", "step_entered", "successors", "apply", "candidates", "cost", "op_costs", "search",
         "env_init", "env_step", "env_reset")
LEDGER = ("env_steps", "enumerations", "successor_lookups", "cost_queries")

_KNOWN = frozenset(KINDS)
_counts: Counter = Counter()
_forbidden: list[str] = []  # reasons, innermost last
_lock = threading.Lock()


class RealWorkForbiddenError(TasoEnvError, RuntimeError):
    """Real work (an engine call, a cost-model query, env construction or step) inside a
    region that must not do any, e.g. the dream."""


def record(kind: str, n: int = 1) -> None:
    """Counts `n` units of real work of `kind`; raises inside a `forbidden` region.

    Raises:
        RealWorkForbiddenError: inside `forbidden` (nothing is counted).
        ValueError: `kind` is not one of KINDS.
    """
    if kind not in _KNOWN:
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
    return work["enumeration"] + work["step"] + work["successors"]


def successor_lookups(work: dict[str, int]) -> int:
    """The successor graphs `work` built or scored that no environment step entered."""
    return work["successors"] + work["apply"] + work["step"] - work["step_entered"]


def cost_queries(work: dict[str, int]) -> int:
    """The cost-model queries of `work` outside an enumeration: graph costs, op costs and
    priced candidate lists."""
    return work["candidates"] + work["cost"] + work["op_costs"]


def ledger(work: dict[str, int]) -> dict[str, int]:
    """`work` (a `since()` or `counts()` result) as the ledger's columns (`LEDGER`)."""
    return {"env_steps": work["env_step"], "enumerations": enumerations(work),
            "successor_lookups": successor_lookups(work), "cost_queries": cost_queries(work)}


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


__all__ = ["KINDS", "LEDGER", "RealWorkForbiddenError", "cost_queries", "counts", "enumerations", "forbidden",
           "is_forbidden", "ledger", "record", "since", "successor_lookups"]
