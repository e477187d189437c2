"""Upstream distributed test files that ``simharness run`` is proven on: pinned, never vendored.

Each suite names a repository, a commit and the sha256 of every file it needs, and where
the files come from:

- ``package``: a registry package the test venv installs (``make setup-test``), so CI has
  it: the files are read where the package is installed and checked against their pins;
- else a local git mirror: :func:`materialise` copies them into ``.cache/upstream/<suite>/``
  (``git show COMMIT:PATH``) and checks every sha256. Nothing is downloaded (CI reaches
  package registries only), so a suite whose files cannot be had is reported "needs the
  files" by ``bench/bench_run.py``. Megatron-LM's tests are in no registry artifact: the
  megatron-core 0.16.1 sdist on PyPI (``megatron_core-0.16.1.tar.gz``) holds only
  ``megatron/core`` (its MANIFEST.in adds nothing under ``tests/``), and there is no
  megatron-lm package.

Megatron-LM ``main`` at d98e8a64 (2026-08-22; ``megatron-lm-main``): ``megatron/core`` and
``megatron/training`` of that commit (the tests import both; the run's interpreter must not
have another megatron-core installed, see docs/run.md) with ``tests/unit_tests`` (its
``conftest.py`` included) and the test-data module that conftest imports. Its ~1,200 files
are pinned in ``tests/support/upstream/megatron-lm-main.sha256`` (``sha256sum`` format;
``--write-manifest`` writes it from a mirror). ``files`` run: the per-file table of
docs/run.md.

Megatron-LM ``core_v0.16.1`` (the tag of the megatron-core 0.16.1 the test venv installs):
``tests/unit_tests/test_parallel_state.py`` and what it imports
(``tests/unit_tests/test_utilities.py`` and the two package ``__init__`` files). The
suite's ``conftest.py`` is left out on purpose: it imports Megatron-LM's test-data
downloader and Transformer Engine helpers, which are environment matters, not the harness's.

torch 2.13.0 (package; commit = ``torch.version.git_version``):
``torch/testing/_internal/distributed/distributed_test.py`` (``DistributedTest._DistTestBase``)
and ``common_distributed.py`` (its skip decorators), run through
``tests/fixtures/run/torch_distributed_driver.py`` with BACKEND=gloo on 3 ranks (the world size
torch's ``run_test.py`` gives the gloo suite on a machine without 2 GPUs).

    python tests/support/upstream_suites.py --git /path/to/Megatron-LM   # materialise and verify
    python tests/support/upstream_suites.py --suite megatron-lm-main --git /path/to/Megatron-LM
    python tests/support/upstream_suites.py --suite torch-2.13.0-distributed_test   # verify
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "upstream"
MANIFESTS = Path(__file__).resolve().parent / "upstream"


def read_manifest(name: str) -> dict[str, str]:
    """``path -> sha256`` from ``tests/support/upstream/NAME.sha256`` (``sha256sum`` lines)."""
    out = {}
    for line in (MANIFESTS / f"{name}.sha256").read_text(encoding="utf-8").splitlines():
        digest, _, path = line.partition("  ")
        out[path] = digest
    return out


@dataclass(frozen=True)
class Suite:
    name: str
    repo: str
    commit: str
    files: dict[str, str]  # path -> sha256
    run: str | tuple[str, ...]  # test file(s), relative to the suite's root (package: the repo's)
    ranks: int
    package: str | None = None  # "name==version": files from that installed package
    pytest_args: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()  # the repository paths the manifest pins (for --write-manifest)
    imports: str | None = None  # a package that must be imported from the suite's root

    @property
    def runs(self) -> tuple[str, ...]:
        return (self.run,) if isinstance(self.run, str) else self.run


#: Megatron-LM main's unit tests measured in docs/run.md: each file runs within a few minutes
#: on 8 CPU ranks (the whole of tests/unit_tests/tensor_parallel; the core's parallel_state;
#: distributed, pipeline_parallel, dist_checkpointing and MoE router/dispatcher files).
MEGATRON_MAIN_FILES = (
    "tests/unit_tests/test_parallel_state.py",
    "tests/unit_tests/test_basic.py",
    "tests/unit_tests/tensor_parallel/test_cross_entropy.py",
    "tests/unit_tests/tensor_parallel/test_data.py",
    "tests/unit_tests/tensor_parallel/test_initialization.py",
    "tests/unit_tests/tensor_parallel/test_layers.py",
    "tests/unit_tests/tensor_parallel/test_mappings.py",
    "tests/unit_tests/tensor_parallel/test_random.py",
    "tests/unit_tests/tensor_parallel/test_tensor_parallel_utils.py",
    "tests/unit_tests/tensor_parallel/test_tp_attrs_without_init.py",
    "tests/unit_tests/distributed/test_distributed_data_parallel.py",
    "tests/unit_tests/distributed/test_finalize_model_grads.py",
    "tests/unit_tests/pipeline_parallel/test_helpers.py",
    "tests/unit_tests/dist_checkpointing/test_mapping.py",
    "tests/unit_tests/transformer/moe/test_a2a_token_dispatcher.py",
    "tests/unit_tests/distributed/test_param_and_grad_buffer.py",
    "tests/unit_tests/distributed/test_param_layout.py",
    "tests/unit_tests/pipeline_parallel/test_pipeline_layout.py",
    "tests/unit_tests/pipeline_parallel/test_mtp_loss_scale.py",
    "tests/unit_tests/dist_checkpointing/test_serialization.py",
    "tests/unit_tests/dist_checkpointing/test_nonpersistent.py",
    "tests/unit_tests/dist_checkpointing/test_torch_dist.py",
    "tests/unit_tests/dist_checkpointing/test_validation.py",
    "tests/unit_tests/transformer/moe/test_routers.py",
    # more files of the same directories, measured apart in docs/run.md
    "tests/unit_tests/distributed/test_grad_sync_with_expert_parallel.py",
    "tests/unit_tests/distributed/test_reduce_scatter_with_fp32_accumulation.py",
    "tests/unit_tests/distributed/test_grad_reduce_for_replicated_embedder.py",
    "tests/unit_tests/distributed/test_param_readiness.py",
    "tests/unit_tests/distributed/test_layer_wise_param_layout.py",
    "tests/unit_tests/dist_checkpointing/test_optimizer.py",
    "tests/unit_tests/dist_checkpointing/test_fully_parallel.py",
    "tests/unit_tests/pipeline_parallel/test_schedules.py",
    "tests/unit_tests/transformer/moe/test_token_dispatcher.py",
    "tests/unit_tests/transformer/moe/test_aux_loss.py",
)


SUITES = {
    "megatron-lm-core_v0.16.1": Suite(
        name="megatron-lm-core_v0.16.1", repo="NVIDIA/Megatron-LM",
        commit="55ac7082517c3878ae653c07c09c534b8aed49f6",
        files={
            "tests/__init__.py":
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "tests/unit_tests/__init__.py":
                "5f5a1d1a62265b80b051ce3a9c7fa457bbe174a0395a18a0d75de6fe91791eee",
            "tests/unit_tests/test_utilities.py":
                "fd537ba178450caf659dc688169e99aa016369fd310aa0f005daed01eff538b5",
            "tests/unit_tests/test_parallel_state.py":
                "f3ac46a5f64f745d050734f24afa4814ba5b29b940a8862a151ac7cac98cf8d9",
        },
        run="tests/unit_tests/test_parallel_state.py", ranks=8),
    "megatron-lm-main": Suite(
        name="megatron-lm-main", repo="NVIDIA/Megatron-LM",
        commit="d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        files=read_manifest("megatron-lm-main"), run=MEGATRON_MAIN_FILES, ranks=8,
        trees=("megatron/core", "megatron/training", "tests/__init__.py", "tests/unit_tests",
               "tests/test_utils/python_scripts/download_unit_tests_dataset.py"),
        imports="megatron.core"),
    "torch-2.13.0-distributed_test": Suite(
        name="torch-2.13.0-distributed_test", repo="pytorch/pytorch",
        commit="cf30153c4c131c8164ee7798e5022d810682e2cb", package="torch==2.13.0",
        files={
            "torch/testing/_internal/distributed/distributed_test.py":
                "bc17018d95911d3b82dbd9889b43290be05542e83a4982cacdb60a559280aaee",
            "torch/testing/_internal/common_distributed.py":
                "0d66ca6d084e94b2effbf40b83ef506f2051d505f1b6509b7bb1ab803c5e46cd",
        },
        run="tests/fixtures/run/torch_distributed_driver.py", ranks=3,
        pytest_args=("-o", "addopts=")),
}


def _ok(path: Path, sha256: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def package_root(suite: Suite) -> Path | None:
    """Where the suite's package is installed (the directory that holds ``torch/``), when
    it is installed at the pinned version; else None."""
    if suite.package is None:
        return None
    name, _, version = suite.package.partition("==")
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        if installed(name).split("+")[0] != version:
            return None
    except PackageNotFoundError:
        return None
    return Path(spec.origin).resolve().parent.parent


def cached(suite: Suite, cache: Path = CACHE) -> Path | None:
    """The suite's root when every file is there with its sha256, else None: the cache
    directory, or for a package suite the installed package's root."""
    root = package_root(suite) if suite.package else cache / suite.name
    if root is None:
        return None
    return root if all(_ok(root / p, h) for p, h in suite.files.items()) else None


