package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// clusterPKI is a test cluster's certificate authority, the key pairs its
// components present, and the service-account signing key, all made per
// cluster in memory and written as PEM files below one directory.
type clusterPKI struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	// CAFile is the CA certificate (PEM); every client and server trusts it.
	CAFile string
	// SAKey and SAPub are the service-account token signing key pair.
	SAKey, SAPub string
}

// newClusterPKI makes a CA and a service-account key pair in dir.
func newClusterPKI(dir string) (*clusterPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "gpurun-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	p := &clusterPKI{dir: dir, caCert: cert, caKey: key, CAFile: filepath.Join(dir, "ca.crt")}
	if err := writePEM(p.CAFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}
	p.SAKey, p.SAPub = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeKey(p.SAKey, sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account public key: %w", err)
	}
	if err := writePEM(p.SAPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return p, nil
}

// keyPair is a certificate and its key, as files.
type keyPair struct {
	Cert, Key string
}

// issue signs a certificate for name (the file name stem) with the subject
// cn and organizations orgs; with hosts it is a serving certificate for
// those DNS names and IP addresses, else a client certificate.
func (p *clusterPKI) issue(name, cn string, orgs []string, hosts ...string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("pki: %s key: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("pki: %s certificate: %w", name, err)
	}
	kp := keyPair{Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key")}
	if err := writePEM(kp.Cert, "CERTIFICATE", der); err != nil {
		return keyPair{}, err
	}
	if err := writeKey(kp.Key, key); err != nil {
		return keyPair{}, err
	}
	return kp, nil
}

// kubeconfig writes a kubeconfig at path for server that authenticates with
// kp and trusts the CA; the certificates are embedded, so the file stands
// alone.
func (p *clusterPKI) kubeconfig(path, server, user string, kp keyPair) error {
	ca, err := os.ReadFile(p.CAFile)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cert, err := os.ReadFile(kp.Cert)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	key, err := os.ReadFile(kp.Key)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	b64 := base64.StdEncoding.EncodeToString
	// JSON is YAML: no YAML encoder needed for this fixed shape.
	text := fmt.Sprintf(`{"apiVersion":"v1","kind":"Config",
"clusters":[{"name":"gpurun-test","cluster":{"server":%q,"certificate-authority-data":%q}}],
"users":[{"name":%q,"user":{"client-certificate-data":%q,"client-key-data":%q}}],
"contexts":[{"name":"gpurun-test","context":{"cluster":"gpurun-test","user":%q}}],
"current-context":"gpurun-test"}
`, server, b64(ca), user, b64(cert), b64(key), user)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}
