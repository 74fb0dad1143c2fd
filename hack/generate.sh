#!/usr/bin/env bash
# hack/generate.sh: regenerate what is generated from the API types in
# api/: their deepcopy methods (api/*/zz_generated.deepcopy.go), the CRDs
# (deploy/base/crds) and the server's ClusterRole (deploy/base/rbac/role.yaml,
# from the +kubebuilder:rbac markers of api/v1alpha1/rbac.go). Run it after
# changing a type or a kubebuilder marker and commit the result;
# TestGeneratedFilesAreCurrent fails until then.
#
# controller-gen comes from the Go module proxy at a pinned version, through
# `go run`, so nothing needs installing.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLLER_TOOLS_VERSION=v0.19.0

rm -f deploy/base/crds/*.yaml deploy/base/rbac/role.yaml
go run "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" \
	object paths=./api/... \
	crd:crdVersions=v1 output:crd:artifacts:config=deploy/base/crds \
	rbac:roleName=sless,headerFile=hack/rbac-header.txt output:rbac:artifacts:config=deploy/base/rbac
