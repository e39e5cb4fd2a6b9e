"""The rollout file: episodes of GraphRewriteEnv in HDF5, its writer and its reader.

This module is the one place that says what the file holds; `RolloutReader` checks it.

Files (crash-safe appending)::

    runs/<name>/rollouts.h5                     index: root attributes + one HDF5
                                                external link per episode
    runs/<name>/rollouts.h5.episodes/
        episode_<i>.h5                          one complete episode per file

`rollouts.h5["episode_<i>"]` is an external link to the root group of
`rollouts.h5.episodes/episode_<i>.h5` (path relative to the index's folder), so plain
h5py sees one file with one group per episode. Every file is written under a temporary
name and `os.replace`d into place: an episode file is complete or absent, the index is
the old one or the new one. The index holds links only and is rebuilt from the episode
folder whenever a writer opens the run (leftover temporary files are deleted then), so a
process killed at any moment loses at most the episodes it had not written yet.

Root attributes of the index: `format_version`, `rule_set_hash`, `n_rules`,
`cost_model`, `horizon`, `max_nodes`, `max_edges`, `max_locations`, `node_dim`,
`edge_dim`, `env_config` (EnvConfig as JSON), `collect_config` (JSON or "") and
`collect_backend` (what collected the episodes last: "in-process", "multiprocessing (2
workers)", "ray 2.60.0 (local, 2 workers)"; absent in older files).

One episode of T steps (field names follow Minari; step t's observation and infos are
those *before* action t, index T is the final state)::

    observations/nodes      float32 [sum_n, NODE_DIM]   real node rows of obs 0..T, stacked
    observations/edges      float32 [sum_e, EDGE_DIM]   real edge rows, stacked
    observations/senders    int32   [sum_e]   producer node of each edge, local to its step
    observations/receivers  int32   [sum_e]   consumer node, local to its step
    observations/globals    float32 [T+1, GLOBAL_DIM]
    observations/n_node     int32   [T+1]     rows of step t = cumsum offsets of n_node
    observations/n_edge     int32   [T+1]
    actions                 int32   [T, 2]    (xfer, location); xfer == n_rules is stop
    rewards                 float32 [T]
    terminations            bool    [T]
    truncations             bool    [T]
    infos/xfer_mask         bool    [T+1, n_rules+1]
    infos/location_counts   int16   [T+1, n_rules+1]  valid locations per rule; the
                                              location_mask row is True for the first count
    infos/cost              float32 [T+1]     estimated cost (ms) under the env's cost model
    infos/invalid_action    bool    [T+1]
    infos/top_rewards       float32 [T+1, n_rules+1, L]  each rule's L best rewards, best
                                              first, -inf where fewer (info["top_rewards"];
                                              absent from files written before it existed)

Episode attributes: `id`, `seed`, `graph`, `total_steps` (T), `horizon`,
`rule_set_hash`, `n_rules`, `cost_model`, `policy`, `episode_return`, `initial_cost`,
`final_cost`. Observation fields are gzip-compressed. Re-padded to the index's maxima an
observation equals what the env returned (taso_env/env/features.py), bit for bit.

Batches handed to learners follow graph_nets' GraphsTuple convention: `nodes`/`edges`
concatenated over graphs, `senders`/`receivers` offset by the cumulative node count,
`n_node`/`n_edge` per graph, `globals` stacked.
"""

from taso_env.env.rollouts.format import (
    EPISODE_ATTRS,
    EPISODE_FILE,
    FORMAT_VERSION,
    GRAPH_FIELDS,
    INFO_FIELDS,
    STEP_FIELDS,
    EncodedEpisode,
    EpisodeData,
    RolloutBusyError,
    RolloutFormatError,
    RolloutMeta,
    RuleSetMismatchError,
    batch_graphs,
    encode_episode,
    pack_episode,
)
from taso_env.env.rollouts.reader import RolloutReader
from taso_env.env.rollouts.untrusted_open import CorruptRolloutError
from taso_env.env.rollouts.writer import RolloutWriter

__all__ = [
    "EPISODE_ATTRS",
    "EPISODE_FILE",
    "CorruptRolloutError",
    "EncodedEpisode",
    "EpisodeData",
    "FORMAT_VERSION",
    "GRAPH_FIELDS",
    "INFO_FIELDS",
    "RolloutBusyError",
    "RolloutFormatError",
    "RolloutMeta",
    "RuleSetMismatchError",
    "STEP_FIELDS",
    "batch_graphs",
    "encode_episode",
    "pack_episode",
    "RolloutReader",
    "RolloutWriter",
]
