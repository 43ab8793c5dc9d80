"""`etj init --from-data` over a corpus: every public sample file of tests/data/public (as
well-known packages ship them) and crafted edge cases written here. Each readable file
gets a job that validates (with the columns left out and the questions in it); a file
that cannot be read is one line naming why and what to do. `etj run` of these jobs is
tests/local/etj/local/test_runner_public_data.py."""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from etj.cli.main import main as cli
from etj.core.validation import validate_manifest

ROOT = Path(__file__).resolve().parents[4]
PUBLIC = sorted(
    p for p in (ROOT / "tests" / "data" / "public").iterdir() if p.is_file() and p.suffix != ".md"
)


def _rows(n: int, make: Callable[[random.Random, int], str], seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(make(rng, i) + "\n" for i in range(n))


def _census(rng: random.Random, i: int) -> str:
    work = rng.choice(["Private", "Self-emp-not-inc", "State-gov", "?"])
    income = rng.choice([" <=50K", " <=50K", " >50K"])
    return f"{rng.randint(17, 90)}, {work}, {rng.choice(['HS-grad', 'Bachelors'])},{income}"


def _review(rng: random.Random, i: int) -> str:
    text = rng.choice(["Loved it.\nWould buy again", 'Too small, "tight"\n\nreturned', "ok"])
    quoted = '"' + text.replace('"', '""') + '"'
    return f"{i},{rng.randint(800, 860)},{quoted},{rng.randint(1, 5)},{rng.randint(0, 1)}"


# name -> (bytes of the file, what init must say: None = a job that validates)
CRAFTED: dict[str, tuple[bytes, str | None]] = {
    "census.csv": (
        ("age, workclass, education, income\n" + _rows(200, _census)).encode(),
        None,
    ),
    "reviews.csv": (
        (",Clothing ID,Review Text,Rating,Recommended IND\n" + _rows(150, _review)).encode(),
        None,
    ),
    "ratings.tsv": (
        (
            "user_id\titem_id\trating\ttimestamp\n"
            + _rows(
                300,
                lambda r, i: (
                    f"{r.randint(1, 40)}\t{r.randint(1, 90)}\t{r.randint(1, 5)}\t{874965758 + i}"
                ),
            )
        ).encode(),
        None,
    ),
    "bom-crlf.csv.gz": (
        gzip.compress(
            b"\xef\xbb\xbf"
            + (
                "label,user,item\r\n"
                + _rows(100, lambda r, i: f"{i % 2},u{r.randint(1, 9)},i{i % 13}")
            )
            .replace("\n", "\r\n")
            .replace("\r\r\n", "\r\n")
            .encode()
        ),
        None,
    ),
    "empty.csv.gz": (gzip.compress(b""), "the file holds no lines (nothing to read)"),
    "header-only.csv": (b"user,item,click\n", None),
    "duplicate-header.csv": (
        (
            "click,user,item,user\n"
            + _rows(100, lambda r, i: f"{i % 2},u{i % 7},i{i % 5},v{i % 3}")
        ).encode(),
        None,
    ),
    "trailing-delimiter.csv": (
        ("click,user,item,\n" + _rows(100, lambda r, i: f"{i % 2},u{i % 7},i{i % 5},")).encode(),
        None,
    ),
    "latin1.csv": (
        ("click,catégorie\n" + _rows(50, lambda r, i: f"{i % 2},café{i % 4}")).encode("latin-1"),
        "the header is not UTF-8",
    ),
    "utf16.csv": (
        ("click,user\n" + _rows(50, lambda r, i: f"{i % 2},u{i % 4}")).encode("utf-16"),
        "the file is UTF-16LE",
    ),
    "int-with-one-float.csv": (
        (
            "click,item_id,price\n"
            + _rows(100, lambda r, i: f"{i % 2},{'7.5' if i == 60 else i % 9},{r.random():.3f}")
        ).encode(),
        None,
    ),
    "semicolon-quoted.csv": (
        (
            "click;city;note\n"
            + _rows(100, lambda r, i: f'{i % 2};"{r.choice(["Paris; FR", "Oslo"])}";"n {i % 6}"')
        ).encode(),
        None,
    ),
}


def _init(path: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["init", "--from-data", str(path), "-o", str(out)])
    return result.exit_code, result.output


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name)
def test_every_public_file_gets_a_job_that_validates(tmp_path: Path, path: Path):
    out = tmp_path / "job.yaml"
    code, output = _init(path, out)
    assert code == 0, output
    job = yaml.safe_load(out.read_text())
    result = validate_manifest(job)
    assert result.ok, result.problems
    assert "column " in output.splitlines()[1] and "why" in output.splitlines()[1]


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_every_crafted_case_gets_a_job_that_validates_or_one_clear_line(tmp_path: Path, name: str):
    data, refusal = CRAFTED[name]
    path = tmp_path / name
    path.write_bytes(data)
    out = tmp_path / "job.yaml"
    code, output = _init(path, out)
    if refusal is not None:
        assert code != 0
        (line,) = [line for line in output.splitlines() if line.strip()]
        assert line.startswith(f"Error: {path}") and refusal in line, output
        return
    assert code == 0, output
    job = yaml.safe_load(out.read_text())
    assert validate_manifest(job).ok


