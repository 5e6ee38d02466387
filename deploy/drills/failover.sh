#!/usr/bin/env bash
# Failover drill with kubectl alone: delete the leader's pod under confirmed publishing and check
# that nothing confirmed was lost. The same steps as `strongroom drill failover --platform
# kubernetes` (services/strongroom/drill_k8s.py), with the same labels (the chart's _helpers.tpl):
#
#   1. find the cluster's members and the one labelled strongroom.io/role=leader;
#   2. run the drill agent in the release's realm pod (same image) with `kubectl exec -i`: it
#      publishes with confirmation to a fresh queue and says {"event": "half"} at half confirmed;
#   3. delete the leader's pod, tell the agent "killed", and wait for a new pod labelled leader;
#   4. the agent publishes the rest through the new leader, consumes the queue and prints its
#      report; this script adds the leader change and exits 1 on any loss, duplicate or reorder.
#
# Usage: failover.sh --namespace NS --release NAME [--cluster C] [--messages N] [--force]
# Env KUBECTL names the kubectl to run (default: kubectl).
set -euo pipefail

NAMESPACE=default
RELEASE=""
CLUSTER=default
MESSAGES=1000
FORCE=0
LEADER_TIMEOUT=90
KUBECTL=${KUBECTL:-kubectl}

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "failover.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    -n|--namespace) NAMESPACE=$2; shift 2 ;;
    -r|--release) RELEASE=$2; shift 2 ;;
    -c|--cluster) CLUSTER=$2; shift 2 ;;
    -m|--messages) MESSAGES=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage ;;
    *) echo "failover.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$RELEASE" ] || { echo "failover.sh: --release is required" >&2; usage; }

k() { "$KUBECTL" --namespace "$NAMESPACE" "$@"; }
now() { date +%s.%N; }

# The chart's labels; app.kubernetes.io/name is left out so a nameOverride does not matter.
MEMBERS="app.kubernetes.io/instance=${RELEASE},app.kubernetes.io/component=persistence,strongroom.io/cluster=${CLUSTER}"
LEADER="${MEMBERS},strongroom.io/role=leader"
CLIENTS="app.kubernetes.io/instance=${RELEASE},app.kubernetes.io/component=realm"

read -r -a pods <<<"$(k get pods --selector "$MEMBERS" --output 'jsonpath={.items[*].metadata.name}')"
[ "${#pods[@]}" -gt 0 ] || die "no pod in namespace $NAMESPACE matches $MEMBERS"
read -r -a leaders <<<"$(k get pods --selector "$LEADER" --output 'jsonpath={.items[*].metadata.name}')"
[ "${#leaders[@]}" -eq 1 ] || die "expected one pod labelled strongroom.io/role=leader, found ${#leaders[@]} ($LEADER)"
old_leader=${leaders[0]}
old_uid=$(k get pod "$old_leader" --output 'jsonpath={.metadata.uid}')
client=$(k get pods --selector "$CLIENTS" --field-selector=status.phase=Running --output 'jsonpath={.items[0].metadata.name}')
[ -n "$client" ] || die "no running realm pod ($CLIENTS) to run the drill client in"

# Members by their StatefulSet DNS names: <pod>.<headless service>.<namespace>.svc:<grpc port>.
subdomain=$(k get pod "$old_leader" --output 'jsonpath={.spec.subdomain}')
port=$(k get pod "$old_leader" --output 'jsonpath={.spec.containers[0].ports[0].containerPort}')
endpoints=""
for p in "${pods[@]}"; do endpoints="${endpoints:+$endpoints,}$p.$subdomain.$NAMESPACE.svc:$port"; done
destination="drill-$(date +%s).queue"

echo "drill: leader is $old_leader; publishing $MESSAGES messages to $destination from pod $client" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

coproc AGENT { k exec -i "$client" --container realm -- python -m strongroom.drill_k8s agent \
  --endpoints "$endpoints" --destination "$destination" --messages "$MESSAGES"; }
# Our own copies of the coprocess's pipes: bash closes AGENT's descriptors as soon as the
# agent exits, which can be before this loop has read its last lines (its report).
exec {agent_out}<&"${AGENT[0]}" {agent_in}>&"${AGENT[1]}"

report=""
killed_at=""
watcher=""
while IFS= read -r line <&"$agent_out"; do
  case "$line" in
    *'"event": "half"'*)
      echo "drill: half confirmed: deleting leader pod $old_leader" >&2
      if [ "$FORCE" = 1 ]; then
        k delete pod "$old_leader" --wait=false --grace-period=0 --force >/dev/null
      else
        k delete pod "$old_leader" --wait=false >/dev/null
      fi
      killed_at=$(now)
      echo killed >&"$agent_in"
      # Watch for a pod, other than the deleted one, that labelled itself leader.
      (
        deadline=$(( $(date +%s) + LEADER_TIMEOUT ))
        while [ "$(date +%s)" -lt "$deadline" ]; do
          read -r -a uids <<<"$(k get pods --selector "$LEADER" --output 'jsonpath={.items[*].metadata.uid}')"
          read -r -a names <<<"$(k get pods --selector "$LEADER" --output 'jsonpath={.items[*].metadata.name}')"
          for i in "${!uids[@]}"; do
            if [ "${uids[$i]}" != "$old_uid" ] && [ -n "${names[$i]:-}" ]; then
              echo "$(now) ${names[$i]}" >"$work/new_leader"
              exit 0
            fi
          done
          sleep 0.5
        done
      ) &
      watcher=$!
      ;;
    *'"event": "report"'*)
      report=${line/\"event\": \"report\", /}
      break
      ;;
  esac
done
[ -n "$report" ] || die "the drill agent in pod $client ended without a report"
[ -n "$watcher" ] && wait "$watcher" || true

new_leader=null
leaderless=null
if [ -s "$work/new_leader" ]; then
  read -r found_at name <"$work/new_leader"
  new_leader="\"$name\""
  leaderless=$(awk -v a="$killed_at" -v b="$found_at" 'BEGIN { printf "%.3f", b - a }')
fi
ok=false
case "$report" in
  *'"data_ok": true'*) [ "$new_leader" != null ] && ok=true ;;
esac
# The agent's report plus what only the orchestrator saw.
echo "${report%\}}, \"platform\": \"kubernetes\", \"namespace\": \"$NAMESPACE\", \"release\": \"$RELEASE\", \"cluster\": \"$CLUSTER\", \"destination\": \"$destination\", \"old_leader\": \"$old_leader\", \"new_leader\": $new_leader, \"leaderless_seconds\": $leaderless, \"ok\": $ok}"
[ "$ok" = true ]
