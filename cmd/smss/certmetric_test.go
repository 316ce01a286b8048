package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/auth/authtest"
)

const expiryFamily = "smss_tls_certificate_expiry_timestamp_seconds"

// certExpiry reads the expiry gauge of key from a /metrics body; false
// when the series is absent.
func certExpiry(t *testing.T, body, key string) (float64, bool) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + expiryFamily + `\{key="` + regexp.QuoteMeta(key) + `"\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s{key=%q} value %q: %v", expiryFamily, key, m[1], err)
	}
	return v, true
}

// notAfter is the NotAfter of the PEM certificate in file, Unix seconds.
func notAfter(t *testing.T, file string) float64 {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return float64(c.NotAfter.Unix())
}

// TestCertificateExpiryMetric runs a slave with a TLS listener and a client
// certificate for its master, and reads the expiry gauges from /metrics:
// one per configured certificate, following a SIGHUP that installs new
// certificates, and kept when a reload fails.
func TestCertificateExpiryMetric(t *testing.T) {
	pki := authtest.NewPKI(t)
	dir := t.TempDir()
	files := map[string]string{}
	for _, name := range []string{"server.pem", "server-key.pem", "client.pem", "client-key.pem"} {
		files[name] = filepath.Join(dir, name)
	}
	authtest.Install(t, files["server.pem"], pki.ServerCert)
	authtest.Install(t, files["server-key.pem"], pki.ServerKey)
	authtest.Install(t, files["client.pem"], pki.ClientCert)
	authtest.Install(t, files["client-key.pem"], pki.ClientKey)
	// A loopback port nothing listens on: the slave keeps retrying, and
	// still reports its client certificate.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	masterPort := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	in := start(t, "admin:\n  listen: 127.0.0.1:0\n  token: "+adminToken+"\n"+
		"tls:\n  listen: 127.0.0.1:0\n  cert: "+strconv.Quote(files["server.pem"])+"\n  key: "+strconv.Quote(files["server-key.pem"])+"\n"+
		"replication:\n  useTLS: true\n  ca: "+strconv.Quote(pki.CAFile)+"\n  cert: "+strconv.Quote(files["client.pem"])+
		"\n  key: "+strconv.Quote(files["client-key.pem"])+"\n",
		"-role", "slave", "-host", "127.0.0.1", "-port", masterPort)
	m := addrRe.FindStringSubmatch(in.out.waitLine(t, `msg="admin listening"`))
	if m == nil {
		t.Fatalf("no admin address:\n%s", in.out.String())
	}
	adm := m[1]
	check := func(when string, want map[string]float64) {
		t.Helper()
		code, body := adminGet(t, adm, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("%s: /metrics %d", when, code)
		}
		for key, w := range want {
			if got, ok := certExpiry(t, body, key); !ok || got != w {
				t.Errorf("%s: %s{key=%q} = %v (present %v), want %v", when, expiryFamily, key, got, ok, w)
			}
		}
	}
	initial := map[string]float64{"tls.cert": notAfter(t, pki.ServerCert), "replication.cert": notAfter(t, pki.ClientCert)}
	check("at start", initial)

	// The same certificates, as /api/info lists them.
	_, body := adminGet(t, adm, "/api/info")
	var info admin.Info
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatalf("/api/info: %v %s", err, body)
	}
	subjects := map[string]string{}
	for _, c := range info.Certificates {
		subjects[c.Key] = c.Subject
		if float64(c.NotAfter)/1000 != initial[c.Key] {
			t.Errorf("/api/info %s notAfter %d, want %v s", c.Key, c.NotAfter, initial[c.Key])
		}
	}
	if len(info.Certificates) != 2 || subjects["tls.cert"] != "CN=server" || subjects["replication.cert"] != "CN=client" {
		t.Fatalf("/api/info certificates %+v", info.Certificates)
	}

	// Certificates valid for 90 and 60 days replace the one-day ones.
	now := time.Now()
	cert, key := pki.IssueValid(t, "server2", x509.ExtKeyUsageServerAuth, now.Add(-time.Hour), now.Add(90*24*time.Hour))
	authtest.Install(t, files["server.pem"], cert)
	authtest.Install(t, files["server-key.pem"], key)
	cert, key = pki.IssueValid(t, "client2", x509.ExtKeyUsageClientAuth, now.Add(-time.Hour), now.Add(60*24*time.Hour))
	authtest.Install(t, files["client.pem"], cert)
	authtest.Install(t, files["client-key.pem"], key)
	rotated := map[string]float64{"tls.cert": notAfter(t, files["server.pem"]), "replication.cert": notAfter(t, files["client.pem"])}
	for k, v := range rotated {
		if v-initial[k] < 24*3600 {
			t.Fatalf("%s: the new certificate does not expire later (%v, %v)", k, initial[k], v)
		}
	}
	sendHUP(t)
	in.out.waitLine(t, `msg="SIGHUP: TLS listener certificate reloaded"`)
	in.out.waitLine(t, `msg="SIGHUP: replication TLS material reloaded`)
	check("after SIGHUP", rotated)

	// A failed reload changes nothing.
	authtest.InstallBytes(t, files["server-key.pem"], []byte("not a key"))
	authtest.InstallBytes(t, files["client-key.pem"], []byte("not a key"))
	sendHUP(t)
	in.out.waitLine(t, `msg="SIGHUP: TLS listener certificate not reloaded`)
	in.out.waitLine(t, `msg="SIGHUP: replication TLS material not reloaded`)
	check("after a failed reload", rotated)
}

// TestCertificateExpiryMetricAbsent: without TLS no expiry series exists,
// and a listener certificate alone gives only tls.cert.
func TestCertificateExpiryMetricAbsent(t *testing.T) {
	pki := authtest.NewPKI(t)
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"no TLS", "", nil},
		{"listener only", "tls:\n  listen: 127.0.0.1:0\n  cert: " + strconv.Quote(pki.ServerCert) + "\n  key: " + strconv.Quote(pki.ServerKey) + "\n",
			[]string{"tls.cert"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := start(t, "admin:\n  listen: 127.0.0.1:0\n  token: "+adminToken+"\n"+tc.conf)
			m := addrRe.FindStringSubmatch(in.out.waitLine(t, `msg="admin listening"`))
			if m == nil {
				t.Fatalf("no admin address:\n%s", in.out.String())
			}
			_, body := adminGet(t, m[1], "/metrics")
			var got []string
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, expiryFamily+"{") {
					got = append(got, line)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("series %q, want keys %q", got, tc.want)
			}
			for _, key := range tc.want {
				if _, ok := certExpiry(t, body, key); !ok {
					t.Fatalf("no %s series:\n%s", key, strings.Join(got, "\n"))
				}
			}
		})
	}
}
