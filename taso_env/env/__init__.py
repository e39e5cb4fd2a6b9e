"""The substitution environment and its data: `rewrite_env` (GraphRewriteEnv, the
Gymnasium env), `features` (the observation format), `policies` and `episode` (the one
episode loop), `rollouts` (the rollout file) and `collection` (parallel collection)."""
