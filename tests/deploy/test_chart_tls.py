"""Mutual TLS in the chart (tls): every container that runs a Strongroom process is told where its
certificate is (STRONGROOM_TLS_CA/CERT/KEY) and mounts it read-only, a member pod its own only;
each certificate names its holder as the processes it calls check it (strongroom://member/<cluster>/<member>
and the others) and the names its callers dial; the bundled etcd serves its client and peer
ports with mutual TLS and every endpoint of it says https; the probes ask the gRPC health service
through `python -m strongroom.probe`, which is run here, as the chart runs it, against a real
mutual-TLS server; cert-manager's Certificates and Issuers have cert-manager.io/v1's fields (the
Kubernetes schemas do not know them); values that cannot run are refused with a sentence."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import pytest
from chartkit import (
    CHART,
    NAMESPACE,
    TLS_DIR,
    TLS_ENV,
    Rendered,
    args_of,
    etcd_args,
    expand,
    fullname,
    helm,
    load_values,
    member_container,
    member_sets,
    pods,
    render,
    render_scenario,
    shared_store,
    tls_on,
)
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strongroom.channels import add_port
from strongroom.dr.server import SERVICE as DR_SERVICE
from strongroom.realm.model import parse_realm
from strongroom.security.certs import LocalCa
from strongroom.security.identity import Identity, Kind
from strongroom.security.tls import ENV

COMMANDS = {"strongroom-persistence", "strongroom-realm", "strongroom-router", "strongroom-dr", "strongroom"}
"""The containers that run a Strongroom process (the realm-apply Job runs `strongroom`). The
Spark jobs' containers are not among them: they read the event log from a volume and dial no
Strongroom process."""
CERT_MANAGER = ("values-default.yaml", "values-cert-manager.yaml", "values-dr.yaml", "values-dr-standby.yaml",
                "values-zones.yaml", "values-zones-site.yaml", "values-shared-store.yaml",
                "values-multi-cluster.yaml", "values-external-etcd.yaml", "values-existing-realm.yaml")
"""Scenarios whose certificates cert-manager issues (the chart's default), with every kind of holder."""


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def strongroom_containers(r: Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, container) for every container that runs a Strongroom process."""
    out = []
    for doc in r.all("StatefulSet") + r.all("Deployment") + r.all("Job"):
        for c in pod_spec(doc)["containers"]:
            if c["command"][0] in COMMANDS:
                out.append((doc, c))
    return out


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def certificates(r: Rendered) -> dict[str, dict[str, Any]]:
    """The Certificates of the release's processes (not the chart's own authority), by name."""
    return {d["metadata"]["name"]: d for d in r.all("Certificate") if not d["spec"].get("isCA")}


def pod_names(sts: dict[str, Any]) -> list[str]:
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


def secret_of(doc: dict[str, Any], container: dict[str, Any], pod: str = "") -> str:
    """The Secret the container's /etc/strongroom-tls comes from (in pod `pod`, for a member), with
    exactly ca.crt, tls.crt and tls.key in it."""
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == mount["name"]]
    keys = ["ca.crt", "tls.crt", "tls.key"]
    if "secret" in volume:
        assert "subPathExpr" not in mount and "subPath" not in mount
        assert volume["secret"]["defaultMode"] == 0o440
        assert volume["secret"]["items"] == [{"key": k, "path": k} for k in keys]
        return str(volume["secret"]["secretName"])
    # A member: every pod's Secret in a directory of its pod's name; the container mounts its own.
    assert mount["subPathExpr"] == "$(POD_NAME)"
    directory = expand(mount["subPathExpr"], {"POD_NAME": pod})
    projected = volume["projected"]
    assert projected["defaultMode"] == 0o440
    (source,) = [s["secret"] for s in projected["sources"]
                 if {i["path"].split("/")[0] for i in s["secret"]["items"]} == {directory}]
    assert source["items"] == [{"key": k, "path": f"{directory}/{k}"} for k in keys]
    return str(source["name"])


def env_names(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# --- every Strongroom container: its certificate, read-only, named by the environment ---------------


def test_every_strongroom_container_is_told_where_its_certificate_is_and_mounts_it_read_only(
        scenario: Rendered) -> None:
    found = strongroom_containers(scenario)
    assert {c["command"][0] for _, c in found} >= {"strongroom-persistence", "strongroom-realm"}
    for doc, container in found:
        env = env_names(container)
        if not tls_on(scenario.values):
            assert not set(ENV) & env.keys(), container["name"]
            assert all(m["mountPath"] != TLS_DIR for m in container["volumeMounts"])
            continue
        assert {k: env[k] for k in ENV} == TLS_ENV, (doc["metadata"]["name"], container["name"])
        assert all(path.startswith(f"{TLS_DIR}/") for path in TLS_ENV.values())
        if doc["kind"] == "StatefulSet":
            secrets = {pod: secret_of(doc, container, pod) for pod in pod_names(doc)}
            assert secrets == {pod: f"{pod}-tls" for pod in pod_names(doc)}  # each pod its own
            (volume,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == "tls"]
            assert len(volume["projected"]["sources"]) == doc["spec"]["replicas"]  # every pod's, no other
        else:
            expected = {"realm": f"{doc['metadata']['name']}-tls", "realm-apply": f"{fullname(scenario.values)}-realm-apply-tls",
                        "router": f"{doc['metadata']['name']}-tls", "dr": f"{doc['metadata']['name']}-tls"}
            assert secret_of(doc, container) == expected[component(doc)]
    # The Spark jobs dial no Strongroom process: nothing of TLS there.
    for cron in scenario.all("CronJob"):
        for c in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]:
            assert not set(ENV) & env_names(c).keys()


def test_the_secrets_mounted_are_the_certificates_rendered_or_the_ones_notes_asks_for(scenario: Rendered) -> None:
    """cert-manager writes each Certificate's Secret under its name; with existingSecrets the chart
    renders none and NOTES.txt names every Secret a pod mounts, with the identity it must name."""
    if not tls_on(scenario.values):
        assert not scenario.all("Certificate") and not scenario.all("Issuer")
        assert "TLS is OFF" in scenario.notes
        return
    mounted = set()
    for doc, container in strongroom_containers(scenario):
        mounted |= {secret_of(doc, container, pod) for pod in (pod_names(doc) if doc["kind"] == "StatefulSet" else [""])}
    etcd = [s for s in scenario.all("StatefulSet") if component(s) == "etcd"]
    for sts in etcd:
        mounted.add(secret_of(sts, pod_spec(sts)["containers"][0]))
    if scenario.values["tls"]["source"] == "certManager":
        certs = certificates(scenario)
        assert set(certs) == mounted
        assert all(c["spec"]["secretName"] == name for name, c in certs.items())
    else:
        assert not scenario.all("Certificate") and not scenario.all("Issuer")
        for secret in mounted:
            assert f"Secret {secret}: " in scenario.notes


# --- what each certificate names ------------------------------------------------------------------------


def _identity(cert: dict[str, Any]) -> Identity:
    (uri,) = cert["spec"]["uris"]
    identity = Identity.parse(uri)
    assert identity is not None and identity.uri() == uri, uri
    return identity


def _serves(cert: dict[str, Any], *hosts: str) -> None:
    names = set(cert["spec"].get("dnsNames", [])) | set(cert["spec"].get("ipAddresses", []))
    missing = [h for h in hosts if h not in names]
    assert not missing, (cert["metadata"]["name"], missing)
    assert {"server auth", "client auth"} <= set(cert["spec"]["usages"])


def _host(address: str) -> str:
    return address.removeprefix("https://").rsplit(":", 1)[0]


def _service_names(name: str, domain: str) -> tuple[str, ...]:
    return (f"{name}.{NAMESPACE}.svc.{domain}", f"{name}.{NAMESPACE}.svc", f"{name}.{NAMESPACE}", name)


@pytest.mark.parametrize("name", CERT_MANAGER)
def test_each_member_pod_has_a_certificate_naming_its_member_and_the_names_it_is_dialled_by(name: str) -> None:
    """strongroom://member/<cluster>/<member>, the member name the pod is started with (its pod's,
    or a shared-store pair's one member's), which its peers check (identity.admits); the address
    it advertises and its replication link's (peers dial those), its cluster's client and leader
    Services in every in-cluster form, localhost for a port-forward."""
    r = render_scenario(name)
    fn, domain = fullname(r.values), r.values["clusterDomain"]
    certs = certificates(r)
    standby_site = r.values["dr"]["role"] == "standby"
    for c in member_sets(r.values):
        sts = r.get("StatefulSet", f"{fn}-{c['name']}")
        args = args_of(member_container(sts))
        assert len(pod_names(sts)) == pods(c)
        for pod in pod_names(sts):
            env = {"POD_NAME": pod, "POD_NAMESPACE": NAMESPACE}
            cert = certs[f"{pod}-tls"]
            assert _identity(cert) == Identity(Kind.MEMBER, expand(args["--member"], env), c["name"])
            if shared_store(c):
                assert _identity(cert).name == sts["metadata"]["name"]  # the pair's one member
            _serves(cert, _host(expand(args["--advertise"], env)), _host(expand(args["--replication-advertise"], env)),
                    *_service_names(f"{fn}-{c['name']}", domain), *_service_names(f"{fn}-{c['name']}-leader", domain),
                    "localhost", "127.0.0.1")
            assert cert["metadata"]["labels"]["strongroom.io/cluster"] == c["name"]
            # At the primary site, where the standby site's DR service reads the cluster.
            if c.get("standby") and not standby_site:
                _serves(cert, *[_host(a) for a in c["standby"]["primary"]])
            _serves(cert, *r.values["tls"]["certManager"]["extraDnsNames"]["members"])


@pytest.mark.parametrize("name", CERT_MANAGER)
def test_the_other_workloads_certificates_name_their_identity_and_addresses(name: str) -> None:
    r = render_scenario(name)
    fn, domain = fullname(r.values), r.values["clusterDomain"]
    certs = certificates(r)
    realm = r.get("Deployment", f"{fn}-realm")
    realm_cert = certs[f"{fn}-realm-tls"]
    assert _identity(realm_cert) == Identity(Kind.REALM, "realm", "realm")
    # The address it registers in etcd, which the CLI and the realm-apply Job dial.
    _serves(realm_cert, _host(args_of(realm["spec"]["template"]["spec"]["containers"][0])["--advertise"]),
            *_service_names(f"{fn}-realm", domain))
    for job in r.all("Job"):
        cert = certs[f"{fn}-realm-apply-tls"]
        # A client, as the CLI is; one name for every release (a DR pair's realms are the same).
        assert _identity(cert) == Identity(Kind.USER, "strongroom-realm-apply")
        assert "server auth" not in cert["spec"]["usages"] and "client auth" in cert["spec"]["usages"]
        assert "dnsNames" not in cert["spec"]
        address = _host(next(a for a in job["spec"]["template"]["spec"]["containers"][0]["args"]
                             if a.startswith("--realm-address=")).split("=", 1)[1])
        _serves(realm_cert, address)
    realm_file = r.all("ConfigMap")
    router_addresses = {}
    if realm_file:
        parsed = parse_realm(realm_file[0]["data"]["realm.yaml"], "realm ConfigMap")
        router_addresses = {c.name: c.router.address for c in parsed.clusters if c.router is not None}
    for deploy in r.all("Deployment"):
        cluster = deploy["metadata"]["labels"].get("strongroom.io/cluster", "")
        if component(deploy) == "router":
            cert = certs[f"{deploy['metadata']['name']}-tls"]
            # Its neighbours check the cluster (any replica of it), not the replica's name.
            assert _identity(cert) == Identity(Kind.ROUTER, deploy["metadata"]["name"], cluster)
            _serves(cert, *_service_names(deploy["metadata"]["name"], domain),
                    *r.values["tls"]["certManager"]["extraDnsNames"]["routers"])
            if cluster in router_addresses:  # where the other clusters' routers dial it
                _serves(cert, _host(router_addresses[cluster]))
        if component(deploy) == "dr":
            cert = certs[f"{deploy['metadata']['name']}-tls"]
            assert _identity(cert) == Identity(Kind.DR, "dr", cluster)  # what members admit ShipEntries from
            _serves(cert, *_service_names(deploy["metadata"]["name"], domain))
    if r.values["etcd"]["enabled"]:
        cert = certs[f"{fn}-etcd-tls"]
        assert _identity(cert) == Identity(Kind.ETCD, "etcd", fn)
        # etcd accepts a peer whose certificate names IP addresses only from one of them.
        assert "ipAddresses" not in cert["spec"]
        sts = r.get("StatefulSet", f"{fn}-etcd")
        endpoints = env_names(realm["spec"]["template"]["spec"]["containers"][0])["STRONGROOM_ETCD"]
        peers = [p.split("=", 1)[1] for p in etcd_args(pod_spec(sts)["containers"][0])["--initial-cluster"].split(",")]
        _serves(cert, *[_host(e) for e in endpoints.split(",")], *[_host(p.removeprefix("https://")) for p in peers],
                *_service_names(f"{fn}-etcd", domain))
    else:
        assert f"{fn}-etcd-tls" not in certs


@pytest.mark.parametrize("name", CERT_MANAGER)
def test_every_certificate_is_issued_as_the_values_say(name: str) -> None:
    r = render_scenario(name)
    cm = r.values["tls"]["certManager"]
    fn = fullname(r.values)
    own = not cm["issuerRef"]["name"]
    issuer = {"name": f"{fn}-ca", "kind": "Issuer", "group": "cert-manager.io"} if own else cm["issuerRef"]
    for cert in certificates(r).values():
        spec = cert["spec"]
        assert spec["issuerRef"] == issuer
        assert (spec["duration"], spec["renewBefore"]) == (cm["duration"], cm["renewBefore"])
        assert spec["privateKey"] == {**cm["privateKey"], "encoding": "PKCS8", "rotationPolicy": "Always"}
        assert spec["secretTemplate"]["labels"] == cert["metadata"]["labels"]
    # The chart's own authority only when no issuer is named.
    assert bool(r.all("Issuer")) == own
    if own:
        assert {i["metadata"]["name"]: i["spec"] for i in r.all("Issuer")} == \
            {f"{fn}-selfsigned": {"selfSigned": {}}, f"{fn}-ca": {"ca": {"secretName": f"{fn}-ca"}}}
        (ca,) = [c for c in r.all("Certificate") if c["spec"].get("isCA")]
        assert ca["metadata"]["name"] == ca["spec"]["secretName"] == f"{fn}-ca"
        assert ca["spec"]["issuerRef"] == {"name": f"{fn}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
        # Renewing the authority keeps its key: what it signed before stays valid.
        assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    else:
        assert not [c for c in r.all("Certificate") if c["spec"].get("isCA")]


def test_the_default_is_the_charts_own_authority_and_an_issuer_named_replaces_it() -> None:
    r = render({})
    assert r.values["tls"] == {**r.values["tls"], "enabled": True, "source": "certManager"}
    assert [i["metadata"]["name"] for i in r.all("Issuer")] == ["sr-strongroom-selfsigned", "sr-strongroom-ca"]
    assert "cert-manager Issuer sr-strongroom-ca" in r.notes
    named = render({"tls": {"certManager": {"issuerRef": {"name": "corp-pki", "kind": "ClusterIssuer"}}}})
    assert not named.all("Issuer")
    assert {c["spec"]["issuerRef"]["name"] for c in named.all("Certificate")} == {"corp-pki"}
    assert "ClusterIssuer corp-pki" in named.notes


# --- cert-manager's resources, as cert-manager.io/v1 defines them ------------------------------------------

_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}}
_REF = {"type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}, "kind": {"type": "string"},
                       "group": {"type": "string"}}}
_USAGES = ["signing", "digital signature", "content commitment", "key encipherment", "key agreement",
           "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
           "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
           "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"]
_DURATION = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(h|m|s))+$"}
_META = {"type": "object", "required": ["name", "namespace", "labels"]}
CERT_MANAGER_V1 = {
    "Certificate": {
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Certificate"}, "metadata": _META,
            "spec": {
                "type": "object", "additionalProperties": False, "required": ["issuerRef", "secretName"],
                "properties": {
                    "additionalOutputFormats": {"type": "array"}, "commonName": {"type": "string", "maxLength": 64},
                    "dnsNames": _NAMES, "duration": _DURATION, "emailAddresses": _NAMES,
                    "encodeUsagesInRequest": {"type": "boolean"}, "ipAddresses": _NAMES, "isCA": {"type": "boolean"},
                    "issuerRef": _REF, "keystores": {"type": "object"}, "literalSubject": {"type": "string"},
                    "nameConstraints": {"type": "object"}, "otherNames": {"type": "array"},
                    "privateKey": {"type": "object", "additionalProperties": False, "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]}, "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "rotationPolicy": {"enum": ["Never", "Always"]}, "size": {"type": "integer"}}},
                    "renewBefore": _DURATION, "renewBeforePercentage": {"type": "integer"},
                    "revisionHistoryLimit": {"type": "integer"}, "secretName": {"type": "string", "minLength": 1},
                    "secretTemplate": {"type": "object", "additionalProperties": False, "properties": {
                        "annotations": {"type": "object"}, "labels": {"type": "object"}}},
                    "subject": {"type": "object"}, "uris": _NAMES,
                    "usages": {"type": "array", "items": {"enum": _USAGES}},
                },
                # cert-manager refuses a Certificate that names nothing.
                "anyOf": [{"required": ["commonName"]}, {"required": ["dnsNames"]}, {"required": ["uris"]},
                          {"required": ["ipAddresses"]}],
            },
        },
    },
    "Issuer": {
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": "Issuer"}, "metadata": _META,
            "spec": {"type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
                     "properties": {
                         "acme": {"type": "object"}, "vault": {"type": "object"}, "venafi": {"type": "object"},
                         "selfSigned": {"type": "object", "additionalProperties": False,
                                        "properties": {"crlDistributionPoints": _NAMES}},
                         "ca": {"type": "object", "additionalProperties": False, "required": ["secretName"],
                                "properties": {"secretName": {"type": "string", "minLength": 1},
                                               "crlDistributionPoints": _NAMES, "ocspServers": _NAMES,
                                               "issuingCertificateURLs": _NAMES}}}},
        },
    },
}
"""The fields of cert-manager.io/v1's Certificate and Issuer (their CRDs' openAPIV3Schema, the
part the chart can write; an unknown or misspelt field fails, as the API server's strict field
validation would refuse it). The Kubernetes schemas of test_chart_render.py do not know these kinds."""


def test_cert_manager_resources_have_the_fields_of_cert_manager_v1(scenario: Rendered) -> None:
    for kind, schema in CERT_MANAGER_V1.items():
        for doc in scenario.all(kind):
            jsonschema.validate(doc, schema)
            assert doc["metadata"]["name"].startswith(fullname(scenario.values))
    for cert in certificates(scenario).values():
        assert len(cert["spec"]["uris"]) == 1  # one identity: Identity.from_uris takes the first
        for name in cert["spec"].get("dnsNames", []):
            assert len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


# --- the bundled etcd -------------------------------------------------------------------------------------


def test_the_bundled_etcd_serves_mutual_tls_on_its_client_and_peer_ports(scenario: Rendered) -> None:
    if not scenario.values["etcd"]["enabled"]:
        pytest.skip("no bundled etcd")
    sts = scenario.get("StatefulSet", f"{fullname(scenario.values)}-etcd")
    container = pod_spec(sts)["containers"][0]
    args = etcd_args(container)
    etcd = scenario.values["etcd"]
    tls_flags = {"--cert-file": f"{TLS_DIR}/tls.crt", "--key-file": f"{TLS_DIR}/tls.key",
                 "--trusted-ca-file": f"{TLS_DIR}/ca.crt", "--client-cert-auth": "true",
                 "--peer-cert-file": f"{TLS_DIR}/tls.crt", "--peer-key-file": f"{TLS_DIR}/tls.key",
                 "--peer-trusted-ca-file": f"{TLS_DIR}/ca.crt", "--peer-client-cert-auth": "true"}
    urls = [args[f] for f in ("--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls",
                              "--initial-advertise-peer-urls")]
    urls += [p.split("=", 1)[1] for p in args["--initial-cluster"].split(",")]
    if tls_on(scenario.values):
        assert {k: args.get(k) for k in tls_flags} == tls_flags
        assert all(u.startswith("https://") for u in urls), urls
        assert secret_of(sts, container) == f"{fullname(scenario.values)}-etcd-tls"
    else:
        assert not tls_flags.keys() & args.keys()
        assert all(u.startswith("http://") for u in urls), urls
    assert "--auto-tls" not in args and "--peer-auto-tls" not in args
    # The kubelet's probes ask /health on the plaintext metrics port (they have no client certificate).
    assert args["--listen-metrics-urls"] == f"http://0.0.0.0:{etcd['metricsPort']}"
    assert {"name": "metrics", "containerPort": etcd["metricsPort"]} in container["ports"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert container["livenessProbe"]["tcpSocket"] == {"port": "metrics"}
    # ... which no NetworkPolicy opens to other pods.
    if scenario.values["networkPolicy"]["enabled"]:
        policy = scenario.get("NetworkPolicy", f"{fullname(scenario.values)}-etcd")
        ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert ports == {etcd["clientPort"], etcd["peerPort"]}


# --- the probe the chart runs, against a real mutual-TLS server ---------------------------------------------


def _pod_files(tmp_path: Path, cert: dict[str, Any], ca: LocalCa) -> dict[str, str]:
    """What cert-manager would write for `cert` (its URI and names, signed by `ca`), as the
    container sees it: ca.crt, tls.crt and tls.key in one directory; the container's
    STRONGROOM_TLS_* pointing there."""
    issued = ca.issue(_identity(cert), tuple(cert["spec"]["dnsNames"] + cert["spec"]["ipAddresses"]),
                      directory=tmp_path / "issued")
    mount = tmp_path / "etc-strongroom-tls"
    mount.mkdir()
    for name, path in (("ca.crt", issued.ca_path), ("tls.crt", issued.cert_path), ("tls.key", issued.key_path)):
        shutil.copy(path, mount / name)
    return {k: v.replace(TLS_DIR, str(mount)) for k, v in TLS_ENV.items()}


async def _run(command: list[str], port: int, env: dict[str, str]) -> tuple[int, str]:
    """A probe's exec command as the kubelet runs it in the container (the image's python is this
    one), at the port the test server listens on."""
    assert command[:3] == ["python", "-m", "strongroom.probe"]
    argv = [sys.executable, *command[1:3], str(port), *command[4:]]
    proc = await asyncio.create_subprocess_exec(*argv, env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_probe_the_chart_runs_asks_a_mutual_tls_server_as_the_container(tmp_path: Path) -> None:
    """A member's and a DR service's probes, as rendered, against a gRPC server that requires a
    client certificate of the authority (as every Strongroom port does): SERVING passes, anything
    else fails with the reason, and a certificate of another authority gets nowhere."""
    r = render(load_values(CHART / "ci" / "values-dr.yaml"))
    member = member_container(r.get("StatefulSet", "sr-strongroom-default"))
    dr = r.get("Deployment", "sr-strongroom-default-dr")["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert member[probe]["exec"]["command"] == ["python", "-m", "strongroom.probe", "7101"]
        assert member[probe]["timeoutSeconds"] == 5
    assert dr["readinessProbe"]["exec"]["command"] == \
        ["python", "-m", "strongroom.probe", "7600", "--service", DR_SERVICE]

    ca = LocalCa(tmp_path / "ca")
    env = _pod_files(tmp_path, r.get("Certificate", "sr-strongroom-default-0-tls"), ca)
    tls = {name: Path(path) for name, path in env.items()}
    from strongroom.security.tls import Tls

    server_tls = Tls.load(tls["STRONGROOM_TLS_CA"], tls["STRONGROOM_TLS_CERT"], tls["STRONGROOM_TLS_KEY"])
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = add_port(server, "127.0.0.1:0", server_tls)
    await server.start()
    try:
        command = member["livenessProbe"]["exec"]["command"]
        assert await _run(command, port, env) == (0, "")
        await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        code, out = await _run(command, port, env)
        assert code == 1 and f"the process on port {port} is NOT_SERVING" in out
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)

        readiness = dr["readinessProbe"]["exec"]["command"]
        code, out = await _run(readiness, port, env)
        assert code == 1 and f"health check of {DR_SERVICE} on port {port} failed: NOT_FOUND" in out
        await servicer.set(DR_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        assert await _run(readiness, port, env) == (0, "")

        stranger = _pod_files(tmp_path / "other", r.get("Certificate", "sr-strongroom-default-1-tls"),
                              LocalCa(tmp_path / "other-ca"))
        code, out = await _run(command, port, stranger)
        assert code == 1 and "UNAVAILABLE" in out
        code, out = await _run(command, port, {**env, "STRONGROOM_TLS_KEY": str(tmp_path / "missing.key")})
        assert code == 2 and "cannot use the TLS settings" in out
    finally:
        await server.stop(None)


def test_the_probe_expects_the_first_dns_name_of_the_containers_own_certificate(tmp_path: Path) -> None:
    """What it checks the process's certificate against, whatever it dialled (127.0.0.1): its own
    certificate's first DNS name that is not a wildcard, or 127.0.0.1 itself when it names none."""
    from strongroom.probe import server_name

    ca = LocalCa(tmp_path / "ca")
    member = Identity(Kind.MEMBER, "m-0", "default")
    names = ("*.m.headless.ns.svc", "m-0.m.headless.ns.svc", "localhost", "127.0.0.1")
    assert server_name(ca.issue(member, names, directory=tmp_path / "a")) == "m-0.m.headless.ns.svc"
    assert server_name(ca.issue(member, ("127.0.0.1",), directory=tmp_path / "b")) is None


