"""The environment torchrun's agent gives each rank, built and read back.

torch 2.13's ``LocalElasticAgent._start_workers``
(torch/distributed/elastic/agent/server/local_elastic_agent.py:415-436) sets, per worker:
``RANK``, ``GROUP_RANK``, ``ROLE_RANK``, ``ROLE_NAME``, ``LOCAL_WORLD_SIZE``,
``WORLD_SIZE``, ``GROUP_WORLD_SIZE``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_MAX_RESTARTS``,
``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_USE_AGENT_STORE``,
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (default ``1``), then ``LOCAL_RANK``
(``_set_local_rank_env``, line 477) and ``OMP_NUM_THREADS`` when the agent has it;
torch/distributed/run.py:872 sets ``OMP_NUM_THREADS=1`` for more than one process per node
when it is unset. ``PYTHONHASHSEED`` is never set: each rank is a fresh interpreter with its
own string-hash seed.

Pure: no torch import.

>>> e = RankEnv(rank=5, local_rank=1, world_size=8, local_world_size=4, group_rank=1,
...             group_world_size=2, master_port=29500, run_id="job")
>>> env = e.to_environ()
>>> env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["MASTER_ADDR"]
('5', '1', '1', '127.0.0.1')
>>> RankEnv.from_environ(env) == e
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SimharnessError, whole_number_problem

#: Every variable :meth:`RankEnv.to_environ` sets (``OMP_NUM_THREADS`` only when asked).
TORCHRUN_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)


class RankEnvError(SimharnessError, ValueError):
    """Rank environment values that torchrun would never produce, or a missing variable."""


@dataclass(frozen=True)
class RankEnv:
    """One rank's torchrun environment (one role, as torchrun runs it).

    ``group_rank`` is the node (agent) index, ``group_world_size`` the number of nodes.
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_port: int
    run_id: str
    group_rank: int = 0
    group_world_size: int = 1
    master_addr: str = "127.0.0.1"
    role: str = "default"
    restart_count: int = 0
    max_restarts: int = 0
    use_agent_store: bool = True
    omp_num_threads: int | None = None

    def __post_init__(self):
        for name, low in (("rank", 0), ("local_rank", 0), ("world_size", 1),
                          ("local_world_size", 1), ("group_rank", 0), ("group_world_size", 1),
                          ("master_port", 0), ("restart_count", 0), ("max_restarts", 0)):
            problem = whole_number_problem(name, getattr(self, name), low)
            if problem:
                raise RankEnvError(problem)
        if not (self.rank < self.world_size and self.local_rank < self.local_world_size
                and self.group_rank < self.group_world_size):
            raise RankEnvError(
                f"rank {self.rank} / local_rank {self.local_rank} / group_rank "
                f"{self.group_rank} must be below world_size {self.world_size} / "
                f"local_world_size {self.local_world_size} / group_world_size "
                f"{self.group_world_size}")

    def to_environ(self) -> dict[str, str]:
        """The variables as torchrun sets them (all strings)."""
        env = {
            "RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank),
            "WORLD_SIZE": str(self.world_size), "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.group_rank), "GROUP_WORLD_SIZE": str(self.group_world_size),
            "ROLE_RANK": str(self.rank), "ROLE_NAME": self.role,
            "ROLE_WORLD_SIZE": str(self.world_size),
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(self.restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(self.max_restarts),
            "TORCHELASTIC_RUN_ID": self.run_id,
            "TORCHELASTIC_USE_AGENT_STORE": str(self.use_agent_store),
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        }
        if self.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.omp_num_threads)
        return env

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankEnv:
        """Read a rank's variables (as torchrun, srun-with-exports or :meth:`to_environ` set them).

        ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``MASTER_PORT`` are required; the rest
        default as for one node.

        >>> RankEnv.from_environ({"RANK": "0"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        simharness.launch.env.RankEnvError: LOCAL_RANK is not set (RANK, LOCAL_RANK, ...
        """
        def num(name: str, default: int | None = None) -> int:
            raw = environ.get(name)
            if raw is None:
                if default is None:
                    raise RankEnvError(
                        f"{name} is not set (RANK, LOCAL_RANK, WORLD_SIZE and MASTER_PORT are "
                        f"needed: start the script under torchrun or `simharness run`)")
                return default
            try:
                return int(raw)
            except ValueError:
                raise RankEnvError(f"{name} must be a whole number, got {raw!r}") from None

        rank, local_rank, world = num("RANK"), num("LOCAL_RANK"), num("WORLD_SIZE")
        omp = environ.get("OMP_NUM_THREADS")
        return cls(
            rank=rank, local_rank=local_rank, world_size=world,
            local_world_size=num("LOCAL_WORLD_SIZE", world), master_port=num("MASTER_PORT"),
            run_id=environ.get("TORCHELASTIC_RUN_ID", ""), group_rank=num("GROUP_RANK", 0),
            group_world_size=num("GROUP_WORLD_SIZE", 1),
            master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
            role=environ.get("ROLE_NAME", "default"),
            restart_count=num("TORCHELASTIC_RESTART_COUNT", 0),
            max_restarts=num("TORCHELASTIC_MAX_RESTARTS", 0),
            use_agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "True") == "True",
            omp_num_threads=int(omp) if omp and omp.isdigit() else None)


def slurm_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """torchrun's rank variables derived from Slurm's (``srun`` without torchrun), or {}.

    Only fills what is missing: ``RANK`` <- ``SLURM_PROCID``, ``LOCAL_RANK`` <-
    ``SLURM_LOCALID``, ``WORLD_SIZE`` <- ``SLURM_NTASKS``, ``GROUP_RANK`` <- ``SLURM_NODEID``,
    ``GROUP_WORLD_SIZE`` <- ``SLURM_NNODES``, ``LOCAL_WORLD_SIZE`` <- the first number of
    ``SLURM_TASKS_PER_NODE``. ``MASTER_ADDR``/``MASTER_PORT`` must be exported by the job.

    >>> env = slurm_environ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4",
    ...                      "SLURM_NODEID": "1", "SLURM_NNODES": "2",
    ...                      "SLURM_TASKS_PER_NODE": "2(x2)"})
    >>> [env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE")]
    ['3', '1', '4', '1', '2']
    >>> slurm_environ({"RANK": "0"})
    {}
    """
    if "RANK" in environ or "SLURM_PROCID" not in environ:
        return {}
    pairs = (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"),
             ("WORLD_SIZE", "SLURM_NTASKS"), ("GROUP_RANK", "SLURM_NODEID"),
             ("GROUP_WORLD_SIZE", "SLURM_NNODES"))
    out = {ours: environ[theirs] for ours, theirs in pairs
           if theirs in environ and ours not in environ}
    per_node = environ.get("SLURM_TASKS_PER_NODE", "").split("(")[0].split(",")[0]
    if per_node.isdigit() and "LOCAL_WORLD_SIZE" not in environ:
        out["LOCAL_WORLD_SIZE"] = per_node
    return out
