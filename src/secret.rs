//! The installation secret: the key behind every keyed hash the ledger keeps (fingerprints,
//! field hashes, principals) and behind the encryption of the kept first request.
//!
//! It lives outside the ledger, so a copy of the ledger alone reveals nothing: from
//! `IDEMPROXY_SECRET` (64 hex characters), or from a file (`IDEMPROXY_SECRET_FILE`, else
//! `<ledger>.secret` beside a ledger file) created with mode 0600 at first start. A
//! PostgreSQL ledger has no file beside it and several replicas share it: one of the two
//! variables is required, and the file it names must exist (every replica needs the same). This module
//! never logs or prints the secret, nor anything from which it could be recovered; `Debug`
//! shows only that it is there.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use ring::aead::{self, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The environment variable that holds the secret itself (64 hex characters).
pub const SECRET_ENV: &str = "IDEMPROXY_SECRET";
/// The environment variable naming the file that holds it, instead of `<ledger>.secret`.
pub const SECRET_FILE_ENV: &str = "IDEMPROXY_SECRET_FILE";

const LEN: usize = 32;
const NONCE_LEN: usize = 12;

/// Why the secret could not be had; each names where it looked and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "{SECRET_ENV} must be 64 hex characters (32 random bytes), e.g. from `openssl rand -hex 32`"
    )]
    BadEnv,
    #[error(
        "the secret file {path} is not 64 hex characters; restore it from your backup (it must match the ledger)"
    )]
    BadFile { path: String },
    #[error("the secret file {path} cannot be read or created: {reason}")]
    Io { path: String, reason: String },
    #[error(
        "the ledger {ledger} is shared by every replica, so the installation secret must be \
         given: set {SECRET_ENV} to 64 hex characters (e.g. from `openssl rand -hex 32`) or \
         {SECRET_FILE_ENV} to a file holding them, the same on every replica"
    )]
    Required { ledger: String },
    #[error(
        "the ledger {ledger} was first used with another installation secret than the one from \
         {origin}; start every replica with the secret the ledger was made with (the same \
         {SECRET_ENV} or {SECRET_FILE_ENV} contents on each)"
    )]
    OtherSharedSecret { ledger: String, origin: String },
    #[error("no random bytes for a new secret: {0}")]
    Random(String),
    #[error(
        "the ledger {ledger} was first used with another installation secret than the one from \
         {origin}; start it with the secret it was made with: set {SECRET_ENV} to it, or \
         restore the secret file {file} from your backup (or move the ledger aside to start \
         afresh, leaving its operations behind)"
    )]
    OtherSecret {
        ledger: String,
        origin: String,
        file: String,
    },
}

