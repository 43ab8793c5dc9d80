"""The trainer alone, single-process (no TF_CONFIG): a header without the declared columns
ends it with exit 2 and the DataError's own message as the termination message (the
strategies under `etj run`: tests/local/etj/local/test_runner_quoted_data.py; on an API server:
tests/integration/scenarios/test_data_errors.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import job_spec, trainer_config, trainer_env

from etj.api.constants import TERMINATION_LOG_ENV
from etj_trainer.data.clicklogs import write


def test_single_process_header_mismatch_exits_2_with_the_data_error(tmp_path: Path):
    (data,) = write("movielens-1m", tmp_path, 1, 50)
    spec = job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model={
            "embeddings": [
                {"name": "users", "vocabularySize": 100, "dimension": 4},
                {"name": "movies", "vocabularySize": 100, "dimension": 4},
            ],
            "features": [
                {"name": "rating", "kind": "label", "threshold": 4},
                {"name": "userId", "kind": "categorical", "table": "users"},
                {"name": "movieId", "kind": "categorical", "table": "movies"},
            ],
        },
        data={"source": "files", "files": {"pattern": str(data), "format": "csv"}},
    )
    config = tmp_path / "trainer.json"
    config.write_text(json.dumps(trainer_config(spec).to_wire()))
    termination = tmp_path / "termination"
    env = trainer_env({"ETJ_TRAINER_CONFIG": str(config), TERMINATION_LOG_ENV: str(termination)})
    env.pop("TF_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-m", "etj_trainer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert termination.read_text().startswith(
        f"DataError: {data}:1: the header lacks the declared column(s) userId, movieId "
        "(it has: user_id, movie_id, rating,"
    )
    assert "Traceback" not in out.stderr
