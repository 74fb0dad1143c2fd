package sandbox

import (
	"encoding/binary"
	"fmt"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// refused are the system calls a function or a dependency install never
// needs and that reach into the kernel or other processes: tracing and
// reading other processes, mounts and namespaces, kernel modules and
// kexec, keyrings, BPF and perf, clock and host settings, swap, reboot,
// file handles (which bypass path checks), userfaultfd and io_uring
// (frequent sources of kernel exploits; libuv falls back without it).
var refused = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr", "unshare", "setns",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "iopl", "ioperm",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
	"vhangup", "fanotify_init",
}

// namespaceFlags are the clone(2) flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// policy is the seccomp policy of every sandbox: everything else allowed,
// the refused calls fail with EPERM, clone with a namespace flag too, and
// clone3 (whose flags a filter cannot read) with ENOSYS, which makes the C
// library fall back to clone.
func policy() seccomp.Policy {
	// BitsSet matches when any of the bits is set.
	cloneNS := []seccomp.NameWithConditions{{Name: "clone",
		Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}}}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: refused, NamesWithCondtions: cloneNS},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
}

// zygoteAllowed are the refused calls a zygote makes to confine the
// instances it forks: each instance unshares its mount, pid, IPC and UTS
// namespaces and mounts its own /tmp, /proc, socket directory and code.
var zygoteAllowed = []string{"mount", "umount2", "unshare"}

// instanceNamespaceFlags are the namespaces a zygote's instance enters.
const instanceNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// zygotePolicy is the seccomp policy of a zygote: the sandbox's policy but
// for mount, umount2 and unshare of the namespaces its instances enter (a
// new user, network, cgroup or time namespace stays refused). Each instance
// adds policy's filter on top before it runs the wrapper.
func zygotePolicy() seccomp.Policy {
	p := policy()
	p.Syscalls[0].Names = slices.DeleteFunc(slices.Clone(refused), func(name string) bool {
		return slices.Contains(zygoteAllowed, name)
	})
	p.Syscalls[0].NamesWithCondtions = append(p.Syscalls[0].NamesWithCondtions, seccomp.NameWithConditions{Name: "unshare",
		Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags &^ instanceNamespaceFlags}}})
	return p
}

// filterProgram assembles p into the struct sock_filter array that
// prctl(PR_SET_SECCOMP) loads, for a program that loads it itself.
func filterProgram(p seccomp.Policy) ([]byte, error) {
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assembling the seccomp policy: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assembling the seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
