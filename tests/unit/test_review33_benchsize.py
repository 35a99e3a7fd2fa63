"""Review 33: the sizing, bench and cpuinfo mutations that survived. Each test pins a boundary or
a figure a user sees: which runs the memory and process checks refuse (and the flag they name),
the bench's arguments, table and results file, and what the CPU readers report where /proc or a
cgroup says something unusual."""

from __future__ import annotations

import builtins
import io
import os
import platform
import shlex

import pytest
import torch

from proxima import bench, cli, cpuinfo, sizing
from proxima.config import ConfigError, PPOConfig, num_iterations
from proxima.diskspace import human_bytes

CPU = torch.device("cpu")
W = sizing.ASYNC_WORKER_BYTES


# ------------------------------------------------------------------ sizing: memory of the run
def _parts(cfg, device, obs=4, act=1, native=True):
    """(buffers with the eval envs, networks, eval envs), as check_fits adds them up for ``probe``."""
    evals = sizing.eval_bytes(cfg, obs, native)
    buffers = sizing.estimate_bytes(cfg, obs, act, native, None, device) + evals
    return buffers, sizing.network_bytes(cfg, obs, act, None), evals


def _probe():
    return sizing.EnvSizes(4, 1, True)


def test_smallest_factor_of_odd_prime_squares_and_the_minibatches_it_allows():
    # 9 = 3 x 3: the trial division must reach d * d == n, else a square of a prime passes for a prime
    assert [sizing._smallest_factor(n) for n in (9, 25, 49, 15, 7)] == [3, 5, 7, 3, 7]
    # --norm-adv needs minibatches of 2+ rows: 9 envs x 1 step split at most into 3 of 3
    assert sizing.most_minibatches(PPOConfig(num_envs=9, num_steps=1, norm_adv=True)) == 3


def test_nproc_ranks_on_cpu_count_the_eval_envs_once(monkeypatch):
    """Only rank 0 evaluates: K ranks need K x (buffers + nets) less K-1 copies of the eval envs."""
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=64, num_steps=8, eval_episodes=10_000, hidden_sizes=(8,))
    buffers, nets, evals = _parts(cfg, CPU)
    need = 2 * (buffers + nets) - evals
    assert human_bytes(need) != human_bytes(need + evals)  # the eval envs show in the figure
    monkeypatch.setattr(sizing, "free_memory", lambda device: need)
    sizing.check_fits(cfg, CPU, _probe, processes=2)  # fits exactly: not refused
    monkeypatch.setattr(sizing, "free_memory", lambda device: need - 1)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, CPU, _probe, processes=2)
    assert str(e.value).startswith("--nproc 2: ") and f"~{human_bytes(need)} in all" in str(e.value), str(e.value)


def test_nproc_ranks_on_cuda_each_hold_only_their_own_gpu(monkeypatch):
    """--nproc K on CUDA puts each rank on a GPU of its own: one rank's share must fit, not K."""
    cuda = torch.device("cuda")  # free_memory is mocked: no GPU is touched
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=64, num_steps=8, eval_episodes=0)
    buffers, nets, _ = _parts(cfg, cuda)
    monkeypatch.setattr(sizing, "free_memory", lambda device: (buffers + nets) * 3 // 2)
    sizing.check_fits(cfg, cuda, _probe, processes=2)
    # the same share of the host's memory on the CPU, where the two ranks share it, is refused
    buffers, nets, _ = _parts(cfg, CPU)
    monkeypatch.setattr(sizing, "free_memory", lambda device: (buffers + nets) * 3 // 2)
    with pytest.raises(ConfigError, match="^--nproc 2: "):
        sizing.check_fits(cfg, CPU, _probe, processes=2)


def test_eval_envs_past_half_the_buffers_name_eval_episodes(monkeypatch):
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=1024, num_steps=8, eval_episodes=10_000, hidden_sizes=(8,))
    buffers, nets, evals = _parts(cfg, CPU)
    assert buffers / 2 <= evals < buffers and nets < buffers  # the eval envs are 50-100% of it
    monkeypatch.setattr(sizing, "free_memory", lambda device: buffers + nets - 1)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, CPU, _probe)
    assert str(e.value).startswith("--eval-episodes 10,000: ") and str(e.value).endswith("lower --eval-episodes"), str(e.value)


# ------------------------------------------------------------------ sizing: --vector async workers
def _async(**kw) -> PPOConfig:
    return PPOConfig(**{"env_id": "Pendulum-v1", "backend": "gymnasium", "vector": "async", "num_steps": 8, **kw})


