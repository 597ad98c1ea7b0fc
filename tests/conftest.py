"""Shared fixtures: small graphs and topologies reused across engine tests."""

from __future__ import annotations

import pytest

from taps_core.cluster.presets import preset
from taps_core.models import build_graph, load_model_config


@pytest.fixture(scope="session")
def gpt2_small():
    """GPT-2 with 3 layers and a small batch: quick to plan, still has a repeated block."""
    from dataclasses import replace

    cfg = replace(load_model_config("gpt2"), num_hidden_layers=3, batch_size=8, seq_length=256)
    return build_graph(cfg)


@pytest.fixture(scope="session")
def mlp():
    return build_graph(load_model_config("mlp-2layer"))


@pytest.fixture(scope="session")
def dgx1():
    return preset("dgx-a100:1")


@pytest.fixture(scope="session")
def dgx2():
    return preset("dgx-a100:2")