# --- values that cannot run, and the schema ----------------------------------------------------------------


def _refused(values: dict[str, Any], release: str = "sr") -> str:
    with pytest.raises(helm.HelmError) as exc:
        render(values, release=release)
    assert "STRONGROOM VALUES:" in str(exc.value)
    return str(exc.value)


def test_secrets_of_your_own_and_an_issuer_at_once_are_refused() -> None:
    assert ("tls.source is existingSecrets but tls.certManager.issuerRef.name names an issuer (corp-pki): "
            "either set tls.source to certManager to have the chart request every certificate from it, or clear "
            "the name and create the Secrets yourself (README \"Kubernetes\", TLS, lists them).") in \
        _refused({"tls": {"source": "existingSecrets", "certManager": {"issuerRef": {"name": "corp-pki"}}}})


def test_a_cluster_issuer_without_a_name_is_refused() -> None:
    assert ("tls.certManager.issuerRef.kind is ClusterIssuer but its name is empty: name the ClusterIssuer that "
            "signs the certificates, or leave kind Issuer (and the name empty) for the chart's own self-signed "
            "authority.") in _refused({"tls": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}})


@pytest.mark.parametrize("role", ["primary", "standby"])
def test_a_disaster_recovery_pair_on_the_charts_own_authority_is_refused(role: str) -> None:
    values = load_values(CHART / "ci" / "values-dr.yaml")
    del values["tls"]
    values["dr"]["role"] = role
    assert ("a cluster has a standby set but tls.certManager.issuerRef.name is empty: the chart's own self-signed "
            "authority would differ at each site of the disaster-recovery pair, and neither site would trust the "
            "other's certificates; name in tls.certManager.issuerRef an issuer both releases share (e.g. a CA "
            "ClusterIssuer holding the same CA at both sites), or set tls.source to existingSecrets and issue the "
            "Secrets from one authority yourself.") in _refused(values, "sr" if role == "primary" else "sr-standby")
    values["tls"] = {"source": "existingSecrets"}  # one authority the operator issues from: fine
    render(values, release="sr" if role == "primary" else "sr-standby")


