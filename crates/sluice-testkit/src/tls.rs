//! A certificate authority of a test's own: its root (to give clients as the
//! one they trust) and server certificates it issues for `localhost` and
//! `127.0.0.1`, as PEM files in a directory.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A test CA; its root is `ca.pem` in the directory it was made in.
pub struct TestCa {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A server certificate and its key, as files.
pub struct Issued {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The certificate itself (DER), to compare with what a server sends.
    pub der: Vec<u8>,
    /// The key's SubjectPublicKeyInfo (DER), for Chromium's
    /// `--ignore-certificate-errors-spki-list` (its SHA-256, base64).
    pub spki_der: Vec<u8>,
}

impl TestCa {
    /// A new CA writing its files into `dir`.
    pub fn new(dir: &Path) -> TestCa {
        let ca_key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&ca_key).expect("a CA certificate");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca.pem");
        TestCa {
            dir: dir.to_path_buf(),
            ca,
            ca_key,
        }
    }

    /// The root clients should trust.
    pub fn root_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn root_pem(&self) -> String {
        self.ca.pem()
    }

    /// Issues a certificate for `localhost` and `127.0.0.1` named `name`, and
    /// writes it and its key to `name.pem` and `name.key` (replacing them).
    pub fn issue(&self, name: &str) -> Issued {
        self.issue_until(name, None)
    }

    /// [`TestCa::issue`], valid until midnight (UTC) of `(year, month, day)`.
    pub fn issue_until(&self, name: &str, until: Option<(i32, u8, u8)>) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some((year, month, day)) = until {
            params.not_after = rcgen::date_time_ymd(year, month, day);
        }
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("a server certificate");
        let cert_file = self.dir.join(format!("{name}.pem"));
        let key_file = self.dir.join(format!("{name}.key"));
        std::fs::write(&cert_file, cert.pem()).expect("write the certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write the key");
        Issued {
            cert_file,
            key_file,
            der: cert.der().to_vec(),
            spki_der: key.public_key_der(),
        }
    }
}
