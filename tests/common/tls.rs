//! Test-time TLS: a throwaway CA and a leaf for `localhost` and 127.0.0.1 signed by it, the
//! server config the fake provider serves with, and a client config that trusts the CA.
//!
//! Nothing here is ever written outside a temp dir, and no key outlives the test.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A CA and the leaf certificate it signed.
pub struct TestPki {
    /// The CA certificate in PEM, for a policy's `ca_file`.
    pub ca_pem: String,
    ca_der: CertificateDer<'static>,
    leaf_der: CertificateDer<'static>,
    leaf_key: Vec<u8>,
}

impl TestPki {
    /// Generates a fresh CA and a leaf valid for `localhost` and `127.0.0.1`.
    pub fn generate() -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "idemproxy test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("ca key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca_params, ca_key);

        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let mut leaf_params = CertificateParams::new(names).expect("leaf params");
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer).expect("leaf");
        Self {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().clone(),
            leaf_der: leaf_cert.der().clone(),
            leaf_key: leaf_key.serialize_der(),
        }
    }

    /// A server config presenting the leaf (and the CA as its chain), offering h2 and http/1.1.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.clone()));
        let chain = vec![self.leaf_der.clone(), self.ca_der.clone()];
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server cert");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// A client config trusting only this CA.
    pub fn client_config(&self) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("ca root");
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth()
    }
}

/// The ring provider, named explicitly so no process-wide default has to be installed.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