def test_tls_off_renders_as_before_tls_and_ignores_the_certificate_settings() -> None:
    r = render({"tls": {"enabled": False, "source": "existingSecrets",
                        "certManager": {"issuerRef": {"name": "corp-pki"}}}})
    assert not r.all("Certificate") and not r.all("Issuer")
    sts = r.get("StatefulSet", "sr-strongroom-default")
    assert member_container(sts)["readinessProbe"]["grpc"] == {"port": 7101}
    assert not [v for v in pod_spec(sts)["volumes"] if v["name"] == "tls"]
    assert env_names(member_container(sts))["STRONGROOM_ETCD"].startswith("sr-strongroom-etcd-0.")


@pytest.mark.parametrize(("values", "where"), [
    ({"tls": {"enabled": "yes"}}, "/tls/enabled"),
    ({"tls": {"source": "vault"}}, "/tls/source"),
    ({"tls": {"certManager": {"privateKey": {"algorithm": "DSA"}}}}, "/tls/certManager/privateKey/algorithm"),
    ({"tls": {"certManager": {"privateKey": {"size": 1024}}}}, "/tls/certManager/privateKey/size"),
    ({"tls": {"certManager": {"duration": "90 days"}}}, "/tls/certManager/duration"),
    ({"tls": {"certManager": {"extraDnsNames": {"members": ["not a name"]}}}}, "/tls/certManager/extraDnsNames/members/0"),
    ({"tls": {"certManager": {"issuerRef": {"kind": ""}}}}, "/tls/certManager/issuerRef/kind"),
    ({"tls": {"secretName": "x"}}, "secretName"),  # unknown key: a typo is not silently ignored
    ({"etcd": {"externalEndpoints": ["ftp://etcd:2379"]}}, "/etcd/externalEndpoints/0"),
])
def test_schema_types_the_tls_keys(values: dict[str, Any], where: str) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as exc:
        chart.validate_schema(values)
    assert where in str(exc.value)


