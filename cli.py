"""simharness command line (minimal; the full CLI is issue 3)."""

import click

import simharness


@click.group()
def main():
    """Simulate and check Megatron-Core process-group layouts."""


@main.command()
def demo():
    """A 16-rank layout with create_all_gather_group on and off, and the checks."""
    for ag in (True, False):
        cfg = simharness.ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                                           pipeline_model_parallel_size=2,
                                           context_parallel_size=2,
                                           create_all_gather_group=ag)
        layout = simharness.build_layout(cfg)
        click.echo(repr(layout))
        for kind in layout.kinds:
            click.echo(f"  {kind:16s} {layout.groups(kind).tolist()}")
        findings = simharness.check(layout)
        click.echo(f"  checks: {len(findings)} findings")


if __name__ == "__main__":
    main()
