"""etj init --from-data's inference: delimiter, header, each column's kind and size."""

from __future__ import annotations

import random
import re

import pytest

from etj.cli.from_data import build_job, has_header, sniff_delimiter
from etj.core.validation import validate_manifest


def _criteo(n: int = 300) -> list[str]:
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        ints = [str(rng.randint(0, 500)) if rng.random() > 0.2 else "" for _ in range(3)]
        ids = [f"{rng.randint(0, 40):08x}" if rng.random() > 0.1 else "" for _ in range(2)]
        lines.append("\t".join([str(rng.randint(0, 1)), *ints, *ids]))
    return lines


def _movielens(n: int = 300) -> list[str]:
    rng = random.Random(1)
    genres = ["Comedy", "Drama", "Horror", "Action"]
    out = ["userId,movieId,rating,timestamp,genres"]
    for i in range(n):
        g = "|".join(rng.sample(genres, rng.randint(1, 3)))
        out.append(
            f"{rng.randint(1, 50)},{rng.randint(1, 80)},{rng.choice([1, 2.5, 4, 5])},{964982703 + i},{g}"
        )
    return out


def test_delimiter_and_header():
    assert sniff_delimiter(_criteo()[:20]) == "\t"
    assert sniff_delimiter(_movielens()[:20]) == ","
    rows = [line.split("\t") for line in _criteo()]
    assert not has_header(rows[0], rows[1:])
    rows = [line.split(",") for line in _movielens()]
    assert has_header(rows[0], rows[1:])


def test_criteo_like_columns():
    job, cols = build_job("criteo", "/data/day_*.txt", _criteo(), total_rows=300)
    kinds = [c.kind for c in cols]
    assert kinds == ["label", "dense", "dense", "dense", "categorical", "categorical"]
    assert cols[1].settings == {"transform": "log1p"}  # non-negative counts, wide range
    files = job["spec"]["data"]["files"]
    assert files["delimiter"] == "\t" and files["header"] is False
    assert files["columns"] == ["c0", "c1", "c2", "c3", "c4", "c5"]
    tables = job["spec"]["model"]["embeddings"]
    assert [t["name"] for t in tables] == ["c4", "c5"]
    assert 4 * 41 <= tables[0]["vocabularySize"] <= 4 * 41 + 1  # ~4x the 41 distinct ids
    assert validate_manifest(job).ok


def test_movielens_like_columns():
    job, cols = build_job("ml", "/data/ratings.csv", _movielens(), total_rows=300)
    by = {c.name: c for c in cols}
    assert by["rating"].kind == "label" and by["rating"].settings == {"threshold": 4.0}
    assert by["userId"].settings == {"valueType": "int"}
    assert by["genres"].settings == {"delimiter": "|", "maxLength": 3}
    assert by["genres"].estimate == 4
    assert by["timestamp"].kind == "skip"  # a unique key: not a feature
    names = [f["name"] for f in job["spec"]["model"]["features"]]
    assert "timestamp" not in names
    assert validate_manifest(job).ok


def test_ids_past_int64_and_fixed_width_codes_are_categorical_strings():
    lines = ["click,device,hour"] + [
        f"{i % 2},{10000174058809263569 + (i % 7)},141021{i % 24:02d}" for i in range(200)
    ]
    _, cols = build_job("avazu", "/d/*.csv", lines, total_rows=200)
    assert [(c.kind, c.settings) for c in cols[1:]] == [("categorical", {})] * 2


def test_rare_ids_grow_with_the_file():
    lines = ["label,user"] + [f"{i % 2},u{i * 7 % 150}" for i in range(200)]
    _, cols = build_job("j", "/d", lines, total_rows=200_000)
    assert cols[1].estimate > 10 * cols[1].distinct


def test_no_label_column_is_a_guess_asked_in_the_job():
    job, cols = build_job("j", "/d", ["a,b", "x,3.5", "y,4.5", "z,1.5"], total_rows=3)
    label = next(c for c in cols if c.kind == "label")
    assert label.comment.startswith("asked: which column is the label?")
    assert validate_manifest(job).ok


