"""checkov, as the ecosystem measures a chart: over the manifests of every ci/values scenario, no
failed check, and each check the chart skips is one of the few it cannot pass by its nature,
skipped on the resource itself with the reason (a `checkov.io/skipN` annotation).

checkov runs from its own virtual environment (`make checkov`, part of `make test`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartkit import ROOT, SCENARIOS, render_scenario

CHECKOV = Path(os.environ.get("STRONGROOM_CHECKOV", ROOT / ".tools" / "checkov" / "bin" / "checkov"))

SKIPPABLE = {
    "CKV_K8S_43": "the image is named by tag",
    "CKV_K8S_38": "through the API server",
    "CKV_K8S_116": "tls.enabled is false",
    "CKV_K8S_117": "tls.enabled is false",
    "CKV_K8S_119": "tls.enabled is false",
}
"""The checks the chart may skip, and what its reason must say. The bundled etcd's TLS checks
(its --cert-file/--key-file, --client-cert-auth, --peer-cert-file/--peer-key-file) pass with
TLS on and are skipped only in a release that turns TLS off."""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not CHECKOV.exists():
        pytest.skip(f"checkov is not installed at {CHECKOV}: `make checkov` (make test does it)")
    out = tmp_path_factory.mktemp("rendered")
    for path in SCENARIOS:
        with (out / f"{path.stem}.yaml").open("w") as f:
            yaml.safe_dump_all(render_scenario(path.name).docs, f)
    run = subprocess.run([str(CHECKOV), "-d", str(out), "--framework", "kubernetes", "-o", "json", "--compact",
                          "--skip-download"], capture_output=True, text=True, timeout=300, check=False)
    assert run.stdout, run.stderr
    data = json.loads(run.stdout)
    result: dict[str, Any] = data[0] if isinstance(data, list) else data
    result["files"] = len(SCENARIOS)
    return result


def test_checkov_finds_nothing_in_any_scenario(report: dict[str, Any]) -> None:
    summary = report["summary"]
    failed = [(c["check_id"], c["check_name"], c["resource"], Path(c["file_path"]).name)
              for c in report["results"]["failed_checks"]]
    assert failed == [], "\n".join(map(str, failed))
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 100 * report["files"], summary  # every scenario was read


def test_each_skip_is_an_allowed_check_with_its_reason(report: dict[str, Any]) -> None:
    skipped = report["results"]["skipped_checks"]
    assert skipped
    for c in skipped:
        assert c["check_id"] in SKIPPABLE, (c["check_id"], c["resource"])
        assert SKIPPABLE[c["check_id"]] in c["check_result"].get("suppress_comment", ""), c
    for path in SCENARIOS:
        values = render_scenario(path.name).values
        if not values["etcd"]["enabled"]:
            continue
        etcd = {c["check_id"] for c in skipped
                if ".sr-strongroom-etcd" in c["resource"] and Path(c["file_path"]).stem == path.stem}
        tls_checks = set() if values["tls"]["enabled"] else {"CKV_K8S_116", "CKV_K8S_117", "CKV_K8S_119"}
        assert etcd == {"CKV_K8S_43", *tls_checks}, path.name
    assert not render_scenario("values-plaintext.yaml").values["tls"]["enabled"]  # the skips are exercised
    tokens = {c["resource"].split(".")[0] for c in skipped if c["check_id"] == "CKV_K8S_38"}
    assert tokens <= {"StatefulSet", "Deployment", "CronJob"}, tokens
