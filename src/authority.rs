//! The local certificate authority of `[intercept]`: a new one for `idemproxy ca init`, the one
//! configured read and checked (the key matches the certificate, which is a CA and valid now),
//! and the leaf certificates it signs for the hosts the proxy intercepts.
//!
//! `init` writes a new CA's two files for `idemproxy ca init`. A leaf is made in memory for one host (its only subject alternative name), kept in a
//! bounded cache with the TLS server configuration that presents it (ALPN `h2` and
//! `http/1.1`), and made anew once it is near its end. The CA key never leaves this module:
//! no error, log line or `Debug` output carries it, and no leaf key is ever written anywhere.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::OffsetDateTime;

/// How long a leaf is valid, and how long before its end it is made anew.
const LEAF_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
const LEAF_RENEW_BEFORE: Duration = Duration::from_secs(24 * 3600);
/// A leaf's validity starts this long before it is made, for clients whose clock is behind.
const LEAF_BACKDATE: Duration = Duration::from_secs(3600);
/// How long a CA made by `ca init` is valid.
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// The most leaves kept at once; the one nearest its end makes room for a new one.
const MAX_LEAVES: usize = 256;

/// A new CA: its certificate and its private key (PKCS#8), both in PEM.
pub struct NewCa {
    pub cert_pem: String,
    /// The private key: written to a file of mode 0600 and nowhere else.
    pub key_pem: String,
}

impl fmt::Debug for NewCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewCa").finish_non_exhaustive()
    }
}

/// `idemproxy ca init`: makes a new CA and writes `dir/ca.pem` and `dir/ca.key` (the key
/// created with mode 0600, never readable by others for a moment), creating `dir` if needed.
/// Refuses, naming the file and writing nothing, when either file exists. Returns both paths.
pub fn init(dir: &Path, now: OffsetDateTime) -> Result<(PathBuf, PathBuf), String> {
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    for path in [&cert_path, &key_path] {
        if path.symlink_metadata().is_ok() {
            return Err(format!(
                "{} exists: refusing to overwrite it (a CA in use stays as it is; to rotate, run \
                 `idemproxy ca init --dir` with a new folder)",
                path.display()
            ));
        }
    }
    let ca = generate(now)?;
    crate::durable::create_dir_all(dir)
        .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
    write_new(&key_path, ca.key_pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&cert_path, ca.cert_pem.as_bytes(), 0o644) {
        // A key without its certificate is of no use: nothing is left half made.
        let _ = std::fs::remove_file(&key_path);
        return Err(e);
    }
    crate::durable::sync_parent(&key_path)
        .map_err(|e| format!("cannot sync the folder {}: {e}", dir.display()))?;
    Ok((cert_path, key_path))
}

/// Creates `path` (never replacing a file) with `mode` from its creation, writes and syncs it.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{} exists: refusing to overwrite it", path.display())
        }
        _ => format!("cannot create {}: {e}", path.display()),
    })?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Makes a new CA (ECDSA P-256, valid for ten years from `now`, allowed to sign leaves only).
pub fn generate(now: OffsetDateTime) -> Result<NewCa, String> {
    let key = KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
    let cert = ca_params(now)
        .self_signed(&key)
        .map_err(|e| format!("cannot sign the CA certificate: {e}"))?;
    Ok(NewCa {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn ca_params(now: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "idemproxy local CA");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "idemproxy");
    // No intermediate below it: it signs the proxy's leaves and nothing else.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - LEAF_BACKDATE;
    params.not_after = now + CA_LIFETIME;
    params
}

/// The configured CA, able to sign leaves, with its cache of them.
pub struct Authority {
    cert: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Leaf>>,
}

/// A leaf and the TLS configuration presenting it.
struct Leaf {
    config: Arc<ServerConfig>,
    /// When it is made anew (`LEAF_RENEW_BEFORE` before its end).
    renew_at: OffsetDateTime,
}

impl fmt::Debug for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The certificate is public; the key is never shown.
        f.debug_struct("Authority")
            .field("cert_bytes", &self.cert.len())
            .finish_non_exhaustive()
    }
}

