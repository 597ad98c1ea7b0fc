"""Sample models: parameter counts match published sizes; configs load and validate."""

from __future__ import annotations

import json

import pytest

from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config, sample_names
from taps_core.models.config import config_from_dict

# published sizes: GPT-2 paper/HF (124M), BERT-large HF (335M), GPT-3 paper (175B),
# Llama 3 model cards (8.03B, 70.6B), Mixtral paper (46.7B), torchvision ResNet-50 (25.6M)
PUBLISHED = {
    "gpt2": 124.44e6,
    "bert-large": 335.14e6,
    "gpt3-175b": 175e9,
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9,
    "mixtral-8x7b": 46.7e9,
    "resnet50": 25.557e6,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name):
    got = build_graph(load_model_config(name)).num_parameters
    assert got == pytest.approx(PUBLISHED[name], rel=0.02)


def test_every_sample_builds_with_consistent_wiring():
    for name in sample_names():
        g = build_graph(load_model_config(name))
        assert g.ops and all(op.output in g.tensors for op in g.ops)
        assert g.digraph.number_of_nodes() == len(g.ops)


def test_teaching_mlp_is_two_linear_layers():
    g = build_graph(load_model_config("mlp-2layer"))
    assert [op.kind for op in g.ops] == ["matmul", "elementwise", "matmul"]
    assert [op.tp_role for op in g.ops] == ["column", None, "row"]


def test_hf_config_file_loads_from_path(tmp_path):
    # GPT-2's own config.json uses n_embd / n_layer / n_head
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 768,
                "n_layer": 12,
                "n_head": 12,
                "n_positions": 1024,
                "vocab_size": 50257,
                "architectures": ["GPT2LMHeadModel"],
            }
        )
    )
    g = build_graph(load_model_config(str(path)))
    assert g.num_parameters == build_graph(load_model_config("gpt2")).num_parameters
    assert g.num_layers == 12


def test_llama_uses_grouped_query_attention():
    g = build_graph(load_model_config("llama3-8b"))
    assert g.tensors["L0.attn.k"].shape[2] == 8  # kv heads
    assert g.tensors["L0.attn.q"].shape[2] == 32


def test_mixtral_routes_tokens_to_experts():
    g = build_graph(load_model_config("mixtral-8x7b"))
    kinds = {op.kind for op in g.ops}
    assert {"moe_dispatch", "moe_combine"} <= kinds
    assert g.tensors["L0.moe.gate.weight"].shape[0] == 8


@pytest.mark.parametrize(
    "data, field",
    [
        ({"hidden_size": 10}, "model_type"),
        ({"model_type": "t5"}, "model_type"),
        ({"model_type": "gpt2", "n_embd": 100, "n_head": 12}, "hidden_size"),
        (
            {
                "model_type": "llama",
                "num_attention_heads": 32,
                "num_key_value_heads": 5,
                "hidden_size": 4096,
            },
            "num_key_value_heads",
        ),
        ({"model_type": "gpt2", "batch_size": 0}, "batch_size"),
        ({"model_type": "gpt2", "dtype": "int3"}, "dtype"),
        ({"model_type": "gpt2", "n_layer": "12"}, "num_hidden_layers"),
    ],
)
def test_bad_config_names_the_field(data, field):
    with pytest.raises(InvalidInputError, match=field):
        config_from_dict(data)


def test_unknown_model_name_lists_samples():
    with pytest.raises(InvalidInputError, match="gpt2"):
        load_model_config("no-such-model")


def test_an_alias_key_is_named_as_written_in_errors():
    with pytest.raises(InvalidInputError, match=r"^n_layer \(num_hidden_layers\) must be"):
        config_from_dict({"model_type": "gpt2", "n_layer": -3})
    with pytest.raises(InvalidInputError, match=r"^num_hidden_layers must be"):
        config_from_dict({"model_type": "gpt2", "num_hidden_layers": -3})


def test_a_tied_weight_names_its_owner():
    # GPT-2's LM head reuses the embedding's weight: the embedding op holds it
    graph = build_graph(load_model_config("gpt2"))
    assert graph.tensors["lm_head.weight"].tied
    assert graph.tied_owner("lm_head.weight", "lm_head") == "embed"
    assert graph.tied_owner("lm_head.weight", "embed") is None  # nobody else reads it
