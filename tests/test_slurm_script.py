"""The job script shell/slurm.sh writes and submits: #SBATCH options, configuration, network
settings and the srun line, for each platform and container mode (DRY_RUN=1: written, not submitted)."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shell_harness import FakeMachine
from utils.spec import stacks

SLURM_KNOBS = {"SLURM_PARTITION": "", "SLURM_ACCOUNT": "", "SLURM_QOS": "", "SLURM_TIME": "01:30:00",
               "SLURM_CONTAINER": "none", "SLURM_CONTAINER_IMAGE": "", "SLURM_PENDING_TIMEOUT": "600"}
TWO_GPU_NODES = {"NNODES": "2", "GPUS_PER_NODE": "8", "DP": "16", "GA": "1"}
TWO_CPU_NODES = {"NNODES": "2", "GPUS_PER_NODE": "1", "DP": "2", "GA": "1"}


@dataclass
class JobScript:
    """A written job script, taken apart."""

    text: str

    @property
    def sbatch(self) -> list[str]:
        return [line.removeprefix("#SBATCH ") for line in self.text.splitlines() if line.startswith("#SBATCH ")]

    @property
    def exports(self) -> dict[str, str]:
        pairs = [shlex.split(line)[1].split("=", 1) for line in self.text.splitlines() if line.startswith("export ")]
        return dict(pairs)

    @property
    def srun(self) -> list[str]:
        """The srun command line (up to the failure handler after ||)."""
        words = shlex.split(self.text[self.text.index("\nsrun ") + 1:].replace("\\\n", " "))
        return words[:words.index("||")]

    @property
    def on_failure(self) -> str:
        return self.text.rstrip().rsplit("|| ", 1)[1]

    def srun_option(self, name: str) -> str | None:
        found = [word.split("=", 1)[1] for word in self.srun if word.startswith(f"--{name}=")]
        return found[0] if found else None


def dry_run(node: FakeMachine, **env: str) -> tuple[JobScript, str]:
    """Run shell/slurm.sh with DRY_RUN=1; return the job script and the run-set directory."""
    result = node.run("shell/slurm.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", **env})
    assert result.returncode == 0, result.output
    scripts = list(Path(node.env["OUTPUT_DIR"]).glob("*/job.sbatch"))
    assert len(scripts) == 1, result.output
    return JobScript(scripts[0].read_text()), str(scripts[0].parent)


def test_cpu_job_asks_one_task_per_node_exclusively_and_writes_into_the_run_set(tmp_path):
    node = FakeMachine(tmp_path)
    job, run_set = dry_run(node, PLATFORM="cpu", **TWO_CPU_NODES)
    assert Path(run_set).parent == Path(node.env["OUTPUT_DIR"]) and Path(run_set).name.endswith("-cpu")
    assert job.sbatch == ["--job-name=tprimat-cpu", "--nodes=2", "--ntasks-per-node=1", "--exclusive", "--mem=0",
                          "--time=01:30:00", "--no-requeue", f"--output={run_set}/slurm-%j.out"]
    assert job.exports["RUN_SET_DIR"] == run_set


def test_gpu_job_asks_every_gpu_of_each_node_and_the_configured_partition_account_qos(tmp_path):
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="nvd", SLURM_PARTITION="gpu", SLURM_ACCOUNT="proj42",
                     SLURM_QOS="high", **TWO_GPU_NODES)
    assert "--gpus-per-node=8" in job.sbatch
    assert {"--partition=gpu", "--account=proj42", "--qos=high"} <= set(job.sbatch)


def test_job_carries_the_validated_configuration_but_not_what_each_node_sets_itself(tmp_path):
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="cpu", SEED="7", **TWO_CPU_NODES)
    assert job.exports["SEED"] == "7" and job.exports["NNODES"] == "2" and job.exports["PLATFORM"] == "cpu"
    assert job.exports["TRAIN_ITERS"] == "30"  # the CPU profile, resolved on the login node
    assert not {"NODE_RANK", "MASTER_ADDR", "LAUNCHER", "DETACH"} & set(job.exports)
    assert "\nunset LAUNCHER" in job.text


def test_script_is_valid_bash_that_prepares_the_rendezvous_before_srun(tmp_path):
    node = FakeMachine(tmp_path)
    job, run_set = dry_run(node, PLATFORM="cpu", **TWO_CPU_NODES)
    subprocess.run(["bash", "-n", f"{run_set}/job.sbatch"], check=True)
    assert job.text.index("tp_job_prepare") < job.text.index("\nsrun ")
    assert f"source {node.root}/shell/slurm_job.sh" in job.text
    assert job.on_failure == 'tp_job_failed "$?"'  # the failing node's exit code becomes the job's


@pytest.mark.parametrize("platform, nodes", [("cpu", TWO_CPU_NODES), ("nvd", TWO_GPU_NODES), ("amd", TWO_GPU_NODES)])
def test_host_runtime_runs_the_node_script_once_per_node_with_all_its_cpus(tmp_path, platform, nodes):
    node = FakeMachine(tmp_path)
    job, _ = dry_run(node, PLATFORM=platform, SLURM_CONTAINER="none", **nodes)
    assert job.srun == ["srun", "--ntasks-per-node=1", "--cpus-per-task=${SLURM_CPUS_ON_NODE}", "--kill-on-bad-exit=1",
                        "--wait=600", "--label", "bash", f"{node.root}/shell/slurm_job.sh", "node", "host"]


@pytest.mark.parametrize("platform", ["nvd", "amd"])
def test_pyxis_runs_the_image_with_every_path_mounted_where_it_is_on_the_host(tmp_path, platform):
    node = FakeMachine(tmp_path)
    image = tmp_path / f"tprimat+{platform}.sqsh"
    image.write_bytes(b"squashfs")
    job, _ = dry_run(node, PLATFORM=platform, SLURM_CONTAINER="pyxis", SLURM_CONTAINER_IMAGE=str(image),
                     **TWO_GPU_NODES)
    assert job.srun_option("container-image") == str(image)
    mounts = job.srun_option("container-mounts").split(",")
    for key in ("DATA_DIR", "OUTPUT_DIR", "HF_HOME"):
        assert f"{node.env[key]}:{node.env[key]}" in mounts
    assert f"{node.root}:{node.root}" in mounts
    assert job.srun_option("container-workdir") == str(node.root)
    assert "--no-container-mount-home" in job.srun
    assert job.srun[-4:] == ["bash", f"{node.root}/shell/slurm_job.sh", "node", "pyxis"]


def test_pyxis_takes_an_enroot_image_reference_as_given(tmp_path):
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="nvd", SLURM_CONTAINER="pyxis",
                     SLURM_CONTAINER_IMAGE="registry.example.com#tprimat:nvd", **TWO_GPU_NODES)
    assert job.srun_option("container-image") == "registry.example.com#tprimat:nvd"


def test_pyxis_without_its_squashfs_image_stops_and_says_how_to_import_it(tmp_path):
    node = FakeMachine(tmp_path)
    result = node.run("shell/slurm.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", "PLATFORM": "nvd",
                                           "SLURM_CONTAINER": "pyxis", **TWO_GPU_NODES})
    assert result.returncode == 2
    image = f"tprimat:nvd-{stacks.default('nvd').name}"  # the default stack's image, named after its row
    assert f"enroot import -o {node.root}/tprimat+{image.split(':')[1]}.sqsh dockerd://{image}" in result.stderr
    assert not list(Path(node.env["OUTPUT_DIR"]).glob("*/job.sbatch"))


def test_amd_jobs_get_rccl_roce_defaults_and_pyxis_lets_them_win_over_the_image(tmp_path):
    image = tmp_path / "amd.sqsh"
    image.write_bytes(b"squashfs")
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="amd", SLURM_CONTAINER="pyxis",
                     SLURM_CONTAINER_IMAGE=str(image), **TWO_GPU_NODES)
    assert job.exports["NCCL_IB_GID_INDEX"] == "3" and job.exports["NCCL_CROSS_NIC"] == "0"
    assert job.srun_option("container-env") == "NCCL_CROSS_NIC,NCCL_DEBUG,NCCL_IB_GID_INDEX"


def test_configured_socket_interface_reaches_nccl_and_gloo(tmp_path):
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="nvd", NET_SOCKET_IFNAME="ens1f0", NET_IB_HCA="mlx5_0,mlx5_1",
                     **TWO_GPU_NODES)
    assert job.exports["NCCL_SOCKET_IFNAME"] == "ens1f0" and job.exports["GLOO_SOCKET_IFNAME"] == "ens1f0"
    assert job.exports["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert job.srun_option("container-env") is None  # host runtime: nothing to override


def test_nvidia_job_without_network_settings_leaves_nccl_to_choose_and_logs_its_choice(tmp_path):
    job, _ = dry_run(FakeMachine(tmp_path), PLATFORM="nvd", **TWO_GPU_NODES)
    assert [key for key in job.exports if key.startswith(("NCCL_", "GLOO_"))] == ["NCCL_DEBUG"]
    assert job.exports["NCCL_DEBUG"] == "INFO"


def path_without_slurm(tmp_path: Path) -> str:
    """A PATH with every system command except Slurm's (a machine that is no login node)."""
    bin_dir = tmp_path / "no-slurm-bin"
    bin_dir.mkdir()
    for source in (Path("/usr/bin"), Path("/bin")):
        for tool in source.iterdir():
            if not tool.name.startswith(("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")) \
                    and not (bin_dir / tool.name).exists():
                (bin_dir / tool.name).symlink_to(tool)
    return str(bin_dir)


