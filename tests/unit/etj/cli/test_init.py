"""etj.cli.init (``etj init --from-data``): how a local file is sampled, the job named and
written. (What a sample infers: test_from_data.py.)"""

from __future__ import annotations

import gzip
from pathlib import Path

import yaml
from click.testing import CliRunner

from etj.cli.init import _is_parquet, _sample
from etj.cli.main import main as cli
from tests.unit.etj.cli.test_from_data import _movielens


def test_a_sample_is_the_first_lines_and_the_count_is_estimated_from_the_size(tmp_path: Path):
    path = tmp_path / "d.csv"
    lines = [f"{i},{i % 7},x" for i in range(1000, 2000)]  # 1000 lines of equal length
    path.write_text("\n".join(lines) + "\n")
    sample, total = _sample(path, 100)
    assert sample == [line + "\n" for line in lines[:100]]
    assert total == 1000


def test_a_short_file_counts_its_lines_and_a_byte_order_mark_is_dropped(tmp_path: Path):
    path = tmp_path / "d.csv"
    path.write_bytes("\ufeffa,b\n1,2\n".encode())
    sample, total = _sample(path, 100)
    assert sample == ["a,b\n", "1,2\n"] and total == 2


def test_a_gzip_file_is_read_through_and_counted_at_four_times_its_size(tmp_path: Path):
    path = tmp_path / "d.csv.gz"
    text = "".join(f"{i},1\n" for i in range(1000, 1100))
    with gzip.open(path, "wt") as f:
        f.write(text)
    sample, total = _sample(path, 10)
    assert sample[0] == "1000,1\n" and len(sample) == 10
    per_line = len("1000,1\n")
    assert total == int(path.stat().st_size * 4 / per_line)


def test_parquet_is_known_by_its_magic(tmp_path: Path):
    (tmp_path / "a.data").write_bytes(b"PAR1....")
    (tmp_path / "b.parquet").write_text("label,id\n")
    assert _is_parquet(tmp_path / "a.data")
    assert not _is_parquet(tmp_path / "b.parquet")


def test_the_job_is_named_from_the_file_and_printed_with_its_plan(tmp_path: Path):
    data = tmp_path / "My_Ratings.2024.csv"
    data.write_text("\n".join(_movielens()) + "\n")
    result = CliRunner().invoke(cli, ["init", "--from-data", str(data)])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(result.stdout)
    assert job["metadata"]["name"] == "my-ratings"  # lower case, no '_', up to the first '.'
    assert result.stdout.startswith("# Written by `etj init --from-data`")
    assert "lines (rows) sampled of ~" in result.stderr and "plan: " in result.stderr


def test_name_and_pattern_can_be_given(tmp_path: Path):
    data = tmp_path / "ratings.csv"
    data.write_text("\n".join(_movielens()) + "\n")
    out = tmp_path / "job.yaml"
    args = ["init", "--from-data", str(data), "--name", "ml", "--pattern", "gs://b/r-*.csv"]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(out.read_text())
    assert job["metadata"]["name"] == "ml"
    assert job["spec"]["data"]["files"]["pattern"] == "gs://b/r-*.csv"
    assert "plan: " in result.stdout  # with -o the summary goes to stdout


def test_a_file_that_infers_nothing_is_one_clear_error(tmp_path: Path):
    data = tmp_path / "empty.csv"
    data.write_text("")
    result = CliRunner().invoke(cli, ["init", "--from-data", str(data)])
    assert result.exit_code != 0
    assert "Error:" in result.output and "Traceback" not in result.output


def test_a_utf16_file_is_named_with_the_encoding_to_convert_from(tmp_path: Path):
    from click.testing import CliRunner

    from etj.cli.main import main as cli

    path = tmp_path / "export.csv"
    path.write_bytes("label,user\n1,a\n0,b\n".encode("utf-16"))
    result = CliRunner().invoke(cli, ["init", "--from-data", str(path)])
    assert result.exit_code != 0
    assert f"{path}:1: the file is UTF-16LE" in result.output
    assert "iconv -f UTF-16 -t UTF-8" in result.output


def test_an_empty_gzip_file_is_one_clear_error(tmp_path: Path):
    import gzip

    from click.testing import CliRunner

    from etj.cli.main import main as cli

    path = tmp_path / "empty.csv.gz"
    path.write_bytes(gzip.compress(b""))
    result = CliRunner().invoke(cli, ["init", "--from-data", str(path)])
    assert result.exit_code != 0
    assert result.output.strip().endswith(f"{path}: the file holds no lines (nothing to read)")


def test_a_header_only_file_gets_a_job_and_says_it_cannot_be_trained_on(tmp_path: Path):
    import yaml
    from click.testing import CliRunner

    from etj.cli.main import main as cli
    from etj.core.validation import validate_manifest

    path = tmp_path / "header.csv"
    path.write_text("user,item,click\n")
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["init", "--from-data", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "cannot train on this file: the file holds a header only" in result.output
    text = out.read_text()
    assert "# cannot train on this file: the file holds a header only" in text
    assert validate_manifest(yaml.safe_load(text)).ok
