//! HTTPS on the listener: rustls with the certificate chain and key read from
//! PEM files, HTTP/2 and HTTP/1.1 offered by ALPN, and the pair read again when
//! either file changes, so a certificate is rotated without a restart (the next
//! handshake uses the new one; open connections keep theirs). A pair that does
//! not load (a file half-written during a rotation, a key that does not match)
//! is logged and the one in use stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How often the files are looked at for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// `[tls]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "TLS")]
pub struct TlsSettings {
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate
    /// first); needs --tls-key. Read again when it changes (rotation without a
    /// restart). HTTP/2 is offered by ALPN.
    #[arg(
        id = "tls.cert_file",
        long = "tls-cert",
        env = "SLUICE_TLS_CERT",
        value_name = "FILE"
    )]
    pub cert_file: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        id = "tls.key_file",
        long = "tls-key",
        env = "SLUICE_TLS_KEY",
        value_name = "FILE"
    )]
    pub key_file: Option<PathBuf>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

impl TlsSettings {
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some() || self.key_file.is_some()
    }
}

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls.cert_file (--tls-cert) and tls.key_file (--tls-key) go together")]
    HalfConfigured,
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    NoKey { path: PathBuf, reason: String },
    #[error("the key in {key} does not fit the certificate in {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The listener's TLS: the acceptor and the certificate it hands out.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    current: Arc<CurrentCert>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert_file", &self.current.cert_file)
            .finish_non_exhaustive()
    }
}

/// The pair in use, and the files it came from.
#[derive(Debug)]
struct CurrentCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    key: RwLock<Arc<CertifiedKey>>,
    /// The files' modification times and sizes when last looked at (a file
    /// whose write ends within its mtime's tick still changes size).
    stamps: RwLock<(Stamp, Stamp)>,
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key.read().expect("certificate lock").clone())
    }
}

type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One DER element: (tag, contents, the rest after it).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (length, &rest[count..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// When a certificate (DER) stops being valid: its `notAfter`. Read by hand
/// (Certificate > TBSCertificate > [version], serial, signature, issuer,
/// validity) rather than with an X.509 crate for one field.
pub fn not_after(certificate: &[u8]) -> Option<SystemTime> {
    const SEQUENCE: u8 = 0x30;
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let (SEQUENCE, certificate, _) = der_element(certificate)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = der_element(certificate)? else {
        return None;
    };
    // An explicit version ([0]) comes first when present.
    if tbs.first() == Some(&0xa0) {
        tbs = der_element(tbs)?.2;
    }
    for _ in 0..3 {
        tbs = der_element(tbs)?.2; // serial, signature algorithm, issuer
    }
    let (SEQUENCE, validity, _) = der_element(tbs)? else {
        return None;
    };
    let (_, _, after) = der_element(validity)?; // notBefore
    let (tag, text, _) = der_element(after)?;
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let (year, rest) = match tag {
        UTC_TIME if text.len() == 12 => {
            let yy = digits(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        GENERALIZED_TIME if text.len() == 14 => (digits(0..4)?, 4),
        _ => return None,
    };
    let field = |i: usize| digits(rest + 2 * i..rest + 2 * i + 2);
    let month = time::Month::try_from(u8::try_from(field(0)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(year).ok()?,
        month,
        u8::try_from(field(1)?).ok()?,
    )
    .ok()?;
    let at = time::Time::from_hms(
        u8::try_from(field(2)?).ok()?,
        u8::try_from(field(3)?).ok()?,
        u8::try_from(field(4)?).ok()?,
    )
    .ok()?;
    let seconds = time::PrimitiveDateTime::new(date, at)
        .assume_utc()
        .unix_timestamp();
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// Reads and checks the pair.
fn load(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let cert_pem = read(cert_file)?;
    let key_pem = read(key_file)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_file.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::NoKey {
        path: key_file.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mismatch = |reason: String| TlsError::Mismatch {
        cert: cert_file.to_path_buf(),
        key: key_file.to_path_buf(),
        reason,
    };
    let certified =
        CertifiedKey::from_der(chain, key, &provider()).map_err(|e| mismatch(e.to_string()))?;
    certified
        .keys_match()
        .map_err(|e| mismatch(e.to_string()))?;
    Ok(certified)
}

impl Tls {
    /// The listener's TLS as `settings` describe it; `None` for plain HTTP.
    pub fn from_settings(settings: &TlsSettings) -> Result<Option<Tls>, TlsError> {
        let (cert_file, key_file) = match (&settings.cert_file, &settings.key_file) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            _ => return Err(TlsError::HalfConfigured),
        };
        let key = load(&cert_file, &key_file)?;
        let current = Arc::new(CurrentCert {
            stamps: RwLock::new((stamp(&cert_file), stamp(&key_file))),
            cert_file,
            key_file,
            key: RwLock::new(Arc::new(key)),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the provider supports the default versions")
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
        }))
    }

    /// The TLS handshake on an accepted connection.
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(stream).await
    }

    /// When the certificate in use stops being valid.
    pub fn not_after(&self) -> Option<SystemTime> {
        let key = self.current.key.read().expect("certificate lock").clone();
        key.cert.first().and_then(|cert| not_after(cert))
    }

    /// Loads the pair again if either file changed since; true when a new
    /// pair is in use.
    pub fn reload_if_changed(&self) -> bool {
        let current = &self.current;
        let stamps = (stamp(&current.cert_file), stamp(&current.key_file));
        if *current.stamps.read().expect("stamps lock") == stamps {
            return false;
        }
        match load(&current.cert_file, &current.key_file) {
            Ok(key) => {
                *current.key.write().expect("certificate lock") = Arc::new(key);
                *current.stamps.write().expect("stamps lock") = stamps;
                tracing::info!(cert = %current.cert_file.display(), "loaded the changed TLS certificate");
                true
            }
            Err(error) => {
                // Said once per change: the next change (the rotation
                // finishing) is loaded then.
                *current.stamps.write().expect("stamps lock") = stamps;
                tracing::warn!(%error, "the changed TLS certificate does not load; keeping the one in use");
                false
            }
        }
    }

    /// Looks for changed files every 2 s until the task is dropped; `loaded`
    /// hears the new certificate's expiry after each reload.
    pub fn spawn_reloader(
        &self,
        loaded: impl Fn(Option<SystemTime>) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let tls = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_CHECK).await;
                if tls.reload_if_changed() {
                    loaded(tls.not_after());
                }
            }
        })
    }
}
