"""simharness.launch: torchrun's environment, the GPU shim, the per-rank bootstrap, the launcher.

The multi-rank tests start real ranks through torch's elastic agent (in a child Python, so
the agent's signal handlers never touch the pytest worker) and check what the ranks print.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.paths import ROOT

from simharness.launch.env import TORCHRUN_VARS, RankEnv, RankEnvError
from simharness.launch.rank import NEEDS_GPU_EXIT, RankUsageError, parse

SCRIPTS = ROOT / "tests" / "fixtures" / "launch"
TIMEOUT = 180


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def launch_in_child(target: list[str], nproc: int, shim: bool = True, **kw) -> tuple[dict, str]:
    """Run launch() in a child Python; returns (result as a dict, the ranks' output)."""
    code = textwrap.dedent(f"""
        import json, os, signal
        from simharness.launch.launcher import LaunchSpec, launch
        sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT]
        env0, handlers0 = dict(os.environ), [signal.getsignal(s) for s in sigs]
        r = launch(LaunchSpec({tuple(target)!r}, nproc_per_node={nproc}, shim={shim}, **{kw!r}))
        env1, handlers1 = dict(os.environ), [signal.getsignal(s) for s in sigs]
        leaks = sorted(k for k in env0.keys() | env1.keys() if env0.get(k) != env1.get(k))
        leaks += [s.name for s, a, b in zip(sigs, handlers0, handlers1) if a != b]
        print("LAUNCH " + json.dumps({{"ranks": [[x.rank, x.exitcode] for x in r.ranks],
                                       "signal": r.signal, "exit": r.exit_code,
                                       "leaks": leaks}}), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("LAUNCH ")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr
    res = json.loads(lines[0][len("LAUNCH "):])
    # launch() is a library call: the caller's environment and signal handlers are as before
    assert res.pop("leaks") == [], "launch() changed the calling process"
    return res, out.stdout + out.stderr


# -- env ------------------------------------------------------------------------------------

def test_rank_env_refuses_impossible_values():
    with pytest.raises(RankEnvError, match="rank 4 .* below world_size 4"):
        RankEnv(rank=4, local_rank=0, world_size=4, local_world_size=4, master_port=1,
                run_id="x")
    with pytest.raises(RankEnvError, match="WORLD_SIZE must be a whole number, got 'x'"):
        RankEnv.from_environ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "x"})


# -- rank bootstrap -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["script.py"], "missing `--`"),
    (["--shimm", "--", "x.py"], "unknown option"),
    (["--"], "no target"),
    (["--", "-m"], "no target"),
    (["--", "-c", "print(1)"], "must be a script or `-m module`"),
])
def test_rank_parse_errors(argv, message):
    with pytest.raises(RankUsageError, match=re.escape(message)):
        parse(argv)


def test_rank_bootstrap_error_lines_and_argv(tmp_path):
    env = child_env()
    for k in TORCHRUN_VARS:
        env.pop(k, None)
    bare = subprocess.run([sys.executable, "-m", "simharness.launch.rank", "--", "x.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2
    assert bare.stderr.startswith("error: RANK is not set"), bare.stderr
    script = tmp_path / "show.py"
    script.write_text(f"import sys\nprint(sys.argv, sys.path[0] == {str(tmp_path)!r}, "
                      f"__name__)\n")
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_PORT="1")
    ran = subprocess.run([sys.executable, "-m", "simharness.launch.rank", "--", str(script),
                          "a", "--b"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"[{str(script)!r}, 'a', '--b'] True __main__"
    missing = subprocess.run([sys.executable, "-m", "simharness.launch.rank", "--",
                              str(tmp_path / "nope.py")], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.py' does not exist" in missing.stderr
    # a shim stop that the script's own code (here as torch.compile does) re-raised as
    # another error is still the rank's needs-GPU exit, with one line, not a traceback
    wrapped = tmp_path / "wrapped.py"
    wrapped.write_text("import torch\ntry:\n    torch.cuda.CUDAGraph()\nexcept RuntimeError:\n"
                       "    raise RuntimeError('while tracing') from None\n")
    stopped = subprocess.run([sys.executable, "-m", "simharness.launch.rank", "--shim", "--",
                              str(wrapped)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert stopped.returncode == NEEDS_GPU_EXIT, stopped.stderr
    assert re.search(r"^error: needs a real GPU: torch.cuda.CUDAGraph at \S*wrapped.py:3 .*"
                     r"\(raised under RuntimeError\)$", stopped.stderr, re.M), stopped.stderr
    assert "Traceback" not in stopped.stderr


# -- the shim in one process (a child, so torch in the pytest worker stays unpatched) ------

SHIM_IN_PROCESS = """
import torch
from simharness.errors import NeedsGPU
from simharness.launch import gpu_shim
from simharness.launch.gpu_shim import ShimError
profile_init = torch.autograd.profiler.profile.__init__
s = gpu_shim.install(1, 3)
out = [torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device()]
torch.cuda.set_device("cuda:2"); out.append(torch.cuda.current_device())
with torch.cuda.device(0):
    out.append(torch.cuda.current_device())
out.append(torch.cuda.current_device())
try:
    torch.cuda.set_device(3)
except RuntimeError as e:
    out.append("ordinal" if "invalid device ordinal" in str(e) else str(e))
torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.memory.empty_cache()
devs = [torch.ones(2, device="cuda:1"), torch.zeros(1).cuda(), torch.arange(2).to(0),
        torch.arange(2).to("cuda", torch.float64), torch.empty(1, device=torch.device("cuda")),
        torch.ones(1).new_zeros(2, device="cuda"), torch.ones(1).pin_memory()]
devs.append(next(torch.nn.Linear(2, 2).to(1).parameters()))
out.append(sorted({str(t.device) for t in devs}))
for call in (lambda: torch.cuda.CUDAGraph(), lambda: torch.cuda.graph(None),
             lambda: torch.cuda.Event(interprocess=True).ipc_handle()):
    try:
        call()
        out.append("not refused")
    except NeedsGPU as e:
        out.append([e.call, e.where.rsplit(":", 1)[0]])
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
ddp = DDP(torch.nn.Linear(2, 1).cuda(1), device_ids=[1], output_device=1)
ddp(torch.ones(1, 2, device="cuda")).sum().backward()
out.append([str(ddp.module.weight.grad.device),
            sorted(i.detail for i in s.ignored if i.call == "DistributedDataParallel")])
dist.destroy_process_group()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts) as prof:
    torch.ones(2).add(1)
out.append([prof.profiler.use_device, str(prof.profiler.profiler_kind),
            "aten::add" in {e.name for e in prof.events()},
            [i.detail for i in s.ignored if i.call == "torch.profiler"]])
try:
    gpu_shim.install(0, 3)
except ShimError as e:
    out.append("twice")
s.uninstall()
out += [torch.cuda.is_available(), torch.cuda.device_count(), gpu_shim.active() is None,
        torch.autograd.profiler.profile.__init__ is profile_init]
try:
    torch.ones(1, device="cuda")
    out.append("cuda tensor after uninstall")
except (AssertionError, RuntimeError):
    out.append("restored")
import json; print(json.dumps(out))
"""


def test_shim_in_process_maps_refuses_and_uninstalls():
    out = subprocess.run([sys.executable, "-c", SHIM_IN_PROCESS], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == [True, 3, 0, 2, 0, 2, "ordinal", ["cpu"],
                   ["torch.cuda.CUDAGraph", "<string>"], ["torch.cuda.graph", "<string>"],
                   ["torch.cuda.Event.ipc_handle", "<string>"],
                   ["cpu", ["device_ids=[1]", "output_device=1"]],
                   [None, "ProfilerState.KINETO", True, ["CUDA activity (CPU events only)"]],
                   "twice", False, 0, True, True, "restored"]
    # without the drop, a CPU build times CUDA events on every op and fails each time
    assert "Failed to record CUDA event" not in out.stderr, out.stderr


# The in-process shim scripts record each step: "ok", [NeedsGPU's call, its file:line], or
# [the exception's type, its message].
SHIM_STEP = """out = []


def step(f):
    try:
        f()
        out.append("ok")
    except NeedsGPU as e:
        out.append([e.call, e.where])
    except Exception as e:
        out.append([type(e).__name__, str(e)])
"""

# With compute_stops (what capture installs): CUDA tensors may be created, moved, copied and
# communicated; compute on one stops with NeedsGPU naming the line. Lines marked STOP must stop
# with that op (on a GPU they run a kernel on CUDA memory); every other step must pass.
SHIM_COMPUTE_STOPS = """
import json
import warnings
warnings.simplefilter("ignore")
import torch
import torch.distributed as dist
import torch.nn as nn
from simharness.errors import NeedsGPU
from simharness.launch import gpu_shim

s = gpu_shim.install(0, 1, compute_stops=True)
""" + SHIM_STEP + """

host = torch.ones(4)
dev = torch.zeros(4, device="cuda")
step(lambda: host.cuda().view(2, 2)[0].clone().to(torch.float16).tolist())
step(lambda: host + 1)                                   # host tensor: CPU compute
step(lambda: dev.to("cpu") * 3)                          # copied back to the host first
step(lambda: dev.copy_(host))
step(lambda: torch.cat([dev, host.cuda()]).numel())
step(lambda: dev + 1)                                    # STOP torch.Tensor.add
step(lambda: dev[:2] @ dev[2:])                          # STOP torch.Tensor.matmul (views)
linear = nn.Linear(4, 4).cuda()                          # its weight is on CUDA
step(lambda: linear(host))                               # STOP torch.nn.functional.linear
step(lambda: nn.init.trunc_normal_(nn.Linear(4, 4, device="cuda").weight))
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
step(lambda: dist.all_reduce(dev))
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
model = fully_shard(nn.Linear(4, 4), mesh=init_device_mesh("cuda", (1,)))
step(lambda: model(host))                                # FSDP on CPU, input on the host
step(lambda: model(dev))                                 # STOP torch.nn.functional.linear
dist.destroy_process_group()
s.uninstall()
print(json.dumps(out))
"""


def test_capture_shim_stops_compute_on_cuda_tensors_and_only_that():
    out = subprocess.run([sys.executable, "-c", SHIM_COMPUTE_STOPS], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = SHIM_COMPUTE_STOPS.splitlines()
    steps = [(i, ln) for i, ln in enumerate(lines, 1) if ln.startswith("step(")]
    want = [[f"{ln.split('# STOP ')[1].split()[0]} on a CUDA tensor", f"<string>:{i}"]
            if "# STOP" in ln else "ok" for i, ln in steps]
    assert json.loads(out.stdout) == want


# What DDP does only for GPU modules, on a module the shim left on CPU (device_ids dropped):
# SyncBatchNorm and mixed precision stop with NeedsGPU at the user's line (torch's own line
# when the caller is torch's test code), the logging data keeps the dropped device_ids; a
# module the user left on CPU still gets torch's own error. torch.accelerator's device calls
# stop with NeedsGPU; torch.compile runs (dynamo's CUDA RNG bookkeeping is answered). Lines
# marked STOP must stop there with NeedsGPU naming the call after STOP.
SHIM_DDP_GPU_ONLY = """
import json, os, warnings
warnings.simplefilter("ignore")
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.parallel.distributed import _MixedPrecision
from simharness.errors import NeedsGPU
from simharness.launch import gpu_shim

s = gpu_shim.install(0, 2)
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
""" + SHIM_STEP + """

def bn_net():
    return nn.Sequential(nn.Linear(2, 2), nn.SyncBatchNorm(2))


fp16 = _MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16,
                       buffer_dtype=torch.float16)
