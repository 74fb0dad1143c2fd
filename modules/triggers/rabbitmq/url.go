package rabbitmq

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// invalidURL stands for a URL that does not parse: nothing of it is shown,
// since where the password starts and ends is unknown.
const invalidURL = "<invalid URL>"

// RedactURL returns raw with its password replaced by "***" and the user
// kept, for API responses and logs. A URL that does not parse becomes a
// fixed placeholder that leaks nothing of it.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	// An opaque URL ("user:secret@host" read as scheme "user") has no
	// userinfo to redact, but may well hold a password.
	if err != nil || u.Opaque != "" {
		return invalidURL
	}
	if _, ok := u.User.Password(); !ok {
		return u.String()
	}
	// url.UserPassword would escape the stars; the userinfo is put in by
	// hand after the "//" that starts the authority.
	user := url.User(u.User.Username()).String()
	u.User = nil
	s := u.String()
	i := strings.Index(s, "//")
	if i < 0 {
		return invalidURL
	}
	return s[:i+2] + user + ":***@" + s[i+2:]
}

// ValidateURL checks that raw is an amqp:// or amqps:// URL with a host,
// that the AMQP client accepts. Its messages are phrased to follow the
// field's name ("url is not a valid URL"), and never quote the URL, which
// holds the password.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL.
		return errors.New("is not a valid URL; percent-encode reserved characters in the user and password")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return fmt.Errorf("must be an amqp:// or amqps:// URL, not %q", u.Scheme)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return errors.New("has no host; want amqp://user:password@host:port/vhost")
	}
	if _, err := amqp.ParseURI(raw); err != nil {
		return fmt.Errorf("is not an AMQP URI: %s", newScrubber(raw).scrub(err.Error()))
	}
	return nil
}

// scrubber removes a URL's password from text, as a last line of defence
// for messages built from errors of the client or the broker, which might
// quote the URL.
type scrubber struct {
	// secrets are the password as it is and as the URL may spell it.
	secrets []string
}

// newScrubber returns the scrubber of raw's password; it removes nothing
// when raw has none or does not parse (ValidateURL keeps such URLs out).
func newScrubber(raw string) scrubber {
	u, err := url.Parse(raw)
	if err != nil {
		return scrubber{}
	}
	password, ok := u.User.Password()
	if !ok || password == "" {
		return scrubber{}
	}
	var s scrubber
	for _, form := range []string{password, url.PathEscape(password), url.QueryEscape(password)} {
		if !slices.Contains(s.secrets, form) {
			s.secrets = append(s.secrets, form)
		}
	}
	return s
}

// scrub returns text with every occurrence of the password replaced by
// "***".
func (s scrubber) scrub(text string) string {
	for _, secret := range s.secrets {
		text = strings.ReplaceAll(text, secret, "***")
	}
	return text
}
