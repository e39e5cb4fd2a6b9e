"""Held-out metrics of V and M, each next to a baseline that knows only the training set.

V (per observation of held-out episodes, z = mu):
    recon_<part>_mse / baseline_<part>_mse   cost, histogram, counts: mean squared error of
        the reconstruction and of predicting the training mean; <part>_error_ratio is
        their ratio (< 1: V beats the mean)
    mask_accuracy / baseline_mask_accuracy   per (graph, xfer); baseline: the training
        majority of each xfer; mask_row_accuracy: all R xfers of a graph right
    cost_ratio_mae                           |predicted - true| of current / initial cost
    kl                                       KL(q(z | graph) || N(0, I)), nats per graph

M (per real step of held-out episodes, z drawn once from V's posteriors, fixed seed):
    z_nll                  -log p(z_{t+1}) per latent dimension (nats)
    next_z_mse / copy_baseline_mse   mixture mean vs z_{t+1}; baseline z_{t+1} = z_t
    reward_r2              1 - MSE / MSE of predicting the training mean reward
    done_bce / mask_bce    cross-entropies of the done and (per xfer) mask heads
    done_accuracy / baseline_done_accuracy   baseline: the training majority
    mask_accuracy          per (step, xfer); mask_row_accuracy: whole rows right;
    baseline_mask_accuracy the training majority of each xfer
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from worldmodel.configs import slot_reward_error
from worldmodel.dataset import EncodedEpisodes, EpisodeSet

_VAE_PARTS = ("cost", "histogram", "counts")


def r2_score(predicted: np.ndarray, true: np.ndarray, baseline: float) -> float:
    """1 - MSE(predicted) / MSE(baseline constant); nan when the baseline is exact."""
    base = float(np.mean(np.square(true - baseline)))
    return 1.0 - float(np.mean(np.square(predicted - true))) / base if base > 0 else float("nan")


def training_means(train: EpisodeSet) -> dict[str, np.ndarray]:
    """Per-field means of V's targets over the training observations."""
    return {k: v.mean(axis=0) for k, v in train.targets.items()}


def vae_metrics(encode_decode: Callable, held_out: EpisodeSet, means: dict[str, np.ndarray], *,
                batch_size: int = 256, max_observations: int = 5000, seed: int = 0) -> dict:
    """V's held-out metrics (module docstring).

    Args:
        encode_decode: batch dict -> (mu [B, Z], log_sigma [B, Z], decode(mu) dict), numpy.
        held_out: the held-out episodes.
        means: training_means(train).
        max_observations: evaluate a fixed random subset of at most this many.

    Returns:
        {metric: float}, plus "_cost_ratio" (predicted, true) arrays for a plot.
    """
    n = held_out.num_observations
    chosen = np.sort(np.random.default_rng(seed).choice(n, min(n, max_observations), replace=False))
    parts = {k: [] for k in (*_VAE_PARTS, "mask_logits", "kl")}
    for s in range(0, len(chosen), batch_size):
        idx = chosen[s:s + batch_size]
        mu, log_sigma, recon = encode_decode(held_out.graphs(idx))
        for k in (*_VAE_PARTS, "mask_logits"):
            parts[k].append(np.asarray(recon[k]))
        parts["kl"].append(0.5 * np.sum(mu ** 2 + np.exp(2 * log_sigma) - 1 - 2 * log_sigma, axis=1))
    pred = {k: np.concatenate(v) for k, v in parts.items()}
    true = held_out.target_batch(chosen)
    out = {"observations": float(len(chosen)), "kl": float(pred["kl"].mean())}
    for k in _VAE_PARTS:
        mse = float(np.mean(np.square(pred[k] - true[k])))
        base = float(np.mean(np.square(means[k][None] - true[k])))
        out.update({f"recon_{k}_mse": mse, f"baseline_{k}_mse": base,
                    f"{k}_error_ratio": mse / base if base > 0 else float("nan")})
    right = (pred["mask_logits"] > 0) == (true["mask"] > 0.5)
    out["mask_accuracy"] = float(np.mean(right))
    out["mask_row_accuracy"] = float(np.mean(np.all(right, axis=1)))
    out["baseline_mask_accuracy"] = float(np.mean((means["mask"][None] > 0.5) == (true["mask"] > 0.5)))
    out["cost_ratio_mae"] = float(np.mean(np.abs(pred["cost"][:, 0] - true["cost"][:, 0])))
    out["_cost_ratio"] = (pred["cost"][:, 0], true["cost"][:, 0])
    return out


