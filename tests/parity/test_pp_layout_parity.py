"""pipeline_model_parallel_layout strings against the installed megatron-core's own
parser: the same layers per stage and virtual stage, and every refused string refused."""

from __future__ import annotations

import warnings

import pytest
from support.pp_layouts import BAD, GOOD

from simharness.topology.pp_layout import expand_layout, layout_split


def test_parity_with_megatron_core():
    from support import megatron_harness as H

    H.require_installed_megatron()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.enums import LayerType
        from megatron.core.transformer.pipeline_parallel_layer_layout import (
            PipelineParallelLayerLayout as Mcore,
        )
    letter = {LayerType.embedding: "E", LayerType.decoder: "t", LayerType.mtp: "m",
              LayerType.loss: "L"}
    saved = ps.get_virtual_pipeline_model_parallel_world_size()
    try:
        for text, pp in GOOD:
            theirs = Mcore(text, pp)
            flat = "".join(letter[x] for x in theirs.flatten_layout)
            assert "".join(expand_layout(text)).replace("|", "") == flat, text
            v = theirs.virtual_pipeline_model_parallel_size
            ps.set_virtual_pipeline_model_parallel_world_size(v)
            ours = layout_split(text, pp, num_layers=flat.count("t"))
            for rank in range(pp):
                for chunk in range(v):
                    assert list(ours[rank][chunk]) == theirs.get_layer_id_list(
                        vp_stage=chunk, pp_rank=rank), (text, rank, chunk)
        for text in BAD:   # Megatron refuses every string refused here
            with pytest.raises((AssertionError, ValueError, KeyError, NotImplementedError)):
                m = Mcore(text, 1)
                m.validate_layer_layout(num_layers=m.flatten_layout.count(LayerType.decoder),
                                        mtp_num_layers=m.flatten_layout.count(LayerType.mtp)
                                        or None)
    finally:
        ps.set_virtual_pipeline_model_parallel_world_size(saved)