def _job(tmp_path: Path, name: str) -> tuple[dict, str, str]:
    path = tmp_path / name
    path.write_bytes(CRAFTED[name][0])
    out = tmp_path / "job.yaml"
    code, output = _init(path, out)
    assert code == 0, output
    text = out.read_text()
    return yaml.safe_load(text), text, output


def _features(job: dict) -> dict[str, dict]:
    return {f["name"]: f for f in job["spec"]["model"]["features"]}


def test_a_census_text_label_is_proposed_with_its_positive_value(tmp_path: Path):
    job, _, _ = _job(tmp_path, "census.csv")
    assert _features(job)["income"]["positive"] == [">50K"]


def test_a_rating_beside_ids_is_a_threshold_with_a_comment(tmp_path: Path):
    job, text, _ = _job(tmp_path, "ratings.tsv")
    features = _features(job)
    assert features["rating"]["threshold"] == 4.0
    assert features["user_id"]["kind"] == features["item_id"]["kind"] == "categorical"
    assert "# a rating (1..5): 1 when >= 4" in text


def test_reviews_with_line_breaks_keep_their_columns(tmp_path: Path):
    job, text, output = _job(tmp_path, "reviews.csv")
    files = job["spec"]["data"]["files"]
    assert "quote" not in files
    features = _features(job)
    assert features["review_text"]["column"] == "Review Text"
    assert features["recommended_ind"]["kind"] == "label"
    assert "# left out: no name in the header" in text
    assert "c0" in output and "left out" in output


def test_the_edge_cases_say_what_was_done(tmp_path: Path):
    job, text, _ = _job(tmp_path, "duplicate-header.csv")
    assert "# left out: the header names 'user' 2 times (columns 2, 4): none is read" in text
    assert text.count("# left out: the header names 'user'") == 2
    assert [f["name"] for f in job["spec"]["model"]["features"]] == ["click", "item"]
    job, _, output = _job(tmp_path, "trailing-delimiter.csv")
    assert [f["name"] for f in job["spec"]["model"]["features"]] == ["click", "user", "item"]
    assert "ignored" in output
    job, _, _ = _job(tmp_path, "int-with-one-float.csv")
    assert "valueType" not in _features(job)["item_id"]
    job, _, _ = _job(tmp_path, "semicolon-quoted.csv")
    assert job["spec"]["data"]["files"]["delimiter"] == ";"
    job, text, output = _job(tmp_path, "header-only.csv")
    assert "cannot train on this file: the file holds a header only" in output
