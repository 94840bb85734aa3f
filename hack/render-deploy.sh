#!/usr/bin/env bash
# Renders deploy/specon.yaml (plain manifests for users without Helm) from charts/specon with the
# default values but tls.mode=existing (a CA generated here would be in every user's copy), for
# namespace specon-system. Run after any chart change and commit the output; tests/deploy checks
# that the committed file is what the chart renders.
# Helm: $HELM, else `helm` on PATH, else the one hack/testplane/build.sh built.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${HELM:-$(command -v helm || echo "$(bash hack/testplane/build.sh --print)/helm")}
KUBE_VERSION=${KUBE_VERSION:-v1.33.13}
out=deploy/specon.yaml
{
  cat <<'HEAD'
# SpeCon, plain manifests rendered from charts/specon with its default values by
# hack/render-deploy.sh (do not edit by hand). Namespace specon-system; images specon/manager and
# specon/agent (build them from Dockerfile.manager and Dockerfile.agent and push them to your
# registry). Before applying, make the TLS objects: Secrets specon-manager-tls and
# specon-scheduler-tls (tls.crt, tls.key, ca.crt) and ConfigMap specon-ca (ca.crt):
# docs/user-guide.md, "Without Helm". To remove it, delete the agents first and wait for them
# (kubectl -n specon-system delete daemonset specon-agent --wait): each puts back the CPU limits
# it changed while its RBAC still exists (what helm's uninstall hook does).
---
apiVersion: v1
kind: Namespace
metadata:
  name: specon-system
HEAD
  "$HELM" template specon charts/specon --namespace specon-system --kube-version "$KUBE_VERSION" \
    --set tls.mode=existing --no-hooks
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
