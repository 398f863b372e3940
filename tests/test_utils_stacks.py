"""utils.spec.stacks: the stack table is well formed, and the facts it repeats stay equal to their sources."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.shell_harness import REPO
from utils import frameworks
from utils.spec import stacks


def test_each_platform_has_one_default_its_newest_checked_row():
    for platform in ("amd", "nvd", "cpu"):
        rows = stacks.of(platform)
        assert stacks.default(platform) is next(row for row in rows if row.checked)
        assert [row.released for row in rows] == sorted((row.released for row in rows), reverse=True)


def test_an_unchecked_newest_row_is_selectable_by_stack_but_not_the_default(monkeypatch):
    """A row whose frameworks CI cannot install yet: STACK reaches it, an empty STACK does not, the table says so."""
    from dataclasses import replace

    from utils.config.selection import resolve_stack

    checked = stacks.default("amd")
    newer = replace(checked, name=checked.name + ".1", released="2099-01", checked=False)
    rows = (newer, *stacks.ROWS)
    monkeypatch.setattr(stacks, "ROWS", rows)
    monkeypatch.setattr(stacks, "TABLE", {row.name: row for row in rows})
    monkeypatch.setattr(stacks, "NAMES", tuple(row.name for row in rows))
    problems: list[str] = []
    assert resolve_stack(newer.name, "amd", problems) is newer and not problems
    assert resolve_stack("", "amd", problems) is checked is stacks.default("amd")
    assert stacks.having("mega", "amd") is checked  # a skip line names the checked row
    assert f"| {newer.name} (not checked here) |" in stacks.markdown()
    assert f"| {checked.name} (default) |" in stacks.markdown()


def test_names_are_unique_and_end_in_their_image_s_tag():
    assert len(stacks.NAMES) == len(stacks.ROWS)
    for row in stacks.ROWS:
        if row.image:
            assert row.image.endswith(":" + row.name.split("-", 1)[1]), row.name


@pytest.mark.parametrize("row", stacks.ROWS, ids=lambda row: row.name)
def test_every_row_names_registered_frameworks_of_its_platform(row):
    for name in row.frameworks:
        assert name in frameworks.TABLE, f"{row.name} names {name}, which utils/frameworks/ does not register"
        assert row.platform in frameworks.TABLE[name].platforms, name
    assert len(set(row.frameworks)) == len(row.frameworks) and "mega" in row.frameworks


@pytest.mark.parametrize("row", stacks.ROWS, ids=lambda row: row.name)
def test_every_row_has_its_versions_and_says_where_they_were_read(row):
    assert re.fullmatch(r"20\d\d-\d\d", row.released)
    assert row.megatron_core and row.source
    if row.platform == "cpu":
        assert row.image is None and row.runtime == "" and row.torch
        return
    assert row.image and re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9._-]+", row.image)
    vendor = row.primus if row.platform == "amd" else (row.nemo or row.megatron_bridge)
    assert vendor, f"{row.name}: its vendor framework's version"
    unpublished = [field for field in ("runtime", "torch", "transformer_engine") if getattr(row, field) is None]
    if unpublished:
        assert "not published" in row.source, f"{row.name}: say why {', '.join(unpublished)} is unknown"


def test_the_host_row_repeats_requirements_host_txt():
    lines = (line.split("#", 1)[0].strip() for line in (REPO / "requirements" / "host.txt").read_text().splitlines())
    pins = dict(line.split("==") for line in lines if "==" in line)
    host = stacks.default("cpu")
    assert (host.torch, host.megatron_core) == (pins["torch"], pins["megatron-core"])


def test_a_framework_on_an_older_stack_only_is_found_there():
    assert stacks.having("nemo", "nvd").name == "nemo-25.04"
    assert stacks.having("mega", "nvd") is stacks.default("nvd")
    assert stacks.having("prim", "nvd") is None


@pytest.mark.parametrize("env, digest, note", [
    ({"TPRIMAT_IMAGE_DIGEST": "rocm/primus@sha256:ab12", "TPRIMAT_RUNTIME": "docker"}, "rocm/primus@sha256:ab12", ""),
    ({"TPRIMAT_IMAGE_DIGEST": "unknown", "TPRIMAT_RUNTIME": "docker"}, None, "no registry digest"),
    ({"TPRIMAT_RUNTIME": "docker"}, None, "started without TPRIMAT_IMAGE_DIGEST"),
    ({}, None, "host runtime"),
])
def test_the_image_digest_or_why_there_is_none(env, digest, note):
    found, why = stacks.image_digest(env)
    assert found == digest and note in why and bool(why) == (digest is None)


def test_docs_tested_stacks_names_the_command_that_prints_the_table_and_keeps_no_copy():
    """A copy in the docs would need an edit per row; the command cannot go stale."""
    section = (REPO / "docs" / "frameworks.md").read_text().split("## Tested stacks", 1)[1].split("\n## ", 1)[0]
    assert "`python3 -m utils.spec.stacks markdown` prints it" in section
    assert "| Stack |" not in section


def test_the_markdown_command_prints_every_row_in_order_marking_defaults_and_rows_not_checked_here():
    printed = subprocess.run([sys.executable, "-m", "utils.spec.stacks", "markdown"], cwd=REPO, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert printed == stacks.markdown() + "\n"
    shown = [line.split(" | ", 1)[0].removeprefix("| ") for line in printed.splitlines()[2:]]
    assert shown == [row.name + (" (default)" if row is stacks.default(row.platform) else "")
                     + ("" if row.checked else " (not checked here)") for row in stacks.ROWS]


def test_a_gpu_run_outside_any_image_records_the_host_stack_not_its_row_s_image(monkeypatch):
    """Planned for a row, run on TPRIMAT_PYTHON's packages: the result must not credit the row's image."""
    from tests.fixtures.train_matrix.requests import run_request

    monkeypatch.delenv("TPRIMAT_IMAGE_DIGEST", raising=False)
    monkeypatch.setenv("TPRIMAT_RUNTIME", "host")
    on_host = run_request("nvd", "fsdp", "llama").result_stack()
    monkeypatch.setenv("TPRIMAT_IMAGE_DIGEST", "nvcr.io/nvidia/nemo@sha256:" + "0" * 64)
    in_image = run_request("nvd", "fsdp", "llama").result_stack()
    row = stacks.default("nvd")
    assert (on_host["name"], on_host["image"], on_host["image_digest"]) == ("host", None, None)
    assert row.name in on_host["image_digest_note"] and "host runtime" in on_host["image_digest_note"]
    assert (in_image["name"], in_image["image"]) == (row.name, row.image)
    assert in_image["image_digest"].endswith("0" * 64)


def test_no_stack_lists_a_framework_its_published_torch_is_too_old_for():
    """A row lists a framework only where its pinned version imports on the image's torch: torchtitan 0.3.0 needs
    torch 2.13 (utils/upstream/table.py's torchtitan and torch facts), rocm/primus:v26.5 ships 2.12.0."""
    listed = {(row.name, name): why for row in stacks.ROWS for name in row.frameworks
              if (why := frameworks.TABLE[name].torch_refusal(row.torch))}
    assert listed == {}
    assert frameworks.TABLE["torchtitan"].torch_refusal(stacks.get("primus-v26.5").torch) == (
        "torchtitan needs torch 2.13 or later (torchtitan 0.3.0 imports torch.distributed.fsdp.DataParallelMeshDims "
        "and calls create_block_mask(separate_full_blocks=...), both new in torch 2.13), not 2.12.0")
    assert "torchtitan" not in stacks.get("primus-v26.5").frameworks


def test_the_torch_floor_names_the_pinned_torchtitan():
    pin = next(line for line in (REPO / "requirements" / "torchtitan.txt").read_text().splitlines()
               if line.startswith("torchtitan=="))
    assert f"torchtitan {pin.split('==')[1]} " in frameworks.TABLE["torchtitan"].torch_floor[1]


@pytest.mark.parametrize("torch, refused", [("2.12.0", True), ("2.12.0a0+git", True), ("2.13.0", False),
                                            ("2.13", False), ("2.15.0+cu132", False), (None, False)])
def test_a_torch_below_the_floor_is_refused_and_an_unpublished_one_is_left_to_the_import(torch, refused):
    assert bool(frameworks.TABLE["torchtitan"].torch_refusal(torch)) is refused


@pytest.mark.parametrize("name, scratch_reclaim_off, ck_backward_v3", [("primus-v26.5", "1", "1"),
                                                                      ("primus-v25.11", "0", "0")])
def test_each_amd_row_runs_its_primus_releases_own_scratch_and_attention_defaults(name, scratch_reclaim_off,
                                                                                  ck_backward_v3):
    """What each Primus release's launcher exports when the caller sets nothing (utils/upstream/table.py), so mega,
    fsdp and autotp on that image run as prim does."""
    env = stacks.get(name).env
    assert (env["HSA_NO_SCRATCH_RECLAIM"], env["NVTE_CK_USES_BWD_V3"]) == (scratch_reclaim_off, ck_backward_v3)