def transition_baselines(train: EncodedEpisodes) -> dict[str, np.ndarray]:
    """What M's baselines predict, from the training episodes: the mean reward, the
    majority done and each xfer's majority next-mask."""
    real = train.mask > 0
    return {"reward": np.float32(train.rewards[real].mean()),
            "done": np.float32(train.dones[real].mean() > 0.5),
            "mask": (train.next_masks[real].mean(axis=0) > 0.5)}


def mdnrnn_metrics(predict: Callable, held_out: EncodedEpisodes, baselines: dict, *,
                   batch_size: int = 64, seed: int = 0, reward_scale: float = 1.0,
                   slot_reward_loss: str = "squared", changed_weight: float = 1.0) -> dict:
    """M's held-out metrics (module docstring).

    Args:
        predict: M's batch (EncodedEpisodes.batch) -> {"z_nll" [B, T], "z_mean" [B, T, Z],
            "reward" [B, T], "done_logit" [B, T], "mask_logits" [B, T, R]}, numpy.
        held_out: the held-out episodes, encoded.
        baselines: transition_baselines(train).
        reward_scale, slot_reward_loss: M's (MDNRNNConfig), for "slot_loss_se", the loss's
            candidate-reward term; changed_weight: its weight of a changed slot.

    Returns:
        {metric: float}, plus "_reward" (predicted, true) arrays for a plot.
    """
    z = held_out.sample_z(np.random.default_rng(seed))
    got = {k: [] for k in ("z_nll", "z_se", "copy_se", "reward", "true_reward", "done", "true_done",
                           "mask", "true_mask", "done_bce", "mask_bce", "slot_bce", "slot_se", "slot",
                           "true_slot", "slot_expected_se", "slot_loss_se", "slot_count", "changed_bce", "changed",
                           "true_changed")}
    for s in range(0, held_out.num_episodes, batch_size):
        batch = held_out.batch(np.arange(s, min(s + batch_size, held_out.num_episodes)), z)
        out = predict(batch)
        real = batch["mask"] > 0
        got["z_nll"].append(out["z_nll"][real])
        got["z_se"].append(np.mean(np.square(out["z_mean"] - batch["next_z"]), -1)[real])
        got["copy_se"].append(np.mean(np.square(batch["z"] - batch["next_z"]), -1)[real])
        got["reward"].append(out["reward"][real])
        got["true_reward"].append(batch["rewards"][real])
        got["done_bce"].append(_bce(out["done_logit"][real], batch["dones"][real]))
        got["mask_bce"].append(_bce(out["mask_logits"][real], batch["next_masks"][real]).mean(-1))
        got["done"].append(out["done_logit"][real] > 0)
        got["true_done"].append(batch["dones"][real] > 0.5)
        got["mask"].append(out["mask_logits"][real] > 0)
        got["true_mask"].append(batch["next_masks"][real] > 0.5)
        top = batch["next_top_rewards"][real]
        exists = np.isfinite(top)
        got["slot_bce"].append(_bce(out["slot_logits"][real], exists.astype(np.float32)).mean((-2, -1)))
        got["slot_se"].append(np.square(out["slot_rewards"][real] - top)[exists])
        got["slot_expected_se"].append(np.square(out["slot_rewards"][real] - np.where(exists, top, 0.0)).sum((-2, -1)))
        got["slot_loss_se"].append(np.square(slot_reward_error(
            out["slot_rewards"][real], np.where(exists, top, 0.0), exists, reward_scale, slot_reward_loss,
            np.arcsinh, np.where)).sum((-2, -1)))
        got["slot_count"].append(exists.sum((-2, -1)))
        if "changed_logits" in out:
            true_changed = batch["next_changed"][real] > 0.5
            got["changed_bce"].append(_bce(out["changed_logits"][real], true_changed.astype(np.float32),
                                           changed_weight).mean((-2, -1)))
            got["changed"].append(out["changed_logits"][real] > 0)
            got["true_changed"].append(true_changed)
        got["slot"].append((out["slot_logits"][real] > 0).reshape(len(top), -1))
        got["true_slot"].append(exists.reshape(len(top), -1))
    g = {k: np.concatenate(v) for k, v in got.items() if v}
    return {
        "steps": float(len(g["reward"])),
        "z_nll": float(g["z_nll"].mean()),
        "next_z_mse": float(g["z_se"].mean()),
        "copy_baseline_mse": float(g["copy_se"].mean()),
        "reward_mse": float(np.mean(np.square(g["reward"] - g["true_reward"]))),
        "baseline_reward_mse": float(np.mean(np.square(baselines["reward"] - g["true_reward"]))),
        "reward_r2": r2_score(g["reward"], g["true_reward"], float(baselines["reward"])),
        "done_bce": float(g["done_bce"].mean()),
        "mask_bce": float(g["mask_bce"].mean()),
        "done_accuracy": float(np.mean(g["done"] == g["true_done"])),
        "baseline_done_accuracy": float(np.mean(bool(baselines["done"]) == g["true_done"])),
        "mask_accuracy": float(np.mean(g["mask"] == g["true_mask"])),
        "mask_row_accuracy": float(np.mean(np.all(g["mask"] == g["true_mask"], axis=1))),
        "baseline_mask_accuracy": float(np.mean(baselines["mask"][None] == g["true_mask"])),
        "slot_bce": float(g["slot_bce"].mean()),
        "slot_reward_mse": float(g["slot_se"].mean()) if g["slot_se"].size else 0.0,
        # the loss's term: squared error of E[reward * 1(exists)] over all slots, per real slot
        "slot_expected_se": float(g["slot_expected_se"].sum() / max(g["slot_count"].sum(), 1)),
        # the same in the loss's units (MDNRNNConfig.slot_reward_loss), what MDNRNN.loss sums
        "slot_loss_se": float(g["slot_loss_se"].sum() / max(g["slot_count"].sum(), 1)),
        # of the candidate slots that exist after a step, how many M predicts (recall)
        "slot_recall": float(np.mean(g["slot"][g["true_slot"]])) if g["true_slot"].any() else 1.0,
        "_reward": (g["reward"], g["true_reward"]),
        **_changed_metrics(g),
    }