/// The per-installation secret, with the two keys derived from it.
pub struct Secret {
    mac: hmac::Key,
    seal: LessSafeKey,
    rng: SystemRandom,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Where the ledger a secret serves lives, as far as the secret is concerned: a file (its
/// secret file may be made beside it) or a database shared by replicas (whose secret comes
/// from the environment or an existing file), with the name messages show (never a password).
#[derive(Debug, Clone)]
pub enum Place {
    File(PathBuf),
    Shared(String),
}

impl Place {
    fn file(&self) -> Option<&Path> {
        match self {
            Place::File(path) => Some(path),
            Place::Shared(_) => None,
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::File(path) => write!(f, "{}", path.display()),
            Place::Shared(shown) => f.write_str(shown),
        }
    }
}

impl Secret {
    /// The secret from `IDEMPROXY_SECRET`, else from `IDEMPROXY_SECRET_FILE`, else from
    /// `<ledger>.secret`, creating that file (mode 0600, 32 random bytes as hex) when absent.
    /// A PostgreSQL ledger needs one of the variables, and the file must exist.
    pub fn load(ledger: &Place) -> Result<Secret, SecretError> {
        if let Ok(hex) = std::env::var(SECRET_ENV)
            && !hex.trim().is_empty()
        {
            return parse(hex.trim())
                .map(Secret::from_bytes)
                .ok_or(SecretError::BadEnv);
        }
        match (Self::file_path(ledger), ledger) {
            (Some(path), Place::File(_)) => Self::from_file(&path),
            (Some(path), Place::Shared(_)) => Self::read_file(&path),
            (None, _) => Err(SecretError::Required {
                ledger: ledger.to_string(),
            }),
        }
    }

    /// Where `load` takes the secret from, for messages: the variable's name or the file's path.
    pub fn origin(ledger: &Place) -> String {
        match std::env::var(SECRET_ENV) {
            Ok(hex) if !hex.trim().is_empty() => SECRET_ENV.to_string(),
            _ => match Self::file_path(ledger) {
                Some(path) => format!("the secret file {}", path.display()),
                None => "nowhere".to_owned(),
            },
        }
    }

    /// The refusal to serve `ledger` with a secret other than the one it was first used with.
    pub fn other_secret(ledger: &Place) -> SecretError {
        match ledger {
            Place::File(path) => SecretError::OtherSecret {
                ledger: path.display().to_string(),
                origin: Self::origin(ledger),
                file: Self::default_path_of(path, ledger).display().to_string(),
            },
            Place::Shared(_) => SecretError::OtherSharedSecret {
                ledger: ledger.to_string(),
                origin: Self::origin(ledger),
            },
        }
    }

    /// `IDEMPROXY_SECRET_FILE`, else `<ledger>.secret` beside a ledger file.
    fn file_path(ledger: &Place) -> Option<PathBuf> {
        match std::env::var_os(SECRET_FILE_ENV) {
            // Blank counts as unset, as for `IDEMPROXY_SECRET`.
            Some(p) if !p.to_string_lossy().trim().is_empty() => Some(PathBuf::from(p)),
            _ => ledger.file().map(Self::default_path),
        }
    }

    /// The secret file of a ledger file (`IDEMPROXY_SECRET_FILE` wins).
    fn default_path_of(path: &Path, ledger: &Place) -> PathBuf {
        Self::file_path(ledger).unwrap_or_else(|| Self::default_path(path))
    }

    /// `<ledger>.secret`: beside the ledger file, never inside it.
    pub fn default_path(ledger: &Path) -> PathBuf {
        let mut name = ledger.as_os_str().to_owned();
        name.push(".secret");
        PathBuf::from(name)
    }

    /// Reads the secret file, or creates it (exclusively, mode 0600) when it does not exist.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let shown = || path.display().to_string();
        let io = |e: std::io::Error| SecretError::Io {
            path: shown(),
            reason: e.to_string(),
        };
        match std::fs::read_to_string(path) {
            Ok(text) => parse(text.trim())
                .map(Secret::from_bytes)
                .ok_or(SecretError::BadFile { path: shown() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let bytes = random_bytes()?;
                if let Some(parent) = path.parent() {
                    crate::durable::create_dir_all(parent).map_err(io)?;
                }
                create_private(path, &hex::encode(bytes)).map_err(io)?;
                crate::durable::sync_parent(path).map_err(io)?;
                Ok(Secret::from_bytes(bytes))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Reads the secret file, which must exist (a shared ledger's secret is never made here).
    pub fn read_file(path: &Path) -> Result<Secret, SecretError> {
        match std::fs::read_to_string(path) {
            Ok(text) => parse(text.trim())
                .map(Secret::from_bytes)
                .ok_or(SecretError::BadFile {
                    path: path.display().to_string(),
                }),
            Err(e) => Err(SecretError::Io {
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// A secret from known bytes (tests, and `load`).
    pub fn from_bytes(bytes: [u8; LEN]) -> Secret {
        let master = hmac::Key::new(hmac::HMAC_SHA256, &bytes);
        let derive = |label: &[u8]| hmac::sign(&master, label);
        let mac = hmac::Key::new(hmac::HMAC_SHA256, derive(b"idemproxy mac v1").as_ref());
        let seal_bytes = derive(b"idemproxy seal v1");
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &seal_bytes.as_ref()[..LEN])
            .unwrap_or_else(|_| unreachable!("a 32-byte key is what CHACHA20_POLY1305 takes"));
        Secret {
            mac,
            seal: LessSafeKey::new(unbound),
            rng: SystemRandom::new(),
        }
    }

    /// HMAC-SHA256 of `data` under this installation's key, separated by `domain` (so a
    /// fingerprint can never equal a principal hash of the same bytes).
    pub fn mac(&self, domain: &str, data: &[u8]) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.mac);
        ctx.update(&(domain.len() as u64).to_be_bytes());
        ctx.update(domain.as_bytes());
        ctx.update(data);
        let tag = ctx.sign();
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// `mac` as lowercase hex.
    pub fn mac_hex(&self, domain: &str, data: &[u8]) -> String {
        lower_hex(&self.mac(domain, data))
    }

    /// A value the ledger may keep to tell, at the next start, whether it is opened with the
    /// same secret; it reveals nothing about the secret.
    pub fn check_value(&self) -> String {
        self.mac_hex("check", b"idemproxy installation secret")
    }

    /// Encrypts and authenticates `plaintext` (ChaCha20-Poly1305, a random nonce in front).
    /// `context` is bound to the ciphertext (e.g. the operation ID), so a sealed value moved to
    /// another operation does not open.
    pub fn seal(&self, context: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, SecretError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| SecretError::Random("the system's random source failed".into()))?;
        let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + CHACHA20_POLY1305.tag_len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let (head, body) = out.split_at_mut(NONCE_LEN);
        let tag = self
            .seal
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(context),
                body,
            )
            .map_err(|_| SecretError::Random("encryption failed".into()))?;
        let _ = head;
        out.extend_from_slice(tag.as_ref());
        Ok(out)
    }

    /// The plaintext of `seal`'s output, or `None` when it was sealed under another secret or
    /// context, or altered.
    pub fn open(&self, context: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = rest.to_vec();
        let plain = self
            .seal
            .open_in_place(nonce, aead::Aad::from(context), &mut buf)
            .ok()?;
        Some(plain.to_vec())
    }
}

fn parse(hex: &str) -> Option<[u8; LEN]> {
    let bytes = hex::decode(hex).ok()?;
    bytes.try_into().ok()
}

fn random_bytes() -> Result<[u8; LEN], SecretError> {
    let mut bytes = [0u8; LEN];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SecretError::Random("the system's random source failed".into()))?;
    Ok(bytes)
}

/// Creates `path` (failing if it exists) readable by its owner only, and writes `text`.
fn create_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// Lowercase hex of a digest, as `hex::encode` writes it, through its table-driven
/// `encode_to_slice` (`hex::encode` builds the string a char at a time; this runs several
/// times per request).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut out).expect("the output is twice the input's length");
    String::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_hex_is_hex_encode() {
        let bytes: Vec<u8> = (0..=255u8).chain([0, 15, 16, 255]).collect();
        assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
        assert_eq!(lower_hex(&[]), "");
    }

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes([byte; LEN])
    }

    #[test]
    fn macs_depend_on_the_secret_and_the_domain() {
        let (a, b) = (secret(1), secret(2));
        assert_eq!(a.mac("f", b"123"), a.mac("f", b"123"));
        assert_ne!(a.mac("f", b"123"), b.mac("f", b"123"));
        assert_ne!(a.mac("f", b"123"), a.mac("p", b"123"));
        // The domain's length is part of the input: ("ab", "c") is not ("a", "bc").
        assert_ne!(a.mac("ab", b"c"), a.mac("a", b"bc"));
    }

    #[test]
    fn sealed_values_open_only_with_the_same_secret_and_context() {
        let a = secret(1);
        let sealed = a
            .seal(b"op-1", b"POST /v1/refunds amount=500")
            .expect("seal");
        assert!(!sealed.windows(6).any(|w| w == b"amount"), "ciphertext");
        assert_eq!(
            a.open(b"op-1", &sealed).as_deref(),
            Some(&b"POST /v1/refunds amount=500"[..])
        );
        assert_eq!(a.open(b"op-2", &sealed), None, "bound to its operation");
        assert_eq!(
            secret(2).open(b"op-1", &sealed),
            None,
            "bound to its secret"
        );
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(a.open(b"op-1", &altered), None, "authenticated");
        assert_ne!(
            a.seal(b"op-1", b"x").ok(),
            a.seal(b"op-1", b"x").ok(),
            "fresh nonces"
        );
    }

    #[test]
    fn a_secret_file_is_created_private_and_read_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = Secret::default_path(&dir.path().join("ledger.redb"));
        assert!(path.ends_with("ledger.redb.secret"));
        let first = Secret::from_file(&path).expect("created");
        let again = Secret::from_file(&path).expect("read");
        assert_eq!(first.mac("f", b"x"), again.mac("f", b"x"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not hex").expect("overwrite");
        assert!(matches!(
            Secret::from_file(&path),
            Err(SecretError::BadFile { .. })
        ));
    }
}
