"""A stack row is one commit touching only the stack table, utils/spec/stacks.py (issue 44): in a copy of TPrimat
whose table gains a new newest checked row, the new default, on each GPU platform and nothing else, the tests that
read a platform's default, the Dockerfiles' base image and the docs' table still pass. Each new row is today's default under
a later tag and date, so every fact but the default's name stays what the tests know. The copy holds the repository's
files as the working tree has them (git ls-files: tracked, or new and not ignored), so uncommitted work is proved too.
"""

from __future__ import annotations

import ast
import filecmp
import shutil
import subprocess
import sys

from tests.shell_harness import HANG_TIMEOUT_S, REPO
from utils.spec import stacks

TABLE = "utils/spec/stacks.py"
GPU_PLATFORMS = ("amd", "nvd")
# The tests that read a platform's default row, the Dockerfiles' base image or the docs' table (most of them failed
# on a new newest row until they read it from the table).
READERS = (
    "tests/test_dockerfiles.py",
    "tests/test_utils_stacks.py",
    "tests/test_utils_config.py::test_a_careless_value_is_one_line_naming_the_rule",
    "tests/test_utils_config.py::test_frameworks_map_onto_the_platform",
    "tests/test_train_plan.py::test_all_runs_the_default_stack_s_registered_frameworks_in_its_order",
    "tests/test_train_plan.py::test_the_newest_nvidia_stack_skips_nemo_and_names_the_stack_that_has_it",
    "tests/test_train_plan.py::test_torchtitan_on_the_amd_stack_whose_torch_is_too_old_is_skipped_with_the_floor",
    "tests/test_utils_result.py::test_a_requested_run_records_its_stack_and_the_image_digest_or_why_there_is_none",
    "tests/test_utils_platform_env.py::test_without_a_stack_the_platforms_default_stack_is_meant",
    "tests/test_shell_stacks.py::test_a_wrapper_of_a_framework_the_default_stack_lacks_names_the_stack_that_has_it",
)


def repository_files() -> list[str]:
    """The repository's files as the working tree holds them (a deleted one stays listed until it is staged)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True, timeout=60).stdout
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def later(row: stacks.Stack) -> dict[str, str]:
    """A later image of the row's stack: a point release of its tag, one month on."""
    year, month = map(int, row.released.split("-"))
    return {"name": f"{row.name}.1", "image": f"{row.image}.1",
            "released": f"{year + month // 12}-{month % 12 + 1:02d}"}


def with_newest_row(source: str, row: stacks.Stack) -> str:
    """The table's source with a copy of `row`'s lines, renamed as its later image, written above them: the edit a
    person makes to add a new default."""
    rows = next(node.value for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ROWS")
    call = next(call for call in rows.elts if any(keyword.arg == "name" and ast.literal_eval(keyword.value) == row.name
                                                  for keyword in call.keywords))
    lines = source.splitlines(keepends=True)
    written = "".join(lines[call.lineno - 1:call.end_lineno])
    for field, value in later(row).items():
        old = f'{field}="{getattr(row, field)}"'
        assert written.count(old) == 1, old
        written = written.replace(old, f'{field}="{value}"')
    return "".join(lines[:call.lineno - 1]) + written + "".join(lines[call.lineno - 1:])


def test_a_new_newest_row_on_each_gpu_platform_needs_no_edit_outside_the_table(tmp_path):
    copy, files = tmp_path / "repo", repository_files()
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    source = (copy / TABLE).read_text()
    for platform in GPU_PLATFORMS:
        source = with_newest_row(source, stacks.default(platform))
    (copy / TABLE).write_text(source)
    defaults = subprocess.run([sys.executable, "-c", "import sys; from utils.spec import stacks; "
                               "print(*(stacks.default(platform).name for platform in sys.argv[1:]))", *GPU_PLATFORMS],
                              cwd=copy, capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert defaults == [later(stacks.default(platform))["name"] for platform in GPU_PLATFORMS]
    readers = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *READERS], cwd=copy,
                             capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert readers.returncode == 0, readers.stdout[-4000:] + readers.stderr[-2000:]
    assert [name for name in files if not filecmp.cmp(REPO / name, copy / name, shallow=False)] == [TABLE]
