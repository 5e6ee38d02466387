"""The Spark jobs on Kubernetes: the CronJob's spark-submit (cluster mode against the API server)
and its Spark conf, the smallest Role that lets it work, the ScheduledSparkApplication that says
the same for the spark-operator, and the image's entry point for Spark's driver and executor
pods."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from chartkit import CHART, NAMESPACE, ROOT, Rendered, fullname, load_values, render

from spark_jobs.options import parser

METRICS = CHART / "ci" / "values-metrics.yaml"
OPERATOR = CHART / "ci" / "values-metrics-operator.yaml"
APP = "local:///opt/strongroom/spark_jobs/"
EVENTS_PVC = "spark.kubernetes.{who}.volumes.persistentVolumeClaim.events"


def _submit(cronjob: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str], str, list[str]]:
    """(pod spec, spark-submit options before the application, conf, application, job args)."""
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["spark-submit"]
    args = container["args"]
    app_at = next(i for i, a in enumerate(args) if a.startswith(APP))
    options, conf = [], {}
    i = 0
    while i < app_at:
        if args[i] == "--conf":
            key, _, value = args[i + 1].partition("=")
            assert key not in conf, f"--conf {key} given twice"
            conf[key] = value
        else:
            options += [args[i], args[i + 1]]
        i += 2
    return pod, options, conf, args[app_at], args[app_at + 1:]


def test_metrics_are_off_by_default() -> None:
    r = render(load_values(CHART / "ci" / "values-default.yaml"))
    assert not r.all("CronJob") and not r.all("ScheduledSparkApplication")
    assert all(d["metadata"]["labels"].get("app.kubernetes.io/component") != "metrics" for d in r.docs)


def test_cronjob_submits_each_job_in_cluster_mode_to_the_api_server() -> None:
    r = render(load_values(METRICS))
    values = r.values["metrics"]
    cronjobs = r.all("CronJob")
    assert [c["metadata"]["name"] for c in cronjobs] == [
        f"{fullname(r.values)}-metrics-backlog", f"{fullname(r.values)}-metrics-store-metrics"]
    for cronjob, job in zip(cronjobs, ["backlog", "store_metrics"], strict=True):
        assert cronjob["spec"]["schedule"] == values["schedule"]
        assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
        pod, options, conf, app, job_args = _submit(cronjob)
        assert dict(zip(options[::2], options[1::2], strict=True)) == {
            "--master": "k8s://https://kubernetes.default.svc", "--deploy-mode": "cluster",
            "--name": cronjob["metadata"]["name"]}
        # The application is the job's file, which the image installs there.
        assert app == f"{APP}{job}.py" and (ROOT / "spark_jobs" / f"{job}.py").exists()
        # The job takes its arguments: the mounted event log, the output volume.
        parsed = parser(job, "").parse_args(job_args)
        assert str(parsed.events) == values["events"]["mountPath"]
        assert str(parsed.out) == values["output"]["mountPath"]
        # Spark conf: this namespace, the chart's image, the driver's ServiceAccount.
        assert conf["spark.kubernetes.namespace"] == NAMESPACE
        assert conf["spark.kubernetes.container.image"] == r.get("Deployment", f"{fullname(r.values)}-realm")[
            "spec"]["template"]["spec"]["containers"][0]["image"]
        sa = conf["spark.kubernetes.authenticate.driver.serviceAccountName"]
        assert pod["serviceAccountName"] == sa and pod["automountServiceAccountToken"] is True
        token = "/var/run/secrets/kubernetes.io/serviceaccount/"
        assert conf["spark.kubernetes.authenticate.submission.oauthTokenFile"] == token + "token"
        assert conf["spark.kubernetes.authenticate.submission.caCertFile"] == token + "ca.crt"
        # The event log mounted read-only where --events points, in the driver and every executor.
        for who in ("driver", "executor"):
            pvc = EVENTS_PVC.format(who=who)
            assert conf[f"{pvc}.options.claimName"] == values["events"]["claimName"]
            assert conf[f"{pvc}.mount.path"] == str(parsed.events)
            assert conf[f"{pvc}.mount.readOnly"] == "true"
        out = "spark.kubernetes.driver.volumes.persistentVolumeClaim.output"
        assert conf[f"{out}.options.claimName"] == values["output"]["claimName"]
        assert conf[f"{out}.mount.path"] == str(parsed.out)
        assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == "/opt/strongroom/bin/python"
        assert (conf["spark.executor.instances"], conf["spark.executor.memory"], conf["spark.driver.memory"]) == (
            "3", values["spark"]["executorMemory"], values["spark"]["driverMemory"])
        # The values' own conf is passed on; no driver-owned claims (the Role has no PVC rights).
        assert conf["spark.sql.shuffle.partitions"] == "12"
        assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
        assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
        # The submitting JVM writes only to /tmp (the root filesystem is read-only).
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]


def test_by_default_one_application_runs_both_jobs() -> None:
    """jobs: [all] (the default): one CronJob submits spark_jobs/all.py, which runs backlog and
    store_metrics in one Spark application, with the same arguments."""
    values = load_values(METRICS)
    del values["metrics"]["jobs"]
    r = render(values)
    (cronjob,) = r.all("CronJob")
    assert cronjob["metadata"]["name"] == f"{fullname(r.values)}-metrics-all"
    _, _, _, app, job_args = _submit(cronjob)
    assert app == f"{APP}all.py" and (ROOT / "spark_jobs" / "all.py").exists()
    parsed = parser("all", "").parse_args(job_args)
    assert str(parsed.events) == r.values["metrics"]["events"]["mountPath"]
    assert str(parsed.out) == r.values["metrics"]["output"]["mountPath"]


def test_without_an_output_claim_the_driver_writes_to_an_empty_dir() -> None:
    values = load_values(METRICS)
    values["metrics"]["output"] = {"claimName": ""}
    _, _, conf, _, _ = _submit(render(values).all("CronJob")[0])
    assert conf["spark.kubernetes.driver.volumes.emptyDir.output.mount.path"] == "/var/lib/strongroom/metrics"
    assert not any(".output.options.claimName" in k for k in conf)


def test_the_role_is_the_smallest_spark_on_kubernetes_needs() -> None:
    r = render(load_values(METRICS))
    name = f"{fullname(r.values)}-spark"
    role = r.get("Role", name)
    rules = {tuple(rule["resources"]): set(rule["verbs"]) for rule in role["rules"]}
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    assert rules == {("pods",): {"create", "get", "list", "watch", "delete"},
                     ("services", "configmaps"): {"create", "get", "list", "delete"}}
    binding = r.get("RoleBinding", name)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    assert r.get("ServiceAccount", name)
    # The members' own Role is untouched by it.
    assert r.get("Role", f"{fullname(r.values)}-persistence")["rules"][0]["verbs"] == ["get", "patch"]


def test_a_given_service_account_is_used_as_it_is() -> None:
    values = load_values(METRICS)
    values["metrics"]["serviceAccountName"] = "spark-runner"
    r = render(values)
    assert not [d for d in r.docs if d["metadata"]["name"].endswith("-spark")]
    _, _, conf, _, _ = _submit(r.all("CronJob")[0])
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark-runner"


def test_enabled_without_an_event_log_claim_fails_with_a_sentence() -> None:
    with pytest.raises(Exception, match="metrics.events.claimName is empty"):
        render({"metrics": {"enabled": True}})


# --- the spark-operator's ScheduledSparkApplication: its fields checked here, as the Kubernetes
# schemas do not know the CRD (test_chart_render skips the kind) ---------------------------------

TEMPLATE_FIELDS = {"type", "pythonVersion", "mode", "sparkVersion", "image", "imagePullPolicy", "imagePullSecrets",
                   "mainApplicationFile", "arguments", "sparkConf", "restartPolicy", "driver", "executor"}
"""The SparkApplicationSpec fields the chart sets (sparkoperator.k8s.io/v1beta2)."""


def _operator(values_file: Path = OPERATOR, **metrics: Any) -> Rendered:
    values = load_values(values_file)
    values["metrics"].update(metrics)
    return render(values)


def test_scheduled_spark_application_fields() -> None:
    r = _operator()
    assert not r.all("CronJob")
    (app,) = r.all("ScheduledSparkApplication")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    assert set(spec) == {"schedule", "concurrencyPolicy", "successfulRunHistoryLimit", "failedRunHistoryLimit",
                         "template"}
    assert spec["concurrencyPolicy"] in {"Allow", "Forbid", "Replace"}
    t = spec["template"]
    assert set(t) <= TEMPLATE_FIELDS
    assert (t["type"], t["mode"], t["pythonVersion"]) == ("Python", "cluster", "3")
    assert t["restartPolicy"] == {"type": "Never"}
    assert t["mainApplicationFile"] == f"{APP}backlog.py"
    assert all(isinstance(v, str) for v in t["sparkConf"].values()), "sparkConf is a map of strings"
    assert set(t["driver"]) == {"cores", "memory", "serviceAccount"} and isinstance(t["driver"]["cores"], int)
    assert set(t["executor"]) == {"instances", "cores", "memory"} and isinstance(t["executor"]["instances"], int)
    import pyspark

    assert t["sparkVersion"].split(".")[0] == pyspark.__version__.split(".")[0]


def test_operator_runs_the_same_job_with_the_same_conf_as_the_cronjob() -> None:
    cron = render(load_values(METRICS))
    op = _operator(METRICS, mode="sparkOperator")
    for cronjob, app in zip(cron.all("CronJob"), op.all("ScheduledSparkApplication"), strict=True):
        pod, _, conf, application, job_args = _submit(cronjob)
        t = app["spec"]["template"]
        assert (t["mainApplicationFile"], t["arguments"], t["image"]) == (
            application, job_args, conf["spark.kubernetes.container.image"])
        # What spark-submit gets as --conf is sparkConf plus what the operator's spec fields say.
        from_fields = {
            "spark.kubernetes.namespace": app["metadata"]["namespace"],
            "spark.kubernetes.container.image": t["image"],
            "spark.kubernetes.container.image.pullPolicy": t["imagePullPolicy"],
            "spark.kubernetes.authenticate.driver.serviceAccountName": t["driver"]["serviceAccount"],
            "spark.driver.cores": str(t["driver"]["cores"]), "spark.driver.memory": t["driver"]["memory"],
            "spark.executor.instances": str(t["executor"]["instances"]),
            "spark.executor.cores": str(t["executor"]["cores"]), "spark.executor.memory": t["executor"]["memory"],
        }
        submission = {k: v for k, v in conf.items() if k.startswith("spark.kubernetes.authenticate.submission.")}
        assert {**t["sparkConf"], **from_fields, **submission} == conf
        assert pod["serviceAccountName"] == t["driver"]["serviceAccount"]


# --- the image's entry point ------------------------------------------------------------------------


def _entrypoint(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run spark_jobs/entrypoint.sh with stand-ins for spark-submit and java that print their
    arguments; returns them."""
    for tool in ("spark/bin/spark-submit", "java/bin/java"):
        stub = tmp_path / tool
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text('#!/bin/bash\nprintf "%s\\n" "$(basename "$0")" "$@"\n')
        stub.chmod(0o755)
    full = {"PATH": os.environ["PATH"], "SPARK_HOME": str(tmp_path / "spark"), "JAVA_HOME": str(tmp_path / "java"),
            **(env or {})}
    out = subprocess.run(["bash", str(ROOT / "spark_jobs" / "entrypoint.sh"), *args], env=full,
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.splitlines()


def test_entrypoint_runs_the_driver_as_spark_submit_in_client_mode(tmp_path: Path) -> None:
    argv = _entrypoint(tmp_path, "driver", "--properties-file", "/opt/spark/conf/spark.properties", "--class",
                       "org.apache.spark.deploy.PythonRunner", f"{APP}backlog.py", "--events", "/e",
                       env={"SPARK_DRIVER_BIND_ADDRESS": "10.0.0.7"})
    assert argv == ["spark-submit", "--conf", "spark.driver.bindAddress=10.0.0.7", "--deploy-mode", "client",
                    "--properties-file", "/opt/spark/conf/spark.properties", "--class",
                    "org.apache.spark.deploy.PythonRunner", f"{APP}backlog.py", "--events", "/e"]


def test_entrypoint_runs_an_executor_jvm_with_spark_settings(tmp_path: Path) -> None:
    env = {"SPARK_EXECUTOR_MEMORY": "2g", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@drv:7078",
           "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "spark-a1",
           "SPARK_EXECUTOR_POD_IP": "10.0.0.9", "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "x-exec-3",
           "SPARK_JAVA_OPT_10": "-Dlast=1", "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
           "SPARK_JAVA_OPT_1": "-Dspark.app.name=with space"}
    argv = _entrypoint(tmp_path, "executor", env=env)
    assert argv[0] == "java"
    assert argv[1:6] == ["-Dspark.driver.port=7078", "-Dspark.app.name=with space", "-Dlast=1", "-Xms2g", "-Xmx2g"]
    assert argv[6] == "-cp" and f"{tmp_path}/spark/jars/*" in argv[7]
    rest = argv[8:]
    assert rest[0] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    pairs = dict(zip(rest[1::2], rest[2::2], strict=True))
    assert pairs == {"--driver-url": env["SPARK_DRIVER_URL"], "--executor-id": "3", "--cores": "1",
                     "--app-id": "spark-a1", "--hostname": "10.0.0.9", "--resourceProfileId": "0",
                     "--podName": "x-exec-3"}


def test_entrypoint_runs_any_other_command_as_given(tmp_path: Path) -> None:
    assert _entrypoint(tmp_path, "printf", "%s\\n", "strongroom", "--help") == ["strongroom", "--help"]
