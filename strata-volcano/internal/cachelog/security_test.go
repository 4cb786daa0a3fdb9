package cachelog

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate and its key as PEM files into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "strata-test"},
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Unix(1<<32, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write := func(path, kind string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, "CERTIFICATE", der)
	write(keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func TestSecurityConn(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here"), 0o600); err != nil {
		t.Fatal(err)
	}
	sasl := Security{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p", CALocation: cert}
	cases := []struct {
		name     string
		security Security
		opts     int    // client options beyond the brokers
		err      string // a part of the error; "" for none
	}{
		{"nothing set is plaintext", Security{}, 0, ""},
		{"plaintext in any case", Security{Protocol: "PLAINTEXT"}, 0, ""},
		{"ssl with the system's roots", Security{Protocol: "ssl"}, 1, ""},
		{"ssl with a CA file", Security{Protocol: "SSL", CALocation: cert}, 1, ""},
		{"mutual TLS", Security{Protocol: "ssl", CALocation: cert, CertificateLocation: cert, KeyLocation: key}, 1, ""},
		{"sasl_ssl with SCRAM-SHA-512", sasl, 2, ""},
		{"sasl_plaintext with PLAIN", Security{Protocol: "sasl_plaintext", Mechanism: "plain", Username: "u", Password: "p"}, 1, ""},
		{"sasl with SCRAM-SHA-256", Security{Protocol: "sasl_plaintext", Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}, 1, ""},
		{"an unknown protocol", Security{Protocol: "kerberos"}, 0, `security protocol "kerberos"`},
		{"sasl without a mechanism", Security{Protocol: "sasl_ssl", Username: "u", Password: "p"}, 0, "needs STRATA_KAFKA_SASL_MECHANISMS"},
		{"GSSAPI", Security{Protocol: "sasl_plaintext", Mechanism: "GSSAPI", Username: "u", Password: "p"}, 0, `mechanism "GSSAPI"`},
		{"sasl without a password", Security{Protocol: "sasl_plaintext", Mechanism: "PLAIN", Username: "u"}, 0, "SASL_PASSWORD"},
		{"a CA file that is missing", Security{Protocol: "ssl", CALocation: filepath.Join(dir, "missing.pem")}, 0, "reading the CA file"},
		{"a CA file without a certificate", Security{Protocol: "ssl", CALocation: notPEM}, 0, "holds no PEM certificate"},
		{"a certificate without its key", Security{Protocol: "ssl", CertificateLocation: cert}, 0, "needs both"},
		{"an encrypted key", Security{Protocol: "ssl", CertificateLocation: cert, KeyLocation: key, KeyPassword: "x"}, 0, "encrypted client key"},
		{"a key that does not match", Security{Protocol: "ssl", CertificateLocation: cert, KeyLocation: notPEM}, 0, "loading the client certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tc.security.Conn("a:9092,b:9092")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if !strings.Contains(err.Error(), "STRATA_KAFKA_") {
					t.Fatalf("error %v does not say which settings", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(conn.Brokers) != 2 || len(conn.Opts) != tc.opts {
				t.Fatalf("brokers %v, %d options; want 2 brokers, %d options", conn.Brokers, len(conn.Opts), tc.opts)
			}
		})
	}
}

func TestSecurityFromEnv(t *testing.T) {
	env := map[string]string{
		"STRATA_KAFKA_SECURITY_PROTOCOL":        "SASL_SSL",
		"STRATA_KAFKA_SASL_MECHANISMS":          "SCRAM-SHA-512",
		"STRATA_KAFKA_SASL_USERNAME":            "user",
		"STRATA_KAFKA_SASL_PASSWORD":            "secret",
		"STRATA_KAFKA_SSL_CA_LOCATION":          "/ca.pem",
		"STRATA_KAFKA_SSL_CERTIFICATE_LOCATION": "/cert.pem",
		"STRATA_KAFKA_SSL_KEY_LOCATION":         "/key.pem",
		"STRATA_KAFKA_SSL_KEY_PASSWORD":         "kp",
	}
	got := SecurityFromEnv(func(name string) string { return env[name] })
	want := Security{"SASL_SSL", "SCRAM-SHA-512", "user", "secret", "/ca.pem", "/cert.pem", "/key.pem", "kp"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
