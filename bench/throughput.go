package main

import (
	"bytes"
	"fmt"
	"strings"
	"time"
)

// measured is one wrk run and the CPU that the processes serving it used.
type measured struct {
	load
	cpuPerReq time.Duration
}

// measure runs wrk against url and charges the CPU that pids used over the
// run to its requests.
func measure(url string, conns int, pids []int) (measured, error) {
	before, err := totalCPU(pids)
	if err != nil {
		return measured{}, err
	}
	l, err := wrk(url, conns, *duration)
	if err != nil {
		return measured{}, err
	}
	after, err := totalCPU(pids)
	if err != nil {
		return measured{}, err
	}
	m := measured{load: l}
	if l.requests > 0 {
		m.cpuPerReq = (after - before) / time.Duration(l.requests)
	}
	return m, nil
}

// throughputRows are the rows one runtime adds to the throughput tables.
type throughputRows struct {
	direct, fn, nginx []string
}

// throughput measures, at 1 and 32 connections and one right after the
// other, the runtime's minimal server, its wrapper called directly, /fn, and
// (for Python) nginx in front of the minimal server, so that every ratio
// compares runs made a few seconds apart.
func throughput(rc runtimeCase, srv *server, fnURL, tmp string) (throughputRows, error) {
	var rows throughputRows
	minimal, err := startMinimal(rc)
	if err != nil {
		return rows, err
	}
	defer minimal.stop()
	direct, err := startWrapper(rc, tmp, 32)
	if err != nil {
		return rows, err
	}
	defer direct.stop()
	type target struct {
		name, url string
		pids      func() []int // read at each run: nginx forks its worker after it listens
	}
	targets := []target{
		{"minimal", minimal.url, minimal.pids},
		{"direct", direct.url, direct.pids},
		{"fn", fnURL, func() []int { return []int{srv.cmd.Process.Pid} }},
	}
	python := rc.name == "python3.11"
	if python {
		// Concurrency 1 runs the handler on the event loop, as the minimal server does.
		inline, err := startWrapper(rc, tmp, 1)
		if err != nil {
			return rows, err
		}
		defer inline.stop()
		nginx, err := startNginx(minimal.addr, tmp)
		if err != nil {
			return rows, err
		}
		defer nginx.stop()
		targets = append(targets, target{"inline", inline.url, inline.pids}, target{"nginx", nginx.url, nginx.pids})
	}
	for _, t := range targets {
		if err := warm(t.url, 8); err != nil {
			return rows, err
		}
	}
	for _, conns := range []int{1, 32} {
		logf("%s: %d connections", rc.name, conns)
		got := map[string]measured{}
		for _, t := range targets {
			m, err := measure(t.url, conns, t.pids())
			if err != nil {
				return rows, err
			}
			got[t.name] = m
		}
		mn, d, f := got["minimal"], got["direct"], got["fn"]
		directRow := func(label string, w measured) string {
			return fmt.Sprintf("| %s | %d | %.0f | %.0f | %.2fx | %s | %s | %s | %s |", label, conns, mn.rps, w.rps, w.rps/mn.rps,
				usStr(mn.cpuPerReq), usStr(w.cpuPerReq), msStr(mn.p50), msStr(w.p50))
		}
		if python {
			rows.direct = append(rows.direct, directRow(rc.name+", concurrency 32", d), directRow(rc.name+", concurrency 1", got["inline"]))
			n := got["nginx"]
			rows.nginx = append(rows.nginx, fmt.Sprintf("| %d | %.0f | %.0f | %.2fx | %s | %s | %.0f | %.2fx | %s |", conns, mn.rps, n.rps, n.rps/mn.rps,
				msStr(n.p50), usStr(n.cpuPerReq), f.rps, f.rps/n.rps, usStr(f.cpuPerReq)))
		} else {
			rows.direct = append(rows.direct, directRow(rc.name, d))
		}
		rows.fn = append(rows.fn, fmt.Sprintf("| %s | %d | %.0f | %.0f | %.2fx | %s | %s | %s | %s | %s | %s |", rc.name, conns, d.rps, f.rps, f.rps/d.rps,
			msStr(d.p50), msStr(f.p50), msStr(f.p50-d.p50), msStr(d.p99), msStr(f.p99), usStr(f.cpuPerReq)))
	}
	return rows, nil
}

// printTable writes a markdown table of rows after a blank line and its introduction.
func printTable(report *bytes.Buffer, intro string, columns, rows []string) {
	fmt.Fprintf(report, "\n%s\n\n| %s |\n|%s\n", intro, strings.Join(columns, " | "), strings.Repeat("---|", len(columns)))
	for _, r := range rows {
		fmt.Fprintln(report, r)
	}
}

func usStr(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
