"""``plan --fixed-from``: a Megatron-LM argument list or a DeepSpeed config read as the
configuration ``--fixed`` prices; what it cannot price as written is refused in one line."""

from __future__ import annotations

import json

import pytest

from taps_core.cli.main import main
from taps_core.errors import InvalidInputError
from taps_core.export.framework_import import (
    fixed_from_deepspeed,
    fixed_from_megatron_args,
    model_flags,
)
from taps_core.models import load_model_config
from taps_core.search.fixed_config import FixedConfig

# Megatron-LM's GPT-3 175B run (Narayanan et al. 2021): TP 8, PP 16, full recomputation
MEGATRON_175B = """
# pretrain_gpt.py flags, as a launch script writes them
torchrun --nproc-per-node 8 pretrain_gpt.py \\
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \\
  --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \\
  --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 1536 \\
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \\
  --use-distributed-optimizer --sequence-parallel --bf16 --lr 6.0e-5 --clip-grad 1.0
"""


def _model(batch: int = 1536) -> dict[str, int]:
    return model_flags(load_model_config("gpt3-175b").with_workload(batch_size=batch,
                                                                     seq_length=2048))


def test_megatron_arguments_give_the_published_configuration():
    got = fixed_from_megatron_args(MEGATRON_175B, 1536, _model())
    assert got == FixedConfig(tp=8, pp=16, mbs=1, sp=True, recompute="full", zero=1)
    fsdp = fixed_from_megatron_args("--use-torch-fsdp2 --micro-batch-size 2")
    assert (fsdp.zero, fsdp.mbs, fsdp.tp) == (3, 2, 1)
    uneven = fixed_from_megatron_args(MEGATRON_175B.replace(
        "--bf16", "--decoder-first-pipeline-num-layers 5 --decoder-last-pipeline-num-layers 7 "
        "--bf16"), 1536, _model())
    assert (uneven.first, uneven.last) == (5, 7) and uneven.text().endswith("first=5,last=7")


@pytest.mark.parametrize("flags", ["--recompute-granularity selective", "--recompute-activations"])
def test_megatron_selective_recomputation_is_priced_as_selective(flags):
    """Megatron-LM's selective granularity (and its alias --recompute-activations) is the
    ``recompute=selective`` configuration."""
    text = MEGATRON_175B.replace(
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
        flags)
    got = fixed_from_megatron_args(text, 1536, _model())
    assert got == FixedConfig(tp=8, pp=16, mbs=1, sp=True, recompute="selective", zero=1)


@pytest.mark.parametrize("text,field", [
    ("--tensor-model-parallel-size 8 --no-such-flag 3", "--fixed-from flag"),
    ("--tensor-model-parallel-size eight", "--fixed-from --tensor-model-parallel-size"),
    ("--tensor-model-parallel-size 8 --tensor-model-parallel-size 4",
     "--fixed-from --tensor-model-parallel-size"),
    ("--use-torch-fsdp2 --use-distributed-optimizer", "--fixed-from --use-torch-fsdp2"),
    ("--context-parallel-size 2", "--fixed-from --context-parallel-size"),
    ("--num-layers-per-virtual-pipeline-stage 2", "--fixed-from --num-layers-per-virtual"),
    ("--recompute-granularity selective --recompute-method uniform",
     "--fixed-from --recompute-method"),  # Megatron-LM refuses a method with selective
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 4",
     "--fixed-from --recompute-num-layers"),
    ("--num-layers 80", "--fixed-from --num-layers"),  # the planned model has 96
    ("--global-batch-size 512", "--fixed-from --global-batch-size"),  # planned: 1536
])
def test_megatron_arguments_it_cannot_price_are_refused(text, field):
    with pytest.raises(InvalidInputError) as err:
        fixed_from_megatron_args(text, 1536, _model())
    msg = str(err.value)
    assert msg.startswith(field) and "\n" not in msg, msg


def test_deepspeed_config_gives_data_parallel_at_its_zero_stage():
    cfg = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
           "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3},
           "bf16": {"enabled": True}, "activation_checkpointing": {"partition_activations": True},
           "optimizer": {"type": "AdamW"}}
    got = fixed_from_deepspeed(cfg, gpus=16, batch=64)
    assert got == FixedConfig(tp=1, pp=1, dp=16, mbs=2, zero=3, recompute="full")
    assert fixed_from_deepspeed({"train_batch_size": 64, "gradient_accumulation_steps": 4},
                                gpus=16).mbs == 1  # derived: 64 / (4 x 16)


@pytest.mark.parametrize("cfg,field", [
    ({"pipeline": {"stages": 2}}, "--fixed-from key"),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
      "gradient_accumulation_steps": 1}, "--fixed-from train_batch_size"),  # 1 x 1 x 16 != 64
    ({"train_batch_size": 32}, "--fixed-from train_batch_size"),  # the plan's batch is 64
    ({"zero_optimization": {"stage": 4}}, "--fixed-from zero_optimization.stage"),
    ({"train_micro_batch_size_per_gpu": 0}, "--fixed-from train_micro_batch_size_per_gpu"),
    ([1, 2], "--fixed-from"),
])
def test_deepspeed_configs_it_cannot_price_are_refused(cfg, field):
    with pytest.raises(InvalidInputError) as err:
        fixed_from_deepspeed(cfg, gpus=16, batch=64)
    assert str(err.value).startswith(field), str(err.value)


def test_cli_prices_the_imported_configuration_as_fixed_does(tmp_path, capsys):
    """The same step as ``--fixed`` with the same configuration; bad files exit 2, one line."""
    args = ["plan", "gpt3-175b", "--topology", "dgx-a100:16", "--batch", "64", "--json", "-"]
    meg = tmp_path / "megatron-args.txt"
    meg.write_text(MEGATRON_175B.replace("1536", "64").replace("size 16", "size 8"))
    assert main([*args, "--fixed-from", str(meg)]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert main([*args, "--fixed", "tp=8,pp=8,mbs=1,sp=1,recompute=full,zero=1"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert imported["totals"] == fixed["totals"] and imported["ops"] == fixed["ops"]
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 64, "zero_optimization": {"stage": 9}}))
    assert main([*args, "--fixed-from", str(ds)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --fixed-from zero_optimization.stage") and "\n" not in err
    assert main([*args, "--fixed-from", str(meg), "--fixed", "tp=8"]) == 2
