package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"sless.kube5s.ru/sless/modules/auth"
)

// fixed accepts one token, expires another and fails on a third.
type fixed struct {
	ns                  string
	ok, expired, broken string
	asked               *[]string
}

func (f fixed) Authenticate(_ context.Context, token string) (auth.Principal, error) {
	*f.asked = append(*f.asked, f.ns)
	switch token {
	case f.ok:
		return auth.Principal{Namespace: f.ns}, nil
	case f.expired:
		return auth.Principal{}, fmt.Errorf("token of %s: %w", f.ns, auth.ErrExpired)
	case f.broken:
		return auth.Principal{}, fmt.Errorf("asking %s: %w", f.ns, auth.ErrUnavailable)
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

func TestChain(t *testing.T) {
	tests := []struct {
		token     string
		want      string
		wantErr   error
		wantAsked []string
	}{
		{"a-ok", "a", nil, []string{"a"}},
		{"b-ok", "b", nil, []string{"a", "b"}},
		{"a-expired", "", auth.ErrExpired, []string{"a"}},
		{"a-broken", "", auth.ErrUnavailable, []string{"a"}},
		{"b-broken", "", auth.ErrUnavailable, []string{"a", "b"}},
		{"nobody", "", auth.ErrUnauthenticated, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			var asked []string
			c := auth.Chain{
				fixed{ns: "a", ok: "a-ok", expired: "a-expired", broken: "a-broken", asked: &asked},
				fixed{ns: "b", ok: "b-ok", broken: "b-broken", asked: &asked},
			}
			p, err := c.Authenticate(context.Background(), tt.token)
			if p.Namespace != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("got %q, %v; want %q, %v", p.Namespace, err, tt.want, tt.wantErr)
			}
			if fmt.Sprint(asked) != fmt.Sprint(tt.wantAsked) {
				t.Errorf("asked %v; want %v", asked, tt.wantAsked)
			}
		})
	}
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BeArEr  abc ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got, ok := auth.BearerToken(tt.header); got != tt.want || ok != tt.ok {
			t.Errorf("BearerToken(%q) = %q, %t; want %q, %t", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestPrincipal(t *testing.T) {
	tenant := auth.Principal{Namespace: "a"}
	invoker := auth.Principal{Namespace: "a", Function: "f"}
	admin := auth.Principal{Namespace: "default", AllNamespaces: true}
	tests := []struct {
		name           string
		p              auth.Principal
		ns, fn         string
		access, invoke bool
	}{
		{"tenant own", tenant, "a", "f", true, true},
		{"tenant other", tenant, "b", "f", false, false},
		{"invoker own function", invoker, "a", "f", false, true},
		{"invoker other function", invoker, "a", "g", false, false},
		{"invoker other namespace", invoker, "b", "f", false, false},
		{"admin", admin, "b", "g", true, true},
	}
	for _, tt := range tests {
		if got := tt.p.CanAccess(tt.ns); got != tt.access {
			t.Errorf("%s: CanAccess(%q) = %t; want %t", tt.name, tt.ns, got, tt.access)
		}
		if got := tt.p.CanInvoke(tt.ns, tt.fn); got != tt.invoke {
			t.Errorf("%s: CanInvoke(%q, %q) = %t; want %t", tt.name, tt.ns, tt.fn, got, tt.invoke)
		}
	}
}