/// Which of the two files a loading error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Cert,
    Key,
}

impl Authority {
    /// The CA from its certificate and key (PEM texts), refused with the part at fault and a
    /// message that never quotes the key: a key that does not parse, a certificate that is no
    /// CA or is not valid at `now`, a key that is not the certificate's.
    pub fn load(
        cert_pem: &str,
        key_pem: &str,
        now: OffsetDateTime,
    ) -> Result<Authority, (Part, String)> {
        let cert = first_certificate(cert_pem).map_err(|e| (Part::Cert, e))?;
        let key = KeyPair::from_pem(key_pem).map_err(|_| {
            (
                Part::Key,
                "is not a PKCS#8 private key in PEM (\"-----BEGIN PRIVATE KEY-----\", as \
                 `idemproxy ca init` writes it)"
                    .to_string(),
            )
        })?;
        check_certificate(&cert, &key, now)?;
        let issuer = Issuer::from_ca_cert_der(&cert, key).map_err(|e| {
            (
                Part::Cert,
                format!("cannot be used to sign certificates: {e}"),
            )
        })?;
        Ok(Authority {
            cert,
            issuer,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `other` is the same CA certificate.
    pub fn same_certificate(&self, other: &Authority) -> bool {
        self.cert == other.cert
    }

    /// The TLS configuration presenting a leaf for `host`: the cached one until it is near its
    /// end, else a new leaf signed now.
    pub fn server_config(
        &self,
        host: &str,
        now: OffsetDateTime,
    ) -> Result<Arc<ServerConfig>, String> {
        let host = host.to_ascii_lowercase();
        if let Some(leaf) = self.leaves().get(&host)
            && leaf.renew_at > now
        {
            return Ok(leaf.config.clone());
        }
        // Signed outside the lock: two connections may each make one; the last one is kept.
        let leaf = self.sign(&host, now)?;
        let config = leaf.config.clone();
        let mut leaves = self.leaves();
        if leaves.len() >= MAX_LEAVES && !leaves.contains_key(&host) {
            let nearest = leaves
                .iter()
                .min_by_key(|(_, l)| l.renew_at)
                .map(|(h, _)| h.clone());
            if let Some(nearest) = nearest {
                leaves.remove(&nearest);
            }
        }
        leaves.insert(host, leaf);
        Ok(config)
    }

    fn leaves(&self) -> std::sync::MutexGuard<'_, HashMap<String, Leaf>> {
        // A panic while holding the lock left the map whole (each step is one insert or remove).
        self.leaves.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sign(&self, host: &str, now: OffsetDateTime) -> Result<Leaf, String> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        let name = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_string()
                    .try_into()
                    .map_err(|e| format!("{host} cannot be a certificate's name: {e}"))?,
            ),
        };
        params.subject_alt_names = vec![name];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - LEAF_BACKDATE;
        params.not_after = now + LEAF_LIFETIME;
        let key = KeyPair::generate().map_err(|e| format!("cannot make a leaf key: {e}"))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("cannot sign a certificate for {host}: {e}"))?;
        let chain = vec![cert.der().clone(), self.cert.clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("cannot present the certificate for {host}: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Leaf {
            config: Arc::new(config),
            renew_at: now + LEAF_LIFETIME - LEAF_RENEW_BEFORE,
        })
    }
}

/// The first certificate of a PEM text.
fn first_certificate(pem: &str) -> Result<CertificateDer<'static>, String> {
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    match rustls_pemfile::certs(&mut reader).next() {
        Some(Ok(cert)) => Ok(cert),
        Some(Err(e)) => Err(format!("is not a PEM certificate ({e})")),
        None => Err("holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")".into()),
    }
}

