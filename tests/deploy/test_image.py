"""The Dockerfile, .dockerignore and skaffold.yaml agree with the package and the chart.

No Docker engine here: these read the files; building the image is left to CI with an engine.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from chartkit import CHART, ROOT, SCENARIOS, load_values, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_image_is_slim_and_runs_as_a_numeric_non_root_user() -> None:
    ins = _instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms and all("-slim" in f for f in froms)
    final_stage = [w for w in ins[[i for i, (w, _) in enumerate(ins) if w == "FROM"][-1]:]]
    users = [rest for word, rest in final_stage if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    uid = int(users[-1].split(":")[0])
    # The chart runs pods as that user, so runAsNonRoot can be checked by the kubelet.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == uid
    assert values["podSecurityContext"]["runAsNonRoot"] is True


def test_every_service_entry_point_is_installed_in_the_image() -> None:
    scripts = PYPROJECT["project"]["scripts"]
    assert {"strongroom", "strongroom-persistence", "strongroom-realm"} <= scripts.keys()
    assert "pip install" in DOCKERFILE and "/opt/strongroom/bin" in DOCKERFILE
    r = render(load_values(CHART / "ci" / "values-default.yaml"))
    commands = {c["command"][0] for w in r.all("StatefulSet") + r.all("Deployment") + r.all("Job")
                for c in w["spec"]["template"]["spec"]["containers"]}
    assert commands - {"etcd"} <= scripts.keys()


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copied = {p.split("/")[0] for word, rest in _instructions() if word == "COPY" and "--from" not in rest
              for p in rest.split()[:-1]}
    assert copied <= allowed


def test_kubernetes_client_is_a_dependency_and_chart_tools_are_dev_only() -> None:
    deps = " ".join(PYPROJECT["project"]["dependencies"])
    dev = " ".join(PYPROJECT["project"]["optional-dependencies"]["dev"])
    assert "kubernetes" in deps
    assert "helm-python-sdk" in dev and "kubernetes-validate" in dev


def test_skaffold_builds_the_image_and_deploys_the_chart_per_profile() -> None:
    sk = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    assert sk["apiVersion"].startswith("skaffold/v4")
    artifact = sk["build"]["artifacts"][0]
    assert artifact["docker"]["dockerfile"] == "Dockerfile" and (ROOT / artifact["context"] / "Dockerfile").exists()
    release = sk["deploy"]["helm"]["releases"][0]
    assert (ROOT / release["chartPath"]).resolve() == CHART.resolve()
    image = artifact["image"]
    assert release["setValueTemplates"]["image.repository"] == f"{{{{.IMAGE_REPO_{image}}}}}"
    assert f"IMAGE_TAG_{image}" in release["setValueTemplates"]["image.tag"]
    profiles = {p["name"]: p for p in sk["profiles"]}
    assert {"dev", "prod"} <= profiles.keys()
    scenario_files = {p.resolve() for p in SCENARIOS}
    for name in ("dev", "prod"):
        patch = next(p for p in profiles[name]["patches"] if p["path"].endswith("/valuesFiles"))
        for f in patch["value"]:
            # Every values file a profile deploys is a ci scenario, so the render tests cover it.
            assert (ROOT / f).resolve() in scenario_files, f
        # The values skaffold sets exist in the chart's schema.
        render({"image": {"repository": "registry.example/strongroom", "tag": "abc@sha256:" + "0" * 64}})


def test_chart_readme_section_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Kubernetes" in readme
    assert readme.index("## Kubernetes") < readme.index("## Failover drill (local)")
    assert "helm install" in readme and "deploy/drills/failover.sh" in readme
    assert Path(CHART / "values.schema.json").exists()


def test_image_holds_the_spark_jobs_with_pyspark_and_java() -> None:
    ins = _instructions()
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    # pyspark and matplotlib come with the metrics extra, which the image installs.
    metrics = " ".join(PYPROJECT["project"]["optional-dependencies"]["metrics"])
    assert "pyspark" in metrics and "matplotlib" in metrics
    assert "pip install '.[metrics]'" in runs
    assert any(word == "COPY" and rest.split()[0] == "spark_jobs" for word, rest in ins)
    # Java 17 in the final stage (bookworm's default JRE), where Spark finds it.
    final = ins[[i for i, (w, _) in enumerate(ins) if w == "FROM"][-1]:]
    assert "bookworm" in next(rest for word, rest in final if word == "FROM")
    assert any(word == "RUN" and "default-jre-headless" in rest for word, rest in final)
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "JAVA_HOME=/usr/lib/jvm/default-java" in env and "SPARK_HOME=/opt/strongroom/spark" in env
    # The fixed paths the chart names: the jobs' files and the entry point Spark's pods need.
    assert 'ln -s "$site/spark_jobs" /opt/strongroom/spark_jobs' in runs
    assert 'ln -s "$site/pyspark" /opt/strongroom/spark' in runs
    entry = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entry == ['["bash", "/opt/strongroom/spark_jobs/entrypoint.sh"]']
    assert "entrypoint.sh" in PYPROJECT["tool"]["setuptools"]["package-data"]["spark_jobs"]
    assert (ROOT / "spark_jobs" / "entrypoint.sh").exists()
