{{/*
Names and labels of every Strongroom resource. Templates take names and labels only from here,
so the drill (strongroom/drill_k8s.py, deploy/drills/failover.sh), the leader's own pod label
(strongroom/persistence/k8s.py) and the Services always agree; tests/deploy checks they do.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "strongroom.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<name>" (just the release when it already holds the name), or fullnameOverride. */}}
{{- define "strongroom.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "strongroom.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* --- labels ------------------------------------------------------------------------------ */}}

{{/* Selector labels of the whole release. */}}
{{- define "strongroom.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strongroom.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The full label set of a release resource (selector labels plus descriptive ones). */}}
{{- define "strongroom.labels" -}}
helm.sh/chart: {{ include "strongroom.chart" . }}
{{ include "strongroom.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: strongroom
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component. Takes (dict "root" $ "component" "realm"). */}}
{{- define "strongroom.componentSelectorLabels" -}}
{{ include "strongroom.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Full labels of one component. Takes (dict "root" $ "component" "realm"). */}}
{{- define "strongroom.componentLabels" -}}
{{ include "strongroom.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The label key naming a member's persistence cluster. */}}
{{- define "strongroom.clusterLabelKey" -}}
strongroom.io/cluster
{{- end }}

{{/* The label the leader sets on its own pod (strongroom.persistence.k8s.ROLE_LABEL). */}}
{{- define "strongroom.roleLabelKey" -}}
strongroom.io/role
{{- end }}

{{/* The role label's value on the leader (strongroom.persistence.k8s.LEADER_VALUE). */}}
{{- define "strongroom.leaderRoleValue" -}}
leader
{{- end }}

{{/* Selector labels of one persistence cluster's members. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.clusterSelectorLabels" -}}
{{ include "strongroom.componentSelectorLabels" (dict "root" .root "component" "persistence") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* Full labels of one persistence cluster's resources. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.clusterLabels" -}}
{{ include "strongroom.componentLabels" (dict "root" .root "component" "persistence") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* What the leader Service selects: the cluster's members carrying the leader label. */}}
{{- define "strongroom.leaderSelectorLabels" -}}
{{ include "strongroom.clusterSelectorLabels" . }}
{{ include "strongroom.roleLabelKey" . }}: {{ include "strongroom.leaderRoleValue" . }}
{{- end }}

{{/* The role label's value on the active router replica (strongroom.persistence.k8s.ACTIVE_VALUE). */}}
{{- define "strongroom.routerActiveRoleValue" -}}
active
{{- end }}

{{/* Selector labels of one cluster's router replicas. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.router.selectorLabels" -}}
{{ include "strongroom.componentSelectorLabels" (dict "root" .root "component" "router") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* What the router Service selects: the cluster's router replica labelled active (by itself). */}}
{{- define "strongroom.router.activeSelectorLabels" -}}
{{ include "strongroom.router.selectorLabels" . }}
{{ include "strongroom.roleLabelKey" . }}: {{ include "strongroom.routerActiveRoleValue" . }}
{{- end }}

{{/* Full labels of one cluster's router resources. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.router.labels" -}}
{{ include "strongroom.componentLabels" (dict "root" .root "component" "router") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* A label set (YAML, as the helpers above give it) as a kubectl selector "k=v,k2=v2". */}}
{{- define "strongroom.kubectlSelector" -}}
{{- $out := list }}
{{- range $k, $v := fromYaml . }}
{{- $out = append $out (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* --- names ------------------------------------------------------------------------------- */}}

{{- define "strongroom.etcd.fullname" -}}
{{- printf "%s-etcd" (include "strongroom.fullname" .) }}
{{- end }}

{{- define "strongroom.etcd.headlessName" -}}
{{- printf "%s-etcd-headless" (include "strongroom.fullname" .) }}
{{- end }}

{{- define "strongroom.realm.fullname" -}}
{{- printf "%s-realm" (include "strongroom.fullname" .) }}
{{- end }}

{{/* The ConfigMap holding the realm file (generated or existing). */}}
{{- define "strongroom.realm.configMapName" -}}
{{- default (include "strongroom.realm.fullname" .) .Values.realm.existingConfigMap }}
{{- end }}

{{/*
A site: where a release runs its members, as names and DNS see it, as JSON
{"fullname", "namespace", "domain"}. The member names and addresses below are built from a site,
so the realm can name the members of the other release of a disaster-recovery pair (dr.sites)
by the same rule as this release's own pods.
*/}}
{{- define "strongroom.ownSite" -}}
{{- toJson (dict "fullname" (include "strongroom.fullname" .) "namespace" .Release.Namespace "domain" .Values.clusterDomain) }}
{{- end }}

{{/* A cluster's StatefulSet name at a site. Takes (dict "site" <site dict> "cluster" "default"). */}}
{{- define "strongroom.site.clusterFullname" -}}
{{- printf "%s-%s" .site.fullname .cluster }}
{{- end }}

{{/* A member's name at a site: its pod's. Takes (dict "site" <site dict> "cluster" "default" "ordinal" 0). */}}
{{- define "strongroom.site.memberName" -}}
{{- printf "%s-%d" (include "strongroom.site.clusterFullname" .) (int .ordinal) }}
{{- end }}

{{/* The DNS suffix of a cluster's members at a site: "<headless>.<namespace>.svc.<domain>". Takes (dict "site" <site dict> "cluster" "default"). */}}
{{- define "strongroom.site.peerDomain" -}}
{{- printf "%s-headless.%s.svc.%s" (include "strongroom.site.clusterFullname" .) .site.namespace .site.domain }}
{{- end }}

{{/* A member's address at a site. Takes (dict "site" <site dict> "cluster" "default" "ordinal" 0 "port" 7101). */}}
{{- define "strongroom.site.memberAddress" -}}
{{- printf "%s.%s:%d" (include "strongroom.site.memberName" .) (include "strongroom.site.peerDomain" .) (int .port) }}
{{- end }}

{{/* StatefulSet, PodDisruptionBudget and client Service of a cluster. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.cluster.fullname" -}}
{{- include "strongroom.site.clusterFullname" (dict "site" (fromJson (include "strongroom.ownSite" .root)) "cluster" .cluster) }}
{{- end }}

{{/* The headless Service giving each member a stable DNS name. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.cluster.headlessName" -}}
{{- printf "%s-headless" (include "strongroom.cluster.fullname" .) }}
{{- end }}

{{/* The Service that reaches the leader only. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.cluster.leaderName" -}}
{{- printf "%s-leader" (include "strongroom.cluster.fullname" .) }}
{{- end }}

{{/* A member's name in the realm: its pod's name. Takes (dict "root" $ "cluster" "default" "ordinal" 0). */}}
{{- define "strongroom.memberName" -}}
{{- include "strongroom.site.memberName" (dict "site" (fromJson (include "strongroom.ownSite" .root)) "cluster" .cluster "ordinal" .ordinal) }}
{{- end }}

{{/* The DNS suffix of a cluster's members: "<headless>.<namespace>.svc.<domain>". Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.cluster.peerDomain" -}}
{{- include "strongroom.site.peerDomain" (dict "site" (fromJson (include "strongroom.ownSite" .root)) "cluster" .cluster) }}
{{- end }}

{{/* A member's address "<pod>.<headless>.<namespace>.svc.<domain>:<port>". Takes (dict "root" $ "cluster" "default" "ordinal" 0). */}}
{{- define "strongroom.memberAddress" -}}
{{- include "strongroom.site.memberAddress" (dict "site" (fromJson (include "strongroom.ownSite" .root)) "cluster" .cluster "ordinal" .ordinal "port" .root.Values.persistence.port) }}
{{- end }}

{{/* --- disaster recovery (dr.role, persistence.clusters[].standby; docs/dr.md) ------------------ */}}

{{/* Whether this release runs the standby sets of a disaster-recovery pair ("true" or ""). */}}
{{- define "strongroom.dr.isStandby" -}}
{{- if eq .Values.dr.role "standby" }}true{{ end }}
{{- end }}

{{/*
How many member pods this release runs for a cluster: its members (dr.role primary, as without
DR; 2 for a shared-store pair, its one member's two instances), or its standby set's members (dr.role standby; 0 for a cluster without a standby set, which
runs at the primary site only). Takes (dict "root" $ "cluster" <a persistence.clusters item>).
*/}}
{{- define "strongroom.cluster.pods" -}}
{{- if include "strongroom.dr.isStandby" .root }}
{{- dig "standby" "members" 0 .cluster | int }}
{{- else if include "strongroom.cluster.isSharedStore" .cluster }}
{{- 2 }}
{{- else }}
{{- .cluster.members | int }}
{{- end }}
{{- end }}

{{/* --- shared-store pairs (persistence.clusters[].sharedStore; docs/store-operations.md) ---------- */}}

{{/* Whether a cluster runs as a shared-store pair ("true" or ""): its one member as two pods on one
ReadWriteMany volume. Takes a persistence.clusters item. */}}
{{- define "strongroom.cluster.isSharedStore" -}}
{{- if dig "sharedStore" "enabled" false . }}true{{ end }}
{{- end }}

{{/* The one member of a shared-store pair at a site: named as the cluster's StatefulSet, whose two
pods are its instances (the pods' own names are not member names here). Takes (dict "site" <site dict> "cluster" "default"). */}}
{{- define "strongroom.site.sharedStoreMemberName" -}}
{{- include "strongroom.site.clusterFullname" . }}
{{- end }}

{{/* The one member of this release's shared-store pair. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.sharedStore.memberName" -}}
{{- include "strongroom.site.sharedStoreMemberName" (dict "site" (fromJson (include "strongroom.ownSite" .root)) "cluster" .cluster) }}
{{- end }}

{{/* The ReadWriteMany PersistentVolumeClaim both pods of a shared-store pair mount. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.sharedStore.claimName" -}}
{{- printf "%s-data" (include "strongroom.cluster.fullname" .) }}
{{- end }}

{{/*
The volume of this release's members of a cluster (JSON {"storageClass", "size"}): the
cluster's volume, at a standby site with its standby.volume keys over it (the two sites'
StorageClasses usually differ), for a shared-store pair with its sharedStore.volume keys over it
(a ReadWriteMany class is usually not the default one). Takes (dict "root" $ "cluster" <a persistence.clusters item>).
*/}}
{{- define "strongroom.cluster.volume" -}}
{{- $v := dict "storageClass" (dig "volume" "storageClass" "" .cluster) "size" (dig "volume" "size" "10Gi" .cluster) }}
{{- if include "strongroom.cluster.isSharedStore" .cluster }}
{{- with (dig "sharedStore" "volume" "storageClass" "" .cluster) }}{{ $_ := set $v "storageClass" . }}{{ end }}
{{- with (dig "sharedStore" "volume" "size" "" .cluster) }}{{ $_ := set $v "size" . }}{{ end }}
{{- end }}
{{- if include "strongroom.dr.isStandby" .root }}
{{- with (dig "standby" "volume" "storageClass" "" .cluster) }}{{ $_ := set $v "storageClass" . }}{{ end }}
{{- with (dig "standby" "volume" "size" "" .cluster) }}{{ $_ := set $v "size" . }}{{ end }}
{{- end }}
{{- toJson $v }}
{{- end }}

{{/*
The site that runs one set of a disaster-recovery pair (.set: "primary" or "standby"), as a site
dict (see "strongroom.ownSite"): this release's when dr.role is that set, else the other
release's as dr.sites.<set> describes it: its release name, named with this chart's rule and
nameOverride (so the other release must not set fullnameOverride: validateValues checks this
one's), in dr.sites.<set>.namespace and .clusterDomain, by default this release's.
Takes (dict "root" $ "set" "primary").
*/}}
{{- define "strongroom.dr.site" -}}
{{- $root := .root }}
{{- if eq .set $root.Values.dr.role }}
{{- include "strongroom.ownSite" $root }}
{{- else }}
{{- $s := get ($root.Values.dr.sites | default dict) .set | default dict }}
{{- $named := dict "Values" (dict "nameOverride" $root.Values.nameOverride "fullnameOverride" "") "Chart" $root.Chart "Release" (dict "Name" ($s.release | default "")) }}
{{- toJson (dict "fullname" (include "strongroom.fullname" $named) "namespace" ($s.namespace | default $root.Release.Namespace) "domain" ($s.clusterDomain | default $root.Values.clusterDomain)) }}
{{- end }}
{{- end }}

{{/* Whether any persistence cluster has a standby set ("true" or ""). */}}
{{- define "strongroom.dr.anyStandby" -}}
{{- range $c := .Values.persistence.clusters }}{{ if $c.standby }}true{{ end }}{{ end }}
{{- end }}

{{/* A cluster's DR service (strongroom-dr): its Deployment and Service. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.dr.fullname" -}}
{{- printf "%s-dr" (include "strongroom.cluster.fullname" .) }}
{{- end }}

{{/* Selector labels of one cluster's DR service. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.dr.selectorLabels" -}}
{{ include "strongroom.componentSelectorLabels" (dict "root" .root "component" "dr") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* Full labels of one cluster's DR resources. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.dr.labels" -}}
{{ include "strongroom.componentLabels" (dict "root" .root "component" "dr") }}
{{ include "strongroom.clusterLabelKey" . }}: {{ .cluster }}
{{- end }}

{{/* A cluster's router: its Deployment and its Service. Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.router.fullname" -}}
{{- printf "%s-router" (include "strongroom.cluster.fullname" .) }}
{{- end }}

{{/* The routers' ServiceAccount, Role and RoleBinding (one for every routed cluster of the release). */}}
{{- define "strongroom.router.rbacName" -}}
{{- printf "%s-router" (include "strongroom.fullname" .) }}
{{- end }}

{{/* The ServiceAccount the router pods run as: router.serviceAccountName, or the chart's. */}}
{{- define "strongroom.router.serviceAccountName" -}}
{{- default (include "strongroom.router.rbacName" .) .Values.router.serviceAccountName }}
{{- end }}

{{/* The realm service's address, as registered in etcd and used by the apply Job. */}}
{{- define "strongroom.realm.address" -}}
{{- printf "%s.%s.svc.%s:%d" (include "strongroom.realm.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.realm.port) }}
{{- end }}

{{/* The key of the realm file in the realm ConfigMap. */}}
{{- define "strongroom.realm.configMapKey" -}}
{{- if .Values.realm.existingConfigMap }}{{ .Values.realm.existingConfigMapKey }}{{ else }}realm.yaml{{ end }}
{{- end }}

{{/* The post-upgrade Job applying the realm file; one name per revision. */}}
{{- define "strongroom.realm.applyJobName" -}}
{{- printf "%s-apply-%d" (include "strongroom.realm.fullname" .) (int .Release.Revision) }}
{{- end }}

{{/* The pre-upgrade ConfigMap holding the realm file the upgrade brings (members-hook.yaml). */}}
{{- define "strongroom.realm.upcomingConfigMapName" -}}
{{- printf "%s-upcoming" (include "strongroom.realm.fullname" .) }}
{{- end }}

{{/*
A hook Job that runs the `strongroom` CLI against the realm service with the realm file mounted at
/etc/strongroom/realm.yaml, as the realm-apply user (its certificate with TLS). Arguments (a dict):
root, name, hook (the helm.sh/hook value), weight, configMap (where the realm file is), args (the
CLI's arguments, a list), comment (why the Job exists, above its manifest).
*/}}
{{- define "strongroom.realm.hookJob" -}}
{{- $root := .root }}
{{- $ctx := dict "root" $root "component" "realm-apply" }}
# {{ .comment }}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "strongroom.componentLabels" $ctx | nindent 4 }}
  annotations:
    "helm.sh/hook": {{ .hook }}
    "helm.sh/hook-weight": {{ .weight | quote }}
    "helm.sh/hook-delete-policy": before-hook-creation,hook-succeeded
    {{- include "strongroom.checkovSkipEntries" (dict "root" $root "image" (include "strongroom.image" $root)) | nindent 4 }}
spec:
  # The realm service or a leader may still be rolling out: retry until it answers.
  backoffLimit: {{ .backoffLimit | default 10 }}
  ttlSecondsAfterFinished: 3600
  template:
    metadata:
      labels:
        {{- include "strongroom.componentLabels" $ctx | nindent 8 }}
    spec:
      restartPolicy: OnFailure
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: realm-apply
          image: {{ include "strongroom.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: ["strongroom"]
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            - --realm-address={{ include "strongroom.realm.address" $root }}
          {{- with (include "strongroom.tls.env" $root) }}
          # A client certificate of its own: user "{{ include "strongroom.tls.realmApplyUser" $root }}".
          env:
            {{- . | trim | nindent 12 }}
          {{- end }}
          {{- with $root.Values.realm.resources }}
          # The realm service's resources: the Job runs the same program's client side, briefly.
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: realm
              mountPath: /etc/strongroom
              readOnly: true
            {{- with (include "strongroom.tls.volumeMount" $root) }}{{ . | trim | nindent 12 }}{{ end }}
      volumes:
        - name: realm
          configMap:
            name: {{ .configMap }}
            items:
              - key: {{ include "strongroom.realm.configMapKey" $root }}
                path: realm.yaml
        {{- with (include "strongroom.tls.volume" (dict "root" $root "secret" (include "strongroom.tls.realmApplySecretName" $root))) }}{{ . | trim | nindent 8 }}{{ end }}
{{- end }}

{{/* Role and RoleBinding of the members. */}}
{{- define "strongroom.rbacName" -}}
{{- printf "%s-persistence" (include "strongroom.fullname" .) }}
{{- end }}

{{- define "strongroom.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "strongroom.rbacName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* --- TLS (tls; README "Kubernetes", TLS) ------------------------------------------------- */}}

{{/* Whether every Strongroom process and the bundled etcd speak mutual TLS ("true" or ""). */}}
{{- define "strongroom.tls.enabled" -}}
{{- if .Values.tls.enabled }}true{{ end }}
{{- end }}

{{/* Whether the chart renders cert-manager Certificates for them ("true" or ""). */}}
{{- define "strongroom.tls.certManager" -}}
{{- if and .Values.tls.enabled (eq .Values.tls.source "certManager") }}true{{ end }}
{{- end }}

{{/* Whether they are signed by the chart's own self-signed authority: cert-manager with no issuer named ("true" or ""). */}}
{{- define "strongroom.tls.ownAuthority" -}}
{{- if and (include "strongroom.tls.certManager" .) (not .Values.tls.certManager.issuerRef.name) }}true{{ end }}
{{- end }}

{{/* The chart's own authority: its CA Certificate, Secret and CA Issuer. */}}
{{- define "strongroom.tls.authorityName" -}}
{{- printf "%s-ca" (include "strongroom.fullname" .) }}
{{- end }}

{{/* The Issuer that makes the chart's own authority (self-signed). */}}
{{- define "strongroom.tls.bootstrapIssuerName" -}}
{{- printf "%s-selfsigned" (include "strongroom.fullname" .) }}
{{- end }}

{{/* The issuerRef of every Certificate: tls.certManager.issuerRef, or the chart's own authority. */}}
{{- define "strongroom.tls.issuerRef" -}}
{{- if include "strongroom.tls.ownAuthority" . }}
name: {{ include "strongroom.tls.authorityName" . }}
kind: Issuer
group: cert-manager.io
{{- else }}
{{- with .Values.tls.certManager.issuerRef }}
name: {{ .name }}
kind: {{ .kind }}
group: {{ .group }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where a container finds its certificate, key and authority (read-only). */}}
{{- define "strongroom.tls.mountPath" -}}
/etc/strongroom-tls
{{- end }}

{{/* The Secret of a member's pod (a shared-store pair's instance too). Takes the pod name. */}}
{{- define "strongroom.tls.podSecretName" -}}
{{- printf "%s-tls" . }}
{{- end }}

{{/* The Secrets of the other workloads: one each, shared by their replicas. */}}
{{- define "strongroom.tls.etcdSecretName" -}}
{{- printf "%s-tls" (include "strongroom.etcd.fullname" .) }}
{{- end }}

{{- define "strongroom.tls.realmSecretName" -}}
{{- printf "%s-tls" (include "strongroom.realm.fullname" .) }}
{{- end }}

{{- define "strongroom.tls.realmApplySecretName" -}}
{{- printf "%s-apply-tls" (include "strongroom.realm.fullname" .) }}
{{- end }}

{{/* Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.tls.routerSecretName" -}}
{{- printf "%s-tls" (include "strongroom.router.fullname" .) }}
{{- end }}

{{/* Takes (dict "root" $ "cluster" "default"). */}}
{{- define "strongroom.tls.drSecretName" -}}
{{- printf "%s-tls" (include "strongroom.dr.fullname" .) }}
{{- end }}

{{/* The identity the realm-apply Job's certificate names: a user, as the CLI it runs is. One
name whatever the release, so that both releases of a DR pair generate the same realm (each
lists it as a user of role chart-realm-apply, which may administer). */}}
{{- define "strongroom.tls.realmApplyUser" -}}
strongroom-realm-apply
{{- end }}

{{/* The names a Service (or "<pod>.<headless Service>") is dialled by, as a JSON list: fully
qualified first, then each shorter form the namespace's DNS search path resolves. Takes
(dict "root" $ "name" "sr-strongroom-default"). */}}
{{- define "strongroom.tls.serviceDnsNames" -}}
{{- $ns := .root.Release.Namespace }}
{{- toJson (list (printf "%s.%s.svc.%s" .name $ns .root.Values.clusterDomain) (printf "%s.%s.svc" .name $ns) (printf "%s.%s" .name $ns) .name) }}
{{- end }}

{{/* The hosts of "host:port" addresses as subject alternative names, JSON {"dns": [...], "ip": [...]}.
Takes a list of addresses. */}}
{{- define "strongroom.tls.addressSans" -}}
{{- $dns := list }}
{{- $ip := list }}
{{- range $a := . }}
{{- $host := regexReplaceAll ":[0-9]+$" (toString $a) "" | trimPrefix "[" | trimSuffix "]" }}
{{- if or (regexMatch "^[0-9]+(\\.[0-9]+){3}$" $host) (contains ":" $host) }}
{{- $ip = append $ip $host }}
{{- else if $host }}
{{- $dns = append $dns $host }}
{{- end }}
{{- end }}
{{- toJson (dict "dns" $dns "ip" $ip) }}
{{- end }}

{{/*
Every certificate this release's processes use, as a JSON list of {"secret", "for", "component",
"cluster", "uri", "dnsNames", "ipAddresses", "server"}: the one place that says which Secret
each process mounts and what its certificate must name. templates/certificates.yaml renders a
cert-manager Certificate of each (tls.source certManager); NOTES.txt lists them for an operator
who provides the Secrets (tls.source existingSecrets).
- Each member pod has its own (a member's identity is its name, strongroom://member/<cluster>/<member>),
  in Secret "<pod>-tls"; a shared-store pair's two pods are instances of one member and carry its
  name. DNS names: the pod's headless-Service name and the cluster's client and leader Services
  (in every form a client in the cluster dials), and at the primary site the cluster's
  standby.primary hosts (where the standby site's DR service reads it).
- The realm service, each router Deployment and each DR service have one, shared by their
  replicas (a Deployment's pod names are not known in advance; nothing checks a router
  replica's own name, only its cluster's); the realm-apply Job a client certificate of its own,
  as user "<fullname>-realm-apply".
- The bundled etcd one for all its pods (its identity has no pod name), used on the client and
  the peer port.
Every server certificate also names localhost, and every one but etcd's 127.0.0.1 (kubectl port-forward).
*/}}
{{- define "strongroom.tls.certificates" -}}
{{- $root := . }}
{{- $v := .Values }}
{{- $extra := $v.tls.certManager.extraDnsNames | default dict }}
{{- $loopback := dict "dns" (list "localhost") "ip" (list "127.0.0.1") }}
{{- $out := list }}
{{- range $c := $v.persistence.clusters }}
{{- $pods := int (include "strongroom.cluster.pods" (dict "root" $root "cluster" $c)) }}
{{- $ctx := dict "root" $root "cluster" $c.name }}
{{- $services := concat (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.cluster.fullname" $ctx)))) (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.cluster.leaderName" $ctx)))) }}
{{- $primary := dict "dns" (list) "ip" (list) }}
{{- if and $c.standby (not (include "strongroom.dr.isStandby" $root)) }}
{{- $primary = fromJson (include "strongroom.tls.addressSans" ($c.standby.primary | default list)) }}
{{- end }}
{{- range $i := until $pods }}
{{- $pod := include "strongroom.memberName" (dict "root" $root "cluster" $c.name "ordinal" $i) }}
{{- $member := $pod }}
{{- $for := printf "member %s of cluster %s" $pod $c.name }}
{{- if include "strongroom.cluster.isSharedStore" $c }}
{{- $member = include "strongroom.sharedStore.memberName" $ctx }}
{{- $for = printf "pod %s, an instance of member %s of cluster %s" $pod $member $c.name }}
{{- end }}
{{- $dns := concat (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (printf "%s.%s" $pod (include "strongroom.cluster.headlessName" $ctx))))) $services $primary.dns ($extra.members | default list) $loopback.dns }}
{{- $out = append $out (dict "secret" (include "strongroom.tls.podSecretName" $pod) "for" $for "component" "persistence" "cluster" $c.name "uri" (printf "strongroom://member/%s/%s" $c.name $member) "dnsNames" (uniq $dns) "ipAddresses" (uniq (concat $loopback.ip $primary.ip)) "server" true) }}
{{- end }}
{{- end }}
{{- $realmDns := concat (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.realm.fullname" $root)))) ($extra.realm | default list) $loopback.dns }}
{{- $out = append $out (dict "secret" (include "strongroom.tls.realmSecretName" $root) "for" "the realm service" "component" "realm" "cluster" "" "uri" "strongroom://realm/realm/realm" "dnsNames" (uniq $realmDns) "ipAddresses" $loopback.ip "server" true) }}
{{- if $v.realm.applyOnUpgrade }}
{{- $out = append $out (dict "secret" (include "strongroom.tls.realmApplySecretName" $root) "for" "the realm-apply Job (a client)" "component" "realm-apply" "cluster" "" "uri" (printf "strongroom://user/%s" (include "strongroom.tls.realmApplyUser" $root)) "dnsNames" (list) "ipAddresses" (list) "server" false) }}
{{- end }}
{{- if and $v.router.enabled (not (include "strongroom.dr.isStandby" $root)) }}
{{- range $name := fromJsonArray (include "strongroom.router.clusters" $root) }}
{{- $ctx := dict "root" $root "cluster" $name }}
{{- $address := dict "dns" (list) "ip" (list) }}
{{- range $c := $v.persistence.clusters }}
{{- if and (eq $c.name $name) (dig "router" "address" "" $c) }}
{{- $address = fromJson (include "strongroom.tls.addressSans" (list $c.router.address)) }}
{{- end }}
{{- end }}
{{- $dns := concat (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.router.fullname" $ctx)))) $address.dns ($extra.routers | default list) $loopback.dns }}
{{- $out = append $out (dict "secret" (include "strongroom.tls.routerSecretName" $ctx) "for" (printf "the router replicas of cluster %s" $name) "component" "router" "cluster" $name "uri" (printf "strongroom://router/%s/%s" $name (include "strongroom.router.fullname" $ctx)) "dnsNames" (uniq $dns) "ipAddresses" (uniq (concat $loopback.ip $address.ip)) "server" true) }}
{{- end }}
{{- end }}
{{- range $c := $v.persistence.clusters }}
{{- if $c.standby }}
{{- $ctx := dict "root" $root "cluster" $c.name }}
{{- $dns := concat (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.dr.fullname" $ctx)))) ($extra.dr | default list) $loopback.dns }}
{{- $out = append $out (dict "secret" (include "strongroom.tls.drSecretName" $ctx) "for" (printf "the DR service of cluster %s" $c.name) "component" "dr" "cluster" $c.name "uri" (printf "strongroom://dr/%s/dr" $c.name) "dnsNames" (uniq $dns) "ipAddresses" $loopback.ip "server" true) }}
{{- end }}
{{- end }}
{{- if $v.etcd.enabled }}
{{- $dns := list }}
{{- range $i := until (int $v.etcd.replicas) }}
{{- $dns = concat $dns (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (printf "%s-%d.%s" (include "strongroom.etcd.fullname" $root) $i (include "strongroom.etcd.headlessName" $root))))) }}
{{- end }}
{{- $dns = concat $dns (fromJsonArray (include "strongroom.tls.serviceDnsNames" (dict "root" $root "name" (include "strongroom.etcd.fullname" $root)))) $loopback.dns }}
{{- /* No IP address: etcd accepts a peer whose certificate names an IP address only from that
address (else it looks the DNS names up for the peer's), and 127.0.0.1 is no peer's. */}}
{{- $out = append $out (dict "secret" (include "strongroom.tls.etcdSecretName" $root) "for" "the bundled etcd (its client and peer ports)" "component" "etcd" "cluster" "" "uri" (printf "strongroom://etcd/%s/etcd" (include "strongroom.fullname" $root)) "dnsNames" (uniq $dns) "ipAddresses" (list) "server" true) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* The environment naming a Strongroom process's TLS files (strongroom.security.tls.ENV), or nothing. */}}
{{- define "strongroom.tls.env" -}}
{{- if include "strongroom.tls.enabled" . }}
{{- $dir := include "strongroom.tls.mountPath" . }}
- name: STRONGROOM_TLS_CA
  value: {{ $dir }}/ca.crt
- name: STRONGROOM_TLS_CERT
  value: {{ $dir }}/tls.crt
- name: STRONGROOM_TLS_KEY
  value: {{ $dir }}/tls.key
{{- end }}
{{- end }}

{{/* A server's revocation list (tls.revocationList: security/revocation.py), or nothing: the
variable naming its file, the mount of the ConfigMap that holds it, the volume. A ConfigMap
mounted as a volume is updated in place by the kubelet, and the processes read the file again
when it changes: a revocation takes effect without a restart. */}}
{{- define "strongroom.tls.crl.env" -}}
{{- if and (include "strongroom.tls.enabled" .) .Values.tls.revocationList.configMap }}
- name: STRONGROOM_TLS_CRL
  value: /etc/strongroom-crl/{{ .Values.tls.revocationList.key }}
{{- end }}
{{- end }}

{{- define "strongroom.tls.crl.volumeMount" -}}
{{- if and (include "strongroom.tls.enabled" .) .Values.tls.revocationList.configMap }}
- name: tls-crl
  mountPath: /etc/strongroom-crl
  readOnly: true
{{- end }}
{{- end }}

{{- define "strongroom.tls.crl.volume" -}}
{{- if and (include "strongroom.tls.enabled" .) .Values.tls.revocationList.configMap }}
- name: tls-crl
  configMap:
    name: {{ .Values.tls.revocationList.configMap }}
    items:
      - key: {{ .Values.tls.revocationList.key }}
        path: {{ .Values.tls.revocationList.key }}
{{- end }}
{{- end }}

{{/* The container's mount of its certificate (volume "tls"), or nothing. */}}
{{- define "strongroom.tls.volumeMount" -}}
{{- if include "strongroom.tls.enabled" . }}
- name: tls
  mountPath: {{ include "strongroom.tls.mountPath" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The three keys of a certificate Secret, as cert-manager writes them, each at `prefix`. Takes (dict "prefix" ""). */}}
{{- define "strongroom.tls.items" -}}
{{- range $key := list "ca.crt" "tls.crt" "tls.key" }}
- key: {{ $key }}
  path: {{ $.prefix }}{{ $key }}
{{- end }}
{{- end }}

{{/* Volume "tls": one Secret of a workload whose replicas share it, or nothing. Takes (dict "root" $ "secret" "name"). */}}
{{- define "strongroom.tls.volume" -}}
{{- if include "strongroom.tls.enabled" .root }}
- name: tls
  secret:
    secretName: {{ .secret }}
    # 0440: the owner and the pod's fsGroup read it, nobody else.
    defaultMode: 288
    items:
      {{- include "strongroom.tls.items" (dict "prefix" "") | trim | nindent 6 }}
{{- end }}
{{- end }}

{{/*
A probe's check of a Strongroom process's gRPC health on `port` (`service`: "" or a service
name), with its timeout. Without TLS the kubelet's own gRPC probe; with TLS, which the kubelet's
probe cannot speak (it has no client certificate), `python -m strongroom.probe` in the container
(strongroom/probe.py: the same health call over mutual TLS, as the container's own identity),
allowed 5 s for the interpreter's start. Takes (dict "root" $ "port" 7101 "service" "" "timeout" 3).
*/}}
{{- define "strongroom.probe.check" -}}
{{- if include "strongroom.tls.enabled" .root }}
exec:
  command: ["python", "-m", "strongroom.probe", "{{ int .port }}"{{ with .service }}, "--service", {{ . | quote }}{{ end }}]
timeoutSeconds: 5
{{- else }}
grpc:
  port: {{ int .port }}
  {{- with .service }}
  service: {{ . }}
  {{- end }}
{{- with .timeout }}
timeoutSeconds: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* --- shared pieces ----------------------------------------------------------------------- */}}

{{- define "strongroom.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* etcd's peer DNS suffix. */}}
{{- define "strongroom.etcd.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "strongroom.etcd.headlessName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The etcd endpoints every service is given: each bundled member (https:// with TLS: the
processes then reach it with their own certificate, strongroom.etcd.endpoint_tls), or the
external ones as given. */}}
{{- define "strongroom.etcd.endpoints" -}}
{{- if .Values.etcd.enabled }}
{{- $root := . }}
{{- $scheme := ternary "https://" "" (not (empty (include "strongroom.tls.enabled" .))) }}
{{- $out := list }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $out = append $out (printf "%s%s-%d.%s:%d" $scheme (include "strongroom.etcd.fullname" $root) $i (include "strongroom.etcd.peerDomain" $root) (int $root.Values.etcd.clientPort)) }}
{{- end }}
{{- join "," $out }}
{{- else }}
{{- join "," .Values.etcd.externalEndpoints }}
{{- end }}
{{- end }}

{{/* Pod anti-affinity across nodes. Takes (dict "mode" "hard|soft|none" "labels" (selector labels YAML)). */}}
{{- define "strongroom.antiAffinity" -}}
{{- if eq .mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- .labels | nindent 10 }}
{{- else if eq .mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- .labels | nindent 12 }}
{{- end }}
{{- end }}

{{/* The realm file generated from values: members named and addressed as the pods. */}}
{{- define "strongroom.realm.yaml" -}}
{{- $root := . -}}
{{- /* The primary set's members are this release's pods, or (dr.role standby) the primary release's. */}}
{{- $primary := fromJson (include "strongroom.dr.site" (dict "root" . "set" "primary")) -}}
{{- $standby := fromJson (include "strongroom.dr.site" (dict "root" . "set" "standby")) -}}
# Generated by the Strongroom chart: members are the pods of each cluster's StatefulSet.
clusters:
{{- range $c := .Values.persistence.clusters }}
  - name: {{ $c.name }}
    storage: {{ $c.storage }}
    {{- /* Unset keys are left out: the realm's own defaults apply (README "The realm file"). */}}
    {{- if hasKey $c "leaseTtlSeconds" }}
    lease_ttl_seconds: {{ int $c.leaseTtlSeconds }}
    {{- end }}
    {{- if hasKey $c "compactAfterEntries" }}
    compact_after_entries: {{ int $c.compactAfterEntries }}
    {{- end }}
    {{- if hasKey $c "maxBatchOps" }}
    max_batch_ops: {{ int $c.maxBatchOps }}
    {{- end }}
    {{- if hasKey $c "producerIdleExpirySeconds" }}
    producer_idle_expiry_seconds: {{ float64 $c.producerIdleExpirySeconds | printf "%.3f" }}
    {{- end }}
    {{- if hasKey $c "indexesOnDisk" }}
    indexes_on_disk: {{ $c.indexesOnDisk }}
    {{- end }}
    {{- with $c.persistentStore }}
    persistent_store:
      {{- if hasKey . "driver" }}
      driver: {{ .driver }}
      {{- end }}
      {{- if hasKey . "writeBufferMb" }}
      write_buffer_mb: {{ int .writeBufferMb }}
      {{- end }}
      {{- if hasKey . "readCacheMb" }}
      read_cache_mb: {{ int .readCacheMb }}
      {{- end }}
      {{- if hasKey . "capacityMessages" }}
      capacity_messages: {{ int64 .capacityMessages }}
      {{- end }}
      {{- if hasKey . "capacityBytes" }}
      capacity_bytes: {{ int64 .capacityBytes }}
      {{- end }}
      {{- if hasKey . "report" }}
      report: {{ .report }}
      {{- end }}
    {{- end }}
    {{- with (dig "router" "address" "" $c) }}
    router:
      address: {{ . | quote }}
    {{- end }}
    members:
    {{- if include "strongroom.cluster.isSharedStore" $c }}
    {{- /* One member, reached at its two instances (the pods): no address of its own. */}}
      - name: {{ include "strongroom.site.sharedStoreMemberName" (dict "site" $primary "cluster" $c.name) }}
    shared_store:
      instances:
      {{- range $i := until 2 }}
        - {{ include "strongroom.site.memberAddress" (dict "site" $primary "cluster" $c.name "ordinal" $i "port" $root.Values.persistence.port) }}
      {{- end }}
      {{- with (dig "sharedStore" "controlIntervalSeconds" "" $c) }}
      control_interval_seconds: {{ . }}
      {{- end }}
    {{- else }}
    {{- range $i := until (int $c.members) }}
    {{- $m := dict "site" $primary "cluster" $c.name "ordinal" $i "port" $root.Values.persistence.port }}
      - name: {{ include "strongroom.site.memberName" $m }}
        address: {{ include "strongroom.site.memberAddress" $m }}
    {{- end }}
    {{- end }}
    {{- with $c.standby }}
    {{- /* The same in both releases of the pair: each site applies this file to its own etcd. */}}
    standby:
      members:
      {{- range $i := until (int .members) }}
      {{- $m := dict "site" $standby "cluster" $c.name "ordinal" $i "port" $root.Values.persistence.port }}
        - name: {{ include "strongroom.site.memberName" $m }}
          address: {{ include "strongroom.site.memberAddress" $m }}
      {{- end }}
      primary:
      {{- range $a := .primary | default list }}
        - {{ $a | quote }}
      {{- end }}
    {{- end }}
{{- end }}
{{- with .Values.realm.zones }}
zones:
  {{- toYaml . | nindent 2 }}
{{- end }}
stores:
  {{- toYaml .Values.realm.stores | nindent 2 }}
destinations:
  {{- toYaml .Values.realm.destinations | nindent 2 }}
{{- with .Values.realm.auth }}
{{- /* The realm-apply Job calls as its own user (its certificate's): it may always apply. */}}
{{- $applier := include "strongroom.tls.realmApplyUser" $root }}
auth:
  enabled: {{ and .enabled $root.Values.tls.enabled }}
roles:
  - name: chart-realm-apply
    permissions:
      - actions: [administer]
  {{- with .roles }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
users:
  - name: {{ $applier }}
    roles: [chart-realm-apply]
  {{- with .users }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The clusters of this release that the realm routes, as a JSON list in persistence.clusters order:
those in a zone of a routed store that exists at more than one cluster (the realm's
Realm.routed_stores, and the local launcher's rule for starting a router). Derived from the
generated realm file itself, so the routers and the realm cannot disagree; with
realm.existingConfigMap the chart cannot read the realm while rendering, and router.clusters
says it instead. Never fails: validateValues reports what is wrong.
*/}}
{{- define "strongroom.router.clusters" -}}
{{- $routed := dict }}
{{- if .Values.realm.existingConfigMap }}
{{- range $name := .Values.router.clusters }}
{{- $_ := set $routed $name true }}
{{- end }}
{{- else }}
{{- $realm := fromYaml (include "strongroom.realm.yaml" .) }}
{{- $zones := dict }}
{{- range $z := ($realm.zones | default list) }}
{{- $_ := set $zones (toString $z.name) ($z.clusters | default list) }}
{{- end }}
{{- range $s := ($realm.stores | default list) }}
{{- if and $s.routed $s.zones }}
{{- $at := list }}
{{- range $zn := $s.zones }}
{{- $at = concat $at (get $zones (toString $zn) | default list) }}
{{- end }}
{{- if gt (len (uniq $at)) 1 }}
{{- range $c := $at }}
{{- $_ := set $routed (toString $c) true }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $out := list }}
{{- range $c := .Values.persistence.clusters }}
{{- if hasKey $routed $c.name }}
{{- $out = append $out $c.name }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* --- validation -------------------------------------------------------------------------- */}}

{{/*
Fail with one clear sentence per problem. values.schema.json types every key; this checks what
a schema cannot: relations between keys and what the services need to form a quorum.
*/}}
{{- define "strongroom.validateValues" -}}
{{- $problems := list }}
{{- $root := . }}
{{- $fullname := include "strongroom.fullname" . }}
{{- $clusters := .Values.persistence.clusters }}
{{- if not $clusters }}
{{- $problems = append $problems "persistence.clusters is empty: define at least one persistence cluster." }}
{{- end }}
{{- if eq (int .Values.persistence.port) (int .Values.persistence.replicationPort) }}
{{- $problems = append $problems (printf "persistence.replicationPort (%d) is the same as persistence.port: the replication link needs a port of its own." (int .Values.persistence.replicationPort)) }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $c := $clusters }}
{{- $where := printf "persistence.clusters[%d] (%s)" $i $c.name }}
{{- if hasKey $seen $c.name }}
{{- $problems = append $problems (printf "%s: the cluster name %q is used twice; cluster names must be unique." $where $c.name) }}
{{- end }}
{{- $_ := set $seen $c.name true }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $c.name) }}
{{- $problems = append $problems (printf "%s: the cluster name must be a DNS label (lowercase letters, digits and '-'), as it names Kubernetes resources." $where) }}
{{- end }}
{{- $n := int $c.members }}
{{- if or (lt $n 1) (eq (mod $n 2) 0) }}
{{- $problems = append $problems (printf "%s has %d members; use an odd count (1, 3, 5 ...) so a majority is well defined." $where $n) }}
{{- end }}
{{- $pods := int (include "strongroom.cluster.pods" (dict "root" $root "cluster" $c)) }}
{{- $volume := fromJson (include "strongroom.cluster.volume" (dict "root" $root "cluster" $c)) }}
{{- $shared := include "strongroom.cluster.isSharedStore" $c }}
{{- if $shared }}
{{- if ne $n 1 }}
{{- $problems = append $problems (printf "%s has sharedStore.enabled with %d members: a shared-store pair is one member run as two pods on one ReadWriteMany volume; set persistence.clusters[%d].members to 1 (a cluster of several members replicates instead, each member on its own volume)." $where $n $i) }}
{{- end }}
{{- if eq $c.storage "memory" }}
{{- $problems = append $problems (printf "%s has sharedStore.enabled with storage memory: the standby takes over the store the standard keeps on the shared volume, and a memory store keeps nothing there; use storage disk-sync or disk-async." $where) }}
{{- end }}
{{- if $c.standby }}
{{- $problems = append $problems (printf "%s has sharedStore.enabled and a disaster-recovery standby set (persistence.clusters[%d].standby): the realm refuses a shared store with a standby set; keep one of the two." $where $i) }}
{{- end }}
{{- end }}
{{- if and (gt $pods 0) (ne $c.storage "memory") $root.Values.persistence.requireStorageClass (not $volume.storageClass) }}
{{- if $shared }}
{{- $problems = append $problems (printf "%s is a shared-store pair (storage %s) but neither persistence.clusters[%d].sharedStore.volume.storageClass nor .volume.storageClass is set while persistence.requireStorageClass is true: name a StorageClass that provisions ReadWriteMany volumes with POSIX locks across nodes (e.g. NFSv4)." $where $c.storage $i) }}
{{- else if include "strongroom.dr.isStandby" $root }}
{{- $problems = append $problems (printf "%s keeps its data on disk (storage %s) but neither persistence.clusters[%d].standby.volume.storageClass nor .volume.storageClass is set while persistence.requireStorageClass is true: name the StorageClass the standby site provisions its volumes from." $where $c.storage $i) }}
{{- else }}
{{- $problems = append $problems (printf "%s keeps its data on disk (storage %s) but persistence.clusters[%d].volume.storageClass is empty while persistence.requireStorageClass is true: name the StorageClass its volumes are provisioned from." $where $c.storage $i) }}
{{- end }}
{{- end }}
{{- with $c.standby }}
{{- $sn := int (.members | default 0) }}
{{- if or (lt $sn 1) (eq (mod $sn 2) 0) }}
{{- $problems = append $problems (printf "%s: its standby set has %d members (persistence.clusters[%d].standby.members); use an odd count (1, 3, 5 ...) so the standby set's majority is well defined." $where $sn $i) }}
{{- end }}
{{- if and (not $root.Values.realm.existingConfigMap) (not .primary) }}
{{- $problems = append $problems (printf "%s has a standby set but persistence.clusters[%d].standby.primary is empty: list the host:port addresses at which the standby site's DR service reads the primary's committed log (the primary site's members, or one address in front of them such as the client Service %s-%s of the primary release exposed to the standby site); the generated realm declares them for both sites." $where $i (fromJson (include "strongroom.dr.site" (dict "root" $root "set" "primary"))).fullname $c.name) }}
{{- end }}
{{- end }}
{{- $ttl := int (default 3 $c.leaseTtlSeconds) }}
{{- if le (int $root.Values.persistence.terminationGracePeriodSeconds) (add $ttl 2) }}
{{- $problems = append $problems (printf "persistence.terminationGracePeriodSeconds (%d) must exceed the lease TTL of %s (%d s) plus the member's 2 s drain, or a stopping leader is killed before it has handed over." (int $root.Values.persistence.terminationGracePeriodSeconds) $where $ttl) }}
{{- end }}
{{- $stsName := printf "%s-%s" $fullname $c.name }}
{{- if gt (len $stsName) 52 }}
{{- $problems = append $problems (printf "%s: the StatefulSet name %q is %d characters, over Kubernetes' 52; shorten the release name, fullnameOverride or the cluster name." $where $stsName (len $stsName)) }}
{{- end }}
{{- end }}
{{- if not .Values.realm.existingConfigMap }}
{{- $zoneNames := dict }}
{{- range $i, $z := .Values.realm.zones }}
{{- $_ := set $zoneNames $z.name true }}
{{- range $c := $z.clusters }}
{{- if not (hasKey $seen $c) }}
{{- $problems = append $problems (printf "realm.zones[%d] (%s) names cluster %q, which persistence.clusters does not define." $i $z.name $c) }}
{{- end }}
{{- end }}
{{- end }}
{{- $storeNames := dict }}
{{- range $i, $s := .Values.realm.stores }}
{{- $_ := set $storeNames $s.name true }}
{{- if $s.cluster }}
{{- if not (hasKey $seen $s.cluster) }}
{{- $problems = append $problems (printf "realm.stores[%d] (%s) names cluster %q, which persistence.clusters does not define." $i $s.name $s.cluster) }}
{{- end }}
{{- else if not (and $s.routed $s.zones) }}
{{- $problems = append $problems (printf "realm.stores[%d] (%s) names no cluster: give cluster (the persistence cluster that owns it), or routed: true and zones (the forwarding zones it exists in)." $i $s.name) }}
{{- end }}
{{- range $zn := $s.zones | default list }}
{{- if not (hasKey $zoneNames $zn) }}
{{- $problems = append $problems (printf "realm.stores[%d] (%s) names zone %q, which realm.zones does not define." $i $s.name $zn) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $i, $d := .Values.realm.destinations }}
{{- if not (hasKey $storeNames $d.store) }}
{{- $problems = append $problems (printf "realm.destinations[%d] (%s) names store %q, which realm.stores does not define." $i $d.name $d.store) }}
{{- end }}
{{- end }}
{{- /* The realm service refuses a routed cluster without a router address too, but only once it runs. */}}
{{- $routed := fromJsonArray (include "strongroom.router.clusters" .) }}
{{- range $i, $c := $clusters }}
{{- if and (has $c.name $routed) (not (dig "router" "address" "" $c)) }}
{{- $problems = append $problems (printf "persistence.clusters[%d] (%s) is in a forwarding zone of a routed store but has no router address: set persistence.clusters[%d].router.address to the host:port other clusters' routers reach it at (its router Service %s.%s.svc.%s:%d within this Kubernetes cluster, or the address of its LoadBalancer)." $i $c.name $i (include "strongroom.router.fullname" (dict "root" $root "cluster" $c.name)) $root.Release.Namespace $root.Values.clusterDomain (int $root.Values.router.port)) }}
{{- end }}
{{- end }}
{{- if .Values.router.clusters }}
{{- $problems = append $problems "router.clusters is set but the chart generates the realm: it derives the routed clusters from realm.zones and realm.stores itself; leave router.clusters empty (it is for realm.existingConfigMap only)." }}
{{- end }}
{{- else }}
{{- range $i, $name := .Values.router.clusters }}
{{- if not (hasKey $seen $name) }}
{{- $problems = append $problems (printf "router.clusters[%d] (%s) is not a cluster of persistence.clusters: list only the clusters this release runs that the realm routes." $i $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Disaster recovery: which sets this release runs, and the two releases of a pair named alike. */}}
{{- $anyStandby := include "strongroom.dr.anyStandby" . }}
{{- if and (include "strongroom.dr.isStandby" .) (not $anyStandby) }}
{{- $problems = append $problems "dr.role is standby but no cluster of persistence.clusters has a standby set: give the cluster(s) whose standby set this release runs persistence.clusters[].standby (members, and primary: where the primary site is read), the same as in the primary release's values." }}
{{- end }}
{{- if and $anyStandby (not .Values.realm.existingConfigMap) }}
{{- $own := .Values.dr.role }}
{{- $other := ternary "primary" "standby" (eq $own "standby") }}
{{- $sites := .Values.dr.sites | default dict }}
{{- $ownSite := get $sites $own | default dict }}
{{- $otherSite := get $sites $other | default dict }}
{{- if not $otherSite.release }}
{{- $problems = append $problems (printf "persistence.clusters has a standby set but dr.sites.%s.release is empty: name the Helm release that runs the %s sets at the other site (and its namespace and clusterDomain in dr.sites.%s when they differ from this release's), so the realm this release generates lists the members of both sites, as the other release's does." $other $other $other) }}
{{- else }}
{{- $otherFullname := (fromJson (include "strongroom.dr.site" (dict "root" . "set" $other))).fullname }}
{{- if eq $otherFullname $fullname }}
{{- $problems = append $problems (printf "dr.sites.%s.release (%s) names its members %s-<cluster>-<n>, as this release names its own: the standby members must be other members than the primary's; install the two releases of a disaster-recovery pair under different names." $other $otherSite.release $fullname) }}
{{- end }}
{{- end }}
{{- if and $ownSite.release (ne $ownSite.release .Release.Name) }}
{{- $problems = append $problems (printf "dr.sites.%s.release is %q but this release, which runs the %s sets (dr.role %s), is %q: install it under the name the values give both sites, or correct dr.sites.%s.release." $own $ownSite.release $own $own .Release.Name $own) }}
{{- end }}
{{- if and $ownSite.namespace (ne $ownSite.namespace .Release.Namespace) }}
{{- $problems = append $problems (printf "dr.sites.%s.namespace is %q but this release, which runs the %s sets, is installed in namespace %q: install it there, or correct dr.sites.%s.namespace." $own $ownSite.namespace $own .Release.Namespace $own) }}
{{- end }}
{{- if and $ownSite.clusterDomain (ne $ownSite.clusterDomain .Values.clusterDomain) }}
{{- $problems = append $problems (printf "dr.sites.%s.clusterDomain is %q but this release, which runs the %s sets, has clusterDomain %q: set the two alike." $own $ownSite.clusterDomain $own .Values.clusterDomain) }}
{{- end }}
{{- if .Values.fullnameOverride }}
{{- $problems = append $problems (printf "fullnameOverride is set while a cluster has a standby set: the other release of the pair names this release's members from its release name (dr.sites.%s.release); leave fullnameOverride empty." $own) }}
{{- end }}
{{- end }}
{{- if .Values.etcd.enabled }}
{{- $r := int .Values.etcd.replicas }}
{{- if or (lt $r 1) (eq (mod $r 2) 0) }}
{{- $problems = append $problems (printf "etcd.replicas is %d; use an odd count (1, 3, 5) so etcd's majority is well defined." $r) }}
{{- end }}
{{- if gt (len (include "strongroom.etcd.fullname" .)) 52 }}
{{- $problems = append $problems (printf "the etcd StatefulSet name %q is over Kubernetes' 52 characters; shorten the release name or fullnameOverride." (include "strongroom.etcd.fullname" .)) }}
{{- end }}
{{- else if not .Values.etcd.externalEndpoints }}
{{- $problems = append $problems "etcd.enabled is false but etcd.externalEndpoints is empty: list the host:port of your etcd, or enable the bundled etcd." }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) .Values.rbac.create (not .Values.serviceAccount.name) }}
{{- $problems = append $problems "rbac.create is true but serviceAccount.create is false and serviceAccount.name is empty: name the existing ServiceAccount the Role is bound to." }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $issuer := .Values.tls.certManager.issuerRef }}
{{- if and (eq .Values.tls.source "existingSecrets") $issuer.name }}
{{- $problems = append $problems (printf "tls.source is existingSecrets but tls.certManager.issuerRef.name names an issuer (%s): either set tls.source to certManager to have the chart request every certificate from it, or clear the name and create the Secrets yourself (README \"Kubernetes\", TLS, lists them)." $issuer.name) }}
{{- end }}
{{- if and (eq .Values.tls.source "certManager") (not $issuer.name) (ne $issuer.kind "Issuer") }}
{{- $problems = append $problems (printf "tls.certManager.issuerRef.kind is %s but its name is empty: name the %s that signs the certificates, or leave kind Issuer (and the name empty) for the chart's own self-signed authority." $issuer.kind $issuer.kind) }}
{{- end }}
{{- if and (include "strongroom.tls.ownAuthority" .) (include "strongroom.dr.anyStandby" .) }}
{{- $problems = append $problems "a cluster has a standby set but tls.certManager.issuerRef.name is empty: the chart's own self-signed authority would differ at each site of the disaster-recovery pair, and neither site would trust the other's certificates; name in tls.certManager.issuerRef an issuer both releases share (e.g. a CA ClusterIssuer holding the same CA at both sites), or set tls.source to existingSecrets and issue the Secrets from one authority yourself." }}
{{- end }}
{{- end }}
{{- if not .Values.realm.existingConfigMap }}
{{- $roles := dict "chart-realm-apply" true }}
{{- range $r := .Values.realm.auth.roles | default list }}
{{- if hasKey $roles $r.name }}
{{- $problems = append $problems (printf "realm.auth.roles names role %s twice (or the chart's own chart-realm-apply): give each role one entry." $r.name) }}
{{- end }}
{{- $_ := set $roles $r.name true }}
{{- end }}
{{- range $u := .Values.realm.auth.users | default list }}
{{- if eq $u.name (include "strongroom.tls.realmApplyUser" $) }}
{{- $problems = append $problems (printf "realm.auth.users names user %s, the chart's own realm-apply Job user: choose another name." $u.name) }}
{{- end }}
{{- range $name := $u.roles | default list }}
{{- if not (hasKey $roles $name) }}
{{- $problems = append $problems (printf "realm.auth.users: user %s has role %s, which realm.auth.roles does not define." $u.name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.enabled (not .Values.metrics.events.claimName) }}
{{- $problems = append $problems "metrics.enabled is true but metrics.events.claimName is empty: name the PersistentVolumeClaim holding the store event log (the Spark driver and executors mount it read-only)." }}
{{- end }}
{{- if $problems }}
{{- fail (printf "\n\nSTRONGROOM VALUES:\n  %s" (join "\n  " $problems)) }}
{{- end }}
{{- end }}

{{/* --- the Spark jobs (templates/metrics.yaml) ---------------------------------------------- */}}

{{/* The metrics ServiceAccount, Role and RoleBinding. */}}
{{- define "strongroom.metrics.fullname" -}}
{{- printf "%s-spark" (include "strongroom.fullname" .) }}
{{- end }}

{{- define "strongroom.metrics.serviceAccountName" -}}
{{- default (include "strongroom.metrics.fullname" .) .Values.metrics.serviceAccountName }}
{{- end }}

{{/* One job's CronJob or ScheduledSparkApplication. Takes (dict "root" $ "job" "store_metrics"). */}}
{{- define "strongroom.metrics.jobName" -}}
{{- printf "%s-metrics-%s" (include "strongroom.fullname" .root) (.job | replace "_" "-") }}
{{- end }}

{{/* The job's file in the image (the Dockerfile links the installed spark_jobs/ there). */}}
{{- define "strongroom.metrics.application" -}}
{{- printf "local:///opt/strongroom/spark_jobs/%s.py" . }}
{{- end }}

{{/* The job's own arguments. Takes (dict "root" $ "job" "backlog"). */}}
{{- define "strongroom.metrics.arguments" -}}
- --events
- {{ .root.Values.metrics.events.mountPath }}
- --out
- {{ .root.Values.metrics.output.mountPath }}
- --json
{{- end }}

{{/*
Spark settings the CronJob passes as --conf and the ScheduledSparkApplication as sparkConf:
the volumes (in Spark's own volume settings, so the operator's mutating webhook is not needed),
the image's Python, no PersistentVolumeClaims owned by the driver (so its Role needs none).
*/}}
{{- define "strongroom.metrics.sparkConf" -}}
{{- $m := .Values.metrics }}
{{- $conf := dict
  "spark.pyspark.python" "/opt/strongroom/bin/python"
  "spark.pyspark.driver.python" "/opt/strongroom/bin/python"
  "spark.sql.session.timeZone" "UTC"
  "spark.kubernetes.driver.ownPersistentVolumeClaim" "false"
  "spark.kubernetes.driver.reusePersistentVolumeClaim" "false"
  "spark.kubernetes.driver.label.app.kubernetes.io/instance" .Release.Name
  "spark.kubernetes.driver.label.app.kubernetes.io/component" "metrics"
  "spark.kubernetes.executor.label.app.kubernetes.io/instance" .Release.Name
  "spark.kubernetes.executor.label.app.kubernetes.io/component" "metrics"
}}
{{- range $who := list "driver" "executor" }}
{{- $v := printf "spark.kubernetes.%s.volumes.persistentVolumeClaim.events" $who }}
{{- $_ := set $conf (printf "%s.options.claimName" $v) $m.events.claimName }}
{{- $_ := set $conf (printf "%s.mount.path" $v) $m.events.mountPath }}
{{- $_ := set $conf (printf "%s.mount.readOnly" $v) "true" }}
{{- end }}
{{- if $m.output.claimName }}
{{- $_ := set $conf "spark.kubernetes.driver.volumes.persistentVolumeClaim.output.options.claimName" $m.output.claimName }}
{{- $_ := set $conf "spark.kubernetes.driver.volumes.persistentVolumeClaim.output.mount.path" $m.output.mountPath }}
{{- else }}
{{- $_ := set $conf "spark.kubernetes.driver.volumes.emptyDir.output.mount.path" $m.output.mountPath }}
{{- end }}
{{- range $k, $v := $m.spark.conf }}
{{- $_ := set $conf $k (toString $v) }}
{{- end }}
{{- toYaml $conf }}
{{- end }}

{{/*
What only spark-submit is told (the ScheduledSparkApplication says the same in its spec fields):
where, which image, which identity, how big; and the submitter's in-cluster credentials.
*/}}
{{- define "strongroom.metrics.submitConf" -}}
{{- $m := .Values.metrics }}
{{- toYaml (dict
  "spark.kubernetes.namespace" .Release.Namespace
  "spark.kubernetes.container.image" (include "strongroom.image" .)
  "spark.kubernetes.container.image.pullPolicy" .Values.image.pullPolicy
  "spark.kubernetes.authenticate.driver.serviceAccountName" (include "strongroom.metrics.serviceAccountName" .)
  "spark.kubernetes.authenticate.submission.caCertFile" "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
  "spark.kubernetes.authenticate.submission.oauthTokenFile" "/var/run/secrets/kubernetes.io/serviceaccount/token"
  "spark.executor.instances" (toString $m.spark.executorInstances)
  "spark.executor.cores" (toString $m.spark.executorCores)
  "spark.executor.memory" $m.spark.executorMemory
  "spark.driver.cores" (toString $m.spark.driverCores)
  "spark.driver.memory" $m.spark.driverMemory
) }}
{{- end }}

{{/*
checkov's skip annotations of a workload (checkov.io/skipN: CHECK=why): each check the chart
cannot pass by its nature, with the reason (tests/deploy/test_chart_checkov.py runs checkov over
every ci/values scenario and fails on any other finding). Takes (dict "root" $ "image" "repo:tag"
"token" "why the pod mounts its service-account token, or empty" "etcd" true|false).
*/}}
{{- define "strongroom.checkovSkipEntries" -}}
{{- $skips := list }}
{{- if not (contains "@sha256:" .image) }}
{{- $skips = append $skips "CKV_K8S_43=the image is named by tag: its digest is known only once it is built and pushed; give image.tag as tag@sha256:digest to pin it" }}
{{- end }}
{{- if .token }}
{{- $skips = append $skips (printf "CKV_K8S_38=%s" .token) }}
{{- end }}
{{- if and .etcd (not (include "strongroom.tls.enabled" .root)) }}
{{- /* With TLS on, etcd's command carries the flags these checks look for, and they pass. */}}
{{- $skips = append $skips "CKV_K8S_116=tls.enabled is false: the bundled etcd serves its client port in plaintext, with no certificate; the NetworkPolicy admits only the release's pods to it" }}
{{- $skips = append $skips "CKV_K8S_117=tls.enabled is false: the bundled etcd asks its clients for no certificate; the NetworkPolicy admits only the release's pods to its client port" }}
{{- $skips = append $skips "CKV_K8S_119=tls.enabled is false: the bundled etcd's peers talk in plaintext, with no certificates; the NetworkPolicy admits only etcd's own pods to its peer port" }}
{{- end }}
{{- range $i, $s := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $s | quote }}
{{- end }}
{{- end }}

{{/* The same as a workload's `annotations:` (nothing when there is no skip). */}}
{{- define "strongroom.checkovSkips" -}}
{{- with (include "strongroom.checkovSkipEntries" .) }}
annotations:
  {{- . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A NetworkPolicy rule's `from`: the given peers, or nothing (any source) when there are none. */}}
{{- define "strongroom.networkPolicy.from" -}}
{{- if . }}
from:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
