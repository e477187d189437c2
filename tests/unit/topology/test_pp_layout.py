"""pipeline_model_parallel_layout strings: Megatron's syntax, its checks, and the stages
simulate prices. The parity with megatron-core's own parser is
tests/parity/test_pp_layout_parity.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from support.pp_layouts import BAD

from simharness import ParallelismConfig
from simharness._cli.main import main
from simharness.topology import TopologyError
from simharness.topology.pp_layout import expand_layout, layout_split
from simharness.topology.workload import job_stages


def test_expand_and_split():
    assert expand_layout("E(t|)*2,t*3L") == ("Et", "t", "tttL")
    split = layout_split("Et*3|(tt|)*29,m|L", 16, num_layers=61)
    assert [sum(len(r) for r in st) for st in split] == [5] + [4] * 13 + [2, 2]
    # chunk-major numbering: rank 0 holds layers 0-2 and (chunk 1) 33-34
    assert split[0] == (range(0, 3), range(33, 35)) and split[15] == (range(31, 33),
                                                                      range(61, 61))
    assert layout_split("E|t*4|t*4|L", 4) == ((range(0, 0),), (range(0, 4),), (range(4, 8),),
                                              (range(8, 8),))


@pytest.mark.parametrize("text", BAD)
def test_bad_strings_name_the_string(text):
    with pytest.raises(TopologyError, match="pipeline_model_parallel_layout") as info:
        layout_split(text, 1)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(("kw", "words"), [
    (dict(pp=16, num_layers=60), "61 decoder layers (t) but the model has 60"),
    (dict(pp=16, vpp=4), "mean vpp 2, but the job sets --vpp 4"),
    (dict(pp=5), "32 virtual stages do not divide by --pp 5"),
    (dict(pp=2, text="E|L"), "no decoder layer (t) in the layout"),
])
def test_layout_must_fit_the_job(kw, words):
    text = kw.pop("text", "Et*3|(tt|)*29,m|L")
    with pytest.raises(TopologyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        layout_split(text, **kw)


def test_job_stages_with_a_layout():
    cfg = ParallelismConfig(world_size=128, pipeline_model_parallel_size=16,
                            expert_model_parallel_size=8)
    stages, _ = job_stages(cfg, model_bytes=61e9, expert_bytes=0.0,
                           pp_layout="Et*3|(tt|)*29,m|L")   # --layers from the layout: 61
    assert [s.n_layers for s in stages] == [5] + [4] * 13 + [2, 2]
    assert stages[0].dense_bytes == pytest.approx(5e9)
    # a model description: the embedding on stage 0, the output layer on the last stage
    fields = dict(hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                  vocab_size=32000, num_layers=6)
    cfg4 = ParallelismConfig(world_size=4, pipeline_model_parallel_size=4)
    st, _ = job_stages(cfg4, model_fields=fields, pp_layout="E|ttt|ttt|L")
    assert [s.n_layers for s in st] == [0, 3, 3, 0]
    assert [sl.name for sl in st[0].slots] == ["embedding"]
    assert [sl.name for sl in st[3].slots] == ["output layer"]
    # from the configuration, and Megatron's refusals
    cfg_l = ParallelismConfig(world_size=4, pipeline_model_parallel_size=4,
                              pipeline_model_parallel_layout="E|ttt|ttt|L")
    assert [s.n_layers for s in job_stages(cfg_l, model_fields=fields)[0]] == [0, 3, 3, 0]
    with pytest.raises(TopologyError, match="contradicts pipeline_model_parallel_layout"):
        job_stages(cfg_l, model_fields=fields, pp_layout="Et|tt|tt|tL")
    with pytest.raises(TopologyError, match="cannot be combined with "
                                            "num_layers_in_first_pipeline_stage"):
        job_stages(cfg4, model_fields=fields, pp_layout="E|ttt|ttt|L", first=1)
    with pytest.raises(TopologyError, match="account_for_loss_in_pipeline_split"):
        job_stages(cfg4, model_fields=fields, pp_layout="E|ttt|ttt|L", loss=True)


def test_cli_layout_and_its_error_line():
    base = ["simulate", "--topology", "dgx-h100-superpod", "--nodes", "2", "--pp", "4",
            "--model-bytes", "6GB", "--compute-ms", "5", "-q"]
    ok = CliRunner().invoke(main, base + ["--pipeline-model-parallel-layout", "Et|tt|tt|tL"],
                            prog_name="simharness")
    assert ok.exit_code == 0, ok.output
    assert "uneven pipeline stages: 1 to 2 layers per stage" in ok.stdout
    bad = CliRunner().invoke(main, base + ["--pipeline-model-parallel-layout", "Et|(tt|tt|tL"],
                             prog_name="simharness")
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
    assert "'Et|(tt|tt|tL'" in bad.stderr and "Traceback" not in bad.output


def test_a_layout_s_virtual_stages_count_as_vpp():
    # Megatron takes vpp from the layout (transformer_config.py): 4 stages over pp 2 interleave
    base = ["simulate", "--topology", "dgx-h100-superpod", "--nodes", "2", "--pp", "2",
            "--model-bytes", "8GB", "--compute-ms", "5", "-q", "--schedule", "dist-opt",
            "--overlap-param-gather-with-optimizer-step"]
    ok = CliRunner().invoke(main, base + ["--pipeline-model-parallel-layout", "Ett|tt|tt|ttL"],
                            prog_name="simharness")
    assert ok.exit_code == 0, ok.output
    plain = CliRunner().invoke(main, base + ["--layers", "8"], prog_name="simharness")
    assert plain.exit_code == 2 and "needs interleaved pipelining" in plain.stderr
