package sandbox

import (
	seccomp "github.com/elastic/go-seccomp-bpf"
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
