package cachelog

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Conn is how the replica reaches the brokers: their addresses and the client options that
// TLS and SASL add.
type Conn struct {
	Brokers []string
	Opts    []kgo.Opt
}

func (c Conn) client(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...)
	return kgo.NewClient(append(all, opts...)...)
}

// Security is what Strata's Python components hand librdkafka as security.protocol, sasl.* and
// ssl.*, read from the same STRATA_KAFKA_* variables, so that one Secret configures both.
type Security struct {
	Protocol, Mechanism, Username, Password                   string
	CALocation, CertificateLocation, KeyLocation, KeyPassword string
}

// SecurityFromEnv reads the STRATA_KAFKA_* variables through getenv (os.Getenv in main).
func SecurityFromEnv(getenv func(string) string) Security {
	return Security{
		Protocol:            getenv("STRATA_KAFKA_SECURITY_PROTOCOL"),
		Mechanism:           getenv("STRATA_KAFKA_SASL_MECHANISMS"),
		Username:            getenv("STRATA_KAFKA_SASL_USERNAME"),
		Password:            getenv("STRATA_KAFKA_SASL_PASSWORD"),
		CALocation:          getenv("STRATA_KAFKA_SSL_CA_LOCATION"),
		CertificateLocation: getenv("STRATA_KAFKA_SSL_CERTIFICATE_LOCATION"),
		KeyLocation:         getenv("STRATA_KAFKA_SSL_KEY_LOCATION"),
		KeyPassword:         getenv("STRATA_KAFKA_SSL_KEY_PASSWORD"),
	}
}

// Conn is the connection to brokers (a comma-separated list) under these settings.
func (s Security) Conn(brokers string) (Conn, error) {
	opts, err := s.options()
	if err != nil {
		return Conn{}, fmt.Errorf("the Kafka connection (STRATA_KAFKA_*): %w", err)
	}
	return Conn{Brokers: strings.Split(brokers, ","), Opts: opts}, nil
}

func (s Security) options() ([]kgo.Opt, error) {
	protocol := strings.ToLower(s.Protocol)
	var opts []kgo.Opt
	switch protocol {
	case "", "plaintext", "sasl_plaintext":
	case "ssl", "sasl_ssl":
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	default:
		return nil, fmt.Errorf("security protocol %q: want plaintext, ssl, sasl_plaintext or sasl_ssl", s.Protocol)
	}
	if strings.HasPrefix(protocol, "sasl_") {
		mechanism, err := s.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mechanism))
	}
	return opts, nil
}

func (s Security) mechanism() (sasl.Mechanism, error) {
	if s.Username == "" || s.Password == "" {
		return nil, errors.New("SASL needs STRATA_KAFKA_SASL_USERNAME and STRATA_KAFKA_SASL_PASSWORD")
	}
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	case "":
		// librdkafka would default to GSSAPI, which this client does not speak
		return nil, errors.New("SASL needs STRATA_KAFKA_SASL_MECHANISMS: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	default:
		return nil, fmt.Errorf("SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
	}
}

func (s Security) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CALocation != "" {
		pem, err := os.ReadFile(s.CALocation)
		if err != nil {
			return nil, fmt.Errorf("reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA file %s holds no PEM certificate", s.CALocation)
		}
		cfg.RootCAs = pool
	}
	if (s.CertificateLocation == "") != (s.KeyLocation == "") {
		return nil, errors.New("a client certificate needs both STRATA_KAFKA_SSL_CERTIFICATE_LOCATION and STRATA_KAFKA_SSL_KEY_LOCATION")
	}
	if s.CertificateLocation != "" {
		if s.KeyPassword != "" {
			return nil, errors.New("an encrypted client key (STRATA_KAFKA_SSL_KEY_PASSWORD) is not supported: give an unencrypted PEM key")
		}
		pair, err := tls.LoadX509KeyPair(s.CertificateLocation, s.KeyLocation)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
