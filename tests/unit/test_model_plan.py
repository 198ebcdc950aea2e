"""model plan's figures on public models' configs, against figures computed by hand.

The configs (tests/fixtures/model_configs, sources in its SOURCES.md) are the models'
own config.json. Each expected figure below is worked out in its comment from the
config's numbers alone, so a change to the formulas in module_utils/model_memory.py
that moves a figure fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import model_plan as mp
from sparkctl.collection import model_memory as mm
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.serve.cluster import Cluster

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "fixtures" / "model_configs"
# Llama-3.2-1B-Instruct: the lab model's config (tests/fixtures/model_configs/SOURCES.md)
LAB_CONFIG = REPO / "lab" / "sparkctl_lab" / "assets" / "model-config.json"
GIB = 1 << 30
SPARK = mp.Memory(119.7, 0.75, 2.0, "test")


def config(name: str) -> dict[str, object]:
    path = LAB_CONFIG if name == "Llama-3.2-1B-Instruct" else CONFIGS / f"{name}.json"
    data: dict[str, object] = json.loads(path.read_text())
    return data


def test_parameters_match_the_counts_worked_out_by_hand() -> None:
    # Llama-3.2-1B: embedding 128256 x 2048 = 262,668,288 (tied: no LM head); a layer:
    # q and o 2 x 2048 x 2048 = 8,388,608, k and v 2 x 2048 x (8 x 64) = 2,097,152,
    # MLP 3 x 2048 x 8192 = 50,331,648, two norms 4,096 -> 60,821,504; x 16 =
    # 973,144,064; final norm 2,048. Total 1,235,814,400 (Meta's "1.23B").
    assert mm.params(mm.shape_from_config(config("Llama-3.2-1B-Instruct"))).total == 1_235_814_400
    # Llama-3.3-70B: embedding and LM head 2 x 128256 x 8192 = 2,101,346,304; a layer:
    # q and o 2 x 8192^2 = 134,217,728, k and v 2 x 8192 x 1024 = 16,777,216, MLP
    # 3 x 8192 x 28672 = 704,643,072, norms 16,384 -> 855,654,400; x 80 =
    # 68,452,352,000; final norm 8,192. Total 70,553,706,496 ("70.6B").
    assert mm.params(mm.shape_from_config(config("Llama-3.3-70B-Instruct"))).total == 70_553_706_496
    # Kimi-K2 (DeepSeek-V3's layout, MLA + MoE): embedding and head 2 x 163840 x 7168 =
    # 2,348,810,240. Attention a layer: q_a 7168 x 1536 + norm 1536 = 11,011,584; q_b
    # 1536 x 64 x 192 = 18,874,368; kv_a 7168 x 576 + norm 512 = 4,129,280; kv_b
    # 512 x 64 x 256 = 8,388,608; o 64 x 128 x 7168 = 58,720,256; norms 14,336 ->
    # 101,138,432. Layer 0 dense: 3 x 7168 x 18432 = 396,361,728. Layers 1-60: 384
    # experts x 3 x 7168 x 2048 = 16,911,433,728, the shared expert 44,040,192, the
    # router 7168 x 384 = 2,752,512 -> 16,958,226,432.
    # 61 x 101,138,432 + 396,361,728 + 60 x 16,958,226,432 + 2,348,810,240 + 7,168
    # = 1,026,408,209,408 (Moonshot's "1T total").
    assert mm.params(mm.shape_from_config(config("Kimi-K2-Instruct"))).total == 1_026_408_209_408


def test_kv_cache_bytes_per_token_are_sglangs_cell_size() -> None:
    llama = mm.shape_from_config(config("Llama-3.3-70B-Instruct"))
    # max(1, 8 // tp) KV heads x (128 + 128) x 80 layers x 2 bytes
    assert [mm.kv_cell_bytes(llama, tp) for tp in (1, 2, 4, 8, 16)] == [
        8 * 256 * 160,
        4 * 256 * 160,
        2 * 256 * 160,
        1 * 256 * 160,
        1 * 256 * 160,  # one KV head replicated on every rank past 8
    ]
    assert mm.kv_cell_bytes(llama, 4, "fp8_e4m3") == 2 * 256 * 80
    # MLA: the latent (512) and its RoPE part (64) on every rank, whatever the TP size
    kimi = mm.shape_from_config(config("Kimi-K2-Instruct"))
    assert {mm.kv_cell_bytes(kimi, tp) for tp in (1, 2, 4)} == {(512 + 64) * 61 * 2}


def test_tp_sizes_sglang_refuses_are_named() -> None:
    glm = mm.shape_from_config(config("GLM-4.7-Flash"))  # 20 attention heads
    assert mm.tp_problems(glm, 4) == []
    assert mm.tp_problems(glm, 8) == ["20 attention heads do not split over 8 ranks"]
    llama = mm.shape_from_config(config("Llama-3.2-1B-Instruct"))  # 32 heads, 8 KV heads
    assert mm.tp_problems(llama, 3) == [
        "32 attention heads do not split over 3 ranks",
        "8 KV heads neither split over nor repeat evenly on 3 ranks",
    ]


def test_weights_per_rank_split_what_tp_splits_and_keep_what_every_rank_keeps() -> None:
    model = mm.model_from(config("Llama-3.3-70B-Instruct"), file_bytes=70_553_706_496 * 2)
    # 2 bytes a parameter. Sharded: embedding + head 2,101,346,304 + 80 x (q, o, MLP)
    # 838,860,800 = 69,210,210,304; replicated: norms 80 x 16,384 + 8,192 = 1,318,912;
    # k, v: 80 x 16,777,216 = 1,342,177,280, 2 of 8 KV heads a rank at TP 4.
    # (69,210,210,304 / 4 + 1,318,912 + 1,342,177,280 / 4) x 2 bytes
    assert model.weights_per_rank(4) == (17_302_552_576 + 1_318_912 + 335_544_320) * 2
    # at TP 16 each rank keeps a whole KV head: 1/8 of k and v, not 1/16
    assert model.weights_per_rank(16) == int(
        (69_210_210_304 / 16 + 1_318_912 + 1_342_177_280 / 8) * 2
    )


def test_kv_tokens_are_the_pool_left_after_the_weights_over_the_cell() -> None:
    model = mm.model_from(config("Llama-3.3-70B-Instruct"), file_bytes=70_553_706_496 * 2)
    fit = model.fit(4, memory_gib=119.7, mem_fraction=0.75, min_kv_gib=2)
    budget = int(0.75 * 119.7 * GIB)  # SGLang: mem_fraction_static x the memory
    assert fit.budget_bytes == budget
    assert fit.kv_pool_bytes == budget - model.weights_per_rank(4)
    assert fit.kv_tokens == (budget - model.weights_per_rank(4)) // 81_920
    assert fit.kv_tokens == 746_049 and fit.fits


def test_layouts_and_advice_for_a_small_a_large_and_a_too_large_model(tmp_path: Path) -> None:
    small = mp.make_plan(
        mp.ModelFiles("llama-1b", config("Llama-3.2-1B-Instruct"), None, 2_471_628_800, 1),
        SPARK,
        4,
    )
    assert [x.name for x in small.layouts] == ["tp4", "tp2x2", "tp1x4"]
    assert all(x.fit.fits for x in small.layouts)
    assert small.advice.startswith("tp1x4: the model fits on one Spark, so 4 independent")
    assert small.failure() is None

    large = mp.make_plan(
        mp.ModelFiles("llama-70b", config("Llama-3.3-70B-Instruct"), None, 141_107_412_992, 30),
        SPARK,
        4,
        serving="tp1x4",
    )
    assert [x.fit.fits for x in large.layouts] == [True, True, False]
    assert large.advice.startswith("tp2x2: the smallest TP size that fits (2 ranks a group, 160")
    error = large.failure()
    assert error is not None and "the inventory's layout tp1x4 does not fit" in error.message

    # bf16 Kimi-K2 is 1.9 TiB: even 4 ranks hold 479 GiB each
    huge = mp.make_plan(mp.ModelFiles("kimi", config("Kimi-K2-Instruct"), None, 0, 0), SPARK, 4)
    assert not huge.ok
    assert huge.advice.startswith("no layout fits: even tp4 needs 4")
    assert huge.model.bytes_source == "config"


def test_a_checkpoint_whose_bytes_are_not_its_configs_is_noted() -> None:
    """The lab's model: a real config.json beside a few MiB of random weights."""
    plan = mp.make_plan(
        mp.ModelFiles("lab", config("Llama-3.2-1B-Instruct"), None, 16 << 20, 2), SPARK, 4
    )
    (note,) = plan.notes
    assert "0.01x what config.json implies in bfloat16 (2.30 GiB)" in note
    assert plan.layouts[0].fit.weight_bytes_per_rank < (16 << 20) // 2


