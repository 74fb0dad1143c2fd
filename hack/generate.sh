#!/usr/bin/env bash
# hack/generate.sh: regenerate what is generated from the API types: from
# api/, their deepcopy methods (api/*/zz_generated.deepcopy.go), the CRDs
# (deploy/base/crds) and the server's ClusterRole (deploy/base/rbac/role.yaml,
# from the +kubebuilder:rbac markers of api/v1alpha1/rbac.go); from the REST
# API's routes and types, its OpenAPI document (docs/openapi.json). Run it
# after changing a type, a kubebuilder marker or a route and commit the
# result; TestGeneratedFilesAreCurrent and TestDocumentIsCurrent fail until
# then. `hack/generate.sh api` regenerates what comes from api/ only (what
# TestGeneratedFilesAreCurrent runs on a copy of api/ and hack/), `openapi`
# the OpenAPI document only.
#
# controller-gen comes from the Go module proxy at a pinned version, through
# `go run`, so nothing needs installing.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLLER_TOOLS_VERSION=v0.19.0

what=${1:-all}
case $what in all | api | openapi) ;; *) echo "usage: hack/generate.sh [all|api|openapi]" >&2; exit 2 ;; esac

if [[ $what == all || $what == api ]]; then
	rm -f deploy/base/crds/*.yaml deploy/base/rbac/role.yaml
	go run "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" \
		object paths=./api/... \
		crd:crdVersions=v1 output:crd:artifacts:config=deploy/base/crds \
		rbac:roleName=sless,headerFile=hack/rbac-header.txt output:rbac:artifacts:config=deploy/base/rbac
fi

# The OpenAPI document of the REST API, from the table of operations in
# internal/openapi and the Go types and doc comments of the requests and
# responses; the server embeds and serves it at /v1/openapi.json.
if [[ $what == all || $what == openapi ]]; then
	go run ./internal/openapi/gen
fi
