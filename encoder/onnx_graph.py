"""The encoder as an ONNX Runtime graph with int8 linear layers: the fast CPU path.

On a CPU the network's time is its matrix products (about 3/4 of it in fp32, bench
``encode_speed``), and torch runs those at the CPU's fp32 (or bf16) peak. This module
rebuilds the same network from the loaded weights as an ONNX graph of ONNX Runtime's
fused operators, its linear layers in int8:

- embeddings × √d + the sinusoidal positions, as :meth:`TransformerEncoder.forward`;
- per block: LayerNorm → ``QAttention``: the q, k, v projections as one int8 product and
  the attention (fp32, the padding given as each text's length) in one operator, over the
  texts padded to the longest → output projection → residual → LayerNorm → fc1 → GELU →
  fc2 → residual. It replaced the product over the packed tokens, their copy to the padded
  layout, a Split and ``MultiHeadAttention`` (which the per-token and fp32 graphs keep;
  written out as MatMul, Softmax and MatMul per head, that ran 0.89-0.96 x as fast): the
  graph ran 1.09-1.20 x as fast at batches of 1-256 texts, with 1 or 2 threads, the vectors
  the same to 1e-6 (AMD EPYC, 2 cores, ``bench/graph_ab.py``, two runs);
- the final LayerNorm and the attention pooling, folded: the learned query times the key
  projection is one vector u, a token's score h·u (the key bias's term is the same for
  every token of a text and cancels in the softmax), kept in fp32 like the pooled sum.

**int8, per token.** Each linear layer's input is quantised token by token: a token's
own max |x| is 127 steps around 128 (uint8), so a text's vector does not depend on the
other texts of its batch (ONNX Runtime's dynamic quantisation takes one scale for the
whole batch: there a text's vector moved by up to 0.009 a coordinate with its
batch-mates). Weights are int8 with a scale per output feature (the product's column
scale; one scale per tensor left the vectors twice as far from fp32: cosine mean 0.99971
against 0.99988 on the test texts), in a 7-bit range (|w| ≤ 64): CPUs without VNNI
(AVX2, plain AVX-512) sum uint8 × int8 pairs into int16 lanes, which 8-bit weights can
overflow (2 × 255 × 127); 2 × 255 × 64 cannot. Run under QEMU as an AVX2-only CPU
(``qemu-x86_64 -cpu Haswell``, so ONNX Runtime took its AVX2 kernels), 64 sentences came
out within cosine 0.99997 of the AVX-512 VNNI vectors (the fp32 operators round a little
differently; ``bench/avx2_qemu.py``, with QAttention). On a real AVX2-only CPU (AMD EPYC,
Zen 2) 2,000 sentences came out within cosine 0.9997 of torch's fp32 vectors, as on
AVX-512 (``bench/encode_speed.py``). Nothing is written to disk: the graph is built in
memory at load.

**Activation ranges, calibrated.** By default (``QKV_ONNX_ACTIVATIONS`` unset or
``static``) each linear layer's input has one fixed range instead: the largest max |x| its
tokens reached on 64 passages of the Python documentation (``encoder/calibration.txt.gz``,
PSF licence) run through the per-token graph when the graph is built (:func:`calibrate`,
about 0.4 s of the load on 2 cores); a value beyond it saturates. A text's vector still
does not depend on its batch-mates. Each product then needs one QuantizeLinear before it
and its bias after, where the per-token range took seven operators more. The ranges are
narrow: on 1,000 Reuters sentences the largest max |x| a token reached was 1.5-3 x the
median token's in every layer, so one range loses little resolution. ``bench/encode_speed.py``
(AMD EPYC, 2 cores, five alternating rounds): 2,553 sentences/s against 2,157 per token
(1.18 x), cosine to the torch vectors min 0.9997 (per token 0.9999); ``bench/encoder_dev.py
--backends onnx`` with each: dev mean 1.249 against 1.248 x BM25, the nine dev collections
0.903 both, STS-B dev 0.816 both. With each range widened by 1.25 x (a scratch run, not
kept) the cosine fell (min 0.998): the wider steps cost more than the rare clipping they
avoid. ``token`` keeps the per-token ranges.

**GELU** in the int8 graph is ``FastGelu`` (the tanh approximation, its bias fused); the
network was trained with the exact (erf) one, which the fp32 graph keeps. On 2,000 Reuters
sentences (2 cores, Intel AVX-512 VNNI) the graph ran 2-6 % faster, the vectors' cosine to
fp32 the same to 1e-6, as the int8 rounding dominates; the dev sets' nDCG@10 and Spearman
moved by at most 0.0007 (``bench/encoder_dev.py --backends onnx``, before and after).

The vectors are not bit-identical to torch's: ``tests/encoder/test_onnx_graph.py`` holds
them close (cosine) to the fp32 network's and ``bench/encoder_dev.py --backends`` measures
retrieval and STS quality with each backend.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from encoder.model import TransformerEncoder

BACKENDS = ("torch", "onnx")
ACTIVATIONS = ("static", "token")  # calibrated ranges (the default); a range per token
W_LEVELS = 64  # weights in -64..64: 2 × 255 × 64 fits the int16 pair sums of AVX2
A_LEVELS = 127  # a token's activations in 128 ± 127 (uint8, symmetric around 128)
A_ZERO = 128
GRAPH_VERSION = 4  # bumped when the graph changes what it costs (2: FastGelu, 3: static
# activation ranges, 4: QAttention), so a cached backend choice (backend_pick) is timed again
CALIBRATION = Path(__file__).with_name("calibration.txt.gz")


class Defaults:
    """The process's defaults, set once at its edge from the settings
    (``QKV_ENCODER_BACKEND``, ``QKV_ONNX_ACTIVATIONS``: :func:`wiring.runtime.use`); an
    argument given to a function here wins over them."""

    backend: str | None = None  # None: picked by pick_backend
    activations: str = "static"


def use_activations(mode: str) -> None:
    """Set the process's activation ranges (``static`` or ``token``); a ``ValueError``
    naming ``QKV_ONNX_ACTIVATIONS`` for another value."""
    if mode not in ACTIVATIONS:
        raise ValueError(f"QKV_ONNX_ACTIVATIONS must be static or token, not {mode!r}")
    Defaults.activations = mode


def onnx_available() -> bool:
    """Whether ``onnx`` and ``onnxruntime`` can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def supports(config: Any) -> bool:
    """Whether :func:`build_graph` builds an encoder of this architecture (``dot``
    pooling; the ``additive`` scoring is left to torch)."""
    return bool(config.pooling == "dot")