gpu_bn = bn_net().cuda(1)
step(lambda: DDP(gpu_bn, device_ids=[1]))  # STOP torch.nn.SyncBatchNorm in DistributedDataParallel
step(lambda: DDP(bn_net()))  # the user's CPU module
mp = DDP(nn.Linear(1, 5).to(1), device_ids=[1], mixed_precision=fp16)
step(lambda: [(p._mp_param.dtype, p._fp_param.dtype) for p in mp.parameters()])
x1 = torch.randn(3, 1, device="cuda")
step(lambda: mp(x1))  # STOP DistributedDataParallel(mixed_precision=...) forward
step(lambda: DDP(nn.Linear(1, 5), mixed_precision=fp16)(torch.randn(3, 1)))  # CPU: torch's error
logged = [DDP(nn.Linear(2, 2).cuda(1), device_ids=[1])._get_ddp_logging_data(),
          DDP(nn.Linear(2, 2))._get_ddp_logging_data()]
out.append([[d["device_ids"], d["output_device"]] for d in logged])
step(lambda: torch.accelerator.current_stream())  # STOP torch.accelerator.current_stream
step(lambda: torch.accelerator.synchronize())  # STOP torch.accelerator.synchronize
out.append([torch.accelerator.is_available(), torch.accelerator.current_accelerator()])
step(lambda: torch.cuda.CUDAGraph())  # STOP torch.cuda.CUDAGraph
lin = nn.Linear(3, 3).cuda()
x = torch.randn(2, 3, device="cuda")
out.append(torch.equal(torch.compile(lin)(x), lin(x)))
# torch's own test code is the caller: the stop names its line, not the code that called it
testing = os.path.join(os.path.dirname(torch.__file__), "testing", "_simharness_case.py")
step(lambda: exec(compile("\\n\\nDDP(bn_net().cuda(), device_ids=[0])\\n", testing, "exec")))
# a module the user moved to CUDA is a GPU module without device_ids too
step(lambda: DDP(bn_net().cuda()))  # STOP torch.nn.SyncBatchNorm in DistributedDataParallel
step(lambda: DDP(bn_net().to("cuda:1")))  # STOP torch.nn.SyncBatchNorm in DistributedDataParallel
moved = DDP(nn.Linear(1, 5).to(1), mixed_precision=fp16)
step(lambda: moved(x1))  # STOP DistributedDataParallel(mixed_precision=...) forward
step(lambda: DDP(bn_net().to(torch.float64)))  # a dtype is no device: torch's CPU error
# the allocator calls answer as before the allocator starts, as torch.cuda.empty_cache does
step(lambda: torch.accelerator.empty_cache())
out.append(dict(torch.accelerator.memory_stats()))
dist.destroy_process_group()
s.uninstall()
step(lambda: torch.accelerator.current_stream())
print(json.dumps(out))
"""


def test_shim_ddp_gpu_only_features_need_gpu_and_cpu_modules_keep_torch_errors():
    out = subprocess.run([sys.executable, "-c", SHIM_DDP_GPU_ONLY], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    lines = SHIM_DDP_GPU_ONLY.splitlines()
    stops = [[ln.split("# STOP ")[1].strip(), f"<string>:{i}"]
             for i, ln in enumerate(lines, 1) if "# STOP " in ln]
    testing = os.path.join("torch", "testing", "_simharness_case.py")
    assert got[0] == stops[0]
    assert got[1] == ["ValueError", "SyncBatchNorm layers only work with GPU modules"]
    assert got[2] == "ok"                        # DDP built its fp16 copies, as on a GPU
    assert got[3] == stops[1]
    assert got[4][0] == "RuntimeError" and "events" in got[4][1]
    assert got[5] == [["1", 1], ["", -1]]
    assert got[6:8] == stops[2:4]
    assert got[8] == [False, None]               # torch.accelerator still says no accelerator
    assert got[9] == stops[4]
    assert got[10] is True
    assert got[11][0] == "torch.nn.SyncBatchNorm in DistributedDataParallel"
    assert got[11][1].endswith(f"{testing}:3"), got[11]
    assert got[12:15] == stops[5:8]
    assert got[15] == ["ValueError", "SyncBatchNorm layers only work with GPU modules"]
    assert got[16:18] == ["ok", {}]
    assert got[18] == ["RuntimeError", "Cannot access accelerator device when none is available."]
    assert len(got) == 19


def test_nccl_settings_from_the_environment_and_nccl_config_files(tmp_path):
    """What NCCL would have read, reported as ignored: NCCL_* / TORCH_NCCL_* variables (not
    torchrun's own), then $NCCL_CONF_FILE, or HOME/.nccl.conf when it is unset or empty."""
    from simharness.launch.gpu_shim import nccl_settings

    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("# comment\nNCCL_IB_HCA=mlx5_0\nnot a setting\n")
    conf = tmp_path / "site.conf"
    conf.write_text("NCCL_ALGO=Ring\nNCCL_PROTO=Simple\n")
    env = {"NCCL_SOCKET_IFNAME": "eth0", "TORCH_NCCL_BLOCKING_WAIT": "1",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "PATH": "/bin", "NCCL_CONF_FILE": str(conf)}
    got = [(i.call, i.detail) for i in nccl_settings(env, str(home))]
    assert got[0] == ("NCCL environment", f"NCCL_CONF_FILE={str(conf)[:40]}, "
                      "NCCL_SOCKET_IFNAME=eth0, TORCH_NCCL_BLOCKING_WAIT=1 "
                      "(gloo runs the collectives)")
    assert got[1] == ("NCCL config file", f"{conf}: NCCL_ALGO=Ring, NCCL_PROTO=Simple "
                      "(gloo runs the collectives)")
    home_only = [(i.call, i.detail) for i in nccl_settings({"NCCL_CONF_FILE": ""}, str(home))]
    assert home_only[-1] == ("NCCL config file", f"{home / '.nccl.conf'}: NCCL_IB_HCA=mlx5_0 "
                             "(gloo runs the collectives)")
    many = {f"NCCL_X{i}": "1" for i in range(9)}
    assert nccl_settings(many, None, shown=6)[0].detail.endswith(
        "NCCL_X5=1 and 3 more (gloo runs the collectives)")
    assert [i for i in nccl_settings({"PATH": "/bin"}, str(tmp_path)) if
            i.call == "NCCL environment"] == []


def test_map_backend_keeps_other_backends():
    from simharness.launch.gpu_shim import map_backend

    assert [map_backend(b) for b in ("nccl", "ucc", "cuda:nccl,cpu:gloo", "cpu:gloo",
                                     "gloo", "mpi", "fake", None)] == \
        ["gloo", "gloo", "gloo", "cpu:gloo", "gloo", "mpi", "fake", None]


# -- launcher: real ranks through torch's elastic agent --------------------------------------

def test_gpu_style_script_runs_unedited_on_four_cpu_ranks(monkeypatch):
    """set_device, nccl + device_id, pg_options, split_group, new_subgroups, a cuda
    DeviceMesh, CUDA tensors and object collectives; then a CUDA graph stops every rank with
    NeedsGPU (exit 77). The environment is torchrun's, and each rank its own hash seed."""
    monkeypatch.setenv("NCCL_ALGO", "Ring")  # an NCCL setting: gloo ignores it, and says so
    res, text = launch_in_child([str(SCRIPTS / "gpu_style.py"), "--graph"], 4)
    # the agent stops the others once it sees the first rank's 77 (they may be exiting too);
    # the script waits in a barrier after its prints, so every rank has printed its lines
    codes = dict(res["ranks"])
    assert sorted(codes) == [0, 1, 2, 3] and NEEDS_GPU_EXIT in codes.values(), text
    assert set(codes.values()) <= {NEEDS_GPU_EXIT, -15, None}, text
    results = dict(re.findall(r"\[rank(\d)\]:RESULT rank=\d (.*)", text))
    assert sorted(results) == ["0", "1", "2", "3"], text
    for r in range(4):
        line = results[str(r)]
        odd = r % 2
        assert f"sum=[10.0, 10.0] half={2 + 2 * odd} split={1 if r < 2 else 5} " in line
        assert f"sub={[0, 1] if r < 2 else [2, 3]} tp={[0, 1] if r < 2 else [2, 3]}" in line
        assert "objs=['0', '1', '2', '3']" in line
    seeds = set(re.findall(r"hashseed=(\d+)", text))
    assert len(seeds) > 1, "every rank should have its own string-hash seed"
    envs = dict(re.findall(r"\[rank(\d)\]:ENV (.*)", text))
    for r, line in envs.items():
        env = dict(kv.split("=", 1) for kv in line.split())
        assert "-" not in env.values(), f"torchrun variable missing on rank {r}: {env}"
        parsed = RankEnv.from_environ(env)
        assert (parsed.rank, parsed.local_rank, parsed.world_size, parsed.master_addr) == \
            (int(r), int(r), 4, "127.0.0.1")
    # a rank the launcher stopped after the first 77 may not have printed its stop
    stops = set(re.findall(r"\[rank(\d)\]:error: needs a real GPU: torch.cuda.CUDAGraph at "
                           r".*gpu_style.py:\d+", text))
    assert {str(r) for r, c in codes.items() if c == NEEDS_GPU_EXIT} <= stops, text
    ignored = re.findall(r"\[rank0\]:simharness shim: ignored \(GPU-only, not run on CPU\): (.*)",
                         text)
    assert len(ignored) == 1 and "[rank1]:simharness shim" not in text, text
    for part in ("init_process_group: backend 'cuda:nccl,cpu:gloo' (runs on gloo)",
                 "init_process_group: device_id=device(type='cuda', index=0)",
                 "new_group: backend 'nccl' (runs on gloo) (2x)",
                 "new_group: pg_options=ProcessGroupNCCL.Options({'is_high_priority_stream': "
                 "True, 'cga_cluster_size': 2}) (2x)",
                 "NCCL environment: NCCL_ALGO=Ring"):
        assert part in ignored[0], ignored[0]


def test_failing_rank_is_named_and_the_others_stopped():
    res, text = launch_in_child([str(SCRIPTS / "sleeper.py"), "--fail-rank", "1"], 3,
                                shim=False)
    codes = dict(res["ranks"])
    assert codes[1] == 3 and codes[0] in (-15, None) and codes[2] in (-15, None), text
    assert res["exit"] == 3


def test_sigterm_stops_every_rank_and_leaves_no_temp_files(tmp_path):
    env = child_env()
    env["TMPDIR"] = str(tmp_path)
    code = ("from simharness.launch.launcher import LaunchSpec, launch\n"
            f"r = launch(LaunchSpec(({str(SCRIPTS / 'sleeper.py')!r},), nproc_per_node=2, "
            "shim=False))\nprint('LAUNCH', r.signal, r.exit_code, flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids, lines = [], []
    deadline = time.monotonic() + TIMEOUT
    try:
        assert proc.stdout is not None
        while len(pids) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"READY \d (\d+)", line)
            if m:
                pids.append(int(m.group(1)))
        assert len(pids) == 2, "".join(lines)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "LAUNCH 15 143" in rest, "".join(lines) + rest
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend, lazy", [("nccl", False), ("gloo", False), ("gloo", True)],
                         ids=["nccl", "gloo", "gloo-TORCH_GLOO_LAZY_INIT=1"])
