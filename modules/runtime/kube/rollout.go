package kube

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"sless.kube5s.ru/sless/modules/runtime"
)

// reasonProgressDeadlineExceeded is the Progressing condition's reason once
// a rollout made no progress for the Deployment's progressDeadlineSeconds.
const reasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"

// rolloutOf reads how far the rollout of d's spec got from its status, as
// `kubectl rollout status` does: it is Ready once the Deployment controller
// saw the spec, every replica runs it and is available, and no pod of an
// older spec is left. A Deployment scaled to zero is Ready once its pods are
// gone.
func rolloutOf(d *appsv1.Deployment) runtime.Rollout {
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return waiting("the cluster has not started the rollout yet")
	}
	var stuck string
	for _, c := range st.Conditions {
		switch {
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			// Quotas, limits and Pod Security say why in their own words.
			return waiting("instances cannot be created: " + c.Message)
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse &&
			c.Reason == reasonProgressDeadlineExceeded:
			stuck = "; the rollout has stopped making progress"
		}
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	switch {
	case st.UpdatedReplicas < want:
		return waiting(fmt.Sprintf("%d of %d instances updated%s", st.UpdatedReplicas, want, stuck))
	case st.Replicas > st.UpdatedReplicas:
		return waiting(fmt.Sprintf("%s of the previous version stopping%s", instances(st.Replicas-st.UpdatedReplicas), stuck))
	case st.Replicas > want:
		return waiting(fmt.Sprintf("%s stopping%s", instances(st.Replicas-want), stuck))
	case st.AvailableReplicas < st.UpdatedReplicas:
		return waiting(fmt.Sprintf("%d of %d instances ready%s", st.AvailableReplicas, st.UpdatedReplicas, stuck))
	}
	return runtime.Rollout{Ready: true}
}

func waiting(msg string) runtime.Rollout { return runtime.Rollout{Waiting: msg} }

// instances is "1 instance" or "n instances".
func instances(n int32) string {
	if n == 1 {
		return "1 instance"
	}
	return fmt.Sprintf("%d instances", n)
}