def test_async_workers_exactly_at_the_process_limit_are_refused(monkeypatch):
    monkeypatch.setattr(sizing, "process_limit", lambda: (8, "the RLIMIT_NPROC limit (ulimit -u)"))
    sizing.check_process_count(_async(num_envs=7), 7)  # one under: forks fine
    with pytest.raises(ConfigError) as e:  # the run itself is one of the user's processes: 8 more cannot start
        sizing.check_process_count(_async(num_envs=8), 8)
    assert "8 processes" in str(e.value) and "allows (8)" in str(e.value), str(e.value)


def test_async_workers_memory_counts_what_the_run_holds_beside_them(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 10 * W)
    sizing.check_workers_memory(_async(num_envs=2), 2, CPU, held=8 * W)  # 2 + 8 = 10: fits
    with pytest.raises(ConfigError) as e:
        sizing.check_workers_memory(_async(num_envs=2), 2, CPU, held=9 * W)
    assert f"beside the run's ~{human_bytes(9 * W)}" in str(e.value), str(e.value)


def test_async_probe_is_read_when_free_memory_is_unknown(monkeypatch):
    """Without a free-memory figure the built env still says how many workers it has open already:
    they are not counted twice against the process limit."""

    class Alive:
        def is_alive(self):
            return True

    probed = []

    def probe(open_workers):
        def read():
            sizes = sizing.EnvSizes(3, 1, False)
            sizes.processes = [Alive()] * open_workers
            probed.append(sizes)
            return sizes

        return read

    monkeypatch.setattr(sizing, "free_memory", lambda device: None)
    monkeypatch.setattr(sizing, "process_limit", lambda: (4, "the RLIMIT_NPROC limit (ulimit -u)"))
    sizing.check_fits(_async(num_envs=4), CPU, probe(4))  # forked already: none more to start
    assert len(probed) == 1
    with pytest.raises(ConfigError, match="4 processes"):  # a probe whose env is closed: all 4 still to fork
        sizing.check_fits(_async(num_envs=4), CPU, probe(0))


# ------------------------------------------------------------------ bench: arguments
def _bench_args(*flags):
    return cli.build_parser().parse_args(["bench", "CartPole-v1", "--num-envs", "4", *flags])


@pytest.fixture
def checked(monkeypatch):
    """The (backend, num_envs) lines arguments_problem size-checks, without building any env."""
    calls = []
    monkeypatch.setattr(bench, "check_line", lambda args, backend, n: calls.append((backend, n)))
    return calls


def test_bench_takes_the_documented_most_repeats(checked):
    assert bench.arguments_problem(_bench_args("--repeats", str(bench.MAX_REPEATS), "--backend", "native")) == ""
    assert checked == [("native", 4)]


@pytest.mark.parametrize("flag", ["--threads", "--repeats"])
def test_bench_refuses_zero_threads_or_repeats_in_its_own_words(checked, flag):
    assert bench.arguments_problem(_bench_args(flag, "0", "--backend", "native")) == f"{flag} 0: must be at least 1"


@pytest.mark.parametrize("text", ["0", "4,0"])
def test_bench_sizes_refuse_zero_naming_the_flag(text):
    with pytest.raises(ValueError) as e:
        bench.parse_sizes(text)
    assert str(e.value) == f"--num-envs {text!r}: expected a comma-separated list of positive integers, e.g. 1,4,64"


def test_gymnasium_at_exactly_max_gym_envs_is_size_checked_first(checked):
    assert bench.arguments_problem(_bench_args("--max-gym-envs", "4", "--backend", "gymnasium")) == ""
    assert checked == [("gymnasium", 4)]  # measured (test_review32_plotbench), so checked too
    checked.clear()
    assert bench.arguments_problem(_bench_args("--max-gym-envs", "3", "--backend", "gymnasium")) == ""
    assert checked == []  # skipped: nothing to check


def test_backends_are_measured_once_each():
    assert bench.backends_for("CartPole-v1", "native,native") == ["native"]
    assert bench.backends_for("CartPole-v1", "both,native") == ["native", "gymnasium"]


def test_bench_learning_rate_stays_near_its_start():
    """The bench times a few iterations of a run annealing its learning rate to 0 at its end: that end
    must lie far beyond them (1,000 iterations: within 0.1% of the start), not at iteration 2."""
    cfg = bench.bench_config(_bench_args(), "native", 4)
    assert cfg.anneal_lr and num_iterations(cfg) >= 1000


# ------------------------------------------------------------------ bench: what it prints and records
@pytest.mark.parametrize("x, text", [(999, "999"), (1000, "1.0k"), (5000, "5.0k"), (999_999, "1000.0k"), (1e6, "1.00M")])
def test_steps_per_second_in_the_table(x, text):
    assert bench.fmt_sps(x) == text


