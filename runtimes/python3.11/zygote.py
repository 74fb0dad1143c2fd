"""sless zygote: a fork server of Python instances, for the embedded mode's sandbox.

The platform starts it as pid 1 of a sandbox of its own (modules/runtime/sandbox: its own user,
mount, pid, IPC and UTS namespaces, a read-only root with the interpreter and the wrapper) as

    python3.11 zygote.py --wrapper /sless/server.py --control-fd 3 --filter BASE64

and talks to it over the control socket, fd 3, the only way in (protocol:
modules/runtime/PROTOCOL.md, "Forked instances"). Three roles, one file:

- the reaper (this process, pid 1): imports the wrapper (so that it shares that memory too),
  forks the zygote once, then drops every capability and loads the instances' seccomp filter.
  It passes the platform's fork requests on to the zygote, adopts the instances (their parent
  exits at once, so they become its children), reaps them, and reports each one's exit status.
  Instances outlive a dead zygote this way; when the reaper dies, the kernel ends the whole pid
  namespace, instances included.
- the zygote: has the wrapper and everything it imports, kept out of the garbage collector's
  view (so that children keep those pages shared), and forks instances. It keeps the
  capabilities its children need to confine themselves (CAP_SYS_ADMIN, CAP_SETUID,
  CAP_SETGID, CAP_SETPCAP of its own user namespace, none outside it) and runs no code but this
  file's and the wrapper's module-level definitions.
- an instance: joins its cgroups, enters new mount, pid, IPC and UTS namespaces, mounts its own
  /tmp, /dev/shm, /proc, socket directory and code mount point, switches to its own uid, drops
  every capability, sets no_new_privs, loads the seccomp filter, and only then runs the
  wrapper, exactly as if it had been started as `server.py --listen ... --ready-fd 3`.
  No user code runs before that: the handler loads at specialize, over the instance's socket.

Standard library only (ctypes for the system calls the os module lacks).
"""

import argparse
import asyncio
import base64
import ctypes
import gc
import importlib.util
import json
import os
import select
import signal
import socket
import sys

# prctl(2) options and seccomp(2) constants.
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# unshare(2) and mount(2) flags.
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_MOVE = 0x2000
MNT_DETACH = 0x2

# Where the sandbox's init left what instances need in the zygote's root.
CODES_DIR = "/.sless-codes"  # the server's shared directory of code mount points
NEW_PROC = "/.sless-proc"  # an empty directory, where an instance mounts its /proc first
CODE_DIR = "/code"

MAX_MESSAGE = 1 << 16
MAX_FDS = 16