def pick_backend(name: str | None, device_type: str, config: Any = None) -> str:
    """``name`` if given, else the process's default (``QKV_ENCODER_BACKEND``), else
    ``onnx`` on a CPU where ONNX Runtime is installed and the graph covers ``config`` (when
    given), ``torch`` otherwise (CUDA keeps torch's bf16 path). ``onnx`` asked for on CUDA,
    without ONNX Runtime or for an architecture the graph does not cover is a
    ``ValueError``."""
    covered = config is None or supports(config)
    name = name or Defaults.backend or None
    if name is None:
        return "onnx" if device_type == "cpu" and onnx_available() and covered else "torch"
    if name not in BACKENDS:
        raise ValueError(f"unknown encoder backend {name!r}; valid: {', '.join(BACKENDS)}")
    if name == "onnx" and device_type != "cpu":
        raise ValueError(f"the onnx encoder backend runs on the CPU, not {device_type}")
    if name == "onnx" and not onnx_available():
        raise ValueError("the onnx encoder backend needs the onnx and onnxruntime packages")
    if name == "onnx" and not covered:
        raise ValueError(f"the onnx backend pools with 'dot' scoring only, not "
                         f"{config.pooling!r}")
    return name


def activations_mode() -> str:
    """``static`` (calibrated ranges, the default) or ``token`` (the process's default:
    ``QKV_ONNX_ACTIVATIONS``, :func:`use_activations`)."""
    return Defaults.activations


