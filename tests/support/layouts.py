"""Layouts for the check tests: the world-16 configuration and an exported plan edited
by hand (``Layout.to_dict`` -> edit -> ``Layout.from_dict``)."""

from simharness import Layout, ParallelismConfig, build_layout

W16 = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
           context_parallel_size=2, expert_model_parallel_size=2)


def layout(mcore="0.16", **kw):
    return build_layout(ParallelismConfig(**{**W16, **kw}), mcore)


def edited(lay, edit):
    d = lay.to_dict()
    edit(d)
    return Layout.from_dict(d)
