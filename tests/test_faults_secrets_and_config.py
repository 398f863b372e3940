"""Issue 45, class 3 and the configuration parts of classes 5 and 6: a password carried in a URL never leaves the
machine, and configuration the code cannot serve is one line, exit 2, before anything starts (each of these printed
the password, packed it, or crashed with a traceback or at run time)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

import utils.secrets as secrets_module
from evaluate import wrap
from evaluate.history.__main__ import main as history
from tests.test_evaluate_history import run_set
from tests.test_evaluate_wrap import output_dir  # noqa: F401
from tests.test_utils_config import CPU_MACHINE, problems_of
from utils.config import ROOT, load_config
from utils.errors import UsageError

PASSWORD = "Sw0rdfish-4711xyz"  # what each hostile URL carries
SERVER = "postgresql://bench@127.0.0.1:1/tprimat"  # a port nothing listens on: a connection would fail at once
URLS = {
    "query password": f"{SERVER}?password={PASSWORD}",
    "query sslpassword": f"{SERVER}?sslmode=require&sslpassword={PASSWORD}",
    "query token": f"{SERVER}?token={PASSWORD}",
    "query key": f"{SERVER}?key={PASSWORD}",
    "query secret": f"{SERVER}?secret={PASSWORD}",
    "name in capitals": f"{SERVER}?PassWord={PASSWORD}",
    "name URL-encoded": f"{SERVER}?pass%77ord={PASSWORD}",
    "userinfo password": f"postgresql://bench:{PASSWORD}@127.0.0.1:1/tprimat",
    "postgres scheme": f"postgres://bench@127.0.0.1:1/tprimat?application_name=x&password={PASSWORD}",
}


def never_shown(text: str) -> None:
    """The password in none of its forms: not plain, not URL-encoded (the assertion itself prints no value)."""
    if PASSWORD in text or quote(PASSWORD, safe="") in text:
        pytest.fail("the password was shown", pytrace=False)


# Class 3: secrets in URLs


@pytest.mark.parametrize("url", URLS.values(), ids=URLS.keys())
def test_a_store_url_carrying_a_password_anywhere_is_refused_in_one_line_naming_the_knob_and_the_fix(url):
    problems = problems_of({**CPU_MACHINE, "HISTORY_DB": url})
    never_shown("\n".join(problems))
    assert len(problems) == 1 and problems[0].startswith("HISTORY_DB=") and "PGPASSWORD" in problems[0]
    assert "***" in problems[0]  # the URL is shown, its credential redacted


@pytest.mark.parametrize("path, accepted", [("/home/jürgen/tprimat/output/history.sqlite", True),
                                            ("/data/测试/history.sqlite", True), ("/data/my store.sqlite", False),
                                            ("/data/a\tb.sqlite", False), ("/data/a\x1b[2Jb.sqlite", False)])
def test_a_store_path_with_any_letters_is_accepted_and_one_with_a_space_or_control_character_is_not(path, accepted):
    """HISTORY_DB takes the path --db takes: non-ASCII letters included (class 6: it refused them)."""
    env = {**CPU_MACHINE, "HISTORY_DB": path}
    if accepted:
        assert load_config(env)["HISTORY_DB"] == path
        return
    (problem,) = problems_of(env)
    assert problem.startswith("HISTORY_DB=") and "\x1b" not in problem  # the value is never repeated raw


def test_a_url_without_a_credential_and_a_key_file_parameter_are_still_a_store():
    from evaluate.history.sql import location
    url = f"{SERVER}?sslmode=verify-full&sslkey=/etc/ssl/tprimat.key&keepalives=1"
    assert location(url).url == url


def test_config_check_refuses_a_query_password_with_one_line_exit_2_and_never_prints_it():
    run = subprocess.run([sys.executable, "-m", "utils.config", "check"], cwd=ROOT, capture_output=True, text=True,
                         env={**CPU_MACHINE, "PATH": "/usr/bin:/bin", "HISTORY_DB": URLS["query password"]})
    never_shown(run.stdout + run.stderr)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("config error:")][0].startswith(
        "config error: HISTORY_DB=")


def test_history_add_refuses_the_url_before_connecting_so_no_error_line_can_print_the_password(tmp_path):
    runs = run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    run = subprocess.run([sys.executable, "-m", "evaluate.history", "add", "--db", URLS["query sslpassword"],
                          str(runs)], cwd=ROOT, capture_output=True, text=True)
    never_shown(run.stdout + run.stderr)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "refused the connection" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--db=" in run.stderr


def test_history_db_from_the_environment_is_refused_before_the_server_is_asked(monkeypatch):
    monkeypatch.setenv("HISTORY_DB", URLS["name URL-encoded"])
    with pytest.raises(UsageError) as refused:  # not StoreError: no connection was tried
        history(["list"])
    never_shown(str(refused.value))


def test_compare_with_such_a_store_writes_no_report_md_or_html_and_prints_no_password(tmp_path, capsys):
    from evaluate.compare import main as compare
    runs = run_set(tmp_path / "in", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    out = tmp_path / "out"
    with pytest.raises(UsageError) as refused:
        compare([str(runs), "-o", str(out), "--history", URLS["query token"]])
    never_shown(str(refused.value) + "".join(capsys.readouterr()))
    assert not (out / "report.md").exists() and not (out / "report.html").exists()


ESCAPED = f"{PASSWORD}/?"  # a password whose URL-encoded form differs from it: config.env holds %2F%3F
FORMS = {"plain": (PASSWORD, PASSWORD), "URL-encoded": (ESCAPED, f"{PASSWORD}%2f%3f"),
         "base64": (PASSWORD, base64.b64encode(f"bench:{PASSWORD}".encode()).decode()),
         "hex": (PASSWORD, PASSWORD.encode().hex())}


@pytest.mark.parametrize("password, written", FORMS.values(), ids=FORMS.keys())
def test_wrap_refuses_a_report_holding_config_envs_query_password_in_any_form(
        password, written, output_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    config = tmp_path / "config.env"
    config.write_text(f"HISTORY_DB={SERVER}?password={quote(password, safe='')}\n")
    monkeypatch.setattr(secrets_module, "CONFIG_FILE", config, raising=False)
    monkeypatch.setattr(secrets_module, "SECRETS_FILE", tmp_path / "no-secrets.env")
    monkeypatch.delenv("HISTORY_DB", raising=False)
    (output_dir / "20250501-120000-nvd" / "report.html").write_text(f"<p>store: {written}</p>\n")
    archive = tmp_path / "output.zip"
    code = wrap.main([str(output_dir), "--output", str(archive)])
    printed = "".join(capsys.readouterr())
    never_shown(printed)
    assert code == 1 and "report.html contains the value of a password in the URL of HISTORY_DB (config.env)" in printed
    assert not archive.exists()


def test_wrap_refuses_a_report_holding_the_environments_url_password(output_dir, tmp_path, monkeypatch,  # noqa: F811
                                                                     capsys):
    monkeypatch.setattr(secrets_module, "CONFIG_FILE", tmp_path / "no-config.env", raising=False)
    monkeypatch.setattr(secrets_module, "SECRETS_FILE", tmp_path / "no-secrets.env")
    monkeypatch.setenv("HISTORY_DB", URLS["userinfo password"])
    (output_dir / "20250501-120000-nvd" / "report.md").write_text(f"store: {URLS['userinfo password']}\n")
    code = wrap.main([str(output_dir), "--output", str(tmp_path / "output.zip")])
    printed = "".join(capsys.readouterr())
    never_shown(printed)
    assert code == 1 and "a password in the URL of HISTORY_DB (environment)" in printed


# Classes 5 and 6: configuration the code cannot serve is one line, exit 2, before anything starts

BROKEN_FRAMEWORKS = {"missing": ("no_such_framework_module", "cannot be imported"),
                     "raises on import": ("broken_framework", "fails to import: RuntimeError"),
                     "no FRAMEWORK entry": ("json", "has no FRAMEWORK entry")}


def one_config_line(command: list[str], env: dict, tmp_path) -> str:
    """Run a command of the checkout; it must exit 2 with one `config error:` line and no traceback: that line."""
    (tmp_path / "broken_framework.py").write_text("raise RuntimeError('half-written entry')\n")
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**CPU_MACHINE, "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                              "PYTHONPATH": str(tmp_path), "DRY_RUN": "1",
                              **env})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("config error:")]
    assert len(errors) == 1, run.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize("module, why", BROKEN_FRAMEWORKS.values(), ids=BROKEN_FRAMEWORKS.keys())
def test_a_framework_module_that_is_missing_or_broken_is_one_line_naming_it_and_the_fix(module, why, tmp_path):
    line = one_config_line([sys.executable, "-m", "utils.config", "check"], {"TPRIMAT_FRAMEWORKS": module}, tmp_path)
    assert f"TPRIMAT_FRAMEWORKS names the module {module}, which {why}" in line and "PYTHONPATH" in line


def test_run_train_with_a_missing_framework_module_stops_in_one_line_before_anything_runs(tmp_path):
    line = one_config_line(["./shell/run_train.sh"], {"TPRIMAT_FRAMEWORKS": "no_such_framework_module"}, tmp_path)
    assert "no_such_framework_module" in line


@pytest.mark.parametrize("command", [[sys.executable, "-m", "utils.config", "check"], ["./shell/run_train.sh"]],
                         ids=["config check", "run_train.sh"])
def test_a_platform_no_stack_serves_is_one_line_not_an_index_error(command, tmp_path):
    line = one_config_line(command, {"PLATFORM": "intel"}, tmp_path)
    assert line.startswith("config error: PLATFORM=intel: not one of auto, amd, nvd, cpu")


def validation_case(tmp_path, monkeypatch, eval_tokens: int):
    """A CPU configuration evaluating EVAL_TOKENS over a prepared pair of 20 documents of 50 tokens
    (VALIDATION_PERCENT=10: 2 documents, 100 tokens held out), the pair's proof (tested elsewhere) taken as given."""
    import numpy as np
    from data.indexed import IndexedWriter
    from train import matrix, plan
    from utils.config import load_config
    from utils.datafiles import data_prefix
    prefix = data_prefix(str(tmp_path), "sample", "llama")
    writer = IndexedWriter(prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx"), np.uint16)
    writer.add(np.ones(1000, dtype=np.uint16), np.full(20, 50), np.ones(20, dtype=np.int64))
    writer.finish()
    monkeypatch.setattr(plan, "report_data_problems", lambda cfg: True)
    cfg = load_config({**CPU_MACHINE, "DATA_DIR": str(tmp_path), "DATASET": "sample", "MODELS": "llama",
                       "MOCK_DATA": "0", "EVAL_INTERVAL": "5", "EVAL_TOKENS": str(eval_tokens),
                       "VALIDATION_PERCENT": "10"})
    return lambda: matrix.check_data(cfg, matrix.Stop(), matrix.Beside(cfg, []))


def test_eval_tokens_beyond_the_validation_split_is_refused_before_the_run_set_in_one_line(tmp_path, monkeypatch,
                                                                                          capsys):
    check = validation_case(tmp_path, monkeypatch, eval_tokens=4096)
    with pytest.raises(SystemExit) as stopped:
        check()
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1
    assert "EVAL_TOKENS=4096" in lines[0] and "the 100 tokens (2 documents) of llama's validation split" in lines[0]


def test_eval_tokens_within_the_validation_split_goes_on(tmp_path, monkeypatch, capsys):
    validation_case(tmp_path, monkeypatch, eval_tokens=64)()
    assert "EVAL_TOKENS" not in capsys.readouterr().err


def test_a_strategy_name_matplotlib_would_read_as_tex_is_drawn_as_plain_text(tmp_path):
    import json
    from evaluate.compare import main as compare
    runs = run_set(tmp_path / "in", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    for path in runs.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["parallelism"]["strategy"] = "cheap$x^{$_wide"  # a STRATEGIES_FILE name: unbalanced TeX
        path.write_text(json.dumps(result))
    assert compare([str(runs), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0


def test_a_reached_target_without_a_time_is_counted_failed_not_ranked_and_compare_goes_on(tmp_path):
    """validate recomputes time to train from the validation points (evaluate/evaluation_checks.py): a result that
    says it reached the target without the times its points give fails there and reaches no ranking."""
    import json
    from evaluate.compare import main as compare
    from tests.test_evaluate_compare_quality import write
    write(tmp_path, "nvd", "mega-llama-r1", (8.0, 6.0, 5.0, 4.5), target=5.0)
    path = tmp_path / "nvd" / "mega-llama-r1" / "result.json"
    result = json.loads(path.read_text())
    result["time_to_train"].update(wall_s=None, train_time_s=None)
    path.write_text(json.dumps(result))
    assert compare([str(tmp_path / "nvd"), "-o", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- **FAILED** nvd/mega-llama-r1: time to train: wall_s is None in the result" in report
    assert "| Rank |" not in report