# The C library's functions, looked up here once: a lookup in each instance would write to
# memory the instances otherwise share.
_libc = ctypes.CDLL(None, use_errno=True)
_prctl_fn, _mount_fn, _umount2, _unshare, _capset = (
    _libc.prctl, _libc.mount, _libc.umount2, _libc.unshare, _libc.capset)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option, arg=0):
    _check(_prctl_fn(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _mount(source, target, fstype, flags, data=None):
    _check(_mount_fn(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mounting {target}")


def _umount(target):
    _check(_umount2(target.encode(), MNT_DETACH), f"unmounting {target}")


def _drop_capabilities(keep_uid):
    """Empties the bounding and ambient sets (needs CAP_SETPCAP), and the others too when the
    process keeps its uid (a switch from uid 0 to another clears them)."""
    cap = 0
    while _prctl_fn(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) == 0:
        cap += 1
    if cap == 0 or ctypes.get_errno() != 22:  # EINVAL past the last capability
        raise OSError(ctypes.get_errno(), "dropping the bounding set")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    if keep_uid:
        header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
        _check(_capset(ctypes.byref(header), data), "capset")


def _load_filter(program):
    """Sets no_new_privs and loads the seccomp filter program (struct sock_filter array)."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_prctl_fn(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
           "loading the seccomp filter")


def _drain(fd):
    try:
        while os.read(fd, 64):
            pass
    except BlockingIOError:
        pass


def _send(sock, message, fds=()):
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def _recv(sock):
    """Returns (message, fds), or (None, []) at end of file."""
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


# ---------------------------------------------------------------------------------------------
# Reaper


class _Reaper:
    """pid 1: relays fork requests to the zygote, adopts and reaps the instances."""

    def __init__(self, control, zygote_sock, zygote_pid):
        self.control = control
        self.zygote = zygote_sock
        self.zygote_pid = zygote_pid
        self.instances = {}  # pid -> instance id, from its report until its exit
        self.unclaimed = {}  # pid -> wait status of children reaped before they were reported
        self.poll = select.poll()

    def run(self):
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        for fd in (self.control.fileno(), self.zygote.fileno(), wake_r):
            self.poll.register(fd, select.POLLIN)
        while True:
            for fd, _ in self.poll.poll():
                if fd == wake_r:
                    _drain(wake_r)
                    self.reap()
                elif fd == self.control.fileno():
                    self.from_platform()
                elif self.zygote is not None and fd == self.zygote.fileno():
                    self.from_zygote()

    def from_platform(self):
        message, fds = _recv(self.control)
        if message is None:
            # The platform is done with this sandbox: everything in it ends with pid 1.
            os._exit(0)
        if self.zygote is not None:
            # A fork, or "retire": the zygote exits once it has answered what came before.
            _send(self.zygote, message, fds)
        elif message.get("op") == "fork":
            _send(self.control, {"op": "failed", "id": message.get("id"),
                                 "error": "the zygote is not running"})
        for fd in fds:
            os.close(fd)

    def from_zygote(self):
        message, _ = _recv(self.zygote)
        if message is None:
            self.zygote_gone()
            return
        if message.get("op") == "forked":
            pid = message.pop("pid")
            status = self.unclaimed.get(pid)
            if status is not None:
                message = {"op": "failed", "id": message["id"], "status": status,
                           "error": "the instance exited at once"}
                _send(self.control, message)
            else:
                # Not reaped yet, so the pid is still the instance's: it is this process's
                # child, and only this process reaps.
                pidfd = os.pidfd_open(pid)
                self.instances[pid] = message["id"]
                _send(self.control, message, [pidfd])
                os.close(pidfd)
            # What else was reaped unreported was never an instance (a fork's intermediate
            # process orphaned by a dead zygote).
            self.unclaimed.clear()
            return
        _send(self.control, message)

    def zygote_gone(self):
        if self.zygote is not None:
            self.poll.unregister(self.zygote.fileno())
            self.zygote.close()
            self.zygote = None

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.zygote_pid:
                self.zygote_pid = None
                self.zygote_gone()
                _send(self.control, {"op": "zygote-exited", "status": status})
            elif pid in self.instances:
                _send(self.control, {"op": "exited", "id": self.instances.pop(pid),
                                     "status": status})
            else:
                self.unclaimed[pid] = status


# ---------------------------------------------------------------------------------------------
# Zygote


def _mapped_uids():
    """The uids of this user namespace but its own root, as ranges."""
    with open("/proc/self/uid_map") as f:
        ranges = [range(int(inside), int(inside) + int(count))
                  for inside, _, count in (line.split() for line in f)]
    return [r for r in ranges if 0 not in r]


def _import_wrapper(path):
    """Imports the wrapper as a module of its own name, and what its start sets up for good."""
    spec = importlib.util.spec_from_file_location("__sless_wrapper__", path)
    wrapper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrapper)
    # Every instance's start creates an event loop: the first creation's setup for good (the
    # event loop policy, and for asyncio's own loop the selector's state) is done here, once,
    # and shared. (uvloop's loop has none worth sharing: its first creation took 0.28 ms, the
    # next 0.26.)
    asyncio.new_event_loop().close()
    # What the children inherit stays shared only if nothing writes to it: a collection in a
    # child would write to every object's header, so the objects here are kept out of it
    # (and those of each command line the zygote parses).
    gc.freeze()
    return wrapper


def _zygote(sock, wrapper, program):
    """Forks an instance per request until end of file."""
    uids = _mapped_uids()
    _send(sock, {"op": "ready"})
    argvs = {}  # command lines, parsed once: each instance's is the same
    while True:
        message, fds = _recv(sock)
        if message is None or message.get("op") == "retire":
            os._exit(0)
        try:
            argv = ("--listen", "unix:" + message["listen"], "--ready-fd", "3")
            if argv not in argvs:
                argvs[argv] = wrapper.parse_args(list(argv))
                gc.freeze()
            pid = _fork_instance(message, fds, uids, wrapper, (argv, argvs[argv]), program)
        except Exception as exc:
            _send(sock, {"op": "failed", "id": message.get("id"), "error": str(exc)})
        else:
            _send(sock, {"op": "forked", "id": message["id"], "pid": pid})
        finally:
            for fd in fds:
                os.close(fd)


def _fork_instance(request, fds, uids, wrapper, args, program):
    """Forks an intermediate process that starts the instance and exits; returns its pid."""
    uid = request.get("uid")
    if not isinstance(uid, int) or not any(uid in r for r in uids):
        raise ValueError(f"refusing to fork an instance as uid {uid!r}, which is not an "
                         f"instance's")
    if len(fds) != 3 + request.get("cgroups", 0):
        raise ValueError(f"got {len(fds)} file descriptors, want stdout, stderr, ready and "
                         f"{request.get('cgroups', 0)} cgroups")
    report_r, report_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_r)
            _intermediate(request, fds, report_w, wrapper, args, program)
        finally:
            os._exit(0)  # never return into the zygote's loop; the report says how it went
    os.close(report_w)
    with os.fdopen(report_r, "rb") as f:
        report = f.read()
    os.waitpid(pid, 0)
    if report.startswith(b"P"):
        return int(report[1:])
    raise OSError(report[1:].decode(errors="replace") or "the instance's parent died")


def _intermediate(request, fds, report_w, wrapper, args, program):
    """In a child of the zygote: joins the cgroups, unshares, forks the instance, exits."""
    # 0 stays /dev/null; the instance's output on 1 and 2, its ready pipe on 3; the report
    # pipe on 4 until the instance is forked, the cgroups from 5 until joined; nothing else
    # of the zygote's stays open.
    wanted = [fds[0], fds[1], fds[2], report_w] + fds[3:]
    moved = [os.dup2(fd, 100 + i) for i, fd in enumerate(wanted)]
    for i, fd in enumerate(moved):
        os.dup2(fd, 1 + i)
    os.closerange(1 + len(wanted), 1 << 20)
    try:
        for fd in range(5, 1 + len(wanted)):
            # "0" is the writer; the file was opened by the server, whose credentials count.
            os.write(fd, b"0")
            os.close(fd)
        _check(_unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS),
               "unshare")
        pid = os.fork()
    except BaseException as exc:
        os.write(4, b"E" + str(exc).encode(errors="replace")[:4000])
        return
    if pid == 0:
        os.close(4)
        try:
            _instance(request, wrapper, args, program)
        except BaseException as exc:
            print(f"sless zygote: starting the instance: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    os.write(4, b"P%d" % pid)


def _instance(request, wrapper, args, program):
    """pid 1 of its own pid namespace: confines itself, then becomes the wrapper, started with
    args: (its command line, as the wrapper's parse_args parsed it)."""
    uid, tmp = request["uid"], f"size={int(request['tmp_mb'])}m,mode=1777"
    _umount("/tmp")
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp)
    _umount("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp)
    sock_dir = os.path.dirname(request["listen"])
    _umount(sock_dir)
    _mount("tmpfs", sock_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"size=64k,nr_inodes=64,mode=0700,uid={uid},gid={uid}")
    # The code mount point is a slave of the server's: what it mounts there at specialize
    # appears here. The others' mount points go.
    code = request["code"]
    if "/" in code or code in ("", ".", ".."):
        raise ValueError(f"bad code mount point {code!r}")
    _mount(os.path.join(CODES_DIR, code), CODE_DIR, None, MS_BIND)
    _umount(CODES_DIR)
    # A /proc of the new pid namespace; the zygote's goes. (A proc mount needs a visible one.)
    _mount("proc", NEW_PROC, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _umount("/proc")
    _mount(NEW_PROC, "/proc", None, MS_MOVE)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    _drop_capabilities(keep_uid=False)
    os.setresuid(uid, uid, uid)
    _load_filter(program)
    os.chdir(request["dir"])
    os.environ.clear()
    os.environ.update(kv.split("=", 1) for kv in request.get("env", []))
    argv, parsed = args
    sys.argv = [wrapper.__file__, *argv]
    sys.modules["__main__"] = wrapper
    gc.enable()
    wrapper.serve(parsed)


# ---------------------------------------------------------------------------------------------
# Start


def main():
    parser = argparse.ArgumentParser(description="sless zygote (started by the platform only)")
    parser.add_argument("--wrapper", required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--filter", required=True, help="the instances' seccomp filter, base64")
    args = parser.parse_args()
    program = base64.b64decode(args.filter)
    control = socket.socket(fileno=args.control_fd)
    gc.disable()  # until the children: no collection leaves holes in what they will share
    # Imported before the zygote is forked, so that the reaper shares it too.
    wrapper = _import_wrapper(args.wrapper)
    mine, zygotes = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            control.close()
            mine.close()
            _zygote(zygotes, wrapper, program)
        except BaseException as exc:
            print(f"sless zygote: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    zygotes.close()
    gc.enable()
    _drop_capabilities(keep_uid=True)
    _load_filter(program)
    _Reaper(control, mine, pid).run()


if __name__ == "__main__":
    main()