def test_etj_init_writes_a_job_that_validates(tmp_path):
    import yaml
    from click.testing import CliRunner

    from etj.cli.main import main as cli

    data = tmp_path / "ratings.csv"
    data.write_text("\n".join(_movielens()) + "\n")
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["init", "--from-data", str(data), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert re.search(r"\nrating +label +named 'rating', a rating: >= 4 is 1\n", result.output)
    job = yaml.safe_load(out.read_text())
    assert job["metadata"]["name"] == "ratings"
    assert job["spec"]["data"]["files"]["pattern"] == str(data.resolve())
    assert validate_manifest(job).ok


def test_etj_init_from_parquet_types_lists_and_nulls(tmp_path):
    """A Parquet file's typed columns: a list column becomes multi-valued (even where most
    rows hold one value), nulls count as empty, the row count comes from the metadata."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import yaml
    from click.testing import CliRunner

    from etj.cli.main import main as cli

    rng = random.Random(2)
    n = 400
    genres = ["Comedy", "Drama", "Horror", "Action"]
    table = pa.table(
        {
            "clicked": pa.array([rng.random() < 0.3 for _ in range(n)]),
            "userId": pa.array([rng.randint(1, 50) for _ in range(n)], pa.int64()),
            "price": pa.array([rng.gauss(10, 2) if i % 9 else None for i in range(n)]),
            "site": pa.array([f"s{rng.randint(0, 30)}" if i % 7 else None for i in range(n)]),
            "genres": pa.array(
                [rng.sample(genres, 2 if i % 10 == 0 else 1) for i in range(n)],
                pa.list_(pa.string()),
            ),
        }
    )
    data = tmp_path / "events.parquet"
    pq.write_table(table, data)
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(
        cli, ["init", "--from-data", str(data), "--sample", "300", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(out.read_text())
    assert job["spec"]["data"]["files"] == {"pattern": str(data.resolve()), "format": "parquet"}
    features = {f["name"]: f for f in job["spec"]["model"]["features"]}
    assert features["clicked"]["kind"] == "label"
    assert features["userId"]["valueType"] == "int"
    assert features["price"]["kind"] == "dense"
    assert features["price"]["transform"] == "standardize"
    assert features["site"]["kind"] == "categorical" and "delimiter" not in features["site"]
    assert features["genres"] | {} == {
        "name": "genres",
        "kind": "categorical",
        "delimiter": "|",
        "maxLength": 2,
        "table": "genres",
    }
    assert "300 lines (rows) sampled of ~400" in result.output
    assert validate_manifest(job).ok


def test_etj_init_names_a_damaged_parquet_file(tmp_path):
    from click.testing import CliRunner

    from etj.cli.main import main as cli

    data = tmp_path / "broken.parquet"
    data.write_bytes(b"PAR1" + b"\0" * 64)
    result = CliRunner().invoke(cli, ["init", "--from-data", str(data)])
    assert result.exit_code != 0
    assert f"{data}: cannot read as Parquet" in result.output


def test_quoted_fields_are_one_column_each(tmp_path):
    """A MovieLens-1M-layout file (as the clicklogs tool writes it: a quarter of the titles
    quoted, holding a comma): `etj init` sees its ten columns, gender single-valued."""
    import yaml
    from click.testing import CliRunner

    from etj.cli.main import main as cli
    from etj_trainer.data.clicklogs import MOVIELENS_1M_HEADER, write

    (path,) = write("movielens-1m", tmp_path, 1, 400)
    assert sum('"' in line for line in path.read_text().splitlines()) > 50
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["init", "--from-data", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(out.read_text())
    files = job["spec"]["data"]["files"]
    assert files["delimiter"] == "," and files["header"] is True and "quote" not in files
    features = {f["name"]: f for f in job["spec"]["model"]["features"]}
    assert set(features) <= set(MOVIELENS_1M_HEADER.split(","))
    assert features["gender"]["kind"] == "categorical" and "delimiter" not in features["gender"]
    assert features["genres"]["delimiter"] == "|"
    assert features["title"]["kind"] == "categorical" and "delimiter" not in features["title"]
    assert features["rating"] == {"name": "rating", "kind": "label", "threshold": 4.0}
    assert validate_manifest(job).ok


def test_a_two_valued_column_is_never_multi_valued():
    lines = ["label,flag"] + [f"{i % 2},{'a|b' if i % 3 else 'c'}" for i in range(200)]
    _, cols = build_job("j", "/d", lines, total_rows=200)
    assert (cols[1].kind, cols[1].settings) == ("categorical", {})


def test_quotes_that_are_not_rfc_4180_are_read_as_data():
    """A quote inside an unquoted field: the trainer could not read the file with quoting,
    so the job says quote: none, and the columns are cut at every delimiter."""
    lines = ["label,agent,site"] + [f'{i % 2},Mozilla "{i % 5}",s{i % 9}' for i in range(100)]
    job, cols = build_job("j", "/d", lines, total_rows=100)
    assert job["spec"]["data"]["files"]["quote"] == "none"
    assert [c.name for c in cols] == ["label", "agent", "site"]
    assert validate_manifest(job).ok


def test_quoted_delimiters_do_not_change_the_sniffed_delimiter():
    lines = ['"a,b",1', '"c,d,e",0', "f,1"]
    assert sniff_delimiter(lines) == ","
    lines = ['x\t"1,2,3"\t0', 'y\t"4,5"\t1']
    assert sniff_delimiter(lines) == "\t"


def _features(job: dict) -> dict[str, dict]:
    return {f["name"]: f for f in job["spec"]["model"]["features"]}


def test_a_text_label_is_proposed_with_its_positive_value():
    rng = random.Random(2)
    lines = ["age,workclass,education,income"] + [
        f"{rng.randint(17, 90)},{rng.choice(['Private', 'State-gov'])},"
        f"{rng.choice(['HS-grad', 'Bachelors', 'Masters'])},{rng.choice(['<=50K', '>50K'])}"
        for _ in range(200)
    ]
    job, cols = build_job("adult", "/d", lines, total_rows=200)
    assert _features(job)["income"] == {"name": "income", "kind": "label", "positive": [">50K"]}
    assert next(c for c in cols if c.name == "income").comment == ""
    assert validate_manifest(job).ok


def test_a_two_valued_label_without_a_known_word_is_asked():
    lines = ["y,colour"] + [f"{'b' if i % 3 else 'a'},c{i % 7}" for i in range(100)]
    job, cols = build_job("j", "/d", lines, total_rows=100)
    assert _features(job)["y"]["positive"] == ["a"]  # the rarer value
    assert cols[0].comment.startswith("asked: which value means 1? guessed 'a'")
    lines = ["y,colour"] + [f"{'no' if i % 3 else 'yes'},c{i % 7}" for i in range(100)]
    job, cols = build_job("j", "/d", lines, total_rows=100)
    assert _features(job)["y"]["positive"] == ["yes"] and cols[0].comment == ""


def test_a_rating_beside_user_and_item_ids_is_a_threshold_with_a_comment():
    lines = ["user_id\titem_id\trating"] + [
        f"{i % 40}\t{i * 7 % 90}\t{1 + i % 5}" for i in range(300)
    ]
    job, cols = build_job("ml", "/d", lines, total_rows=300)
    assert _features(job)["rating"] == {"name": "rating", "kind": "label", "threshold": 4.0}
    assert "1 when >= 4" in cols[2].comment
    assert [c.kind for c in cols] == ["categorical", "categorical", "label"]


def test_names_are_made_valid_keeping_the_header_as_column_and_an_index_is_left_out():
    lines = [",Clothing ID,Review Text,Rating,Recommended IND"] + [
        f'{i},{i % 30},"text {i % 11}, long",{1 + i % 5},{i % 2}' for i in range(120)
    ]
    job, cols = build_job("reviews", "/d", lines, total_rows=120)
    features = _features(job)
    assert features["review_text"]["column"] == "Review Text"
    assert features["clothing_id"] == {
        "name": "clothing_id",
        "column": "Clothing ID",
        "kind": "categorical",
        "valueType": "int",
        "table": "clothing_id",
    }
    assert features["recommended_ind"]["kind"] == "label"  # the 0/1 column
    assert cols[0].kind == "skip" and "no name in the header" in cols[0].why
    assert validate_manifest(job).ok


def test_a_file_of_numbers_only_gets_an_id_column():
    rng = random.Random(3)
    lines = ["having_IP,URL_Length,SSLfinal_State,Result"] + [
        ",".join(str(rng.choice([-1, 0, 1])) for _ in range(3)) + f",{rng.choice([-1, 1])}"
        for _ in range(200)
    ]
    job, cols = build_job("phishing", "/d", lines, total_rows=200)
    features = _features(job)
    assert features["Result"]["positive"] == ["1"]
    assert features["having_IP"]["kind"] == "categorical"
    assert validate_manifest(job).ok
    floats = ["a,b,label"] + [f"{i * 0.37:.2f},{(i % 9) * 0.5},{i % 2}" for i in range(100)]
    job, cols = build_job("f", "/d", floats, total_rows=100)
    assert cols[1].kind == "categorical" and "numbers only" in cols[1].why
    assert validate_manifest(job).ok


def test_a_trailing_delimiter_and_a_repeated_header_name():
    lines = ["label,a,b,a,"] + [f"{i % 2},x{i % 5},{i % 3}.5,y{i % 4}," for i in range(100)]
    job, cols = build_job("j", "/d", lines, total_rows=100)
    assert cols[-1].ignored and "trailing" in cols[-1].why
    # Neither 'a' is read: which one a feature named 'a' would read is ambiguous.
    for j in (1, 3):
        assert cols[j].kind == "skip"
        assert "names 'a' 2 times (columns 2, 4): none is read" in cols[j].why
    assert [f["name"] for f in job["spec"]["model"]["features"]] == ["label", "b"]
    assert validate_manifest(job).ok
    bare = [f"{i % 2},x{i % 5},{i % 3}.5," for i in range(100)]
    job, cols = build_job("j", "/d", bare, total_rows=100)
    assert job["spec"]["data"]["files"]["columns"] == ["c0", "c1", "c2", "c3"]
    assert cols[-1].ignored and validate_manifest(job).ok


def test_quoted_fields_holding_line_breaks_are_one_record():
    lines = ["label,review,stars"]
    for i in range(60):
        lines += [f'{i % 2},"first line {i % 7}', "", f'second, ""quoted""",{1 + i % 5}']
    job, cols = build_job("j", "/d", [line + "\n" for line in lines], total_rows=60)
    files = job["spec"]["data"]["files"]
    assert "quote" not in files and files["header"] is True
    assert [c.name for c in cols] == ["label", "review", "stars"]
    assert cols[1].distinct == 7 and cols[2].kind != "skip"


def test_a_header_only_file_gets_a_job_and_a_note():
    notes: list[str] = []
    job, _ = build_job("j", "/d", ["user,item,click\n"], total_rows=1, notes=notes)
    assert notes and "header only" in notes[0]
    assert _features(job)["click"]["kind"] == "label"
    assert validate_manifest(job).ok


def test_the_written_yaml_holds_the_questions_and_the_left_out_columns():
    import yaml

    from etj.cli.from_data import decision_table, job_yaml
    from etj.core.crd import to_yaml

    lines = ["id,y,colour"] + [f"{i},{'b' if i % 3 else 'a'},c{i % 7}" for i in range(100)]
    job, cols = build_job("j", "/d", lines, total_rows=100)
    text = job_yaml(job, cols, to_yaml)
    assert yaml.safe_load(text) == job
    assert "# asked: which value means 1? guessed 'a'" in text
    assert "# left out: a unique key (no value repeats): nothing to learn\n" in text
    assert '# - {"name": "id", "column": "id"}' in text or '# - {"name": "id"}' in text
    table = decision_table(cols)
    assert table.splitlines()[1].split()[:3] == ["id", "left", "out"]


def test_null_tokens_in_number_columns_are_null_values_and_the_columns_stay_dense():
    """palmerpenguins' way: NA among measurements (R's missing value). The tokens found are
    written as data.files.nullValues, read as missing in every column (as the trainer
    will), and the measurements are dense features."""
    lines = ["species,bill_mm,mass_g,sex,island"]
    for i in range(120):
        bill = "NA" if i in (3, 70) else f"{38 + (i % 13) * 0.7:.1f}"
        mass = "nan" if i == 5 else str(3000 + 25 * (i % 60))
        sex = "NA" if i % 40 == 7 else ("male" if i % 3 else "female")
        lines.append(f"s{i % 3},{bill},{mass},{sex},NA")
    job, cols = build_job("p", "/d", lines, total_rows=120)
    files = job["spec"]["data"]["files"]
    assert files["nullValues"] == ["NA", "nan"]
    by_name = {c.name: c for c in cols}
    assert by_name["bill_mm"].kind == by_name["mass_g"].kind == "dense"
    assert "2 NA read as missing" in by_name["bill_mm"].why
    assert "1 nan read as missing" in by_name["mass_g"].why
    # 'NA' is then missing in the text columns too (the trainer reads it so): sex has two
    # values, and island, NA in every row, is empty.
    assert by_name["sex"].distinct == 2 and by_name["island"].why == "empty in the whole sample"
    assert validate_manifest(job).ok


def test_a_null_token_in_text_columns_only_is_kept_as_text():
    lines = ["label,country"] + [f"{i % 2},{['NA', 'FR', 'None'][i % 3]}" for i in range(60)]
    job, cols = build_job("c", "/d", lines, total_rows=60)
    assert "nullValues" not in job["spec"]["data"]["files"]
    assert cols[1].kind == "categorical" and cols[1].distinct == 3


def test_rows_without_a_label_are_skipped_and_counted_with_a_comment():
    """A label that is empty or a null token in 7 of 100 sample rows of a file of ~1000:
    maxBadRecords allows twice the ~70 expected, plus 10, said beside the label."""
    lines = ["x,click"] + [
        f"{i * 0.5},{'NA' if i % 40 == 1 else ('' if i % 40 == 2 else i % 2)}" for i in range(100)
    ]
    lines[10] = "4.5,NA"
    lines[1] = "NA,1"  # an NA among numbers: NA is a null token here
    job, cols = build_job("u", "/d", lines, total_rows=1000)
    label = next(c for c in cols if c.kind == "label")
    assert label.name == "click" and label.missing == 7  # 3 NA, 3 empty, row 10's NA
    assert job["spec"]["data"]["maxBadRecords"] == 2 * 70 + 10
    assert label.comment.startswith(
        "7 of the 100 sample rows have no label (empty or NA): skipped as bad records (150: "
        "twice the ~70 expected in the file, plus 10); data.maxBadRecords: 150"
    )
    assert validate_manifest(job).ok
    full = ["x,click"] + [f"{i * 0.5},{i % 2}" for i in range(100)]
    job, _ = build_job("f", "/d", full, total_rows=100)
    assert job["spec"]["data"]["maxBadRecords"] == 0


def test_a_first_line_of_another_shape_is_one_bad_record():
    """scikit-learn's breast_cancer.csv: "569,30,malignant,benign" above rows of 31."""
    rng = random.Random(5)
    lines = ["5,3,malignant,benign"] + [
        ",".join(f"{rng.random() * 20:.3f}" for _ in range(4)) + f",{i % 2}" for i in range(80)
    ]
    job, cols = build_job("bc", "/d", lines, total_rows=80)
    files = job["spec"]["data"]["files"]
    assert files["header"] is False and files["columns"] == ["c0", "c1", "c2", "c3", "c4"]
    assert job["spec"]["data"]["maxBadRecords"] == 1
    label = next(c for c in cols if c.kind == "label")
    assert label.comment == (
        "line 1 has 4 fields, every other line 5: it is no header of these columns, skipped "
        "as a bad record; data.maxBadRecords: 1"
    )
    assert validate_manifest(job).ok


def test_four_digit_measurements_are_dense_and_codes_with_a_leading_zero_are_not():
    lines = ["click,mass_g,zip,hour"] + [
        f"{i % 2},{2700 + 25 * (i % 40)},{(i % 30) * 7 + 1000:05d},141021{i % 24:02d}"
        for i in range(100)
    ]
    _, cols = build_job("m", "/d", lines, total_rows=100)
    assert cols[1].kind == "dense"
    assert cols[2].kind == cols[3].kind == "categorical"
    assert cols[2].why == cols[3].why == "fixed-width codes"
