package kube

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sless.kube5s.ru/sless/modules/runtime"
)

func TestRolloutOf(t *testing.T) {
	stuck := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
		Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "fn-hello-5d7c9b" has timed out progressing.`}
	tests := []struct {
		name       string
		generation int64
		replicas   int32
		status     appsv1.DeploymentStatus
		want       runtime.Rollout
	}{{
		name: "spec not seen by the controller yet", generation: 2, replicas: 1,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
		want:   runtime.Rollout{Waiting: "the cluster has not started the rollout yet"},
	}, {
		name: "new pods not created yet", generation: 1, replicas: 2,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1},
		want:   runtime.Rollout{Waiting: "0 of 2 instances updated"},
	}, {
		name: "one of two new pods created", generation: 3, replicas: 2,
		status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 2},
		want:   runtime.Rollout{Waiting: "1 of 2 instances updated"},
	}, {
		name: "old pods still stopping", generation: 3, replicas: 2,
		status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 3},
		want:   runtime.Rollout{Waiting: "1 instance of the previous version stopping"},
	}, {
		name: "new pods not ready", generation: 1, replicas: 2,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1},
		want:   runtime.Rollout{Waiting: "1 of 2 instances ready"},
	}, {
		name: "all new pods available", generation: 4, replicas: 2,
		status: appsv1.DeploymentStatus{ObservedGeneration: 4, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2},
		want:   runtime.Rollout{Ready: true},
	}, {
		name: "scaled to zero, pods still stopping", generation: 2, replicas: 0,
		status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2},
		want:   runtime.Rollout{Waiting: "2 instances stopping"},
	}, {
		name: "scaled to zero, no pods left", generation: 2, replicas: 0,
		status: appsv1.DeploymentStatus{ObservedGeneration: 2},
		want:   runtime.Rollout{Ready: true},
	}, {
		name: "pods refused, the cluster's reason", generation: 1, replicas: 1,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1, Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
			Message: `pods "fn-hello-5d7c9b-x2x" is forbidden: exceeded quota: compute, requested: limits.memory=256Mi`,
		}}},
		want: runtime.Rollout{Waiting: `instances cannot be created: pods "fn-hello-5d7c9b-x2x" is forbidden: exceeded quota: compute, requested: limits.memory=256Mi`},
	}, {
		name: "past the progress deadline", generation: 1, replicas: 1,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{stuck}},
		want: runtime.Rollout{Waiting: "0 of 1 instances ready; the rollout has stopped making progress"},
	}, {
		name: "a condition that is not a failure changes nothing", generation: 1, replicas: 1,
		status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionFalse},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			}},
		want: runtime.Rollout{Ready: true},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Generation: tc.generation},
				Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(tc.replicas)},
				Status:     tc.status,
			}
			if got := rolloutOf(d); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
