"""BERT-base encoder (Devlin et al., "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding", NAACL 2019), laid out as Hugging Face
`BertModel(BertConfig())` in eval mode, without the pooler and the attention mask.

Input "input_ids" int64 [1, 128] -> output "output" [1, 128, 768] (last hidden state).

Embeddings: Gather of the token ids from the word embeddings [30522, 768], plus a Gather
of the position ids 0..127 (an int64 weight) from the position embeddings [512, 768],
plus a Gather of the token type ids (all 0, an int64 weight) from the token type
embeddings [2, 768]; then LayerNorm (eps 1e-12).

Each of the 12 post-norm layers (hidden 768, 12 heads of 64, intermediate 3072):
Q, K and V as three separate MatMul + Add linears on the same input (deliberately
unmerged), Reshape [1, 128, 12, 64] + Transpose to [1, 12, 128, 64] (K to
[1, 12, 64, 128]), scores MatMul, Div by sqrt(64) (one scalar weight shared by all
layers), Softmax, context MatMul, Transpose + Reshape back, output linear, Add
residual, LayerNorm; FFN linear 3072 + Gelu (exact, erf) + linear 768, Add, LayerNorm.

96 MatMuls (8 per layer); 108,891,648 parameters (23,837,184 in the embeddings,
85,054,464 in the encoder; Hugging Face's 109,482,240 less the pooler's 590,592),
plus the scale scalar.
"""

from __future__ import annotations

import numpy as np

from taso_env import dtypes
from taso_env.engine.builder import GraphBuilder
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import attention_scale, post_norm_encoder_layer


@register("bert_base")
def bert_base(seq_len: int = 128, num_layers: int = 12, hidden: int = 768, num_heads: int = 12,
              intermediate: int = 3072, vocab_size: int = 30522, max_positions: int = 512,
              type_vocab_size: int = 2, batch_size: int = 1, seed: int | None = 0) -> Graph:
    """BERT-base encoder; `seed=None` builds a shape-only graph (the integer position
    and token type ids always have data)."""
    if seq_len > max_positions:
        raise ValueError(f"seq_len {seq_len} exceeds max_positions {max_positions}")
    b = GraphBuilder("bert_base", seed=seed)
    ids = b.input("input_ids", [batch_size, seq_len], dtypes.INT64)
    word = b.weight("embeddings.word_embeddings", [vocab_size, hidden])
    pos = b.weight("embeddings.position_embeddings", [max_positions, hidden])
    typ = b.weight("embeddings.token_type_embeddings", [type_vocab_size, hidden])
    pos_ids = b.weight("embeddings.position_ids", [1, seq_len], dtypes.INT64,
                       value=np.arange(seq_len, dtype=np.int64)[None])
    type_ids = b.weight("embeddings.token_type_ids", [1, seq_len], dtypes.INT64,
                        value=np.zeros((1, seq_len), np.int64))
    x = b.op("Gather", [word, ids], axis=0)
    x = b.add(x, b.op("Gather", [typ, type_ids], axis=0))
    x = b.add(x, b.op("Gather", [pos, pos_ids], axis=0))
    x = b.layer_norm(x, epsilon=1e-12, name="embeddings.ln")
    scale = attention_scale(b, hidden // num_heads)
    for i in range(num_layers):
        x = post_norm_encoder_layer(b, x, num_heads, intermediate, scale, epsilon=1e-12,
                                    name=f"encoder.layer{i}")
    b.output(x, "output")
    return b.build()
