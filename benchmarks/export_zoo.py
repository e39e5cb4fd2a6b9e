#!/usr/bin/env python
"""Exports the model zoo of data/models/ (run on the GPU machine, which has torch,
torchvision and transformers; nothing is downloaded).

    python benchmarks/export_zoo.py OUT_DIR [--models resnet18 swin_t gpt2 ...]

Models: any torchvision classification model by its torchvision name (MODELS are the
shipped ones), a torchvision segmentation or video model of SEGMENTATION / VIDEO, or a
Hugging Face model of TRANSFORMERS built from its default config (`input_ids`,
`attention_mask` [1, 128], or an image / audio input; eager attention, "<name>@sdpa" for SDPA).
"<name>:dynamic" exports with symbolic batch (and sequence) dims (`export_dynamic`).
Every model: random init (torchvision `weights=None`), ±1e-3 uniform noise on every
float parameter and buffer (BatchNorm running_var positive only) so that no two
initializers are equal, eval mode, batch 1, TorchScript exporter (opset 17, constant
folding, which folds BatchNorm into Conv; the dynamo exporter, opset 18, for ViT, the
transformers and any model whose TorchScript graph is not fully static),
then the float weights stripped: each weight initializer becomes a graph input of the
same name, dtype and shape with `doc_string = "weight: initializer data stripped"`
(integer / bool initializers, float scalars and float constants of at most 16 distinct
values keep their data: KEEP_LIMIT), and the per-node metadata goes. The full export is
checked against PyTorch in onnxruntime before stripping; the stripped file passes the
ONNX checker and strict
shape inference. Prints one JSON line per model.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import sys

MODELS = {
    "resnet18": ("resnet18", 224), "resnet50": ("resnet50", 224), "squeezenet1_1": ("squeezenet1_1", 224),
    "inception_v3": ("inception_v3", 299), "mobilenet_v2": ("mobilenet_v2", 224),
    "mobilenet_v3_large": ("mobilenet_v3_large", 224), "efficientnet_b0": ("efficientnet_b0", 224),
    "densenet121": ("densenet121", 224), "convnext_tiny": ("convnext_tiny", 224), "vit_b_16": ("vit_b_16", 224),
}

_SMALL = {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4,
          "vocab_size": 1000}
_SMALL_IMAGE = {k: v for k, v in _SMALL.items() if k != "vocab_size"}  # image encoders have no vocabulary

#: Hugging Face models built from their default configuration (nothing downloaded):
#: name -> (transformers model class, config class, sequence length, config overrides).
TRANSFORMERS = {
    "bert_base": ("BertModel", "BertConfig", 128, {}), "distilbert": ("DistilBertModel", "DistilBertConfig", 128, {}),
    "roberta_base": ("RobertaModel", "RobertaConfig", 128, {}), "gpt2": ("GPT2Model", "GPT2Config", 128, {}),
    # AlbertConfig()'s defaults are ALBERT-xxlarge; these are albert-base-v2's sizes
    "albert_base": ("AlbertModel", "AlbertConfig", 128,
                    {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}),
    "electra": ("ElectraModel", "ElectraConfig", 128, {}), "t5_small_encoder": ("T5EncoderModel", "T5Config", 128, {}),
    # decoder-only and relative-position families, small (hidden 256, 2 layers) for test fixtures
    "llama_small": ("LlamaModel", "LlamaConfig", 128, {**_SMALL, "num_key_value_heads": 2, "intermediate_size": 688}),
    "qwen2_small": ("Qwen2Model", "Qwen2Config", 128, {**_SMALL, "num_key_value_heads": 2, "intermediate_size": 688}),
    "deberta_v2_small": ("DebertaV2Model", "DebertaV2Config", 128, _SMALL),
    "mpnet": ("MPNetModel", "MPNetConfig", 128, _SMALL),
    "squeezebert": ("SqueezeBertModel", "SqueezeBertConfig", 128, {**_SMALL, "embedding_size": 256}),
    "gemma_small": ("GemmaModel", "GemmaConfig", 128, {**_SMALL, "num_key_value_heads": 1, "head_dim": 64}),
    "falcon_small": ("FalconModel", "FalconConfig", 128, {"hidden_size": 256, "num_hidden_layers": 2,
                                                         "num_attention_heads": 4, "vocab_size": 1000}),
    # image and audio encoders: "image" takes `pixel_values` [1, 3, S, S] (S: the config's
    # image_size), "audio" `input_values` [1, 16000] (one second at 16 kHz)
    "mobilevit": ("MobileViTModel", "MobileViTConfig", "image", {}),
    "wav2vec2_small": ("Wav2Vec2Model", "Wav2Vec2Config", "audio", {**_SMALL, "vocab_size": 32}),
    # encoder-decoders: "seq2seq" takes a 64-token source and a 16-token target
    # (`decoder_input_ids`); exported through their first output, the decoder's states
    "t5_small_seq2seq": ("T5Model", "T5Config", "seq2seq", {"d_model": 256, "d_ff": 1024, "num_layers": 2,
                                                          "num_heads": 4, "vocab_size": 1000}),
    "bart_small": ("BartModel", "BartConfig", "seq2seq", {"d_model": 256, "encoder_layers": 2, "decoder_layers": 2,
                                                         "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                                                         "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024,
                                                         "vocab_size": 1000}),
    # families no shipped file covers, small, for checking the importer on exports it was
    # not built on (docs/measured/2026-11-28_unseen_exports.md)
    "opt_small": ("OPTModel", "OPTConfig", 128, {"hidden_size": 256, "ffn_dim": 1024, "num_hidden_layers": 2,
                                                 "num_attention_heads": 4, "vocab_size": 1000,
                                                 "word_embed_proj_dim": 256}),
    "bloom_small": ("BloomModel", "BloomConfig", 128, {"hidden_size": 256, "n_layer": 2, "n_head": 4,
                                                       "vocab_size": 1000}),
    "gpt_neo_small": ("GPTNeoModel", "GPTNeoConfig", 128, {"hidden_size": 256, "num_layers": 2, "num_heads": 4,
                                                           "attention_types": [[["global", "local"], 1]],
                                                           "vocab_size": 1000}),
    "mistral_small": ("MistralModel", "MistralConfig", 128, {**_SMALL, "num_key_value_heads": 2,
                                                             "intermediate_size": 688}),
    "phi_small": ("PhiModel", "PhiConfig", 128, _SMALL),
    "qwen3_small": ("Qwen3Model", "Qwen3Config", 128, {**_SMALL, "num_key_value_heads": 2, "head_dim": 64,
                                                       "intermediate_size": 688}),
    "xlm_roberta_small": ("XLMRobertaModel", "XLMRobertaConfig", 128, _SMALL),
    "convbert_small": ("ConvBertModel", "ConvBertConfig", 128, {**_SMALL, "embedding_size": 256}),
    "mobilebert_small": ("MobileBertModel", "MobileBertConfig", 128, {"num_hidden_layers": 2, "vocab_size": 1000}),
    "megatron_bert_small": ("MegatronBertModel", "MegatronBertConfig", 128, _SMALL),
    "roformer_small": ("RoFormerModel", "RoFormerConfig", 128, {**_SMALL, "embedding_size": 256}),
    "vit_hf_small": ("ViTModel", "ViTConfig", "image", _SMALL_IMAGE),
    "deit_small": ("DeiTModel", "DeiTConfig", "image", _SMALL_IMAGE),
    "beit_small": ("BeitModel", "BeitConfig", "image", _SMALL_IMAGE),
    "dinov2_small": ("Dinov2Model", "Dinov2Config", "image", {**_SMALL_IMAGE, "image_size": 224}),
    "clip_vision_small": ("CLIPVisionModel", "CLIPVisionConfig", "image", _SMALL_IMAGE),
    "convnextv2_tiny": ("ConvNextV2Model", "ConvNextV2Config", "image", {}),
    "swin_hf_tiny": ("SwinModel", "SwinConfig", "image", {}),
    "resnet_hf": ("ResNetModel", "ResNetConfig", "image", {}),
    "segformer_b0": ("SegformerModel", "SegformerConfig", "image", {}),
    "hubert_small": ("HubertModel", "HubertConfig", "audio", {**_SMALL, "vocab_size": 32}),
}

#: transformers 5 families whose forward reads its own ModelOutput (with return_dict off it
#: fails: "'tuple' object has no attribute 'last_hidden_state'")
NEEDS_MODEL_OUTPUT = {"opt_small", "dinov2_small", "swin_hf_tiny", "convnextv2_tiny", "hubert_small"}

#: torchvision models beyond classification, by task: segmentation (the main output,
#: out["out"], of a 224x224 image) and video classification (8 frames of 112x112).
SEGMENTATION = {"fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"}
VIDEO = {"r3d_18", "mc3_18", "r2plus1d_18"}


def image_size(name: str) -> int:
    """Input side of a torchvision classifier: its entry in MODELS, else 299 for Inception, 224."""
    return MODELS[name][1] if name in MODELS else (299 if name.startswith("inception") else 224)


def add_noise(model, seed: int = 0) -> None:
    """±1e-3 uniform noise on every float parameter and buffer (running_var: positive), so
    that no two initializers are equal (the exporter would merge equal ones)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.dtype.is_floating_point:
                continue
            noise = (torch.rand(t.shape, generator=g) * 2 - 1) * 1e-3
            t.add_(noise.abs() if pname.endswith("running_var") else noise)