def test_json_min_and_max_are_the_samples_extremes():
    args = _bench_args("--json")
    line = bench.Line("native", 4, samples={"train": [2.0, 3.0, 1.0]})
    d = bench.json_line(line, args, bench.bench_config(args, "native", 4), CPU)
    assert (d["train_sps"], d["train_sps_min"], d["train_sps_max"]) == (2.0, 1.0, 3.0)


def test_repeats_text_spans_the_shortest_to_the_longest_repeat():
    lines = [bench.Line("native", 4, seconds={"train": [2.0, 1.0, 3.0]})]
    assert bench.repeats_text(lines, _bench_args()).startswith("3 repeats of 1-3 s each")


def test_recorded_command_reproduces_threads():
    args = _bench_args("--threads", "2")
    argv = shlex.split(bench.command_line(args))
    again = cli.build_parser().parse_args(argv[1:])
    assert argv[0] == "proxima" and again.threads == 2 and again.num_envs == "4"


def test_machine_lines_say_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 3)
    first = bench.machine_lines(CPU, 1)[0]
    assert "64 logical cores (3 usable by this process)" in first, first


# ------------------------------------------------------------------ cpuinfo
def _proc_cpuinfo(monkeypatch, text):
    """/proc/cpuinfo holding ``text``, or missing (None), as on macOS, Windows or a sandbox."""
    real = builtins.open

    def fake(path, *a, **k):
        if path == "/proc/cpuinfo":
            if text is None:
                raise FileNotFoundError(2, "No such file or directory", path)
            return io.StringIO(text)
        return real(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake)


def test_a_missing_proc_cpuinfo_reads_as_unknown(monkeypatch):
    _proc_cpuinfo(monkeypatch, None)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert cpuinfo.cpuinfo("model name") == "" and cpuinfo.cpu_vendor() == ""
    assert bench.cpu_model() == "arm64"  # what bench --out and doctor print then


def test_cpu_vendor_comes_from_proc_cpuinfo_on_linux(monkeypatch):
    _proc_cpuinfo(monkeypatch, "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\n")
    monkeypatch.setattr(platform, "processor", lambda: "x86_64")  # what Linux says: no vendor in it
    assert cpuinfo.cpu_vendor() == "AuthenticAMD"


@pytest.fixture
def cgroup_v2(tmp_path, monkeypatch):
    """A cgroup v2 mount of ``files`` ({path: text}), this process in its cgroup /slice/run."""
    root, own = tmp_path / "cgroup", tmp_path / "self-cgroup"
    (root / "slice" / "run").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    own.write_text("0::/slice/run\n")
    monkeypatch.setattr(cpuinfo, "SELF_CGROUP", str(own))

    def make(files):
        for rel, text in files.items():
            (root / rel).write_text(text)
        return root

    return make


@pytest.mark.parametrize("parent, child", [("100000 100000", "400000 100000"), ("400000 100000", "100000 100000")],
                         ids=["parent-tighter", "child-tighter"])
def test_the_tightest_of_nested_cpu_quotas_binds(cgroup_v2, parent, child):
    root = cgroup_v2({"slice/cpu.max": parent + "\n", "slice/run/cpu.max": child + "\n"})
    assert cpuinfo.cgroup_cpus(root) == 1


def test_a_memory_limit_of_two_numbers_is_no_limit(cgroup_v2):
    root = cgroup_v2({"slice/run/memory.max": "123 456\n", "slice/run/memory.current": "0\n"})
    assert cpuinfo._number(root / "slice/run/memory.max") is None
    assert cpuinfo.cgroup_free_memory(root) is None


def test_doctor_names_the_cpu_model_as_bench_does(monkeypatch):
    """doctor said only 'vendor AuthenticAMD': two machines' benchmark tables could not be told apart."""
    from proxima import doctor

    _proc_cpuinfo(monkeypatch, "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    info = doctor.collect()
    assert info["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+" == bench.cpu_model()
    row = next(r for r in doctor.format_report(info).splitlines() if r.split()[:1] == ["cpu"])
    assert "model Intel(R) Xeon(R) Platinum 8480+, vendor GenuineIntel, " in row


def test_doctor_and_bench_name_an_arm64_linux_cpu_alike(monkeypatch):
    """arm64 kernels print no 'model name': doctor said 'model -' where bench's tables said 'aarch64'."""
    from proxima import doctor

    _proc_cpuinfo(monkeypatch, "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n")
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert doctor.collect()["cpu_model"] == "aarch64" == bench.cpu_model()
