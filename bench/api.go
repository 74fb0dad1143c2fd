package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"time"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"
)

var (
	onlyAPI   = flag.Bool("api", false, "run only the API write measurement and print its table")
	apiWrites = flag.Int("api-writes", 300, "functions the API write measurement creates, one after the other")
)

// apiLatency creates *apiWrites functions one after the other through the
// REST API and writes the latency of a create to report: what a durable
// database write costs an API client (each create is one committed
// write).
func apiLatency(srv *server, report *bytes.Buffer) error {
	c := &client.Client{Endpoint: srv.endpoint, Token: token}
	ctx := context.Background()
	lat := make([]time.Duration, *apiWrites)
	for i := range lat {
		fn := &functions.Function{Namespace: "default", Name: fmt.Sprintf("api-%05d", i), Spec: functions.Spec{Runtime: "python3.11"}}
		start := time.Now()
		if _, err := c.CreateFunction(ctx, fn); err != nil {
			return fmt.Errorf("creating %s: %w", fn.Name, err)
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	fmt.Fprintf(report, "\nAPI writes: %d functions created one after the other (POST .../functions, 201).\n\n", len(lat))
	fmt.Fprintln(report, "| what | value |")
	fmt.Fprintln(report, "|---|---|")
	fmt.Fprintf(report, "| create latency p50, p99 | %s, %s |\n", msStr(lat[len(lat)/2]), msStr(lat[len(lat)*99/100]))
	return nil
}