def calibration_texts() -> list[str]:
    """The texts the activation ranges are calibrated on (module doc)."""
    with gzip.open(CALIBRATION, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def calibrate(model: TransformerEncoder, seqs: Sequence[Sequence[int]]) -> dict[str, float]:
    """Each int8 linear layer's largest input max |x| over the tokens of ``seqs`` (token id
    lists), run through the per-token graph: the ranges :func:`build_graph` fixes."""
    import onnxruntime as ort

    proto = build_graph(model, True, ranges_out=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.log_severity_level = os.cpu_count() or 1, 3
    session = ort.InferenceSession(proto.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs() if o.name.endswith(".amax")]
    ranges: dict[str, float] = {}
    for i in range(0, len(seqs), 32):
        for name, value in zip(names, session.run(names, pack(seqs[i:i + 32])), strict=True):
            layer = name.removesuffix(".amax")
            ranges[layer] = max(ranges.get(layer, 0.0), float(value.max()))
    return ranges


def build_graph(model: TransformerEncoder, int8: bool = True,
                ranges: dict[str, float] | None = None, ranges_out: bool = False) -> Any:
    """The ONNX graph (an ``onnx.ModelProto``) of ``model``'s inference forward, its
    linear layers int8 unless ``int8`` is false (then the same function as torch's, up to
    float rounding). Only ``dot`` pooling is built (:func:`supports`). ``ranges``: each
    linear layer's fixed input range (:func:`calibrate`; per token where not given);
    ``ranges_out``: the per-token ranges are outputs too (``NAME.amax``, for calibrating).

    The batch runs packed (:func:`pack`): the texts' N tokens one after another, so the
    products and the feed-forward cost what the real tokens cost; only attention and the
    pooling see the texts padded to the longest, T (as ``TransformerEncoder.forward_packed``).
    Inputs: ``ids`` (N,) int64, ``positions`` (N,) int64 each token's place in its text,
    ``lengths`` (B,) int32, ``pad_index`` (B, T) int64 the token at each padded place (N:
    none), ``back_index`` (N,) int64 each token's padded place, b·T + t. Outputs: ``vec``
    (B, d) the pooled vectors before normalisation, ``alpha`` (B, T) the pooling weights
    (0 on padding)."""
    from onnx import TensorProto, helper, numpy_helper

    c = model.config
    if not supports(c):
        raise ValueError(f"the onnx backend pools with 'dot' scoring only, not {c.pooling!r}")
    d = c.d_model
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    inits: list[Any] = []
    nodes: list[Any] = []
    f32 = np.float32

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, ins: list[str], out: str, domain: str | None = None, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, domain=domain, **attrs))
        return out

    def int8_weight(w: np.ndarray, prefix: str) -> tuple[str, str]:
        """W (N, K) as int8 (K, N) with one scale per output (module doc)."""
        w_scale = np.maximum(np.abs(w).max(axis=1), 1e-12) / W_LEVELS
        w_q = np.clip(np.rint(w / w_scale[:, None]), -W_LEVELS, W_LEVELS).astype(np.int8)
        return init(f"{prefix}.wq", w_q.T), init(f"{prefix}.wscale", w_scale.astype(f32))

    def quantise(x: str, out: str) -> tuple[str, str]:
        """x in uint8 at ``out``'s calibrated range: (its scale, x quantised)."""
        assert ranges is not None
        a_scale = init(f"{out}.ascale", np.array(max(ranges[out], 1e-12) / A_LEVELS, f32))
        return a_scale, node("QuantizeLinear", [x, a_scale, "a_zero"], f"{out}.xq")

    def linear(x: str, prefix: str, out: str, weight: np.ndarray | None = None,
               with_bias: bool = True) -> str:
        """x @ W.T (+ b); with ``int8`` x is quantised per token (each token's own max |x|
        is 127 steps, so no token's result depends on another's) and W per output."""
        w = sd[f"{prefix}.weight"] if weight is None else weight  # (N, K)
        b = init(f"{prefix}.b", sd[f"{prefix}.bias"].astype(f32)) if with_bias else ""
        if not int8:
            mm = node("MatMul", [x, init(f"{prefix}.w", w.T.astype(f32))], f"{out}.mm")
            return node("Add", [mm, b], out) if b else mm
        w_q_name, w_scale_name = int8_weight(w, prefix)
        if ranges is not None and out in ranges:  # one calibrated range (module doc)
            a_scale, x_q = quantise(x, out)
            y = node("MatMulIntegerToFloat", [x_q, w_q_name, a_scale, w_scale_name, "a_zero"],
                     f"{out}.mm", domain="com.microsoft")
            return node("Add", [y, b], out) if b else y
        # each token's own range: max |x| over its features, from two reductions
        a_max = node("Max", [node("ReduceMax", [x], f"{out}.hi", axes=[-1], keepdims=1),
                             node("Neg", [node("ReduceMin", [x], f"{out}.lo0", axes=[-1],
                                               keepdims=1)], f"{out}.lo"), "tiny"],
                     f"{out}.amax")
        x_unit = node("Mul", [x, node("Reciprocal", [a_max], f"{out}.inv")], f"{out}.xu")
        x_q = node("QuantizeLinear", [x_unit, "a_scale", "a_zero"], f"{out}.xq")
        y = node("MatMulIntegerToFloat", [x_q, w_q_name, "a_scale", w_scale_name, "a_zero"],
                 f"{out}.mm", domain="com.microsoft")
        y = node("Mul", [y, a_max], f"{out}.y")
        return node("Add", [y, b], out) if b else y

    def layer_norm(x: str, prefix: str, out: str) -> str:
        w = init(f"{prefix}.w", sd[f"{prefix}.weight"])
        b = init(f"{prefix}.b", sd[f"{prefix}.bias"])
        return node("LayerNormalization", [x, w, b], out, axis=-1, epsilon=1e-5)

    if int8:
        init("tiny", np.array(1e-12, f32))
        init("a_scale", np.array(1.0 / A_LEVELS, f32))
        init("a_zero", np.array(A_ZERO, np.uint8))
        init("w_zero", np.array(0, np.int8))
    init("embed", (sd["embed.weight"] * d**0.5).astype(f32))
    init("pos", model.positions.table.numpy().astype(f32))
    x = node("Add", [node("Gather", ["embed", "ids"], "tok"),
                     node("Gather", ["pos", "positions"], "pos_t")], "x0")
    init("split3", np.array([d, d, d], np.int64))
    init("flat_d", np.array([-1, d], np.int64))
    init("one", np.array([1], np.int64))  # padded places read the last token: see padded
    node("Min", ["pad_index", node("Sub", [node("Shape", ["ids"], "n_ids"), "one"], "n_last")],
         "pad_real")

    def padded(flat: str, out: str) -> str:
        """(N, k) → (B, T, k), a real token's row at the padded places (attention masks them
        by the lengths and drops their rows, pooling weighs them 0): no zero row copied in."""
        return node("Gather", [flat, "pad_real"], out)

    for i in range(c.n_layers):
        p = f"blocks.{i}"
        h = layer_norm(x, f"{p}.ln1", f"{p}.h1")
        qkv_w = np.concatenate([sd[f"{p}.attn.q_proj.weight"], sd[f"{p}.attn.kv_proj.weight"]])
        qkv_b = init(f"{p}.qkv.b", np.concatenate([sd[f"{p}.attn.q_proj.bias"],
                                                    sd[f"{p}.attn.kv_proj.bias"]]).astype(f32))
        if int8 and ranges is not None and f"{p}.qkv" in ranges:  # one operator (module doc)
            a_scale, x_q = quantise(h, f"{p}.qkv")
            w_q, w_scale = int8_weight(qkv_w, f"{p}.qkv")
            a = node("QAttention", [padded(x_q, f"{p}.qkv_bt"), w_q, qkv_b, a_scale, w_scale,
                                    "lengths", "a_zero", "w_zero"],
                     f"{p}.att_bt", domain="com.microsoft", num_heads=c.n_heads)
        else:
            qkv = linear(h, f"{p}.qkv", f"{p}.qkv", qkv_w, with_bias=False)
            nodes.append(helper.make_node("Split", [padded(qkv, f"{p}.qkv_bt"), "split3"],
                                          [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split",
                                          axis=-1))
            a = node("MultiHeadAttention", [f"{p}.q", f"{p}.k", f"{p}.v", qkv_b, "lengths"],
                     f"{p}.att_bt", domain="com.microsoft", num_heads=c.n_heads)
        a = node("Gather", [node("Reshape", [a, "flat_d"], f"{p}.att_flat"), "back_index"],
                 f"{p}.att")
        x = node("Add", [x, linear(a, f"{p}.attn.out_proj", f"{p}.o")], f"{p}.x1")
        h = layer_norm(x, f"{p}.ln2", f"{p}.h2")
        if int8:  # the tanh approximation, its bias fused (module doc)
            g = node("FastGelu", [linear(h, f"{p}.ffn.fc1", f"{p}.f1", with_bias=False),
                                  init(f"{p}.ffn.fc1.b", sd[f"{p}.ffn.fc1.bias"].astype(f32))],
                     f"{p}.g", domain="com.microsoft")
        else:
            g = node("Gelu", [linear(h, f"{p}.ffn.fc1", f"{p}.f1")], f"{p}.g",
                     domain="com.microsoft")
        x = node("Add", [x, linear(g, f"{p}.ffn.fc2", f"{p}.f2")], f"{p}.x2")
    h = layer_norm(x, "ln_f", "hf")
    u = sd["pool.key.weight"].T @ sd["pool.query"] / np.sqrt(d)  # (d,)
    init("pool.u", u.reshape(d, 1).astype(f32))
    init("axis1", np.array([1], np.int64))
    init("axis2", np.array([2], np.int64))
    init("none_score", np.array([[-1e9]], f32))  # padding: no weight after the softmax
    score = node("Concat", [node("MatMul", [h, "pool.u"], "pool_score"), "none_score"],
                 "pool_score.ext", axis=0)  # N: the padded places' row
    masked = node("Squeeze", [node("Gather", [score, "pad_index"], "pool_score_bt"), "axis2"],
                  "s_masked")
    alpha = node("Softmax", [masked], "alpha", axis=-1)
    pooled = node("MatMul", [node("Unsqueeze", [alpha, "axis1"], "alpha3"),
                             padded(h, "hf_bt")], "pool_sum")
    node("Squeeze", [pooled, "axis1"], "vec")
    amax = [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, ["n", 1])
            for n in nodes if n.output[0].endswith(".amax")] if ranges_out else []
    used = {name for n in nodes for name in n.input}  # those only the other graph kind uses
    graph = helper.make_graph(
        nodes, "qkv-encoder",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
         helper.make_tensor_value_info("positions", TensorProto.INT64, ["n"]),
         helper.make_tensor_value_info("lengths", TensorProto.INT32, ["b"]),
         helper.make_tensor_value_info("pad_index", TensorProto.INT64, ["b", "t"]),
         helper.make_tensor_value_info("back_index", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("vec", TensorProto.FLOAT, ["b", d]),
         helper.make_tensor_value_info("alpha", TensorProto.FLOAT, ["b", "t"]), *amax],
        [t for t in inits if t.name in used])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    proto.ir_version = 8
    return proto


def pack(seqs: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """The graph's inputs for a batch of token id lists (:func:`build_graph`)."""
    lengths = np.array([len(x) for x in seqs], np.int32)
    n, t = int(lengths.sum()), int(lengths.max())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    positions = np.arange(n) - np.repeat(starts, lengths)
    rows = np.repeat(np.arange(len(seqs)), lengths)
    pad_index = np.full((len(seqs), t), n, np.int64)
    pad_index[rows, positions] = np.arange(n)
    return {"ids": np.fromiter((i for x in seqs for i in x), np.int64, n),
            "positions": positions.astype(np.int64), "lengths": lengths,
            "pad_index": pad_index, "back_index": (rows * t + positions).astype(np.int64)}