def test_submitting_needs_sbatch_and_says_what_to_do_instead(tmp_path):
    node = FakeMachine(tmp_path)
    result = node.run("shell/slurm.sh", **{**SLURM_KNOBS, "PLATFORM": "cpu", "PATH": path_without_slurm(tmp_path),
                                           **TWO_CPU_NODES})
    assert result.returncode == 2
    assert "no sbatch on PATH" in result.stderr and "README" in result.stderr


def test_docker_runtime_is_refused_on_slurm(tmp_path):
    result = FakeMachine(tmp_path).run("shell/slurm.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", "PLATFORM": "nvd",
                                                            "RUNTIME": "docker", **TWO_GPU_NODES})
    assert result.returncode == 2 and "SLURM_CONTAINER=pyxis" in result.stderr


def test_unknown_container_mode_is_refused(tmp_path):
    result = FakeMachine(tmp_path).run("shell/slurm.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", "PLATFORM": "cpu",
                                                            "SLURM_CONTAINER": "apptainer", **TWO_CPU_NODES})
    assert result.returncode == 2 and "none, pyxis" in result.stderr


def test_a_bad_configuration_stops_before_a_run_set_is_made(tmp_path):
    node = FakeMachine(tmp_path)
    result = node.run("shell/slurm.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", "PLATFORM": "nvd", "NNODES": "2",
                                           "GPUS_PER_NODE": "8", "DP": "8"})
    assert result.returncode == 2 and "NNODES x GPUS_PER_NODE = 16" in result.stderr
    assert not Path(node.env["OUTPUT_DIR"]).exists()


# --- ./shell/run_train.sh hands multi-node runs to Slurm ----------------------------------------------

def login_path(tmp_path: Path, node: FakeMachine) -> str:
    """PATH of a login node: an sbatch that must not be called in a dry run."""
    bin_dir = tmp_path / "login-bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch must not run in a dry run' >&2\nexit 99\n")
    (bin_dir / "sbatch").chmod(0o755)
    return f"{bin_dir}:{node.env['PATH']}"


@pytest.mark.parametrize("launcher", ["slurm", "auto"])
def test_run_train_on_a_login_node_submits_multi_node_runs_to_slurm(tmp_path, launcher):
    node = FakeMachine(tmp_path)
    result = node.run("shell/run_train.sh", **{**SLURM_KNOBS, "DRY_RUN": "1", "PLATFORM": "nvd", "LAUNCHER": launcher,
                                               "PATH": login_path(tmp_path, node), **TWO_GPU_NODES})
    assert result.returncode == 0, result.output
    assert "dry run: would submit: sbatch" in result.stderr
    assert len(list(Path(node.env["OUTPUT_DIR"]).glob("*-nvd/job.sbatch"))) == 1