def test_monitored_barrier_names_an_absent_rank_at_once(backend, lazy, monkeypatch):
    """Under the shim a group asked of gloo connects eagerly (gloo's default), and one asked
    of NCCL connects on first use, where rank 0's monitored_barrier first waits for the
    members (for its own timeout); either way rank 0 names the rank that never calls it
    within the timeout on every new group. Under gloo's lazy init rank 0 waits on the pair's
    connection whenever it is the listening side, a coin toss per group (the ports decide),
    so over 16 groups the lazy case gets stuck but once in 65536 runs: the check can fail."""
    if lazy:
        monkeypatch.setenv("TORCH_GLOO_LAZY_INIT", "1")
    monkeypatch.delenv("SIMHARNESS_LAZY_GROUPS", raising=False)  # default: nccl ones lazy
    groups = 16 if lazy else 8
    res, text = launch_in_child([str(SCRIPTS / "absent_rank.py"), "--groups", str(groups),
                                 "--backend", backend], 2)
    named = re.findall(r"\[rank0\]:NAMED (\d) ([\d.]+)", text)
    if lazy:
        assert "[rank0]:STUCK" in text and dict(res["ranks"])[0] == 4, text
        return
    assert dict(res["ranks"]) == {0: 0, 1: 0}, text
    assert [int(i) for i, _ in named] == list(range(8)), text
    assert all(float(s) < 5 for _, s in named), text