def mismatches(suite: Suite) -> list[str]:
    """For a package suite: each pinned file that is missing or differs, with its sha256."""
    root = package_root(suite)
    if root is None:
        return [f"{suite.package} is not installed"]
    out = []
    for path, sha256 in suite.files.items():
        f = root / path
        got = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "missing"
        if got != sha256:
            out.append(f"{path}: sha256 {got}, pinned {sha256}")
    return out


def _archive(suite: Suite, git_dir: str, paths) -> dict[str, bytes]:
    """The files under ``paths`` at the suite's commit (``git archive``), by path."""
    data = subprocess.run(["git", "--git-dir", git_dir, "archive", "--format=tar",
                           suite.commit, *paths], capture_output=True, check=True,
                          timeout=300).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}


def write_manifest(suite: Suite, git_dir: str) -> Path:
    """Write the suite's manifest (every file under ``suite.trees`` at its commit)."""
    files = _archive(suite, git_dir, suite.trees)
    MANIFESTS.mkdir(parents=True, exist_ok=True)
    target = MANIFESTS / f"{suite.name}.sha256"
    target.write_text("".join(f"{hashlib.sha256(files[p]).hexdigest()}  {p}\n"
                              for p in sorted(files)), encoding="utf-8")
    return target


def materialise(suite: Suite, git_dir: str, cache: Path = CACHE) -> Path:
    """Copy the suite's files at its commit out of the local git mirror ``git_dir``; raises
    ``ValueError`` naming the file whose content does not match its pin."""
    root = cache / suite.name
    if suite.trees:
        missing = [p for p, h in suite.files.items() if not _ok(root / p, h)]
        if missing:
            files = _archive(suite, git_dir, suite.trees)
            for path in missing:
                data = files.get(path, b"")
                got = hashlib.sha256(data).hexdigest() if path in files else "missing"
                if got != suite.files[path]:
                    raise ValueError(f"{suite.repo}@{suite.commit[:12]}:{path} has sha256 "
                                     f"{got}, pinned {suite.files[path]}")
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(data)
        return root
    for path, sha256 in suite.files.items():
        target = root / path
        if _ok(target, sha256):
            continue
        data = subprocess.run(["git", "--git-dir", git_dir, "show", f"{suite.commit}:{path}"],
                              capture_output=True, check=True, timeout=60).stdout
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise ValueError(f"{suite.repo}@{suite.commit[:12]}:{path} has sha256 {got}, "
                             f"pinned {sha256}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git", help="a local git mirror of the suite's repository")
    ap.add_argument("--suite", default="megatron-lm-core_v0.16.1", choices=sorted(SUITES))
    ap.add_argument("--write-manifest", action="store_true",
                    help="write the suite's sha256 manifest from --git (maintainers)")
    args = ap.parse_args(argv)
    suite = SUITES[args.suite]
    if suite.package:
        bad = mismatches(suite)
        for line in bad:
            print(f"error: {suite.name}: {line}", file=sys.stderr)
        if not bad:
            print(package_root(suite))
        return 1 if bad else 0
    if not args.git:
        ap.error(f"--git MIRROR (a local git mirror of {suite.repo}) is needed for {suite.name}")
    git_dir = args.git if args.git.endswith(".git") or Path(args.git, "HEAD").exists() \
        else str(Path(args.git, ".git"))
    if args.write_manifest:
        print(write_manifest(suite, git_dir))
        return 0
    print(materialise(suite, git_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
