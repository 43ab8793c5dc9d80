"""kube-score over the objects etj ships: the chart (``helm template``) and every example's
rendered objects (``etj render``), with zero findings but the exceptions
tests/lint/kube-score.yaml gives, each with its reason (``make lint-objects``).

A finding is a check graded warning or critical (kube-score's ``--exit-one-on-warning``).
An exception that no longer fires anywhere fails the run too: the file stays true.

Usage: python tests/lint/lint_objects.py KUBE_SCORE [HELM] (default: the helm that
``make binaries`` builds, beside the control plane).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("kube-score.yaml")
# kube-score's grades: 10 ok, 7 almost ok, 5 warning, 1 critical.
WORST_ACCEPTED = 7


def _run(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=300)
    if result.returncode != 0:
        sys.exit(f"lint-objects: {' '.join(args[:3])} ... failed:\n{result.stderr.strip()}")
    return result.stdout


def rendered_chart(helm: str, values: list[str]) -> str:
    sets = [arg for v in values for arg in ("--set", v)]
    return _run(helm, "template", "etj", str(ROOT / "charts" / "etj"), *sets)


def rendered_examples(network_policy: str) -> dict[str, str]:
    etj = str(Path(sys.executable).with_name("etj"))
    return {
        path.name: _run(etj, "render", str(path), "--network-policy", network_policy)
        for path in sorted((ROOT / "examples").glob("*.yaml"))
    }


def score(kube_score: str, files: list[Path], config: dict[str, Any]) -> list[dict[str, Any]]:
    enable = [a for t in config.get("enable", []) for a in ("--enable-optional-test", t)]
    # kube-score exits 1 on critical findings; its JSON is read either way.
    result = subprocess.run(
        [
            kube_score,
            "score",
            "-o",
            "json",
            "--kubernetes-version",
            config["kubernetesVersion"],
            *enable,
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if result.returncode not in (0, 1) or not result.stdout.startswith("["):
        sys.exit(f"lint-objects: kube-score failed:\n{result.stderr.strip()}")
    return list(json.loads(result.stdout))


def findings(scored: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(check id, object, what) for every check graded worse than almost-ok."""
    out = []
    for obj in scored:
        for c in obj["checks"]:
            if c["skipped"] or c["grade"] >= WORST_ACCEPTED:
                continue
            what = "; ".join(
                f"{x.get('path') or ''} {x.get('summary', '')}".strip() for x in c["comments"] or []
            )
            out.append((c["check"]["id"], obj["object_name"], what))
    return out


def _excepted(finding: tuple[str, str, str], exception: dict[str, str]) -> bool:
    """Whether an exception covers a finding: its check, and (``only``) its text."""
    return finding[0] == exception["test"] and exception.get("only", "") in finding[2]


def judge(name: str, found: list[tuple[str, str, str]], exceptions: list[dict[str, str]]) -> int:
    excepted = {e["test"] for e in exceptions}
    missing_reason = [e["test"] for e in exceptions if not str(e.get("reason", "")).strip()]
    left = [f for f in found if not any(_excepted(f, e) for e in exceptions)]
    stale = sorted(e["test"] for e in exceptions if not any(_excepted(f, e) for f in found))
    for check, obj, what in left:
        print(f"{name}: {obj}: {check}: {what}")
    for check in stale:
        print(f"{name}: the exception for {check} no longer fires: remove it from {CONFIG.name}")
    for check in missing_reason:
        print(f"{name}: the exception for {check} gives no reason")
    print(
        f"{name}: {len(found)} findings, {len(found) - len(left)} of them excepted "
        f"({len(excepted)} checks), {len(left)} left"
    )
    return len(left) + len(stale) + len(missing_reason)


def main(kube_score: str, helm: str) -> int:
    config = yaml.safe_load(CONFIG.read_text())
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "chart.yaml"
        chart.write_text(rendered_chart(helm, config["chart"]["values"]))
        bad += judge(
            "chart",
            findings(score(kube_score, [chart], config)),
            config["chart"]["exceptions"],
        )
        files = []
        for name, text in rendered_examples(config["examples"]["network_policy"]).items():
            files.append(Path(tmp) / name)
            files[-1].write_text(text)
        bad += judge(
            f"examples ({len(files)})",
            findings(score(kube_score, files, config)),
            config["examples"]["exceptions"],
        )
    return 1 if bad else 0


def default_helm() -> str:
    from etj_testcluster.cluster import cache_dir, default_bin_dir, k8s_version

    for directory in (default_bin_dir(), cache_dir() / "bin" / k8s_version()):
        if (directory / "helm").is_file():
            return str(directory / "helm")
    sys.exit("lint-objects: no helm: run `make binaries` (it builds helm)")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else default_helm()))