def test_megatron_nccl_communicator_config_file_is_accepted_and_listed(tmp_path):
    """megatron-core's own initialize_model_parallel with nccl_communicator_config_path
    (a YAML of per-group NCCL options): the groups are built on gloo and compute, and the
    options megatron-core read from the file are listed as ignored, with their values."""
    pytest.importorskip("megatron.core.parallel_state")
    conf = tmp_path / "comm.yaml"
    conf.write_text("tp:\n  cga_cluster_size: 2\n  max_ctas: 8\n  min_ctas: 2\n"
                    "  net_name: IB\ndp:\n  is_high_priority_stream: true\n")
    res, text = launch_in_child([str(SCRIPTS / "megatron_comm_config.py"), str(conf)], 2)
    assert res["exit"] == 0, text
    assert text.count("TP ranks=[0, 1] sum=3") == 2, text
    ignored = re.findall(r"\[rank0\]:simharness shim: ignored \(GPU-only, not run on CPU\): (.*)",
                         text)
    assert len(ignored) == 1, text
    assert ("new_group: pg_options=ProcessGroupNCCL.Options({'is_high_priority_stream': False, "
            "'cga_cluster_size': 2, 'max_ctas': 8, 'min_ctas': 2, 'net_name': 'IB'})"
            ) in ignored[0], ignored[0]
    assert "pg_options=ProcessGroupNCCL.Options({'is_high_priority_stream': True}) (2x)" \
        in ignored[0], ignored[0]
