"""Shared fixtures: small deterministic shapes so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import pytest
import torch

from lextra.data.shards import DATA_CACHE_ENV
from lextra.devices import DEVICE_ENV
from lextra.positions import SCHEMES, HeadDims, build_scheme
from lextra.registry import load_env_plugins

# `LEXTRA_PLUGINS=mine.py pytest tests` runs every test parametrised over a registry on the plugin's classes too
load_env_plugins()

# Set for the whole session as well (the fixture below only adjusts it per test), so that environments copied at
# import time for subprocesses carry it too.
os.environ[DEVICE_ENV] = "cpu"
# Corpus specs that runs prepare (`lextra.data.shards.cached_shards`) go to a folder of this session, removed at
# exit, not to the user's cache; set at import time too, for the subprocesses tests start.
os.environ[DATA_CACHE_ENV] = tempfile.mkdtemp(prefix="lextra-data-cache-")
atexit.register(shutil.rmtree, os.environ[DATA_CACHE_ENV], ignore_errors=True)

ALL_SCHEMES = SCHEMES.names()
RELATIVE_SCHEMES = [n for n in ALL_SCHEMES if SCHEMES.get(n).relative]
BIAS_SCHEMES = [n for n in ALL_SCHEMES if SCHEMES.get(n).has_bias]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _cpu_unless_marked_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests not marked `gpu` mean the CPU: `--device auto` (every command's default, and `train()`'s) resolves to
    it through LEXTRA_DEVICE, in this process and in the subprocesses it starts, so `make test` computes the same
    on a GPU host; tests marked `gpu` see the machine as it is."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv(DEVICE_ENV, "cpu")
    else:
        monkeypatch.delenv(DEVICE_ENV, raising=False)


def load_script(path: Path, name: str) -> ModuleType:
    """A benchmark or experiment script (not a package module) imported from its file."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_scheme(name: str, n_heads: int = 4, head_dim: int = 16, train_len: int = 64, **options):
    """A scheme with random (not zero) learned parameters, so tests see their effect."""
    scheme = build_scheme(name, HeadDims(n_heads, head_dim, n_heads * head_dim, train_len), **options)
    with torch.no_grad():
        for param in scheme.parameters():
            if param.dim() > 0 and param.numel() > 1:
                param.normal_(0.0, 0.5)
    return scheme


def qkv(scheme, length: int, batch: int = 2, key_length: int | None = None, grad: bool = False):
    """Random q, k, v shaped for `scheme` (its key width may differ, as in CoCA)."""
    H, D = scheme.dims.n_heads, scheme.dims.head_dim
    Lk = length if key_length is None else key_length
    q = torch.randn(batch, H, length, D, requires_grad=grad)
    k = torch.randn(batch, H, Lk, scheme.key_dim(), requires_grad=grad)
    v = torch.randn(batch, H, Lk, D, requires_grad=grad)
    return q, k, v


#: keys of saved results that hold settings passed through as given, not results
SETTING_KEYS = ("config", "eval", "train", "key")


def with_intervals(shape):
    """An evaluation's `json_shape` as written before intervals, with what evaluations now add: each point's
    interval and per-document sums, the span and the documents' sources, a retrieval cell's answer NLL (wherever an
    evaluation lies in it)."""
    if isinstance(shape, dict):
        shape = {key: with_intervals(value) for key, value in shape.items()}
        if {"ppl", "nll", "tokens"} <= set(shape):
            shape.update(low="float", high="float", nll_by_document=["float"], tokens_by_document=["int"])
        if "stitched" in shape:
            shape.update(span="int", sources=[{"index": "int", "offset": "int", "sha1": "str"}])
        if {"exact", "rank1", "mean_rank", "examples"} <= set(shape):  # a retrieval cell: its answers' NLL
            shape.update(answer_nll="float")
    return shape


def json_shape(data):
    """The structure of saved JSON: keys (numeric ones, such as lengths, depths, seeds, as '#'; settings left out)
    and value types, lists by their first element; results of the same kind agree on it whatever their numbers."""
    if isinstance(data, dict):
        return {
            ("#" if key.replace(".", "", 1).isdigit() else key): json_shape(value)
            for key, value in data.items()
            if key not in SETTING_KEYS
        }
    if isinstance(data, list):
        return [json_shape(value) for value in data[:1]]
    return type(data).__name__


@pytest.fixture(scope="module")
def tiny_hf_base(tmp_path_factory):
    """A tiny random Llama folder (max_position_embeddings 32, head_dim 8; test_hf_finetune's `tiny_llama`)."""
    from test_hf_finetune import tiny_llama

    folder = tmp_path_factory.mktemp("base") / "llama"
    tiny_llama().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_hf_corpus(tmp_path_factory) -> str:
    """A folder of eight short text documents (a corpus path) for fine-tuning runs of a few steps."""
    folder = tmp_path_factory.mktemp("corpus")
    for i in range(8):
        (folder / f"doc{i}.txt").write_text(f"{i} the quick brown fox jumps over the lazy dog; " * 30)
    return str(folder)
