"""Every etj command that takes a file behaves like a good Unix tool with a bad one: one line
on stderr naming the file, exit status 2; ``-`` reads stdin."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from etj.cli.main import main
from tests.unit.conftest import ROOT

QUICKSTART = ROOT / "examples" / "quickstart.yaml"

# Each command with the arguments that come after the file.
FILE_COMMANDS = {
    "validate": ["validate", "{}"],
    "plan": ["plan", "{}"],
    "render": ["render", "{}"],
    "run": ["run", "{}"],
    "operator --kubeconfig": ["operator", "--kubeconfig", "{}", "--metrics-port", "0"],
}
# Commands that read a data file rather than YAML: the same errors for a file they cannot open.
DATA_COMMANDS = {"init --from-data": ["init", "--from-data", "{}"]}
PATH_COMMANDS = {**FILE_COMMANDS, **DATA_COMMANDS}


def _args(command: str, path: str) -> list[str]:
    return [a.format(path) for a in PATH_COMMANDS[command]]


def _one_line_exit_2(result, path: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert path in lines[0]
    assert "Traceback" not in result.output


def invoke(args: list[str], input: bytes | None = None):
    env = {"KUBECONFIG": ""}  # the operator must not fall back to another cluster
    return CliRunner().invoke(main, args, input=input, env=env)


@pytest.mark.parametrize("command", PATH_COMMANDS)
def test_missing_file(command, tmp_path):
    path = str(tmp_path / "missing.yaml")
    result = invoke(_args(command, path))
    _one_line_exit_2(result, path)
    assert "no such file" in result.stderr


@pytest.mark.parametrize("command", PATH_COMMANDS)
def test_directory(command, tmp_path):
    result = invoke(_args(command, str(tmp_path)))
    _one_line_exit_2(result, str(tmp_path))
    assert "is a directory" in result.stderr


# Content no command can use, and what the one line says about it.
BAD_CONTENT = {
    "not-utf8": (b"apiVersion: v1\nkind: caf\xe9\n", "not UTF-8 text (byte 0xe9 on line 2)"),
    "not-yaml": (b"spec: [unclosed\n  model: {\n", "not valid YAML"),
}


@pytest.mark.parametrize("content", BAD_CONTENT)
@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_bad_content(command, content, tmp_path):
    data, says = BAD_CONTENT[content]
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    result = invoke(_args(command, str(path)))
    _one_line_exit_2(result, str(path))
    assert says in result.stderr


def test_kubeconfig_that_is_not_one_is_one_line_too(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = invoke(_args("operator --kubeconfig", str(path)))
    _one_line_exit_2(result, str(path))
    assert "cannot be used" in result.stderr


@pytest.mark.parametrize("command", PATH_COMMANDS)
def test_unreadable_file(command, tmp_path):
    path = tmp_path / "secret.yaml"
    path.write_text(QUICKSTART.read_text())
    path.chmod(0)
    if os.geteuid() != 0:
        _one_line_exit_2(invoke(_args(command, str(path))), str(path))
        return
    # root reads any file: drop the capabilities that let it (setpriv from util-linux) and
    # run the installed `etj` script.
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    proc = subprocess.run(
        [
            setpriv,
            "--inh-caps=-all",
            "--bounding-set=-dac_override,-dac_read_search",
            str(Path(sys.executable).parent / "etj"),
            *_args(command, str(path)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": ""},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "permission denied" in lines[0]


@pytest.mark.parametrize("command", ["validate", "plan", "render"])
def test_stdin_works(command):
    result = invoke([command, "-"], input=QUICKSTART.read_bytes())
    assert result.exit_code == 0, result.output
    assert "quickstart" in result.stdout


def test_run_reads_stdin(tmp_path):
    # A job with a problem: run reads it from stdin, reports it and starts nothing.
    text = QUICKSTART.read_text().replace("dimension: 16", "dimension: 0", 1)
    assert text != QUICKSTART.read_text()
    result = invoke(["run", "-", "--workdir", str(tmp_path)], input=text.encode())
    assert result.exit_code == 2
    assert "<stdin>: spec.model.embeddings[0].dimension" in result.stderr
    assert not any(tmp_path.iterdir())


def test_stdin_not_utf8_names_stdin():
    result = invoke(["validate", "-"], input=b"kind: \xff\n")
    _one_line_exit_2(result, "<stdin>")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    _one_line_exit_2(invoke(["validate", str(path)]), str(path))


def test_kubeconfig_cannot_be_stdin():
    _one_line_exit_2(invoke(_args("operator --kubeconfig", "-")), "<stdin>")


def test_init_names_a_gz_file_that_is_not_gzip(tmp_path):
    path = tmp_path / "clicks.tsv.gz"
    path.write_text("1\t2\tabc\n")
    result = invoke(_args("init --from-data", str(path)))
    _one_line_exit_2(result, str(path))
    assert "not a gzip file" in result.stderr