def _changed_metrics(g: dict) -> dict:
    """M's prediction of which candidate slots a step changes (carry_candidates): the
    BCE, the share of steps whose changed slots it gets exactly right, and the share of
    changed slots it finds; {} where the predictions lack changed_logits."""
    if "changed_bce" not in g:
        return {}
    changed, true = g["changed"], g["true_changed"]
    return {"changed_bce": float(g["changed_bce"].mean()),
            "changed_row_accuracy": float(np.mean(np.all(changed == true, axis=(-2, -1)))),
            "changed_recall": float(np.mean(changed[true])) if true.any() else 1.0}


def mdnrnn_loss(metrics: dict, config) -> float:
    """M's training objective (MDNRNN.loss) on held-out steps, from mdnrnn_metrics."""
    reward = metrics["reward_mse"] / (config.reward_scale or 1.0) ** 2
    slot_reward = metrics["slot_loss_se"]
    return float(metrics["z_nll"] + config.reward_weight * reward + config.done_weight * metrics["done_bce"]
                 + config.mask_weight * metrics["mask_bce"]
                 + config.candidate_weight * (metrics["slot_bce"] + slot_reward
                                              + (metrics["changed_bce"] if config.carry_candidates else 0.0)))


def _bce(logits: np.ndarray, labels: np.ndarray, pos_weight: float = 1.0) -> np.ndarray:
    """Elementwise sigmoid cross-entropy (as tf.nn.sigmoid_cross_entropy_with_logits; with
    pos_weight, as tf.nn.weighted_cross_entropy_with_logits)."""
    log_sigmoid_neg = np.maximum(logits, 0) + np.log1p(np.exp(-np.abs(logits)))  # -log(1 - sigmoid)
    return (1 - labels) * log_sigmoid_neg + pos_weight * labels * (log_sigmoid_neg - logits)


def public(metrics: dict) -> dict:
    """The metrics without the plotting arrays (keys starting with "_")."""
    return {k: v for k, v in metrics.items() if not k.startswith("_")}