def make(name: str):
    """(model, example input) of a zoo name: any torchvision classification model (random
    init) with an image batch of one, or a TRANSFORMERS name with a dict of int64
    `input_ids` / `attention_mask` (all ones) of batch one."""
    import torch

    name = name.removesuffix(":dynamic")
    if name.partition("@")[0] in TRANSFORMERS:
        return make_transformer(name)
    import torchvision

    fn = MODELS[name][0] if name in MODELS else name
    kwargs = {"weights": None}
    if name.startswith("inception") or name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=False)
    if name in SEGMENTATION:
        kwargs.update(weights_backbone=None, aux_loss=False)
    model = torchvision.models.get_model(fn, **kwargs).eval()
    add_noise(model)
    g = torch.Generator().manual_seed(1)
    if name in SEGMENTATION:
        return MainOutput(model).eval(), torch.randn(1, 3, 224, 224, generator=g)
    if name in VIDEO:
        return model, torch.randn(1, 3, 8, 112, 112, generator=g)
    size = image_size(name)
    return model, torch.randn(1, 3, size, size, generator=g)


def MainOutput(model, key="out"):  # noqa: N802 (a module class made where torch is imported)
    """`model` returning only its main output: out[key] (a segmentation model's
    out["out"], an encoder-decoder's first output, 0)."""
    import torch

    class Main(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            out = self.inner(*args, **kwargs)
            return out.to_tuple()[key] if isinstance(key, int) and hasattr(out, "to_tuple") else out[key]

    return Main(model)


def make_transformer(name: str):
    """A TRANSFORMERS model; "<name>@sdpa" asks for its default SDPA attention instead of
    the eager one (the exports differ)."""
    import torch
    import transformers

    base, _, attention = name.partition("@")
    cls_name, config_cls, seq, overrides = TRANSFORMERS[base]
    config = getattr(transformers, config_cls)(**overrides)
    # (transformers 5's encoder-decoders, and the families of NEEDS_MODEL_OUTPUT, need their
    # ModelOutput: its first field, last_hidden_state, is what is exported)
    config.return_dict = seq == "seq2seq" or base in NEEDS_MODEL_OUTPUT
    config.use_cache = False  # a KV cache output does not export (GPT-2)
    cls = getattr(transformers, cls_name)
    model = cls._from_config(config, attn_implementation=attention or "eager").eval()
    add_noise(model)
    if config.return_dict:
        model = MainOutput(model, key=0).eval()
    g = torch.Generator().manual_seed(1)
    if seq == "image":
        size = getattr(config, "image_size", 224)
        size = size if isinstance(size, int) else 224
        return model, {"pixel_values": torch.randn(1, 3, size, size, generator=g)}
    if seq == "audio":
        return model, {"input_values": torch.randn(1, 16000, generator=g)}
    vocab = int(getattr(config, "vocab_size", 30000))
    if seq == "seq2seq":
        inputs = {"input_ids": torch.randint(0, vocab, (1, 64), generator=g),
                  "attention_mask": torch.ones(1, 64, dtype=torch.long),
                  "decoder_input_ids": torch.randint(0, vocab, (1, 16), generator=g)}
        return model, inputs
    return model, {"input_ids": torch.randint(0, vocab, (1, seq), generator=g),
                   "attention_mask": torch.ones(1, seq, dtype=torch.long)}


def feeds_of(x) -> dict:
    """The ONNX feeds of an example input as `make` returns it."""
    return {k: v.numpy() for k, v in x.items()} if isinstance(x, dict) else {"input": x.numpy()}


def torch_outputs(model, x):
    """The model's first output on `x` (a tensor)."""
    out = model(**x) if isinstance(x, dict) else model(x)
    return out[0] if isinstance(out, (tuple, list)) else out


# The TorchScript exporter leaves ViT's class-token Expand with a dynamic dimension; the
# dynamo exporter gives a fully static graph (opset 18). Transformers go through dynamo
# too; any other model falls back to it when the TorchScript graph is not fully static.
DYNAMO = {"vit_b_16"}


def _static(proto) -> bool:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    except Exception:
        return False
    g = inferred.graph
    known = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    for node in g.node:
        for out in node.output:
            v = known.get(out)
            if v is None or not v.type.tensor_type.HasField("shape"):
                return False
            if any(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim):
                return False
    return True


def export_dynamic(model, x):
    """The TorchScript export with dynamic axes, as user scripts (and optimum) make them:
    batch (and sequence) dims symbolic, so shapes flow through Shape / Gather / Concat."""
    import onnx
    import torch

    if isinstance(x, dict):
        names, args = list(x), tuple(x.values())
        axes = {k: {0: "batch", 1: "sequence"} for k in names}
    else:
        names, args, axes = ["input"], (x,), {"input": {0: "batch"}}
    buf = io.BytesIO()
    torch.onnx.export(model, args, buf, input_names=names, opset_version=17, do_constant_folding=True,
                      dynamo=False, dynamic_axes=axes)
    return onnx.load_from_string(buf.getvalue())


def export_full(name: str, model, x):
    """The ONNX export of `model` on input `x`, weights kept (a ModelProto); "<name>:dynamic"
    gives export_dynamic's."""
    import onnx
    import torch

    if name.endswith(":dynamic"):
        return export_dynamic(model, x)
    args, kwargs = ((), x) if isinstance(x, dict) else ((x,), {})
    if name not in DYNAMO and not isinstance(x, dict):
        buf = io.BytesIO()
        try:
            torch.onnx.export(model, args, buf, input_names=["input"], output_names=["output"], opset_version=17,
                              do_constant_folding=True, dynamo=False)
            proto = onnx.load_from_string(buf.getvalue())
            if _static(proto):
                return proto
        except Exception:  # fall through to the dynamo exporter
            pass
    names = {} if kwargs else {"input_names": ["input"], "output_names": ["output"]}
    try:
        prog = torch.onnx.export(model, args, kwargs=kwargs or None, opset_version=18, dynamo=True, optimize=True,
                                 **names)
    except Exception:  # torch.export refuses some Hugging Face models (BART, T5): the TorchScript exporter
        if not kwargs:
            raise
        return export_by_position(model, kwargs)
    return prog.model_proto


def export_by_position(model, x: dict):
    """The TorchScript export of a model taking the dict `x` as keyword arguments, its
    inputs passed by position (opset 17, constant folding)."""
    import onnx
    import torch

    class Positional(torch.nn.Module):
        def __init__(self, inner, names):
            super().__init__()
            self.inner, self.names = inner, names

        def forward(self, *args):
            return self.inner(**dict(zip(self.names, args)))

    buf = io.BytesIO()
    torch.onnx.export(Positional(model, list(x)), tuple(x.values()), buf, input_names=list(x), opset_version=17,
                      do_constant_folding=True, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


#: Initializers the stripped file keeps with their data (at most this many elements):
#: integer / bool ones (shapes, axes, indices, masks), scalars, and float constants of at
#: most 16 distinct values (attention-mask fills); every other float initializer is a
#: learned weight (the ±1e-3 noise makes its values distinct) and loses its data.
KEEP_LIMIT = 1 << 20


def strip(model_bytes: bytes, source: str):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load_from_string(model_bytes)
    keep, inputs = [], []
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.size <= KEEP_LIMIT and (arr.dtype.kind in "iub" or arr.size == 1 or len(np.unique(arr)) <= 16):
            keep.append(init)
            continue
        vi = helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        vi.doc_string = "weight: initializer data stripped"
        inputs.append(vi)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    m.graph.input.extend(inputs)
    del m.metadata_props[:]
    for node in m.graph.node:  # the dynamo exporter's per-node stack traces: most of the file
        del node.metadata_props[:]
        node.doc_string = ""
    for k, v in (("weights_stripped", "true"), ("source", source)):
        m.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(m, full_check=True)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    np.random.seed(0)
    return m


def export(name: str, out_dir: str) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    model, x = make(name)
    full = export_full(name, model, x).SerializeToString()
    sess = ort.InferenceSession(full, providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds_of(x))[0]
    with torch.no_grad():
        want = torch_outputs(model, x).numpy()
    diff = float(np.abs(got - want).max())
    base = name.removesuffix(":dynamic").partition("@")[0]
    source = (f"transformers.{TRANSFORMERS[base][0]}({TRANSFORMERS[base][1]}()) random init" if base in TRANSFORMERS
              else f"torchvision.models.{MODELS[base][0] if base in MODELS else base}(weights=None)")
    m = strip(full, f"{source}, torch {torch.__version__}")
    path = os.path.join(out_dir, f"{name.replace('@', '_').replace(':', '_')}.onnx")
    onnx.save(m, path)
    hist = collections.Counter(n.op_type for n in m.graph.node)
    params = sum(int(np.prod([d.dim_value for d in i.type.tensor_type.shape.dim]))
                 for i in m.graph.input if i.doc_string.startswith("weight"))
    return {"model": name, "ort_vs_torch_max_abs": diff, "nodes": len(m.graph.node),
            "weight_inputs": sum(1 for i in m.graph.input if i.doc_string.startswith("weight")),
            "params_m": round(params / 1e6, 2), "bytes": os.path.getsize(path), "ops": dict(hist.most_common())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    ok = True
    for name in args.models:
        try:
            print(json.dumps(export(name, args.out_dir)), flush=True)
        except Exception as e:  # report and go on with the other models
            ok = False
            print(json.dumps({"model": name, "error": f"{type(e).__name__}: {e}"}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
