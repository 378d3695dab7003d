"""A sealed cell's GPUs: Ray's ids mapped to device nodes through the driver's table, only those
bound, a large /dev/shm, NCCL on loopback, and a cell bigger than every node refused at planning
(docs/design.md#gpu-platform)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autorl.cluster import gpu_fit_problems
from autorl.config import compose, plan_sweep
from autorl.schema import SandboxNetwork
from autorl.seal.bwrap import SandboxSpec, bwrap_command
from autorl.seal.bwrap_seal import BwrapSeal
from autorl.seal.gpus import (
    DEV_DIR_ENV,
    GpuDevice,
    GpuMappingError,
    device_binds,
    map_visible_devices,
    parse_device_table,
    query_device_table,
)
from tests.helpers.fake_gpus import TABLE, fake_gpu_node

ROWS = tuple(GpuDevice(str(i), uuid, minor) for i, uuid, minor in TABLE)


def _dev_binds(argv: list[str]) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == "--dev-bind"]


def test_ids_map_by_index_or_uuid_to_the_minor_number_not_the_index() -> None:
    assert [d.minor for d in map_visible_devices("1,3", ROWS)] == [5, 7]
    uuid = TABLE[2][1]
    assert map_visible_devices(f" {uuid} ,0", ROWS) == (ROWS[2], ROWS[0])
    assert map_visible_devices(uuid.lower().removeprefix("gpu-"), ROWS) == (ROWS[2],)
    assert map_visible_devices("", ROWS) == ()


def test_an_id_of_no_gpu_is_an_error_naming_the_id_and_the_table() -> None:
    with pytest.raises(GpuMappingError) as raised:
        map_visible_devices("1,7", ROWS)
    message = str(raised.value)
    assert "'7'" in message and "index 1, " + TABLE[1][1] + ", /dev/nvidia5" in message
    with pytest.raises(GpuMappingError, match="GPU-nope.*no GPUs"):
        map_visible_devices("GPU-nope", ())
    with pytest.raises(GpuMappingError, match="unreadable line"):
        parse_device_table("0, GPU-aa, [N/A]\n")


def test_the_table_comes_from_nvidia_smi_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, _ = fake_gpu_node(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert query_device_table() == ROWS
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(GpuMappingError, match="nvidia-smi is not on this node's PATH"):
        query_device_table()


def test_binds_are_the_gpus_own_nodes_and_the_control_devices_present(tmp_path: Path) -> None:
    _, dev = fake_gpu_node(tmp_path)
    binds = device_binds(ROWS[1:3], dev)
    assert [(str(h), str(i)) for h, i in binds] == [
        (f"{dev}/nvidia5", "/dev/nvidia5"),
        (f"{dev}/nvidia6", "/dev/nvidia6"),
        (f"{dev}/nvidiactl", "/dev/nvidiactl"),
        (f"{dev}/nvidia-uvm", "/dev/nvidia-uvm"),
        (f"{dev}/nvidia-caps", "/dev/nvidia-caps"),
    ]
    assert device_binds((), dev) == []
    (dev / "nvidia7").unlink()
    with pytest.raises(GpuMappingError, match="no device node .*nvidia7"):
        device_binds(ROWS[3:], dev)


def test_a_sealed_gpu_cell_binds_only_its_nodes_and_gets_uuids_shm_and_loopback_nccl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, dev = fake_gpu_node(tmp_path / "node")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv(DEV_DIR_ENV, str(dev))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"2,{TABLE[0][1]}")
    cell_dir = tmp_path / "cell"
    (cell_dir / "ws").mkdir(parents=True)
    seal = BwrapSeal(compose(["cell.gpus=2", "cell.memory_gb=3"]), "c1", cell_dir)
    env = seal.base_env({"CUDA_VISIBLE_DEVICES": "2,0"}, cell_dir / "home")
    assert env["CUDA_VISIBLE_DEVICES"] == f"{TABLE[2][1]},{TABLE[0][1]}"
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["GLOO_SOCKET_IFNAME"] == "lo"
    argv = seal.wrap(
        ["true"], workspace=cell_dir / "ws", home=cell_dir / "ws", base_model=tmp_path, read_only=[]
    )
    assert _dev_binds(argv) == [
        (f"{dev}/nvidia-caps", "/dev/nvidia-caps"),
        (f"{dev}/nvidia-uvm", "/dev/nvidia-uvm"),
        (f"{dev}/nvidia4", "/dev/nvidia4"),
        (f"{dev}/nvidia6", "/dev/nvidia6"),
        (f"{dev}/nvidiactl", "/dev/nvidiactl"),
    ]
    shm = argv.index("/dev/shm")
    assert argv[shm - 3 : shm] == ["--size", str(3 << 30), "--tmpfs"]

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "9")
    with pytest.raises(GpuMappingError, match="'9'"):
        BwrapSeal(compose(["cell.gpus=1"]), "c2", cell_dir).base_env({}, cell_dir / "home")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(GpuMappingError, match="no CUDA_VISIBLE_DEVICES"):
        BwrapSeal(compose(["cell.gpus=1"]), "c3", cell_dir).reserved_gpus()
    cpu_cell = BwrapSeal(compose([]), "c4", cell_dir)
    assert cpu_cell.reserved_gpus() == () and "CUDA_VISIBLE_DEVICES" not in cpu_cell.base_env(
        {"CUDA_VISIBLE_DEVICES": "0"}, cell_dir / "home"
    )


def test_shm_size_is_given_to_bubblewrap_only_when_set() -> None:
    spec = SandboxSpec("bwrap", (), Path("/"), SandboxNetwork.none, None)
    assert "--size" not in bwrap_command(spec, ["true"])


def test_a_cell_or_grader_asking_more_gpus_than_any_node_is_refused_with_the_numbers(
    tmp_path: Path,
) -> None:
    plan = plan_sweep(["cell.gpus=3", "sandbox.mode=none", f"out_dir={tmp_path}"])
    [cell] = plan.cells
    [problem] = gpu_fit_problems(plan.cells, 0, [2, 0, 1])
    assert problem == (
        f"cell {cell.cell_id}: cell.gpus=3 but the largest node has 2 GPU(s): lower cell.gpus or "
        "add a bigger node"
    )
    assert gpu_fit_problems(plan.cells, 0, [4, 2]) == []
    assert "grader.gpus=1 but the largest node has 0 GPU(s)" in gpu_fit_problems([], 1, [0])[0]