/// The certificate is a CA valid at `now`, and `key` is its key.
fn check_certificate(
    cert: &CertificateDer<'_>,
    key: &KeyPair,
    now: OffsetDateTime,
) -> Result<(), (Part, String)> {
    let cert_err = |m: String| (Part::Cert, m);
    let (_, x509) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| cert_err(format!("is not an X.509 certificate ({e})")))?;
    if !x509.is_ca() {
        return Err(cert_err(
            "is not a CA certificate (no basicConstraints CA:TRUE); make one with \
             `idemproxy ca init`"
                .into(),
        ));
    }
    let validity = x509.validity();
    let (from, to) = (
        validity.not_before.to_datetime(),
        validity.not_after.to_datetime(),
    );
    if now < from || now > to {
        return Err(cert_err(format!(
            "is not valid now (valid from {from} to {to}); make a new CA with `idemproxy ca init \
             --dir` a new folder"
        )));
    }
    if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err((
            Part::Key,
            "is not the key of ca_cert (the two files come from different CAs); give the pair \
             `idemproxy ca init` wrote together"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    #[test]
    fn a_new_ca_loads_and_signs_a_leaf_for_the_host() {
        let ca = generate(now()).expect("a CA");
        let authority = Authority::load(&ca.cert_pem, &ca.key_pem, now()).expect("it loads");
        let config = authority
            .server_config("api.stripe.com", now())
            .expect("a leaf");
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let again = authority
            .server_config("API.stripe.com", now())
            .expect("a leaf");
        assert!(Arc::ptr_eq(&config, &again), "the leaf is reused");
    }

    #[test]
    fn a_leaf_near_its_end_is_made_anew() {
        let ca = generate(now()).expect("a CA");
        let authority = Authority::load(&ca.cert_pem, &ca.key_pem, now()).expect("it loads");
        let first = authority.server_config("h.example", now()).expect("a leaf");
        let later = now() + LEAF_LIFETIME - LEAF_RENEW_BEFORE + Duration::from_secs(1);
        let renewed = authority.server_config("h.example", later).expect("a leaf");
        assert!(!Arc::ptr_eq(&first, &renewed));
    }

    #[test]
    fn the_cache_is_bounded() {
        let ca = generate(now()).expect("a CA");
        let authority = Authority::load(&ca.cert_pem, &ca.key_pem, now()).expect("it loads");
        for i in 0..MAX_LEAVES + 3 {
            authority
                .server_config(&format!("h{i}.example"), now())
                .expect("a leaf");
        }
        assert_eq!(authority.leaves().len(), MAX_LEAVES);
    }

    #[test]
    fn a_key_of_another_ca_is_refused_without_quoting_it() {
        let (a, b) = (generate(now()).unwrap(), generate(now()).unwrap());
        let (part, message) = Authority::load(&a.cert_pem, &b.key_pem, now()).unwrap_err();
        assert_eq!(part, Part::Key);
        assert!(message.contains("not the key of ca_cert"), "{message}");
        let body: String = b
            .key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert!(!message.contains(&body[..20]));
    }

    #[test]
    fn a_leaf_is_not_a_ca_and_garbage_is_no_key() {
        let ca = generate(now()).unwrap();
        let (part, message) = Authority::load(&ca.cert_pem, "not a key", now()).unwrap_err();
        assert_eq!(part, Part::Key);
        assert!(message.contains("PKCS#8"), "{message}");
        let leaf = rcgen::generate_simple_self_signed(vec!["x.example".into()]).unwrap();
        let (part, message) =
            Authority::load(&leaf.cert.pem(), &leaf.signing_key.serialize_pem(), now())
                .unwrap_err();
        assert_eq!(part, Part::Cert);
        assert!(message.contains("not a CA"), "{message}");
    }

    #[test]
    fn an_expired_ca_is_refused() {
        let ca = generate(now()).unwrap();
        let later = now() + CA_LIFETIME + Duration::from_secs(3600);
        let (part, message) = Authority::load(&ca.cert_pem, &ca.key_pem, later).unwrap_err();
        assert_eq!(part, Part::Cert);
        assert!(message.contains("not valid now"), "{message}");
    }
}
