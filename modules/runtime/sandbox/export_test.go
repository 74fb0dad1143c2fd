package sandbox

// SetUID makes in run as uid: a test plays a server that asks a zygote for
// what it must refuse.
func SetUID(in *Instance, uid int) { in.uid = uid }
