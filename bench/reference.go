package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A listener is a process the bench started that serves HTTP on a loopback
// port: a wrapper, a minimal server or nginx.
type listener struct {
	addr, url string // 127.0.0.1:PORT and http://127.0.0.1:PORT/
	cmd       *exec.Cmd
}

// startListener starts cmd and waits until it accepts connections on port.
func startListener(what string, cmd *exec.Cmd, port string) (*listener, error) {
	cmd.Stderr = os.Stderr
	// A group of its own, so that stop reaches nginx's worker too: it
	// outlives a killed master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	addr := "127.0.0.1:" + port
	l := &listener{addr: addr, url: "http://" + addr + "/", cmd: cmd}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return l, nil
		}
		if time.Now().After(deadline) {
			l.stop()
			return nil, fmt.Errorf("%s did not listen on port %s", what, port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the listener's process group.
func (l *listener) stop() {
	syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	l.cmd.Wait()
}

// pids are the processes whose CPU a run charges to the listener: the
// process and its children (nginx's worker).
func (l *listener) pids() []int {
	pid := l.cmd.Process.Pid
	return append([]int{pid}, children(pid)...)
}

// startMinimal runs the runtime's minimal server (bench/minimal) with the
// example's handler: the floor a wrapper is compared with.
func startMinimal(rc runtimeCase) (*listener, error) {
	port, code, err := listenArgs(rc)
	if err != nil {
		return nil, err
	}
	return startListener("the minimal "+rc.name+" server", exec.Command(rc.interpreter, rc.minimal, port, code), port)
}

// listenArgs picks a free port for a server of the runtime's example and
// returns it with the example's absolute path.
func listenArgs(rc runtimeCase) (port, code string, err error) {
	if port, err = freePort(); err != nil {
		return "", "", err
	}
	code, err = filepath.Abs(rc.example)
	return port, code, err
}

// nginxConfig is a reverse proxy with one worker and a keep-alive upstream,
// the usual way to put nginx in front of an application server.
const nginxConfig = `daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream app {
		server %[2]s;
		keepalive 64;
	}
	server {
		listen 127.0.0.1:%[3]s;
		location / {
			proxy_pass http://app;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
}
`

// startNginx runs nginx in front of upstream (host:port) from a
// configuration written into its own directory under tmp.
func startNginx(upstream, tmp string) (*listener, error) {
	bin, err := nginxPath()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConfig, dir, upstream, port), 0o644); err != nil {
		return nil, err
	}
	return startListener("nginx", exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf), port)
}

// nginxPath finds nginx, which Debian installs under /usr/sbin.
func nginxPath() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", fmt.Errorf("nginx is needed for the reference row (apt-get install nginx-light, or run bench/run.sh)")
}

// nginxVersion is the version nginx reports, such as "1.22.1".
func nginxVersion() string {
	bin, err := nginxPath()
	if err != nil {
		return ""
	}
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	_, v, _ := strings.Cut(strings.TrimSpace(string(out)), "nginx/")
	return v
}

// loadAverage is the 1, 5 and 15 minute load averages, as uptime shows them.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat (100
// on every Linux architecture the bench runs on).
const clockTicks = 100

// processCPU is the user plus system CPU time that process pid (all its
// threads) has used so far, from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name in parentheses may hold spaces: fields count from after it.
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14 of stat(5)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// totalCPU sums processCPU over pids.
func totalCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		cpu, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += cpu
	}
	return sum, nil
}

// children lists the child processes of pid.
func children(pid int) []int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}