def test_external_etcd_endpoints_may_name_their_scheme() -> None:
    values = load_values(CHART / "ci" / "values-external-etcd.yaml")
    values["etcd"]["externalEndpoints"] = ["https://etcd-0.infra:2379", "http://etcd-1.infra:2379"]
    r = render(values)
    env = env_names(r.get("Deployment", "sr-strongroom-realm")["spec"]["template"]["spec"]["containers"][0])
    assert env["STRONGROOM_ETCD"] == "https://etcd-0.infra:2379,http://etcd-1.infra:2379"


def test_a_revocation_list_reaches_every_server_and_no_client() -> None:
    """tls.revocationList (the multi-cluster scenario, routers included, with a list): every
    member, router and realm service is told the list's file and mounts the ConfigMap
    read-only, the bundled etcd reads it on its client and peer ports; the realm-apply Job (a
    client) is not told; without it nothing of it is rendered."""
    values = load_values(CHART / "ci" / "values-zones.yaml")
    values.setdefault("tls", {})["revocationList"] = {"configMap": "strongroom-crl"}
    with_list = render(values)
    found = strongroom_containers(with_list)
    servers = [(doc, c) for doc, c in found if component(doc) != "realm-apply"]
    assert {component(doc) for doc, _ in servers} >= {"persistence", "realm", "router"}
    for doc, container in servers:
        assert env_names(container).get("STRONGROOM_TLS_CRL") == "/etc/strongroom-crl/crl.pem", container["name"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls-crl"]
        assert mount["readOnly"] and mount["mountPath"] == "/etc/strongroom-crl"
        (volume,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == "tls-crl"]
        assert volume["configMap"] == {"name": "strongroom-crl", "items": [{"key": "crl.pem", "path": "crl.pem"}]}
    for doc, container in found:
        if component(doc) == "realm-apply":
            assert "STRONGROOM_TLS_CRL" not in env_names(container)
    etcd = with_list.get("StatefulSet", f"{fullname(with_list.values)}-etcd")
    args = etcd_args(pod_spec(etcd)["containers"][0])
    assert args["--client-crl-file"] == args["--peer-crl-file"] == "/etc/strongroom-crl/crl.pem"
    assert [m for m in pod_spec(etcd)["containers"][0]["volumeMounts"] if m["name"] == "tls-crl"]
    assert [v for v in pod_spec(etcd)["volumes"] if v["name"] == "tls-crl"]
    default = render_scenario("values-default.yaml")
    default_etcd = default.get("StatefulSet", f"{fullname(default.values)}-etcd")
    assert not [a for a in etcd_args(pod_spec(default_etcd)["containers"][0]) if "crl-file" in a]
    for doc, container in strongroom_containers(render_scenario("values-default.yaml")):
        assert "STRONGROOM_TLS_CRL" not in env_names(container)
        assert all(v["name"] != "tls-crl" for v in pod_spec(doc)["volumes"])