def test_the_reading_command_reads_a_model_directory_as_the_nodes_do(tmp_path: Path) -> None:
    """The command serve up and model plan run on a head (through bash, as ssh does)."""
    (tmp_path / "config.json").write_text(json.dumps(config("Llama-3.2-1B-Instruct")))
    (tmp_path / mp.INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 2_471_628_800}}))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 300)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"x" * 200)
    (tmp_path / "tokenizer.json").write_text("{}")
    out = subprocess.run(
        ["bash", "-c", mp.reading_command(str(tmp_path))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = mp.parse_reading(f"spark1:{tmp_path}", out)
    assert files.config == config("Llama-3.2-1B-Instruct")
    assert files.index == {"metadata": {"total_size": 2_471_628_800}}
    assert (files.file_bytes, files.files) == (500, 2)
    assert mp.read_local(tmp_path) == mp.ModelFiles(str(tmp_path), *list(vars(files).values())[1:])
    # nothing there: empty, not an error (serve up then leaves the judging to the start)
    out = subprocess.run(
        ["bash", "-c", mp.reading_command(str(tmp_path / "none"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    empty = mp.parse_reading("spark1:none", out)
    assert (empty.config, empty.index, empty.file_bytes) == (None, None, 0)


def _sparkctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, check=False
    )


def test_the_command_on_a_local_model_prints_json_and_exits_by_the_fit(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config("Llama-3.3-70B-Instruct")))
    ok = _sparkctl("model", "plan", "--model", str(tmp_path), "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert [x["name"] for x in data["layouts"] if x["fits"]] == ["tp4", "tp2x2"]
    assert data["model"]["params"] == 70_553_706_496
    assert data["layouts"][0]["allreduces_per_token"] == 160
    assert data["layouts"][0]["allreduce_bytes"] == 16_384
    # the same model on two Sparks at half the fraction: nothing fits, exit 1, said
    tight = _sparkctl(
        "model", "plan", "--model", str(tmp_path), "--nodes", "2", "--mem-fraction", "0.4"
    )
    assert tight.returncode == 1, tight.stderr
    assert "tp2 does not fit: weights 65.7 GiB per rank" in tight.stdout
    assert "no layout fits" in tight.stderr
    both = _sparkctl("model", "plan", "inventory/lab.ini", "--model", str(tmp_path))
    assert both.returncode == 2 and "not both" in both.stderr


def _local_runner(node: str, command: str, timeout: int = 60) -> tuple[int, str]:
    """Each node's command run here by bash, as ssh runs it on the node."""
    proc = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_serve_up_refuses_a_group_the_model_cannot_fit_with_its_figures(tmp_path: Path) -> None:
    """serve up's check (model_plan.refusal) on two Sparks in one TP=2 group: Llama-3.3-70B
    (its config and a 141 GB index on the head) fits 0.75 of 119.7 GiB with 2 GiB of KV
    cache, not with 30; a head without the model is not judged (the start says why)."""
    from tests.unit.plans import cluster, two_sparks  # noqa: PLC0415

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config("Llama-3.3-70B-Instruct")))
    (model / mp.INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 141_107_412_992}}))
    inv = two_sparks(tmp_path)

    def group(min_kv: float, path: Path = model) -> Cluster:
        return cluster(
            inv, {"model_path": str(path), "min_kv_cache_gib": min_kv}, _local_runner, tmp_path
        )

    mp.refusal(group(2.0))
    with pytest.raises(SparkctlError) as refused:
        mp.refusal(group(30.0))
    assert refused.value.code == ExitCode.CHECKS_FAILED
    assert refused.value.message == (
        "the model does not fit: group main (tp 2): weights 65.7 GiB per rank + minimum KV "
        "30 GiB > 89.8 GiB (0.75 of 119.7 GiB)"
    )
    assert refused.value.hint is not None and "model plan INVENTORY" in refused.value.hint
    mp.refusal(group(30.0, tmp_path / "no-model-yet"))
